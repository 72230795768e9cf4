"""Triton's cache-key parts on this machine (issue 21 record): triton_key and its libtriton part, the backend hash."""
import hashlib, json, os, platform, sysconfig
import triton
from triton.runtime.cache import triton_key
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.compiler import CUDABackend
lib = os.path.join(os.path.dirname(triton.__file__), "_C", "libtriton." + sysconfig.get_config_var("EXT_SUFFIX").split(".")[-1])
print(json.dumps({"python": platform.python_version(), "triton": triton.__version__, "triton_file": triton.__file__,
                  "triton_key_sha256": hashlib.sha256(triton_key().encode()).hexdigest(),
                  "libtriton_sha256": hashlib.sha256(open(lib, "rb").read()).hexdigest(),
                  "backend_hash": CUDABackend(GPUTarget("cuda", 90, 32)).hash()}))
