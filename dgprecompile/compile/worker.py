"""Warm worker processes: each compiles kernels one after another in its main thread.

warm starts ``python -m dgprecompile.compile.worker JOB.json --zygote``: one process that imports the heavy libraries
of every backend of the job (torch, the legacy JIT DeepGEMM itself, SGLang's JIT builders) once, without touching
CUDA, and then forks the workers, so N workers do not each pay that import. Every worker serves every backend of
the job; it reads the items to compile from its stdin, one JSON line each naming its backend, as the parent hands
them out, and reports JSON lines on its stdout; anything the libraries print goes to its log.
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


class _Stop(BaseException):
    """Raised in a worker by SIGTERM/SIGHUP/SIGINT (or a closed event pipe), so that its cleanup runs: the compile
    in flight is killed by subprocess, a half-written index update is removed, the staging root is deleted."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _reap_tree(grace: float = 5.0) -> None:
    """Stop this worker's compiler processes (its process group) and wait for every one of them, so no nvcc,
    cicc or ptxas outlives it or is left defunct (the worker is their subreaper: orphans come back to it)."""
    if os.getpgrp() != os.getpid():  # not a forked worker leading its own group: never signal someone else's
        return
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    try:
        os.killpg(0, signal.SIGTERM)
    except OSError:
        pass
    deadline = time.monotonic() + grace
    killed = False
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            if not killed and time.monotonic() > deadline:
                try:
                    os.killpg(0, signal.SIGKILL)
                except OSError:
                    pass
                killed = True
            time.sleep(0.02)


def _on_signal(signum, _frame) -> None:
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    raise _Stop(signum)


def _no_space(exc: BaseException, text: str, job: dict) -> tuple[str, bool] | None:
    """A message naming the full filesystem if ``exc`` (or the compiler's output in ``text``) says it ran out of
    space or quota, and whether that filesystem is TMPDIR's (the compilers' scratch) rather than the cache's; else
    None."""
    import errno

    from dgprecompile.fsutil import NO_SPACE_ERRNOS, free_bytes, space_message

    code = getattr(exc, "errno", None)
    if code not in NO_SPACE_ERRNOS:
        if "No space left on device" in text:
            code = errno.ENOSPC
        elif "Disk quota exceeded" in text:
            code = errno.EDQUOT
        else:
            try:  # the compiler may say only "write error" or leave a cut-short cubin: look at the filesystem
                need = int(job.get("bytes_per_entry") or 0)
                if min(free_bytes(job["cache_dir"]), free_bytes(os.environ.get("TMPDIR") or "/tmp")) >= need:
                    return None
            except OSError:
                return None
            code = errno.ENOSPC
    where = job["cache_dir"]
    tmp = os.environ.get("TMPDIR") or "/tmp"
    try:  # nvcc's intermediates live in TMPDIR: name that filesystem when it is the full one
        if free_bytes(where) >= 2 * int(job.get("bytes_per_entry") or 0) and free_bytes(tmp) < free_bytes(where):
            where = tmp
    except OSError:
        pass
    return space_message(where, code, doing="compiling")[0], where == tmp


STARTUP_MARK = "dgprecompile-startup-failure: "


def startup_summary(backend: str, exc: BaseException) -> str:
    """One line saying what failed when a worker (or the zygote) set up its backend: the exception's own first
    line, cut short; the whole traceback stays in the log."""
    from dgprecompile.errors import DGError

    what = exc.message if isinstance(exc, DGError) else f"{type(exc).__name__}: {exc}"
    what = (what.strip().splitlines() or [type(exc).__name__])[0]
    what = what if len(what) <= 240 else what[:237] + "..."
    return f"the {backend} workers could not set up their libraries ({what})"


def startup_failure(log_path) -> str:
    """The one-line summary a zygote that could not start wrote to its log (else the log's last line)."""
    try:
        lines = open(log_path, errors="replace").read().strip().splitlines()
    except OSError:
        lines = []
    marked = [line[len(STARTUP_MARK):] for line in lines if line.startswith(STARTUP_MARK)]
    if marked:
        return marked[-1]
    last = lines[-1] if lines else "no output"
    return f"the warm workers could not start ({last[:240]})"


