"""The sweep backend's parent side (no torch): which m to call for each key, and how to split that work.

For a DeepGEMM whose kernel choice dgprecompile does not model (sgl-kernel's bundled C++ JIT), warm lets the
library choose: a worker calls the installed DeepGEMM for every sampled m of a key's m range, and every entry the
JIT writes is installed into the cache. Sampling (docs/sweep.md has the evidence):

* dense and contiguous: every m up to ``EVERY_M_UP_TO`` (16,384), above it 64q+1, 64q+32 and 64q+64 for every q.
  DeepGEMM's SM90 choice depends on m through ceil(m / block_m) with block_m in {64, 128, 256} above the small-m
  blocks, so it can change only between 64q and 64q+1 (and at thresholds that are multiples of 64, which 64q+64
  catches); 64q+32 is a check inside the interval. The device record (tests/data/sweep_generations_h200.json)
  never changed choice elsewhere (tests/test_sweep.py checks it).
* masked: every expected_m (masked_m = 0: a call does no work, so every one is cheap).

The work items are chunks: one contiguous piece of one key's m range each, cut so that every worker of the
--jobs budget gets a share of about the same number of calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dgprecompile.cache.sweeps import key_label

EVERY_M_UP_TO = 16384
INTERVAL = 64
MASKED = "GROUPED_GEMM_NT_F8F8BF16_MASKED"
SWEEP_FAMILY = "sweep"


def sampled_ms(kernel_type: str, m_min: int, m_max: int) -> list[int]:
    """Every m the sweep calls inside [m_min, m_max], in increasing order."""
    if m_max < m_min:
        return []
    if kernel_type == MASKED or m_max <= EVERY_M_UP_TO:
        return list(range(m_min, m_max + 1))
    out = list(range(m_min, EVERY_M_UP_TO + 1))
    if m_min > EVERY_M_UP_TO and m_min % INTERVAL not in (0, 1, 32):
        out.append(m_min)  # a range starting inside an interval: m_min stands for the rest of 64q+1..64q+63
    start_q = max(EVERY_M_UP_TO, m_min - 1) // INTERVAL
    for q in range(start_q, (m_max + INTERVAL - 1) // INTERVAL + 1):
        for m in (INTERVAL * q + 1, INTERVAL * q + 32, INTERVAL * q + INTERVAL):
            if max(m_min, EVERY_M_UP_TO + 1) <= m <= m_max:
                out.append(m)
    return sorted(set(out))


@dataclass(frozen=True)
class SweepChunk:
    """One work item: the sampled m of [m_lo, m_hi] of one key."""

    kernel_type: str
    n: int
    k: int
    num_groups: int
    m_lo: int
    m_hi: int
    calls: int

    @property
    def key(self) -> tuple[str, int, int, int]:
        return (self.kernel_type, self.n, self.k, self.num_groups)

    @property
    def id(self) -> str:
        return f"{SWEEP_FAMILY}:{key_label(self.key)}:m{self.m_lo}-{self.m_hi}"

    def to_work_item(self) -> dict[str, Any]:
        """The fields of a compile.backends.WorkItem (kept as a dict: this module imports no backend code)."""
        return {"kernel": self.id, "family": SWEEP_FAMILY, "params": {"m_lo": self.m_lo, "m_hi": self.m_hi},
                "kernel_type": self.kernel_type, "n": self.n, "k": self.k, "num_groups": self.num_groups,
                "m": self.m_lo}


def split_ranges(key: tuple[str, int, int, int], ranges: list[tuple[int, int]], target_calls: int
                 ) -> list[SweepChunk]:
    """Cut each m range of one key into contiguous chunks of about ``target_calls`` sampled calls."""
    target = max(1, target_calls)
    out: list[SweepChunk] = []
    for lo, hi in ranges:
        ms = sampled_ms(key[0], lo, hi)
        if not ms:
            continue
        pieces = max(1, round(len(ms) / target))
        size = -(-len(ms) // pieces)
        for i in range(0, len(ms), size):
            part = ms[i:i + size]
            # a chunk owns every m from its first sample to the next chunk's first sample - 1
            chunk_lo = lo if i == 0 else part[0]
            chunk_hi = hi if i + size >= len(ms) else ms[i + size] - 1
            out.append(SweepChunk(*key, chunk_lo, chunk_hi, len(part)))
    return out


def plan_chunks(todo: dict[tuple[str, int, int, int], list[tuple[int, int]]], jobs: int) -> list[SweepChunk]:
    """Chunks for every key's ranges still to sweep, so that ``jobs`` workers get about equal numbers of calls
    (at least one chunk per range; the largest first)."""
    total = sum(len(sampled_ms(key[0], lo, hi)) for key, ranges in todo.items() for lo, hi in ranges)
    if not total:
        return []
    target = -(-total // max(1, jobs))
    chunks = [c for key, ranges in todo.items() for c in split_ranges(key, ranges, target)]
    return sorted(chunks, key=lambda c: -c.calls)
