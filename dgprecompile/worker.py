"""A warm worker process: compiles its share of kernels one after another in its main thread.

Started by warm as ``python -m dgprecompile.worker JOB.json``. It reads the kernels to compile from stdin, one
JSON line each, as the parent hands them out, and reports JSON lines on its original stdout; anything the
libraries print goes to stderr (the parent keeps it as the worker's log).
No thread pools, no queues with feeder threads: the only concurrency is between worker processes.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback


def main(job_path: str) -> int:
    event_fd = os.dup(1)
    os.dup2(2, 1)  # library prints must not mix with our events
    events = os.fdopen(event_fd, "w", buffering=1)

    def emit(**event) -> None:
        events.write(json.dumps(event) + "\n")

    with open(job_path) as f:
        job = json.load(f)
    from dgprecompile.backends import WorkItem, load_worker_backend
    from dgprecompile.cachestore import CacheStore
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


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
