"""Cache artifacts: pack a warmed cache's planned entries into one archive, and unpack it safely elsewhere.

An artifact is a gzip-compressed tar with::

    dgprecompile/artifact.json     format, schema, fingerprint, plan summary, sha256 and size of every other member
    dgprecompile/index.json        the cache index restricted to the packed kernels (and the index's extra entries)
    cache/<entry>/<file>           the entry files, exactly as DeepGEMM wrote them
    tvm-ffi/<entry>/<file>         SGLang's own JIT modules (sglang 0.5.14), as its build left them

Packing is deterministic (sorted members, zero mtimes/uids, fixed modes, gzip mtime 0): the same cache packs
to the same bytes, so a CI cache keyed on the fingerprint stays stable.

Unpacking reads the whole archive and checks it (format, member names and types, every sha256, the index
against the members) and the fingerprint against this environment before it touches the cache; then it
extracts the new entries into a staging directory on the cache's filesystem, moves each into ``cache/``
with one rename (never over an existing entry) and merges the index under its lock. Any failure undoes what
this unpack installed, so the cache is left as it was.
"""

from __future__ import annotations

import errno
import gzip
import hashlib
import json
import os
import shutil
import tarfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from dgprecompile import __version__
from dgprecompile.cache import archive, rollback
from dgprecompile.cache.confine import Limits
from dgprecompile.cache.entrycheck import checked_files, entry_problem, file_problem
from dgprecompile.cache.signing import SigningKey, Trust, signature_path
from dgprecompile.cache.store import (
    AREAS,
    ENTRIES,
    CacheStore,
    EntryRecord,
    Index,
    area_depth,
    resolve_cache_dir,
    valid_entry_name,
)
from dgprecompile.errors import CheckFailed, DGError, EnvironmentProblem, InputError
from dgprecompile.fsutil import (
    atomic_write_bytes,
    atomic_writer,
    exchange_paths,
    free_bytes,
    fsync_dir,
    open_input,
    os_error,
    space_message,
)
from dgprecompile.keys.fingerprint import differences, short_id
from dgprecompile.planning.plan import Plan

FORMAT = "dgprecompile-cache-artifact"
ARTIFACT_SCHEMA = 1
MANIFEST_MEMBER = "dgprecompile/artifact.json"
INDEX_MEMBER = "dgprecompile/index.json"
ENTRY_DIR = ENTRIES
META_LIMIT = 64 << 20  # artifact.json and index.json are read into memory; no real one comes near this
CHUNK = 1 << 20
NOT_OURS_HINT = "only unpack artifacts written by `dgprecompile pack`; pack it again from the warmed cache"


# ---- pack -----------------------------------------------------------------------------------------------


@dataclass
class PackResult:
    path: Path
    fingerprint_id: str
    kernels: list[str]
    missing: list[str]
    entries: list[str]
    bytes: int
    cache_dir: str = ""
    signature: Path | None = None  # the .sig written beside the artifact (None: unsigned)
    signed_by: str | None = None  # the signing key's fingerprint
    return_code: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "fingerprint_id": self.fingerprint_id, "kernels": len(self.kernels),
                "missing": self.missing, "entries": len(self.entries), "bytes": self.bytes,
                "signature": str(self.signature) if self.signature else None, "signed_by": self.signed_by}



def _json_bytes(data: Any) -> bytes:
    return (json.dumps(data, indent=1, sort_keys=True) + "\n").encode()


def _covers_here(store: CacheStore, index: Index, item: str) -> bool:
    """Whether the index's record of a Triton fused-MoE item covers it here (this Triton, its entries whole)."""
    from dgprecompile.cache.triton_moe import COVERED, item_coverage
    from dgprecompile.runtimes.triton_moe import TRITON_MOE

    return item_coverage(store, index, item, TRITON_MOE.installed()).status == COVERED


def output_path(template: str, fingerprint: dict[str, Any]) -> Path:
    """``-o`` with ``{fingerprint}`` replaced by the fingerprint's short id."""
    return Path(template.replace("{fingerprint}", short_id(fingerprint))).expanduser()


def _planned_entries(plan: Plan, store: CacheStore, index: Index, arch: str | None):
    """(intact records by kernel id, missing kernel ids, (id, member, problem) of entries that are not intact)."""
    kernels: dict[str, EntryRecord] = {}
    missing: list[str] = []
    changed: list[tuple[str, str, str]] = []
    for kid in sorted(plan.kernels) + sorted(plan.jit_modules):
        record = index.kernels.get(kid)
        problem = "missing" if record is None else store.check_entry(record, arch)
        if problem is None:
            kernels[kid] = record
        elif problem == "missing":
            missing.append(kid)
        else:
            changed.append((kid, record.member_dir, problem))
    return kernels, missing, changed


