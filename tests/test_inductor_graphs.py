"""SGLang's torch.compile (inductor) graphs as planned work: `plan` lists one item per compiled function and shape
(data/inductor_graphs.yaml, read per release), the manifest carries them, warm builds them by calling SGLang's OWN
compiled function at every specialisation its compile mode allows (compile/inductor_graphs.py), files what inductor
wrote, and verify names an item that is missing, stale or has lost an entry.

The build runs here on inductor's CPU backend with the real torch of the venv and sglang 0.5.14's real functions
(``--device cpu``: the CPU stand-in for the job's GPU, whose graphs only a GPU can build; the calls, the
specialisations and inductor's own cache are the same). The check that matters: a later process that calls SGLang's
function in another order (another first m, the other ranks' arguments) finds every graph in inductor's FX graph
cache, and a first m outside the planned set does not (the test can fail)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import (
    NVCC,
    STANDINS,
    Background,
    beside_venv,
    nice_while_running,
    sgl_deep_gemm_013_dir,
    sglang_014_dir,
)
from test_moe_rules import DEEPSEEK_V3
from test_triton_moe_plan import _full_env, _run, needs_all

from dgprecompile.cache import inductor_graphs as records
from dgprecompile.cache.store import CacheStore
from dgprecompile.compile import recorded_items as inductor_warm
from dgprecompile.compile.warm import BACKGROUND_NICE
from dgprecompile.errors import InputError
from dgprecompile.planning.manifest import plan_from_dict, write_manifest
from dgprecompile.planning.plan import PlanRequest
from dgprecompile.planning.server_plan import plan_from_server
from dgprecompile.runtimes import CAPTURED, INDUCTOR_GRAPHS
from dgprecompile.runtimes.items import InductorGraphItem

REPO = Path(__file__).resolve().parent.parent
QWEN = "python -m sglang.launch_server --model-path Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8 --tp 8 --ep 8"
TRITON = beside_venv("triton-3.6.0", "triton/__init__.py")
needs_build = pytest.mark.skipif(sglang_014_dir() is None or TRITON is None or importlib.util.find_spec("torch") is None,
                                 reason="sglang 0.5.14, Triton 3.6.0 and torch beside the venv (make setup)")


def _plan(cmd: str, sglang: str = "0.5.14"):
    return plan_from_server(PlanRequest(sglang_cmd=cmd, sglang=sglang, sglang_precompile=False))


def _graphs(plan) -> dict[str, dict]:
    return {it.graph: dict(it.params) for it in plan.inductor.values()}


def test_the_480b_server_plans_the_moe_sum_at_its_topk_and_the_embedding_mask_at_tp8():
    plan = _plan(QWEN)
    assert _graphs(plan) == {
        "moe_sum_reduce": {"topk": 8, "hidden": 6144, "dtype": "bfloat16", "scale": 1.0, "m_max": 32},
        "vocab_mask": {"vocab": 151936, "tp": 8, "dtype": "int64"}}
    assert all(it.device_name == "NVIDIA H200" and it.why.startswith(("layers/moe/", "layers/vocab"))
               for it in plan.inductor.values())
    assert [it.id for it in plan.items][-2:] == list(plan.inductor)  # one list of typed items
    assert any("warm where the job's GPU kind is visible" in n for n in plan.notes)


def test_warm_shares_its_slots_among_the_graphs_by_their_call_sequences():
    """The 480B's MoE sum runs 34 call sequences (m 1..32, then [1, 2] and [2, 3]), its vocabulary mask 6 (two per
    rank kind): the 7 slots warm gives the graphs beside its pool go 6 to 1, all 16 of a warm without a pool 8 (the
    runtime's most) to 6 (the mask's sequences: a part without one only imports torch and SGLang); a runtime that
    counts none splits them evenly, and each item has a part however few the slots."""
    items = sorted(_plan(QWEN).inductor.values(), key=lambda it: it.graph)
    assert [(it.graph, INDUCTOR_GRAPHS.sequences_of(it)) for it in items] == [("moe_sum_reduce", 34), ("vocab_mask", 6)]
    assert inductor_warm.shares(INDUCTOR_GRAPHS, items, 7) == [6, 1]
    assert inductor_warm.shares(INDUCTOR_GRAPHS, items, 16) == [8, 6]
    assert inductor_warm.shares(INDUCTOR_GRAPHS, items[1:], 16) == [6]  # its 6 sequences, not runtime.parts (8)
    even = SimpleNamespace(parts=8)
    assert inductor_warm.shares(even, items, 7) == [4, 3] and inductor_warm.shares(even, items, 1) == [1, 1]


def test_deepseek_v3_tp8_sums_the_fused_shared_expert_with_its_scale(tmp_path):
    (tmp_path / "config.json").write_text((REPO / "dgprecompile" / "data" / "models" / "DeepSeek-V3.json").read_text())
    graphs = _graphs(_plan(f"python -m sglang.launch_server --model-path {tmp_path} --tp 8"))
    assert graphs == {"moe_sum_reduce": {"topk": 9, "hidden": 7168, "dtype": "bfloat16", "scale": 2.5, "m_max": 32},
                      "vocab_mask": {"vocab": 129280, "tp": 8, "dtype": "int64"}}
    # a config.json without a vocab size plans no mask, saying so
    (tmp_path / "config.json").write_text(json.dumps(DEEPSEEK_V3))
    plan = _plan(f"python -m sglang.launch_server --model-path {tmp_path} --tp 8")
    assert set(_graphs(plan)) == {"moe_sum_reduce"} and any("no vocab_size" in n for n in plan.notes)


def test_from_0_5_16_a_triton_kernel_replaces_the_mask_and_an_unread_release_plans_nothing():
    plan = _plan(QWEN, "0.5.23")
    # 0.5.19 and 0.5.23 sum <= 32 tokens with a Triton kernel where the GPU supports PDL (sm_90 and up: the H200
    # planned for here, the H100 that ran 0.5.23's model and made no inductor lookup): no graph at all
    assert _graphs(plan) == {}
    assert any("not compiled in sglang 0.5.23" in n and "_use_triton_embedding" in n for n in plan.notes)
    assert any("not compiled in sglang 0.5.23 on sm_90: a Triton kernel runs instead" in n
               and "is_arch_support_pdl" in n for n in plan.notes), plan.notes
    assert _graphs(_plan(QWEN, "0.5.19")) == {}
    # 0.5.17's experts are planned on Triton fused MoE too (data/triton_moe.yaml), so their sum graph with them
    assert set(_graphs(_plan(QWEN, "0.5.17"))) == {"moe_sum_reduce"}
    # below sm_90 (no PDL) the release compiles the graph: the rule keeps it
    from dgprecompile.runtimes.inductor import _triton_instead

    graph = INDUCTOR_GRAPHS.graph("moe_sum_reduce")
    assert _triton_instead(graph, "0.5.23", 80) is None and _triton_instead(graph, "0.5.17", 90) is None
    old = _plan(QWEN, "0.5.9")
    assert old.inductor == {} or set(_graphs(old)) <= {"moe_sum_reduce"}
    assert any("0.5.9's source was not read" in n for n in old.notes)


def test_the_manifest_carries_the_items_and_refuses_a_changed_or_unbounded_one():
    data = json.loads(json.dumps(_plan(QWEN).to_dict()))
    again = plan_from_dict(json.loads(json.dumps(data)))
    assert list(again.inductor) == list(_plan(QWEN).inductor)
    data["inductor"][0]["params"]["topk"] = 2  # changed without its id
    with pytest.raises(InputError, match="does not match its fields"):
        plan_from_dict(json.loads(json.dumps(data)))
    data["inductor"][0]["params"].update(topk=8, m_max=10**9)  # warm builds one graph per m: bounded by the schema
    with pytest.raises(InputError, match="m_max"):
        plan_from_dict(data)


def test_the_jobs_grad_mode_is_read_once_and_carried_in_every_item(monkeypatch):
    """SGLang's DynamicGradMode runs forwards under torch.inference_mode where SGLANG_ENABLE_TORCH_INFERENCE_MODE is
    true or 1 (any case), else under no_grad; the graphs' entries differ between the two, so plan reads the job's
    value (an assignment before the command wins over plan's own environment) and each item carries it."""
    variable = INDUCTOR_GRAPHS.grad_variable
    monkeypatch.delenv(variable, raising=False)
    plain = _plan(QWEN)
    assert {it.grad for it in plain.inductor.values()} == {"no_grad"}
    assert not any(i.endswith(".inference") for i in plain.inductor)  # ids written before grad are kept
    assert any("planned under torch.no_grad" in n for n in plain.notes)
    assigned = _plan(f"env {variable}=1 {QWEN}")
    assert {it.grad for it in assigned.inductor.values()} == {"inference"}
    assert [i.removesuffix(".inference") for i in assigned.inductor] == list(plain.inductor)
    assert any("planned under torch.inference_mode" in n for n in assigned.notes)
    monkeypatch.setenv(variable, "True")
    assert {it.grad for it in _plan(QWEN).inductor.values()} == {"inference"}
    assert {it.grad for it in _plan(f"{variable}=0 {QWEN}").inductor.values()} == {"no_grad"}  # the command's own
    monkeypatch.setenv(variable, "yes")  # SGLang's get_bool_env_var reads an unknown value as false
    assert {it.grad for it in _plan(QWEN).inductor.values()} == {"no_grad"}
    # the manifest carries it; a manifest written before the field planned no_grad
    data = json.loads(json.dumps(assigned.to_dict()))
    assert {it.grad for it in plan_from_dict(json.loads(json.dumps(data))).inductor.values()} == {"inference"}
    data["inductor"][0]["grad"] = "no_grad"  # changed without its id
    with pytest.raises(InputError, match="does not match its fields"):
        plan_from_dict(json.loads(json.dumps(data)))
    old = json.loads(json.dumps(plain.to_dict()))
    for d in old["inductor"]:
        del d["grad"]
    assert list(plan_from_dict(old).inductor) == list(plain.inductor)
    argv = INDUCTOR_GRAPHS.warm_argv(next(iter(assigned.inductor.values())), "/c", "py")
    assert argv[argv.index("--grad") + 1] == "inference"  # warm builds them under it


def test_launch_refuses_a_job_whose_grad_mode_is_not_the_plans(tmp_path, monkeypatch):
    """A plan made under no_grad, launched with the job's forwards under inference mode (its environment or an
    assignment before the server command), and the other way round: one error naming the variable, before the
    cache is read or anything of the job starts; the matching job passes that check (and stops at the preflight)."""
    from click.testing import CliRunner
    from helpers import assert_one_error

    from dgprecompile.cli.main import cli

    variable = INDUCTOR_GRAPHS.grad_variable
    monkeypatch.delenv(variable, raising=False)
    for grad, name in (("no_grad", "plain.yaml"), ("inference", "inference.yaml")):
        plan = _plan(f"env {variable}={int(grad == 'inference')} {QWEN}")
        write_manifest(plan, tmp_path / name)
    marker = tmp_path / "started"
    job = ["--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"]

    def launch(manifest, *command, env=None):
        return CliRunner(env=env).invoke(cli, ["launch", "--manifest", str(tmp_path / manifest), "--cache-dir",
                                               str(tmp_path / "cache"), *(command or job)], catch_exceptions=False)

    res = launch("plain.yaml", env={variable: "1"})
    assert res.exit_code == 2
    assert_one_error(res, "torch.inference_mode", f"{variable}=1", "planned under torch.no_grad", "--manifest")
    server = ["--", "env", f"{variable}=true", "python", "-m", "sglang.launch_server", "--model-path", "x"]
    assert_one_error(launch("plain.yaml", *server), "torch.inference_mode")
    res = launch("inference.yaml")
    assert res.exit_code == 2 and "runs its forwards under torch.no_grad" in res.stderr
    assert not marker.exists()
    res = launch("plain.yaml", env={variable: "0"})  # the same mode: on to the preflight, which has no cache
    assert "grad" not in res.stderr and "does not cover the plan" in res.stderr and not marker.exists()


def test_without_a_gpu_of_the_planned_kind_warm_leaves_them_saying_why(monkeypatch):
    item = next(iter(_plan(QWEN).inductor.values()))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert inductor_warm.visible_gpu_names() == []
    why = inductor_warm.gpu_problem(item, inductor_warm.visible_gpu_names(), INDUCTOR_GRAPHS.needs_gpu)
    assert why.startswith("needs a visible NVIDIA H200 (no GPU here)") and "holds the torch build and the GPU's name" in why
    assert inductor_warm.gpu_problem(item, ["NVIDIA H100 80GB HBM3"], "").startswith("needs a visible NVIDIA H200")
    assert inductor_warm.gpu_problem(item, ["NVIDIA H200"], "") is None


# ---- the build, on inductor's CPU backend (real torch, sglang 0.5.14's own functions) ----------------------


class CpuGraphs:
    """STAND-IN for the job's GPU: the real runtime's warm command with ``--device cpu`` (inductor's CPU backend)."""

    def __init__(self) -> None:
        self.runtime = INDUCTOR_GRAPHS

    def warm_argv(self, item, root, python):
        return [*self.runtime.warm_argv(item, root, python), "--device", "cpu"]

    def __getattr__(self, name):  # everything else is the real runtime's
        return getattr(self.runtime, name)


def _env() -> dict[str, str]:
    return {"PYTHONPATH": os.pathsep.join([sglang_014_dir(), STANDINS, TRITON, str(REPO)]),
            "DGP_STANDINS": "sgl_kernel,torchvision", "DGP_TRANSFORMERS_EXIST_OK": "1"}


JOB = textwrap.dedent("""
    import importlib, json, sys, torch
    from torch._dynamo.utils import counters
    from dgprecompile.compile.triton_moe import publish_standins
    publish_standins()
    fused = importlib.import_module("sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe")
    vpe = importlib.import_module("sglang.srt.layers.vocab_parallel_embedding")
    rank = int(sys.argv[2])
    s = vpe.VocabParallelEmbedding._get_indices(1024, 1024, 1000, 1000, rank, 4)
    mode = {"no_grad": torch.no_grad, "inference": torch.inference_mode, "grad": torch.enable_grad}[sys.argv[3]]
    with mode():
        for m in map(int, sys.argv[1].split(",")):
            fused.moe_sum_reduce_torch_compile(torch.randn(m, 3, 16), torch.empty(m, 16), 1.0)
            if sys.argv[4] == "moe":
                continue
            vpe.get_masked_input_and_mask(torch.randint(0, 1000, (m,)), s.org_vocab_start_index,
                                          s.org_vocab_end_index, s.num_org_vocab_padding,
                                          s.added_vocab_start_index, s.added_vocab_end_index)
    print(json.dumps({k: v for k, v in counters["inductor"].items() if k.startswith("fxgraph")}))
""")


def _job(root: Path, ms: str, rank: int, mode: str = "no_grad", graphs: str = "both") -> dict[str, int]:
    return _jobs((root, ms, rank, mode, graphs))[0]


def _jobs(*jobs: tuple) -> list[dict[str, int]]:
    return _collect(_start(*jobs))


def _start(*jobs: tuple) -> list[tuple]:
    """Each job (root, ms, rank[, mode[, graphs]]) as its own process, all started at once (each is mostly one
    core's import and compile: side by side they take the machine's cores together). Jobs that share a root must
    be ones that only read it: each job's own counters say whether it compiled."""
    started = []
    for root, ms, rank, *rest in jobs:
        mode, graphs = [*rest, *("no_grad", "both")[len(rest):]]
        env = {**os.environ, **_env(), "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"),
               "TRITON_CACHE_DIR": str(root / "triton")}
        out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")  # noqa: SIM115 - read back in _collect
        started.append((subprocess.Popen([sys.executable, "-c", JOB, ms, str(rank), mode, graphs], env=env,
                                         stdout=out, stderr=err, text=True), out, err))
    return started


