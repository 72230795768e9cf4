"""warm's share for the runtimes whose items are built by subprocesses writing the runtime's own cache:
SGLang's torch.compile graphs (runtimes/inductor.py, on the job's GPU kind, after the pool) and FlashInfer's JIT
modules (runtimes/flashinfer.py, GPU-free: started beside the pool, collected after it and after the graphs).
Prepared with the other runtimes' parts (warm_setup's PREPARE, which asks :func:`gpu_problem` where a runtime needs a
GPU).

Graph items run one after another, each as ``parts`` subprocesses side by side (the runtime's ``warm_argv`` plus
``--part i/n`` where it splits an item: ``parts`` > 1), so that what appeared in the runtime's areas during an item
is that item's: its whole new entries are filed in the index (``extra``, by warm) and its record written in the
runtime's index section (cache/item_records.py). A runtime that names each item's entry itself (``entry_of``:
FlashInfer) has all its items built side by side (:func:`start_side_by_side`), each filed by that name. No
threads: subprocesses in their own sessions, their output in files, read once each has ended (each prints one line
of JSON last).
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
    """Run the item's subprocesses with the runtime's areas set up as launch sets them, file what appeared, write
    its record: what the subprocesses reported (``record`` of the first report, each runtime's own fields), its
    entries and the seconds they took."""
    runtime = part.runtime
    root = str(setup.store.root)
    env = _areas_env(root, runtime, part)
    before = records.snapshot(root, runtime.areas)
    parts = max(1, min(runtime.parts, (setup.budget or setup.workers) - reserved))
    reports = run_parts(runtime.warm_argv(item, root, part.job["python"]), env, parts)
    new = records.appeared(root, before)
    filed, broken = records.file_entries(setup.store, new)
    if broken or not filed:
        raise CompileFailed(f"{item.id}: " + (f"entries not whole: {', '.join(broken[:3])}" if broken
                                                  else "its build made nothing new in the cache"))
    record = {"item": item.id, **reports[0]["record"], "entries": filed,
              "seconds": round(sum(float(r.get("seconds") or 0) for r in reports), 2)}
    if "graphs" in record:  # inductor: the graphs every part compiled
        record["graphs"] = sum(int(r["record"].get("graphs", 0)) for r in reports)
    setup.store.update_index(lambda index: records.records(index, runtime).__setitem__(item.id, record))
    return record


def start_side_by_side(setup, part, on_event, result) -> SideBySide | None:
    """Start the subprocess of every pending item of a part whose runtime names each item's entry (FlashInfer's
    module directories) at once, the --jobs budget shared among them (MAX_JOBS each); None where none is pending.
    warm starts FlashInfer's before its pool (they are GPU-free and its longest builds) and finishes them after
    the pool and the graphs (compile/warm.py AFTER_POOL)."""
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
    folder of that name inside it (SGLang's own cache of a graph's parts)."""

    def __init__(self, argvs: list[list[str]], env: dict[str, str], in_scratch: tuple[str, ...] = ()):
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
                                                       pass_fds=scratch.lock_fds(self.tmp)))
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


def run_each(argvs: list[list[str]], env: dict[str, str], in_scratch: tuple[str, ...] = ()
             ) -> list[tuple[dict[str, Any] | None, str | None]]:
    """Every command side by side (:class:`Started`), waited for; an interrupt stops them all."""
    started = Started(argvs, env, in_scratch)
    try:
        return started.collect()
    finally:
        started.stop()


def run_parts(argv: list[str], env: dict[str, str], parts: int) -> list[dict[str, Any]]:
    """The item's parts side by side (:func:`run_each`); their reports, or one error naming the first that failed.
    SGLang's own cache (its compiled functions' other files) goes to a scratch folder of this run."""
    outcomes = run_each([[*argv, *(["--part", f"{i}/{parts}"] if parts > 1 else [])] for i in range(parts)], env,
                        in_scratch=("SGLANG_CACHE_DIR",))
    for i, (_, error) in enumerate(outcomes):
        if error is not None:
            raise CompileFailed(f"python -m {argv[2]} part {i}/{parts} {error}")
    return [report for report, _ in outcomes]
