"""What every worker backend shares: a private staging root in the cache, and (for JITs whose keys
dgprecompile computes) the check-lock-build-install sequence around one kernel."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dgprecompile.cache.store import CacheStore
from dgprecompile.compile.backends import WorkItem
from dgprecompile.kernels import KernelSpec


class StagingWorker:
    def __init__(self, job: dict[str, Any]):
        self.store = CacheStore(job["cache_dir"])
        self.arch: str | None = job.get("arch")  # every built cubin is checked against it before it is installed
        self.store.ensure()
        self.staging = self.store.new_staging()

    def close(self) -> None:
        self.store.release_staging(self.staging)

    def install_staged(self, paths: list[Path], required: tuple[str, ...] = ()) -> list[bool]:
        """Move entries a JIT wrote into its staging root into the real cache, each whole and checked (the
        store's entry check): True where it was installed, False where an identical one was already there
        (adopted). A bad entry already there (a full disk's leftovers) is swapped for the new one."""
        installed = []
        for path in paths:
            if self.store.entry_problem(path.name, self.arch, required) not in (None, "missing"):
                self.store.replace_entry(path, self.arch, required)
                installed.append(True)
            else:
                installed.append(self.store.install_entry(path, self.arch, required))
        return installed


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

    def _problem(self, entry: str) -> str | None:
        """None when a loadable entry is there: every required file present, cubins whole and for the planned
        architecture (an empty kernel.cubin left by a full disk is not "already cached")."""
        return self.store.entry_problem(entry, self.arch, self.required_files)

    def compile(self, item: WorkItem) -> tuple[str, list[str], float]:
        spec = KernelSpec(item.family, tuple(item.params.items()))
        entry = self.entry_name(spec)
        if self._problem(entry) is None:
            return "cached", [entry], 0.0
        with self.store.kernel_lock(item.kernel):
            problem = self._problem(entry)
            if problem is None:  # another warm finished it while we waited
                return "cached", [entry], 0.0
            staged, seconds = self.build(item, spec, entry)
            if problem == "missing":
                installed = self.store.install_entry(staged, self.arch, self.required_files)
                return ("compiled" if installed else "adopted"), [entry], seconds
            self.store.replace_entry(staged, self.arch, self.required_files)  # a bad entry: swap in the good one
            return "replaced", [entry], seconds
