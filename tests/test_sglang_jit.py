"""SGLang's own tvm-ffi JIT modules: planned, built GPU-free with the real sglang 0.5.14 wheel's own builders and
real nvcc, checked by verify, carried by pack/unpack, refused by launch --strict, and the GPU-only live check's
CPU side. sgl-kernel, triton and torchvision are stand-ins here (tests/standins, named as such)."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import (
    NVCC,
    STANDINS,
    needs_dg013,
    needs_nvcc,
    needs_sgl014,
    run_in_fresh_python,
    sgl_deep_gemm_013_dir,
    sglang_014_dir,
)

from dgprecompile.keys.fingerprint import differences, short_id
from dgprecompile.launch.live import LiveOptions, live_units, m_values
from dgprecompile.planning.manifest import plan_from_dict, write_manifest
from dgprecompile.planning.plan import PlanRequest
from dgprecompile.planning.request import plan_from_request

REPO = Path(__file__).resolve().parent.parent
V2 = "sglang_jit:per_token_group_quant_8bit_v2<bf16_t,fp8_e4m3_t,true>"
ACT = "sglang_jit:dpsk_v4_silu_mul_quant_varlen<128,false,false,true,false>"


def _plan(sglang="0.5.14", backend="deep_gemm", **kw):
    return plan_from_request(PlanRequest(model="Qwen3-Coder-480B", tp=8, ep=8, sglang=sglang,
                                         moe_runner_backend=backend, **kw))


# ---- the plan -------------------------------------------------------------------------------------------


def test_plan_lists_both_modules_for_the_deep_gemm_runner_of_0_5_14():
    plan = _plan()
    assert {V2, ACT} <= set(plan.jit_modules)
    assert not any(m.startswith("sglang_jit:activation<") for m in plan.jit_modules)  # no Triton MoE runner
    v2, act = plan.jit_modules[V2], plan.jit_modules[ACT]
    assert (v2.python, v2.builder, v2.args) == ("sglang.jit_kernel.per_token_group_quant_8bit_v2", "_jit_module",
                                                ("torch.bfloat16", "torch.float8_e4m3fn", True))
    assert {k[0] for k in v2.keys} == {"GEMM_NT_F8F8BF16"} and len(v2.keys) == 2
    assert {(k[1], k[2], k[3]) for k in act.keys} == {(5120, 6144, 20), (6144, 2560, 20)}
    data = plan.to_dict()
    assert data["sglang_version"] == "0.5.14" and len(data["sglang_jit_modules"]) == len(plan.jit_modules)
    again = plan_from_dict(json.loads(json.dumps(data)))  # the manifest round trip keeps them
    assert again.jit_modules == plan.jit_modules and again.sglang_version == "0.5.14"


def test_triton_moe_runner_plans_the_quantiser_and_the_filtered_activation_not_the_masked_one():
    planned = _plan(backend="auto").jit_modules
    assert V2 in planned and ACT not in planned and "sglang_jit:activation<bf16_t,true>" in planned


def test_other_releases_and_profile_ids_plan_none():
    # a release of the family whose inventory was not read (0.5.9-0.5.17 are modelled; 0.5.10rc0 is not)
    assert _plan(sglang="0.5.10rc0").jit_modules == {}
    assert any("does not model that release" in n for n in _plan(sglang="0.5.10rc0").notes)
    assert _plan(sglang="0.5.1", backend="auto").jit_modules == {}
    by_id = _plan(sglang="0.5.12-0.5.16")
    assert by_id.jit_modules == {} and any("--sglang 0.5.12 " in n for n in by_id.notes)
    assert "sglang_jit_modules" not in by_id.to_dict()  # manifests of unmodelled releases are unchanged


def test_fingerprint_compares_jit_fields_only_where_both_caches_know_them():
    base = {"deepgemm": {"generation": "sgl-deep-gemm-0.1"}, "nvcc": {}, "env": {}}
    jit = {**base, "sglang_jit": {"sglang": "0.5.14", "tvm_ffi": "0.1.11", "arch": "9.0"}}
    assert differences(base, jit) == [] and short_id(base) != short_id(jit)
    other = {**base, "sglang_jit": {"sglang": "0.5.14", "tvm_ffi": "0.1.9", "arch": "9.0"}}
    assert differences(jit, other) == [("sglang_jit.tvm_ffi", "0.1.11", "0.1.9")]


# ---- the live check's CPU side --------------------------------------------------------------------------


def test_live_m_values_cover_bucket_edges_or_everything():
    plan = _plan()
    dense = plan.keys[0]
    every = m_values([dense], "all", 0, random.Random(0))
    assert every == list(range(dense.key.m_min, dense.key.m_max + 1))
    edges = m_values([dense], "edges", 0, random.Random(0))
    for b in dense.buckets:
        assert b.m_min in edges and b.m_max in edges
    sampled = m_values([dense], "edges", 100, random.Random(0))
    assert set(edges) < set(sampled) and len(sampled) <= len(edges) + 100


def test_live_units_pair_the_masked_keys_into_one_moe_layer():
    units, notes = live_units(_plan(), LiveOptions(m_mode="edges", sample=8), topk=8)
    kinds = [u["kind"] for u in units]
    plan = _plan()
    assert kinds == ["dense", "dense", "masked"] + ["jit"] * len(plan.jit_modules) and notes == []
    assert [u["module"]["id"] for u in units[3:]] == list(plan.jit_modules)
    only, _ = live_units(plan, LiveOptions(units="jit"), topk=8)
    assert [u["kind"] for u in only] == ["jit"] * len(plan.jit_modules)
    moe = units[2]
    assert (moe["experts"], moe["hidden"], moe["width"], moe["topk"]) == (20, 6144, 2560, 8)
    assert [k[1:] for k in moe["keys"]] == [[5120, 6144, 20], [6144, 2560, 20]]


def _run(*args, env_extra=None, pythonpath=(), timeout=900):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*pythonpath, str(REPO)])}
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "dgprecompile", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=timeout)


def test_plain_verify_imports_neither_torch_nor_sglang(tmp_path):
    manifest = tmp_path / "p.yaml"
    write_manifest(_plan(), manifest)
    proc, heavy = run_in_fresh_python(["verify", "--manifest", str(manifest), "--cache-dir", str(tmp_path / "c"),
                                       "--json"])
    assert heavy == [], proc.stderr
    assert {V2, ACT} <= set(json.loads(proc.stdout)["missing"])  # it checked SGLang's modules too


def test_live_without_sglang_is_an_environment_problem(tmp_path):
    manifest = tmp_path / "p.yaml"
    write_manifest(_plan(), manifest)
    r = _run("verify", "--manifest", manifest, "--cache-dir", tmp_path / "c", "--live")
    assert r.returncode == 3, r.stderr
    assert r.stderr.count("error:") == 1 and "hint:" in r.stderr and "Traceback" not in r.stderr


# ---- the real sglang 0.5.14 wheel: names, GPU-free build, verify, pack/unpack, strict refusal ------------

def _sgl_path():
    return [sglang_014_dir(), STANDINS, sgl_deep_gemm_013_dir()]


@pytest.fixture(scope="module")
def jit_only(tmp_path_factory):
    """The 480B deep_gemm plan with its DeepGEMM buckets dropped: only SGLang's two quantiser modules to build."""
    data = _plan().to_dict()
    for shape in data["shapes"]:
        shape["buckets"], shape["aux_kernels"] = [], []
    data["kernels"] = []
    # the two quantisers on the DeepGEMM paths only: the other modules' builds are in test_sglang_jit_inventory.py
    data["sglang_jit_modules"] = [m for m in data["sglang_jit_modules"] if m["id"] in (V2, ACT)]
    data.pop("inductor", None)  # the torch.compile items need the job's GPU: tests/test_inductor_graphs.py
    data.pop("flashinfer", None)  # FlashInfer's modules: tests/test_flashinfer_modules.py
    data.pop("triton_path", None)  # the model path's other Triton kernels: tests/test_triton_path.py
    data["total_kernels"] = len(data["kernels"])  # a trimmed manifest states its own count
    path = tmp_path_factory.mktemp("plan") / "jit.yaml"
    write_manifest(plan_from_dict(data), path)
    return path


