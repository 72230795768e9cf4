"""SGLang's own ninja JIT loader without a strict switch (sglang/kernels/jit, 0.5.18-0.5.19: the
"sglang-ninja-hook" family), checked against each release's own code.

The oracle is the release itself: its call sites' builders (per_token_group_quant's _jit_module,
activation_module, ...) with the arguments a Hopper server passes, under its own arch override, with the loader's
``ninja.build`` stopped (the function strict mode's startup hook wraps; the loader calls it only on a miss): the
loader has computed the module's name and build key by then and passes the directory it would build under.
dgprecompile's computed directories must be exactly those. One real build (slow) goes through `warm`, then a strict
launch loads it through the release's own builder (a hit) and, once deleted, refuses it by name.

STAND-INS: tests/standins' triton package (sglang imports it at module level). Each release's wheel is installed
alone (--no-deps) beside the venv; its import chain comes from sglang 0.5.23's folder behind it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from helpers import STANDINS, beside_venv, sgl_deep_gemm_dir

from dgprecompile.planning.manifest import plan_from_dict, write_manifest
from dgprecompile.planning.plan import PlanRequest
from dgprecompile.planning.request import plan_from_request
from dgprecompile.runtimes import JIT_FAMILIES, family_for

REPO = str(Path(__file__).resolve().parents[1])
CUDA_HOME = "/usr/local/cuda"
RELEASES = ("0.5.18", "0.5.19")


def release_dir(version: str) -> str | None:
    return beside_venv(f"sglang-{version}", "sglang/kernels/jit/utils/compile/ninja.py",
                       f"DGP_SGLANG_0{version.rsplit('.', 1)[1]}")


def chain_dir() -> str | None:
    return beside_venv("sglang-0.5.23", "sglang/kernels/jit/utils/compile/loader.py", "DGP_SGLANG_023")


def needs(version: str):
    return pytest.mark.skipif(release_dir(version) is None or chain_dir() is None,
                              reason=f"sglang {version} and 0.5.23's import chain not installed beside the venv "
                                     "(make setup)")


# (module id, the release's own call-site builder, the arguments a Hopper server passes it); file:line in 0.5.18
ORACLE = [
    ("sglang_jit:per_token_group_quant<bf16_t,fp8_e4m3_t,128,false,false,true,false,true,flat>",
     "sglang.kernels.ops.quantization.per_token_group_quant", "_jit_module",
     "torch.bfloat16, torch.float8_e4m3fn, 128, False, False, True, False, False, True"),
    ("sglang_jit:per_token_group_quant<bf16_t,fp8_e4m3_t,128,false,true,true,false,true,flat>",
     "sglang.kernels.ops.quantization.per_token_group_quant", "_jit_module",
     "torch.bfloat16, torch.float8_e4m3fn, 128, False, True, True, False, False, True"),
    ("sglang_jit:activation<bf16_t,true>", "sglang.kernels.ops.activation.activation", "activation_module",
     "torch.bfloat16"),
    ("sglang_jit:fused_rope<true,128,true,bf16_t,bf16_t>", "sglang.kernels.ops.attention.rope",
     "_jit_fused_rope_module", "True, 128, torch.bfloat16, torch.bfloat16"),
    ("sglang_jit:fused_rope<false,64,true,bf16_t,bf16_t>", "sglang.kernels.ops.attention.rope",
     "_jit_fused_rope_module", "False, 64, torch.bfloat16, torch.bfloat16"),
    ("sglang_jit:qknorm<128,true,bf16_t>", "sglang.kernels.ops.layernorm.norm", "_jit_qknorm_module",
     "128, torch.bfloat16"),
    ("sglang_jit:communicator<>", "sglang.kernels.ops.communication.all_reduce", "_init_communicator", ""),
    ("sglang_jit:cuda_ipc<>", "sglang.kernels.ops.communication.all_reduce", "_init_ipc_manager", ""),
    ("sglang_jit:custom_all_reduce<bf16_t,8,true>", "sglang.kernels.ops.communication.all_reduce",
     "get_all_reduce_module", "torch.bfloat16, 8"),
    ("sglang_jit:clamp_position<int64_t>", "sglang.kernels.ops.attention.clamp_position",
     "_jit_clamp_position_module", "torch.int64"),
    ("sglang_jit:set_mla_kv_buffer<1024,128,true>", "sglang.kernels.ops.kvcache.set_mla_kv_buffer",
     "set_mla_kv_buffer_module", "1024, 128, True"),
    ("sglang_jit:dsv3_router_gemm<256,7168,true,true>", "sglang.kernels.ops.gemm.dsv3_router_gemm",
     "dsv3_router_gemm_module", "256, 7168, True, True"),
]

# the release's own builders with ninja.build stopped: the directory (build-key scope) the loader passes it
ORACLE_CHILD = """
import importlib, json, os, sys, torch
import sglang.kernels.jit.utils.compile.ninja as ninja
from sglang.kernels.jit.utils import override_jit_cuda_arch
root = os.environ["SGLANG_JIT_CACHE_DIR"]
class Stop(Exception):
    pass
