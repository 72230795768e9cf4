"""Kernel choice of the C++-JIT DeepGEMM bundled in sgl-kernel 0.3.7-0.3.21 and sglang-kernel 0.4.0-0.4.2, SM90 FP8 1D2D.

This is another rule than sgl-deep-gemm 0.1.x's (heuristics/sm90_cxx.py): no cycle model and no clusters, but a
wave count, read from the sgl-project/DeepGEMM source whose headers and generated-code text equal those wheels'
(SGF@5f8a71a ``csrc/jit_kernels/heuristics/common.hpp`` L152-316 and ``sm90.hpp``; docs/heuristics.md has the
line-by-line citations):

* candidates, block_m outer: dense [64, 128, 256], masked [64, 128], contiguous [128]; block_n 16..256 step 16,
  legal for the 1D2D kernel when <= 128 or one of 144, 160, 192, and never both blocks above 128;
* the fewest waves (ceil(blocks / SMs)) win; on a tie the fuller last wave, then a smaller block on a shared
  dimension, then a larger block_n (but only with block_n <= n and block_m <= m);
* TMA multicast 2 (on A when block_m > block_n is tried first) from m >= 512 where legal;
* stages: the largest of 12..1 that fits 232,448 bytes of shared memory (at most 4 for some block_n);
* the SM count is minimised (ceil(blocks / waves), made even under multicast) and is a template constant of the
  kernel, as are n and k (SGLang calls with the default compiled_dims "nk") and the number of groups.

tests/test_sk_generation.py checks this against every configuration sglang-kernel 0.4.2 printed on an H200.

sgl-kernel 0.3.7-0.3.9.post2 carry the same wave rule in an earlier revision (SGF@b981e3e, whose headers, 1d2d format
string, op schemas and DG_PRINT_CONFIGS text equal those wheels'; ``heuristics/common.hpp`` blob 3ed4d2a, ``sm90.hpp``
16ca018): :data:`RULE_0_3_7` names its six differences (docs/heuristics.md, "sgl-kernel 0.3.7-0.3.9.post2").

sgl-kernel 0.3.20-0.3.21 carry a later revision (SGF@54f99a8, whose 22 headers, generated-code text, op schemas and
DG_PRINT_CONFIGS text equal those wheels'; a descendant of SGF@5f8a71a): :data:`RULE_0_3_20` names its four
differences (docs/heuristics.md, "sgl-kernel 0.3.20-0.3.21").
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from math import gcd

from dgprecompile.planning.heuristics import SMEM_CAPACITY, grid_breakpoints, with_points
from dgprecompile.planning.heuristics.sm90_cxx import FAMILY, Sm90CxxHeuristic, _align, _swizzle
from dgprecompile.runtimes.items import KernelSpec, KernelType, ceil_div

BLOCK_K = 128
BLOCK_NS = tuple(range(16, 257, 16))
MULTICAST_MIN_M = 512


@dataclass(frozen=True)
class WaveRule:
    """Where two revisions of the wave rule differ (SGF@b981e3e -> SGF@f4adba8/5f8a71a ``heuristics/``)."""

    masked_block_ms: tuple[int, ...]  # common.hpp: masked candidates (256 excluded from f4adba8 on)
    stages_capped_by_k: bool  # stages start at min(12, ceil(k / 128)) instead of 12
    barrier_stages_extra: int  # sm90.hpp get_barrier_smem_size: (stages + extra) * 16 bytes
    masked_multicast_on_b: bool  # on B legal for masked (when ceil(n / bn) is even) or never
    legality_swapped: bool  # trying "on A" tests B's legality and vice versa (is_legal = {on_a, on_b}[on_a])
    idle_on_a: bool  # multicast-on-A of the no-multicast config ({1, true} before f4adba8)
    max_stages: int = 12  # common.hpp: the stage search starts here (32 from 54f99a8 on)
    aligned_smem: bool = False  # sm90.hpp: C/D shared memory aligned to 1024 bytes, SFA per stage to 128 (54f99a8)
    small_block_ms: bool = False  # sm90.hpp get_block_m_candidates: dense also tries 16 (m <= 16), 32 (m <= 32)


# sgl-kernel 0.3.14.post1-0.3.19, sglang-kernel 0.4.x (SGF@f4adba8 = SGF@5f8a71a for this choice)
RULE_WAVES = WaveRule(masked_block_ms=(64, 128), stages_capped_by_k=False, barrier_stages_extra=0,
                      masked_multicast_on_b=True, legality_swapped=False, idle_on_a=False)
# sgl-kernel 0.3.7-0.3.9.post2 (SGF@b981e3e common.hpp L155-156, L214-226, L232; sm90.hpp L69-76, L109-112)
RULE_0_3_7 = WaveRule(masked_block_ms=(64, 128, 256), stages_capped_by_k=True, barrier_stages_extra=1,
                      masked_multicast_on_b=False, legality_swapped=True, idle_on_a=True)
# sgl-kernel 0.3.20-0.3.21 (SGF@54f99a8 sm90.hpp L14-22, L118, L124-126, L135; common.hpp L242)
RULE_0_3_20 = WaveRule(masked_block_ms=(64, 128), stages_capped_by_k=False, barrier_stages_extra=0,
                       masked_multicast_on_b=True, legality_swapped=False, idle_on_a=False, max_stages=32,
                       aligned_smem=True, small_block_ms=True)


def _block_n_legal(bm: int, bn: int) -> bool:
    if bn > 128 and bn not in (144, 160, 192):
        return False
    return bm <= 128 or bn <= 128


def _stages_legal(stages: int, bn: int) -> bool:
    if BLOCK_K % bn and BLOCK_K // gcd(bn, BLOCK_K) <= 4:
        return stages <= 4
    return True


def smem_size(bm: int, bn: int, k: int, stages: int, rule: WaveRule = RULE_WAVES) -> int:
    smem_cd, smem_sfa = bm * bn * 2, bm * 4
    if rule.aligned_smem:
        smem_cd, smem_sfa = _align(smem_cd, 1024), _align(smem_sfa, 128)
    per_stage = bm * BLOCK_K + bn * BLOCK_K + smem_sfa
    extra_sfb = _align(ceil_div(k, BLOCK_K) * 4 * (1 if BLOCK_K % bn == 0 else 2), 8)
    return smem_cd + stages * per_stage + extra_sfb + (stages + rule.barrier_stages_extra) * 8 * 2


def _multicast_legal(shape: int, block: int, num_sms: int, require_divisible: bool) -> bool:
    return (ceil_div(shape, block) % 2 == 0 or not require_divisible) and num_sms % 2 == 0


def best_config(kind: KernelType, m: int, n: int, k: int, num_groups: int, num_sms: int,
                mk_alignment: int = 128, rule: WaveRule = RULE_WAVES) -> tuple[int, int, int, bool, int, int, int]:
    """(block_m, block_n, multicast, multicast_on_a, stages, smem, sms) for one call (m = expected_m for masked)."""
    masked = kind is KernelType.GROUPED_GEMM_NT_F8F8BF16_MASKED
    if kind is KernelType.GEMM_NT_F8F8BF16:  # the small blocks come after the others (push_back)
        block_ms, groups = (64, 128, 256), 1
        if rule.small_block_ms:
            block_ms += tuple(bm for bm in (16, 32) if m <= bm)
    elif masked:
        block_ms, groups = rule.masked_block_ms, num_groups
    else:  # contiguous: the heuristic sees one group of m rows
        block_ms, groups = (mk_alignment,), 1

    best = None  # (bm, bn, waves, last_util)
    for bm in block_ms:
        for bn in BLOCK_NS:
            if not _block_n_legal(bm, bn):
                continue
            blocks = ceil_div(m, bm) * ceil_div(n, bn) * groups
            waves, last = ceil_div(blocks, num_sms), blocks % num_sms or num_sms
            if best is None or waves < best[2]:
                take = True
            elif waves == best[2]:
                take = last > best[3]
                if last == best[3]:
                    take |= bm == best[0] and bn < best[1]
                    take |= bn == best[1] and bm < best[0]
                    take |= bm != best[0] and bn > best[1] and bn <= n and bm <= m
            else:
                take = False
            if take:
                best = (bm, bn, waves, last)
    if best is None:
        raise ValueError(f"no SM90 kernel configuration fits n={n} k={k}")
    bm, bn, waves, _ = best

    legal_on_a = _multicast_legal(n, bn, num_sms, masked)
    legal_on_b = _multicast_legal(m, bm, num_sms, False) and (
        not masked or (rule.masked_multicast_on_b and _multicast_legal(n, bn, num_sms, True)))
    multicast, on_a = 1, rule.idle_on_a
    if m >= MULTICAST_MIN_M:
        for try_a in ((True, False) if bm > bn else (False, True)):
            if legal_on_a if try_a != rule.legality_swapped else legal_on_b:
                multicast, on_a = 2, try_a
                break

    first = min(rule.max_stages, ceil_div(k, BLOCK_K)) if rule.stages_capped_by_k else rule.max_stages
    for stages in range(first, 0, -1):
        if _stages_legal(stages, bn) and smem_size(bm, bn, k, stages, rule) <= SMEM_CAPACITY:
            break
    else:
        raise ValueError(f"no pipeline depth fits block {bm}x{bn} with k={k}")

    sms = _align(ceil_div(ceil_div(m, bm) * ceil_div(n, bn) * groups, waves), multicast)
    return bm, bn, multicast, on_a, stages, smem_size(bm, bn, k, stages, rule), sms


class Sm90WaveHeuristic:
    generation = "sgl-kernel-waves"
    rule = RULE_WAVES
    params_head: tuple[tuple[str, object], ...] = ()  # template arguments before n (none before 0.3.20)

    def breakpoints(self, kernel_type: KernelType, m_max: int) -> Iterable[int]:
        """ceil(m / block_m) changes at multiples of 64 (128 for contiguous); the tie-break's block_m <= m at
        m = 128 and 256; multicast starts at m = 512."""
        if kernel_type is KernelType.GROUPED_GEMM_NT_F8F8BF16_CONTIG:
            return grid_breakpoints(128, m_max, extra=(MULTICAST_MIN_M - 1,))
        return grid_breakpoints(64, m_max, extra=(127, 255, MULTICAST_MIN_M - 1))

    def kernel(self, kernel_type: KernelType, m: int, n: int, k: int, num_groups: int, num_sms: int) -> KernelSpec:
        bm, bn, multicast, on_a, stages, _, sms = best_config(kernel_type, m, n, k, num_groups, num_sms, rule=self.rule)
        family, gemm_type = FAMILY[kernel_type]
        dense = kernel_type is KernelType.GEMM_NT_F8F8BF16
        params = (
            ("N", n), ("K", _align(k, 128)), ("G", 1 if dense else num_groups),
            ("BM", bm), ("BN", bn), ("SWD", _swizzle(bn * 2)), ("ST", stages),
            ("LST", ceil_div(k, BLOCK_K) % stages), ("MATH", 128 if bm <= 64 else 256), ("MC", multicast),
            ("A", on_a), ("SMS", sms), ("T", gemm_type),
        )
        return KernelSpec(family, self.params_head + params)

    # the same layout kernels as 0.1.x: SGLang 0.5.11's masked runner hands row-major activation scales to
    # get_mn_major_tma_aligned_tensor (moe_runner/deep_gemm.py L257-260, L323-326), and its precompile's dummy
    # inputs are row-major too (deep_gemm_wrapper/compile_utils.py L252-259); SGF@5f8a71a smxx_layout.hpp builds
    # the same transpose_fp32<512, 64, ceil(k/128)> for them
    aux_kernels = Sm90CxxHeuristic.aux_kernels


class Sm90WaveHeuristic037(Sm90WaveHeuristic):
    """sgl-kernel 0.3.7-0.3.9.post2: the same candidates, waves, tie-break and SM minimising; RULE_0_3_7's
    differences. The breakpoints carry over: masked block_m 256 changes ceil(m / bm) at multiples of 64 too, and
    the tie-break's block_m <= m flips at 256 as for dense; the stage cap depends on k alone."""

    generation = "sgl-kernel-waves-0.3.7"
    rule = RULE_0_3_7


class Sm90WaveHeuristic0320(Sm90WaveHeuristic):
    """sgl-kernel 0.3.20-0.3.21: RULE_0_3_20. A dense call with m <= 16 (<= 32) may take block_m 16 (32): the
    candidates change after m = 16 and 32, and the tie-break's block_m <= m flips at m = 16 and 32. The kernel takes
    the scale-factor-B major as its first template argument: SGLang's weight scales are contiguous, so K
    (SGF@54f99a8 csrc/apis/gemm.hpp L93, csrc/utils/layout.hpp L20-23)."""

    generation = "sgl-kernel-waves-0.3.20"
    rule = RULE_0_3_20
    params_head = (("SFB", "K"),)

    def breakpoints(self, kernel_type: KernelType, m_max: int) -> Iterable[int]:
        points = super().breakpoints(kernel_type, m_max)
        if kernel_type is KernelType.GEMM_NT_F8F8BF16:
            points = with_points(points, (15, 16, 31, 32), m_max)
        return points
