"""unpack: check an artifact fully, then merge it into a cache as one transaction.

Before it touches the cache: the whole archive is read and checked (cache/artifact.py), its signature against the
trusted keys (cache/signing.py), its fingerprint against this environment and the cache's, and its build against
the one the cache holds (cache/rollback.py). Then it extracts the new entries into a staging directory on the
cache's filesystem, checks each, moves each into place with one rename (never over an existing entry; a differing
one only with --replace-changed, by an atomic exchange) and merges the index under its lock. Any failure undoes
what this unpack installed, so the cache is left as it was. Without --cache-dir the artifact goes to the cache
directory its sglang profile's runtime uses here.
"""

from __future__ import annotations

import errno
import gzip
import hashlib
import os
import shutil
import tarfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from dgprecompile.cache import rollback
from dgprecompile.cache.artifact import (
    CHUNK,
    TAR_OVERHEAD,
    Artifact,
    Bounded,
    TooLarge,
    artifact_arch,
    check_member,
    corrupt,
    entry_key,
    open_stream,
    read_artifact,
)
from dgprecompile.cache.confine import link_on_the_way
from dgprecompile.cache.entrycheck import entry_problem
from dgprecompile.cache.signing import Trust, signature_path
from dgprecompile.cache.store import (
    AREAS,
    LINKED_HINT,
    OURS,
    CacheStore,
    EntryRecord,
    Index,
    area_depth,
    resolve_cache_dir,
)
from dgprecompile.errors import CheckFailed, DGError, EnvironmentProblem, InputError
from dgprecompile.fsutil import exchange_paths, free_bytes, fsync_dir, open_input, space_message, space_needed
from dgprecompile.keys.fingerprint import differences, short_id
from dgprecompile.runtimes import family_for_area


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


def _same_entry(store: CacheStore, record: EntryRecord, art: Artifact) -> bool:
    """Whether the cache holds the artifact's entry: its bytes, or (Triton) its bytes with the group files pointed
    at this cache's root, as warm and launch leave an entry unpacked before (cache/relocate.py)."""
    return store.check_entry(record, forms=art.group_forms) is None


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
    """The bytes of ``path``.sig (what `pack --signing-key` wrote), or None when there is none."""
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
    _refuse_links(store, art)
    _check_environment(fp, result, force=force, nvcc=nvcc, num_sms=num_sms)
    existing = _check_cache_fingerprint(store, fp, result, force=force)
    result.build = art.manifest.get("build")
    notes, warnings = rollback.check(store, result.fingerprint_id, result.build, shown or str(path),
                                     allow=trust.allow_rollback)
    result.notes += notes
    result.warnings += warnings

    arch = artifact_arch(art.manifest_bytes)
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


BOOKKEEPING = ("index.json", "index.lock", "installed-builds.json", "staging", "locks")  # under <root>/dgprecompile


def _refuse_links(store: CacheStore, art: Artifact) -> None:
    """Refuse, before anything is read or written in the cache, a symbolic link anywhere on the way from the cache
    root to a path unpack would write (its bookkeeping, each entry of the artifact): through it the entries would
    land where the link points (the root itself is the user's choice and may be one)."""
    paths = [f"{OURS}/{name}" for name in BOOKKEEPING] + sorted({r.member_dir for r in art.entry_records().values()})
    for rel in paths:
        why = link_on_the_way(store.root, rel)
        if why:
            raise CheckFailed(f"{why}: unpack writes only inside the cache's own folders; nothing was unpacked",
                              hint=LINKED_HINT)


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
        elif _same_entry(store, record, art):
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
    from dgprecompile.runtimes import FLASHINFER_MODULES, INDUCTOR_GRAPHS, TRITON_PATH

    # verify checks their records (cache/item_records.py)
    for runtime in (INDUCTOR_GRAPHS, FLASHINFER_MODULES, TRITON_PATH):
        mine = getattr(index, runtime.section)
        for item, record in getattr(art.index, runtime.section).items():
            if mine.get(item) != record and (item not in mine or not _recorded_here(store, index, runtime, item)):
                mine[item] = record  # a record that still covers the item here is kept
    return added


