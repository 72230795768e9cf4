"""Warm: turn a plan into cache entries, with worker processes and no thread pools.

The parent (no torch import) checks the toolchain and writes the fingerprint, then starts one zygote process
(``dgprecompile.compile.worker``) that imports every backend's libraries once (the plan's DeepGEMM backend and,
where the plan has them, SGLang's JIT modules) and forks ``--jobs`` workers, each serving both. SGLang's Triton
fused-MoE items need none of the zygote's imports: each is cut into chunks of its m set
(compile/triton_chunks.py), run as subprocesses of the parent from the start, within the same --jobs budget.

compile/warm_setup.py decides everything before a worker starts (:func:`prepare_warm`), compile/warm_pool.py runs
the processes, compile/warm_result.py keeps what they report; this module records the plan in the cache's index and
runs the pool (:func:`run_warm`).
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable
from typing import Any

from dgprecompile.compile.warm_pool import run_pool
from dgprecompile.compile.warm_result import WarmResult
from dgprecompile.compile.warm_setup import WarmSetup
from dgprecompile.fsutil import human_bytes

# the kinds whose items start beside the pool: FlashInfer's GPU-free modules (compile/recorded_items.py
# start_side_by_side), the longest single builds of a server plan (160-250 s each on the H200 where the pool's kernels
# took 30 s): started after the pool they set the whole warm's wall; each counts as one of --jobs while the pool runs.
# And the torch.compile graphs (start_staged: each into a staging root of its own, merged into the cache when it ends,
# so that the pool's Triton MoE chunks writing the same areas meanwhile are never taken for theirs): run after the
# pool, one after another, they ended 84 s after it on the H100 while FlashInfer's went on (480B split warm1, 141.6 s
# where trtllm_comm alone took 95.9 s: bench/results/2026-12-07-h100-first-forward-480b-split)
BESIDE_POOL = ("flashinfer-module", "inductor-graph")
GRAPH_SHARE = 2  # with a pool to run, the graphs' parts take at most 1/GRAPH_SHARE of the slots FlashInfer's leave
# while FlashInfer's builds run beside it, the pool's processes and the graphs' run this many nice steps below them
# (their compilers inherit it): those builds are a few long chains of one compiler each (trtllm_comm alone: 3 nvcc at
# most, then 35 s of one host compile), and on a busy host each such compiler waited its turn with the pool's and the
# graphs' dozens (trtllm_comm 133.4 s in the 480B split warm1, 95.9 s alone); lower, the rest fills what they leave
BACKGROUND_NICE = 10
# the kinds whose items warm builds after the pool, in this order, while the builds beside it go on
AFTER_POOL = ("triton-path",)


def _children_cpu() -> float:
    """User and system CPU seconds of this process's waited-for descendants: the zygote (which waits for its
    workers), the Triton MoE chunks, FlashInfer's and the graphs' subprocesses, and every compiler they waited for.
    Over the warm's wall it says how many cores the warm kept busy; over the cores, the least wall its work allows."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _record_plan(setup: WarmSetup) -> None:
    plan = setup.plan

    def mutate(index):
        if setup.stale:
            index.kernels.clear()  # those records describe entries filed under other keys
            index.extra.clear()
            index.sweeps.clear()
            index.triton_moe.clear()  # their entries were extra entries
            index.inductor.clear()
            index.flashinfer.clear()
            index.triton_path.clear()
        index.fingerprint = setup.fingerprint
        entry = plan.summary()
        if entry not in index.plans:
            index.plans.append(entry)

    setup.store.update_index(mutate)


def _skipped_kinds(setup: WarmSetup) -> dict[str, int]:
    return {p.runtime.kind: len(p.skipped) for p in setup.parts if p.skipped}


