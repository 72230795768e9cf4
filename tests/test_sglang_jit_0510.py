"""sglang 0.5.10-0.5.13's own tvm-ffi JIT modules (data/sglang_jit.yaml), held against the wheels' own code: 0.5.13
(an absolute-path source hash in the name, tvm-ffi's own directory, the arch flag in the build) and 0.5.10 (the
quantiser named without its template) planned for the Qwen3-Coder-480B FP8 tp8/ep8 and DeepSeek-V3 FP8 tp8 servers;
every planned module's own builder, called for real under the release's own arch override with tvm-ffi stopped
after it picked the directory, picks the name dgprecompile computes; through the CLI, 0.5.13's cheapest module is
warmed GPU-free with real nvcc, verified, loaded by a strict launch through the release's own call without a build
and refused by name once deleted, before anything is written. Each wheel is installed alone (--no-deps) beside the
venv (make setup); 0.5.14's folder gives the import chain (tvm-ffi 0.1.11), tests/standins stand in for sgl-kernel,
triton, torchvision and pynvml."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from helpers import (
    NVCC,
    STANDINS,
    Background,
    beside_venv,
    needs_nvcc,
    no_user_sglang_env,
    sgl_deep_gemm_013_dir,
    sglang_014_dir,
)
from test_sglang_jit_059 import (
    after_the_warm,
    named_as_computed,
    one_module_manifest,
    one_module_warm,
    start_own_builders,
)
from test_sglang_jit_inventory import DEEPSEEK_V3

from dgprecompile.planning.plan import PlanRequest
from dgprecompile.planning.request import plan_from_request
from dgprecompile.runtimes import family_for

REPO = Path(__file__).resolve().parent.parent
QWEN_MODEL = "Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8"
QWEN = f"python -m sglang.launch_server --model-path {QWEN_MODEL} --tp 8 --ep 8"
COMMON = {"sglang_jit:fused_rope<true,128,true,bf16_t>", "sglang_jit:clamp_position<int64_t>"}
DS_ROPE = "sglang_jit:fused_rope<false,64,true,bf16_t>"
QKNORM = "sglang_jit:qknorm<128,true,bf16_t>"
ALL_REDUCE = {"sglang_jit:custom_all_reduce_base<>", "sglang_jit:custom_all_reduce_push<bf16_t,8,true>",
              "sglang_jit:custom_all_reduce_pull<bf16_t,8,true>"}


def side_dir(version: str) -> str | None:
    return beside_venv(f"sglang-{version}", "sglang/jit_kernel/utils.py", f"DGP_SGLANG_{version.replace('.', '')}")


def needs(version: str):
    return pytest.mark.skipif(side_dir(version) is None or sglang_014_dir() is None,
                              reason=f"sglang {version} and 0.5.14 not installed beside the venv (make setup)")


def plans(tmp_path, version: str, kv: str = "") -> dict:
    """The two servers' plans: by command (0.5.13: the bundled 0.5.14 option table serves its profile), or by
    --model where no option table of that profile is bundled (0.5.10)."""
    (tmp_path / "config.json").write_text(json.dumps(DEEPSEEK_V3))
    if version == "0.5.10":
        qwen = PlanRequest(sglang=version, model=QWEN_MODEL, tp=8, ep=8)
        ds = PlanRequest(sglang=version, model=str(tmp_path), tp=8)
    else:
        qwen = PlanRequest(sglang=version, sglang_cmd=QWEN + kv)
        ds = PlanRequest(sglang=version, sglang_cmd=f"python -m sglang.launch_server --model-path {tmp_path} --tp 8")
    return {"qwen3 tp8 ep8": plan_from_request(qwen), "deepseek_v3 tp8": plan_from_request(ds)}


# ---- planning ------------------------------------------------------------------------------------------------


def test_0_5_13_plans_custom_all_reduce_the_mla_write_and_the_ep_top_k_mask_but_no_overlap_resolver(tmp_path):
    assert family_for("0.5.13").modelled("0.5.13")
    by_server = {k: {m.id for m in p.jit_modules.values()} for k, p in plans(tmp_path, "0.5.13").items()}
    act = "sglang_jit:activation<bf16_t,true>"
    assert by_server["qwen3 tp8 ep8"] == COMMON | ALL_REDUCE | {QKNORM, act, "sglang_jit:dpsk_v4_mask_topk<>"}
    assert by_server["deepseek_v3 tp8"] == ({DS_ROPE, "sglang_jit:clamp_position<int64_t>", act} | ALL_REDUCE
                                           | {"sglang_jit:set_mla_kv_buffer<1024,128,true>"})
    # an FP8 KV cache: rope no longer stores K/V, attention's store builds kvcache (1 KV head of 128 x 1 byte)
    fp8 = {m.id for m in plans(tmp_path, "0.5.13", " --kv-cache-dtype fp8_e4m3")["qwen3 tp8 ep8"].jit_modules.values()}
    assert fp8 - by_server["qwen3 tp8 ep8"] == {"sglang_jit:kvcache<128,true>"}
    # one node's custom all-reduce only; the default scheduler's overlap adds nothing in 0.5.13
    off = plan_from_request(PlanRequest(sglang="0.5.13", sglang_cmd=QWEN + " --disable-custom-all-reduce"))
    assert not {m.id for m in off.jit_modules.values()} & ALL_REDUCE
    # a path whose modules were not read: plan says so instead of planning a partial set silently
    dg = plan_from_request(PlanRequest(sglang="0.5.13", sglang_cmd=QWEN + " --moe-runner-backend deep_gemm"))
    assert any("deep_gemm MoE runner's own JIT modules" in n and "not planned" in n for n in dg.notes)
    assert not any("deep_gemm MoE runner" in n for n in plans(tmp_path, "0.5.13")["qwen3 tp8 ep8"].notes)


def test_0_5_10_plans_the_jit_quantiser_and_the_overlap_resolver_without_all_reduce(tmp_path):
    by_server = {k: {m.id for m in p.jit_modules.values()} for k, p in plans(tmp_path, "0.5.10").items()}
    quant, resolve = ("sglang_jit:per_token_group_quant_8bit<bf16_t,fp8_e4m3_t>",
                      "sglang_jit:resolve_future_token_ids<int64_t>")
    assert by_server["qwen3 tp8 ep8"] == COMMON | {QKNORM, quant, resolve}
    assert by_server["deepseek_v3 tp8"] == {DS_ROPE, "sglang_jit:clamp_position<int64_t>", quant, resolve}


# ---- the release's own builders pick the directory dgprecompile computes ------------------------------------

def child_env(version: str, cache) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([side_dir(version), sglang_014_dir(), STANDINS, str(REPO)]),
           "DGP_STANDINS": "sgl_kernel,triton,torchvision,pynvml", "TVM_FFI_CACHE_DIR": str(cache),
           "CUDA_HOME": os.path.dirname(os.path.dirname(NVCC)) if NVCC else "/usr/local/cuda",
           "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]}
    env.pop("TVM_FFI_CUDA_ARCH_LIST", None)
    return env


@pytest.mark.parametrize("version, count", [pytest.param("0.5.13", 11, marks=needs("0.5.13")),
                                            pytest.param("0.5.10", 6, marks=needs("0.5.10"))])
def test_modules_are_named_as_tvm_ffi_names_the_releases_own_builders_builds(version, count, started):
    modules, child = started[version]
    assert len(modules) == count
    result = named_as_computed(modules, child.result())
    if version == "0.5.13":  # sglang's own source hash is in the name: marker, template, 16 hex digits
        assert all(len(r["sglang"][0].rsplit("_", 1)[1]) == 16 for r in result.values())
    else:  # 0.5.10's quantiser: one name for every dtype pair, tvm-ffi's hash tells them apart
        quant = result["sglang_jit:per_token_group_quant_8bit<bf16_t,fp8_e4m3_t>"]["sglang"]
        assert quant[0] == "sgl_kernel_jit_per_token_group_quant_8bit"


# ---- through the CLI: warm GPU-free, verify, strict launch loads it and refuses it once deleted ------------

LOAD = """
import torch
torch.cuda.current_device = lambda: 0  # the Hopper GPU the runtime asks (its arch detection, once)
torch.cuda.get_device_capability = lambda device=None: (9, 0)
try:
    import sglang.jit_kernel.clamp_position as m
    m._jit_clamp_position_module(torch.int64)
    print("LOADED")
