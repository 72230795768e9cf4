"""Pure-Python copies of each DeepGEMM generation's kernel choice, so plans need neither torch nor a GPU.

Each heuristic answers two questions: which kernel does a call with this m select, and at which m can
that answer change (so a plan evaluates one m per interval instead of every m).
"""

from __future__ import annotations

from typing import Protocol

from dgprecompile.kernels import KernelSpec, KernelType


class Heuristic(Protocol):
    generation: str

    def breakpoints(self, kernel_type: KernelType, m_max: int) -> list[int]:
        """Sorted interval ends e_1 < e_2 < ... = m_max: the choice is constant on (e_{i-1}, e_i]."""

    def kernel(self, kernel_type: KernelType, m: int, n: int, k: int, num_groups: int, num_sms: int) -> KernelSpec:
        """The kernel DeepGEMM builds for this call."""


def get_heuristic(generation: str) -> Heuristic:
    if generation == "legacy":
        from dgprecompile.planning.heuristics.legacy import LegacyHeuristic

        return LegacyHeuristic()
    if generation in ("sgl-deep-gemm-0.1", "sgl-deep-gemm-0.2"):
        # 0.2.x keeps 0.1.x's SM90 heuristic source (docs/heuristics.md); validated on a GPU for 0.1.3 only
        from dgprecompile.planning.heuristics.sm90_cxx import Sm90CxxHeuristic

        return Sm90CxxHeuristic()
    raise KeyError(generation)


def grid_breakpoints(step: int, m_max: int, extra: tuple[int, ...] = ()) -> list[int]:
    points = set(range(step, m_max + 1, step))
    points.update(e for e in extra if 0 < e <= m_max)
    points.add(m_max)
    return sorted(points)
