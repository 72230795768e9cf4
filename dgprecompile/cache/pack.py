"""pack: a warmed cache's planned entries into one artifact (cache/artifact.py says what one holds).

Packing is deterministic (sorted members, zero mtimes/uids, fixed modes, gzip mtime 0): the same cache packs
to the same bytes, so a CI cache keyed on the fingerprint stays stable. Only files inside the real cache root,
of one link each, within the caps of data/limits.yaml are packed (cache/archive.py streams them); with a signing
key the manifest's signature goes beside the artifact.
"""

from __future__ import annotations

import errno
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from dgprecompile import __version__
from dgprecompile.cache import archive, rollback
from dgprecompile.cache.artifact import ARTIFACT_SCHEMA, FORMAT, INDEX_MEMBER, MANIFEST_MEMBER, entry_key
from dgprecompile.cache.confine import Limits
from dgprecompile.cache.signing import SigningKey, signature_path
from dgprecompile.cache.store import CacheStore, EntryRecord, Index
from dgprecompile.errors import CheckFailed, EnvironmentProblem, InputError
from dgprecompile.fsutil import atomic_write_bytes, atomic_writer, os_error, space_message
from dgprecompile.keys.fingerprint import short_id
from dgprecompile.planning.plan import Plan


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


def output_path(template: str, fingerprint: dict[str, Any]) -> Path:
    """``-o`` with ``{fingerprint}`` replaced by the fingerprint's short id."""
    return Path(template.replace("{fingerprint}", short_id(fingerprint))).expanduser()


# where the index files each runtime's planned items, by its kind (runtimes/base.py Runtime.kind): an entry of
# its own in ``kernels`` (packed with its record), or a record in ``triton_moe``/``inductor`` naming extra entries (packed with
# every intact extra entry); tests/test_runtimes.py keeps it in step with the runtimes
FILED_IN = {"deepgemm": "kernels", "sglang-jit": "kernels", "triton-moe": "triton_moe", "inductor-graph": "inductor",
            "flashinfer-module": "flashinfer", "triton-path": "triton_path"}


def _planned(plan: Plan, section: str) -> list[str]:
    """The ids of the plan's items whose runtime files them in the index's ``section``, runtime by runtime."""
    return [i for runtime, items in plan.by_runtime() if FILED_IN[runtime.kind] == section
            for i in sorted(it.id for it in items)]


def _recorded(plan: Plan, index: Index, section: str) -> dict[str, dict]:
    """The index's records in ``section`` of the plan's items there, by id."""
    planned = set(_planned(plan, section))
    return {i: r for i, r in sorted(getattr(index, section).items()) if i in planned}


def _planned_entries(plan: Plan, store: CacheStore, index: Index, arch: str | None):
    """(intact records by kernel id, missing kernel ids, (id, member, problem) of entries that are not intact)."""
    kernels: dict[str, EntryRecord] = {}
    missing: list[str] = []
    changed: list[tuple[str, str, str]] = []
    for kid in _planned(plan, "kernels"):
        record = index.kernels.get(kid)
        problem = "missing" if record is None else store.check_entry(record, arch)
        if problem is None:
            kernels[kid] = record
        elif problem == "missing":
            missing.append(kid)
        else:
            changed.append((kid, record.member_dir, problem))
    return kernels, missing, changed


def _refuse_lost_extra(store: CacheStore, extra: dict[str, EntryRecord], arch: str | None) -> None:
    """Refuse the pack when an entry filed in the index's extra records is missing or not what was filed."""
    lost = [(name, problem) for name, rec in extra.items() if (problem := store.check_entry(rec, arch)) is not None]
    if lost:
        name, problem = lost[0]
        raise CheckFailed(f"{len(lost)} filed cache entries are missing or differ from the index, e.g. {name}: "
                          f"{problem}; nothing was packed",
                          hint="run `dgprecompile verify` to name them, then `dgprecompile warm` with the same plan "
                               "(or `launch --capture` for what a job built) to file them again")


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
        raise CheckFailed(f"{len(missing)} of {len(_planned(plan, 'kernels'))} planned kernels are not "
                          "in the cache "
                          f"(e.g. {missing[0]})",
                          hint="run `dgprecompile warm` with the same plan first, or pass --allow-missing")
    # the index does not say which planned kernel an extra entry belongs to, so every one travels: one filed but
    # deleted or damaged since (verify may have passed before) refuses the pack, never leaves it out unsaid
    extra = dict(sorted(index.extra.items()))
    _refuse_lost_extra(store, extra, arch)
    # + swept m ranges, + the plan's records of the items built outside the pool (their entries are extra entries,
    # packed above)
    triton_moe, inductor, flashinfer, triton_path = (_recorded(plan, index, s) for s in
                                                     ("triton_moe", "inductor", "flashinfer", "triton_path"))
    packed = Index(index.fingerprint, kernels, extra, [plan.summary()], list(index.sweeps), triton_moe, inductor,
                   flashinfer, triton_path)
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
