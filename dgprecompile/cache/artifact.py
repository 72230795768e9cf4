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
import io
import json
import os
import shutil
import tarfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from dgprecompile import __version__
from dgprecompile.cache.entrycheck import checked_files, file_problem
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
from dgprecompile.fsutil import atomic_writer, space_message
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
    return_code: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "fingerprint_id": self.fingerprint_id, "kernels": len(self.kernels),
                "missing": self.missing, "entries": len(self.entries), "bytes": self.bytes}



def _tarinfo(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = 0
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.type = tarfile.REGTYPE
    return info


def _json_bytes(data: Any) -> bytes:
    return (json.dumps(data, indent=1, sort_keys=True) + "\n").encode()


def output_path(template: str, fingerprint: dict[str, Any]) -> Path:
    """``-o`` with ``{fingerprint}`` replaced by the fingerprint's short id."""
    return Path(template.replace("{fingerprint}", short_id(fingerprint))).expanduser()


def pack_cache(plan: Plan, store: CacheStore, output: str, *, allow_missing: bool = False) -> PackResult:
    index = store.read_index()
    if not index.fingerprint:
        raise CheckFailed(f"{store.root} has no dgprecompile index: nothing warmed there to pack",
                          hint=f"run `dgprecompile warm ... --cache-dir {store.root}` first")
    kernels: dict[str, EntryRecord] = {}
    missing: list[str] = []
    changed: list[tuple[str, str, str]] = []
    arch = plan.profile.sm_arch
    for kid in sorted(plan.kernels) + sorted(plan.jit_modules):
        record = index.kernels.get(kid)
        problem = "missing" if record is None else store.check_entry(record, arch)
        if problem is None:
            kernels[kid] = record
        elif problem == "missing":
            missing.append(kid)
        else:
            changed.append((kid, record.member_dir, problem))
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
    packed = Index(index.fingerprint, kernels, extra, [plan.summary()], list(index.sweeps))  # + swept m ranges
    entries = sorted({r.member_dir: r for r in [*kernels.values(), *extra.values()]}.values(),
                     key=lambda r: r.member_dir)

    target = output_path(output, index.fingerprint)
    if target.is_dir():
        raise InputError(f"{target} is a directory", hint="pass a file name to -o, e.g. -o out/cache-{fingerprint}.tar.gz")
    with atomic_writer(target) as raw:
        _write_archive(raw, store, packed, entries, plan, missing)
    return PackResult(target, short_id(index.fingerprint), sorted(kernels), missing, [entry_key(r) for r in entries],
                      target.stat().st_size, str(store.root))


def _write_archive(raw: IO[bytes], store: CacheStore, packed: Index, entries: list[EntryRecord], plan: Plan,
                   missing: list[str]) -> None:
    members: dict[str, bytes] = {INDEX_MEMBER: _json_bytes(packed.to_dict())}
    files: list[tuple[str, Path, str]] = []
    for record in entries:
        for name, digest in sorted(record.files.items()):
            files.append((f"{record.member_dir}/{name}", store.entry_path(record.entry, record.area) / name, digest))
    listing = {INDEX_MEMBER: {"sha256": hashlib.sha256(members[INDEX_MEMBER]).hexdigest(),
                              "bytes": len(members[INDEX_MEMBER])}}
    blobs: dict[str, bytes] = {}
    for member, path, digest in files:
        data = path.read_bytes()
        if hashlib.sha256(data).hexdigest() != digest:
            raise CheckFailed(f"{path} changed while packing", hint="run pack again when no warm is writing")
        blobs[member] = data
        listing[member] = {"sha256": digest, "bytes": len(data)}
    manifest = {
        "format": FORMAT, "schema": ARTIFACT_SCHEMA, "created_by": f"dgprecompile {__version__}",
        "fingerprint": packed.fingerprint, "fingerprint_id": short_id(packed.fingerprint),
        "generation": (packed.fingerprint.get("deepgemm") or {}).get("generation"),
        "plan": plan.summary(), "kernels": sorted(packed.kernels), "missing": missing,
        "entries": [entry_key(r) for r in entries], "members": dict(sorted(listing.items())),
    }
    with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            # the manifest first, so a reader knows what it holds before the data
            for name, data in [(MANIFEST_MEMBER, _json_bytes(manifest)), (INDEX_MEMBER, members[INDEX_MEMBER]),
                               *sorted(blobs.items())]:
                tar.addfile(_tarinfo(name, len(data)), io.BytesIO(data))


# ---- reading and checking an artifact --------------------------------------------------------------------


@dataclass
class Artifact:
    path: Path
    manifest: dict[str, Any]
    index: Index
    members: dict[str, str]  # member name -> sha256 (entry files only)

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
    if not path.exists():
        raise InputError(f"artifact not found: {path}", hint="pass the file `dgprecompile pack -o` wrote")
    if not path.is_file():
        raise InputError(f"{path} is not a file", hint="pass the file `dgprecompile pack -o` wrote")
    try:
        f = open(path, "rb")
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror}") from None
    if f.read(2) != b"\x1f\x8b":
        f.close()
        raise InputError(f"{path} is not a dgprecompile artifact (not gzip-compressed)", hint=NOT_OURS_HINT)
    f.seek(0)
    return f


