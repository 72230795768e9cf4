"""The sgl-kernel releases whose own deep_gemm_cpp.abi3.so cannot load on the device (CUDA 12 / torch 2.8-2.9
builds; the device has torch 2.11), held against what their JIT did there with that host code rebuilt from its
source (tests/gpu/build_deep_gemm_from_source.sh: the csrc of the sgl-project/DeepGEMM commit whose headers,
generated-code text and print format equal the wheel's, compiled beside the wheel's own headers and Python).

Record: tests/data/sweep_generations_h200.json, releases ``sk-<version>-src`` (runs 5-7; each run's "provenance"
names the GPU, SM count, nvcc, torch, date, commands and source commit). Every expected value is a device
observation: the printed configuration at each call, the entries the JIT made, the sweep after a GPU-free warm.
"""

from __future__ import annotations

import importlib.util
import json
import os
from functools import cache
from pathlib import Path

import pytest
from helpers import assert_probe_made_the_models_kernels, bundled_deep_gemm_dir, cold_entries_explained

from dgprecompile.host.toolchain import Nvcc
from dgprecompile.keys import cxx_templates
from dgprecompile.keys.schemes import key_class
from dgprecompile.planning.heuristics.registry import heuristic_for
from dgprecompile.planning.heuristics.sm90_cxx import _swizzle
from dgprecompile.planning.heuristics.sm90_waves import best_config
from dgprecompile.planning.plan import PlanRequest
from dgprecompile.planning.request import plan_from_request
from dgprecompile.runtimes import get_generation
from dgprecompile.runtimes.items import KernelType

HERE = Path(__file__).resolve().parent
RECORD = json.loads((HERE / "data" / "sweep_generations_h200.json").read_text())
KIND = {"dense": KernelType.GEMM_NT_F8F8BF16, "masked": KernelType.GROUPED_GEMM_NT_F8F8BF16_MASKED}

# release -> (the wheel, the source commit, the sglang that pins it and its MoE runner, the generation, block sizes
# only that revision chooses, which the record must show: {key kind: block_m})
CASES = {
    "sk-0.3.21-src": ("0.3.21", "54f99a8", "0.5.9", "deep_gemm", "sgl-kernel-waves-0.3.20", {"dense": {16, 32}}),
    "sk-0.3.16.post3-src": ("0.3.16.post3", "f4adba8", "0.5.4", "deep_gemm", "sgl-kernel-waves", {}),
    "sk-0.3.9.post2-src": ("0.3.9.post2", "b981e3e", "0.5.2", "auto", "sgl-kernel-waves-0.3.7", {"masked": {256}}),
}
RELEASES = list(CASES)


def _local(release: str) -> str:
    local = bundled_deep_gemm_dir(CASES[release][0])
    if local is None:
        pytest.skip(f"sgl-kernel {CASES[release][0]}'s deep_gemm not installed beside the venv (make setup)")
    return local


