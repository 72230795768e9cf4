"""The job's process tree under `launch`: started, signalled, and ended whole, even after a `kill -9` of launch.

The launcher forks a supervisor process, which becomes a child subreaper (PR_SET_CHILD_SUBREAPER) and starts the
job in a session of its own. Every process the job starts stays a descendant of the supervisor: a process whose
parent exits (a daemon's double fork, a `setsid ... &`) is re-parented to the supervisor, not to init, so reading
/proc from the supervisor down finds all of it, and nothing can leave that tree. Why a subreaper and not a scan:
a scan of the job's processes misses one that forks and exits between two looks; why not a cgroup: it needs a
writable cgroup tree, which containers and CI runners mostly do not give.

* When the job's first process ends, the supervisor gives what is left a moment to end by itself, then names it
  ("left behind": a daemon, a server the job forgot), sends it SIGTERM, SIGKILL after ``kill_grace`` seconds,
  reaps it, and reports the job's exit status and what it ended to the launcher.
* The launcher forwards SIGINT/SIGTERM/SIGHUP to every process group below the supervisor, and ``kill_grace``
  seconds after the first one SIGKILLs every process below it.
* The launcher holds the write end of a pipe the supervisor reads; end of file before the job ended means the
  launcher died (SIGKILL included): the supervisor ends every process below it the same way, then exits.

The launcher and the supervisor are single-threaded (the supervisor is a fork without exec, which is safe only
without threads). In a strict launch the supervisor names itself ``dgp-strict`` (dgprecompile.host.lifeline), which is
how a `dgprecompile warm` started inside the job knows it must not compile, whatever the job did to its
environment.
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dgprecompile.errors import InputError
from dgprecompile.host import lifeline
from dgprecompile.host.procfs import command_line, descendants, proc_stats

FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
DEFAULT_KILL_GRACE = 10.0  # seconds between the signal a launcher forwards and the SIGKILL of what is left of the job
POLL_SECONDS = 0.25  # how often the launcher looks at the job while it runs (no thread: its wait loop)
SUPERVISOR_POLL = 0.05  # how often the supervisor reaps and looks at the launcher's pipe
SETTLE_SECONDS = 1.0  # after the job's first process ended: how long the rest may take to end by itself
REAP_SECONDS = 5.0  # after a SIGKILL: how long to wait for the processes to be gone (one in D state may linger)
_PYTHON_EXE = re.compile(r"python[0-9.]*$")


@dataclass
class JobWatch:
    """What the launcher saw of the job while it ran: every Python process (pid -> its command line), which of them
    held no guard record open, the signals it forwarded, and what the supervisor ended after the job's first process
    had exited.

    Strict: the startup hook writes each process's guard record (``guard``/<pid>) and holds it open, close-on-exec,
    for the process's life; a fork inherits its parent's open record until its own is written (a Python fork) or
    until it execs (a C fork, subprocess's). So at each look a Python process holds its own record open (guarded),
    its parent's (a fork still running its parent's guarded image), or none: a new image, by exec, whether or not
    the pid is new (a process that re-executed itself keeps its pid and its old record, not the open file). Such a
    process counts as guarded only if its record was (re)written after the last look that found it so (its new
    image ran the hook). One that lives less than a look and ends can go unseen: the cache's snapshot remains."""

    scan: bool = True  # look for Python processes at all (strict mode); False: signals only
    guard: str | None = None  # strict: the folder of the guard records (launch/environment.py GUARD_DIR)
    python: dict[int, str] = field(default_factory=dict)
    # Python processes the last look found holding no guard record open -> their record's bytes then (None: none)
    unmarked: dict[int, bytes | None] = field(default_factory=dict)
    signals: list[int] = field(default_factory=list)  # signals the launcher received and forwarded
    killed: bool = False  # the grace ran out: what was left of the job got SIGKILL
    left_behind: list[str] = field(default_factory=list)  # "pid N: command" still running when the job ended
    lost: str | None = None  # the supervisor died without a report (what was found of the job was killed)

    def look(self, supervisor: int) -> None:
        if not self.scan or self.guard is None:
            return
        for st in descendants(supervisor):
            try:
                exe = os.path.basename(os.readlink(f"/proc/{st.pid}/exe"))
            except OSError:  # gone meanwhile, or not ours to read
                continue
            if not _PYTHON_EXE.match(exe):  # a fork that exec'd another program is no Python process
                self.python.pop(st.pid, None)
                self.unmarked.pop(st.pid, None)
                continue
            record = self._record(st.pid)  # before the look at its files: the hook opens its record, then writes it
            held = self._holds_record(st.pid)
            if st.pid not in self.python or not held:
                self.python[st.pid] = command_line(st.pid)
            if held:
                self.unmarked.pop(st.pid, None)
            else:  # a record there while none is held open was written by an image this one replaced
                self.unmarked[st.pid] = record

    def _holds_record(self, pid: int) -> bool:
        """Whether ``pid`` holds a guard record open: its own, or its parent's (a fork in the guarded image)."""
        prefix = os.path.realpath(str(self.guard)) + os.sep
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            return True  # gone meanwhile: judged by what was seen before
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(prefix):
                    return True
            except OSError:
                continue
        return False

    def _record(self, pid: int) -> bytes | None:
        try:
            with open(os.path.join(str(self.guard), str(pid)), "rb") as f:
                return f.read(1 << 16)
        except OSError:
            return None

    def unguarded(self) -> dict[int, str]:
        """pid -> command of each Python process a look found holding no guard record open whose record was not
        written since (ran without the hook: a cleared PYTHONPATH, `env -i`, `python -I`/`-S`, a re-exec)."""
        return {pid: self.python.get(pid, "?") for pid, seen in sorted(self.unmarked.items())
                if self._record(pid) in (None, seen)}


