"""SGLang's own ninja JIT loader (sglang/kernels/jit, 0.5.20-0.5.23), checked against sglang 0.5.23's own code.

The oracle is the release itself: its call sites' builders (activation_module, _jit_fused_rope_module, ...) with
the arguments a Hopper server passes, run under its own arch override with its own strict switch
SGLANG_CRASH_ON_JIT_COMPILE=1 on an empty cache: the loader computes the module's name and build key and raises,
naming the directory it looked in (loader.py:253-259), without building. dgprecompile's computed directories must
be exactly those. One real build (slow) goes through dgprecompile's worker and is then loaded by the release's
loader under the strict switch: a hit, nothing built, and a deleted leaf is refused by name.

STAND-INS (this CPU machine cannot run them): tests/standins' triton package (sglang imports it at module
level), and ``sglang.kernels.jit.utils.arch.is_cuda`` returning True in the oracle child: this machine's torch
is a CPU build, and on it get_activation_cuda_cflags() drops --use_fast_math (arch.py:367-370), which a CUDA
torch on a GPU machine does not.
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
from helpers import STANDINS, Background, beside_venv, no_user_sglang_env, sgl_deep_gemm_dir, tree_hash
from test_triton_path import TRITON, _server_plan

from dgprecompile.keys.schemes import naming_for

REPO = str(Path(__file__).resolve().parents[1])
VERSION = "0.5.23"
CUDA_HOME = "/usr/local/cuda"


def sglang_023_dir() -> str | None:
    """sglang 0.5.23 and its kernels/jit import chain (Makefile SGL023), or $DGP_SGLANG_023."""
    return beside_venv("sglang-0.5.23", "sglang/kernels/jit/utils/compile/loader.py", "DGP_SGLANG_023")


needs_sgl023 = pytest.mark.skipif(sglang_023_dir() is None,
                                  reason="sglang 0.5.23 not installed beside the venv (make setup: SGL023)")
needs_nvcc = pytest.mark.skipif(not os.path.isfile(os.path.join(CUDA_HOME, "bin", "nvcc")), reason="no nvcc")

# (module id in the plan, the release's own call-site builder and the arguments a Hopper server passes it)
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
    ("sglang_jit:qknorm<128,true,bf16_t,true>", "sglang.kernels.ops.layernorm.norm", "_jit_qknorm_module",
     "128, torch.bfloat16"),
    ("sglang_jit:communicator<>", "sglang.kernels.ops.communication.all_reduce", "_init_communicator", ""),
    ("sglang_jit:cuda_ipc<>", "sglang.kernels.ops.communication.all_reduce", "_init_ipc_manager", ""),
    ("sglang_jit:custom_all_reduce<bf16_t,8,true>", "sglang.kernels.ops.communication.all_reduce",
     "get_all_reduce_module", "torch.bfloat16, 8"),
    ("sglang_jit:clamp_position<int64_t>", "sglang.kernels.ops.attention.clamp_position",
     "_jit_clamp_position_module", "torch.int64"),
    ("sglang_jit:set_mla_kv_buffer<1024,128,true>", "sglang.kernels.ops.kvcache.set_mla_kv_buffer",
     "set_mla_kv_buffer_module", "1024, 128, True"),
    ("sglang_jit:tiny_n_gemm<256,7168,16,2,fp32_t,true,bf16_t>", "sglang.kernels.ops.gemm.tiny_gemm",
     "_jit_tiny_gemm_module", "256, 7168, 16, 2, torch.float32, torch.bfloat16"),
]

ORACLE_CHILD = """
import importlib, json, os, re, sys, torch
import sglang.kernels.jit.utils.arch as arch
arch.is_cuda = lambda: True  # STAND-IN: a CUDA torch (see the test module's docstring)
from sglang.kernels.jit.utils import override_jit_cuda_arch
root = os.environ["SGLANG_JIT_CACHE_DIR"]
out = {}
for mid, module, fn, args in json.loads(sys.argv[1]):
    with override_jit_cuda_arch(9, 0):
        try:
            eval(f"importlib.import_module(module).{fn}({args})")
            out[mid] = "LOADED"
        except RuntimeError as exc:
            m = re.search(r"has no usable cached build under (\\S+), and SGLANG_CRASH_ON_JIT_COMPILE", str(exc))
            out[mid] = os.path.relpath(m.group(1), root) if m else "OTHER " + str(exc)[:300]
print(json.dumps({"dirs": out, "left": sorted(os.listdir(root))}))
"""


def _env(cache: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_", "TVM_FFI_", "DGPRECOMPILE_"))}
    env.update({"PYTHONPATH": os.pathsep.join([REPO, sglang_023_dir() or "", STANDINS]), "CUDA_HOME": CUDA_HOME,
                "SGLANG_JIT_CACHE_DIR": str(cache), "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"})
    env.update(extra)
    return env


def _child(code: str, env: dict[str, str], *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture
def naming(monkeypatch):
    """dgprecompile's naming of the installed sglang 0.5.23, in this process (sglang itself is not imported)."""
    monkeypatch.syspath_prepend(sglang_023_dir())
    monkeypatch.setenv("CUDA_HOME", CUDA_HOME)
    for name in [k for k in os.environ if k.startswith("SGLANG_")]:
        monkeypatch.delenv(name)
    from dgprecompile.runtimes import family_for

    return naming_for(family_for(VERSION), VERSION)


