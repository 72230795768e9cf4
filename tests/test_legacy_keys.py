"""Legacy JIT cache keys computed without the library equal the library's own."""

from __future__ import annotations

import os

import pytest
from helpers import NVCC, needs_legacy, needs_nvcc

from dgprecompile.host.toolchain import find_deepgemm, find_nvcc
from dgprecompile.keys.legacy import LegacyKeyContext, kernel_source
from dgprecompile.keys.schemes import key_context
from dgprecompile.planning.plan import PlanRequest
from dgprecompile.planning.request import plan_from_request

pytestmark = needs_legacy


def _plan():
    return plan_from_request(PlanRequest(model="Qwen3-Coder-480B", tp=8, ep=8, sglang="0.5.1"))


def test_generated_source_is_byte_identical():
    from deep_gemm.jit_kernels.runtime import FP8GemmRuntime, GemmType

    from dgprecompile.planning.heuristics.legacy import template_kwargs

    for spec in _plan().kernels.values():
        kwargs = template_kwargs(spec)
        kwargs["GEMM_TYPE"] = GemmType[kwargs["GEMM_TYPE"]]
        assert FP8GemmRuntime.generate(kwargs) == kernel_source(spec)


@needs_nvcc
def test_entry_name_matches_the_library_build(tmp_path, monkeypatch):
    """One real compile through the library's own build(): the directory it makes is the name we compute."""
    import subprocess
    import sys

    plan = _plan()
    spec = min(plan.kernels.values(), key=lambda s: dict(s.params)["N"] * dict(s.params)["K"])
    ctx = LegacyKeyContext.build(find_deepgemm(), find_nvcc(NVCC))
    code = f"""
import os, json, torch.utils.cpp_extension as ce
ce.CUDA_HOME = {os.path.dirname(os.path.dirname(os.path.realpath(NVCC)))!r}
from deep_gemm.jit import build
from deep_gemm.jit_kernels.runtime import FP8GemmRuntime, GemmType
kw = json.loads({__import__('json').dumps(__import__('dgprecompile.planning.heuristics.legacy', fromlist=['x']).template_kwargs(spec))!r})
kw['GEMM_TYPE'] = GemmType[kw['GEMM_TYPE']]
print(os.path.basename(build({spec.family!r}, FP8GemmRuntime.generate(kw), FP8GemmRuntime, kw).path))
"""
    env = {**os.environ, "DG_JIT_CACHE_DIR": str(tmp_path), "DG_JIT_NVCC_COMPILER": NVCC}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == ctx.entry_name(spec)


@pytest.mark.parametrize("env,changed", [({"DG_JIT_OVERRIDE_CPP_STANDARD": "17"}, True),
                                         ({"DG_JIT_PTXAS_VERBOSE": "1"}, True), ({}, False)])
def test_key_inputs_change_the_name(env, changed):
    install = find_deepgemm()
    base = LegacyKeyContext("/x", "/usr/local/cuda/bin/nvcc", (13, 0))
    spec = next(iter(_plan().kernels.values()))
    a = LegacyKeyContext(install.package_dir, "/usr/local/cuda/bin/nvcc", (13, 0))
    b = LegacyKeyContext(install.package_dir, "/usr/local/cuda/bin/nvcc", (13, 0),
                         cpp_standard=int(env.get("DG_JIT_OVERRIDE_CPP_STANDARD", 20)),
                         ptxas_verbose="DG_JIT_PTXAS_VERBOSE" in env)
    assert (a.entry_name(spec) != b.entry_name(spec)) is changed
    # the nvcc path string is part of the key, not just the release
    c = LegacyKeyContext(install.package_dir, "/opt/cuda/bin/nvcc", (13, 0))
    assert a.entry_name(spec) != c.entry_name(spec)
    assert base.include_dir == "/x/jit/../include"


def test_nvrtc_is_refused():
    from dgprecompile.errors import InputError
    from dgprecompile.runtimes import get_generation

    with pytest.raises(InputError, match="DG_JIT_USE_NVRTC"):  # the one refusal, generations.py refuse_nvrtc
        key_context(get_generation("legacy"), find_deepgemm(), find_nvcc(NVCC), {"DG_JIT_USE_NVRTC": "1"})