def pack_cache(plan: Plan, store: CacheStore, output: str, *, allow_missing: bool = False,
               signing_key: SigningKey | None = None, limits: Limits | None = None) -> PackResult:
    """Write the plan's entries to ``output``; with ``signing_key``, its signature to ``output``.sig beside it.
    Only files inside the real cache root, of one link each, within ``limits`` (default: data/limits.yaml)."""
    index = store.read_index()
    if not index.fingerprint:
        raise CheckFailed(f"{store.root} has no dgprecompile index: nothing warmed there to pack",
                          hint=f"run `dgprecompile warm ... --cache-dir {store.root}` first")
    arch = plan.profile.sm_arch
    kernels, missing, changed = _planned_entries(plan, store, index, arch)
    if changed:
        kid, entry, problem = changed[0]
        what = "are not loadable" if problem.startswith("invalid") else "differ from the index"
        raise CheckFailed(f"{len(changed)} cache entries {what}, e.g. {entry}: {problem}; nothing was packed",
                          hint="run `dgprecompile warm` with the same plan again: it rebuilds and replaces them")
    if missing and not allow_missing:
        raise CheckFailed(f"{len(missing)} of {len(plan.kernels) + len(plan.jit_modules)} planned kernels are not "
                          "in the cache "
                          f"(e.g. {missing[0]})",
                          hint="run `dgprecompile warm` with the same plan first, or pass --allow-missing")
    # the index does not say which planned kernel an extra entry belongs to, so every intact one travels
    extra = {name: rec for name, rec in sorted(index.extra.items()) if store.check_entry(rec, arch) is None}
    # + swept m ranges, + the plan's Triton fused-MoE records (their entries are extra entries, packed above)
    triton_moe = {i: r for i, r in sorted(index.triton_moe.items()) if i in plan.triton_moe}
    packed = Index(index.fingerprint, kernels, extra, [plan.summary()], list(index.sweeps), triton_moe)
    entries = sorted({r.member_dir: r for r in [*kernels.values(), *extra.values()]}.values(),
                     key=lambda r: r.member_dir)

    target = output_path(output, index.fingerprint)
    if target.is_dir():
        raise InputError(f"{target} is a directory", hint="pass a file name to -o, e.g. -o out/cache-{fingerprint}.tar.gz")
    sig = Path(signature_path(str(target)))
    try:
        with atomic_writer(target) as raw:
            manifest = _write_archive(raw, store, packed, entries, plan, missing, limits or Limits.of())
        if signing_key is not None:
            atomic_write_bytes(sig, signing_key.sign(manifest))
        elif sig.exists():  # the signature of the artifact this one replaced: it covers other bytes
            sig.unlink()
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):  # name the mount of -o, not of the working directory
            message, hint = space_message(target.parent, exc.errno, doing=f"writing {target}")
            raise EnvironmentProblem(message, hint=hint.replace("--cache-dir", "-o")) from None
        if exc.filename is not None and Path(exc.filename).parent == target.parent:  # ours: name -o, not our temp
            raise os_error(OSError(exc.errno, exc.strerror, str(target)), "write", "-o") from None
        raise
    return PackResult(target, short_id(index.fingerprint), sorted(kernels), missing, [entry_key(r) for r in entries],
                      target.stat().st_size, str(store.root),
                      signature=sig if signing_key is not None else None,
                      signed_by=signing_key.fingerprint if signing_key is not None else None)


def _write_archive(raw: IO[bytes], store: CacheStore, packed: Index, entries: list[EntryRecord], plan: Plan,
                   missing: list[str], limits: Limits) -> bytes:
    """Write the archive, streaming the entry files from the cache (cache/archive.py); returns the manifest's bytes
    (what a signature covers)."""
    index_bytes = _json_bytes(packed.to_dict())
    members = archive.collect(store.root, [(r.member_dir, r.files) for r in entries], limits)
    listing = {INDEX_MEMBER: {"sha256": hashlib.sha256(index_bytes).hexdigest(), "bytes": len(index_bytes)}}
    listing.update({m.name: {"sha256": m.sha256, "bytes": m.size} for m in members})
    manifest = {
        "format": FORMAT, "schema": ARTIFACT_SCHEMA, "created_by": f"dgprecompile {__version__}",
        "fingerprint": packed.fingerprint, "fingerprint_id": short_id(packed.fingerprint),
        "build": rollback.build_stamp(store),  # signed with the rest: a node refuses an older build (rollback.py)
        "generation": (packed.fingerprint.get("deepgemm") or {}).get("generation"),
        "plan": plan.summary(), "kernels": sorted(packed.kernels), "missing": missing,
        "entries": [entry_key(r) for r in entries], "members": dict(sorted(listing.items())),
    }
    manifest_bytes = _json_bytes(manifest)
    # the manifest first, so a reader knows what it holds (and how large each member is) before the data
    archive.write(raw, store.root, [(MANIFEST_MEMBER, manifest_bytes), (INDEX_MEMBER, index_bytes)], members)
    return manifest_bytes


# ---- reading and checking an artifact --------------------------------------------------------------------


@dataclass
class Artifact:
    path: Path
    manifest: dict[str, Any]
    index: Index
    members: dict[str, str]  # member name -> sha256 (entry files only)
    manifest_bytes: bytes = b""  # exactly as archived: what a signature covers

    @property
    def fingerprint(self) -> dict[str, Any]:
        return self.manifest["fingerprint"]

    def entry_records(self) -> dict[str, EntryRecord]:
        return {entry_key(r): r for r in [*self.index.kernels.values(), *self.index.extra.values()]}


def entry_key(record: EntryRecord) -> str:
    """How reports name an entry: DeepGEMM's by its name, others as <area>/<name> (e.g. tvm-ffi/...)."""
    return record.entry if record.area == ENTRIES else record.member_dir


def _refuse(path: Path, name: str, why: str) -> InputError:
    return InputError(f"{path}: refusing member {name!r}: {why}; nothing was unpacked", hint=NOT_OURS_HINT)


