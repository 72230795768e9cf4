"""GPU-free warm of SGLang's own ninja JIT modules (sglang/kernels/jit, 0.5.20 on) with the release's own loader.

Each module is built by calling the installed sglang's ``load_jit(*args, **kwargs)`` with the data file's
arguments (data/sglang_jit_ninja.yaml) inside its ``override_jit_cuda_arch(9, 0)``, so it compiles for sm_90a on
a machine without a GPU; ``SGLANG_JIT_CACHE_DIR`` points at this worker's private staging root and ``MAX_JOBS=1``
limits its ninja to one job (ninja.py:156-159). The release itself builds into a hidden staging directory, loads
the result with ``tvm_ffi.load_module`` and only then publishes the leaf ``<target>/<name>/build-<key>/deps-<key>``
with one rename (loader.py:283-304); that leaf is checked against the scope dgprecompile computed
(keys/sglang_jit_ninja.py) and against the runtime's own hit test, stripped of the build's objects and logs, and
moved into ``<cache>/sglang-jit/`` with one more rename. No dgprecompile code runs inside sglang's build.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

from dgprecompile.compile.backends import ModuleWork
from dgprecompile.compile.backends.base import StagingWorker, import_from_sglang
from dgprecompile.errors import CompileFailed
from dgprecompile.keys.schemes import naming_for
from dgprecompile.keys.sglang_jit_ninja import AREA, LEAF_PREFIX, toolkit_home
from dgprecompile.runtimes import get_family
from dgprecompile.runtimes.items import JitModule

# files a build leaves in its leaf that the runtime never reads (it reads sgl_deps.json and <name>.so)
NOT_RECORDED = ("build.ninja", "cuda.cu", "cuda_0.o", "cuda_0.o.d", ".ninja_log", ".ninja_deps")


def _target(ref: str):
    module, _, name = ref.partition(":")
    return getattr(import_from_sglang(module), name)


def preload(job: dict[str, Any]) -> None:
    """Import sglang's loader and arch override once, before the zygote forks (neither initialises CUDA)."""
    _target(job["arch_override"])
    _target(job["loader"])


class SglangNinjaWorker(StagingWorker):
    area = AREA

    def __init__(self, job: dict[str, Any]):
        super().__init__(job)
        os.environ["SGLANG_JIT_CACHE_DIR"] = str(self.staging)
        os.environ["MAX_JOBS"] = "1"
        for name in ("SGLANG_CRASH_ON_JIT_COMPILE", "SGLANG_JIT_FORCE_RECOMPILE", "SGLANG_JIT_CACHE_KEEP"):
            os.environ.pop(name, None)  # a warm builds, and keeps every leaf it made
        # the toolkit the parent computed the build keys with (keys/sglang_jit_ninja.py toolkit_home)
        home = job.get("ninja_cuda_home") or job.get("cuda_home")
        if home:
            os.environ["CUDA_HOME"] = home
        # 0.5.20-0.5.21 link cuda_ipc with a bare -lcuda: on a machine without a driver the linker finds the
        # toolkit's own stub there (LIBRARY_PATH is no part of the build key; 0.5.22+ name the stub dir themselves)
        stubs = os.path.join(os.environ.get("CUDA_HOME") or toolkit_home(), "lib64", "stubs")
        os.environ["LIBRARY_PATH"] = stubs + (os.pathsep + os.environ["LIBRARY_PATH"]
                                             if os.environ.get("LIBRARY_PATH") else "")
        if job.get("ninja_dir"):
            os.environ["PATH"] = job["ninja_dir"] + os.pathsep + os.environ.get("PATH", "")
        self.override = _target(job["arch_override"])
        self.loader = _target(job["loader"])
        self.arch = tuple(job["arch"])
        self.family_id = job["family"]
        self.naming = None

    def _naming(self, version: str | None):
        if self.naming is None:
            self.naming = naming_for(get_family(self.family_id), version or _installed_version())
        return self.naming

    def _hit(self, scope: str, module: JitModule) -> str | None:
        """The installed leaf the runtime would load for this scope (entry name), or None."""
        leaf = self._naming(None).hit(self.store.area_dir(self.area) / scope, module)
        return f"{scope}/{leaf.name}" if leaf is not None else None

    def compile(self, item: ModuleWork) -> tuple[str, list[str], float]:
        p = item.params
        scope, library = p["entry"], p["library"]
        module = JitModule.from_dict(p["module"])
        found = self._hit(scope, module)
        if found:
            return "cached", [found], 0.0
        with self.store.kernel_lock(item.kernel):
            found = self._hit(scope, module)
            if found:
                return "cached", [found], 0.0
            stubs = os.path.join(toolkit_home(), "lib64", "stubs")  # toolchain.py:317-326
            kwargs = dict(p["kwargs"])
            kwargs["cuda_wrappers"] = [tuple(w) for w in kwargs.get("cuda_wrappers", [])]
            kwargs["extra_ldflags"] = [f.replace("{cuda_stubs}", stubs) for f in kwargs.get("extra_ldflags", [])]
            start = time.perf_counter()
            error = None
            try:
                with self.override(*self.arch):
                    self.loader(*p["args"], **kwargs)
            except Exception as exc:
                error = f"{type(exc).__name__}: {str(exc).strip()[-3000:]}"
            seconds = time.perf_counter() - start
            staged_scope = Path(self.staging) / scope
            leaves = sorted(d for d in staged_scope.glob(LEAF_PREFIX + "*") if d.is_dir()) if staged_scope.is_dir() else []
            if not leaves:
                made = sorted(str(d.relative_to(self.staging)) for d in Path(self.staging).glob("*/*/*") if d.is_dir())
                why = error or "no error raised"
                raise CompileFailed(f"sglang's load_jit{tuple(p['args'])} did not publish a build under {scope} "
                                    f"({why}); it made: {made or 'nothing'}"
                                    + ("; dgprecompile's build key for this sglang is out of date" if made else ""))
            leaf = leaves[0]
            for name in NOT_RECORDED:
                if (leaf / name).is_file():
                    (leaf / name).unlink()
            problem = self._naming(None).leaf_problem(leaf, module)
            if problem is not None:
                raise CompileFailed(f"the build sglang published for {library} would not be reused here: {problem}")
            entry = f"{scope}/{leaf.name}"
            installed = self.store.install_entry(leaf, area=self.area, entry=entry)
            for d in Path(self.staging).iterdir():  # anything else this build left in the staging root
                shutil.rmtree(d, ignore_errors=True)
            # not installed: another process filed that leaf meanwhile; kept as found (not compared with this build)
            return ("compiled" if installed else "cached"), [entry], seconds


def _installed_version() -> str:
    from dgprecompile.keys.sglang_jit import find_sglang

    install = find_sglang()
    return install.version if install else ""
