"""GPU-free Triton warm of SGLang's model-path Triton kernels beside ``fused_moe_kernel`` (data/triton_path.yaml):
the vocab-parallel embedding's ``_vocab_parallel_embedding_kernel``, the router's ``_router_triton_kernel``, the
MoE combine's ``_moe_sum_reduce_kernel``, the MoE's small-numel align ``_moe_align_small_numel_kernel`` and the
deep_gemm MoE runner's dispatch index ``fused_moe_dispatch_index_triton_kernel``, expert-count padding
``_pad_expert_counts_kernel``, scatter ``_fwd_kernel_ep_scatter_1`` / ``_fwd_kernel_ep_scatter_2`` and post-permute
``post_reorder_deepgemm_triton_kernel``, compiled by Triton's own compiler for the planned target under the cache keys
Triton's own JIT computes.

How (one process, the item's): SGLang's OWN wrapper (``vocab_parallel_embedding``, ``moe_fused_gate``,
``moe_sum_reduce_triton``, ``fused_moe_dispatch_index``, ``pad_expert_counts``, ``ep_scatter``,
``post_reorder_deepgemm``; for the align SGLang's
own ``_prepare_fused_moe_run``, which picks the MoE config for the plan's device, as the fused MoE warm asks it, and
calls its ``moe_align_block_size`` with that config's BLOCK_SIZE_M, which sizes the buffers and calls
``moe_align_small_numel``) runs for each planned m on ``meta`` tensors, with Triton's driver set to
compile/triton_moe.py's :class:`CompileOnlyDriver` and every launch turned into Triton's own ``run(..., warmup=True)``
(:func:`~dgprecompile.compile.triton_moe.compile_only`): Triton binds the arguments, specialises them, computes its
cache key, looks in ``TRITON_CACHE_DIR`` and compiles on a miss, and launches nothing. The planned arch is stated to
SGLang's JIT utils (``is_arch_support_pdl``: the router's USE_PDL constexpr, the sum's and the align's USE_GDC and
launch_pdl) with its own override (compile/triton_moe.py ``state_arch``).

Named STAND-INS:

* :class:`CudaMeta`: a meta tensor that answers ``is_cuda`` True, so the embedding wrapper's ``assert input_.is_cuda``
  / ``assert weight.is_cuda`` pass (the one thing of a CUDA tensor it reads beyond shape, dtype and strides; its
  output is allocated on ``weight.device``, meta);
* the CUDA branch of SGLang's ``moe_align_block_size`` (:func:`load_align`): its module's ``_is_cuda`` True and the
  ``SMALL_NUMEL_LIMIT`` / ``moe_align_small_numel`` its CUDA-only import binds (0.5.23
  srt/layers/moe/moe_runner/triton_utils/moe_align_block_size.py:21-25), which a CPU import skips; the wrapper is
  looked up in its defining module at each call. With it the gate (:146-152) and the buffers (:115-133) are
  SGLang's own; the fused MoE warm's stand-ins (compile/triton_moe.py load_sglang) are reused;
* :func:`layout_m_max`: the m_max each layout of the deep_gemm runner hands the dispatch index, and
  :func:`compact_all_tokens`, the rows its compact layout pads to, SGLang's arithmetic done here (the row alignment
  is the plan's, by capability: data/triton_path.yaml ``pad_expert_counts``);
* :class:`PlannedDeviceProperties`: the plan's GPU's SM count and threads per SM, what the post-permute's launch
  config asks torch.cuda.get_device_properties (data/gpus.yaml);
* :func:`shard_windows`: each rank's vocab shard window, SGLang's arithmetic (``pad_vocab_size``,
  ``VocabParallelEmbedding.__init__``'s padding rule and ``_get_indices``, 0.5.23
  srt/layers/vocab_parallel_embedding.py:57-59, :273-289, :353-385) done here: the constructor needs the job's
  process groups and the module imports SGLang's quantization package and its optional dependencies (the device
  proof holds the windows' keys against the job's);
* :func:`masked_quant_standins`: for the deep_gemm runner's masked pre-permute (``fill_gateup_input``), the CUDA-only
  import of its FP8 quantiser and that quantiser's JIT kernel call (a GPU build, planned as an SGLang JIT module),
  and DeepGEMM's UE8M0 switch stated off, as on sm_90.

Run: ``python -m dgprecompile.compile.triton_path --item ID --kernel router --params experts=160,topk=8,...
--m 1,16,17 --capability 90 --cache-dir ROOT``; prints one JSON report (its ``record``: what warm files in the index's
``triton_path`` section, compile/recorded_items.py) and its ``host_modules`` (Triton's host modules for its kernels,
built GPU-free by compile/triton_host.py, as the fused MoE warm builds them).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from typing import Any

from dgprecompile.host import lifeline


def _torch_dtype(name: str):
    import torch

    return getattr(torch, name)


def cuda_meta(shape, dtype):
    """STAND-IN: a meta tensor of ``shape`` whose ``is_cuda`` is True (module docstring)."""
    import torch

    class CudaMeta(torch.Tensor):
        @property
        def is_cuda(self) -> bool:  # noqa: D401 -- the stand-in's one answer
            return True

    return torch.empty(shape, dtype=dtype, device="meta").as_subclass(CudaMeta)


def _pad(size: int, to: int) -> int:
    return -(-size // to) * to  # srt/layers/vocab_parallel_embedding.py:57-59 pad_vocab_size


def shard_windows(vocab: int, tp: int, padding: int = 64) -> list[tuple[int, tuple[int, int, int, int, int]]]:
    """STAND-IN for VocabParallelEmbedding's shard arithmetic (module docstring), per rank: (rows per partition,
    (org start, org end, org padding, added start, added end)), the embedding having no added tokens
    (num_embeddings == org_vocab_size). As sglang 0.5.23 srt/layers/vocab_parallel_embedding.py computes them:
    ``padding`` DEFAULT_VOCAB_PADDING_SIZE (:48), times tp where the padded vocab does not divide (:273-275),
    org and total padded sizes (:284-289), rows per partition (:327-329), _get_indices (:353-385: each rank's
    padded window, clipped to the vocab; the added window empty) and num_org_vocab_padding (:110-111: the padded
    window's length minus the clipped one's). Not imported: that module imports SGLang's quantization package and
    its optional dependencies."""
    if _pad(vocab, padding) % tp != 0:
        padding *= tp
    org_padded = _pad(vocab, padding)
    padded = _pad(org_padded, padding)
    per, added_per = org_padded // tp, (padded - org_padded) // tp
    out = []
    for rank in range(tp):
        org_start, org_end = min(rank * per, vocab), min((rank + 1) * per, vocab)
        added = min(vocab + rank * added_per, vocab), min(vocab + (rank + 1) * added_per, vocab)
        out.append((padded // tp, (org_start, org_end, per - (org_end - org_start), *added)))
    return out


def warm_embedding(params: dict[str, str], ms: list[int]) -> None:
    """SGLang's own vocab_parallel_embedding for every rank's shard window, ids dtype and m."""
    from sglang.kernels.ops.embeddings.vocab_parallel_embedding import vocab_parallel_embedding

    hidden, dtype = int(params["hidden"]), _torch_dtype(params["dtype"])
    for rows, window in shard_windows(int(params["vocab"]), int(params["tp"])):
        weight = cuda_meta((rows, hidden), dtype)
        for ids_dtype in params["ids"].split("+"):
            for m in ms:
                vocab_parallel_embedding(cuda_meta((m,), _torch_dtype(ids_dtype)), weight, *window)


def warm_router(params: dict[str, str], ms: list[int]) -> None:
    """SGLang's own moe_fused_gate as the architecture's TopK branch calls it (data/triton_path.yaml)."""
    from sglang.kernels.ops.moe.moe_fused_gate import moe_fused_gate

    experts, topk = int(params["experts"]), int(params["topk"])
    if params["scoring"] != "softmax":  # the planned branch: softmax without a bias (topk.py fused_topk)
        raise SystemExit(f"the router's {params['scoring']} branch is not modelled here")
    for m in ms:
        import torch

        scores = torch.empty((m, experts), dtype=_torch_dtype(params["scores"]), device="meta")
        moe_fused_gate(scores, None, topk, scoring_func="softmax", renormalize=params["renormalize"] in ("t", "True"))


def warm_sum_reduce(params: dict[str, str], ms: list[int]) -> None:
    """SGLang's own moe_sum_reduce_triton as the Triton MoE's combine calls it (fused_moe.py moe_combine_topk): the
    contiguous [m, topk, hidden] down-GEMM outputs summed into a fresh [m, hidden] output, at the model's scale."""
    import torch
    from sglang.kernels.ops.moe.fused_moe_triton_kernels import moe_sum_reduce_triton

    topk, hidden, dtype = int(params["topk"]), int(params["hidden"]), _torch_dtype(params["dtype"])
    for m in ms:
        inter = torch.empty((m, topk, hidden), dtype=dtype, device="meta")
        moe_sum_reduce_triton(inter.view(*inter.shape), torch.empty((m, hidden), dtype=dtype, device="meta"),
                              float(params["scale"]))


