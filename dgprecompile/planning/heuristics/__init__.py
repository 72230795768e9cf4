"""Pure-Python copies of each DeepGEMM generation's kernel choice, so plans need neither torch nor a GPU.

Each heuristic answers two questions: which kernel does a call with this m select, and at which m can
that answer change (so a plan evaluates one m per interval instead of every m). Which generation uses which
heuristic is recorded in dgprecompile.runtimes (Generation.heuristic; the table: registry.py).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from typing import Protocol

from dgprecompile.runtimes.items import KernelSpec, KernelType

# the shared memory one SM90 (Hopper) thread block may use, 227 KiB: every generation's stage choice fits its
# kernels under it (the legacy jit_kernels/gemm.py sm90_capacity; CUTLASS sm90_smem_capacity_bytes in the C++ JITs)
SMEM_CAPACITY = 232448


class Heuristic(Protocol):
    generation: str

    def breakpoints(self, kernel_type: KernelType, m_max: int) -> Iterable[int]:
        """Sorted interval ends e_1 < e_2 < ... = m_max, made as they are read (memory does not grow with m_max):
        the choice is constant on (e_{i-1}, e_i]."""

    def kernel(self, kernel_type: KernelType, m: int, n: int, k: int, num_groups: int, num_sms: int) -> KernelSpec:
        """The kernel DeepGEMM builds for this call."""


def grid_breakpoints(step: int, m_max: int, extra: tuple[int, ...] = ()) -> Iterator[int]:
    """Every multiple of ``step`` up to ``m_max``, the ``extra`` points and ``m_max`` itself, sorted, one at a time."""
    return with_points(range(step, m_max + 1, step), (*extra, m_max), m_max)


def with_points(points: Iterable[int], extra: Iterable[int], m_max: int) -> Iterator[int]:
    """The sorted ``points`` merged with the ``extra`` ones in 1..m_max, each once, lazily."""
    last = None
    for m in heapq.merge(points, sorted(e for e in extra if 0 < e <= m_max)):
        if m != last:
            yield m
            last = m