@pytest.fixture(scope="module")
def warmed(jit_only, tmp_path_factory):
    cache = tmp_path_factory.mktemp("warm") / "cache"
    r = _run("warm", "--manifest", jit_only, "--cache-dir", cache, "--nvcc", NVCC, "--sglang-jit", "on", "--json",
             pythonpath=_sgl_path())
    assert r.returncode == 0, r.stdout + r.stderr
    return cache, json.loads(r.stdout)


def needs_warmed_cache(test):
    """The tests on the `warmed` fixture: slow, and they need sglang 0.5.14, sgl-deep-gemm 0.1.3 and nvcc."""
    for mark in (needs_nvcc, needs_dg013, needs_sgl014, pytest.mark.slow):
        test = mark(test)
    return test


@needs_warmed_cache
def test_warm_builds_the_modules_with_sglangs_own_builders_where_its_runtime_looks(warmed):
    cache, summary = warmed
    assert (summary["sglang_jit_modules"], summary["compiled"], summary["failed"]) == (2, 2, 0)
    dirs = sorted(os.listdir(cache / "tvm-ffi"))
    # the worker fails unless sglang's own build produced exactly the directory dgprecompile computed
    assert [d.split("__")[1:] for d in dirs] == [["arch_9.0", "tvmffi_0.1.11"]] * 2
    assert dirs[0].startswith("sgl_kernel_jit_dpsk_v4_silu_mul_quant_varlen_128_false_false_true_false_")
    assert dirs[1].startswith("sgl_kernel_jit_per_token_group_quant_8bit_v2_bf16_t_fp8_e4m3_t_true_")
    for d in dirs:
        so = cache / "tvm-ffi" / d / (d.split("__")[0] + ".so")
        assert so.stat().st_size > 10_000
        assert not (cache / "tvm-ffi" / d / "lock").exists()
    index = json.loads((cache / "dgprecompile" / "index.json").read_text())
    assert index["fingerprint"]["sglang_jit"] == {"sglang": "0.5.14", "tvm_ffi": "0.1.11", "arch": "9.0"}
    assert index["kernels"][V2]["area"] == "tvm-ffi"


