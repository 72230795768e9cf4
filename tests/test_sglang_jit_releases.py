"""SGLang's tvm-ffi JIT modules of the releases beside 0.5.14 (data/sglang_jit.yaml), held against each release's
own wheel: planned for the Qwen3-MoE FP8 tp8/ep8 and DeepSeek-V3 FP8 tp8 servers, named as that release's own
builders name them (called under its own ``override_jit_cuda_arch(9, 0)``, tvm-ffi's build stopped before it
writes a file), built GPU-free with its own builder and real nvcc, and refused by name by launch's startup hook
when missing. `make setup` installs each release's wheel alone (--no-deps) beside the venv; its import chain comes
from sglang 0.5.14's folder behind it, sgl-kernel, triton and torchvision from tests/standins (named as such)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import (
    NVCC,
    STANDINS,
    Background,
    beside_venv,
    needs_dg013,
    needs_nvcc,
    no_user_sglang_env,
    sgl_deep_gemm_013_dir,
    sglang_014_dir,
)
from test_sglang_jit_inventory import DEEPSEEK_V3

from dgprecompile.planning.manifest import plan_from_dict, write_manifest
from dgprecompile.planning.plan import PlanRequest
from dgprecompile.planning.request import plan_from_request
from dgprecompile.runtimes import family_for

REPO = Path(__file__).resolve().parent.parent

# each release's folder (made by `make setup`), the file that marks it whole, its override variable
RELEASES = {"0.5.15": ("sglang-0.5.15", "sglang/jit_kernel/dsv3_router_gemm.py", "DGP_SGLANG_015"),
            "0.5.16": ("sglang-0.5.16", "sglang/jit_kernel/utils/compile.py", "DGP_SGLANG_016"),
            "0.5.17": ("sglang-0.5.17", "sglang/kernels/jit/utils/compile.py", "DGP_SGLANG_017")}
# what a release imports beyond 0.5.14's folder (0.5.17's sglang.kernels package imports msgspec): 0.5.23's folder

# The child: each module's builder of the release, under the release's own arch override for a Hopper GPU (the
# suffix its own _cuda_arch_suffix gives 9.0 where it has one), tvm-ffi's build stopped before it writes a file
# (or run, with "build"). Where the data builds through load_jit (the builder registers a class right after),
# OWN names the release's own function, called too: it must pass the same name and directory.
CHILD = r"""
import json, os, sys
mods = json.loads(sys.argv[1]); really = sys.argv[2] == "build"; own = json.loads(sys.argv[3])
import importlib, torch
import tvm_ffi.cpp.extension as ext
from dgprecompile.runtimes import family_for
where, _, name = family_for(os.environ["SGLANG_VERSION"]).release(os.environ["SGLANG_VERSION"]).arch_override.partition(":")
override_jit_cuda_arch = getattr(importlib.import_module(where), name)
try:
    suffix = (importlib.import_module(where + ".arch")._cuda_arch_suffix(9, 0),)
except ImportError:  # releases before the suffix
    suffix = ()
from dgprecompile.keys.schemes import naming_for
from dgprecompile.runtimes import get_family
from dgprecompile.runtimes.items import JitModule
from dgprecompile.compile.backends.sglang_jit import resolve_args
seen = {}
class Stop(Exception):
    pass
if not really:
    def stop(name, *a, build_directory=None, **k):
        seen["last"] = [name, os.path.basename(str(build_directory))]
        raise Stop()
    ext.build_inline = stop
    ext.build = stop
def call(python, builder, args, kwargs):
    seen.clear()
    try:
        with override_jit_cuda_arch(9, 0, *suffix):
            getattr(importlib.import_module(python), builder)(*resolve_args(list(args)), **kwargs)
    except Stop:
        pass
    except Exception as exc:  # after a real build: loading may need a GPU
        seen.setdefault("error", repr(exc)[:300])
    return seen.get("last")
out = {}
for d in mods:
    m = JitModule.from_dict(d)
    naming = naming_for(get_family(m.family), os.environ["SGLANG_VERSION"])
    kwargs = {k: resolve_args(v) if isinstance(v, list) else v for k, v in dict(m.kwargs).items()}
    got = call(m.python, m.builder, m.args, kwargs)
    error = seen.get("error")
    if m.name in own and not really:
        assert call(*own[m.name], [], {}) == got, (m.name, seen)
    cache = os.environ["TVM_FFI_CACHE_DIR"]
    made = sorted(os.listdir(cache)) if os.path.isdir(cache) else []
    out[m.id] = {"sglang": got, "computed": [naming.module_name(m), naming.entry_name(m)], "made": made,
                 "error": error, "suffix": list(suffix)}