def _recorded_here(store: CacheStore, index: Index, runtime, item: str) -> bool:
    """Whether the index's record of an item built outside the pool (torch.compile graphs, FlashInfer modules)
    covers it here (what is installed here, its entries whole)."""
    from dgprecompile.cache.item_records import COVERED, item_coverage

    return item_coverage(store, index, runtime, item, runtime.installed()).status == COVERED


def _covers_here(store: CacheStore, index: Index, item: str) -> bool:
    """Whether the index's record of a Triton fused-MoE item covers it here (this Triton, its entries whole)."""
    from dgprecompile.cache.triton_moe import COVERED, item_coverage
    from dgprecompile.runtimes.triton_moe import TRITON_MOE

    return item_coverage(store, index, item, TRITON_MOE.installed()).status == COVERED


def _install(art: Artifact, store: CacheStore, to_add: dict[str, EntryRecord], changed: dict[str, EntryRecord],
             arch: str | None, result: UnpackResult, *, where: str | Path) -> None:
    """Stage and check every new and changed entry, install them (one rename each), then merge the index under
    its lock. Any failure undoes what this unpack installed, so the cache is left as it was."""
    store.require_writable("unpack into")
    work = {**to_add, **changed}
    made = _dirs_to_make(store, work.values())  # what this unpack creates: the only folders its roll-back removes
    installed: list[Path] = []
    swapped: list[tuple[Path, Path]] = []  # (entry in the cache, the old entry now in staging)
    staging: Path | None = None
    need = _need(store, art, work)
    if need > free_bytes(store.root):  # the manifest's declared sizes bound what is written: refuse up front
        message, hint = space_message(store.root, need=need, doing="unpacking")
        raise EnvironmentProblem(f"{message}; the cache is unchanged", hint=hint)
    try:
        store.clean_stale_staging()  # what a killed unpack, pull or warm left (their process is gone)
        staging = store.new_staging()
        _stage(art, work, staging, arch, where)
        _install_new(store, staging, to_add, art, arch, result, installed)
        for name in sorted(changed):
            record = changed[name]
            swapped.append(_swap_in(store, staging, record, arch))
            result.replaced.append(name)
        counter: list[int] = []
        store.update_index(lambda index: counter.append(_merge_index(index, art, store, changed, result.kept)))
        result.indexed = counter[0] if counter else 0
    except BaseException as exc:
        error = _write_error(store, exc, need) if isinstance(exc, OSError) else None  # as the filesystem is now
        if staging is not None:
            store.release_staging(staging)
        _roll_back(store, installed, swapped, made)
        if error is not None:
            raise error from None
        raise
    finally:
        if staging is not None:
            store.release_staging(staging)
    _record_build(store, result, str(where))  # once installed: a failed install records nothing


def _stage(art: Artifact, work: dict[str, EntryRecord], staging: Path, arch: str | None, where: str | Path) -> None:
    """Extract ``work``'s entries into ``staging``; every one passes the entry check before any is installed."""
    if work:
        _extract(art, work, staging)
    for name in sorted(work):
        staged, family = staging / work[name].member_dir, family_for_area(work[name].area)
        problem = entry_problem(staged, arch) or (family.entry_problem(staged, here=False) if family else None)
        if problem is not None:
            raise InputError(f"{where}: entry {name} is not loadable ({problem}); nothing was unpacked",
                             hint="pack it again from a cache that `dgprecompile verify` passes")


def _install_new(store: CacheStore, staging: Path, to_add: dict[str, EntryRecord], art: Artifact, arch: str | None,
                 result: UnpackResult, installed: list[Path]) -> None:
    """Move each new staged entry into the cache, never over an existing one; ``installed`` collects what was
    moved as it goes (the rollback removes exactly those)."""
    for name in sorted(to_add):
        record = to_add[name]
        if store.install_entry(staging / record.member_dir, arch, area=record.area, entry=record.entry):
            installed.append(store.entry_path(record.entry, record.area))
            result.added.append(name)
        elif _same_entry(store, record, art):  # another process installed the same entry meanwhile
            result.present.append(name)
        else:
            result.kept.append(name)


def _dirs_to_make(store: CacheStore, records) -> list[Path]:
    """The folders at or below the cache root that are not there yet and that this unpack would make (the root,
    its bookkeeping folders, each entry's area and parents), deepest first."""
    wanted = {store.root, store.ours, store.ours / "staging", store.ours / "locks"}
    for record in records:
        path = store.entry_path(record.entry, record.area)
        while path != store.root:
            path = path.parent
            wanted.add(path)
    return sorted((d for d in wanted if not os.path.lexists(d)), key=lambda d: len(d.parts), reverse=True)


