"""Warm: turn a plan into cache entries, with worker processes and no thread pools.

The parent (no torch import) checks the toolchain and writes the fingerprint, then starts one zygote process
(``dgprecompile.compile.worker``) that imports the backend's libraries once and forks the workers. The parent
hands the kernels out one at a time, costliest first, to whichever worker is free; each worker compiles in its
main thread and reports events on a pipe, which the parent reads.
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dgprecompile.cache.store import CacheStore, resolve_cache_dir
from dgprecompile.compile.backends import WorkItem, backend_for
from dgprecompile.errors import EXIT_COMPILE_FAILED, EXIT_ENVIRONMENT, EXIT_OK, EnvironmentProblem, InputError
from dgprecompile.fsutil import free_bytes, human_bytes, mount_point
from dgprecompile.generations import BACKEND_NEEDS_GPU
from dgprecompile.keys.fingerprint import differences, make_fingerprint, short_id
from dgprecompile.planning.plan import Plan
from dgprecompile.toolchain import find_deepgemm, find_nvcc

# Tasks (threads + processes) one worker holds at its peak: its own main thread, plus the compiler's process
# tree. nvcc runs its stages (cudafe++, cicc, ptxas, the host compiler) one at a time under one driver; one
# nvcc 13.0 compile of a DeepGEMM kernel peaked at 4 tasks (docs/root-cause.md, "measured"). Workers pin
# OpenBLAS/OpenMP to one thread each.
TICK_SECONDS = 1.0  # how often the parent wakes without events (progress lines on a non-terminal)
WORKER_BASE_TASKS = 1
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
    swept: list[str] = field(default_factory=list)  # sweep backend: key ranges already covered (cached)

    @property
    def task_budget(self) -> int:
        return self.workers * (WORKER_BASE_TASKS + COMPILER_TREE_TASKS)


@dataclass
class WarmResult:
    compiled: dict[str, float] = field(default_factory=dict)  # kernel -> seconds
    cached: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # planned SGLang JIT modules not built here, and why
    fatal: list[str] = field(default_factory=list)  # workers that could not start
    no_space: str | None = None  # the first "no space left on <mount>" a worker met; the rest was not started
    no_space_hint: str | None = None  # what to free, and roughly how much the unbuilt kernels need
    ready_seconds: list[float] = field(default_factory=list)  # when each worker was set up, from the start
    last_result_seconds: float = 0.0  # when the last kernel finished, from the start
    wall_seconds: float = 0.0
    cache_bytes: int = 0
    workers: int = 0
    cache_dir: str = ""
    backend: str = ""
    kernels: int = 0  # kernels this warm (or this rank's share) had to have in the cache
    jit_modules: int = 0  # SGLang JIT modules this warm had to have in the cache

    @property
    def ok(self) -> bool:
        return not self.failed

    @property
    def return_code(self) -> int:
        if self.no_space:
            return EXIT_ENVIRONMENT
        return EXIT_OK if self.ok else EXIT_COMPILE_FAILED

    def to_dict(self) -> dict[str, Any]:
        return {"cache_dir": self.cache_dir, "backend": self.backend, "kernels": self.kernels,
                "sglang_jit_modules": self.jit_modules, "compiled": len(self.compiled),
                "already_cached": len(self.cached), "failed": len(self.failed),
                "failures": self.failed, "skipped": self.skipped, "wall_seconds": round(self.wall_seconds, 2),
                "compile_seconds_sum": round(sum(self.compiled.values()), 2), "cache_bytes": self.cache_bytes,
                "workers": self.workers, "no_space": self.no_space,
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
    """A rough relative compile cost, to start the longest kernels first (measured on an H200 host: grouped
    kernels and large tiles take 5-10 s, layout kernels about 1 s)."""
    if item.family == "transpose_fp32":
        return 0.1
    p = item.params
    tile = (p.get("BM", 64) * p.get("BN", 64)) / (128 * 128)
    grouped = item.kernel_type != "GEMM_NT_F8F8BF16"
    return tile + (1.0 if grouped else 0.0) + (0.5 if p.get("BN", 0) % 32 else 0.0)


def prepare_warm(plan: Plan, opts: WarmOptions) -> WarmSetup:
    requested = opts.backend
    if not plan.heuristic:  # keys only: the library itself has to choose, for every m (the sweep backend)
        if "sweep" not in plan.profile.deepgemm.backends:
            raise InputError(f"the plan for sglang {plan.profile.id} lists keys only and its DeepGEMM "
                             f"({plan.profile.generation}) has no sweep backend",
                             hint="plan with an --sglang version whose DeepGEMM is modelled")
        if requested not in (None, "auto", "sweep"):
            raise InputError(f"the plan for sglang {plan.profile.id} lists keys only, so --backend {requested} "
                             "has no kernels to build",
                             hint="use --backend sweep (or auto) on a GPU machine: DeepGEMM itself chooses for "
                                  "every m of each key (or plan without --keys-only)")
        requested = "sweep"
    install = find_deepgemm()
    backend = backend_for(requested, install, plan.profile.generation)
    assert install is not None
    nvcc = find_nvcc(opts.nvcc)
    if nvcc.release < (12, 3):
        raise EnvironmentProblem(f"nvcc {nvcc.path} is release {nvcc.release}; DeepGEMM needs >= 12.3",
                                 hint="install CUDA 12.3 or newer, or pass --nvcc PATH")
    store = CacheStore(resolve_cache_dir(plan, opts.cache_dir))
    fingerprint = make_fingerprint(install, nvcc, plan.num_sms, plan.gpu)
    recorded = store.read_index().fingerprint
    stale = differences(recorded, fingerprint) if recorded else []

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))

    generation = plan.profile.deepgemm
    notes: list[str] = []
    if not BACKEND_NEEDS_GPU[backend] and not generation.keys_proven(install.version):
        notes.append(f"the entry names of {install.distribution} {install.version} are computed from its own sources "
                     "but were not yet compared with entries its runtime made on a GPU; `launch --strict` shows any "
                     "miss at once (or use --backend cxx on a GPU)")
    job_common: dict[str, Any] = {"nvcc": nvcc.path, "num_sms": plan.num_sms,
                                  "entry_files": list(generation.entry_files)}
    gpus: list[int | None] = [None]
    if not BACKEND_NEEDS_GPU[backend]:  # computes the runtime's entry names and builds them itself
        job_common["key_context"] = generation.key_context(install, nvcc).__dict__
        job_common["key_class"] = generation.key_class
    else:
        visible = _visible_gpus()
        if world > 1:
            visible = [int(os.environ.get("LOCAL_RANK", 0))]
        gpus = list(opts.gpus) if opts.gpus else list(visible)
        if not gpus:
            raise EnvironmentProblem("the C++-JIT DeepGEMM compiles inside GEMM launches, so warm needs a GPU; "
                                     "none is visible", hint="run warm on a Hopper GPU machine (or pass --gpus)")
    jobs = opts.jobs or os.cpu_count() or 1
    if jobs < 1:
        raise InputError("--jobs must be at least 1", hint="omit --jobs for one worker per CPU core")
    jit_items, jit_job, jit_skipped, jit_fp = _prepare_jit(plan, opts, nvcc, store.root)
    if world > 1:
        jit_items = jit_items[rank::world]
    if jit_fp is not None:
        fingerprint.update(jit_fp)  # {the family's fingerprint section: its fields}
        stale = differences(recorded, fingerprint) if recorded else []
    swept: list[str] = []
    if backend == "sweep":  # chunks come largest first already; their entries are not known in advance
        items, swept = _sweep_items(plan, store, fingerprint, jobs, rank, world)
        job_common["fingerprint_id"] = short_id(fingerprint)
        notes.append(f"sweep: DeepGEMM chooses its own kernels; {len(items)} chunks of the keys' m ranges still to "
                     "call (every m up to 16,384, then 64q+1, 64q+32, 64q+64; masked: every expected_m)")
    else:
        items = sorted(_kernel_items(plan, rank, world), key=_estimated_cost, reverse=True)
    jobs = max(1, min(jobs, max(len(items), len(jit_items)))) if (items or jit_items) else 1
    store.require_writable("write to")
    if backend != "sweep":
        _check_space(store, plan, items, [] if stale else None)
    return WarmSetup(plan, backend, store, fingerprint, stale, items, jobs,
                     [gpus[i % len(gpus)] for i in range(jobs)], job_common, rank, world, notes,
                     jit_items, jit_job, jit_skipped, swept)


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


def _prepare_jit(plan: Plan, opts: WarmOptions, nvcc, cache_root: Path) -> tuple[list[WorkItem], dict[str, Any], dict[str, str],
                                                                dict[str, Any] | None]:
    """Work items for the plan's SGLang JIT modules, their family's workers' job, what is skipped and why, and
    the fingerprint section naming what their runtime names hold (all asked of the modules' JitFamily)."""
    from dgprecompile.jit_families import get_family

    modules = list(plan.jit_modules.values())
    if not modules:
        return [], {}, {}, None
    if opts.sglang_jit == "off":
        return [], {}, {m.id: "--no-sglang-jit" for m in modules}, None
    families = sorted({m.family for m in modules})
    if len(families) != 1:
        raise InputError(f"the plan mixes SGLang JIT families {', '.join(families)}",
                         hint="regenerate the manifest with `dgprecompile plan -o`")
    family = get_family(families[0])
    try:
        naming = family.naming(plan.sglang_version or "")
        ninja = shutil.which("ninja", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
        if ninja is None:
            raise EnvironmentProblem(f"ninja is not installed: {family.label} builds its modules with it",
                                     hint="pip install ninja")
    except EnvironmentProblem as exc:
        if opts.sglang_jit == "on":
            raise
        why = exc.message + (f" ({exc.hint})" if exc.hint else "")
        return [], {}, {m.id: why for m in modules}, None
    items = [WorkItem(m.id, family.backend, family.build_params(naming, m), "SGLANG_JIT", 0, 0, 0, 0)
             for m in modules]
    job = {**family.worker_job(naming, modules), "cuda_home": _cuda_home(nvcc.path),
           "ninja_dir": os.path.dirname(ninja), "jit_backend": family.backend, "area": family.area,
           "not_recorded": list(family.not_recorded),
           "launch_env": [list(e) for e in family.launch_env(str(cache_root))]}
    return items, job, {}, {family.fingerprint_section: naming.fingerprint()}


def _record_plan(setup: WarmSetup) -> None:
    plan = setup.plan

    def mutate(index):
        if setup.stale:
            index.kernels.clear()  # those records describe entries filed under other keys
            index.extra.clear()
            index.sweeps.clear()
        index.fingerprint = setup.fingerprint
        entry = plan.summary()
        if entry not in index.plans:
            index.plans.append(entry)

    setup.store.update_index(mutate)


def run_warm(setup: WarmSetup, on_event: Callable[[dict[str, Any]], None] = lambda e: None) -> WarmResult:
    """Compile ``setup``'s kernels. An interrupt (Ctrl-C; SIGTERM and SIGHUP, which the CLI turns into one)
    stops the workers and their compilers and removes the scratch directory and staging roots.
    DeepGEMM's kernels first (their backend's workers), then SGLang's own JIT modules (sglang-jit workers)."""
    store = setup.store
    store.ensure()
    store.clean_stale_staging()
    _record_plan(setup)
    result = WarmResult(workers=setup.workers, cache_dir=str(store.root), backend=setup.backend,
                        kernels=len(setup.items), jit_modules=len(setup.jit_items),
                        skipped=dict(setup.jit_skipped), cached=list(setup.swept))
    start = time.perf_counter()
    common = {"arch": setup.plan.profile.sm_arch, "bytes_per_entry": setup.plan.profile.bytes_per_entry}
    try:
        if setup.items:
            _pool(store, setup.items, setup.backend, {**common, **setup.job_common}, setup.gpus, on_event, result,
                  start)
        if setup.jit_items:
            jobs = max(1, min(setup.workers, len(setup.jit_items)))
            _pool(store, setup.jit_items, setup.jit_job["jit_backend"], {**common, **setup.jit_job}, [None] * jobs,
                  on_event, result, start)
    finally:
        store.clean_stale_staging()
    result.wall_seconds = time.perf_counter() - start
    if result.no_space:
        need = len(result.failed) * setup.plan.profile.bytes_per_entry
        result.no_space_hint = (f"free space there (about {human_bytes(need)} more for the {len(result.failed)} "
                                "kernels not built), or pass --cache-dir on a larger filesystem; then warm again")
    result.cache_bytes = store.size_bytes()
    return result


def _pool(store: CacheStore, items: list[WorkItem], backend: str, job_common: dict[str, Any],
          gpus: list[int | None], on_event: Callable[[dict[str, Any]], None], result: WarmResult,
          start: float) -> None:
    """One zygote and len(gpus) workers compiling ``items``, handed out one at a time."""
    tmp = Path(tempfile.mkdtemp(prefix="dgprecompile-warm-"))
    queue = list(items)
    n = len(gpus)
    current: dict[int, str | None] = {i: None for i in range(n)}
    to_worker: dict[int, object] = {}
    worker_pids: dict[int, int] = {}
    stream_closed: dict[int, bool] = {i: False for i in range(n)}
    exit_codes: dict[int, int] = {}
    logs = {i: tmp / f"worker-{i}.log" for i in range(n)}
    sel = selectors.DefaultSelector()
    zygote: subprocess.Popen | None = None

    def hand_out(i: int) -> None:
        """Give worker i the next kernel, or close its stdin when none are left."""
        pipe = to_worker.get(i)
        if pipe is None:
            return
        if queue:
            item = queue.pop(0)
            try:
                pipe.write(json.dumps(item.to_dict()) + "\n")
                pipe.flush()
                current[i] = item.kernel
                return
            except BrokenPipeError:
                queue.insert(0, item)  # that worker is gone; its exit is handled when it is reported
        current[i] = None
        to_worker.pop(i, None)
        try:
            pipe.close()
        except BrokenPipeError:
            pass

    def settle(i: int) -> None:
        """A worker whose stream ended and whose exit was reported: fail the kernel it held, if any."""
        if stream_closed[i] and i in exit_codes and current[i] is not None:
            why = _worker_death(exit_codes[i], logs[i])
            result.failed[current[i]] = why
            on_event({"event": "failed", "kernel": current[i], "error": why})
            current[i] = None
            pipe = to_worker.pop(i, None)
            if pipe is not None:
                try:
                    pipe.close()
                except BrokenPipeError:
                    pass

    try:
        job = {"backend": backend, "cache_dir": str(store.root), **job_common}
        job_path = tmp / "job.json"
        job_path.write_text(json.dumps(job))
        spec, child_fds = [], []
        for i, gpu in enumerate(gpus):
            in_r, in_w = os.pipe()
            out_r, out_w = os.pipe()
            child_fds += [in_r, out_w]
            spec.append({"in_fd": in_r, "out_fd": out_w, "log": str(logs[i]),
                         "gpu": None if gpu is None else _physical_gpu(gpu)})
            to_worker[i] = os.fdopen(in_w, "w")
            reader = os.fdopen(out_r, "rb", buffering=0)
            sel.register(reader, selectors.EVENT_READ, i)
        env = {**os.environ, **WORKER_ENV, "DGPRECOMPILE_WORKERS": json.dumps(spec)}
        zygote = subprocess.Popen([sys.executable, "-m", "dgprecompile.compile.worker", str(job_path), "--zygote"],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=open(tmp / "zygote.log", "wb"), env=env, pass_fds=child_fds)
        for fd in child_fds:
            os.close(fd)
        assert zygote.stdout is not None
        sel.register(zygote.stdout, selectors.EVENT_READ, "zygote")
        buffers: dict[object, str] = {}
        open_streams = n + 1
        while open_streams:
            ready = sel.select(timeout=TICK_SECONDS)
            if not ready:
                on_event({"event": "tick"})  # lets a plain (non-TTY) progress report print on time, no thread
            for sk, _ in ready:
                who = sk.data
                chunk = os.read(sk.fileobj.fileno(), 65536).decode(errors="replace")
                if not chunk:
                    sel.unregister(sk.fileobj)
                    sk.fileobj.close()
                    open_streams -= 1
                    if who != "zygote":
                        stream_closed[who] = True
                        settle(who)
                    continue
                buffers[who] = buffers.get(who, "") + chunk
                *lines, buffers[who] = buffers[who].split("\n")
                for line in lines:
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    kind = event.get("event")
                    if who == "zygote":
                        i = event["worker"]
                        if kind == "spawned":
                            worker_pids[i] = event["pid"]
                        elif kind == "exit":
                            exit_codes[i] = event["code"]
                            settle(i)
                        continue
                    _handle(event, result, on_event)
                    if event.get("no_space") and queue:  # the filesystem is full: the rest would fail the same way
                        for item in queue:
                            result.failed[item.kernel] = "not started: " + event["error"]
                            on_event({"event": "failed", "kernel": item.kernel, "error": "not started (no space)"})
                        queue.clear()
                    if kind == "ready":
                        result.ready_seconds.append(time.perf_counter() - start)
                    if kind in ("done", "failed"):
                        current[who] = None
                        result.last_result_seconds = time.perf_counter() - start
                    if kind in ("ready", "done", "failed"):
                        hand_out(who)
                    elif kind == "fatal":  # that worker could not set up its backend; the others go on
                        current[who] = None
                        pipe = to_worker.pop(who, None)
                        if pipe is not None:
                            pipe.close()
        zygote.wait()
        if zygote.returncode and not worker_pids:
            raise EnvironmentProblem("warm workers could not start: "
                                     + (tmp / "zygote.log").read_text(errors="replace").strip()[-2000:])
        for kernel in [item.kernel for item in queue]:  # every worker died before these were handed out
            why = "no worker left to compile it (see the errors above)"
            result.failed[kernel] = why
            on_event({"event": "failed", "kernel": kernel, "error": why})
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM/SIGHUP (cli.main raises it): stop everything, then clean up
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_IGN)
        _stop(zygote, worker_pids)
        raise
    finally:
        sel.close()
        for pipe in to_worker.values():
            try:
                pipe.close()
            except OSError:
                pass
        _stop(zygote, worker_pids)
        shutil.rmtree(tmp, ignore_errors=True)


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
    elif kind == "failed":
        result.failed[kernel] = event.get("error", "failed")
        if event.get("no_space") and result.no_space is None:
            result.no_space = event.get("error")
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
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
