"""GPU-free backend for sgl-deep-gemm 0.1.x: build the C++ JIT's cache entries with nvcc directly.

cxx_keys reproduces that JIT's kernel.cu and entry name exactly, so this backend writes kernel.cu, runs the same
nvcc command line the JIT runs (``nvcc kernel.cu -cubin -o kernel.cubin <flags>`` from a scratch directory), and
moves the finished entry into the cache with one rename. No CUDA device, no torch: it runs on a CPU-only CI runner
with the same nvcc release and the sgl-deep-gemm wheel installed at the same path as on the training nodes.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from dgprecompile.backends import WorkItem
from dgprecompile.cachestore import CacheStore
from dgprecompile.cxx_keys import CxxKeyContext
from dgprecompile.errors import CompileFailed
from dgprecompile.kernels import KernelSpec


class NvccCxxWorker:
    def __init__(self, job: dict[str, Any]):
        self.store = CacheStore(job["cache_dir"])
        self.store.ensure()
        self.ctx = CxxKeyContext(**job["key_context"])
        self.nvcc = job["nvcc"]
        self.staging = self.store.new_staging()
        self.scratch = tempfile.mkdtemp(prefix="nvcc-", dir=self.staging)

    def close(self) -> None:
        import shutil

        shutil.rmtree(self.staging, ignore_errors=True)

    def _present(self, entry: str) -> bool:
        path = self.store.entry_path(entry)
        return (path / "kernel.cu").is_file() and (path / "kernel.cubin").is_file()

    def compile(self, item: WorkItem) -> tuple[str, list[str], float]:
        spec = KernelSpec(item.family, tuple(item.params.items()))
        entry = self.ctx.entry_name(spec)
        if self._present(entry):
            return "cached", [entry], 0.0
        with self.store.kernel_lock(item.kernel):
            if self._present(entry):
                return "cached", [entry], 0.0
            staged = Path(self.staging) / entry
            staged.mkdir()
            (staged / "kernel.cu").write_text(self.ctx.source(spec))
            command = [self.nvcc, str(staged / "kernel.cu"), "-cubin", "-o", str(staged / "kernel.cubin"),
                       *shlex.split(self.ctx.flags())]
            start = time.perf_counter()
            proc = subprocess.run(command, cwd=self.scratch, capture_output=True, text=True)
            seconds = time.perf_counter() - start
            if proc.returncode != 0 or not (staged / "kernel.cubin").is_file():
                raise CompileFailed(f"nvcc failed for {item.kernel}:\n{(proc.stdout + proc.stderr).strip()[-3000:]}")
            if os.path.getsize(staged / "kernel.cubin") == 0:
                raise CompileFailed(f"nvcc wrote an empty cubin for {item.kernel}")
            installed = self.store.install_entry(staged)
            return ("compiled" if installed else "adopted"), [entry], seconds