def serve(job: dict) -> int:
    """One worker: set up each backend of the job, then compile what arrives on stdin until it closes.

    Each line names the backend that builds it ({"backend": NAME, "item": a WorkItem or ModuleWork}); a backend that cannot be
    set up is reported as ``fatal`` (with its name) and the worker serves the others; ``ready`` lists those it
    serves. Exit 3 when it serves none, 1 when an item failed."""
    event_fd = os.dup(1)
    os.dup2(2, 1)  # library prints must not mix with our events
    events = os.fdopen(event_fd, "w", buffering=1)

    def emit(**event) -> None:
        try:
            events.write(json.dumps(event) + "\n")
        except (BrokenPipeError, ValueError):  # warm is gone (stopped or killed): stop quietly, no traceback
            raise _Stop(signal.SIGPIPE) from None

    from dgprecompile.cache.store import CacheStore
    from dgprecompile.compile.backends import work_from

    backends = _set_up(job, emit)
    if not backends:
        return 3
    store = CacheStore(job["cache_dir"])
    failures = 0
    emit(event="ready", kinds=sorted(backends))
    try:
        # the parent hands out one item at a time on stdin (so shares stay disjoint and balanced)
        for line in sys.stdin:
            if not line.strip():
                continue
            message = json.loads(line)
            kind = message["backend"]
            item = work_from(kind, message["item"])
            emit(event="start", kernel=item.kernel, t=time.time())
            own = {**job["backends"][kind], "log_from": _log_offset()}
            failures += not _compile_one(backends[kind], store, item, own, emit)
    finally:
        for backend in backends.values():
            close = getattr(backend, "close", None)
            if close:
                close()
    return 1 if failures else 0


def _set_up(job: dict, emit) -> dict:
    """Every backend of ``job`` that can be set up here, by name; ``fatal`` for each one that cannot (the zygote
    put its preload failure in ``job["unavailable"]``)."""
    from dgprecompile.compile.backends.workers import load_worker_backend
    from dgprecompile.errors import DGError

    for kind, why in job.get("unavailable", {}).items():
        emit(event="fatal", kind=kind, error=why)
    backends = {}
    for kind, own in job["backends"].items():
        try:
            backends[kind] = load_worker_backend(kind, own)
        except Exception as exc:  # a broken install (importable, failing on use): one line, the traceback in the log
            if not isinstance(exc, DGError):
                traceback.print_exc()
            emit(event="fatal", kind=kind, error=startup_summary(kind, exc))
    return backends


def _compile_one(backend, store, item, job: dict, emit) -> bool:
    """Build ``item`` with ``backend``, record it in the index, report done or failed; False when it failed."""
    from dgprecompile.errors import DGError
    from dgprecompile.fsutil import os_error

    built: tuple | None = None  # (entries, seconds) once the compiled entries are installed
    try:
        status, entries, seconds = backend.compile(item)
        if status in ("compiled", "replaced"):
            built = (entries, seconds)
        # a bad or changed entry (empty cubin, other bytes than recorded, a link) was rebuilt and swapped
        replaced = status == "replaced"
        why = getattr(backend, "replaced_why", None) if replaced else None
        status = "compiled" if replaced else status
        area, skip = getattr(backend, "area", "cache"), getattr(backend, "skip_files", ())
        # "adopted": built afresh, and the entry there had exactly the fresh build's bytes; so it is vouched for
        # as much as a compiled one. "cached" (no build) files an entry the index did not record as "adopted"
        built_here = status in ("compiled", "adopted")
        records = [store.record_entry(e, seconds if built_here else None, "warm" if built_here else "adopted",
                                      area, skip)
                   for e in entries]
        if status == "adopted":
            status = "cached"

        def mutate(index, kernel=item.kernel, records=records, status=status):
            def keep(old, new):  # an entry found as recorded keeps its record (who built it, how long)
                same = old is not None and (old.entry, old.files, old.area) == (new.entry, new.files, new.area)
                return old if same and status == "cached" and (old.by != "adopted" or new.by == "adopted") else new

            index.kernels[kernel] = keep(index.kernels.get(kernel), records[0])
            for extra in records[1:]:
                index.extra[extra.entry] = keep(index.extra.get(extra.entry), extra)

        own = getattr(backend, "index_mutation", None)  # the sweep backend records m ranges instead
        store.update_index(own(item, records) if own else mutate)
    except (DGError, Exception) as exc:  # report it with the kernel's name, go on with the rest
        if isinstance(exc, PermissionError):  # a file of the cache this user may not read or write
            exc = os_error(exc, "use")
        text = exc.message if isinstance(exc, DGError) else f"{type(exc).__name__}: {exc}"
        full = _no_space(exc, text, job)
        if full and built:  # installed whole, then no room to record it: it counts as compiled
            emit(event="done", kernel=item.kernel, status="compiled", entries=built[0], seconds=built[1],
                 replaced=False, unindexed=True, error=full[0], no_space=True, no_space_tmpdir=full[1])
            return True
        if full:
            emit(event="failed", kernel=item.kernel, error=full[0], no_space=True, no_space_tmpdir=full[1])
        else:
            _failed(item.kernel, text if isinstance(exc, DGError) else f"{text}\n{traceback.format_exc(limit=3)}",
                    job, emit)
        return False
    emit(event="done", kernel=item.kernel, status=status, entries=entries, seconds=seconds, replaced=replaced,
         why=why)
    return True


