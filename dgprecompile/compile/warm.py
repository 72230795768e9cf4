"""Warm: turn a plan into cache entries, with worker processes and no thread pools.

The parent (no torch import) checks the toolchain and writes the fingerprint, then starts one zygote process
(``dgprecompile.compile.worker``) that imports every backend's libraries once (the plan's DeepGEMM backend and,
where the plan has them, SGLang's JIT modules) and forks ``--jobs`` workers, each serving both. The parent hands
the items out one at a time, costliest first, to whichever worker is free; each worker compiles in its main
thread and reports events on a pipe, which the parent reads. SGLang's Triton fused-MoE items need none of the
zygote's imports: each is cut into chunks of its m set (compile/triton_chunks.py), run as subprocesses of the
parent from the start, within the same --jobs budget. Who gets what, who is blamed for a failure and
when to stop is compile/schedule.py's pure state machine; this module only moves the bytes.
"""

from __future__ import annotations

import errno
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dgprecompile.cache.store import CacheStore, resolve_cache_dir
from dgprecompile.compile.backends import WorkItem, backend_for
from dgprecompile.compile.schedule import NO_SPACE, Action, Close, Job, Lost, Scheduler, Send
from dgprecompile.compile.triton_chunks import Chunk, ChunkedItem
from dgprecompile.compile.worker import startup_failure
from dgprecompile.errors import (
    EXIT_COMPILE_FAILED,
    EXIT_ENVIRONMENT,
    EXIT_OK,
    CompileFailed,
    DGError,
    EnvironmentProblem,
    InputError,
)
from dgprecompile.fsutil import free_bytes, human_bytes, mount_point, os_error
from dgprecompile.host import scratch
from dgprecompile.host.lifeline import refuse_inside_strict_launch
from dgprecompile.host.toolchain import find_deepgemm, find_nvcc
from dgprecompile.keys.fingerprint import differences, make_fingerprint, short_id
from dgprecompile.keys.schemes import key_context, naming_for
from dgprecompile.planning.plan import Plan
from dgprecompile.runtimes import get_backend
from dgprecompile.runtimes.deepgemm import SGLANG_JIT_BACKEND
from dgprecompile.runtimes.items import TRANSPOSE_FAMILY

# Tasks (threads + processes) one worker holds at its peak: its own main thread, plus the compiler's process
# tree. nvcc runs its stages (cudafe++, cicc, ptxas, the host compiler) one at a time under one driver; one
# nvcc 13.0 compile of a DeepGEMM kernel peaked at 4 tasks (docs/root-cause.md, "measured"). Workers pin
# OpenBLAS/OpenMP to one thread each.
SECONDS_PER_COST_UNIT = 2.0  # _estimated_cost's relative units as seconds of one compile alone
TICK_SECONDS = 1.0  # how often the parent wakes without events (progress lines on a non-terminal)
WORKER_BASE_TASKS = 1
# Not a measurement: a queue weight per estimated distinct Triton MoE kernel in a chunk (compile/triton_chunks.py
# weight_of) that orders the chunks costliest first; they run in slots of their own (no zygote), so it orders
# them only among themselves
TRITON_MOE_SECONDS_PER_KERNEL = 2.0
COMPILER_TREE_TASKS = 4
WORKER_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
              "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}


@dataclass
class WarmOptions:
    cache_dir: str | None = None
    backend: str | None = None
    jobs: int | None = None
    gpus: list[int] | None = None
    nvcc: str | None = None
    sglang_jit: str = "auto"  # SGLang's own JIT modules: auto (when the plan's sglang is installed) | on | off


@dataclass
class WarmSetup:
    plan: Plan
    backend: str
    store: CacheStore
    fingerprint: dict[str, Any]
    stale: list[tuple[str, Any, Any]]
    items: list[WorkItem]  # in the order they are handed out: the costliest first
    workers: int
    gpus: list[int | None]
    job_common: dict[str, Any]
    rank: int = 0
    world: int = 1
    notes: list[str] = field(default_factory=list)  # what the user should know about this warm
    jit_items: list[WorkItem] = field(default_factory=list)  # SGLang's own JIT modules (sglang-jit workers)
    jit_job: dict[str, Any] = field(default_factory=dict)
    jit_skipped: dict[str, str] = field(default_factory=dict)  # module id -> why it is not built here
    # this machine lacks what builds them (sglang, tvm-ffi, ninja): what to install; None when they were turned off
    jit_missing: str | None = None
    swept: list[str] = field(default_factory=list)  # sweep backend: key ranges already covered (cached)
    jit_seconds: float = 0.0  # the estimated build time of one SGLang JIT module (the queue's order)
    in_place: list[str] = field(default_factory=list)  # a read-only cache holding every kernel: nothing to do
    triton_items: list[WorkItem] = field(default_factory=list)  # SGLang's Triton fused MoE, one per MoE shape
    triton_job: dict[str, Any] = field(default_factory=dict)
    triton_chunks: list[Chunk] = field(default_factory=list)  # the items not yet covered, cut for the budget
    triton_cached: list[str] = field(default_factory=list)  # items whose record covers them already
    runners: int = 0  # slots for the chunks' subprocesses (within the budget, ``workers``)

    @property
    def task_budget(self) -> int:
        return self.workers * (WORKER_BASE_TASKS + COMPILER_TREE_TASKS)


