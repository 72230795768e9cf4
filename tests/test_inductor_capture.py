"""torch.compile (inductor) under `launch --capture` and strict `launch`, with the real torch of the venv compiling
on the CPU (no GPU here: inductor's C++ backend stands where a GPU run has Triton kernels, whose entries go to the
Triton area and are covered by tests/test_triton_capture.py). Inductor's own FX graph and AOTAutograd caches, its
own code caches, its own lookups: the capture files them whole in the nested inductor area, pack/unpack carries
them, a later process is an FX graph cache hit and compiles nothing, and a strict launch refuses a graph the cache
does not hold, naming it."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import clear_job_env, needs_legacy, needs_nvcc

from dgprecompile.cache.artifact import check_member
from dgprecompile.cache.store import CacheStore, valid_entry_name
from dgprecompile.cli.main import cli
from dgprecompile.errors import InputError
from dgprecompile.planning.manifest import write_manifest
from dgprecompile.planning.plan import PlanRequest
from dgprecompile.planning.trace import plan_from_calls
from dgprecompile.runtimes import family_for_area

REPO = Path(__file__).resolve().parent.parent
torch_here = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                reason="no torch in the venv (make setup installs it)")

# A job's first forward, in miniature: our own function of the shape of SGLang's vocab-parallel mask (ints in,
# a masked index and a mask out), compiled with dynamic shapes as SGLang does at tp > 1; the job writes what
# inductor's own counters say (FX graph cache hits and misses) to counters.json.
CHILD = textwrap.dedent("""
    import json, sys, torch
    from torch._dynamo.utils import counters

    def masked_input(ids, start: int, end: int):
        inside = (ids >= start) & (ids < end)
        return inside * (ids - start), ~inside

    fn = torch.compile(masked_input, dynamic=True)
    idx, mask = fn(torch.arange(int(sys.argv[1])), 8, 40)
    assert idx[9].item() == 1 and bool(mask[0])
    with open("counters.json", "w") as f:
        json.dump(dict(counters["inductor"]), f)
""")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    clear_job_env(monkeypatch, "TORCHINDUCTOR_")


def _job(folder: Path) -> Path:
    (folder / "child.py").write_text(CHILD)
    plan = plan_from_calls([{"kernel_type": "GEMM_NT_F8F8BF16", "m": 64, "n": 512, "k": 512, "num_groups": 1}],
                           PlanRequest(sglang="0.5.1"))
    write_manifest(plan, folder / "plan.yaml")
    return folder


def dg(*args, cwd: Path):
    old = os.getcwd()
    os.chdir(cwd)
    try:
        return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    finally:
        os.chdir(old)


def launch(folder: Path, *opts, cache="cache", n=64):
    return dg("launch", "--manifest", "plan.yaml", "--cache-dir", cache, "--allow-missing", *opts, "--",
              sys.executable, "child.py", n, cwd=folder)


def counters(folder: Path) -> dict:
    """What the job's inductor counted (and the file removed, so that a job that died leaves none)."""
    path = folder / "counters.json"
    out = json.loads(path.read_text())
    path.unlink()
    return out


def inductor_extra(cache: Path) -> dict:
    return {k: v for k, v in json.loads((cache / "dgprecompile" / "index.json").read_text())["extra"].items()
            if v.get("area") == "inductor"}


def tree(path: Path) -> dict[str, bytes]:
    """Every file under ``path`` with its bytes, but FileLock's empty files in inductor's locks/ (a hit takes locks)."""
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*"))
            if p.is_file() and p.relative_to(path).parts[0] != "locks"}


@pytest.fixture(scope="module")
def captured(tmp_path_factory) -> Path:
    """One real capture run (inductor compiles the graph: about 20 s on two CPU cores); tests copy it."""
    folder = _job(tmp_path_factory.mktemp("inductor-capture"))
    os.environ["PYTHONPATH"] = str(REPO)  # the hook and this tree, for the job
    try:
        r = launch(folder, "--capture")
    finally:
        os.environ.pop("PYTHONPATH")
    assert r.exit_code == 0, r.output
    assert counters(folder).get("fxgraph_cache_miss") == 1, r.output  # it compiled: nothing was there
    (folder / "capture-output.txt").write_text(r.output)
    return folder


