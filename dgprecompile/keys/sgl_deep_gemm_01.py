"""Cache-entry names and sources of sgl-deep-gemm 0.1.x's C++ JIT, computed without a GPU or the library.

That JIT files a kernel under ``<DG_JIT_CACHE_DIR>/cache/kernel.<name>.<digest>/{kernel.cu, kernel.cubin}``. The
digest is two FNV-1a-64 hashes (different seeds, each finished with splitmix64) over
``name $$ "NVCC<major>.<minor>" $$ <flags> $$ <kernel.cu>``; kernel.cu is the generated instantiation preceded by a
line with the hash of every ``deep_gemm/`` header it includes (recursively, by content). The flags hold the absolute
include path of the installed package, so entries hit only for the same install location and nvcc release.
These rules were read from the sgl-project/DeepGEMM source the 0.1.3 wheel was built from (docs/heuristics.md)
and reproduce all 35 GEMM entry names an H200 warm produced (tests/test_cxx_keys.py).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import lru_cache

from dgprecompile.kernels import KernelSpec

_MASK = (1 << 64) - 1

# Generated instantiations (the JIT's format strings, with its slots in order); their bytes are part of the key.
_GEMM_1D2D = """
#include <deep_gemm/impls/sm90_fp8_gemm_1d2d.cuh>

using namespace deep_gemm;

static void __instantiate_kernel() {{
    auto ptr = reinterpret_cast<void*>(&sm90_fp8_gemm_1d2d_impl<
        {},
        {}, {}, {},
        {},
        {}, {}, {},
        {}, {}, {},
        {},
        {}, {},
        {}, {},
        {}, {},
        {}
    >);
}};
"""
_TRANSPOSE = """
#include <deep_gemm/impls/smxx_layout.cuh>

using namespace deep_gemm;

static void __instantiate_kernel() {{
    auto ptr = reinterpret_cast<void*>(&transpose_fp32<
        {}, {}, {}
    >);
}};
"""
_INCLUDE = re.compile(r'#\s*include\s*[<"][^>"]+[>"]')


def _fnv1a(data: bytes, seed: int) -> int:
    h = seed
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & _MASK
    return h


def _splitmix(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def digest(text: str | bytes) -> str:
    data = text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text
    return f"{_splitmix(_fnv1a(data, 0xC6A4A7935BD1E995)):016x}{_splitmix(_fnv1a(data, 0x9E3779B97F4A7C15)):016x}"


def _deep_gemm_includes(code: str) -> list[str]:
    out = []
    for match in _INCLUDE.finditer(code):
        text = match.group(0)
        if not (text.startswith("#include <") and text.endswith(">")):
            raise ValueError(f"the JIT rejects non-standard includes: {text}")
        name = text[len("#include <"):-1]
        if name.startswith("deep_gemm"):
            out.append(name)
    return out


@lru_cache(maxsize=4096)
def _file_hash(include_dir: str, name: str) -> str:
    with open(os.path.join(include_dir, name), "rb") as f:
        code = f.read().decode("utf-8", "surrogateescape")
    return digest(_includes_hash(code, include_dir) + "#" + digest(code))


def _includes_hash(code: str, include_dir: str) -> str:
    return "".join(_file_hash(include_dir, name) + "$" for name in _deep_gemm_includes(code))


def includes_hash(code: str, include_dir: str) -> str:
    return digest(_includes_hash(code, include_dir))


def _fill(template: str, values: list[object]) -> str:
    text = template.replace("{{", "\0").replace("}}", "\1")
    parts = text.split("{}")
    assert len(parts) == len(values) + 1, "template slots"
    out = parts[0] + "".join(str(v) + p for v, p in zip(values, parts[1:], strict=True))
    return out.replace("\0", "{").replace("\1", "}")


def instantiation(spec: KernelSpec) -> str:
    p = dict(spec.params)
    if spec.family == "transpose_fp32":
        return _fill(_TRANSPOSE, [p["TH"], p["BMN"], p["SFK"]])
    return _fill(_GEMM_1D2D, [
        f"cute::UMMA::Major::{p['SFB']}", 0, p["N"], p["K"], p["G"], p["BM"], p["BN"], 128, 128, 128, p["SWD"],
        p["ST"], 128, p["MATH"], p["MC"], "true" if p["A"] else "false", p["SMS"], f"GemmType::{p['T']}",
        "epilogue::transform::EpilogueIdentity"])


@dataclass(frozen=True)
class CxxKeyContext:
    """Everything besides the kernel that goes into a 0.1.x key."""

    include_dir: str  # <install>/deep_gemm/include, absolute, as the runtime passes it
    nvcc_release: tuple[int, int]
    cpp_standard: int = 20
    ptxas_verbose: bool = False
    lineinfo: bool = False
    header_root: str | None = None  # read the headers here instead (the same release installed elsewhere)

    def __post_init__(self) -> None:
        object.__setattr__(self, "nvcc_release", tuple(self.nvcc_release))

    @classmethod
    def build(cls, install, nvcc, environ: dict[str, str] | None = None) -> CxxKeyContext:
        """The context of an installed sgl-deep-gemm and nvcc (toolchain.DeepGemmInstall, toolchain.Nvcc)."""
        return cls.from_env(install.include_dir, nvcc.release, environ)

    @classmethod
    def from_env(cls, include_dir: str, nvcc_release: tuple[int, int],
                 environ: dict[str, str] | None = None) -> CxxKeyContext:
        env = os.environ if environ is None else environ

        def flag(name: str) -> bool:
            return bool(int(env.get(name, "0") or 0))

        return cls(include_dir, nvcc_release, int(env.get("DG_JIT_CPP_STANDARD", 20)),
                   flag("DG_JIT_DEBUG") or flag("DG_JIT_PTXAS_VERBOSE") or flag("DG_JIT_PTXAS_CHECK"),
                   flag("DG_JIT_WITH_LINEINFO"))

    @property
    def signature(self) -> str:
        return f"NVCC{self.nvcc_release[0]}.{self.nvcc_release[1]}"

    def flags(self) -> str:
        flags = f"-std=c++{self.cpp_standard} --diag-suppress=39,161,174,177,186,940 " \
                "--ptxas-options=--register-usage-level=10"
        if self.ptxas_verbose:
            flags += " --ptxas-options=--verbose,--warn-on-local-memory-usage"
        if self.lineinfo:
            flags += " -Xcompiler -rdynamic -lineinfo"
        return (f"{flags} -I{self.include_dir} --gpu-architecture=sm_90a "
                "--compiler-options=-fPIC,-O3,-fconcepts,-Wno-deprecated-declarations,-Wno-abi "
                "-O3 --expt-relaxed-constexpr --expt-extended-lambda")

    def source(self, spec: KernelSpec) -> str:
        """kernel.cu exactly as the JIT writes it."""
        code = instantiation(spec)
        return f"// Includes' hash value: {includes_hash(code, self.header_root or self.include_dir)}\n{code}"

    def entry_name(self, spec: KernelSpec) -> str:
        return f"kernel.{spec.family}.{digest(f'{spec.family}$${self.signature}$${self.flags()}$${self.source(spec)}')}"
