"""The DeepGEMM cache directory as dgprecompile sees it.

Layout (the runtime's own part is untouched; ours lives beside it under ``dgprecompile/``)::

    <root>/cache/<entry>/...              entries written by DeepGEMM (legacy and C++ JITs alike)
    <root>/tvm-ffi/<entry>/...            SGLang's own tvm-ffi JIT modules (launch sets TVM_FFI_CACHE_DIR here)
    <root>/triton/<hash>/...              Triton's kernels (launch sets TRITON_CACHE_DIR here; dgprecompile.runtimes.captured)
    <root>/inductor/fxgraph/<k>/<key>/... torch.compile's caches (launch sets TORCHINDUCTOR_CACHE_DIR here), nested by
                                          the first component: fxgraph 3, aotautograd 2, code buckets 1
    <root>/sglang-jit/<t>/<m>/<b>/<d>/... SGLang's own ninja JIT modules, 0.5.20 on (launch sets SGLANG_JIT_CACHE_DIR
                                          here): an entry is one leaf <target>/<module>/build-<key>/deps-<key>
    <root>/dgprecompile/index.json        fingerprint + one record per warmed kernel (entry, sha256 of each file)
    <root>/dgprecompile/index.lock        filelock guarding index updates
    <root>/dgprecompile/locks/<k>.lock    one filelock per kernel while it compiles
    <root>/dgprecompile/staging/<pid>-*/  private JIT roots of running workers, each locked by its process
                                          (scratch.py); entries move into cache/ whole
    <root>/dgprecompile/logs/<item>.log   everything a failed build printed, its last failure (compile/build_log.py;
                                          never packed)

An entry only ever appears in ``cache/`` by one rename of a complete directory, so an interrupted compile
leaves nothing the runtime could mistake for a good entry.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dgprecompile.cache.entrycheck import entry_problem, link_problem
from dgprecompile.cache.samebuild import same_file
from dgprecompile.errors import CheckFailed, CompileFailed, InputError
from dgprecompile.fsutil import (
    atomic_write_text,
    exchange_paths,
    fsync_dir,
    normalize_modes,
    os_error,
    read_input_bytes,
    tree_size,
)
from dgprecompile.host import scratch
from dgprecompile.runtimes import CAPTURED, FILED_AREAS, JIT_FAMILIES, family_for_area
from dgprecompile.runtimes.captured import GROUP_LIMIT, group_form, is_group_file

INDEX_SCHEMA = 1
OURS = "dgprecompile"
ENTRIES = "cache"  # DeepGEMM's own layout: <root>/cache/<entry>
ADOPTED = "adopted"  # an EntryRecord's ``by`` when nothing compared its bytes with a fresh build
# KeyedWorker's problem with an entry that is loadable but that the index does not vouch for (store.vouched)
UNVOUCHED = "not recorded in the index"
def _areas() -> tuple[str, ...]:
    return (ENTRIES, *dict.fromkeys(f.area for f in JIT_FAMILIES.values()), *FILED_AREAS)


# the directories of a cache root that hold runtime entries: DeepGEMM's, each SGLang JIT family's, and those of the
# other JIT families whose entries are filed in the index (dgprecompile.runtimes.captured: Triton)
AREAS = _areas()


# checks a process makes before it moves an entry into the cache (compile/worker.py: its warm is still alive);
# each returns why it must not install, or None
INSTALL_CHECKS: list = []


def _may_install(what: str) -> None:
    for check in INSTALL_CHECKS:
        why = check()
        if why:
            raise CompileFailed(f"not installing {what}: {why}")


def _depths() -> dict[str, int]:
    return {f.area: f.entry_depth for f in JIT_FAMILIES.values() if f.entry_depth != 1}


# path components of one entry's name, per area (default 1; a JitFamily's entry_depth): SGLang's ninja JIT
# nests its leaves 4 deep (<target>/<module>/build-<key>/deps-<key>, kernels/jit/utils/compile/cache.py:15-21)
AREA_DEPTH = _depths()
# areas whose entries nest by their first component (a filed CacheFamily's ``nesting``): inductor's
# fxgraph/<k>/<key>, aotautograd/<key> and <bucket> (dgprecompile/runtimes/captured.py)
AREA_NESTING = {f.area: f for f in CAPTURED if f.filed and (f.nesting or f.depth != 1)}


def area_depth(area: str, first: str | None = None) -> int:
    """Path components of an entry's name in ``area``; where it depends on the name's first component, that one's."""
    nested = AREA_NESTING.get(area)
    return nested.depth_of(first) if nested is not None else AREA_DEPTH.get(area, 1)