@pytest.fixture
def job(captured, tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    shutil.copytree(captured, tmp_path / "job", symlinks=True)
    return tmp_path / "job"


@torch_here
def test_a_capture_files_inductors_graphs_whole_in_the_nested_area(job):
    cache = job / "cache"
    filed = inductor_extra(cache)
    entries = sorted(v["entry"] for v in filed.values())
    # the FX graph cache's entry (fxgraph/<k>/<key>), AOTAutograd's (aotautograd/<key>), and the code buckets
    assert [e for e in entries if e.startswith("fxgraph/")] and [e for e in entries if e.startswith("aotautograd/")]
    assert all(valid_entry_name(e, "inductor") for e in entries) and not any(e.startswith("locks") for e in entries)
    on_disk = {str(p.relative_to(cache / "inductor")) for p in (cache / "inductor").rglob("*")
               if p.is_file() and not p.relative_to(cache / "inductor").parts[0] == "locks"}
    assert {f"{v['entry']}/{f}" for v in filed.values() for f in v["files"]} == on_disk  # every file, whole
    assert all(v["by"] == "capture" for v in filed.values())
    store = CacheStore(cache)
    assert all(store.check_entry(rec) is None for rec in store.read_index().extra.values())
    output = (job / "capture-output.txt").read_text()
    assert "not filed" not in output
    fx = [e.split("/")[-1] for e in entries if e.startswith("fxgraph/")]
    assert f"kernels=FX graph {fx[0]}" in output and len(fx) == 1  # one graph, named by its FX graph cache key


@torch_here
def test_a_later_strict_process_hits_the_fx_graph_cache_and_compiles_nothing(job):
    cache = job / "cache"
    before = tree(cache / "inductor")
    r = launch(job, n=80)  # strict, another length: the dynamic graph is the same FX graph cache entry
    assert r.exit_code == 0, r.output
    seen = counters(job)
    assert seen.get("fxgraph_cache_hit") == 1 and not seen.get("fxgraph_cache_miss"), seen
    assert "DGPRECOMPILE_STRICT_FAMILIES" in r.output and "inductor" in r.output  # the refusal was armed
    assert tree(cache / "inductor") == before  # nothing compiled, nothing written


@torch_here
def test_a_strict_launch_refuses_a_graph_the_cache_lacks_naming_it(job, capfd):
    cache = job / "cache"
    for area in ("fxgraph", "aotautograd"):  # the captured graph is gone; its code buckets stay
        shutil.rmtree(cache / "inductor" / area)
    capfd.readouterr()
    r = launch(job)
    assert r.exit_code == 1, r.output
    child = capfd.readouterr().err
    assert "torch.compile (inductor) tried to compile the graph of masked_input (" in child, child
    assert "child.py:" in child and "dgprecompile launch --capture" in child  # where it is, and the fix
    assert "strict mode refused 1 runtime compile(s): masked_input" in r.output, r.output
    assert not (cache / "inductor" / "fxgraph").exists()  # refused before inductor wrote anything


@torch_here
@needs_nvcc
@needs_legacy
def test_pack_and_unpack_carry_the_nested_area_to_another_root(job):
    r = dg("warm", "--manifest", "plan.yaml", "--cache-dir", "cache", cwd=job)  # the plan's one DeepGEMM kernel
    assert r.exit_code == 0, r.output
    r = dg("pack", "--manifest", "plan.yaml", "--cache-dir", "cache", "-o", "art.tar.gz", cwd=job)
    assert r.exit_code == 0, r.output
    with tarfile.open(job / "art.tar.gz") as tar:
        names = tar.getnames()
    assert any(n.startswith("inductor/fxgraph/") and n.count("/") == 4 for n in names), names
    assert any(n.startswith("inductor/aotautograd/") and n.count("/") == 3 for n in names), names
    r = dg("unpack", "art.tar.gz", "--cache-dir", "node", cwd=job)  # a clean node, at another path
    assert r.exit_code == 0, r.output
    filed = inductor_extra(job / "cache")
    assert inductor_extra(job / "node") == filed
    for rec in filed.values():
        assert tree(job / "node" / "inductor" / rec["entry"]) == tree(job / "cache" / "inductor" / rec["entry"])
    before = tree(job / "node" / "inductor")
    r = launch(job, cache="node")  # strict there: inductor's cache is found at the new root, nothing compiles
    assert r.exit_code == 0, r.output
    assert counters(job).get("fxgraph_cache_hit") == 1
    assert tree(job / "node" / "inductor") == before


def _member(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = 1
    return info


def test_the_artifact_checks_inductors_entries_at_their_own_depth(tmp_path):
    for ok in ("inductor/fxgraph/ab/fabkey/blob", "inductor/aotautograd/akey/blob", "inductor/ab/cab.py"):
        check_member(tmp_path / "a.tar.gz", _member(ok))
    for bad in ("inductor/fxgraph/ab/blob", "inductor/aotautograd/akey/x/blob", "inductor/ab/x/cab.py",
                "inductor/fxgraph/.ab/fabkey/blob"):
        with pytest.raises(InputError, match="refusing member"):
            check_member(tmp_path / "a.tar.gz", _member(bad))


def test_an_inductor_entry_written_halfway_is_not_whole(tmp_path):
    fam = family_for_area("inductor")
    leaf = tmp_path / "fxgraph" / "ab" / "fabkey"
    leaf.mkdir(parents=True)
    (leaf / ".123.456.tmp").write_bytes(b"x")  # write_atomic's temporary, not yet renamed
    (tmp_path / "cd").mkdir()
    (tmp_path / "cd" / "ccd.so").write_bytes(b"\x7fELF" + b"\x02\x01" + b"\0" * 200)  # a link cut short
    (tmp_path / "locks").mkdir()
    (tmp_path / "locks" / "x.lock").write_bytes(b"")
    found = fam.entries(tmp_path)
    assert set(found) == {"fxgraph/ab/fabkey", "cd"}  # locks/ holds no entries
    assert "in flight" in found["fxgraph/ab/fabkey"] and "cut short" in found["cd"]
