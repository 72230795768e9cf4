"""`launch --capture` and strict mode for the JIT families beside DeepGEMM, against a real Triton (3.6.0, the
release the H200's torch 2.11 pairs with, installed beside the venv by `make setup`) compiling real kernels for
sm_90 on this GPU-less machine: its own cache writer, its own group files, its own cache lookups."""

from __future__ import annotations

import json
import os
import shutil
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import PLAN, clear_job_env, warm_once

from dgprecompile.cache.store import CacheStore
from dgprecompile.cli.main import cli
from dgprecompile.planning.manifest import write_manifest
from dgprecompile.planning.plan import PlanRequest
from dgprecompile.planning.trace import plan_from_calls
from dgprecompile.runtimes import CAPTURED, family_for_area
from dgprecompile.runtimes.captured import triton_entry_problem

REPO = Path(__file__).resolve().parent.parent
TRITON = Path(os.environ.get("DGP_TRITON_DIR", REPO / ".venv" / "triton-3.6.0"))
needs_triton = pytest.mark.skipif(not (TRITON / "triton" / "__init__.py").is_file(),
                                  reason=f"no Triton at {TRITON} (make setup installs it)")

# A job's first forward, in miniature: Triton's own JIT (triton.jit, the runtime's cache lookup and writer), but
# no GPU here, so the kernel is compiled for sm_90 through triton.compile with an explicit target instead of being
# launched. KILL_AT names a kernel whose compile dies right before Triton writes its group file (what a SIGKILL
# mid-compile leaves: every stage file, no __grp__).
CHILD = textwrap.dedent("""
    import os, sys
    import triton, triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.runtime import cache as tcache

    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)

    @triton.jit
    def scale_kernel(x_ptr, n, s, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * s, mask=offs < n)

    kill_at = os.environ.get("KILL_AT")
    real_put_group = tcache.FileCacheManager.put_group
    def put_group(self, filename, group):
        if filename == f"{kill_at}.json":
            os._exit(9)  # killed after every stage file, before the group file
        return real_put_group(self, filename, group)
    tcache.FileCacheManager.put_group = put_group

    target = GPUTarget("cuda", 90, 128)
    for name in sys.argv[1:]:
        if name == "add_kernel":
            src = ASTSource(add_kernel, {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32",
                                         "BLOCK": "constexpr"}, {(4,): 1024})
        else:
            src = ASTSource(scale_kernel, {"x_ptr": "*bf16", "n": "i32", "s": "fp32", "BLOCK": "constexpr"},
                            {(3,): 256})
        k = triton.compile(src, target=target)
        print("compiled", name, k.hash)
""")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    clear_job_env(monkeypatch)


@pytest.fixture
def job(tmp_path, monkeypatch):
    (tmp_path / "child.py").write_text(CHILD)
    plan = plan_from_calls([{"kernel_type": "GEMM_NT_F8F8BF16", "m": 64, "n": 512, "k": 512, "num_groups": 1}],
                           PlanRequest(sglang="0.5.1"))
    write_manifest(plan, tmp_path / "plan.yaml")
    monkeypatch.setenv("PYTHONPATH", f"{REPO}{os.pathsep}{TRITON}")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def launch(*args, env=None):
    r = CliRunner().invoke(cli, ["launch", "--manifest", "plan.yaml", "--cache-dir", "cache", "--allow-missing",
                                 *args[:-1], "--", sys.executable, "child.py", *args[-1]], env=env,
                           catch_exceptions=False)
    return r


def triton_extra(cache: Path) -> dict:
    return {k: v for k, v in json.loads((cache / "dgprecompile" / "index.json").read_text())["extra"].items()
            if v.get("area") == "triton"}