@dataclass
class WarmResult:
    compiled: dict[str, float] = field(default_factory=dict)  # kernel -> seconds
    cached: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # planned SGLang JIT modules not built here, and why
    missing: str | None = None  # what to install so that the skipped modules can be built (exit 3)
    fatal: list[str] = field(default_factory=list)  # workers that could not start
    no_space: str | None = None  # the first "no space left on <mount>" a worker met; the rest was not started
    no_space_hint: str | None = None  # what to free, and roughly how much the unbuilt kernels need
    no_space_tmpdir: bool = False  # the full filesystem is TMPDIR's (the compilers' scratch), not the cache's
    unindexed: list[str] = field(default_factory=list)  # installed, not yet in the index (the next warm adds them)
    ready_seconds: list[float] = field(default_factory=list)  # when each worker was set up, from the start
    last_result_seconds: float = 0.0  # when the last kernel finished, from the start
    wall_seconds: float = 0.0
    cache_bytes: int = 0
    workers: int = 0
    cache_dir: str = ""
    backend: str = ""
    kernels: int = 0  # kernels this warm (or this rank's share) had to have in the cache
    jit_modules: int = 0  # SGLang JIT modules this warm had to have in the cache
    jit_ids: list[str] = field(default_factory=list)  # which of the items are SGLang JIT modules
    triton_ids: list[str] = field(default_factory=list)  # which of the items are Triton fused-MoE items
    triton_planned: list[str] = field(default_factory=list)  # the plan's Triton fused-MoE items (built or not)
    chunk_seconds: dict[str, float] = field(default_factory=dict)  # each Triton MoE chunk's subprocess, seconds

    @property
    def ok(self) -> bool:
        return not self.failed

    @property
    def return_code(self) -> int:
        if self.no_space or (self.fatal and self.failed):  # the machine lacks (a working) part of a backend
            return EXIT_ENVIRONMENT
        if not self.ok:
            return EXIT_COMPILE_FAILED
        # the plan holds modules this machine cannot build: verify would fail, so warm does not pass either
        return EXIT_ENVIRONMENT if self.missing else EXIT_OK

    def to_dict(self) -> dict[str, Any]:
        return {"cache_dir": self.cache_dir, "backend": self.backend, "kernels": self.kernels,
                "sglang_jit_modules": self.jit_modules, "compiled": len(self.compiled),
                "already_cached": len(self.cached), "failed": len(self.failed),
                "failures": self.failed, "skipped": self.skipped, "install": self.missing, "wall_seconds": round(self.wall_seconds, 2),
                "compile_seconds_sum": round(sum(self.compiled.values()), 2), "cache_bytes": self.cache_bytes,
                "workers": self.workers, "no_space": self.no_space, "workers_not_started": self.fatal,
                "installed_not_indexed": self.unindexed,
                "item_seconds": {k: round(v, 2) for k, v in sorted(self.compiled.items())},
                "sglang_jit_module_ids": list(self.jit_ids), "triton_moe_item_ids": list(self.triton_ids),
                "triton_moe_chunk_seconds": {k: round(v, 2) for k, v in sorted(self.chunk_seconds.items())},
                "timeline": {"workers_ready_first_s": round(min(self.ready_seconds), 2) if self.ready_seconds else None,
                             "workers_ready_last_s": round(max(self.ready_seconds), 2) if self.ready_seconds else None,
                             "last_kernel_done_s": round(self.last_result_seconds, 2)}}


def _visible_gpus() -> list[int]:
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return list(range(len([d for d in env.split(",") if d.strip()])))
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return list(range(len([line for line in out.stdout.splitlines() if line.startswith("GPU ")])))


def _estimated_cost(item: WorkItem) -> float:
    """A rough compile time in seconds, to start the longest kernels first: relative to the tile and kind
    (measured on an H200 host under a 16-way load: grouped kernels and large tiles take 5-10 s, layout kernels
    about 1 s), scaled so a grouped 128x128 kernel costs its 4 s alone (bench/results/README.md), the unit
    SGLang's JIT modules are estimated in too."""
    if item.family == TRANSPOSE_FAMILY:
        return 0.1 * SECONDS_PER_COST_UNIT
    p = item.params
    tile = (p.get("BM", 64) * p.get("BN", 64)) / (128 * 128)
    grouped = item.kernel_type != "GEMM_NT_F8F8BF16"
    return SECONDS_PER_COST_UNIT * (tile + (1.0 if grouped else 0.0) + (0.5 if p.get("BN", 0) % 32 else 0.0))


def _toolchain(plan: Plan, opts: WarmOptions):
    """(backend, DeepGEMM install, nvcc): what this machine compiles the plan with; refuses an nvcc below 12.3."""
    requested = _requested_backend(plan, opts.backend)
    install = find_deepgemm()
    backend = backend_for(requested, install, plan.profile.generation,
                          f"{plan.profile.deepgemm_distribution}=={plan.profile.deepgemm_version}")
    assert install is not None
    nvcc = find_nvcc(opts.nvcc)
    if nvcc.release < (12, 3):
        raise EnvironmentProblem(f"nvcc {nvcc.path} is release {nvcc.release}; DeepGEMM needs >= 12.3",
                                 hint="install CUDA 12.3 or newer, or pass --nvcc PATH")
    return backend, install, nvcc