# config.json facts the planner reads (planning/sglang_jit.py server_path): Qwen3-MoE's 128-wide heads, DeepSeek-V3's
# 64-wide rope head of its MLA latent
CONFIG_FACTS = {"qwen3_moe": {"rope_neox": True, "rope_dim": 128, "cpp_dtype": "bf16_t"},
                "deepseek_v3": {"rope_neox": False, "rope_dim": 64, "cpp_dtype": "bf16_t"}}


def _path(model_type, **kw):
    from dgprecompile.runtimes.jit_loader import ServerPath

    kw.setdefault("quant", "fp8")
    return ServerPath(model_type, model=tuple(CONFIG_FACTS[model_type].items()), **kw)


def _planned(naming):
    from dgprecompile.runtimes import family_for

    family = family_for(VERSION)
    mods = {}
    for model in ("qwen3_moe", "deepseek_v3"):
        found, notes = family.plan_modules(VERSION, _path(model, tp=8, ep=8))
        assert not notes
        mods.update({m.id: m for m in found})
    return mods


@needs_sgl023
def test_every_module_of_both_server_paths_is_named_and_keyed_as_the_release_computes(naming, tmp_path):
    cache = tmp_path / "jit"
    cache.mkdir()
    r = _child(ORACLE_CHILD, _env(cache, SGLANG_CRASH_ON_JIT_COMPILE="1"), json.dumps(ORACLE))
    assert r.returncode == 0, r.stderr[-3000:]
    seen = json.loads(r.stdout.strip().splitlines()[-1])
    assert seen["left"] == []  # the strict switch refuses before making anything (loader.py:251-259)
    planned = _planned(naming)
    assert sorted(planned) == sorted(mid for mid, *_ in ORACLE)  # the inventory is exactly the oracle's list
    for mid, module in planned.items():
        assert seen["dirs"][mid] == naming.entry_name(module), mid


@needs_sgl023
def test_paths_and_options_choose_the_modules(naming):
    from dgprecompile.runtimes import family_for

    family = family_for(VERSION)

    def ids(**kw):
        return [m.name for m in family.plan_modules(VERSION, _path(**kw))[0]]

    assert "custom_all_reduce" not in ids(model_type="qwen3_moe", quant="fp8", tp=1)
    assert "custom_all_reduce" not in ids(model_type="qwen3_moe", quant="fp8", tp=8, custom_all_reduce=False)
    assert ids(model_type="qwen3_moe", quant=None, tp=1).count("per_token_group_quant") == 0
    assert ids(model_type="qwen3_moe", tp=1).count("per_token_group_quant") == 2
    # the deep_gemm runner's own SiLU-and-mul in its compact layout (moe_runner/deep_gemm.py:572-573, sm_90)
    assert "activation" in ids(model_type="qwen3_moe", quant="fp8", moe_runner="deep_gemm")
    # DeepSeek's dense MLPs take the same JIT activation whatever the MoE runner (a strict launch of 0.5.23's
    # DeepSeek-V3 with --moe-runner-backend deep_gemm refused it in layers.0.mlp: 2026-12-06-h100-model-dsv3-0523-
    # deepgemm-moe): one module, the Triton runner's own, planned once where both paths need it
    from dgprecompile.runtimes.jit_loader import ServerPath

    dense = tuple({**CONFIG_FACTS["deepseek_v3"], "dense_act_jit": True}.items())
    for runner in ("deep_gemm", "triton"):
        found = family.plan_modules(VERSION, ServerPath("deepseek_v3", quant="fp8", tp=8, moe_runner=runner,
                                                        model=dense))[0]
        assert [naming.entry_name(m) for m in found if m.name == "activation"] == [
            naming.entry_name(m) for m in _planned(naming).values() if m.name == "activation"]
    # a runner whose SiLU-and-mul is not this module's (none modelled here): only the dense layers' fact plans it
    assert "activation" not in ids(model_type="deepseek_v3", tp=8, moe_runner="flashinfer_cutlass")
    tp4 = [m for m in family.plan_modules(VERSION, _path("qwen3_moe", tp=4))[0]
           if m.name == "custom_all_reduce"]
    assert [m.template for m in tp4] == [("bf16_t", "4", "true")]
    assert naming.entry_name(tp4[0]).startswith("sm90a/sgl_kernel_jit_custom_all_reduce_bf16_t_4_true/build-")
    assert set(family.modelled_versions()) == {"0.5.20", "0.5.21", "0.5.22", "0.5.23"}


