"""What a cache artifact is, and how one is read and checked before anything is unpacked from it.

An artifact is a gzip-compressed tar with::

    dgprecompile/artifact.json     format, schema, fingerprint, plan summary, sha256 and size of every other member
    dgprecompile/index.json        the cache index restricted to the packed kernels (and the index's extra entries)
    cache/<entry>/<file>           the entry files, exactly as DeepGEMM wrote them
    tvm-ffi/<entry>/<file>         SGLang's own JIT modules (sglang 0.5.14), as its build left them
    inductor/<entry>/<file>        torch.compile's captured caches; <entry> nests by its first component
                                   (fxgraph/<k>/<key>, aotautograd/<key>, <bucket>: store.AREA_NESTING)

cache/pack.py writes one; cache/unpack.py installs one. Reading (:func:`read_artifact`) takes the whole archive
and checks it (format, member names and types, every sha256, the index against the members) and writes nothing:
the manifest must come first, every later member must be listed there with its size, and the decompressed stream
may not grow past the sizes the manifest declares, so a small hostile archive cannot make unpack read gigabytes.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import tarfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from dgprecompile.cache.entrycheck import checked_files, file_problem
from dgprecompile.cache.store import AREAS, ENTRIES, EntryRecord, Index, area_depth, ignored, valid_entry_name
from dgprecompile.errors import DGError, InputError
from dgprecompile.fsutil import open_input
from dgprecompile.runtimes.captured import GROUP_LIMIT, group_form, is_group_file

FORMAT = "dgprecompile-cache-artifact"
ARTIFACT_SCHEMA = 1
MANIFEST_MEMBER = "dgprecompile/artifact.json"
INDEX_MEMBER = "dgprecompile/index.json"
ENTRY_DIR = ENTRIES
META_LIMIT = 64 << 20  # artifact.json and index.json are read into memory; no real one comes near this
CHUNK = 1 << 20
NOT_OURS_HINT = "only unpack artifacts written by `dgprecompile pack`; pack it again from the warmed cache"


@dataclass
class Artifact:
    path: Path
    manifest: dict[str, Any]
    index: Index
    members: dict[str, str]  # member name -> sha256 (entry files only)
    manifest_bytes: bytes = b""  # exactly as archived: what a signature covers
    # Triton group file member -> its form wherever its entry lies (runtimes.captured.group_form): how unpack knows
    # an entry warm or launch pointed at the cache's root (relocate) for the artifact's own
    group_forms: dict[str, str] = field(default_factory=dict)

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


NAME_MAX = 255  # bytes of one path component (Linux's NAME_MAX)


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
    long = next((p for p in parts if len(p.encode("utf-8", "surrogateescape")) > NAME_MAX), None)
    if long is not None:
        raise _refuse(path, name, f"a path component of {len(long.encode('utf-8', 'surrogateescape'))} bytes, "
                      f"longer than a file name may be ({NAME_MAX})")
    if len(parts) > 1 and ignored(parts[0], parts[1]):
        raise _refuse(path, name, f"{parts[0]}/{parts[1]}/ holds the library's own bookkeeping (its locks), no entries")
    # an area's entry names may nest (store.AREA_DEPTH), in inductor's by their first component (store.AREA_NESTING)
    depth = area_depth(parts[0], parts[1] if len(parts) > 1 else None) if parts[0] in AREAS else 1
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


def corrupt(path: Path, exc: BaseException) -> InputError:
    """The refusal of an archive that is truncated or not a valid gzip/tar stream."""
    why = str(exc).strip() or type(exc).__name__
    return InputError(f"{path} is truncated or corrupt ({why}); nothing was unpacked",
                      hint="download or copy the artifact again, or pack it again from the warmed cache")


def open_stream(path: Path):
    """The artifact opened for reading, refused unless it is gzip-compressed."""
    f = open_input(path, "artifact", hint="pass the file `dgprecompile pack -o` wrote")
    if f.read(2) != b"\x1f\x8b":
        f.close()
        raise InputError(f"{path} is not a dgprecompile artifact (not gzip-compressed)", hint=NOT_OURS_HINT)
    f.seek(0)
    return f


class TooLarge(Exception):
    """The decompressed stream grew past what the manifest declares."""


class Bounded:
    """A read-only stream that refuses to yield more than ``limit`` bytes (the limit may be raised)."""

    def __init__(self, raw, limit: int):
        self.raw, self.limit, self.done = raw, limit, 0

    def read(self, size: int = -1) -> bytes:
        want = self.limit - self.done + 1 if size is None or size < 0 else min(size, self.limit - self.done + 1)
        data = self.raw.read(max(want, 0))
        self.done += len(data)
        if self.done > self.limit:
            raise TooLarge
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
    runtime could not load it; ``forms``: Triton group file -> its form wherever it lies; ``manifest``/``listing``/
    ``arch``: from the first member, the manifest."""

    def __init__(self, path: Path, on_manifest=None):
        self.path, self.on_manifest = path, on_manifest
        self.seen: dict[str, str] = {}
        self.meta: dict[str, bytes] = {}
        self.bad: dict[str, str] = {}
        self.forms: dict[str, str] = {}
        self.manifest: dict[str, Any] | None = None
        self.listing: dict[str, Any] = {}
        self.arch: str | None = None

    def read(self) -> None:
        path = self.path
        with open_stream(path) as f:
            try:
                gz = gzip.GzipFile(fileobj=f, mode="rb")
                self.stream_in = Bounded(gz, META_LIMIT + TAR_OVERHEAD)
                with tarfile.open(fileobj=self.stream_in, mode="r|") as tar:
                    for info in tar:
                        self._member(tar, info)
            except TooLarge:
                raise InputError(f"{path} expands past the sizes its manifest declares ({self.stream_in.limit} "
                                 "bytes); nothing was unpacked", hint=NOT_OURS_HINT) from None
            except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
                raise corrupt(path, exc) from None
            except OSError as exc:
                raise corrupt(path, exc) from None

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
        elif is_group_file(info.name.rsplit("/", 1)[-1]) and info.size <= GROUP_LIMIT:
            data = stream.read()  # one small file at a time; what is kept is a digest a member
            self.seen[info.name] = hashlib.sha256(data).hexdigest()
            form = group_form(data)
            if form is not None:
                self.forms[info.name] = form
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
        self.arch = artifact_arch(self.meta[info.name])

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
    art = Artifact(path, manifest, index, seen, meta[MANIFEST_MEMBER], members.forms)
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


def artifact_arch(manifest: bytes | None) -> str | None:
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
