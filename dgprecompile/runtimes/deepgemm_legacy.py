"""The legacy DeepGEMM runtime: the Python JIT of sgl-kernel <= 0.3.6 (its jit_kernels build each kernel with the
nvcc on the path; the startup hook refuses its compiles in strict mode)."""

from __future__ import annotations

from dgprecompile.runtimes.base import StrictBy
from dgprecompile.runtimes.deepgemm import Generation

LEGACY = Generation(
    id="legacy", label="legacy Python-JIT DeepGEMM (sgl-kernel <= 0.3.6)",
    heuristic="legacy",
    key_scheme="legacy", key_versions=None,
    backends=("legacy",),
    # the nvcc path string and the absolute include path are part of this JIT's key
    fingerprint_fields=("deepgemm.generation", "deepgemm.headers_sha256", "deepgemm.package_dir", "nvcc.path",
                        "nvcc.release", "env", "num_sms"),
    entry_files=("kernel.cubin",), strict_by=StrictBy.HOOK, trace_api="legacy", load_tasks=1,
    gpu_validated="every m against the library's get_best_configs; CPU-built entries served an H200 run",
)
