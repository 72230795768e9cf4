"""sgl-kernel 0.3.20-0.3.21 (sglang 0.5.7-0.5.9, SpecForge's 0.5.9): the wave model's later revision
(heuristics/sm90_waves.py RULE_0_3_20) and its entry names (keys/sglang_kernel.py Sk0320KeyContext, the 21-slot
format).

The wheels' own deep_gemm_cpp.abi3.so links CUDA 12 and torch 2.9 and cannot load on the device (torch 2.11). The
device record ``sk-0.3.21-src`` ran the wheel's headers and Python with that host code rebuilt on the device from
the source whose headers, generated-code text and print format equal the wheel's (SGF@54f99a8):
tests/test_sk_source_records.py holds the model (the four rule differences included: dense block_m 16/32 for
m <= 16/32, stages from 32, C/D shared memory aligned to 1024 bytes and SFA to 128, one math warpgroup for
block_m <= 64), the entry names and the warm against it. Held against the real wheel here:

* its .so holds the verbose-ptxas text the key module uses (tests/test_sk_generation.py checks its headers, the
  21-slot format, the flag strings and the DG_PRINT_CONFIGS text), and real nvcc builds land under the computed
  names (here for the small dense blocks, tests/test_warm_nvcc_generations.py[sk-0.3.21] for a masked kernel);
* where the two revisions choose alike (dense m > 32, every masked call) sglang-kernel 0.4.2's record agrees too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import (
    NVCC,
    assert_buckets_hold_their_kernel,
    bundled_deep_gemm_dir,
    needs_nvcc,
)

from dgprecompile.keys.sglang_kernel import Sk0320KeyContext, SkKeyContext
from dgprecompile.planning.heuristics.sm90_waves import RULE_0_3_20, Sm90WaveHeuristic0320, best_config
from dgprecompile.planning.manifest import plan_from_dict, write_manifest
from dgprecompile.planning.plan import PlanRequest
from dgprecompile.planning.request import plan_from_request
from dgprecompile.runtimes import get_generation
from dgprecompile.runtimes.items import KernelType

HERE = Path(__file__).resolve().parent
RECORD = json.loads((HERE / "data" / "sweep_generations_h200.json").read_text())
KIND = {"dense": KernelType.GEMM_NT_F8F8BF16, "masked": KernelType.GROUPED_GEMM_NT_F8F8BF16_MASKED}
PLAN_059 = dict(model="Qwen3-Coder-480B", tp=8, ep=8, sglang="0.5.9", moe_runner_backend="deep_gemm")


def _local() -> str:
    local = bundled_deep_gemm_dir("0.3.21")
    if local is None:
        pytest.skip("sgl-kernel 0.3.21's deep_gemm not installed beside the venv (make setup)")
    return local


def _so() -> bytes:
    return (Path(_local()) / "deep_gemm" / "deep_gemm_cpp.abi3.so").read_bytes()


def test_the_verbose_ptxas_flags_are_the_releases():
    """0.3.20-0.3.21 append 0.1.x's verbose text, and DG_JIT_PTXAS_CHECK turns it on as well (SGF@54f99a8
    compiler.hpp L70-71); sglang-kernel 0.4.x's shorter text is not in this .so."""
    data = _so()
    assert b"\0 --ptxas-options=--verbose,--warn-on-local-memory-usage\0" in data
    assert b"DG_JIT_PTXAS_CHECK\0" in data and b"\0 --ptxas-options=--verbose\0" not in data
    assert Sk0320KeyContext.VERBOSE_FLAGS == " --ptxas-options=--verbose,--warn-on-local-memory-usage"
    for env in ({"DG_JIT_PTXAS_CHECK": "1"}, {"DG_JIT_PTXAS_VERBOSE": "1"}, {"DG_JIT_DEBUG": "1"}):
        flags = Sk0320KeyContext.from_env("/x/include", (13, 0), env, template="sk-0.3.20").flags()
        assert Sk0320KeyContext.VERBOSE_FLAGS + " -I/x/include" in flags
    assert "verbose" not in Sk0320KeyContext.from_env("/x/include", (13, 0), {}, template="sk-0.3.20").flags()
    # sglang-kernel 0.4.x's key ignores DG_JIT_PTXAS_CHECK (SGF@5f8a71a compiler.hpp)
    assert "verbose" not in SkKeyContext.from_env("/x/include", (13, 0), {"DG_JIT_PTXAS_CHECK": "1"}).flags()


