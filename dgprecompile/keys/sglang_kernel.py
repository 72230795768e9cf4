"""Cache-entry names and sources of the C++-JIT deep_gemm bundled in sgl-kernel 0.3.7-0.3.21 and sglang-kernel
0.4.0-0.4.2, without a GPU.

The same family as sgl-deep-gemm 0.1.x (keys/sgl_deep_gemm_01.py: one entry ``<DG_JIT_CACHE_DIR>/cache/
kernel.<name>.<digest>/{kernel.cu, kernel.cubin}``, the same two-seed FNV-1a digest), with these differences, read
from SGF@5f8a71a (whose headers and generated-code text equal 0.3.19's and 0.4.x's; 0.3.14.post1-0.3.18.post2 are
SGF@f4adba8, the same key code with one template slot less; docs/heuristics.md):

* the digest covers ``name $$ H $$ NVCC<major>.<minor> $$ flags $$ kernel.cu``, where H (the "library version") is
  the digest of the concatenated bytes of every ``include/deep_gemm/**/*.cuh``, in path order
  (``csrc/jit/compiler.hpp`` L28-35 and L93-95, ``csrc/utils/system.hpp`` L49-66);
* kernel.cu is the generated code alone (no include-hash line), 18 slots (17 before 0.3.19; keys/cxx_templates.py);
* the flags carry ``-cubin`` and ``-I<install>/deep_gemm/include`` (compiler.hpp L60-68, L157-163), so entries
  hit only for the same install location, nvcc release and headers; DG_JIT_DEBUG / DG_JIT_PTXAS_VERBOSE add
  ``--ptxas-options=--verbose`` and DG_JIT_WITH_LINEINFO ``-Xcompiler -rdynamic -lineinfo``.

sgl-kernel 0.3.7-0.3.9.post2 share this key code. sgl-kernel 0.3.20-0.3.21 (SGF@54f99a8) hash the same header bytes
(read into a vector<char> instead of a string: ``compiler.hpp`` L28-40, ``utils/hash.hpp`` L7-37) and differ in one
flag: DG_JIT_PTXAS_CHECK also turns the verbose ptxas log on, which is ``--ptxas-options=--verbose,
--warn-on-local-memory-usage`` there (L70-71), as in sgl-deep-gemm 0.1.x (:class:`Sk0320KeyContext`).
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, replace
from pathlib import Path

from dgprecompile.errors import InputError
from dgprecompile.keys import cxx_templates
from dgprecompile.keys.sgl_deep_gemm_01 import CxxKeyContext, digest
from dgprecompile.runtimes.items import KernelSpec

TEMPLATE = "sk-0.4"


def library_version(include_dir: str) -> str:
    """H: the digest of every deep_gemm/**/*.cuh header's bytes, in std::filesystem::path order (by component)."""
    root = Path(include_dir) / "deep_gemm"
    files = sorted((p for p in root.rglob("*.cuh") if p.is_file()), key=lambda p: p.relative_to(root).parts)
    return digest(b"".join(p.read_bytes() for p in files))


@dataclass(frozen=True)
class SkKeyContext(CxxKeyContext):
    """Everything besides the kernel that goes into a sglang-kernel 0.4.x key."""

    template: str = TEMPLATE
    library_version: str = ""  # H, computed once from the headers (header_root if given, else include_dir)

    VERBOSE_FLAGS = " --ptxas-options=--verbose"
    VERBOSE_ENV = ("DG_JIT_DEBUG", "DG_JIT_PTXAS_VERBOSE")  # no DG_JIT_PTXAS_CHECK before 0.3.20
    TAIL_FLAGS = ("--gpu-architecture=sm_90a --compiler-options=-fPIC,-O3,-fconcepts,-Wno-deprecated-declarations,"
                  "-Wno-abi -cubin -O3 --expt-relaxed-constexpr --expt-extended-lambda")

    @classmethod
    def build(cls, install, nvcc, environ: dict[str, str] | None = None) -> SkKeyContext:
        template = cxx_templates.SK_RELEASE_TEMPLATE.get(install.version or "")
        if template is None:
            raise InputError(f"the generated code of {install.distribution} {install.version} was not read",
                             hint="use --backend cxx (the library builds its own entries on a GPU)")
        return cls.from_env(install.include_dir, nvcc.release, environ, template=template)

    @classmethod
    def from_env(cls, include_dir: str, nvcc_release: tuple[int, int], environ: dict[str, str] | None = None,
                 template: str = TEMPLATE, header_root: str | None = None) -> SkKeyContext:
        env = os.environ if environ is None else environ
        base = super().from_env(include_dir, nvcc_release, env, template=template)  # cls's VERBOSE_ENV
        return replace(base, header_root=header_root, library_version=library_version(header_root or include_dir))

    def source(self, spec: KernelSpec) -> str:
        """kernel.cu exactly as the JIT writes it (the generated code, nothing before it)."""
        return cxx_templates.instantiation(spec, cxx_templates.TEMPLATES[self.template])

    def name_for_source(self, family: str, source: str) -> str:
        signature = f"{family}$${self.library_version}$${self.signature}$${self.flags()}$${source}"
        return f"kernel.{family}.{digest(signature)}"

    def nvcc_command(self, nvcc: str, entry_dir: str) -> list[str]:
        """NVCCCompiler::compile's command (`nvcc kernel.cu -o kernel.cubin <flags>`, -cubin among the flags)."""
        return [nvcc, os.path.join(entry_dir, "kernel.cu"), "-o", os.path.join(entry_dir, "kernel.cubin"),
                *shlex.split(self.flags())]


@dataclass(frozen=True)
class Sk0320KeyContext(SkKeyContext):
    """sgl-kernel 0.3.20-0.3.21: sgl-deep-gemm 0.1.x's verbose ptxas flags, DG_JIT_PTXAS_CHECK among their switches."""

    VERBOSE_FLAGS = CxxKeyContext.VERBOSE_FLAGS
    VERBOSE_ENV = CxxKeyContext.VERBOSE_ENV
