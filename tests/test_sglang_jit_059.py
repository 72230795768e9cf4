"""sglang 0.5.9's own tvm-ffi JIT modules (data/sglang_jit.yaml), held against the 0.5.9 wheel's own code: planned
for the Qwen3-Coder-480B FP8 tp8/ep8 and DeepSeek-V3 FP8 tp8 servers; named as tvm-ffi's load_inline names them
when the release's load_jit passes no build directory (its builders called for real, tvm-ffi stopped after it
picked the directory); built GPU-free with the release's own builder and real nvcc; verified; loaded by a strict
launch through the release's own call without a build, and refused by name once deleted, before anything is
written. The wheel is installed alone (--no-deps) beside the venv with flashinfer 0.6.3 (its pin, for the rope
module's headers); 0.5.14's folder gives the import chain, tests/standins stand in for sgl-kernel, triton,
torchvision and pynvml (flashinfer imports it; nothing here calls it)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import NVCC, STANDINS, Background, beside_venv, needs_nvcc, no_user_sglang_env, sglang_014_dir
from test_sglang_jit_inventory import DEEPSEEK_V3

from dgprecompile.planning.manifest import plan_from_dict, write_manifest
from dgprecompile.planning.plan import PlanRequest
from dgprecompile.planning.request import plan_from_request
from dgprecompile.runtimes import family_for

REPO = Path(__file__).resolve().parent.parent
QWEN = "python -m sglang.launch_server --model-path Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8 --tp 8 --ep 8"
ROPE, QKNORM = "sglang_jit:apply_rope_pos_ids_cos_sin_cache<>", "sglang_jit:qknorm<128,true,bf16_t>"


def sglang_059_dir() -> str | None:
    return beside_venv("sglang-0.5.9", "sglang/jit_kernel/utils.py", "DGP_SGLANG_059")


def flashinfer_063_dir() -> str | None:
    return beside_venv("flashinfer-0.6.3", "flashinfer/data/include", "DGP_FLASHINFER_063")


def sgl_kernel_0321_dir() -> str | None:
    """sglang 0.5.9's DeepGEMM (sgl-kernel 0.3.21's deep_gemm): the plan's generation must be installed."""
    return beside_venv("sgl-kernel-0.3.21", "deep_gemm/deep_gemm_cpp.abi3.so")


needs_059 = pytest.mark.skipif(sglang_059_dir() is None or flashinfer_063_dir() is None or sglang_014_dir() is None,
                               reason="sglang 0.5.9 and flashinfer 0.6.3 not installed beside the venv (make setup)")


def plans(tmp_path, kv=""):
    (tmp_path / "config.json").write_text(json.dumps(DEEPSEEK_V3))
    return {"qwen3 tp8 ep8": plan_from_request(PlanRequest(sglang="0.5.9", sglang_cmd=QWEN + kv)),
            "deepseek_v3 tp8": plan_from_request(PlanRequest(
                sglang="0.5.9", sglang_cmd=f"python -m sglang.launch_server --model-path {tmp_path} --tp 8"))}


# ---- planning ------------------------------------------------------------------------------------------------


def test_0_5_9_plans_the_rope_and_qknorm_for_qwen3_and_the_rope_alone_for_deepseek(tmp_path):
    assert family_for("0.5.9").modelled("0.5.9")
    by_server = {k: {m.id: m for m in p.jit_modules.values()} for k, p in plans(tmp_path).items()}
    assert set(by_server["qwen3 tp8 ep8"]) == {ROPE, QKNORM}
    assert set(by_server["deepseek_v3 tp8"]) == {ROPE}  # 64-wide yarn rope; DeepSeek's others are sgl-kernel AOT
    rope = by_server["deepseek_v3 tp8"][ROPE]
    assert (rope.python, rope.builder, rope.args) == ("sglang.jit_kernel.rope",
                                                      "_jit_apply_rope_pos_ids_cos_sin_cache_module", ())
    # an FP8 KV cache: rope no longer stores K/V, the attention backend's store builds kvcache (1 KV head per rank)
    fp8 = {m.id for m in plans(tmp_path, " --kv-cache-dtype fp8_e4m3")["qwen3 tp8 ep8"].jit_modules.values()}
    assert fp8 == {ROPE, QKNORM, "sglang_jit:kvcache<128,true>"}
    fused = {m.id for m in plan_from_request(PlanRequest(sglang="0.5.9", sglang_cmd=QWEN + " --enable-fused-qk-norm-rope"))
             .jit_modules.values()}
    assert fused == {"sglang_jit:kvcache<256,true>"}  # sgl-kernel's fused q/k-norm rope; attention stores bf16 K/V


