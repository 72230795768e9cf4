"""Where SGLang's own tvm-ffi JIT modules live: the runtime's directory name for each, computed without torch.

sglang 0.5.14 (sglang/jit_kernel/utils.py, see docs/sglang-jit.md) names a module
``sgl_kernel_jit_<marker>_<template args>_<source hash>`` and loads ``<name>.so`` from
``$TVM_FFI_CACHE_DIR/<name>__arch_<arch>__tvmffi_<tvm-ffi version>/`` when it is there, compiling otherwise.
The source hash is sha256 over every file reached from the module's CUDA sources through its includes (name
relative to jit_kernel, a NUL, the bytes, a NUL; quoted includes relative to the including file, <sgl_kernel/..>
includes relative to jit_kernel/include; a depth-first walk, last pushed first), cut to 16 hex digits. This
module computes the same name from the installed sglang's files without importing sglang; `warm` cross-checks
it against what sglang's own build produced.

sglang 0.5.9-0.5.13 (``naming: tvm-ffi-hash`` in the data) pass load_inline no build directory and let tvm-ffi pick
``$TVM_FFI_CACHE_DIR/<name>_<hash of the build>`` (0.5.9-0.5.12 name a module without a source hash, 0.5.13 with
one over absolute paths): :class:`TvmHashNaming` rebuilds what the release's load_jit hands load_inline (its
flags, with 0.5.10-0.5.13's -DSGL_CUDA_ARCH, include paths, each module's wrappers and extra flags) and asks the
installed tvm-ffi's own functions for the hash.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from importlib import metadata, util
from pathlib import Path
from typing import Any

from dgprecompile.errors import EnvironmentProblem
from dgprecompile.runtimes import family_for
from dgprecompile.runtimes.items import JitModule
from dgprecompile.runtimes.jit_loader import JitVersionSpec, release_spec

JIT_AREA = "tvm-ffi"  # the sub-directory of a dgprecompile cache that launch points TVM_FFI_CACHE_DIR at

_QUOTED = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.MULTILINE)
_QUOTED_LOCAL = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)  # 0.5.13's pattern (one space or more)
_ANGLE = re.compile(r"^\s*#\s*include\s*<(sgl_kernel/[^>]+)>", re.MULTILINE)


# ---- the installed sglang and tvm-ffi, found without importing them ---------------------------------------


@dataclass(frozen=True)
class SglangInstall:
    version: str
    package_dir: str  # .../site-packages/sglang


def find_sglang() -> SglangInstall | None:
    """The importable sglang package (location and version), without executing it."""
    spec = util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        return None
    package_dir = os.path.abspath(list(spec.submodule_search_locations)[0])
    try:
        version = metadata.version("sglang")
    except metadata.PackageNotFoundError:
        version = None
    if version is None:  # a source checkout: sglang/version.py holds __version__ = "..."
        text = (Path(package_dir) / "version.py").read_text() if (Path(package_dir) / "version.py").is_file() else ""
        match = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", text)
        version = match.group(1) if match else "unknown"
    return SglangInstall(version, package_dir)


def tvm_ffi_version() -> str | None:
    try:
        return metadata.version("apache-tvm-ffi")
    except metadata.PackageNotFoundError:
        return None


def _walk_hash(start: list[Path], ident, includes) -> str:
    """sha256 over every file reached from ``start`` through ``includes(path, text)`` (a depth-first walk, last
    pushed first, each file once) of ``ident(path) + NUL + bytes + NUL``, first 16 hex digits."""
    digest = hashlib.sha256()
    seen: set[Path] = set()
    stack = list(start)
    while stack:
        path = stack.pop()
        if path in seen or not path.is_file():
            continue
        seen.add(path)
        data = path.read_bytes()
        digest.update(ident(path).encode() + b"\0" + data + b"\0")
        stack += [p for p in includes(path, data.decode("utf-8", errors="ignore")) if p.is_file()]
    return digest.hexdigest()[:16]


def source_hash(root: Path, include_dir: Path, cuda_files: list[str]) -> str:
    """SGLang's content hash of the module sources (see the module docstring)."""

    def ident(path: Path) -> str:
        try:
            return str(path.relative_to(root))
        except ValueError:
            return path.name

    def includes(path: Path, text: str) -> list[Path]:
        return ([(path.parent / inc).resolve() for inc in _QUOTED.findall(text)]
                + [(include_dir / inc).resolve() for inc in _ANGLE.findall(text)])

    return _walk_hash([(root / "csrc" / f).resolve() for f in cuda_files], ident, includes)


def absolute_source_hash(files: list[Path]) -> str:
    """sglang 0.5.13's ``_local_jit_source_hash`` (jit_kernel/utils.py l.73-99): sha256 over every file reached from
    the module's sources through quoted includes only (relative to the including file; a depth-first walk, last
    pushed first) of ``absolute path + NUL + bytes + NUL``, first 16 hex digits. The path is absolute: the name
    depends on where sglang is installed."""
    return _walk_hash([Path(f).resolve() for f in files], str,
                      lambda path, text: [(path.parent / inc).resolve() for inc in _QUOTED_LOCAL.findall(text)])


