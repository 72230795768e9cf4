"""warm's process pool: one zygote, its forked workers and the Triton MoE chunks' subprocesses, driven by the
scheduler.

The parent hands the items out one at a time, costliest first, to whichever worker is free; each worker compiles
in its main thread and reports events on a pipe, which the parent reads through one selector (no thread). Who gets
what, who is blamed for a failure and when to stop is compile/schedule.py's pure state machine; this module only
moves the bytes. An interrupt stops the workers, the zygote and the chunks, and their compilers with them.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dgprecompile.compile.backends import ModuleWork, WorkItem
from dgprecompile.compile.schedule import NO_SPACE, Action, Close, Lost, Scheduler, Send
from dgprecompile.compile.triton_chunks import Chunk, ChunkedItem
from dgprecompile.compile.warm_result import WarmResult, record_event
from dgprecompile.compile.warm_setup import WarmSetup, work, worker_job
from dgprecompile.compile.worker import startup_failure
from dgprecompile.errors import CompileFailed
from dgprecompile.host import lifeline, scratch

TICK_SECONDS = 1.0  # how often the parent wakes without events (progress lines on a non-terminal)
WORKER_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
              "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}


def run_pool(setup: WarmSetup, on_event: Callable[[dict[str, Any]], None], result: WarmResult, start: float,
             reserved: int = 0, nice: int = 0, freed: Callable[[], int] | None = None) -> None:
    """One zygote and len(gpus) workers, each serving every backend of the workers' job, and ``setup.runners``
    slots for Triton MoE chunks (started at once, not after the zygote), all within ``setup.workers`` items at a
    time less ``reserved`` (builds running beside the pool: FlashInfer's, compile/warm.py), at least one, driven
    by the scheduler. ``nice``: how much lower the zygote's and the chunks' CPU priority is (their compilers
    inherit it) than the longest builds' beside the pool (compile/warm.py BACKGROUND_NICE). ``freed``: asked
    between events, how many of the ``reserved`` slots came free since it was last asked (builds beside the pool
    that ended: the graphs'); the pool takes them."""
    tmp = scratch.run_dir("dgprecompile-warm-")  # locked for this run; its compilers' TMPDIR is inside it
    todo, workers = work(setup), len(setup.gpus)
    procs = Processes(tmp, workers, nice)
    limit = max(1, setup.workers - reserved)
    sched = Scheduler.start([j for j, _ in todo], workers + setup.runners,
                            budget=limit if setup.runners or workers > limit else None)
    run = _Run(sched, procs, {j.id: item for j, item in todo}, result, on_event, start, setup, freed)
    try:
        if workers:
            procs.start(worker_job(setup), setup.gpus)
        chunk_kinds = sorted({p.backend for p in setup.parts if not p.in_workers})
        for slot in range(workers, workers + setup.runners):  # the chunks need no zygote: they start now
            run.apply(sched.ready(slot, chunk_kinds))
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


class Processes:
    """The I/O side of a pool: the zygote, a pipe pair per worker, one selector over their event streams."""

    def __init__(self, tmp: Path, n: int, nice: int = 0):
        self.tmp, self.nice = tmp, nice
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
        # A session of its own, so a kill of warm's process group leaves the zygote to end the workers and their
        # compilers (its parent-death signal); it holds the scratch's lock until it has, so no later run removes
        # the scratch while a compiler of this one still writes in it.
        self.zygote = subprocess.Popen(
            [sys.executable, "-m", "dgprecompile.compile.worker", str(job_path), "--zygote"],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=open(self.tmp / "zygote.log", "wb"), env=env,
            pass_fds=(*child_fds, *scratch.lock_fds(self.tmp)), start_new_session=True,
            preexec_fn=lifeline.lowered(self.nice))  # its workers and their compilers inherit it
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
        proc = start_chunk(argv, self.tmp / f"chunk-{slot}.log", env, scratch.lock_fds(self.tmp), self.nice)
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
    procs: Processes
    items: dict[str, WorkItem | ModuleWork | Chunk]
    result: WarmResult
    on_event: Callable[[dict[str, Any]], None]
    start: float
    setup: WarmSetup
    freed: Callable[[], int] | None = None  # slots held beside the pool that came free (run_pool)
    chunked: dict[str, ChunkedItem] = field(default_factory=dict)  # Triton MoE item -> its chunks so far
    chunk_started: dict[str, float] = field(default_factory=dict)
    chunk_failures: dict[str, dict[str, Any]] = field(default_factory=dict)  # chunk -> its errors, log, hint

    def __post_init__(self) -> None:
        for chunk in self.setup.chunks:
            self.chunked.setdefault(chunk.item, ChunkedItem(chunk.item, [])).chunks.append(chunk.id)

    def drive(self) -> None:
        while self.procs.open_streams:
            spoke = False
            for who, event in self.procs.events(TICK_SECONDS):
                spoke = True
                self.apply(self._zygote(event) if who == "zygote" else self._chunk_ended(who[1])
                           if isinstance(who, tuple) else self._worker(who, event))
            if self.freed is not None:
                self.apply(self.sched.widen(self.freed()))
            if not spoke:
                self.on_event({"event": "tick"})  # lets a plain (non-TTY) progress report print on time, no thread

    def _zygote(self, event: dict[str, Any] | None) -> list[Action]:
        if event is None:
            return []
        i = event["worker"]
        if event.get("event") == "preloaded":  # the zygote's imports are done: its other workers fork now
            self.result.preloaded_seconds = (time.perf_counter() - self.start, event["seconds"])
            return []
        if event.get("event") == "spawned":
            self.procs.pids[i] = event["pid"]
        elif event.get("event") == "exit":
            return self.sched.exited(i, event["code"])
        return []

    def _worker(self, w: int, event: dict[str, Any] | None) -> list[Action]:
        if event is None:
            return self.sched.stream_closed(w)
        record_event(event, self.result, self.on_event)
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

        item = self.chunked[chunk.item]
        if not item.reports and not item.failures and not any(c in self.chunk_started for c in item.chunks):
            self.on_event({"event": "start", "kernel": chunk.item})
        part = self._part_of(chunk)
        moe = next(it for it in part.items if it.id == chunk.item)
        self.chunk_started[chunk.id] = time.perf_counter()
        self.procs.start_chunk(slot, chunk_argv(moe, chunk, str(self.setup.store.root), part.job["python"]))

    def _part_of(self, chunk: Chunk):
        return next(p for p in self.setup.parts if not p.in_workers and chunk in p.work)

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
            failure = self._described(job.id, exc.message)
            self.chunk_failures[job.id] = failure.event()
            self._chunk_in(job.id, None, seconds, failure.summary)
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
            installed = self._part_of(self.items[chunk_id]).job["installed"]
            event = item.finish(self.setup.store, installed)
            first = next((c for c in item.chunks if c in item.failures), None)
            if event["event"] == "failed" and first in self.chunk_failures:
                event.update(self.chunk_failures[first])
            record_event(event, self.result, self.on_event)

    def _described(self, unit: str, text: str):
        """``unit``'s failure in the compiler's words, its log kept in the cache (compile/build_log.py)."""
        from dgprecompile.compile.build_log import describe

        return describe(text, self.setup.store.root, unit, self.setup.plan.sglang_version)

    def apply(self, actions: list[Action]) -> None:
        for action in actions:
            target = self.items[action.job.id] if isinstance(action, Send) else None
            if isinstance(action, Send):  # when each unit was handed out (the timeline's critical path)
                self.result.started[action.job.id] = time.perf_counter() - self.start
            if isinstance(target, Chunk):
                self._start_chunk(action.worker, target)
            elif isinstance(action, Send):
                message = {"backend": action.job.kind, "item": self.items[action.job.id].to_dict()}
                if not self.procs.send(action.worker, message):  # that worker is gone; its exit is reported
                    self.apply(self.sched.send_failed(action.worker))
            elif isinstance(action, Close):
                self.procs.close_input(action.worker)
            elif isinstance(action, Lost):
                failure = self._described(action.job.id, _worker_death(action.code, self.procs.logs[action.worker]))
                self._fail(action.job.id, failure.summary, details=failure.event())
            elif action.why == NO_SPACE:
                self._fail(action.job.id, "not started: " + (self.result.no_space or "no space left"),
                           "not started (no space)")
            else:
                self._fail(action.job.id, ("not started: " + self.result.fatal[-1]) if self.result.fatal
                           else "no worker left to compile it (see the errors above)")

    def _fail(self, kernel: str, why: str, shown: str | None = None, details: dict[str, Any] | None = None) -> None:
        if isinstance(self.items.get(kernel), Chunk):  # a chunk not started: its item fails with it
            if details:
                self.chunk_failures[kernel] = details
            self._chunk_in(kernel, None, failure=why)
            return
        self.result.failed[kernel] = why
        if details:
            self.result.failure_details[kernel] = details
        self.on_event({"event": "failed", "kernel": kernel, "error": shown or why, **(details or {})})


def _physical_gpu(index: int) -> str:
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env:
        devices = [d.strip() for d in env.split(",") if d.strip()]
        if index < len(devices):
            return devices[index]
    return str(index)


def _worker_death(code: int, log: Path, cap: int = 1 << 20) -> str:
    """How the worker ended, then the last ``cap`` bytes of its log (what it and its compilers printed)."""
    how = f"killed by signal {-code}" if code < 0 else f"exited with code {code}"
    try:
        with open(log, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - cap))
            printed = f.read().decode(errors="replace").strip()
    except OSError:
        printed = ""
    return f"worker {how} while compiling it" + ("\n" + printed if printed else "")


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