@needs_triton
def test_capture_files_whole_triton_entries_and_a_strict_launch_compiles_nothing(job):
    r = launch("--capture", ["add_kernel", "scale_kernel"])
    assert r.exit_code == 0, r.output
    cache = job / "cache"
    dirs = sorted(p.name for p in (cache / "triton").iterdir())
    assert len(dirs) == 2  # Triton's own writer put one <hash>/ per kernel under TRITON_CACHE_DIR = cache/triton
    filed = triton_extra(cache)
    assert sorted(v["entry"] for v in filed.values()) == dirs
    assert all(v["by"] == "capture" for v in filed.values())
    assert sorted(n for v in filed.values() for n in v["files"] if n.startswith("__grp__")) == [
        "__grp__add_kernel.json", "__grp__scale_kernel.json"]
    assert "add_kernel" in r.output and "scale_kernel" in r.output  # named per family

    # strict, same cache: both kernels are Triton cache hits (its own lookup), nothing new is written
    before = {p.name: sorted(q.name for q in p.iterdir()) for p in (cache / "triton").iterdir()}
    r = launch(["add_kernel", "scale_kernel"])
    assert r.exit_code == 0, r.output
    assert {p.name: sorted(q.name for q in p.iterdir()) for p in (cache / "triton").iterdir()} == before
    assert "strict mode refused" not in r.output
    assert "DGPRECOMPILE_STRICT_FAMILIES" in r.output  # the hook was on: a miss would have been refused


@needs_triton
def test_strict_refuses_a_triton_miss_by_name_and_writes_nothing(job, capfd):
    assert launch("--capture", ["add_kernel"]).exit_code == 0
    cache = job / "cache"
    (entry,) = list((cache / "triton").iterdir())
    shutil.rmtree(entry)  # the captured kernel is gone: a strict launch must not compile it again
    capfd.readouterr()
    r = launch(["add_kernel"])
    assert r.exit_code == 1, r.output
    child = capfd.readouterr().err  # the job's own stderr
    assert "Triton tried to compile kernel add_kernel at run time" in child
    assert "dgprecompile launch --capture" in child  # the fix
    assert "strict mode refused 1 runtime compile(s): add_kernel" in r.output
    assert not list((cache / "triton").iterdir())  # refused before any stage file was written


@needs_triton
def test_a_half_written_triton_entry_is_never_filed(job):
    r = launch("--capture", ["add_kernel", "scale_kernel"], env={"KILL_AT": "scale_kernel"})
    assert r.exit_code == 9
    cache = job / "cache"
    dirs = {p.name: sorted(q.name for q in p.iterdir()) for p in (cache / "triton").iterdir()}
    assert len(dirs) == 2
    half = next(d for d, files in dirs.items() if "scale_kernel.cubin" in files)
    assert not any(f.startswith("__grp__") for f in dirs[half])  # Triton died before its group file
    filed = triton_extra(cache)
    assert [v["entry"] for v in filed.values()] == [d for d in dirs if d != half]
    assert f"Triton entry {half} not filed: no __grp__*.json" in r.output


@needs_triton
def test_pack_unpack_on_a_clean_cache_carries_the_captured_kernels(job, tmp_path_factory, capfd):
    """A warmed cache (a real legacy DeepGEMM warm), one capture run, pack; a clean node unpacks it at the same
    path and verifies; a strict launch there finds the Triton kernel (Triton's own lookup) and compiles nothing."""
    shutil.copytree(warm_once(tmp_path_factory), job / "cache")
    cache = job / "cache"
    run = CliRunner()

    def dg(*args):
        return run.invoke(cli, [str(a) for a in args], catch_exceptions=False)

    r = dg("launch", *PLAN, "--cache-dir", "cache", "--capture", "--", sys.executable, "child.py", "add_kernel")
    assert r.exit_code == 0, r.output
    index = json.loads((cache / "dgprecompile" / "index.json").read_text())
    assert index["fingerprint"]["families"]["triton"] == "3.6.0"  # the versions beside the fingerprint
    (entry,) = list((cache / "triton").iterdir())
    files = {p.name: p.read_bytes() for p in entry.iterdir()}
    r = dg("pack", *PLAN, "--cache-dir", "cache", "-o", "art.tar.gz")
    assert r.exit_code == 0, r.output
    shutil.rmtree(cache)  # a clean node: nothing there but the artifact, unpacked at the same path
    r = dg("unpack", "art.tar.gz", "--cache-dir", "cache")
    assert r.exit_code == 0, r.output
    assert {p.name: p.read_bytes() for p in (cache / "triton" / entry.name).iterdir()} == files
    store = CacheStore(cache)
    (rec,) = [r for r in store.read_index().extra.values() if r.area == "triton"]
    assert store.check_entry(rec) is None
    r = dg("verify", *PLAN, "--cache-dir", "cache")
    assert r.exit_code == 0, r.output
    capfd.readouterr()
    r = dg("launch", *PLAN, "--cache-dir", "cache", "--", sys.executable, "child.py", "add_kernel")
    assert r.exit_code == 0, r.output + capfd.readouterr().err
    assert sorted(p.name for p in (cache / "triton").iterdir()) == [entry.name]