def test_the_dense_activation_follows_the_configs_width_per_rank():
    """planning/sglang_jit.py dense_act_jit: DeepSeek-V3's dense MLP (18432 wide, 3 dense layers) is 2304 per rank
    at tp 8, a multiple of 8 bf16 lanes: the JIT kernel; at tp 3 (6144) too, at tp 7 (2633) not; Qwen3-MoE has no
    dense layer. The fact read from the bundled config.json files as the planner reads them."""
    from types import SimpleNamespace

    from dgprecompile.planning.sglang_jit import server_path

    def dense(name, tp):
        with open(f"{REPO}/dgprecompile/data/models/{name}.json") as f:
            model = SimpleNamespace(config=json.load(f))
        path = server_path(model, {}, SimpleNamespace(tp=tp, ep=1, moe_runner_backend=None), {},
                           "sglang_jit_ninja.yaml")
        return dict(path.model)["dense_act_jit"]

    assert dense("DeepSeek-V3", 8) and dense("DeepSeek-V3", 3) and not dense("DeepSeek-V3", 7)
    assert not dense("Qwen3-Coder-480B-A35B-Instruct-FP8", 8)


@needs_sgl023
def test_the_fingerprint_holds_every_field_of_the_releases_environment_key(naming, monkeypatch):
    fp = naming.fingerprint()
    assert set(fp) == set(naming.family.fingerprint_fields)
    assert fp["arch"] == "9.0a" and fp["sglang"] == VERSION and fp["cuda_home"] == CUDA_HOME
    assert fp["pkg_apache_tvm_ffi"] == "0.1.11" and fp["pkg_flashinfer_python"] == "absent"
    assert "release 13.0" in fp["nvcc_version"]
    # each input the key reads moves the key: a different CUDA_HOME spelling (cache.py:307-314 anchors only the
    # resolved toolkit), the resource-usage switch (loader.py:193-199)
    module = _planned(naming)["sglang_jit:clamp_position<int64_t>"]
    base = naming.entry_name(module)
    from dgprecompile.runtimes import family_for

    family = family_for(VERSION)
    monkeypatch.setenv("CUDA_HOME", os.path.realpath(CUDA_HOME))
    assert naming_for(family, VERSION).entry_name(module) != base
    monkeypatch.setenv("CUDA_HOME", CUDA_HOME)
    monkeypatch.setenv("SGLANG_JIT_LOG_RESOURCE_USAGE", "1")
    assert naming_for(family, VERSION).entry_name(module) != base
    assert naming_for(family, VERSION).fingerprint()["log_resource_usage"] is True


def test_launch_points_the_runtime_at_the_cache_and_turns_on_its_own_switch(tmp_path):
    from dgprecompile.runtimes import family_for

    family = family_for(VERSION)
    assert family.strict_by == "switch" and family.strict_env() == {"SGLANG_CRASH_ON_JIT_COMPILE": "1"}
    (tmp_path / "dgprecompile").mkdir()
    (tmp_path / "dgprecompile" / "index.json").write_text(json.dumps(
        {"fingerprint": {"sglang_ninja": {"cuda_home": "/opt/cuda-13.0"}}}))
    assert family.launch_env(str(tmp_path), environ={}) == [
        ("SGLANG_JIT_CACHE_DIR", str(tmp_path / "sglang-jit")), ("CUDA_HOME", "/opt/cuda-13.0")]
    # the job's own toolkit choice is left alone (verify names a difference in cuda_home instead)
    assert family.launch_env(str(tmp_path), environ={"CUDA_HOME": "/usr/local/cuda"}) == [
        ("SGLANG_JIT_CACHE_DIR", str(tmp_path / "sglang-jit"))]
    assert family_for("0.5.17") is None or family_for("0.5.17").id != family.id
    assert family_for("0.5.19") is None or family_for("0.5.19").id != family.id


WORKER_CHILD = """
import json, sys
from dgprecompile.compile.backends import WorkItem
from dgprecompile.compile.backends.workers import load_worker_backend, preload
job, item = json.loads(sys.argv[1]), json.loads(sys.argv[2])
preload("kernels-jit", job)
worker = load_worker_backend("kernels-jit", job)
try:
    print(json.dumps(worker.compile(WorkItem(**item))))
finally:
    worker.close()
"""

LOAD_CHILD = """
import os, torch
from sglang.kernels.jit.utils import override_jit_cuda_arch
from sglang.kernels.ops.attention.clamp_position import _jit_clamp_position_module
with override_jit_cuda_arch(9, 0):
    try:
        module = _jit_clamp_position_module(torch.int64)
        print("LOADED", type(module).__name__)
    except RuntimeError as exc:
        print("REFUSED", str(exc).splitlines()[0])
"""


