"""sgl-kernel 0.3.7-0.3.9.post2 (sglang 0.5.1.post3-0.5.3rc0): the wave model's earlier revision
(heuristics/sm90_waves.py RULE_0_3_7) and its entry names (keys/sglang_kernel.py with the 16-slot format).

These releases are CUDA 12 / torch 2.8 builds and the device has torch 2.11; their host code rebuilt there from
SGF@b981e3e is the device record ``sk-0.3.9.post2-src``, against which tests/test_sk_source_records.py holds the six
rule differences (masked block_m 256, the stage cap, the extra barrier, masked multicast, the swapped legality
lookup, the idle multicast-on-A), the entry names and the warm. What is tested here is what the real wheel and
sglang-kernel 0.4.2's device record show:

* the part of the choice both revisions share, against sglang-kernel 0.4.2's record (whose DG_PRINT_CONFIGS text
  the wheel's equals: tests/test_sk_generation.py, with its headers, format and flag strings): dense
  block_m/block_n, multicast, the side it is on (where there is one) and the minimised SM count at every recorded
  dense call (tests/test_warm_nvcc_generations.py[sk-0.3.9.post2]: real nvcc builds under the computed names).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import assert_buckets_hold_their_kernel, bundled_deep_gemm_dir

from dgprecompile.planning.heuristics.sm90_waves import RULE_0_3_7, Sm90WaveHeuristic037, best_config
from dgprecompile.planning.plan import PlanRequest
from dgprecompile.planning.profiles import resolve_profile
from dgprecompile.planning.request import plan_from_request
from dgprecompile.runtimes import get_generation
from dgprecompile.runtimes.items import KernelType

HERE = Path(__file__).resolve().parent
RECORD = json.loads((HERE / "data" / "sweep_generations_h200.json").read_text())


def _local() -> str:
    local = bundled_deep_gemm_dir("0.3.9.post2")
    if local is None:
        pytest.skip("sgl-kernel 0.3.9.post2's deep_gemm not installed beside the venv (make setup)")
    return local


def test_the_shared_dense_choice_matches_the_h200_record():
    """For dense GEMMs the two revisions share the candidates, the wave count, the tie-break, the multicast order
    (both operands' legality is an even SM count there, so the swapped lookup picks the same side) and the SM
    minimising: at every dense m the H200 recorded for sglang-kernel 0.4.2, RULE_0_3_7 gives the printed blocks,
    multicast and SM count (and the side, when multicast is on). Stages and shared memory are not compared: the
    extra barrier and the stage cap are 0.3.7's own, unobserved."""
    checked = 0
    for release in (r for r in RECORD["releases"] if r.startswith("sk-0.4.2")):
        for name, slot in RECORD["releases"][release]["keys"].items():
            kind, n, k, g = name.split("/")
            if kind != "dense":
                continue
            for m_first, m_last, bm, bn, multicast, on_a, _stages, _swz, _smem, sms, _ in slot["runs"]:
                for m in sorted({m_first, m_last, (m_first + m_last) // 2}):
                    got = best_config(KernelType.GEMM_NT_F8F8BF16, m, int(n), int(k), 1, 132, rule=RULE_0_3_7)
                    assert (got[0], got[1], got[2], got[6]) == (bm, bn, multicast, sms), (release, name, m)
                    if multicast == 2:
                        assert int(got[3]) == on_a, (release, name, m)
                    checked += 1
    assert checked > 100


def test_plan_of_sglang_052_is_modelled_and_buckets_hold_one_kernel():
    """Every m of every bucket of the 480B tp8/ep8 sglang 0.5.2 plan selects the bucket's kernel (the breakpoints
    cover RULE_0_3_7's choices: masked block_m 256 included)."""
    plan = plan_from_request(PlanRequest(model="Qwen3-Coder-480B", tp=8, ep=8, sglang="0.5.2", max_tokens=16384))
    assert plan.profile.id == "0.5.1.post3-0.5.3rc0" and plan.profile.generation == "sgl-kernel-waves-0.3.7"
    assert_buckets_hold_their_kernel(plan, Sm90WaveHeuristic037())


def test_the_generation_keeps_sweep_and_says_what_ran_where():
    gen = resolve_profile("0.5.2").profile.deepgemm
    assert gen.id == "sgl-kernel-waves-0.3.7" and gen.models_kernels
    assert gen.usable_backends("0.3.9.post2") == ["nvcc", "cxx", "sweep"]
    assert gen.usable_backends("0.3.10") == ["cxx", "sweep"]  # not read: no computed names
    # proven on the H200 with the host code rebuilt from source (tests/test_sk_source_records.py); 0.3.7-0.3.8 read
    assert gen.keys_proven("0.3.9.post2") and not gen.keys_proven("0.3.7")
    assert not get_generation("sgl-kernel-cxx").computes_keys("0.3.9.post2")
    raw = resolve_profile("0.5.2").profile.raw
    assert "sk-0.3.9.post2-src" in raw["heuristic_validated"]
    assert raw["not_proven"].startswith("the wheels' own deep_gemm_cpp.abi3.so")
