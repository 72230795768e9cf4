"""What every worker backend shares: a private staging root in the cache, and (for JITs whose keys
dgprecompile computes) the check-lock-build-install sequence around one kernel."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from dgprecompile.cache.store import CacheStore
from dgprecompile.compile.backends import WorkItem
from dgprecompile.kernels import KernelSpec


class StagingWorker:
    def __init__(self, job: dict[str, Any]):
        self.store = CacheStore(job["cache_dir"])
        self.store.ensure()
        self.staging = self.store.new_staging()

    def close(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)


class KeyedWorker(StagingWorker):
    """A backend that knows each kernel's entry name before building it."""

    def __init__(self, job: dict[str, Any]):
        super().__init__(job)
        self.required_files = tuple(job["entry_files"])  # what makes an entry count as there for this runtime

    def entry_name(self, spec: KernelSpec) -> str:
        raise NotImplementedError

    def build(self, item: WorkItem, spec: KernelSpec, entry: str) -> tuple[Path, float]:
        """Build the entry in the staging root; return its directory and the compile seconds."""
        raise NotImplementedError

    def _present(self, entry: str) -> bool:
        path = self.store.entry_path(entry)
        return all((path / name).is_file() for name in self.required_files)

    def compile(self, item: WorkItem) -> tuple[str, list[str], float]:
        spec = KernelSpec(item.family, tuple(item.params.items()))
        entry = self.entry_name(spec)
        if self._present(entry):
            return "cached", [entry], 0.0
        with self.store.kernel_lock(item.kernel):
            if self._present(entry):  # another warm finished it while we waited
                return "cached", [entry], 0.0
            staged, seconds = self.build(item, spec, entry)
            installed = self.store.install_entry(staged)
            return ("compiled" if installed else "adopted"), [entry], seconds
