"""Triton fused-MoE records: what each planned Triton-MoE item was warmed with, and the entries it produced.

The index (``index.json``, key ``triton_moe``) holds one record per item id: the Triton the warm ran (the wheel's
version, the RECORD sha256 of the files Triton's own cache key holds, the variables it reads; families.TRITON_MOE
``installed()``), the sglang release and the names of the Triton entries its calls used (their checksums are in
``index.extra``), and ``host_modules``: Triton's host modules the warm built for them (compile/triton_host.py: the
entries of ``cuda_utils`` and each kernel's launcher, also in ``index.extra``, and the machine facts their key and
file name depend on), or why they were left to `launch --capture`. An item counts as covered only while its
record exists, the Triton installed here is the recorded one, every entry it names is on disk, whole and with the
recorded bytes, and its host modules were built for this platform and Python (or left to capture). Pattern:
cache/sweeps.py.
No torch, no triton import: verify and warm's parent both use this.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dgprecompile.cache.confine import link_problem
from dgprecompile.cache.store import CacheStore, Index
from dgprecompile.runtimes import family_for_area
from dgprecompile.runtimes.triton_moe import TRITON_MOE

COVERED, MISSING, STALE, BROKEN = "ok", "missing", "stale", "broken"


HOST_FIELDS = ("cuda_utils", "launchers", "entries", "machine", "left_to_capture")  # compile/triton_host.py's report


def make_record(item_id: str, installed: dict[str, Any], entries: list[str], seconds: float | None,
                ms: int, host_modules: dict[str, Any] | None = None) -> dict[str, Any]:
    """``host_modules``: what the warm's build of Triton's host modules reported (compile/triton_host.py); kept
    without what changes from run to run (which modules this run built)."""
    host = {k: v for k, v in (host_modules or {}).items() if k in HOST_FIELDS}
    return {"item": item_id, **installed, "entries": sorted(entries), "seconds": seconds, "ms": ms,
            **({"host_modules": host} if host_modules is not None else {})}


def host_key_here() -> dict[str, str]:
    """This interpreter's values of what Triton's host modules' lookup depends on (compile/triton_host.py): the
    key's ``platform_key()`` (triton/runtime/build.py: machine, system, the interpreter's architecture) and the
    file name's ``EXT_SUFFIX``. Read without importing triton (a test holds it to Triton's own platform_key)."""
    import platform
    import sysconfig

    return {"platform_key": ",".join([platform.machine(), platform.system(), *platform.architecture()]),
            "ext_suffix": str(sysconfig.get_config_var("EXT_SUFFIX"))}


def host_problem(store: CacheStore, index: Index, host: dict[str, Any] | None) -> ItemCoverage | None:
    """None when the item's host modules are usable here (built for this platform and Python, every entry whole
    with the recorded bytes) or were left to `launch --capture` by the warm (it says why); else what is wrong."""
    if host is None:
        return ItemCoverage("", MISSING, "Triton's host modules were not built (a warm before dgprecompile built "
                                         "them): warm again")
    if "left_to_capture" in host:
        return None
    recorded, here = (host.get("machine") or {}).get("key") or {}, host_key_here()
    differ = [f"{k}: built for {recorded.get(k)!r}, here {v!r}" for k, v in here.items() if recorded.get(k) != v]
    if differ:
        return ItemCoverage("", STALE, "Triton's host modules were built for another platform or Python ("
                            + "; ".join(differ) + "): Triton would build them again; warm here")
    for entry in host.get("entries") or []:
        name = f"{TRITON_MOE.area}/{entry}"
        rec = index.extra.get(name)
        problem = "not in the index" if rec is None else _named_problem(rec, name) or store.check_entry(rec)
        if problem is not None:
            return ItemCoverage("", MISSING if problem.startswith("missing") else BROKEN,
                                f"Triton host module entry {entry}: {problem}", f"{TRITON_MOE.area}/{entry}")
    return None


@dataclass
class ItemCoverage:
    item: str
    status: str  # ok | missing | stale | broken
    detail: str = ""
    entry: str | None = None  # the first entry that is not usable (broken)


def entries_problem(store: CacheStore, index: Index, item_id: str, entries: list[str]) -> ItemCoverage | None:
    """The first of a record's ``entries`` (index.extra names) that is not usable: not in the index, not on disk
    (missing) or not the recorded bytes, not whole as its library reads it (broken); None when all are."""
    for entry in entries:
        rec = index.extra.get(entry)
        problem = ("not in the index" if rec is None else _named_problem(rec, entry) or store.check_entry(rec))
        if problem is not None:
            return ItemCoverage(item_id, MISSING if problem.startswith("missing") else BROKEN, f"entry {entry}: {problem}",
                                entry)
    return None


def _named_problem(record, entry: str) -> str | None:
    """Why the index's record filed under ``entry`` does not describe that entry (it names another area's or
    another name's files: checking them would say nothing of what the runtime looks up at ``entry``), else None."""
    if record.member_dir == entry or (record.area == "cache" and record.entry == entry):
        return None
    return f"missing (the index's record under this name is of {record.member_dir}, not of this entry)"