@needs_triton
def test_a_strict_launch_on_a_cache_moved_elsewhere_finds_its_triton_kernels(job, tmp_path, capfd):
    """Triton's group files name absolute paths: a cache filled at one root and used at another would miss every
    kernel. launch points the filed entries at where they lie (in Triton's own format) and re-records them."""
    assert launch("--capture", ["add_kernel"]).exit_code == 0
    shutil.move(job / "cache", job / "moved")
    capfd.readouterr()
    r = CliRunner().invoke(cli, ["launch", "--manifest", "plan.yaml", "--cache-dir", "moved", "--allow-missing",
                                 "--", sys.executable, "child.py", "add_kernel"], catch_exceptions=False)
    assert r.exit_code == 0, r.output + capfd.readouterr().err
    assert "1 filed Triton entries pointed at" in r.output
    store = CacheStore(job / "moved")
    (rec,) = [r for r in store.read_index().extra.values() if r.area == "triton"]
    assert store.check_entry(rec) is None
    assert len(list((job / "moved" / "triton").iterdir())) == 1  # a hit: nothing compiled


@needs_triton
def test_a_moved_triton_entry_is_reported_not_trusted(job, tmp_path):
    """Triton's group file holds absolute paths (runtime/cache.py get_group keeps only children that exist):
    an entry moved to another root is a miss to Triton; check_entry says so instead of calling it good."""
    assert launch("--capture", ["add_kernel"]).exit_code == 0
    moved = tmp_path / "elsewhere"
    shutil.copytree(job / "cache", moved)
    store = CacheStore(moved)
    (rec,) = [r for r in store.read_index().extra.values() if r.area == "triton"]
    problem = store.check_entry(rec)
    assert problem and "absolute paths" in problem and str(job / "cache") in problem
    assert triton_entry_problem(moved / "triton" / rec.entry) is None  # whole, just not usable there



# Triton's host modules (runtime/build.py compile_module_from_src): the driver's cuda_utils and one
# __triton_launcher per kernel signature, built with the C compiler at first use. The same function here, with a
# minimal extension module as the source (the H200 run built cuda_utils this way at its first Triton import).
MODULE_CHILD = textwrap.dedent("""
    import sys
    from triton.runtime.build import compile_module_from_src
    SRC = '#include <Python.h>\\nstatic struct PyModuleDef m = {PyModuleDef_HEAD_INIT, "%s", NULL, -1, NULL};\\n' \\
          'PyMODINIT_FUNC PyInit_%s(void) { return PyModule_Create(&m); }\\n'
    for name in sys.argv[1:]:
        print("loaded", compile_module_from_src(SRC % (name, name), name).__name__)
""")


