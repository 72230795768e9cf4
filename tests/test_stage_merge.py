"""A graph item's build writes a private staging root of the cache, merged into the cache's areas when it ends
(cache/item_records.py merge_stage), so that warm can run it beside the pool's Triton MoE chunks, which write the
same areas. Real files in Triton's and inductor's own layouts: a new entry moves whole, a bucket already there
grows by the files it lacks and keeps its own, a Triton group file names where its kernel lies now, a stage entry
that is not whole is named and not moved, and nothing is written through a link below the cache root."""

from __future__ import annotations

import json
import os
from pathlib import Path

from dgprecompile.cache.item_records import merge_stage
from dgprecompile.cache.store import CacheStore
from dgprecompile.runtimes.captured import triton_entry_problem

AREAS = ("inductor", "triton")


def _triton_entry(area: Path, key: str, kernel: str = "k", whole: bool = True) -> Path:
    """A Triton cache entry as FileCacheManager writes it: the kernel's files, then its group file naming them by
    absolute path (last: an entry without it is a compile that did not finish)."""
    d = area / key
    d.mkdir(parents=True)
    files = {f"{kernel}.cubin": b"\x7fELF cubin", f"{kernel}.json": b'{"name": "k"}'}
    for name, data in files.items():
        (d / name).write_bytes(data)
    if whole:
        (d / f"__grp__{kernel}.json").write_text(json.dumps({"child_paths": {n: str(d / n) for n in files}}))
    return d


def _stage(root: Path) -> Path:
    store = CacheStore(root)
    store.ensure()
    return store.new_staging()


def test_a_new_entry_moves_whole_and_its_group_file_names_where_it_lies_now(tmp_path):
    root = tmp_path / "cache"
    stage = _stage(root)
    _triton_entry(stage / "triton", "KEY1")
    code = stage / "inductor" / "ab"
    code.mkdir(parents=True)
    (code / "cabc.py").write_text("# generated\n")
    merged, bad = merge_stage(root, stage, AREAS)
    assert bad == [] and sorted(merged) == ["inductor/ab", "triton/KEY1"]
    assert not (stage / "triton" / "KEY1").exists() and (root / "inductor" / "ab" / "cabc.py").read_text()
    entry = root / "triton" / "KEY1"
    assert triton_entry_problem(entry, here=True) is None  # the group file points into the cache, not the stage
    children = json.loads((entry / "__grp__k.json").read_text())["child_paths"]
    assert all(Path(p).parent == entry for p in children.values())


def test_a_bucket_there_already_grows_by_what_it_lacks_and_keeps_its_own_files(tmp_path):
    root = tmp_path / "cache"
    stage = _stage(root)
    there = root / "inductor" / "fxgraph" / "xy" / "fkey"
    there.mkdir(parents=True)
    (there / "entry1").write_bytes(b"the cache's own")
    staged = stage / "inductor" / "fxgraph" / "xy" / "fkey"
    staged.mkdir(parents=True)
    (staged / "entry1").write_bytes(b"the stage's")
    (staged / "entry2").write_bytes(b"new")
    merged, bad = merge_stage(root, stage, AREAS)
    assert bad == [] and merged == ["inductor/fxgraph/xy/fkey"]
    assert (there / "entry1").read_bytes() == b"the cache's own" and (there / "entry2").read_bytes() == b"new"


def test_a_stage_entry_not_whole_is_named_and_left_where_it_is(tmp_path):
    root = tmp_path / "cache"
    stage = _stage(root)
    _triton_entry(stage / "triton", "CUT", whole=False)
    merged, bad = merge_stage(root, stage, AREAS)
    assert merged == [] and len(bad) == 1 and bad[0].startswith("triton/CUT: no __grp__")
    assert not (root / "triton" / "CUT").exists()


def test_nothing_is_written_through_a_link_in_the_caches_area(tmp_path):
    root, outside = tmp_path / "cache", tmp_path / "outside"
    outside.mkdir()
    stage = _stage(root)
    os.symlink(outside, root / "triton")  # the cache's Triton area replaced by a link out of the cache
    _triton_entry(stage / "triton", "KEY2")
    merged, bad = merge_stage(root, stage, AREAS)
    assert merged == [] and len(bad) == 1 and "symbolic link" in bad[0]
    assert list(outside.iterdir()) == []
