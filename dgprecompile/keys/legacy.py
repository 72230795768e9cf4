"""Cache-entry names of the legacy Python-JIT DeepGEMM, computed without importing it.

That JIT files a kernel under ``<DG_JIT_CACHE_DIR>/cache/kernel.<name>.<h>`` where h is the first 12 hex digits of
md5 over ``name $$ header-version $$ "<nvcc path>+(major, minor)" $$ <flags list> $$ <sass-opt flag> $$ <source>``.
The header version is md5 over include/deep_gemm/*.cuh and jit/interleave_ffma.py; the flags carry the
absolute include path. So a warm cache hits only for the same nvcc path string and release, the same install
location and the same DG_JIT_* flag variables. ``tests/test_legacy_keys.py`` checks these names against the
library's own build().
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from functools import lru_cache

from dgprecompile.errors import EnvironmentProblem
from dgprecompile.host.toolchain import DeepGemmInstall, Nvcc
from dgprecompile.runtimes.items import KernelSpec

# The kernel source FP8GemmRuntime.generate() emits; its bytes are part of the key, so they must match exactly.
_SOURCE = """
#ifdef __CUDACC_RTC__
#include <deep_gemm/nvrtc_std.cuh>
#else
#include <cuda.h>
#include <string>
#endif

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <deep_gemm/fp8_gemm.cuh>

using namespace deep_gemm;

static void __instantiate_kernel() {{
    auto ptr = reinterpret_cast<void*>(&fp8_gemm_kernel<
        {N},
        {K},
        {BM},
        {BN},
        128,
        {PAD},
        {SW},
        {G},
        {ST},
        128,
        128,
        {MC},
        {A},
        GemmType::{T}
      >);
}};
"""


def kernel_source(spec: KernelSpec) -> str:
    p = dict(spec.params)
    return _SOURCE.format(N=p["N"], K=p["K"], BM=p["BM"], BN=p["BN"], PAD=p["PAD"], SW=p["SW"], G=p["G"],
                          ST=p["ST"], MC=p["MC"], A="true" if p["A"] else "false", T=p["T"])


@lru_cache(maxsize=16)
def header_version(package_dir: str) -> str:
    md5 = hashlib.md5()
    include = os.path.join(package_dir, "include", "deep_gemm")
    if not os.path.isdir(include):
        raise EnvironmentProblem(f"DeepGEMM headers not found under {include}")
    for name in sorted(os.listdir(include)):
        if name.endswith(".cuh"):
            with open(os.path.join(include, name), "rb") as f:
                md5.update(f.read())
    with open(os.path.join(package_dir, "jit", "interleave_ffma.py"), "rb") as f:
        md5.update(f.read())
    return md5.hexdigest()[:12]


@dataclass(frozen=True)
class LegacyKeyContext:
    """Everything besides the kernel itself that goes into a legacy cache key."""

    package_dir: str
    nvcc_path: str
    nvcc_release: tuple[int, int]
    cpp_standard: int = 20
    ptxas_verbose: bool = False
    disable_ffma_interleave: bool = False

    def __post_init__(self) -> None:
        # the release is formatted as a Python tuple inside the key; JSON round trips give a list
        object.__setattr__(self, "nvcc_release", tuple(self.nvcc_release))

    @classmethod
    def build(cls, install: DeepGemmInstall, nvcc: Nvcc, environ: dict[str, str] | None = None) -> LegacyKeyContext:
        env = os.environ if environ is None else environ
        return cls(package_dir=install.package_dir, nvcc_path=nvcc.path, nvcc_release=nvcc.release,
                   cpp_standard=int(env.get("DG_JIT_OVERRIDE_CPP_STANDARD", 20)),
                   ptxas_verbose="DG_JIT_PTXAS_VERBOSE" in env,
                   disable_ffma_interleave=bool(int(env.get("DG_JIT_DISABLE_FFMA_INTERLEAVE", "0") or 0)))

    @property
    def include_dir(self) -> str:
        # the JIT joins its own directory with '..': the literal '..' is part of the key
        return os.path.join(self.package_dir, "jit", "..", "include")

    def flags(self) -> list[str]:
        cxx = ["-fPIC", "-O3", "-fconcepts", "-Wno-deprecated-declarations", "-Wno-abi"]
        return [f"-std=c++{self.cpp_standard}",
                "--ptxas-options=--register-usage-level=10" + (",--verbose" if self.ptxas_verbose else ""),
                "--diag-suppress=39,161,174,177,940",
                f"-I{self.include_dir}",
                "-gencode=arch=compute_90a,code=sm_90a", "-cubin", "-O3", "--expt-relaxed-constexpr",
                "--expt-extended-lambda", f"--compiler-options={','.join(cxx)}"]

    @property
    def sass_opt(self) -> bool:
        return self.nvcc_release <= (12, 8) and not self.disable_ffma_interleave

    def source(self, spec: KernelSpec) -> str:
        """kernel.cu as the JIT writes it."""
        return kernel_source(spec)

    def name_for_source(self, family: str, source: str) -> str:
        """The entry name of the kernel ``family`` whose kernel.cu is ``source`` (cache/entrycheck.py checks an
        entry's kernel.cu against its name with it)."""
        signature = (f"{family}$${header_version(self.package_dir)}$${self.nvcc_path}+{self.nvcc_release}"
                     f"$${self.flags()}$${self.sass_opt}$${source}")
        return f"kernel.{family}.{hashlib.md5(signature.encode('utf-8', 'surrogateescape')).hexdigest()[:12]}"

    def entry_name(self, spec: KernelSpec) -> str:
        return self.name_for_source(spec.family, kernel_source(spec))
