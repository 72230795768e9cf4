"""The kernel model and the computed entry names against what each sgl-deep-gemm release did on an H200.

Record: tests/data/sweep_generations_h200.json (tests/gpu/sweep_generations.sh, summarized by
tests/gpu/summarize_generations.py; each run's "provenance", "machine" and "nvcc_version" say which libraries,
GPU, SM count, date and command; each release names its run). Nothing here compares the model with itself: every expected value is a device observation.
"""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path

import pytest
from helpers import cold_entries_explained, sgl_deep_gemm_dir

from dgprecompile.host.toolchain import DeepGemmInstall, Nvcc
from dgprecompile.keys.schemes import key_class
from dgprecompile.planning.heuristics.sm90_cxx import (
    Sm90CxxHeuristic,
    _swizzle,
    best_config,
    transpose_kernel,
)
from dgprecompile.runtimes.items import KernelType

RECORD_PATH = Path(__file__).resolve().parent / "data" / "sweep_generations_h200.json"
RECORD = json.loads(RECORD_PATH.read_text())
# releases whose calls ran there (the record also keeps the ones that could not run, with their errors: run 1's
# 0.1.5.post3, 0.1.7, 0.2.0 and 0.2.2 are builds for torch 2.13/2.14 and reject every call under torch 2.11)
RELEASES = sorted(r for r, rel in RECORD["releases"].items()
                  if not r.startswith("sk-") and any(k["calls"] for k in rel["keys"].values()))
KIND = {"dense": KernelType.GEMM_NT_F8F8BF16, "masked": KernelType.GROUPED_GEMM_NT_F8F8BF16_MASKED,
        "contig": KernelType.GROUPED_GEMM_NT_F8F8BF16_CONTIG}
HEURISTIC = Sm90CxxHeuristic()


@cache
def _model(kind: KernelType, m: int, n: int, k: int, g: int, sms: int) -> tuple[int, ...]:
    bm, bn, cm, cn, stages, smem = best_config(kind, m, n, k, g, sms)
    return bm, bn, cm, cn, stages, _swizzle(bn * 2), smem, sms