def ignored(area: str, first: str) -> bool:
    """Whether ``first`` is a first component of ``area`` that holds no entries (inductor's locks/)."""
    nested = AREA_NESTING.get(area)
    return nested is not None and first in nested.ignore


def valid_entry_name(entry: str, area: str = ENTRIES) -> bool:
    """An entry name of this area: as many path components as the area nests, none empty, '.', '..' or hidden,
    not in a folder the area keeps for its library's bookkeeping."""
    parts = entry.split("/")
    return (len(parts) == area_depth(area, parts[0]) and not ignored(area, parts[0])
            and all(p and p not in (".", "..") and not p.startswith(".") for p in parts))


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@dataclass
class EntryRecord:
    entry: str  # directory name under cache/
    files: dict[str, str]  # file name -> sha256
    bytes: int
    seconds: float | None = None  # compile time, when this warm compiled it
    # warm (built, or compared with a fresh build) | adopted (found in the cache, indexed without that comparison:
    # verify counts it unchecked) | capture (what a launch's job built)
    by: str = "warm"
    area: str = ENTRIES  # the directory under the root that holds it (AREAS)

    def to_dict(self) -> dict[str, Any]:
        d = {"entry": self.entry, "files": self.files, "bytes": self.bytes, "seconds": self.seconds, "by": self.by}
        if self.area != ENTRIES:
            d["area"] = self.area
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EntryRecord:
        area = d.get("area", ENTRIES)
        if area not in AREAS:
            raise ValueError(f"unknown entry area {area!r}")
        return cls(d["entry"], dict(d["files"]), int(d["bytes"]), d.get("seconds"), d.get("by", "warm"), area)

    @property
    def member_dir(self) -> str:
        """Its directory relative to the cache root, e.g. cache/kernel.x.y."""
        return f"{self.area}/{self.entry}"


@dataclass
class Index:
    fingerprint: dict[str, Any] = field(default_factory=dict)
    kernels: dict[str, EntryRecord] = field(default_factory=dict)  # kernel id -> entry
    extra: dict[str, EntryRecord] = field(default_factory=dict)  # entries the JIT made beside the planned kernels
    plans: list[dict[str, Any]] = field(default_factory=list)
    # m ranges `warm --backend sweep` covered per key, and the entries they made (cache/sweeps.py)
    sweeps: list[dict[str, Any]] = field(default_factory=list)
    # Triton fused-MoE items warm ran: item id -> its record (the Triton it ran with, its entries; cache/triton_moe.py)
    triton_moe: dict[str, dict[str, Any]] = field(default_factory=dict)
    # torch.compile graph items warm built: item id -> its record (the torch and GPU, its entries; cache/inductor_graphs.py)
    inductor: dict[str, dict[str, Any]] = field(default_factory=dict)
    # FlashInfer JIT module items warm built: item id -> its record (the flashinfer-python, its entry; ditto)
    flashinfer: dict[str, dict[str, Any]] = field(default_factory=dict)
    # SGLang's model-path Triton kernel items warm ran: item id -> its record (the Triton, its entries; ditto)
    triton_path: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": INDEX_SCHEMA, "fingerprint": self.fingerprint,
                "kernels": {k: v.to_dict() for k, v in sorted(self.kernels.items())},
                "extra": {k: v.to_dict() for k, v in sorted(self.extra.items())},
                "plans": self.plans, **({"sweeps": self.sweeps} if self.sweeps else {}),
                **({"triton_moe": dict(sorted(self.triton_moe.items()))} if self.triton_moe else {}),
                **({"inductor": dict(sorted(self.inductor.items()))} if self.inductor else {}),
                **({"flashinfer": dict(sorted(self.flashinfer.items()))} if self.flashinfer else {}),
                **({"triton_path": dict(sorted(self.triton_path.items()))} if self.triton_path else {})}

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str) -> Index:
        if d.get("schema") != INDEX_SCHEMA:
            raise InputError(f"{where}: index schema {d.get('schema')!r} is not {INDEX_SCHEMA}")
        return cls(dict(d.get("fingerprint", {})),
                   {k: EntryRecord.from_dict(v) for k, v in d.get("kernels", {}).items()},
                   {k: EntryRecord.from_dict(v) for k, v in d.get("extra", {}).items()},
                   list(d.get("plans", [])), list(d.get("sweeps", [])), dict(d.get("triton_moe", {})),
                   dict(d.get("inductor", {})), dict(d.get("flashinfer", {})),
                   dict(d.get("triton_path", {})))


