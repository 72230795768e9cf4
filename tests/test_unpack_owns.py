"""An unpack removes and writes only what is its own (issue 46 items 1, 2, 3, 6).

Real `dgprecompile unpack` processes on one cache folder, real artifacts packed from a real legacy warm: an unpack
that fails late (a cubin swapped between two entries: each file loadable, the entries not) or is stopped by SIGTERM
after it made the cache folder must leave another unpack's finished install there byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import PLAN, assert_one_error, warm_once
from test_artifact import copy_cache, members_of, run, write_archive

from dgprecompile.cache.store import CacheStore

pytestmark = pytest.mark.nvcc
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> dict[str, Path]:
    """good: the plan's artifact; big: it plus a 32 MiB entry (slow to extract); late: big with two cubins swapped
    between their entries (every file passes the archive's checks, the staged entries do not)."""
    cache = warm_once(tmp_path_factory)
    tmp = tmp_path_factory.mktemp("owns")
    good = tmp / "good.tar.gz"
    assert run("pack", *PLAN, "--cache-dir", str(cache), "-o", str(good)).exit_code == 0
    big_cache = copy_cache(cache, tmp / "big-cache")
    entry = big_cache / "cache" / "kernel.padding.000000000000"
    entry.mkdir()
    (entry / "blob").write_bytes(os.urandom(32 << 20))
    store = CacheStore(big_cache)
    record = store.record_entry(entry.name, by="adopted")
    store.update_index(lambda index: index.extra.__setitem__(entry.name, record))
    big = tmp / "big.tar.gz"
    assert run("pack", *PLAN, "--cache-dir", str(big_cache), "-o", str(big)).exit_code == 0
    return {"good": good, "big": big, "late": _swap_cubins(big, tmp / "late.tar.gz")}


def rewrite(artifact: Path, dest: Path, change) -> Path:
    """``artifact`` with ``change(members: dict name -> bytes, index)`` applied and its manifest's digests made to
    match: what someone who can write where artifacts lie, but holds no key, would make."""
    members = members_of(artifact)
    manifest, index = json.loads(members[0][1]), json.loads(members[1][1])
    data = {info.name: body for info, body in members[2:]}
    change(data, index)
    index_bytes = json.dumps(index).encode()
    listing = {"dgprecompile/index.json": {"sha256": hashlib.sha256(index_bytes).hexdigest(),
                                           "bytes": len(index_bytes)}}
    listing.update({n: {"sha256": hashlib.sha256(b).hexdigest(), "bytes": len(b)} for n, b in data.items()})
    manifest["members"] = listing
    infos = {info.name: info for info, _ in members}
    rest = []
    for name, body in sorted(data.items()):
        info = infos.get(name) or _file_info(name, members[2][0])
        rest.append((info, body))
    write_archive(dest, [(members[0][0], json.dumps(manifest).encode()), (members[1][0], index_bytes), *rest])
    return dest


def _file_info(name: str, like):
    import copy

    info = copy.copy(like)
    info.name = name
    return info


def _records(index: dict) -> list[dict]:
    return [*index["kernels"].values(), *index["extra"].values()]


def _swap_cubins(artifact: Path, dest: Path) -> Path:
    def change(data, index):
        a, b = sorted(n for n in data if n.endswith("/kernel.cubin"))[:2]
        data[a], data[b] = data[b], data[a]
        for record in _records(index):
            for name in (a, b):
                if f"{record.get('area', 'cache')}/{record['entry']}/kernel.cubin" == name:
                    record["files"]["kernel.cubin"] = hashlib.sha256(data[name]).hexdigest()

    return rewrite(artifact, dest, change)


def files_of(root: Path) -> dict[str, bytes]:
    """Every file under root by its path, but the transient bookkeeping (staging folders, the index lock)."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_file() and not rel.startswith("dgprecompile/staging") and rel != "dgprecompile/index.lock":
            out[rel] = p.read_bytes()
    return out


def _unpack(artifact: Path, cache: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-m", "dgprecompile", "unpack", str(artifact), "--cache-dir", str(cache)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _stopped_mid_extraction(artifact: Path, cache: Path) -> subprocess.Popen:
    """An unpack into the not yet existing ``cache``, stopped (SIGSTOP) while it writes the padding entry into its
    staging folder: it made the cache folder, installed nothing yet."""
    for _attempt in range(5):
        shutil.rmtree(cache, ignore_errors=True)
        proc = _unpack(artifact, cache)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if list((cache / "dgprecompile" / "staging").glob("*/cache/kernel.padding.*/blob")):
                os.kill(proc.pid, signal.SIGSTOP)
                return proc
            time.sleep(0.002)
        proc.communicate(timeout=60)
    pytest.skip("could not stop the unpack mid-extraction on this machine")


@pytest.mark.parametrize("how", ["fails late", "SIGTERM"])
def test_a_failed_unpack_keeps_another_unpacks_finished_install(artifacts, tmp_path, how):
    """Issue 46 item 1: the unpack that made the cache folder removed it whole on failure (rmtree of the root),
    with another unpack's finished install in it."""
    cache = tmp_path / "C"
    first = _stopped_mid_extraction(artifacts["late" if how == "fails late" else "big"], cache)
    try:
        other = _unpack(artifacts["good"], cache)
        out, err = other.communicate(timeout=300)
        assert other.returncode == 0, err
        installed = files_of(cache)
        assert sum(1 for n in installed if n.endswith("kernel.cubin")) >= 2, sorted(installed)
        if how == "SIGTERM":
            os.kill(first.pid, signal.SIGTERM)
    finally:
        os.kill(first.pid, signal.SIGCONT)
    out, err = first.communicate(timeout=300)
    if how == "fails late":
        assert first.returncode == 2, err
        assert "is not loadable" in err and "nothing was unpacked" in err, err
    else:
        assert first.returncode == 143, err
    assert files_of(cache) == installed, "the other unpack's install changed"
    assert not list((cache / "dgprecompile" / "staging").glob("*")), "the failed unpack's staging is left"
    assert run("verify", *PLAN, "--cache-dir", str(cache)).exit_code == 0


def test_a_failed_unpack_alone_leaves_no_folder_it_made(artifacts, tmp_path):
    """What the roll-back still removes: everything it made, when nobody else wrote there."""
    cache = tmp_path / "new" / "C"
    res = run("unpack", str(artifacts["late"]), "--cache-dir", str(cache))
    assert_one_error(res, "is not loadable", "nothing was unpacked")
    assert res.exit_code == 2
    assert not cache.exists()


# ---- item 2: nothing is written through a link below the cache root -----------------------------------------------

ELF = Path(__import__("_json").__file__).read_bytes()  # a real shared object: what Triton's and FlashInfer's are
AREA_ENTRIES = {  # member -> bytes: one entry of each filed area, at its own depth
    "inductor/fxgraph/ab/fabcdef/entry": b"an FX graph cache entry",
    "inductor/ab/cabxyz.py": b"# inductor's generated module\n",
    "flashinfer/0.6.1/90a/cached_ops/norm/norm.so": ELF,
    "triton/3fa9c0/cuda_utils.cpython-311-x86_64-linux-gnu.so": ELF,
}


def with_entries(artifact: Path, dest: Path, members: dict[str, bytes], extra_key=None) -> Path:
    """``artifact`` with ``members`` added, each entry filed in the index's extra records (as capture files them);
    ``extra_key(member_dir) -> key`` names the record (default: the member's folder, as the index keys it)."""
    from dgprecompile.cache.store import area_depth

    def change(data, index):
        data.update(members)
        for member, body in members.items():
            parts = member.split("/")
            depth = area_depth(parts[0], parts[1])
            entry, name = "/".join(parts[1:1 + depth]), parts[-1]
            key = f"{parts[0]}/{entry}"
            record = index["extra"].setdefault((extra_key or (lambda k: k))(key), {
                "entry": entry, "files": {}, "bytes": 0, "seconds": None, "by": "capture", "area": parts[0]})
            record["files"][name] = hashlib.sha256(body).hexdigest()
            record["bytes"] += len(body)

    return rewrite(artifact, dest, change)


@pytest.fixture(scope="module")
def areas(artifacts, tmp_path_factory) -> Path:
    return with_entries(artifacts["good"], tmp_path_factory.mktemp("areas") / "areas.tar.gz", AREA_ENTRIES)


def test_an_artifact_with_an_entry_in_each_area_unpacks(areas, tmp_path):
    res = run("unpack", str(areas), "--cache-dir", str(tmp_path / "C"))
    assert res.exit_code == 0, res.output
    for member, body in AREA_ENTRIES.items():
        assert (tmp_path / "C" / member).read_bytes() == body


LINKS = ["cache", "inductor", "inductor/fxgraph", "inductor/fxgraph/ab", "inductor/fxgraph/ab/fabcdef", "inductor/ab",
         "flashinfer", "flashinfer/0.6.1/90a", "flashinfer/0.6.1/90a/cached_ops/norm", "triton", "triton/3fa9c0",
         "dgprecompile", "dgprecompile/staging"]


@pytest.mark.parametrize("link", LINKS)
def test_unpack_refuses_a_link_anywhere_below_the_root(areas, tmp_path, link):
    """Issue 46 item 2: `ln -s /elsewhere C/inductor` (or deeper) made unpack install the entries where the link
    points. Now: exit 1, one error naming the link, nothing written there or in the cache."""
    from test_artifact import expect_refusal

    cache, elsewhere = tmp_path / "C", tmp_path / "elsewhere"
    elsewhere.mkdir()
    (cache / link).parent.mkdir(parents=True)
    os.symlink(elsewhere, cache / link)
    expect_refusal(areas, cache, f"{cache}/{link} is a symbolic link (to {elsewhere})", code=1)
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("area, entry", [("cache", "kernel.x"), ("inductor", "fxgraph/ab/fabcdef"),
                                         ("flashinfer", "0.6.1/90a/cached_ops/norm"), ("triton", "3fa9c0")])
def test_the_install_itself_never_follows_a_link(tmp_path, area, entry):
    """What warm's install and unpack's share (CacheStore.install_entry): the folders on the way are made and
    opened without following a link, so a link put there after unpack's check still catches nothing."""
    from dgprecompile.errors import CheckFailed

    store, elsewhere = CacheStore(tmp_path / "C"), tmp_path / "elsewhere"
    elsewhere.mkdir()
    parent = store.entry_path(entry, area).parent
    parent.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(elsewhere, parent)
    staged = tmp_path / "staged" / "e"
    staged.mkdir(parents=True)
    (staged / "blob").write_bytes(b"x")
    with pytest.raises(CheckFailed, match=f"{parent} is a symbolic link"):
        store.install_entry(staged, area=area, entry=entry)
    assert list(elsewhere.iterdir()) == [] and (staged / "blob").is_file()


# ---- item 3: verify checks each item's entries under the names its runtime looks them up by -----------------------

QWEN = "python -m sglang.launch_server --model-path Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8 --tp 8 --ep 8"


def _borrowed_records(artifact: Path, dest: Path) -> tuple[Path, list[str]]:
    """``artifact`` whose index files the QWEN server's torch.compile graph items under one inductor entry name,
    ``inductor/fxgraph/ab/fabcdef``, whose extra record is really a DeepGEMM entry's (a forged, unsigned artifact:
    every archived file is listed and matches). Returns (artifact, the item ids)."""
    from dgprecompile.planning.request import PlanRequest
    from dgprecompile.planning.server_plan import plan_from_server
    from dgprecompile.runtimes.inductor import INDUCTOR_GRAPHS

    plan = plan_from_server(PlanRequest(sglang_cmd=QWEN, sglang="0.5.14", sglang_precompile=False))
    items = sorted(plan.inductor)
    name = "inductor/fxgraph/ab/fabcdef"

    def change(data, index):
        index["extra"][name] = dict(next(iter(index["kernels"].values())))
        index["inductor"] = {i: {"item": i, "torch": INDUCTOR_GRAPHS.installed()["torch"], "gpu": "NVIDIA H200",
                                 "graphs": 1, "entries": [name]} for i in items}

    return rewrite(artifact, dest, change), items


def test_verify_does_not_count_an_item_by_another_areas_record(artifacts, tmp_path):
    """Issue 46 item 3: the graph items counted ok through another area's entry while there was no inductor/."""
    forged, items = _borrowed_records(artifacts["good"], tmp_path / "forged.tar.gz")
    cache = tmp_path / "C"
    res = run("unpack", str(forged), "--cache-dir", str(cache))
    assert res.exit_code == 0, res.output
    assert not (cache / "inductor").exists()
    res = run("verify", "--sglang-cmd", QWEN, "--sglang", "0.5.14", "--cache-dir", str(cache), "--json")
    checks = {c["kernel"]: c for c in json.loads(res.stdout)["problems"] if c["kernel"] in items}
    assert sorted(checks) == items, res.stdout
    for check in checks.values():
        assert check["status"] == "missing", check
        assert "inductor/fxgraph/ab/fabcdef" in check["detail"] and "not of this entry" in check["detail"], check
    assert res.exit_code == 1


# ---- item 6: the smaller ones ---------------------------------------------------------------------------------------


@pytest.fixture
def fresh(tmp_path) -> Path:
    (tmp_path / "C").mkdir()
    return tmp_path / "C"


def test_a_name_component_longer_than_a_file_name_is_bad_input(artifacts, tmp_path, fresh):
    """It was a write failure with a permissions/space hint (ENAMETOOLONG while extracting)."""
    from test_artifact import expect_refusal

    bad = with_entries(artifacts["good"], tmp_path / "long.tar.gz", {f"triton/{'a' * 300}/x.so": ELF})
    res = expect_refusal(bad, fresh, "a path component of 300 bytes", code=2)
    assert "permission" not in res.stderr.lower() and "space" not in res.stderr.lower()


@pytest.mark.parametrize("member", ["triton/3fa9c0/cuda_utils.cpython-311-x86_64-linux-gnu.so",
                                    "flashinfer/0.6.1/90a/cached_ops/norm/norm.so"])
def test_a_shared_object_that_is_not_elf_is_refused(artifacts, tmp_path, fresh, member):
    """Triton's host modules were accepted whatever their bytes (FlashInfer's are checked as ELF files)."""
    from test_artifact import expect_refusal

    bad = with_entries(artifacts["good"], tmp_path / "notelf.tar.gz", {member: b"#!/bin/sh\necho not a module\n"})
    expect_refusal(bad, fresh, "not a 64-bit little-endian ELF file", "nothing was unpacked", code=2)


def test_an_entry_under_inductors_locks_is_refused(artifacts, tmp_path, fresh):
    """inductor/locks/ holds FileLock's files, no entries: one there was installed (and a job's writes there then
    went unseen)."""
    from test_artifact import expect_refusal

    bad = with_entries(artifacts["good"], tmp_path / "locks.tar.gz", {"inductor/locks/graph.lock": b"x"})
    expect_refusal(bad, fresh, "inductor/locks/ holds the library's own bookkeeping", code=2)
    family = __import__("dgprecompile.runtimes", fromlist=["family_for_area"]).family_for_area("inductor")
    (fresh / "inductor" / "locks" / "k").mkdir(parents=True)
    (fresh / "inductor" / "locks" / "k" / "x.lock").write_bytes(b"x")
    assert family.entries(fresh / "inductor") == {} and CacheStore(fresh).list_entries("inductor") == []


@pytest.mark.parametrize("how", ["deleted", "damaged"])
def test_pack_refuses_a_filed_entry_lost_after_verify(tmp_path_factory, tmp_path, how):
    """pack left such an entry out of the artifact without a word while verify had said complete."""
    cache = copy_cache(warm_once(tmp_path_factory), tmp_path / "dg")
    entry = cache / "triton" / "3fa9c0"
    entry.mkdir(parents=True)
    (entry / "cuda_utils.cpython-311-x86_64-linux-gnu.so").write_bytes(ELF)
    store = CacheStore(cache)
    record = store.record_entry("3fa9c0", by="capture", area="triton")
    store.update_index(lambda index: index.extra.__setitem__(record.member_dir, record))
    assert run("verify", *PLAN, "--cache-dir", str(cache)).exit_code == 0
    out = tmp_path / "a.tar.gz"
    assert run("pack", *PLAN, "--cache-dir", str(cache), "-o", str(out)).exit_code == 0
    out.unlink()
    if how == "deleted":
        shutil.rmtree(entry)
    else:
        so = entry / "cuda_utils.cpython-311-x86_64-linux-gnu.so"
        so.write_bytes(so.read_bytes()[:-1] + bytes([so.read_bytes()[-1] ^ 1]))
    res = run("pack", *PLAN, "--cache-dir", str(cache), "-o", str(out))
    assert_one_error(res, "triton/3fa9c0: ", "missing" if how == "deleted" else "changed", "nothing was packed")
    assert res.exit_code == 1 and not out.exists()


@pytest.fixture
def tmpfs(tmp_path):
    """Mount a tmpfs of the given options at a fresh folder (root only: skipped elsewhere); unmounted after."""
    mounted = []

    def mount(options: str) -> Path:
        mnt = tmp_path / f"mnt{len(mounted)}"
        mnt.mkdir()
        try:
            subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mnt)], check=True,
                           capture_output=True, timeout=30)
        except (OSError, subprocess.SubprocessError) as exc:
            pytest.skip(f"cannot mount a small tmpfs here (needs root): {exc}")
        mounted.append(mnt)
        return mnt

    yield mount
    for mnt in mounted:
        subprocess.run(["umount", str(mnt)], check=False, capture_output=True, timeout=30)


