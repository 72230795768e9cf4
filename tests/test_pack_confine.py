"""pack ships only the cache's own files, and streams them (issue 29 item 4).

A real legacy-warmed cache and real tar: an area that is a symbolic link to a folder outside the cache, a file
hard-linked from outside, an entry past the size cap, an artifact past its cap: each refused with one error line
naming it, exit 1, nothing written. A large entry within the caps is packed with memory that does not grow with its
size (the peak RSS of a real `pack` process, measured by the kernel).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from helpers import PLAN, assert_one_error, warm_once
from test_artifact import copy_cache, run

from dgprecompile.cache.store import CacheStore

pytestmark = pytest.mark.nvcc
REPO = Path(__file__).resolve().parent.parent
MIB = 1 << 20


@pytest.fixture
def cache(tmp_path_factory, tmp_path) -> Path:
    return copy_cache(warm_once(tmp_path_factory), tmp_path / "dg")


def _refused(cache: Path, out: Path, *words: str, extra=()) -> None:
    res = run("pack", *PLAN, "--cache-dir", str(cache), "-o", str(out), *extra)
    assert_one_error(res, *words)
    assert res.exit_code == 1, res.output
    assert "nothing was packed" in res.stderr
    assert not out.exists() and not [p for p in out.parent.iterdir() if p.name.endswith(".tmp")]


def _big_entry(cache: Path, mib: int) -> Path:
    """An extra entry holding one ``mib`` MiB file (sparse: reads as zeros, costs no disk), filed in the index."""
    entry = cache / "cache" / "kernel.padding.000000000000"
    entry.mkdir()
    with open(entry / "blob", "wb") as f:
        f.truncate(mib * MIB)
    store = CacheStore(cache)
    record = store.record_entry(entry.name)
    store.update_index(lambda index: index.extra.__setitem__(entry.name, record))
    return entry


def test_an_area_linked_outside_the_cache_is_refused(cache, tmp_path):
    """The job's trick on `$TRITON_CACHE_DIR`, done to DeepGEMM's own area: cache/ moved out and linked back."""
    outside = tmp_path / "outside"
    shutil.move(str(cache / "cache"), outside)
    os.symlink(outside, cache / "cache")
    _refused(cache, tmp_path / "a.tar.gz", f"{cache}/cache is a symbolic link (to {outside})")


def test_a_cache_root_that_is_a_link_is_the_users_choice(cache, tmp_path):
    """Links below the root are refused; the root itself (e.g. ~/.cache/deep_gemm -> /data/dg) is followed."""
    os.symlink(cache, tmp_path / "root-link")
    out = tmp_path / "a.tar.gz"
    res = run("pack", *PLAN, "--cache-dir", str(tmp_path / "root-link"), "-o", str(out))
    assert res.exit_code == 0, res.output
    assert out.is_file()


def test_a_file_hard_linked_from_outside_is_refused(cache, tmp_path):
    entry = sorted((cache / "cache").iterdir())[0]
    os.link(entry / "kernel.cu", tmp_path / "outside.cu")
    _refused(cache, tmp_path / "a.tar.gz", f"{entry}/kernel.cu has 2 hard links")


def test_an_entry_past_the_cap_is_refused_and_the_option_raises_it(cache, tmp_path):
    entry = _big_entry(cache, 65)
    _refused(cache, tmp_path / "a.tar.gz", f"cache/{entry.name} holds more than 64 MiB", "--max-entry-mib")
    _refused(cache, tmp_path / "a.tar.gz", "more than 32 MiB of entries", "--max-artifact-mib",
             extra=["--max-entry-mib", "80", "--max-artifact-mib", "32"])
    out = tmp_path / "b.tar.gz"
    res = run("pack", *PLAN, "--cache-dir", str(cache), "-o", str(out), "--max-entry-mib", "80")
    assert res.exit_code == 0, res.output
    with tarfile.open(out, "r:gz") as tar:
        assert tar.getmember(f"cache/{entry.name}/blob").size == 65 * MIB


def _peak_rss(cache: Path, out: Path, *extra: str) -> int:
    """Peak resident memory (bytes) of a real `dgprecompile pack` process."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "dgprecompile", "pack", *PLAN, "--cache-dir", str(cache), "-o",
                             str(out), *extra], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.returncode == 0, err
    return usage.ru_maxrss * 1024


def test_pack_streams_a_large_entry(cache, tmp_path):
    """Before: every member was read into memory first (a 300 MB Triton file: 336 MB RSS). Now the peak memory of
    packing a 160 MiB entry is that of packing the cache without it, give or take a few chunks."""
    base = _peak_rss(cache, tmp_path / "base.tar.gz")
    _big_entry(cache, 160)
    big = _peak_rss(cache, tmp_path / "big.tar.gz", "--max-entry-mib", "200")
    assert big - base < 40 * MIB, (base >> 20, big >> 20)
    with tarfile.open(tmp_path / "big.tar.gz", "r:gz") as tar:
        assert tar.getmember("cache/kernel.padding.000000000000/blob").size == 160 * MIB