@needs_triton
def test_tritons_host_modules_are_captured_whole_and_a_strict_miss_is_refused(job, capfd):
    (job / "child.py").write_text(MODULE_CHILD)
    r = launch("--capture", ["dgp_probe"])
    assert r.exit_code == 0, r.output + capfd.readouterr().err
    cache = job / "cache"
    (entry,) = [p for p in (cache / "triton").iterdir()]
    (built,) = [p.name for p in entry.iterdir()]
    assert built.startswith("dgp_probe.") and built.endswith(".so")  # one put by Triton's own writer, no group file
    filed = triton_extra(cache)
    assert [v["entry"] for v in filed.values()] == [entry.name] and list(filed.values())[0]["files"].keys() == {built}

    capfd.readouterr()
    r = launch(["dgp_probe"])  # strict, the same module: Triton's own lookup finds it, nothing is built
    assert r.exit_code == 0, r.output + capfd.readouterr().err
    assert "loaded dgp_probe" in capfd.readouterr().out
    assert [p.name for p in (cache / "triton").iterdir()] == [entry.name]

    r = launch(["dgp_other"])  # strict, a module nobody captured: refused before the C compiler runs
    assert r.exit_code == 1, r.output
    child = capfd.readouterr().err
    assert "Triton tried to compile kernel dgp_other (Triton's host module" in child, child
    assert "strict mode refused 1 runtime compile(s): dgp_other" in r.output
    assert [p.name for p in (cache / "triton").iterdir()] == [entry.name]  # nothing written


def test_families_have_one_area_and_one_variable_each():
    assert len({f.area for f in CAPTURED}) == len({e for f in CAPTURED for e in f.cache_env}) == len(CAPTURED)
    assert family_for_area("triton").filed and family_for_area("inductor").filed and family_for_area("flashinfer").filed
    assert not family_for_area("cute-dsl").filed


