"""The runtimes: every thing in a job that compiles at run time, one object each, and the registry of them.

This package is the floor of the stages (planning, keys, compile, cache, launch, diagnostics, cli all import it;
it imports only the foundation). Its one protocol is :class:`~dgprecompile.runtimes.base.Runtime`; one module
per runtime:

* deepgemm_legacy.py: the legacy Python-JIT DeepGEMM (sgl-kernel <= 0.3.6);
* deepgemm_cxx.py: the C++-JIT DeepGEMM releases, their generations as data (deepgemm.py: what they share);
* tvm_ffi.py: SGLang's tvm-ffi load_inline JIT; sglang_ninja.py: SGLang's own ninja JIT (jit_loader.py: what the
  loader families share, and their modules per release, read from data files);
* triton_moe.py: SGLang's Triton fused MoE kernel, warmed ahead of time;
* inductor.py: the torch.compile graphs SGLang compiles at its first forwards, warmed on the job's GPU kind;
* flashinfer.py: the FlashInfer JIT modules SGLang builds at its first forward, warmed GPU-free with FlashInfer's own
  builder;
* captured.py: the families whose caches are only captured from a real run (Triton, FlashInfer, inductor, CuTe-DSL);
  cuda_driver.py: the CUDA driver's PTX JIT cache, one more such family in a module of its own;
* items.py: what the runtimes plan (GEMM keys and kernel specs, JIT modules, Triton MoE items).

The registry below is the set the stages ask: ``GENERATIONS`` (the DeepGEMM generations by id), ``JIT_FAMILIES``
(SGLang's loaders by id), ``TRITON_MOE``, ``TRITON_PATH``, ``INDUCTOR_GRAPHS`` and ``CAPTURED``; ``RUNTIMES`` is all
of them.
"""

from __future__ import annotations

from dgprecompile.errors import InputError
from dgprecompile.runtimes.base import Runtime, StrictBy
from dgprecompile.runtimes.captured import CACHE_FAMILIES, CacheFamily
from dgprecompile.runtimes.cuda_driver import CUDA_DRIVER
from dgprecompile.runtimes.deepgemm import BACKENDS, Backend, Generation, get_backend
from dgprecompile.runtimes.deepgemm_cxx import CXX_GENERATIONS
from dgprecompile.runtimes.deepgemm_legacy import LEGACY
from dgprecompile.runtimes.flashinfer import FLASHINFER_MODULES, FlashInferModules
from dgprecompile.runtimes.inductor import INDUCTOR_GRAPHS, InductorGraphs
from dgprecompile.runtimes.jit_loader import JitFamily
from dgprecompile.runtimes.sglang_ninja import SGLANG_NINJA, SGLANG_NINJA_HOOK
from dgprecompile.runtimes.triton_moe import TRITON_MOE, TRITON_PATH, TritonMoeFamily, TritonPathKernels
from dgprecompile.runtimes.tvm_ffi import TVM_FFI

GENERATIONS: dict[str, Generation] = {g.id: g for g in (LEGACY, *CXX_GENERATIONS)}
JIT_FAMILIES: dict[str, JitFamily] = {f.id: f for f in (TVM_FFI, SGLANG_NINJA, SGLANG_NINJA_HOOK)}
CAPTURED: tuple[CacheFamily, ...] = (*CACHE_FAMILIES, CUDA_DRIVER)
FILED_AREAS: tuple[str, ...] = tuple(f.area for f in CAPTURED if f.filed)  # whole entries travel in artifacts
RUNTIMES: tuple[Runtime, ...] = (*GENERATIONS.values(), *JIT_FAMILIES.values(), TRITON_MOE, INDUCTOR_GRAPHS,
                                  FLASHINFER_MODULES, TRITON_PATH, *CAPTURED)

__all__ = ["BACKENDS", "CAPTURED", "FILED_AREAS", "FLASHINFER_MODULES", "FlashInferModules", "family_for_area", "GENERATIONS", "INDUCTOR_GRAPHS", "JIT_FAMILIES", "RUNTIMES", "TRITON_MOE", "TRITON_PATH", "Backend",
           "InductorGraphs",
           "CacheFamily", "Generation", "JitFamily", "Runtime", "StrictBy", "TritonMoeFamily", "TritonPathKernels", "family_for",
           "get_backend", "get_family", "get_generation", "get_runtime", "hook_targets"]


def get_generation(generation_id: str) -> Generation:
    try:
        return GENERATIONS[generation_id]
    except KeyError:
        raise InputError(f"unknown DeepGEMM generation {generation_id!r}; known: {', '.join(GENERATIONS)}",
                         hint="regenerate the manifest with `dgprecompile plan -o`") from None


def get_runtime(runtime_id: str) -> Runtime:
    """The runtime a planned item names (its ``runtime_id``), or one error naming the known ones."""
    found = next((r for r in RUNTIMES if r.id == runtime_id), None)
    if found is None:
        raise InputError(f"unknown runtime {runtime_id!r}; known: {', '.join(r.id for r in RUNTIMES)}",
                         hint="regenerate the manifest with `dgprecompile plan -o`")
    return found


def family_for_area(area: str) -> CacheFamily | None:
    """The captured family whose entries live in ``area`` of a cache root, or None."""
    return next((f for f in CAPTURED if f.area == area), None)


def family_for(sglang_version: str | None) -> JitFamily | None:
    """The loader family of an exact sglang release, or None (no JIT of its own, or not a known family)."""
    return next((f for f in JIT_FAMILIES.values() if f.covers(sglang_version)), None)


def get_family(family_id: str) -> JitFamily:
    try:
        return JIT_FAMILIES[family_id]
    except KeyError:
        raise InputError(f"unknown SGLang JIT family {family_id!r}; known: {', '.join(JIT_FAMILIES)}",
                         hint="regenerate the manifest with `dgprecompile plan -o`") from None


def hook_targets() -> list[str]:
    """Every module the startup hook wraps in strict mode (the JIT families without a switch of their own)."""
    return [f.hook_target for f in JIT_FAMILIES.values() if f.hook_target]
