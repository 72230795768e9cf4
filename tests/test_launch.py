"""`dgprecompile launch`: environment per profile, preflight, real child processes, signals, misses, strict mode."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import clear_job_env, wait_for

from dgprecompile.cli.main import cli
from dgprecompile.launch.environment import compose_env
from dgprecompile.launch.hook import HOOK_DIR, NVCC_STANDIN
from dgprecompile.launch.preflight import warm_command
from dgprecompile.launch.supervise import run_child
from dgprecompile.planning.manifest import write_manifest
from dgprecompile.planning.plan import PlanRequest
from dgprecompile.planning.profiles import resolve_profile
from dgprecompile.planning.trace import plan_from_calls, read_misses

REPO = Path(__file__).resolve().parent.parent
NVCC = "/usr/local/cuda/bin/nvcc"
DENSE = "GEMM_NT_F8F8BF16"
FP = {"nvcc": {"path": NVCC, "release": "13.0"}, "env": {"DG_JIT_OVERRIDE_CPP_STANDARD": "20"}}


def _plan(sglang: str, n: int = 512):
    return plan_from_calls([{"kernel_type": DENSE, "m": 64, "n": n, "k": 512, "num_groups": 1}],
                           PlanRequest(sglang=sglang))


def _env(sglang, base=None, fingerprint=FP, **kw):
    # only the profile matters here (some profiles have no kernel model to plan calls with)
    plan = dataclasses.replace(_plan("0.5.1"), profile=resolve_profile(sglang).profile)
    return compose_env(plan, "/c/dg", fingerprint, base or {"PATH": "/usr/bin"}, warm_hint="W", **kw)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    clear_job_env(monkeypatch, caches=False)


# ---- environment composition ----------------------------------------------------------------------------


def test_env_legacy_0_5_1():
    le = _env("0.5.1", {"PATH": "/usr/bin", "PYTHONPATH": "/x", "OMP_NUM_THREADS": "4"})
    env = le.env
    assert not le.conflicts
    assert env["SGL_JIT_DEEPGEMM_PRECOMPILE"] == "0"
    assert "SGLANG_JIT_DEEPGEMM_PRECOMPILE" not in env  # 0.5.1 reads only SGL_ names
    assert env["SGL_DG_CACHE_DIR"] == env["DG_JIT_CACHE_DIR"] == "/c/dg"
    assert env["DG_JIT_NVCC_COMPILER"] == NVCC  # the nvcc path is in the legacy key: the warmed one
    assert env["DG_JIT_OVERRIDE_CPP_STANDARD"] == "20"
    assert env["DGPRECOMPILE_STRICT"] == "1" and env["DGPRECOMPILE_GENERATION"] == "legacy"
    assert env["PYTHONPATH"] == HOOK_DIR + os.pathsep + "/x"
    assert env["OMP_NUM_THREADS"] == "4" and "OPENBLAS_NUM_THREADS" not in env  # untouched
    assert {s.name for s in le.settings} >= {"SGL_JIT_DEEPGEMM_PRECOMPILE", "DG_JIT_NVCC_COMPILER", "PYTHONPATH"}


def test_env_both_spellings_for_0_5_4():
    env = _env("0.5.4").env
    assert env["SGL_JIT_DEEPGEMM_PRECOMPILE"] == env["SGLANG_JIT_DEEPGEMM_PRECOMPILE"] == "0"
    assert env["SGL_DG_CACHE_DIR"] == env["SGLANG_DG_CACHE_DIR"] == "/c/dg"


def test_env_cxx_0_5_14_strict_uses_the_nvcc_standin(tmp_path):
    real = tmp_path / "nvcc"
    real.write_text("#!/bin/sh\n")
    real.chmod(0o755)
    le = _env("0.5.14", fingerprint={"nvcc": {"path": str(real)}, "env": {}})
    assert le.env["SGLANG_JIT_DEEPGEMM_PRECOMPILE"] == "0" and "SGL_JIT_DEEPGEMM_PRECOMPILE" not in le.env
    assert le.env["SGLANG_DG_CACHE_DIR"] == "/c/dg"
    assert le.env["DG_JIT_NVCC_COMPILER"] == NVCC_STANDIN
    assert le.env["DGPRECOMPILE_REAL_NVCC"] == str(real)
    # the user's own nvcc is the real one, not overridden silently: it is what the stand-in runs
    le = _env("0.5.14", {"DG_JIT_NVCC_COMPILER": "/opt/cuda/bin/nvcc"}, fingerprint={"env": {}})
    assert le.env["DGPRECOMPILE_REAL_NVCC"] == "/opt/cuda/bin/nvcc" and not le.conflicts
    # non-strict: nvcc untouched, trace on
    le = _env("0.5.14", fingerprint={"env": {}}, strict=False, trace_dir="/t")
    assert "DG_JIT_NVCC_COMPILER" not in le.env and le.env["DGPRECOMPILE_TRACE_DIR"] == "/t"


@pytest.mark.parametrize("sglang, base, needle", [
    ("0.5.1", {"SGL_JIT_DEEPGEMM_PRECOMPILE": "1"}, "SGL_JIT_DEEPGEMM_PRECOMPILE='1' is set"),
    ("0.5.14", {"SGL_JIT_DEEPGEMM_PRECOMPILE": "true"}, "copies it onto SGLANG_JIT_DEEPGEMM_PRECOMPILE"),
    ("0.5.1", {"SGL_DG_CACHE_DIR": "/elsewhere"}, "SGL_DG_CACHE_DIR='/elsewhere' is set"),
    ("0.5.14", {"SGL_DG_CACHE_DIR": "/elsewhere"}, "copies it onto SGLANG_DG_CACHE_DIR"),
    ("0.5.1", {"DG_JIT_NVCC_COMPILER": "/other/nvcc"}, "nvcc path is part of its cache key"),
    ("0.5.1", {"DG_JIT_OVERRIDE_CPP_STANDARD": "17"}, "recorded in the cache fingerprint"),
    ("0.5.1", {"DG_JIT_PTXAS_VERBOSE": "1"}, "warmed without it"),
    ("0.5.1", {"SGL_DG_USE_NVRTC": "1"}, "NVRTC"),
])
def test_env_refuses_to_override_what_the_user_set(sglang, base, needle):
    le = _env(sglang, {"PATH": "/usr/bin", **base})
    assert any(needle in c for c in le.conflicts), le.conflicts


def test_env_keeps_equivalent_user_values():
    le = _env("0.5.1", {"SGL_JIT_DEEPGEMM_PRECOMPILE": "false", "SGL_DG_CACHE_DIR": "/c/dg/"})
    assert not le.conflicts
    assert le.env["SGL_JIT_DEEPGEMM_PRECOMPILE"] == "false"
    assert [s.kept for s in le.settings if s.name == "SGL_JIT_DEEPGEMM_PRECOMPILE"] == [True]


def test_warm_command():
    plan = _plan("0.5.1")
    assert warm_command(plan, "/c", "plan.yaml").endswith(f"--manifest {os.path.abspath('plan.yaml')} --cache-dir /c")
    cmd = warm_command(plan, "/c", model_arg="Qwen3-Coder-480B")
    assert "--model Qwen3-Coder-480B" in cmd and "--sglang 0.5.0-0.5.1" in cmd and "--num-sms 132" in cmd


# ---- real child processes: exit codes and signals -------------------------------------------------------


def test_exit_code_passes_through():
    assert run_child([sys.executable, "-c", "import sys; sys.exit(7)"], os.environ) == 7
    assert run_child([sys.executable, "-c", "pass"], os.environ) == 0
    assert run_child([sys.executable, "-c", "import os; os.kill(os.getpid(), 9)"], os.environ) == 128 + 9


TRAPPER = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    out = sys.argv[1]
    def trap(sig, _):
        open(os.path.join(out, f"{os.getpid()}.{sig}"), "w").close()
        sys.exit(40 + (sig % 20))
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, trap)
    if len(sys.argv) > 2:  # like torchrun: a worker in its own session, which only our /proc walk reaches
        subprocess.Popen([sys.executable, __file__, out], start_new_session=True)
    open(os.path.join(out, f"ready.{os.getpid()}"), "w").close()
    while True:
        time.sleep(0.05)
""")