def test_plan_shows_every_family_and_how_it_is_covered():
    r = CliRunner().invoke(cli, ["plan", "--model", "Qwen3-Coder-480B", "--tp", "8", "--ep", "8", "--sglang",
                                 "0.5.14"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "every JIT family at the first forward" in r.output
    for fam in CAPTURED:
        assert f"family={fam.id}" in r.output or f"│ {fam.id}" in r.output, fam.id
    assert "dgprecompile.compile.triton_moe" in r.output


SGL014 = REPO / ".venv" / "sglang-0.5.14"


@needs_triton
@pytest.mark.skipif(not (SGL014 / "sglang").is_dir(), reason="no sglang 0.5.14 beside the venv (make setup)")
def test_gpu_free_warm_compiles_sglangs_fused_moe_kernel_for_sm90(tmp_path):
    """SGLang 0.5.14's own fused MoE path, Triton 3.6.0's own JIT and compiler, no GPU: the kernels land in the
    cache as Triton writes them, for sm_90, under SGLang's default config for the 480B ep8 rank (no tuned JSON)."""
    import subprocess

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SGL014), str(REPO / "tests" / "standins"), str(TRITON),
                                                        str(REPO)]),
           "DGP_STANDINS": "sgl_kernel,torchvision", "DGP_TRANSFORMERS_EXIST_OK": "1"}
    root = tmp_path / "cache"
    cache = root / "triton"
    res = subprocess.run([sys.executable, "-m", "dgprecompile.compile.triton_moe", "--experts", "20",
                          "--global-experts", "160", "--hidden", "6144", "--intermediate", "2560", "--topk", "8",
                          "--m", "1-2", "--cache-dir", str(root)], env=env, capture_output=True, text=True,
                         timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    report = json.loads(res.stdout)
    assert report["configs"] == [{"config": {"BLOCK_SIZE_K": 128, "BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128,
                                             "GROUP_SIZE_M": 32, "num_stages": 3, "num_warps": 4},
                                  "m": [1, 2], "count": 2}]  # sglang 0.5.14's block-FP8 default
    assert len(report["warmed"]) == 4  # gate-up and down at m=1 and m=2 (Triton specialises on ints == 1)
    for entry in report["warmed"]:
        assert triton_entry_problem(cache / entry, here=True) is None
        meta = json.loads((cache / entry / "fused_moe_kernel.json").read_text())
        assert meta["target"]["arch"] == 90 and meta["triton_version"] == "3.6.0"
        assert (cache / entry / "fused_moe_kernel.cubin").read_bytes()[:4] == b"\x7fELF"
    store = CacheStore(root)
    filed = {r.entry: r for r in store.read_index().extra.values() if r.area == "triton"}
    # + Triton's host modules the warm built for them (compile/triton_host.py, tests/test_triton_host.py)
    assert sorted(filed) == sorted(report["warmed"] + report["host_modules"]["entries"]) and report["not_whole"] == []
    assert all(r.by == "warm" and store.check_entry(r) is None for r in filed.values())


# A kernel of a planned family: the plan's Triton fused-MoE items warm SGLang's `fused_moe_kernel`; a job that
# compiles one at run time found a warm's miss. Here a kernel of that name beside an unplanned one (add_kernel),
# compiled by Triton's own JIT for sm_90 as CHILD does.
PLANNED_CHILD = textwrap.dedent("""
    import sys
    import triton, triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    @triton.jit
    def fused_moe_kernel(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)

    @triton.jit
    def add_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)

    kernels = {"fused_moe_kernel": (fused_moe_kernel, {"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}, 2),
               "add_kernel": (add_kernel, {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}, 3)}
    for name in sys.argv[1:]:
        fn, sig, block = kernels[name]
        kernel = triton.compile(ASTSource(fn, sig, {(block,): 128}), target=GPUTarget("cuda", 90, 32))
        print("compiled", name, kernel.hash)
""")


def _moe_manifest(path: Path) -> Path:
    """The 0.5.14 server plan (a Triton fused-MoE item), its DeepGEMM kernels and SGLang JIT modules dropped."""
    from dgprecompile.planning.manifest import plan_from_dict
    from dgprecompile.planning.request import plan_from_request

    cmd = "python -m sglang.launch_server --model-path Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8 --tp 8 --ep 8"
    data = plan_from_request(PlanRequest(sglang_cmd=cmd, sglang="0.5.14")).to_dict()
    for shape in data["shapes"]:
        shape["buckets"], shape["aux_kernels"] = [], []
    data["kernels"], data["total_kernels"] = [], 0
    data.pop("sglang_jit_modules", None)
    data.pop("inductor", None)  # the torch.compile items need the job's GPU: tests/test_inductor_graphs.py
    data.pop("flashinfer", None)  # FlashInfer's modules: tests/test_flashinfer_modules.py
    data.pop("triton_path", None)  # the model path's other Triton kernels: tests/test_triton_path.py
    assert data["triton_moe"]
    write_manifest(plan_from_dict(data), path)
    return path


@needs_triton
def test_a_capture_never_files_a_kernel_of_a_planned_family_and_fails_naming_it(job, capfd):
    (job / "child.py").write_text(PLANNED_CHILD)
    _moe_manifest(job / "moe.yaml")
    r = CliRunner().invoke(cli, ["launch", "--manifest", "moe.yaml", "--cache-dir", "cache", "--allow-missing",
                                 "--capture", "--", sys.executable, "child.py", "fused_moe_kernel", "add_kernel"],
                           catch_exceptions=False)
    out = r.output + capfd.readouterr().err
    assert r.exit_code == 1, out
    errors = [line for line in r.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "a capture must never hide a warm's miss" in errors[0], r.output
    assert "fused_moe_kernel" in errors[0] and "hint:" in r.output and "Traceback" not in r.output
    cache = job / "cache"
    left = {p.name: sorted(q.name for q in p.iterdir()) for p in (cache / "triton").iterdir()}
    (entry,) = left  # the planned kernel's entry was removed: a later strict run refuses it by name
    assert "__grp__add_kernel.json" in left[entry]  # the unplanned kernel stays and is filed
    assert [v["entry"] for v in triton_extra(cache).values()] == [entry]

    # without a planned Triton MoE item the same kernel is just another Triton kernel: filed
    r = launch("--capture", ["fused_moe_kernel"])
    assert r.exit_code == 0, r.output
    assert len(triton_extra(cache)) == 2
