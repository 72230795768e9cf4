"""Cache-entry names and sources of sgl-deep-gemm 0.2.x's JIT (DeepJIT), computed without a GPU or the library.

DeepJIT files a kernel under ``<first root of DG_JIT_CACHE_DIR>/cache/<name>.<digest>/`` with ``kernel.cu``,
``kernel.cubin``, ``meta.json`` and ``.committed`` (a hit needs ``.committed``, a load ``kernel.cubin``). The digest
is a two-lane FNV-1a hash, every update prefixed by its 8-byte little-endian length, finished with split-mix, over:

1. the extra signature ``cutlass-<CUTLASS_VERSION>`` (DeepGEMM's ``csrc/runtime/jit.hpp``);
2. the hex digest of the whole ``nvcc --version`` output;
3. the compiler flags joined by spaces (``CompilerOptions::get_flags``; DeepGEMM appends two);
4. the post-hook hash (empty: DeepGEMM sets none);
5. the source hash: the generated code, then each ``deep_gemm/`` include's own source hash, recursively.

The include directory is passed to nvcc outside the hashed flags, so the install path is not in the key: a cache
moves between machines with the same release, nvcc ``--version`` text, DG_JIT_* flags and SM count. Rules read
from the DeepJIT headers the 0.2.0-0.2.5 wheels ship (``deep_gemm/include/deep_jit``: runtime/runtime.hpp
``cache_key``, utils/hash.hpp, utils/parser.hpp, backend/cuda/options.hpp, backend/cuda/backend.hpp; identical in
these parts across 0.2.0-0.2.5). kernel.cu is the generated code itself (keys/cxx_templates.py), no header line.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache

from dgprecompile.errors import InputError
from dgprecompile.keys import cxx_templates
from dgprecompile.keys.hashing import FNV_PRIME_64, MASK64, splitmix64
from dgprecompile.runtimes.items import KernelSpec

_SPACE = b" \t\f\v"
INCLUDE_PREFIX = b"deep_gemm/"
DG_EXTRA_FLAGS = ("--diag-suppress=39,161,174,177,186,940", "--compiler-options=-Wno-deprecated-declarations,-Wno-abi")
ENTRY_FILES = ("kernel.cu", "kernel.cubin", "meta.json", ".committed")


class Fnv1a:
    def __init__(self) -> None:
        self.s0, self.s1 = 0xC6A4A7935BD1E995, 0xFF51AFD7ED558CCD

    def update(self, data: bytes | str) -> Fnv1a:
        raw = data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data
        s0, s1 = self.s0, self.s1
        for byte in len(raw).to_bytes(8, "little") + raw:
            s0 = ((s0 ^ byte) * FNV_PRIME_64) & MASK64
            s1 = ((s1 ^ byte) * 0x9E3779B97F4A7C15) & MASK64
        self.s0, self.s1 = s0, s1
        return self

    def copy(self) -> Fnv1a:
        other = Fnv1a()
        other.s0, other.s1 = self.s0, self.s1
        return other

    def hexdigest(self) -> str:
        return f"{splitmix64(self.s0):016x}{splitmix64(self.s1):016x}"


def hex_digest(data: bytes | str) -> str:
    return Fnv1a().update(data).hexdigest()


def parse_include(line: bytes) -> bytes | None:
    """The tracked header a line includes (Parser::parse_include), or None."""
    line = line.lstrip(_SPACE)
    if not line.startswith(b"#"):
        return None
    line = line[1:].lstrip(_SPACE)
    if not line.startswith(b"include"):
        return None
    line = line[len(b"include"):].lstrip(_SPACE)
    if not line or line[:1] not in (b"<", b'"'):
        return None
    closing = re.search(rb'[>"]', line[1:])
    if closing is None:
        return None
    end = closing.start() + 1
    name = line[1:end]
    if line[:1] != b"<" or line[end:end + 1] != b">" or not name or name[:1] in _SPACE or name[-1:] in _SPACE:
        raise InputError(f"DeepJIT rejects this include: {line[:end + 1].decode(errors='replace')}")
    return name if name.startswith(INCLUDE_PREFIX) else None


@lru_cache(maxsize=8192)
def _header_hash(include_dir: str, name: bytes) -> str:
    with open(os.path.join(include_dir, name.decode()), "rb") as f:
        return source_hash(f.read(), include_dir)


def source_hash(code: bytes | str, include_dir: str) -> str:
    """Parser::parse_into_hash: the code, then each tracked include's own hash."""
    raw = code.encode("utf-8", "surrogateescape") if isinstance(code, str) else code
    h = Fnv1a().update(raw)
    for line in raw.split(b"\n"):
        name = parse_include(line)
        if name is not None:
            h.update(_header_hash(include_dir, name))
    return h.hexdigest()


def cutlass_version(include_dir: str) -> int:
    """CUTLASS_VERSION (major*100 + minor*10 + patch) of the CUTLASS headers shipped beside deep_gemm."""
    text = open(os.path.join(include_dir, "cutlass", "version.h")).read()
    part = {m.group(1): int(m.group(2)) for m in re.finditer(r"#define CUTLASS_(MAJOR|MINOR|PATCH) (\d+)", text)}
    return part["MAJOR"] * 100 + part["MINOR"] * 10 + part["PATCH"]


def _env_bool(env: dict[str, str], suffix: str) -> bool:
    """Env::get<bool>: DG_<suffix>, else DJ_<suffix>; true/false, yes/no or an integer."""
    for name in ("DG_" + suffix, "DJ_" + suffix):
        if name in env:
            value = env[name].strip().lower()
            if value in ("true", "yes"):
                return True
            if value in ("false", "no"):
                return False
            try:
                return int(value) != 0
            except ValueError:
                raise InputError(f"{name}={env[name]!r} is not a boolean the DeepJIT runtime accepts") from None
    return False