def _bytes(shown: str) -> float:
    number, unit = shown.split()
    return float(number) * 1024 ** ["B", "KiB", "MiB", "GiB", "TiB"].index(unit)


def test_a_filesystem_out_of_inodes_is_named_as_such(artifacts, tmpfs):
    """It was "no space left on M (9.9 MiB free)": bytes to spare, no file left to make."""
    from test_artifact import expect_refusal

    mnt = tmpfs("size=16m,nr_inodes=12")
    (mnt / "C").mkdir()
    res = expect_refusal(artifacts["good"], mnt / "C", f"no free inodes left on {mnt}", code=3)
    assert "ran out of files, not bytes" in res.stderr


def test_the_space_needed_counts_whole_blocks(artifacts, tmpfs, tmp_path):
    """It said "about 200 B needed" where the files take a block each (4 KiB on tmpfs) and more was needed."""
    import re
    import tarfile

    from test_artifact import expect_refusal

    small = with_entries(artifacts["good"], tmp_path / "small.tar.gz",
                         {f"inductor/b{i:02d}/c{i:02d}.py": b"# generated\n" for i in range(96)})
    with tarfile.open(small, "r:gz") as tar:
        sizes = [m.size for m in tar.getmembers() if m.isreg() and not m.name.startswith("dgprecompile/")]
    blocks = sum(max(1, -(-s // 4096)) * 4096 for s in sizes)
    assert sum(sizes) + 64 * 4096 < blocks, "the artifact's files fill their blocks: this test needs smaller ones"
    mnt = tmpfs(f"size={(sum(sizes) + 32 * 4096) // 1024}k")
    (mnt / "C").mkdir()
    res = expect_refusal(small, mnt / "C", f"no space left on {mnt}", "needed", code=3)
    needed = re.search(r"about ([\d.]+ \w+) needed", res.stderr).group(1)
    assert _bytes(needed) >= blocks * 0.99, (needed, blocks)


@pytest.mark.parametrize("link", ["inductor", "inductor/fxgraph/ab", "triton"])
def test_warm_files_no_entry_reached_through_a_link(tmp_path, link):
    """Issue 46 item 2, warm's side: the entries a warm's subprocess left (torch.compile graphs, FlashInfer modules,
    Triton MoE kernels) are filed only where no link is on the way; one reached through a link is not whole."""
    from dgprecompile.cache.triton_moe import file_entries

    cache, elsewhere = tmp_path / "C", tmp_path / "elsewhere"
    members = {"inductor": "inductor/fxgraph/ab/fabcdef", "inductor/fxgraph/ab": "inductor/fxgraph/ab/fabcdef",
               "triton": "triton/3fa9c0"}
    member = members[link]
    files = {"inductor/fxgraph/ab/fabcdef": ("entry", b"graph"), "triton/3fa9c0": ("cuda_utils.so", ELF)}[member]
    real = elsewhere / member[len(link) + 1:]
    real.mkdir(parents=True)
    (real / files[0]).write_bytes(files[1])
    (cache / link).parent.mkdir(parents=True, exist_ok=True)
    os.symlink(elsewhere, cache / link)
    store = CacheStore(cache)
    assert file_entries(store, [member]) == ([], [member])
    assert store.read_index().extra == {}