# ---- the release's own builders pick the directory dgprecompile computes ------------------------------------

CHILD = r"""
import importlib, json, os, sys
import torch
import tvm_ffi.cpp.extension as ext
from dgprecompile.compile.backends.sglang_jit import resolve_args, target_device
from dgprecompile.keys.schemes import naming_for
from dgprecompile.runtimes import get_family
from dgprecompile.runtimes.items import JitModule
version = sys.argv[2]
seen = {}
class Stop(Exception):
    pass
def stop(name, *a, build_directory=None, **k):  # after build_inline picked its directory, before ninja
    seen["last"] = [name, os.path.basename(str(build_directory))]
    raise Stop()
ext._build_impl = stop
out = {}
for d in json.loads(sys.argv[1]):
    m = JitModule.from_dict(d)
    naming = naming_for(get_family(m.family), version)
    where, _, fn = (naming.spec.arch_override or "").partition(":")
    # the release's own arch override (0.5.10+), else its preset variable and device question answered (0.5.9)
    target = getattr(importlib.import_module(where), fn)(*naming.spec.arch) if where else \
        target_device("TVM_FFI_CUDA_ARCH_LIST", 9, 0)
    seen.clear()
    with target:
        try:
            kwargs = {k: resolve_args(v) if isinstance(v, list) else v for k, v in dict(m.kwargs).items()}
            getattr(importlib.import_module(m.python), m.builder)(*resolve_args(list(m.args)), **kwargs)
        except Stop:
            pass
    out[m.id] = {"sglang": seen.get("last"), "computed": [naming.module_name(m), naming.entry_name(m)]}
print("RESULT " + json.dumps(out))
"""


def named_by_own_builders(modules: dict, version: str, env: dict) -> dict:
    """Each module's (name, directory) as the release's own builder hands them to tvm-ffi (stopped before ninja)
    against what dgprecompile computes: equal, and the directory <name>_<tvm-ffi's 16-hex hash>. The results."""
    return named_as_computed(modules, start_own_builders(modules, version, env).result())


def start_own_builders(modules: dict, version: str, env: dict) -> Background:
    """:func:`named_by_own_builders`'s child, started and not waited for."""
    return Background([sys.executable, "-c", CHILD, json.dumps([m.to_dict() for m in modules.values()]), version],
                      timeout=600, env=env)


def named_as_computed(modules: dict, proc) -> dict:
    """:func:`named_by_own_builders`'s checks of the child's ended run (``proc``). The results."""
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))[len("RESULT "):])
    assert sorted(result) == sorted(modules)
    for mid, r in result.items():
        assert r["sglang"] == r["computed"], (mid, r)
        assert r["sglang"][1].startswith(r["sglang"][0] + "_") and len(r["sglang"][1]) == len(r["sglang"][0]) + 17
    return result


def child_env(cache) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([sglang_059_dir(), flashinfer_063_dir(), sglang_014_dir(),
                                                          STANDINS, str(REPO)]),
           "DGP_STANDINS": "sgl_kernel,triton,torchvision,pynvml", "TVM_FFI_CACHE_DIR": str(cache),
           "CUDA_HOME": os.path.dirname(os.path.dirname(NVCC)),
           "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]}
    env.pop("TVM_FFI_CUDA_ARCH_LIST", None)
    return env


@needs_059
def test_0_5_9_modules_are_named_as_tvm_ffi_names_its_own_builders_builds(tmp_path):
    modules = {m.id: m for p in plans(tmp_path, " --kv-cache-dtype fp8_e4m3").values()
               for m in p.jit_modules.values()}
    assert len(modules) == 3
    named_by_own_builders(modules, "0.5.9", child_env(tmp_path / "tvm-ffi"))


# ---- through the CLI: warm GPU-free, verify, strict launch loads it and refuses it once deleted ------------

LOAD = """
import torch
torch.cuda.current_device = lambda: 0  # the Hopper GPU the runtime would ask (is_arch_support_pdl)
torch.cuda.get_device_capability = lambda device=None: (9, 0)
try:
    {call}
    print("LOADED")
except RuntimeError as exc:
    print("REFUSED", str(exc).splitlines()[0])
"""
# module name -> its id, its runtime name, the release's own call that loads it as the GPU runtime does
CLI_CASES = {"qknorm": (QKNORM, "sgl_kernel_jit_qknorm_128_true_bf16_t",
                        "import sglang.jit_kernel.norm as m; m._jit_qknorm_module(128, torch.bfloat16)"),
             "apply_rope_pos_ids_cos_sin_cache": (ROPE, "sgl_kernel_jit_apply_rope_pos_ids_cos_sin_cache",
                                                  "import sglang.jit_kernel.rope as m; "
                                                  "m._jit_apply_rope_pos_ids_cos_sin_cache_module()")}