def _collect(started: list[tuple]) -> list[dict[str, int]]:
    """The started jobs' fxgraph counters, in order (each job exited 0); none is left running."""
    try:
        for proc, _, _ in started:
            proc.wait(timeout=600)
    finally:
        for proc, _, _ in started:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    counts = []
    for proc, out, err in started:
        out.seek(0), err.seek(0)
        text, errors = out.read(), err.read()
        out.close(), err.close()
        assert proc.returncode == 0, errors[-2000:]
        counts.append(json.loads(text.strip().splitlines()[-1]))
    return counts


def _files(root: Path) -> set[str]:
    """Inductor's files under ``root`` but its FileLock files (``locks/``: a process that loads a graph takes the
    lock of its code's file; warm's build ran in a staging root, so the first job to load one makes its lock)."""
    return {str(p.relative_to(root)) for p in (root / "inductor").rglob("*")
            if p.is_file() and p.relative_to(root / "inductor").parts[0] != "locks"}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    items = [InductorGraphItem("moe_sum_reduce", (("topk", 3), ("hidden", 16), ("dtype", "float32"), ("scale", 1.0),
                                                  ("m_max", 3)), "cpu"),
             InductorGraphItem("vocab_mask", (("vocab", 1000), ("tp", 4), ("dtype", "int64")), "cpu")]
    return _warm(tmp_path_factory.mktemp("cache"), items)