@needs_warmed_cache
def test_kernels_and_modules_share_one_worker_budget(tmp_path):
    """DeepGEMM's kernels and SGLang's modules in one warm of --jobs 2: a budget of two items at a time (the
    kernels' early workers and the workers able to build both kinds share it), every item built once, and the
    summary's compile times per kind."""
    manifest = tmp_path / "mixed.yaml"
    data = _plan(max_tokens=32).to_dict()  # the two quantisers beside the kernels (each module is a 40-50 s build)
    data["sglang_jit_modules"] = [m for m in data["sglang_jit_modules"] if m["id"] in (V2, ACT)]
    data.pop("inductor", None)  # the torch.compile items need the job's GPU: tests/test_inductor_graphs.py
    data.pop("flashinfer", None)  # FlashInfer's modules: tests/test_flashinfer_modules.py
    data.pop("triton_path", None)  # the model path's other Triton kernels: tests/test_triton_path.py
    write_manifest(plan_from_dict(data), manifest)
    r = _run("warm", "--manifest", manifest, "--cache-dir", tmp_path / "c", "--nvcc", NVCC, "--sglang-jit", "on",
             "--backend", "nvcc", "--jobs", "2", "--json", pythonpath=_sgl_path())
    assert r.returncode == 0, r.stdout + r.stderr
    summary = json.loads(r.stdout)
    assert summary["workers"] == 2 and summary["failed"] == 0
    assert summary["compiled"] == summary["kernels"] + summary["sglang_jit_modules"] and summary["kernels"] > 0
    assert sorted(summary["sglang_jit_module_ids"]) == sorted([V2, ACT])
    assert set(summary["item_seconds"]) >= {V2, ACT} and len(summary["item_seconds"]) == summary["compiled"]
    assert "worker failed to start" not in r.stderr
    # the timeline says when each item was handed out and when the zygote's imports (sglang's builders) were done:
    # the modules, which need those imports, start after them
    line = summary["timeline"]
    assert set(line["unit_started_s"]) == set(summary["item_seconds"]), line
    assert 0 < line["zygote_import_s"] <= line["zygote_preloaded_s"] <= line["last_kernel_done_s"], line
    assert min(line["unit_started_s"][m] for m in (V2, ACT)) >= line["zygote_preloaded_s"] - 0.5, line
    # the CPU its processes and their compilers used (the workers reaped by the zygote, it by warm): at least most of
    # the longest build's seconds (nvcc, a worker's child), at most every core of this machine for the whole wall
    cpu = summary["children_cpu_seconds"]
    assert 0.5 * max(summary["item_seconds"].values()) < cpu <= summary["wall_seconds"] * os.cpu_count() + 1, summary


