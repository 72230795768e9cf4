"""The sglang-kernel 0.4.x model (heuristics/sm90_waves.py) and entry names (keys/sglang_kernel.py) against what
sglang-kernel 0.4.2's deep_gemm did on an H200.

Record: tests/data/sweep_generations_h200.json, releases ``sk-0.4.2`` (run1) and ``sk-0.4.2@run2`` (each run's
"provenance" names the GPU, SM count, nvcc, torch, date and command; ``info`` the site path and SM count). The
sweep (tests/gpu/sweep_generations.py) called each key at the m its ``cold_specs`` lists and recorded, per run of
consecutive samples with one printed configuration, ``columns_sgl_kernel``. Every expected value here is one of
those device observations; nothing compares the model with itself.
"""

from __future__ import annotations

import importlib.util
import json
import os
from functools import cache
from pathlib import Path

import pytest
from helpers import (
    assert_buckets_hold_their_kernel,
    assert_probe_made_the_models_kernels,
    bare_deep_gemm_identity,
    bundled_deep_gemm_dir,
    cold_entries_explained,
    run_in_fresh_python,
)

from dgprecompile.host.toolchain import Nvcc, headers_hash, known_headers
from dgprecompile.keys.sglang_kernel import SkKeyContext
from dgprecompile.planning.heuristics.sm90_cxx import _swizzle
from dgprecompile.planning.heuristics.sm90_waves import Sm90WaveHeuristic, best_config
from dgprecompile.planning.plan import PlanRequest
from dgprecompile.planning.request import plan_from_request
from dgprecompile.runtimes.deepgemm_cxx import SK_0320_KEY_VERSIONS, SK_037_KEY_VERSIONS, SK_KEY_VERSIONS
from dgprecompile.runtimes.items import KernelType

HERE = Path(__file__).resolve().parent
RECORD = json.loads((HERE / "data" / "sweep_generations_h200.json").read_text())
RELEASES = sorted(r for r in RECORD["releases"] if r.startswith("sk-0.4.2"))
KIND = {"dense": KernelType.GEMM_NT_F8F8BF16, "masked": KernelType.GROUPED_GEMM_NT_F8F8BF16_MASKED}