def prepare_warm(plan: Plan, opts: WarmOptions) -> WarmSetup:
    """Everything warm decides before a worker starts: the toolchain, the fingerprint (and whether the cache's
    differs), this rank's share of the kernels, JIT modules and Triton MoE items, the worker count, space.
    Refused inside a strict `dgprecompile launch` (dgprecompile.host.lifeline: its supervisor is an ancestor)."""
    refuse_inside_strict_launch("dgprecompile warm")
    backend, install, nvcc = _toolchain(plan, opts)
    store = CacheStore(resolve_cache_dir(plan, opts.cache_dir))
    fingerprint = make_fingerprint(install, nvcc, plan.num_sms, plan.gpu)
    recorded = store.read_index().fingerprint
    stale = differences(recorded, fingerprint) if recorded else []

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    generation = plan.profile.deepgemm
    notes: list[str] = []
    needs_gpu, sweeps = get_backend(backend).needs_gpu, get_backend(backend).sweeps
    if not needs_gpu and not generation.keys_proven(install.version):
        notes.append(f"the entry names of {install.distribution} {install.version} are computed from its own sources "
                     "but were not yet compared with entries its runtime made on a GPU; `launch --strict` shows any "
                     "miss at once (or use --backend cxx on a GPU)")
    job_common, gpus = _backend_job(plan, opts, install, nvcc, needs_gpu, world)
    jobs = _worker_count(opts, backend, needs_gpu, notes)
    jit_items, jit_job, jit_skipped, jit_fp, jit_missing = _prepare_jit(plan, opts, nvcc, store.root)
    triton_items, triton_job = _prepare_triton(plan, opts, jit_skipped)
    if triton_items is None:  # what this machine lacks to run the Triton MoE warm (--sglang-jit auto)
        triton_items, jit_missing = [], jit_missing or triton_job["missing"]
    if world > 1:
        jit_items = jit_items[rank::world]
        triton_items = triton_items[rank::world]
    if jit_fp is not None:
        fingerprint.update(jit_fp)  # {the family's fingerprint section: its fields}
        stale = differences(recorded, fingerprint) if recorded else []
    swept: list[str] = []
    if sweeps:  # chunks come largest first already; their entries are not known in advance
        items, swept = _sweep_items(plan, store, fingerprint, jobs, rank, world)
        job_common["fingerprint_id"] = short_id(fingerprint)
        notes.append(f"sweep: DeepGEMM chooses its own kernels; {len(items)} chunks of the keys' m ranges still to "
                     "call (every m up to 16,384, then 64q+1, 64q+32, 64q+64; masked: every expected_m)")
    else:
        items = sorted(_kernel_items(plan, rank, world), key=_estimated_cost, reverse=True)
    cached, chunks, slots = _triton_chunks(store, plan, triton_items, triton_job, jobs, items + jit_items, stale)
    jobs = max(1, min(jobs, len(items) + len(jit_items) + len(chunks)))
    zygote_workers = _zygote_workers(backend, jobs, items, jit_items, jit_job)
    _require_readable(store, items + jit_items)
    try:
        store.require_writable("write to")
    except DGError:
        if sweeps or stale or not _all_in_place(store, plan, items + jit_items, triton_items, triton_job):
            raise
        notes.append(f"{store.root} is not writable here, and every kernel of the plan is already in it: "
                     "nothing to do")
        return WarmSetup(plan, backend, store, fingerprint, stale, [], 1, [None], job_common, rank, world, notes,
                         [], {}, jit_skipped, jit_missing, swept,
                         in_place=[it.kernel for it in items + jit_items + triton_items])
    if not sweeps:
        _check_space(store, plan, items, [] if stale else None)
    return WarmSetup(plan, backend, store, fingerprint, stale, items, jobs,
                     [gpus[i % len(gpus)] for i in range(zygote_workers)], job_common, rank, world, notes,
                     jit_items, jit_job, jit_skipped, jit_missing, swept, float(jit_job.get("build_seconds", 0.0)),
                     triton_items=triton_items, triton_job=triton_job, triton_chunks=chunks, triton_cached=cached,
                     runners=min(len(chunks), slots))


def _worker_count(opts: WarmOptions, backend: str, needs_gpu: bool, notes: list[str]) -> int:
    """--jobs (default: one per CPU core; 0 is refused, not "default"), and the note for --gpus on a GPU-free
    backend."""
    jobs = opts.jobs if opts.jobs is not None else (os.cpu_count() or 1)
    if opts.gpus and not needs_gpu:
        notes.append(f"--gpus is ignored: the {backend} backend compiles without a GPU")
    if jobs < 1:
        raise InputError("--jobs must be at least 1", hint="omit --jobs for one worker per CPU core")
    return jobs


def _requested_backend(plan: Plan, requested: str | None) -> str | None:
    """The backend asked for: keys-only plans take the generation's sweep backend (the library itself has to
    choose, for every m), and refuse any other."""
    if plan.heuristic:
        return requested
    sweep = plan.profile.deepgemm.sweep_backend
    if sweep is None:
        raise InputError(f"the plan for sglang {plan.profile.id} lists keys only and its DeepGEMM "
                         f"({plan.profile.generation}) has no sweep backend",
                         hint="plan with an --sglang version whose DeepGEMM is modelled")
    if requested not in (None, "auto", sweep):
        raise InputError(f"the plan for sglang {plan.profile.id} lists keys only, so --backend {requested} "
                         "has no kernels to build",
                         hint=f"use --backend {sweep} (or auto) on a GPU machine: DeepGEMM itself chooses for "
                              "every m of each key (or plan without --keys-only)")
    return sweep


def _backend_job(plan: Plan, opts: WarmOptions, install, nvcc, needs_gpu: bool,
                 world: int) -> tuple[dict[str, Any], list[int | None]]:
    """The DeepGEMM backend's part of the workers' job, and the GPUs its workers go on ([None]: no GPU)."""
    generation = plan.profile.deepgemm
    job: dict[str, Any] = {"nvcc": nvcc.path, "num_sms": plan.num_sms, "entry_files": list(generation.entry_files)}
    if not needs_gpu:  # computes the runtime's entry names and builds them itself
        job["key_context"] = key_context(generation, install, nvcc).__dict__
        job["key_scheme"] = generation.key_scheme
        return job, [None]
    visible = _visible_gpus()
    if world > 1:
        visible = [int(os.environ.get("LOCAL_RANK", 0))]
    gpus: list[int | None] = list(opts.gpus) if opts.gpus else list(visible)
    absent = sorted({g for g in opts.gpus or () if g < 0 or (visible and g >= len(visible))})
    if absent:
        raise InputError(f"--gpus {','.join(map(str, opts.gpus or ()))}: GPU {absent[0]} is not visible here "
                         f"({len(visible)} visible: 0..{len(visible) - 1})",
                         hint="pass --gpus indices of visible GPUs, or omit --gpus for all of them")
    if not gpus:
        raise EnvironmentProblem("the C++-JIT DeepGEMM compiles inside GEMM launches, so warm needs a GPU; "
                                 "none is visible", hint="run warm on a Hopper GPU machine (or pass --gpus)")
    return job, gpus