def _launcher(tmp_path: Path, *child_args: str) -> subprocess.Popen:
    script = tmp_path / "trap.py"
    script.write_text(TRAPPER)
    code = ("import os, sys; from dgprecompile.launch.supervise import run_child; "
            f"sys.exit(run_child([sys.executable, {str(script)!r}, {str(tmp_path)!r}, *{list(child_args)!r}], "
            "os.environ))")
    return subprocess.Popen([sys.executable, "-c", code], cwd=REPO)



@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_signals_reach_the_whole_job_and_its_code_comes_back(tmp_path, sig):
    proc = _launcher(tmp_path, "spawn-worker")
    assert wait_for(lambda: len(list(tmp_path.glob("ready.*"))) == 2), "child and worker did not start"
    proc.send_signal(sig)
    assert proc.wait(timeout=20) == 128 + sig  # the signal's code, as a shell reports it (the job exited 40+)
    got = list(tmp_path.glob(f"*.{int(sig)}"))
    assert wait_for(lambda: len(list(tmp_path.glob(f"*.{int(sig)}"))) == 2), got  # child and worker both


def test_child_killed_by_a_signal_gives_128_plus_n(tmp_path):
    script = tmp_path / "sleep.py"
    script.write_text("import time\nopen(__file__ + '.ready', 'w').close()\ntime.sleep(60)\n")
    code = (f"import os, sys; from dgprecompile.launch.supervise import run_child; "
            f"sys.exit(run_child([sys.executable, {str(script)!r}], os.environ))")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO)
    assert wait_for(lambda: Path(str(script) + ".ready").exists())
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 128 + signal.SIGTERM


