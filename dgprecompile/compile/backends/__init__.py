"""Compile backends: one interface, chosen by the installed DeepGEMM generation.

A backend has a parent side (checks, key context, fingerprint; no torch import) and a worker side that
runs in a worker process and compiles one kernel at a time in its main thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from dgprecompile.errors import EnvironmentProblem, InputError
from dgprecompile.toolchain import DeepGemmInstall

BACKENDS = {"legacy": ("legacy",), "cxx": ("sgl-kernel-cxx", "sgl-deep-gemm-0.1", "sgl-deep-gemm-0.2"),
            "nvcc": ("sgl-deep-gemm-0.1",)}
# sgl-deep-gemm releases whose JIT sources (key, generated code, flags) the GPU-free nvcc backend reproduces:
# 0.1.0-0.1.3 share them (docs/heuristics.md); 0.1.3's entry names were checked against an H200 warm.
NVCC_BACKEND_VERSIONS = ("0.1.0", "0.1.1", "0.1.2", "0.1.3")


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
    """The backend name to use: ``name`` if given, else the installed DeepGEMM's."""
    if install is None:
        raise EnvironmentProblem("DeepGEMM is not importable here, so nothing can be compiled",
                                 hint="install the DeepGEMM your sglang uses (e.g. `pip install --no-deps "
                                      "sgl-kernel==0.3.5` for sglang 0.5.1, `sgl-deep-gemm==0.1.3` for 0.5.14)")
    if install.generation != plan_generation:
        raise EnvironmentProblem(
            f"the plan is for a {plan_generation} DeepGEMM but the installed one is {install.generation} "
            f"({install.distribution} {install.version}): its kernels and cache keys differ",
            hint="plan with the --sglang version whose DeepGEMM is installed, or install that DeepGEMM")
    offline = install.generation == "sgl-deep-gemm-0.1" and install.version in NVCC_BACKEND_VERSIONS
    if name is None or name == "auto":
        if install.generation == "legacy":
            return "legacy"
        return "nvcc" if offline else "cxx"
    if name not in BACKENDS:
        raise InputError(f"unknown backend {name!r}; choose from {', '.join(BACKENDS)}")
    if install.generation not in BACKENDS[name] or (name == "nvcc" and not offline):
        usable = [b for b, gens in BACKENDS.items() if install.generation in gens and (b != "nvcc" or offline)]
        raise InputError(f"backend {name} cannot compile for the installed {install.generation} DeepGEMM "
                         f"({install.distribution} {install.version}); use {' or '.join(usable)}")
    return name


def preload(name: str) -> None:
    """Import what every worker of this backend needs, before the zygote forks them. Must not initialise CUDA."""
    if name == "nvcc":
        return  # runs nvcc only: nothing to import
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
    if name == "nvcc":
        from dgprecompile.compile.backends.nvcc01 import NvccCxxWorker

        return NvccCxxWorker(job)
    raise InputError(f"unknown backend {name!r}")
