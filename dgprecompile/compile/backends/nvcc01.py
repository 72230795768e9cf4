"""GPU-free backend for sgl-deep-gemm 0.1.x: build the C++ JIT's cache entries with nvcc directly.

cxx_keys reproduces that JIT's kernel.cu and entry name exactly, so this backend writes kernel.cu, runs the same
nvcc command line the JIT runs (``nvcc kernel.cu -cubin -o kernel.cubin <flags>`` from a scratch directory), and
moves the finished entry into the cache with one rename. No CUDA device, no torch: it runs on a CPU-only CI runner
with the same nvcc release and the sgl-deep-gemm wheel installed at the same path as on the training nodes.
"""

from __future__ import annotations

import shlex
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from dgprecompile.compile.backends import WorkItem
from dgprecompile.compile.backends.base import KeyedWorker
from dgprecompile.errors import CompileFailed
from dgprecompile.kernels import KernelSpec
from dgprecompile.keys.sgl_deep_gemm_01 import CxxKeyContext


class NvccCxxWorker(KeyedWorker):
    def __init__(self, job: dict[str, Any]):
        super().__init__(job)
        self.ctx = CxxKeyContext(**job["key_context"])
        self.nvcc = job["nvcc"]
        self.scratch = tempfile.mkdtemp(prefix="nvcc-", dir=self.staging)

    def entry_name(self, spec: KernelSpec) -> str:
        return self.ctx.entry_name(spec)

    def build(self, item: WorkItem, spec: KernelSpec, entry: str) -> tuple[Path, float]:
        staged = Path(self.staging) / entry
        staged.mkdir()
        (staged / "kernel.cu").write_text(self.ctx.source(spec))
        command = [self.nvcc, str(staged / "kernel.cu"), "-cubin", "-o", str(staged / "kernel.cubin"),
                   *shlex.split(self.ctx.flags())]
        start = time.perf_counter()
        proc = subprocess.run(command, cwd=self.scratch, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        cubin = staged / "kernel.cubin"
        if proc.returncode != 0 or not cubin.is_file() or cubin.stat().st_size == 0:
            raise CompileFailed(f"nvcc failed for {item.kernel}:\n{(proc.stdout + proc.stderr).strip()[-3000:]}")
        return staged, seconds
