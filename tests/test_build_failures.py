"""A failed build says why (compile/build_log.py, compile/build_needs.py, data/build_needs.yaml): the compiler's first
error lines in warm's failure line and in --json, the whole log kept in the cache's log folder, a hint for a known
cause; and a plan whose builds lack a piece refused before anything compiles (--keep-going builds what it can).

Everything here is real: gcc and nvcc failing on real sources, FlashInfer's own builder (flashinfer-python 0.6.12
and 0.7.2 beside the venv) building its ``sampling`` module, whose sources include cuRAND's headers. This machine's
CUDA 13.0 toolkit has none: the refusal is tested as a user meets it, and the GPU-free build of ``sampling`` is
tested with the nvidia-curand wheel's headers (beside the venv, `make setup`) given to FlashInfer's build through
FLASHINFER_EXTRA_CUDAFLAGS, the variable the hint names."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import (
    NVCC,
    STANDINS,
    beside_venv,
    needs_dg013,
    needs_legacy,
    needs_nvcc,
    needs_sgl014,
    sglang_014_dir,
)

from dgprecompile.compile.build_log import describe, first_errors, log_path
from dgprecompile.compile.build_needs import check, include_dirs
from dgprecompile.planning.manifest import plan_from_dict, write_manifest
from dgprecompile.planning.plan import PlanRequest
from dgprecompile.planning.server_plan import plan_from_server

REPO = Path(__file__).resolve().parent.parent
QWEN = "python -m sglang.launch_server --model-path Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8 --tp 8 --ep 8"
PINS = {"0.6.12": "0.5.14", "0.7.2": "0.5.23"}  # flashinfer-python -> the sglang release that pins it
FLASHINFER = {v: beside_venv(f"flashinfer-{v}", "flashinfer/__init__.py") for v in PINS}
DEEP_GEMM = {"0.6.12": beside_venv("sgl-deep-gemm-0.1.3", "deep_gemm/include/deep_gemm"),
             "0.7.2": beside_venv("sgl-deep-gemm-0.2.3.post2", "deep_gemm/include/deep_gemm")}
# the nvidia-curand wheel for CUDA 13 (`make setup`): cuRAND's headers for FlashInfer's sampling module
CURAND = beside_venv("nvidia-curand-10.4.0.35", "nvidia/cu13/include/curand.h")
CURAND_INCLUDE = os.path.join(CURAND, "nvidia", "cu13", "include") if CURAND else None
TOOLKIT = Path(NVCC).resolve().parent.parent


# ---- the one extractor, on real compilers' output ------------------------------------------------------------


def _gcc(tmp_path: Path, source: str) -> str:
    gcc = shutil.which("gcc") or pytest.skip("no gcc")
    src = tmp_path / "broken.c"
    src.write_text(source)
    res = subprocess.run([gcc, "-c", str(src), "-o", str(tmp_path / "broken.o")], capture_output=True, text=True)
    assert res.returncode != 0
    return res.stdout + res.stderr


def test_first_errors_are_the_compilers_own_lines_trimmed(tmp_path):
    text = _gcc(tmp_path, "#include <no_such_header_dgp.h>\nint main(void) { return 0; }\n")
    errors = first_errors("RuntimeError: Ninja build failed. Ninja output:\n[1/2] gcc ...\nFAILED: x.o\n" + text
                          + "ninja: build stopped: subcommand failed.\n")
    # the compiler's line, its absolute path cut to the last two components; not ninja's or Python's words
    assert errors == [f"{tmp_path.name}/broken.c:1:10: fatal error: no_such_header_dgp.h: No such file or directory"]
    two = first_errors(_gcc(tmp_path, "int f(void) { return undeclared_a; }\nint g(void) { return undeclared_b; }\n"))
    assert len(two) == 2 and "undeclared_a" in two[0] and "undeclared_b" in two[1] and "error:" in two[0]
    # no compiler line: the Python exception that ended it (the first raised), else the last line printed
    assert first_errors("Traceback (most recent call last):\n  x\nModuleNotFoundError: No module named 'torchvision'"
                        ) == ["ModuleNotFoundError: No module named 'torchvision'"]
    assert first_errors("something\nwent wrong\n") == ["went wrong"]


def test_describe_keeps_the_whole_log_and_names_known_causes(tmp_path):
    text = "exited with code 1:\n" + _gcc(tmp_path, "#include <curand.h>\n")
    failure = describe(text, tmp_path / "cache", "flashinfer:sampling@0.6.12.sm90a", "0.5.14")
    assert failure.summary.startswith("exited with code 1: ") and "fatal error: curand.h" in failure.summary
    assert failure.log == str(log_path(tmp_path / "cache", "flashinfer:sampling@0.6.12.sm90a"))
    assert Path(failure.log).read_text() == text + ("" if text.endswith("\n") else "\n")
    assert Path(failure.log).parent == tmp_path / "cache" / "dgprecompile" / "logs"
    assert "cuRAND headers" in failure.hint and "FLASHINFER_EXTRA_CUDAFLAGS" in failure.hint
    assert "nvidia-curand" in failure.hint
    missing = describe("worker exited with code 3\nModuleNotFoundError: No module named 'torchvision.ops'", None,
                       "sglang-jit:x", "0.5.14")
    assert missing.log is None  # no cache root: nothing kept
    assert "install torchvision" in missing.hint and "sglang 0.5.14" in missing.hint


@pytest.mark.parametrize("version", list(PINS))
def test_the_data_files_headers_are_the_ones_flashinfers_sampling_includes(version):
    """data/build_needs.yaml's headers of ``sampling``: exactly the toolkit headers the real wheel's sources include
    (the ones not in FlashInfer's own include folder), each with its component and what ships it."""
    import re

    from dgprecompile.compile.build_log import facts

    if FLASHINFER[version] is None:
        pytest.skip(f"flashinfer-python {version} beside the venv (make setup)")
    data = Path(FLASHINFER[version]) / "flashinfer" / "data"
    sources = [data / "include" / "flashinfer" / "sampling.cuh",
               *(data / "csrc" / n for n in ("sampling.cu", "renorm.cu", "flashinfer_sampling_binding.cu"))]
    included = {h for src in sources for h in re.findall(r"^#include <(cu(?:rand|blas)\w*\.h)>", src.read_text(), re.M)}
    wanted = facts()["families"]["flashinfer-module"]["modules"]["sampling"]
    assert included == set(wanted), included
    assert all(facts()["headers"][h]["component"] == "cuRAND headers" for h in wanted)


def _toolkit_headers(sources: list[Path], roots: list[Path]) -> set[str]:
    """The cuRAND / cuBLAS headers ``sources`` reach, following every #include that resolves inside ``roots`` (the
    wheel's own folders) or beside the including file; bounded by the wheel's files."""
    import re

    seen: set[Path] = set()
    todo, found = list(sources), set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in re.findall(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', path.read_text(errors="replace"), re.M):
            hit = next((c for c in (path.parent / name, *(r / name for r in roots)) if c.is_file()), None)
            if hit is not None:
                todo.append(hit.resolve())
            elif re.fullmatch(r"cu(?:rand|blas)\w*\.h", name):
                found.add(name)
    return found


@pytest.mark.parametrize("version", list(PINS))
def test_the_data_files_headers_are_the_ones_deepseeks_routing_module_reaches(version):
    """dsv3_fused_routing (DeepSeek-V3's FlashInfer routing): its sources (flashinfer/jit/dsv3_optimizations.py) reach
    cuBLAS and cuRAND headers through nv_internal; the data file lists exactly those, so warm refuses before
    compiling on a machine without them (a DeepSeek-V3 carry build here failed in nvcc on cublasLt.h before)."""
    from dgprecompile.compile.build_log import facts

    if FLASHINFER[version] is None:
        pytest.skip(f"flashinfer-python {version} beside the venv (make setup)")
    csrc = Path(FLASHINFER[version]) / "flashinfer" / "data" / "csrc"
    nv = csrc / "nv_internal"
    sources = [csrc / "fused_moe" / "noAuxTcKernels.cu",
               *(nv / "cpp" / "common" / n for n in ("envUtils.cpp", "logger.cpp", "stringUtils.cpp",
                                                      "tllmException.cpp", "memoryUtils.cu"))]
    roots = [csrc.parent / "include", csrc, nv, nv / "include", nv / "tensorrt_llm" / "cutlass_extensions" / "include",
             nv / "tensorrt_llm" / "kernels" / "cutlass_kernels" / "include",
             nv / "tensorrt_llm" / "kernels" / "cutlass_kernels"]
    family = facts()["families"]["flashinfer-module"]
    modules, cxx = family["modules"], family["cxx_headers"]
    assert _toolkit_headers(sources, roots) == set(modules["dsv3_fused_routing"])
    # its C++ sources (c++ compiles them with FLASHINFER_EXTRA_CFLAGS) reach the cuBLAS ones
    assert _toolkit_headers([s for s in sources if s.suffix == ".cpp"], roots) == set(cxx["dsv3_fused_routing"])
    assert modules["dsv3_fused_routing_cake"] == modules["dsv3_fused_routing"]
    assert cxx["dsv3_fused_routing_cake"] == cxx["dsv3_fused_routing"]
    assert facts()["headers"]["cublasLt.h"]["component"] == "cuBLAS headers"


def test_the_routing_modules_cuda_and_cxx_headers_are_looked_for_where_each_compiler_looks(tmp_path):
    """cuBLAS given to nvcc only (FLASHINFER_EXTRA_CUDAFLAGS, as the sampling module's cuRAND is) is not enough for
    DeepSeek's routing: its C++ sources take FLASHINFER_EXTRA_CFLAGS; refused naming that, then found there."""
    from types import SimpleNamespace

    from dgprecompile.compile.build_needs import check

    if any((Path(d) / "cublasLt.h").is_file() for d in ("/usr/include", "/usr/local/include")):
        pytest.skip("this machine's system include folder has cuBLAS: every compile finds it")
    inc = tmp_path / "inc"
    inc.mkdir()
    for h in ("cublasLt.h", "cublas_v2.h", "curand_kernel.h"):
        (inc / h).write_text("/* a test's header */\n")
    item = SimpleNamespace(id="flashinfer:dsv3_fused_routing@0.6.12.sm90a", module="dsv3_fused_routing")
    toolkit = tmp_path / "toolkit"  # a toolkit folder without these headers
    (toolkit / "include").mkdir(parents=True)
    base = {"PATH": os.environ["PATH"], "CXX": "c++"}
    missing = check([("flashinfer-module", [item])], str(toolkit), {**base, "FLASHINFER_EXTRA_CUDAFLAGS": f"-I{inc}"})
    lines = [m.line() for m in missing]
    assert len(lines) == 1 and "cublasLt.h, cublas_v2.h (its C++ sources: FLASHINFER_EXTRA_CFLAGS)" in lines[0], lines
    assert "FLASHINFER_EXTRA_CFLAGS" in missing[0].hint
    assert check([("flashinfer-module", [item])], str(toolkit),
                 {**base, "FLASHINFER_EXTRA_CUDAFLAGS": f"-I{inc}", "FLASHINFER_EXTRA_CFLAGS": f"-I {inc}"}) == []


def test_the_check_names_each_missing_program_and_honours_the_builders_variables(tmp_path):
    from dgprecompile.runtimes.items import FlashInferItem

    item = FlashInferItem("sampling", "flashinfer.jit.sampling:gen_sampling_module", "0.6.12", "9.0a", "a test's")
    bare = tmp_path / "bin"  # a PATH holding only a C++ compiler: no ninja
    bare.mkdir()
    (bare / "c++").symlink_to(shutil.which("c++") or pytest.skip("no c++"))
    curand = tmp_path / "inc"
    curand.mkdir()
    for h in ("curand.h", "curand_kernel.h", "curand_philox4x32_x.h"):
        (curand / h).write_text("/* a test's header */\n")
    env = {"PATH": str(bare), "FLASHINFER_EXTRA_CUDAFLAGS": f"-O3 -I {curand}"}
    missing = check([("flashinfer-module", [item]), ("sglang-jit", [item])], str(TOOLKIT), env)
    assert [m.what for m in missing] == ["FlashInfer's ninja build: ninja not found on PATH",
                                         "SGLang's JIT builders: ninja not found on PATH"]
    assert all(m.items == (item.id,) for m in missing)  # the headers were found through FlashInfer's variable
    # the compiler the builders' CXX names is the one looked for; the headers are looked for where nvcc would
    env = {"PATH": str(bare) + os.pathsep + os.path.dirname(shutil.which("ninja") or pytest.skip("no ninja")),
           "CXX": "/no/such/g++ -O2"}
    missing = check([("flashinfer-module", [item])], str(TOOLKIT), env)
    assert missing[0].what == "FlashInfer's ninja build: /no/such/g++ ($CXX) not found on PATH"
    if not any((d / "curand.h").is_file() for d in include_dirs(str(TOOLKIT), {})):  # a toolkit without cuRAND
        assert missing[1].what.startswith("sampling includes curand.h")  # no FLASHINFER_EXTRA_CUDAFLAGS this time
    assert check([("flashinfer-module", [item])], str(TOOLKIT), {**env, "CXX": "c++", "CPATH": str(curand)}) == []


def test_a_triton_chunks_and_a_dead_workers_failures_carry_everything_they_printed(tmp_path):
    from dgprecompile.compile.triton_chunks import parse_report
    from dgprecompile.compile.warm_pool import _worker_death
    from dgprecompile.errors import CompileFailed

    printed = "Traceback (most recent call last):\n  ...\n" + _gcc(tmp_path, "int f(void) { return nope; }\n") + \
        "subprocess.CalledProcessError: Command '['/usr/bin/gcc', ...]' returned non-zero exit status 1.\n"
    log = tmp_path / "chunk.log"
    log.write_text(printed)
    with pytest.raises(CompileFailed) as exc:
        parse_report("moe#1/2", 1, "", log)
    failure = describe(exc.value.message, tmp_path / "cache", "triton_moe:x", None)
    assert failure.summary.startswith("python -m dgprecompile.compile.triton_moe exited with code 1 for moe#1/2: ")
    assert "nope" in failure.errors[0] and "error:" in failure.errors[0] and failure.errors[0] in failure.summary
    assert Path(failure.log).read_text().rstrip("\n").endswith(printed.rstrip("\n"))
    dead = describe(_worker_death(-9, log), None, "k", None)
    assert dead.summary.startswith("worker killed by signal 9 while compiling it: ") and "nope" in dead.errors[0]


# ---- a DeepGEMM kernel failing in real nvcc --------------------------------------------------------------------


@needs_legacy
@needs_nvcc
@pytest.mark.nvcc
def test_a_real_nvcc_failure_shows_its_first_error_line_and_keeps_the_log(tmp_path):
    from dgprecompile.planning.request import plan_from_request

    data = plan_from_request(PlanRequest(model="Qwen3-Coder-480B", tp=8, ep=8, sglang="0.5.1")).to_dict()
    shape = min(data["shapes"], key=lambda s: (s["kernels"], s["n"] * s["k"]))
    victim = shape["buckets"][0]["kernel"]
    shape["buckets"] = shape["buckets"][:1]
    data["shapes"], data["kernels"], data["total_kernels"] = [shape], [k for k in data["kernels"]
                                                                       if k["id"] == victim], 1
    manifest = tmp_path / "plan.yaml"
    write_manifest(plan_from_dict(data), manifest)
    bad = tmp_path / "bad.h"
    bad.write_text("// dgprecompile test: a header real nvcc cannot compile\nint injected_by_the_test = ;\n")
    fake = tmp_path / "nvcc"  # a STAND-IN wrapper: the real nvcc, made to pre-include a broken header
    fake.write_text(f'#!/bin/sh\ncase "$*" in *--version*) exec {NVCC} "$@";; esac\n'
                    f'exec {NVCC} --pre-include {bad} "$@"\n')
    fake.chmod(0o755)
    cache = tmp_path / "dg"
    res = subprocess.run([sys.executable, "-m", "dgprecompile", "warm", "--manifest", str(manifest), "--cache-dir",
                          str(cache), "--nvcc", str(fake), "--json"], capture_output=True, text=True, timeout=600)
    assert res.returncode == 4, res.stdout + res.stderr
    details = json.loads(res.stdout)["failure_details"][victim]
    # nvcc's front end names the broken line: the first error line, in --json and in warm's failure line
    first = f"{tmp_path.name}/bad.h(2): error: expected an expression"  # the legacy JIT's prefix cut off
    assert details["errors"][0] == first, details
    assert f"failed: {victim}: {first}" in res.stderr, res.stderr
    assert f"log: {details['log']}" in res.stderr
    log = Path(details["log"])
    assert log.parent == cache / "dgprecompile" / "logs" and "int injected_by_the_test = ;" in log.read_text()
    assert "Traceback" not in res.stderr


# ---- one of SGLang's tvm-ffi JIT modules failing in real nvcc -------------------------------------------------


@needs_nvcc
@needs_sgl014
@needs_dg013
def test_an_sglang_jit_module_failing_in_nvcc_shows_its_first_error_line(tmp_path):
    """sglang 0.5.14's own builder (tvm-ffi's ninja, $CUDA_HOME/bin/nvcc) with a toolkit whose nvcc is a STAND-IN
    wrapper of the real one that pre-includes a broken header: the real nvcc's error line comes back through the
    worker, not tvm-ffi's "ninja exited with status 1"."""
    from dgprecompile.planning.request import plan_from_request

    data = plan_from_request(PlanRequest(model="Qwen3-Coder-480B", tp=8, ep=8, sglang="0.5.14",
                                         moe_runner_backend="deep_gemm")).to_dict()
    for shape in data["shapes"]:
        shape["buckets"], shape["aux_kernels"] = [], []
    data["kernels"], data["total_kernels"] = [], 0
    data["sglang_jit_modules"] = data["sglang_jit_modules"][:1]
    victim = data["sglang_jit_modules"][0]["id"]
    for section in ("inductor", "flashinfer", "triton_moe", "triton_path"):
        data.pop(section, None)
    manifest = tmp_path / "plan.yaml"
    write_manifest(plan_from_dict(data), manifest)
    toolkit = tmp_path / "cuda"  # the real toolkit's folders, its bin/nvcc a wrapper
    (toolkit / "bin").mkdir(parents=True)
    for entry in TOOLKIT.iterdir():
        if entry.name != "bin":
            (toolkit / entry.name).symlink_to(entry)
    bad = tmp_path / "bad.h"
    bad.write_text("// dgprecompile test: a header real nvcc cannot compile\nint injected_by_the_test = ;\n")
    nvcc = toolkit / "bin" / "nvcc"
    nvcc.write_text(f'#!/bin/sh\ncase "$*" in *--version*) exec {TOOLKIT}/bin/nvcc "$@";; esac\n'
                    f'exec {TOOLKIT}/bin/nvcc --pre-include {bad} "$@"\n')
    nvcc.chmod(0o755)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([sglang_014_dir(), STANDINS, DEEP_GEMM["0.6.12"], str(REPO)]),
           "CUDA_HOME": str(toolkit)}
    res = subprocess.run([sys.executable, "-m", "dgprecompile", "warm", "--manifest", str(manifest), "--cache-dir",
                          str(tmp_path / "c"), "--nvcc", NVCC, "--sglang-jit", "on", "--json"], capture_output=True,
                         text=True, env=env, timeout=900)
    assert res.returncode == 4, res.stdout + res.stderr
    details = json.loads(res.stdout)["failure_details"][victim]
    first = f"{tmp_path.name}/bad.h(2): error: expected an expression"
    assert details["errors"][0] == first, details
    assert f"failed: {victim}: {first}" in res.stderr and "ninja exited with status" in Path(details["log"]).read_text()


# ---- FlashInfer's sampling module: refused without cuRAND, built with it -------------------------------------


def _missing(version: str) -> str | None:
    if FLASHINFER[version] is None or sglang_014_dir() is None or DEEP_GEMM[version] is None:
        return f"flashinfer-python {version}, sglang 0.5.14 and its sgl-deep-gemm beside the venv (make setup)"
    return None if os.path.exists(NVCC) else "nvcc (make setup)"


def _env(version: str, curand: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLASHINFER_", "DGPRECOMPILE_"))}
    env.update({"PYTHONPATH": os.pathsep.join([FLASHINFER[version], sglang_014_dir(), DEEP_GEMM[version], str(REPO)]),
                "CUDA_VISIBLE_DEVICES": "", "PATH": os.path.dirname(NVCC) + os.pathsep + os.environ.get("PATH", "")})
    for var in ("CUDA_HOME", "CUDA_PATH", "CPATH", "CPLUS_INCLUDE_PATH"):
        env.pop(var, None)
    if curand:
        env["FLASHINFER_EXTRA_CUDAFLAGS"] = f"-I{CURAND_INCLUDE}"
    return env


def _sampling_plan(tmp_path: Path, version: str) -> Path:
    """The README's server plan for the sglang release that pins ``version``, trimmed (a test's cut) to FlashInfer's
    sampling module."""
    data = plan_from_server(PlanRequest(sglang_cmd=QWEN, sglang=PINS[version], sglang_precompile=False)).to_dict()
    for shape in data["shapes"]:
        shape["buckets"], shape["aux_kernels"] = [], []
    data["kernels"], data["total_kernels"] = [], 0
    for section in ("sglang_jit_modules", "triton_moe", "inductor", "triton_path"):
        data.pop(section, None)
    data["flashinfer"] = [it for it in data["flashinfer"] if it["module"] == "sampling"]
    assert len(data["flashinfer"]) == 1
    manifest = tmp_path / "plan.yaml"
    write_manifest(plan_from_dict(data), manifest)
    return manifest


def _warm(manifest: Path, cache: Path, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dgprecompile", "warm", "--manifest", str(manifest), "--cache-dir",
                           str(cache), "--nvcc", NVCC, "--sglang-jit", "on", *extra], capture_output=True, text=True,
                          env=env, timeout=900)


def _needs_no_curand() -> None:
    if any((d / "curand.h").is_file() for d in include_dirs(str(TOOLKIT), {})):
        pytest.skip(f"this machine's toolkit ({TOOLKIT}) or system ships cuRAND's headers: the test needs one without")


@pytest.mark.parametrize("version", list(PINS))
def test_warm_refuses_a_sampling_plan_before_compiling_without_curand(version, tmp_path):
    if _missing(version):
        pytest.skip(_missing(version))
    _needs_no_curand()
    manifest, cache = _sampling_plan(tmp_path, version), tmp_path / "cache"
    t0 = time.monotonic()
    res = _warm(manifest, cache, _env(version, curand=False))
    assert res.returncode == 3, res.stdout + res.stderr
    assert time.monotonic() - t0 < 120  # at once, not after a build
    lines = res.stderr.strip().splitlines()
    errors, hints = [x for x in lines if x.startswith("error:")], [x for x in lines if x.startswith("hint:")]
    assert len(errors) == 1 and len(hints) == 1, res.stderr
    assert f"flashinfer:sampling@{version}.sm90a" in errors[0]
    assert "curand.h, curand_kernel.h, curand_philox4x32_x.h" in errors[0] and str(TOOLKIT / "include") in errors[0]
    assert "cuRAND headers" in hints[0] and "nvidia-curand" in hints[0] and "FLASHINFER_EXTRA_CUDAFLAGS" in hints[0]
    assert "--keep-going" in hints[0] and "Traceback" not in res.stderr
    assert not (cache / "flashinfer").exists()  # nothing was built or started
    # doctor --manifest names the same piece, as a failed check (exit 1)
    doc = subprocess.run([sys.executable, "-m", "dgprecompile", "doctor", "--manifest", str(manifest), "--json"],
                         capture_output=True, text=True, env=_env(version, curand=False), timeout=300)
    assert doc.returncode == 1, doc.stdout + doc.stderr
    assert any("curand.h" in m for m in json.loads(doc.stdout)["build_needs_missing"])


def test_the_readmes_server_plan_is_refused_at_once_naming_curand(tmp_path):
    """The README's whole server warm (DeepGEMM kernels, SGLang's JIT modules, FlashInfer's sampling and
    trtllm_comm) on this toolkit: refused in seconds, before its first compile, the cache not even created."""
    version = "0.6.12"
    if _missing(version):
        pytest.skip(_missing(version))
    _needs_no_curand()
    manifest, cache = tmp_path / "plan.yaml", tmp_path / "cache"
    write_manifest(plan_from_server(PlanRequest(sglang_cmd=QWEN, sglang=PINS[version])), manifest)
    res = subprocess.run([sys.executable, "-m", "dgprecompile", "warm", "--manifest", str(manifest), "--cache-dir",
                          str(cache), "--nvcc", NVCC], capture_output=True, text=True, env=_env(version, curand=False),
                         timeout=600)  # --sglang-jit auto, as the README runs it (no Triton here: those are skipped)
    assert res.returncode == 3, res.stdout + res.stderr
    assert "error: this machine lacks what the plan's builds need (checked before compiling): " \
        f"flashinfer:sampling@{version}.sm90a: sampling includes curand.h" in res.stderr
    assert "hint: curand.h is one of the cuRAND headers" in res.stderr and not cache.exists()


def test_keep_going_fails_the_real_build_with_its_compilers_first_error(tmp_path):
    version = "0.6.12"
    if _missing(version):
        pytest.skip(_missing(version))
    _needs_no_curand()
    manifest, cache = _sampling_plan(tmp_path, version), tmp_path / "cache"
    res = _warm(manifest, cache, _env(version, curand=False), "--keep-going", "--json")
    assert res.returncode == 4, res.stdout + res.stderr
    item = f"flashinfer:sampling@{version}.sm90a"
    report = json.loads(res.stdout)
    details = report["failure_details"][item]
    # FlashInfer's own ninja build failed in nvcc's preprocessing: its first error line, not ninja's last words
    assert details["errors"][0] == "flashinfer/sampling.cuh:20:10: fatal error: curand.h: No such file or directory"
    assert report["failures"][item].endswith(details["errors"][0]) and "ninja: build stopped" not in str(details)
    assert f"{item}: {details['errors'][0]}" in res.stderr and f"log: {details['log']}" in res.stderr
    assert "cuRAND headers" in details["hint"] and "hint: curand.h is one of the cuRAND headers" in res.stderr
    log = Path(details["log"]).read_text()
    assert Path(details["log"]).parent == cache / "dgprecompile" / "logs" and "ninja: build stopped" in log


# The sampling module is built for the newest pin only (what today's serving stack runs): its sampling.cu is one
# nvcc of about four CPU minutes per release, and the two releases reach cuRAND the same way (their headers and the
# refusal without them are checked for both above).
BUILT = ["0.7.2"]


@pytest.fixture(scope="module")
def sampling_warms(tmp_path_factory):
    """The warm of the sampling plan, with cuRAND's headers from the wheel, for each release in BUILT."""
    started = {}
    for version in BUILT:
        if _missing(version) or CURAND is None:
            continue
        tmp = tmp_path_factory.mktemp(f"sampling-{version}")
        manifest, cache = _sampling_plan(tmp, version), tmp / "cache"
        out, err = open(tmp / "out.json", "w+"), open(tmp / "err.txt", "w+")  # noqa: SIM115 - read back below
        proc = subprocess.Popen([sys.executable, "-m", "dgprecompile", "warm", "--manifest", str(manifest),
                                 "--cache-dir", str(cache), "--nvcc", NVCC, "--sglang-jit", "on", "--json"],
                                stdout=out, stderr=err, text=True, env=_env(version, curand=True))
        started[version] = (manifest, cache, proc, out, err)
    done = {}
    for version, (manifest, cache, proc, out, err) in started.items():
        proc.wait(timeout=1800)
        out.seek(0), err.seek(0)
        done[version] = (manifest, cache, proc.returncode, out.read(), err.read())
        out.close(), err.close()
    return done


@pytest.mark.parametrize("version", BUILT)
def test_the_sampling_module_builds_gpu_free_with_curands_headers(version, sampling_warms):
    if version not in sampling_warms:
        pytest.skip(_missing(version) or "the nvidia-curand wheel beside the venv (make setup)")
    manifest, cache, code, out, err = sampling_warms[version]
    from dgprecompile.planning.manifest import read_manifest

    items = list(read_manifest(manifest).flashinfer.values())
    assert check([("flashinfer-module", items)], str(TOOLKIT), _env(version, curand=True)) == []  # headers found
    assert code == 0, out + err
    assert json.loads(out)["compiled"] == 1
    so = cache / "flashinfer" / version / "90a" / "cached_ops" / "sampling" / "sampling.so"
    assert so.read_bytes()[:4] == b"\x7fELF" and sorted(p.name for p in so.parent.iterdir()) == [so.name]


@pytest.mark.parametrize("version", BUILT)
def test_a_cache_that_holds_the_sampling_module_warms_without_curand(version, sampling_warms):
    """An unpacked artifact's modules (tests/gpu/carry_build.sh carries them to a node): warm there finds the
    sampling module recorded and whole, builds nothing, and does not ask for the headers only its build needs."""
    if version not in sampling_warms:
        pytest.skip(_missing(version) or "the nvidia-curand wheel beside the venv (make setup)")
    _needs_no_curand()
    manifest, cache, code, out, err = sampling_warms[version]
    assert code == 0, out + err
    res = _warm(manifest, cache, _env(version, curand=False), "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    report = json.loads(res.stdout)
    assert report["compiled"] == 0 and report["already_cached"] == 1 and "curand" not in res.stderr


# ---- warm's closing lines ------------------------------------------------------------------------------------


def _rendered(result) -> str:
    import io

    from dgprecompile.cli.warm import render
    from dgprecompile.output import Output

    err = io.StringIO()
    render(Output(stdout=io.StringIO(), stderr=err), result)
    return err.getvalue()


def test_warms_closing_error_names_the_first_error_and_a_missing_packages_release():
    from dgprecompile.compile.warm_result import WarmResult

    # workers that could not start because a module of the import chain is missing: the package and the release
    fatal = WarmResult(kernels=1, release="0.5.14", failed={"sglang_jit:m": "not started"},
                       fatal=["sglang-jit: cannot import sglang.jit_kernel: ModuleNotFoundError: No module named "
                              "'torchvision'"])
    text = " ".join(_rendered(fatal).split())
    assert "hint: the Python module torchvision is not importable where the build ran: install torchvision" in text
    assert "the plan was made for sglang 0.5.14" in text
    # a failed build: its first error line beside its name, the known cause's hint and where the logs are
    first = "flashinfer/sampling.cuh:20:10: fatal error: curand.h: No such file or directory"
    failed = WarmResult(kernels=0, failed={"fi:sampling": "exited with code 1: " + first},
                        failure_details={"fi:sampling": {"errors": [first], "log": "/c/dgprecompile/logs/fi.log",
                                                         "hint": "curand.h is one of the cuRAND headers: install x"}})
    text = " ".join(_rendered(failed).split())  # the terminal's line wrapping undone
    assert f"error: 1 of 1 items failed to build: fi:sampling ({first})" in text, text
    assert "cuRAND headers" in text and "/c/dgprecompile/logs" in text