def cli(*args):
    return cli_started(*args).result()


def cli_started(*args) -> Background:
    env = child_env("unused")
    env["PYTHONPATH"] += os.pathsep + sgl_kernel_0321_dir()  # the plan's DeepGEMM generation (no kernels)
    env.pop("TVM_FFI_CACHE_DIR")
    return Background([sys.executable, "-m", "dgprecompile", *map(str, args)], env=env)


@pytest.fixture(scope="module")
def cli_warms(tmp_path_factory):
    """Each CLI case's one-module warm (:func:`one_module_warm`), all started at once (each one module, one nvcc:
    side by side they take the machine's cores together): {name: (manifest, cache, the warm)}."""
    with no_user_sglang_env():  # conftest unsets them per test, after this module-scoped fixture
        started = {}
        for name, (module_id, _, _) in CLI_CASES.items():
            tmp = tmp_path_factory.mktemp(f"cli-{name}")
            manifest, cache = one_module_manifest(plans(tmp)["qwen3 tp8 ep8"].to_dict(), module_id, tmp)
            started[name] = (manifest, cache, cli_started(*one_module_warm(manifest, cache)))
        yield started
        for *_, warm in started.values():
            warm.stop()


@pytest.mark.slow
@pytest.mark.skipif(sgl_kernel_0321_dir() is None, reason="sgl-kernel 0.3.21 not beside the venv (make setup)")
@needs_nvcc
@needs_059
@pytest.mark.parametrize("name", sorted(CLI_CASES))
def test_a_module_warmed_gpu_free_verified_loaded_without_a_build_and_refused_by_name_when_missing(name, cli_warms,
                                                                                                tmp_path):
    module_id, runtime_name, call = CLI_CASES[name]
    manifest, cache, warm = cli_warms[name]
    entry = after_the_warm(cli, warm.result(), manifest, cache, module_id, LOAD.format(call=call), tmp_path)
    assert entry.startswith(runtime_name + "_") and len(entry) == len(runtime_name) + 17


def one_module_manifest(data: dict, module_id: str, folder: Path) -> tuple[Path, Path]:
    """A release's plan (``data``) trimmed to one tvm-ffi JIT module, written in ``folder``: (manifest, cache)."""
    for shape in data["shapes"]:
        shape["buckets"], shape["aux_kernels"] = [], []
    data["kernels"], data["total_kernels"] = [], 0
    for section in ("triton_moe", "inductor", "flashinfer", "triton_path"):  # FlashInfer's: tests/test_flashinfer_modules.py
        data.pop(section, None)
    data["sglang_jit_modules"] = [m for m in data["sglang_jit_modules"] if m["id"] == module_id]
    assert len(data["sglang_jit_modules"]) == 1
    manifest, cache = folder / "one.yaml", folder / "cache"
    write_manifest(plan_from_dict(data), manifest)
    return manifest, cache


def one_module_warm(manifest: Path, cache: Path) -> tuple:
    """warm's arguments for :func:`one_module_manifest`'s plan: GPU-free, real nvcc for sm_90."""
    return "warm", "--manifest", manifest, "--cache-dir", cache, "--nvcc", NVCC, "--sglang-jit", "on", "--json"


