"""Scratch directories that say whether their owner is alive: a lock the owner holds, never a PID.

Every scratch directory (warm's and launch's run scratch in TMPDIR, a worker's staging root in the cache) holds a
lock file, ``<dir>/.owner.lock``, that the process which made it holds (``flock``) for as long as it lives, with
the host identity (this kernel's boot id) and its pid written in it, for people. The kernel drops the lock when
the process ends, however it ends (SIGKILL included), so:

* a directory whose lock can be taken belongs to no live process: it is stale, and the next command that uses
  that base removes it (:func:`clean_stale`);
* a directory whose lock is held is someone's, whatever PID namespace, container or user that someone is in: a
  PID seen from here says nothing about a process in another namespace, which is why PIDs are not consulted.

The lock file appears already locked (it is locked under a temporary name, ``.owner.<pid>.tmp``, then renamed
into place), so no cleaner can take it in between. A directory that still has only the temporary lock was made by a
process killed before the rename (SIGKILL in that instant): it is stale as soon as no process holds that file's lock.
A cleaner's probe of it can meet a maker between its open and its lock; the maker then starts over under a new name.
A lock written by another host (a cache on a network filesystem whose locks may
not reach across hosts) is judged stale only when the directory also has not changed for
:data:`FOREIGN_STALE_SECONDS`. A directory without a lock (made by an older dgprecompile, or killed before it
had one) is stale after :data:`UNLOCKED_STALE_SECONDS` without change. The directory is removed with its lock
in it, so a caller may simply ``rmtree`` it.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import tempfile
import time
from pathlib import Path

from dgprecompile.errors import EnvironmentProblem
from dgprecompile.fsutil import NO_SPACE_ERRNOS, file_mode, space_message

LOCK_NAME = ".owner.lock"
PENDING_LOCK = ".owner.{pid}.tmp"  # the lock file's name until it is locked and written (make)
MAKE_TRIES = 100
FOREIGN_STALE_SECONDS = 24 * 3600
UNLOCKED_STALE_SECONDS = 3600
_HELD: dict[str, int] = {}  # scratch directory -> the fd of its held lock, for this process's life
_RUN_PREFIX: dict[str, str] = {}  # run directory (run_dir) -> its prefix, swept again when it is released


def host_id() -> str:
    """This kernel's identity: its boot id (the same in every container and PID namespace on this host)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return socket.gethostname()


def make(base: Path | str, prefix: str) -> Path:
    """A new directory ``<base>/<prefix>...`` whose lock this process holds until :func:`release` or its end."""
    base = Path(base)
    base.mkdir(parents=True, exist_ok=True)
    for _ in range(MAKE_TRIES):
        path = base / f"{prefix}{os.getpid()}-{time.time_ns()}"
        try:
            os.mkdir(path)
        except FileExistsError:
            continue
        fd = _lock_new(path)
        if fd is not None:
            _HELD[str(path)] = fd
            return path
    raise EnvironmentProblem(f"could not make a scratch directory in {base}: each new one was taken for a dead "
                             f"process's by another cleaner {MAKE_TRIES} times",
                             "run the command again; if it repeats, check what else removes directories there")


def _lock_new(path: Path) -> int | None:
    """Lock the new directory ``path`` for this process (module docstring): the held descriptor, or None where a
    cleaner probed the temporary lock before this process had taken it (the directory is then removed here)."""
    tmp = path / PENDING_LOCK.format(pid=os.getpid())
    try:
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, file_mode())
    except FileNotFoundError:  # a cleaner removed the directory (empty, or with a lock nobody held)
        return None
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, json.dumps({"host": host_id(), "hostname": socket.gethostname(), "pid": os.getpid(),
                                 "started": time.time()}).encode())
        os.rename(tmp, path / LOCK_NAME)
    except (BlockingIOError, FileNotFoundError):  # a cleaner's probe holds it, or has removed the directory
        os.close(fd)
        shutil.rmtree(path, ignore_errors=True)
        return None
    except BaseException:
        os.close(fd)
        shutil.rmtree(path, ignore_errors=True)
        raise
    return fd


def release(path: Path | str) -> None:
    """Remove a scratch directory this process made, its lock with it. A run directory's release sweeps its
    base for dead runs' directories again: one whose lock a dead run's last process (warm's zygote, ending its
    compilers) still held when this run started is removed now rather than by the run after."""
    shutil.rmtree(path, ignore_errors=True)
    fd = _HELD.pop(str(path), None)
    if fd is not None:
        os.close(fd)
    prefix = _RUN_PREFIX.pop(str(path), None)
    if prefix is not None:
        clean_stale(Path(path).parent, prefix)