def item_coverage(store: CacheStore, index: Index, item_id: str, current: dict[str, Any] | None) -> ItemCoverage:
    """Whether ``item_id`` is covered in ``store``: recorded, recorded for the Triton installed here (``current``:
    TRITON_MOE.installed()), and every entry it names whole (with the bytes the index recorded)."""
    record = index.triton_moe.get(item_id)
    if record is None:
        return ItemCoverage(item_id, MISSING, "no Triton MoE record in the index: not warmed")
    stale = TRITON_MOE.stale_fields(record, current)
    if stale:
        shown = "; ".join(f"{f}: warmed with {record.get(f)!r}, here {(current or {}).get(f)!r}" for f in stale)
        return ItemCoverage(item_id, STALE, f"recorded for another Triton ({shown})")
    if not record.get("entries"):
        return ItemCoverage(item_id, BROKEN, "the record names no entry")
    lost = entries_problem(store, index, item_id, record["entries"])
    if lost is not None:
        return lost
    host = record.get("host_modules")
    bad = host_problem(store, index, host)
    if bad is not None:
        return ItemCoverage(item_id, bad.status, bad.detail, bad.entry)
    shown = (f"; Triton's host modules left to `launch --capture`: {host['left_to_capture']}"
             if "left_to_capture" in host else f" + {len(host.get('entries') or [])} host module entries")
    return ItemCoverage(item_id, COVERED, f"{len(record['entries'])} entries{shown}, Triton {record.get('triton')}")


def file_warmed(root: str, entries: list[str]) -> list[str]:
    """File the whole warmed entries in the cache index (``extra``, by warm, area triton), so verify/pack/push/pull
    carry them and a strict launch turns Triton's refusal on; returns the entries that were not whole."""
    area = TRITON_MOE.area
    _, broken = file_entries(CacheStore(root), [f"{area}/{e}" for e in entries])
    return sorted(b.split("/", 1)[1] for b in broken)


def file_entries(store: CacheStore, members: list[str]) -> tuple[list[str], list[str]]:
    """File the whole entries among ``members`` (``<area>/<name>``, each area a captured family's) in the index's
    ``extra`` (by warm), in one index update; returns (filed, not whole)."""
    whole, broken = [], []
    for member in members:
        area, name = member.split("/", 1)
        fam = family_for_area(area)
        # an entry reached through a link below the root is not the cache's own: never filed (pack's rule)
        if (fam is not None and link_problem(store.root, member) is None
                and fam.entry_problem(fam.area_dir(store.root) / name) is None):
            whole.append((name, area))
        else:
            broken.append(member)
    records = [store.record_entry(name, by="warm", area=area) for name, area in whole]
    if records:
        def mutate(index: Index) -> None:
            for rec in records:
                index.extra[rec.member_dir] = rec

        store.update_index(mutate)
    return [r.member_dir for r in records], broken
