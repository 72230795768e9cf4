"""Kernel choice of the C++-JIT DeepGEMM in sgl-deep-gemm 0.1.x (sglang 0.5.12-0.5.19), SM90 FP8 1D2D path.

Rules, as read from the sgl-project/DeepGEMM source the 0.1.3 wheel was built from (csrc/jit_kernels/heuristics
sm90/common/config; impls/sm90_fp8_gemm_1d2d.hpp; docs/heuristics.md has the citations):

* candidates, in this order: cluster (1,1), (1,2), (2,1) [skipped unless it divides the SM count];
  block_m  dense [64, 128, 16 if m<=16, 32 if m<=32, 256], masked [64, 128], contiguous [128];
  block_n 16..192 step 16 without 176; never both blocks above 128; masked needs ceil(n/bn) divisible by the
  cluster size; at least 3 pipeline stages (4 when bm*bn < 128*192);
* stages = min((232448 - extra) // per_stage, 16) with the shared-memory terms below;
* score = cycles from an L1/L2 traffic model divided by the last-wave efficiency, in float32; a multicast
  cluster with one wave or less is never chosen; the first candidate with the strictly lowest score wins.

The compiled kernel is named by the template arguments: the blocks, cluster, stages, D swizzle, thread counts,
the SM count, groups, the weight-scale major, and (grouped kernels only: compiled_dims 'nk') n and k. Dense kernels
use compiled_dims '' so one kernel can serve several (n, k) keys. tests/test_heuristics.py checks every m of the
Qwen3-Coder-480B keys against DG_PRINT_CONFIGS output recorded on an H200.

Activation scales: SGLang's dense path hands DeepGEMM MN-major TMA-aligned scales (no layout kernel); its masked
MoE runner transposes row-major scales with get_mn_major_tma_aligned_tensor, which JIT-compiles one
transpose_fp32<512, 64, ceil(k/128)> kernel per k.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from dgprecompile.planning.heuristics import SMEM_CAPACITY, grid_breakpoints
from dgprecompile.runtimes.items import TRANSPOSE_FAMILY, KernelSpec, KernelType, ceil_div

MAX_STAGES = 16
INT64_MAX = 2**63 - 1

FAMILY = {
    KernelType.GEMM_NT_F8F8BF16: ("sm90_fp8_gemm_1d2d", "Normal"),
    KernelType.GROUPED_GEMM_NT_F8F8BF16_MASKED: ("sm90_fp8_m_grouped_gemm_masked_1d2d", "MGroupedMasked"),
    KernelType.GROUPED_GEMM_NT_F8F8BF16_CONTIG: ("sm90_m_grouped_fp8_gemm_contiguous_1d2d", "MGroupedContiguous"),
}


def _f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


def _align(x: int, a: int) -> int:
    return ceil_div(x, a) * a


def _swizzle(nbytes: int) -> int:
    for mode in (128, 64, 32, 16):
        if nbytes % mode == 0:
            return mode
    return 0


def pipeline(bm: int, bn: int, k: int) -> tuple[int, int]:
    """(stages, shared memory bytes) for one block shape."""
    smem_cd = _align(bm * bn * 2, 1024)
    barriers = 16 * 8 * 2
    per_stage = bm * 128 + bn * 128 + _align(bm * 4, 128)
    extra_sfb = _align(ceil_div(k, 128) * 4 * (1 if 128 % bn == 0 else 2), 8)
    extra = smem_cd + barriers + extra_sfb
    stages = min((SMEM_CAPACITY - extra) // per_stage, MAX_STAGES)
    return stages, extra + stages * per_stage


def _cycles(em: int, n: int, k: int, groups: int, num_sms: int, bm: int, bn: int, cm: int, cn: int) -> int:
    blocks = ceil_div(em, bm) * ceil_div(n, bn) * groups
    waves = ceil_div(blocks, num_sms)
    l2_bw = int(min(64.0 * num_sms, 8e6 / 1.3e3))
    l1_bw = 128 * num_sms
    cd = bm * bn * 2
    l2 = (k * (bm // cn + bn // cm) + cd) * blocks // l2_bw
    l1 = (k * (bm + bn) + k * (max(64, bm) + bn) + bm * bn * 2 + cd) * blocks // l1_bw
    eff = _f32(_f32(float(blocks)) / _f32(float(waves * num_sms)))
    cycles = int(_f32(_f32(float(max(l1, l2))) / eff))
    if cm * cn > 1 and waves <= 1:
        return INT64_MAX
    return cycles


@lru_cache(maxsize=1 << 16)  # a plan asks each (key, m) once per release; the record checks ask ~56k, many times
def best_config(kind: KernelType, m: int, n: int, k: int, num_groups: int, num_sms: int,
                mk_alignment: int = 128) -> tuple[int, int, int, int, int, int]:
    """(block_m, block_n, cluster_m, cluster_n, stages, smem) for one call (m = expected_m for masked)."""
    if kind is KernelType.GEMM_NT_F8F8BF16:
        block_ms = [64, 128] + ([16] if m <= 16 else []) + ([32] if m <= 32 else []) + [256]
        groups = 1
    elif kind is KernelType.GROUPED_GEMM_NT_F8F8BF16_MASKED:
        block_ms, groups = [64, 128], num_groups
    else:
        block_ms, groups = [mk_alignment], 1
    masked = kind is KernelType.GROUPED_GEMM_NT_F8F8BF16_MASKED
    best, best_cycles = None, None
    for cm, cn in ((1, 1), (1, 2), (2, 1)):
        if num_sms % (cm * cn):
            continue
        for bm in block_ms:
            for bn in range(16, 193, 16):
                if bn > 128 and bn % (bn - 128) and 128 % (bn - 128):
                    continue
                if masked and ceil_div(n, bn) % (cm * cn):
                    continue
                if bm > 128 and bn > 128:
                    continue
                stages, _ = pipeline(bm, bn, k)
                if stages < 3 or (bm * bn < 128 * 192 and stages < 4):
                    continue
                cycles = _cycles(m, n, k, groups, num_sms, bm, bn, cm, cn)
                if best is None or cycles < best_cycles:
                    best, best_cycles = (bm, bn, cm, cn), cycles
    if best is None:
        raise ValueError(f"no SM90 kernel configuration fits n={n} k={k}")
    bm, bn, cm, cn = best
    stages, smem = pipeline(bm, bn, k)
    return bm, bn, cm, cn, stages, smem


@dataclass(frozen=True)
class CompiledN:
    """Which dense kernels a release builds with n as a template constant (SHAPE_N = n, not 0) although SGLang
    passes compiled_dims '' for the dense GEMM: the kernel then serves one n only, so two dense keys that pick one
    configuration get two entries. The configuration is a block_m in ``block_ms``, a block_n above
    ``block_n_above`` and a cluster of ``cluster_size``."""

    block_ms: tuple[int, ...]
    block_n_above: int
    cluster_size: int

    def applies(self, bm: int, bn: int, cluster: int) -> bool:
        return bm in self.block_ms and bn > self.block_n_above and cluster == self.cluster_size


# sgl-deep-gemm 0.2.0-0.2.3.post2 (their host code is compiled into _C.so only; no source of these releases is
# public): observed on an H200, not read. Every dense kernel those releases built for the 480B tp8/ep8 keys, m 1 to
# 65,536, has N = 0 except the three block 128 x {144, 160, 192} single-cluster ones, which have N = n (1792 and
# 6144 both); the same blocks with a cluster of 2 and block 64 x 144 keep N = 0
# (tests/data/torch214_generations_h200.json; docs/heuristics.md "sgl-deep-gemm 0.2.x").
COMPILED_N_02 = CompiledN(block_ms=(128,), block_n_above=128, cluster_size=1)


def transpose_kernel(k: int) -> KernelSpec:
    return KernelSpec(TRANSPOSE_FAMILY, (("TH", 512), ("BMN", 64), ("SFK", ceil_div(k, 128))))


class Sm90CxxHeuristic:
    generation = "sgl-deep-gemm-0.1"
    compiled_n: CompiledN | None = None  # 0.1.x: every dense kernel has N = 0

    def breakpoints(self, kernel_type: KernelType, m_max: int) -> Iterable[int]:
        if kernel_type is KernelType.GEMM_NT_F8F8BF16:
            return grid_breakpoints(64, m_max, extra=(16, 32))
        return grid_breakpoints(128 if kernel_type is KernelType.GROUPED_GEMM_NT_F8F8BF16_CONTIG else 64, m_max)

    def kernel(self, kernel_type: KernelType, m: int, n: int, k: int, num_groups: int, num_sms: int) -> KernelSpec:
        bm, bn, cm, cn, stages, _ = best_config(kernel_type, m, n, k, num_groups, num_sms)
        family, gemm_type = FAMILY[kernel_type]
        dense = kernel_type is KernelType.GEMM_NT_F8F8BF16
        n_const = n if not dense or (self.compiled_n and self.compiled_n.applies(bm, bn, cm * cn)) else 0
        params = (
            ("SFB", "K"), ("N", n_const), ("K", 0 if dense else k), ("G", 1 if dense else num_groups),
            ("BM", bm), ("BN", bn), ("SWD", _swizzle(bn * 2)), ("ST", stages),
            ("MATH", 128 if bm <= 64 else 256), ("MC", cm * cn), ("A", cn > 1), ("SMS", num_sms), ("T", gemm_type),
        )
        return KernelSpec(family, params)

    def aux_kernels(self, kernel_type: KernelType, n: int, k: int, num_groups: int,
                    sglang_warmup: bool = False) -> list[KernelSpec]:
        """Layout kernels compiled beside the GEMM: SGLang's real masked path transposes its row-major scales; with
        ``sglang_warmup`` also every key SGLang's own precompile warms, since its dummy inputs carry row-major
        scales (sglang 0.5.14 compile_utils.py:279-288 ``_empty_token_fp8``) that DeepGEMM transposes, where the
        real dense path hands over MN-major ones."""
        if kernel_type is KernelType.GROUPED_GEMM_NT_F8F8BF16_MASKED or sglang_warmup:
            return [transpose_kernel(k)]
        return []


class Sm90Cxx02Heuristic(Sm90CxxHeuristic):
    """sgl-deep-gemm 0.2.x (DeepJIT): 0.1.x's configuration choice (the same L1/L2 cycle score; every printed
    configuration of the H200 record equals it), and COMPILED_N_02's dense kernels carry n. The rule depends on the
    configuration alone, so 0.1.x's breakpoints hold."""

    generation = "sgl-deep-gemm-0.2"
    compiled_n = COMPILED_N_02