def lock_fds(path: Path | str) -> tuple[int, ...]:
    """The descriptor of the lock this process holds on ``path`` (none where it holds none), for a child that is
    to hold it too (``pass_fds``): the directory then stays someone's until that child has ended."""
    fd = _HELD.get(str(path))
    return () if fd is None else (fd,)


def held(path: Path | str) -> bool:
    """Whether a live process (in any PID namespace on this host) holds the directory's lock."""
    lock = Path(path) / LOCK_NAME
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def _owner(lock: Path) -> dict:
    try:
        return json.loads(lock.read_text() or "{}")
    except (OSError, ValueError):
        return {}


def _age(path: Path) -> float:
    try:
        return time.time() - max(p.stat().st_mtime for p in (path, *path.iterdir()))
    except OSError:
        return 0.0


def clean_stale(base: Path | str, prefix: str = "") -> int:
    """Remove the directories ``<base>/<prefix>*`` of processes that are gone (see the module's rules); returns
    how many. Never touches one whose lock a live process holds, nor our own."""
    base = Path(base)
    removed = 0
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return 0
    for name in names:
        path = base / name
        if not name.startswith(prefix) or str(path) in _HELD:
            continue
        try:
            if path.is_symlink() or not path.is_dir():
                continue
        except OSError:
            continue
        claimed = _claim(path)
        if claimed is None:
            continue
        try:
            shutil.rmtree(path, ignore_errors=True)
        finally:
            for fd in claimed:
                os.close(fd)
        removed += not path.exists()
    return removed


def _claim(path: Path) -> list[int] | None:
    """None where ``path`` is not stale (module docstring); else the locks this process now holds on it, kept while
    the directory is removed so that no maker can take them meanwhile (close them after)."""
    lock = path / LOCK_NAME
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        pending = list(path.glob(PENDING_LOCK.format(pid="*")))
        if pending:  # its maker was killed before the rename, unless one still holds its temporary lock
            return _claim_all(pending)
        return [] if _age(path) > UNLOCKED_STALE_SECONDS else None
    except OSError:  # not ours to read: leave it
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # BlockingIOError: held, its owner is alive, in whatever namespace
        os.close(fd)
        return None
    owner = _owner(lock)
    if owner.get("host", host_id()) != host_id() and _age(path) <= FOREIGN_STALE_SECONDS:
        os.close(fd)  # another host's: its lock may not reach us
        return None
    return [fd]


def _claim_all(locks: list[Path]) -> list[int] | None:
    """Every one of ``locks`` locked by this process, or None, holding nothing, where another process holds one, one
    cannot be read, or one has gone (its maker may have just renamed it into place: judged again next time)."""
    fds = []
    for lock in locks:
        fd = _take(lock)
        if fd is None:
            for taken in fds:
                os.close(taken)
            return None
        fds.append(fd)
    return fds


def _take(lock: Path) -> int | None:
    """A descriptor of ``lock`` that this process now holds locked, or None where it cannot be opened or locked."""
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def run_dir(prefix: str) -> Path:
    """A locked scratch directory for one run in TMPDIR, after removing the stale ones of ``prefix`` dead runs
    left there (a SIGKILL leaves its scratch behind; the next run of a command that uses it cleans it)."""
    base = Path(tempfile.gettempdir())
    clean_stale(base, prefix)
    try:
        path = make(base, prefix)
    except OSError as exc:
        if exc.errno not in NO_SPACE_ERRNOS:
            raise
        message, hint = space_message(base, exc.errno, doing=f"making scratch space in {base}", tmpdir=True)
        raise EnvironmentProblem(message, hint) from None
    _RUN_PREFIX[str(path)] = prefix
    return path


def compiler_env(scratch: Path | str) -> dict[str, str]:
    """Environment for compilers run inside a run's scratch: their own TMPDIR (nvcc's tmpxft_* files) there, so
    removing the scratch removes them too, whichever way the run ends."""
    tmp = Path(scratch) / "tmp"
    tmp.mkdir(exist_ok=True)
    return {"TMPDIR": str(tmp), "TMP": str(tmp), "TEMP": str(tmp)}
