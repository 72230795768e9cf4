"""torch.compile graph records: what each planned inductor item was built with, and the entries it produced.

The index (``index.json``, key ``inductor``) holds one record per item id: the torch the warm ran (its version:
inductor's key holds the torch build), the GPU (its name: the key holds it too), how many graphs it compiled, and
the entries its compiles left (inductor's FX graph, AOTAutograd and generated-code entries, area ``inductor``, and
the Triton kernels inductor generated, area ``triton``; their checksums are in ``index.extra``). The coverage rule
is cache/item_records.py's, asked of runtimes/inductor.py.
No torch import: verify and warm's parent both use this.
"""

from __future__ import annotations

from typing import Any

from dgprecompile.cache import item_records
from dgprecompile.cache.item_records import BROKEN, COVERED, MISSING, STALE, file_entries
from dgprecompile.cache.store import CacheStore, Index
from dgprecompile.cache.triton_moe import ItemCoverage
from dgprecompile.runtimes.inductor import INDUCTOR_GRAPHS

__all__ = ["BROKEN", "COVERED", "MISSING", "STALE", "file_entries", "item_coverage"]


def item_coverage(store: CacheStore, index: Index, item_id: str, installed: dict[str, Any] | None) -> ItemCoverage:
    """Whether ``item_id`` is covered in ``store`` (``installed``: INDUCTOR_GRAPHS.installed())."""
    return item_records.item_coverage(store, index, INDUCTOR_GRAPHS, item_id, installed)