def find_command(name: str, env: Mapping[str, str]) -> str:
    """``name`` as the job's PATH finds it, else in the bin directory of the Python running dgprecompile (a venv's
    torchrun when the venv is not activated: `.venv/bin/dgprecompile launch -- torchrun ...`); a path as given."""
    if os.sep in name:
        return name
    return (shutil.which(name, path=env.get("PATH", os.defpath))
            or shutil.which(name, path=os.path.dirname(sys.executable)) or name)


def forward_signal(supervisor: int, signum: int) -> None:
    """Send ``signum`` to every process group below the supervisor (the job's session, torchrun's workers')."""
    skip = {os.getpgrp(), supervisor, 0, 1}
    for pgid in sorted({st.pgid for st in descendants(supervisor)} - skip):
        try:
            os.killpg(pgid, signum)
        except (ProcessLookupError, PermissionError):
            pass


def signal_tree(root: int, signum: int) -> int:
    """Send ``signum`` to every live process below ``root``; how many there were."""
    found = descendants(root)
    for st in found:
        try:
            os.kill(st.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass
    return len(found)


# ---- the supervisor (a forked process) ----------------------------------------------------------------------


def _reap(job: int) -> int | None:
    """Reap every ended child (orphans of the job come to us); the job's shell-style exit code once it ended (1
    where it is gone and its status was lost: never wait for a child that is not there)."""
    code = None
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return 1 if code is None and job > 0 else code
        if pid == 0:
            return code
        if pid == job:
            raw = os.waitstatus_to_exitcode(status)
            code = 128 - raw if raw < 0 else raw


def end_tree(grace: float, job: int = -1) -> None:
    """Supervisor: SIGTERM every process below this one, SIGKILL what is left after ``grace`` seconds, reap."""
    me = os.getpid()
    if signal_tree(me, signal.SIGTERM):
        end = time.monotonic() + grace
        while time.monotonic() < end and descendants(me):
            _reap(job)
            time.sleep(SUPERVISOR_POLL)
    end = time.monotonic() + REAP_SECONDS
    while signal_tree(me, signal.SIGKILL) and time.monotonic() < end:
        _reap(job)
        time.sleep(SUPERVISOR_POLL)
    _reap(job)


def _left_behind(job_code: int) -> list[str]:
    """Supervisor, after the job's first process ended: what is still running after a moment to end by itself."""
    me = os.getpid()
    end = time.monotonic() + SETTLE_SECONDS
    while time.monotonic() < end and descendants(me):
        _reap(-1)
        time.sleep(SUPERVISOR_POLL)
    return [f"pid {st.pid}: {command_line(st.pid)}" for st in descendants(me)]


def _supervise(argv: list[str], exe: str, env: Mapping[str, str], cwd: str | None, grace: float, name: str,
               ctl: int, status: int) -> None:
    """The supervisor's life (never returns): start the job, reap, end what it left, report on ``status``."""
    def tell(message: dict[str, Any]) -> None:
        try:
            os.write(status, (json.dumps(message) + "\n").encode())
        except OSError:
            pass

    try:
        os.setpgid(0, 0)  # a group of its own: a kill of the launcher's group leaves it to end the job
        lifeline.set_subreaper()
        lifeline.set_name(name)
        for sig in FORWARDED_SIGNALS:  # the launcher forwards; a Python handler is reset to default by exec
            signal.signal(sig, lambda *_: None)
        try:  # kept referenced: a collected Popen reaps its child itself, and the exit status would be lost
            popen = subprocess.Popen(list(argv), executable=exe, env=dict(env), cwd=cwd, start_new_session=True)
        except OSError as exc:
            tell({"error": type(exc).__name__, "why": str(exc)})
            return
        job = popen.pid
        tell({"started": job})
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1):  # the job has its own copies; do not hold a reader's pipe open
            os.dup2(null, fd)
        code = None
        while code is None:
            code = _reap(job)
            if code is None and select.select([ctl], [], [], SUPERVISOR_POLL)[0] and not os.read(ctl, 64):
                end_tree(grace, job)  # the launcher is gone (killed): nothing of the job outlives it
                return
        left = _left_behind(code)
        if left:
            end_tree(grace)
        tell({"exit": code, "left": left})
    finally:
        os._exit(0)


