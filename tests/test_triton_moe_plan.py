"""SGLang's Triton fused MoE as planned work: `plan` lists one item per MoE shape on a rank (read from the model's
config.json), `warm` runs the real GPU-free Triton warm (sglang 0.5.14's own fused_experts_impl, Triton 3.6.0's own
JIT and compiler) in a worker's subprocess and records it, `verify` checks the record, its Triton and its entries,
pack/unpack carry them. sgl-kernel and torchvision are stand-ins here (tests/standins, named as such)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import (
    NVCC,
    STANDINS,
    Background,
    beside_venv,
    needs_dg013,
    needs_nvcc,
    needs_sgl014,
    sgl_deep_gemm_013_dir,
    sgl_deep_gemm_dir,
    sglang_014_dir,
)

from dgprecompile.planning.manifest import plan_from_dict, write_manifest
from dgprecompile.planning.plan import PlanRequest
from dgprecompile.planning.request import plan_from_request
from dgprecompile.runtimes.items import TritonMoeItem
from dgprecompile.runtimes.triton_moe import TRITON_MOE, gpu_device

REPO = Path(__file__).resolve().parent.parent
MODEL = json.loads((REPO / "dgprecompile" / "data" / "models" / "Qwen3-Coder-480B-A35B-Instruct-FP8.json").read_text())
SERVER = "python -m sglang.launch_server --model-path Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8 --tp 8 --ep 8"
TRITON = REPO / ".venv" / "triton-3.6.0"
needs_triton = pytest.mark.skipif(not (TRITON / "triton" / "__init__.py").is_file(),
                                  reason=f"no Triton at {TRITON} (make setup installs it)")


def _server_plan(cmd: str = SERVER, sglang: str = "0.5.14", **kw):
    return plan_from_request(PlanRequest(sglang_cmd=cmd, sglang=sglang, **kw))


def sglang_023_dir() -> str | None:
    """sglang 0.5.23 and the part of its dependencies its fused MoE path imports (Makefile SGL023)."""
    return beside_venv("sglang-0.5.23", "transformers/__init__.py", "DGP_SGLANG_023")


needs_sgl023 = pytest.mark.skipif(sglang_023_dir() is None, reason="sglang 0.5.23 with transformers not installed "
                                  "beside the venv (make setup: SGL023)")


# ---- plan ---------------------------------------------------------------------------------------------------


def test_plan_of_the_0_5_14_server_lists_one_item_with_the_models_shape_on_a_rank():
    plan = _server_plan()
    assert len(plan.triton_moe) == 1
    item = next(iter(plan.triton_moe.values()))
    tp = ep = 8
    assert item.experts == MODEL["num_experts"] // ep and item.global_experts == MODEL["num_experts"]
    assert item.hidden == MODEL["hidden_size"] and item.topk == MODEL["num_experts_per_tok"]
    assert item.intermediate == MODEL["moe_intermediate_size"] // (tp // ep)
    # SGLang's default chunked prefill on an H200 (8192) bounds a forward; one call per forward (no chunks)
    assert (item.m_min, item.m_max) == (1, 8192) and "fused_moe.py" in item.why and "single shot" in item.why
    assert (item.device_name, item.capability) == ("NVIDIA H200", 90)  # no --gpu: gpus.yaml's default
    assert item.layers == (f"mlp.experts x{MODEL['num_hidden_layers']}",)
    again = plan_from_dict(json.loads(json.dumps(plan.to_dict())))  # the manifest carries it
    assert again.triton_moe == plan.triton_moe and next(iter(again.triton_moe.values())).why == item.why


def test_the_gpu_names_the_device_sglang_picks_its_tuned_config_by():
    plan = _server_plan(gpu="h20")
    item = next(iter(plan.triton_moe.values()))
    assert item.device_name == gpu_device("h20")["name"] == "NVIDIA H20" and item.id.endswith(".NVIDIA_H20.sm90")


def test_no_item_where_the_experts_run_on_deepgemm_or_the_release_was_not_read():
    assert not _server_plan(SERVER + " --moe-runner-backend deep_gemm").triton_moe
    unread = plan_from_request(PlanRequest(model="Qwen3-Coder-480B", tp=8, ep=8, sglang="0.5.8"))
    assert not unread.triton_moe  # 0.5.9-0.5.23's paths were read, 0.5.8's not
    assert any("Triton fused MoE not planned" in n and "not 0.5.8" in n for n in unread.notes), unread.notes


def test_plan_says_whether_tritons_host_modules_are_built_by_warm_or_left_to_capture():
    def host_notes(plan):
        return [n for n in plan.notes if n.startswith("Triton's host modules")]

    (built,) = host_notes(_server_plan())
    assert "`warm` builds them GPU-free" in built and "EXT_SUFFIX" in built and "launch --capture" in built
    old = plan_from_request(PlanRequest(model="Qwen3-Coder-480B", tp=8, ep=8, sglang="0.5.8"))  # Triton MoE, not read
    (left,) = host_notes(old)
    assert "left to one `launch --capture` run" in left and "no Triton kernel is planned" in left
    assert host_notes(_server_plan(SERVER + " --moe-runner-backend deep_gemm")) == []  # no Triton MoE at all


def test_other_quantizations_are_a_note_not_an_item():
    from dgprecompile.planning.shapes import TritonMoeShape

    shape = TritonMoeShape("mlp.experts", 62, 20, 160, 6144, 2560, 8)
    cfg = {"quantization_config": {"quant_method": "fp8", "weight_block_size": None}}
    items, notes = TRITON_MOE.plan_items([shape], config=cfg, sglang_version="0.5.14", max_tokens=64, gpu=None)
    assert items == [] and "not planned" in notes[0] and "weight_block_size=None" in notes[0]


def test_a_manifest_without_the_section_still_reads_and_a_wrong_id_is_refused():
    data = _server_plan().to_dict()
    old = {k: v for k, v in data.items() if k != "triton_moe"}
    assert plan_from_dict(json.loads(json.dumps(old))).triton_moe == {}
    data["triton_moe"][0]["m_max"] = 2  # trimmed without its id
    with pytest.raises(Exception, match="does not match its fields"):
        plan_from_dict(data)


# ---- warm, verify, pack (real sglang 0.5.14 + Triton 3.6.0) ------------------------------------------------


def _env(*paths: str | None) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([p for p in paths if p] + [str(REPO)]),
            "DGP_STANDINS": "sgl_kernel,torchvision", "DGP_TRANSFORMERS_EXIST_OK": "1"}


def _run(*args, env: dict[str, str], timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dgprecompile", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=timeout)


def _full_env():
    return _env(sglang_014_dir(), STANDINS, str(TRITON), sgl_deep_gemm_013_dir())


def _trimmed(path: Path, sglang: str = "0.5.14", m_max: int = 2) -> Path:
    """The server plan with its DeepGEMM buckets and SGLang JIT modules dropped and its Triton MoE item trimmed to
    m 1..m_max (a test's trim, as other tests trim manifests): one fast item to warm."""
    data = _server_plan(sglang=sglang).to_dict()
    for shape in data["shapes"]:
        shape["buckets"], shape["aux_kernels"] = [], []
    data["kernels"], data["total_kernels"] = [], 0
    data.pop("sglang_jit_modules", None)
    data.pop("inductor", None)  # its GPU-only items: tests/test_inductor_graphs.py
    data.pop("flashinfer", None)  # FlashInfer's modules: tests/test_flashinfer_modules.py
    data.pop("triton_path", None)  # the model path's other Triton kernels: tests/test_triton_path.py
    item = TritonMoeItem.from_dict(data["triton_moe"][0])
    data["triton_moe"] = [TritonMoeItem(**{**item.__dict__, "m_max": m_max}).to_dict()]
    write_manifest(plan_from_dict(data), path)
    return path


@pytest.fixture(scope="module")
def triton_only(tmp_path_factory):
    return _trimmed(tmp_path_factory.mktemp("plan") / "triton.yaml")


@pytest.fixture(scope="module")
def warmed(triton_only, tmp_path_factory):
    cache = tmp_path_factory.mktemp("warm") / "cache"
    r = _run("warm", "--manifest", triton_only, "--cache-dir", cache, "--nvcc", NVCC, "--sglang-jit", "on", "--json",
             env=_full_env())
    assert r.returncode == 0, r.stdout + r.stderr
    return cache, json.loads(r.stdout)


def needs_all(test):
    for mark in (needs_triton, needs_sgl014, needs_dg013, needs_nvcc, pytest.mark.slow):
        test = mark(test)
    return test


def _item_id(manifest: Path) -> str:
    import yaml

    return yaml.safe_load(manifest.read_text())["triton_moe"][0]["id"]


@needs_all
def test_warm_runs_the_item_and_records_its_triton_and_entries(warmed, triton_only):
    cache, summary = warmed
    item = _item_id(triton_only)
    assert (summary["compiled"], summary["failed"], summary["triton_moe_item_ids"]) == (1, 0, [item])
    index = json.loads((cache / "dgprecompile" / "index.json").read_text())
    record = index["triton_moe"][item]
    assert record["triton"] == "3.6.0" and record["sglang"] == "0.5.14" and record["ms"] == 2
    assert record["files"]["triton/_C/libtriton.so"]  # the wheel's RECORD hash: Triton's key holds those bytes
    assert len(record["entries"]) == 4  # gate-up and down at m=1 and m=2 (Triton specialises on ints == 1)
    for entry in record["entries"]:
        assert index["extra"][entry]["area"] == "triton"
        assert (cache / entry / "__grp__fused_moe_kernel.json").is_file()
        meta = json.loads((cache / entry / "fused_moe_kernel.json").read_text())
        assert meta["target"]["arch"] == 90
    v = _run("verify", "--manifest", triton_only, "--cache-dir", cache, "--nvcc", NVCC, "--json", env=_full_env())
    assert v.returncode == 0 and json.loads(v.stdout)["complete"], v.stdout + v.stderr
    again = _run("warm", "--manifest", triton_only, "--cache-dir", cache, "--nvcc", NVCC, "--sglang-jit", "on",
                 "--json", env=_full_env())
    assert again.returncode == 0 and json.loads(again.stdout)["already_cached"] == 1, again.stdout + again.stderr


@needs_all
def test_verify_names_a_deleted_entry_and_calls_another_triton_stale(warmed, triton_only, tmp_path):
    cache, _ = warmed
    item = _item_id(triton_only)
    broken = tmp_path / "broken"
    shutil.copytree(cache, broken, symlinks=True)
    index = json.loads((broken / "dgprecompile" / "index.json").read_text())
    gone = index["triton_moe"][item]["entries"][0]
    shutil.rmtree(broken / gone)
    v = _run("verify", "--manifest", triton_only, "--cache-dir", broken, "--nvcc", NVCC, env=_full_env())
    assert v.returncode == 1 and gone in v.stdout + v.stderr and item in v.stdout + v.stderr, v.stdout + v.stderr
    assert len([x for x in v.stderr.splitlines() if x.startswith("error:")]) == 1 and "hint:" in v.stderr

    other = tmp_path / "other"
    shutil.copytree(cache, other, symlinks=True)
    path = other / "dgprecompile" / "index.json"
    index = json.loads(path.read_text())
    index["triton_moe"][item]["triton"] = "3.5.1"
    path.write_text(json.dumps(index))
    v = _run("verify", "--manifest", triton_only, "--cache-dir", other, "--nvcc", NVCC, "--json", env=_full_env())
    report = json.loads(v.stdout)
    assert v.returncode == 1 and report["stale_items"] == [item], v.stdout
    assert "another Triton" in report["verdict"] and "3.5.1" in json.dumps(report["problems"])
    human = _run("verify", "--manifest", triton_only, "--cache-dir", other, "--nvcc", NVCC, env=_full_env())
    assert "warm again here" in human.stderr, human.stderr


@needs_all
def test_the_record_holds_tritons_host_modules_and_verify_names_a_stale_or_missing_one(warmed, triton_only,
                                                                                       tmp_path):
    """warm built cuda_utils and the kernels' launchers (compile/triton_host.py, tests/test_triton_host.py); the
    item's record names them and what their key and file name depend on; verify calls a record made for another
    Python stale, and names a deleted host module."""
    from dgprecompile.cache.relocate import relocate
    from dgprecompile.cache.store import CacheStore
    from dgprecompile.cache.triton_moe import host_key_here

    cache, _ = warmed
    item = _item_id(triton_only)
    index = json.loads((cache / "dgprecompile" / "index.json").read_text())
    host = index["triton_moe"][item]["host_modules"]
    assert host["machine"]["key"] == {**host_key_here(), "triton": "3.6.0"}
    assert sorted(f"triton/{e}" for e in host["launchers"]) == index["triton_moe"][item]["entries"]
    assert host["cuda_utils"] in host["entries"] and set(host["launchers"].values()) <= set(host["entries"])
    for entry in host["entries"]:
        assert index["extra"][f"triton/{entry}"]["by"] == "warm"

    other = tmp_path / "other-python"
    shutil.copytree(cache, other, symlinks=True)
    relocate(CacheStore(other))  # what `launch` does first: the kernels' group files name the copy's paths
    path = other / "dgprecompile" / "index.json"
    changed = json.loads(path.read_text())
    changed["triton_moe"][item]["host_modules"]["machine"]["key"]["ext_suffix"] = ".cpython-39-x86_64-linux-gnu.so"
    path.write_text(json.dumps(changed))
    v = _run("verify", "--manifest", triton_only, "--cache-dir", other, "--nvcc", NVCC, "--json", env=_full_env())
    report = json.loads(v.stdout)
    assert v.returncode == 1 and report["stale_items"] == [item], v.stdout
    assert "another platform or Python" in json.dumps(report["problems"]) and "cpython-39" in v.stdout

    broken = tmp_path / "broken-host"
    shutil.copytree(cache, broken, symlinks=True)
    relocate(CacheStore(broken))
    shutil.rmtree(broken / "triton" / host["cuda_utils"])
    v = _run("verify", "--manifest", triton_only, "--cache-dir", broken, "--nvcc", NVCC, env=_full_env())
    assert v.returncode == 1 and host["cuda_utils"] in v.stdout + v.stderr, v.stdout + v.stderr
    assert len([x for x in v.stderr.splitlines() if x.startswith("error:")]) == 1 and "hint:" in v.stderr


@needs_all
def test_pack_and_unpack_carry_the_records_and_entries(warmed, triton_only, tmp_path):
    cache, _ = warmed
    item = _item_id(triton_only)
    art = tmp_path / "a.tar.gz"
    p = _run("pack", "--manifest", triton_only, "--cache-dir", cache, "-o", art, env=_full_env())
    assert p.returncode == 0, p.stdout + p.stderr
    other = tmp_path / "c2"
    u = _run("unpack", art, "--cache-dir", other, env=_full_env())
    assert u.returncode == 0, u.stdout + u.stderr
    index = json.loads((other / "dgprecompile" / "index.json").read_text())
    assert index["triton_moe"][item] == json.loads((cache / "dgprecompile" / "index.json").read_text())[
        "triton_moe"][item]
    # Triton's group files hold absolute paths: at another root verify names them, until warm or launch points
    # them here
    v = _run("verify", "--manifest", triton_only, "--cache-dir", other, "--nvcc", NVCC, "--json", env=_full_env())
    assert v.returncode == 1 and "not this directory" in v.stdout, v.stdout
    # warm there builds nothing: it points them at this root first (on the H100, 2026-12-06, a carried artifact's
    # model-path Triton items were rebuilt in place instead and warm failed them: "its build made nothing new")
    third = tmp_path / "c3"
    assert _run("unpack", art, "--cache-dir", third, env=_full_env()).returncode == 0
    w = _run("warm", "--manifest", triton_only, "--cache-dir", third, "--nvcc", NVCC, "--sglang-jit", "on", "--json",
             env=_full_env())
    report = json.loads(w.stdout)
    assert w.returncode == 0 and report["compiled"] == 0 and report["failed"] == 0, w.stdout + w.stderr
    assert f"Triton entries pointed at {third}" in w.stderr, w.stderr
    v = _run("verify", "--manifest", triton_only, "--cache-dir", third, "--nvcc", NVCC, "--json", env=_full_env())
    assert v.returncode == 0 and json.loads(v.stdout)["complete"], v.stdout + v.stderr
    from dgprecompile.cache.relocate import relocate
    from dgprecompile.cache.store import CacheStore

    assert sorted(relocate(CacheStore(other))) == index["triton_moe"][item]["entries"]  # what `launch` does first
    v = _run("verify", "--manifest", triton_only, "--cache-dir", other, "--nvcc", NVCC, "--json", env=_full_env())
    assert v.returncode == 0 and json.loads(v.stdout)["complete"], v.stdout + v.stderr
    _unpack_again_after_relocate(art, other, triton_only, index["triton_moe"][item]["entries"])


def _unpack_again_after_relocate(art: Path, cache: Path, manifest: Path, entries: list[str]) -> None:
    """A job that unpacks its artifact before every start (the entrypoint's `unpack && launch`): the entries launch
    pointed at this root are the artifact's (before, unpack refused them as changed without --replace-changed).
    A group file that says something else (one child less) is still named as changed."""
    u = _run("unpack", art, "--cache-dir", cache, env=_full_env())
    assert u.returncode == 0 and "differ" not in u.stdout + u.stderr, u.stdout + u.stderr
    v = _run("verify", "--manifest", manifest, "--cache-dir", cache, "--nvcc", NVCC, "--json", env=_full_env())
    assert v.returncode == 0 and json.loads(v.stdout)["complete"], v.stdout + v.stderr
    entry = cache / entries[0]
    group = sorted(entry.glob("__grp__*.json"))[0]
    children = json.loads(group.read_text())["child_paths"]
    assert all(path.startswith(str(entry)) for path in children.values())  # relocated: names this root
    dropped = sorted(n for n in children if not n.endswith(".json"))[0]
    group.write_text(json.dumps({"child_paths": {n: p for n, p in children.items() if n != dropped}}))
    u = _run("unpack", art, "--cache-dir", cache, env=_full_env())
    assert u.returncode == 1 and f"{group.name} changed" in u.stderr and "--replace-changed" in u.stderr, u.stderr


@needs_all
def test_a_chunked_warm_and_a_one_process_warm_give_the_same_entries_and_record(tmp_path):
    """--jobs 3 cuts m 1..4 into 3 chunks (3 subprocesses), --jobs 1 runs one: the same entries, the same record
    (but the seconds), and verify passes on both."""
    manifest = _trimmed(tmp_path / "t4.yaml", m_max=4)
    item = _item_id(manifest)
    records = {}
    for jobs in (1, 3):
        cache = tmp_path / f"jobs{jobs}"
        r = _run("warm", "--manifest", manifest, "--cache-dir", cache, "--nvcc", NVCC, "--sglang-jit", "on",
                 "--json", "--jobs", jobs, env=_full_env())
        assert r.returncode == 0, r.stdout + r.stderr
        summary = json.loads(r.stdout)
        assert summary["compiled"] == 1 and len(summary["triton_moe_chunk_seconds"]) == jobs, summary
        record = json.loads((cache / "dgprecompile" / "index.json").read_text())["triton_moe"][item]
        assert record.pop("seconds") > 0
        records[jobs] = record
        v = _run("verify", "--manifest", manifest, "--cache-dir", cache, "--nvcc", NVCC, "--json", env=_full_env())
        assert v.returncode == 0 and json.loads(v.stdout)["complete"], v.stdout + v.stderr
    assert records[1] == records[3] and len(records[1]["entries"]) == 8 and records[1]["ms"] == 4


@needs_all
def test_a_cache_of_another_fingerprint_warms_the_item_again_and_records_it(warmed, triton_only, tmp_path):
    """A stale fingerprint clears the index's records before the warm: the item is not taken as covered by the
    record that is about to go, it is warmed again (Triton finds its entries) and recorded."""
    cache, _ = warmed
    item = _item_id(triton_only)
    from dgprecompile.cache.relocate import relocate
    from dgprecompile.cache.store import CacheStore

    other = tmp_path / "other-fingerprint"
    shutil.copytree(cache, other, symlinks=True)
    relocate(CacheStore(other))  # the group files name the copy's paths, as `launch` makes them
    path = other / "dgprecompile" / "index.json"
    index = json.loads(path.read_text())
    index["fingerprint"]["num_sms"] = 78
    path.write_text(json.dumps(index))
    r = _run("warm", "--manifest", triton_only, "--cache-dir", other, "--nvcc", NVCC, "--sglang-jit", "on", "--json",
             env=_full_env())
    assert r.returncode == 0 and json.loads(r.stdout)["failed"] == 0, r.stdout + r.stderr
    again = json.loads(path.read_text())
    assert again["fingerprint"]["num_sms"] != 78 and again["triton_moe"][item]["entries"] == index["triton_moe"][item][
        "entries"]
    v = _run("verify", "--manifest", triton_only, "--cache-dir", other, "--nvcc", NVCC, "--json", env=_full_env())
    assert v.returncode == 0 and json.loads(v.stdout)["complete"], v.stdout + v.stderr


def _groups_alive(groups: set[int]) -> list[tuple[int, str]]:
    """(pid, cmdline) of every process in one of the process groups ``groups`` (zombies included)."""
    alive = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) in groups:
                alive.append((int(stat.parent.name), (stat.parent / "cmdline").read_text().replace("\0", " ")))
        except (OSError, IndexError, ValueError):
            continue
    return alive