def _warm(root: Path, items: list[InductorGraphItem]) -> SimpleNamespace:
    """warm's own run of ``items`` (compile/recorded_items.py) on inductor's CPU backend, into a new cache at root."""
    store = CacheStore(root)
    store.ensure()
    saved = dict(os.environ)
    os.environ.update(_env())
    for name in [e for f in CAPTURED for e in f.cache_env]:
        os.environ.pop(name, None)
    try:
        part = SimpleNamespace(runtime=CpuGraphs(), built=items, job={"python": sys.executable})
        setup = SimpleNamespace(store=store, workers=1, budget=2, plan=SimpleNamespace(sglang_version="0.5.14"))
        result = SimpleNamespace(failed={}, compiled={}, cached=[], failure_details={})
        events: list[dict] = []
        inductor_warm.run_items(setup, part, events.append, result)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return SimpleNamespace(root=root, store=store, items=items, result=result, events=events)


@needs_build
def test_warm_builds_every_specialisation_and_files_what_inductor_wrote(built):
    assert built.result.failed == {} and set(built.result.compiled) == {it.id for it in built.items}
    index = built.store.read_index()
    for item in built.items:
        rec = index.inductor[item.id]
        assert rec["torch"] == INDUCTOR_GRAPHS.installed()["torch"] and rec["graphs"] >= 2
        assert any(e.startswith("inductor/fxgraph/") for e in rec["entries"])
        assert all(index.extra[e].by == "warm" for e in rec["entries"])
        cov = records.item_coverage(built.store, index, item.id, INDUCTOR_GRAPHS.installed())
        assert cov.status == records.COVERED, cov.detail