@dataclass
class _Supervisor:
    pid: int
    ctl: int  # write end: closed when the launcher ends (or dies)
    status: int  # read end: the supervisor's JSON lines
    buffer: bytes = b""
    job: int | None = None

    @classmethod
    def start(cls, argv: list[str], env: Mapping[str, str], cwd: str | None, grace: float,
              name: str) -> _Supervisor:
        exe = find_command(argv[0], env)
        ctl_r, ctl_w = os.pipe()
        status_r, status_w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            os.close(ctl_w)
            os.close(status_r)
            _supervise(argv, exe, env, cwd, grace, name, ctl_r, status_w)
        os.close(ctl_r)
        os.close(status_w)
        return cls(pid, ctl_w, status_r)

    def read(self, timeout: float) -> dict[str, Any] | None:
        """The next message within ``timeout`` ({} when none came; None when the supervisor is gone)."""
        if b"\n" not in self.buffer:
            if not select.select([self.status], [], [], timeout)[0]:
                return {}
            chunk = os.read(self.status, 65536)
            if not chunk:
                return None
            self.buffer += chunk
            if b"\n" not in self.buffer:
                return {}
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def started(self, command: str) -> int:
        """Wait for the job to start; the command that cannot be run is the user's input error."""
        message = self.read(60.0)
        while message == {}:
            message = self.read(60.0)
        if message is None:
            raise InputError(f"could not start {command}: the launch's supervisor process died",
                             hint="run the command without launch to see whether it starts")
        if "error" in message:
            if message["error"] == "FileNotFoundError":
                raise InputError(f"command not found: {command}",
                                 hint="put the job's command after `--`, as you would run it")
            if message["error"] == "PermissionError":
                raise InputError(f"command not executable: {command}",
                                 hint=f"chmod +x {command}, or run it through its interpreter")
            raise InputError(f"could not start {command}: {message['why']}",
                             hint="put the job's command after `--`, as you would run it")
        self.job = int(message["started"])
        return self.job

    def release(self) -> None:
        """Close the launcher's end (a supervisor still running ends the job) and reap the supervisor."""
        for fd in (self.ctl, self.status):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass


