"""Warm worker processes: each compiles kernels one after another in its main thread.

warm starts ``python -m dgprecompile.compile.worker JOB.json --zygote``: one process that imports the heavy libraries
(torch, and for the legacy JIT DeepGEMM itself) once, without touching CUDA, and then forks the workers, so N
workers do not each pay that import. Each worker reads the kernels to compile from its stdin, one JSON line each,
as the parent hands them out, and reports JSON lines on its stdout; anything the libraries print goes to its log.
The zygote reports each worker's pid and exit status on its own stdout.
No thread pools, no queues with feeder threads: the only concurrency is between worker processes.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import traceback


def serve(job: dict) -> int:
    """One worker: set up the backend, then compile what arrives on stdin until it closes."""
    event_fd = os.dup(1)
    os.dup2(2, 1)  # library prints must not mix with our events
    events = os.fdopen(event_fd, "w", buffering=1)

    def emit(**event) -> None:
        events.write(json.dumps(event) + "\n")

    from dgprecompile.cache.store import CacheStore
    from dgprecompile.compile.backends import WorkItem, load_worker_backend
    from dgprecompile.errors import DGError

    try:
        backend = load_worker_backend(job["backend"], job)
    except DGError as exc:
        emit(event="fatal", error=exc.message)
        return 3
    store = CacheStore(job["cache_dir"])
    failures = 0
    emit(event="ready")
    try:
        # the parent hands out one kernel at a time on stdin (so shares stay disjoint and balanced)
        for line in sys.stdin:
            if not line.strip():
                continue
            item = WorkItem(**json.loads(line))
            emit(event="start", kernel=item.kernel, t=time.time())
            try:
                status, entries, seconds = backend.compile(item)
            except DGError as exc:
                failures += 1
                emit(event="failed", kernel=item.kernel, error=exc.message)
                continue
            except Exception as exc:  # a library error: report it with the kernel's name, go on with the rest
                failures += 1
                emit(event="failed", kernel=item.kernel,
                     error=f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}")
                continue
            records = [store.record_entry(e, seconds if status == "compiled" else None,
                                          "warm" if status == "compiled" else "adopted") for e in entries]
            if status == "adopted":
                status = "cached"

            def mutate(index, kernel=item.kernel, records=records):
                index.kernels[kernel] = records[0]
                for extra in records[1:]:
                    index.extra[extra.entry] = extra

            store.update_index(mutate)
            emit(event="done", kernel=item.kernel, status=status, entries=entries, seconds=seconds)
    finally:
        close = getattr(backend, "close", None)
        if close:
            close()
    return 1 if failures else 0


def _die_with_parent() -> None:
    """Linux: get SIGTERM when the zygote dies, so no worker outlives an interrupted warm."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def zygote(job: dict, workers: list[dict]) -> int:
    """Import once, fork one worker per entry of ``workers`` ({in_fd, out_fd, log, gpu}), report their exits."""
    from dgprecompile.compile.backends import preload

    preload(job["backend"])  # no CUDA here: children initialise their own device after the fork
    own_fds = {fd for w in workers for fd in (w["in_fd"], w["out_fd"])}
    children: dict[int, int] = {}
    out = os.fdopen(os.dup(1), "w", buffering=1)
    for i, w in enumerate(workers):
        pid = os.fork()
        if pid == 0:
            _die_with_parent()
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.dup2(w["in_fd"], 0)
            os.dup2(w["out_fd"], 1)
            log = os.open(w["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(log, 2)
            os.close(log)
            for fd in own_fds:
                os.close(fd)
            if w.get("gpu") is not None:
                os.environ["CUDA_VISIBLE_DEVICES"] = str(w["gpu"])
            sys.stdin = os.fdopen(0, "r")
            sys.stdout = os.fdopen(1, "w", buffering=1)
            sys.stderr = os.fdopen(2, "w", buffering=1)
            code = 1
            try:
                code = serve(job)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        children[pid] = i
        out.write(json.dumps({"event": "spawned", "worker": i, "pid": pid}) + "\n")
    for fd in own_fds:
        os.close(fd)

    def stop(signum, _frame):
        for pid in list(children):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    worst = 0
    while children:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        i = children.pop(pid, None)
        if i is None:
            continue
        code = os.waitstatus_to_exitcode(status)
        worst = max(worst, 1 if code else 0)
        out.write(json.dumps({"event": "exit", "worker": i, "code": code}) + "\n")
    return worst


def main(argv: list[str]) -> int:
    with open(argv[0]) as f:
        job = json.load(f)
    if "--zygote" in argv:
        return zygote(job, json.loads(os.environ["DGPRECOMPILE_WORKERS"]))
    return serve(job)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
