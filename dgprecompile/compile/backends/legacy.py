"""Legacy backend: the Python-JIT DeepGEMM of sglang 0.5.0-0.5.1.x (sgl-kernel <= 0.3.6).

That JIT generates and builds a kernel without running it, so this backend needs no GPU: it asks the
library itself (FP8GemmRuntime.generate + jit.build) to compile each planned kernel with nvcc, which makes
the entries byte-for-byte the ones the runtime looks up. It builds into a private staging root and moves
each finished entry into the cache with one rename.
"""

from __future__ import annotations

import contextlib
import io
import os
import time
from pathlib import Path
from typing import Any

from dgprecompile.compile.backends import WorkItem
from dgprecompile.compile.backends.base import KeyedWorker
from dgprecompile.errors import CompileFailed, EnvironmentProblem
from dgprecompile.keys.legacy import LegacyKeyContext
from dgprecompile.runtimes.items import KernelSpec


def preload(job: dict[str, Any]) -> None:
    """The zygote's imports: torch and the legacy JIT, once for every worker it forks."""
    import_legacy(None)


def import_legacy(nvcc_path: str | None):
    """Import the legacy JIT (build, FP8GemmRuntime, GemmType) without touching CUDA."""
    import torch.utils.cpp_extension as cpp_extension

    if cpp_extension.CUDA_HOME is None and nvcc_path:
        # A CPU build of torch reports no CUDA home, and this JIT joins it into a path before it reads
        # DG_JIT_NVCC_COMPILER. Point it at the toolkit of the nvcc we compile with.
        cpp_extension.CUDA_HOME = str(Path(nvcc_path).resolve().parent.parent)
    try:
        import deep_gemm.jit.compiler as compiler
        from deep_gemm.jit import build
        from deep_gemm.jit_kernels.runtime import FP8GemmRuntime, GemmType
    except ImportError as exc:
        raise EnvironmentProblem(f"cannot import the legacy DeepGEMM: {exc}") from None
    if compiler.CUDA_HOME is None and cpp_extension.CUDA_HOME is not None:
        compiler.CUDA_HOME = cpp_extension.CUDA_HOME  # it copied the name at import time
    return build, FP8GemmRuntime, GemmType


class LegacyWorker(KeyedWorker):
    def __init__(self, job: dict[str, Any]):
        super().__init__(job)
        self.ctx = LegacyKeyContext(**job["key_context"])
        self.naming = self.ctx
        # The JIT reads both at its first build (lru-cached), so they must be set before that.
        os.environ["DG_JIT_CACHE_DIR"] = str(self.staging)
        os.environ["DG_JIT_NVCC_COMPILER"] = self.ctx.nvcc_path
        self._build, self._runtime, self._gemm_type = import_legacy(self.ctx.nvcc_path)

    def entry_name(self, spec: KernelSpec) -> str:
        return self.ctx.entry_name(spec)

    def build(self, item: WorkItem, spec: KernelSpec, entry: str) -> tuple[Path, float]:
        p = item.params
        kwargs = {
            "N": p["N"], "K": p["K"], "BLOCK_M": p["BM"], "BLOCK_N": p["BN"], "BLOCK_K": 128,
            "BLOCK_N_PADDING": p["PAD"], "SWIZZLE_D_MODE": p["SW"], "NUM_GROUPS": p["G"], "NUM_STAGES": p["ST"],
            "NUM_TMA_THREADS": 128, "NUM_MATH_THREADS_PER_GROUP": 128, "NUM_TMA_MULTICAST": p["MC"],
            "IS_TMA_MULTICAST_ON_A": p["A"], "GEMM_TYPE": self._gemm_type[p["T"]],
        }
        start = time.perf_counter()
        log = io.StringIO()  # the JIT prints nvcc's output on failure; keep it for the error message
        try:
            with contextlib.redirect_stdout(log):
                runtime = self._build(item.family, self._runtime.generate(kwargs), self._runtime, kwargs)
        except AssertionError as exc:
            raise CompileFailed(f"nvcc failed for {item.kernel}: {exc}\n{log.getvalue().strip()}") from None
        built = Path(runtime.path)
        if built.name != entry:
            raise CompileFailed(f"the JIT filed {item.kernel} as {built.name}, not {entry}: the key inputs "
                                "dgprecompile computed differ from the library's (report this)")
        return built, time.perf_counter() - start
