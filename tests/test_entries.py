"""A cache entry counts only when the runtime could load it; a full disk never leaves one that looks good.

Real nvcc cubins, a real legacy-warmed cache (test_verify's session warm), real small tmpfs mounts.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import NVCC, needs_nvcc
from test_artifact import expect_refusal, members_of, write_archive
from test_verify import NVCC as WARM_NVCC
from test_verify import PLAN, read_index, warm_once, write_index

from dgprecompile.cache.entrycheck import cubin_problem, entry_problem
from dgprecompile.cache.store import sha256_file
from dgprecompile.cli.main import cli


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def one_error(res) -> list[str]:
    assert "Traceback" not in res.output, res.output
    lines = res.stderr.strip().splitlines()
    assert len([x for x in lines if x.startswith("error:")]) == 1, res.stderr
    assert any(x.startswith("hint: ") for x in lines), res.stderr
    return lines


@pytest.fixture(scope="module")
def cubins(tmp_path_factory) -> dict[str, bytes]:
    if NVCC is None:
        pytest.skip("nvcc not found")
    d = tmp_path_factory.mktemp("cubins")
    (d / "k.cu").write_text("__global__ void k(float *x) { x[threadIdx.x] = 1.0f; }\n")
    out = {}
    for arch in ("sm_90a", "sm_90", "sm_80"):
        subprocess.run([NVCC, "k.cu", "-cubin", "-o", f"{arch}.cubin", f"--gpu-architecture={arch}"], cwd=d,
                       check=True, capture_output=True, timeout=300)
        out[arch] = (d / f"{arch}.cubin").read_bytes()
    return out


@needs_nvcc
def test_cubin_check_on_real_nvcc_output(cubins):
    good = cubins["sm_90a"]
    assert cubin_problem(good, "sm_90a") is None
    assert "sm_90a" in cubin_problem(cubins["sm_90"], "sm_90a")  # same e_flags; the ptxas note tells them apart
    assert "sm_80" in cubin_problem(cubins["sm_80"], "sm_90a")
    assert cubin_problem(b"", "sm_90a") == "empty (0 bytes)"
    assert "truncated" in cubin_problem(good[: len(good) - 100], "sm_90a")
    assert "truncated" in cubin_problem(good[:200], "sm_90a")
    assert "not NVIDIA CUDA" in cubin_problem(Path(sys.executable).resolve().read_bytes()[:1 << 16] + b"", "sm_90a")
    assert "not an ELF" in cubin_problem(b"// kernel.cu\n" * 100, "sm_90a")


@pytest.fixture
def poisoned(tmp_path_factory, tmp_path) -> tuple[Path, str, str]:
    """A copy of the warmed cache where one entry's kernel.cubin is empty and the index records that empty
    file's sha256 (what a full disk used to leave behind)."""
    cache = tmp_path / "deep_gemm"
    shutil.copytree(warm_once(tmp_path_factory), cache)
    index = read_index(cache)
    kid, record = sorted(index["kernels"].items())[0]
    cubin = cache / "cache" / record["entry"] / "kernel.cubin"
    cubin.write_bytes(b"")
    record["files"]["kernel.cubin"] = sha256_file(cubin)
    write_index(cache, index)
    return cache, kid, record["entry"]


pytestmark = pytest.mark.nvcc


def test_verify_reads_the_bytes_not_the_recorded_hash(poisoned):
    cache, kid, entry = poisoned
    res = run("verify", *PLAN, "--cache-dir", cache, "--json")
    assert res.exit_code == 1
    report = json.loads(res.stdout)
    assert report["invalid"] == [kid] and not report["complete"]
    assert "kernel.cubin empty" in report["problems"][0]["detail"]


def test_pack_refuses_a_bad_entry(poisoned, tmp_path):
    cache, _, entry = poisoned
    res = run("pack", *PLAN, "--cache-dir", cache, "-o", tmp_path / "a.tar.gz")
    assert res.exit_code == 1
    lines = one_error(res)
    assert "not loadable" in lines[0] and entry in lines[0]
    assert not (tmp_path / "a.tar.gz").exists()


def test_warm_replaces_a_bad_entry_instead_of_calling_it_cached(poisoned):
    cache, kid, entry = poisoned
    res = run("warm", *PLAN, "--cache-dir", cache, "--nvcc", WARM_NVCC, "--json")
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert (summary["compiled"], summary["already_cached"]) == (1, len(read_index(cache)["kernels"]) - 1)
    assert "rebuilt and replaced" in res.stderr
    assert entry_problem(cache / "cache" / entry, "sm_90a", ("kernel.cu", "kernel.cubin")) is None
    assert not [p for p in (cache / "cache").iterdir() if p.name.endswith(".replaced")]
    assert run("verify", *PLAN, "--cache-dir", cache).exit_code == 0