def _three_chunks(tmp_path: Path, cache: Path, env: dict[str, str]) -> tuple[subprocess.Popen, set[int]]:
    """A warm of the item trimmed to m 1..4 with --jobs 3, started, once its 3 chunks run (and 1 s more): (warm,
    the chunks' pids, each its group's)."""
    import time

    manifest = _trimmed(tmp_path / "t4.yaml", m_max=4)
    proc = subprocess.Popen([sys.executable, "-m", "dgprecompile", "warm", "--manifest", str(manifest), "--cache-dir",
                             str(cache), "--nvcc", NVCC, "--sglang-jit", "on", "--jobs", "3"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    chunks: set[int] = set()
    deadline = time.time() + 120
    while len(chunks) < 3 and time.time() < deadline and proc.poll() is None:
        chunks = {pid for pid, cmd in _groups_alive(set(range(1, 1 << 22)))
                  if "dgprecompile.compile.triton_moe" in cmd and str(cache) in cmd}
        time.sleep(0.2)
    assert len(chunks) == 3, chunks  # m 1..4 in 3 chunks, all started at once (no zygote: nothing else planned)
    time.sleep(1.0)
    return proc, chunks


@needs_all
def test_sigterm_stops_the_chunks_and_their_compilers_and_records_nothing(tmp_path):
    """warm's parent runs the chunks in sessions of their own: a SIGTERM to warm ends each chunk's whole group
    (its Triton compiles too), exits 143 with one line, and no record is written for the item."""
    import signal

    cache = tmp_path / "cache"
    proc, chunks = _three_chunks(tmp_path, cache, _full_env())
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143 and "Traceback" not in err, err
    assert [x for x in err.splitlines() if x.startswith("error:")] == [
        "error: interrupted: nothing half-written was left in the cache"], err
    assert _groups_alive(chunks) == []  # each chunk led its own group: nothing of it is left, running or defunct
    index = cache / "dgprecompile" / "index.json"
    assert not index.is_file() or json.loads(index.read_text()).get("triton_moe", {}) == {}


@needs_all
def test_a_sigkilled_warms_chunks_end_with_it_and_keep_its_scratch_until_they_have(tmp_path):
    """A chunk leads a session of its own, so nothing of warm's group reaches it: a `kill -9` of warm alone ends
    each chunk's whole group (its Triton compiles too) through its parent-death signal, not minutes later when
    its m are done; while any of it runs, warm's scratch (its compilers' TMPDIR) stays locked, so no later run
    removes it under them."""
    import signal
    import time

    from dgprecompile.host import scratch

    cache, tmpdir = tmp_path / "cache", tmp_path / "tmp"
    tmpdir.mkdir()
    proc, chunks = _three_chunks(tmp_path, cache, {**_full_env(), "TMPDIR": str(tmpdir)})
    proc.send_signal(signal.SIGKILL)  # warm alone: its handler never runs
    proc.communicate(timeout=60)
    (run,) = [p for p in tmpdir.iterdir() if p.name.startswith("dgprecompile-warm-")]
    deadline = time.time() + 8
    while time.time() < deadline and (alive := _groups_alive(chunks)):
        assert scratch.held(run) or all(not c for _, c in alive), alive  # a zombie has no cmdline
        time.sleep(0.05)
    assert _groups_alive(chunks) == [], "a chunk outlived its warm by 8 s"


def test_a_failed_chunk_fails_its_item_and_nothing_is_recorded_until_every_chunk_is_in(tmp_path):
    from dgprecompile.cache.store import CacheStore
    from dgprecompile.compile.triton_chunks import ChunkedItem

    store = CacheStore(tmp_path / "c")
    store.ensure()
    host = {"cuda_utils": "U", "launchers": {"A": "L1"}, "entries": ["L1", "U"], "machine": {"key": {}}, "built": []}
    report = {"entries": ["A"], "ms": 2, "warmed": ["A"], "host_modules": host}
    item = ChunkedItem("item", ["item#1/2", "item#2/2"])
    item.reports["item#1/2"], item.seconds["item#1/2"] = report, 1.5
    item.failures["item#2/2"] = "python -m dgprecompile.compile.triton_moe exited with code 1 for item#2/2: boom"
    assert item.done and item.finish(store, {"triton": "3.6.0"}) == {
        "event": "failed", "kernel": "item", "error": item.failures["item#2/2"]}
    assert store.read_index().triton_moe == {}
    other = {"entries": ["B"], "ms": 1, "warmed": [],
             "host_modules": {**host, "launchers": {"B": "L2"}, "entries": ["L2", "U"]}}
    whole = ChunkedItem("item", ["item#1/2", "item#2/2"], {"item#1/2": report}, {"item#1/2": 1.5})
    assert not whole.done
    whole.reports["item#2/2"], whole.seconds["item#2/2"] = other, 2.0
    assert whole.finish(store, {"triton": "3.6.0"}) == {"event": "done", "kernel": "item", "status": "compiled",
                                                         "seconds": 3.5}
    record = store.read_index().triton_moe["item"]
    assert record["entries"] == ["triton/A", "triton/B"] and record["ms"] == 3 and record["triton"] == "3.6.0"
    assert record["host_modules"] == {"cuda_utils": "U", "launchers": {"A": "L1", "B": "L2"},
                                      "entries": ["L1", "L2", "U"], "machine": {"key": {}}}


@needs_sgl023
@pytest.mark.skipif(sgl_deep_gemm_dir("0.2.2") is None, reason="sgl-deep-gemm 0.2.2 not beside the venv (make setup)")
@needs_all
def test_the_0_5_23_servers_item_is_warmed_with_its_own_fused_moe_recorded_and_verified(tmp_path):
    """sglang 0.5.23 (its server-args runtime context: compile/triton_moe.py's defaults stand-in) through `warm`
    and `verify`, as the 0.5.14 item above."""
    plan = _server_plan(sglang="0.5.23")
    item = next(iter(plan.triton_moe.values()))
    assert (item.m_min, item.m_max, item.m_bound) == (1, 8192, 512) and "m-dependent constexpr 512" in item.why
    manifest = _trimmed(tmp_path / "triton.yaml", "0.5.23")
    env = _env(sglang_023_dir(), STANDINS, str(TRITON), sgl_deep_gemm_dir("0.2.2"))  # the plan's DeepGEMM line
    home = tmp_path / "home"  # 0.5.23 points inductor's and CUDA's caches at ~/.cache/sglang unless told otherwise
    home.mkdir()
    cache = tmp_path / "cache"
    r = _run("warm", "--manifest", manifest, "--cache-dir", cache, "--nvcc", NVCC, "--sglang-jit", "on", "--json",
             env={**env, "HOME": str(home)})
    assert r.returncode == 0, r.stdout + r.stderr
    assert list(home.rglob("*")) == [], "warm wrote outside its cache"  # issue 29 item 9
    summary, item_id = json.loads(r.stdout), _item_id(manifest)
    assert (summary["compiled"], summary["failed"], summary["triton_moe_item_ids"]) == (1, 0, [item_id])
    record = json.loads((cache / "dgprecompile" / "index.json").read_text())["triton_moe"][item_id]
    assert record["sglang"] == "0.5.23" and record["ms"] == 2 and len(record["entries"]) == 4
    for entry in record["entries"]:  # an sm_90 launch's PDL (the arch stated to SGLang, not detected here)
        assert json.loads((cache / entry / "fused_moe_kernel.json").read_text())["launch_pdl"] is True
    v = _run("verify", "--manifest", manifest, "--cache-dir", cache, "--nvcc", NVCC, "--json", env=env)
    assert v.returncode == 0 and json.loads(v.stdout)["complete"], v.stdout + v.stderr


@needs_nvcc
@needs_dg013
def test_warm_without_sglang_or_triton_says_what_to_install(triton_only, tmp_path):
    env = _env(sgl_deep_gemm_013_dir())
    auto = _run("warm", "--manifest", triton_only, "--cache-dir", tmp_path / "c", "--nvcc", NVCC, env=env)
    assert auto.returncode == 3, auto.stdout + auto.stderr
    errors = [x for x in auto.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and "Triton fused-MoE items" in errors[0] and "hint: install" in auto.stderr, auto.stderr
    on = _run("warm", "--manifest", triton_only, "--cache-dir", tmp_path / "c", "--nvcc", NVCC, "--sglang-jit", "on",
              env=env)
    assert on.returncode == 3 and "Traceback" not in on.stderr, on.stderr
    assert len([x for x in on.stderr.splitlines() if x.startswith("error:")]) == 1 and "hint:" in on.stderr
    off = _run("warm", "--manifest", triton_only, "--cache-dir", tmp_path / "c", "--nvcc", NVCC, "--sglang-jit", "off",
               env=env)
    assert off.returncode == 0 and "--sglang-jit off" in off.stderr, off.stderr


def test_plan_and_verify_import_no_torch_triton_or_sglang(tmp_path):
    manifest = tmp_path / "p.yaml"
    write_manifest(_server_plan(), manifest)
    code = ("import json, sys; from dgprecompile.cli.main import main\n"
            "for argv in (['plan', '--manifest', sys.argv[1]], ['verify', '--manifest', sys.argv[1], '--cache-dir', "
            "sys.argv[2], '--json']):\n"
            " try:\n  main(argv)\n except SystemExit: pass\n"
            "print('HEAVY', json.dumps([m for m in ('torch', 'triton', 'deep_gemm', 'sglang') if m in sys.modules]), "
            "file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code, str(manifest), str(tmp_path / "c")], capture_output=True,
                          text=True, timeout=120, env=_env(str(TRITON)))
    heavy = next(line[len("HEAVY "):] for line in proc.stderr.splitlines() if line.startswith("HEAVY "))
    assert json.loads(heavy) == [], proc.stderr
    assert next(iter(_server_plan().triton_moe)) in proc.stdout  # verify checked the item too


@needs_triton
@needs_sgl014
def test_the_gpu_free_warm_takes_sglangs_swap_ab_choice_as_an_sm90_gpu_does():
    """sglang 0.5.14 swaps the FP8 GEMM's operands only on a CUDA sm_90+ GPU (a tuned config's BLOCK_SIZE_M < 64
    with BLOCK_SIZE_N >= 64); without CUDA its own should_enable_swap_ab says no, so the warm states the planned GPU's
    answer (a named stand-in) and leaves the CPU answer to SGLang elsewhere."""
    probe = ("import sys; from dgprecompile.compile import triton_moe as t; t.load_sglang('NVIDIA H200', 90); "
             "import importlib; k = importlib.import_module(t.MOE + '.fused_moe_triton_kernels'); "
             "before = [k.should_enable_swap_ab(*b) for b in ((16, 128), (64, 128), (32, 32))]; "
             "t.swap_ab_as_on_gpu(int(sys.argv[1])); "
             "print(before, [k.should_enable_swap_ab(*b) for b in ((16, 128), (64, 128), (32, 32))])")
    out = {}
    started = {cap: Background([sys.executable, "-c", probe, str(cap)], timeout=600, env=_full_env())
               for cap in (90, 80)}  # side by side: each one process's imports
    for cap, probed in started.items():
        res = probed.result()
        assert res.returncode == 0, res.stderr[-2000:]
        out[cap] = res.stdout.strip().splitlines()[-1]
    assert out[90] == "[False, False, False] [True, False, False]"  # SGLang's own answer here: no CUDA, no swap
    assert out[80] == "[False, False, False] [False, False, False]"


@needs_all
def test_the_warms_kernel_flags_are_the_servers_booleans_never_none(tmp_path):
    """The independent proof found SGLang 0.5.14's own MoE layer missing every warmed entry: the warm's server-args
    stand-in answered None for enable_fused_moe_sum_all_reduce, so the down projection's FUSE_SUM_ALL_REDUCE
    constexpr was None where the server's is False (another Triton key). Every boolean flag constexpr of every
    fused_moe_kernel key the warm computes (recorded by tests/gpu/triton_keylog.py inside the real warm, real
    sglang 0.5.14 and Triton 3.6.0) is a boolean, and FUSE_SUM_ALL_REDUCE is ServerArgs' own default; no other
    kernel is compiled (the GPU-free path's non-CUDA kernels are not what a GPU runs)."""
    log = tmp_path / "keys.jsonl"
    env = {**_full_env(), "DGP_TRITON_KEYLOG": str(log), "CUDA_VISIBLE_DEVICES": ""}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "tests" / "gpu"), env["PYTHONPATH"]])
    code = ("import sys, triton_keylog; triton_keylog.install(); from dgprecompile.compile.triton_moe import main; "
            "sys.exit(main(sys.argv[1:]))")
    warm = Background([sys.executable, "-c", code, "--experts", "20", "--global-experts", "160", "--hidden", "6144",
                       "--intermediate", "2560", "--topk", "8", "--m", "1", "--cache-dir", str(tmp_path / "c")],
                      env=env)
    probe = ("import json, sys; from sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe_triton_kernels import "
             "fused_moe_kernel as k; from sglang.srt.server_args import ServerArgs; import dataclasses; "
             "d = {f.name: f.default for f in dataclasses.fields(ServerArgs)}; "
             "print(json.dumps([k.arg_names, d['enable_fused_moe_sum_all_reduce']]))")
    p = Background([sys.executable, "-c", probe], timeout=300, env=env).result()  # beside the warm: it reads no cache
    r = warm.result()
    assert r.returncode == 0, r.stdout + r.stderr
    assert p.returncode == 0, p.stderr
    names, default = json.loads(p.stdout.strip().splitlines()[-1])
    flags = [n for n in names if n.isupper() and n.startswith(("FUSE_", "MASK_", "LORA_")) or
             n in ("c_sorted", "filter_expert", "swap_ab", "even_Ks", "per_channel_quant", "use_fp8_w8a8")]
    keys = [json.loads(line) for line in log.read_text().splitlines()]
    moe = [k for k in keys if k["kernel"] == "fused_moe_kernel"]
    assert moe == keys  # SGLang's non-CUDA Triton kernels on this path (quant, sum-reduce) are not compiled
    assert len({k["entry"] for k in moe}) == 2, keys  # m=1: the up and the down projection
    for k in moe:
        values = {n: k["constants"].get(f"({names.index(n)},)") for n in flags}
        assert values.pop("FUSE_SUM_ALL_REDUCE") == str(default) == "False", k["constants"]
        assert set(values.values()) <= {"True", "False"}, values