LINKED_HINT = ("remove the link (the cache's own folder belongs there: `mkdir` it), or use another --cache-dir; "
               "only the cache root itself may be a link")
INDEX_DAMAGED = "move it away and run `dgprecompile warm` again: it re-indexes what is there"
INDEX_MAX_BYTES = 64 << 20  # about 200,000 entry records; a warmed cache of one plan records under a thousand


def _index_document(path: Path) -> Any:
    """The JSON of a local index.json: a regular file only (a FIFO would block the read), with a cap, checked
    against the ``index`` schema as the artifact's is, so that a damaged one is one CheckFailed naming the file and
    the field (exit 1, the hint: rebuild it), never an AttributeError later. An index of another schema version is
    returned as it is: Index.from_dict names the version (bad input, exit 2)."""
    from dgprecompile import schemas
    from dgprecompile.documents import load_json_text

    try:
        data = read_input_bytes(path, "the cache index", INDEX_DAMAGED, limit=INDEX_MAX_BYTES)
        doc = load_json_text(data, f"{path} (damaged)", hint=INDEX_DAMAGED)
    except InputError as exc:  # not a regular file, larger than the cap, unreadable, not JSON, nested too deep
        raise CheckFailed(exc.message, hint=exc.hint) from None
    if isinstance(doc, dict) and isinstance(doc.get("schema"), int) and doc["schema"] != INDEX_SCHEMA:
        return doc
    try:
        return schemas.check(doc, "index", f"{path} is damaged", hint=INDEX_DAMAGED)
    except InputError as exc:
        raise CheckFailed(exc.message, hint=exc.hint) from None


def resolve_cache_dir(source, explicit: str | Path | None = None, environ: dict[str, str] | None = None) -> Path:
    """The one place the cache directory is decided.

    ``explicit`` (--cache-dir, or a config file's cache_dir) wins; else the directory the runtime of the SGLang
    profile compiles into here: its cache-dir variables, else its default for the exact sglang version.
    ``source`` is a Plan or a ProfileChoice (anything with ``profile`` and ``sglang_version``).
    """
    if explicit:
        return Path(explicit).expanduser().absolute()
    return Path(source.profile.cache_dir(environ, source.sglang_version))