_LOADED: list = []  # (fused_moe module, config module), once per process


def load_align(params: dict[str, str], capability: int = 90):
    """SGLang's Triton fused MoE modules as compile/triton_moe.py's warm loads them (its stand-ins: the server args,
    the planned arch, sgl-kernel's AOT align) with SGLang's config asked for the item's device name, and the CUDA
    branch of its moe_align_block_size (STAND-IN: module docstring); the fused_moe module. Loaded once per process
    (warm: before Triton's driver is replaced; launch/proof_asks.py's replay: at its first call), the device name
    stated at every call."""
    from dgprecompile.compile import triton_moe as moe
    from dgprecompile.runtimes.triton_moe import TRITON_PATH

    if not _LOADED:
        _LOADED.append(moe.load_sglang(params["device"], capability))
        align = importlib.import_module(f"{moe.moe_package()}.moe_align_block_size")
        small = importlib.import_module(TRITON_PATH.kernel("moe_align_small_numel")["module"])
        align._is_cuda = True
        align.SMALL_NUMEL_LIMIT = small.SMALL_NUMEL_LIMIT
        # looked up in its defining module at each call, where launch/proof_asks.py's replay replaces it
        align.moe_align_small_numel = lambda *args, **kwargs: small.moe_align_small_numel(*args, **kwargs)
    fused, config = _LOADED[0]
    device = params["device"]
    if getattr(config, "_dgp_device", None) != device:
        config.get_device_name = lambda device_id=0: device
        config.get_moe_configs.cache_clear()  # lru_cached per shape, not per device name
        config._dgp_device = device
    return fused