# dotfiles a runtime itself keeps inside an entry: DeepJIT (sgl-deep-gemm 0.2.x) counts an entry only with it
ENTRY_MARKERS = (".committed",)


def _valid_entry_name(name: str) -> bool:
    return bool(name) and name not in (".", "..") and not name.startswith(".") and "/" not in name


def _valid_entry_file(name: str) -> bool:
    return _valid_entry_name(name) or name in ENTRY_MARKERS


def check_member(path: Path, info: tarfile.TarInfo) -> None:
    """Refuse anything but regular files and directories at the places an artifact has them."""
    name = info.name
    if name.startswith("/") or (len(name) > 1 and name[1] == ":") or "\\" in name:
        raise _refuse(path, name, "absolute path")
    parts = name.rstrip("/").split("/") if info.isdir() else name.split("/")
    if ".." in parts:
        raise _refuse(path, name, "'..' in the path")
    if info.issym() or info.islnk():
        raise _refuse(path, name, f"a link (to {info.linkname!r})")
    if info.ischr() or info.isblk():
        raise _refuse(path, name, "a device node")
    if info.isfifo():
        raise _refuse(path, name, "a fifo")
    if not (info.isreg() or info.isdir()):
        raise _refuse(path, name, "not a regular file or directory")
    if any(p in ("", ".") for p in parts):
        raise _refuse(path, name, "an empty or '.' path component")
    depth = area_depth(parts[0]) if parts[0] in AREAS else 1  # an area's entry names may nest (store.AREA_DEPTH)
    if info.isdir():
        ok = parts == ["dgprecompile"] or (parts[0] in AREAS and 1 <= len(parts) <= 1 + depth
                                           and all(_valid_entry_name(p) for p in parts[1:]))
    else:
        ok = name in (MANIFEST_MEMBER, INDEX_MEMBER) or (
            parts[0] in AREAS and len(parts) == 2 + depth and all(_valid_entry_name(p) for p in parts[1:-1])
            and _valid_entry_file(parts[-1]))
    if not ok:
        raise _refuse(path, name, f"outside {MANIFEST_MEMBER}, {INDEX_MEMBER} and "
                      f"{{{','.join(AREAS)}}}/<entry>/<file>")


def _corrupt(path: Path, exc: BaseException) -> InputError:
    why = str(exc).strip() or type(exc).__name__
    return InputError(f"{path} is truncated or corrupt ({why}); nothing was unpacked",
                      hint="download or copy the artifact again, or pack it again from the warmed cache")


def _open_stream(path: Path):
    f = open_input(path, "artifact", hint="pass the file `dgprecompile pack -o` wrote")
    if f.read(2) != b"\x1f\x8b":
        f.close()
        raise InputError(f"{path} is not a dgprecompile artifact (not gzip-compressed)", hint=NOT_OURS_HINT)
    f.seek(0)
    return f


class _TooLarge(Exception):
    """The decompressed stream grew past what the manifest declares."""


class _Bounded:
    """A read-only stream that refuses to yield more than ``limit`` bytes (the limit may be raised)."""

    def __init__(self, raw, limit: int):
        self.raw, self.limit, self.done = raw, limit, 0

    def read(self, size: int = -1) -> bytes:
        want = self.limit - self.done + 1 if size is None or size < 0 else min(size, self.limit - self.done + 1)
        data = self.raw.read(max(want, 0))
        self.done += len(data)
        if self.done > self.limit:
            raise _TooLarge
        return data


# tar framing per member beyond its data: a 512-byte header, a pax header (ours: none; others: small) and the
# padding to 512 bytes; anything a real archive needs fits this many bytes per member
TAR_OVERHEAD = 16 << 10
CHECK_LIMIT = META_LIMIT  # a file the runtime reads (cubin, kernel.cu) is checked in memory; none comes near this


def _check_manifest(path: Path, data: bytes) -> dict[str, Any]:
    from dgprecompile import schemas

    manifest = _load_json(path, MANIFEST_MEMBER, data)
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise InputError(f"{path} is not a dgprecompile cache artifact ({MANIFEST_MEMBER} has another format)",
                         hint=NOT_OURS_HINT)
    if manifest.get("schema") != ARTIFACT_SCHEMA:
        raise InputError(f"{path} has artifact schema {manifest.get('schema')!r}; this dgprecompile reads schema "
                         f"{ARTIFACT_SCHEMA}", hint="unpack it with the dgprecompile version that packed it")
    return schemas.check(manifest, "artifact-manifest", f"{path}: {MANIFEST_MEMBER}", hint=NOT_OURS_HINT)


