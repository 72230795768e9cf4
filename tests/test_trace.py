"""Trace files, plans from traces, misses files, and the tracing wrappers of the startup hook."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from dgprecompile.errors import InputError
from dgprecompile.launch.hook import HOOK_DIR
from dgprecompile.planning.manifest import plan_from_dict
from dgprecompile.planning.plan import PlanRequest
from dgprecompile.planning.trace import (
    Call,
    aggregate,
    find_misses,
    plan_from_calls,
    plan_from_trace,
    read_misses,
    read_trace_dir,
    write_misses,
)
from dgprecompile.runtimes.items import KernelType

sys.path.insert(0, HOOK_DIR)
import _dgprecompile_hook as hook  # noqa: E402

DENSE = "GEMM_NT_F8F8BF16"
MASKED = "GROUPED_GEMM_NT_F8F8BF16_MASKED"


def _write(path: Path, *records) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_read_trace_dir_sums_counts_over_files_and_lines(tmp_path):
    _write(tmp_path / "trace-rank0-11.jsonl", {"dgprecompile_trace": 1, "rank": 0, "api": "cxx"},
           {"kernel_type": DENSE, "m": 17, "n": 1792, "k": 6144, "num_groups": 1, "count": 1},
           {"kernel_type": DENSE, "m": 17, "n": 1792, "k": 6144, "num_groups": 1, "count": 41})
    _write(tmp_path / "trace-rank1-12.jsonl", {"dgprecompile_trace": 1, "rank": 1, "api": "cxx"},
           {"kernel_type": "masked", "m": 5, "n": 4096, "k": 4096, "num_groups": 20, "count": 2})
    (tmp_path / "other.txt").write_text("not a trace")
    headers, calls = read_trace_dir(tmp_path)
    assert len(headers) == 2
    assert Call(KernelType.GEMM_NT_F8F8BF16, 17, 1792, 6144, 1, 42) in calls
    assert Call(KernelType.GROUPED_GEMM_NT_F8F8BF16_MASKED, 5, 4096, 4096, 20, 2) in calls


def test_torn_last_line_is_ignored_but_bad_middle_line_is_an_error(tmp_path):
    good = json.dumps({"kernel_type": DENSE, "m": 1, "n": 128, "k": 128, "num_groups": 1})
    (tmp_path / "trace-rank0-1.jsonl").write_text(good + "\n" + '{"kernel_type": "GEMM_NT')
    assert len(read_trace_dir(tmp_path)[1]) == 1
    (tmp_path / "trace-rank0-1.jsonl").write_text("garbage\n" + good + "\n")
    with pytest.raises(InputError, match="not JSON"):
        read_trace_dir(tmp_path)


@pytest.mark.parametrize("bad, match", [
    ({"kernel_type": DENSE, "m": 1, "n": 128, "k": 128}, "lacks 'num_groups'"),
    ({"kernel_type": "gemv", "m": 1, "n": 128, "k": 128, "num_groups": 1}, "bad call"),
    ({"kernel_type": DENSE, "m": 1, "n": 0, "k": 128, "num_groups": 1}, "impossible"),
])
def test_bad_calls_are_named(tmp_path, bad, match):
    _write(tmp_path / "trace-rank0-1.jsonl", bad, {"kernel_type": DENSE, "m": 1, "n": 128, "k": 128, "num_groups": 1})
    with pytest.raises(InputError, match=match):
        read_trace_dir(tmp_path)


def test_missing_or_empty_trace_dir(tmp_path):
    with pytest.raises(InputError, match="not found"):
        plan_from_trace(tmp_path / "nope", PlanRequest(sglang="0.5.14"))
    with pytest.raises(InputError, match="no recorded"):
        plan_from_trace(tmp_path, PlanRequest(sglang="0.5.14"))


def test_plan_from_calls_covers_observed_m_range_with_the_profile_heuristic():
    calls = [{"kernel_type": DENSE, "m": m, "n": 1792, "k": 6144, "num_groups": 1} for m in (1, 300, 4096)]
    calls += [{"kernel_type": MASKED, "m": m, "n": 4096, "k": 4096, "num_groups": 20} for m in (3, 90)]
    calls += [{"kernel_type": DENSE, "m": 0, "n": 999, "k": 128, "num_groups": 1}]  # empty call: no kernel
    plan = plan_from_calls(calls, PlanRequest(sglang="0.5.14"))
    assert plan.profile.generation == "sgl-deep-gemm-0.1"
    by_type = {pk.key.kernel_type: pk for pk in plan.keys}
    assert len(plan.keys) == 2
    dense = by_type[KernelType.GEMM_NT_F8F8BF16]
    assert (dense.key.m_min, dense.key.m_max) == (1, 4096)
    assert dense.buckets[0].m_min == 1 and dense.buckets[-1].m_max == 4096
    masked = by_type[KernelType.GROUPED_GEMM_NT_F8F8BF16_MASKED]
    assert (masked.key.m_min, masked.key.m_max) == (3, 90)
    assert any(k.startswith("transpose_fp32") for k in masked.aux)  # the layout kernel of the masked path
    # the plan is a manifest like any other: it round-trips
    again = plan_from_dict(plan.to_dict())
    assert set(again.kernels) == set(plan.kernels)
    # every recorded call (m >= 1) is covered
    assert find_misses(plan, aggregate(Call(KernelType.parse(c["kernel_type"]), c["m"], c["n"], c["k"],
                                            c["num_groups"]) for c in calls)) == []


def test_plan_from_trace_picks_the_legacy_profile_for_a_legacy_trace(tmp_path, monkeypatch):
    monkeypatch.setattr("dgprecompile.planning.trace.installed_sglang_version", lambda: None)
    _write(tmp_path / "trace-rank0-1.jsonl", {"dgprecompile_trace": 1, "api": "legacy"},
           {"kernel_type": DENSE, "m": 64, "n": 512, "k": 512, "num_groups": 1})
    plan = plan_from_trace(tmp_path, PlanRequest())
    assert plan.profile.generation == "legacy"
    assert plan.kernels and all(k.startswith("gemm_fp8_fp8_bf16_nt:") for k in plan.kernels)


def test_misses_file_round_trip_and_header(tmp_path):
    plan = plan_from_calls([{"kernel_type": DENSE, "m": 64, "n": 512, "k": 512, "num_groups": 1}],
                           PlanRequest(sglang="0.5.1"))
    calls = [Call(KernelType.GEMM_NT_F8F8BF16, 64, 512, 512, 1, 3),
             Call(KernelType.GEMM_NT_F8F8BF16, 64, 1024, 512, 1, 5)]
    misses = find_misses(plan, calls)
    assert [c.n for c, _ in misses] == [1024]
    path = tmp_path / "misses.jsonl"
    write_misses(path, plan, misses, {"cache_dir": "/c", "new_entries": ["kernel.x.1"]})
    header, read = read_misses(path)
    assert header["sglang_profile"] == "0.5.0-0.5.1" and header["num_sms"] == 132
    assert header["new_entries"] == ["kernel.x.1"]
    assert read == [Call(KernelType.GEMM_NT_F8F8BF16, 64, 1024, 512, 1, 5)]


# ---- the hook's recorder and wrappers (no deep_gemm needed: a stand-in module) ----


class _T:
    def __init__(self, *shape):
        self.shape = shape


def _fake_deep_gemm(api: str):
    mod = types.ModuleType("deep_gemm")
    seen = []
    if api == "cxx":
        def fp8_fp4_gemm_nt(a, b, d, c=None, recipe=None):
            seen.append("dense")

        def m_grouped_fp8_fp4_gemm_nt_masked(a, b, d, masked_m, expected_m, recipe=None):
            seen.append("masked")

        def m_grouped_fp8_fp4_gemm_nt_contiguous(a, b, d, grouped_layout):
            seen.append("contig")

        mod.fp8_fp4_gemm_nt = mod.fp8_gemm_nt = fp8_fp4_gemm_nt
        mod.m_grouped_fp8_fp4_gemm_nt_masked = mod.fp8_m_grouped_gemm_nt_masked = m_grouped_fp8_fp4_gemm_nt_masked
        mod.m_grouped_fp8_fp4_gemm_nt_contiguous = m_grouped_fp8_fp4_gemm_nt_contiguous
        mod.m_grouped_fp8_gemm_nt_contiguous = m_grouped_fp8_fp4_gemm_nt_contiguous
    else:
        def gemm_fp8_fp8_bf16_nt(lhs, rhs, out):
            seen.append("dense")

        def m_grouped_gemm_fp8_fp8_bf16_nt_masked(lhs, rhs, out, masked_m, expected_m):
            seen.append("masked")

        mod.gemm_fp8_fp8_bf16_nt = gemm_fp8_fp8_bf16_nt
        mod.m_grouped_gemm_fp8_fp8_bf16_nt_masked = m_grouped_gemm_fp8_fp8_bf16_nt_masked
    return mod, seen


def test_wrappers_record_sglang_shapes_and_call_through(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "3")
    mod, seen = _fake_deep_gemm("cxx")
    rec = hook.TraceRecorder(str(tmp_path), "cxx")
    wrapped = hook.wrap_entry_points(mod, rec)
    assert set(wrapped) == {"fp8_gemm_nt", "fp8_fp4_gemm_nt", "fp8_m_grouped_gemm_nt_masked",
                            "m_grouped_fp8_fp4_gemm_nt_masked", "m_grouped_fp8_gemm_nt_contiguous",
                            "m_grouped_fp8_fp4_gemm_nt_contiguous"}
    assert hook.wrap_entry_points(mod, rec) == []  # idempotent
    a, sfa = _T(17, 6144), _T(17, 48)
    b, sfb = _T(1792, 6144), _T(14, 48)
    for _ in range(5):
        mod.fp8_gemm_nt((a, sfa), (b, sfb), None)
    mod.fp8_m_grouped_gemm_nt_masked((_T(20, 256, 4096), None), (_T(20, 1536, 4096), None), None, None,
                                     expected_m=41)
    mod.m_grouped_fp8_gemm_nt_contiguous((_T(640, 4096), None), (_T(20, 1536, 4096), None), None, None)
    mod.fp8_gemm_nt("not a tensor", None, None)  # unreadable shapes: counted as an error, call still made
    assert seen == ["dense"] * 5 + ["masked", "contig", "dense"]
    rec.close()
    headers, calls = read_trace_dir(tmp_path)
    assert (tmp_path / f"trace-rank3-{rec.pid}.jsonl").exists()
    assert headers[0]["api"] == "cxx" and headers[0]["rank"] == 3
    assert any(h.get("dgprecompile_trace_errors") == 1 for h in headers)
    assert set(calls) == {Call(KernelType.GEMM_NT_F8F8BF16, 17, 1792, 6144, 1, 5),
                          Call(KernelType.GROUPED_GEMM_NT_F8F8BF16_MASKED, 41, 1536, 4096, 20, 1),
                          Call(KernelType.GROUPED_GEMM_NT_F8F8BF16_CONTIG, 640, 1536, 4096, 20, 1)}


def test_legacy_wrappers(tmp_path):
    mod, seen = _fake_deep_gemm("legacy")
    rec = hook.TraceRecorder(str(tmp_path), "legacy")
    assert set(hook.wrap_entry_points(mod, rec)) == {"gemm_fp8_fp8_bf16_nt", "m_grouped_gemm_fp8_fp8_bf16_nt_masked"}
    mod.m_grouped_gemm_fp8_fp8_bf16_nt_masked((_T(20, 256, 4096), None), (_T(20, 1536, 4096), None), None, None, 9)
    rec.close()
    assert read_trace_dir(tmp_path)[1] == [Call(KernelType.GROUPED_GEMM_NT_F8F8BF16_MASKED, 9, 1536, 4096, 20, 1)]


def test_legacy_kernel_id_matches_the_plan_id():
    from dgprecompile.keys.legacy import kernel_source
    from dgprecompile.planning.heuristics.legacy import LegacyHeuristic

    spec = LegacyHeuristic().kernel(KernelType.GROUPED_GEMM_NT_F8F8BF16_MASKED, 600, 4096, 7168, 20, 132)
    assert hook.legacy_kernel_id(f"kernel.{spec.family}.0123456789ab", kernel_source(spec)) == spec.id


def test_describe_cu(tmp_path):
    cu = tmp_path / "kernel.cu"
    cu.write_text("static void __instantiate_kernel() {\n    auto ptr = reinterpret_cast<void*>(&sm90_fp8_gemm_1d2d_impl<\n"
                  "        cute::UMMA::Major::K, 0, 0, 1,\n        64, 16, 128\n    >);\n};\n")
    assert hook.describe_cu(str(cu)) == "sm90_fp8_gemm_1d2d_impl<cute::UMMA::Major::K, 0, 0, 1, 64, 16, 128>"
