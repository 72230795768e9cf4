"""Compile backends: one interface, chosen by the installed DeepGEMM generation.

A backend has a parent side (checks, key context, fingerprint; no torch import) and a worker side that
runs in a worker process and compiles one kernel at a time in its main thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from dgprecompile.errors import EnvironmentProblem, InputError
from dgprecompile.generations import get_generation
from dgprecompile.toolchain import DeepGemmInstall


@dataclass
class WorkItem:
    kernel: str  # KernelSpec id
    family: str
    params: dict[str, Any]
    kernel_type: str
    n: int
    k: int
    num_groups: int
    m: int  # the representative m that selects this kernel

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class WorkerBackend(Protocol):
    def compile(self, item: WorkItem) -> tuple[str, list[str], float]:
        """Make sure ``item``'s kernel is in the cache. Returns (status, entries, seconds) where status is
        'compiled' or 'cached' and entries are the cache entry names it produced or found."""


def backend_for(name: str | None, install: DeepGemmInstall | None, plan_generation: str) -> str:
    """The backend name to use: ``name`` if given, else the installed DeepGEMM generation's first usable one."""
    if install is None:
        raise EnvironmentProblem("DeepGEMM is not importable here, so nothing can be compiled",
                                 hint="install the DeepGEMM your sglang uses (e.g. `pip install --no-deps "
                                      "sgl-kernel==0.3.5` for sglang 0.5.1, `sgl-deep-gemm==0.1.3` for 0.5.14)")
    if install.generation != plan_generation:
        raise EnvironmentProblem(
            f"the plan is for a {plan_generation} DeepGEMM but the installed one is {install.generation} "
            f"({install.distribution} {install.version}): its kernels and cache keys differ",
            hint="plan with the --sglang version whose DeepGEMM is installed, or install that DeepGEMM")
    return get_generation(install.generation).choose_backend(name, install)


def preload(name: str, job: dict[str, Any] | None = None) -> None:
    """Import what every worker of this backend needs, before the zygote forks them. Must not initialise CUDA."""
    if name == "nvcc":
        return  # runs nvcc only: nothing to import
    if name == "sglang-jit":
        from dgprecompile.compile.backends.sglang_jit import preload as preload_sglang

        preload_sglang(job or {})
        return
    if name == "kernels-jit":
        from dgprecompile.compile.backends.sglang_jit_ninja import preload as preload_ninja

        preload_ninja(job or {})
        return
    import torch  # noqa: F401  (the costly import both other backends share)

    if name == "legacy":
        from dgprecompile.compile.backends.legacy import import_legacy

        import_legacy(None)


def load_worker_backend(name: str, job: dict[str, Any]) -> WorkerBackend:
    if name == "legacy":
        from dgprecompile.compile.backends.legacy import LegacyWorker

        return LegacyWorker(job)
    if name == "cxx":
        from dgprecompile.compile.backends.cxx import CxxWorker

        return CxxWorker(job)
    if name == "sweep":
        from dgprecompile.compile.backends.sweep import SweepWorker

        return SweepWorker(job)
    if name == "nvcc":
        from dgprecompile.compile.backends.nvcc01 import NvccCxxWorker

        return NvccCxxWorker(job)
    if name == "sglang-jit":
        from dgprecompile.compile.backends.sglang_jit import SglangJitWorker

        return SglangJitWorker(job)
    if name == "kernels-jit":
        from dgprecompile.compile.backends.sglang_jit_ninja import SglangNinjaWorker

        return SglangNinjaWorker(job)
    raise InputError(f"unknown backend {name!r}")