def warm_align(params: dict[str, str], ms: list[int]) -> None:
    """SGLang's own path to the small-numel align for each m: its ``_prepare_fused_moe_run`` (what fused_experts_impl
    and the Triton MoE runner call first) picks the config for the device (its BLOCK_SIZE_M) and calls its
    moe_align_block_size, which sizes the buffers and takes the small-numel branch where its gate holds (numel <=
    SMALL_NUMEL_LIMIT, experts + 1 > 64), on meta tensors: the layer's block-FP8 expert weights and an [m, topk] int32
    topk_ids (the routers' dtype, srt/layers/moe/topk.py)."""
    import torch

    from dgprecompile.compile import triton_moe as moe

    fused = load_align(params)
    experts, hidden, inter = int(params["experts"]), int(params["hidden"]), int(params["intermediate"])
    w1, w2, _, _ = moe.make_weights(experts=experts, hidden=hidden, intermediate=inter, device="meta")
    for m in ms:
        x = torch.empty((m, hidden), dtype=_torch_dtype(params["dtype"]), device="meta")
        ids = torch.empty((m, int(params["topk"])), dtype=torch.int32, device="meta")
        fused._prepare_fused_moe_run(x, w1, w2, ids, use_fp8_w8a8=True, use_int8_w8a8=False, use_int8_w8a16=False,
                                     use_int4_w4a16=False, per_channel_quant=False, block_shape=[128, 128])


