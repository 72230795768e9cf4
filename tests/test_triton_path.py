"""SGLang's model-path Triton kernels beside fused_moe_kernel (runtimes/triton_moe.py TRITON_PATH,
compile/triton_path.py): the 480B `--tp 8 --ep 8` plan's embedding and router items, warmed GPU-free with the real
sglang 0.5.23 and Triton 3.8.0 (the stack whose strict launch refused both kernels on the H100,
bench/results/2026-12-06-h100-model-480b-0523), then held against Triton 3.8.0's own JIT in a fresh process: the
launch hook's strict refusal (launch/hook, installed as a strict launch's startup installs it) stays silent for every
planned variant, also at m the warm never called, and fires, naming the kernel, for an unplanned one."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import NVCC, STANDINS, beside_venv

from dgprecompile.runtimes.triton_moe import TRITON_PATH

REPO = Path(__file__).resolve().parent.parent
MODEL = json.loads((REPO / "dgprecompile" / "data" / "models" / "Qwen3-Coder-480B-A35B-Instruct-FP8.json").read_text())
TRITON = REPO / ".venv" / "triton-3.8.0"
SGLANG = beside_venv("sglang-0.5.23", "transformers/__init__.py", "DGP_SGLANG_023")
needs_stack = pytest.mark.skipif(SGLANG is None or not (TRITON / "triton" / "__init__.py").is_file(),
                                 reason="sglang 0.5.23 and Triton 3.8.0 beside the venv (make setup)")


def _plan(sglang: str | None = "0.5.23", tp: int = 8, config: dict = MODEL):
    return TRITON_PATH.plan_items(config, tp=tp, sglang_version=sglang, gpu="h100")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(SGLANG), STANDINS, str(TRITON), str(REPO)]),
            "DGP_STANDINS": "sgl_kernel,torchvision", "DGP_TRANSFORMERS_EXIST_OK": "1", "CUDA_VISIBLE_DEVICES": ""}


def test_the_480b_plan_has_one_embedding_and_one_router_item_with_one_m_per_specialisation_class():
    items, notes = _plan()
    by_kernel = {i.kernel: i for i in items}
    emb, router = by_kernel["vocab_parallel_embedding"], by_kernel["router"]
    assert dict(emb.params) == {"vocab": 151936, "hidden": 6144, "tp": 8, "dtype": "bfloat16", "ids": "int64+int32"}
    assert emb.ms == (1,) and emb.capability == 90
    assert dict(router.params) == {"experts": 160, "topk": 8, "scoring": "softmax", "renormalize": True,
                                   "scores": "bfloat16"}
    assert router.ms == (1, 16, 17) and "moe_fused_gate.py" in router.why
    assert any("2 item(s)" in n for n in notes)
    assert type(router).from_dict(router.to_dict()) == router  # the manifest's round trip


def test_nothing_is_planned_for_a_release_not_read_tp_1_or_an_architecture_not_read():
    items, notes = _plan("0.5.19")
    assert items == [] and all("0.5.19's model path was not read" in n for n in notes)
    items, notes = _plan(tp=1)
    assert [i.kernel for i in items] == ["router"] and any("tp 1" in n for n in notes)
    items, notes = _plan(config={**MODEL, "architectures": ["DeepseekV3ForCausalLM"]})
    assert [i.kernel for i in items] == ["vocab_parallel_embedding"]
    assert any("DeepseekV3ForCausalLM" in n and "not read" in n for n in notes)


@needs_stack
def test_tritons_own_int_specialisation_has_the_three_classes_the_plan_samples():
    """Triton 3.8.0's own specialisation (libtriton's native_specialize_impl, as its JIT calls it for an int argument
    it may specialise, aligned) of every m up to 4096: exactly the classes of the planned m (data m_classes)."""
    code = textwrap.dedent("""
        import json, sys
        from triton._C.libtriton import native_specialize_impl
        from triton.backends.compiler import BaseBackend
        spec = lambda m: repr(native_specialize_impl(BaseBackend, m, False, True, True))
        print(json.dumps({"all": sorted({spec(m) for m in range(1, 4097)}),
                          "planned": sorted({spec(m) for m in map(int, sys.argv[1:])})}))
    """)
    planned = TRITON_PATH.ms("router")
    r = subprocess.run([sys.executable, "-c", code, *map(str, planned)], capture_output=True, text=True, env=_env(),
                       timeout=300)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["all"] == got["planned"] and len(got["all"]) == 3


@needs_stack
def test_the_sums_token_num_has_the_three_classes_the_plan_samples_over_every_m_that_reaches_it():
    """token_num of _moe_sum_reduce_kernel is annotated ``int``: Triton 3.8.0 keeps its specialisation under the
    annotation's type (runtime/jit.py create_function_from_signature); over m 0..32 (0: an idle forward, up to the
    <= 32 tokens that reach the kernel) exactly the classes of the planned m."""
    code = textwrap.dedent("""
        import json, sys
        from triton._C.libtriton import native_specialize_impl
        from triton.backends.compiler import BaseBackend
        from triton.runtime.jit import KernelParam
        from sglang.kernels.ops.moe.fused_moe_triton_kernels import _moe_sum_reduce_kernel as k
        (param,) = [p for p in k.params if p.name == "token_num"]
        assert param.annotation_type and not param.do_not_specialize
        spec = lambda m: repr((param.annotation_type,) + native_specialize_impl(BaseBackend, m, False, True, True)[1:])
        print(json.dumps({"all": sorted({spec(m) for m in range(0, int(sys.argv[1]) + 1)}),
                          "planned": sorted({spec(m) for m in map(int, sys.argv[2:])})}))
    """)
    planned, m_max = TRITON_PATH.ms("moe_sum_reduce"), TRITON_PATH.kernel("moe_sum_reduce")["m_max"]
    r = subprocess.run([sys.executable, "-c", code, str(m_max), *map(str, planned)], capture_output=True, text=True,
                       env={**_env(), "DGP_STANDINS": "sgl_kernel,torchvision"}, timeout=300)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.splitlines()[-1])
    assert got["all"] == got["planned"] and len(got["all"]) == 3


CHECK = textwrap.dedent("""
    import json, os, sys
    sys.path.insert(0, os.path.join(os.environ["DGP_REPO"], "dgprecompile", "launch", "hook"))
    import _dgprecompile_hook as hook
    hook.install()  # as the job's startup does (DGPRECOMPILE_STRICT=1, families triton): before Triton is imported
    from dgprecompile.compile import triton_moe as moe, triton_path as path
    moe.state_arch(90)
    from sglang.kernels.ops.embeddings.vocab_parallel_embedding import vocab_parallel_embedding
    from sglang.kernels.ops.moe.moe_fused_gate import moe_fused_gate
    import torch
    moe.compile_only(90)
    out = {}
    def ask(name, call):
        try:
            call()
            out[name] = "hit"
        except RuntimeError as exc:
            out[name] = str(exc).split(" at run time")[0]
    for rank, (rows, window) in enumerate(path.shard_windows(151936, 8)):
        weight = path.cuda_meta((rows, 6144), torch.bfloat16)
        for dt in (torch.int64, torch.int32):
            for m in (1, 7, 4096):
                ask(f"emb r{rank} {dt} m{m}", lambda: vocab_parallel_embedding(path.cuda_meta((m,), dt), weight, *window))
    for m in (1, 2, 15, 32, 33, 4096, 8191):
        scores = torch.empty((m, 160), dtype=torch.bfloat16, device="meta")
        ask(f"router m{m}", lambda: moe_fused_gate(scores, None, 8, scoring_func="softmax", renormalize=True))
    other = path.cuda_meta((151936 // 8, 4096), torch.bfloat16)
    ask("emb unplanned", lambda: vocab_parallel_embedding(path.cuda_meta((3,), torch.int64), other, 0, 18992, 0, 151936, 151936))
    scores = torch.empty((5, 128), dtype=torch.bfloat16, device="meta")
    ask("router unplanned", lambda: moe_fused_gate(scores, None, 8, scoring_func="softmax", renormalize=True))
    from sglang.kernels.ops.moe.fused_moe_triton_kernels import moe_sum_reduce_triton
    def moe_sum(m, topk, hidden, scale):
        inter = torch.empty((m, topk, hidden), dtype=torch.bfloat16, device="meta")
        out = torch.empty((m, hidden), dtype=torch.bfloat16, device="meta")
        return lambda: moe_sum_reduce_triton(inter.view(*inter.shape), out, scale)
    for name, topk, hidden, scale in (("480b", 8, 6144, 1.0), ("dsv3", 9, 7168, 2.5)):
        for m in range(0, 33):  # every m that reaches it: <= 32 tokens (0: an idle forward)
            ask(f"sum {name} m{m}", moe_sum(m, topk, hidden, scale))
    # the scale is a constexpr (its value in the key); top-k and hidden only by their int class (a top-k 8 at the
    # scale 2.5 would find DeepSeek-V3's top-k 9 entries: 8 and 9 are both "neither 1 nor % 16")
    ask("sum unplanned scale", moe_sum(3, 8, 6144, 2.0))
    ask("sum unplanned topk", moe_sum(3, 16, 6144, 1.0))
    print(json.dumps(out))
""")


@needs_stack
def test_the_warmed_entries_are_what_tritons_own_jit_looks_up_and_an_unplanned_variant_is_refused(tmp_path):
    cache, env = tmp_path / "cache", _env()
    items = [*_server_plan().triton_path.values(), *_sum_items(_server_plan(DSV3))]
    records = {}
    for item in items:
        r = subprocess.run(TRITON_PATH.warm_argv(item, str(cache), sys.executable), capture_output=True, text=True,
                           env=env, timeout=600)
        assert r.returncode == 0, r.stdout + r.stderr
        report = json.loads(r.stdout.splitlines()[-1])
        assert report["item"] == item.id and report["not_whole"] == []
        assert "left_to_capture" not in report["host_modules"], report["host_modules"]  # Triton 3.8's cuda_utils
        records[item.kernel + ("" if "topk9" not in item.id else ".dsv3")] = report["record"]
    assert len(records["vocab_parallel_embedding"]["lookups"]) == 16  # 8 ranks' shard windows x 2 ids dtypes
    assert len(records["router"]["lookups"]) == 3  # m == 1, m % 16 == 0, other
    assert len(records["moe_sum_reduce"]["lookups"]) == len(records["moe_sum_reduce.dsv3"]["lookups"]) == 3
    assert records["router"]["triton"] == "3.8.0"
    triton_dir = cache / "triton"
    for entry in records["router"]["lookups"]:  # an sm_90 launch's PDL (the arch stated to SGLang, not detected)
        assert json.loads((triton_dir / entry / "_router_triton_kernel.json").read_text())["launch_pdl"] is True
    index = json.loads((cache / "dgprecompile" / "index.json").read_text())
    filed = set(json.dumps(index.get("extra", {})).split('"'))
    assert {f"triton/{e}" for k in records.values() for e in k["lookups"]} <= filed  # warm filed them
    r = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=600,
                       env={**env, "TRITON_CACHE_DIR": str(triton_dir), "DGP_REPO": str(REPO),
                            "DGPRECOMPILE_STRICT": "1", "DGPRECOMPILE_STRICT_FAMILIES": "triton"})
    assert r.returncode == 0, r.stdout + r.stderr
    asked = json.loads(r.stdout.splitlines()[-1])
    planned = {k: v for k, v in asked.items() if "unplanned" not in k}
    assert len(planned) == 8 * 2 * 3 + 7 + 2 * 33 and set(planned.values()) == {"hit"}, planned
    assert asked["emb unplanned"].endswith("compile kernel _vocab_parallel_embedding_kernel")
    assert asked["router unplanned"].endswith("compile kernel _router_triton_kernel")
    assert asked["sum unplanned scale"].endswith("compile kernel _moe_sum_reduce_kernel")
    assert asked["sum unplanned topk"].endswith("compile kernel _moe_sum_reduce_kernel")


SERVER = "python -m sglang.launch_server --model-path Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8 --tp 8 --ep 8"
DSV3 = "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 8"


def _server_plan(cmd: str = SERVER, sglang: str = "0.5.23", gpu: str = "h100"):
    from dgprecompile.planning.plan import PlanRequest
    from dgprecompile.planning.request import plan_from_request

    return plan_from_request(PlanRequest(sglang_cmd=cmd, sglang=sglang, gpu=gpu))


def _sum_items(plan) -> list:
    return [i for i in plan.triton_path.values() if i.kernel == "moe_sum_reduce"]


def test_the_moe_sum_is_planned_per_triton_moe_shape_at_its_m_classes_for_the_480b_and_deepseek_v3():
    """0.5.23's Triton MoE combine sums m <= 32 with _moe_sum_reduce_kernel on sm_90 (data/triton_path.yaml): one item
    per top-k, hidden and scale of the plan's Triton fused MoE items, m 1, 16, 17 (token_num's three classes)."""
    (qwen,) = _sum_items(_server_plan())
    assert dict(qwen.params) == {"topk": 8, "hidden": 6144, "dtype": "bfloat16", "scale": 1.0}
    assert qwen.ms == (1, 16, 17) and qwen.capability == 90 and "fused_moe.py moe_combine_topk" in qwen.why
    assert all(m <= TRITON_PATH.kernel("moe_sum_reduce")["m_max"] for m in qwen.ms)
    (dsv3,) = _sum_items(_server_plan(DSV3))  # 8 routed + the fused shared expert; the config's scale 2.5
    assert dict(dsv3.params) == {"topk": 9, "hidden": 7168, "dtype": "bfloat16", "scale": 2.5}
    assert dsv3.ms == (1, 16, 17)
    assert type(dsv3).from_dict(dsv3.to_dict()) == dsv3


def test_the_moe_sum_is_not_planned_without_triton_moe_below_sm_90_or_where_top_k_takes_its_own_sum():
    assert _sum_items(_server_plan(SERVER + " --moe-runner-backend deep_gemm")) == []  # no Triton fused MoE
    moe = next(iter(_server_plan().triton_moe.values()))
    items, notes = TRITON_PATH.plan_items(MODEL, tp=8, sglang_version="0.5.23", gpu="h100",
                                          triton_moe=[type(moe)(**{**moe.__dict__, "topk": 2})])
    assert "moe_sum_reduce" not in {i.kernel for i in items} and any("its own sum" in n for n in notes)
    sm80 = {"name": "NVIDIA A100", "capability": 80}
    import dgprecompile.runtimes.triton_moe as tm

    real = tm.gpu_device
    try:
        tm.gpu_device = lambda gpu: sm80
        items, notes = TRITON_PATH.plan_items(MODEL, tp=8, sglang_version="0.5.23", gpu="a100", triton_moe=[moe])
    finally:
        tm.gpu_device = real
    assert "moe_sum_reduce" not in {i.kernel for i in items} and any("torch.compile'd" in n for n in notes)
    items, notes = TRITON_PATH.plan_items(MODEL, tp=8, sglang_version="0.5.19", gpu="h100", triton_moe=[moe])
    assert items == [] and any("_moe_sum_reduce_kernel" in n and "not read" in n for n in notes)


def test_the_480b_server_plan_carries_the_items_and_its_manifest_reads_them_back(tmp_path):
    from dgprecompile.planning.manifest import read_manifest, write_manifest

    plan = _server_plan()
    assert sorted(i.kernel for i in plan.triton_path.values()) == ["moe_sum_reduce", "router",
                                                                   "vocab_parallel_embedding"]
    assert all(plan.runtime_of(i) is TRITON_PATH for i in plan.triton_path.values())
    write_manifest(plan, tmp_path / "plan.yaml")
    assert read_manifest(tmp_path / "plan.yaml").triton_path == plan.triton_path


@needs_stack
@pytest.mark.skipif(not NVCC, reason="no nvcc")
def test_warm_and_verify_carry_the_480b_plans_items(tmp_path):
    """`warm` runs the 480B plan's embedding, router and MoE sum items (the plan trimmed to them, as other tests trim
    manifests) after its pool, files their entries and records; `verify` finds them whole; a deleted entry is named."""
    from helpers import sgl_deep_gemm_dir

    from dgprecompile.planning.manifest import plan_from_dict, write_manifest

    data = _server_plan().to_dict()
    for shape in data["shapes"]:
        shape["buckets"], shape["aux_kernels"] = [], []
    data["kernels"], data["total_kernels"] = [], 0
    for section in ("sglang_jit_modules", "inductor", "flashinfer", "triton_moe"):
        data.pop(section, None)
    manifest = tmp_path / "plan.yaml"
    write_manifest(plan_from_dict(data), manifest)
    env = {**_env(), "PYTHONPATH": os.pathsep.join([_env()["PYTHONPATH"], str(sgl_deep_gemm_dir("0.2.2") or "")])}
    cache = tmp_path / "cache"
    run = lambda *a: subprocess.run([sys.executable, "-m", "dgprecompile", *map(str, a), "--nvcc", NVCC, "--json"],  # noqa: E731
                                    capture_output=True, text=True, env=env, timeout=900)
    r = run("warm", "--manifest", manifest, "--cache-dir", cache, "--sglang-jit", "on")
    assert r.returncode == 0, r.stdout + r.stderr
    summary = json.loads(r.stdout)
    assert (summary["compiled"], summary["failed"]) == (3, 0), summary
    records = json.loads((cache / "dgprecompile" / "index.json").read_text())["triton_path"]
    kernels = {r["kernel"]: [e for e in r["entries"] if e.split("/")[-1] in r["lookups"]] for r in records.values()}
    assert sorted(map(len, kernels.values())) == [3, 3, 16]
    v = run("verify", "--manifest", manifest, "--cache-dir", cache)
    assert v.returncode == 0 and json.loads(v.stdout)["complete"], v.stdout + v.stderr
    gone = kernels["_router_triton_kernel"][0]
    shutil.rmtree(cache / gone)
    v = run("verify", "--manifest", manifest, "--cache-dir", cache)
    assert v.returncode != 0 and gone in v.stdout, v.stdout


def test_a_capture_never_files_a_planned_model_path_kernel():
    """A capture that built one of the plan's warmed kernels found a warm's miss (launch/capture.py)."""
    from dgprecompile.launch.capture import planned_kernels

    assert {"_vocab_parallel_embedding_kernel", "_router_triton_kernel",
            "_moe_sum_reduce_kernel"} <= planned_kernels(_server_plan())


# ---- the small-numel MoE align (_moe_align_small_numel_kernel): DeepSeek-V3's 257 local experts, top-9 ----------

def _align_items(plan) -> list:
    return [i for i in plan.triton_path.values() if i.kernel == "moe_align_small_numel"]


def test_the_small_numel_align_is_planned_for_deepseek_v3_at_every_m_up_to_64_ids_per_device_not_for_the_480b():
    """0.5.23's moe_align_block_size takes the small-numel Triton align for <= 64 top-k ids over > 63 local experts
    (data/triton_path.yaml): DeepSeek-V3 --tp 8 (257 local experts, top 9) at m 1..7 on the device the plan names;
    the 480B --tp 8 --ep 8 (20 local experts) not, and says why."""
    items = {gpu: _align_items(_server_plan(DSV3, gpu=gpu)) for gpu in ("h100", "h200")}
    for gpu, device in (("h100", "NVIDIA_H100_80GB_HBM3"), ("h200", "NVIDIA_H200")):
        (item,) = items[gpu]
        assert dict(item.params) == {"experts": 257, "hidden": 7168, "intermediate": 256, "topk": 9,
                                     "dtype": "bfloat16", "device": device}
        assert item.ms == tuple(range(1, 64 // 9 + 1)) and item.capability == 90
        assert "moe_align_block_size.py" in item.why and type(item).from_dict(item.to_dict()) == item
    assert items["h100"][0].id != items["h200"][0].id  # SGLang picks BLOCK_SIZE_M from each device's tuned file
    plan = _server_plan()
    assert _align_items(plan) == [] and any("_moe_align_small_numel_kernel" in n and "[20] local experts (top-k [8])" in n
                                            for n in plan.notes)
    assert _align_items(_server_plan(DSV3, sglang="0.5.19")) == []  # ships it, its path not read: a note
    assert any("_moe_align_small_numel_kernel not planned" in n and "not read" in n
               for n in _server_plan(DSV3, sglang="0.5.19").notes)


def test_the_small_numel_aligns_gate_is_local_experts_plus_one_above_64_and_m_times_topk_at_most_64():
    moe = next(iter(_server_plan(DSV3).triton_moe.values()))
    plan = lambda **kw: [i for i in TRITON_PATH.plan_items(  # noqa: E731
        MODEL, tp=8, sglang_version="0.5.23", gpu="h100", triton_moe=[type(moe)(**{**moe.__dict__, **kw})])[0]
        if i.kernel == "moe_align_small_numel"]
    assert plan(experts=63) == [] and [i.ms for i in plan(experts=64)] == [tuple(range(1, 8))]
    assert [i.ms for i in plan(topk=8)] == [tuple(range(1, 9))] and [i.ms for i in plan(topk=1)] == [
        tuple(range(1, 65))]
    assert plan(topk=65) == []  # one token's ids already above the limit


# the script lines that record the cache entry each Triton compile looks up (the key its own JIT computed) in
# ``looked``: observed only, the compile goes on as Triton runs it
LOOKUPS = """    from triton.compiler import compiler
    looked, real = [], compiler.get_cache_manager
    def get_cache_manager(key):  # the entry each compile looks up: the key Triton's own JIT computed (observed only)
        manager = real(key)
        looked.append(manager.key)
        return manager
    compiler.get_cache_manager = get_cache_manager
