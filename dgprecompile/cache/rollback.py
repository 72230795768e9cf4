"""Rollback protection: a node refuses an artifact older than the newest it installed for the same fingerprint.

A signature proves who built an artifact, not that it is the newest: someone who can write the bucket could put
back an older artifact the same key signed. So `pack` stamps the signed manifest with its build (``"build":
{"counter": N, "time_ns": T}``): N is ``$DGPRECOMPILE_BUILD_COUNTER`` (a number CI passes, e.g. its run number;
0 when unset), T is ``$SOURCE_DATE_EPOCH`` in ns when set, else the time the packed cache last changed (its
index's mtime), so the same cache still packs to the same bytes. Builds are ordered by (N, T).

Each cache records, per fingerprint id, the newest build it installed (``dgprecompile/installed-builds.json``,
written whole under a lock), and keeps a copy of it outside the cache, in this user's state folder
(``$XDG_STATE_HOME/dgprecompile/installed-builds/<sha256 of the cache root's real path>.json``, XDG_STATE_HOME
defaulting to ``~/.local/state``): a record deleted from the cache (a job that wrote into it) does not reset
rollback protection, as the copy still says what was installed. What is recorded is the newer of the two, per
fingerprint. `unpack`, `pull` and `launch --pull` refuse an artifact older than that record, or one without a stamp
where a record exists, unless ``--allow-rollback``; where nothing is recorded they install it and say that
protection starts now. The record only moves forward: installing an older build with ``--allow-rollback`` keeps
the newer one recorded.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from dgprecompile.cache.store import CacheStore
from dgprecompile.errors import InputError
from dgprecompile.fsutil import atomic_write_text

COUNTER_ENV = "DGPRECOMPILE_BUILD_COUNTER"
EPOCH_ENV = "SOURCE_DATE_EPOCH"
STATE_NAME = "installed-builds.json"
FORMAT = "dgprecompile-installed-builds"
SCHEMA = 1
STATE_LIMIT = 4 << 20  # one small record per fingerprint; nothing real comes near this
_MAX = (1 << 63) - 1
ALLOW_HINT = "pass --allow-rollback to install it anyway (the newer record is kept)"


class RollbackRefused(InputError):
    """An artifact older than the one the cache installed for its fingerprint: nothing is installed (exit 2)."""


def _whole_number(name: str, value: str) -> int:
    try:
        number = int(value.strip())
    except ValueError:
        number = -1
    if not 0 <= number <= _MAX:
        what = ("the build time in seconds since 1970 (e.g. $(git log -1 --format=%ct))" if name == EPOCH_ENV
                else "a number that grows with each CI build (e.g. $GITHUB_RUN_NUMBER)")
        raise InputError(f"{name}={value[:40]!r} is not a whole number from 0 to 2^63-1",
                         hint=f"set {name} to {what}, or unset it")
    return number


def build_stamp(store: CacheStore, environ: dict[str, str] | None = None) -> dict[str, int]:
    """What `pack` writes into the manifest's ``build``."""
    env = os.environ if environ is None else environ
    counter = _whole_number(COUNTER_ENV, env[COUNTER_ENV]) if env.get(COUNTER_ENV, "").strip() else 0
    if env.get(EPOCH_ENV, "").strip():
        when = _whole_number(EPOCH_ENV, env[EPOCH_ENV]) * 1_000_000_000
    else:
        when = store.index_path.stat().st_mtime_ns
    return {"counter": counter, "time_ns": min(when, _MAX)}


