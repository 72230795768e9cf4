"""Process lifetimes on Linux: who reaps orphans, who dies with its parent, and whether a strict launch is above us.

`launch` runs its job under a supervisor process that is a child subreaper (PR_SET_CHILD_SUBREAPER): whatever the
job starts, setsid'd and double-forked processes included, stays its descendant, so the supervisor can end all of
it. The supervisor names itself (PR_SET_NAME) ``dgp-strict`` in a strict launch; a process can rename only its
own threads, so a job cannot rename it, and :func:`strict_launch_above` finds it by walking the parent chain,
which the job cannot change either (an orphan is re-parented to the supervisor itself).

`warm`'s zygote, workers and the subprocesses it starts in sessions of their own die with their parent
(PR_SET_PDEATHSIG; :func:`end_with_warm`), and a worker checks that its parent is still the zygote and that warm
still holds the pipe it watches (:func:`bind_parents`, :func:`parents_alive`) before it installs an entry.
Everything here is a no-op where prctl is not available.
"""

from __future__ import annotations

import os

PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15
PR_SET_CHILD_SUBREAPER = 36
WARM_PID_ENV = "DGPRECOMPILE_WARM_PID"  # set for the subprocesses warm starts in sessions of their own: its pid
STRICT_SUPERVISOR = "dgp-strict"  # the comm of a strict launch's supervisor (15 bytes at most)
SUPERVISOR = "dgp-launch"  # ... of a non-strict one


def _prctl(option: int, value: int | bytes) -> bool:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def set_subreaper() -> bool:
    """Orphans of this process's descendants are re-parented to it (not to init)."""
    return _prctl(PR_SET_CHILD_SUBREAPER, 1)


def set_parent_death_signal(signum: int) -> bool:
    """Get ``signum`` when the parent (the thread that forked us) dies."""
    return _prctl(PR_SET_PDEATHSIG, signum)


def kill_job(root: int, spare: int | None = None, seconds: float = 2.0) -> None:
    """SIGKILL every process of the job started as ``root`` in a session of its own (procfs.job_processes: its
    descendants, its session, its group; ninja, for one, runs each command in a process group of its own) but
    ``spare``, pass after pass until a pass finds none or ``seconds`` have gone: one started meanwhile is found
    in the next pass (it stays in the session, or below one found)."""
    import signal
    import time

    from dgprecompile.host.procfs import job_processes

    deadline = time.monotonic() + seconds
    while True:
        found = [st.pid for st in job_processes(root) if st.pid != spare and st.state != "Z"]
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if not found or time.monotonic() >= deadline:
            return
        time.sleep(0.01)


def end_job_with_parent(parent: int) -> None:
    """For a process that leads a session of its own: when ``parent`` (its parent's pid) dies, however it dies,
    SIGKILL everything it started (:func:`kill_job`: the compilers it runs, whatever process group they are in),
    then end; a SIGTERM does the same. Where ``parent`` is gone already, now."""
    import signal

    def end(_signum=None, _frame=None) -> None:
        if os.getsid(0) == os.getpid():
            kill_job(os.getpid(), spare=os.getpid())
        os._exit(128 + signal.SIGTERM)

    signal.signal(signal.SIGTERM, end)
    set_parent_death_signal(signal.SIGTERM)
    if os.getppid() != parent:  # it died before the signal was armed
        end()


def end_with_warm() -> None:
    """In a subprocess warm started in a session of its own (a Triton MoE chunk, a FlashInfer module's build, a
    graph's part: :data:`WARM_PID_ENV` set to warm's pid): end with warm (:func:`end_job_with_parent`). The
    variable is taken out of the environment, so nothing this process starts takes warm for its own parent."""
    warm = os.environ.pop(WARM_PID_ENV, None)
    if warm:
        end_job_with_parent(int(warm))


