"""warm's share for the runtimes whose items are built by subprocesses writing the runtime's own cache:
SGLang's torch.compile graphs (runtimes/inductor.py, on the job's GPU kind) and FlashInfer's JIT modules
(runtimes/flashinfer.py, GPU-free), both started beside the pool and collected after it; SGLang's model-path Triton
kernels (runtimes/triton_moe.py TRITON_PATH) after it. Prepared with the other runtimes' parts (warm_setup's
PREPARE, which asks :func:`gpu_problem` where a runtime needs a GPU).

An item of a runtime that does not name its entries runs as ``parts`` subprocesses side by side (the runtime's
``warm_argv`` plus ``--part i/n`` where it splits an item: ``parts`` > 1) writing the runtime's areas of a private
staging root of the cache (:class:`Staged`), so that what appeared there is that item's whatever else writes the
same areas meanwhile (the pool's Triton MoE chunks); when it ends the stage is merged into the cache
(cache/item_records.py merge_stage), its entries filed in the index (``extra``) and its record written in the
runtime's index section. A runtime that names each item's entry itself (``entry_of``: FlashInfer) has all its items
built side by side in the cache (:func:`start_side_by_side`), each filed by that name. No threads: subprocesses in
their own sessions, their output in files, read once each has ended (each prints one line of JSON last).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from typing import Any

from dgprecompile.cache import item_records as records
from dgprecompile.errors import CompileFailed, DGError
from dgprecompile.host import lifeline, scratch
from dgprecompile.runtimes import family_for_area


def visible_gpu_names() -> list[str]:
    """The names of the GPUs this process would see (CUDA_VISIBLE_DEVICES honoured), from nvidia-smi."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) == "" or not shutil.which("nvidia-smi"):
        return []
    try:
        res = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    names = [line.strip() for line in res.stdout.splitlines() if line.strip()]
    wanted = os.environ.get("CUDA_VISIBLE_DEVICES")
    if wanted is not None:
        picks = [int(d) for d in wanted.split(",") if d.strip().isdigit()]
        names = [names[i] for i in picks if i < len(names)]
    return names


def gpu_problem(item, gpus: list[str], needs_gpu: str) -> str | None:
    """Why ``item`` cannot be built with ``gpus`` visible (None: its GPU kind is one of them)."""
    if item.device_name in gpus:
        return None
    return f"needs a visible {item.device_name} ({', '.join(sorted(set(gpus))) or 'no GPU'} here): {needs_gpu}"


def _pending(setup, part, result) -> list:
    """The part's items not covered yet (their records, read now: a stale fingerprint cleared them); the covered
    ones are counted as cached."""
    runtime = part.runtime
    installed = runtime.installed()
    pending = []
    for item in part.built:
        index = setup.store.read_index()
        if records.item_coverage(setup.store, index, runtime, item.id, installed).status == records.COVERED:
            if item.id not in result.cached:  # counted as cached up front where prepare saw its record
                result.cached.append(item.id)
            continue
        pending.append(item)
    return pending


def run_items(setup, part, on_event, result, reserved: int = 0) -> None:
    """Build each item of ``part`` not covered yet, one after another, or, for a runtime that names each item's
    entry itself (``entry_of``), all side by side; record its entries and its event. ``reserved``: slots of the
    --jobs budget held by builds still running beside (FlashInfer's): an item's parts take what is left, at least
    one."""
    if hasattr(part.runtime, "entry_of"):
        early = start_side_by_side(setup, part, on_event, result)
        if early is not None:
            with early:
                early.finish(on_event, result)
        return
    for item in _pending(setup, part, result):
        on_event({"event": "start", "kernel": item.id})
        _settle(setup, item, time.perf_counter(), lambda it=item: build_item(setup, part, it, reserved), on_event,
                result)


def start_staged(setup, part, on_event, result, slots: int, nice: int = 0) -> list[Staged]:
    """Start every pending item of ``part`` at once, each into its own staging root (:class:`Staged`), ``slots``
    of the --jobs budget shared among them (each item's parts, at least one); finished with :func:`finish_staged`.
    warm starts the graphs so beside its pool: they write only their stages, so nothing else's entries can be
    taken for theirs, and the cache's areas only when :func:`finish_staged` merges them. ``nice``: how much lower
    their CPU priority is than the builds they must not slow (FlashInfer's, compile/warm.py)."""
    items = _pending(setup, part, result)
    started: list[Staged] = []
    try:
        for item, parts in zip(items, shares(part.runtime, items, slots), strict=True):
            on_event({"event": "start", "kernel": item.id})
            started.append(Staged(setup, part, item, parts, nice))
    except BaseException:
        for one in started:
            one.stop()
        raise
    return started