@needs_build
def test_a_later_process_in_another_order_compiles_nothing_and_an_unplanned_first_m_does(built, tmp_path):
    import shutil

    # the job that compiles runs on a copy of the cache: side by side, what it writes is no other job's hit
    unplanned = tmp_path / "unplanned"
    shutil.copytree(built.root, unplanned)
    planned = (("3,2,1,17", 0), ("2,9", 3), ("1,5", 1))  # any first m up to m_max, any rank
    *hits, miss = _jobs(*((built.root, ms, rank) for ms, rank in planned), (unplanned, "5,6", 0))
    for (ms, rank), counts in zip(planned, hits, strict=True):
        assert counts.get("fxgraph_cache_miss", 0) == 0, (ms, rank)
    # a first m above the planned m_max (3 here; SGLang's own bound is 32) is a static graph nobody built
    assert miss.get("fxgraph_cache_miss", 0) >= 1


@needs_build
def test_graphs_serve_a_job_only_under_the_grad_mode_they_were_warmed_in(built, tmp_path):
    """The entries hold the grad mode: a cache warmed under no_grad (SGLang's default) serves a no_grad job, but a
    job with grad on writes new AOTAutograd entries, which strict refuses (on the H200's torch 2.11 a job under
    torch.inference_mode did too; this torch 2.13 answers that one from the no_grad entries). An item planned under
    inference mode (SGLANG_ENABLE_TORCH_INFERENCE_MODE=1) is warmed under it (SGLang's own DynamicGradMode, the
    variable set by warm), records it, and serves the inference-mode job with nothing new."""
    import shutil

    # the no_grad job and the grad job each on its own copy of the no_grad warm, side by side with the inference
    # warm (a cache of its own)
    no_grad, grad = tmp_path / "no_grad", tmp_path / "grad"
    shutil.copytree(built.root, no_grad)
    shutil.copytree(built.root, grad)
    before = _files(no_grad)
    assert _files(grad) == before
    started = _start((no_grad, "1,2", 0, "no_grad"), (grad, "1,2", 0, "grad"))
    item = InductorGraphItem("moe_sum_reduce", (("topk", 3), ("hidden", 16), ("dtype", "float32"), ("scale", 1.0),
                                                ("m_max", 2)), "cpu", "inference")
    warmed = _warm(tmp_path / "inference", [item])
    _collect(started)
    assert _files(no_grad) == before
    assert _files(grad) - before, "a job with grad on found every entry of a no_grad warm"
    assert warmed.result.failed == {} and list(warmed.result.compiled) == [item.id]
    assert warmed.store.read_index().inductor[item.id]["grad"] == "inference"
    before = _files(warmed.root)
    firsts = ("2,1", "1,2,7")
    for ms, counts in zip(firsts, _jobs(*((warmed.root, ms, 0, "inference", "moe") for ms in firsts)), strict=True):
        assert counts.get("fxgraph_cache_miss", 0) == 0, (ms, counts)
    assert _files(warmed.root) == before


