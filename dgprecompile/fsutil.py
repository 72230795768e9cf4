"""Writes that never leave a half-written file behind: temp file in the same directory, fsync, rename."""

from __future__ import annotations

import errno
import os
import pwd
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from dgprecompile.errors import DGError, EnvironmentProblem, InputError


@contextmanager
def atomic_writer(path: Path | str) -> Iterator[BinaryIO]:
    """A binary file that appears at ``path`` whole when the block ends, and not at all if it raises.

    Its mode follows the umask as a plain ``open`` would (0644 under 022): mkstemp alone creates 0600, which
    makes a shared cache or a manifest unreadable to everyone but its writer."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, file_mode())
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def create_new_file(path: Path | str, data: bytes, mode: int | None = None) -> None:
    """Write ``data`` to ``path`` whole, failing with FileExistsError if ``path`` exists (never replaces it).

    ``mode`` (e.g. 0o600 for a private key) is set before any byte is written; default: the umask's."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, file_mode() if mode is None else mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.link(tmp, path)
        fsync_dir(path.parent)
    finally:
        os.unlink(tmp)


def current_umask() -> int:
    """The process umask, read without changing it (Linux /proc); falls back to set-and-restore."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def file_mode() -> int:
    """The mode ``open()`` gives a new file here: 0666 less the umask."""
    return 0o666 & ~current_umask()


def dir_mode() -> int:
    """The mode ``mkdir`` gives a new directory here: 0777 less the umask."""
    return 0o777 & ~current_umask()


def normalize_modes(root: Path | str) -> None:
    """Give ``root`` and everything under it the modes a plain mkdir/open would (tools that build with
    mkstemp/mkdtemp leave 0600/0700); executables keep their x bits as the umask allows."""
    fmode, dmode = file_mode(), dir_mode()
    os.chmod(root, dmode)
    for base, dirs, files in os.walk(root):
        for name in dirs:
            os.chmod(os.path.join(base, name), dmode)
        for name in files:
            p = os.path.join(base, name)
            st = os.lstat(p)
            if not os.path.islink(p):
                os.chmod(p, (dmode if st.st_mode & 0o100 else fmode))


def atomic_write_bytes(path: Path | str, data: bytes) -> None:
    with atomic_writer(path) as f:
        f.write(data)


def atomic_write_text(path: Path | str, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def exchange_paths(a: Path | str, b: Path | str) -> bool:
    """Atomically swap two paths on one filesystem (Linux renameat2 RENAME_EXCHANGE). False where the
    kernel, C library or filesystem does not offer it; raises other errors."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def fsync_dir(path: Path | str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def tree_size(path: Path | str) -> int:
    """Bytes of every regular file under ``path`` (links not followed)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


NO_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def _existing(path: Path | str) -> Path:
    p = Path(path).expanduser().absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def mount_point(path: Path | str) -> str:
    """The mount point of the filesystem that holds ``path`` (or would hold it, for a path not made yet)."""
    p = _existing(path)
    while not os.path.ismount(p) and p != p.parent:
        p = p.parent
    return str(p)


def free_bytes(path: Path | str) -> int:
    """Bytes an unprivileged writer may still use on the filesystem of ``path``."""
    st = os.statvfs(_existing(path))
    return st.f_bavail * st.f_frsize


def free_inodes(path: Path | str) -> int | None:
    """Files an unprivileged writer may still create on the filesystem of ``path`` (None: it sets no limit)."""
    st = os.statvfs(_existing(path))
    return st.f_favail if st.f_files else None


def space_needed(path: Path | str, sizes: list[int], dirs: int = 0) -> int:
    """Bytes that files of ``sizes`` and ``dirs`` folders take on the filesystem of ``path``: each in whole
    blocks (at least one), as the filesystem allocates them, not the sum of the sizes."""
    block = os.statvfs(_existing(path)).f_frsize or 4096
    return (sum(max(1, -(-size // block)) for size in sizes) + dirs) * block


def space_message(path: Path | str, errno_: int = errno.ENOSPC, *, need: int | None = None,
                  doing: str = "", tmpdir: bool = False) -> tuple[str, str]:
    """(message, hint) for a full filesystem or quota at ``path``: which mount, how much is free, how much
    is needed; a filesystem out of inodes (files) with bytes to spare is named as such. ``tmpdir``: ``path`` is
    the scratch space (TMPDIR), so the fix is TMPDIR, not the cache."""
    mount = mount_point(path)
    try:
        free, inodes = human_bytes(free_bytes(path)), free_inodes(path)
    except OSError:
        free, inodes = "unknown", None
    while_ = " while " + doing if doing else ""
    if inodes == 0 and errno_ != errno.EDQUOT:
        where = "set TMPDIR to a directory on another filesystem" if tmpdir else "pass --cache-dir on another filesystem"
        return (f"no free inodes left on {mount} (no new file can be made there, though {free} is free){while_}",
                f"remove files on {mount} (it ran out of files, not bytes), or {where}")
    what = "disk quota exceeded" if errno_ == errno.EDQUOT else "no space left"
    message = f"{what} on {mount} ({free} free){while_}"
    needs = f" (about {human_bytes(need)} needed)" if need else ""
    if tmpdir:
        hint = (f"free space on {mount}{needs}, or set TMPDIR to a directory on a larger filesystem (compilers "
                "write their intermediates there)")
    elif errno_ == errno.EDQUOT:
        hint = f"raise your quota on {mount} or free some of it{needs}, or pass --cache-dir on another filesystem"
    else:
        hint = f"free space on {mount}{needs}, or pass --cache-dir on a larger filesystem"
    return message, hint


# The most bytes read from one file a user passes (config.json, train.yaml, manifest, SpecForge config, trace,
# misses file): the largest real one is far below (a manifest of every bundled plan is under 64 KiB, a model's
# config.json under 16 KiB), and a cap keeps memory bounded whatever the path points at (/dev/zero, a log).
MAX_INPUT_BYTES = 16 << 20


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def _not_regular(mode: int) -> str | None:
    """What a non-regular file is ("a FIFO (named pipe)"), or None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    return next((kind for test, kind in _KINDS if test(mode)), "not a regular file")