class _MemberReader:
    """One pass over the archive's members, collecting what read_artifact checks once the stream has ended.

    ``seen``: entry file -> sha256; ``meta``: the manifest's and the index's bytes; ``bad``: entry file -> why the
    runtime could not load it; ``manifest``/``listing``/``arch``: from the first member, the manifest."""

    def __init__(self, path: Path, on_manifest=None):
        self.path, self.on_manifest = path, on_manifest
        self.seen: dict[str, str] = {}
        self.meta: dict[str, bytes] = {}
        self.bad: dict[str, str] = {}
        self.manifest: dict[str, Any] | None = None
        self.listing: dict[str, Any] = {}
        self.arch: str | None = None

    def read(self) -> None:
        path = self.path
        with _open_stream(path) as f:
            try:
                gz = gzip.GzipFile(fileobj=f, mode="rb")
                self.stream_in = _Bounded(gz, META_LIMIT + TAR_OVERHEAD)
                with tarfile.open(fileobj=self.stream_in, mode="r|") as tar:
                    for info in tar:
                        self._member(tar, info)
            except _TooLarge:
                raise InputError(f"{path} expands past the sizes its manifest declares ({self.stream_in.limit} "
                                 "bytes); nothing was unpacked", hint=NOT_OURS_HINT) from None
            except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
                raise _corrupt(path, exc) from None
            except OSError as exc:
                raise _corrupt(path, exc) from None

    def _member(self, tar: tarfile.TarFile, info: tarfile.TarInfo) -> None:
        path = self.path
        check_member(path, info)
        key = info.name.rstrip("/")
        if key in self.seen or key in self.meta:
            raise _refuse(path, info.name, "appears twice")
        if self.manifest is None and info.name != MANIFEST_MEMBER:
            raise InputError(f"{path} is not a dgprecompile cache artifact (its first member is "
                             f"{info.name!r}, not {MANIFEST_MEMBER})", hint=NOT_OURS_HINT)
        if info.isdir():
            return
        stream = tar.extractfile(info)
        if info.name == MANIFEST_MEMBER:
            self._manifest(info, stream)
            return
        if info.name not in self.listing:
            raise _refuse(path, info.name, "not listed in the artifact's manifest")
        if info.size != self.listing[info.name]["bytes"]:
            raise _refuse(path, info.name, f"{info.size} bytes, but the manifest declares "
                          f"{self.listing[info.name]['bytes']}")
        if info.name == INDEX_MEMBER:
            if info.size > META_LIMIT:
                raise _refuse(path, info.name, f"{info.size} bytes is too large")
            self.meta[info.name] = stream.read()
        elif checked_files([info.name.rsplit("/", 1)[-1]]):
            self._checked_file(info, stream)
        else:
            h = hashlib.sha256()
            for chunk in iter(lambda s=stream: s.read(CHUNK), b""):
                h.update(chunk)
            self.seen[info.name] = h.hexdigest()

    def _manifest(self, info: tarfile.TarInfo, stream: IO[bytes]) -> None:
        """The first member: checked (and ``on_manifest`` run) before any other is read; bounds the stream."""
        if info.size > META_LIMIT:
            raise _refuse(self.path, info.name, f"{info.size} bytes is too large")
        self.meta[info.name] = stream.read()
        self.manifest = _check_manifest(self.path, self.meta[info.name])
        if self.on_manifest is not None:
            self.on_manifest(self.meta[info.name])
        self.listing = self.manifest["members"]
        declared = sum(m["bytes"] for m in self.listing.values())
        self.stream_in.limit = self.stream_in.done + declared + TAR_OVERHEAD * (len(self.listing) + 2)
        self.arch = _artifact_arch(self.meta[info.name])

    def _checked_file(self, info: tarfile.TarInfo, stream: IO[bytes]) -> None:
        """A file the runtime reads: checked on its bytes, as warm and verify check them on disk."""
        if info.size > CHECK_LIMIT:
            raise _refuse(self.path, info.name, f"{info.size} bytes is larger than any loadable entry "
                          f"file (limit {CHECK_LIMIT >> 20} MiB)")
        data = stream.read()
        self.seen[info.name] = hashlib.sha256(data).hexdigest()
        problem = file_problem(info.name.rsplit("/", 1)[-1], data, self.arch)
        if problem:
            self.bad[info.name] = problem


def read_artifact(path: str | Path, on_manifest=None) -> Artifact:
    """Read the whole archive and check everything about it; writes nothing anywhere.

    The manifest must be the first member; ``on_manifest(bytes)`` (the signature check) runs on its exact bytes
    before anything else is read. Every later member must be listed there with its size, and the decompressed
    stream may not grow past the sizes the manifest declares (plus the tar framing), so a small hostile archive
    cannot make unpack read gigabytes.
    """
    path = Path(path)
    members = _MemberReader(path, on_manifest)
    members.read()
    manifest, listing, seen, meta = members.manifest, members.listing, members.seen, members.meta
    if manifest is None:
        raise InputError(f"{path} is not a dgprecompile cache artifact (no {MANIFEST_MEMBER})", hint=NOT_OURS_HINT)
    if INDEX_MEMBER not in listing:
        raise InputError(f"{path}: {MANIFEST_MEMBER} does not list {INDEX_MEMBER}", hint=NOT_OURS_HINT)
    _check_digests(path, listing, seen, meta)
    if members.bad:
        name, problem = sorted(members.bad.items())[0]
        raise InputError(f"{path}: {len(members.bad)} entry files are not loadable, e.g. {name}: {problem}; nothing "
                         "was unpacked", hint="pack it again from a cache that `dgprecompile verify` passes")
    index = _read_index(path, meta[INDEX_MEMBER], manifest)
    art = Artifact(path, manifest, index, seen, meta[MANIFEST_MEMBER])
    _check_index_files(art)
    return art