@needs_build
def test_a_graph_whose_build_fails_is_named_and_leaves_nothing_of_its_stage(tmp_path):
    """A build that fails (here SGLang's function called with a dtype torch does not have) is the item's failure,
    with what the subprocess printed; its staging root is removed and nothing of it reaches the cache's areas."""
    item = InductorGraphItem("moe_sum_reduce", (("topk", 3), ("hidden", 16), ("dtype", "float99"), ("scale", 1.0),
                                                ("m_max", 1)), "cpu")
    warmed = _warm(tmp_path / "cache", [item])
    assert list(warmed.result.failed) == [item.id] and "float99" in warmed.result.failed[item.id]
    assert list((warmed.root / "dgprecompile" / "staging").iterdir()) == []
    assert not (warmed.root / "inductor").exists() or _files(warmed.root) == set()
    assert item.id not in warmed.store.read_index().inductor


@needs_build
def test_a_second_warm_finds_them_and_a_lost_entry_is_named(built):
    result = SimpleNamespace(failed={}, compiled={}, cached=[])
    part = SimpleNamespace(runtime=CpuGraphs(), built=built.items, job={"python": sys.executable})
    inductor_warm.run_items(SimpleNamespace(store=built.store, workers=1, budget=2), part, lambda e: None, result)
    assert sorted(result.cached) == sorted(it.id for it in built.items) and result.compiled == {}
    index = built.store.read_index()
    item = built.items[0].id
    stale = records.item_coverage(built.store, index, item, {"torch": "0.0"})
    assert stale.status == records.STALE and "inductor's key holds the torch build" in stale.detail
    lost = next(e for e in index.inductor[item]["entries"] if e.startswith("inductor/fxgraph/"))
    import shutil

    shutil.rmtree(built.root / lost)
    cov = records.item_coverage(built.store, built.store.read_index(), item, INDUCTOR_GRAPHS.installed())
    assert cov.status == records.MISSING and cov.entry == lost