def stop(*, spec, build_dir, build_file):
    raise Stop(os.path.relpath(os.path.dirname(str(build_dir)), root))
ninja.build = stop
out = {}
for mid, module, fn, args in json.loads(sys.argv[1]):
    with override_jit_cuda_arch(9, 0):
        try:
            eval(f"importlib.import_module(module).{fn}({args})")
            out[mid] = "LOADED"
        except Stop as s:
            out[mid] = str(s)
print(json.dumps({"dirs": out}))
"""

DEEPSEEK_V3 = {"model_type": "deepseek_v3", "hidden_size": 7168, "num_attention_heads": 128,
               "num_key_value_heads": 128, "num_hidden_layers": 61, "q_lora_rank": 1536, "kv_lora_rank": 512,
               "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "intermediate_size": 18432,
               "moe_intermediate_size": 2048, "n_routed_experts": 256, "n_shared_experts": 1,
               "num_experts_per_tok": 8, "first_k_dense_replace": 3, "torch_dtype": "bfloat16",
               "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096},
               "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128], "fmt": "e4m3"}}


def plans(version: str, tmp_path) -> dict:
    (tmp_path / "config.json").write_text(json.dumps(DEEPSEEK_V3))
    return {"qwen3 tp8 ep8": plan_from_request(PlanRequest(model="Qwen3-Coder-480B", tp=8, ep=8, sglang=version)),
            "deepseek_v3 tp8": plan_from_request(PlanRequest(model=str(tmp_path), tp=8, ep=8, sglang=version))}


def env_for(version: str, cache, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_", "TVM_FFI_", "DGPRECOMPILE_"))}
    env.update({"PYTHONPATH": os.pathsep.join([REPO, release_dir(version) or "", chain_dir() or "", STANDINS]),
                "CUDA_HOME": CUDA_HOME, "SGLANG_JIT_CACHE_DIR": str(cache), "OPENBLAS_NUM_THREADS": "1",
                "OMP_NUM_THREADS": "1"})
    env.update(extra)
    return env


NAMES = """
import json, sys
from dgprecompile.keys.schemes import naming_for
from dgprecompile.runtimes import family_for
from dgprecompile.runtimes.items import JitModule
v = sys.argv[1]
naming = naming_for(family_for(v), v)
print(json.dumps({d["id"]: naming.entry_name(JitModule.from_dict(d)) for d in json.loads(sys.argv[2])}))
"""


def test_0_5_18_and_0_5_19_are_the_hook_family_with_the_modules_of_both_servers(tmp_path):
    family = JIT_FAMILIES["sglang-ninja-hook"]
    assert [family_for(v) is family for v in ("0.5.17", "0.5.18", "0.5.19", "0.5.20")] == [False, True, True, False]
    assert family.strict_by == "hook" and family.strict_env() == {}
    assert family.hook_target == "sglang.kernels.jit.utils.compile.ninja"
    for version in RELEASES:
        ids = {mid for p in plans(version, tmp_path).values() for mid in p.jit_modules}
        assert ids == {mid for mid, *_ in ORACLE}, version


@pytest.mark.parametrize("version", [pytest.param(v, marks=needs(v)) for v in RELEASES])
def test_every_module_is_named_as_the_releases_own_builders_name_it(version, tmp_path):
    modules = {m.id: m for p in plans(version, tmp_path).values() for m in p.jit_modules.values()}
    cache = tmp_path / "jit"
    env = env_for(version, cache)
    proc = subprocess.run([sys.executable, "-c", ORACLE_CHILD, json.dumps(ORACLE)], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    theirs = json.loads(proc.stdout.strip().splitlines()[-1])["dirs"]
    names = subprocess.run([sys.executable, "-c", NAMES, version, json.dumps([m.to_dict() for m in modules.values()])],
                           env=env, capture_output=True, text=True, timeout=300)
    assert names.returncode == 0, names.stderr[-3000:]
    ours = json.loads(names.stdout.strip().splitlines()[-1])
    assert ours == theirs and len(ours) == 12, (ours, theirs)
    assert all(d.startswith("sm90a/sgl_kernel_jit_") and "/build-" in d for d in ours.values())


# ---- through the CLI: warm GPU-free, verify, strict launch loads it and refuses it (the hook) once deleted ------

CLAMP = "sglang_jit:clamp_position<int64_t>"
DG = "0.1.5.post1"  # the sgl-deep-gemm generation 0.5.18 plans for (it pins 0.1.5.post3; the same headers' family)
LAUNCHED = """
import os, torch
from sglang.kernels.jit.utils import override_jit_cuda_arch
from sglang.kernels.ops.attention.clamp_position import _jit_clamp_position_module
print("ENV", os.environ.get("SGLANG_JIT_CACHE_DIR"), os.environ.get("SGLANG_CRASH_ON_JIT_COMPILE"))
with override_jit_cuda_arch(9, 0):  # the GPU's arch, as the H200 detects it (this machine has none)
    try:
        _jit_clamp_position_module(torch.int64)
        print("LOADED")
    except RuntimeError as exc:
        print("REFUSED", str(exc).splitlines()[0])