@needs_sgl023
@needs_nvcc
@pytest.mark.slow
@pytest.mark.usefixtures("clamp_warm")  # the CLI test's warm, built beside this test's own build
def test_a_warmed_module_is_a_hit_for_the_releases_strict_loader_and_a_deleted_one_is_refused(naming, tmp_path):
    from dgprecompile.cache.store import CacheStore
    from dgprecompile.runtimes import family_for

    family = family_for(VERSION)
    module = _planned(naming)["sglang_jit:clamp_position<int64_t>"]
    cache = tmp_path / "cache"
    job = {"cache_dir": str(cache), "arch": "sm_90a", "cuda_home": CUDA_HOME,
           "ninja_dir": os.path.dirname(sys.executable), **family.worker_job(naming, [module])}
    item = {"kernel": module.id, "family": family.backend, "params": family.build_params(naming, module),
            "kernel_type": "SGLANG_JIT", "n": 0, "k": 0, "num_groups": 0, "m": 0}
    r = _child(WORKER_CHILD, _env(tmp_path / "unused"), json.dumps(job), json.dumps(item))
    assert r.returncode == 0, r.stderr[-3000:]
    status, entries, seconds = json.loads(r.stdout.strip().splitlines()[-1])
    assert status == "compiled" and seconds > 0
    store = CacheStore(cache)
    scope = naming.entry_name(module)
    assert entries == [family.installed_entry(naming, module, store.area_dir(family.area))]
    assert entries[0].startswith(scope + "/deps-") and store.list_entries(family.area) == entries
    leaf = store.entry_path(entries[0], family.area)
    assert sorted(os.listdir(leaf)) == sorted(["sgl_deps.json", naming.library(module)])
    assert not list((cache / "dgprecompile" / "staging").iterdir())

    # a second warm finds it by the runtime's own hit test
    r2 = _child(WORKER_CHILD, _env(tmp_path / "unused"), json.dumps(job), json.dumps(item))
    assert json.loads(r2.stdout.strip().splitlines()[-1])[0] == "cached", r2.stderr[-2000:]

    # the release's loader under launch's variables: loads it, builds nothing
    launch = dict(family.launch_env(str(cache), environ={"CUDA_HOME": CUDA_HOME})) | family.strict_env()
    before = tree_hash(cache)
    hit = _child(LOAD_CHILD, _env(tmp_path / "unused", **launch))
    assert hit.stdout.startswith("LOADED"), hit.stdout + hit.stderr[-2000:]
    assert tree_hash(cache) == before

    # record, pack and unpack the nested entry: the copy is a hit too
    record = store.record_entry(entries[0], seconds, area=family.area)
    assert set(record.files) == {"sgl_deps.json", naming.library(module)}
    assert record.member_dir == f"sglang-jit/{entries[0]}"

    # a deleted leaf: the release's own switch refuses, naming the module
    for f in leaf.iterdir():
        f.unlink()
    leaf.rmdir()
    refused = _child(LOAD_CHILD, _env(tmp_path / "unused", **launch))
    assert refused.stdout.startswith("REFUSED"), refused.stdout + refused.stderr[-2000:]
    assert naming.module_name(module) in refused.stdout and "SGLANG_CRASH_ON_JIT_COMPILE" in refused.stdout
    assert family.installed_entry(naming, module, store.area_dir(family.area)) is None


# ---- the stages, through the CLI ------------------------------------------------------------------------

CLAMP = "sglang_jit:clamp_position<int64_t>"


def _cli(*args, env_extra=None, timeout=900) -> subprocess.CompletedProcess:
    return _cli_started(*args, env_extra=env_extra, timeout=timeout).result()


def _cli_started(*args, env_extra=None, timeout=900) -> Background:
    """dgprecompile's CLI beside sglang 0.5.23 and the DeepGEMM generation it uses (warm asks for it), started."""
    env = _env(Path("/nonexistent"), **(env_extra or {}))
    env["PYTHONPATH"] += os.pathsep + (sgl_deep_gemm_dir("0.2.2") or "")
    env.pop("SGLANG_JIT_CACHE_DIR")
    env.pop("CUDA_HOME")  # warm, verify and launch choose the toolkit themselves (toolkit_home)
    # one known search order, whatever PATH the caller has (CI puts /usr/local/cuda-13.0/bin first): a bare nvcc
    # wrapper in /usr/local/bin (no toolkit there, skipped), then CUDA_HOME's nvcc
    rest = [d for d in env.get("PATH", "").split(os.pathsep) if d and "cuda" not in d and d != "/usr/local/bin"]
    env["PATH"] = os.pathsep.join(["/usr/local/bin", os.path.join(CUDA_HOME, "bin"), *rest])
    return Background([sys.executable, "-m", "dgprecompile", *map(str, args)], timeout=timeout, env=env,
                      cwd=tempfile.gettempdir())  # launch writes its misses file here