def shares(runtime, items: list, slots: int) -> list[int]:
    """Each item's parts out of ``slots``: one each, then each further slot to the item whose parts have the most
    call sequences each where the runtime counts them (``sequences_of``: the 480B's MoE sum has 34, its vocabulary
    mask 6; else one per item), so the longest part is as short as the slots allow; never more parts than an item
    has sequences (a part without one would only import torch and SGLang), nor than ``runtime.parts``."""
    count = getattr(runtime, "sequences_of", None)
    weights = [count(item) if count else 1 for item in items]
    caps = [min(runtime.parts, w) if count else runtime.parts for w in weights]
    parts = [1] * len(items)
    for _ in range(slots - len(items)):
        below = [i for i in range(len(items)) if parts[i] < caps[i]]
        if not below:
            break
        parts[max(below, key=lambda i: (weights[i] / parts[i], -i))] += 1
    return parts


def finish_staged(setup, started: list[Staged], on_event, result) -> None:
    """Wait for each item :func:`start_staged` started, merge, file and record it, with its event."""
    for one in started:
        _settle(setup, one.item, one.t0, one.finish, on_event, result)


def _settle(setup, item, t0: float, work, on_event, result, seconds: float | None = None) -> None:
    """Run ``work`` (what finishes the item) and count the item compiled or failed, with its event: a failure's
    first error lines, its whole output kept in the cache's log folder and a known cause's hint
    (compile/build_log.py). ``seconds``: what the item's own report says it took (else since ``t0``)."""
    from dgprecompile.compile.build_log import describe

    try:
        work()
    except DGError as exc:
        failure = describe(exc.message, setup.store.root, item.id, setup.plan.sglang_version)
        result.failed[item.id] = failure.summary
        result.failure_details[item.id] = failure.event()
        on_event({"event": "failed", "kernel": item.id, "error": failure.summary, **failure.event()})
        return
    seconds = round(time.perf_counter() - t0 if seconds is None else float(seconds), 2)
    result.compiled[item.id] = seconds
    on_event({"event": "done", "kernel": item.id, "status": "compiled", "seconds": seconds})


def build_item(setup, part, item, reserved: int = 0) -> dict[str, Any]:
    """Build one item now (:class:`Staged`), its parts taking the --jobs budget less ``reserved``."""
    return Staged(setup, part, item, shares(part.runtime, [item], (setup.budget or setup.workers) - reserved)[0]
                  ).finish()


class Staged:
    """One item's ``parts`` subprocesses side by side (the runtime's ``warm_argv`` plus ``--part i/n`` where it
    splits the item), writing the runtime's areas of a private staging root of the cache (store.new_staging, set
    up as launch sets a job's), so that what they wrote is the item's whatever else builds meanwhile. ``finish``
    waits for them, merges the stage into the cache's areas (cache/item_records.py merge_stage), files the
    entries and writes the item's record: what the subprocesses reported (``record`` of the first report, each
    runtime's own fields), its entries and the seconds they took. ``stop`` kills what runs and removes the stage."""

    def __init__(self, setup, part, item, parts: int, nice: int = 0):
        self.setup, self.part, self.item, self.parts = setup, part, item, parts
        self.t0 = time.perf_counter()
        self.stage = setup.store.new_staging()
        runtime = part.runtime
        self.argv = runtime.warm_argv(item, str(self.stage), part.job["python"])
        try:
            self.started = Started([[*self.argv, *(["--part", f"{i}/{parts}"] if parts > 1 else [])]
                                    for i in range(parts)], _areas_env(str(self.stage), runtime, part),
                                   in_scratch=("SGLANG_CACHE_DIR",), nice=nice)  # SGLang's cache: its other files
        except BaseException:
            self.setup.store.release_staging(self.stage)
            raise

    def finish(self) -> dict[str, Any]:
        store, runtime, item = self.setup.store, self.part.runtime, self.item
        try:
            outcomes = self.started.collect()
            for i, (_, error) in enumerate(outcomes):
                if error is not None:
                    raise CompileFailed(f"python -m {self.argv[2]} part {i}/{self.parts} {error}")
            reports = [report for report, _ in outcomes]
            new, bad = records.merge_stage(store.root, self.stage, runtime.areas)
            filed, broken = records.file_entries(store, new)
        finally:
            self.stop()
        if bad or broken or not filed:
            raise CompileFailed(f"{item.id}: " + (f"entries not whole: {', '.join((bad + broken)[:3])}"
                                                      if bad or broken else "its build made nothing in the cache"))
        record = {"item": item.id, **reports[0]["record"], "entries": filed,
                  "seconds": round(sum(float(r.get("seconds") or 0) for r in reports), 2)}
        if "graphs" in record:  # inductor: the graphs every part compiled
            record["graphs"] = sum(int(r["record"].get("graphs", 0)) for r in reports)
        store.update_index(lambda index: records.records(index, runtime).__setitem__(item.id, record))
        return record

    def ended(self) -> bool:
        """Whether every part has exited (their slots are free; ``finish`` still merges the stage)."""
        return all(proc.poll() is not None for proc in self.started.procs)

    def stop(self) -> None:
        """Kill what still runs (an interrupt, a failure elsewhere) and remove the stage: nothing started here
        outlives the warm, nothing of a stage stays in the cache."""
        self.started.stop()
        self.setup.store.release_staging(self.stage)