def _require_readable(store: CacheStore, items: list[WorkItem]) -> None:
    """Refuse up front, naming the file and its owner, when an entry the index records for these items is there
    but this user may not read it (a shared cache with one entry left 0600): no worker could check or use it."""
    index = store.read_index()
    for it in items:
        record = index.kernels.get(it.kernel)
        if record is None:
            continue
        path = store.entry_path(record.entry, record.area)
        if not path.is_dir():  # missing, or a file in its place: the worker builds (and repairs) it
            continue
        for name in (".", *record.files):
            if (path / name).exists() and not os.access(path / name, os.R_OK | (os.X_OK if name == "." else 0)):
                raise os_error(PermissionError(errno.EACCES, "Permission denied", str(path / name)), "read")


def _all_in_place(store: CacheStore, plan: Plan, items: list[WorkItem], triton_items: list[WorkItem] = (),
                  triton_job: dict[str, Any] | None = None) -> bool:
    """Whether the index records every item and each recorded entry is there with its recorded, loadable bytes
    (a Triton MoE item: its record covers it, cache/triton_moe.py): a warm with nothing to build, which needs no
    write access."""
    from dgprecompile.cache.triton_moe import COVERED, item_coverage

    index = store.read_index()
    return all(it.kernel in index.kernels and store.check_entry(index.kernels[it.kernel], plan.profile.sm_arch)
               is None for it in items) and all(
        item_coverage(store, index, it.kernel, (triton_job or {}).get("installed")).status == COVERED
        for it in triton_items)


def _kernel_items(plan: Plan, rank: int, world: int) -> list[WorkItem]:
    """One work item per planned kernel, built through its bucket's representative call; under torchrun each rank
    takes a disjoint share of the whole plan."""
    reps = plan.representatives()
    items = []
    for kernel_id, spec in plan.kernels.items():
        key, m = reps[kernel_id]
        items.append(WorkItem(kernel_id, spec.family, dict(spec.params), key.kernel_type.value, key.n, key.k,
                              key.num_groups, m))
    return items[rank::world] if world > 1 else items


def _sweep_items(plan: Plan, store: CacheStore, fingerprint: dict[str, Any], jobs: int, rank: int,
                 world: int) -> tuple[list[WorkItem], list[str]]:
    """Chunks of every key's m range not yet covered by a sweep record of this fingerprint (with its entries
    whole), cut for ``jobs`` workers; and a label per key or range already covered ("cached")."""
    from dgprecompile.cache.sweeps import coverage, key_label
    from dgprecompile.compile.sweep import plan_chunks

    keys = [(pk.key.ident, pk.key.m_min, pk.key.m_max) for pk in plan.keys]
    if world > 1:  # under torchrun: each rank sweeps a disjoint share of the keys
        keys = keys[rank::world]
    covered = coverage(store, store.read_index(), keys, short_id(fingerprint), plan.profile.sm_arch)
    todo = {c.key: c.missing for c in covered if c.missing}
    cached = [f"{key_label(c.key)}: m {lo}..{hi} swept" for c in covered for lo, hi in c.covered]
    chunks = plan_chunks(todo, jobs)
    return [WorkItem(**c.to_work_item()) for c in chunks], cached


def _check_space(store: CacheStore, plan: Plan, items: list[WorkItem], index_kernels=None) -> None:
    """Refuse before compiling anything when the cache's filesystem cannot hold what is left to build (the
    profile's bytes_per_entry per kernel not yet in the index), instead of failing half-way on a full disk."""
    index = store.read_index()
    known = index.kernels if index_kernels is None else {}
    pending = [it for it in items
               if it.kernel not in known or not store.entry_path(known[it.kernel].entry).is_dir()]
    need = len(pending) * plan.profile.bytes_per_entry
    if not need:
        return
    try:
        free = free_bytes(store.root)
    except OSError:
        return
    if free < need:
        mount = mount_point(store.root)
        raise EnvironmentProblem(
            f"not enough space on {mount} for the cache: {human_bytes(free)} free, the plan needs about "
            f"{human_bytes(need)} ({len(pending)} kernels x {human_bytes(plan.profile.bytes_per_entry)})",
            hint=f"free space on {mount}, or pass --cache-dir on a larger filesystem")


def _cuda_home(nvcc_path: str) -> str | None:
    """The CUDA toolkit tvm-ffi should use (it runs $CUDA_HOME/bin/nvcc and links $CUDA_HOME/lib64/libcudart)."""
    if os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH"):
        return None  # the user's choice, as the runtime will see it
    for candidate in (Path(nvcc_path).resolve().parent.parent, Path(nvcc_path).parent.parent, Path("/usr/local/cuda")):
        if (candidate / "include" / "cuda_runtime.h").is_file() and (candidate / "bin" / "nvcc").is_file():
            return str(candidate)
    return None