def run_warm(setup: WarmSetup, on_event: Callable[[dict[str, Any]], None] = lambda e: None) -> WarmResult:
    """Compile ``setup``'s kernels and SGLang JIT modules in one budget of ``setup.workers`` worker processes,
    the costliest first (see compile/warm_setup.py's ``work``). An interrupt (Ctrl-C; SIGTERM and SIGHUP, which the
    CLI turns into one) stops the workers and their compilers and removes the scratch directory and staging roots."""
    store = setup.store
    if setup.in_place:  # nothing to build in a cache we may not write: touch nothing
        return WarmResult(workers=0, cache_dir=str(store.root), backend=setup.backend, kernels=len(setup.in_place),
                          skipped=setup.skipped, skipped_kinds=_skipped_kinds(setup), cached=list(setup.in_place),
                          cache_bytes=store.size_bytes())
    store.ensure()
    store.clean_stale_staging()
    _record_plan(setup)
    jit, triton = setup.part("sglang-jit"), setup.part("triton-moe")  # the result's sections, by kind
    result = WarmResult(workers=setup.workers, jobs=setup.budget, cache_dir=str(store.root), backend=setup.backend,
                        release=setup.plan.sglang_version,
                        kernels=len(setup.items), jit_modules=len(jit.work) if jit else 0,
                        jit_ids=[w.id for w in jit.work] if jit else [], skipped=setup.skipped,
                        skipped_kinds=_skipped_kinds(setup),
                        triton_ids=[it.id for it in triton.built] if triton else [],
                        triton_planned=list(setup.plan.triton_moe), missing=setup.missing,
                        cached=list(setup.swept) + [c for p in setup.parts for c in p.cached])
    start, cpu0 = time.perf_counter(), _children_cpu()
    _run_phases(setup, result, start, on_event)
    result.wall_seconds = time.perf_counter() - start
    result.children_cpu_seconds = _children_cpu() - cpu0
    if result.no_space:
        need = len(result.failed) * setup.plan.profile.bytes_per_entry
        elsewhere = ("set TMPDIR to a directory on a larger filesystem (nvcc writes its intermediates there)"
                     if result.no_space_tmpdir else "pass --cache-dir on a larger filesystem")
        result.no_space_hint = (f"free space there (about {human_bytes(need)} more for the {len(result.failed)} "
                                f"kernels not built), or {elsewhere}; then warm again")
    result.cache_bytes = store.size_bytes()
    return result


def _run_phases(setup: WarmSetup, result: WarmResult, start: float, on_event: Callable[[dict[str, Any]], None]) -> None:
    """FlashInfer's modules and the graphs started beside the pool (BESIDE_POOL), the pool, the graphs finished,
    the builds after the pool (AFTER_POOL) while FlashInfer's go on, then those collected; whatever stops it,
    nothing started here outlives it."""
    from dgprecompile.compile.recorded_items import finish_staged, run_items, start_side_by_side, start_staged

    store = setup.store

    def timed(event: dict[str, Any]) -> None:  # the timeline's start of every item the pool does not hand out
        if event.get("event") == "start":
            result.started.setdefault(event["kernel"], time.perf_counter() - start)
        on_event(event)

    beside, staged = [], []
    pool = bool(setup.items or any(p.work for p in setup.parts))
    try:
        for kind in BESIDE_POOL:
            part = setup.part(kind)
            if part is None or not part.built:
                continue
            if hasattr(part.runtime, "entry_of"):  # FlashInfer: each item's entry named by the runtime
                started = start_side_by_side(setup, part, timed, result)
                beside += [started] if started is not None else []
            else:
                left = (setup.budget or setup.workers) - sum(len(b.items) for b in beside)
                staged += start_staged(setup, part, timed, result, max(1, left // GRAPH_SHARE if pool else left),
                                       BACKGROUND_NICE if beside else 0)
        reserved = sum(len(b.items) for b in beside) + sum(s.parts for s in staged)
        running = list(staged)

        def freed() -> int:  # the slots of the graphs that ended go to the pool
            done = [s for s in running if s.ended()]
            for s in done:
                running.remove(s)
            return sum(s.parts for s in done)

        if pool:
            run_pool(setup, on_event, result, start, reserved=reserved, nice=BACKGROUND_NICE if beside else 0,
                     freed=freed)
        finish_staged(setup, staged, on_event, result)
        reserved -= sum(s.parts for s in staged)
        for kind in AFTER_POOL:  # built by their own subprocesses after the pool, one item at a time
            part = setup.part(kind)
            if part is not None and part.built:
                run_items(setup, part, timed, result, reserved=reserved)
        for started in beside:
            started.finish(on_event, result)
    finally:
        for started in [*beside, *staged]:  # an interrupt or a failure: nothing started here outlives the warm
            started.stop()
        store.clean_stale_staging()