ZYGOTE_PROBE = r"""
import json, sys, time
from pathlib import Path
from dgprecompile.compile import warm_setup as w
from dgprecompile.compile.warm_pool import Processes
from dgprecompile.planning.manifest import read_manifest
setup = w.prepare_warm(read_manifest(Path(sys.argv[1])), w.WarmOptions(cache_dir=sys.argv[2], backend="nvcc", jobs=2,
                       nvcc=sys.argv[3], sglang_jit="on"))
procs = Processes(Path(sys.argv[4]), len(setup.gpus))
t0 = time.perf_counter()
procs.start(w.worker_job(setup), setup.gpus)
ready = {}
while len(ready) < len(setup.gpus):
    for who, event in procs.events(1.0):
        if isinstance(who, int) and event and event.get("event") == "ready":
            ready[who] = [event["kinds"], round(time.perf_counter() - t0, 2)]
for i in ready:
    procs.close_input(i)
procs.zygote_done()
procs.close()
print(json.dumps({"workers": setup.workers, "ready": ready}))
"""


@needs_warmed_cache
def test_the_kernels_workers_are_forked_before_the_zygote_imports_sglang(tmp_path):
    """nvcc needs no preload, SGLang's JIT builders do: the zygote forks the kernels' workers first (they serve
    nvcc only, and are ready before the import of torch and sglang ends), then imports and forks the others."""
    manifest = tmp_path / "mixed.yaml"
    data = _plan(max_tokens=32).to_dict()
    data["sglang_jit_modules"] = [m for m in data["sglang_jit_modules"] if m["id"] in (V2, ACT)]
    data.pop("inductor", None)  # the torch.compile items need the job's GPU: tests/test_inductor_graphs.py
    data.pop("flashinfer", None)  # FlashInfer's modules: tests/test_flashinfer_modules.py
    data.pop("triton_path", None)  # the model path's other Triton kernels: tests/test_triton_path.py
    write_manifest(plan_from_dict(data), manifest)
    (tmp_path / "run").mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*_sgl_path(), str(REPO)])}
    res = subprocess.run([sys.executable, "-c", ZYGOTE_PROBE, str(manifest), str(tmp_path / "c"), NVCC,
                          str(tmp_path / "run")], capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    report = json.loads(res.stdout.strip().splitlines()[-1])
    kinds = {int(i): k for i, (k, _) in report["ready"].items()}
    at = {int(i): t for i, (_, t) in report["ready"].items()}
    assert report["workers"] == 2 and kinds == {0: ["nvcc"], 1: ["nvcc"], 2: ["nvcc", "sglang-jit"],
                                               3: ["nvcc", "sglang-jit"]}, report
    assert max(at[0], at[1]) < min(at[2], at[3]), report  # ready while the others' libraries were imported


@needs_warmed_cache
def test_verify_pack_unpack_and_a_second_warm_cover_the_modules(warmed, jit_only, tmp_path):
    cache, _ = warmed
    ok = _run("verify", "--manifest", jit_only, "--cache-dir", cache, "--json", pythonpath=_sgl_path())
    assert ok.returncode == 0 and json.loads(ok.stdout)["coverage"] == "proved", ok.stdout + ok.stderr
    again = json.loads(_run("warm", "--manifest", jit_only, "--cache-dir", cache, "--nvcc", NVCC, "--json",
                            pythonpath=_sgl_path()).stdout)
    assert (again["compiled"], again["already_cached"]) == (0, 2)

    art = tmp_path / "a.tar.gz"
    assert _run("pack", "--manifest", jit_only, "--cache-dir", cache, "-o", art, pythonpath=_sgl_path()).returncode == 0
    other = tmp_path / "unpacked"
    r = _run("unpack", art, "--cache-dir", other, pythonpath=_sgl_path())
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(other / "tvm-ffi")) == sorted(os.listdir(cache / "tvm-ffi"))
    assert _run("verify", "--manifest", jit_only, "--cache-dir", other, pythonpath=_sgl_path()).returncode == 0
    # without sglang here the artifact's modules would not be found: unpack refuses, naming the field
    bare = _run("unpack", art, "--cache-dir", tmp_path / "bare", pythonpath=[sgl_deep_gemm_013_dir()])
    assert bare.returncode == 1 and "sglang_jit.sglang" in bare.stderr and not (tmp_path / "bare").exists()

    # a deleted module is named by the runtime directory it is missing from
    broken = tmp_path / "broken"
    shutil.copytree(cache, broken)
    victim = next(d for d in os.listdir(broken / "tvm-ffi") if "per_token_group_quant_8bit_v2" in d)
    (broken / "tvm-ffi" / victim / (victim.split("__")[0] + ".so")).unlink()
    bad = _run("verify", "--manifest", jit_only, "--cache-dir", broken, "--json", pythonpath=_sgl_path())
    report = json.loads(bad.stdout)
    assert bad.returncode == 1 and report["missing"] == [V2]
    assert report["problems"][0]["entry"] == victim


