"""The generated code and key rules of every C++-JIT sgl-deep-gemm release, checked against the releases' own files.

Device-made entry names are checked in tests/test_generation_records.py; this file checks what can be read here:
the format strings inside each installed release's _C.so, DeepJIT's include tracking over the real headers, and
the release lists the key modules claim.
"""

from __future__ import annotations

import os
import shutil

import pytest
from helpers import needs_sgl_deep_gemm, sgl_deep_gemm_dir

from dgprecompile.keys import cxx_templates
from dgprecompile.keys.deepjit import DeepJitKeyContext, Fnv1a, parse_include, source_hash
from dgprecompile.planning.heuristics.sm90_cxx import Sm90CxxHeuristic, transpose_kernel
from dgprecompile.runtimes import get_generation
from dgprecompile.runtimes.deepgemm_cxx import SDG_01_KEY_VERSIONS, SDG_02_KEY_VERSIONS
from dgprecompile.runtimes.items import KernelType

NVCC_TEXT = ("nvcc: NVIDIA (R) Cuda compiler driver\nCopyright (c) 2005-2025 NVIDIA Corporation\n"
             "Built on Wed_Aug_20_01:58:59_PM_PDT_2025\nCuda compilation tools, release 13.0, V13.0.88\n"
             "Build cuda_13.0.r13.0/compiler.36424714_0\n")
DENSE = Sm90CxxHeuristic().kernel(KernelType.GEMM_NT_F8F8BF16, 100, 1792, 6144, 1, 132)


def _format_string(version: str, needle: bytes) -> str:
    data = open(os.path.join(sgl_deep_gemm_dir(version), "deep_gemm", "_C.so"), "rb").read()
    at = data.find(needle)
    assert at > 0 and data.find(needle, at + 1) < 0, f"{needle!r} once in {version}'s _C.so"
    return data[data.rfind(b"\0", 0, at) + 1:data.find(b"\0", at)].decode()


@pytest.mark.parametrize("version", ["0.1.3", "0.1.7", "0.2.0", "0.2.2"])
def test_templates_are_the_format_strings_in_the_release(version):
    if sgl_deep_gemm_dir(version) is None:
        pytest.skip(f"sgl-deep-gemm {version} not installed beside the venv (make setup)")
    template = cxx_templates.template_for(version)
    assert _format_string(version, b"&sm90_fp8_gemm_1d2d_impl<") == template.gemm
    assert _format_string(version, b"&transpose_fp32<") == template.transpose


def test_every_release_the_generations_claim_has_a_template():
    assert set(SDG_01_KEY_VERSIONS) | set(SDG_02_KEY_VERSIONS) == set(cxx_templates.RELEASE_TEMPLATE)
    assert all(v.startswith("0.1.") for v in SDG_01_KEY_VERSIONS)
    assert all(cxx_templates.template_for(v).id.startswith("0.2") for v in SDG_02_KEY_VERSIONS)
    assert cxx_templates.template_for("0.1.8rc0") is None
    assert not get_generation("sgl-deep-gemm-0.2").computes_keys("0.2.4rc0")
    assert get_generation("sgl-deep-gemm-0.2").usable_backends("0.2.4rc0") == ["cxx", "sweep"]
    assert get_generation("sgl-deep-gemm-0.2").usable_backends("0.2.0") == ["nvcc", "cxx", "sweep"]


def test_templates_fill_every_slot_and_differ_where_the_releases_differ():
    # the sgl-deep-gemm formats (sgl-kernel's take their own model's kernels: tests/test_sk*_generation.py)
    sources = {tid: cxx_templates.instantiation(DENSE, cxx_templates.TEMPLATES[tid])
               for tid in set(cxx_templates.RELEASE_TEMPLATE.values())}
    assert sources["0.1.4"] == sources["0.2.0"]  # one format and fill; 0.2.0 differs in transpose_fp32 and the key
    assert len({sources[t] for t in ("0.1.0", "0.1.4", "0.2.2", "0.2.5")}) == 4
    assert all("{}" not in s for s in sources.values())
    assert "cutlass::bfloat16_t" not in sources["0.1.0"] and "cutlass::bfloat16_t" in sources["0.1.4"]
    assert "cutlass::bfloat16_t,\n        epilogue::transform::EpilogueIdentity, 128\n" in sources["0.2.2"]
    assert "cutlass::bfloat16_t, 128\n" in sources["0.2.5"]
    t4 = cxx_templates.instantiation(transpose_kernel(6144), cxx_templates.TEMPLATES["0.2.0"])
    assert "512, 64, 48, 128" in t4


def test_fnv1a_prefixes_every_update_with_its_length():
    assert Fnv1a().update("ab").hexdigest() != Fnv1a().update("a").update("b").hexdigest()
    assert Fnv1a().update("").hexdigest() != Fnv1a().hexdigest()
    assert len(Fnv1a().update("x").hexdigest()) == 32


def test_include_lines_as_deepjit_parses_them():
    assert parse_include(b"  #  include <deep_gemm/a.cuh>") == b"deep_gemm/a.cuh"
    assert parse_include(b"#include <cute/tensor.hpp>") is None
    assert parse_include(b"// #include <deep_gemm/a.cuh>") is None
    with pytest.raises(Exception, match="rejects"):
        parse_include(b'#include "deep_gemm/a.cuh"')