# ---- the CLI: preflight, conflicts, non-strict misses ----------------------------------------------------


def _invoke(*args, env=None):
    return CliRunner().invoke(cli, [str(a) for a in args], env=env, catch_exceptions=False)


def test_preflight_refuses_and_names_missing_kernels_and_the_warm_command(tmp_path):
    plan = _plan("0.5.1")
    write_manifest(plan, tmp_path / "plan.yaml")
    r = _invoke("launch", "--manifest", tmp_path / "plan.yaml", "--cache-dir", tmp_path / "empty", "--",
                sys.executable, "-c", "print('RAN')")
    assert r.exit_code == 1
    assert "RAN" not in r.output
    assert next(iter(plan.kernels)) in r.output
    assert "dgprecompile warm --manifest" in r.output and "--allow-missing" in r.output


def test_allow_missing_starts_and_passes_the_exit_code(tmp_path):
    write_manifest(_plan("0.5.1"), tmp_path / "plan.yaml")
    r = _invoke("launch", "--manifest", tmp_path / "plan.yaml", "--cache-dir", tmp_path / "c", "--allow-missing",
                "--", sys.executable, "-c", "import sys; sys.exit(7)")
    assert r.exit_code == 7
    assert "starting anyway" in r.output


def test_conflicting_user_env_refuses_to_start(tmp_path):
    write_manifest(_plan("0.5.1"), tmp_path / "plan.yaml")
    r = _invoke("launch", "--manifest", tmp_path / "plan.yaml", "--cache-dir", tmp_path / "c", "--allow-missing",
                "--", sys.executable, "-c", "print('RAN')", env={"SGL_JIT_DEEPGEMM_PRECOMPILE": "1"})
    assert r.exit_code == 2 and "RAN" not in r.output
    assert "SGL_JIT_DEEPGEMM_PRECOMPILE='1' is set" in r.output


def test_no_command_is_a_usage_error(tmp_path):
    write_manifest(_plan("0.5.1"), tmp_path / "plan.yaml")
    assert _invoke("launch", "--manifest", tmp_path / "plan.yaml").exit_code == 2


FAKE_DG = textwrap.dedent("""
    # a stand-in deep_gemm with the legacy API, for tracing tests (shadows the real one in the child only)
    def gemm_fp8_fp8_bf16_nt(lhs, rhs, out):
        return None
""")

CHILD = textwrap.dedent("""
    import os, sys
    class T:
        def __init__(self, *shape): self.shape = shape
    from deep_gemm import gemm_fp8_fp8_bf16_nt as g   # bound at import, as sglang does
    for n in (512, 1024, 1024):
        g((T(64, 512), None), (T(n, 512), None), None)
    os.makedirs(os.path.join(os.environ["DG_JIT_CACHE_DIR"], "cache", "kernel.new.1"))  # a runtime compile
    print("child saw", os.environ["SGL_JIT_DEEPGEMM_PRECOMPILE"], os.environ["DGPRECOMPILE_TRACE_DIR"] != "")
    sys.exit(3)
""")