@cache
def _samples(release: str) -> dict[tuple[str, int, int, int], list[int]]:
    """The m the device sweep called for each key (tests/gpu/sweep_generations.py's own cold_specs)."""
    spec = importlib.util.spec_from_file_location("sweep_generations", HERE / "gpu" / "sweep_generations.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out: dict[tuple[str, int, int, int], list[int]] = {}
    for s in module.cold_specs(release):
        out.setdefault((s["kind"], s["n"], s["k"], s["g"]), []).extend(s["ms"])
    return {key: sorted(set(ms)) for key, ms in out.items()}


def _key(name: str) -> tuple[KernelType, int, int, int]:
    kind, n, k, g = name.split("/")
    return KIND[kind], int(n), int(k), int(g)


@cache
def _plan(release: str):
    _, _, sglang, runner, generation, _ = CASES[release]
    plan = plan_from_request(PlanRequest(model="Qwen3-Coder-480B", tp=8, ep=8, sglang=sglang,
                                         moe_runner_backend=runner, max_tokens=65536))
    assert plan.profile.generation == generation
    return plan


def _heuristic(release: str):
    return heuristic_for(get_generation(CASES[release][4]))


def _context(release: str):
    """The key context of the device's install (its path is in the key), reading the wheel's header bytes here."""
    version, _, _, _, generation, _ = CASES[release]
    rel = RECORD["releases"][release]
    nvcc = Nvcc("/usr/local/cuda/bin/nvcc", RECORD["runs"][rel["run"]]["nvcc_version"])
    cls = key_class(get_generation(generation).key_scheme)
    return cls.from_env(os.path.join(rel["site"], "deep_gemm", "include"), nvcc.release, {},
                        template=cxx_templates.SK_RELEASE_TEMPLATE[version],
                        header_root=os.path.join(_local(release), "deep_gemm", "include"))


@pytest.mark.parametrize("release", RELEASES)
def test_the_record_is_the_rebuilt_release(release):
    version, sgf, sglang, *_ = CASES[release]
    rel = RECORD["releases"][release]
    assert (rel["sglang"], rel["info"]["gpu"], rel["info"]["num_sms"]) == (sglang, "NVIDIA H200", 132)
    provenance = RECORD["runs"][rel["run"]]["provenance"]
    assert f"sgl-kernel {version}" in provenance and "rebuilt on the device" in provenance and sgf in provenance


@pytest.mark.parametrize("release", RELEASES)
def test_model_equals_every_recorded_call(release):
    """At every m the device called inside a recorded run, the generation's rule picks that run's printed
    configuration: blocks, multicast and its side, stages, C/D swizzle, shared memory and the minimised SM count;
    the block sizes only this revision chooses are among them."""
    rule = _heuristic(release).rule
    checked, seen = 0, {}
    for name, slot in RECORD["releases"][release]["keys"].items():
        kind, n, k, g = _key(name)
        assert not slot["errors"], (release, name, slot["errors"][:1])
        calls = 0
        for m_first, m_last, *observed in slot["runs"]:
            for m in (m for m in _samples(release)[(kind.name, n, k, g)] if m_first <= m <= m_last):
                bm, bn, multicast, on_a, stages, smem, sms = best_config(kind, m, n, k, g, 132, rule=rule)
                assert [bm, bn, multicast, int(on_a), stages, _swizzle(bn * 2), smem, sms, sms] == observed, \
                    (release, name, m)
                seen.setdefault(name.split("/")[0], set()).add(bm)
                calls += 1
        assert calls == slot["calls"], (release, name)  # the samples are exactly the calls the device made
        checked += calls
    assert checked > 25000
    for kind, block_ms in CASES[release][5].items():
        assert block_ms <= seen[kind], (release, kind, seen[kind])


@pytest.mark.parametrize("release", RELEASES)
def test_each_new_cold_entry_is_the_planned_kernels_computed_name(release):
    """At the first m where the JIT made an entry, the kernel the plan lists there has exactly that name, and the
    kernel.cu dgprecompile generates is byte-identical to the JIT's."""
    plan, ctx = _plan(release), _context(release)

    def planned(kind, n, k, g, m):
        pk = next(pk for pk in plan.keys if (pk.key.kernel_type, pk.key.n, pk.key.k, pk.key.num_groups) == (kind, n, k, g))
        if m == 0:
            (aux,) = pk.aux
            return plan.kernels[aux]
        return plan.kernels[next(b.kernel for b in pk.buckets if b.m_min <= m <= b.m_max)]

    rel = RECORD["releases"][release]
    assert len(cold_entries_explained(release, rel, ctx, planned)) >= 80
    sources = {ctx.entry_name(spec): ctx.source(spec) for spec in plan.kernels.values()}
    for entry, text in rel["kernel_cu_samples"].items():
        assert sources[entry] == text, (release, entry)


@pytest.mark.parametrize("release", RELEASES)
def test_probe_entries_are_the_computed_names(release):
    """The probe's single calls made the model's kernels under the computed names (helpers says which)."""
    assert_probe_made_the_models_kernels(RECORD["releases"][release]["probe"], _context(release), _heuristic(release))


@pytest.mark.parametrize("release", RELEASES)
def test_a_warmed_cache_left_the_jit_nothing_to_compile(release):
    """After a GPU-free `dgprecompile warm` (nvcc, names computed here) of the plan, the sweep over every planned
    key's samples made no entry."""
    rel = RECORD["releases"][release]
    after = rel["sweep_after_warm"]
    assert (rel["warm"]["backend"], rel["warm"]["failed"]) == ("nvcc", 0)
    assert rel["warm"]["compiled"] == len(rel["warm_index"]) == _plan(release).total_kernels
    assert after["calls"] > 40000 and not after["errors"] and not after["truncated_at"]
    assert after["new_entries"] == []


@pytest.mark.parametrize("generation", sorted({case[4] for case in CASES.values()}))
def test_what_the_generation_calls_checked_is_the_records(generation):
    """The releases a generation calls key-proven and the largest m it calls GPU-checked are these records' (and
    sglang-kernel 0.4.2's, tests/test_sk_generation.py, for sgl-kernel-waves)."""
    gen = get_generation(generation)
    largest: dict[str, int] = {}
    for release, case in CASES.items():
        if case[4] != generation:
            continue
        assert gen.keys_proven(case[0]) and "rebuilt" in gen.gpu_validated
        for name, slot in RECORD["releases"][release]["keys"].items():
            kind = _key(name)[0].value
            largest[kind] = max([largest.get(kind, 0)] + [run[1] for run in slot["runs"]])
    assert dict(gen.gpu_checked_m) == largest