def _files(root: Path) -> dict[str, str]:
    import hashlib

    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def clamp_only(tmp_path_factory):
    """The 480B tp8/ep8 plan for sglang 0.5.23 with DeepGEMM's kernels and the Triton MoE item dropped and one JIT
    module kept."""
    from dgprecompile.planning.manifest import plan_from_dict, write_manifest
    from dgprecompile.planning.plan import PlanRequest
    from dgprecompile.planning.request import plan_from_request

    data = plan_from_request(PlanRequest(model="Qwen3-Coder-480B", tp=8, ep=8, sglang=VERSION)).to_dict()
    for shape in data["shapes"]:
        shape["buckets"], shape["aux_kernels"] = [], []
    data["kernels"], data["total_kernels"] = [], 0  # a trimmed manifest states its own count
    data["sglang_jit_modules"] = [m for m in data["sglang_jit_modules"] if m["id"] == CLAMP]
    data.pop("inductor", None)  # the torch.compile items need the job's GPU: tests/test_inductor_graphs.py
    data.pop("flashinfer", None)  # FlashInfer's modules: tests/test_flashinfer_modules.py
    data.pop("triton_path", None)  # the model path's other Triton kernels: tests/test_triton_path.py
    assert data.pop("triton_moe", None)  # the MoE's Triton item (tests/test_triton_moe_plan.py warms 0.5.23's)
    assert len(data["sglang_jit_modules"]) == 1 and data["sglang_jit_modules"][0]["family"] == "sglang-ninja"
    path = tmp_path_factory.mktemp("plan") / "clamp.yaml"
    write_manifest(plan_from_dict(data), path)
    return path


@pytest.fixture(scope="module")
def clamp_warm(clamp_only, tmp_path_factory):
    """The CLI warm of :func:`clamp_only` into a cache of its own, started when first asked for: the worker test
    asks first, so that this nvcc build runs beside that test's own one; the CLI test reads it. (cache, the warm)"""
    cache = tmp_path_factory.mktemp("clamp-warm") / "cache"
    if sgl_deep_gemm_dir("0.2.2") is None or not os.path.isfile(os.path.join(CUDA_HOME, "bin", "nvcc")):
        yield cache, None  # the CLI test is skipped
        return
    with no_user_sglang_env():  # conftest unsets them per test, after this module-scoped fixture
        warm = _cli_started("warm", "--manifest", clamp_only, "--cache-dir", cache, "--sglang-jit", "on", "--json")
        yield cache, warm
        warm.stop()


LAUNCHED = """
import os, torch
from sglang.kernels.jit.utils import override_jit_cuda_arch
from sglang.kernels.ops.attention.clamp_position import _jit_clamp_position_module
print("ENV", os.environ.get("SGLANG_JIT_CACHE_DIR"), os.environ.get("SGLANG_CRASH_ON_JIT_COMPILE"),
      os.environ.get("CUDA_HOME"))
with override_jit_cuda_arch(9, 0):  # the GPU's arch, as the H200 detects it (this machine has none)
    try:
        _jit_clamp_position_module(torch.int64)
        print("LOADED")
    except RuntimeError as exc:
        print("REFUSED", str(exc).splitlines()[0])
"""


@needs_sgl023
@needs_nvcc
@pytest.mark.skipif(sgl_deep_gemm_dir("0.2.2") is None, reason="sgl-deep-gemm 0.2.2 not beside the venv (make setup)")
@pytest.mark.slow
def test_warm_verify_pack_unpack_and_strict_launch_of_a_0_5_23_module(clamp_only, clamp_warm, tmp_path):
    cache, warm = clamp_warm
    w = warm.result()
    assert w.returncode == 0, w.stdout + w.stderr
    assert json.loads(w.stdout)["compiled"] == 1
    v = _cli("verify", "--manifest", clamp_only, "--cache-dir", cache, "--json")
    assert v.returncode == 0 and json.loads(v.stdout)["coverage"] == "proved", v.stdout + v.stderr
    index = json.loads((cache / "dgprecompile" / "index.json").read_text())
    assert index["kernels"][CLAMP]["area"] == "sglang-jit"
    assert index["fingerprint"]["sglang_ninja"]["cuda_home"] == CUDA_HOME  # toolkit_home: /usr/local/bin is no toolkit

    art = tmp_path / "a.tar.gz"
    assert _cli("pack", "--manifest", clamp_only, "--cache-dir", cache, "-o", art).returncode == 0
    other = tmp_path / "unpacked"
    u = _cli("unpack", art, "--cache-dir", other)
    assert u.returncode == 0, u.stderr
    assert _files(other / "sglang-jit") == _files(cache / "sglang-jit")  # same leaf, same bytes (modes: pack's)
    assert _cli("verify", "--manifest", clamp_only, "--cache-dir", other).returncode == 0

    child = tmp_path / "child.py"
    child.write_text(LAUNCHED)
    before = tree_hash(other / "sglang-jit")
    hit = _cli("launch", "--manifest", clamp_only, "--cache-dir", other, "--", sys.executable, child)
    assert hit.returncode == 0 and "LOADED" in hit.stdout, hit.stdout + hit.stderr
    assert f"ENV {other / 'sglang-jit'} 1 {CUDA_HOME}" in hit.stdout
    assert tree_hash(other / "sglang-jit") == before

    # a deleted module: verify names its runtime directory; strict launch's own switch refuses it by name
    leaf = next((other / "sglang-jit").glob("sm90a/*/build-*/deps-*"))
    shutil.rmtree(leaf)
    bad = _cli("verify", "--manifest", clamp_only, "--cache-dir", other, "--json")
    report = json.loads(bad.stdout)
    assert bad.returncode == 1 and report["missing"] == [CLAMP], bad.stdout
    assert "no build under sglang-jit/sm90a/sgl_kernel_jit_clamp_position_int64_t/build-" in bad.stdout
    miss = _cli("launch", "--manifest", clamp_only, "--cache-dir", other, "--allow-missing", "--", sys.executable,
                child)
    assert "REFUSED JIT module 'sgl_kernel_jit_clamp_position_int64_t' has no usable cached build" in miss.stdout, \
        miss.stdout + miss.stderr
    assert not list(leaf.parent.glob("deps-*"))  # refused before building anything

    # non-strict: the runtime builds it into the cache, and launch names it as built at run time
    built = _cli("launch", "--manifest", clamp_only, "--cache-dir", other, "--no-strict", "--allow-missing", "--",
                 sys.executable, child)
    assert built.returncode == 0 and "LOADED" in built.stdout, built.stdout + built.stderr
    assert "1 SGLang JIT modules built at run time" in built.stderr, built.stderr
    assert "sglang-jit/sm90a/sgl_kernel_jit_clamp_position_int64_t/build-" in built.stderr
    # the runtime's own leaf is where verify looks; its bytes are another build than the index recorded
    after = json.loads(_cli("verify", "--manifest", clamp_only, "--cache-dir", other, "--json").stdout)
    assert CLAMP not in after["missing"], after