def test_no_strict_reports_new_entries_and_writes_a_misses_file_warm_accepts(tmp_path, monkeypatch):
    (tmp_path / "fake" / "deep_gemm").mkdir(parents=True)
    (tmp_path / "fake" / "deep_gemm" / "__init__.py").write_text(FAKE_DG)
    (tmp_path / "child.py").write_text(CHILD)
    write_manifest(_plan("0.5.1"), tmp_path / "plan.yaml")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "fake"))
    monkeypatch.chdir(tmp_path)
    r = _invoke("launch", "--manifest", "plan.yaml", "--cache-dir", "cache", "--allow-missing", "--no-strict",
                "--trace", "traces", "--", sys.executable, "child.py")
    assert r.exit_code == 3, r.output
    assert "kernel.new.1" in r.output
    header, calls = read_misses(tmp_path / "dgprecompile-misses.jsonl")
    assert header["new_entries"] == ["kernel.new.1"] and header["sglang_profile"] == "0.5.0-0.5.1"
    assert [(c.n, c.count) for c in calls] == [(1024, 2)]  # n=512 is in the plan
    assert list((tmp_path / "traces").glob("trace-rank0-*.jsonl"))
    r = _invoke("plan", "--from-trace", "traces", "--sglang", "0.5.1", "--format", "json")
    assert r.exit_code == 0 and '"n": 1024' in r.output


def _have_legacy_toolchain() -> bool:
    from dgprecompile.host.toolchain import find_deepgemm

    install = find_deepgemm()
    return os.access(NVCC, os.X_OK) and install is not None and install.generation == "legacy"


LEGACY_CHILD = textwrap.dedent("""
    import sys, time
    import torch.utils.cpp_extension as c
    c.CUDA_HOME = c.CUDA_HOME or "/usr/local/cuda"   # a CPU torch build reports none
    from deep_gemm.jit import build
    from deep_gemm.jit_kernels.runtime import FP8GemmRuntime, GemmType
    from dgprecompile.planning.heuristics.legacy import LegacyHeuristic, template_kwargs
    from dgprecompile.runtimes.items import KernelType
    spec = LegacyHeuristic().kernel(KernelType.GEMM_NT_F8F8BF16, 64, int(sys.argv[1]), 512, 1, 132)
    kw = template_kwargs(spec)
    kw["GEMM_TYPE"] = GemmType[kw["GEMM_TYPE"]]
    t = time.perf_counter()
    runtime = build("gemm_fp8_fp8_bf16_nt", FP8GemmRuntime.generate(kw), FP8GemmRuntime, kw)
    print(f"BUILT {runtime.path} in {time.perf_counter() - t:.3f}s")
""")


@pytest.mark.nvcc
@pytest.mark.skipif(not _have_legacy_toolchain(), reason="needs nvcc and the legacy DeepGEMM")
def test_legacy_strict_hook_for_real(tmp_path, monkeypatch):
    """A real legacy-warmed cache: a cached kernel builds without compiling, an uncached one fails with our
    message, and the cache is left as it was."""
    from dgprecompile.compile.warm import run_warm
    from dgprecompile.compile.warm_setup import WarmOptions, prepare_warm

    plan = _plan("0.5.1", n=512)
    write_manifest(plan, tmp_path / "plan.yaml")
    cache = tmp_path / "cache"
    result = run_warm(prepare_warm(plan, WarmOptions(cache_dir=str(cache), nvcc=NVCC, jobs=1)))
    assert result.ok and len(result.compiled) == 1
    entries = sorted(p.name for p in (cache / "cache").iterdir())
    (tmp_path / "child.py").write_text(LEGACY_CHILD)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    base = ["launch", "--manifest", tmp_path / "plan.yaml", "--cache-dir", cache, "--", sys.executable,
            tmp_path / "child.py"]

    def run(n):
        cmd = [sys.executable, "-m", "dgprecompile", *map(str, base), str(n)]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)

    hit = run(512)
    assert hit.returncode == 0, hit.stderr
    assert f"BUILT {cache}/cache/{entries[0]}" in hit.stdout
    miss = run(1024)
    assert miss.returncode == 1
    assert "BUILT" not in miss.stdout
    assert "dgprecompile strict mode: DeepGEMM tried to compile kernel gemm_fp8_fp8_bf16_nt:TNormal.N1024" in miss.stderr
    assert "RuntimeError" in miss.stderr and "is not in the plan" in miss.stderr
    assert "strict mode refused 1 runtime compile" in miss.stderr
    assert sorted(p.name for p in (cache / "cache").iterdir()) == entries  # no stray empty entry left