def read_artifact(path: str | Path) -> Artifact:
    """Read the whole archive and check everything about it; writes nothing anywhere."""
    path = Path(path)
    seen: dict[str, str] = {}
    meta: dict[str, bytes] = {}
    bad: dict[str, str] = {}  # entry file -> why the runtime could not load it
    arch: str | None | bool = False  # the planned SM architecture, read from the manifest (the first member)
    with _open_stream(path) as f:
        try:
            with tarfile.open(fileobj=f, mode="r|gz") as tar:
                for info in tar:
                    check_member(path, info)
                    key = info.name.rstrip("/")
                    if key in seen or key in meta:
                        raise _refuse(path, info.name, "appears twice")
                    if info.isdir():
                        continue
                    stream = tar.extractfile(info)
                    if info.name in (MANIFEST_MEMBER, INDEX_MEMBER):
                        if info.size > META_LIMIT:
                            raise _refuse(path, info.name, f"{info.size} bytes is too large")
                        meta[info.name] = stream.read()
                    elif checked_files([info.name.rsplit("/", 1)[-1]]) and info.size <= META_LIMIT:
                        # a file the runtime reads: checked on its bytes, as warm and verify check them on disk
                        data = stream.read()
                        seen[info.name] = hashlib.sha256(data).hexdigest()
                        if arch is False:
                            arch = _artifact_arch(meta.get(MANIFEST_MEMBER))
                        problem = file_problem(info.name.rsplit("/", 1)[-1], data, arch or None)
                        if problem:
                            bad[info.name] = problem
                    else:
                        h = hashlib.sha256()
                        for chunk in iter(lambda s=stream: s.read(CHUNK), b""):
                            h.update(chunk)
                        seen[info.name] = h.hexdigest()
        except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
            raise _corrupt(path, exc) from None
        except OSError as exc:
            raise _corrupt(path, exc) from None
    if MANIFEST_MEMBER not in meta:
        raise InputError(f"{path} is not a dgprecompile cache artifact (no {MANIFEST_MEMBER})", hint=NOT_OURS_HINT)
    manifest = _load_json(path, MANIFEST_MEMBER, meta[MANIFEST_MEMBER])
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise InputError(f"{path} is not a dgprecompile cache artifact ({MANIFEST_MEMBER} has another format)",
                         hint=NOT_OURS_HINT)
    if manifest.get("schema") != ARTIFACT_SCHEMA:
        raise InputError(f"{path} has artifact schema {manifest.get('schema')!r}; this dgprecompile reads schema "
                         f"{ARTIFACT_SCHEMA}", hint="unpack it with the dgprecompile version that packed it")
    listing = manifest.get("members")
    if not isinstance(listing, dict) or not isinstance(manifest.get("fingerprint"), dict):
        raise InputError(f"{path}: {MANIFEST_MEMBER} is malformed (no members or fingerprint)", hint=NOT_OURS_HINT)
    actual = dict(seen)
    if INDEX_MEMBER in meta:
        actual[INDEX_MEMBER] = hashlib.sha256(meta[INDEX_MEMBER]).hexdigest()
    for name in sorted(set(listing) | set(actual)):
        if name not in actual:
            raise InputError(f"{path} is incomplete: member {name} is listed but absent; nothing was unpacked",
                             hint="download or copy the artifact again")
        if name not in listing:
            raise _refuse(path, name, "not listed in the artifact's manifest")
        want = listing[name].get("sha256") if isinstance(listing[name], dict) else None
        if want != actual[name]:
            raise InputError(f"{path}: member {name} is corrupt (sha256 {actual[name][:12]}..., the manifest says "
                             f"{str(want)[:12]}...); nothing was unpacked",
                             hint="download or copy the artifact again, or pack it again from the warmed cache")
    if bad:
        name, problem = sorted(bad.items())[0]
        raise InputError(f"{path}: {len(bad)} entry files are not loadable, e.g. {name}: {problem}; nothing was "
                         "unpacked", hint="pack it again from a cache that `dgprecompile verify` passes")
    try:
        index = Index.from_dict(_load_json(path, INDEX_MEMBER, meta[INDEX_MEMBER]), f"{path}:{INDEX_MEMBER}")
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InputError(f"{path}: {INDEX_MEMBER} is malformed ({exc})", hint=NOT_OURS_HINT) from None
    if index.fingerprint != manifest["fingerprint"]:
        raise InputError(f"{path}: the index and the manifest disagree on the fingerprint", hint=NOT_OURS_HINT)
    art = Artifact(path, manifest, index, seen)
    # every entry the index records is in the archive file for file, and nothing else is
    expected: dict[str, str] = {}
    for record in art.entry_records().values():
        if not valid_entry_name(record.entry, record.area):
            raise InputError(f"{path}: the index names a bad entry {record.entry!r}", hint=NOT_OURS_HINT)
        for fname, digest in record.files.items():
            expected[f"{record.member_dir}/{fname}"] = digest
    if expected != seen:
        odd = sorted(set(expected) ^ set(seen)) or sorted(k for k in seen if seen[k] != expected.get(k))
        raise InputError(f"{path}: the index does not match the archived files (e.g. {odd[0]})", hint=NOT_OURS_HINT)
    return art


