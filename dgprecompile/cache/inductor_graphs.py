"""torch.compile graph records: what each planned inductor item was built with, and the entries it produced.

The index (``index.json``, key ``inductor``) holds one record per item id: the torch the warm ran (its version:
inductor's key holds the torch build), the GPU (its name: the key holds it too), how many graphs it compiled, and
the entries its compiles left (inductor's FX graph, AOTAutograd and generated-code entries, area ``inductor``, and
the Triton kernels inductor generated, area ``triton``; their checksums are in ``index.extra``). An item counts as
covered only while its record exists, the torch installed here is the recorded one, and every entry it names is on
disk, whole and with the recorded bytes. Pattern: cache/triton_moe.py.
No torch import: verify and warm's parent both use this.
"""

from __future__ import annotations

from typing import Any

from dgprecompile.cache.store import CacheStore, Index
from dgprecompile.cache.triton_moe import (
    BROKEN,
    COVERED,
    MISSING,
    STALE,
    ItemCoverage,
    entries_problem,
    file_entries,
)
from dgprecompile.runtimes import family_for_area

__all__ = ["BROKEN", "COVERED", "MISSING", "STALE", "appeared", "file_entries", "item_coverage", "snapshot"]


def item_coverage(store: CacheStore, index: Index, item_id: str, installed: dict[str, Any] | None) -> ItemCoverage:
    """Whether ``item_id`` is covered in ``store``: recorded, for the torch installed here (``installed``:
    INDUCTOR_GRAPHS.installed()), and every entry it names whole with the recorded bytes."""
    record = index.inductor.get(item_id)
    if record is None:
        return ItemCoverage(item_id, MISSING, "no torch.compile record in the index: not warmed (a GPU-free warm "
                                              "leaves it: warm where the job's GPU kind is visible)")
    if installed is not None and record.get("torch") != installed.get("torch"):
        return ItemCoverage(item_id, STALE, f"built with torch {record.get('torch')}, here "
                                            f"{installed.get('torch')}: inductor's key holds the torch build")
    if not record.get("entries"):
        return ItemCoverage(item_id, BROKEN, "the record names no entry")
    lost = entries_problem(store, index, item_id, record["entries"])
    if lost is not None:
        return lost
    return ItemCoverage(item_id, COVERED, f"{record.get('graphs', 0)} graphs, {len(record['entries'])} entries, "
                                          f"torch {record.get('torch')} on {record.get('gpu')}")


AREAS = ("inductor", "triton")  # where an item's compiles land: inductor's caches and the Triton kernels it generates


def snapshot(root: str) -> dict[str, dict[str, tuple[str | None, tuple[str, ...]]]]:
    """Per area of :data:`AREAS`, every entry -> its state (runtimes/captured.py CacheFamily.state)."""
    out = {}
    for area in AREAS:
        fam = family_for_area(area)
        out[area] = fam.state(fam.area_dir(root)) if fam is not None else {}
    return out


def appeared(root: str, before: dict[str, dict[str, tuple[str | None, tuple[str, ...]]]]) -> list[str]:
    """The entries (``<area>/<name>``) that appeared or grew (inductor's buckets) since ``before``."""
    after = snapshot(root)
    return sorted(f"{area}/{name}" for area, entries in after.items() for name, state in entries.items()
                  if before.get(area, {}).get(name) != state)
