"""warm never blesses a corrupt entry: whatever differs from what the index recorded, or contradicts the entry's
name, is reported by verify and rebuilt by warm (never re-recorded as "adopted"), and verify passes after.

Real nvcc builds of sgl-deep-gemm 0.1.3 entries (the nvcc backend) and of the legacy JIT (the legacy backend), each
corrupted the ways a user or a hostile artifact would: flipped bytes, another kernel's cubin copied over, two entry
directories swapped, an entry (or its cubin) symlinked to another's, kernel.cu edited, and cubins swapped with the
index's hashes rewritten to match.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import (
    LEGACY_NVCC,
    NVCC,
    PLAN,
    needs_dg013,
    needs_nvcc,
    read_index,
    sgl_deep_gemm_013_dir,
    warm_once,
    write_index,
)

from dgprecompile.cache.entrycheck import content_problem, cubin_kernels, entry_problem
from dgprecompile.cache.store import sha256_file
from dgprecompile.cli.main import cli
from dgprecompile.keys.sgl_deep_gemm_01 import CxxKeyContext
from dgprecompile.planning.manifest import plan_from_dict, write_manifest
from dgprecompile.planning.plan import PlanRequest
from dgprecompile.planning.request import plan_from_request

REPO = Path(__file__).resolve().parent.parent
pytestmark = [needs_nvcc, pytest.mark.nvcc]


def run(*args, extra=()):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*extra, str(REPO)])}
    return subprocess.run([sys.executable, "-m", "dgprecompile", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=600)


@pytest.fixture(scope="module")
def nvcc_cache(tmp_path_factory):
    """A real nvcc-backend warm of the 480B masked w2 key (2 GEMMs + 1 transpose); copy it, do not change it."""
    if sgl_deep_gemm_013_dir() is None:
        pytest.skip("sgl-deep-gemm 0.1.3 not installed beside the venv (make setup)")
    plan = plan_from_request(PlanRequest(model="Qwen3-Coder-480B", tp=8, ep=8, sglang="0.5.14",
                                         moe_runner_backend="deep_gemm"))
    data = plan.to_dict()
    shape = next(s for s in data["shapes"] if (s["n"], s["k"], s["num_groups"]) == (6144, 2560, 20))
    keep = {b["kernel"] for b in shape["buckets"]} | set(shape["aux_kernels"])
    data["shapes"], data["kernels"] = [shape], [k for k in data["kernels"] if k["id"] in keep]
    data["total_kernels"] = len(data["kernels"])  # a trimmed manifest states its own count
    data.pop("sglang_jit_modules", None)
    data.pop("inductor", None)  # the torch.compile items need the job's GPU: tests/test_inductor_graphs.py
    data.pop("flashinfer", None)  # FlashInfer's modules: tests/test_flashinfer_modules.py
    data.pop("triton_path", None)  # the model path's other Triton kernels: tests/test_triton_path.py
    base = tmp_path_factory.mktemp("nvcc")
    manifest = base / "w2.yaml"
    write_manifest(plan_from_dict(data), manifest)
    cache = base / "dg"
    res = run("warm", "--manifest", manifest, "--cache-dir", cache, "--nvcc", NVCC, "--json",
              extra=[sgl_deep_gemm_013_dir()])
    assert res.returncode == 0, res.stderr
    return manifest, cache


def _sections_but_names(cubin: Path) -> dict[str, str]:
    """Each section's bytes as binutils' readelf dumps them, but the string and symbol tables: two builds of one
    kernel.cu differ there only (nvcc's unique names carry the compiling process's id, whose digits move the
    offsets: the CI machine's pids crossed 9999 -> 10000 between the fixture's build and this test's)."""
    listing = subprocess.run(["readelf", "-SW", str(cubin)], capture_output=True, text=True, check=True).stdout
    dumps = {}
    for index, name in re.findall(r"^\s*\[\s*(\d+)\]\s+(\S+)\s+[A-Z]", listing, re.M):
        if index != "0" and name not in (".strtab", ".symtab"):
            dumps[name] = subprocess.run(["readelf", "-x", index, str(cubin)], capture_output=True, text=True).stdout
    assert any(n.startswith(".text.") for n in dumps), listing
    return dumps


def _gemms(cache: Path) -> tuple[str, str]:
    a, b = sorted(p.name for p in (cache / "cache").iterdir() if "gemm" in p.name)
    return a, b


def _flip(cache, a, b):
    """Flip bytes inside the kernel's code: still a whole CUDA ELF of the same kernel, other bytes."""
    cubin = cache / "cache" / a / "kernel.cubin"
    data = bytearray(cubin.read_bytes())
    at = len(data) // 2
    data[at:at + 8] = bytes(x ^ 0x5A for x in data[at:at + 8])
    cubin.write_bytes(bytes(data))
    return [a]


def _copy_cubin(cache, a, b):
    shutil.copyfile(cache / "cache" / b / "kernel.cubin", cache / "cache" / a / "kernel.cubin")
    return [a]


def _swap_dirs(cache, a, b):
    d = cache / "cache"
    os.rename(d / a, d / "tmp")
    os.rename(d / b, d / a)
    os.rename(d / "tmp", d / b)
    return [a, b]


def _symlink_entry(cache, a, b):
    shutil.rmtree(cache / "cache" / a)
    os.symlink(cache / "cache" / b, cache / "cache" / a)
    return [a]


def _symlink_cubin(cache, a, b):
    (cache / "cache" / a / "kernel.cubin").unlink()
    os.symlink(cache / "cache" / b / "kernel.cubin", cache / "cache" / a / "kernel.cubin")
    return [a]


def _edit_source(cache, a, b):
    cu = cache / "cache" / a / "kernel.cu"
    cu.write_text(cu.read_text().replace(", 192,", ", 128,", 1))
    return [a]


def _swap_cubins_rehashed(cache, a, b):
    """What a hostile artifact holds: two entries' cubins swapped and the index's hashes rewritten to match."""
    d = cache / "cache"
    ca, cb = (d / a / "kernel.cubin").read_bytes(), (d / b / "kernel.cubin").read_bytes()
    (d / a / "kernel.cubin").write_bytes(cb)
    (d / b / "kernel.cubin").write_bytes(ca)
    index = read_index(cache)
    for rec in index["kernels"].values():
        if rec["entry"] in (a, b):
            rec["files"]["kernel.cubin"] = sha256_file(d / rec["entry"] / "kernel.cubin")
    write_index(cache, index)
    return [a, b]


@needs_dg013
@pytest.mark.parametrize("corrupt", [_flip, _copy_cubin, _swap_dirs, _symlink_entry, _symlink_cubin, _edit_source,
                                     _swap_cubins_rehashed], ids=lambda f: f.__name__.strip("_"))
def test_warm_rebuilds_a_corrupt_nvcc_entry_never_adopts_it(nvcc_cache, tmp_path, corrupt):
    manifest, pristine = nvcc_cache
    cache = tmp_path / "dg"
    shutil.copytree(pristine, cache, symlinks=True)
    a, b = _gemms(cache)
    victims = corrupt(cache, a, b)
    extra = [sgl_deep_gemm_013_dir()]
    by_entry = {rec["entry"]: kid for kid, rec in read_index(cache)["kernels"].items()}

    verify = run("verify", "--manifest", manifest, "--cache-dir", cache, "--json", extra=extra)
    assert verify.returncode == 1, verify.stdout
    report = json.loads(verify.stdout)
    assert sorted(p["entry"] for p in report["problems"]) == sorted(victims), report["problems"]

    warm = run("warm", "--manifest", manifest, "--cache-dir", cache, "--nvcc", NVCC, "--json", extra=extra)
    assert warm.returncode == 0, warm.stderr
    summary = json.loads(warm.stdout)
    assert (summary["compiled"], summary["already_cached"]) == (len(victims), 3 - len(victims)), warm.stderr
    assert "rebuilt and replaced" in warm.stderr

    include = os.path.join(sgl_deep_gemm_013_dir(), "deep_gemm", "include")
    ctx = CxxKeyContext(include, (13, 0))
    index = read_index(cache)
    for name in victims:
        entry = cache / "cache" / name
        assert not entry.is_symlink() and not any(p.is_symlink() for p in entry.iterdir())
        # a real build of that kernel: its kernel.cu is the pristine one, its cubin holds the pristine's kernel
        assert (entry / "kernel.cu").read_bytes() == (pristine / "cache" / name / "kernel.cu").read_bytes()
        assert cubin_kernels((entry / "kernel.cubin").read_bytes()) == \
            cubin_kernels((pristine / "cache" / name / "kernel.cubin").read_bytes())
        assert entry_problem(entry, "sm_90a", ("kernel.cu", "kernel.cubin"), ctx) is None
        record = index["kernels"][by_entry[name]]
        assert record["by"] == "warm" and record["seconds"] > 0
        assert record["files"] == {f: sha256_file(entry / f) for f in ("kernel.cu", "kernel.cubin")}
    for name in {a, b} - set(victims):  # the entry a link pointed to is left as it was
        assert (cache / "cache" / name / "kernel.cubin").read_bytes() == \
            (pristine / "cache" / name / "kernel.cubin").read_bytes()
    assert sorted(os.listdir(cache / "cache")) == sorted(os.listdir(pristine / "cache"))  # nothing left aside
    again = run("verify", "--manifest", manifest, "--cache-dir", cache, "--json", extra=extra)
    assert again.returncode == 0, again.stdout
    second = json.loads(run("warm", "--manifest", manifest, "--cache-dir", cache, "--nvcc", NVCC, "--json",
                            extra=extra).stdout)
    assert (second["compiled"], second["already_cached"]) == (0, 3)
    assert read_index(cache)["kernels"] == index["kernels"]  # a second warm keeps the records (no re-recording as adopted)


@needs_dg013
def test_content_check_names_what_contradicts_the_entry_name(nvcc_cache, tmp_path):
    """One function (entrycheck.content_problem) that verify, warm and the artifact code call."""
    _, pristine = nvcc_cache
    cache = tmp_path / "dg"
    shutil.copytree(pristine, cache)
    include = os.path.join(sgl_deep_gemm_013_dir(), "deep_gemm", "include")
    ctx = CxxKeyContext(include, (13, 0))
    for entry in (cache / "cache").iterdir():
        assert content_problem(entry, ctx) is None, entry.name
    a, b = _gemms(cache)
    _swap_cubins_rehashed(cache, a, b)
    problem = content_problem(cache / "cache" / a)
    assert "kernel.cubin holds sm90_fp8_gemm_1d2d_impl<" in problem and "another kernel's cubin" in problem
    # both files of another entry under this name: the cubin agrees with kernel.cu, the name does not
    shutil.copyfile(cache / "cache" / a / "kernel.cu", cache / "cache" / b / "kernel.cu")
    assert content_problem(cache / "cache" / b) is None
    assert "not the source this entry's name" in content_problem(cache / "cache" / b, ctx)
    os.symlink(cache / "cache" / a, cache / "cache" / "kernel.link")
    assert "symbolic link" in content_problem(cache / "cache" / "kernel.link")


def test_legacy_warm_rebuilds_a_swapped_cubin_whose_hash_was_rewritten(tmp_path_factory, tmp_path):
    """The legacy backend (the library's own build) too: a cubin of another kernel, with the index rewritten to
    match, is caught by its kernel symbol, rebuilt, and recorded as built by warm."""
    cache = tmp_path / "deep_gemm"
    shutil.copytree(warm_once(tmp_path_factory), cache)
    names = sorted(p.name for p in (cache / "cache").iterdir())
    a, b = names[0], names[1]
    _swap_cubins_rehashed(cache, a, b)

    def cli_run(*args):
        return CliRunner().invoke(cli, [str(x) for x in args], catch_exceptions=False)

    verify = cli_run("verify", *PLAN, "--cache-dir", cache, "--json")
    assert verify.exit_code == 1
    problems = json.loads(verify.stdout)["problems"]
    assert sorted(p["entry"] for p in problems) == [a, b] and "another kernel's cubin" in problems[0]["detail"]
    warm = cli_run("warm", *PLAN, "--cache-dir", cache, "--nvcc", LEGACY_NVCC, "--json")
    assert warm.exit_code == 0, warm.output
    assert json.loads(warm.stdout)["compiled"] == 2
    index = read_index(cache)
    for rec in index["kernels"].values():
        if rec["entry"] in (a, b):
            assert rec["by"] == "warm"
            assert content_problem(cache / "cache" / rec["entry"]) is None
    assert cli_run("verify", *PLAN, "--cache-dir", cache).exit_code == 0


# ---- SGLang's own JIT modules (the sglang-jit backend) ------------------------------------------------------

from test_sglang_jit import ACT, V2, _plan, _run, _sgl_path, needs_warmed_cache  # noqa: E402


@pytest.fixture(scope="module")
def jit_warmed(tmp_path_factory):
    """test_sglang_jit's `jit_only` plan (only SGLang's two JIT modules) warmed for real with sglang 0.5.14."""
    data = _plan().to_dict()
    for shape in data["shapes"]:
        shape["buckets"], shape["aux_kernels"] = [], []
    data["kernels"], data["total_kernels"] = [], 0  # a trimmed manifest states its own count
    # the two quantisers on the DeepGEMM paths only, as test_sglang_jit's plan keeps them
    data["sglang_jit_modules"] = [m for m in data["sglang_jit_modules"] if m["id"] in (V2, ACT)]
    data.pop("inductor", None)  # the torch.compile items need the job's GPU: tests/test_inductor_graphs.py
    data.pop("flashinfer", None)  # FlashInfer's modules: tests/test_flashinfer_modules.py
    data.pop("triton_path", None)  # the model path's other Triton kernels: tests/test_triton_path.py
    base = tmp_path_factory.mktemp("jit")
    write_manifest(plan_from_dict(data), base / "jit.yaml")
    r = _run("warm", "--manifest", base / "jit.yaml", "--cache-dir", base / "cache", "--nvcc", NVCC, "--sglang-jit",
             "on", "--json", pythonpath=_sgl_path())
    assert r.returncode == 0, r.stdout + r.stderr
    return base / "jit.yaml", base / "cache"


def _flip_library(cache: Path, entry: str) -> None:
    so = next((cache / "tvm-ffi" / entry).glob("*.so"))
    data = bytearray(so.read_bytes())
    at = len(data) // 2
    data[at:at + 8] = bytes(x ^ 0x5A for x in data[at:at + 8])
    so.write_bytes(bytes(data))


def _link_module(cache: Path, entry: str, other: str) -> None:
    shutil.rmtree(cache / "tvm-ffi" / entry)
    os.symlink(cache / "tvm-ffi" / other, cache / "tvm-ffi" / entry)


@needs_warmed_cache
@pytest.mark.parametrize("how", ["flip", "link"])
def test_warm_rebuilds_a_changed_sglang_jit_module(jit_warmed, tmp_path, how):
    jit_only, pristine = jit_warmed
    cache = tmp_path / "cache"
    shutil.copytree(pristine, cache, symlinks=True)
    index = read_index(cache)
    entry = index["kernels"][V2]["entry"]
    other = next(r["entry"] for k, r in index["kernels"].items() if k != V2)
    _flip_library(cache, entry) if how == "flip" else _link_module(cache, entry, other)
    verify = _run("verify", "--manifest", jit_only, "--cache-dir", cache, "--json", pythonpath=_sgl_path())
    assert verify.returncode == 1 and json.loads(verify.stdout)["changed"] == [V2], verify.stdout
    warm = _run("warm", "--manifest", jit_only, "--cache-dir", cache, "--nvcc", NVCC, "--sglang-jit", "on", "--json",
                pythonpath=_sgl_path())
    assert warm.returncode == 0, warm.stderr
    assert (json.loads(warm.stdout)["compiled"], json.loads(warm.stdout)["already_cached"]) == (1, 1)
    record = read_index(cache)["kernels"][V2]
    module = cache / "tvm-ffi" / entry
    assert record["by"] == "warm" and not module.is_symlink()
    assert record["files"] == {p.name: sha256_file(p) for p in module.iterdir() if p.is_file()}
    assert (cache / "tvm-ffi" / other).is_dir() and not (cache / "tvm-ffi" / other).is_symlink()
    assert _run("verify", "--manifest", jit_only, "--cache-dir", cache, pythonpath=_sgl_path()).returncode == 0


@needs_dg013
@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare")
def test_a_fresh_build_in_a_pid_namespace_is_the_same_build(nvcc_cache, tmp_path):
    """nvcc puts the compiling process's id into its unique symbol names (``..._<hash>_<pid><mangled>``): a build
    whose pid has another number of digits (a busy machine past 99999 processes; here a fresh pid namespace, pids
    of 1-3 digits) moves the string table, its offsets and every file offset after it. The CI machine met this in
    the test below (its fresh build was taken for a different one). With the index removed, a warm inside a pid
    namespace rebuilds every unrecorded entry and must find each the same build as the one on disk: all kept."""
    manifest, pristine = nvcc_cache
    cache = tmp_path / "dg"
    shutil.copytree(pristine, cache, symlinks=True)
    (cache / "dgprecompile" / "index.json").unlink()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([sgl_deep_gemm_013_dir(), str(REPO)])}
    probe = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"unshare --pid is not allowed here: {probe.stderr.decode(errors='replace').strip()}")
    warm = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-m", "dgprecompile", "warm",
                           "--manifest", str(manifest), "--cache-dir", str(cache), "--nvcc", NVCC, "--json"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert warm.returncode == 0, warm.stderr
    summary = json.loads(warm.stdout)
    assert summary["compiled"] == 0 and summary["already_cached"] == 3, (summary, warm.stderr)
    for entry in (pristine / "cache").iterdir():  # kept as they were
        assert (cache / "cache" / entry.name / "kernel.cubin").read_bytes() == (entry / "kernel.cubin").read_bytes()