def _interval_end(kind: KernelType, m: int) -> int:
    """The end of the model's constant interval holding m (plan evaluates the model there)."""
    step = 128 if kind is KernelType.GROUPED_GEMM_NT_F8F8BF16_CONTIG else 64
    if kind is KernelType.GEMM_NT_F8F8BF16 and m <= 32:
        return 16 if m <= 16 else 32
    return -(-m // step) * step


def _key(name: str) -> tuple[KernelType, int, int, int]:
    kind, n, k, g = name.split("/")
    return KIND[kind], int(n), int(k), int(g)


@pytest.mark.slow
@pytest.mark.parametrize("release", RELEASES)
def test_model_equals_every_recorded_choice(release):
    """Every run of sampled m with one printed configuration equals the model on each model interval it meets
    (the model is constant on those intervals: test_heuristics checks that by brute force)."""
    rel = RECORD["releases"][release]
    assert rel["keys"], f"{release}: the device recorded no key"
    checked = 0
    for name, slot in rel["keys"].items():
        kind, n, k, g = _key(name)
        assert not slot["errors"], (release, name, slot["errors"][:1])
        for run in slot["runs"]:
            m_first, m_last, *config = run
            m = m_first
            while m <= m_last:
                end = _interval_end(kind, m)
                for probe in {m, min(end, m_last)}:
                    assert _model(kind, probe, n, k, g, config[-1]) == tuple(config), (release, name, probe)
                    checked += 1
                m = end + 1
    assert checked > 1000


def _context(release: str):
    rel = RECORD["releases"][release]
    release = rel["dg_version"]  # "0.1.3@run3" is 0.1.3 again, in a later run
    local = sgl_deep_gemm_dir(release)
    if local is None:
        pytest.skip(f"sgl-deep-gemm {release} not installed beside the venv (make setup)")
    generation = "sgl-deep-gemm-0.2" if release.startswith("0.2") else "sgl-deep-gemm-0.1"
    from dgprecompile.runtimes import get_generation

    gen = get_generation(generation)
    nvcc = Nvcc("/usr/local/cuda/bin/nvcc", RECORD["runs"][rel["run"]]["nvcc_version"])
    local_pkg = os.path.join(local, "deep_gemm")
    if generation == "sgl-deep-gemm-0.2":  # the install path is not in this key
        return key_class(gen.key_scheme).build(DeepGemmInstall("sgl-deep-gemm", release, local_pkg, generation),
                                                   nvcc, {})
    # 0.1.x: the device's install path is in the key (-I); the header bytes are the wheel's: read them here
    device_pkg = os.path.join(rel["site"], "deep_gemm")
    ctx = key_class(gen.key_scheme).build(DeepGemmInstall("sgl-deep-gemm", release, device_pkg, generation),
                                              nvcc, {})
    return type(ctx)(**{**ctx.__dict__, "header_root": os.path.join(local_pkg, "include")})


def _plan_kernel(kind: KernelType, m: int, n: int, k: int, g: int):
    if m == 0:
        return transpose_kernel(k)
    return HEURISTIC.kernel(kind, _interval_end(kind, m), n, k, g, 132)


@pytest.mark.parametrize("release", RELEASES)
def test_each_new_cold_entry_is_the_planned_kernels_computed_name(release):
    """At the first m where the runtime made an entry, the kernel plan picks there has exactly that name, and the
    kernel.cu dgprecompile generates is byte-identical to the runtime's."""
    rel = RECORD["releases"][release]
    made = cold_entries_explained(release, rel, _context(release),
                                  lambda kind, n, k, g, m: _plan_kernel(kind, m, n, k, g))
    assert len(made) >= (4 if rel["run"] == "run3" else 10)  # the largest-m run's cold pass meets few new kernels


@pytest.mark.parametrize("release", RELEASES)
def test_warm_index_names_are_the_computed_names(release):
    """Where the device warm ran the GPU backend, the library itself made each planned kernel's entry."""
    rel = RECORD["releases"][release]
    if (rel.get("warm") or {}).get("backend") != "cxx":
        pytest.skip(f"{release} was warmed with the {(rel.get('warm') or {}).get('backend')} backend")
    ctx = _context(release)
    from dgprecompile.planning.plan import PlanRequest
    from dgprecompile.planning.request import plan_from_request

    plan = plan_from_request(PlanRequest(model="Qwen3-Coder-480B", tp=8, ep=8, sglang=rel["sglang"],
                                         moe_runner_backend="deep_gemm", max_tokens=65536))
    assert rel["warm_index"] and set(rel["warm_index"]) == set(plan.kernels)
    for kernel_id, entry in rel["warm_index"].items():
        assert ctx.entry_name(plan.kernels[kernel_id]) == entry, kernel_id


@pytest.mark.parametrize("release", RELEASES)
def test_a_warmed_cache_left_the_runtime_nothing_to_compile(release):
    rel = RECORD["releases"][release]
    after = rel.get("sweep_after_warm")
    assert after is not None, f"{release}: no sweep after warm in the record"
    assert after["calls"] > 40000 and not after["errors"] and not after["truncated_at"]
    assert after["new_entries"] == []


@pytest.mark.parametrize("release", RELEASES)
def test_probe_entries_are_the_computed_names(release):
    """The probe's single calls (dense m=100 n=1792 k=6144; masked expected_m=100, 20 groups; contiguous m=512, 20
    groups) made the entries of the planned kernels there: the contiguous family's name checked on the device."""
    probe = RECORD["releases"][release].get("probe") or {}
    ctx = _context(release)
    calls = {"dense_sglang_mn_major_tma_aligned": (KernelType.GEMM_NT_F8F8BF16, 100, 1),
             "masked_sglang_get_mn_major_tma_aligned_tensor": (KernelType.GROUPED_GEMM_NT_F8F8BF16_MASKED, 100, 20),
             "contig_sglang_tma_aligned": (KernelType.GROUPED_GEMM_NT_F8F8BF16_CONTIG, 512, 20)}
    for name, (kind, m, g) in calls.items():
        assert probe.get(name) == "ok", (release, name, probe.get(name))
        assert ctx.entry_name(_plan_kernel(kind, m, 1792, 6144, g)) in probe[name + ":entries"], (release, name)
    # row-major dense scales (SGLang's warm-up executors) add the layout kernel for sf_k = 48
    assert ctx.entry_name(transpose_kernel(6144)) in probe["dense_row_major_m_by_sfk:entries"]


LARGEST_M_SERVER = ("python -m sglang.launch_server --model-path Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8 --tp 8 --ep 8 "
                    "--chunked-prefill-size -1 --context-length 262144 --moe-runner-backend deep_gemm")


def test_the_largest_m_a_server_command_produces_ran_on_the_device():
    """Issue 10: the largest m the server parser produces for the 480B at tp 8 / ep 8 (chunked prefill off, 262k
    context) is inside what run 3 swept on the H200, cold (each printed choice checked by the test above) and
    after warm (nothing compiled), for every key of that plan."""
    from dgprecompile.planning.plan import PlanRequest
    from dgprecompile.planning.request import plan_from_request

    plan = plan_from_request(PlanRequest(sglang_cmd=LARGEST_M_SERVER, sglang="0.5.14"))
    rel = RECORD["releases"]["0.1.3@run3"]
    assert "--context-length 262144" in RECORD["runs"]["run3"]["provenance"]
    swept_after = {name: (first, last) for name, first, last, _calls in rel["sweep_after_warm"]["keys"]}
    kinds = {KernelType.GEMM_NT_F8F8BF16: "dense", KernelType.GROUPED_GEMM_NT_F8F8BF16_MASKED: "masked"}
    assert {pk.key.kernel_type for pk in plan.keys} == set(kinds)
    for shape in (pk.key for pk in plan.keys):
        assert shape.m_max > 100_000  # the parser's m, not the 65,536 of the earlier runs
        name = f"{kinds[shape.kernel_type]}/{shape.n}/{shape.k}/{shape.num_groups}"
        cold_top = max(run[1] for run in rel["keys"][name]["runs"])
        assert cold_top >= shape.m_max, (name, cold_top, shape.m_max)
        first, last = swept_after[name]
        assert first <= 1 and last >= shape.m_max, (name, first, last, shape.m_max)
    assert rel["sweep_after_warm"]["new_entries"] == [] and rel["warm_rc"] == 0