@needs_all
def test_a_gpu_free_warm_leaves_them_naming_the_gpu_verify_names_them_and_launch_will_not_start(tmp_path):
    """The CLI end to end without a GPU: warm passes for what it can build and names the graphs it leaves, verify
    fails naming them missing, and a strict launch refuses to start without them (exit 1, one error line)."""
    data = _plan(QWEN).to_dict()
    for shape in data["shapes"]:
        shape["buckets"], shape["aux_kernels"] = [], []
    data["kernels"], data["total_kernels"] = [], 0
    for section in ("sglang_jit_modules", "triton_moe", "flashinfer", "triton_path"):
        data.pop(section, None)
    manifest = tmp_path / "plan.yaml"
    write_manifest(plan_from_dict(data), manifest)
    env = {**_full_env(), "CUDA_VISIBLE_DEVICES": ""}
    cache = tmp_path / "cache"
    w = _run("warm", "--manifest", manifest, "--cache-dir", cache, "--nvcc", NVCC, "--sglang-jit", "on", "--json",
             env=env)
    assert w.returncode == 0, w.stdout + w.stderr
    skipped = json.loads(w.stdout)["skipped"]
    assert set(skipped) == set(data_ids(data)) and all("needs a visible NVIDIA H200 (no GPU here)" in why
                                                       for why in skipped.values())
    v = _run("verify", "--manifest", manifest, "--cache-dir", cache, "--json", env=env)
    assert v.returncode == 1 and set(json.loads(v.stdout)["missing"]) == set(data_ids(data)), v.stdout
    launch = _run("launch", "--manifest", manifest, "--cache-dir", cache, "--", sys.executable, "-c", "pass", env=env)
    assert launch.returncode == 1 and "inductor:" in launch.stderr, launch.stderr
    assert "Traceback" not in launch.stderr