def _check_digests(path: Path, listing: dict[str, Any], seen: dict[str, str], meta: dict[str, bytes]) -> None:
    """Every member the manifest lists was read, and has the sha256 it lists."""
    actual = dict(seen)
    if INDEX_MEMBER in meta:
        actual[INDEX_MEMBER] = hashlib.sha256(meta[INDEX_MEMBER]).hexdigest()
    for name in sorted(set(listing) | set(actual)):
        if name not in actual:
            raise InputError(f"{path} is incomplete: member {name} is listed but absent; nothing was unpacked",
                             hint="download or copy the artifact again")
        want = listing[name]["sha256"]
        if want != actual[name]:
            raise InputError(f"{path}: member {name} is corrupt (sha256 {actual[name][:12]}..., the manifest says "
                             f"{str(want)[:12]}...); nothing was unpacked",
                             hint="download or copy the artifact again, or pack it again from the warmed cache")


def _read_index(path: Path, data: bytes, manifest: dict[str, Any]) -> Index:
    """The archived index, checked against its schema and the manifest's fingerprint."""
    from dgprecompile import schemas

    doc = schemas.check(_load_json(path, INDEX_MEMBER, data), "index", f"{path}: {INDEX_MEMBER}",
                        hint=NOT_OURS_HINT)
    try:
        index = Index.from_dict(doc, f"{path}:{INDEX_MEMBER}")
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InputError(f"{path}: {INDEX_MEMBER} is malformed ({exc})", hint=NOT_OURS_HINT) from None
    if index.fingerprint != manifest["fingerprint"]:
        raise InputError(f"{path}: the index and the manifest disagree on the fingerprint", hint=NOT_OURS_HINT)
    return index


def _check_index_files(art: Artifact) -> None:
    """Every entry the index records is in the archive file for file, and nothing else is."""
    path, seen = art.path, art.members
    expected: dict[str, str] = {}
    for record in art.entry_records().values():
        if not valid_entry_name(record.entry, record.area):
            raise InputError(f"{path}: the index names a bad entry {record.entry!r}", hint=NOT_OURS_HINT)
        for fname, digest in record.files.items():
            expected[f"{record.member_dir}/{fname}"] = digest
    if expected != seen:
        odd = sorted(set(expected) ^ set(seen)) or sorted(k for k in seen if seen[k] != expected.get(k))
        raise InputError(f"{path}: the index does not match the archived files (e.g. {odd[0]})", hint=NOT_OURS_HINT)


def _artifact_arch(manifest: bytes | None) -> str | None:
    """The SM architecture of the artifact's sglang profile, or None when that cannot be told."""
    from dgprecompile.planning.profiles import resolve_profile

    try:
        profile_id = json.loads(manifest)["plan"]["sglang_profile"]
        return resolve_profile(str(profile_id))[0].sm_arch if profile_id else None
    except (TypeError, ValueError, KeyError, DGError):
        return None


def _load_json(path: Path, member: str, data: bytes) -> Any:
    from dgprecompile.documents import load_json_text

    return load_json_text(data, f"{path}: {member}", hint=NOT_OURS_HINT)


# ---- unpack ---------------------------------------------------------------------------------------------


@dataclass
class UnpackResult:
    cache_dir: str
    fingerprint_id: str
    added: list[str] = field(default_factory=list)  # entries installed by this unpack
    present: list[str] = field(default_factory=list)  # identical entries already in the cache
    kept: list[str] = field(default_factory=list)  # existing entries that differ and appeared meanwhile: kept
    replaced: list[str] = field(default_factory=list)  # differing entries replaced by the artifact's (--replace-changed)
    indexed: int = 0  # kernel records added to the index
    stale: list[tuple[str, Any, Any]] = field(default_factory=list)  # fingerprint differences (only with --force)
    signature: str = ""  # who built it: "signed by trusted key ...", or why that was not checked
    build: dict[str, Any] | None = None  # the artifact's build stamp (None: packed before rollback protection)
    notes: list[str] = field(default_factory=list)  # e.g. which build was installed, rollback protection starting
    warnings: list[str] = field(default_factory=list)
    return_code: int = 0  # a refused or failed unpack raises instead

    def to_dict(self) -> dict[str, Any]:
        return {"cache_dir": self.cache_dir, "fingerprint_id": self.fingerprint_id, "added": self.added,
                "already_present": self.present, "kept_existing": self.kept, "replaced": self.replaced,
                "index_records_added": self.indexed, "signature": self.signature, "build": self.build,
                "notes": self.notes,
                "forced_differences": [{"field": f, "artifact": a, "here": b} for f, a, b in self.stale],
                "warnings": self.warnings}


def _fields(stale: list[tuple[str, Any, Any]]) -> str:
    return "; ".join(f"{f}: {a!r} vs {b!r}" for f, a, b in stale)


def _same_entry(store: CacheStore, record: EntryRecord) -> bool:
    return store.check_entry(record) is None


def _copy_stream(src: IO[bytes], dest: Path) -> str:
    """Write one member to ``dest``; returns its sha256. The only place unpack writes entry bytes."""
    h = hashlib.sha256()
    with open(dest, "xb") as out:
        for chunk in iter(lambda: src.read(CHUNK), b""):
            h.update(chunk)
            out.write(chunk)
        out.flush()
        os.fsync(out.fileno())
    return h.hexdigest()


BESIDE = object()  # unpack_artifact(signature=BESIDE): read <artifact>.sig next to the file, if there is one