def start_side_by_side(setup, part, on_event, result) -> SideBySide | None:
    """Start the subprocess of every pending item of a part whose runtime names each item's entry (FlashInfer's
    module directories) at once, the --jobs budget shared among them (MAX_JOBS each); None where none is pending.
    warm starts FlashInfer's before its pool (they are GPU-free and its longest builds) and finishes them after
    the pool and the builds after it (compile/warm.py AFTER_POOL)."""
    items = _pending(setup, part, result)
    if not items:
        return None
    runtime = part.runtime
    root = str(setup.store.root)
    env = _areas_env(root, runtime, part)
    env["MAX_JOBS"] = str(max(1, (setup.budget or setup.workers or 1) // len(items)))
    for item in items:
        on_event({"event": "start", "kernel": item.id})
    return SideBySide(setup, part, items, Started([runtime.warm_argv(item, root, part.job["python"]) for item in items],
                                                  env))


class SideBySide:
    """A part's items building side by side (:func:`start_side_by_side`): ``finish`` waits for them and files each
    item's own entry and record; leaving the ``with`` block stops what still runs."""

    def __init__(self, setup, part, items: list, started: Started):
        self.setup, self.part, self.items, self.started = setup, part, items, started
        self.t0 = time.perf_counter()

    def __enter__(self) -> SideBySide:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        """Kill what still runs (an interrupt, a failure elsewhere): nothing started here outlives the warm."""
        self.started.stop()

    def finish(self, on_event, result) -> None:
        setup, runtime = self.setup, self.part.runtime
        outcomes = self.started.collect()

        def file_one(item, report, error) -> None:
            if error is not None:
                raise CompileFailed(f"{item.id}: {error}")
            filed, broken = records.file_entries(setup.store, [f"{runtime.area}/{runtime.entry_of(item)}"])
            if broken or not filed:
                raise CompileFailed(f"{item.id}: its entry {runtime.area}/{runtime.entry_of(item)} is not whole")
            record = {"item": item.id, **report["record"], "entries": filed, "seconds": report.get("seconds")}
            setup.store.update_index(lambda index: records.records(index, runtime).__setitem__(item.id, record))

        for item, (report, error) in zip(self.items, outcomes, strict=True):
            _settle(setup, item, self.t0, lambda it=item, r=report, e=error: file_one(it, r, e), on_event, result,
                    seconds=(report or {}).get("seconds"))


def _areas_env(root: str, runtime, part) -> dict[str, str]:
    """The environment of an item's subprocess: the runtime's areas as launch sets them, and its job's own."""
    env = {**os.environ, **dict(part.job.get("env", {}))}
    for area in runtime.areas:
        fam = family_for_area(area)
        env.update(dict(fam.launch_env(root)))
        fam.workspace(root)
    return env


class Started:
    """Commands started side by side, each in its own session, its output in files of a locked scratch folder in
    TMPDIR (nothing waits on a pipe while the parent is busy elsewhere); ``collect`` waits for each and gives its
    report (its last stdout line, JSON) or why it failed (its exit code, then everything it printed); ``stop``
    kills what still runs with its session (lifeline.kill_job) and removes the folder. Each command ends with this
    process however it dies (it calls lifeline.end_with_warm) and holds the folder's lock until it has, so a later
    run removes the folder a killed one left only when nothing of it runs. ``in_scratch``: variables pointed at a
    folder of that name inside it (SGLang's own cache of a graph's parts). ``nice``: each command's CPU priority
    lowered by that much (host/lifeline.py lowered)."""

    def __init__(self, argvs: list[list[str]], env: dict[str, str], in_scratch: tuple[str, ...] = (), nice: int = 0):
        self.tmp = scratch.run_dir("dgprecompile-items-")
        self.procs: list[subprocess.Popen] = []
        env = {**env, lifeline.WARM_PID_ENV: str(os.getpid())}
        for name in in_scratch:
            (self.tmp / name.lower()).mkdir()
            env[name] = str(self.tmp / name.lower())
        try:
            for i, argv in enumerate(argvs):
                with open(self.tmp / f"item-{i}.out", "wb") as out, open(self.tmp / f"item-{i}.log", "wb") as log:
                    self.procs.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=log,
                                                       env=env, start_new_session=True,
                                                       pass_fds=scratch.lock_fds(self.tmp),
                                                       preexec_fn=lifeline.lowered(nice)))
        except BaseException:
            self.stop()
            raise

    def collect(self) -> list[tuple[dict[str, Any] | None, str | None]]:
        import json

        out = []
        for i, proc in enumerate(self.procs):
            proc.wait()
            text = (self.tmp / f"item-{i}.out").read_text(errors="replace").strip()
            if proc.returncode != 0:
                printed = (self.tmp / f"item-{i}.log").read_text(errors="replace").strip() or "no output"
                out.append((None, f"exited with code {proc.returncode}:\n{printed}"))
            else:
                out.append((json.loads(text.splitlines()[-1]), None))
        return out

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                lifeline.kill_job(proc.pid)  # its session: FlashInfer's ninja runs each nvcc in a group of its own
                proc.wait()
        scratch.release(self.tmp)