def refuse_non_regular(path: Path | str, what: str, hint: str) -> None:
    """One InputError when ``path`` exists and is not a regular file (a FIFO, socket, device or directory), told
    from a stat alone (no open: opening a FIFO blocks). A missing path passes: the caller's open says so."""
    try:
        kind = _not_regular(os.stat(path).st_mode)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise InputError(f"cannot read {what} {path}: {exc.strerror or exc}", hint=hint) from None
    if kind is not None:
        raise InputError(f"{what} {path} is {kind}, not a regular file", hint=hint)


def open_input(path: Path | str, what: str, hint: str) -> BinaryIO:
    """``path`` opened for reading, refused (one InputError naming ``what``) unless it is a regular file, before
    any byte is read: a FIFO, socket or device would block the read forever or never end. The path is stat'ed
    first (opening a FIFO blocks, opening a device may act), then opened non-blocking and checked again (it may
    have been swapped in between)."""
    try:
        kind = _not_regular(os.stat(path).st_mode)
        if kind is None:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
            kind = _not_regular(os.fstat(fd).st_mode)
            if kind is not None:
                os.close(fd)
    except FileNotFoundError:
        raise InputError(f"{what} not found: {path} (no such file)", hint=hint) from None
    except OSError as exc:
        raise InputError(f"cannot read {what} {path}: {exc.strerror or exc}", hint=hint) from None
    if kind is not None:
        raise InputError(f"{what} {path} is {kind}, not a regular file", hint=hint)
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_input_bytes(path: Path | str, what: str, hint: str, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of an input file (at most ``limit``); one InputError (naming ``what`` and the path) when it is
    missing, unreadable, not a regular file (refused before any read: open_input) or larger than ``limit``."""
    with open_input(path, what, hint) as f:
        try:
            data = f.read(limit + 1)
        except OSError as exc:
            raise InputError(f"cannot read {what} {path}: {exc.strerror or exc}", hint=hint) from None
    if len(data) > limit:
        raise InputError(f"{what} {path} is larger than {human_bytes(limit)}, more than any real one holds",
                         hint=hint)
    return data


def read_input(path: Path | str, what: str, hint: str, limit: int = MAX_INPUT_BYTES) -> str:
    """The text of an input file (read_input_bytes), or one InputError when it is not UTF-8."""
    data = read_input_bytes(path, what, hint, limit)
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise InputError(f"{what} {path} is not UTF-8 text", hint=hint) from None


def os_error(exc: OSError, doing: str = "use", option: str | None = None) -> DGError:
    """One user-facing error for a failed file operation: who may not do what where, and the fix. ``option`` is
    the command's own option (or argument) that names the path, for the hint; None names none."""
    where = exc.filename or "a file"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        message, hint = space_message(where if exc.filename else ".", exc.errno, doing=f"writing {where}")
        return EnvironmentProblem(message, hint)
    elsewhere = "choose a path on a writable filesystem" + (f" ({option})" if option else "")
    if exc.errno == errno.EROFS:  # the machine's mount, not the user's words: exit 3, like an unwritable store
        return EnvironmentProblem(f"cannot {doing} {where}: Read-only file system", hint=elsewhere)
    if exc.errno in (errno.EACCES, errno.EPERM):
        owner = ""
        try:
            path = where
            while path and not os.path.exists(path):
                path = os.path.dirname(path)
            st = os.stat(path)
            owner = f" ({path} is owned by {pwd.getpwuid(st.st_uid).pw_name}, mode {st.st_mode & 0o7777:04o})"
        except (OSError, KeyError, TypeError):
            pass
        other = f", or choose a directory you own ({option})" if option else ""
        return InputError(f"permission denied: cannot {doing} {where}{owner}",
                          hint="run as a user allowed to (the owner, or a member of a group-writable cache: "
                               f"chmod -R g+rwX){other}")
    return InputError(f"cannot {doing} {where}: {exc.strerror or exc}", hint="check the path and its permissions")
