"""warm's setup: everything decided before a worker starts, and the jobs the workers are handed.

The toolchain and the fingerprint (and whether the cache's differs), this rank's share of the plan's items (one list,
``Plan.by_runtime``: DeepGEMM's kernels here, every other runtime's items as one :class:`RuntimePart` each, prepared
by the function its kind names in ``PREPARE``; Triton MoE items cut into chunks, compile/triton_chunks.py), the
worker count within --jobs, a read-only or full cache refused up front; then each item as a scheduler job with its
estimated cost (:func:`work`) and what every worker is told (:func:`worker_job`). compile/warm.py runs it.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dgprecompile.cache.relocate import relocate
from dgprecompile.cache.store import CacheStore, resolve_cache_dir
from dgprecompile.compile.backends import ModuleWork, WorkItem, backend_for
from dgprecompile.compile.schedule import Job
from dgprecompile.compile.triton_chunks import Chunk
from dgprecompile.errors import DGError, EnvironmentProblem, InputError
from dgprecompile.fsutil import free_bytes, human_bytes, mount_point, os_error
from dgprecompile.host.lifeline import refuse_inside_strict_launch
from dgprecompile.host.toolchain import find_deepgemm, find_nvcc
from dgprecompile.keys.fingerprint import differences, make_fingerprint, short_id
from dgprecompile.keys.schemes import key_context, naming_for
from dgprecompile.planning.plan import Plan
from dgprecompile.runtimes import get_backend
from dgprecompile.runtimes.items import TRANSPOSE_FAMILY, PlanItem

# Tasks (threads + processes) one worker holds at its peak: its own main thread, plus the compiler's process
# tree. nvcc runs its stages (cudafe++, cicc, ptxas, the host compiler) one at a time under one driver; one
# nvcc 13.0 compile of a DeepGEMM kernel peaked at 4 tasks (docs/root-cause.md, "measured"). Workers pin
# OpenBLAS/OpenMP to one thread each.
SECONDS_PER_COST_UNIT = 2.0  # _estimated_cost's relative units as seconds of one compile alone
WORKER_BASE_TASKS = 1
# Not a measurement: a queue weight per estimated distinct Triton MoE kernel in a chunk (compile/triton_chunks.py
# weight_of) that orders the chunks costliest first; they run in slots of their own (no zygote), so it orders
# them only among themselves
TRITON_MOE_SECONDS_PER_KERNEL = 2.0
COMPILER_TREE_TASKS = 4


@dataclass
class WarmOptions:
    cache_dir: str | None = None
    backend: str | None = None
    jobs: int | None = None
    gpus: list[int] | None = None
    nvcc: str | None = None
    sglang_jit: str = "auto"  # SGLang's own JIT modules: auto (when the plan's sglang is installed) | on | off
    keep_going: bool = False  # build what can be built where a family's build lacks a piece (compile/build_needs.py)


@dataclass
class RuntimePart:
    """One runtime's share of a warm beside DeepGEMM's kernels: its own planned items on this rank, the work they
    become (``ModuleWork`` for the zygote's workers, or chunks the parent runs: ``in_workers`` False), what that
    work's backend is told (``job``), and what of the plan it leaves out and why."""

    runtime: Any  # the runtimes.Runtime whose items these are
    items: list[PlanItem]  # its own typed items on this rank (runtimes/items.py)
    backend: str = ""  # the scheduler kind of its work (a worker backend, or the chunks' kind)
    # False: its work runs outside the workers, as chunks the parent cuts (CUT) and runs in the pool, or, for a kind
    # CUT does not hold (torch.compile graphs, FlashInfer modules: compile/recorded_items.py), built by the parent beside it
    in_workers: bool = True
    work: list[Any] = field(default_factory=list)  # in the order they are handed out
    job: dict[str, Any] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # item id -> why it is not built here
    missing: str | None = None  # this machine lacks what builds them: what to install (None: turned off, or none)
    fingerprint: dict[str, Any] = field(default_factory=dict)  # {its fingerprint section: what its names hold}
    cached: list[str] = field(default_factory=list)  # items a record covers already

    @property
    def built(self) -> list[PlanItem]:
        """The items this warm builds (those not skipped)."""
        return [it for it in self.items if it.id not in self.skipped]


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
    parts: list[RuntimePart] = field(default_factory=list)  # every other runtime's share, in the plan's order
    swept: list[str] = field(default_factory=list)  # sweep backend: key ranges already covered (cached)
    in_place: list[str] = field(default_factory=list)  # a read-only cache holding every kernel: nothing to do
    runners: int = 0  # slots for the chunks' subprocesses (within the budget, ``workers``)
    budget: int = 0  # the --jobs budget before it was cut to the pool's work (the torch.compile items' parts use it)

    @property
    def task_budget(self) -> int:
        return self.workers * (WORKER_BASE_TASKS + COMPILER_TREE_TASKS)

    def part(self, kind: str) -> RuntimePart | None:
        """The share of the runtime of ``kind`` (runtimes/base.py Runtime.kind), or None."""
        return next((p for p in self.parts if p.runtime.kind == kind), None)

    @property
    def skipped(self) -> dict[str, str]:
        return {k: v for p in self.parts for k, v in p.skipped.items()}

    @property
    def missing(self) -> str | None:
        """What to install for the items skipped because this machine lacks what builds them (None: none)."""
        return next((p.missing for p in self.parts if p.missing), None)

    @property
    def worker_work(self) -> list[ModuleWork]:
        """The other runtimes' work the zygote's workers build (beside DeepGEMM's ``items``)."""
        return [w for p in self.parts if p.in_workers for w in p.work]

    @property
    def chunks(self) -> list[Chunk]:
        """The work the parent runs in subprocesses of their own (Triton MoE chunks)."""
        return [w for p in self.parts if not p.in_workers for w in p.work]


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
    relocated = relocate(store)  # before coverage is read: filed Triton entries at another root read as changed
    fingerprint = make_fingerprint(install, nvcc, plan.num_sms, plan.gpu)
    recorded = store.read_index().fingerprint
    stale = differences(recorded, fingerprint) if recorded else []

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    generation = plan.profile.deepgemm
    notes: list[str] = [f"{len(relocated)} filed Triton entries pointed at {store.root} (filled at another root: "
                        "an unpacked artifact or a copied cache)"] if relocated else []
    needs_gpu, sweeps = get_backend(backend).needs_gpu, get_backend(backend).sweeps
    if not needs_gpu and not generation.keys_proven(install.version):
        notes.append(f"the entry names of {install.distribution} {install.version} are computed from its own sources "
                     "but were not yet compared with entries its runtime made on a GPU; `launch --strict` shows any "
                     "miss at once (or use --backend cxx on a GPU)")
    job_common, gpus = _backend_job(plan, opts, install, nvcc, needs_gpu, world)
    jobs = _worker_count(opts, backend, needs_gpu, notes)
    parts = [PREPARE[runtime.kind](plan, opts, runtime, items, nvcc, store.root)
             for runtime, items in plan.by_runtime()[1:]]  # every runtime beside the DeepGEMM generation's kernels
    for part in parts:
        part.items, part.work = (part.items[rank::world], part.work[rank::world]) if world > 1 else (part.items,
                                                                                                        part.work)
        fingerprint.update(part.fingerprint)  # {the runtime's fingerprint section: its fields}
    if any(p.fingerprint for p in parts):
        stale = differences(recorded, fingerprint) if recorded else []
    _check_needs(parts, nvcc, opts, notes, bool(stale))
    swept: list[str] = []
    if sweeps:  # chunks come largest first already; their entries are not known in advance
        items, swept = _sweep_items(plan, store, fingerprint, jobs, rank, world)
        job_common["fingerprint_id"] = short_id(fingerprint)
        notes.append(f"sweep: DeepGEMM chooses its own kernels; {len(items)} chunks of the keys' m ranges still to "
                     "call (every m up to 16,384, then 64q+1, 64q+32, 64q+64; masked: every expected_m)")
    else:
        items = sorted(_kernel_items(plan, rank, world), key=_estimated_cost, reverse=True)
    setup = WarmSetup(plan, backend, store, fingerprint, stale, items, jobs, [None], job_common, rank, world, notes,
                      parts, swept)
    return _finish_setup(setup, gpus, sweeps)


def _check_needs(parts: list[RuntimePart], nvcc, opts: WarmOptions, notes: list[str], stale: bool) -> None:
    """Refuse at once (exit 3) where a planned family's build lacks a piece this machine can be checked for in a
    moment (compile/build_needs.py: its programs, FlashInfer's toolkit headers), naming every one; --keep-going
    notes them and builds what it can (those items fail with their compiler's error). Items their records already
    cover (an unpacked artifact's FlashInfer modules) are not built, so their needs are not asked for, unless the
    fingerprint is stale."""
    from dgprecompile.compile.build_needs import check, refusal

    missing = []
    for part in parts:
        env = {**os.environ, **dict(part.job.get("env", {}))}
        todo = [it for it in part.built if stale or it.id not in part.cached]
        missing += check([(part.runtime.kind, todo)], _cuda_home(nvcc.path), env)
    if not missing:
        return
    message, hint = refusal(missing)
    if not opts.keep_going:
        raise EnvironmentProblem(message, hint=hint)
    notes.append(f"--keep-going: {message}")


def _finish_setup(setup: WarmSetup, gpus: list[int | None], sweeps: bool) -> WarmSetup:
    """The chunks of the parts that run outside the workers (CUT), the worker count, and a cache refused up front
    where it is not writable (unless it holds every item already) or cannot hold what is left to build."""
    store, plan, items, jobs = setup.store, setup.plan, setup.items, setup.workers
    slots = jobs
    for part in setup.parts:
        if not part.in_workers and part.runtime.kind in CUT:
            slots = CUT[part.runtime.kind](setup, part, jobs, items + setup.worker_work)
    chunks, work = setup.chunks, items + setup.worker_work
    setup.budget = jobs
    setup.workers = jobs = max(1, min(jobs, len(work) + len(chunks)))
    _require_readable(store, work)
    try:
        store.require_writable("write to")
    except DGError:
        if sweeps or setup.stale or not _all_in_place(store, plan, work, setup.parts):
            raise
        setup.notes.append(f"{store.root} is not writable here, and every kernel of the plan is already in it: "
                           "nothing to do")
        setup.in_place = [w.kernel for w in work] + [it.id for p in setup.parts if not p.in_workers
                                                      for it in p.built]
        setup.items, setup.workers = [], 1
        for part in setup.parts:
            part.work = []
        return setup
    if not sweeps:
        _check_space(store, plan, items, [] if setup.stale else None)
    zygote_workers = _zygote_workers(setup.backend, jobs, items, setup.parts)
    setup.gpus = [gpus[i % len(gpus)] for i in range(zygote_workers)]
    setup.runners = min(len(chunks), slots)
    return setup


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


def _all_in_place(store: CacheStore, plan: Plan, work: list[WorkItem | ModuleWork], parts: list[RuntimePart]) -> bool:
    """Whether the index records every item and each recorded entry is there with its recorded, loadable bytes
    (the items of a part run outside the workers: each covered by its record, CUT), a warm with nothing to build,
    which needs no write access."""
    index = store.read_index()
    return all(it.kernel in index.kernels and store.check_entry(index.kernels[it.kernel], plan.profile.sm_arch)
               is None for it in work) and all(set(p.cached) >= {it.id for it in p.built}
                                               for p in parts if not p.in_workers)


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


def _prepare_jit(plan: Plan, opts: WarmOptions, family, modules: list[PlanItem], nvcc,
                 cache_root: Path) -> RuntimePart:
    """The plan's SGLang JIT modules as work for their family's workers, what those are told, what is skipped and
    why, the fingerprint section naming what their runtime names hold (all asked of the modules' JitFamily), and
    what to install when this machine lacks what builds them."""
    part = RuntimePart(family, modules, family.backend)
    if opts.sglang_jit == "off":
        part.skipped = {m.id: "--sglang-jit off" for m in modules}
        return part
    mixed = sorted({m.runtime_id for m in plan.jit_modules.values()})
    if len(mixed) != 1:
        raise InputError(f"the plan mixes SGLang JIT families {', '.join(mixed)}",
                         hint="regenerate the manifest with `dgprecompile plan -o`")
    try:
        naming = naming_for(family, plan.sglang_version or "")
        ninja = shutil.which("ninja", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
        if ninja is None:
            raise EnvironmentProblem(f"ninja is not installed: {family.label} builds its modules with it",
                                     hint="pip install ninja")
    except EnvironmentProblem as exc:
        if opts.sglang_jit == "on":
            raise
        part.skipped, part.missing = {m.id: exc.message for m in modules}, exc.hint or exc.message
        return part
    part.work = [ModuleWork(m.id, family.build_params(naming, m), naming.spec.build_seconds) for m in modules]
    part.job = {**family.worker_job(naming, modules), "cuda_home": _cuda_home(nvcc.path),
                "ninja_dir": os.path.dirname(ninja), "jit_backend": family.backend, "area": family.area,
                "not_recorded": list(family.not_recorded),
                "launch_env": [list(e) for e in family.launch_env(str(cache_root))],
                "build_seconds": naming.spec.build_seconds}
    part.fingerprint = {family.fingerprint_section: naming.fingerprint()}
    return part


def _prepare_triton(plan: Plan, opts: WarmOptions, runtime, moe: list[PlanItem], nvcc=None,
                    cache_root: Path | None = None) -> RuntimePart:
    """The plan's Triton fused-MoE shapes (their own TritonMoeItems: the parent cuts them into chunks, CUT) and
    what their subprocesses are told. Run with the installed sglang and Triton, so they follow --sglang-jit as
    SGLang's own JIT modules do: off leaves them out, on refuses at once when this machine cannot run them, auto
    skips them (``skipped``: why; ``missing``: what to install)."""
    from importlib import metadata

    part = RuntimePart(runtime, moe, runtime.backend, in_workers=False)
    if opts.sglang_jit == "off":
        part.skipped = {t.id: "--sglang-jit off" for t in moe}
        return part
    try:
        missing = runtime.missing()
        if missing is not None:
            raise EnvironmentProblem(f"the {runtime.label} warm needs {', '.join(runtime.imports)} importable "
                                     "here", hint=missing)
        try:
            installed_sglang = metadata.version("sglang")
        except metadata.PackageNotFoundError:
            installed_sglang = None
        if plan.sglang_version and installed_sglang != plan.sglang_version:
            raise EnvironmentProblem(f"the installed sglang is {installed_sglang}, not the plan's {plan.sglang_version}: "
                                     f"its {runtime.label} configs and kernels may differ",
                                     hint=f"install sglang {plan.sglang_version} (the job's own), or plan for "
                                          f"--sglang {installed_sglang}")
    except EnvironmentProblem as exc:
        if opts.sglang_jit == "on":
            raise
        part.skipped, part.missing = {t.id: exc.message for t in moe}, exc.hint or exc.message
        return part
    # the record's Triton: read here from metadata, the interpreter the workers' subprocesses run
    part.job = {"installed": runtime.installed(), "python": sys.executable, "backend_name": runtime.backend}
    return part


def _triton_chunks(setup: WarmSetup, part: RuntimePart, jobs: int, others: list) -> int:
    """The part's items already covered by their record (``cached``), the chunks of the others (``work``), and the
    slots the chunks may take: one budget for the zygote's workers and the chunks; while a zygote imports
    (``others``: its workers' work), the chunks take all of it but one slot. Each item is cut for those slots
    (compile/triton_chunks.py). A stale fingerprint covers nothing (the warm clears the records first)."""
    from dgprecompile.cache.triton_moe import COVERED, item_coverage
    from dgprecompile.compile.triton_chunks import chunks_for

    runtime, store = part.runtime, setup.store
    budget = max(1, jobs - 1) if others else jobs
    index = store.read_index() if part.built else None
    rel = runtime.release(setup.plan.sglang_version)
    for moe in part.built:
        if not setup.stale and item_coverage(store, index, moe.id, part.job.get("installed")).status == COVERED:
            part.cached.append(moe.id)
            continue
        part.work += chunks_for(moe, budget, runtime.tuned_up_to(rel, moe, moe.device_name),
                                TRITON_MOE_SECONDS_PER_KERNEL)
    return budget


def _prepare_recorded(plan: Plan, opts: WarmOptions, runtime, items: list[PlanItem], nvcc=None,
                      cache_root: Path | None = None) -> RuntimePart:
    """The items built by the parent beside the pool, each by the runtime's own subprocess (compile/recorded_items.py):
    SGLang's torch.compile graphs (where the job's GPU kind is visible) and FlashInfer's JIT modules (GPU-free).
    --sglang-jit off leaves them; a runtime that needs a GPU skips them without the planned one, saying so; without
    what builds them importable here, or with another release of it than planned, they are skipped naming the
    install (the warm exits 3)."""
    from dgprecompile.compile.recorded_items import gpu_problem, visible_gpu_names

    part = RuntimePart(runtime, items, runtime.kind, in_workers=False, job={"python": sys.executable})
    if opts.sglang_jit == "off":
        part.skipped = {it.id: "--sglang-jit off" for it in items}
        return part
    if runtime.needs_gpu:  # the GPU first: where none of the planned kind is visible nothing here could build them
        gpus = visible_gpu_names()
        part.skipped = {it.id: why for it in items if (why := gpu_problem(it, gpus, runtime.needs_gpu)) is not None}
    missing = runtime.missing() if part.built else None
    if missing is None and part.built:
        missing = runtime.release_problem(part.built)
    if missing is not None:  # what builds them is not here: the warm says what to install (exit 3)
        part.skipped.update({it.id: missing for it in part.built})
        part.missing = missing
        return part
    part.job["env"] = runtime.build_env(part.built, opts.jobs or os.cpu_count() or 1,
                                        _cuda_home(nvcc.path) if nvcc is not None else None)
    if cache_root is not None and part.built:  # what its records cover now (run_items asks again: a stale warm clears)
        from dgprecompile.cache.item_records import COVERED, item_coverage

        store = CacheStore(cache_root)
        index, installed = store.read_index(), runtime.installed()
        part.cached = [it.id for it in part.built
                       if item_coverage(store, index, runtime, it.id, installed).status == COVERED]
    return part


# how each runtime's items become a warm's work, by its kind (runtimes/base.py Runtime.kind): its part, prepared
# from the plan (PREPARE); for a part whose work runs outside the workers, its work cut for the budget (CUT)
PREPARE = {"sglang-jit": _prepare_jit, "triton-moe": _prepare_triton, "inductor-graph": _prepare_recorded,
           "flashinfer-module": _prepare_recorded, "triton-path": _prepare_recorded}
CUT = {"triton-moe": _triton_chunks}


def _zygote_workers(backend: str, jobs: int, items: list[WorkItem], parts: list[RuntimePart]) -> int:
    """The zygote's workers: one per slot of the budget that its items can use, and, when the DeepGEMM backend
    needs no preload and another runtime's builders do, as many as the kernels can use again, forked before the
    imports and serving the DeepGEMM backend only (compile/worker.py ``zygote``; ``early_workers`` in the job). The
    scheduler's budget keeps all of them within --jobs."""
    others = [p for p in parts if p.in_workers and p.work]
    workers = min(jobs, len(items) + sum(len(p.work) for p in others))
    if not items or not others or get_backend(backend).preload:
        return workers
    return workers + (min(workers, len(items)) if any(get_backend(p.backend).preload for p in others) else 0)


def work(setup: WarmSetup) -> list[tuple[Job, WorkItem | ModuleWork | Chunk]]:
    """Every item with the backend that builds it and its estimated seconds: DeepGEMM's kernels from their tiles
    (:func:`_estimated_cost`), sweep chunks in the order they come (largest first); every other runtime's work with
    its own estimate (SGLang's JIT modules: the measured build time of one; Triton MoE chunks, which the parent
    runs, from their kernels)."""
    out: list[tuple[Job, WorkItem | ModuleWork | Chunk]] = []
    for pos, item in enumerate(setup.items):
        cost = float(len(setup.items) - pos) if get_backend(setup.backend).sweeps else _estimated_cost(item)
        out.append((Job(item.kernel, setup.backend, cost), item))
    for part in setup.parts:
        out += [(Job(w.id, part.backend, w.cost), w) for w in part.work]
    return out


def worker_job(setup: WarmSetup) -> dict[str, Any]:
    """What every worker is told (job.json): the cache, and each backend's own settings."""
    common = {"cache_dir": str(setup.store.root), "arch": setup.plan.profile.sm_arch,
              "bytes_per_entry": setup.plan.profile.bytes_per_entry, "release": setup.plan.sglang_version}
    backends = {}
    if setup.items:
        backends[setup.backend] = {**common, "backend": setup.backend, **setup.job_common}
    for part in setup.parts:
        if part.in_workers and part.work:
            backends[part.backend] = {**common, "backend": part.backend, **part.job}
    early = len(setup.gpus) - min(setup.workers, len(setup.items) + len(setup.worker_work))
    return {"cache_dir": str(setup.store.root), "backends": backends, "early_workers": max(0, early)}