def run_child(argv: list[str], env: Mapping[str, str], *, cwd: str | None = None,
              on_signal: Callable[[int], None] | None = None, kill_grace: float = DEFAULT_KILL_GRACE,
              watch: JobWatch | None = None, strict: bool = False) -> int:
    """Run ``argv`` under a supervisor (module doc) with inherited stdio; forward signals; return its shell-style
    exit code: the job's own, or 128 + the first signal the launcher got (143 for SIGTERM) whatever the job's.
    ``watch`` collects the job's Python processes while it runs (strict mode's guard check) and what the job left
    behind."""
    sup: list[_Supervisor] = []
    pending: list[int] = []  # arrived before the job existed
    watch = JobWatch() if watch is None else watch

    def handler(signum, _frame):
        if on_signal:
            on_signal(signum)
        watch.signals.append(signum)
        if sup and sup[0].job is not None:
            forward_signal(sup[0].pid, signum)
        else:
            pending.append(signum)

    previous = _install_handlers(handler)
    try:
        sup.append(_Supervisor.start(argv, env, cwd, kill_grace,
                                     lifeline.STRICT_SUPERVISOR if strict else lifeline.SUPERVISOR))
        sup[0].started(argv[0])
        for signum in pending:
            forward_signal(sup[0].pid, signum)
        code = _wait_job(sup[0], watch, kill_grace)
    finally:
        if sup:
            sup[0].release()
        for sig, old in previous.items():
            signal.signal(sig, old)
    if watch.signals:
        return 128 + watch.signals[0]
    return code


def _install_handlers(handler: Callable[[int, Any], None]) -> dict[int, Any]:
    """``handler`` for every forwarded signal; the handlers it replaced (none off the main thread)."""
    previous = {}
    for sig in FORWARDED_SIGNALS:
        try:
            previous[sig] = signal.signal(sig, handler)
        except ValueError:  # not the main thread
            pass
    return previous


def _wait_job(sup: _Supervisor, watch: JobWatch, kill_grace: float) -> int:
    """Wait for the supervisor's report, looking at the job's processes meanwhile; ``kill_grace`` after the first
    forwarded signal, SIGKILL every process below the supervisor. Returns the job's exit code."""
    deadline = None
    while True:
        watch.look(sup.pid)
        message = sup.read(POLL_SECONDS)
        if message is None:  # the supervisor died (killed on its own): end what can still be found of the job
            return _supervisor_lost(sup, watch)
        if "exit" in message:
            watch.left_behind = list(message.get("left") or [])
            return int(message["exit"])
        if watch.signals and deadline is None:
            deadline = time.monotonic() + kill_grace
        if deadline is not None and time.monotonic() >= deadline and not watch.killed:
            watch.killed = True
            signal_tree(sup.pid, signal.SIGKILL)


def _supervisor_lost(sup: _Supervisor, watch: JobWatch) -> int:
    """The supervisor died before it reported: its orphans went to init; SIGKILL the job's session and what is
    still found below the job's first process, and fail the run."""
    from dgprecompile.host.procfs import job_processes

    watch.lost = "the launch's supervisor process died before the job ended"
    if sup.job is not None:
        for st in job_processes(sup.job, proc_stats()):
            try:
                os.kill(st.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        watch.killed = True
    return 128 + signal.SIGKILL