@pytest.mark.nvcc
@pytest.mark.skipif(not _have_legacy_toolchain(), reason="needs nvcc and the legacy DeepGEMM")
def test_warm_from_misses_compiles_the_missed_calls(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    plan = _plan("0.5.1", n=512)
    from dgprecompile.planning.trace import Call, find_misses, write_misses
    from dgprecompile.runtimes.items import KernelType

    misses = find_misses(plan, [Call(KernelType.GEMM_NT_F8F8BF16, 64, 1024, 512, 1, 2)])
    write_misses(tmp_path / "m.jsonl", plan, misses, {})
    r = _invoke("warm", "--from-misses", "m.jsonl", "--cache-dir", "c", "--nvcc", NVCC, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output[r.output.index("{"):])["compiled"] == 1


def test_standin_nvcc_passes_version_and_refuses_compiles(tmp_path):
    real = tmp_path / "realnvcc"
    real.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.88'\n")
    real.chmod(0o755)
    cu = tmp_path / "kernel.abc" / "kernel.cu"
    cu.parent.mkdir()
    cu.write_text("auto ptr = reinterpret_cast<void*>(&sm90_fp8_gemm_1d2d_impl<0, 0, 64, 16>);\n")
    env = {**os.environ, "DGPRECOMPILE_REAL_NVCC": str(real), "DGPRECOMPILE_PYTHON": sys.executable,
           "DGPRECOMPILE_WARM_HINT": "dgprecompile warm --manifest P", "DGPRECOMPILE_EVENTS": str(tmp_path / "ev")}
    v = subprocess.run([NVCC_STANDIN, "--version"], env=env, capture_output=True, text=True)
    assert v.returncode == 0 and "release 13.0" in v.stdout
    c = subprocess.run([NVCC_STANDIN, str(cu), "-o", str(tmp_path / "x.cubin"), "-O3"], env=env,
                       capture_output=True, text=True)
    assert c.returncode == 97
    assert "sm90_fp8_gemm_1d2d_impl<0, 0, 64, 16>" in c.stderr and "kernel.abc" in c.stderr
    assert "dgprecompile warm --manifest P" in c.stderr
    assert json.loads((tmp_path / "ev").read_text())["event"] == "refused"
    assert not (tmp_path / "x.cubin").exists()


def test_sitecustomize_chains_to_the_next_one(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os\nos.environ['CHAINED'] = 'yes'\n")
    env = {**os.environ, "PYTHONPATH": HOOK_DIR + os.pathsep + str(other), "DGPRECOMPILE_TRACE_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", "import os, sys; print(os.environ.get('CHAINED'), "
                          "any(type(f).__name__ == 'PostImportFinder' for f in sys.meta_path))"],
                         env=env, capture_output=True, text=True)
    assert out.stdout.split() == ["yes", "True"], out.stderr
    shutil.rmtree(other)


def test_standin_trainer_cli_and_gpu_guard(tmp_path):
    script = REPO / "tests" / "gpu" / "standin_trainer.py"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    h = subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True, env=env)
    assert h.returncode == 0 and "STAND-IN" not in h.stdout and "--manifest" in h.stdout
    bad = subprocess.run([sys.executable, script, "--manifest", "m.yaml", "--steps", "0"], capture_output=True,
                         text=True, env=env)
    assert bad.returncode == 2 and "--steps must be at least 1" in bad.stderr
    missing = subprocess.run([sys.executable, script, "--manifest", tmp_path / "nope.yaml"], capture_output=True,
                             text=True, env=env)
    assert missing.returncode == 2 and "manifest not found" in missing.stderr
    write_manifest(_plan("0.5.1"), tmp_path / "plan.yaml")
    torch = pytest.importorskip("torch", reason="torch is not installed (make setup)")
    if torch.cuda.is_available():  # its GPU behaviour is proved by tests/gpu/test_launch_gpu.py
        pytest.skip("the no-GPU guard cannot be exercised on a GPU machine")
    run = subprocess.run([sys.executable, script, "--manifest", tmp_path / "plan.yaml", "--steps", "3"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 2
    assert "needs a CUDA GPU" in run.stderr



def test_the_closing_line_names_each_refused_compile_once_with_its_count():
    """An inductor graph refused at every m carries Dynamo's compile id in each refusal: the closing line names it
    once with its count, so the other families' names (a DeepGEMM kernel) are not pushed out of the line."""
    from dgprecompile.cli.launch import refused_names

    graph = "get_masked_input_and_mask (vocab_parallel_embedding.py:135)"
    refusals = ([{"kernel": f"{graph} [compile id 0/{i}]"} for i in range(180)] + [{"kernel": "fused_moe_kernel"}] * 3
                + [{"kernel": "sm90_fp8_gemm_1d2d_impl<0, 0, 64, 16>"}])
    assert refused_names(refusals) == (f"fused_moe_kernel (x3), {graph} (x180), "
                                       "sm90_fp8_gemm_1d2d_impl<0, 0, 64, 16>")
    many = [{"kernel": f"k{i:02d}"} for i in range(12)]
    assert refused_names(many).endswith("k09, and 2 more")