"""

ALIGN_CHECK = textwrap.dedent("""
    import importlib, json, os, sys
    sys.path.insert(0, os.path.join(os.environ["DGP_REPO"], "dgprecompile", "launch", "hook"))
    import _dgprecompile_hook as hook
    hook.install()  # as the job's startup does (DGPRECOMPILE_STRICT=1, families triton): before Triton is imported
    from dgprecompile.compile import triton_moe as moe
    fused, config = moe.load_sglang(None, 90)  # SGLang's MoE modules with the fused MoE warm's stand-ins
    moe.swap_ab_as_on_gpu(90, fused)
    # the CUDA branch of SGLang's moe_align_block_size, as a GPU server's import binds it
    align = sys.modules[fused.moe_align_block_size.__module__]
    small = importlib.import_module("sglang.kernels.ops.moe.moe_align_small_numel")
    align._is_cuda, align.SMALL_NUMEL_LIMIT, align.moe_align_small_numel = True, small.SMALL_NUMEL_LIMIT, \\
        small.moe_align_small_numel
    moe.compile_only(90)
    moe.only_kernel("_moe_align_small_numel_kernel")  # the MoE GEMMs and the rest: not this check's
    # LOOKUPS
    out, keys, blocks = {}, {}, {}
    def ask(name, device, experts, topk, m):
        config.get_device_name = lambda device_id=0: device
        config.get_moe_configs.cache_clear()
        small._moe_align_small_numel_kernel.device_caches.clear()  # no in-process hit: every call asks the disk
        w1, w2, s1, s2 = moe.make_weights(experts=experts, hidden=7168, intermediate=256, device="meta")
        x, weights, ids = moe.moe_inputs(m, experts=experts, hidden=7168, topk=topk, device="meta")
        looked.clear()
        try:  # SGLang's own fused experts, as its Triton MoE runner calls them: its config choice, its align call
            fused.fused_experts_impl(x, w1, w2, weights, ids, use_fp8_w8a8=True, w1_scale=s1, w2_scale=s2,
                                     block_shape=[128, 128])
            out[name] = "hit"
        except RuntimeError as exc:
            out[name] = str(exc).split(" at run time")[0]
        keys[name] = list(looked)
        blocks[name] = config.try_get_optimal_moe_config((experts, 512, 7168), (experts, 7168, 256), topk,
                                                         "fp8_w8a8", m, block_shape=[128, 128])["BLOCK_SIZE_M"]
    for device in ("NVIDIA H100 80GB HBM3", "NVIDIA H200"):
        for m in range(1, 12):  # every m whose 9 ids per token fit 64 (1..7), and a few above it
            ask(f"{device} m{m}", device, 257, 9, m)
    ask("unplanned topk", "NVIDIA H100 80GB HBM3", 257, 8, 1)
    print(json.dumps({"out": out, "keys": keys, "blocks": blocks}))