def test_the_shared_choice_matches_the_h200_record():
    """Dense m > 32 and every masked expected_m: the block candidates are sglang-kernel 0.4.2's there, and the
    waves, tie-break, multicast and SM minimising are the same code, so RULE_0_3_20 must give the printed blocks,
    multicast (and its side) and SM count of every recorded call. Stages and shared memory are not compared: the
    32-stage start and the alignments are 0.3.20's own, unobserved."""
    checked = {"dense": 0, "masked": 0}
    for release in (r for r in RECORD["releases"] if r.startswith("sk-0.4.2")):
        for name, slot in RECORD["releases"][release]["keys"].items():
            kind, n, k, g = name.split("/")
            for m_first, m_last, bm, bn, multicast, on_a, _stages, _swz, _smem, sms, _ in slot["runs"]:
                first = max(m_first, 33) if kind == "dense" else m_first
                if first > m_last:
                    continue
                for m in sorted({first, m_last, (first + m_last) // 2}):
                    got = best_config(KIND[kind], m, int(n), int(k), int(g), 132, rule=RULE_0_3_20)
                    assert (got[0], got[1], got[2], got[6]) == (bm, bn, multicast, sms), (release, name, m)
                    if multicast == 2:
                        assert int(got[3]) == on_a, (release, name, m)
                    checked[kind] += 1
    assert checked["dense"] > 1000 and checked["masked"] > 50


def test_plan_of_sglang_059_is_modelled_and_buckets_hold_one_kernel():
    """Every m of every bucket of the 480B tp8/ep8 sglang 0.5.9 plan selects the bucket's kernel (the breakpoints
    cover the small dense blocks at m = 16 and 32)."""
    plan = plan_from_request(PlanRequest(**PLAN_059, max_tokens=4096))
    assert plan.profile.id == "0.5.7-0.5.9" and plan.profile.generation == "sgl-kernel-waves-0.3.20"
    assert plan.heuristic and plan.total_kernels > 0
    assert_buckets_hold_their_kernel(plan, Sm90WaveHeuristic0320())
    # SpecForge's 0.5.9 capture server, dense with the default Triton MoE: planned from its own command too
    server = plan_from_request(PlanRequest(sglang="0.5.9", sglang_cmd=(
        "python -m sglang.launch_server --model-path Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8 --tp-size 8 "
        "--ep-size 8 --moe-runner-backend deep_gemm")))
    assert server.heuristic and server.profile.generation == "sgl-kernel-waves-0.3.20"


def test_keys_only_plan_leaves_the_choice_to_the_library():
    plan = plan_from_request(PlanRequest(**PLAN_059, max_tokens=4096, keys_only=True))
    assert not plan.heuristic and not plan.kernels and all(not pk.buckets for pk in plan.keys)
    modelled = plan_from_request(PlanRequest(**PLAN_059, max_tokens=4096))
    assert [pk.key for pk in plan.keys] == [pk.key for pk in modelled.keys]
    assert any("--keys-only" in note for note in plan.notes)


def test_the_generation_keeps_sweep_and_says_what_ran_where():
    gen = get_generation("sgl-kernel-waves-0.3.20")
    assert gen.models_kernels and gen.usable_backends("0.3.21") == ["nvcc", "cxx", "sweep"]
    assert gen.usable_backends("0.3.22") == ["cxx", "sweep"]  # not read: no computed names
    assert gen.keys_proven("0.3.21") and not gen.keys_proven("0.3.20")
    assert "rebuilt" in gen.gpu_validated and "SGF@54f99a8" in gen.gpu_validated
    raw = plan_from_request(PlanRequest(**PLAN_059, max_tokens=64)).profile.raw
    assert "sk-0.3.21-src" in raw["heuristic_validated"]
    assert raw["not_proven"].startswith("the wheels' own deep_gemm_cpp.abi3.so")


@needs_nvcc
@pytest.mark.nvcc
@pytest.mark.slow
def test_small_dense_blocks_build_with_nvcc_under_their_computed_names(tmp_path):
    """The kernels only this revision chooses (block_m 16 and 32, 32 stages) compile against the 0.3.21 headers
    (the kernel's own static checks of its template arguments included) and land under the names Sk0320KeyContext
    computes; verify then finds the plan complete."""
    local = _local()
    plan = plan_from_request(PlanRequest(**PLAN_059, max_tokens=32))
    data = plan.to_dict()
    shape = next(s for s in data["shapes"] if (s["kernel_type"], s["n"], s["k"]) == ("GEMM_NT_F8F8BF16", 6144, 1536))
    keep = {b["kernel"] for b in shape["buckets"]} | set(shape["aux_kernels"])
    data["shapes"], data["kernels"] = [shape], [k for k in data["kernels"] if k["id"] in keep]
    data["total_kernels"] = len(data["kernels"])  # a trimmed manifest states its own count
    data["sglang_jit_modules"] = []  # DeepGEMM's kernels only (0.5.9's own JIT: tests/test_sglang_jit_059.py)
    data.pop("flashinfer", None)  # FlashInfer's modules: tests/test_flashinfer_modules.py
    data.pop("triton_path", None)  # the model path's other Triton kernels: tests/test_triton_path.py
    small = plan_from_dict(data)
    block_ms = {dict(spec.params)["BM"] for spec in small.kernels.values()}
    assert block_ms == {16, 32}, block_ms
    manifest, cache = tmp_path / "plan.yaml", tmp_path / "dg"
    write_manifest(small, manifest)
    env = {**os.environ, "PYTHONPATH": local}
    warm = subprocess.run([sys.executable, "-m", "dgprecompile", "warm", "--manifest", str(manifest), "--cache-dir",
                           str(cache), "--nvcc", NVCC, "--json"], capture_output=True, text=True, env=env, timeout=900)
    assert warm.returncode == 0, warm.stderr
    summary = json.loads(warm.stdout)
    assert (summary["backend"], summary["compiled"], summary["failed"]) == ("nvcc", len(small.kernels), 0)
    include = os.path.join(local, "deep_gemm", "include")
    from dgprecompile.host.toolchain import probe_nvcc

    ctx = Sk0320KeyContext.from_env(include, probe_nvcc(NVCC).release, {}, template="sk-0.3.20")
    entries = cache / "cache"
    for spec in small.kernels.values():
        entry = entries / ctx.entry_name(spec)
        assert (entry / "kernel.cu").read_text() == ctx.source(spec)
        assert (entry / "kernel.cubin").stat().st_size > 0
    verify = subprocess.run([sys.executable, "-m", "dgprecompile", "verify", "--manifest", str(manifest),
                             "--cache-dir", str(cache), "--json"], capture_output=True, text=True, env=env)
    assert verify.returncode == 0, verify.stdout + verify.stderr
