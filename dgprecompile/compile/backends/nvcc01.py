"""GPU-free backend for the C++-JIT sgl-deep-gemm releases whose keys dgprecompile computes (0.1.x and 0.2.x).

The generation's key context (keys/sgl_deep_gemm_01.py for 0.1.x, keys/deepjit.py for 0.2.x DeepJIT) reproduces
that JIT's kernel.cu, entry name and nvcc command line exactly, so this backend writes kernel.cu, runs that nvcc
command (from the directory the runtime runs it from), adds the files the runtime writes beside it (0.2.x:
meta.json and the .committed marker) and moves the finished entry into the cache with one rename. No CUDA device,
no torch: it runs on a CPU-only CI runner with the same nvcc release (0.2.x: the same `nvcc --version` text) and
the same sgl-deep-gemm release (0.1.x: installed at the same path as on the training nodes).
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from dgprecompile.compile.backends import WorkItem
from dgprecompile.compile.backends.base import KeyedWorker
from dgprecompile.errors import CompileFailed
from dgprecompile.keys.schemes import key_class
from dgprecompile.runtimes.items import KernelSpec


class NvccCxxWorker(KeyedWorker):
    def __init__(self, job: dict[str, Any]):
        super().__init__(job)
        self.ctx = key_class(job["key_scheme"])(**job["key_context"])
        self.naming = self.ctx
        self.nvcc = job["nvcc"]
        self.scratch = tempfile.mkdtemp(prefix="nvcc-", dir=self.staging)

    def entry_name(self, spec: KernelSpec) -> str:
        return self.ctx.entry_name(spec)

    def build(self, item: WorkItem, spec: KernelSpec, entry: str) -> tuple[Path, float]:
        staged = Path(self.staging) / entry
        staged.mkdir()
        (staged / "kernel.cu").write_text(self.ctx.source(spec))
        command = self.ctx.nvcc_command(self.nvcc, str(staged))
        start = time.perf_counter()
        proc = subprocess.run(command, cwd=self.ctx.compile_cwd(str(staged), self.scratch), capture_output=True,
                              text=True)
        seconds = time.perf_counter() - start
        cubin = staged / "kernel.cubin"
        if proc.returncode != 0 or not cubin.is_file() or cubin.stat().st_size == 0:
            raise CompileFailed(f"nvcc failed for {item.kernel}:\n{(proc.stdout + proc.stderr).strip()[-3000:]}")
        self.ctx.finish_entry(str(staged), self.nvcc, command)
        return staged, seconds
