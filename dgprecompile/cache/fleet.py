"""A fleet shares one warm: `push` a cache's artifact to a URL prefix, `pull` this machine's from it.

The object name is the fingerprint's short id (``deepgemm-<id>.tar.gz``), the id `verify --json` reports as
``current_fingerprint_id`` and `pack -o '...{fingerprint}...'` writes, so a node asks for exactly the
artifact its DeepGEMM, nvcc, DG_JIT_* flags and SM count can use, before anything is compiled.

`pull`: verify first (a complete cache fetches nothing); else, under a per-fingerprint lock in the cache (so
many nodes pulling into one shared cache download once), download into a staging directory inside the cache
(same filesystem), let `unpack` check everything before touching the cache (every sha256, member names, the
fingerprint) and install entries whole, verify again. Any failure, an interrupted download included, removes
the download: nothing is installed, no temporary file stays.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dgprecompile.cache import remote as rmt
from dgprecompile.cache.pack import PackResult, pack_cache
from dgprecompile.cache.signing import SIGNATURE_LIMIT, SigningKey, Trust, signature_path
from dgprecompile.cache.store import CacheStore
from dgprecompile.cache.unpack import UnpackResult, manifest_cache_dir, unpack_artifact
from dgprecompile.cache.verify import VerifyReport, verify_cache
from dgprecompile.errors import (
    EXIT_CHECK_FAILED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    DGError,
    EnvironmentProblem,
    InputError,
)
from dgprecompile.keys.fingerprint import _get, differences, key_fields, short_id
from dgprecompile.planning.plan import Plan

if TYPE_CHECKING:
    from filelock import FileLock

HIT, PRESENT, MISS = "hit", "present", "miss"


@dataclass
class Available:
    """An artifact found under the prefix on a miss, and how its fingerprint differs from this machine's."""

    name: str
    fingerprint_id: str | None
    differences: list[tuple[str, Any, Any]]
    readable: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "fingerprint_id": self.fingerprint_id, "readable": self.readable,
                "differences": [{"field": f, "artifact": a, "here": b} for f, a, b in self.differences]}


@dataclass
class PullReport:
    source: str  # the prefix, redacted
    url: str | None  # the artifact asked for, redacted
    cache_dir: str
    fingerprint_id: str | None
    outcome: str  # hit: downloaded and installed; present: the cache was complete, nothing fetched; miss
    bytes: int = 0
    download_seconds: float = 0.0
    unpack_seconds: float = 0.0
    verify_seconds: float = 0.0
    seconds: float = 0.0
    unpack: UnpackResult | None = None
    verify: VerifyReport | None = None
    key_fields: tuple[str, ...] = ()
    current: dict[str, Any] = field(default_factory=dict)  # this machine's value of every key field
    available: list[Available] | None = None  # on a miss: what the prefix holds (None: cannot be listed)
    note: str = ""
    notes: list[str] = field(default_factory=list)  # the unpack's: which build it installed (rollback protection)
    warnings: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return self.verify is not None and self.verify.complete

    @property
    def return_code(self) -> int:
        if self.outcome == MISS:
            return EXIT_NOT_FOUND
        return EXIT_OK if self.complete else EXIT_CHECK_FAILED

    def reason(self) -> str:
        """One line: why the pull did not end with a complete cache ("" when it did)."""
        if self.outcome == MISS:
            return (f"no artifact for this machine's fingerprint {self.fingerprint_id} under {self.source}: an "
                    f"artifact is used only when it was built where these are the same: {', '.join(self.key_fields)}")
        if not self.complete and self.verify is not None:
            return f"the artifact was installed but the cache does not cover the plan: {self.verify.verdict()}"
        return ""

    def stats_line(self) -> str:
        """sccache-style: the outcome, bytes, seconds."""
        ok = "" if self.verify is None else (f"{len(self.verify.kernels) - len(self.verify.problems)}/"
                                             f"{len(self.verify.kernels)} kernels")
        if self.outcome == PRESENT:
            return (f"pull: cache already complete ({ok}), nothing fetched{self.note}; verify "
                    f"{self.verify_seconds:.2f} s; total {self.seconds:.2f} s")
        if self.outcome == MISS:
            return f"pull: miss {self.url}; {self.seconds:.2f} s"
        rate = self.bytes / self.download_seconds / 1e6 if self.download_seconds > 0 else 0.0
        added = len(self.unpack.added) if self.unpack else 0
        return (f"pull: hit {self.url}: {self.bytes / 1e6:.2f} MB in {self.download_seconds:.2f} s "
                f"({rate:.1f} MB/s); unpack {self.unpack_seconds:.2f} s ({added} entries added); verify "
                f"{self.verify_seconds:.2f} s; {ok}, {'complete' if self.complete else 'INCOMPLETE'}; "
                f"total {self.seconds:.2f} s")

    def to_dict(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome, "complete": self.complete, "source": self.source, "url": self.url,
            "cache_dir": self.cache_dir, "fingerprint_id": self.fingerprint_id, "bytes": self.bytes,
            "seconds": {"download": round(self.download_seconds, 3), "unpack": round(self.unpack_seconds, 3),
                        "verify": round(self.verify_seconds, 3), "total": round(self.seconds, 3)},
            "key_fields": list(self.key_fields), "current": self.current,
            "available": None if self.available is None else [a.to_dict() for a in self.available],
            "unpack": self.unpack.to_dict() if self.unpack else None,
            "verify": self.verify.to_dict() if self.verify else None,
            "reason": self.reason(), "notes": self.notes, "warnings": self.warnings,
        }


