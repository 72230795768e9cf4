"""Filed entries unpacked or copied to another root, pointed at where they lie: Triton's group files name absolute
paths, so Triton would miss its entries (and warm would build them again) at any other root than the one they were
filled at. `warm` does this before it decides what is cached, `launch` before the job starts.
"""

from __future__ import annotations

from dgprecompile.cache import confine
from dgprecompile.cache.store import CacheStore, Index
from dgprecompile.runtimes import CAPTURED


def relocate(store: CacheStore) -> list[str]:
    """Filed entries unpacked or copied to another root (Triton's group files name absolute paths, so Triton
    would miss them): point them at where they lie, and re-record their files' sha256. Returns what changed.
    An entry reached through a link (the area replaced by one) is left alone: nothing outside the cache is written.
    A cache this process cannot write is left as it is (Triton misses those entries; strict refuses them by name)."""
    try:
        return _relocate(store)
    except OSError:
        return []


def _relocate(store: CacheStore) -> list[str]:
    index = store.read_index()
    moved = []
    for fam in CAPTURED:
        for name, rec in sorted(index.extra.items()):
            if (rec.area == fam.area and fam.filed and confine.link_problem(store.root, rec.member_dir) is None
                    and fam.relocate(fam.area_dir(store.root) / rec.entry)):
                moved.append(name)
    if moved:
        def mutate(ix: Index) -> None:
            for name in moved:
                old = ix.extra[name]
                ix.extra[name] = store.record_entry(old.entry, old.seconds, old.by, old.area)

        store.update_index(mutate)
    return moved