def _prepare_jit(plan: Plan, opts: WarmOptions, nvcc, cache_root: Path) -> tuple[
        list[WorkItem], dict[str, Any], dict[str, str], dict[str, Any] | None, str | None]:
    """Work items for the plan's SGLang JIT modules, their family's workers' job, what is skipped and why, the
    fingerprint section naming what their runtime names hold (all asked of the modules' JitFamily), and what to
    install when this machine lacks what builds them."""
    from dgprecompile.runtimes import get_family

    modules = list(plan.jit_modules.values())
    if not modules:
        return [], {}, {}, None, None
    if opts.sglang_jit == "off":
        return [], {}, {m.id: "--sglang-jit off" for m in modules}, None, None
    families = sorted({m.family for m in modules})
    if len(families) != 1:
        raise InputError(f"the plan mixes SGLang JIT families {', '.join(families)}",
                         hint="regenerate the manifest with `dgprecompile plan -o`")
    family = get_family(families[0])
    try:
        naming = naming_for(family, plan.sglang_version or "")
        ninja = shutil.which("ninja", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
        if ninja is None:
            raise EnvironmentProblem(f"ninja is not installed: {family.label} builds its modules with it",
                                     hint="pip install ninja")
    except EnvironmentProblem as exc:
        if opts.sglang_jit == "on":
            raise
        return [], {}, {m.id: exc.message for m in modules}, None, exc.hint or exc.message
    items = [WorkItem(m.id, family.backend, family.build_params(naming, m), "SGLANG_JIT", 0, 0, 0, 0)
             for m in modules]
    job = {**family.worker_job(naming, modules), "cuda_home": _cuda_home(nvcc.path),
           "ninja_dir": os.path.dirname(ninja), "jit_backend": family.backend, "area": family.area,
           "not_recorded": list(family.not_recorded),
           "launch_env": [list(e) for e in family.launch_env(str(cache_root))],
           "build_seconds": naming.spec.build_seconds}
    return items, job, {}, {family.fingerprint_section: naming.fingerprint()}, None


def _prepare_triton(plan: Plan, opts: WarmOptions, skipped: dict[str, str]) -> tuple[list[WorkItem] | None,
                                                                                    dict[str, Any]]:
    """Work items for the plan's Triton fused-MoE shapes and their workers' job (families.TRITON_MOE). Run with
    the installed sglang and Triton, so they follow --sglang-jit as SGLang's own JIT modules do: off leaves them
    out, on refuses at once when this machine cannot run them, auto skips them (``skipped``: why) and returns
    None items with ``{"missing": what to install}``."""
    from importlib import metadata

    from dgprecompile.runtimes.triton_moe import TRITON_MOE

    moe = list(plan.triton_moe.values())
    if not moe:
        return [], {}
    if opts.sglang_jit == "off":
        skipped.update({t.id: "--sglang-jit off" for t in moe})
        return [], {}
    try:
        missing = TRITON_MOE.missing()
        if missing is not None:
            raise EnvironmentProblem(f"the {TRITON_MOE.label} warm needs {', '.join(TRITON_MOE.imports)} importable "
                                     "here", hint=missing)
        try:
            installed_sglang = metadata.version("sglang")
        except metadata.PackageNotFoundError:
            installed_sglang = None
        if plan.sglang_version and installed_sglang != plan.sglang_version:
            raise EnvironmentProblem(f"the installed sglang is {installed_sglang}, not the plan's {plan.sglang_version}: "
                                     f"its {TRITON_MOE.label} configs and kernels may differ",
                                     hint=f"install sglang {plan.sglang_version} (the job's own), or plan for "
                                          f"--sglang {installed_sglang}")
    except EnvironmentProblem as exc:
        if opts.sglang_jit == "on":
            raise
        skipped.update({t.id: exc.message for t in moe})
        return None, {"missing": exc.hint or exc.message}
    items = [WorkItem(t.id, "triton_moe", {k: v for k, v in t.to_dict().items() if k != "id"}, "TRITON_MOE", t.hidden,
                      t.intermediate, t.experts, t.m_count) for t in moe]  # m: the calls it makes (its cost)
    # the record's Triton: read here from metadata, the interpreter the workers' subprocesses run
    return items, {"installed": TRITON_MOE.installed(), "python": sys.executable, "backend_name": TRITON_MOE.backend}


def _triton_chunks(store: CacheStore, plan: Plan, items: list[WorkItem], job: dict[str, Any], jobs: int,
                   others: list[WorkItem], stale) -> tuple[list[str], list[Chunk], int]:
    """(items already covered by their record, the chunks of the others, the slots the chunks may take): one
    budget for the zygote's workers and the chunks; while a zygote imports (``others``: its workers' items), the
    chunks take all of it but one slot. Each item is cut for those slots (compile/triton_chunks.py). A stale
    fingerprint covers nothing (the warm clears the records first)."""
    from dgprecompile.cache.triton_moe import COVERED, item_coverage
    from dgprecompile.compile.triton_chunks import chunks_for
    from dgprecompile.runtimes.items import TritonMoeItem
    from dgprecompile.runtimes.triton_moe import TRITON_MOE

    budget = max(1, jobs - 1) if others else jobs
    index = store.read_index() if items else None
    cached, chunks = [], []
    rel = TRITON_MOE.release(plan.sglang_version)
    for it in items:
        if not stale and item_coverage(store, index, it.kernel, job.get("installed")).status == COVERED:
            cached.append(it.kernel)
            continue
        moe = TritonMoeItem.from_dict({**it.params, "id": it.kernel})
        chunks += chunks_for(moe, budget, TRITON_MOE.tuned_up_to(rel, moe, moe.device_name),
                             TRITON_MOE_SECONDS_PER_KERNEL)
    return cached, chunks, budget


def _record_plan(setup: WarmSetup) -> None:
    plan = setup.plan

    def mutate(index):
        if setup.stale:
            index.kernels.clear()  # those records describe entries filed under other keys
            index.extra.clear()
            index.sweeps.clear()
            index.triton_moe.clear()  # their entries were extra entries
        index.fingerprint = setup.fingerprint
        entry = plan.summary()
        if entry not in index.plans:
            index.plans.append(entry)

    setup.store.update_index(mutate)


def run_warm(setup: WarmSetup, on_event: Callable[[dict[str, Any]], None] = lambda e: None) -> WarmResult:
    """Compile ``setup``'s kernels and SGLang JIT modules in one budget of ``setup.workers`` worker processes,
    the costliest first (see :func:`work`). An interrupt (Ctrl-C; SIGTERM and SIGHUP, which the CLI turns into
    one) stops the workers and their compilers and removes the scratch directory and staging roots."""
    store = setup.store
    if setup.in_place:  # nothing to build in a cache we may not write: touch nothing
        return WarmResult(workers=0, cache_dir=str(store.root), backend=setup.backend, kernels=len(setup.in_place),
                          skipped=dict(setup.jit_skipped), cached=list(setup.in_place),
                          cache_bytes=store.size_bytes())
    store.ensure()
    store.clean_stale_staging()
    _record_plan(setup)
    result = WarmResult(workers=setup.workers, cache_dir=str(store.root), backend=setup.backend,
                        kernels=len(setup.items), jit_modules=len(setup.jit_items),
                        jit_ids=[it.kernel for it in setup.jit_items], skipped=dict(setup.jit_skipped),
                        triton_ids=[it.kernel for it in setup.triton_items], triton_planned=list(setup.plan.triton_moe),
                        missing=setup.jit_missing, cached=list(setup.swept) + setup.triton_cached)
    start = time.perf_counter()
    try:
        if setup.items or setup.jit_items or setup.triton_chunks:
            _pool(setup, on_event, result, start)
    finally:
        store.clean_stale_staging()
    result.wall_seconds = time.perf_counter() - start
    if result.no_space:
        need = len(result.failed) * setup.plan.profile.bytes_per_entry
        elsewhere = ("set TMPDIR to a directory on a larger filesystem (nvcc writes its intermediates there)"
                     if result.no_space_tmpdir else "pass --cache-dir on a larger filesystem")
        result.no_space_hint = (f"free space there (about {human_bytes(need)} more for the {len(result.failed)} "
                                f"kernels not built), or {elsewhere}; then warm again")
    result.cache_bytes = store.size_bytes()
    return result


def work(setup: WarmSetup) -> list[tuple[Job, WorkItem | Chunk]]:
    """Every item with the worker backend that builds it and its estimated seconds: DeepGEMM's kernels from
    their tiles (:func:`_estimated_cost`), sweep chunks in the order they come (largest first), SGLang's JIT
    modules from the measured build time of one (the JIT family's ``build_seconds``); Triton MoE chunks (no
    WorkItem: the parent runs them) with their estimates."""
    out = []
    for pos, item in enumerate(setup.items):
        cost = float(len(setup.items) - pos) if get_backend(setup.backend).sweeps else _estimated_cost(item)
        out.append((Job(item.kernel, setup.backend, cost), item))
    jit_backend = setup.jit_job.get("jit_backend", SGLANG_JIT_BACKEND)  # the modules' JitFamily's backend
    out += [(Job(item.kernel, jit_backend, setup.jit_seconds), item) for item in setup.jit_items]
    out += [(Job(c.id, setup.triton_job["backend_name"], c.cost), c) for c in setup.triton_chunks]
    return out


def _zygote_workers(backend: str, jobs: int, items: list[WorkItem], jit_items: list[WorkItem],
                    jit_job: dict[str, Any]) -> int:
    """The zygote's workers: one per slot of the budget that its items can use, and, when the DeepGEMM backend
    needs no preload and SGLang's JIT builders do, as many as the kernels can use again, forked before the imports
    and serving the DeepGEMM backend only (compile/worker.py ``zygote``; ``early_workers`` in the job). The
    scheduler's budget keeps all of them within --jobs."""
    workers = min(jobs, len(items) + len(jit_items))
    jit_backend = jit_job.get("jit_backend") if jit_items else None
    if not items or jit_backend is None or get_backend(backend).preload:
        return workers
    return workers + (min(workers, len(items)) if get_backend(jit_backend).preload else 0)


def worker_job(setup: WarmSetup) -> dict[str, Any]:
    """What every worker is told (job.json): the cache, and each backend's own settings."""
    common = {"cache_dir": str(setup.store.root), "arch": setup.plan.profile.sm_arch,
              "bytes_per_entry": setup.plan.profile.bytes_per_entry}
    backends = {}
    if setup.items:
        backends[setup.backend] = {**common, "backend": setup.backend, **setup.job_common}
    if setup.jit_items:
        jit_backend = setup.jit_job.get("jit_backend", SGLANG_JIT_BACKEND)
        backends[jit_backend] = {**common, "backend": jit_backend, **setup.jit_job}
    early = len(setup.gpus) - min(setup.workers, len(setup.items) + len(setup.jit_items))
    return {"cache_dir": str(setup.store.root), "backends": backends, "early_workers": max(0, early)}


def _pool(setup: WarmSetup, on_event: Callable[[dict[str, Any]], None], result: WarmResult, start: float) -> None:
    """One zygote and len(gpus) workers, each serving every backend of the workers' job, and ``setup.runners``
    slots for Triton MoE chunks (started at once, not after the zygote), all within ``setup.workers`` items at a
    time, driven by the scheduler."""
    tmp = scratch.run_dir("dgprecompile-warm-")  # locked for this run; its compilers' TMPDIR is inside it
    todo, workers = work(setup), len(setup.gpus)
    procs = _Processes(tmp, workers)
    sched = Scheduler.start([j for j, _ in todo], workers + setup.runners,
                            budget=setup.workers if setup.runners or workers > setup.workers else None)
    run = _Run(sched, procs, {j.id: item for j, item in todo}, result, on_event, start, setup)
    try:
        if workers:
            procs.start(worker_job(setup), setup.gpus)
        for slot in range(workers, workers + setup.runners):  # the chunks need no zygote: they start now
            run.apply(sched.ready(slot, [setup.triton_job["backend_name"]]))
        run.drive()
        failure = procs.zygote_done() if workers else None
        if failure:
            result.fatal.append(failure)
        run.apply(sched.drained())
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM/SIGHUP (cli.main raises it): stop everything, then clean up
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_IGN)
        procs.stop()
        raise
    finally:
        procs.close()
        scratch.release(tmp)