def _timed_verify(plan: Plan, store: CacheStore, nvcc: str | None, num_sms: int | None) -> tuple[VerifyReport, float]:
    start = time.perf_counter()
    report = verify_cache(plan, store, nvcc=nvcc, num_sms=num_sms)
    return report, time.perf_counter() - start


def pull(plan: Plan, store: CacheStore, prefix: str, *, nvcc: str | None = None, num_sms: int | None = None,
         trust: Trust | None = None, replace_changed: bool = False) -> PullReport:
    """Fetch, check and install this machine's artifact from ``prefix`` unless the cache is already complete.

    A prefix is a store others may write: the artifact is installed only when signed by one of ``trust``'s keys
    (or with ``trust.allow_unsigned``), checked on the object's manifest before the download and again on the
    downloaded bytes before anything is installed."""
    start = time.perf_counter()
    base = rmt.open_remote(prefix)  # a missing backend is reported before anything else happens
    result = _first_verify(plan, store, base, nvcc, num_sms)
    report = result.verify
    if report.complete:
        result.seconds = time.perf_counter() - start
        return result
    if report.current_fingerprint is None:
        why = "; ".join(report.warnings) or "no DeepGEMM or nvcc found"
        raise EnvironmentProblem(f"cannot compute this machine's fingerprint, which names the artifact to pull ({why})",
                                 hint="install the DeepGEMM and nvcc the job uses (pass --nvcc PATH if it is elsewhere)")
    fid = result.fingerprint_id
    art = rmt.open_remote(rmt.artifact_url(prefix, fid))
    result.url = art.shown
    # an untrusted object, or an older build than this cache installed, is refused before the download
    signature = _fetch_signature(art, trust, store=store, fid=fid)
    lock = _pull_lock(store, fid)
    try:
        if _pull_locked(plan, store, base, art, signature, result, start, nvcc=nvcc, num_sms=num_sms, trust=trust,
                        replace_changed=replace_changed):
            return result
    finally:
        lock.release()
    result.seconds = time.perf_counter() - start
    return result