@dataclass(frozen=True)
class DeepJitKeyContext:
    """Everything besides the kernel that goes into a 0.2.x key."""

    include_dir: str  # <install>/deep_gemm/include (passed to nvcc; not in the key)
    nvcc_version_text: str  # the exact `nvcc --version` output
    cutlass: int
    template: str
    arch: str = "90a"
    cpp_standard: int = 20
    ptxas_verbose: bool = False
    check_no_spills: bool = False
    check_no_local_memory: bool = False
    line_info: bool = False
    header_root: str | None = None  # read the headers here instead (the same release installed elsewhere)
    extra_nvcc_flags: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        object.__setattr__(self, "extra_nvcc_flags", tuple(self.extra_nvcc_flags))

    @classmethod
    def build(cls, install, nvcc, environ: dict[str, str] | None = None) -> DeepJitKeyContext:
        template = cxx_templates.require_template(install.version)
        return cls.from_env(install.include_dir, nvcc.version_text, template.id, environ)

    @classmethod
    def from_env(cls, include_dir: str, nvcc_version_text: str, template: str,
                 environ: dict[str, str] | None = None, header_root: str | None = None) -> DeepJitKeyContext:
        env = dict(os.environ if environ is None else environ)
        debug = _env_bool(env, "JIT_DEBUG")
        std = env.get("DG_JIT_CPP_STANDARD") or env.get("DJ_JIT_CPP_STANDARD") or "20"
        return cls(include_dir, nvcc_version_text, cutlass_version(header_root or include_dir), template,
                   cpp_standard=int(std), ptxas_verbose=debug or _env_bool(env, "JIT_PTXAS_VERBOSE"),
                   check_no_spills=_env_bool(env, "JIT_CHECK_NO_SPILLS"),
                   check_no_local_memory=_env_bool(env, "JIT_CHECK_NO_LOCAL_MEMORY"),
                   line_info=debug or _env_bool(env, "JIT_WITH_LINEINFO"), header_root=header_root)

    def flags(self) -> list[str]:
        """CompilerOptions::get_flags with DeepGEMM's defaults (backend/cuda/options.hpp)."""
        flags = [f"--gpu-architecture=sm_{self.arch}", "-O3", "--compiler-options=-O3"]
        if self.ptxas_verbose:
            flags.append("--ptxas-options=--verbose")
        flags.append("--ptxas-options=--register-usage-level=10")
        if self.check_no_spills:
            flags.append("--ptxas-options=--warn-on-spills")
        if self.check_no_local_memory:
            flags.append("--ptxas-options=--warn-on-local-memory-usage")
        if self.line_info:
            flags.append("--generate-line-info")
        flags += [f"-std=c++{self.cpp_standard}", "--compiler-options=-fPIC", "--compiler-options=-fconcepts",
                  "--expt-relaxed-constexpr", "--expt-extended-lambda", *DG_EXTRA_FLAGS, *self.extra_nvcc_flags]
        return flags

    def source(self, spec: KernelSpec) -> str:
        """kernel.cu exactly as the runtime writes it (the generated code, nothing prepended)."""
        return cxx_templates.instantiation(spec, cxx_templates.TEMPLATES[self.template])

    def digest(self, spec: KernelSpec) -> str:
        return self._digest(self.source(spec))

    def _digest(self, source: str) -> str:
        h = Fnv1a().update(f"cutlass-{self.cutlass}").update(hex_digest(self.nvcc_version_text))
        h.update(" ".join(self.flags())).update("")
        return h.update(source_hash(source, self.header_root or self.include_dir)).hexdigest()

    def name_for_source(self, family: str, source: str) -> str:
        """The entry name of the kernel ``family`` whose kernel.cu is ``source`` (cache/entrycheck.py checks an
        entry's kernel.cu against its name with it)."""
        return f"{family}.{self._digest(source)}"

    def entry_name(self, spec: KernelSpec) -> str:
        return self.name_for_source(spec.family, self.source(spec))

    # -- building an entry the way the runtime does (compile/backends/nvcc01.py) --
    def nvcc_command(self, nvcc: str, entry_dir: str) -> list[str]:
        """CUDA::compile's command; the runtime runs it from inside the entry's build directory."""
        return [nvcc, os.path.join(entry_dir, "kernel.cu"), "--cubin", "--output-file",
                os.path.join(entry_dir, "kernel.cubin"), *self.flags(), "--include-path", self.include_dir]

    def compile_cwd(self, entry_dir: str, scratch: str) -> str:
        return entry_dir

    def finish_entry(self, entry_dir: str, nvcc: str, command: list[str]) -> None:
        """meta.json (what the runtime records; it never reads it back) and the .committed marker."""
        meta = {"command": " ".join(command),
                "config": {"extra_signature": f"cutlass-{self.cutlass}", "include_dirs": [self.include_dir],
                           "include_prefixes": [INCLUDE_PREFIX.decode()]},
                "compiler_info": {"path": nvcc, "version": self.nvcc_version_text},
                "compiler_options": {"arch": self.arch, "flags": self.flags()},
                "written_by": "dgprecompile (GPU-free nvcc build)"}
        with open(os.path.join(entry_dir, "meta.json"), "w") as f:
            json.dump(meta, f)
        open(os.path.join(entry_dir, ".committed"), "w").close()