def _roll_back(store: CacheStore, installed: list[Path], swapped: list[tuple[Path, Path]], made: list[Path]) -> None:
    """Undo a failed unpack under the index lock: remove the entries it installed, put back the ones it swapped
    out, and remove the folders it made only while they hold nothing (another unpack may have installed into
    them meanwhile: what it wrote stays, and so do the folders on its way)."""
    with _index_lock_if_possible(store):
        for entry in reversed(installed):
            shutil.rmtree(entry, ignore_errors=True)
        for entry, old in reversed(swapped):  # put the user's entries back as they were
            _restore(entry, old)
        for folder in made:
            if folder == store.ours:
                _drop_lock_file(store)
            try:
                os.rmdir(folder)  # only an empty folder: never what anyone else put there
            except OSError:
                pass


@contextmanager
def _index_lock_if_possible(store: CacheStore) -> Iterator[None]:
    """The index lock, or none where its file cannot be made (the failure being rolled back may be that): the
    roll-back goes on either way, removing only what is its own."""
    try:
        lock = store.index_lock()
        lock.__enter__()
    except OSError:
        yield
        return
    try:
        yield
    finally:
        lock.__exit__(None, None, None)


def _drop_lock_file(store: CacheStore) -> None:
    """Remove the index lock file of a bookkeeping folder this unpack made, when it is all that folder holds
    besides the empty folders this unpack made (no index, no build record, nobody's staging)."""
    lock = store.ours / "index.lock"
    try:
        rest = [p for p in store.ours.iterdir() if p != lock]
    except OSError:
        return
    if all(p.is_dir() and not p.is_symlink() and not any(p.iterdir()) for p in rest):
        lock.unlink(missing_ok=True)


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
        with open_stream(art.path) as f, tarfile.open(fileobj=Bounded(gzip.GzipFile(fileobj=f, mode="rb"), limit),
                                                       mode="r|") as tar:
            for info in tar:
                check_member(art.path, info)
                parts = info.name.split("/")
                if not info.isreg() or parts[0] not in AREAS:
                    continue
                if info.size != (listing.get(info.name) or {}).get("bytes"):
                    raise InputError(f"{art.path} changed while it was being unpacked ({info.name}); the cache is "
                                     "unchanged", hint="unpack it again once nothing is writing the file")
                entry_dir = "/".join(parts[:1 + area_depth(parts[0], parts[1])])
                (staging / entry_dir).mkdir(parents=True, exist_ok=True)
                digest = _copy_stream(tar.extractfile(info), staging / info.name)
                if digest != art.members.get(info.name):
                    raise InputError(f"{art.path} changed while it was being unpacked ({info.name}); the cache is "
                                     "unchanged", hint="unpack it again once nothing is writing the file")
    except TooLarge:
        raise InputError(f"{art.path} changed while it was being unpacked (it grew); the cache is unchanged",
                         hint="unpack it again once nothing is writing the file") from None
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise corrupt(art.path, exc) from None
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


def _need(store: CacheStore, art: Artifact, work: dict[str, EntryRecord]) -> int:
    """Bytes the install takes on the cache's filesystem: each file staged (whole blocks), a folder per entry and
    one for staging, and the index rewritten beside the old one."""
    from dgprecompile.cache.artifact import INDEX_MEMBER

    sizes = [art.manifest["members"][f"{r.member_dir}/{name}"]["bytes"] for r in work.values() for name in r.files]
    index = art.manifest["members"].get(INDEX_MEMBER, {}).get("bytes", 0)
    current = store.index_path.stat().st_size if store.index_path.is_file() else 0
    return space_needed(store.root, [*sizes, index + current], dirs=len(work) + 1)


def _write_error(store: CacheStore, exc: OSError, need: int) -> DGError:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        message, hint = space_message(store.root, exc.errno, need=need, doing="unpacking")
        return EnvironmentProblem(f"{message}; the cache is unchanged", hint=hint)
    where = exc.filename or store.root
    return EnvironmentProblem(f"cannot write {where} while unpacking ({exc.strerror or exc}); the cache is unchanged",
                              hint="check the permissions and free space of the --cache-dir")