def data_ids(data: dict) -> list[str]:
    return [d["id"] for d in data["inductor"]]


@needs_build
def test_warm_with_the_planned_gpu_visible_counts_recorded_items_as_cached(built, monkeypatch):
    """warm's prepare where the planned GPU is visible (nvidia-smi's answer stood in: this machine has none, and
    the CPU items' device is "cpu"): an item its record covers is cached, an unrecorded one is built."""
    from dgprecompile.compile.warm_setup import WarmOptions, _prepare_recorded

    class Visible(CpuGraphs):
        kind, label, imports, needs_gpu = INDUCTOR_GRAPHS.kind, INDUCTOR_GRAPHS.label, (), ""

        def missing(self):
            return None

    monkeypatch.setattr(inductor_warm, "visible_gpu_names", lambda: ["cpu"])
    other = InductorGraphItem("vocab_mask", (("vocab", 2000), ("tp", 2), ("dtype", "int64")), "cpu")
    part = _prepare_recorded(None, WarmOptions(), Visible(), [*built.items, other], cache_root=built.root)
    assert part.skipped == {} and part.missing is None
    index = built.store.read_index()
    covered = [it.id for it in built.items
               if records.item_coverage(built.store, index, it.id, INDUCTOR_GRAPHS.installed()).status == records.COVERED]
    assert covered and sorted(part.cached) == sorted(covered) and other.id not in part.cached


# ---- the graphs do not wait for FlashInfer's modules ---------------------------------------------------------

# warm's CLI with two STAND-INS for what this machine lacks: nvidia-smi's answer (the planned GPU is visible) and the
# job's GPU itself (the graphs' own warm command with --device cpu, inductor's CPU backend); the rest is real
WARM_WITH_CPU_GRAPHS = textwrap.dedent("""
    import sys
    from dgprecompile.cli.main import main
    from dgprecompile.compile import recorded_items
    from dgprecompile.runtimes import INDUCTOR_GRAPHS
    recorded_items.visible_gpu_names = lambda: ["cpu"]
    own = type(INDUCTOR_GRAPHS).warm_argv
    type(INDUCTOR_GRAPHS).warm_argv = lambda self, item, root, python: [*own(self, item, root, python), "--device",
                                                                        "cpu"]
    sys.exit(main(sys.argv[1:]))
""")