@dataclass(frozen=True)
class JitNaming:
    """The runtime's names for a given sglang install and tvm-ffi version."""

    spec: JitVersionSpec
    sglang: SglangInstall
    tvm_ffi: str

    @classmethod
    def here(cls, sglang_version: str) -> JitNaming:
        family = family_for(sglang_version)
        if family is None:
            raise EnvironmentProblem(f"SGLang {sglang_version}'s JIT modules are not modelled")
        return cls.build(family, sglang_version)

    @classmethod
    def build(cls, family, sglang_version: str) -> JitNaming:
        """For the sglang and tvm-ffi installed here; EnvironmentProblem when they do not match the plan
        (the naming protocol of keys/schemes.py)."""
        spec = release_spec(family, sglang_version)
        if spec is None:
            raise EnvironmentProblem(f"SGLang {sglang_version}'s JIT modules are not modelled")
        install = find_sglang()
        if install is None:
            raise EnvironmentProblem(f"sglang is not importable here, so its JIT modules (sglang {sglang_version}) "
                                     "cannot be named or built", hint=spec.install_command(sglang_version))
        if install.version != sglang_version:
            raise EnvironmentProblem(f"the plan is for sglang {sglang_version} but sglang {install.version} is "
                                     f"installed ({install.package_dir}): its JIT modules differ",
                                     hint=f"plan with --sglang {install.version}, or "
                                          f"{spec.install_command(sglang_version)}")
        tvm = tvm_ffi_version()
        if tvm is None:
            raise EnvironmentProblem("apache-tvm-ffi is not installed: sglang builds its JIT modules with it",
                                     hint=spec.install_command(sglang_version))
        klass = TvmHashNaming if dict(spec.raw).get("naming") == "tvm-ffi-hash" else cls
        return klass(spec, install, tvm)

    @property
    def root(self) -> Path:
        return (Path(self.sglang.package_dir).parent / self.spec.source_root).resolve()

    def module_name(self, module: JitModule) -> str:
        base = self.spec.name_prefix + "_".join([*module.marker, *module.template])
        if not self.spec.source_hash:
            return base
        return base + "_" + source_hash(self.root, self.root / self.spec.include_dir, list(module.cuda_files))

    def entry_name(self, module: JitModule) -> str:
        """The build directory the runtime looks in (under $TVM_FFI_CACHE_DIR)."""
        return self.spec.build_dir.format(name=self.module_name(module), arch=self.spec.arch_name,
                                          tvm_ffi=self.tvm_ffi)

    def library(self, module: JitModule) -> str:
        return self.module_name(module) + ".so"

    def fingerprint(self) -> dict[str, Any]:
        return {"sglang": self.sglang.version, "tvm_ffi": self.tvm_ffi, "arch": self.spec.arch_name}

    def worker_job(self, pythons: list[str]) -> dict[str, Any]:
        """What the sglang-jit workers need: sglang's arch override, the arch, the builder modules to preload."""
        return {"arch_override": self.spec.arch_override, "arch": list(self.spec.arch), "modules": list(pythons)}

    @staticmethod
    def name_stem(family, sglang_version: str, module: JitModule) -> str:
        spec = release_spec(family, sglang_version)
        prefix = spec.name_prefix if spec else "sgl_kernel_jit_"
        data = next((m for m in (spec.modules if spec else ()) if m["id"] == module.name
                     and list(m["cuda_files"]) == list(module.cuda_files)), {})
        named = module.template if data.get("name_template", True) else ()
        return prefix + "_".join([*module.marker, *named])

    @staticmethod
    def current_fingerprint(family, arch: str) -> dict[str, Any]:
        return current_jit_fingerprint(arch)


# The child that hashes a build as tvm-ffi's build_inline does when no build directory is given (tvm-ffi 0.1.11
# cpp/extension.py l.901-946: the joined sources, each decorated by _decorate_with_tvm_ffi, then _hash_sources over
# them, the functions map, the flags and include paths), with the installed tvm-ffi's own two functions. A child
# process: importing tvm_ffi imports torch, which plan/verify do not.
_TVM_HASH_CHILD = r"""
import json, sys
from tvm_ffi.cpp import extension as ext
out = []
for b in json.loads(sys.stdin.read()):
    cpp, cuda = "\n".join(b["cpp_sources"]), "\n".join(b["cuda_sources"])
    out.append(ext._hash_sources(ext._decorate_with_tvm_ffi(cpp, {}), ext._decorate_with_tvm_ffi(cuda, {}), None,
                                 None, {}, b["cflags"], b["cuda_cflags"], b["ldflags"], b["include_paths"], None))
print("TVMHASH " + json.dumps(out))
"""


def _package_dir(name: str) -> Path | None:
    spec = util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]).resolve()