""".replace("    # LOOKUPS\n", LOOKUPS))


@needs_stack
def test_the_warmed_align_entries_are_the_keys_sglangs_own_fused_moe_looks_up_at_every_m(tmp_path):
    """Warm the DeepSeek-V3 plans' align items (H100 and H200), then, in a fresh process under the strict launch hook,
    run SGLang's own fused_experts_impl (its config choice for the device, its moe_align_block_size's buffers and gate,
    the CUDA branch bound as a GPU import binds it) at every m 1..11: m 1..7 hit only warmed entries (the keys
    Triton's own JIT computed), m 8.. never reach the kernel, an unplanned top-k is refused."""
    cache, env = tmp_path / "cache", _env()
    warmed = {}
    for gpu in ("h100", "h200"):
        (item,) = _align_items(_server_plan(DSV3, gpu=gpu))
        r = subprocess.run(TRITON_PATH.warm_argv(item, str(cache), sys.executable), capture_output=True, text=True,
                           env=env, timeout=600)
        assert r.returncode == 0, r.stdout + r.stderr
        report = json.loads(r.stdout.splitlines()[-1])
        assert report["not_whole"] == [] and report["record"]["ms"] == list(range(1, 8))
        warmed[gpu] = set(report["record"]["lookups"])
    # NP = NB = next_power_of_2(9 m): 16, 32, 64; block_size and numel only by their class ("% 16", "other")
    assert len(warmed["h100"]) == len(warmed["h200"]) == 3
    r = subprocess.run([sys.executable, "-c", ALIGN_CHECK], capture_output=True, text=True, timeout=600,
                       env={**env, "TRITON_CACHE_DIR": str(cache / "triton"), "DGP_REPO": str(REPO),
                            "DGPRECOMPILE_STRICT": "1", "DGPRECOMPILE_STRICT_FAMILIES": "triton"})
    assert r.returncode == 0, r.stdout + r.stderr
    got = json.loads(r.stdout.splitlines()[-1])
    for device, gpu in (("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H200", "h200")):
        for m in range(1, 8):
            name = f"{device} m{m}"
            assert got["out"][name] == "hit" and len(got["keys"][name]) == 1, (name, got)
            assert set(got["keys"][name]) <= warmed[gpu], name
        assert {m: got["keys"][f"{device} m{m}"] for m in range(8, 12)} == {m: [] for m in range(8, 12)}
    # the devices' tuned files differ (H200 ships one for E=257,N=256, H100 runs SGLang's default): the block sizes
    # SGLang picked are what the warm met, not numbers of the plan's
    assert {got["blocks"][f"NVIDIA H100 80GB HBM3 m{m}"] for m in range(1, 8)} == {64}
    assert {got["blocks"][f"NVIDIA H200 m{m}"] for m in range(1, 8)} == {16}
    # ... and yet the same three entries: block_size is in the key by its class only (16 and 64 both "% 16"), and
    # below E + 1 ids expert_ids holds numel blocks whatever the block size, so NB follows numel
    assert warmed["h100"] == warmed["h200"]
    assert got["out"]["unplanned topk"].endswith("compile kernel _moe_align_small_numel_kernel")