def test_unpack_checks_the_members_bytes(tmp_path_factory, tmp_path):
    """An artifact whose manifest and index agree with an empty kernel.cubin member is still refused."""
    import hashlib

    cache = warm_once(tmp_path_factory)
    art = tmp_path / "a.tar.gz"
    assert run("pack", *PLAN, "--cache-dir", cache, "-o", art).exit_code == 0
    members = members_of(art)
    victim = next(info.name for info, _ in members if info.name.endswith("kernel.cubin"))
    empty = hashlib.sha256(b"").hexdigest()
    manifest = json.loads(next(d for i, d in members if i.name == "dgprecompile/artifact.json"))
    index = json.loads(next(d for i, d in members if i.name == "dgprecompile/index.json"))
    entry = victim.split("/")[1]
    for rec in [*index["kernels"].values(), *index["extra"].values()]:
        if rec["entry"] == entry:
            rec["files"]["kernel.cubin"] = empty
    index_bytes = (json.dumps(index, indent=1, sort_keys=True) + "\n").encode()
    manifest["members"][victim] = {"sha256": empty, "bytes": 0}
    manifest["members"]["dgprecompile/index.json"] = {"sha256": hashlib.sha256(index_bytes).hexdigest(),
                                                      "bytes": len(index_bytes)}
    rebuilt = []
    for info, data in members:
        if info.name == victim:
            data = b""
        elif info.name == "dgprecompile/index.json":
            data = index_bytes
        elif info.name == "dgprecompile/artifact.json":
            data = (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode()
        rebuilt.append((info, data))
    bad = write_archive(tmp_path / "bad.tar.gz", rebuilt)
    target = tmp_path / "target"
    target.mkdir()
    expect_refusal(bad, target, "not loadable", victim, code=2)


# ---- a full filesystem ------------------------------------------------------------------------------------


def _mount_tmpfs(path: Path, size: str) -> None:
    path.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True,
                       capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {exc}")


def _umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True, timeout=30)


def test_warm_refuses_before_compiling_when_the_plan_does_not_fit(tmp_path, tmp_path_factory):
    warm_once(tmp_path_factory)  # skips without the legacy toolchain
    mnt = tmp_path / "small"
    _mount_tmpfs(mnt, "200k")
    try:
        res = run("warm", *PLAN, "--cache-dir", mnt / "dg", "--nvcc", WARM_NVCC)
        assert res.exit_code == 3, res.output
        lines = one_error(res)
        assert f"not enough space on {mnt}" in lines[0] and "free" in lines[0] and "needs about" in lines[0]
        assert not (mnt / "dg" / "cache").exists() or not list((mnt / "dg" / "cache").iterdir())
    finally:
        _umount(mnt)


@pytest.mark.slow
def test_a_disk_that_fills_during_warm_is_named_and_poisons_nothing(tmp_path, tmp_path_factory):
    """The filesystem fills up after the first kernel (another job writing): warm names the mount and what is
    free, installs nothing partial, verify then reports missing (not bad) entries, and a warm after freeing
    space completes the cache."""
    warm_once(tmp_path_factory)
    mnt = tmp_path / "fills"
    _mount_tmpfs(mnt, "4m")
    cache = mnt / "dg"
    try:
        proc = subprocess.Popen([sys.executable, "-m", "dgprecompile", "warm", *PLAN, "--cache-dir", str(cache),
                                 "--nvcc", WARM_NVCC, "--jobs", "1"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 300
        while time.time() < deadline and proc.poll() is None:
            if (cache / "cache").is_dir() and list((cache / "cache").iterdir()):
                break
            time.sleep(0.05)
        with open(mnt / "filler", "wb", buffering=0) as f:  # take every byte that is left
            try:
                while True:
                    f.write(b"\0" * 4096)
            except OSError:
                pass
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 3, err
        assert "Traceback" not in err
        error = [x for x in err.splitlines() if x.startswith("error:")]
        assert len(error) == 1 and f"no space left on {mnt}" in error[0] and "free" in error[0], err
        assert any(x.startswith("hint: ") and "free space" in x for x in err.splitlines()), err
        for entry in (cache / "cache").iterdir():
            assert entry_problem(entry, "sm_90a", ("kernel.cu", "kernel.cubin")) is None, entry
        assert not list((cache / "dgprecompile" / "staging").iterdir())
        report = json.loads(run("verify", *PLAN, "--cache-dir", cache, "--json").stdout)
        assert report["missing"] and not report["invalid"] and not report["changed"], report
        (mnt / "filler").unlink()
        again = run("warm", *PLAN, "--cache-dir", cache, "--nvcc", WARM_NVCC, "--json")
        assert again.exit_code == 0, again.output
        assert run("verify", *PLAN, "--cache-dir", cache).exit_code == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        _umount(mnt)


def test_pack_writes_nothing_when_a_cubin_is_cut_short(tmp_path_factory, tmp_path):
    cache = tmp_path / "dg"
    shutil.copytree(warm_once(tmp_path_factory), cache)
    index = read_index(cache)
    record = sorted(index["kernels"].values(), key=lambda r: r["entry"])[-1]
    cubin = cache / "cache" / record["entry"] / "kernel.cubin"
    cubin.write_bytes(cubin.read_bytes()[: os.path.getsize(cubin) // 2])
    record["files"]["kernel.cubin"] = sha256_file(cubin)
    write_index(cache, index)
    res = run("pack", *PLAN, "--cache-dir", cache, "-o", tmp_path / "x.tar.gz")
    assert res.exit_code == 1 and "truncated" in res.stderr
    assert not (tmp_path / "x.tar.gz").exists()
    with pytest.raises(FileNotFoundError):
        tarfile.open(tmp_path / "x.tar.gz")
