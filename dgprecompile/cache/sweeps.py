"""Sweep records: which m ranges of which key a `warm --backend sweep` covered, and the entries that made.

The index (``index.json``, key ``sweeps``) holds one record per swept chunk: the key (kernel_type, n, k,
num_groups), the fingerprint id the cache was built for, the inclusive m range and the names of the entries the
library wrote while it was called for that range (their checksums are in ``index.extra``). A range counts as
covered only while its record's fingerprint is the cache's and every entry it names is on disk, whole and valid.
No torch, no DeepGEMM: verify and warm's parent both use this.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dgprecompile.cache.store import CacheStore, Index
from dgprecompile.runtimes.items import KernelType

Key = tuple[str, int, int, int]


@dataclass
class SweepRecord:
    key: Key
    m_lo: int
    m_hi: int
    entries: list[str]
    fingerprint: str  # short id of the fingerprint the cache was built for when this range was swept
    calls: int = 0
    seconds: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"key": list(self.key), "m": [self.m_lo, self.m_hi], "entries": sorted(self.entries),
                "fingerprint": self.fingerprint, "calls": self.calls, "seconds": self.seconds}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SweepRecord:
        kind, n, k, g = d["key"]
        lo, hi = d["m"]
        return cls((str(kind), int(n), int(k), int(g)), int(lo), int(hi), [str(e) for e in d["entries"]],
                   str(d["fingerprint"]), int(d.get("calls", 0)), d.get("seconds"))


def key_label(key: tuple[str, int, int, int] | list) -> str:
    kind, n, k, g = key
    short = {t.value: t.short for t in KernelType}.get(kind, kind)
    return f"{short} n={n} k={k}" + (f" g={g}" if g > 1 else "")


def records(index: Index) -> list[SweepRecord]:
    return [SweepRecord.from_dict(d) for d in index.sweeps]


def merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def subtract(lo: int, hi: int, covered: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of [lo, hi] outside ``covered``."""
    out, start = [], lo
    for c_lo, c_hi in merge(covered):
        if c_hi < start or c_lo > hi:
            continue
        if c_lo > start:
            out.append((start, c_lo - 1))
        start = max(start, c_hi + 1)
    if start <= hi:
        out.append((start, hi))
    return out


@dataclass
class KeyCoverage:
    key: Key
    m_min: int
    m_max: int
    covered: list[tuple[int, int]] = field(default_factory=list)
    # (m range, entry, what is wrong) for records whose entries are not all usable
    broken: list[tuple[tuple[int, int], str, str]] = field(default_factory=list)
    entries: set[str] = field(default_factory=set)  # usable entries of the covering records

    @property
    def missing(self) -> list[tuple[int, int]]:
        return subtract(self.m_min, self.m_max, self.covered)


def coverage(store: CacheStore, index: Index, keys: list[tuple[Key, int, int]], fingerprint: str,
             arch: str | None) -> list[KeyCoverage]:
    """For each (key, m_min, m_max): the ranges covered by sweep records of ``fingerprint`` whose entries are
    all present with the recorded bytes and loadable, and the records that fail that (first bad entry each)."""
    by_key: dict[Key, list[SweepRecord]] = {}
    for rec in records(index):
        if rec.fingerprint == fingerprint:
            by_key.setdefault(rec.key, []).append(rec)
    checked: dict[str, str | None] = {}

    def problem(entry: str) -> str | None:
        if entry not in checked:
            extra = index.extra.get(entry)
            checked[entry] = "not in the index" if extra is None else store.check_entry(extra, arch)
        return checked[entry]

    out = []
    for key, m_min, m_max in keys:
        cov = KeyCoverage(key, m_min, m_max)
        for rec in by_key.get(key, []):
            if rec.m_hi < m_min or rec.m_lo > m_max:
                continue
            bad = next(((e, p) for e in rec.entries if (p := problem(e)) is not None), None)
            if bad is None:
                cov.covered.append((rec.m_lo, rec.m_hi))
                cov.entries.update(rec.entries)
            else:
                cov.broken.append(((rec.m_lo, rec.m_hi), bad[0], bad[1]))
        cov.covered = merge(cov.covered)
        out.append(cov)
    return out
