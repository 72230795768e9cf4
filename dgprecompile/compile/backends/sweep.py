"""Sweep backend (GPU): let the installed C++-JIT DeepGEMM choose its own kernels, for every m a key can take.

For a DeepGEMM whose kernel choice is not modelled (sgl-kernel's bundled C++ JIT), or as a belt-and-braces warm
of any C++-JIT plan, a work item is one chunk of one key's m range (compile/sweep.py). The worker makes SGLang's
call (compile/backends/cxx.py: SglangCalls) for every sampled m of the chunk; whatever the JIT writes into the
worker's private staging root is moved into the real cache whole and checked (StagingWorker.install_staged), so an
interrupted sweep leaves nothing half-written. The worker then records the chunk in the index: the key, its m
range, the fingerprint id and the entries (sweep records, cache/sweeps.py). Nothing is recorded for a chunk that
did not finish, so the next warm sweeps it again.

A chunk's record names every entry this worker built for the key so far, not only those new in the chunk: the
JIT looks up kernels in this worker's own root (and memory) only, so that set holds every kernel the chunk's calls
used, and a deleted one uncovers each range that may need it.
"""

from __future__ import annotations

import time
from typing import Any

from dgprecompile.cache.sweeps import SweepRecord
from dgprecompile.compile.backends import WorkItem
from dgprecompile.compile.backends.base import StagingWorker
from dgprecompile.compile.backends.cxx import SglangCalls
from dgprecompile.compile.sweep import MASKED, sampled_ms
from dgprecompile.errors import CompileFailed


class SweepWorker(StagingWorker):
    def __init__(self, job: dict[str, Any]):
        super().__init__(job)
        self.stage_cache = self.staging / "cache"
        self.stage_cache.mkdir()
        self.required = tuple(job.get("entry_files") or ())
        self.fingerprint_id = str(job["fingerprint_id"])
        self.calls = SglangCalls.open(job, self.staging)
        self.built: dict[tuple, set[str]] = {}  # key -> entries this worker's JIT built for it
        self._pending: dict[str, tuple[SweepRecord, list[str]]] = {}

    def _collect(self, key: tuple, new: list[str]) -> None:
        fresh = sorted(p for p in self.stage_cache.iterdir() if p.is_dir())
        if not fresh:
            return
        installed = self.install_staged(fresh, self.required)
        self.built.setdefault(key, set()).update(p.name for p in fresh)
        new += [p.name for p, ok in zip(fresh, installed, strict=True) if ok]

    def compile(self, item: WorkItem) -> tuple[str, list[str], float]:
        key = (item.kernel_type, item.n, item.k, item.num_groups)
        lo, hi = int(item.params["m_lo"]), int(item.params["m_hi"])
        ms = sampled_ms(item.kernel_type, lo, hi)
        if not ms:
            raise CompileFailed(f"{item.kernel}: no m to call in {lo}..{hi}")
        start = time.perf_counter()
        new: list[str] = []
        if item.kernel_type == MASKED:  # SGLang's masked runner transforms its activation scales first
            self.calls.transpose_scales(item.num_groups, 256, item.k)
            self._collect(key, new)
        call = self.calls.caller(item.kernel_type, item.n, item.k, item.num_groups, max(ms))
        for m in ms:
            try:
                call(m)
            except Exception as exc:  # noqa: BLE001  (the library's own error, named with the m that raised it)
                raise CompileFailed(f"{item.kernel}: the call for m={m} failed: {type(exc).__name__}: {exc}") from None
            self._collect(key, new)
        self.calls.synchronize()
        self._collect(key, new)
        seconds = time.perf_counter() - start
        entries = sorted(self.built.get(key, set()))
        if not entries:
            raise CompileFailed(f"{item.kernel}: {len(ms)} calls made no cache entry in this worker's JIT root")
        self._pending[item.kernel] = (SweepRecord(key, lo, hi, entries, self.fingerprint_id, len(ms),
                                                  round(seconds, 2)), new)
        return "compiled", entries, seconds  # swept: its record is new even where every entry was already built

    def index_mutation(self, item: WorkItem, records):
        """The index update for a finished chunk: entry checksums into ``extra``, the chunk into ``sweeps``."""
        record, _ = self._pending.pop(item.kernel)

        def mutate(index):
            for rec in records:
                index.extra[rec.entry] = rec
            index.sweeps.append(record.to_dict())

        return mutate