PREBUILT_CHILD = """
import json, pathlib, sys
from sglang.kernels.jit.utils.compile import cache
out = {}
for scope, name in json.loads(sys.argv[1]):
    found = cache.find_prebuilt(scope=pathlib.Path(scope), module_name=name)
    out[scope] = found.parent.name if found else None
print(json.dumps(out))
"""


@needs_sgl023
def test_the_leaf_check_agrees_with_the_releases_own_lookup_and_names_what_differs(naming, tmp_path):
    from dgprecompile.keys.sglang_jit_ninja import hash_parts

    module = _planned(naming)["sglang_jit:clamp_position<int64_t>"]
    header = naming.kernel_path / "csrc" / "elementwise" / "clamp_position.cuh"
    import hashlib

    real = hashlib.sha256(header.read_bytes()).hexdigest()
    cases = {"good": [["kernels", "csrc/elementwise/clamp_position.cuh", real]],
             "changed": [["kernels", "csrc/elementwise/clamp_position.cuh", "0" * 64]],
             "gone": [["kernels", "csrc/elementwise/no_such_file.cuh", real]]}
    scopes = []
    for case, deps in cases.items():
        scope = tmp_path / case / "sm90a" / naming.module_name(module) / "build-0123456789abcdef"
        leaf = scope / ("deps-" + hash_parts([tuple(d) for d in deps]))
        leaf.mkdir(parents=True)
        (leaf / "sgl_deps.json").write_text(json.dumps(deps))
        (leaf / naming.library(module)).write_bytes(b"\x7fELF")
        scopes.append([str(scope), naming.module_name(module)])
    r = _child(PREBUILT_CHILD, _env(tmp_path), json.dumps(scopes))
    assert r.returncode == 0, r.stderr[-3000:]
    theirs = json.loads(r.stdout.strip().splitlines()[-1])
    for scope, _ in scopes:
        mine = naming.hit(Path(scope), module)
        assert (mine.name if mine else None) == theirs[scope], scope
    assert theirs[scopes[0][0]] is not None and theirs[scopes[1][0]] is None and theirs[scopes[2][0]] is None
    changed = next(Path(scopes[1][0]).iterdir())
    assert naming.leaf_problem(changed, module) == "recorded dependency kernels:csrc/elementwise/clamp_position.cuh changed"
    gone = next(Path(scopes[2][0]).iterdir())
    assert "kernels:csrc/elementwise/no_such_file.cuh is missing here" in naming.leaf_problem(gone, module)


def test_a_fingerprint_difference_in_the_releases_key_is_named():
    from dgprecompile.keys.fingerprint import differences

    recorded = {"sglang_ninja": {"sglang": VERSION, "pkg_torch": "2.13.0+cpu", "cxx_version": "c++ 12.2.0"}}
    current = {"sglang_ninja": {"sglang": VERSION, "pkg_torch": "2.11.0+cu130", "cxx_version": "c++ 12.2.0"}}
    assert [d[0] for d in differences(recorded, current)] == ["sglang_ninja.pkg_torch"]


@needs_sgl023
def test_the_builders_import_without_sglangs_front_end(tmp_path):
    """warm's workers import sglang 0.5.23's builder module without running sglang/__init__.py (its transformers
    patches and frontend language): the module and its submodules import, transformers is never loaded, and the
    package has no front end; a module the release lacks is one CompileFailed naming it."""
    child = """
import sys
from dgprecompile.compile.backends.base import import_from_sglang
from dgprecompile.errors import CompileFailed
utils = import_from_sglang("sglang.kernels.jit.utils")
assert callable(utils.override_jit_cuda_arch), utils
assert "transformers" not in sys.modules and not hasattr(sys.modules["sglang"], "Runtime")
try:
    import_from_sglang("sglang.kernels.no_such_module")
except CompileFailed as exc:
    print("refused:", exc.message)
"""
    res = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=300,
                         env=_env(tmp_path / "cache", CUDA_VISIBLE_DEVICES=""))
    assert res.returncode == 0, res.stdout + res.stderr[-3000:]
    assert "refused: cannot import sglang.kernels.no_such_module from the installed sglang" in res.stdout


