"""GPU-free warm of SGLang's own tvm-ffi JIT modules, with the installed sglang's own build functions.

Each module is built by calling the installed sglang's builder (e.g.
``sglang.jit_kernel.per_token_group_quant_8bit_v2._jit_module(torch.bfloat16, torch.float8_e4m3fn, True)``)
inside sglang's own ``override_jit_cuda_arch(9, 0)``, so it compiles for Hopper on a machine without one.
``TVM_FFI_CACHE_DIR`` points at this worker's private staging root and ``MAX_JOBS=1`` limits tvm-ffi's ninja to
one job (tvm_ffi/cpp/extension.py passes ``-j $MAX_JOBS`` to ninja; without it ninja picks its own count). The
finished build directory is checked against the name dgprecompile computes (keys/sglang_jit.py) and moved into
``<cache>/tvm-ffi/`` with one rename. No dgprecompile code is run inside sglang's build; nothing is copied from it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from dgprecompile.cache.entrycheck import link_problem
from dgprecompile.compile.backends import ModuleWork
from dgprecompile.compile.backends.base import StagingWorker, import_from_sglang
from dgprecompile.errors import CompileFailed
from dgprecompile.host.environ import environ
from dgprecompile.keys.sglang_jit import JIT_AREA

# Files of a build directory that are not part of the module: tvm-ffi's FileLock and ninja's own logs.
NOT_RECORDED = ("lock", ".ninja_log", ".ninja_deps")


def resolve_args(args: list[Any]) -> list[Any]:
    """Data-file arguments to Python values: 'torch.<dtype>' strings become torch dtypes."""
    import torch

    out = []
    for a in args:
        if isinstance(a, str) and a.startswith("torch."):
            value = getattr(torch, a.split(".", 1)[1], None)
            if not isinstance(value, torch.dtype):
                raise CompileFailed(f"unknown torch dtype {a!r} in a JIT module's arguments")
            out.append(value)
        else:
            out.append(a)
    return out


def preload(job: dict[str, Any]) -> None:
    """Import sglang's arch override and every builder module once, before the zygote forks."""
    if job.get("arch_override"):
        import_from_sglang(job["arch_override"].split(":")[0])
    for python in job.get("modules", []):
        import_from_sglang(python)


@contextlib.contextmanager
def target_device(arch_env: str, *arch):
    """For a release with no arch override of its own (0.5.9): the build's target without a GPU. Its load_jit
    honours a preset ``arch_env`` (TVM_FFI_CUDA_ARCH_LIST, the arch tvm-ffi compiles for) and its builders ask the
    device's capability only to choose their pdl template argument (is_arch_support_pdl: major >= 9); inside this
    context both answer ``arch`` (torch.cuda.current_device/get_device_capability report the target GPU)."""
    import torch

    saved = (torch.cuda.current_device, torch.cuda.get_device_capability)
    torch.cuda.current_device = lambda: 0
    torch.cuda.get_device_capability = lambda device=None: (int(arch[0]), int(arch[1]))
    try:
        with environ({arch_env: f"{arch[0]}.{arch[1]}"}):
            yield
    finally:
        torch.cuda.current_device, torch.cuda.get_device_capability = saved