def _sweep_module():
    spec = importlib.util.spec_from_file_location("sweep_generations", HERE / "gpu" / "sweep_generations.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@cache
def _samples() -> dict[tuple[str, int, int, int], list[int]]:
    """The m the device sweep called for each sk- key (its own cold_specs: every m to 4096, then m = 64q + 1)."""
    out: dict[tuple[str, int, int, int], list[int]] = {}
    for spec in _sweep_module().cold_specs("sk-0.4.2"):
        out.setdefault((spec["kind"], spec["n"], spec["k"], spec["g"]), []).extend(spec["ms"])
    return {key: sorted(set(ms)) for key, ms in out.items()}


def _key(name: str) -> tuple[KernelType, int, int, int]:
    kind, n, k, g = name.split("/")
    return KIND[kind], int(n), int(k), int(g)


def test_record_is_the_h200_sglang_kernel_042_sweep():
    assert {"sk-0.4.2", "sk-0.4.2@run2"} <= set(RELEASES)  # later runs join as sk-0.4.2@runN
    assert RECORD["columns_sgl_kernel"] == ["m_first", "m_last", "block_m", "block_n", "multicast", "multicast_on_a",
                                            "stages", "swizzle_cd", "smem", "sms", "sms_launch"]
    for release in RELEASES:
        rel = RECORD["releases"][release]
        assert (rel["sglang"], rel["info"]["gpu"], rel["info"]["num_sms"]) == ("0.5.11", "NVIDIA H200", 132)
        assert "sglang-kernel 0.4.2" in RECORD["runs"][rel["run"]]["provenance"]


@pytest.mark.parametrize("release", RELEASES)
def test_model_equals_every_recorded_call(release):
    """At every m the device called inside a recorded run, the model picks that run's printed configuration:
    blocks, multicast (and on which operand), stages, C/D swizzle, shared memory and the minimised SM count."""
    checked = 0
    for name, slot in RECORD["releases"][release]["keys"].items():
        kind, n, k, g = _key(name)
        assert not slot["errors"], (release, name, slot["errors"][:1])
        ms = _samples()[(kind.name, n, k, g)]
        calls = 0
        for m_first, m_last, *observed in slot["runs"]:
            for m in (m for m in ms if m_first <= m <= m_last):
                bm, bn, multicast, on_a, stages, smem, sms = best_config(kind, m, n, k, g, 132)
                assert [bm, bn, multicast, int(on_a), stages, _swizzle(bn * 2), smem, sms, sms] == observed, \
                    (release, name, m)
                calls += 1
        assert calls == slot["calls"], (release, name)  # the samples are exactly the calls the device made
        checked += calls
    assert checked > 9000


def _context(release: str, include_dir: str | None = None) -> SkKeyContext:
    local = bundled_deep_gemm_dir("0.4.2")
    if local is None:
        pytest.skip("sglang-kernel 0.4.2's deep_gemm not installed beside the venv (make setup)")
    rel = RECORD["releases"][release]
    nvcc = Nvcc("/usr/local/cuda/bin/nvcc", RECORD["runs"][rel["run"]]["nvcc_version"])
    # the device's install path is in the key (-I); the header bytes are the wheel's: read them here
    return SkKeyContext.from_env(include_dir or os.path.join(rel["site"], "deep_gemm", "include"), nvcc.release, {},
                                 header_root=os.path.join(local, "deep_gemm", "include"))


@cache
def _plan():
    return plan_from_request(PlanRequest(model="Qwen3-Coder-480B", tp=8, ep=8, sglang="0.5.11",
                                         moe_runner_backend="deep_gemm", max_tokens=65536))


def _planned(kind: KernelType, n: int, k: int, g: int, m: int):
    """The kernel plan lists for this key at m (m = 0: the key's layout kernel)."""
    pk = next(pk for pk in _plan().keys if (pk.key.kernel_type, pk.key.n, pk.key.k, pk.key.num_groups) == (kind, n, k, g))
    if m == 0:
        (aux,) = pk.aux
        return _plan().kernels[aux]
    bucket = next(b for b in pk.buckets if b.m_min <= m <= b.m_max)
    return _plan().kernels[bucket.kernel]


@pytest.mark.parametrize("release", RELEASES)
def test_each_new_cold_entry_is_the_planned_kernels_computed_name(release):
    """At the first m where the runtime made an entry, the kernel the plan lists there has exactly that name, and
    the kernel.cu dgprecompile generates is byte-identical to the runtime's."""
    made = cold_entries_explained(release, RECORD["releases"][release], _context(release), _planned)
    assert len(made) >= 70


def test_kernel_cu_samples_are_the_generated_code():
    rel = RECORD["releases"]["sk-0.4.2"]
    ctx = _context("sk-0.4.2")
    sources = {ctx.entry_name(spec): ctx.source(spec) for spec in _plan().kernels.values()}
    for entry, text in rel["kernel_cu_samples"].items():
        assert sources[entry] == text, entry


def test_the_install_path_is_in_the_key():
    """The same headers under another path give other names than the device's: the fingerprint must carry the
    package path (generations.py lists deepgemm.package_dir for sgl-kernel-waves)."""
    rel = RECORD["releases"]["sk-0.4.2"]
    moved = _context("sk-0.4.2", include_dir="/opt/elsewhere/deep_gemm/include")
    assert not {moved.entry_name(spec) for spec in _plan().kernels.values()} & set(rel["entries"])
    from dgprecompile.runtimes import get_generation

    assert "deepgemm.package_dir" in get_generation("sgl-kernel-waves").fingerprint_fields


@pytest.mark.parametrize("release", RELEASES)
def test_probe_entries_are_the_computed_names(release):
    """The probe's single calls, each adding to one cache: dense m=100 (SGLang's MN-major scales), masked
    expected_m=100 and contiguous m=512 (20 groups each) made the model's kernels there; row-major dense scales
    added the layout kernel for sf_k = 48. (The contiguous kernel is not planned for sglang 0.5.11, whose
    deep_gemm runner is masked without DeepEP; it checks the model's contiguous branch at one m.)"""
    assert_probe_made_the_models_kernels(RECORD["releases"][release]["probe"], _context(release), Sm90WaveHeuristic())


def test_plan_buckets_hold_one_kernel_at_every_m():
    """The breakpoints are where the choice can change: every m of every bucket of the 480B plan (dense to 65,536,
    masked expected_m to 26,215) selects the bucket's kernel, so warming the plan covers every call."""
    assert_buckets_hold_their_kernel(_plan(), Sm90WaveHeuristic())


def test_plan_lists_kernels_without_torch_or_deep_gemm():
    proc, heavy = run_in_fresh_python(["plan", "--model", "Qwen3-Coder-480B", "--tp", "8", "--ep", "8", "--sglang",
                                       "0.5.11", "--moe-runner-backend", "deep_gemm", "--format", "json"])
    assert heavy == [], proc.stderr
    data = json.loads(proc.stdout)
    assert data["sglang_profile"] == "0.5.10-0.5.11" and data["kernel_model"] is True
    assert data["deepgemm"] == {"generation": "sgl-kernel-waves", "distribution": "sglang-kernel", "version": "0.4.2"}


WARMED = [r for r in RELEASES if RECORD["releases"][r].get("sweep_after_warm")]


@pytest.mark.parametrize("release", WARMED)
def test_a_warmed_cache_left_the_runtime_nothing_to_compile(release):
    """After `dgprecompile warm` of the sglang 0.5.11 plan, the sweep over every planned key's samples made no
    entry (recorded by tests/gpu/sweep_generations.sh with RELEASES="sk-0.4.2:0.5.11:nvcc")."""
    rel = RECORD["releases"][release]
    after = rel["sweep_after_warm"]
    assert rel["warm"]["failed"] == 0 and rel["warm"]["backend"] == "nvcc"
    assert after["calls"] > 40000 and not after["errors"] and not after["truncated_at"]
    assert after["new_entries"] == []


def test_the_largest_checked_m_is_the_records():
    """What plan calls 'checked on a GPU' for this generation is the largest m a recorded sk- run observed."""
    from dgprecompile.runtimes import get_generation

    largest: dict[str, int] = {}
    for release in RELEASES:
        for name, slot in RECORD["releases"][release]["keys"].items():
            kind = _key(name)[0].value
            largest[kind] = max([largest.get(kind, 0)] + [run[1] for run in slot["runs"]])
    assert dict(get_generation("sgl-kernel-waves").gpu_checked_m) == largest


def _so_string(version: str, needle: bytes) -> str:
    """The one null-terminated string holding needle in that release's deep_gemm_cpp.abi3.so."""
    local = bundled_deep_gemm_dir(version)
    if local is None:
        pytest.skip(f"the deep_gemm of sgl-kernel/sglang-kernel {version} not installed beside the venv (make setup)")
    data = (Path(local) / "deep_gemm" / "deep_gemm_cpp.abi3.so").read_bytes()
    at = data.find(needle)
    assert at > 0 and data.find(needle, at + 1) < 0, needle
    return data[data.rfind(b"\0", 0, at) + 1:data.find(b"\0", at)].decode()


# each wheel beside the venv: its distribution, the generation its headers name, the releases sharing those headers
WHEELS = {"0.3.9.post2": ("sgl-kernel", "sgl-kernel-waves-0.3.7", SK_037_KEY_VERSIONS),
          "0.3.16.post3": ("sgl-kernel", "sgl-kernel-waves", SK_KEY_VERSIONS[:8]),
          "0.4.2": ("sglang-kernel", "sgl-kernel-waves", SK_KEY_VERSIONS[8:]),
          "0.3.21": ("sgl-kernel", "sgl-kernel-waves-0.3.20", SK_0320_KEY_VERSIONS)}


@pytest.mark.parametrize("version", list(WHEELS))
def test_the_wheels_headers_name_their_generation(version, tmp_path):
    """data/deepgemm_headers.yaml names the wheel's header set; a bare deep_gemm/ on PYTHONPATH (the tests/gpu
    tarballs) is known by those headers alone, as the last release that shares them."""
    local = bundled_deep_gemm_dir(version)
    if local is None:
        pytest.skip(f"the deep_gemm of {version} not installed beside the venv (make setup)")
    dist, generation, releases = WHEELS[version]
    known = known_headers()[headers_hash(os.path.join(local, "deep_gemm", "include"))]
    assert (known["generation"], [v for _, v in known["releases"]]) == (generation, list(releases))
    assert bare_deep_gemm_identity(os.path.join(local, "deep_gemm"), tmp_path) == [dist, releases[-1], generation]


@pytest.mark.parametrize("version", ["0.3.9.post2", "0.3.16.post3", "0.4.2", "0.3.21"])
def test_template_and_flags_are_the_strings_in_the_release(version):
    """kernel.cu's format and the key's flag and signature strings, as the library holds them (sgl-kernel
    0.3.9.post2: the 16-slot format of 0.3.7-0.3.9.post2; 0.3.16.post3: the 17-slot format of
    0.3.14.post1-0.3.18.post2; sglang-kernel 0.4.2: 18 slots; sgl-kernel 0.3.21: 21 slots)."""
    from dgprecompile.keys import cxx_templates

    template = cxx_templates.TEMPLATES[cxx_templates.SK_RELEASE_TEMPLATE[version]]
    assert _so_string(version, b"&sm90_fp8_gemm_1d2d_impl<") == template.gemm
    assert _so_string(version, b"&transpose_fp32<") == template.transpose
    ctx = SkKeyContext.from_env("/x/include", (13, 0), {})
    base = ctx.flags().split(" -I/x/include ")[0]
    assert _so_string(version, b"--diag-suppress=39,161") == base.replace("20", "{}", 1)
    assert _so_string(version, b" -I{} --gpu-architecture=sm_{} ") == \
        "{} -I{} " + ctx.TAIL_FLAGS.replace("sm_90a", "sm_{}")
    assert _so_string(version, b"{}$${}$${}$${}$${}") == "{}$${}$${}$${}$${}"  # name, H, signature, flags, code
    # the DG_PRINT_CONFIGS text the device sweeps parse (sglang-kernel 0.4.2's, runs 1, 2, 4; the rebuilt sgl-kernel
    # releases', runs 5-7), so every release's prints read the same columns
    printed = _so_string(version, b"GEMM type: %d, kernel type: %d")
    assert "-> block M: %d, block N: %d" in printed
    assert printed == _so_string("0.4.2", b"GEMM type: %d, kernel type: %d")


def test_every_release_the_generation_claims_has_a_template():
    from dgprecompile.keys import cxx_templates
    from dgprecompile.runtimes import get_generation
    from dgprecompile.runtimes.deepgemm_cxx import SK_0320_KEY_VERSIONS, SK_037_KEY_VERSIONS, SK_KEY_VERSIONS

    claimed = [*SK_KEY_VERSIONS, *SK_037_KEY_VERSIONS, *SK_0320_KEY_VERSIONS]
    assert sorted(claimed) == sorted(cxx_templates.SK_RELEASE_TEMPLATE)  # each claimed once, each with a template
    gen = get_generation("sgl-kernel-waves")
    assert gen.usable_backends("0.4.2") == ["nvcc", "cxx", "sweep"] and gen.usable_backends("0.4.3") == ["cxx", "sweep"]
    assert not get_generation("sgl-kernel-cxx").models_kernels