def _log_offset() -> int | None:
    """Where this worker's log (its stderr: what the libraries and compilers print) ends now; None: not a file."""
    try:
        sys.stderr.flush()
        return os.lseek(2, 0, os.SEEK_END)
    except (OSError, ValueError):
        return None


def _log_since(offset: int | None, cap: int = 1 << 20) -> str:
    """What this worker's log got since ``offset`` (the item's build: its compiler's output), at most ``cap`` bytes."""
    if offset is None:
        return ""
    try:
        sys.stderr.flush()
        return os.pread(2, cap, offset).decode(errors="replace")
    except (OSError, ValueError):
        return ""


def _failed(kernel: str, text: str, job: dict, emit) -> None:
    """Report ``kernel`` failed: its first error lines, the whole of what it printed kept in the cache's log folder
    (compile/build_log.py), a hint for a known cause."""
    from dgprecompile.compile.build_log import describe

    printed = _log_since(job.get("log_from"))
    failure = describe(text + ("\n" + printed if printed.strip() else ""), job.get("cache_dir"), kernel,
                       job.get("release"))
    emit(event="failed", kernel=kernel, error=text, **failure.event())


LIFELINE_ENV = "DGPRECOMPILE_WARM_LIFELINE"  # read end of a pipe only warm writes to (never): EOF = warm is gone
WARM_GONE = signal.SIGUSR1  # the zygote's parent-death signal: its warm died (SIGKILL included)


def _end_everything(_signum=None, _frame=None) -> None:
    """The zygote, once its warm is gone: SIGKILL every worker's process group (the worker and its nvcc, cicc,
    ptxas) and every other process below (the zygote is their subreaper), reap them, and exit. Nothing is
    installed after the warm died: the workers die before their next rename, and check before it (lifeline)."""
    from dgprecompile.host.procfs import descendants

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, WARM_GONE):
        signal.signal(sig, signal.SIG_IGN)
    me = os.getpid()
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:
        found = descendants(me)
        if not found:
            break
        for st in found:
            try:
                if st.pgid not in (me, os.getpgrp()):  # a worker's group: the worker and its compilers at once
                    os.killpg(st.pgid, signal.SIGKILL)
                os.kill(st.pid, signal.SIGKILL)
            except OSError:
                pass
        _reap_all()
        time.sleep(0.02)
    _reap_all()
    os._exit(128 + signal.SIGKILL)


def _reap_all() -> None:
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                return
        except ChildProcessError:
            return


def _bind_zygote_to_warm() -> None:
    """The zygote dies with its warm: the parent-death signal ends every worker; a warm already gone ends it now."""
    from dgprecompile.host import lifeline

    lifeline.set_subreaper()  # a dead worker's compilers come to us, to be ended with the rest
    signal.signal(WARM_GONE, _end_everything)
    lifeline.set_parent_death_signal(WARM_GONE)
    fd = os.environ.get(LIFELINE_ENV)
    lifeline.bind_parents(os.getppid(), int(fd) if fd else None)
    if not lifeline.parents_alive():  # warm died before the signal was armed
        _end_everything()


def _refuse_inside_strict_launch() -> None:
    from dgprecompile.host import lifeline

    why = lifeline.inside_strict_launch()
    if why:
        print(STARTUP_MARK + f"strict mode: {why}; warm does not compile inside it", file=sys.stderr, flush=True)
        raise SystemExit(3)


