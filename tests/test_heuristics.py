"""The pure-Python kernel models against the real libraries' choices, for every m."""

from __future__ import annotations

import bisect
import json
from pathlib import Path

import pytest
from helpers import needs_legacy

from dgprecompile.planning.heuristics.sm90_cxx import best_config as cxx_best
from dgprecompile.planning.manifest import read_manifest
from dgprecompile.planning.plan import PlanRequest
from dgprecompile.planning.request import plan_from_request
from dgprecompile.runtimes.items import KernelType

SHAPES = Path(__file__).resolve().parent.parent / "shapes"
DATA = Path(__file__).resolve().parent / "data"


def _kernel_at(pk, m):
    starts = [b.m_min for b in pk.buckets]
    b = pk.buckets[bisect.bisect_right(starts, m) - 1]
    assert b.m_min <= m <= b.m_max
    return b.kernel


@needs_legacy
@pytest.mark.parametrize("num_sms", [132, 114, 78])
def test_legacy_buckets_equal_get_best_configs_for_every_m(num_sms):
    from deep_gemm.jit_kernels.gemm import get_best_configs

    manifests = sorted(SHAPES.glob("*sglang-0.5.0-0.5.1*.yaml"))
    assert manifests, "bundled legacy manifests missing"
    checked = 0
    for path in manifests:
        base = read_manifest(path)
        plan = plan_from_request(PlanRequest(model=base.model, tp=base.tp, ep=base.ep, sglang="0.5.1",
                                             moe_runner_backend=base.moe_runner_backend, num_sms=num_sms))
        for pk in plan.keys:
            key = pk.key
            masked = key.kernel_type is KernelType.GROUPED_GEMM_NT_F8F8BF16_MASKED
            seen: dict[str, tuple] = {}
            for m in range(key.m_min, key.m_max + 1):
                _, bm, bn, st, (mc, on_a), (_smem, sw, pad) = get_best_configs(
                    m, key.n, key.k, key.num_groups if masked else 1, num_sms, is_grouped_masked=masked)
                real = (bm, bn, st, mc, on_a, sw, pad)
                spec = plan.kernels[_kernel_at(pk, m)]
                p = dict(spec.params)
                assert (p["BM"], p["BN"], p["ST"], p["MC"], p["A"], p["SW"], p["PAD"]) == real, (key, m)
                # one kernel id <-> one real config
                assert seen.setdefault(spec.id, real) == real
                checked += 1
    assert checked > 50000


def test_cxx_model_equals_h200_record_for_every_m():
    record = json.loads((DATA / "dg013_sweep_h200.json").read_text())
    cols = record["columns"]
    checked = 0
    for key, runs in record["runs"].items():
        gemm_type, n, k, groups = map(int, key.split("/"))
        kind = KernelType.GEMM_NT_F8F8BF16 if gemm_type == 0 else KernelType.GROUPED_GEMM_NT_F8F8BF16_MASKED
        for run in runs:
            row = dict(zip(cols, run, strict=True))
            for m in range(row["m_first"], row["m_last"] + 1):
                bm, bn, cm, cn, st, smem = cxx_best(kind, m, n, k, groups, row["num_sms"])
                assert (bm, bn, cm, cn, st, smem) == (row["block_m"], row["block_n"], row["cluster_m"],
                                                       row["cluster_n"], row["stages"], row["smem"]), (key, m)
                checked += 1
    assert checked == 2 * 16384 + 2 * 6554


def test_cxx_plan_kernel_count_equals_entries_the_sweep_created():
    record = json.loads((DATA / "dg013_sweep_h200.json").read_text())
    plan = plan_from_request(PlanRequest(model="Qwen3-Coder-480B", tp=8, ep=8, sglang="0.5.14",
                                         moe_runner_backend="deep_gemm"))
    assert plan.total_kernels == len(record["entries"]) == 37
    families = sorted(e.split(".")[1] for e in record["entries"])
    assert families == sorted(s.family for s in plan.kernels.values())
    # the sweep created a new entry exactly at the first m of each bucket whose kernel was new
    for key_rec, pk in zip(record["keys"], plan.keys, strict=True):
        firsts = [e[0] for e in key_rec["new_entries"] if e[0] > 0]
        plan_firsts, seen = [], set()
        for other in plan.keys[:plan.keys.index(pk)]:
            seen.update(b.kernel for b in other.buckets)
        for b in pk.buckets:
            if b.kernel not in seen:
                plan_firsts.append(b.m_min)
                seen.add(b.kernel)
        assert firsts == plan_firsts, key_rec["n"]