def layout_m_max(layout: str, m: int) -> int:
    """STAND-IN: the m_max each layout of the deep_gemm runner hands the dispatch index at m tokens, SGLang's arithmetic
    (0.5.23 srt/layers/moe/moe_runner/deep_gemm.py:1087: compact 1; ep_moe_kernels.py:1749 moe_ep_deepgemm_preprocess:
    masked (m // 256 + 1) * 256, a multiple of 256 also where SGLANG_OPT_DG_MASKED_M_CAP caps it, :1769-1770) done
    here: the runner's pre-permute needs DeepGEMM and the job's runner state before it gets there."""
    return 1 if layout == "compact" else (m // 256 + 1) * 256


def warm_dispatch(params: dict[str, str], ms: list[int]) -> None:
    """SGLang's own fused_moe_dispatch_index as both layouts of the deep_gemm runner's standard pre-permute call it
    (data/triton_path.yaml ``moe_dispatch_index``): the [m, topk] int32 topk_ids over the rank's local experts, each
    layout's m_max (:func:`layout_m_max`), expert_start 0 (standard dispatch)."""
    import torch
    from sglang.kernels.ops.moe.ep_moe_kernels import fused_moe_dispatch_index

    experts, topk = int(params["experts"]), int(params["topk"])
    for m in ms:
        for layout in params["layouts"].split("+"):
            ids = torch.empty((m, topk), dtype=torch.int32, device="meta")
            fused_moe_dispatch_index(ids, experts, layout_m_max(layout, m), expert_start=0)


def compact_all_tokens(assignments: int, experts: int, block_e: int) -> int:
    """STAND-IN: the rows the deep_gemm runner's compact layout sizes for ``assignments`` top-k ids over ``experts``
    local experts at row alignment ``block_e``, SGLang's arithmetic (0.5.23 srt/layers/moe/moe_runner/deep_gemm.py
    :255-262 _get_compact_all_tokens: the most padded rows any routing can take) done here: its module needs DeepGEMM
    and the runner's imports."""
    nonempty = min(assignments, experts)
    return block_e * (nonempty + (assignments - nonempty) // block_e)


def warm_pad(params: dict[str, str], ms: list[int]) -> None:
    """SGLang's own pad_expert_counts as the deep_gemm runner's compact pre-permute calls it (data/triton_path.yaml
    ``pad_expert_counts``): the dispatch index's int32 count per local expert, the planned row alignment and
    :func:`compact_all_tokens` of m * topk ids."""
    import torch
    from sglang.kernels.ops.moe.triton_pad_expert_counts import pad_expert_counts

    experts, topk, block_e = int(params["experts"]), int(params["topk"]), int(params["block_e"])
    for m in ms:
        counts = torch.empty(experts, dtype=torch.int32, device="meta")
        pad_expert_counts(counts, block_e, compact_all_tokens(m * topk, experts, block_e))


def warm_scatter(params: dict[str, str], ms: list[int]) -> None:
    """SGLang's own ep_scatter as the deep_gemm runner's compact pre-permute calls it on FP8 weights
    (data/triton_path.yaml ``ep_scatter_1``, ``ep_scatter_2``; 0.5.23 srt/layers/moe/moe_runner/deep_gemm.py
    :1119-1181): the quantised [m, hidden] input with the scales SGLang's own
    create_per_token_group_quant_fp8_output_scale allocates on sm_90 (row-major fp32, group 128: DeepGEMM's FP8 block;
    no UE8M0 there), the [m, topk] int32 ids, the padded and valid int32 counts and row starts per local expert, the
    :func:`compact_all_tokens` output rows, scales and m_indices, the int32 src2dst, the planned row alignment.
    Only the item's kernel of the two it launches is compiled (compile/triton_moe.py only_kernel)."""
    import torch
    from sglang.kernels.ops.moe.ep_moe_kernels import ep_scatter
    from sglang.kernels.ops.quantization.fp8_kernel import create_per_token_group_quant_fp8_output_scale

    experts, topk, hidden, block_e = (int(params[k]) for k in ("experts", "topk", "hidden", "block_e"))
    group, fp8, i32 = 128, torch.float8_e4m3fn, torch.int32

    def empty(shape, dtype):
        return torch.empty(shape, dtype=dtype, device="meta")

    for m in ms:
        rows = compact_all_tokens(m * topk, experts, block_e)
        scales = create_per_token_group_quant_fp8_output_scale(x_shape=(m, hidden), device="meta", group_size=group,
                                                               column_major_scales=False, scale_tma_aligned=False,
                                                               scale_ue8m0=False)
        ep_scatter(empty((m, hidden), fp8), scales, empty((m, topk), i32), empty(experts, i32), empty(experts, i32),
                   empty(experts, i32), empty((rows, hidden), fp8), empty((rows, hidden // group), scales.dtype),
                   empty(rows, i32), empty((m, topk), i32), scale_ue8m0=False, quant_block_size=group,
                   expert_alignment=block_e, expert_start=0)


class PlannedDeviceProperties:
    """STAND-IN: what torch.cuda.get_device_properties answers SGLang's _get_launch_config_2d (0.5.23
    kernels/ops/moe/ep_moe_kernels.py:52-75) about the plan's GPU, its SM count and most resident threads per SM
    (data/gpus.yaml ``sms``, ``threads_per_sm``): the two facts the post-permute's BLOCK_SIZE reads; the warm's
    tensors are on torch's meta device, which has no properties."""

    def __init__(self, sms: int, threads_per_sm: int) -> None:
        self.multi_processor_count = sms
        self.max_threads_per_multi_processor = threads_per_sm


def warm_post_reorder(params: dict[str, str], ms: list[int]) -> None:
    """SGLang's own post_reorder_deepgemm as the deep_gemm runner's post-permute calls it (data/triton_path.yaml
    ``post_reorder``; 0.5.23 srt/layers/moe/moe_runner/deep_gemm.py :1254-1300): the down GEMM's bf16 output (its
    rows, the compact layout's all_tokens, in no key: m * topk here), the bf16 [m, hidden] output, the int32 [m, topk]
    src2dst and topk ids, the fp32 [m, topk] weights, topk, m, hidden and a scale of 1.0 (a float: its value in no
    key); the device properties the plan's GPU's (:class:`PlannedDeviceProperties`), so SGLang picks the BLOCK_SIZE
    the job's GPU gets."""
    import torch
    from sglang.kernels.ops.moe.ep_moe_kernels import post_reorder_deepgemm

    topk, hidden = int(params["topk"]), int(params["hidden"])
    planned = PlannedDeviceProperties(int(params["sms"]), int(params["threads_per_sm"]))
    asked, torch.cuda.get_device_properties = torch.cuda.get_device_properties, lambda device=None: planned

    def empty(shape, dtype):
        return torch.empty(shape, dtype=dtype, device="meta")

    try:
        for m in ms:
            bf16, i32 = torch.bfloat16, torch.int32
            post_reorder_deepgemm(empty((m * topk, hidden), bf16), empty((m, hidden), bf16), empty((m, topk), i32),
                                  empty((m, topk), i32), empty((m, topk), torch.float32), topk, m, hidden, 1.0)
    finally:
        torch.cuda.get_device_properties = asked


def warm_tma_align(params: dict[str, str], ms: list[int]) -> None:
    """SGLang's own tma_align_input_scale as the deep_gemm runner's compact FP8 path calls it before each grouped GEMM
    (data/triton_path.yaml ``tma_align``; 0.5.23 moe_runner/deep_gemm.py :453-454, :622-623): row-major fp32 scales of
    each planned width (hidden / 128, intermediate / 128) over block_e rows (all_tokens is block_e times a count: the
    same Triton class of rows and padded rows at every m, so ``ms`` is one m)."""
    import torch
    from sglang.kernels.ops.moe.ep_moe_kernels import tma_align_input_scale

    block_e = int(params["block_e"])
    for _m in ms:
        for width in (int(w) for w in params["widths"].split("+")):
            tma_align_input_scale(torch.empty((block_e, width), dtype=torch.float32, device="meta"))


def masked_quant_standins():
    """STAND-INS for the masked pre-permute's FP8 input quantisation on a CPU import (named in the module
    docstring): ep_moe_kernels' ``per_token_group_quant_fp8`` (its CUDA-only import of SGLang's
    sglang_per_token_group_quant_fp8, ep_moe_kernels.py:17-20, bound here to the same function) and that function's
    kernel call only (SGLang's JIT per_token_group_quant, a GPU build planned as a JIT module: its outputs are
    SGLang's own buffers); DeepGEMM's UE8M0 switch stated off, as on sm_90 (deep_gemm_wrapper/configurer.py:58-61).
    The ep_moe_kernels module."""
    import importlib

    ep = importlib.import_module("sglang.kernels.ops.moe.ep_moe_kernels")
    fp8 = importlib.import_module("sglang.kernels.ops.quantization.fp8_kernel")
    wrapper = importlib.import_module("sglang.srt.layers.deep_gemm_wrapper")
    ep.per_token_group_quant_fp8 = fp8.sglang_per_token_group_quant_fp8
    fp8._run_per_token_group_quant_8bit_kernel = lambda *args, **kwargs: None
    wrapper.DEEPGEMM_SCALE_UE8M0 = False
    return ep


def warm_fill(params: dict[str, str], ms: list[int]) -> None:
    """SGLang's own moe_ep_deepgemm_preprocess as the deep_gemm runner's masked pre-permute calls it on FP8 weights
    (data/triton_path.yaml ``fill_gateup_input``; 0.5.23 srt/layers/moe/moe_runner/deep_gemm.py :1026-1040): the
    [m, hidden] bf16 input, the [m, topk] int32 ids over the rank's local experts, block [128, 128], FP8 output,
    expert_start 0; its dispatch index, its quantiser's buffers and its fill launch are SGLang's own (STAND-INS:
    :func:`masked_quant_standins`). Only the fill kernel is compiled (compile/triton_moe.py only_kernel)."""
    import torch

    ep = masked_quant_standins()
    experts, topk, hidden = (int(params[k]) for k in ("experts", "topk", "hidden"))
    for m in ms:
        ids = torch.empty((m, topk), dtype=torch.int32, device="meta")
        x = torch.empty((m, hidden), dtype=torch.bfloat16, device="meta")
        # the runner's arguments as it passes them (a device proof compares the calls): block_shape positional
        ep.moe_ep_deepgemm_preprocess(ids, experts, x, topk, [128, 128], output_dtype=torch.float8_e4m3fn,
                                      use_mxfp8=False, expert_start=0)


WARMS = {"vocab_parallel_embedding": warm_embedding, "router": warm_router, "moe_sum_reduce": warm_sum_reduce,
         "moe_align_small_numel": warm_align, "moe_dispatch_index": warm_dispatch, "pad_expert_counts": warm_pad,
         "ep_scatter_1": warm_scatter, "ep_scatter_2": warm_scatter, "post_reorder": warm_post_reorder,
         "tma_align": warm_tma_align}
WARMS["fill_gateup_input"] = warm_fill
LOADS = {"moe_align_small_numel": load_align}  # before Triton's driver is replaced: SGLang's imports may probe it
LOADS["fill_gateup_input"] = lambda params, capability: masked_quant_standins()


def warm(args: argparse.Namespace) -> dict[str, Any]:
    from dgprecompile.cache.triton_moe import file_warmed
    from dgprecompile.compile import triton_moe as moe
    from dgprecompile.runtimes import family_for_area
    from dgprecompile.runtimes.triton_moe import TRITON_PATH

    triton_dir = str(family_for_area("triton").area_dir(args.cache_dir))
    os.environ["TRITON_CACHE_DIR"] = triton_dir
    kernel = TRITON_PATH.kernel(args.kernel)
    moe.state_arch(args.capability)
    params = dict(p.split("=", 1) for p in args.params.split(","))
    importlib.import_module(kernel["module"])  # imported first: SGLang's modules may probe the driver at import
    if args.kernel in LOADS:
        LOADS[args.kernel](params, args.capability)
    moe.compile_only(args.capability)
    moe.only_kernel(kernel["kernel"])  # no other kernel of SGLang's wrapper is compiled
    used = moe.watch_lookups()
    t0 = time.time()
    ms = [int(m) for m in args.m.split(",")]
    WARMS[args.kernel](params, ms)
    after = moe.triton_entries(triton_dir)
    mine = sorted(k for k in used if kernel["kernel"] in after.get(k, []))
    import triton

    return {"item": args.item, "seconds": round(time.time() - t0, 1), "not_whole": file_warmed(args.cache_dir, mine),
            "record": {"triton": triton.__version__, "capability": args.capability, "kernel": kernel["kernel"],
                       "ms": ms, "lookups": mine}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dgprecompile.compile.triton_path", description=__doc__.split("\n")[0])
    p.add_argument("--item", required=True)
    p.add_argument("--kernel", required=True, choices=sorted(WARMS))
    p.add_argument("--params", required=True, help="the item's params, k=v,...")
    p.add_argument("--m", required=True, help="token counts, e.g. 1,16,17")
    p.add_argument("--capability", type=int, default=90)
    p.add_argument("--cache-dir", required=True, help="the dgprecompile cache root (Triton writes into <root>/triton)")
    args = p.parse_args(argv)
    lifeline.end_with_warm()
    os.makedirs(args.cache_dir, exist_ok=True)
    from dgprecompile.compile import triton_host

    # Triton's host modules (3.7-3.8: cuda_utils; 3.5-3.6: a launcher per kernel signature), built GPU-free as the
    # fused MoE warm builds them (compile/triton_host.py): a plan whose experts run on DeepGEMM has no other warm
    # that builds them, and the job's first Triton launch (this embedding) needs them
    signatures = triton_host.watch_kernels()
    report = warm(args)
    report["host_modules"] = triton_host.warm_host_modules(args.cache_dir, report["record"]["lookups"], signatures)
    json.dump(report, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
