"""The deep_gemm MoE runner's Triton path (data/triton_path.yaml ``moe_dispatch_index``): SGLang 0.5.23's
``fused_moe_dispatch_index_triton_kernel``, which refused every m of DeepSeek-V3 `--tp 8 --moe-runner-backend deep_gemm`
on the H100 (bench/results/2026-12-06-h100-model-dsv3-0523-deepgemm-moe), planned for that runner only, warmed
GPU-free with the real sglang 0.5.23 and Triton 3.8.0, then held against SGLang's own pre-permute of the runner under
the strict launch hook in a fresh process, in both of its layouts, over every m up to past the last one-block m; and
the compact layout's next kernels the same way: its padding (``_pad_expert_counts_kernel``), ep_scatter's two
(``_fwd_kernel_ep_scatter_1``, ``_fwd_kernel_ep_scatter_2``) and the post-permute's
(``post_reorder_deepgemm_triton_kernel``)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from test_triton_path import LOOKUPS, REPO, _env, _server_plan, needs_stack

from dgprecompile.runtimes.triton_moe import TRITON_PATH, dispatch_ms, post_reorder_ms

DSV3 = "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 8"
RUNNER = DSV3 + " --moe-runner-backend deep_gemm"
KERNEL = "fused_moe_dispatch_index_triton_kernel"


def _of(name: str):
    """The plan's items of data/triton_path.yaml's kernel ``name``, as a function of the plan."""
    return lambda plan: [i for i in plan.triton_path.values() if i.kernel == name]


def _planned_once(name: str, params: dict, ms: tuple, unread_0519_note: bool = True):
    """The deep_gemm runner's one item of ``name`` for DeepSeek-V3 --tp 8, the same on H100 and H200, with these
    params and m at sm_90, from its path's reading and as its manifest form gives it back; none for the default
    runner; a note for an unread release that may ship it (0.5.22) and, where ``unread_0519_note`` holds, none for
    0.5.19 (no such kernel before the runner's path changed)."""
    items = {gpu: _of(name)(_server_plan(RUNNER, gpu=gpu)) for gpu in ("h100", "h200")}
    (item,) = items["h100"]
    assert items["h200"] == [item]
    assert dict(item.params) == params and item.ms == ms and item.capability == 90
    assert "deep_gemm.py" in item.why and type(item).from_dict(item.to_dict()) == item
    assert _of(name)(_server_plan(DSV3)) == []
    kernel = TRITON_PATH.kernel(name)["kernel"]
    if unread_0519_note:
        assert not any(kernel in n for n in _server_plan(RUNNER, sglang="0.5.19").notes)
    assert any(f"{kernel} not planned: sglang 0.5.22's model path was not read" in n
               for n in _server_plan(RUNNER, sglang="0.5.22").notes)
    return item


_dispatch = _of("moe_dispatch_index")


def test_the_deep_gemm_runner_plans_the_dispatch_index_at_one_m_per_key_class_in_both_layouts():
    """DeepSeek-V3 --tp 8 on the deep_gemm runner: 257 local experts (256 + the fused shared expert), top 9; m 1 and
    16 in the 512-wide block (9 m <= 512), 57 and 64 in the 1024-wide one, 114 and 128 past one block; both layouts
    (the device picks one from its free memory), the same item on H100 and H200 (no tuned config in its key)."""
    items = {gpu: _dispatch(_server_plan(RUNNER, gpu=gpu)) for gpu in ("h100", "h200")}
    (item,) = items["h100"]
    assert items["h200"] == [item]
    assert dict(item.params) == {"experts": 257, "topk": 9, "layouts": "compact+masked"}
    assert item.ms == (1, 16, 57, 64, 114, 128) and item.capability == 90
    assert "deep_gemm.py" in item.why and type(item).from_dict(item.to_dict()) == item


def test_the_default_runner_plans_no_dispatch_index_and_what_it_planned_before():
    """The default runner (Triton fused MoE on 0.5.23) never reaches the deep_gemm runner's path: its model-path items
    are the three of before, and no note names the dispatch kernel, on a read release or an unread one."""
    plan = _server_plan(DSV3)
    assert sorted(i.kernel for i in plan.triton_path.values()) == ["moe_align_small_numel", "moe_sum_reduce",
                                                                   "vocab_parallel_embedding"]
    for version in ("0.5.23", "0.5.19"):
        assert not any(KERNEL in n for n in _server_plan(DSV3, sglang=version).notes)
    assert not any(KERNEL in n for n in _server_plan().notes)  # the 480B --tp 8 --ep 8


def test_a_release_whose_runner_path_was_not_read_gets_a_note():
    plan = _server_plan(RUNNER, sglang="0.5.19")
    assert _dispatch(plan) == []
    assert any(f"{KERNEL} not planned: sglang 0.5.19's model path was not read" in n for n in plan.notes)


def test_the_dispatch_ms_follow_the_wrappers_block_rule_and_the_int_classes():
    assert dispatch_ms(257, 9, 16384, 1024) == (1, 16, 57, 64, 114, 128)
    assert dispatch_ms(257, 9, 100, 1024) == (1, 16, 57, 64)  # at most the plan's tokens per forward
    # more local experts than one block holds: one block size, the classes of m * topk only (m 1: == 1 for top 1)
    assert dispatch_ms(2048, 1, 16384, 1024) == (1, 2, 16)
    assert dispatch_ms(2048, 8, 16384, 1024) == (1, 2)  # 8 m: "% 16" at even m, "other" at odd
    # 33 experts, top 1: blocks 64 (m <= 64), 128, ..., 1024, then multi-block
    assert dispatch_ms(33, 1, 16384, 1024) == (1, 2, 16, 65, 80, 129, 144, 257, 272, 513, 528, 1025, 1040)


CHECK = textwrap.dedent("""
    import importlib, json, os, sys
    sys.path.insert(0, os.path.join(os.environ["DGP_REPO"], "dgprecompile", "launch", "hook"))
    import _dgprecompile_hook as hook
    hook.install()  # as the job's startup does (DGPRECOMPILE_STRICT=1, families triton): before Triton is imported
    from dgprecompile.compile import triton_moe as moe
    moe.load_sglang(None, 90)  # SGLang's server args and the planned arch, as the warm states them
    import torch
    runner = importlib.import_module("sglang.srt.layers.moe.moe_runner.deep_gemm")
    ep = importlib.import_module("sglang.kernels.ops.moe.ep_moe_kernels")
    from sglang.srt.layers.moe.moe_runner.base import MoeRunnerConfig
    from types import SimpleNamespace
    post = sys.argv[1] == "post_reorder_deepgemm_triton_kernel"
    tma = sys.argv[1] == "_tma_align_input_scale_kernel"
    # the compact layout asks DeepGEMM (not installed here) for its row alignment before the dispatch: the answer
    # sizes later buffers only, not the dispatch's arguments
    # sizes later buffers and is the padding's row alignment: STAND-IN for DeepGEMM's C++ answer on sm_90, which asks
    # the GPU (tests/gpu/dg_alignment_probe.py records it there)
    runner.deep_gemm_wrapper.get_contiguous_layout_alignment = lambda assignments, experts: 128
    kernel, layouts = sys.argv[1], sys.argv[2].split(",")
    if kernel == "fused_moe_dispatch_index_triton_kernel":  # the wrapper, imported from its module at each call
        owner, wrapper, jitted = ep, "fused_moe_dispatch_index", ep.fused_moe_dispatch_index_triton_kernel
    elif kernel == "_pad_expert_counts_kernel":  # bound in the runner's module at its import, run on CUDA only
        runner._is_cuda = True  # STAND-IN: a CPU import of the runner says False
        pad = importlib.import_module("sglang.kernels.ops.moe.triton_pad_expert_counts")
        owner, wrapper, jitted = runner, "pad_expert_counts", pad._pad_expert_counts_kernel
    elif kernel == "fill_gateup_input_triton_kernel":  # launched by the masked layout's preprocess, after its quant
        fp8 = importlib.import_module("sglang.kernels.ops.quantization.fp8_kernel")
        # STAND-IN for ep_moe_kernels' CUDA-only import of its quantiser (ep_moe_kernels.py:17-20), the same function
        ep.per_token_group_quant_fp8 = fp8.sglang_per_token_group_quant_fp8
        # STAND-IN for that quantiser's JIT (tvm-ffi) kernel call only, a GPU build: its outputs are SGLang's buffers
        fp8._run_per_token_group_quant_8bit_kernel = lambda *args, **kwargs: None
        assert not runner.deep_gemm_wrapper.DEEPGEMM_SCALE_UE8M0  # sm_90's answer: the FP8 fill branch
        owner, wrapper, jitted = ep, "moe_ep_deepgemm_preprocess", ep.fill_gateup_input_triton_kernel
    else:  # ep_scatter's two kernels (after the padding) or the post-permute's: imported from their module at each call
        runner._is_cuda = True  # STAND-IN, as above: the padding's CUDA branch before it
        fp8 = importlib.import_module("sglang.kernels.ops.quantization.fp8_kernel")
        # STAND-IN for the FP8 input's quantisation kernel only: on CUDA SGLang's JIT (tvm-ffi) per_token_group_quant,
        # a GPU build; its outputs, sglang_per_token_group_quant_fp8's own buffers, are what ep_scatter is handed
        fp8._run_per_token_group_quant_8bit_kernel = lambda *args, **kwargs: None
        owner, wrapper, jitted = ep, "ep_scatter", getattr(ep, kernel)
    if kernel == "post_reorder_deepgemm_triton_kernel":  # the post-permute's, after the runner's GEMMs
        # STAND-IN for the device's properties SGLang's _get_launch_config_2d reads (meta tensors have none): an H100
        # SXM's or H200's 132 SMs and 2048 resident threads per SM (data/gpus.yaml)
        h100_properties = SimpleNamespace(multi_processor_count=132, max_threads_per_multi_processor=2048)
        torch.cuda.get_device_properties = lambda device=None: h100_properties
        # STAND-IN for the module of the class the post-permute wraps its output in (StandardCombineInput): its
        # package's import reaches SGLang's topk module, whose optional dependencies (einops) are not here
        combine = type(sys)("sglang.srt.layers.moe.token_dispatcher.standard")
        combine.StandardCombineInput = SimpleNamespace
        sys.modules[combine.__name__] = combine
        owner, wrapper = ep, "post_reorder_deepgemm"
    moe.compile_only(90)
    moe.only_kernel(kernel)  # the runner's other kernels: not this check's
    # LOOKUPS
    class Reached(Exception):
        pass
    if not tma:  # the scale copies are called below, after the whole pre-permute
        called = getattr(owner, wrapper)
        def stop_after(*args, **kwargs):  # the rest of the pre-permute (and of the forward) is not this check's
            called(*args, **kwargs)
            raise Reached
        setattr(owner, wrapper, stop_after)
    out, keys = {}, {}
    def ask(name, layout, experts, topk, m, intermediate=256, hidden=7168):
        os.environ["SGLANG_DEEPGEMM_STANDARD_LAYOUT"] = layout  # SGLang's own switch; auto asks the GPU's memory
        jitted.device_caches.clear()  # every call asks the disk
        w1, w2, s1, s2 = moe.make_weights(experts=experts, hidden=hidden, intermediate=intermediate, device="meta")
        quant = runner.DeepGemmMoeQuantInfo(w13_weight=w1, w2_weight=w2, use_fp8=True, w13_scale=s1, w2_scale=s2,
                                            block_shape=[128, 128])
        config = MoeRunnerConfig(num_experts=experts, num_local_experts=experts, hidden_size=hidden,
                                 intermediate_size_per_partition=intermediate, top_k=topk, activation="silu",
                                 is_gated=True,
                                 inplace=False, routed_scaling_factor=2.5)  # DeepSeek-V3's; warm's is 1.0
        x, weights, ids = moe.moe_inputs(m, experts=experts, hidden=hidden, topk=topk, device="meta")
        # the standard dispatcher's output as the pre-permute reads it (.hidden_states, .topk_output's (weights, ids,
        # router logits)); SGLang's own classes import its topk module, whose optional dependencies are not here
        dispatched = SimpleNamespace(hidden_states=x, hidden_states_scale=None, topk_output=(weights, ids, None))
        looked.clear()
        try:  # SGLang's own standard-to-deep_gemm pre-permute: its layout choice, its m_max, its dispatch call
            state = {}
            given = runner.pre_permute_standard_to_deep_gemm(dispatched, quant, config, state)
            if tma:  # _run_contiguous_gemm's scale copies before its GEMMs (UE8M0 off, as on sm_90): the up GEMM's
                ep.tma_align_input_scale(given.hidden_states_scale)  # :453-454, ep_scatter's scales
                down = torch.empty((state["all_tokens"], intermediate), dtype=torch.bfloat16, device="meta")
                _, down_scale = fp8.sglang_per_token_group_quant_fp8(down, 128, column_major_scales=False,
                                                                     scale_tma_aligned=False, scale_ue8m0=False)
                ep.tma_align_input_scale(down_scale)  # :582-588 then :622-623, the down GEMM's
                raise Reached
            if post:  # and its own post-permute on the down GEMM's bf16 output (the compact rows)
                down = torch.empty((state["all_tokens"], 7168), dtype=torch.bfloat16, device="meta")
                runner.post_permute_deep_gemm_to_standard(runner.DeepGemmRunnerOutput(hidden_states=down), quant,
                                                          config, state)
            out[name] = "not reached"
        except Reached:
            out[name] = "hit"
        except RuntimeError as exc:
            out[name] = str(exc).split(" at run time")[0]
        keys[name] = list(looked)
    for layout in layouts:
        for m in [*range(1, 145), 255, 256, 600, 8192]:
            ask(f"{layout} m{m}", layout, 257, 9, m)
    if post:  # top 16: its int class (% 16) is in the key, the local experts are not
        ask("unplanned", "compact", 257, 16, 1)
    elif tma:  # a down GEMM 512 wide: its scales' width (4) is in the key, the local experts are not
        ask("unplanned", "compact", 257, 9, 1, intermediate=512)
    elif kernel == "fill_gateup_input_triton_kernel":  # its key holds the hidden size (scale_size 32: "% 16"),
        ask("unplanned", "masked", 257, 9, 1, hidden=4096)  # not the local experts
    else:
        ask("unplanned", "compact", 256, 9, 1)
    print(json.dumps({"out": out, "keys": keys}))
""".replace("    # LOOKUPS\n", LOOKUPS))


@needs_stack
def test_the_warmed_dispatch_entries_are_the_keys_sglangs_own_pre_permute_looks_up_at_every_m(tmp_path):
    """Warm the DeepSeek-V3 deep_gemm plan's dispatch item, then, in a fresh process under the strict launch hook, run
    SGLang's own pre_permute_standard_to_deep_gemm in each layout at every m 1..144 (past the last one-block m, 113,
    by one period of m mod 16) and at masked m_max 512 and 768: every call hits a warmed entry, the warm's 12 entries
    are exactly the ones asked, and an unplanned local expert count is refused."""
    cache, env = tmp_path / "cache", _env()
    report = _warmed(_dispatch, cache, env)
    assert report["not_whole"] == [] and report["record"]["ms"] == [1, 16, 57, 64, 114, 128]
    warmed = set(report["record"]["lookups"])
    # (class of 9 m, block 512 / 1024 / multi-block) x (m_max 1, a constexpr / a multiple of 256)
    assert len(warmed) == 12
    _held_to_the_runners_own_calls(cache, env, KERNEL, ["compact", "masked"], warmed)


def _warmed(items_of, cache, env) -> dict:
    """The warm report of the DeepSeek-V3 deep_gemm plan's one item that ``items_of`` picks, warmed into ``cache``."""
    (item,) = items_of(_server_plan(RUNNER))
    r = subprocess.run(TRITON_PATH.warm_argv(item, str(cache), sys.executable), capture_output=True, text=True,
                       env=env, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout.splitlines()[-1])


def _held_to_the_runners_own_calls(cache, env, kernel: str, layouts: list[str], warmed: set[str],
                                   per_m: int = 1) -> None:
    """SGLang's own pre-permute of the runner in ``layouts`` under the strict hook in a fresh process (CHECK): every m
    hits ``per_m`` warmed entries of ``kernel`` (the scale copies: one per grouped GEMM), together exactly ``warmed``;
    an unplanned shape is refused (a local expert count; for the post-permute, whose key holds none, a top 16; for the
    scale copies a down GEMM of another width)."""
    r = subprocess.run([sys.executable, "-c", CHECK, kernel, ",".join(layouts)], capture_output=True, text=True,
                       timeout=600, env={**env, "TRITON_CACHE_DIR": str(cache / "triton"), "DGP_REPO": str(REPO),
                                         "DGPRECOMPILE_STRICT": "1", "DGPRECOMPILE_STRICT_FAMILIES": "triton"})
    assert r.returncode == 0, r.stdout + r.stderr
    got = json.loads(r.stdout.splitlines()[-1])
    asked = set()
    for name, outcome in got["out"].items():
        if name == "unplanned":
            continue
        assert outcome == "hit" and len(got["keys"][name]) == per_m, (name, outcome, got["keys"][name])
        asked |= set(got["keys"][name])
    assert asked == warmed
    assert got["out"]["unplanned"].endswith(f"compile kernel {kernel}")


TMA = "_tma_align_input_scale_kernel"


_tma = _of("tma_align")


def test_the_deep_gemm_runner_plans_its_scale_copies_once_per_model_at_its_grouped_gemms_widths():
    """The compact layout's TMA alignment of each grouped GEMM's activation scales (tma_align_input_scale): one item
    per model with the widths of both GEMMs' scales (the plan's grouped keys' k / 128: DeepSeek-V3 --tp 8's down GEMM
    256 wide and hidden 7168, the 480B --ep 8's 2560 and 6144), at one m (its rows are block_e times a count), the
    same on H100 and H200; none for the default runner."""
    _planned_once("tma_align", {"widths": "2+56", "block_e": 128}, (1,), unread_0519_note=False)
    (q480,) = _tma(_server_plan("python -m sglang.launch_server --model-path Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8 "
                                "--tp 8 --ep 8 --moe-runner-backend deep_gemm"))
    assert dict(q480.params) == {"widths": "20+48", "block_e": 128}


@needs_stack
def test_the_warmed_scale_copies_are_the_keys_sglangs_own_runner_looks_up_at_every_m(tmp_path):
    """Warm the DeepSeek-V3 deep_gemm plan's scale-copy item, then run SGLang's own compact pre-permute and, on what
    it returns and on SGLang's own row-major quantiser's scales of the down GEMM's input, SGLang's own
    tma_align_input_scale as _run_contiguous_gemm calls it before each GEMM, under the strict hook at every m 1..144
    and at 255, 256, 600 and 8192: each m hits the two warmed entries (56 and 2 wide); a 512-wide down GEMM (4) is
    refused."""
    cache, env = tmp_path / "cache", _env()
    report = _warmed(_tma, cache, env)
    assert report["not_whole"] == [] and len(report["record"]["lookups"]) == 2
    _held_to_the_runners_own_calls(cache, env, TMA, ["compact"], set(report["record"]["lookups"]), per_m=2)


PAD = "_pad_expert_counts_kernel"


_pad = _of("pad_expert_counts")


def test_the_deep_gemm_runner_plans_its_padding_once_at_sm90s_row_alignment():
    """The compact layout's padding: one item per (local experts, top-k), at one m (its key holds nothing of m on sm_90:
    BLOCK_E 128 at every m, all_tokens a multiple of it), the same on H100 and H200; none for the default runner, and
    no note for a release that ships no such kernel (0.5.19), a note for an unread one that may (0.5.22)."""
    _planned_once("pad_expert_counts", {"experts": 257, "topk": 9, "block_e": 128}, (1,))


ROWS = textwrap.dedent("""
    import importlib, json
    from dgprecompile.compile import triton_moe as moe
    moe.load_sglang(None, 90)
    runner = importlib.import_module("sglang.srt.layers.moe.moe_runner.deep_gemm")
    from dgprecompile.compile.triton_path import compact_all_tokens
    cases = [(n, e, b) for n in [*range(1, 600), *range(600, 80000, 97)] for e in (20, 32, 256, 257) for b in (32, 128)]
    print(json.dumps({"cases": len(cases), "differ": [c for c in cases
                      if compact_all_tokens(*c) != runner._get_compact_all_tokens(*c)][:5]}))
""")


@needs_stack
def test_the_compact_rows_are_sglangs_own_arithmetic():
    """compact_all_tokens (the warm's stand-in for SGLang's _get_compact_all_tokens, whose module needs the runner's
    imports) against SGLang 0.5.23's own function, over top-k id counts to 80,000 and the planned servers' local
    expert counts: the same rows everywhere."""
    r = subprocess.run([sys.executable, "-c", ROWS], capture_output=True, text=True, timeout=600, env=_env())
    assert r.returncode == 0, r.stdout + r.stderr
    got = json.loads(r.stdout.splitlines()[-1])
    assert got["cases"] > 10000 and got["differ"] == [], got


@needs_stack
def test_the_warmed_padding_entry_is_the_key_sglangs_own_compact_pre_permute_looks_up_at_every_m(tmp_path):
    """Warm the DeepSeek-V3 deep_gemm plan's padding item, then run SGLang's own compact pre-permute (its dispatch,
    its block_e and all_tokens arithmetic, its pad_expert_counts call) under the strict hook at every m 1..144 and at
    255, 256, 600 and 8192: each call hits the one warmed entry; 256 local experts are refused."""
    cache, env = tmp_path / "cache", _env()
    report = _warmed(_pad, cache, env)
    assert report["not_whole"] == [] and report["record"]["ms"] == [1] and len(report["record"]["lookups"]) == 1
    _held_to_the_runners_own_calls(cache, env, PAD, ["compact"], set(report["record"]["lookups"]))


def test_the_deep_gemm_runner_plans_ep_scatters_two_kernels_for_its_compact_layout():
    """ep_scatter (the compact layout's, after the padding) launches two kernels, one entry each in the data file: its
    first (each local expert's row start: nothing of m in its key) at one m, its second (the token count an int class)
    at m 1, 16, 17; both at sm_90's row alignment and the model's hidden size, the same on H100 and H200; none for the
    default runner; no note for 0.5.19 (no padding kernel before it), a note for an unread 0.5.22."""
    for which, ms in (("ep_scatter_1", (1,)), ("ep_scatter_2", (1, 16, 17))):
        _planned_once(which, {"experts": 257, "topk": 9, "hidden": 7168, "block_e": 128}, ms)


@needs_stack
@pytest.mark.parametrize("which,entries", [("ep_scatter_1", 1), ("ep_scatter_2", 3)])
def test_the_warmed_scatter_entries_are_the_keys_sglangs_own_compact_pre_permute_looks_up_at_every_m(
        tmp_path, which, entries):
    """Warm the DeepSeek-V3 deep_gemm plan's item of one of ep_scatter's kernels, then run SGLang's own compact
    pre-permute (its dispatch, padding, FP8 input buffers and ep_scatter call; only the quantisation's JIT kernel stood
    in) under the strict hook at every m 1..144 and at 255, 256, 600 and 8192: each call hits one warmed entry (the
    first kernel's one; the second's one per class of m), together all of them; 256 local experts are refused."""
    cache, env = tmp_path / "cache", _env()
    report = _warmed(_of(which), cache, env)
    assert report["not_whole"] == [] and len(report["record"]["lookups"]) == entries
    kernel = TRITON_PATH.kernel(which)["kernel"]
    _held_to_the_runners_own_calls(cache, env, kernel, ["compact"], set(report["record"]["lookups"]))


POST = "post_reorder_deepgemm_triton_kernel"


_post = _of("post_reorder")


def test_the_deep_gemm_runner_plans_its_post_permute_per_block_size_of_the_gpus_sms():
    """The post-permute (post_reorder_deepgemm): one item per (top-k, hidden) with the GPU's SMs and threads per SM;
    on 132 SMs x 2048 threads (264 blocks of 1024) m <= 18 take 512-wide blocks (18 x 14 <= 264), so m 1, 2, 16 at
    512 and 19, 32 at 1024, the same item on H100 and H200; the H20's 78 SMs move the edge to m 11; none for the
    default runner, no note for 0.5.19, a note for an unread 0.5.22."""
    _planned_once("post_reorder", {"topk": 9, "hidden": 7168, "sms": 132, "threads_per_sm": 2048}, (1, 2, 16, 19, 32))
    (h20,) = _post(_server_plan(RUNNER, gpu="h20"))
    assert h20.ms == (1, 2, 12, 16) and h20.param("sms") == 78
    assert post_reorder_ms(7168, 10, 132, 2048) == (1, 2)  # at most the plan's tokens per forward


FILL = "fill_gateup_input_triton_kernel"


_fill = _of("fill_gateup_input")


def test_the_deep_gemm_runner_plans_its_masked_layouts_input_fill_once():
    """The masked layout's input fill (after the dispatch index and the row-major quantiser): one item per (local
    experts, top-k, hidden size) at one m (its key holds nothing of m: m_max a multiple of 256), the same on H100 and
    H200; none for the default runner; a note for an unread release that may ship it (0.5.22), none for 0.5.19."""
    _planned_once("fill_gateup_input", {"experts": 257, "topk": 9, "hidden": 7168}, (1,))


@needs_stack
def test_the_warmed_post_permute_entries_are_the_keys_sglangs_own_post_permute_looks_up_at_every_m(tmp_path):
    """Warm the DeepSeek-V3 deep_gemm plan's post-permute item (H200: 132 SMs), then run SGLang's own compact
    pre-permute and its own post_permute_deep_gemm_to_standard (scale 2.5, warm's 1.0) on the compact rows under the
    strict hook with 132 SMs x 2048 threads standing in for the device's properties, at every m 1..144 and at 255,
    256, 600 and 8192: each call hits one of the five warmed entries, together all of them; top 16 is refused."""
    cache, env = tmp_path / "cache", _env()
    report = _warmed(_post, cache, env)
    assert report["not_whole"] == [] and report["record"]["ms"] == [1, 2, 16, 19, 32]
    assert len(report["record"]["lookups"]) == 5
    _held_to_the_runners_own_calls(cache, env, POST, ["compact"], set(report["record"]["lookups"]))


@needs_stack
def test_the_warmed_fill_entry_is_the_key_sglangs_own_masked_pre_permute_looks_up_at_every_m(tmp_path):
    """Warm the DeepSeek-V3 deep_gemm plan's fill item, then run SGLang's own masked pre-permute (its layout switch,
    m_max, dispatch, FP8 quantiser buffers and fill launch; only the quantiser's JIT kernel stood in) under the strict
    hook at every m 1..144 and at 255, 256, 600 and 8192 (m_max 256 to 8448): each call hits the one warmed entry;
    a hidden size of 4096 (another item: scale_size 32) is refused."""
    cache, env = tmp_path / "cache", _env()
    report = _warmed(_fill, cache, env)
    assert report["not_whole"] == [] and report["record"]["ms"] == [1] and len(report["record"]["lookups"]) == 1
    _held_to_the_runners_own_calls(cache, env, FILL, ["masked"], set(report["record"]["lookups"]))