def _artifact_arch(manifest: bytes | None) -> str | None:
    """The SM architecture of the artifact's sglang profile, or None when that cannot be told."""
    from dgprecompile.planning.profiles import resolve_profile

    try:
        profile_id = json.loads(manifest)["plan"]["sglang_profile"]
        return resolve_profile(str(profile_id))[0].sm_arch if profile_id else None
    except (TypeError, ValueError, KeyError, DGError):
        return None


def _load_json(path: Path, member: str, data: bytes) -> Any:
    try:
        return json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: {member} is not valid JSON ({exc})", hint=NOT_OURS_HINT) from None


# ---- unpack ---------------------------------------------------------------------------------------------


@dataclass
class UnpackResult:
    cache_dir: str
    fingerprint_id: str
    added: list[str] = field(default_factory=list)  # entries installed by this unpack
    present: list[str] = field(default_factory=list)  # identical entries already in the cache
    kept: list[str] = field(default_factory=list)  # existing entries that differ from the artifact's: kept
    indexed: int = 0  # kernel records added to the index
    stale: list[tuple[str, Any, Any]] = field(default_factory=list)  # fingerprint differences (only with --force)
    warnings: list[str] = field(default_factory=list)
    return_code: int = 0  # a refused or failed unpack raises instead

    def to_dict(self) -> dict[str, Any]:
        return {"cache_dir": self.cache_dir, "fingerprint_id": self.fingerprint_id, "added": self.added,
                "already_present": self.present, "kept_existing": self.kept, "index_records_added": self.indexed,
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


def unpack_artifact(path: str | Path, store: CacheStore | None, *, force: bool = False, nvcc: str | None = None,
                    num_sms: int | None = None) -> UnpackResult:
    """Check ``path`` fully, then merge it into ``store`` (None: the cache dir of the artifact's sglang profile)."""
    from dgprecompile.cache.verify import current_environment

    art = read_artifact(path)
    fp = art.fingerprint
    if store is None:
        store = CacheStore(default_cache_dir(art))
    result = UnpackResult(str(store.root), short_id(fp))
    generation = (fp.get("deepgemm") or {}).get("generation") or "unknown"
    env = current_environment(generation, fp, nvcc=nvcc, num_sms=num_sms)
    if env.fingerprint is None:
        why = "; ".join(env.warnings) or "no DeepGEMM or nvcc here"
        if not force:
            raise CheckFailed(f"the artifact's fingerprint could not be checked here ({why})",
                              hint="install the DeepGEMM and nvcc the artifact was built with, or pass --force")
        result.warnings.append(f"fingerprint not checked ({why}); unpacking because of --force")
    else:
        from dgprecompile.cache.verify import with_jit_fingerprint

        with_jit_fingerprint(fp, env.fingerprint)
        stale = differences(fp, env.fingerprint)
        if stale and not force:
            raise CheckFailed(f"the artifact was built for another environment: {_fields(stale)}",
                              hint="the runtime here would not find its kernels: warm here instead, or pass --force")
        result.stale = stale
        if stale:
            result.warnings.append(f"unpacking despite fingerprint differences (--force): {_fields(stale)}")
    existing = store.read_index()
    if existing.fingerprint:
        theirs = differences(existing.fingerprint, fp)
        if theirs and not force:
            raise CheckFailed(f"the cache at {store.root} was built for another environment than the artifact: "
                              f"{_fields(theirs)}", hint="unpack into another --cache-dir, or pass --force")
        if theirs:
            result.warnings.append(f"the cache's index keeps its own fingerprint, which differs from the artifact's "
                                   f"(--force): {_fields(theirs)}")

    arch = _artifact_arch(_json_bytes(art.manifest))
    records = art.entry_records()
    to_add: dict[str, EntryRecord] = {}
    for name, record in sorted(records.items()):
        if not store.entry_path(record.entry, record.area).exists():
            to_add[name] = record
        elif _same_entry(store, record):
            result.present.append(name)
        else:
            result.kept.append(name)

    def merge(index: Index) -> int:
        added = 0
        if not index.fingerprint:
            index.fingerprint = fp
        for kid, record in art.index.kernels.items():
            if entry_key(record) in result.kept:
                continue
            mine = index.kernels.get(kid)
            if mine is None or (mine != record and store.check_entry(mine) is not None):
                index.kernels[kid] = record
                added += 1
        for name, record in art.index.extra.items():
            if name not in result.kept and name not in index.extra:
                index.extra[name] = record
        for plan in art.index.plans:
            if plan not in index.plans:
                index.plans.append(plan)
        for sweep in art.index.sweeps:  # verify checks each record's entries on disk (cache/sweeps.py)
            if sweep not in index.sweeps:
                index.sweeps.append(sweep)
        return added

    probe = Index.from_dict(existing.to_dict(), "index")
    merge(probe)
    index_changes = probe.to_dict() != existing.to_dict()
    if not to_add and not index_changes:
        return result

    store.require_writable("unpack into")
    created_root = not store.root.exists()
    installed: list[Path] = []
    staging: Path | None = None
    try:
        staging = store.new_staging()
        if to_add:
            _extract(art, to_add, staging)
        for name in sorted(to_add):
            record = to_add[name]
            if store.install_entry(staging / record.member_dir, arch, area=record.area, entry=record.entry):
                installed.append(store.entry_path(record.entry, record.area))
                result.added.append(name)
            elif _same_entry(store, to_add[name]):  # another process installed the same entry meanwhile
                result.present.append(name)
            else:
                result.kept.append(name)
        counter: list[int] = []
        store.update_index(lambda index: counter.append(merge(index)))
        result.indexed = counter[0] if counter else 0
    except BaseException as exc:
        for entry in reversed(installed):
            shutil.rmtree(entry, ignore_errors=True)
        if created_root:
            shutil.rmtree(store.root, ignore_errors=True)
        if isinstance(exc, OSError):
            raise _write_error(store, exc, art) from None
        raise
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
    return result


def _extract(art: Artifact, to_add: dict[str, EntryRecord], staging: Path) -> None:
    """Second pass over the archive: write the new entries' files under ``staging/<entry>/``."""
    try:
        with _open_stream(art.path) as f, tarfile.open(fileobj=f, mode="r|gz") as tar:
            for info in tar:
                check_member(art.path, info)
                parts = info.name.split("/")
                if not info.isreg() or parts[0] not in AREAS:
                    continue
                entry_dir = "/".join(parts[:1 + area_depth(parts[0])])
                key = parts[1] if parts[0] == ENTRY_DIR else entry_dir
                if key not in to_add:
                    continue
                (staging / entry_dir).mkdir(parents=True, exist_ok=True)
                digest = _copy_stream(tar.extractfile(info), staging / info.name)
                if digest != art.members.get(info.name):
                    raise InputError(f"{art.path} changed while it was being unpacked ({info.name}); the cache is "
                                     "unchanged", hint="unpack it again once nothing is writing the file")
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
