"""What capture files and pack ships lies inside the cache, in files of its own, of bounded size.

Every path is resolved under the real cache root, one component at a time from a descriptor of the root
(``openat`` with ``O_NOFOLLOW``): an area, entry or file that is a symbolic link is refused, named, never followed,
so a job that replaces ``$TRITON_CACHE_DIR`` with a link to /tmp/x cannot make pack ship /tmp/x's files. A file
must be a regular file with one link (a hard link makes a file outside the cache share its bytes). Entries and
artifacts are capped in size (data/limits.yaml, raised by ``--max-entry-mib`` / ``--max-artifact-mib``).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from dgprecompile.errors import CheckFailed

MIB = 1 << 20
ENTRY_OPTION, ARTIFACT_OPTION = "--max-entry-mib", "--max-artifact-mib"


@dataclass(frozen=True)
class Limits:
    entry_bytes: int
    artifact_bytes: int

    @classmethod
    def of(cls, entry_mib: int | None = None, artifact_mib: int | None = None) -> Limits:
        """data/limits.yaml's caps, each replaced by the option given (in MiB)."""
        from dgprecompile.data import load_yaml

        data = load_yaml("limits.yaml")
        return cls((entry_mib or data["entry_mib"]) * MIB, (artifact_mib or data["artifact_mib"]) * MIB)


class Refused(Exception):
    """A path or file capture must not file and pack must not ship; ``str()`` says which and why."""


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def _open_dir(parent: int | None, name: str, shown: str) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except OSError as exc:
        raise Refused(_why(parent, name, shown, exc, "a directory")) from None


def _why(parent: int | None, name: str, shown: str, exc: OSError, want: str) -> str:
    """Why opening ``name`` without following links failed: a link (named with its target), else the error."""
    try:
        st = os.lstat(name, dir_fd=parent)
    except OSError:
        return f"{shown}: {exc.strerror or exc}"
    if stat.S_ISLNK(st.st_mode):
        return f"{shown} is a symbolic link (to {os.readlink(name, dir_fd=parent)}), not {want} of the cache's own"
    return f"{shown} is not {want} ({exc.strerror or exc})"


@contextmanager
def entry_dir(root: Path, member_dir: str, make: bool = False) -> Iterator[int]:
    """A descriptor of ``<root>/<member_dir>`` (e.g. ``triton/<hash>``) reached from the root without following a
    link; raises Refused naming the first component that is a link or no directory. ``make``: each folder on the
    way that is not there is made (``mkdirat``, the umask honoured), then opened the same way."""
    try:  # the root is the user's choice: a link there (or above) is followed; everything below it is not
        fds = [os.open(root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))]
    except OSError as exc:
        raise Refused(f"{root}: {exc.strerror or exc}") from None
    try:
        shown = root
        for part in member_dir.split("/"):
            if part in ("", ".", ".."):
                raise Refused(f"{shown}/{part}: not an entry name")
            shown = shown / part
            if make:
                _make_dir(fds[-1], part)
            fds.append(_open_dir(fds[-1], part, str(shown)))
        yield fds[-1]
    finally:
        for fd in reversed(fds):
            os.close(fd)


def _make_dir(parent: int, name: str) -> None:
    try:
        os.mkdir(name, dir_fd=parent)
    except FileExistsError:  # there already (a link there is refused by the open that follows)
        pass


def link_on_the_way(root: Path, rel: str) -> str | None:
    """Why writing ``<root>/<rel>`` would go through a symbolic link: the first component on the way that is one
    (named, with its target), else None. Components past the first one that is not there are not checked (there
    is nothing to follow); a component that is no folder is left to the write to report."""
    path = root
    for part in rel.split("/"):
        path = path / part
        try:
            st = os.lstat(path)
        except OSError:
            return None
        if stat.S_ISLNK(st.st_mode):
            return f"{path} is a symbolic link (to {os.readlink(path)})"
        if not stat.S_ISDIR(st.st_mode):
            return None
    return None


def link_problem(root: Path, member_dir: str) -> str | None:
    """Why ``<root>/<member_dir>`` cannot be reached without following a link (or is no directory), else None."""
    try:
        with entry_dir(root, member_dir):
            return None
    except Refused as exc:
        return str(exc)


def open_file(dir_fd: int, name: str, shown: str) -> tuple[int, os.stat_result]:
    """``name`` in the directory ``dir_fd``, opened without following a link, checked to be a regular file with one
    link; returns (descriptor, its stat). Raises Refused (and leaves nothing open) otherwise."""
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        raise Refused(_why(dir_fd, name, shown, exc, "a file")) from None
    st = os.fstat(fd)
    problem = file_problem(st, shown)
    if problem:
        os.close(fd)
        raise Refused(problem)
    return fd, st


def file_problem(st: os.stat_result, shown: str) -> str | None:
    if not stat.S_ISREG(st.st_mode):
        return f"{shown} is not a regular file"
    if st.st_nlink != 1:
        return (f"{shown} has {st.st_nlink} hard links: a file outside the cache may share its bytes, and the "
                "cache does not own them")
    return None


def entry_problem(root: Path, member_dir: str, limits: Limits) -> str | None:
    """What makes the entry ``<root>/<member_dir>`` unfit to file (capture): a link or no directory on the way, an
    entry child that is not a regular file of one link, or more bytes than ``limits.entry_bytes``; else None."""
    try:
        with entry_dir(root, member_dir) as fd:
            total = 0
            for name in sorted(os.listdir(fd)):
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                shown = f"{root}/{member_dir}/{name}"
                if stat.S_ISLNK(st.st_mode):
                    return f"{shown} is a symbolic link (to {os.readlink(name, dir_fd=fd)})"
                problem = file_problem(st, shown)
                if problem:
                    return problem
                total += st.st_size
                if total > limits.entry_bytes:
                    return too_large(member_dir, limits)
    except Refused as exc:
        return str(exc)
    return None


def too_large(member_dir: str, limits: Limits) -> str:
    return f"{member_dir} holds more than {limits.entry_bytes // MIB} MiB (the cap on one entry, {ENTRY_OPTION})"


def refusal(why: str) -> CheckFailed:
    """pack's error for a Refused entry: nothing was packed."""
    return CheckFailed(f"{why}: only the cache's own files are packed; nothing was packed",
                       hint=f"put the cache's own copy in place of a link, or remove the entry (warm or launch "
                            f"--capture builds it again); raise the size caps with {ENTRY_OPTION} / {ARTIFACT_OPTION}")
