"""Records of the items a warm builds outside the worker pool, in subprocesses that write the runtime's own cache
(torch.compile graphs: runtimes/inductor.py; FlashInfer modules: runtimes/flashinfer.py).

The index holds one record per item under the runtime's ``section`` (``inductor``, ``flashinfer``): what the build
ran with (the package whose version the runtime's key holds, and more where the runtime keeps it) and the entries it
produced (``<area>/<name>``, filed in ``index.extra`` with their checksums). An item counts as covered only while its
record exists, the runtime finds nothing stale in it for what is installed here (``runtime.stale``), and every entry
it names is on disk, whole and with the recorded bytes. Pattern: cache/triton_moe.py, whose statuses these share.
No torch, no flashinfer import: verify and warm's parent both use this.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from dgprecompile.cache import confine
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

__all__ = ["BROKEN", "COVERED", "MISSING", "STALE", "file_entries", "item_coverage", "merge_stage", "records"]


def records(index: Index, runtime) -> dict[str, dict[str, Any]]:
    """The runtime's section of the index (item id -> record)."""
    return getattr(index, runtime.section)


def item_coverage(store: CacheStore, index: Index, runtime, item_id: str,
                  installed: dict[str, Any] | None) -> ItemCoverage:
    """Whether ``item_id`` is covered in ``store``: recorded, not stale for what is installed here (``installed``:
    runtime.installed(); None: nothing to compare) and every entry it names whole with the recorded bytes."""
    record = records(index, runtime).get(item_id)
    if record is None:
        return ItemCoverage(item_id, MISSING, f"no {runtime.label} record in the index: not warmed"
                            + (f" ({runtime.needs_gpu})" if runtime.needs_gpu else ""))
    if installed is not None:
        stale = runtime.stale(record, installed)
        if stale:
            return ItemCoverage(item_id, STALE, stale)
    if not record.get("entries"):
        return ItemCoverage(item_id, BROKEN, "the record names no entry")
    lost = entries_problem(store, index, item_id, record["entries"])
    if lost is not None:
        return lost
    return ItemCoverage(item_id, COVERED, runtime.covered(record))


def merge_stage(root: Path, stage: Path, areas: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """Move every entry an item's build wrote into its private staging root (``stage``, under the cache's own
    staging folder: the same filesystem) into the cache's areas: an entry not there yet by one rename of its folder,
    one there already (inductor's buckets grow; a Triton kernel another build compiled too) file by file, a file
    already there left as it is (both names are the content's hash). Nothing is written through a link below the
    root (cache/confine.py). Triton's group files name their stage's paths: each moved Triton entry is pointed at
    where it lies now. Returns (the build's entries, ``<area>/<name>``, wherever they were already; the stage's
    entries that were not whole or could not be moved, each with why)."""
    merged, bad = [], []
    for area in areas:
        fam = family_for_area(area)
        if fam is None:
            continue
        for name, problem in fam.entries(fam.area_dir(stage)).items():
            member = f"{area}/{name}"
            if problem is not None:
                bad.append(f"{member}: {problem}")
                continue
            try:
                _move_entry(root, member, fam.area_dir(stage) / name)
            except (confine.Refused, OSError) as exc:
                bad.append(f"{member}: {exc}")
                continue
            fam.relocate(fam.area_dir(root) / name)
            merged.append(member)
    return merged, bad


def _move_entry(root: Path, member: str, src: Path) -> None:
    """``src`` moved to ``<root>/<member>``: the folder at once where none is there, else each file not there yet."""
    parent, _, leaf = member.rpartition("/")
    with confine.entry_dir(root, parent, make=True) as parent_fd:
        try:
            os.rename(src, leaf, dst_dir_fd=parent_fd)
            return
        except OSError:  # there already (not empty): merged file by file below; a link there is refused by the open
            pass
    with confine.entry_dir(root, member) as entry_fd:
        for f in sorted(src.iterdir()):
            try:
                os.stat(f.name, dir_fd=entry_fd, follow_symlinks=False)  # the same name: the same content
            except FileNotFoundError:
                os.rename(f, f.name, dst_dir_fd=entry_fd)