print("RESULT " + json.dumps(out))
"""
# the release's own functions for the modules the data builds through load_jit
OWN = {"0.5.16": {"communicator": ["sglang.jit_kernel.all_reduce", "_init_communicator"],
                  "cuda_ipc": ["sglang.jit_kernel.all_reduce", "_init_ipc_manager"]},
       "0.5.17": {"communicator": ["sglang.kernels.ops.communication.all_reduce", "_init_communicator"],
                  "cuda_ipc": ["sglang.kernels.ops.communication.all_reduce", "_init_ipc_manager"]}}


def release_dir(version: str) -> str | None:
    folder, marker, override = RELEASES[version]
    return beside_venv(folder, marker, override)


def sglang_023_dir() -> str | None:
    return beside_venv("sglang-0.5.23", "sglang/kernels/jit/utils/compile/loader.py", "DGP_SGLANG_023")


def needs_release(version: str):
    return pytest.mark.skipif(release_dir(version) is None or sglang_014_dir() is None or sglang_023_dir() is None,
                              reason=f"sglang {version} (and 0.5.14's import chain) not installed beside the venv "
                                     "(make setup)")


def plans(version: str, tmp_path) -> dict:
    (tmp_path / "config.json").write_text(json.dumps(DEEPSEEK_V3))
    return {"qwen3 tp8 ep8": plan_from_request(PlanRequest(model="Qwen3-Coder-480B", tp=8, ep=8, sglang=version)),
            "deepseek_v3 tp8": plan_from_request(PlanRequest(model=str(tmp_path), tp=8, ep=8, sglang=version))}


def child_env(version: str, cache) -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([release_dir(version), sglang_014_dir(), sglang_023_dir(),
                                                     STANDINS, str(REPO)]),
            "TVM_FFI_CACHE_DIR": str(cache), "SGLANG_VERSION": version, "MAX_JOBS": "2",
            "CUDA_HOME": os.path.dirname(os.path.dirname(NVCC)),
            "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]}


def run_builders(version: str, modules, cache, build=False) -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps([m.to_dict() for m in modules]),
                           "build" if build else "name", json.dumps(OWN.get(version, {}))], capture_output=True, text=True,
                          env=child_env(version, cache), timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


# ---- planning: the data's modules per server -------------------------------------------------------------


def test_0_5_15_is_modelled_and_adds_deepseeks_router_gemm(tmp_path):
    assert family_for("0.5.15").modelled("0.5.15")
    by_server = {k: {m.name: m for m in p.jit_modules.values()} for k, p in plans("0.5.15", tmp_path).items()}
    qwen, dsv3 = by_server["qwen3 tp8 ep8"], by_server["deepseek_v3 tp8"]
    assert set(qwen) == {"per_token_group_quant_8bit_v2", "activation", "qknorm", "fused_rope", "clamp_position",
                         "custom_all_reduce_base", "custom_all_reduce_push", "custom_all_reduce_pull"}
    assert "dsv3_router_gemm" not in qwen and dsv3["dsv3_router_gemm"].template == ("256", "7168", "true", "true")
    assert {"set_mla_kv_buffer", "fused_rope"} <= set(dsv3) and "qknorm" not in dsv3
    old = {m.name for m in plans("0.5.14", tmp_path)["deepseek_v3 tp8"].jit_modules.values()}
    assert set(dsv3) - old == {"dsv3_router_gemm"}  # 0.5.14 ran sgl-kernel's AOT router GEMM


# ---- the release's own builders name every planned module as dgprecompile does ---------------------------


@needs_release("0.5.15")
def test_0_5_15_modules_are_named_as_its_own_builders_name_them(tmp_path):
    modules = {m.id: m for p in plans("0.5.15", tmp_path).values() for m in p.jit_modules.values()}
    assert len(modules) == 11  # Qwen3's 8, DeepSeek's router GEMM, 64-wide interleaved rope and MLA KV write
    result = run_builders("0.5.15", list(modules.values()), tmp_path / "tvm-ffi")
    assert sorted(result) == sorted(modules)
    for mid, r in result.items():
        assert r["sglang"] == r["computed"], (mid, r)
    assert not (tmp_path / "tvm-ffi").exists()



def test_0_5_16_plans_the_rebuilt_all_reduce_and_names_hoppers_arch_a(tmp_path):
    by_server = {k: {m.name: m for m in p.jit_modules.values()} for k, p in plans("0.5.16", tmp_path).items()}
    qwen, dsv3 = by_server["qwen3 tp8 ep8"], by_server["deepseek_v3 tp8"]
    assert set(qwen) == {"per_token_group_quant_8bit_v2", "activation", "qknorm", "fused_rope", "clamp_position",
                         "communicator", "cuda_ipc", "custom_all_reduce"}
    assert qwen["custom_all_reduce"].template == ("bf16_t", "8", "true")
    assert {"dsv3_router_gemm", "set_mla_kv_buffer"} <= set(dsv3) and not any("push" in n for n in dsv3)
    assert family_for("0.5.16").release("0.5.16").arch_name == "9.0a"


@needs_release("0.5.16")
def test_0_5_16_modules_are_named_as_its_own_builders_name_them(tmp_path):
    modules = {m.id: m for p in plans("0.5.16", tmp_path).values() for m in p.jit_modules.values()}
    assert len(modules) == 11
    result = run_builders("0.5.16", list(modules.values()), tmp_path / "tvm-ffi")
    assert sorted(result) == sorted(modules)
    for mid, r in result.items():
        assert r["suffix"] == ["a"] and r["sglang"][1].split("__")[1] == "arch_9.0a", (mid, r)
        assert r["sglang"] == r["computed"], (mid, r)
    assert not (tmp_path / "tvm-ffi").exists()



def test_0_5_17_plans_the_moved_builders_and_the_new_quantiser(tmp_path):
    by_server = {k: {m.id: m for m in p.jit_modules.values()} for k, p in plans("0.5.17", tmp_path).items()}
    qwen, dsv3 = by_server["qwen3 tp8 ep8"], by_server["deepseek_v3 tp8"]
    dense = "sglang_jit:per_token_group_quant<bf16_t,fp8_e4m3_t,128,false,false,true,false,true,flat>"
    rows = "sglang_jit:per_token_group_quant<bf16_t,fp8_e4m3_t,128,false,true,true,false,true,flat>"
    assert {dense, rows, "sglang_jit:qknorm<128,true,bf16_t>", "sglang_jit:communicator<>"} <= set(qwen)
    assert qwen[dense].python == "sglang.kernels.ops.quantization.per_token_group_quant"
    assert {"sglang_jit:dsv3_router_gemm<256,7168,true,true>", "sglang_jit:fused_rope<false,64,true,bf16_t,bf16_t>",
            "sglang_jit:set_mla_kv_buffer<1024,128,true>"} <= set(dsv3)
    assert (len(qwen), len(dsv3)) == (9, 10)


@needs_release("0.5.17")
def test_0_5_17_modules_are_named_as_its_own_builders_name_them(tmp_path):
    modules = {m.id: m for p in plans("0.5.17", tmp_path).values() for m in p.jit_modules.values()}
    assert len(modules) == 12
    result = run_builders("0.5.17", list(modules.values()), tmp_path / "tvm-ffi")
    assert sorted(result) == sorted(modules)
    for mid, r in result.items():
        assert r["suffix"] == ["a"] and r["sglang"][1].split("__")[1] == "arch_9.0a", (mid, r)
        assert r["sglang"] == r["computed"], (mid, r)
    assert not (tmp_path / "tvm-ffi").exists()


# ---- through the CLI: warm GPU-free, verify, strict launch loads it and refuses it once deleted ------------

# per release: the server, the one module warmed (a kind new in that release) and the release's own call that
# loads it as the GPU runtime does (its arch override standing in for the Hopper GPU it would detect)
CLI_CASES = {
    "0.5.15": ("deepseek_v3 tp8", "dsv3_router_gemm", "sglang_jit:dsv3_router_gemm<256,7168,true,true>",
               "sgl_kernel_jit_dsv3_router_gemm_256_7168_true_true_", "__arch_9.0__", (9, 0),
               "import sglang.jit_kernel.dsv3_router_gemm as m; m._jit_dsv3_router_gemm_module(256, 7168, True, True)"),
    "0.5.16": ("qwen3 tp8 ep8", "custom_all_reduce", "sglang_jit:custom_all_reduce<bf16_t,8,true>",
               "sgl_kernel_jit_custom_all_reduce_bf16_t_8_true_", "__arch_9.0a__", (9, 0, "a"),
               "import torch, sglang.jit_kernel.all_reduce as m; m.get_all_reduce_module(torch.bfloat16, 8)"),
    "0.5.17": ("qwen3 tp8 ep8", "per_token_group_quant",
               "sglang_jit:per_token_group_quant<bf16_t,fp8_e4m3_t,128,false,false,true,false,true,flat>",
               "sgl_kernel_jit_per_token_group_quant_bf16_t_fp8_e4m3_t_128_false_false_true_false_true_flat_",
               "__arch_9.0a__", (9, 0, "a"),
               "import torch, sglang.kernels.ops.quantization.per_token_group_quant as m; "
               "m._jit_module(torch.bfloat16, torch.float8_e4m3fn, 128, False, False, True, False, False, True)"),
}

LOAD = """
from {override_module} import override_jit_cuda_arch
with override_jit_cuda_arch{arch}:
    try:
        {call}
        print("LOADED")
    except RuntimeError as exc:
        print("REFUSED", str(exc).splitlines()[0])