@needs_dg013
def test_an_entry_the_index_does_not_record_is_checked_against_a_fresh_build(nvcc_cache, tmp_path):
    """Issue 29 item 7: index.json removed (what the damaged-index hint says to do) and one cubin's code flipped.
    warm must not re-index the flipped entry as good: it rebuilds every unrecorded entry in staging, replaces the
    one whose bytes differ (saying so), keeps the identical ones, and records all of them as checked by warm."""
    manifest, pristine = nvcc_cache
    cache = tmp_path / "dg"
    shutil.copytree(pristine, cache, symlinks=True)
    a, b = _gemms(cache)
    _flip(cache, a, b)
    (cache / "dgprecompile" / "index.json").unlink()
    extra = [sgl_deep_gemm_013_dir()]

    warm = run("warm", "--manifest", manifest, "--cache-dir", cache, "--nvcc", NVCC, "--json", extra=extra)
    assert warm.returncode == 0, warm.stderr
    summary = json.loads(warm.stdout)
    assert summary["compiled"] == 1 and summary["already_cached"] == 2, (summary, warm.stderr)
    assert f"{a}" in warm.stderr or "rebuilt and replaced" in warm.stderr
    assert "differ from a fresh build" in warm.stderr, warm.stderr
    # a fresh build of that kernel: every section of the pristine one, as binutils reads them, but the names
    assert _sections_but_names(cache / "cache" / a / "kernel.cubin") == \
        _sections_but_names(pristine / "cache" / a / "kernel.cubin")
    for name in sorted(e.name for e in (pristine / "cache").iterdir() if e.name != a):  # same builds: kept as is
        assert (cache / "cache" / name / "kernel.cubin").read_bytes() == \
            (pristine / "cache" / name / "kernel.cubin").read_bytes()
    index = read_index(cache)
    assert {rec["by"] for rec in index["kernels"].values()} == {"warm"}, index["kernels"]
    verify = run("verify", "--manifest", manifest, "--cache-dir", cache, "--json", extra=extra)
    assert verify.returncode == 0, verify.stdout