class SglangJitWorker(StagingWorker):
    area = JIT_AREA
    skip_files = NOT_RECORDED

    def __init__(self, job: dict[str, Any]):
        super().__init__(job)
        self.area = job.get("area") or JIT_AREA
        self.skip_files = tuple(job.get("not_recorded") or NOT_RECORDED)
        # set only around a build: the same worker builds DeepGEMM's kernels, whose JIT reads CUDA_HOME and PATH
        self.env = {"TVM_FFI_CACHE_DIR": str(self.staging), "MAX_JOBS": "1"}
        if job.get("cuda_home"):
            self.env["CUDA_HOME"] = job["cuda_home"]
        if job.get("ninja_dir"):
            self.env["PATH"] = job["ninja_dir"] + os.pathsep + os.environ.get("PATH", "")
        self.arch = tuple(job["arch"])
        if job.get("arch_override"):
            module, _, name = job["arch_override"].partition(":")
            self.override = getattr(import_from_sglang(module), name)
        else:  # a release without an override (0.5.9): its preset variable and its device question answered
            self.override = functools.partial(target_device, job["arch_env"])
        self._stub_dir: str | None = None

    def _link_stub(self) -> None:
        """A module that links -lcuda (custom all-reduce) needs libcuda.so at link time; a GPU-free machine has
        no driver. Put an empty libcuda.so (soname libcuda.so.1, what the driver's own file carries) on this
        worker's LIBRARY_PATH: the module then records NEEDED libcuda.so.1 exactly as when linked on a GPU node,
        where the real driver satisfies it at load. Only when no libcuda.so is on the link path already."""
        if self._stub_dir is not None:
            return
        paths = [p for p in os.environ.get("LIBRARY_PATH", "").split(os.pathsep) if p]
        home = os.environ.get("CUDA_HOME") or "/usr/local/cuda"
        for d in paths + [os.path.join(home, "lib64"), os.path.join(home, "lib64", "stubs"), "/usr/lib64",
                          "/usr/lib/x86_64-linux-gnu", "/usr/lib"]:
            if os.path.exists(os.path.join(d, "libcuda.so")):
                self._stub_dir = ""
                return
        stub = Path(self.staging).parent / (Path(self.staging).name + "-libcuda-stub")
        stub.mkdir(exist_ok=True)
        (stub / "empty.c").write_text("/* link-time stand-in for the CUDA driver (dgprecompile warm) */\n")
        cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("c++") or "c++"
        subprocess.run([cc, "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(stub / "libcuda.so"),
                        "-x", "c", str(stub / "empty.c")], check=True, capture_output=True, timeout=120)
        os.environ["LIBRARY_PATH"] = os.pathsep.join([str(stub), *paths])
        self._stub_dir = str(stub)

    def close(self) -> None:
        if self._stub_dir:
            shutil.rmtree(self._stub_dir, ignore_errors=True)
        super().close()

    def _problem(self, kernel: str, entry: str, library: str) -> str | None:
        """None when the module's library is there, not through a symbolic link, with the bytes the index recorded
        for it (if it recorded any); else what is wrong ("missing" when there is none)."""
        path = self.store.entry_path(entry, self.area)
        linked = link_problem(path)
        if linked:
            return linked
        if not (path / library).is_file():
            return "missing" if not path.exists() else f"{library} missing"
        return self.store.recorded_problem(kernel, entry, area=self.area)

    def compile(self, item: ModuleWork) -> tuple[str, list[str], float]:
        with environ(self.env):
            return self._compile(item)

    def _compile(self, item: ModuleWork) -> tuple[str, list[str], float]:
        p = item.params
        entry, library = p["entry"], p["library"]
        if self._problem(item.kernel, entry, library) is None:
            return "cached", [entry], 0.0
        with self.store.kernel_lock(item.kernel):
            problem = self._problem(item.kernel, entry, library)
            if problem is None:
                return "cached", [entry], 0.0
            builder = getattr(import_from_sglang(p["python"]), p["builder"])
            args = resolve_args(p["args"])
            kwargs = {k: resolve_args(v) if isinstance(v, list) else v for k, v in (p.get("kwargs") or {}).items()}
            self._link_stub()  # modules that link -lcuda (custom all-reduce) need it on a driverless machine
            start = time.perf_counter()
            error = None
            try:
                with self.override(*self.arch):
                    builder(*args, **kwargs)
            except Exception as exc:  # loading the built .so may fail without a GPU driver; the build counts
                error = f"{type(exc).__name__}: {str(exc).strip()[-3000:]}"
            seconds = time.perf_counter() - start
            staged = Path(self.staging) / entry
            if not (staged / library).is_file():
                made = sorted(d.name for d in Path(self.staging).iterdir() if d.is_dir())
                why = error or "no error raised"
                raise CompileFailed(f"sglang's {p['python']}.{p['builder']}{tuple(p['args'])} did not produce "
                                    f"{entry}/{library} ({why}); it made: {made or 'nothing'}"
                                    + ("; dgprecompile's naming of this sglang's modules is out of date" if made
                                       else ""))
            for name in self.skip_files:
                if (staged / name).is_file():
                    (staged / name).unlink()
            self.replaced_why = problem
            # a module there whose bytes differ from the index's record (or from this build) is replaced, not adopted
            how = self.store.install_or_replace(staged, area=self.area, changed=problem != "missing")
            for d in Path(self.staging).iterdir():  # anything else this build left in the staging root
                shutil.rmtree(d, ignore_errors=True)
            return {"installed": "compiled", "adopted": "adopted", "replaced": "replaced"}[how], [entry], seconds
