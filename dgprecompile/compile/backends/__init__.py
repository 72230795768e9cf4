"""Compile backends: one interface, chosen by the installed DeepGEMM generation; each backend's facts are its
:class:`dgprecompile.runtimes.Backend`, its worker class and zygote preload are in workers.py.

A backend has a parent side (checks, key context, fingerprint; no torch import) and a worker side that
runs in a worker process and compiles one kernel at a time in its main thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from dgprecompile.errors import EnvironmentProblem
from dgprecompile.host.toolchain import DeepGemmInstall
from dgprecompile.runtimes import get_backend, get_generation


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


@dataclass
class ModuleWork:
    """What a worker builds for one of SGLang's JIT modules (no GEMM fields): the module id, and how its
    family's backend builds it (runtimes/jit_loader.py JitFamily.build_params)."""

    kernel: str  # the JitModule id
    params: dict[str, Any]
    cost: float = 0.0  # estimated seconds (the queue's order): the family's measured build time of one module

    @property
    def id(self) -> str:
        return self.kernel

    def to_dict(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "params": self.params}


def work_from(backend: str, item: dict[str, Any]) -> WorkItem | ModuleWork:
    """A worker's item from the parent's message: a DeepGEMM backend's kernel, else a JIT module."""
    return WorkItem(**item) if get_backend(backend).deepgemm else ModuleWork(**item)


class WorkerBackend(Protocol):
    def compile(self, item: WorkItem) -> tuple[str, list[str], float]:
        """Make sure ``item``'s kernel is in the cache. Returns (status, entries, seconds) where status is
        'compiled' or 'cached' and entries are the cache entry names it produced or found."""


def backend_for(name: str | None, install: DeepGemmInstall | None, plan_generation: str,
                needed: str | None = None) -> str:
    """The backend name to use: ``name`` if given, else the installed DeepGEMM generation's first usable one.
    ``needed``: the DeepGEMM the plan's sglang runs, as a pip requirement (named in the hint of a mismatch)."""
    if install is None:
        raise EnvironmentProblem("DeepGEMM is not importable here, so nothing can be compiled",
                                 hint="install the DeepGEMM your sglang uses (e.g. `pip install --no-deps "
                                      "sgl-kernel==0.3.5` for sglang 0.5.1, `sgl-deep-gemm==0.1.3` for 0.5.14)")
    if install.generation != plan_generation:
        raise EnvironmentProblem(
            f"the plan is for a {plan_generation} DeepGEMM but the installed one is {install.generation} "
            f"({install.distribution} {install.version}): its kernels and cache keys differ",
            hint=(f"install the plan's DeepGEMM (pip install --no-deps {needed}), " if needed else
                  "install the plan's DeepGEMM, ")
            + f"or plan with the --sglang version that runs the installed {install.distribution} {install.version}")
    return get_generation(install.generation).choose_backend(name, install)
