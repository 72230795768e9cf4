"""The CUDA driver's JIT cache: PTX the driver compiles for the GPU when a module is loaded, kept on disk.

A kernel shipped as PTX only (no SASS for the GPU's architecture, or CUDA_FORCE_PTX_JIT=1) is compiled by the CUDA
driver when its module loads, and the result is kept in the driver's compute cache under ``CUDA_CACHE_PATH``
(default ``~/.nv/ComputeCache``; the CUDA C++ Programming Guide's "CUDA Environment Variables":
CUDA_CACHE_DISABLE, CUDA_CACHE_MAXSIZE, CUDA_CACHE_PATH, CUDA_FORCE_PTX_JIT). The driver keeps an ``index`` file
at the cache's root beside the compiled modules, so that file is its bookkeeping, not an entry.

What dgprecompile warms are cubins for the planned architecture (DeepGEMM's kernels, Triton's entries), so a
module the driver compiles at run time is a compile no other family names: `launch --capture` points
CUDA_CACHE_PATH into the cache and counts what appears there. Not refused (the driver has no switch that refuses
a JIT: CUDA_CACHE_DISABLE only stops the caching), not filed (the driver's own layout, entries nested under hashed
directories). Not proven on a GPU: no run has yet counted one of its entries.
"""

from __future__ import annotations

from dgprecompile.runtimes.captured import CacheFamily

CUDA_DRIVER = CacheFamily("cuda-driver", "CUDA driver PTX JIT", "cuda-driver", ("CUDA_CACHE_PATH",), (), "files",
                          filed=False, hook_target=None, not_entries=("index",))