def read_signature_beside(path: Path) -> bytes | None:
    from dgprecompile.cache.signing import SIGNATURE_LIMIT

    sig = Path(signature_path(str(path)))
    if not os.path.lexists(sig):
        return None
    hint = "remove it, or put the .sig that `dgprecompile pack --signing-key` wrote there"
    with open_input(sig, "the signature", hint=hint) as f:
        try:
            return f.read(SIGNATURE_LIMIT + 1)
        except OSError as exc:
            raise InputError(f"cannot read the signature {sig}: {exc.strerror}", hint="check its permissions") from None


def unpack_artifact(path: str | Path, store: CacheStore | None, *, force: bool = False, nvcc: str | None = None,
                    num_sms: int | None = None, trust: Trust | None = None, signature=BESIDE, shared: bool = False,
                    shown: str | None = None, replace_changed: bool = False) -> UnpackResult:
    """Check ``path`` fully, then merge it into ``store`` (None: the cache dir of the artifact's sglang profile).

    ``trust`` decides whose artifacts are installed (signing.Trust; default: no trusted key, which accepts a local
    file with a warning and refuses a ``shared`` one); ``signature`` is the .sig document's bytes (None: unsigned;
    BESIDE: read ``path``.sig). ``replace_changed``: an existing entry whose bytes differ from the artifact's is
    swapped for the artifact's; without it such an entry refuses the whole unpack (exit 1), naming it.
    """
    path = Path(path)
    trust = trust if trust is not None else Trust()
    sig = read_signature_beside(path) if signature is BESIDE else signature
    origin: list[tuple[str, list[str]]] = []
    art = read_artifact(path, on_manifest=lambda data: origin.append(
        trust.check(data, sig, shown or str(path), shared=shared)))
    fp = art.fingerprint
    if store is None:
        store = CacheStore(default_cache_dir(art))
    result = UnpackResult(str(store.root), short_id(fp))
    result.signature, result.warnings = origin[0][0], list(origin[0][1])
    _check_environment(fp, result, force=force, nvcc=nvcc, num_sms=num_sms)
    existing = _check_cache_fingerprint(store, fp, result, force=force)
    result.build = art.manifest.get("build")
    notes, warnings = rollback.check(store, result.fingerprint_id, result.build, shown or str(path),
                                     allow=trust.allow_rollback)
    result.notes += notes
    result.warnings += warnings

    arch = _artifact_arch(art.manifest_bytes)
    to_add, changed = _classify_entries(store, art, result)
    if changed and not replace_changed:
        raise _changed_error(store, changed, arch)

    probe = Index.from_dict(existing.to_dict(), "index")
    _merge_index(probe, art, store, changed, result.kept)
    index_changes = probe.to_dict() != existing.to_dict()
    if not to_add and not changed and not index_changes:
        _record_build(store, result, shown or str(path))
        return result

    _install(art, store, to_add, changed, arch, result, where=shown or path)
    for name in result.replaced:
        result.warnings.append(f"replaced {name}: it differed from the artifact's (--replace-changed)")
    return result


def _record_build(store: CacheStore, result: UnpackResult, shown: str) -> None:
    """Record the build of the artifact just installed (or whose every entry the cache already held); a write that
    fails leaves the install as it is and says protection did not move forward."""
    try:
        rollback.record(store, result.fingerprint_id, result.build, shown)
    except OSError as exc:
        result.warnings.append(f"could not record which build this cache holds ({exc.strerror or exc}): rollback "
                               "protection did not move forward")


def _check_environment(fp: dict[str, Any], result: UnpackResult, *, force: bool, nvcc: str | None,
                       num_sms: int | None) -> None:
    """Refuse an artifact built for another environment than this one (or one that cannot be checked here),
    unless ``force``; then the differences become warnings (and ``result.stale``)."""
    from dgprecompile.cache.verify import current_environment

    generation = fp["deepgemm"]["generation"]
    env = current_environment(generation, fp, nvcc=nvcc, num_sms=num_sms)
    if env.fingerprint is None:
        why = "; ".join(env.warnings) or "no DeepGEMM or nvcc here"
        if not force:
            raise CheckFailed(f"the artifact's fingerprint could not be checked here ({why})",
                              hint="install the DeepGEMM and nvcc the artifact was built with, or pass --force")
        result.warnings.append(f"fingerprint not checked ({why}); unpacking because of --force")
        return
    from dgprecompile.cache.verify import with_jit_fingerprint

    with_jit_fingerprint(fp, env.fingerprint)
    stale = differences(fp, env.fingerprint)
    if stale and not force:
        raise CheckFailed(f"the artifact was built for another environment: {_fields(stale)}",
                          hint="the runtime here would not find its kernels: warm here instead, or pass --force")
    result.stale = stale
    if stale:
        result.warnings.append(f"unpacking despite fingerprint differences (--force): {_fields(stale)}")


def _check_cache_fingerprint(store: CacheStore, fp: dict[str, Any], result: UnpackResult, *, force: bool) -> Index:
    """The cache's index, refused when it was built for another environment than the artifact (unless ``force``)."""
    existing = store.read_index()
    if existing.fingerprint:
        theirs = differences(existing.fingerprint, fp)
        if theirs and not force:
            raise CheckFailed(f"the cache at {store.root} was built for another environment than the artifact: "
                              f"{_fields(theirs)}", hint="unpack into another --cache-dir, or pass --force")
        if theirs:
            result.warnings.append(f"the cache's index keeps its own fingerprint, which differs from the artifact's "
                                   f"(--force): {_fields(theirs)}")
    return existing