@needs_build
def test_warm_builds_the_graphs_while_flashinfers_modules_are_still_building(tmp_path):
    """FlashInfer's modules start beside the pool and are a server plan's longest builds (186 s each on the H200,
    bench/results/2026-12-03-h200-model-480b); the graphs ran after the pool, one after another, and ended 84 s after
    it on the H100 (bench/results/2026-12-07-h100-first-forward-480b-split). Now each builds into a staging root of
    its own (the pool's Triton MoE chunks write the same areas) and all start with the warm, beside the pool and
    FlashInfer's builds, at a lower CPU priority than those (each process's nice read from /proc while the warm
    runs): warm's own run of a plan with FlashInfer 0.6.12's router module (real nvcc) and two graphs starts both
    graphs at once, before the module ends, builds, files and verifies all three, and leaves no stage."""
    from test_flashinfer_modules import FLASHINFER, _missing, _router

    version = "0.6.12"
    if _missing(version):
        pytest.skip(_missing(version))
    data = _plan(QWEN).to_dict()
    for shape in data["shapes"]:
        shape["buckets"], shape["aux_kernels"] = [], []
    data["kernels"], data["total_kernels"] = [], 0
    for section in ("sglang_jit_modules", "triton_moe", "triton_path"):
        data.pop(section, None)
    data["flashinfer"] = [_router(version)]
    graphs = [InductorGraphItem("moe_sum_reduce", (("topk", 3), ("hidden", 16), ("dtype", "float32"),
                                                   ("scale", 1.0), ("m_max", 2)), "cpu"),
              InductorGraphItem("vocab_mask", (("vocab", 1000), ("tp", 4), ("dtype", "int64")), "cpu")]
    data["inductor"] = [g.to_dict() for g in graphs]
    manifest = tmp_path / "plan.yaml"
    write_manifest(plan_from_dict(data), manifest)
    cache = tmp_path / "cache"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLASHINFER_", "DGPRECOMPILE_"))}
    env.update(_env(), CUDA_VISIBLE_DEVICES="", PATH=os.path.dirname(NVCC) + os.pathsep + os.environ["PATH"])
    env["PYTHONPATH"] = os.pathsep.join([FLASHINFER[version], env["PYTHONPATH"], sgl_deep_gemm_013_dir()])
    env.pop("CUDA_HOME", None)
    for name in [e for f in CAPTURED for e in f.cache_env]:
        env.pop(name, None)
    run = Background([sys.executable, "-c", WARM_WITH_CPU_GRAPHS, "warm", "--manifest", str(manifest),
                      "--cache-dir", str(cache), "--nvcc", NVCC, "--jobs", "2", "--json"], env=env)
    seen = nice_while_running(run, lambda line: "graph" if "compile.inductor_graphs" in line else "flashinfer"
                              if "dsv3_router" in line or "compile.flashinfer_modules" in line else "other")
    w = run.result()
    assert w.returncode == 0, w.stdout[-3000:] + w.stderr[-3000:]
    # the graphs' parts below FlashInfer's build, which they must not slow (compile/warm.py BACKGROUND_NICE)
    assert seen["graph"] == {BACKGROUND_NICE} and seen["flashinfer"] == {0}, seen
    report = json.loads(w.stdout)
    assert sorted(report["item_seconds"]) == sorted([_router(version)["id"], *(g.id for g in graphs)]), report
    started, took = report["timeline"]["unit_started_s"], report["item_seconds"]
    assert started[_router(version)["id"]] < 1.0, started  # with the warm, no pool before it
    # both graphs at once, with the warm: not one after the other
    assert all(started[g.id] < 1.0 for g in graphs), started
    # the module's build alone took `took` seconds after it started: the first graph started before it ended
    assert started[graphs[0].id] < took[_router(version)["id"]], (started, took)
    assert list((cache / "dgprecompile" / "staging").iterdir()) == []  # every stage merged and removed
    index = CacheStore(cache).read_index()
    assert all(index.inductor[g.id]["entries"] for g in graphs) and index.flashinfer[_router(version)["id"]]["entries"]
    v = subprocess.run([sys.executable, "-m", "dgprecompile", "verify", "--manifest", str(manifest), "--cache-dir",
                        str(cache), "--json"], capture_output=True, text=True, env=env, timeout=300)
    assert v.returncode == 0, v.stdout[-3000:] + v.stderr[-2000:]