"""


def cli(version, *args) -> subprocess.CompletedProcess:
    env = env_for(version, "/nonexistent")
    env["PYTHONPATH"] += os.pathsep + (sgl_deep_gemm_dir(DG) or "")  # the plan's DeepGEMM generation (no kernels)
    env.pop("SGLANG_JIT_CACHE_DIR")
    return subprocess.run([sys.executable, "-m", "dgprecompile", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=900, cwd=tempfile.gettempdir())  # launch writes its misses file there


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isfile(os.path.join(CUDA_HOME, "bin", "nvcc")), reason="no nvcc")
@pytest.mark.skipif(sgl_deep_gemm_dir(DG) is None, reason=f"sgl-deep-gemm {DG} not beside the venv (make setup)")
@needs("0.5.18")
def test_0_5_18_module_warmed_verified_loaded_and_refused_by_the_hook_when_missing(tmp_path):
    data = plans("0.5.18", tmp_path)["qwen3 tp8 ep8"].to_dict()
    for shape in data["shapes"]:
        shape["buckets"], shape["aux_kernels"] = [], []
    data["kernels"], data["total_kernels"] = [], 0
    data.pop("triton_moe", None)  # the Triton MoE runner's kernels: tests/test_triton_moe_plan.py
    data["sglang_jit_modules"] = [m for m in data["sglang_jit_modules"] if m["id"] == CLAMP]
    data.pop("inductor", None)  # the torch.compile items need the job's GPU: tests/test_inductor_graphs.py
    data.pop("flashinfer", None)  # FlashInfer's modules: tests/test_flashinfer_modules.py
    data.pop("triton_path", None)  # the model path's other Triton kernels: tests/test_triton_path.py
    manifest, cache = tmp_path / "clamp.yaml", tmp_path / "cache"
    write_manifest(plan_from_dict(data), manifest)
    w = cli("0.5.18", "warm", "--manifest", manifest, "--cache-dir", cache, "--sglang-jit", "on", "--json")
    assert w.returncode == 0 and json.loads(w.stdout)["compiled"] == 1, w.stdout + w.stderr
    v = cli("0.5.18", "verify", "--manifest", manifest, "--cache-dir", cache, "--json")
    assert v.returncode == 0 and json.loads(v.stdout)["coverage"] == "proved", v.stdout + v.stderr

    child = tmp_path / "child.py"
    child.write_text(LAUNCHED)
    hit = cli("0.5.18", "launch", "--manifest", manifest, "--cache-dir", cache, "--", sys.executable, child)
    assert hit.returncode == 0 and "LOADED" in hit.stdout, hit.stdout + hit.stderr
    assert f"ENV {cache / 'sglang-jit'} None" in hit.stdout  # no switch in this release: the hook refuses

    leaf = next((cache / "sglang-jit").glob("sm90a/*/build-*/deps-*"))
    shutil.rmtree(leaf)
    bad = cli("0.5.18", "verify", "--manifest", manifest, "--cache-dir", cache, "--json")
    assert bad.returncode == 1 and json.loads(bad.stdout)["missing"] == [CLAMP], bad.stdout
    miss = cli("0.5.18", "launch", "--manifest", manifest, "--cache-dir", cache, "--allow-missing", "--",
               sys.executable, child)
    assert "REFUSED dgprecompile strict mode: SGLang tried to build its JIT module " \
           "sgl_kernel_jit_clamp_position_int64_t at run time (SGLang's ninja loader, nvcc)" in miss.stdout, \
        miss.stdout + miss.stderr
    assert "strict mode refused 1 runtime compile(s)" in miss.stderr
    assert not list(leaf.parent.glob("deps-*")) and not list(leaf.parent.glob(".staging-*"))  # nothing built