def _classify_entries(store: CacheStore, art: Artifact,
                      result: UnpackResult) -> tuple[dict[str, EntryRecord], dict[str, EntryRecord]]:
    """Sort the artifact's entries into new ones (to add), identical ones (``result.present``) and ones whose
    bytes in the cache differ from the artifact's (changed). Returns (to_add, changed)."""
    to_add: dict[str, EntryRecord] = {}
    changed: dict[str, EntryRecord] = {}
    for name, record in sorted(art.entry_records().items()):
        if not store.entry_path(record.entry, record.area).exists():
            to_add[name] = record
        elif _same_entry(store, record):
            result.present.append(name)
        else:
            changed[name] = record
    return to_add, changed


def _changed_error(store: CacheStore, changed: dict[str, EntryRecord], arch: str | None) -> CheckFailed:
    """The refusal of an unpack that would replace differing entries without --replace-changed, naming one."""
    first = sorted(changed)[0]
    why = store.check_entry(changed[first], arch) or "differs"
    what = "1 entry" if len(changed) == 1 else f"{len(changed)} entries"
    return CheckFailed(f"{what} in {store.root} differ{'s' if len(changed) == 1 else ''} from the artifact's: {first} "
                       f"({why.replace('sha256 mismatch', 'its sha256 differs from the artifact')}); "
                       "nothing was unpacked",
                       hint="pass --replace-changed to swap them for the artifact's (checked first; each swap is "
                            "atomic), or `dgprecompile warm` to rebuild them here")


def _merge_index(index: Index, art: Artifact, store: CacheStore, changed: dict[str, EntryRecord],
                 kept: list[str]) -> int:
    """Merge the artifact's index into ``index`` (in place); returns the kernel records added or replaced.

    A kernel record the cache holds stays unless the artifact replaced its entry (``changed``) or the cache's own
    entry is broken; entries in ``kept`` (differing ones another process installed meanwhile) keep their records."""
    added = 0
    if not index.fingerprint:
        index.fingerprint = art.fingerprint
    for kid, record in art.index.kernels.items():
        if entry_key(record) in kept:
            continue
        mine = index.kernels.get(kid)
        if mine is None or (mine != record and (entry_key(record) in changed
                                                or store.check_entry(mine) is not None)):
            index.kernels[kid] = record
            added += 1
    for name, record in art.index.extra.items():
        if name in kept:
            continue
        if name not in index.extra or name in changed:
            index.extra[name] = record
    for plan in art.index.plans:
        if plan not in index.plans:
            index.plans.append(plan)
    for sweep in art.index.sweeps:  # verify checks each record's entries on disk (cache/sweeps.py)
        if sweep not in index.sweeps:
            index.sweeps.append(sweep)
    for item, record in art.index.triton_moe.items():  # verify checks its Triton and entries (cache/triton_moe.py)
        if index.triton_moe.get(item) != record and (item not in index.triton_moe
                                                     or not _covers_here(store, index, item)):
            index.triton_moe[item] = record  # a record that still covers the item here is kept
    return added


def _install(art: Artifact, store: CacheStore, to_add: dict[str, EntryRecord], changed: dict[str, EntryRecord],
             arch: str | None, result: UnpackResult, *, where: str | Path) -> None:
    """Stage and check every new and changed entry, install them (one rename each), then merge the index under
    its lock. Any failure undoes what this unpack installed, so the cache is left as it was."""
    store.require_writable("unpack into")
    created_root = not store.root.exists()
    installed: list[Path] = []
    swapped: list[tuple[Path, Path]] = []  # (entry in the cache, the old entry now in staging)
    staging: Path | None = None
    work = {**to_add, **changed}
    need = sum(r.bytes for r in work.values())
    if need > free_bytes(store.root):  # the manifest's declared sizes bound what is written: refuse up front
        message, hint = space_message(store.root, need=need, doing="unpacking")
        raise EnvironmentProblem(f"{message}; the cache is unchanged", hint=hint)
    try:
        store.clean_stale_staging()  # what a killed unpack, pull or warm left (their process is gone)
        staging = store.new_staging()
        _stage(art, work, staging, arch, where)
        _install_new(store, staging, to_add, arch, result, installed)
        for name in sorted(changed):
            record = changed[name]
            swapped.append(_swap_in(store, staging, record, arch))
            result.replaced.append(name)
        counter: list[int] = []
        store.update_index(lambda index: counter.append(_merge_index(index, art, store, changed, result.kept)))
        result.indexed = counter[0] if counter else 0
    except BaseException as exc:
        _roll_back(store, installed, swapped, created_root)
        if isinstance(exc, OSError):
            raise _write_error(store, exc, art) from None
        raise
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
    _record_build(store, result, str(where))  # once installed: a failed install records nothing


def _stage(art: Artifact, work: dict[str, EntryRecord], staging: Path, arch: str | None, where: str | Path) -> None:
    """Extract ``work``'s entries into ``staging``; every one passes the entry check before any is installed."""
    if work:
        _extract(art, work, staging)
    for name in sorted(work):
        problem = entry_problem(staging / work[name].member_dir, arch)
        if problem is not None:
            raise InputError(f"{where}: entry {name} is not loadable ({problem}); nothing was unpacked",
                             hint="pack it again from a cache that `dgprecompile verify` passes")