# SGLang's own deep_gemm runner on meta tensors with its JIT quantiser's module choice recorded: SGLang's own loader
# names the directory it would build (refused: SGLANG_CRASH_ON_JIT_COMPILE); @LAYOUT@, # SETUP, @STOP@ and # CALL
# are each check's
_RUNNER_CHILD = """
import importlib, json, os, re, sys, torch
import sglang.kernels.jit.utils.arch as arch
arch.is_cuda = lambda: True  # STAND-IN: a CUDA torch (as the oracle above)
from sglang.kernels.jit.utils import override_jit_cuda_arch
from types import SimpleNamespace
from dgprecompile.compile import triton_moe as moe
moe.load_sglang(None, 90)  # SGLang's server args, as the warm states them
runner = importlib.import_module("sglang.srt.layers.moe.moe_runner.deep_gemm")
ptgq = importlib.import_module("sglang.kernels.ops.quantization.per_token_group_quant")
fp8 = importlib.import_module("sglang.kernels.ops.quantization.fp8_kernel")
ep = importlib.import_module("sglang.kernels.ops.moe.ep_moe_kernels")
fp8.per_token_group_quant = ptgq.per_token_group_quant  # STAND-IN: the import fp8_kernel.py:41-47 makes on CUDA only
# STAND-IN: the import of the masked preprocess's quantiser ep_moe_kernels.py:17-20 makes on CUDA only (the same one)
ep.per_token_group_quant_fp8 = fp8.sglang_per_token_group_quant_fp8
# STAND-IN for the CUDA tensors: SGLang's custom op calls its own function directly for plain CUDA tensors without
# grad (srt/utils/custom_op.py _call_directly_in_eager); meta tensors would take its fake instead
op = ptgq._per_token_group_quant_custom_op
ptgq._per_token_group_quant_custom_op = getattr(op, "op_func", None) or op.__wrapped__
from sglang.srt.layers.moe.moe_runner.base import MoeRunnerConfig
# SETUP
moe.compile_only(90)
moe.only_kernel("no Triton kernel is this check's")  # the runner's Triton kernels around the quantisers
real, asked = ptgq._jit_module, []
class Reached(Exception):
    pass
def recorded(*args, **kwargs):  # SGLang's own module choice, then its own loader, refused before any build
    try:
        real(*args, **kwargs)
        asked.append("LOADED")
    except RuntimeError as exc:
        m = re.search(r"has no usable cached build under (\\S+), and SGLANG_CRASH_ON_JIT_COMPILE", str(exc))
        asked.append(os.path.relpath(m.group(1), os.environ["SGLANG_JIT_CACHE_DIR"]) if m else "OTHER " + str(exc)[:300])
    if @STOP@:  # this check's last module
        raise Reached
    # STAND-IN for an earlier quantiser's built module (a GPU build): its launch, a no-op here
    return SimpleNamespace(per_token_group_quant=lambda *a, **k: None)
ptgq._jit_module = recorded
os.environ["SGLANG_DEEPGEMM_STANDARD_LAYOUT"] = "@LAYOUT@"  # SGLang's own switch; auto asks the GPU's memory
out = {}
for m in (1, 600):
    w1, w2, s1, s2 = moe.make_weights(experts=257, hidden=7168, intermediate=256, device="meta")
    quant = runner.DeepGemmMoeQuantInfo(w13_weight=w1, w2_weight=w2, use_fp8=True, w13_scale=s1, w2_scale=s2,
                                        block_shape=[128, 128])
    config = MoeRunnerConfig(num_experts=257, num_local_experts=257, hidden_size=7168,
                             intermediate_size_per_partition=256, top_k=9, activation="silu", is_gated=True,
                             inplace=False)
    x, weights, ids = moe.moe_inputs(m, experts=257, hidden=7168, topk=9, device="meta")
    dispatched = SimpleNamespace(hidden_states=x, hidden_states_scale=None, topk_output=(weights, ids, None))
    asked.clear()
    with override_jit_cuda_arch(9, 0):
        try:  # SGLang's own pre-permute in the layout (dispatch, then its input quantisation), then the check's call
            state = {}
            got = runner.pre_permute_standard_to_deep_gemm(dispatched, quant, config, state)
            # CALL
            out[m] = ["not reached"]
        except Reached:
            out[m] = list(asked)
print(json.dumps(out))
"""

RUNNER_QUANT_CHILD = (_RUNNER_CHILD.replace("@LAYOUT@", "compact").replace("@STOP@", "True")
                      .replace("# SETUP\n", """runner._is_cuda = True  # STAND-IN: a CPU import of the runner says False
# STAND-IN for DeepGEMM's C++ row alignment on sm_90 (it asks the GPU; tests/gpu/dg_alignment_probe.py records it)
runner.deep_gemm_wrapper.get_contiguous_layout_alignment = lambda assignments, experts: 128
"""))