def describe(build: dict[str, Any]) -> str:
    """``2026-12-02 06:43:15.123456 UTC (counter 7)``."""
    when = datetime.fromtimestamp(build["time_ns"] / 1e9, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f UTC")
    return f"{when} (counter {build['counter']})"


def well_formed(build: Any) -> bool:
    """Whether ``build`` has the manifest schema's shape (before the manifest as a whole is checked)."""
    return (isinstance(build, dict) and set(build) == {"counter", "time_ns"}
            and all(type(v) is int and 0 <= v <= _MAX for v in build.values()))


def _order(build: dict[str, Any]) -> tuple[int, int]:
    return build["counter"], build["time_ns"]


def _state_path(store: CacheStore):
    return store.ours / STATE_NAME


def copy_path(store: CacheStore) -> Path:
    """The copy of the cache's record outside it, in this user's state folder (module doc)."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    key = hashlib.sha256(os.path.realpath(store.root).encode()).hexdigest()[:40]
    return Path(base) / "dgprecompile" / "installed-builds" / f"{key}.json"


def read_state(store: CacheStore) -> dict[str, Any]:
    """fingerprint id -> the newest build installed here, by the cache's record or its copy outside the cache ({}
    when neither records one); a damaged record refuses."""
    state = _read_record(_state_path(store))
    for fid, build in _read_record(copy_path(store), unreadable_absent=True).items():
        if fid not in state or _order(build) > _order(state[fid]):
            state[fid] = build
    return state


def _read_record(path: Path, unreadable_absent: bool = False) -> dict[str, Any]:
    """One installed-builds record ({} when absent; ``unreadable_absent``: also when it cannot be read, as the copy
    in another user's state folder); a damaged one refuses."""
    from dgprecompile import schemas

    hint = f"restore {path}, or {ALLOW_HINT.replace('the newer record is kept', 'and record it again')}"
    try:
        with open(path, "rb", opener=lambda p, f: os.open(p, f | os.O_NOFOLLOW | os.O_NONBLOCK)) as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise InputError(f"{path} is not a regular file: what this cache installed cannot be told", hint=hint)
            data = f.read(STATE_LIMIT + 1)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        if unreadable_absent:
            return {}
        raise InputError(f"cannot read {path} ({exc.strerror or exc}): what this cache installed cannot be told",
                         hint=hint) from None
    try:
        doc = json.loads(data) if len(data) <= STATE_LIMIT else None
    except (json.JSONDecodeError, UnicodeDecodeError):
        doc = None
    if doc is None:
        raise InputError(f"{path} is damaged (not JSON, or too large): what this cache installed cannot be told",
                         hint=hint)
    return schemas.check(doc, "installed-builds", str(path), hint=hint)["fingerprints"]


def check(store: CacheStore, fid: str, build: dict[str, Any] | None, shown: str, *,
          allow: bool) -> tuple[list[str], list[str]]:
    """(notes, warnings) for installing an artifact with this ``build`` (None: unstamped); raises RollbackRefused
    for one older than the cache's record for ``fid`` (unless ``allow``)."""
    recorded = {} if allow and not _readable(store) else read_state(store)
    newest = recorded.get(fid)
    if newest is None:
        if build is None:
            return [f"{shown} carries no build stamp (packed before rollback protection): rollback protection for "
                    f"fingerprint {fid} starts with the first stamped artifact installed here"], []
        return [f"installed build {describe(build)} of fingerprint {fid}; nothing was recorded for it here, so "
                "rollback protection starts now: an older build of it is refused from now on"], []
    if build is not None and _order(build) >= _order(newest):
        return [f"build {describe(build)} of fingerprint {fid} (this cache had {describe(newest)})"], []
    what = ("carries no build stamp (packed before rollback protection)" if build is None
            else f"is build {describe(build)}")
    message = (f"{shown} {what}, older than build {describe(newest)} this cache installed for fingerprint {fid} "
               f"(from {newest.get('artifact', '?')})")
    if not allow:
        raise RollbackRefused(f"{message}: refusing a rollback; nothing was installed",
                              hint=f"fetch the newer artifact, or {ALLOW_HINT}")
    return [], [f"{message}: installing it (--allow-rollback); the newer build stays recorded"]


def _readable(store: CacheStore) -> bool:
    try:
        read_state(store)
        return True
    except InputError:
        return False


def record(store: CacheStore, fid: str, build: dict[str, Any] | None, shown: str) -> None:
    """Record ``build`` as installed for ``fid`` when it is newer than the record (under a lock, written whole, in
    the cache and its copy: either one lost is written again from the other)."""
    from filelock import FileLock

    if build is None:
        return
    (store.ours / "locks").mkdir(parents=True, exist_ok=True)
    with FileLock(str(store.ours / "locks" / "installed-builds.lock")):
        state = read_state(store) if _readable(store) else {}
        if fid not in state or _order(state[fid]) < _order(build):
            state[fid] = {"counter": build["counter"], "time_ns": build["time_ns"], "artifact": shown[:1000],
                          "installed_ns": time.time_ns()}
        doc = {"format": FORMAT, "schema": SCHEMA, "fingerprints": dict(sorted(state.items()))}
        atomic_write_text(_state_path(store), json.dumps(doc, indent=1) + "\n")
        _write_copy(store, doc)


def _write_copy(store: CacheStore, doc: dict[str, Any]) -> None:
    """The copy outside the cache (best effort: a home that cannot be written keeps the cache's record alone)."""
    path = copy_path(store)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(doc, indent=1) + "\n")
    except OSError:
        pass
