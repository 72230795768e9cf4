"""The tvm-ffi JIT family's module inventory (data/sglang_jit.yaml) held against the real sglang 0.5.14 wheel's own
code: every module a modelled server path plans is built by calling SGLang's own builder under its own
``override_jit_cuda_arch(9, 0)``, and the name and directory SGLang passes to tvm-ffi must equal the ones
dgprecompile computes. The quick form stops tvm-ffi's build before it writes anything (the same wrap the strict
launch hook installs, so nothing compiles); one module is built for real in the default suite, one per other
module kind under ``slow``. sgl-kernel, triton and torchvision are stand-ins (tests/standins, named as such)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import NVCC, STANDINS, needs_nvcc, needs_sgl014, sglang_014_dir

from dgprecompile.planning.plan import PlanRequest
from dgprecompile.planning.request import plan_from_request
from dgprecompile.runtimes import JIT_FAMILIES, family_for
from dgprecompile.runtimes.jit_loader import ServerPath

REPO = Path(__file__).resolve().parent.parent

DEEPSEEK_V3 = {"model_type": "deepseek_v3", "hidden_size": 7168, "num_attention_heads": 128,
               "num_key_value_heads": 128, "num_hidden_layers": 61, "q_lora_rank": 1536, "kv_lora_rank": 512,
               "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "intermediate_size": 18432,
               "moe_intermediate_size": 2048, "n_routed_experts": 256, "n_shared_experts": 1,
               "num_experts_per_tok": 8, "first_k_dense_replace": 3, "torch_dtype": "bfloat16",
               "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096},
               "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128], "fmt": "e4m3"}}

# The child: SGLang's own builders, with tvm-ffi's build stopped before it writes a file (or run, with "build")
CHILD = r"""
import json, os, sys
mods = json.loads(sys.argv[1]); really = sys.argv[2] == "build"
import importlib, torch
import tvm_ffi.cpp.extension as ext
from sglang.jit_kernel.utils import override_jit_cuda_arch
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
out = {}
for d in mods:
    m = JitModule.from_dict(d)
    fam = get_family(m.family)
    naming = naming_for(fam, os.environ["SGLANG_VERSION"])
    builder = getattr(importlib.import_module(m.python), m.builder)
    kwargs = {k: resolve_args(v) if isinstance(v, list) else v for k, v in dict(m.kwargs).items()}
    seen.clear()
    try:
        with override_jit_cuda_arch(9, 0):
            builder(*resolve_args(list(m.args)), **kwargs)
    except Stop:
        pass
    except Exception as exc:  # after a real build: loading may need a GPU
        seen.setdefault("error", repr(exc)[:300])
    cache = os.environ["TVM_FFI_CACHE_DIR"]
    made = sorted(os.listdir(cache)) if os.path.isdir(cache) else []
    out[m.id] = {"sglang": seen.get("last"), "computed": [naming.module_name(m), naming.entry_name(m)],
                 "made": made, "error": seen.get("error")}