"""


def cli(version, *args, env_extra=None):
    return cli_started(version, *args, env_extra=env_extra).result()


def cli_started(version, *args, env_extra=None) -> Background:
    env = {**child_env(version, "unused"), **(env_extra or {})}
    # the plan's DeepGEMM generation must be installed for warm/verify/launch to accept it (it has no kernels)
    env["PYTHONPATH"] += os.pathsep + sgl_deep_gemm_013_dir()
    env.pop("TVM_FFI_CACHE_DIR")  # launch sets it; warm and verify use their own
    return Background([sys.executable, "-m", "dgprecompile", *map(str, args)], env=env)


def one_module_manifest(version, server, name, tmp_path) -> Path:
    """A server's plan trimmed to one JIT module (no DeepGEMM or Triton kernels: those have their own tests)."""
    data = plans(version, tmp_path)[server].to_dict()
    for shape in data["shapes"]:
        shape["buckets"], shape["aux_kernels"] = [], []
    data["kernels"], data["total_kernels"] = [], 0
    data.pop("triton_moe", None)
    data["sglang_jit_modules"] = [m for m in data["sglang_jit_modules"] if m["name"] == name][:1]
    data.pop("inductor", None)  # the torch.compile items need the job's GPU: tests/test_inductor_graphs.py
    data.pop("flashinfer", None)  # FlashInfer's modules: tests/test_flashinfer_modules.py
    data.pop("triton_path", None)  # the model path's other Triton kernels: tests/test_triton_path.py
    path = tmp_path / "one.yaml"
    write_manifest(plan_from_dict(data), path)
    return path


