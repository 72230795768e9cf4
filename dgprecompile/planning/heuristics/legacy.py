"""Kernel choice of the legacy Python-JIT DeepGEMM (bundled in sgl-kernel <= 0.3.6; sglang 0.5.0-0.5.1.x).

Rules, as read from that DeepGEMM's ``jit_kernels/gemm.py`` (get_best_configs) and ``jit_kernels/runtime.py``
(the template arguments of FP8GemmRuntime):

* block_m from (64, 128, 256) (grouped contiguous: 128 only), block_n from 16..128 step 8 plus 144 and 160,
  never both above 128;
* fewest waves of ceil(m/bm)*ceil(n/bn)*groups blocks over the SMs, then best last-wave use, then the
  documented tie rules;
* the most pipeline stages (<= k/128, from 8; from 4 for block_n that split 128 unevenly) whose shared memory
  fits 232448 bytes;
* TMA multicast 2 when m >= 512 and legal, trying the larger block side first.

M and the SM count are launch arguments of the compiled kernel, not template arguments, so the kernel identity
is the build name plus the template values (N, K, block sizes, padding, swizzle, groups, stages, multicast,
gemm type). ``tests/test_heuristics.py`` checks every m against the real library.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from functools import lru_cache

from dgprecompile.planning.heuristics import SMEM_CAPACITY, grid_breakpoints
from dgprecompile.runtimes.items import KernelSpec, KernelType, ceil_div

BLOCK_K = 128

# build name and GemmType the runtime uses for each SGLang kernel type
BUILD_NAME = {
    KernelType.GEMM_NT_F8F8BF16: ("gemm_fp8_fp8_bf16_nt", "Normal"),
    KernelType.GROUPED_GEMM_NT_F8F8BF16_MASKED: ("m_grouped_gemm_fp8_fp8_bf16_nt", "GroupedMasked"),
    KernelType.GROUPED_GEMM_NT_F8F8BF16_CONTIG: ("m_grouped_gemm_fp8_fp8_bf16_nt", "GroupedContiguous"),
}


def _swizzle_mode(block_n: int) -> int:
    for mode in (128, 64, 32):
        if (block_n * 2) % mode == 0:
            return mode
    return 0


def _padding(block_n: int) -> int:
    bank_stride = (block_n * 2) // 4
    return ((4 - bank_stride) % 8) * 4 // 2


def _smem(stages: int, k: int, bm: int, bn: int) -> tuple[int, int, int]:
    swizzle = _swizzle_mode(bn)
    pad = 0 if swizzle else _padding(bn)
    size = bm * (bn + pad) * 2
    size += stages * (bm * BLOCK_K + bm * 4 + bn * BLOCK_K)
    scales_b = ceil_div(k, BLOCK_K) * 4
    size += ceil_div(scales_b * (1 if BLOCK_K % bn == 0 else 2), 8) * 8
    size += stages * 16
    return size, swizzle, pad


@lru_cache(maxsize=65536)
def best_config(m: int, n: int, k: int, num_groups: int, num_sms: int, contiguous: bool = False,
                masked: bool = False) -> tuple[int, int, int, int, int, bool, int, int]:
    """(block_m, block_n, stages, multicast, multicast_on_a, smem, swizzle, padding) for one call.

    One function of about 60 lines on purpose: it follows the legacy library's get_best_configs
    (deep_gemm/jit_kernels/gemm.py) step for step, so the two can be read side by side."""
    block_ms = (128,) if contiguous else (64, 128, 256)
    block_ns = (*range(16, 129, 8), 144, 160)

    def blocks(bm: int, bn: int) -> int:
        return ceil_div(m, bm) * ceil_div(n, bn) * num_groups

    def waves(bm: int, bn: int) -> int:
        return ceil_div(blocks(bm, bn), num_sms)

    def last_util(bm: int, bn: int) -> int:
        return blocks(bm, bn) % num_sms or num_sms

    best: tuple[int, int] | None = None
    for bm in block_ms:
        for bn in block_ns:
            if bm > 128 and bn > 128:
                continue
            if best is None:
                best = (bm, bn)
                continue
            bbm, bbn = best
            w, bw = waves(bm, bn), waves(bbm, bbn)
            if w != bw:
                better = w < bw
            else:
                u, bu = last_util(bm, bn), last_util(bbm, bbn)
                better = u > bu
                if u == bu:
                    better = better or (bm == bbm and bn < bbn) or (bn == bbn and bm < bbm) \
                        or (bm != bbm and bn > bbn)
            if better:
                best = (bm, bn)
    assert best is not None
    bm, bn = best

    limit = max(k // 128, 1)
    ladder = (8, 7, 6, 5, 4, 3, 2, 1)
    if 128 % bn != 0 and 128 // math.gcd(128, bn) <= 4:
        ladder = (4, 3, 2, 1)
    stages, smem = None, None
    for s in (s for s in ladder if s <= limit):
        smem = _smem(s, k, bm, bn)
        if smem[0] <= SMEM_CAPACITY:
            stages = s
            break
    if stages is None or smem is None:
        raise ValueError(f"no pipeline depth fits shared memory for n={n} k={k}")

    multicast, on_a = 1, True
    legal = {
        "A": (not masked or ceil_div(n, bn) % 2 == 0) and num_sms % 2 == 0,
        "B": num_sms % 2 == 0 and not masked,
    }
    for side in (("A", "B") if bm > bn else ("B", "A")):
        if m >= 512 and legal[side]:
            multicast, on_a = 2, side == "A"
            break
    return bm, bn, stages, multicast, on_a, smem[0], smem[1], smem[2]


class LegacyHeuristic:
    generation = "legacy"

    def breakpoints(self, kernel_type: KernelType, m_max: int) -> Iterable[int]:
        # ceil(m/64) fixes ceil(m/128) and ceil(m/256); multicast switches on at m = 512
        return grid_breakpoints(64, m_max, extra=(511,))

    def kernel(self, kernel_type: KernelType, m: int, n: int, k: int, num_groups: int, num_sms: int) -> KernelSpec:
        contiguous = kernel_type is KernelType.GROUPED_GEMM_NT_F8F8BF16_CONTIG
        masked = kernel_type is KernelType.GROUPED_GEMM_NT_F8F8BF16_MASKED
        groups_for_choice = num_groups if masked else 1
        bm, bn, stages, mc, on_a, _smem_size, swizzle, pad = best_config(
            m, n, k, groups_for_choice, num_sms, contiguous, masked)
        name, gemm_type = BUILD_NAME[kernel_type]
        template_groups = 1 if kernel_type is KernelType.GEMM_NT_F8F8BF16 else num_groups
        params = (
            ("T", gemm_type), ("N", n), ("K", ceil_div(k, 128) * 128), ("G", template_groups),
            ("BM", bm), ("BN", bn), ("ST", stages), ("SW", swizzle), ("PAD", pad), ("MC", mc), ("A", on_a),
        )
        return KernelSpec(family=name, params=params)


def template_kwargs(spec: KernelSpec) -> dict:
    """The template arguments FP8GemmRuntime.generate expects for ``spec`` (used by the legacy backend)."""
    p = dict(spec.params)
    return {
        "N": p["N"], "K": p["K"], "BLOCK_M": p["BM"], "BLOCK_N": p["BN"], "BLOCK_K": BLOCK_K,
        "BLOCK_N_PADDING": p["PAD"], "SWIZZLE_D_MODE": p["SW"], "NUM_GROUPS": p["G"], "NUM_STAGES": p["ST"],
        "NUM_TMA_THREADS": 128, "NUM_MATH_THREADS_PER_GROUP": 128, "NUM_TMA_MULTICAST": p["MC"],
        "IS_TMA_MULTICAST_ON_A": p["A"], "GEMM_TYPE": p["T"],
    }
