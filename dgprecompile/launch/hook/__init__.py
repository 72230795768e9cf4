"""The startup hook `dgprecompile launch` injects into the trainer through the environment.

This directory is put first on the child's PYTHONPATH, so Python's `site` imports our ``sitecustomize`` (which
chains to any other ``sitecustomize`` on the path). It holds only ``sitecustomize.py``, ``_dgprecompile_hook.py``,
``_dgprecompile_tvm_ffi.py``, ``_dgprecompile_inductor.py`` and ``_dgprecompile_flashinfer.py`` (stdlib only: the
trainer's interpreter may not have dgprecompile installed) and ``bin/nvcc``, the strict-mode
nvcc stand-in for the C++ JITs. Nothing here imports DeepGEMM or torch eagerly.
"""

from __future__ import annotations

import os

HOOK_DIR = os.path.dirname(os.path.abspath(__file__))
NVCC_STANDIN = os.path.join(HOOK_DIR, "bin", "nvcc")