def _runner_modules(child: str, cache) -> dict[str, list[str]]:
    """Run one of the _RUNNER_CHILD checks with a new JIT cache ``cache`` (Triton 3.8.0 beside SGLang 0.5.23): per m,
    the module directories SGLang's own loader named."""
    cache.mkdir()
    env = _env(cache, SGLANG_CRASH_ON_JIT_COMPILE="1", DGP_STANDINS="sgl_kernel,torchvision",
               DGP_TRANSFORMERS_EXIST_OK="1", CUDA_VISIBLE_DEVICES="")
    env["PYTHONPATH"] += os.pathsep + str(TRITON)
    r = _child(child, env)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@needs_sgl023
@pytest.mark.skipif(not (TRITON / "triton" / "__init__.py").is_file(), reason="Triton 3.8.0 not beside the venv")
def test_the_deep_gemm_runners_input_quantiser_is_a_planned_module(naming, tmp_path):
    """The deep_gemm MoE runner quantises its FP8 input in its compact pre-permute (0.5.23 moe_runner/deep_gemm.py
    1125-1133) with SGLang's JIT per_token_group_quant, its scales' layout from DeepGEMM's UE8M0 switch (off on
    sm_90): SGLang's own pre-permute on meta tensors picks the module and SGLang's own loader names the directory it
    would build (refused: SGLANG_CRASH_ON_JIT_COMPILE); DeepSeek-V3 --tp 8 --moe-runner-backend deep_gemm's plan
    holds that module (it was planned for the Triton runner only before)."""
    cache = tmp_path / "jit"
    seen = _runner_modules(RUNNER_QUANT_CHILD, cache)
    (asked,) = {tuple(v) for v in seen.values()}  # the same module at every m
    assert len(asked) == 1 and asked[0].startswith("sm90a/sgl_kernel_jit_per_token_group_quant_"), seen
    plan = _server_plan("python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 8 "
                        "--moe-runner-backend deep_gemm")
    assert asked[0] in {naming.entry_name(m) for m in plan.jit_modules.values()}, seen
    assert os.listdir(cache) == []  # the loader refused before making anything


RUNNER_MASKED_CHILD = (_RUNNER_CHILD.replace("@LAYOUT@", "masked").replace("@STOP@", "args[7]")  # masked_layout
                       .replace("# SETUP\n", """wrapper = runner.deep_gemm_wrapper
assert not wrapper.DEEPGEMM_SCALE_UE8M0 and wrapper.DEEPGEMM_NEED_TMA_ALIGNED_SCALES  # sm_90's answers
# STAND-IN for DeepGEMM's C++ scale transform (its output is the GEMM's input only; not defined without DeepGEMM)
wrapper.get_mn_major_tma_aligned_tensor = lambda sf: sf
# STAND-IN for DeepGEMM's masked grouped GEMM (C++, not on the CPU path): it writes the bf16 output SGLang allocated
wrapper.grouped_gemm_nt_f8f8bf16_masked = lambda *args, **kwargs: None
""")
                       .replace("            # CALL\n", """            assert got.use_masked_gemm
            runner.DeepGemmRunnerCore(config)._run_masked_gemm(got, quant, state)
"""))


@needs_sgl023
@pytest.mark.skipif(not (TRITON / "triton" / "__init__.py").is_file(), reason="Triton 3.8.0 not beside the venv")
def test_the_deep_gemm_runners_masked_layout_quantisers_are_planned_modules(naming, tmp_path):
    """The deep_gemm MoE runner's masked layout (0.5.23 moe_runner/deep_gemm.py :1026-1040, :712-900) quantises its
    FP8 input in moe_ep_deepgemm_preprocess with the row-major JIT per_token_group_quant, then between its grouped
    GEMMs runs the plain-SiLU masked fused quantiser (_varlen_deep_gemm_silu_mul_quant :1647-1660): SGLang's own
    pre-permute and _run_masked_gemm on meta tensors (DeepGEMM's C++ stood in) pick both modules and SGLang's own
    loader names their directories (refused: SGLANG_CRASH_ON_JIT_COMPILE); DeepSeek-V3 --tp 8 --moe-runner-backend
    deep_gemm's plan holds both, and the default runner's plan not the masked one."""
    cache = tmp_path / "jit"
    seen = _runner_modules(RUNNER_MASKED_CHILD, cache)
    (asked,) = {tuple(v) for v in seen.values()}  # the same modules at every m
    assert len(asked) == 2 and all(a.startswith("sm90a/sgl_kernel_jit_per_token_group_quant_") for a in asked), seen
    assert "_masked/build-" in asked[1] and "_flat/build-" in asked[0], seen
    plan = _server_plan("python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 8 "
                        "--moe-runner-backend deep_gemm")
    assert set(asked) <= {naming.entry_name(m) for m in plan.jit_modules.values()}, seen
    default = _server_plan("python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 8")
    assert asked[1] not in {naming.entry_name(m) for m in default.jit_modules.values()}
    assert os.listdir(cache) == []  # the loader refused before making anything