def _first_verify(plan: Plan, store: CacheStore, base: rmt.Remote, nvcc: str | None,
                  num_sms: int | None) -> PullReport:
    """Verify before anything is fetched: the report a complete cache ends with, and this machine's fingerprint."""
    report, vsec = _timed_verify(plan, store, nvcc, num_sms)
    result = PullReport(base.shown, None, str(store.root), None, PRESENT, verify=report, verify_seconds=vsec,
                        key_fields=key_fields(plan.profile.generation))
    # an empty cache is what a pull is for: verify's "no dgprecompile index" note is not news here
    result.warnings += [w for w in report.warnings if not w.startswith("no dgprecompile index in")]
    if report.current_fingerprint is not None:
        result.fingerprint_id = short_id(report.current_fingerprint)
        result.current = {f: _get(report.current_fingerprint, f) for f in result.key_fields}
    return result


def _pull_lock(store: CacheStore, fid: str) -> FileLock:
    """The per-fingerprint lock in the cache, held: many nodes pulling into one shared cache download once."""
    from filelock import FileLock

    try:
        store.ensure()
        lock = FileLock(str(store.ours / "locks" / f"pull-{fid}.lock"))
        lock.acquire()
    except OSError as exc:
        raise _cache_write_error(store, exc) from None
    return lock


def _pull_locked(plan: Plan, store: CacheStore, base: rmt.Remote, art: rmt.Remote, signature: bytes | None,
                 result: PullReport, start: float, *, nvcc: str | None, num_sms: int | None, trust: Trust | None,
                 replace_changed: bool) -> bool:
    """The pull under its lock: verify again, download into staging, unpack, verify. Returns True when it ended
    early (a concurrent pull completed the cache, or a miss), with ``result.seconds`` set."""
    # under the lock: a pull on another node sharing this cache is not mid-download (staging names hold pids)
    store.clean_stale_staging()
    report, vsec = _timed_verify(plan, store, nvcc, num_sms)  # another pull may have finished meanwhile
    if report.complete:
        result.verify, result.verify_seconds = report, result.verify_seconds + vsec
        result.note = " (installed by a concurrent pull)"
        result.seconds = time.perf_counter() - start
        return True
    try:
        staging = store.new_staging()
    except OSError as exc:
        raise _cache_write_error(store, exc) from None
    try:
        local = staging / art.name
        try:
            result.bytes, result.download_seconds = rmt.download(art, local)
        except rmt.NotFound:
            _record_miss(result, base, report)
            result.seconds = time.perf_counter() - start
            return True
        t = time.perf_counter()
        try:
            result.unpack = unpack_artifact(local, store, nvcc=nvcc, num_sms=num_sms, trust=trust,
                                            signature=signature, shared=True, shown=art.shown,
                                            replace_changed=replace_changed)
        except DGError as exc:
            exc.message = exc.message.replace(str(local), art.shown)
            raise
        result.unpack_seconds = time.perf_counter() - t
        result.outcome = HIT
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    result.verify, vsec = _timed_verify(plan, store, nvcc, num_sms)
    result.verify_seconds += vsec
    result.warnings += [w for w in result.unpack.warnings if w not in result.warnings]
    result.notes += result.unpack.notes
    return False


def _record_miss(result: PullReport, base: rmt.Remote, report: VerifyReport) -> None:
    """No artifact for this fingerprint: list what the prefix holds, and how each differs from this machine."""
    result.outcome = MISS
    listing = rmt.list_artifacts(base)
    result.available = None if listing is None else [
        _describe(name, manifest, report.current_fingerprint) for name, manifest in listing]
    result.verify = report


def _fetch_signature(art: rmt.Remote, trust: Trust | None, *, store: CacheStore | None = None,
                     fid: str | None = None) -> bytes | None:
    """The object's signature (``<url>.sig``), checked with ``trust`` against the object's manifest, read from the
    object's start, before the artifact itself is downloaded (unpack checks it again on the downloaded bytes).
    With ``store`` and ``fid``, an older build than the cache installed for ``fid`` is refused there too."""
    trust = trust if trust is not None else Trust()
    if trust.allow_unsigned:
        return None
    signature = rmt.read_small(rmt.open_remote(signature_path(art.url)), SIGNATURE_LIMIT)
    head = rmt.head_manifest_bytes(art)
    if head is not None:
        trust.check(head, signature, art.shown, shared=True)
        if store is not None and fid is not None:
            _refuse_rollback_early(store, fid, head, trust, art.shown)
    return signature