class _Processes:
    """The I/O side of a pool: the zygote, a pipe pair per worker, one selector over their event streams."""

    def __init__(self, tmp: Path, n: int):
        self.tmp = tmp
        self.logs = {i: tmp / f"worker-{i}.log" for i in range(n)}
        self.to_worker: dict[int, Any] = {}
        self.pids: dict[int, int] = {}
        self.sel = selectors.DefaultSelector()
        self.zygote: subprocess.Popen | None = None
        self.buffers: dict[object, str] = {}
        self.open_streams = 0
        self.lifeline: int | None = None  # write end of the workers' lifeline pipe, held until the pool ends
        self.chunks: dict[int, subprocess.Popen] = {}  # slot -> a Triton MoE chunk's subprocess
        self.chunk_out: dict[int, str] = {}

    def start(self, job: dict[str, Any], gpus: list[int | None]) -> None:
        job_path = self.tmp / "job.json"
        job_path.write_text(json.dumps(job))
        spec, child_fds = [], []
        for i, gpu in enumerate(gpus):
            in_r, in_w = os.pipe()
            out_r, out_w = os.pipe()
            child_fds += [in_r, out_w]
            spec.append({"in_fd": in_r, "out_fd": out_w, "log": str(self.logs[i]),
                         "gpu": None if gpu is None else _physical_gpu(gpu)})
            self.to_worker[i] = os.fdopen(in_w, "w")
            self.sel.register(os.fdopen(out_r, "rb", buffering=0), selectors.EVENT_READ, i)
        life_r, self.lifeline = os.pipe()  # never written: its end of file tells the workers warm is gone
        child_fds.append(life_r)
        env = {**os.environ, **WORKER_ENV, **scratch.compiler_env(self.tmp),
               "DGPRECOMPILE_WORKERS": json.dumps(spec), "DGPRECOMPILE_WARM_LIFELINE": str(life_r)}
        self.zygote = subprocess.Popen(
            [sys.executable, "-m", "dgprecompile.compile.worker", str(job_path), "--zygote"],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=open(self.tmp / "zygote.log", "wb"), env=env,
            pass_fds=child_fds)
        for fd in child_fds:
            os.close(fd)
        assert self.zygote.stdout is not None
        self.sel.register(self.zygote.stdout, selectors.EVENT_READ, "zygote")
        self.open_streams = len(gpus) + 1

    def start_chunk(self, slot: int, argv: list[str]) -> None:
        """A Triton MoE chunk's subprocess in ``slot``; its stdout (the report) is read whole, ending in
        ``(("chunk", slot), None)``."""
        from dgprecompile.compile.triton_chunks import start_chunk

        env = {**os.environ, **WORKER_ENV, **scratch.compiler_env(self.tmp)}
        proc = start_chunk(argv, self.tmp / f"chunk-{slot}.log", env)
        self.chunks[slot], self.chunk_out[slot] = proc, ""
        assert proc.stdout is not None
        self.sel.register(proc.stdout, selectors.EVENT_READ, ("chunk", slot))
        self.open_streams += 1

    def chunk_ended(self, slot: int) -> tuple[int, str, Path]:
        """The ended chunk's exit code, stdout and log."""
        proc = self.chunks.pop(slot)
        return proc.wait(), self.chunk_out.pop(slot, ""), self.tmp / f"chunk-{slot}.log"

    def events(self, timeout: float):
        """(who, event) for every whole line that arrived within ``timeout``; (who, None) when a stream ended;
        nothing when no stream spoke. ``who`` is a worker's index, "zygote", or ("chunk", slot) (its stdout is
        kept, not parsed)."""
        for sk, _ in self.sel.select(timeout=timeout):
            who = sk.data
            chunk = os.read(sk.fileobj.fileno(), 65536).decode(errors="replace")
            if not chunk:
                self.sel.unregister(sk.fileobj)
                sk.fileobj.close()
                self.open_streams -= 1
                yield who, None
                continue
            if isinstance(who, tuple):
                self.chunk_out[who[1]] += chunk
                continue
            self.buffers[who] = self.buffers.get(who, "") + chunk
            *lines, self.buffers[who] = self.buffers[who].split("\n")
            for line in lines:
                if line.strip():
                    yield who, json.loads(line)

    def send(self, i: int, message: dict[str, Any]) -> bool:
        """Write one line to worker i; False when its pipe is broken (it is gone)."""
        try:
            self.to_worker[i].write(json.dumps(message) + "\n")
            self.to_worker[i].flush()
            return True
        except BrokenPipeError:
            return False

    def close_input(self, i: int) -> None:
        pipe = self.to_worker.pop(i, None)
        if pipe is not None:
            try:
                pipe.close()
            except BrokenPipeError:
                pass

    def zygote_done(self) -> str | None:
        """Wait for the zygote; one line of what failed when it could start no worker (the warm goes on and
        names what was not built), else None."""
        assert self.zygote is not None
        self.zygote.wait()
        if self.zygote.returncode and not self.pids:
            return startup_failure(self.tmp / "zygote.log")
        return None

    def stop(self) -> None:
        self._stop_chunks()
        _stop(self.zygote, self.pids)

    def _stop_chunks(self) -> None:
        from dgprecompile.compile.triton_chunks import stop_chunk

        for proc in self.chunks.values():
            stop_chunk(proc)

    def close(self) -> None:
        self.sel.close()
        for pipe in self.to_worker.values():
            try:
                pipe.close()
            except OSError:
                pass
        self._stop_chunks()
        _stop(self.zygote, self.pids)
        if self.lifeline is not None:
            os.close(self.lifeline)
            self.lifeline = None


