"""Shared test helpers: what the machine offers (nvcc, the legacy DeepGEMM) and small utilities."""

from __future__ import annotations

import importlib.util
import os
import shutil

import pytest

NVCC = next((p for p in ("/usr/local/cuda/bin/nvcc", "/usr/local/cuda-13.0/bin/nvcc", shutil.which("nvcc") or "")
             if p and os.path.isfile(p)), None)


def legacy_deepgemm_dir() -> str | None:
    spec = importlib.util.find_spec("deep_gemm")
    if spec is None or not spec.submodule_search_locations:
        return None
    pkg = list(spec.submodule_search_locations)[0]
    return pkg if os.path.isfile(os.path.join(pkg, "jit", "compiler.py")) else None


needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not found")
needs_legacy = pytest.mark.skipif(legacy_deepgemm_dir() is None,
                                  reason="the legacy DeepGEMM (sgl-kernel 0.3.5's deep_gemm) is not installed")


def sgl_deep_gemm_013_dir() -> str | None:
    """A folder holding sgl-deep-gemm 0.1.3's deep_gemm (made by `make setup`), or $DGP_SGL_DEEP_GEMM_013."""
    here = os.environ.get("DGP_SGL_DEEP_GEMM_013") or os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".venv", "sgl-deep-gemm-0.1.3")
    return here if os.path.isdir(os.path.join(here, "deep_gemm", "include", "deep_gemm")) else None


needs_dg013 = pytest.mark.skipif(sgl_deep_gemm_013_dir() is None,
                                 reason="sgl-deep-gemm 0.1.3 not installed beside the venv (make setup)")
