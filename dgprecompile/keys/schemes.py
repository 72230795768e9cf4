"""Which entry-name calculator each runtime uses: a DeepGEMM generation names its key scheme
(runtimes/deepgemm.py ``Generation.key_scheme``), a JIT loader family is named by its id; these tables hold them.
The stages above ask here for a runtime's names; the runtimes themselves import nothing of keys/."""

from __future__ import annotations

from typing import Any

from dgprecompile.keys.deepjit import DeepJitKeyContext
from dgprecompile.keys.legacy import LegacyKeyContext
from dgprecompile.keys.sgl_deep_gemm_01 import CxxKeyContext
from dgprecompile.keys.sglang_jit import JitNaming
from dgprecompile.keys.sglang_jit_ninja import NinjaNaming
from dgprecompile.keys.sglang_kernel import Sk0320KeyContext, SkKeyContext
from dgprecompile.runtimes import Generation, JitFamily
from dgprecompile.runtimes.items import JitModule

KEY_SCHEMES: dict[str, type] = {
    "legacy": LegacyKeyContext,  # the Python JIT's key (keys/legacy.py)
    "sk": SkKeyContext,  # sgl-kernel-waves: 0.3.7-0.3.9.post2 and 0.3.14.post1-0.4.2 (keys/sglang_kernel.py)
    "sk-0320": Sk0320KeyContext,  # sgl-kernel 0.3.20-0.3.21
    "sdg-01": CxxKeyContext,  # sgl-deep-gemm 0.1.x (keys/sgl_deep_gemm_01.py)
    "deepjit": DeepJitKeyContext,  # sgl-deep-gemm 0.2.x (keys/deepjit.py)
}
NAMINGS: dict[str, type] = {"tvm-ffi": JitNaming, "sglang-ninja": NinjaNaming,  # by JitFamily id
                            "sglang-ninja-hook": NinjaNaming}


def key_class(scheme: str) -> type:
    """The key-context class of a scheme (workers rebuild the parent's context from its fields)."""
    return KEY_SCHEMES[scheme]


def key_context(generation: Generation, install, nvcc, environ: dict[str, str] | None = None):
    """The entry-name calculator for this install and nvcc (Generation.computes_keys says for which releases)."""
    generation.refuse_keys(install, environ)
    return key_class(generation.key_scheme or "").build(install, nvcc, environ)


def naming_for(family: JitFamily, version: str):
    """The runtime's names for the sglang installed here (EnvironmentProblem when it is not ``version``)."""
    return NAMINGS[family.id].build(family, version)


def name_stem(family: JitFamily, version: str, module: JitModule) -> str:
    """The part of the module's runtime name computable without sglang installed (the refusal message tells
    planned from unplanned modules by it)."""
    return NAMINGS[family.id].name_stem(family, version, module)


def current_fingerprint(family: JitFamily, arch: str) -> dict[str, Any]:
    """This machine's values of the family's fingerprint fields (None where a package is absent)."""
    return NAMINGS[family.id].current_fingerprint(family, arch)