@dataclass
class _Run:
    """The loop between the scheduler and the processes: events in, actions out, the result kept."""

    sched: Scheduler
    procs: _Processes
    items: dict[str, WorkItem | Chunk]
    result: WarmResult
    on_event: Callable[[dict[str, Any]], None]
    start: float
    setup: WarmSetup
    chunked: dict[str, ChunkedItem] = field(default_factory=dict)  # Triton MoE item -> its chunks so far
    chunk_started: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for chunk in self.setup.triton_chunks:
            self.chunked.setdefault(chunk.item, ChunkedItem(chunk.item, [])).chunks.append(chunk.id)

    def drive(self) -> None:
        while self.procs.open_streams:
            spoke = False
            for who, event in self.procs.events(TICK_SECONDS):
                spoke = True
                self.apply(self._zygote(event) if who == "zygote" else self._chunk_ended(who[1])
                           if isinstance(who, tuple) else self._worker(who, event))
            if not spoke:
                self.on_event({"event": "tick"})  # lets a plain (non-TTY) progress report print on time, no thread

    def _zygote(self, event: dict[str, Any] | None) -> list[Action]:
        if event is None:
            return []
        i = event["worker"]
        if event.get("event") == "spawned":
            self.procs.pids[i] = event["pid"]
        elif event.get("event") == "exit":
            return self.sched.exited(i, event["code"])
        return []

    def _worker(self, w: int, event: dict[str, Any] | None) -> list[Action]:
        if event is None:
            return self.sched.stream_closed(w)
        _handle(event, self.result, self.on_event)
        kind = event.get("event")
        now = time.perf_counter() - self.start
        if kind == "ready":
            self.result.ready_seconds.append(now)
            return self.sched.ready(w, event["kinds"])
        if kind in ("done", "failed"):
            self.result.last_result_seconds = now
            return self.sched.finished(w, event["kernel"], bool(event.get("no_space")))
        if kind == "fatal":  # a backend could not be set up in that worker; the other workers go on
            return self.sched.fatal(w, event.get("kind"))
        return []

    def _start_chunk(self, slot: int, chunk: Chunk) -> None:
        from dgprecompile.compile.triton_chunks import chunk_argv
        from dgprecompile.runtimes.items import TritonMoeItem

        item = self.chunked[chunk.item]
        if not item.reports and not item.failures and not any(c in self.chunk_started for c in item.chunks):
            self.on_event({"event": "start", "kernel": chunk.item})
        work = next(it for it in self.setup.triton_items if it.kernel == chunk.item)
        moe = TritonMoeItem.from_dict({**work.params, "id": work.kernel})
        self.chunk_started[chunk.id] = time.perf_counter()
        self.procs.start_chunk(slot, chunk_argv(moe, chunk, str(self.setup.store.root),
                                                self.setup.triton_job["python"]))

    def _chunk_ended(self, slot: int) -> list[Action]:
        """A chunk's subprocess ended: its report (or why it failed) goes to its item, which is recorded (or
        fails) once every chunk of it is in."""
        from dgprecompile.compile.triton_chunks import parse_report

        job = self.sched.holding(slot)
        assert job is not None
        code, out, log = self.procs.chunk_ended(slot)
        seconds = time.perf_counter() - self.chunk_started[job.id]
        self.result.chunk_seconds[job.id] = seconds
        try:
            self._chunk_in(job.id, parse_report(job.id, code, out, log), seconds)
        except CompileFailed as exc:
            self._chunk_in(job.id, None, seconds, exc.message)
        self.result.last_result_seconds = time.perf_counter() - self.start
        return self.sched.finished(slot, job.id)

    def _chunk_in(self, chunk_id: str, report: dict[str, Any] | None, seconds: float = 0.0,
                  failure: str | None = None) -> None:
        item = self.chunked[self.items[chunk_id].item]
        if report is None:
            item.failures[chunk_id] = failure or "failed"
        else:
            item.reports[chunk_id], item.seconds[chunk_id] = report, seconds
        if item.done:
            _handle(item.finish(self.setup.store, self.setup.triton_job["installed"]), self.result, self.on_event)

    def apply(self, actions: list[Action]) -> None:
        for action in actions:
            target = self.items[action.job.id] if isinstance(action, Send) else None
            if isinstance(target, Chunk):
                self._start_chunk(action.worker, target)
            elif isinstance(action, Send):
                message = {"backend": action.job.kind, "item": self.items[action.job.id].to_dict()}
                if not self.procs.send(action.worker, message):  # that worker is gone; its exit is reported
                    self.apply(self.sched.send_failed(action.worker))
            elif isinstance(action, Close):
                self.procs.close_input(action.worker)
            elif isinstance(action, Lost):
                self._fail(action.job.id, _worker_death(action.code, self.procs.logs[action.worker]))
            elif action.why == NO_SPACE:
                self._fail(action.job.id, "not started: " + (self.result.no_space or "no space left"),
                           "not started (no space)")
            else:
                self._fail(action.job.id, ("not started: " + self.result.fatal[-1]) if self.result.fatal
                           else "no worker left to compile it (see the errors above)")

    def _fail(self, kernel: str, why: str, shown: str | None = None) -> None:
        if isinstance(self.items.get(kernel), Chunk):  # a chunk not started: its item fails with it
            self._chunk_in(kernel, None, failure=why)
            return
        self.result.failed[kernel] = why
        self.on_event({"event": "failed", "kernel": kernel, "error": shown or why})