@dataclass(frozen=True)
class TvmHashNaming(JitNaming):
    """A release whose load_jit passes no build directory (0.5.9-0.5.13, ``naming: tvm-ffi-hash``): tvm-ffi names the
    directory ``<name>_<hash of the build>``. ``load_inline_args`` is what the release's load_jit hands
    load_inline (from the data: its default flags and include paths, each module's wrappers and include paths);
    the hash is the installed tvm-ffi's own (a child process: ``_TVM_HASH_CHILD``)."""

    _hashes: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    def _data(self, module: JitModule) -> dict[str, Any]:
        for m in self.spec.modules:
            if m["id"] == module.name and list(m["cuda_files"]) == list(module.cuda_files):
                return m
        raise EnvironmentProblem(f"SGLang {self.sglang.version}'s data has no module {module.name}")

    def module_name(self, module: JitModule) -> str:
        """load_jit's name: the marker, the template unless the module's data says it is not in the name
        (``name_template: false``: 0.5.10-0.5.13's per_token_group_quant_8bit), and for ``source_hash: absolute``
        (0.5.13) ``_`` + the hash of its sources by absolute path (:func:`absolute_source_hash`)."""
        named = module.template if self._data(module).get("name_template", True) else ()
        base = self.spec.name_prefix + "_".join([*module.marker, *named])
        if dict(self.spec.raw).get("source_hash") == "absolute" and module.cuda_files:
            base += "_" + absolute_source_hash([self.root / "csrc" / f for f in module.cuda_files])
        return base

    def _flags(self, flags: list[str]) -> list[str]:
        """A data file's flags with ``{sgl_cuda_arch}`` filled in: the release's -DSGL_CUDA_ARCH value for the
        target (0.5.10-0.5.13 ArchInfo.jit_flag: major * 100 + minor * 10)."""
        value = int(self.spec.arch[0]) * 100 + int(self.spec.arch[1]) * 10
        return [f.replace("{sgl_cuda_arch}", str(value)) for f in flags]

    def load_inline_args(self, module: JitModule) -> dict[str, Any]:
        defaults = dict(self.spec.raw)["load_jit"]
        data = self._data(module)
        template = ", ".join(module.template)
        includes = [str(self.root / p) for p in defaults.get("include_paths", [])]
        for path in data.get("include_paths", []):
            package, _, sub = path.partition(":")
            where = _package_dir(package)
            if where is None:
                raise EnvironmentProblem(f"{package} is not installed: sglang {self.sglang.version} builds its "
                                         f"{module.name} module with its headers", hint=self.spec.install_command(
                                             self.sglang.version))
            includes.append(str((where / sub).resolve()))
        sources = [f'#include "{(self.root / "csrc" / f).resolve()}"' for f in module.cuda_files]
        sources += [f"TVM_FFI_DLL_EXPORT_TYPED_FUNC({export}, ({kernel.replace('{args}', template)}));"
                    for export, kernel in data.get("wrappers", [])]
        return {"name": self.module_name(module), "cpp_sources": [], "cuda_sources": sources,
                "cflags": self._flags([*defaults.get("cflags", []), *data.get("extra_cflags", [])]),
                "cuda_cflags": self._flags([*defaults.get("cuda_cflags", []), *data.get("extra_cuda_cflags", [])]),
                "ldflags": [*defaults.get("ldflags", []), *data.get("extra_ldflags", [])], "include_paths": includes}

    def tvm_hash(self, module: JitModule) -> str:
        args = self.load_inline_args(module)
        key = json.dumps(args, sort_keys=True)
        if key not in self._hashes:
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
            proc = subprocess.run([sys.executable, "-c", _TVM_HASH_CHILD], input=json.dumps([args]), text=True,
                                  capture_output=True, env=env, timeout=300)
            line = next((x for x in proc.stdout.splitlines() if x.startswith("TVMHASH ")), None)
            if proc.returncode != 0 or line is None:
                raise EnvironmentProblem(f"tvm-ffi {self.tvm_ffi} could not name sglang's {module.name} module "
                                         f"(its _hash_sources/_decorate_with_tvm_ffi): {proc.stderr.strip()[-400:]}")
            self._hashes[key] = json.loads(line[len("TVMHASH "):])[0]
        return self._hashes[key]

    def entry_name(self, module: JitModule) -> str:
        return self.spec.build_dir.format(name=self.module_name(module), tvm_hash=self.tvm_hash(module))

    def worker_job(self, pythons: list[str]) -> dict[str, Any]:
        """No arch override in the release (0.5.9): the worker presets its variable (``arch_env``) instead."""
        job = super().worker_job(pythons)
        if not self.spec.arch_override:
            job["arch_env"] = dict(self.spec.raw)["arch_env"]
        return job


def current_jit_fingerprint(arch: str) -> dict[str, Any]:
    """This machine's values of the fingerprint's sglang_jit fields (None where a package is absent)."""
    install = find_sglang()
    return {"sglang": install.version if install else None, "tvm_ffi": tvm_ffi_version(), "arch": arch}