CHILD = """
import os, sys, torch
from sglang.jit_kernel.utils import override_jit_cuda_arch
import sglang.jit_kernel.per_token_group_quant_8bit_v2 as v2
with override_jit_cuda_arch(9, 0):
    try:
        v2._jit_module(torch.bfloat16, torch.float8_e4m3fn, True)
        print("LOADED")
    except RuntimeError as exc:
        print("REFUSED", str(exc).splitlines()[0])
"""


@needs_warmed_cache
def test_launch_strict_loads_warmed_modules_and_refuses_a_missing_one(warmed, jit_only, tmp_path):
    cache, _ = warmed
    child = tmp_path / "child.py"
    child.write_text(CHILD)
    env = {"PATH": os.path.dirname(NVCC) + os.pathsep + os.environ["PATH"]}
    hit = _run("launch", "--manifest", jit_only, "--cache-dir", cache, "--", sys.executable, child,
               pythonpath=_sgl_path(), env_extra=env)
    assert hit.returncode == 0 and "LOADED" in hit.stdout, hit.stdout + hit.stderr
    assert "TVM_FFI_CACHE_DIR" in hit.stderr

    broken = tmp_path / "broken"
    shutil.copytree(cache, broken)
    victim = next(d for d in os.listdir(broken / "tvm-ffi") if "per_token_group_quant_8bit_v2" in d)
    shutil.rmtree(broken / "tvm-ffi" / victim)
    before = sorted(os.listdir(broken / "tvm-ffi"))
    miss = _run("launch", "--manifest", jit_only, "--cache-dir", broken, "--allow-missing", "--", sys.executable,
                child, pythonpath=_sgl_path(), env_extra=env)
    assert "REFUSED dgprecompile strict mode: SGLang tried to build its JIT module sgl_kernel_jit_" \
           "per_token_group_quant_8bit_v2_bf16_t_fp8_e4m3_t_true_" in miss.stdout, miss.stdout + miss.stderr
    assert "Warm it with: dgprecompile warm --manifest" in miss.stderr
    assert "strict mode refused 1 runtime compile(s)" in miss.stderr
    assert sorted(os.listdir(broken / "tvm-ffi")) == before  # refused before tvm-ffi wrote anything


