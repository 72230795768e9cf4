"""Cache-entry names and sources of sgl-deep-gemm 0.1.x's C++ JIT, computed without a GPU or the library.

That JIT files a kernel under ``<DG_JIT_CACHE_DIR>/cache/kernel.<name>.<digest>/{kernel.cu, kernel.cubin}``. The
digest is two FNV-1a-64 hashes (different seeds, each finished with splitmix64) over
``name $$ "NVCC<major>.<minor>" $$ <flags> $$ <kernel.cu>``; kernel.cu is the generated instantiation preceded by a
line with the hash of every ``deep_gemm/`` header it includes (recursively, by content). The flags hold the absolute
include path of the installed package, so entries hit only for the same install location and nvcc release.
These rules were read from the sgl-project/DeepGEMM source the 0.1.3 wheel was built from (docs/heuristics.md)
and reproduce all 35 GEMM entry names an H200 warm produced (tests/test_cxx_keys.py). Releases 0.1.4-0.1.7 keep
the key scheme (same flag, signature and entry-name format strings in their _C.so) and generate code with one
more template slot; keys/cxx_templates.py holds each release's format.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from functools import lru_cache

from dgprecompile.keys import cxx_templates
from dgprecompile.keys.hashing import fnv1a64, splitmix64
from dgprecompile.runtimes.items import KernelSpec

_INCLUDE = re.compile(r'#\s*include\s*[<"][^>"]+[>"]')


def digest(text: str | bytes) -> str:
    data = text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text
    return f"{splitmix64(fnv1a64(data, 0xC6A4A7935BD1E995)):016x}{splitmix64(fnv1a64(data, 0x9E3779B97F4A7C15)):016x}"


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


def instantiation(spec: KernelSpec, template: str = "0.1.0") -> str:
    return cxx_templates.instantiation(spec, cxx_templates.TEMPLATES[template])


@dataclass(frozen=True)
class CxxKeyContext:
    """Everything besides the kernel that goes into a 0.1.x key."""

    include_dir: str  # <install>/deep_gemm/include, absolute, as the runtime passes it
    nvcc_release: tuple[int, int]
    cpp_standard: int = 20
    ptxas_verbose: bool = False
    lineinfo: bool = False
    header_root: str | None = None  # read the headers here instead (the same release installed elsewhere)
    template: str = "0.1.0"  # the release's generated-code format (keys/cxx_templates.py)

    def __post_init__(self) -> None:
        object.__setattr__(self, "nvcc_release", tuple(self.nvcc_release))

    @classmethod
    def build(cls, install, nvcc, environ: dict[str, str] | None = None) -> CxxKeyContext:
        """The context of an installed sgl-deep-gemm and nvcc (toolchain.DeepGemmInstall, toolchain.Nvcc)."""
        template = cxx_templates.require_template(install.version)
        return cls.from_env(install.include_dir, nvcc.release, environ, template=template.id)

    @classmethod
    def from_env(cls, include_dir: str, nvcc_release: tuple[int, int],
                 environ: dict[str, str] | None = None, template: str = "0.1.0") -> CxxKeyContext:
        env = os.environ if environ is None else environ

        def flag(name: str) -> bool:
            return bool(int(env.get(name, "0") or 0))

        return cls(include_dir, nvcc_release, int(env.get("DG_JIT_CPP_STANDARD", 20)),
                   any(flag(name) for name in cls.VERBOSE_ENV), flag("DG_JIT_WITH_LINEINFO"), template=template)

    @property
    def signature(self) -> str:
        return f"NVCC{self.nvcc_release[0]}.{self.nvcc_release[1]}"

    # what DG_JIT_PTXAS_VERBOSE adds (any of VERBOSE_ENV set), and the flags after the include path (NVCCCompiler's
    # constructor)
    VERBOSE_FLAGS = " --ptxas-options=--verbose,--warn-on-local-memory-usage"
    VERBOSE_ENV = ("DG_JIT_DEBUG", "DG_JIT_PTXAS_VERBOSE", "DG_JIT_PTXAS_CHECK")
    TAIL_FLAGS = ("--gpu-architecture=sm_90a --compiler-options=-fPIC,-O3,-fconcepts,-Wno-deprecated-declarations,"
                  "-Wno-abi -O3 --expt-relaxed-constexpr --expt-extended-lambda")

    def flags(self) -> str:
        flags = f"-std=c++{self.cpp_standard} --diag-suppress=39,161,174,177,186,940 " \
                "--ptxas-options=--register-usage-level=10"
        if self.ptxas_verbose:
            flags += self.VERBOSE_FLAGS
        if self.lineinfo:
            flags += " -Xcompiler -rdynamic -lineinfo"
        return f"{flags} -I{self.include_dir} {self.TAIL_FLAGS}"

    def source(self, spec: KernelSpec) -> str:
        """kernel.cu exactly as the JIT writes it."""
        code = instantiation(spec, self.template)
        return f"// Includes' hash value: {includes_hash(code, self.header_root or self.include_dir)}\n{code}"

    def name_for_source(self, family: str, source: str) -> str:
        """The entry name of the kernel ``family`` whose kernel.cu is ``source`` (cache/entrycheck.py checks an
        entry's kernel.cu against its name with it)."""
        return f"kernel.{family}.{digest(f'{family}$${self.signature}$${self.flags()}$${source}')}"

    def entry_name(self, spec: KernelSpec) -> str:
        return self.name_for_source(spec.family, self.source(spec))

    # -- building an entry the way the runtime does (compile/backends/nvcc01.py) --
    def nvcc_command(self, nvcc: str, entry_dir: str) -> list[str]:
        """NVCCCompiler::compile's command (`nvcc kernel.cu -cubin -o kernel.cubin <flags>`)."""
        return [nvcc, os.path.join(entry_dir, "kernel.cu"), "-cubin", "-o", os.path.join(entry_dir, "kernel.cubin"),
                *shlex.split(self.flags())]

    def compile_cwd(self, entry_dir: str, scratch: str) -> str:
        return scratch  # the runtime compiles from an empty temporary directory

    def finish_entry(self, entry_dir: str, nvcc: str, command: list[str]) -> None:
        """Nothing beyond kernel.cu and kernel.cubin."""