print("RESULT " + json.dumps(out))
"""


def _plans():
    """The modelled 0.5.14 paths: the README's Qwen3-MoE server (Triton MoE runner), the DeepGEMM MoE runner,
    an FP8 KV cache with the fused q/k-norm+rope option at tp 2."""
    qwen = dict(model="Qwen3-Coder-480B", sglang="0.5.14")
    return {
        "qwen3 tp8 ep8": plan_from_request(PlanRequest(tp=8, ep=8, **qwen)),
        "qwen3 deep_gemm runner": plan_from_request(PlanRequest(tp=8, ep=8, moe_runner_backend="deep_gemm", **qwen)),
        "SpecForge 0.2.0 capture server": plan_from_request(PlanRequest(
            specforge_config=str(REPO / "examples" / "specforge-0.2" / "run.yaml"))),
        "qwen3 fp8 kv, fused qk-norm rope": plan_from_request(PlanRequest(
            sglang="0.5.14", sglang_cmd="python -m sglang.launch_server --model-path Qwen/Qwen3-30B-A3B-FP8 --tp 2 "
                                        "--kv-cache-dtype fp8_e4m3 --enable-fused-qk-norm-rope")),
    }


def _deepseek_plans(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(DEEPSEEK_V3))
    return {f"deepseek_v3 tp{tp}": plan_from_request(PlanRequest(model=str(tmp_path), tp=tp, ep=tp, sglang="0.5.14"))
            for tp in (8, 1)}


def _child(modules, cache, build=False, timeout=900):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([sglang_014_dir(), STANDINS, str(REPO)]),
           "TVM_FFI_CACHE_DIR": str(cache), "SGLANG_VERSION": "0.5.14", "MAX_JOBS": "2",
           "CUDA_HOME": os.path.dirname(os.path.dirname(NVCC)),
           "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]}
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps([m.to_dict() for m in modules]),
                           "build" if build else "name"], capture_output=True, text=True, env=env, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


# ---- what the family object says, and how stages find it -------------------------------------------------


def test_one_family_covers_0_5_9_to_0_5_17_and_the_plan_asks_it():
    family = family_for("0.5.14")
    assert family is JIT_FAMILIES["tvm-ffi"] and family.strict_by == "hook"
    assert [family_for(v) is family for v in ("0.5.8", "0.5.9", "0.5.17", "0.5.18")] == [False, True, True, False]
    assert family.launch_env("/c") == [("TVM_FFI_CACHE_DIR", "/c/tvm-ffi")]
    assert family.key_fields() == ("sglang_jit.sglang", "sglang_jit.tvm_ffi", "sglang_jit.arch")
    assert all(m.family == "tvm-ffi" for m in _plans()["qwen3 tp8 ep8"].jit_modules.values())


def test_a_path_fact_turns_a_module_on_or_off():
    family = JIT_FAMILIES["tvm-ffi"]
    base = dict(model_type="qwen3_moe", tp=8, model=(("qk_norm", True), ("rope_neox", True), ("rope_dim", 128),
                                                      ("head_dim", 128), ("torch_dtype", "torch.bfloat16"),
                                                      ("cpp_dtype", "bf16_t"), ("mla", False),
                                                      ("kv_store_fused", True), ("kv_row_bytes", 256)),
                extra=(("enable_fused_qk_norm_rope", False), ("enable_deterministic_inference", False),
                       ("cuda_graph_tc_compiler", "eager")))
    names = {m.name for m in family.plan_modules("0.5.14", ServerPath(**base))[0]}
    assert {"custom_all_reduce_base", "qknorm", "fused_rope", "clamp_position", "activation"} <= names
    assert "kvcache" not in names
    one_gpu = {m.name for m in family.plan_modules("0.5.14", ServerPath(**{**base, "tp": 1}))[0]}
    assert not any(n.startswith("custom_all_reduce") for n in one_gpu)
    no_car = {m.name for m in family.plan_modules("0.5.14", ServerPath(**{**base, "custom_all_reduce": False}))[0]}
    assert not any(n.startswith("custom_all_reduce") for n in no_car)
    inductor = dict(base, extra=(("enable_fused_qk_norm_rope", False), ("enable_deterministic_inference", False),
                                 ("cuda_graph_tc_compiler", "inductor")))
    assert "qknorm" not in {m.name for m in family.plan_modules("0.5.14", ServerPath(**inductor))[0]}


def test_server_options_reach_the_plan():
    plans = _plans()
    capture = plans["SpecForge 0.2.0 capture server"]
    assert capture.sglang_version == "0.5.14"  # SpecForge 0.2.0's pin; its capture server's tp reaches all-reduce
    push = next(m for m in capture.jit_modules.values() if m.name == "custom_all_reduce_push")
    assert push.template[1] == str(capture.tp) and capture.tp > 1
    fused = {m.name for m in plans["qwen3 fp8 kv, fused qk-norm rope"].jit_modules.values()}
    assert {"fused_qknorm_rope", "kvcache"} <= fused and not {"qknorm", "fused_rope"} & fused
    kv = next(m for m in plans["qwen3 fp8 kv, fused qk-norm rope"].jit_modules.values() if m.name == "kvcache")
    assert kv.template == ("256", "true")  # 4 KV heads / tp 2 x head_dim 128 x 1 byte (fp8)


# ---- the wheel's own builders name every planned module as dgprecompile does -----------------------------


@needs_sgl014
def test_every_planned_module_is_named_as_sglangs_own_builder_names_it(tmp_path):
    plans = {**_plans(), **_deepseek_plans(tmp_path)}
    modules = {m.id: m for p in plans.values() for m in p.jit_modules.values()}
    assert len(modules) >= 14  # the union of the paths above
    result = _child(list(modules.values()), tmp_path / "tvm-ffi")
    assert sorted(result) == sorted(modules)
    for mid, r in result.items():
        assert r["sglang"] == r["computed"], (mid, r)
    assert not (tmp_path / "tvm-ffi").exists()  # stopped before tvm-ffi wrote its build directory


@needs_sgl014
@needs_nvcc
def test_a_real_gpu_free_build_lands_in_the_computed_directory(tmp_path):
    clamp = next(m for m in _plans()["qwen3 tp8 ep8"].jit_modules.values() if m.name == "clamp_position")
    r = _child([clamp], tmp_path / "tvm-ffi", build=True)[clamp.id]
    name, entry = r["computed"]
    assert r["made"] == [entry], r
    assert (tmp_path / "tvm-ffi" / entry / f"{name}.so").stat().st_size > 10_000


# one module of each other kind: templates of dtype and pdl, of ints, the driver-linked all-reduce
SLOW_KINDS = ("activation", "qknorm", "fused_rope", "custom_all_reduce_base", "custom_all_reduce_push")


@pytest.mark.slow
@needs_sgl014
@needs_nvcc
@pytest.mark.parametrize("name", SLOW_KINDS)
def test_each_module_kind_builds_gpu_free_where_the_runtime_looks(name, tmp_path):
    module = next(m for m in _plans()["qwen3 tp8 ep8"].jit_modules.values() if m.name == name)
    r = _child([module], tmp_path / "tvm-ffi", build=True)[module.id]
    assert r["made"] == [r["computed"][1]], r


def test_no_stage_compares_a_family_or_release_name():
    """Stages ask the JitFamily; a comparison with a family id or a modelled release would be a second copy."""
    import re

    names = [re.escape(f.id) for f in JIT_FAMILIES.values()] + [re.escape(v) for f in JIT_FAMILIES.values()
                                                             for v in f.modelled_versions()]
    alternatives = "|".join(names)
    pattern = re.compile(r"""(==|!=|\bin\b)\s*\(?\s*["'](""" + alternatives + r""")["']""")
    offenders = []
    for path in sorted((REPO / "dgprecompile").rglob("*.py")):
        if path.name == "jit_families.py" or path.parent.name == "hook":
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line.split("#")[0]):
                offenders.append(f"{path.relative_to(REPO)}:{i}: {line.strip()}")
    assert offenders == []
