"""tests/gpu/carry_stack.sh and its data file tests/gpu/stack_0523.yaml (issue 44 item 1: sglang 0.5.23's stack carried
to the H200 in pieces). The data file holds its schema and README-stack0523.md's call table is the one its sizes
give; then the whole sequence is rehearsed with small real wheels and a small data file: split here (each wheel
checked against the data file first), one simulated call per piece, each in a working directory holding only that
call's piece and what earlier calls kept, then install (join, sha256, pip --target, the NCCL stand-in, stack.env)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import make_wheel

GPU = Path(__file__).resolve().parent / "gpu"
SCRIPT = GPU / "carry_stack.sh"
DATA = GPU / "stack_0523.yaml"
README = GPU / "README-stack0523.md"
PIECE = 65536
sys.path.insert(0, str(GPU))
import carry_stack  # noqa: E402


def test_the_data_file_holds_its_schema_and_names_every_pin():
    data = carry_stack.load(str(DATA))
    assert carry_stack.problems(data) == []
    pins = {(e["package"], e["version"]) for e in data["carried"]}
    # issue 44 item 1's stack: what sglang 0.5.23 pins, the Triton torch 2.14.1 requires, the DeepGEMM generations
    assert {("torch", "2.14.1"), ("triton", "3.8.0"), ("flashinfer-python", "0.7.2"), ("sglang", "0.5.23"),
            ("transformers", "5.19.0"), ("sgl-deep-gemm", "0.2.3.post2"), ("sgl-deep-gemm", "0.2.2"),
            ("sgl-deep-gemm", "0.2.0"), ("apache-tvm-ffi", "0.1.11")} <= pins
    for entry in data["carried"]:
        assert entry["why"].strip() and entry["size"] > 0 and re.fullmatch(r"[0-9a-f]{64}", entry["sha256"])
    installed = [e["version"] for e in data["carried"] if e["package"] == "sgl-deep-gemm" and e.get("install", True)]
    assert installed == ["0.2.3.post2"]  # sglang 0.5.23's pin; the others are joined for the generation sweep
    assert any("sgl-kernel" in s["name"] for s in data["standins"]) and any("NCCL" in s["name"] for s in data["standins"])
    assert any(n["package"] == "flashinfer-cubin" for n in data["not_carried"])


def test_the_readmes_call_table_is_the_one_the_sizes_give():
    data = carry_stack.load(str(DATA))
    n = carry_stack.piece_count(data)
    assert n == -(-sum(e["size"] for e in data["carried"]) // data["piece_bytes"])
    text = README.read_text()
    rows = [line for line in text.splitlines() if re.match(r"\| \d+ \| `\[", line)]
    assert [row.rsplit("|", 2)[0] + "|" for row in rows] == carry_stack.call_table(data, ".carry/stack")
    assert len(rows) == n + 1 and f"{n} carry calls" in text and f"held N of {n} pieces" in text
    assert f"{sum(e['size'] for e in data['carried']):,} bytes" in text and f"{data['piece_bytes']:,} bytes" in text
    # a piece and today's tree must fit the 64 MiB a call carries, with the split's margin and 1 MiB more for the
    # tree to grow (each device record adds to it: 7.5 MB on 2026-12-05, 9.7 MB on 2026-12-07); outside a git
    # checkout the 2026-12-07 tree
    tree = carry_stack.tree_bytes() or 9_675_061
    assert data["piece_bytes"] + tree + carry_stack.MARGIN + (1 << 20) <= data["carry_limit_bytes"] == 64 << 20


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """Here: four wheels (torch largest, one not installed), a data file naming them, split."""
    here = tmp_path_factory.mktemp("here")
    whl = here / ".whl-0523"
    whl.mkdir()
    specs = [("torch", "0.0.1", 150_000, True), ("sglang", "0.0.1", 40_000, True),
             ("sgl_deep_gemm", "0.0.3", 20_000, True), ("sgl_deep_gemm", "0.0.2", 5_000, False)]
    carried = []
    for name, version, blob, install in specs:
        path = whl / f"{name}-{version}-py3-none-any.whl"
        make_wheel(path, name, version, blob)
        data = path.read_bytes()
        carried.append({"package": name.replace("_", "-"), "version": version, "why": "rehearsal", "wheel": path.name,
                        "sha256": hashlib.sha256(data).hexdigest(), "size": len(data),
                        **({} if install else {"install": False})})
    stack_file = here / "stack.yaml"
    stack_file.write_text(yaml.safe_dump({"format": "dgprecompile-stack/1", "name": "rehearsal", "python": "3.12",
                                          "platforms": ["manylinux_2_28_x86_64"], "model_path_modules": [],
                                          "piece_bytes": PIECE, "carry_limit_bytes": 64 << 20, "carried": carried}))
    res = _run(here, stack_file, "split")
    assert res.returncode == 0, res.stderr
    return here, stack_file, carried, res.stdout


def _run(cwd: Path, stack_file: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, STACK_FILE=str(stack_file), PYTHON=sys.executable, PIP_NO_INDEX="1")
    env.pop("PYTHONPATH", None)
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=180)


def _pieces(here: Path) -> list[str]:
    return sorted(p.name for p in (here / ".carry" / "stack").iterdir())


def test_split_checks_the_wheels_and_prints_the_call_table(stack):
    here, stack_file, carried, out = stack
    pieces = _pieces(here)
    assert len(pieces) == -(-sum(e["size"] for e in carried) // PIECE) >= 4
    assert "tree: not a git checkout here" in out
    for i, name in enumerate(pieces, 1):
        assert f'| {i} | `[".carry/stack/{name}"]` |' in out
    assert f"| {len(pieces) + 1} | `[]` | the proof" in out
    manifest = json.loads((here / ".carry" / "stack" / pieces[0] / "MANIFEST.json").read_text())
    assert [f["name"] for f in manifest["files"]] == [e["wheel"] for e in carried]  # the data file's order


def test_each_call_keeps_its_piece_then_install_builds_the_stack(stack, tmp_path):
    here, stack_file, carried, _ = stack
    pieces = _pieces(here)
    device = tmp_path / "device"
    device.mkdir()
    for i, name in enumerate(pieces[:-1], 1):
        shutil.rmtree(device / ".carry", ignore_errors=True)
        shutil.copytree(here / ".carry" / "stack" / name, device / ".carry" / "stack" / name)
        res = _run(device, stack_file, "keep")
        assert res.returncode == 0 and f"held {i} of {len(pieces)} pieces" in res.stdout, res.stdout + res.stderr
    shutil.rmtree(device / ".carry")
    shutil.copytree(here / ".carry" / "stack" / pieces[-1], device / ".carry" / "stack" / pieces[-1])
    base = tmp_path / "stack"
    res = _run(device, stack_file, "install", str(base))
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"kept {pieces[-1]}" in res.stdout and "installed 2 wheels and torch" in res.stdout
    for e in carried:  # every wheel joined whole; one sgl-deep-gemm installed, the other only joined
        assert hashlib.sha256((base / "joined" / e["wheel"]).read_bytes()).hexdigest() == e["sha256"]
    env_text = (base / "stack.env").read_text()
    assert f"STACK_SITE={base}/site" in env_text and "libnccl_standin.so" in env_text
    assert (base / "lib" / "libnccl_standin.so").is_file()
    assert [f["sha256"] for f in json.loads((base / "stack_manifest.json").read_text())["files"]] == \
        [e["sha256"] for e in carried]
    probe = subprocess.run([sys.executable, "-c",
                            "import torch, sglang, sgl_deep_gemm; print(torch.__version__, sgl_deep_gemm.__version__)"],
                           env=dict(os.environ, PYTHONPATH=str(base / "site")), capture_output=True, text=True,
                           cwd=tmp_path)
    assert probe.stdout.split() == ["0.0.1", "0.0.3"], probe.stderr


def test_a_wheel_that_is_not_the_pinned_one_is_refused_by_name(stack, tmp_path):
    here, stack_file, carried, _ = stack
    other = tmp_path / "other"
    shutil.copytree(here / ".whl-0523", other / ".whl-0523")
    bad = other / ".whl-0523" / carried[1]["wheel"]
    data = bytearray(bad.read_bytes())
    data[-10] ^= 0xFF
    bad.write_bytes(bytes(data))
    res = _run(other, stack_file, "split")
    assert res.returncode == 1 and f"{carried[1]['wheel']}: " in res.stderr and "1 of 4 wheels" in res.stderr
    assert not (other / ".carry").exists()


def test_a_tree_too_large_beside_a_piece_is_refused(stack, tmp_path):
    here, stack_file, _, _ = stack
    repo = tmp_path / "repo"
    shutil.copytree(here / ".whl-0523", repo / ".whl-0523")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / ".gitignore").write_text("/.whl-0523/\n/.carry/\n")
    data = yaml.safe_load(stack_file.read_text())
    data["carry_limit_bytes"] = PIECE + (1 << 20) + 1000  # room for a 1,000-byte tree
    small = tmp_path / "small.yaml"
    small.write_text(yaml.safe_dump(data))
    (repo / "notes.txt").write_text("x" * 2000)  # untracked, not ignored: it travels
    res = _run(repo, small, "split")
    assert res.returncode == 1 and "over the" in res.stderr and not (repo / ".carry").exists(), res.stderr
    (repo / "notes.txt").write_text("x" * 500)
    assert _run(repo, small, "split").returncode == 0


def test_a_data_file_off_its_schema_and_bad_usage_exit_2(stack, tmp_path):
    _, stack_file, _, _ = stack
    data = yaml.safe_load(stack_file.read_text())
    del data["carried"][0]["sha256"]
    data["carried"][1]["version"] = 1.5
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump(data))
    res = _run(tmp_path, broken, "split")
    assert res.returncode == 2 and "does not hold its schema" in res.stderr and "carried[0]" in res.stderr
    assert "carried[1].version" in res.stderr  # the schema names each field (dgprecompile/data/schemas/stack.json)
    # what a schema cannot say: a wheel file that is not its package at its version
    data = yaml.safe_load(stack_file.read_text())
    data["carried"][1]["version"] = "9.9"
    broken.write_text(yaml.safe_dump(data))
    res = _run(tmp_path, broken, "split")
    assert res.returncode == 2 and "is not sglang 9.9" in res.stderr, res.stderr
    for args in ((), ("nonsense",), ("keep", "extra"), ("imports", str(tmp_path / "none"))):
        res = _run(tmp_path, stack_file, *args)
        assert res.returncode == 2 and "error: " in res.stderr and "hint: " in res.stderr, (args, res.stderr)


def test_model_proof_names_a_stack_or_refuses_before_any_step(tmp_path):
    """model_proof.sh's STACK: a base without stack.env, or STACK with CARRIED but no CARRIED_FAMILIES (what the
    stack's carry build built), stops at once (exit 2, named)."""
    env = dict(os.environ, SERVER="python -m sglang.launch_server --model-path m --tp 8", CONFIG=str(tmp_path / "c.json"),
               OUT=str(tmp_path / "out"), STACK=str(tmp_path / "nostack"))
    root = GPU.parent.parent
    res = subprocess.run(["bash", str(GPU / "model_proof.sh")], cwd=root, env=env, capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 2 and f"no {tmp_path}/nostack/stack.env" in res.stderr, res.stderr
    res = subprocess.run(["bash", str(GPU / "model_proof.sh")], cwd=root, env=dict(env, CARRIED="x", TRUSTED="k"),
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "STACK= with CARRIED= needs CARRIED_FAMILIES=" in res.stderr, res.stderr


def test_the_imports_check_covers_every_sglang_module_the_driver_imports():
    """`carry_stack.sh imports` (the install call) imports model_path_modules: every SGLang module the model proof's
    driver imports is among them, so a package missing from the stack fails that call, not the proof."""
    import ast

    from dgprecompile.launch.model_driver import DEEPGEMM_INIT, RUNTIME_INIT

    listed = set(carry_stack.load(str(DATA))["model_path_modules"])
    wanted = {module for module, _ in RUNTIME_INIT} | {DEEPGEMM_INIT[0]}
    for path in sorted((GPU.parent.parent / "dgprecompile" / "launch").glob("model_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sglang"):
                subs = {f"{node.module}.{a.name}" for a in node.names} & listed
                wanted |= subs or {node.module}
    assert sorted(wanted - listed) == []
    assert {"sglang.srt.models.qwen3_moe", "sglang.srt.models.deepseek_v2"} <= listed  # the proofs' two models
