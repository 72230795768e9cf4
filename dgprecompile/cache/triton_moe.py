"""Triton fused-MoE records: what each planned Triton-MoE item was warmed with, and the entries it produced.

The index (``index.json``, key ``triton_moe``) holds one record per item id: the Triton the warm ran (the wheel's
version, the RECORD sha256 of the files Triton's own cache key holds, the variables it reads; families.TRITON_MOE
``installed()``), the sglang release and the names of the Triton entries its calls used (their checksums are in
``index.extra``). An item counts as covered only while its record exists, the Triton installed here is the
recorded one, and every entry it names is on disk, whole and with the recorded bytes. Pattern: cache/sweeps.py.
No torch, no triton import: verify and warm's parent both use this.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dgprecompile.cache.store import CacheStore, Index
from dgprecompile.families import TRITON_MOE

COVERED, MISSING, STALE, BROKEN = "ok", "missing", "stale", "broken"


def make_record(item_id: str, installed: dict[str, Any], entries: list[str], seconds: float | None,
                ms: int) -> dict[str, Any]:
    return {"item": item_id, **installed, "entries": sorted(entries), "seconds": seconds, "ms": ms}


@dataclass
class ItemCoverage:
    item: str
    status: str  # ok | missing | stale | broken
    detail: str = ""
    entry: str | None = None  # the first entry that is not usable (broken)


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
    for entry in record["entries"]:
        rec = index.extra.get(entry)
        # the recorded bytes, and whole as Triton reads it (families.triton_entry_problem, through the area's family)
        problem = "not in the index" if rec is None else store.check_entry(rec)
        if problem is not None:
            return ItemCoverage(item_id, MISSING if problem == "missing" else BROKEN, f"entry {entry}: {problem}",
                                entry)
    return ItemCoverage(item_id, COVERED, f"{len(record['entries'])} entries, Triton {record.get('triton')}")