def _install_new(store: CacheStore, staging: Path, to_add: dict[str, EntryRecord], arch: str | None,
                 result: UnpackResult, installed: list[Path]) -> None:
    """Move each new staged entry into the cache, never over an existing one; ``installed`` collects what was
    moved as it goes (the rollback removes exactly those)."""
    for name in sorted(to_add):
        record = to_add[name]
        if store.install_entry(staging / record.member_dir, arch, area=record.area, entry=record.entry):
            installed.append(store.entry_path(record.entry, record.area))
            result.added.append(name)
        elif _same_entry(store, record):  # another process installed the same entry meanwhile
            result.present.append(name)
        else:
            result.kept.append(name)


def _roll_back(store: CacheStore, installed: list[Path], swapped: list[tuple[Path, Path]],
               created_root: bool) -> None:
    """Undo a failed unpack: remove the entries it installed, put back the ones it swapped out."""
    for entry in reversed(installed):
        shutil.rmtree(entry, ignore_errors=True)
    for entry, old in reversed(swapped):  # put the user's entries back as they were
        _restore(entry, old)
    if created_root:
        shutil.rmtree(store.root, ignore_errors=True)


def _swap_in(store: CacheStore, staging: Path, record: EntryRecord, arch: str | None) -> tuple[Path, Path]:
    """Exchange the checked staged entry with the differing one in the cache (one atomic renameat2 where the
    filesystem has it, else two renames); the old one ends in staging. Returns (cache entry, old entry)."""
    staged = staging / record.member_dir
    store._seal(staged, arch, ())
    target = store.entry_path(record.entry, record.area)
    old = staging / "replaced" / record.area / record.entry
    old.parent.mkdir(parents=True, exist_ok=True)
    if exchange_paths(staged, target):
        os.rename(staged, old)
    else:
        os.rename(target, old)
        os.rename(staged, target)
    fsync_dir(target.parent)
    return target, old


def _restore(entry: Path, old: Path) -> None:
    if not old.exists():
        return
    if not exchange_paths(old, entry):
        shutil.rmtree(entry, ignore_errors=True)
        os.rename(old, entry)


def _extract(art: Artifact, to_add: dict[str, EntryRecord], staging: Path) -> None:
    """Second pass over the archive: write the new entries' files under ``staging/<entry>/``."""
    listing = art.manifest["members"]
    limit = len(art.manifest_bytes) + sum(m["bytes"] for m in listing.values()) + TAR_OVERHEAD * (len(listing) + 3)
    try:
        with _open_stream(art.path) as f, tarfile.open(fileobj=_Bounded(gzip.GzipFile(fileobj=f, mode="rb"), limit),
                                                       mode="r|") as tar:
            for info in tar:
                check_member(art.path, info)
                parts = info.name.split("/")
                if not info.isreg() or parts[0] not in AREAS:
                    continue
                if info.size != (listing.get(info.name) or {}).get("bytes"):
                    raise InputError(f"{art.path} changed while it was being unpacked ({info.name}); the cache is "
                                     "unchanged", hint="unpack it again once nothing is writing the file")
                entry_dir = "/".join(parts[:1 + area_depth(parts[0])])
                (staging / entry_dir).mkdir(parents=True, exist_ok=True)
                digest = _copy_stream(tar.extractfile(info), staging / info.name)
                if digest != art.members.get(info.name):
                    raise InputError(f"{art.path} changed while it was being unpacked ({info.name}); the cache is "
                                     "unchanged", hint="unpack it again once nothing is writing the file")
    except _TooLarge:
        raise InputError(f"{art.path} changed while it was being unpacked (it grew); the cache is unchanged",
                         hint="unpack it again once nothing is writing the file") from None
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise _corrupt(art.path, exc) from None
    for name, record in to_add.items():
        if not all((staging / record.member_dir / fname).is_file() for fname in record.files):
            raise InputError(f"{art.path} changed while it was being unpacked ({name} incomplete); the cache is "
                             "unchanged", hint="unpack it again once nothing is writing the file")


def default_cache_dir(art: Artifact) -> Path:
    """The cache directory the runtime of the artifact's sglang profile (and version) uses here."""
    return manifest_cache_dir(art.manifest, str(art.path))


def manifest_cache_dir(manifest: dict[str, Any], where: str) -> Path:
    """The cache directory the runtime of the sglang profile and version in an artifact's manifest uses here."""
    from dgprecompile.planning.profiles import ProfileChoice, resolve_profile

    plan = manifest.get("plan") or {}
    profile_id = plan.get("sglang_profile")
    try:
        profile = resolve_profile(profile_id).profile
    except DGError:
        raise InputError(f"{where} was packed for sglang profile {profile_id!r}, unknown here",
                         hint="pass --cache-dir") from None
    return resolve_cache_dir(ProfileChoice(profile, plan.get("sglang_version"), "the artifact's plan"))


def _write_error(store: CacheStore, exc: OSError, art: Artifact) -> DGError:
    need = sum(r.bytes for r in art.entry_records().values())
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        message, hint = space_message(store.root, exc.errno, need=need, doing="unpacking")
        return EnvironmentProblem(f"{message}; the cache is unchanged", hint=hint)
    where = exc.filename or store.root
    return EnvironmentProblem(f"cannot write {where} while unpacking ({exc.strerror or exc}); the cache is unchanged",
                              hint="check the permissions and free space of the --cache-dir")