def _refuse_rollback_early(store: CacheStore, fid: str, head: bytes, trust: Trust, shown: str) -> None:
    """A replayed older artifact refused on its signed manifest, before its download (unpack checks it again on
    the downloaded bytes, with the manifest checked whole; a build field of another shape is left to that)."""
    from dgprecompile.cache import rollback

    build = (rmt._parsed(head) or {}).get("build")
    if build is None or rollback.well_formed(build):
        rollback.check(store, fid, build, shown, allow=trust.allow_rollback)


def _describe(name: str, manifest: dict[str, Any] | None, current: dict[str, Any]) -> Available:
    fp = (manifest or {}).get("fingerprint")
    if not isinstance(fp, dict):
        return Available(name, None, [], readable=False)
    return Available(name, short_id(fp), differences(fp, current))


def _cache_write_error(store: CacheStore, exc: OSError) -> DGError:
    return EnvironmentProblem(f"cannot write to the cache {store.root} ({exc.strerror or exc}); nothing was "
                              "fetched", hint="pull into a writable --cache-dir, or run `dgprecompile verify` on a "
                              "read-only node whose cache was filled elsewhere")


# ---- push and pack -o URL ---------------------------------------------------------------------------------


@dataclass
class PushReport:
    url: str  # redacted
    outcome: str  # created | replaced | exists
    pack: PackResult
    seconds: float
    existing_covers_plan: bool | None = None  # outcome "exists": does the object hold every kernel we packed?
    warnings: list[str] = field(default_factory=list)
    command: str = "push"  # or "pack" (-o URL)
    signature: str | None = None  # the signature uploaded beside it (redacted URL), None when none was

    @property
    def return_code(self) -> int:
        return EXIT_CHECK_FAILED if self.existing_covers_plan is False else EXIT_OK

    def to_dict(self) -> dict[str, Any]:
        return {"url": self.url, "path": self.url, "outcome": self.outcome, "fingerprint_id": self.pack.fingerprint_id,
                "bytes": self.pack.bytes, "kernels": len(self.pack.kernels), "missing": self.pack.missing,
                "existing_covers_plan": self.existing_covers_plan, "seconds": round(self.seconds, 3),
                "signature": self.signature, "signed_by": self.pack.signed_by, "warnings": self.warnings}


