"""The worker side of each compile backend, by the backend's name (runtimes/deepgemm.py ``BACKENDS`` holds what
each one needs; a generation or JIT family names its backends there). Imported in the worker processes only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dgprecompile.compile.backends import (
    WorkerBackend,
    cxx,
    legacy,
    nvcc01,
    sglang_jit,
    sglang_jit_ninja,
    sweep,
)
from dgprecompile.runtimes import get_backend

WORKERS: dict[str, Callable[[dict[str, Any]], WorkerBackend]] = {
    "legacy": legacy.LegacyWorker,
    "cxx": cxx.CxxWorker,
    "nvcc": nvcc01.NvccCxxWorker,
    "sweep": sweep.SweepWorker,
    "sglang-jit": sglang_jit.SglangJitWorker,
    "kernels-jit": sglang_jit_ninja.SglangNinjaWorker,
}
# run in the zygote before it forks (no CUDA), for the backends whose Backend.preload is set
PRELOADS: dict[str, Callable[[dict[str, Any]], None]] = {
    "legacy": legacy.preload,
    "cxx": cxx.preload,
    "sweep": cxx.preload,
    "sglang-jit": sglang_jit.preload,
    "kernels-jit": sglang_jit_ninja.preload,
}


def preload(name: str, job: dict[str, Any]) -> None:
    """Import what every worker of this backend needs, before the zygote forks them. Must not initialise CUDA."""
    if get_backend(name).preload:
        PRELOADS[name](job)


def load_worker_backend(name: str, job: dict[str, Any]) -> WorkerBackend:
    get_backend(name)  # an unknown name is refused as the user's input
    return WORKERS[name](job)