def lowered(by: int):
    """A ``preexec_fn`` for subprocess.Popen that lowers the child's CPU priority by ``by`` nice steps before it
    runs anything (what it starts inherits it), or None for ``by`` 0: warm starts the builds its longest ones must
    not wait for so. Warm's parent runs no threads, which is what makes a preexec_fn safe there."""
    if by <= 0:
        return None

    def lower() -> None:
        os.nice(by)

    return lower


def set_name(name: str) -> bool:
    """This process's command name (/proc/PID/comm, what ps shows), at most 15 bytes."""
    return _prctl(PR_SET_NAME, name.encode()[:15])


def _stat(pid: int | str) -> tuple[str, int] | None:
    """(comm, ppid) of ``pid`` ("self": this process), or None when it is gone or unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
    except OSError:
        return None
    return stat[stat.find("(") + 1:stat.rfind(")")], int(stat[stat.rfind(")") + 2:].split()[1])


def strict_launch_above() -> int | None:
    """The pid (as /proc numbers it) of a strict launch's supervisor among this process's ancestors, else None.
    The walk starts at /proc/self, not at os.getpid(): in a PID namespace whose /proc is the outer one's, the
    two number processes differently."""
    stat = _stat("self")
    seen = set()
    while stat is not None and stat[1] > 1 and stat[1] not in seen:
        pid = stat[1]
        seen.add(pid)
        stat = _stat(pid)
        if stat is not None and stat[0] == STRICT_SUPERVISOR:
            return pid
    return None


def inside_strict_launch() -> str | None:
    """Why this process runs inside a strict `dgprecompile launch` (its supervisor above it, or the launch's
    variables), else None. The ancestry is the part a job cannot switch off; the variables catch a job that ran
    in a PID namespace of its own, where the ancestors outside are not visible."""
    above = strict_launch_above()
    if above is not None:
        return f"a strict `dgprecompile launch` (its supervisor, pid {above}) runs this process"
    if os.environ.get("DGPRECOMPILE_STRICT") == "1":
        return "DGPRECOMPILE_STRICT=1: a strict `dgprecompile launch` started this process"
    return None


_bound: dict[str, int] = {}


def bind_parents(parent: int, lifeline_fd: int | None = None) -> None:
    """Remember this process's parent and, optionally, the read end of a pipe whose only write end a process
    further up holds (it is never written: end of file means that process is gone); see :func:`parents_alive`.
    A pipe rather than /proc: it needs no PID, which a PID namespace would number differently."""
    _bound.clear()
    _bound["parent"] = parent
    if lifeline_fd is not None:
        _bound["fd"] = lifeline_fd


def parents_alive() -> bool:
    """False once the bound parent has died (we were re-parented) or the lifeline pipe reached end of file."""
    import select

    if "parent" in _bound and os.getppid() != _bound["parent"]:
        return False
    if "fd" in _bound:
        try:
            return not select.select([_bound["fd"]], [], [], 0)[0]
        except (OSError, ValueError):
            return False
    return True


def refuse_inside_strict_launch(command: str) -> None:
    """Raise (exit 1) when ``command`` (a `dgprecompile warm`, a non-strict launch) runs inside a strict launch:
    it would compile while the strict job runs. The refusal is logged where that launch reads its refusals, if
    the job left that variable alone (its after-run checks catch the rest)."""
    import json
    import time

    from dgprecompile.errors import CheckFailed

    why = inside_strict_launch()
    if why is None:
        return
    events = os.environ.get("DGPRECOMPILE_EVENTS")
    if events:
        try:
            with open(events, "a") as f:
                f.write(json.dumps({"event": "refused", "generation": "dgprecompile", "kernel": command,
                                    "entry": None, "pid": os.getpid(), "time": time.time()}) + "\n")
        except OSError:
            pass
    raise CheckFailed(f"strict mode: {why}, and `{command}` would compile during it; refused",
                      hint="warm before the launch, or launch the job with --no-strict to let it compile")