def pack_to(plan: Plan, store: CacheStore, output: str, *, allow_missing: bool = False, replace: bool = True,
            command: str = "push", signing_key: SigningKey | None = None, limits=None) -> PushReport:
    """`pack -o URL` (replace) and `push` (not replace): pack into a local temp file, upload it whole; with
    ``signing_key``, then its signature beside it (``<url>.sig``).

    The artifact goes up first: between the two uploads a node that requires a signature refuses the new object
    (never installs it unsigned). An unsigned upload removes a signature left beside the name (it covers other
    bytes)."""
    start = time.perf_counter()
    rmt.open_remote(output, write=True)  # refuse http(s), a bad URL and a missing backend before packing
    with tempfile.TemporaryDirectory(prefix="dgprecompile-pack-") as tmp:
        packed = pack_cache(plan, store, str(Path(tmp) / rmt.ARTIFACT_NAME), allow_missing=allow_missing,
                            signing_key=signing_key, limits=limits)
        url = output.replace("{fingerprint}", packed.fingerprint_id)
        target = rmt.open_remote(url, write=True)
        sig_target = rmt.open_remote(signature_path(url), write=True)
        outcome = rmt.upload(packed.path, target, replace=replace)
        report = PushReport(target.shown, outcome, packed, 0.0, command=command)
        if outcome != "exists":
            if packed.signature is not None:
                rmt.upload(packed.signature, sig_target, replace=True)
                report.signature = sig_target.shown
            else:
                rmt.remove(sig_target)
        if packed.signature is None:
            report.warnings.append(f"{target.shown} is not signed: nodes that require a signature (trusted keys) "
                                   "refuse it; pass --signing-key or set DGPRECOMPILE_SIGNING_KEY")
        if packed.missing:
            report.warnings.append(f"{len(packed.missing)} planned kernels are not in the artifact (--allow-missing)")
        if outcome == "exists":
            with open(packed.path, "rb") as f:
                ours_bytes = rmt.read_head_bytes(f)
            ours = rmt._parsed(ours_bytes) or {}
            theirs_bytes = rmt.head_manifest_bytes(target)
            theirs = rmt._parsed(theirs_bytes) or {}
            if (packed.signature is not None and ours_bytes is not None and ours_bytes == theirs_bytes
                    and rmt.read_small(sig_target, SIGNATURE_LIMIT) is None):
                # the same manifest bytes, left unsigned (e.g. a push killed between its two uploads): sign it
                rmt.upload(packed.signature, sig_target, replace=False)
                report.signature = sig_target.shown
            report.existing_covers_plan = set(ours.get("kernels", [])) <= set(theirs.get("kernels", []))
            if theirs.get("members") == ours.get("members"):
                report.warnings.append(f"{target.shown} already holds the same artifact; left as it is")
            elif report.existing_covers_plan:
                report.warnings.append(f"{target.shown} already holds an artifact for this fingerprint with every "
                                       "kernel of this plan; kept it")
    report.seconds = time.perf_counter() - start
    return report


def push(plan: Plan, store: CacheStore, prefix: str, *, allow_missing: bool = False,
         replace: bool = False, signing_key: SigningKey | None = None, limits=None) -> PushReport:
    rmt.check_url(prefix)
    return pack_to(plan, store, rmt.join(prefix, rmt.ARTIFACT_NAME), allow_missing=allow_missing,
                   replace=replace, signing_key=signing_key, limits=limits)


# ---- unpack URL -------------------------------------------------------------------------------------------


def unpack_url(url: str, store: CacheStore | None, *, force: bool = False, nvcc: str | None = None,
               num_sms: int | None = None, trust: Trust | None = None,
               replace_changed: bool = False) -> tuple[UnpackResult, int, float]:
    """Download ``url`` into a staging directory of the target cache, then `unpack` it (all checks first; the
    signature, from ``<url>.sig``, on the object's manifest before the download)."""
    art = rmt.open_remote(url)
    if store is None:
        manifest = rmt.head_manifest(art)
        if manifest is None:
            if not rmt.exists(art):
                raise rmt.NotFound(f"artifact not found: {art.shown}", hint="pass the URL `pack -o` or `push` wrote")
            raise InputError(f"{art.shown} is not a dgprecompile artifact (no manifest at its start)",
                             hint="pass --cache-dir, or a URL `dgprecompile pack` wrote")
        store = CacheStore(manifest_cache_dir(manifest, art.shown))
    signature = _fetch_signature(art, trust)
    try:
        store.ensure()
        store.clean_stale_staging()
        staging = store.new_staging()
    except OSError as exc:
        raise _cache_write_error(store, exc) from None
    try:
        local = staging / (art.name if rmt.ARTIFACT_RE.fullmatch(art.name) else "artifact.tar.gz")
        size, seconds = rmt.download(art, local)
        try:
            result = unpack_artifact(local, store, force=force, nvcc=nvcc, num_sms=num_sms, trust=trust,
                                     signature=signature, shared=True, shown=art.shown,
                                     replace_changed=replace_changed)
        except DGError as exc:
            exc.message = exc.message.replace(str(local), art.shown)
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return result, size, seconds
