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
