"""sgl-deep-gemm 0.2.x's kernel choice (issue 32) against what its runtime did on an H200 under torch 2.14.1.

Record: tests/data/torch214_generations_h200.json, the summary (tests/gpu/summarize_generations.py --slim) of
bench/results/2026-12-02-h200-torch214-generations/results.tar.gz: for 0.1.5.post3, 0.1.7, 0.2.0, 0.2.2 and
0.2.3.post2 every dense m 1-16,384 (then sampled to 65,536), masked expected_m 1-8,200 and sampled contiguous m of the
Qwen3-Coder-480B tp8/ep8 keys, each printed configuration (DG_PRINT_CONFIGS, as runs of m) and the entries each cold
cache gained at which m; then a GPU-free nvcc warm of the 0.1.x model's plan and a sweep after it. Every expected value
here is a device observation.

What the record shows: the 0.2.x releases print the same configuration as 0.1.x at every m, but build the block
128 x {144, 160, 192} single-cluster dense kernels with n compiled in (SHAPE_N = n), so the two dense keys that pick
one of them get an entry each where 0.1.x shares one (planning/heuristics/sm90_cxx.py COMPILED_N_02).
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import cache
from pathlib import Path

import pytest
from helpers import sgl_deep_gemm_dir

from dgprecompile.host.toolchain import DeepGemmInstall, Nvcc
from dgprecompile.keys.schemes import key_class
from dgprecompile.planning.heuristics.registry import heuristic_for
from dgprecompile.planning.heuristics.sm90_cxx import (
    Sm90CxxHeuristic,
    _swizzle,
    best_config,
    transpose_kernel,
)
from dgprecompile.runtimes import get_generation
from dgprecompile.runtimes.items import KernelType

RECORD_PATH = Path(__file__).resolve().parent / "data" / "torch214_generations_h200.json"
RECORD = json.loads(RECORD_PATH.read_text())
RELEASES = sorted(RECORD["releases"])
RELEASES_02 = [r for r in RELEASES if r.startswith("0.2.")]
KIND = {"dense": KernelType.GEMM_NT_F8F8BF16, "masked": KernelType.GROUPED_GEMM_NT_F8F8BF16_MASKED,
        "contig": KernelType.GROUPED_GEMM_NT_F8F8BF16_CONTIG}
EVERY_DENSE_M = 16384  # tests/gpu/sweep_generations.py dense_ms: every m to here, then 3 per 64
# the m where 0.2.x made an entry the 0.1.x model does not name: the 5 "new" of the sweep after the 0.1.x warm
NEW_02 = {"dense/1792/6144/1": [(1153, 1280), (1281, 1408), (1409, 1664)],
          "dense/6144/1536/1": [(321, 384), (385, 512)]}


def _generation_id(release: str) -> str:
    return "sgl-deep-gemm-0.2" if release.startswith("0.2.") else "sgl-deep-gemm-0.1"


@cache
def _context(release: str):
    local = sgl_deep_gemm_dir(release)
    if local is None:
        pytest.skip(f"sgl-deep-gemm {release} not installed beside the venv (make setup)")
    generation = _generation_id(release)
    rel = RECORD["releases"][release]
    nvcc = Nvcc("/usr/local/cuda/bin/nvcc", RECORD["runs"][rel["run"]]["nvcc_version"])
    local_pkg = os.path.join(local, "deep_gemm")
    scheme = key_class(get_generation(generation).key_scheme)
    if generation == "sgl-deep-gemm-0.2":  # the install path is not in this key
        return scheme.build(DeepGemmInstall("sgl-deep-gemm", release, local_pkg, generation), nvcc, {})
    # 0.1.x: the device's install path is in the key (-I); the header bytes are the wheel's: read them here
    ctx = scheme.build(DeepGemmInstall("sgl-deep-gemm", release, os.path.join(rel["site"], "deep_gemm"), generation),
                       nvcc, {})
    return type(ctx)(**{**ctx.__dict__, "header_root": os.path.join(local_pkg, "include")})


def _parts(slot: dict) -> list[tuple[int, int]]:
    return sorted(tuple(p) for p in slot["parts"])


def runtime_choices(slot: dict) -> list[tuple[int, int, tuple[int, ...], str]]:
    """(m_first, m_last, printed configuration, entry) for each run of one key: each cold part ran on an empty
    cache of its own, so a configuration's entry is the one that appeared at the first m it was printed for in that
    part (an entry appears only where the configuration is new to the part)."""
    made = {m: entries for m, entries in slot["new_entries"]}
    out = []
    for lo, hi in _parts(slot):
        seen: dict[tuple[int, ...], str] = {}
        for m_first, m_last, *config in sorted(r for r in slot["runs"] if lo <= r[0] <= hi):
            config = tuple(config)
            gemm = [e for e in made.get(m_first, []) if not e.startswith(("transpose_fp32", "kernel.transpose_fp32"))]
            if config in seen:
                assert not gemm, (m_first, gemm)  # a configuration seen before in this part made nothing new
            else:
                assert len(gemm) == 1, (m_first, made.get(m_first))
                seen[config] = gemm[0]
            out.append((m_first, m_last, config, seen[config]))
    return out


def called_ms(kind: str) -> list[int]:
    """The m the sweep called for a key (tests/gpu/sweep_generations.py dense_ms, contig_ms, masked 1-8,200);
    test_the_record_is_what_issue_32_reported ties the counts to the record."""
    if kind == "dense":
        return [*range(1, EVERY_DENSE_M + 1),
                *(m for q in range(EVERY_DENSE_M // 64, 65536 // 64) for m in (64 * q + 1, 64 * q + 32, 64 * q + 64))]
    if kind == "masked":
        return list(range(1, 8201))
    qs = list(range(1, 133632 // 128 + 1))
    return [128 * q for q in (*qs, *range(qs[-1] + 32, 263168 // 128 + 1, 32))]


def _probe_ms(kind: str, m_first: int, m_last: int) -> list[int]:
    """The m of one run the sweep called: every m of it for dense to 16,384 and masked, samples elsewhere."""
    return [m for m in _called(kind) if m_first <= m <= m_last]


@cache
def _called(kind: str) -> tuple[int, ...]:
    return tuple(called_ms(kind))


@cache
def _config(kind: KernelType, m: int, n: int, k: int, g: int, sms: int) -> tuple[int, ...]:
    bm, bn, cm, cn, stages, smem = best_config(kind, m, n, k, g, sms)
    return bm, bn, cm, cn, stages, _swizzle(bn * 2), smem, sms


def test_the_record_is_what_issue_32_reported():
    """The five releases, all cold sweeps complete; after the GPU-free warm of the 0.1.x model's plan nothing new
    for 0.1.x and exactly the five dense entries of NEW_02 for each 0.2.x release."""
    assert RELEASES == ["0.1.5.post3", "0.1.7", "0.2.0", "0.2.2", "0.2.3.post2"]
    assert "torch 2.14.1" in RECORD["runs"]["t214"]["machine"] and "H200" in RECORD["runs"]["t214"]["machine"]
    for release in RELEASES:
        rel = RECORD["releases"][release]
        for name, slot in rel["keys"].items():
            assert not slot["errors"] and not slot["truncated_at"], (release, name)
        for name, slot in rel["keys"].items():  # the sweep called the m _probe_ms checks, and only those
            kind = name.split("/")[0]
            assert slot["calls"] == sum(len(_probe_ms(kind, lo, hi)) for lo, hi in _parts(slot)), (release, name)
        after = rel["sweep_after_warm"]
        assert after["calls"] == 46244 and not after["errors"]
        new = sorted((key, m) for key, m, _ in after["new_entries"])
        expected = [] if release.startswith("0.1.") else sorted((key, lo) for key, runs in NEW_02.items()
                                                                   for lo, _hi in runs)
        assert new == expected, (release, new)


@pytest.mark.slow
@pytest.mark.parametrize("release", RELEASES)
def test_model_configuration_equals_every_printed_one(release):
    """Every configuration printed at every m the sweep called (dense every m to 16,384, masked 1-8,200, each
    run's ends beyond) equals the model's: 0.1.x and 0.2.x choose alike."""
    checked = 0
    for name, slot in RECORD["releases"][release]["keys"].items():
        kind, n, k, g = name.split("/")
        for m_first, m_last, *config in slot["runs"]:
            for m in _probe_ms(kind, m_first, m_last):
                assert _config(KIND[kind], m, int(n), int(k), int(g), config[-1]) == tuple(config), (release, name, m)
                checked += 1
    assert checked > 2 * EVERY_DENSE_M + 2 * 8200


def _entry_checks(release: str, heuristic) -> tuple[int, list[tuple[str, int]]]:
    """Compare the computed entry name of the planned kernel with the runtime's at every called m (as in
    _probe_ms); return how many matched and the (key, m) that did not."""
    ctx = _context(release)
    name_of = cache(ctx.entry_name)
    rel = RECORD["releases"][release]
    matched, missed = 0, []
    for name, slot in rel["keys"].items():
        kind, n, k, g = name.split("/")
        for m_first, m_last, _config, entry in runtime_choices(slot):
            for m in _probe_ms(kind, m_first, m_last):
                spec = heuristic.kernel(KIND[kind], m, int(n), int(k), int(g), 132)
                if name_of(spec) == entry:
                    matched += 1
                else:
                    missed.append((name, m))
    return matched, missed


@pytest.mark.slow
@pytest.mark.parametrize("release", RELEASES)
def test_every_called_m_gets_the_entry_the_runtime_made(release):
    """At every m called (dense every m to 16,384), the kernel the release's generation plans has the name of the
    entry the runtime used there, and each kernel.cu the runtime wrote is byte-identical to the generated one."""
    heuristic = heuristic_for(get_generation(_generation_id(release)))
    matched, missed = _entry_checks(release, heuristic)
    assert missed == [] and matched > 2 * EVERY_DENSE_M + 2 * 8200, (release, missed[:5])
    ctx, rel = _context(release), RECORD["releases"][release]
    for name, slot in rel["keys"].items():
        kind, n, k, g = name.split("/")
        for m_first, _m_last, _config, entry in runtime_choices(slot):
            spec = heuristic.kernel(KIND[kind], m_first, int(n), int(k), int(g), 132)
            assert hashlib.sha256(ctx.source(spec).encode()).hexdigest() == rel["entries"][entry]["kernel_cu_sha256"]


@pytest.mark.slow
@pytest.mark.parametrize("release", RELEASES_02)
def test_the_01_model_misses_exactly_the_five_kernels_that_carry_n(release):
    """What changed: the 0.1.x kernel model names every 0.2.x entry except at the m of the five entries the sweep
    after the 0.1.x warm compiled (NEW_02)."""
    _matched, missed = _entry_checks(release, Sm90CxxHeuristic())
    expected = sorted((key, m) for key, runs in NEW_02.items() for lo, hi in runs
                      for m in (range(lo, hi + 1)))
    assert sorted(missed) == expected


@pytest.mark.parametrize("release", RELEASES_02)
def test_the_02_plan_names_exactly_the_entries_the_cold_runtime_made(release):
    """The plan for the release's sglang names every entry the cold sweeps made (its 56, not 0.1.x's 54 of which
    3 went unused), and no other: the warm builds what the runtime looks up."""
    from dgprecompile.planning.plan import PlanRequest
    from dgprecompile.planning.request import plan_from_request

    rel = RECORD["releases"][release]
    ctx = _context(release)
    plan = plan_from_request(PlanRequest(model="Qwen3-Coder-480B", tp=8, ep=8, sglang=rel["sglang"],
                                         moe_runner_backend="deep_gemm", max_tokens=65536))
    planned = {ctx.entry_name(spec) for spec in plan.kernels.values()}
    made = {e for slot in rel["keys"].values() for _m, entries in slot["new_entries"] for e in entries}
    assert len(made) == 56 and planned == made
    # the five entries the sweep after the 0.1.x warm compiled are planned now
    assert {e for _key, _m, entries in rel["sweep_after_warm"]["new_entries"] for e in entries} <= planned
    assert ctx.entry_name(transpose_kernel(6144)) in planned


def _device_script():
    import importlib.util

    path = Path(__file__).resolve().parent / "gpu" / "dg02_compiled_n.py"
    spec = importlib.util.spec_from_file_location("dg02_compiled_n", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # standard library only at import: torch and deep_gemm load in main()
    return module


def test_the_device_shapes_are_the_configurations_they_name():
    """tests/gpu/dg02_compiled_n.py's shapes (a later device call, issue 32's open question): each is the model's
    configuration it is named for, the 0.2 model's SHAPE_N is the one listed, and the script reads that slot back
    from the kernel.cu the 0.2.2 key context generates."""
    script = _device_script()
    heuristic = heuristic_for(get_generation("sgl-deep-gemm-0.2"))
    ctx = _context("0.2.2")
    configs = set()
    for name, m, n, k, config, n_const in script.SHAPES:
        assert best_config(KernelType.GEMM_NT_F8F8BF16, m, n, k, 1, 132)[:4] == config, name
        spec = heuristic.kernel(KernelType.GEMM_NT_F8F8BF16, m, n, k, 1, 132)
        assert dict(spec.params)["N"] == n_const, name
        args = script.kernel_args(ctx.source(spec))
        assert (args[2], args[5], args[6]) == (str(n_const), str(config[0]), str(config[1])), (name, args)
        configs.add(config)
    # the three configurations the record lacks are all there
    assert {(64, 144, 2, 1), (64, 160, 2, 1), (64, 192, 2, 1)} <= configs