class CacheStore:
    def __init__(self, root: str | Path):
        self.root = Path(root).expanduser().absolute()

    @property
    def entries_dir(self) -> Path:
        return self.root / ENTRIES

    def area_dir(self, area: str = ENTRIES) -> Path:
        if area not in AREAS:
            raise InputError(f"unknown cache area {area!r}")
        return self.root / area

    @property
    def ours(self) -> Path:
        return self.root / OURS

    @property
    def index_path(self) -> Path:
        return self.ours / "index.json"

    def ensure(self) -> None:
        for d in (self.entries_dir, self.ours / "locks", self.ours / "staging"):
            d.mkdir(parents=True, exist_ok=True)

    def require_writable(self, doing: str) -> None:
        """Refuse up front (one error, a hint) when this user cannot create entries here: a cache shared
        read-only, owned by someone else, or on a read-only mount."""
        dirs = [d for d in (self.root, self.entries_dir, self.ours, self.ours / "staging", self.ours / "locks")
                if d.is_dir()]
        if not dirs:  # nothing made yet: the directory it would be made in
            parent = self.root
            while not parent.exists() and parent != parent.parent:
                parent = parent.parent
            dirs = [parent]
        # the mount first: access(2) says "denied" on a read-only mount too, whose fix is not chmod
        if os.statvfs(dirs[0]).f_flag & os.ST_RDONLY:
            raise os_error(OSError(errno.EROFS, "Read-only file system", str(dirs[0])), doing, "--cache-dir")
        for d in dirs:
            if not os.access(d, os.W_OK | os.X_OK):
                raise os_error(PermissionError(errno.EACCES, "Permission denied", str(d)), doing, "--cache-dir")

    # -- index --
    def read_index(self) -> Index:
        """The cache's index (empty when there is none), read like the artifact's (_index_document)."""
        path = self.index_path
        try:
            os.stat(path)
        except FileNotFoundError:
            return Index()
        except OSError as exc:
            raise os_error(exc, "read") from None
        if not os.access(path, os.R_OK):
            raise os_error(PermissionError(errno.EACCES, "Permission denied", str(path)), "read")
        try:
            return Index.from_dict(_index_document(path), str(path))
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckFailed(f"{path} is damaged ({str(exc)[:200]})", hint=INDEX_DAMAGED) from None

    @contextmanager
    def index_lock(self) -> Iterator[None]:
        from filelock import FileLock

        self.ours.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.ours / "index.lock")):
            yield

    def update_index(self, mutate) -> Index:
        """Read, change and atomically rewrite the index under its lock."""
        with self.index_lock():
            index = self.read_index()
            mutate(index)
            atomic_write_text(self.index_path, json.dumps(index.to_dict(), indent=1, sort_keys=False) + "\n")
            return index

    @contextmanager
    def kernel_lock(self, kernel_id: str) -> Iterator[None]:
        from filelock import FileLock

        name = hashlib.sha256(kernel_id.encode()).hexdigest()[:24]
        (self.ours / "locks").mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.ours / "locks" / f"{name}.lock")):
            yield

    # -- entries --
    def entry_path(self, entry: str, area: str = ENTRIES) -> Path:
        if not valid_entry_name(entry, area):
            raise InputError(f"bad cache entry name {entry!r}")
        return self.area_dir(area) / entry

    def list_entries(self, area: str = ENTRIES) -> list[str]:
        """The entry names of an area; in an area that nests, only complete names (a runtime's hidden
        .staging-* build directories are no entries)."""
        base = self.area_dir(area)
        if area in AREA_NESTING:
            return sorted(name for name, _ in AREA_NESTING[area]._leaves(base))
        level = [base]
        for _ in range(area_depth(area)):
            found = []
            for d in level:
                try:
                    found += [p for p in d.iterdir() if p.is_dir()]
                except (FileNotFoundError, NotADirectoryError):
                    pass
            level = found
        names = (str(p.relative_to(base)) for p in level)
        return sorted(n for n in names if area_depth(area) == 1 or valid_entry_name(n, area))

    def record_entry(self, entry: str, seconds: float | None = None, by: str = "warm",
                     area: str = ENTRIES, skip: tuple[str, ...] = ()) -> EntryRecord:
        """Checksum every file of an entry (except the names in ``skip``, e.g. a JIT's lock file)."""
        path = self.entry_path(entry, area)
        family = family_for_area(area)
        kept = set(family.entry_files(path)) if family is not None and family.filed else None  # what it loads
        files = {p.name: sha256_file(p) for p in sorted(path.iterdir())
                 if p.is_file() and p.name not in skip and (kept is None or p.name in kept)}
        size = sum((path / n).stat().st_size for n in files)
        return EntryRecord(entry, files, size, seconds, by, area)

    def check_entry(self, record: EntryRecord, arch: str | None = None, naming=None,
                    forms: dict[str, str] | None = None) -> str | None:
        """None when the entry is present with the recorded bytes and those bytes are a loadable entry whose content
        agrees with its name (a recorded hash of an empty, cut-short or swapped file proves nothing), else what is
        wrong. A symbolic link is "changed", never followed. ``naming``: the key context, when known. ``forms``
        (an artifact's Triton group files, member -> group_form): a group file with other bytes that says the same
        wherever it lies is the recorded one (relocate pointed it here; the entry check then requires that)."""
        path = self.entry_path(record.entry, record.area)
        linked = link_problem(path)
        if linked:
            return f"changed: {linked}"
        if not path.is_dir():
            return "missing" if not path.exists() else "changed: is not a directory"
        for name, digest in record.files.items():
            f = path / name
            if not f.is_file():
                return f"{name} missing"
            if sha256_file(f) != digest and not _same_group(f, forms, f"{record.member_dir}/{name}"):
                return f"{name} changed (sha256 mismatch)"
        family = family_for_area(record.area)
        problem = entry_problem(path, arch, naming=naming) or (family.entry_problem(path) if family else None)
        return None if problem is None else f"invalid: {problem}"

    def recorded_problem(self, kernel: str, entry: str, arch: str | None = None, area: str = ENTRIES,
                         index: Index | None = None) -> str | None:
        """What differs between the entry on disk and what the index recorded for it (under ``kernel``, or as an
        extra entry of that name), or None when the index records nothing for it or the bytes are the recorded
        ones. A warm must rebuild such an entry, never adopt it."""
        index = self.read_index() if index is None else index
        records = [r for r in (index.kernels.get(kernel), index.extra.get(entry))
                   if r is not None and r.entry == entry and r.area == area]
        for record in records:
            problem = self.check_entry(record, arch)
            if problem is not None and problem != "missing":
                return problem
        return None

    def vouched(self, kernel: str, entry: str, area: str = ENTRIES, index: Index | None = None) -> bool:
        """Whether the index holds a record of this entry (under ``kernel``, or as an extra entry of that name)
        that a build vouches for: not one filed as ``adopted`` (found on disk and indexed on its structure alone,
        e.g. by an older dgprecompile after index.json was removed). An entry nothing vouches for is compared
        with a fresh build before it is trusted (compile/backends/base.py)."""
        index = self.read_index() if index is None else index
        records = [r for r in (index.kernels.get(kernel), index.extra.get(entry))
                   if r is not None and r.entry == entry and r.area == area]
        return any(r.by != ADOPTED for r in records)

    def entry_problem(self, entry: str, arch: str | None, required: tuple[str, ...] = (), naming=None,
                      area: str = ENTRIES) -> str | None:
        """What is wrong with the entry on disk ("missing" when there is none), or None when it is loadable and its
        content agrees with its name (``naming``: the key context, when known)."""
        return entry_problem(self.entry_path(entry, area), arch, required, naming)

    def _seal(self, staged: Path, arch: str | None, required: tuple[str, ...]) -> None:
        problem = entry_problem(staged, arch, required)
        if problem is not None:
            raise CompileFailed(f"the built entry {staged.name} is not loadable ({problem}); nothing was installed")
        normalize_modes(staged)  # the JIT may build with mkstemp (0600): others sharing the cache must read it
        for f in staged.iterdir():
            if f.is_file():
                with open(f, "rb") as fh:
                    os.fsync(fh.fileno())
        fsync_dir(staged)

    def install_entry(self, staged: Path, arch: str | None = None, required: tuple[str, ...] = (),
                      area: str = ENTRIES, entry: str | None = None) -> bool:
        """Move a complete, checked entry directory into its area (cache/, tvm-ffi/, sglang-jit/) with one rename,
        as ``entry`` (default: the staged directory's name; an area that nests gets its parents made). False if
        one is already there. Raises CompileFailed (and installs nothing) when a file the runtime reads is empty,
        cut short or built for another architecture."""
        base = self.area_dir(area)
        target = self.entry_path(entry or staged.name, area)
        self._seal(staged, arch, required)
        self.root.mkdir(parents=True, exist_ok=True)
        with self._folder(target.parent) as fd:  # made and opened without following a link on the way
            if _there(target.name, fd):
                shutil.rmtree(staged, ignore_errors=True)
                return False
            _may_install(target.name)
            try:
                os.rename(staged, target.name, dst_dir_fd=fd)
            except OSError:
                if _there(target.name, fd):  # another process won the race: keep theirs
                    shutil.rmtree(staged, ignore_errors=True)
                    return False
                raise
            os.fsync(fd)
        if target.parent != base:
            fsync_dir(base)
        return True

    @contextmanager
    def _folder(self, folder: Path) -> Iterator[int]:
        """A descriptor of ``folder`` (below the root), each folder on the way made where missing and none of them
        a symbolic link: what is installed lands inside the cache, never where a link points. A link there is
        refused (CheckFailed naming it): nothing is written."""
        from dgprecompile.cache import confine

        try:
            with confine.entry_dir(self.root, str(folder.relative_to(self.root)), make=True) as fd:
                yield fd
        except confine.Refused as exc:
            raise CheckFailed(f"{exc}: nothing is written through a link in the cache", hint=LINKED_HINT) from None

    def replace_entry(self, staged: Path, arch: str | None = None, required: tuple[str, ...] = (),
                      area: str = ENTRIES) -> None:
        """Put a checked entry in place of an existing bad one (changed, not loadable, a symbolic link or a file),
        under the caller's kernel lock: one atomic exchange of the two paths where the filesystem has it (a reader
        sees the old or the new entry, never a mix), else a rename aside and a rename in. The old one is removed;
        a symbolic link is removed itself, never what it points to."""
        self._seal(staged, arch, required)
        base = self.area_dir(area)
        target = base / staged.name
        with self._folder(base):  # refuses a link on the way to the area
            pass
        aside = staged.with_name(staged.name + ".replaced")
        _may_install(target.name)
        if not exchange_paths(staged, target):
            os.rename(target, aside)
            os.rename(staged, target)
            staged = aside
        fsync_dir(base)
        _remove(staged)

    def install_or_replace(self, staged: Path, arch: str | None = None, required: tuple[str, ...] = (),
                           area: str = ENTRIES, naming=None, changed: bool = False) -> str:
        """Put a freshly built entry into the cache, under the caller's kernel lock. Returns "installed" where there
        was none; "adopted" where the one there has the same files and bytes as the fresh build (the staged copy is
        dropped); "replaced" where the one there differs from the fresh build in any way (other bytes, a file the
        build did not make, not loadable, a symbolic link, or ``changed``: its bytes differ from what the index
        recorded). A differing entry is never adopted."""
        target = self.area_dir(area) / staged.name
        if not target.exists() and not target.is_symlink():
            if self.install_entry(staged, arch, required, area):
                return "installed"
            # a writer outside dgprecompile's kernel locks (the runtime itself) filed it meanwhile
            problem = entry_problem(target, arch, required, naming)
            if problem is None:
                return "adopted"
            raise CompileFailed(f"{target} appeared while it was being built and is not loadable ({problem}); "
                                "warm again to replace it")
        if not changed and self._same(staged, target, arch, required, naming):
            shutil.rmtree(staged, ignore_errors=True)
            return "adopted"
        self.replace_entry(staged, arch, required, area)
        return "replaced"

    def _same(self, staged: Path, target: Path, arch, required, naming) -> bool:
        """``target`` is loadable and holds exactly ``staged``'s files with their bytes (cubins: up to the names
        nvcc makes unique per compile, cache/samebuild.py)."""
        if entry_problem(target, arch, required, naming) is not None:
            return False
        mine = sorted(p.name for p in staged.iterdir())
        if mine != sorted(p.name for p in target.iterdir()):
            return False
        return all(same_file(n, staged / n, target / n) for n in mine if (staged / n).is_file())

    def new_staging(self) -> Path:
        """A private staging root, locked by this process for its life (dgprecompile/host/scratch.py)."""
        self.ensure()
        return scratch.make(self.ours / "staging", "")

    def release_staging(self, path: Path) -> None:
        scratch.release(path)

    def clean_stale_staging(self) -> int:
        """Remove staging roots no live process holds (left by a kill), judged by their lock, never by a PID:
        a warm in another PID namespace or container on this cache keeps its own; returns how many."""
        return scratch.clean_stale(self.ours / "staging")

    def size_bytes(self) -> int:
        return sum(tree_size(self.area_dir(a)) for a in AREAS if self.area_dir(a).is_dir())


def _there(name: str, dir_fd: int) -> bool:
    """Whether ``name`` exists in the folder ``dir_fd`` (a symbolic link counts: it is never followed)."""
    try:
        os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    return True


def _remove(path: Path) -> None:
    """Remove a replaced entry: a directory tree, or a symbolic link or file itself."""
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)


def _same_group(path: Path, forms: dict[str, str] | None, member: str) -> bool:
    """Whether ``path`` is a Triton group file that says what the artifact's ``member`` says (``forms``), wherever
    each lies."""
    if not forms or member not in forms or not is_group_file(path.name) or path.stat().st_size > GROUP_LIMIT:
        return False
    return group_form(path.read_bytes()) == forms[member]