@needs_dg013
def test_verify_does_not_call_adopted_records_complete(nvcc_cache, tmp_path):
    """A record warm filed without comparing the entry to a fresh build (`by: adopted`, an index rebuilt by an older
    dgprecompile) proves nothing about the bytes: verify says which kernels are unchecked and exits 1."""
    manifest, pristine = nvcc_cache
    cache = tmp_path / "dg"
    shutil.copytree(pristine, cache, symlinks=True)
    index = read_index(cache)
    victim = sorted(index["kernels"])[0]
    index["kernels"][victim]["by"] = "adopted"
    write_index(cache, index)
    extra = [sgl_deep_gemm_013_dir()]
    verify = run("verify", "--manifest", manifest, "--cache-dir", cache, "--json", extra=extra)
    assert verify.returncode == 1, verify.stdout
    report = json.loads(verify.stdout)
    assert [p["kernel"] for p in report["problems"]] == [victim], report["problems"]
    assert report["problems"][0]["status"] == "unchecked"
    human = run("verify", "--manifest", manifest, "--cache-dir", cache, extra=extra)
    assert human.returncode == 1 and "1 unchecked" in human.stdout + human.stderr, human.stdout + human.stderr
    assert "dgprecompile warm" in human.stderr + human.stdout
    launch = run("launch", "--manifest", manifest, "--cache-dir", cache, "--", "true", extra=extra)
    assert launch.returncode == 1 and f"unchecked: {victim}" in launch.stderr, launch.stderr