def _physical_gpu(index: int) -> str:
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env:
        devices = [d.strip() for d in env.split(",") if d.strip()]
        if index < len(devices):
            return devices[index]
    return str(index)


def _handle(event: dict[str, Any], result: WarmResult, on_event: Callable[[dict[str, Any]], None]) -> None:
    kind = event.get("event")
    kernel = event.get("kernel")
    if kind == "done":
        if event["status"] == "compiled":
            result.compiled[kernel] = float(event.get("seconds") or 0.0)
        else:
            result.cached.append(kernel)
        if event.get("unindexed"):  # installed whole, but the disk filled before the index recorded it
            result.unindexed.append(kernel)
            if result.no_space is None:
                result.no_space = event.get("error")
                result.no_space_tmpdir = bool(event.get("no_space_tmpdir"))
    elif kind == "failed":
        result.failed[kernel] = event.get("error", "failed")
        if event.get("no_space") and result.no_space is None:
            result.no_space = event.get("error")
            result.no_space_tmpdir = bool(event.get("no_space_tmpdir"))
    elif kind == "fatal":
        result.fatal.append(event.get("error", "worker failed to start"))
    on_event(event)


def _worker_death(code: int, log: Path) -> str:
    how = f"killed by signal {-code}" if code < 0 else f"exited with code {code}"
    try:
        tail = log.read_text(errors="replace").strip().splitlines()[-5:]
    except OSError:
        tail = []
    return f"worker {how} while compiling it" + ("\n" + "\n".join(tail) if tail else "")


def _stop(zygote: subprocess.Popen | None, worker_pids: dict[int, int]) -> None:
    """SIGTERM the workers and the zygote (it forwards too), then make sure they are gone."""
    for pid in worker_pids.values():
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    if zygote is None:
        return
    if zygote.poll() is None:
        zygote.send_signal(signal.SIGTERM)
    try:
        zygote.wait(timeout=10)
    except subprocess.TimeoutExpired:
        zygote.kill()
        zygote.wait()
    for pid in worker_pids.values():  # orphans are re-parented; make sure none keeps compiling
        try:  # the worker's own process group: its compilers too, should the worker be gone already
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