@needs_sgl_deep_gemm("0.2.0")
def test_source_hash_follows_the_included_headers(tmp_path):
    include = tmp_path / "include"
    shutil.copytree(os.path.join(sgl_deep_gemm_dir("0.2.0"), "deep_gemm", "include", "deep_gemm"),
                    include / "deep_gemm")
    code = cxx_templates.instantiation(DENSE, cxx_templates.TEMPLATES["0.2.0"])
    base = source_hash(code, str(include))
    deep = include / "deep_gemm" / "common" / "utils.cuh"  # included by impls/sm90_fp8_gemm_1d2d.cuh
    deep.write_text(deep.read_text() + "\n")
    assert source_hash(code, str(include) + "/") != base  # (a new include dir string: no cached header hash)
    unrelated = include / "deep_gemm" / "impls" / "sm100_bf16_gemm.cuh"
    unrelated.write_text(unrelated.read_text() + "\n")
    deep.write_text(deep.read_text()[:-1])
    assert source_hash(code, str(include) + "//") == base


@needs_sgl_deep_gemm("0.2.0")
def test_deepjit_key_inputs():
    inc = os.path.join(sgl_deep_gemm_dir("0.2.0"), "deep_gemm", "include")
    base = DeepJitKeyContext.from_env(inc, NVCC_TEXT, "0.2.0", {})
    assert base.cutlass == 421  # CUTLASS 4.2.1 headers in the wheel
    name = base.entry_name(DENSE)
    assert name.startswith("sm90_fp8_gemm_1d2d.") and len(name.split(".")[1]) == 32
    assert DeepJitKeyContext.from_env(inc + "/.", NVCC_TEXT, "0.2.0", {}).entry_name(DENSE) == name  # path: not hashed
    assert DeepJitKeyContext.from_env(inc, NVCC_TEXT + " ", "0.2.0", {}).entry_name(DENSE) != name  # whole --version
    assert DeepJitKeyContext.from_env(inc, NVCC_TEXT, "0.2.0", {"DG_JIT_DEBUG": "yes"}).entry_name(DENSE) != name
    assert DeepJitKeyContext.from_env(inc, NVCC_TEXT, "0.2.0", {"DJ_JIT_WITH_LINEINFO": "1"}).entry_name(DENSE) != name
    assert DeepJitKeyContext.from_env(inc, NVCC_TEXT, "0.2.0", {"DG_JIT_DUMP_SASS": "1"}).entry_name(DENSE) == name
    with pytest.raises(Exception, match="not a boolean"):
        DeepJitKeyContext.from_env(inc, NVCC_TEXT, "0.2.0", {"DG_JIT_DEBUG": "maybe"})


# a release of each generation whose key dgprecompile computes, as it lies beside the venv (the folder and the
# binary or source file that would hold the switch's name)
NVRTC_PROBES = {"legacy": (None, "deep_gemm/jit/compiler.py"),  # the installed sgl-kernel 0.3.5 deep_gemm
                "sgl-deep-gemm-0.1": ("sgl-deep-gemm-0.1.3", "deep_gemm/_C.so"),
                "sgl-deep-gemm-0.2": ("sgl-deep-gemm-0.2.2", "deep_gemm/_C.so"),
                "sgl-kernel-waves": ("sgl-kernel-0.3.16.post3", "deep_gemm/deep_gemm_cpp.abi3.so"),
                "sgl-kernel-waves-0.3.7": ("sgl-kernel-0.3.9.post2", "deep_gemm/deep_gemm_cpp.abi3.so"),
                "sgl-kernel-waves-0.3.20": ("sgl-kernel-0.3.21", "deep_gemm/deep_gemm_cpp.abi3.so")}


@pytest.mark.parametrize("generation", sorted(NVRTC_PROBES))
def test_the_nvrtc_refusal_is_where_the_release_has_the_switch(generation):
    """One refusal (exit 2, InputError) for every generation whose runtime reads DG_JIT_USE_NVRTC, read from its
    own binary; none where the release has no such switch (0.2.x DeepJIT)."""
    from helpers import beside_venv, legacy_deepgemm_dir

    from dgprecompile.errors import InputError

    folder, binary = NVRTC_PROBES[generation]
    root = legacy_deepgemm_dir() if folder is None else beside_venv(folder, binary)
    root = root and (os.path.dirname(root) if folder is None else root)
    if root is None:
        pytest.skip(f"{folder} is not beside the venv")
    has_switch = b"DG_JIT_USE_NVRTC" in open(os.path.join(root, binary), "rb").read()
    gen = get_generation(generation)
    assert (gen.nvrtc_switch == "DG_JIT_USE_NVRTC") == has_switch
    if has_switch:
        with pytest.raises(InputError, match="DG_JIT_USE_NVRTC is set") as info:
            gen.refuse_nvrtc({"DG_JIT_USE_NVRTC": "1"})
        assert info.value.hint
    else:
        gen.refuse_nvrtc({"DG_JIT_USE_NVRTC": "1"})
    gen.refuse_nvrtc({"DG_JIT_USE_NVRTC": "0"})