# the refusal the nvcc stand-in logged on the H200 (bench/results/2026-12-01-h200-R11) for a deleted masked kernel
H200_REFUSAL = {"event": "refused", "generation": "cxx", "entry": "4878-055d6e9c-8dcbf206-655aa94f",
                "kernel": "sm90_fp8_gemm_1d2d_impl<cute::UMMA::Major::K, 0, 5120, 6144, 20, 128, 160, 128, 128, 128, "
                          "64, 5, 128, 256, 2, false, 132, GemmType::MGroupedMasked, "
                          "epilogue::transform::EpilogueIdentity>"}
H200_DELETED = ("sm90_fp8_m_grouped_gemm_masked_1d2d:SFBK.N5120.K6144.G20.BM128.BN160.SWD64.ST5.MATH256.MC2.Af.SMS132."
                "TMGroupedMasked")


@needs_dg013
@needs_nvcc
def test_live_names_a_refused_deepgemm_compile_by_the_plans_kernel_id(tmp_path):
    code = ("import json, sys\nfrom dgprecompile.launch.live import LiveReport, _name_refusals\n"
            "from dgprecompile.cache.store import CacheStore\n"
            "from dgprecompile.planning.plan import PlanRequest\n"
            "from dgprecompile.planning.request import plan_from_request\n"
            "plan = plan_from_request(PlanRequest(model='Qwen3-Coder-480B', tp=8, ep=8, sglang='0.5.14', "
            "moe_runner_backend='deep_gemm'))\n"
            f"report = LiveReport({str(tmp_path)!r}, '0.5.14', [{{'kind': 'masked', 'refused': [{H200_REFUSAL!r}]}}])\n"
            f"_name_refusals(report, plan, CacheStore({str(tmp_path)!r}))\n"
            "print(json.dumps([report.naming_error, report.units[0]['refused'][0].get('planned_kernel')]))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([sgl_deep_gemm_013_dir(), str(REPO)])}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == [None, H200_DELETED]


NONSTRICT_CHILD = """
import torch
from sglang.jit_kernel.utils import override_jit_cuda_arch
import sglang.jit_kernel.clamp_position as cp
with override_jit_cuda_arch(9, 0):
    try:
        cp._jit_clamp_position_module(torch.int64)
    except Exception as exc:  # loading the built module needs a GPU driver; the build happened
        print("LOAD", type(exc).__name__)
print("DONE")
"""


@needs_warmed_cache
def test_launch_no_strict_lists_the_module_built_at_run_time_without_deepgemm_advice(warmed, jit_only, tmp_path):
    cache, _ = warmed
    other = tmp_path / "cache"
    shutil.copytree(cache, other)
    child = tmp_path / "child.py"
    child.write_text(NONSTRICT_CHILD)
    env = {"PATH": os.path.dirname(NVCC) + os.pathsep + os.path.dirname(sys.executable) + os.pathsep
           + os.environ["PATH"], "CUDA_HOME": os.path.dirname(os.path.dirname(NVCC)), "MAX_JOBS": "2"}
    r = _run("launch", "--manifest", jit_only, "--cache-dir", other, "--no-strict", "--misses", tmp_path / "m.jsonl",
             "--json", "--", sys.executable,
             child, pythonpath=_sgl_path(), env_extra=env)
    # under --json the job's stdout goes to stderr: the report is the only thing on stdout
    assert r.returncode == 0 and "DONE" in r.stderr, r.stdout + r.stderr
    result = json.loads(r.stdout)
    made = [d for d in os.listdir(other / "tvm-ffi") if d.startswith("sgl_kernel_jit_clamp_position_int64_t_")]
    assert result["new_jit_modules"] == [f"tvm-ffi/{made[0]}"] and result["new_entries"] == []
    assert "did the job import deep_gemm" not in r.stderr and "every recorded call is in the plan" not in r.stderr
