"""Triton's cache-key parts on this machine (issue 21 record): triton_key and its libtriton part, the backend hash.

usage: python3 bench/results/2026-12-02-h200-triton-key-diag/triton_keyparts.py   (prints one JSON line)
"""

import hashlib
import json
import os
import platform
import sysconfig

import triton
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.compiler import CUDABackend
from triton.runtime.cache import triton_key

ext = sysconfig.get_config_var("EXT_SUFFIX").split(".")[-1]
lib = os.path.join(os.path.dirname(triton.__file__), "_C", f"libtriton.{ext}")
with open(lib, "rb") as f:
    lib_sha = hashlib.sha256(f.read()).hexdigest()
print(json.dumps({"python": platform.python_version(), "triton": triton.__version__, "triton_file": triton.__file__,
                  "triton_key_sha256": hashlib.sha256(triton_key().encode()).hexdigest(),
                  "libtriton_sha256": lib_sha, "backend_hash": CUDABackend(GPUTarget("cuda", 90, 32)).hash()}))