def zygote(job: dict, workers: list[dict]) -> int:
    """Import once, fork one worker per entry of ``workers`` ({in_fd, out_fd, log, gpu}), report their exits.

    The first ``job["early_workers"]`` are forked before the import and serve only the backends that need none
    (no zygote preload: e.g. nvcc), so that they compile while the others' libraries are imported; warm's
    scheduler keeps all of them within one budget."""
    from dgprecompile.runtimes import get_backend

    _bind_zygote_to_warm()
    own_fds = {fd for w in workers for fd in (w["in_fd"], w["out_fd"])}
    children: dict[int, int] = {}
    out = os.fdopen(os.dup(1), "w", buffering=1)
    early = int(job.get("early_workers") or 0)
    light = {**job, "backends": {k: v for k, v in job["backends"].items() if not get_backend(k).preload}}
    _fork(light, workers[:early], 0, own_fds, children, out)
    t0 = time.monotonic()
    _preload(job)  # no CUDA here: children initialise their own device after the fork
    _tell(out, {"event": "preloaded", "worker": -1, "seconds": round(time.monotonic() - t0, 2)})
    _fork(job, workers[early:], early, own_fds, children, out)
    for fd in own_fds:
        os.close(fd)

    def stop(signum, _frame):
        for pid in list(children):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, stop)
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
        _tell(out, {"event": "exit", "worker": i, "code": code})
    return worst


def _fork(job: dict, workers: list[dict], first: int, own_fds: set[int], children: dict[int, int], out) -> None:
    """Fork a worker for each of ``workers`` (numbered from ``first``) serving ``job``'s backends."""
    for i, w in enumerate(workers, first):
        zygote_pid = os.getpid()
        pid = os.fork()
        if pid == 0:
            _child(job, w, own_fds, zygote_pid)
        children[pid] = i
        _tell(out, {"event": "spawned", "worker": i, "pid": pid})


def _preload(job: dict) -> None:
    """Each backend's imports, once. One that fails (a DGError, or a broken install that raises anything: the
    traceback goes to the zygote's log) is left out of ``job["backends"]`` and its one-line reason put in
    ``job["unavailable"]`` for the workers to report; when every one fails the zygote fails, its reason marked in
    the log for warm (:func:`startup_failure`)."""
    from dgprecompile.compile.backends.workers import preload

    failed: dict[str, str] = {}
    for kind, own in list(job["backends"].items()):
        try:
            preload(kind, own)
        except Exception as exc:  # e.g. sglang importable but broken
            traceback.print_exc()
            failed[kind] = startup_summary(kind, exc)
    if failed and len(failed) == len(job["backends"]):
        print(STARTUP_MARK + next(iter(failed.values())), file=sys.stderr, flush=True)
        raise SystemExit(3)
    for kind, why in failed.items():
        del job["backends"][kind]
        job.setdefault("unavailable", {})[kind] = why


def _child(job: dict, w: dict, own_fds: set[int], zygote_pid: int) -> None:
    """The forked worker: its own process group and pipes, then :func:`serve`; never returns."""
    _bind_worker_to_zygote(zygote_pid)
    # its own process group, and the subreaper of everything it starts: stopping it stops its nvcc tree
    os.setpgid(0, 0)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, _on_signal)
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
    except _Stop as stop:
        code = 128 + stop.signum
    finally:
        _reap_tree()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _bind_worker_to_zygote(zygote_pid: int) -> None:
    """A worker dies with the zygote (SIGKILL: its warm is gone or it was killed) and never installs an entry once
    the zygote or the warm above it has died (checked before each rename into the cache)."""
    from dgprecompile.cache import store
    from dgprecompile.host import lifeline

    lifeline.set_parent_death_signal(signal.SIGKILL)
    fd = os.environ.get(LIFELINE_ENV)
    lifeline.bind_parents(zygote_pid, int(fd) if fd else None)
    if not lifeline.parents_alive():
        os._exit(128 + signal.SIGKILL)
    store.INSTALL_CHECKS.append(lambda: None if lifeline.parents_alive() else "its warm process is gone")
    lifeline.set_subreaper()


def _tell(out, event: dict) -> None:
    try:
        out.write(json.dumps(event) + "\n")
    except (BrokenPipeError, ValueError):  # warm stopped reading: keep reaping the workers all the same
        pass


def main(argv: list[str]) -> int:
    with open(argv[0]) as f:
        job = json.load(f)
    _refuse_inside_strict_launch()  # a worker started by hand inside a strict job compiles nothing either
    if "--zygote" in argv:
        return zygote(job, json.loads(os.environ["DGPRECOMPILE_WORKERS"]))
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGHUP, _on_signal)
    try:
        return serve(job)
    except _Stop as stop:
        _reap_tree()
        return 128 + stop.signum


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