except RuntimeError as exc:
    print("REFUSED", str(exc).splitlines()[0])
"""
CLAMP = "sglang_jit:clamp_position<int64_t>"


def cli(*args):
    return cli_started(*args).result()


def cli_started(*args) -> Background:
    env = child_env("0.5.13", "unused")
    env["PYTHONPATH"] += os.pathsep + sgl_deep_gemm_013_dir()  # the plan's DeepGEMM generation (no kernels)
    env.pop("TVM_FFI_CACHE_DIR")
    return Background([sys.executable, "-m", "dgprecompile", *map(str, args)], env=env)


@pytest.fixture(scope="module")
def started(tmp_path_factory):
    """Both releases' own-builder children (every planned module of both servers, with and without the fp8 KV
    cache) and 0.5.13's one-module CLI warm, all started at once (each mostly one core's imports, or one nvcc: side
    by side they take the machine's cores together): {version: (modules, child), "cli": (manifest, cache, warm)}."""
    with no_user_sglang_env():  # conftest unsets them per test, after this module-scoped fixture
        out = {}
        for version in ("0.5.13", "0.5.10"):
            if side_dir(version) is None or sglang_014_dir() is None:
                continue  # its tests are skipped (needs)
            tmp = tmp_path_factory.mktemp(f"named-{version}")
            modules = {m.id: m for kv in ("", " --kv-cache-dtype fp8_e4m3") for p in plans(tmp, version, kv).values()
                       for m in p.jit_modules.values()}
            out[version] = (modules, start_own_builders(modules, version, child_env(version, tmp / "tvm-ffi")))
        if "0.5.13" in out and sgl_deep_gemm_013_dir() is not None and NVCC is not None:
            tmp = tmp_path_factory.mktemp("cli")
            manifest, cache = one_module_manifest(plans(tmp, "0.5.13")["qwen3 tp8 ep8"].to_dict(), CLAMP, tmp)
            out["cli"] = (manifest, cache, cli_started(*one_module_warm(manifest, cache)))
        yield out
        for *_, proc in out.values():
            proc.stop()


@pytest.mark.skipif(sgl_deep_gemm_013_dir() is None, reason="sgl-deep-gemm 0.1.3 not beside the venv (make setup)")
@needs_nvcc
@needs("0.5.13")
def test_0_5_13_module_warmed_gpu_free_verified_loaded_without_a_build_and_refused_by_name(started, tmp_path):
    manifest, cache, warm = started["cli"]
    entry = after_the_warm(cli, warm.result(), manifest, cache, CLAMP, LOAD, tmp_path, flags=("-DSGL_CUDA_ARCH=900",))
    name = entry[:-17]  # <name>_<tvm-ffi's hash>; the name ends in sglang's own 16-digit source hash
    assert name.startswith("sgl_kernel_jit_clamp_position_int64_t_") and len(name.rsplit("_", 1)[1]) == 16
