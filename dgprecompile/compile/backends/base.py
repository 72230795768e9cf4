"""What every worker backend shares: a private staging root in the cache, and (for JITs whose keys
dgprecompile computes) the check-lock-build-install sequence around one kernel."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

from dgprecompile.cache.store import UNVOUCHED, CacheStore
from dgprecompile.compile.backends import WorkItem
from dgprecompile.errors import CompileFailed
from dgprecompile.runtimes.items import KernelSpec

UNVOUCHED_WHY = "not recorded in the index, and its bytes differ from a fresh build"


def import_from_sglang(name: str):
    """Import the installed sglang's module ``name`` for a builder, without running ``sglang/__init__.py``.

    That file is SGLang's public front end: it applies its transformers patches and imports its frontend language
    (transformers, torch._dynamo, torch.distributed.tensor: about 8 of the 20 s a warm's zygote spent importing
    sglang 0.5.23's builder module, bench/results/2026-12-06-h100-torch214-stack0523/zygote-import), none of which
    a JIT build reads: the package is entered as a bare one (its path, its spec), so its submodules import as
    they would. A process that imported sglang already keeps what it has. A failing import chain is the user's
    environment: one CompileFailed that says where."""
    if "sglang" not in sys.modules:
        spec = importlib.util.find_spec("sglang")
        if spec is not None and spec.submodule_search_locations is not None:
            package = types.ModuleType("sglang")
            package.__path__ = list(spec.submodule_search_locations)
            package.__spec__, package.__file__ = spec, spec.origin
            sys.modules["sglang"] = package
    try:
        return importlib.import_module(name)
    except Exception as exc:
        raise CompileFailed(f"cannot import {name} from the installed sglang: {type(exc).__name__}: {exc}") from None


class StagingWorker:
    replaced_why: str | None = None  # what was wrong with the entry the last "replaced" compile swapped out

    def __init__(self, job: dict[str, Any]):
        self.store = CacheStore(job["cache_dir"])
        self.arch: str | None = job.get("arch")  # every built cubin is checked against it before it is installed
        self.store.ensure()
        self.staging = self.store.new_staging()

    def close(self) -> None:
        self.store.release_staging(self.staging)

    def install_staged(self, paths: list[Path], required: tuple[str, ...] = (), kernel: str = "") -> list[bool]:
        """Move entries a JIT wrote into its staging root into the real cache, each whole and checked (the
        store's entry check): True where it was installed or replaced, False where one with the same bytes was
        already there (adopted). One that differs from the fresh build in any way (a full disk's leftovers, other
        bytes, a symbolic link, bytes other than the index recorded under ``kernel`` or as an extra entry) is swapped
        for it: a JIT that just built an entry never adopts a different one."""
        index = self.store.read_index()
        installed = []
        for path in paths:
            changed = self.store.recorded_problem(kernel, path.name, self.arch, index=index) is not None
            how = self.store.install_or_replace(path, self.arch, required, changed=changed)
            installed.append(how != "adopted")
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

    naming = None  # the key context (keys/*: name_for_source), so an entry's kernel.cu is checked against its name

    def _problem(self, kernel: str, entry: str) -> str | None:
        """None when a loadable entry is there whose bytes are the ones the index recorded for it by a build and
        whose content agrees with its name: every required file present, cubins whole, for the planned
        architecture and of the kernel kernel.cu instantiates, kernel.cu the source of the entry's key, nothing a
        symbolic link (an empty kernel.cubin left by a full disk, or another kernel's cubin copied over it, is not
        "already cached"). An entry the index does not vouch for (no record, or an ``adopted`` one) is UNVOUCHED:
        its structure is checked, its bytes are not, so compile() builds it afresh and compares."""
        problem = self.store.entry_problem(entry, self.arch, self.required_files, self.naming)
        if problem is not None:
            return problem
        index = self.store.read_index()
        problem = self.store.recorded_problem(kernel, entry, self.arch, index=index)
        if problem is None and not self.store.vouched(kernel, entry, index=index):
            return UNVOUCHED  # loadable, but a flipped byte in its code would look the same: build and compare
        return problem

    def compile(self, item: WorkItem) -> tuple[str, list[str], float]:
        spec = KernelSpec(item.family, tuple(item.params.items()))
        entry = self.entry_name(spec)
        if self._problem(item.kernel, entry) is None:
            return "cached", [entry], 0.0
        with self.store.kernel_lock(item.kernel):
            problem = self._problem(item.kernel, entry)
            if problem is None:  # another warm finished it while we waited
                return "cached", [entry], 0.0
            staged, seconds = self.build(item, spec, entry)
            self.replaced_why = UNVOUCHED_WHY if problem == UNVOUCHED else problem
            # a bad or changed entry is swapped for the fresh build in one exchange; never adopted. One the index
            # does not vouch for is kept only where its files are the fresh build's, byte for byte
            how = self.store.install_or_replace(staged, self.arch, self.required_files, naming=self.naming,
                                                changed=problem not in ("missing", UNVOUCHED))
            return {"installed": "compiled", "adopted": "adopted", "replaced": "replaced"}[how], [entry], seconds
