"""What a cache root holds, cheaply, to tell what a run added, changed or removed (strict `launch`).

One record per file, link and directory under the root: its kind, size, mtime_ns, ctime_ns and inode, and for a
small file the sha256 of its bytes. ctime cannot be set back by a user (an in-place `cp` over a cubin, then `touch
-d` to the old time, still changes it), so large files need no hashing; thousands of entries take a stat each. A
directory's times are recorded too: an entry moved away, replaced and moved back keeps its files' records, but the
renames change its directory's ctime and its folder's mtime. A directory's own times alone are no change (a hit may
touch an entry: SGLang's ninja loader sets its leaf's mtime, its bookkeeping for eviction): a directory counts as
changed where its ctime changed in a folder whose mtime changed (it was renamed out and back, or replaced). Nor are
a hashed file's own times (DeepGEMM 0.2.x's DeepJIT sets the mtime of its entry's empty ``.committed`` on every hit):
its size, inode and bytes are compared.

dgprecompile's own records (``dgprecompile/``: the index, the installed-build record) are covered with the sha256 of
every file whatever its size (a job that empties the index's records or removes the build record is seen); left out
are only what changes as a matter of course: its locks and staging, inductor's locks/ and a family's bookkeeping
files (``not_entries``: the CUDA driver's index, FlashInfer's JIT log).
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from dgprecompile.cache.store import AREAS, ENTRIES, OURS, area_depth
from dgprecompile.runtimes import CAPTURED

# folders of a family's area that hold no entries, only the library's lock files (inductor's locks/, which a cache
# hit creates too): a run that takes a lock there compiled nothing
LOCKS = frozenset([*(f"{f.area}/{name}" for f in CAPTURED for name in (*f.ignore, *f.not_entries)),
                   f"{OURS}/locks", f"{OURS}/staging"])

SMALL_FILE = 64 * 1024  # files up to this size are hashed as well


def _digest(path: str, size: int, whole: bool = False) -> str | None:
    """The sha256 of a small file's bytes (``whole``: of any file's); None for a large one."""
    if size > SMALL_FILE and not whole:
        return None
    digest = hashlib.sha256()
    try:
        with open(path, "rb", opener=lambda p, f: os.open(p, f | os.O_NOFOLLOW | os.O_NONBLOCK)) as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return "unreadable"
    return digest.hexdigest()


# a family's bookkeeping files named with a folder pattern (FlashInfer's <version>[/<archs>]/flashinfer_jit.log)
BOOKKEEPING = tuple(f"{f.area}/{name}" for f in CAPTURED for name in f.not_entries if "*" in name)


def _skipped(path: str) -> bool:
    """Left out of a snapshot: locks, staging and bookkeeping (module doc)."""
    return (path in LOCKS or (path.startswith(f"{OURS}/") and path.count("/") == 1 and path.endswith(".lock"))
            or any(_matches(path, pattern) for pattern in BOOKKEEPING))


def _matches(path: str, pattern: str) -> bool:
    """``path`` is ``pattern`` with each ``*`` one folder name."""
    parts, wanted = path.split("/"), pattern.split("/")
    return len(parts) == len(wanted) and all(w in ("*", p) for p, w in zip(parts, wanted, strict=True))


def take(root: str | Path) -> dict[str, tuple]:
    """relative path -> (kind, size, mtime_ns, ctime_ns, inode, sha256 or None) of everything under ``root``."""
    root = str(root)
    out: dict[str, tuple] = {}
    todo = [""]
    while todo:
        rel = todo.pop()
        try:
            entries = list(os.scandir(os.path.join(root, rel) if rel else root))
        except OSError:
            continue
        for entry in entries:
            path = f"{rel}/{entry.name}" if rel else entry.name
            if _skipped(path):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                out[path] = ("dir", 0, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, None)
                todo.append(path)
            elif stat.S_ISREG(st.st_mode):
                out[path] = ("file", st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino,
                             _digest(entry.path, st.st_size, whole=path.startswith(f"{OURS}/")))
            else:  # a link (its target as it reads), a FIFO, a socket...
                target = os.readlink(entry.path) if stat.S_ISLNK(st.st_mode) else None
                out[path] = ("link" if target is not None else "other", 0, st.st_mtime_ns, st.st_ctime_ns,
                             st.st_ino, target)
    return out


def entry_of(path: str) -> str:
    """The entry a path belongs to, as the reports name entries: DeepGEMM's by name, the others as <area>/<entry>
    (an area's own entry depth); a path outside every area as itself."""
    parts = path.split("/")
    area = parts[0]
    if area not in AREAS or len(parts) == 1:
        return path
    name = "/".join(parts[:1 + area_depth(area, parts[1])])
    return name[len(ENTRIES) + 1:] if area == ENTRIES else name


@dataclass
class Changes:
    added: list[str] = field(default_factory=list)  # entries that were not there before
    changed: list[str] = field(default_factory=list)  # entries there before and after, with any file different
    removed: list[str] = field(default_factory=list)  # entries there before, gone after

    def __bool__(self) -> bool:
        return bool(self.added or self.changed or self.removed)

    def to_dict(self) -> dict[str, list[str]]:
        return {"added": self.added, "changed": self.changed, "removed": self.removed}


def _container(path: str, record: tuple | None) -> bool:
    """A directory above the entries (an area, or a level of a nesting area): not an entry of its own."""
    if record is None or record[0] != "dir":
        return False
    parts = path.split("/")
    return len(parts) == 1 or len(parts) < 1 + (area_depth(parts[0], parts[1]) if parts[0] in AREAS else 0)


def diff(before: dict[str, tuple], after: dict[str, tuple]) -> Changes:
    """Per entry: added, changed or removed between two snapshots of one root."""
    had = {entry_of(p) for p, rec in before.items() if not _container(p, rec)}
    has = {entry_of(p) for p, rec in after.items() if not _container(p, rec)}
    touched = {entry_of(p) for p in set(before) | set(after) if _differs(before.get(p), after.get(p))
               and not _container(p, before.get(p) or after.get(p))} | {entry_of(p) for p in _renamed(before, after)}
    return Changes(added=sorted(touched & has - had), changed=sorted(touched & had & has),
                   removed=sorted(touched & had - has))


def _differs(a: tuple | None, b: tuple | None) -> bool:
    """Two records of one path differ: for directories, only in kind or inode (their times: _renamed); for a file
    whose bytes were hashed, only in size, inode or bytes (a hit may touch a marker file: DeepGEMM 0.2.x's DeepJIT
    sets its entry's empty ``.committed`` mtime on every cache hit, its bookkeeping); for any other, in anything."""
    if a is not None and b is not None and a[0] == b[0] == "dir":
        return a[4] != b[4]
    if a is not None and b is not None and a[0] == b[0] == "file" and a[5] is not None and b[5] is not None:
        return (a[1], a[4], a[5]) != (b[1], b[4], b[5])
    return a != b


def _renamed(before: dict[str, tuple], after: dict[str, tuple]) -> set[str]:
    """Directories below an area whose ctime changed in a folder whose mtime changed: moved out and back."""
    out = set()
    for path, rec in after.items():
        old = before.get(path)
        parent = path.rpartition("/")[0]
        if not parent or old is None or rec[0] != "dir" or old[0] != "dir" or old[3] == rec[3]:
            continue
        was, now = before.get(parent), after.get(parent)
        if was is not None and now is not None and was[2] != now[2]:
            out.add(path)
    return out


SCRATCH = "tmp"  # DeepGEMM's own scratch under its cache dir: a kernel's sources go to tmp/<dir>/ first


def remove_new_scratch(root: str | Path, before: dict[str, tuple]) -> list[str]:
    """The folders under ``<root>/tmp`` that were not there ``before`` (a snapshot), removed; returns them.

    The C++ DeepGEMM writes a kernel's sources into ``tmp/<dir>/`` before it runs its compiler and moves the built
    kernel into ``cache/`` after. Under strict `launch` the compiler is launch's refusing stand-in, so every refused
    compile leaves its folder there: scratch of a refusal, not a compiled entry. Removing them leaves the cache as
    it was; nothing that was there before the run is touched (a link is removed as a link, never followed)."""
    import shutil

    base = Path(root) / SCRATCH
    removed = []
    try:
        names = sorted(os.listdir(base)) if base.is_dir() and not base.is_symlink() else []
    except OSError:
        names = []
    for name in names:
        rel = f"{SCRATCH}/{name}"
        if rel in before:
            continue
        path = base / name
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        except OSError:
            continue
        removed.append(rel)
    return removed
