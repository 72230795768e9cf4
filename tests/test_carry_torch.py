"""tests/gpu/carry_torch.sh, the way issue 32 carries torch 2.14.1 (a 555 MB wheel) to the GPU machine: split here
into pieces, then each device call carries one piece and keeps it, then one call joins, checks every sha256 and
installs the torch wheel into a private folder. Rehearsed with small generated files (a real installable wheel named
torch-*, random bytes around it) and a small piece size, each simulated call in its own working directory holding
only the piece that call carries plus what earlier calls kept."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import make_wheel

SCRIPT = Path(__file__).resolve().parent / "gpu" / "carry_torch.sh"
PIECE = 65536


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    """Here: three files (the torch wheel between two random ones, sizes not multiples of the piece) split."""
    here = tmp_path_factory.mktemp("here")
    files = [here / "nvidia_like-1.0-py3-none-any.whl", here / "torch-0.0.0+carrytest-py3-none-any.whl",
             here / "sgl_deep_gemm-9.9-py3-none-any.whl"]
    files[0].write_bytes(os.urandom(3 * PIECE + 1234))
    make_wheel(files[1], "torch", "0.0.0+carrytest", 150_000)
    files[2].write_bytes(os.urandom(PIECE // 3))
    res = _run(here, "split", *map(str, files))
    assert res.returncode == 0, res.stderr
    return here, files, res.stdout


def _run(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PIECE_BYTES=str(PIECE), PYTHON=sys.executable, PIP_NO_INDEX="1")
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


def _call(device: Path, here: Path, piece: str) -> subprocess.CompletedProcess:
    """One device call: the carry replaces .carry with only this call's piece, then `keep` runs."""
    shutil.rmtree(device / ".carry", ignore_errors=True)
    shutil.copytree(here / ".carry" / piece, device / ".carry" / piece)
    return _run(device, "keep")


def _refused(res: subprocess.CompletedProcess, *words: str) -> None:
    assert res.returncode == 1, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr + res.stdout
    errors = [line for line in res.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and any(line.startswith("hint: ") for line in res.stderr.splitlines()), res.stderr
    for word in words:
        assert word in res.stderr, res.stderr


def test_split_prints_one_carry_per_piece_each_under_the_size(split):
    here, files, out = split
    pieces = sorted(p.name for p in (here / ".carry").iterdir())
    total = sum(f.stat().st_size for f in files)
    assert len(pieces) == -(-total // PIECE) >= 5
    manifest = json.loads((here / ".carry" / pieces[0] / "MANIFEST.json").read_text())
    assert [f["sha256"] for f in manifest["files"]] == [hashlib.sha256(f.read_bytes()).hexdigest() for f in files]
    for name in pieces:
        assert (here / ".carry" / name / "piece").stat().st_size <= PIECE
        assert f'carry [".carry/{name}"]' in out
    assert out.count("carry_torch.sh keep") == len(pieces)


def test_calls_one_piece_each_then_join_installs_the_wheel(split, tmp_path):
    here, files, _ = split
    device = tmp_path / "device"
    device.mkdir()
    pieces = sorted(p.name for p in (here / ".carry").iterdir())
    for i, name in enumerate(pieces, 1):
        res = _call(device, here, name)
        assert res.returncode == 0, res.stderr
        assert f"held {i} of {len(pieces)} pieces" in res.stdout, res.stdout
    assert "all held: run join" in res.stdout
    res = _run(device, "join", str(device / "joined"), str(device / "torch-private"))
    assert res.returncode == 0, res.stdout + res.stderr
    for f in files:
        assert (device / "joined" / f.name).read_bytes() == f.read_bytes()
        assert f"sha256 {hashlib.sha256(f.read_bytes()).hexdigest()} checked" in res.stdout
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__, torch.__file__)"],
                           env=dict(os.environ, PYTHONPATH=str(device / "torch-private")), capture_output=True,
                           text=True, cwd=tmp_path)
    assert probe.stdout.split() == ["0.0.0+carrytest", str(device / "torch-private" / "torch" / "__init__.py")]


def test_a_missing_piece_is_named_and_nothing_is_joined(split, tmp_path):
    here, _, _ = split
    device = tmp_path / "device"
    device.mkdir()
    pieces = sorted(p.name for p in (here / ".carry").iterdir())
    for name in pieces[:2] + pieces[3:]:
        assert _call(device, here, name).returncode == 0
    assert f"still to carry: {pieces[2]}" in _run(device, "keep").stdout
    _refused(_run(device, "join", str(device / "joined"), str(device / "t")), f"pieces missing: {pieces[2]}")
    assert not (device / "joined").exists() and not (device / "t").exists()


def test_a_corrupt_piece_fails_keep_and_join(split, tmp_path):
    here, _, _ = split
    device = tmp_path / "device"
    device.mkdir()
    pieces = sorted(p.name for p in (here / ".carry").iterdir())
    shutil.copytree(here / ".carry" / pieces[1], device / ".carry" / pieces[1])
    blob = device / ".carry" / pieces[1] / "piece"
    data = bytearray(blob.read_bytes())
    data[100] ^= 0xFF
    blob.write_bytes(bytes(data))
    _refused(_run(device, "keep"), f"piece {pieces[1]} arrived corrupt", f"carry .carry/{pieces[1]} again")
    for name in pieces:  # all carried whole; then one held piece damaged on the disk there
        assert _call(device, here, name).returncode == 0
    held = device / ".carry-held" / f"{pieces[-1]}.piece"
    data = bytearray(held.read_bytes())
    data[-1] ^= 0xFF
    held.write_bytes(bytes(data))
    _refused(_run(device, "join", str(device / "joined")), f"piece {pieces[-1]} is corrupt")
    assert not (device / "joined").exists()


def test_usage_errors_exit_2(tmp_path):
    for args in ((), ("split",), ("split", str(tmp_path / "absent.whl")), ("join",)):
        res = _run(tmp_path, *args)
        assert res.returncode == 2 and res.stderr.startswith("error: ") and "hint: " in res.stderr, (args, res)


def test_a_piece_of_another_split_is_refused(split, tmp_path):
    here, _, _ = split
    other = tmp_path / "other"
    other.mkdir()
    (other / "torch-0.0.1-py3-none-any.whl").write_bytes(os.urandom(PIECE + 10))
    assert _run(other, "split", str(other / "torch-0.0.1-py3-none-any.whl")).returncode == 0
    device = tmp_path / "device"
    device.mkdir()
    assert _call(device, here, "p01").returncode == 0
    _refused(_call(device, other, "p02"), "belongs to another split", "remove .carry-held/")
    assert sorted(p.name for p in (device / ".carry-held").iterdir()) == ["MANIFEST.json", "p01.piece"]