@pytest.fixture(scope="module")
def cli_warms(tmp_path_factory):
    """Each release's one-module warm (the CLI cases), all started at once (each one module, one nvcc: side by
    side they take the machine's cores together): {version: (manifest, cache, the warm)}."""
    with no_user_sglang_env():  # conftest unsets them per test, after this module-scoped fixture
        started = {}
        for version, (server, name, *_) in CLI_CASES.items():
            if release_dir(version) is None or sglang_014_dir() is None or sglang_023_dir() is None:
                continue  # its test is skipped (needs_release)
            tmp = tmp_path_factory.mktemp(f"cli-{version}")
            manifest, cache = one_module_manifest(version, server, name, tmp), tmp / "cache"
            started[version] = (manifest, cache, cli_started(version, "warm", "--manifest", manifest, "--cache-dir",
                                                             cache, "--nvcc", NVCC, "--sglang-jit", "on", "--json"))
        yield started
        for *_, warm in started.values():
            warm.stop()


@pytest.mark.slow
@needs_dg013
@needs_nvcc
@pytest.mark.parametrize("version", [pytest.param(v, marks=needs_release(v)) for v in CLI_CASES])
def test_a_module_warmed_gpu_free_verified_loaded_and_refused_by_name_when_missing(version, cli_warms, tmp_path):
    server, name, module_id, prefix, arch_part, arch, call = CLI_CASES[version]
    manifest, cache, started = cli_warms[version]
    warm = started.result()
    assert warm.returncode == 0, warm.stdout + warm.stderr
    assert (json.loads(warm.stdout)["compiled"], json.loads(warm.stdout)["failed"]) == (1, 0)
    [entry] = os.listdir(cache / "tvm-ffi")
    assert entry.startswith(prefix) and arch_part in entry
    ok = cli(version, "verify", "--manifest", manifest, "--cache-dir", cache, "--json")
    assert ok.returncode == 0 and json.loads(ok.stdout)["coverage"] == "proved", ok.stdout + ok.stderr

    child = tmp_path / "child.py"
    override_module = family_for(version).release(version).arch_override.split(":")[0]
    child.write_text(LOAD.format(override_module=override_module, arch=tuple(arch), call=call))
    hit = cli(version, "launch", "--manifest", manifest, "--cache-dir", cache, "--", sys.executable, child)
    assert hit.returncode == 0 and "LOADED" in hit.stdout, hit.stdout + hit.stderr

    shutil.rmtree(cache / "tvm-ffi" / entry)
    bad = cli(version, "verify", "--manifest", manifest, "--cache-dir", cache, "--json")
    assert bad.returncode == 1 and json.loads(bad.stdout)["missing"] == [module_id], bad.stdout + bad.stderr
    miss = cli(version, "launch", "--manifest", manifest, "--cache-dir", cache, "--allow-missing", "--",
               sys.executable, child)
    assert "REFUSED dgprecompile strict mode: SGLang tried to build its JIT module " + prefix in miss.stdout, \
        miss.stdout + miss.stderr
    assert "strict mode refused 1 runtime compile(s)" in miss.stderr
    assert os.listdir(cache / "tvm-ffi") == []  # refused before tvm-ffi wrote anything