def after_the_warm(cli, warm, manifest: Path, cache: Path, module_id: str, child_source: str, tmp_path: Path,
                   flags: tuple[str, ...] = ()) -> str:
    """:func:`one_module_warm` of the module ended (``warm``): it built the module (``flags`` in its ninja file),
    which is verified, loaded by a strict launch of ``child_source`` (prints LOADED or REFUSED <message>) without
    a build or a write, then deleted: verify names it missing and the strict launch refuses it by its runtime name
    before tvm-ffi writes anything. Its entry."""
    assert warm.returncode == 0, warm.stdout + warm.stderr
    assert (json.loads(warm.stdout)["compiled"], json.loads(warm.stdout)["failed"]) == (1, 0)
    [entry] = os.listdir(cache / "tvm-ffi")
    runtime_name = entry[:-17]  # <the name its loader gives>_<tvm-ffi's 16-hex hash>
    built = cache / "tvm-ffi" / entry
    ninja = (built / "build.ninja").read_text().replace(" ", "")
    for flag in ("-gencode=arch=compute_90,code=sm_90", *flags):
        assert flag in ninja, flag
    ok = cli("verify", "--manifest", manifest, "--cache-dir", cache, "--json")
    assert ok.returncode == 0 and json.loads(ok.stdout)["coverage"] == "proved", ok.stdout + ok.stderr

    child = tmp_path / "child.py"
    child.write_text(child_source)
    before = {p.name: p.stat().st_mtime_ns for p in built.iterdir()}
    hit = cli("launch", "--manifest", manifest, "--cache-dir", cache, "--", sys.executable, child)
    assert hit.returncode == 0 and "LOADED" in hit.stdout, hit.stdout + hit.stderr
    assert {p.name: p.stat().st_mtime_ns for p in built.iterdir()} == before  # loaded, nothing rebuilt or written

    shutil.rmtree(built)
    bad = cli("verify", "--manifest", manifest, "--cache-dir", cache, "--json")
    assert bad.returncode == 1 and json.loads(bad.stdout)["missing"] == [module_id], bad.stdout + bad.stderr
    miss = cli("launch", "--manifest", manifest, "--cache-dir", cache, "--allow-missing", "--",
               sys.executable, child)
    assert (f"REFUSED dgprecompile strict mode: SGLang tried to build its JIT module {runtime_name} at run time"
            in miss.stdout), miss.stdout + miss.stderr
    assert entry in miss.stdout and "strict mode refused 1 runtime compile(s)" in miss.stderr
    assert os.listdir(cache / "tvm-ffi") == []  # refused before tvm-ffi wrote anything
    return entry


# ---- the strict hook against the real tvm-ffi, without sglang ----------------------------------------------

HOOK_CHILD = r"""
import json, os, sys
import tvm_ffi.cpp.extension as ext
from dgprecompile.launch.hook import HOOK_DIR
sys.path.insert(0, HOOK_DIR)  # as launch puts it first on the job's PYTHONPATH
import _dgprecompile_hook as hook
kw = dict(cuda_sources=['#include "/nowhere/a.cuh"', "TVM_FFI_DLL_EXPORT_TYPED_FUNC(f, (K<1, true>::run));"],
          extra_cflags=["-O3"], extra_cuda_cflags=["-O3", "--expt-relaxed-constexpr"], extra_include_paths=["/x"])
seen = {}
class Stop(Exception):
    pass
def stop(name, *a, build_directory=None, **k):
    seen["dir"] = build_directory
    raise Stop()
original, ext._build_impl = ext._build_impl, stop
try:
    ext.build_inline("sgl_kernel_jit_probe", **kw)  # tvm-ffi's own choice (it writes its sources there first)
except Stop:
    pass
tvm_dir = seen["dir"]
for f in os.listdir(tvm_dir):
    os.unlink(os.path.join(tvm_dir, f))
os.rmdir(tvm_dir)
ext._build_impl = original
hook.patch_tvm_ffi(ext)
out = {"tvm": os.path.basename(tvm_dir)}
try:
    ext.build_inline("sgl_kernel_jit_probe", **kw)
except RuntimeError as exc:
    out["refused"] = str(exc)
out["written"] = os.listdir(os.environ["TVM_FFI_CACHE_DIR"])
os.makedirs(tvm_dir)
open(os.path.join(tvm_dir, "sgl_kernel_jit_probe.so"), "w").close()
out["hit"] = ext.build_inline("sgl_kernel_jit_probe", **kw)
out["after"] = sorted(os.listdir(tvm_dir))
print("RESULT " + json.dumps(out))
"""


@pytest.mark.skipif(sglang_014_dir() is None, reason="tvm-ffi 0.1.11 (sglang 0.5.14's folder) not beside the venv")
def test_strict_hook_returns_a_warmed_inline_build_and_refuses_a_missing_one_by_tvm_ffis_own_directory(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([sglang_014_dir(), str(REPO)]),
           "TVM_FFI_CACHE_DIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", HOOK_CHILD], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))[len("RESULT "):])
    assert out["tvm"].startswith("sgl_kernel_jit_probe_")
    assert ("SGLang tried to build its JIT module sgl_kernel_jit_probe at run time" in out["refused"]
            and f"does not hold {out['tvm']}/sgl_kernel_jit_probe.so" in out["refused"])
    assert out["written"] == []  # refused before tvm-ffi made its directory
    assert out["hit"] == str(tmp_path / out["tvm"] / "sgl_kernel_jit_probe.so")
    assert out["after"] == ["sgl_kernel_jit_probe.so"]  # handed back: no sources, no build.ninja, no lock
