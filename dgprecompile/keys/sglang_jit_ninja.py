"""Where SGLang's own ninja JIT loader (sglang/kernels/jit, 0.5.20-0.5.23) keeps a module: the runtime's
directory for it, computed without torch or sglang.

The release's ``load_jit`` (kernels/jit/utils/compile/loader.py) names a module ``sgl_kernel_jit_<args>``
(spec.py:55) and looks in ``$SGLANG_JIT_CACHE_DIR/<target>/<name>/build-<build key>/`` (cache.py:317-325) for a
``deps-<deps key>/`` leaf whose recorded dependency list (``sgl_deps.json``) still hashes to the leaf's own name
against the files as they stand (cache.py:369-418). This module computes:

* the build key (cache.py:275-304): sha256 over the reprs of the module args, the direct sources' anchored paths
  and contents, the ninja file the release writes (ninja.py:74-135, paths anchored), the translation units it
  compiles (spec.py:67-122) and the process-wide environment part (cache.py:233-272: the target, the text of
  ``nvcc --version`` and ``c++ --version``, the versions of five packages), each cut to 16 hex digits;
* the leaf check the runtime makes, so ``verify`` can say whether an entry is a hit here and, if not, which
  recorded file differs.

The deps key needs the compiler's own dependency closure, so it is known only after a build: a warmed entry is
the leaf ``<target>/<name>/build-<key>/deps-<key>``. The anchors (cache.py:113-136) are re-derived from the
installed packages' locations with importlib's ``find_spec`` on top-level names, which imports nothing.
``tvm_ffi/libinfo.py`` is loaded from its file (it imports only the standard library) for the include and library
directories the release puts in its ninja file (toolchain.py:424-435).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sysconfig
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

from dgprecompile.errors import EnvironmentProblem
from dgprecompile.keys.sglang_jit import SglangInstall, find_sglang
from dgprecompile.runtimes.items import JitModule
from dgprecompile.runtimes.sglang_ninja import LoadJitCall, load_jit_call

AREA = "sglang-jit"  # the sub-directory of a dgprecompile cache that launch points SGLANG_JIT_CACHE_DIR at
DEPS_FILE = "sgl_deps.json"  # cache.py:72
KEY_HEX = 16  # cache.py:75
LEAF_PREFIX = "deps-"  # cache.py:74
MAX_LEAVES = 100  # cache.py:80: the runtime looks at the newest 100 leaves only
TRUE = ("true", "1", "yes", "y")  # environ.py:143-150 (EnvBool)


def hash_parts(parts: list[Any]) -> str:
    """cache.py:193-198: sha256 over repr(part) + NUL for each part, 16 hex digits."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(repr(part).encode())
        digest.update(b"\0")
    return digest.hexdigest()[:KEY_HEX]


def _sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _package_dir(name: str) -> Path | None:
    """cache.py:100-110 for a top-level package (find_spec imports nothing for those)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.origin is not None:
        return Path(spec.origin).resolve().parent
    locations = list(spec.submodule_search_locations or [])
    return Path(locations[0]).resolve() if locations else None


def cuda_home(environ: dict[str, str] | None = None) -> str:
    """toolchain.py:300-314: CUDA_HOME or CUDA_PATH, else the nvcc on PATH's grandparent, else /usr/local/cuda."""
    env = os.environ if environ is None else environ
    configured = env.get("CUDA_HOME") or env.get("CUDA_PATH")
    if configured is not None:
        return configured
    nvcc = shutil.which("nvcc", path=env.get("PATH"))
    return os.path.dirname(os.path.dirname(nvcc)) if nvcc else "/usr/local/cuda"


def _is_toolkit(home: str) -> bool:
    return os.path.isfile(os.path.join(home, "bin", "nvcc")) and os.path.exists(os.path.join(home, "lib64",
                                                                                              "libcudart.so"))


def toolkit_home(environ: dict[str, str] | None = None) -> str:
    """The CUDA_HOME this family builds with and launch keeps: the user's, else the runtime's own choice
    (cuda_home) where that is a toolkit it can link against, else the first toolkit of the resolved nvcc's
    grandparent and /usr/local/cuda. A bare /usr/local/bin/nvcc makes the runtime's choice /usr/local, whose
    missing lib64/libcudart.so fails every link (ninja.py's -L$CUDA_HOME/lib64 -lcudart); its spelling is part of
    every build key, so warm, verify and launch must agree on it."""
    env = os.environ if environ is None else environ
    chosen = cuda_home(env)
    if env.get("CUDA_HOME") or env.get("CUDA_PATH") or _is_toolkit(chosen):
        return chosen
    nvcc = shutil.which("nvcc", path=env.get("PATH"))
    for candidate in ([os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))] if nvcc else []) + ["/usr/local/cuda"]:
        if _is_toolkit(candidate):
            return candidate
    return chosen


@cache
def _version_text(path: str) -> str:
    """cache.py:257-263: the compiler's `--version` output, or "unknown"."""
    try:
        return subprocess.check_output([path, "--version"], text=True)
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _dist(name: str) -> str:
    try:
        return metadata.version(name)
    except (metadata.PackageNotFoundError, ValueError):
        return "absent"


def _first_line(text: str, marker: str = "") -> str:
    lines = [x.strip() for x in text.splitlines() if x.strip()]
    picked = [x for x in lines if marker and marker in x] or lines or ["unknown"]
    return picked[0]


@cache
def _libinfo(tvm_ffi_dir: str):
    """tvm_ffi/libinfo.py, loaded from its file without running tvm_ffi/__init__ (it imports the stdlib only)."""
    spec = importlib.util.spec_from_file_location("_dgp_tvm_ffi_libinfo", os.path.join(tvm_ffi_dir, "libinfo.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _quote_path_flags(flags: list[str]) -> list[str]:
    """ninja.py:56-71."""
    out = []
    for flag in flags:
        for prefix in ("-I", "-L"):
            if flag.startswith(prefix) and len(flag) > len(prefix):
                out.append(prefix + shlex.quote(flag[len(prefix):]).replace("$", "$$"))
                break
        else:
            out.append(flag)
    return out


def _escape(path: str) -> str:
    """ninja.py:39-41."""
    return path.replace("$", "$$").replace(":", "$:").replace(" ", "$ ")


# spec.py:102-108: what the generated wrapper includes before the sources
_FFI_INCLUDES = ("#include <tvm/ffi/container/tensor.h>", "#include <tvm/ffi/dtype.h>", "#include <tvm/ffi/error.h>",
                 "#include <tvm/ffi/extra/c_env_api.h>", "#include <tvm/ffi/function.h>")


def _wrapper_source(files: list[str], wrappers: list[tuple[str, str]]) -> str:
    """spec.py:111-122."""
    lines = list(_FFI_INCLUDES) + [f'#include "{p}"' for p in files] + ["namespace sglang {"]
    lines += [f"TVM_FFI_DLL_EXPORT_TYPED_FUNC({e}, ({k}));" for e, k in wrappers]
    lines.append("}  // namespace sglang")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class NinjaNaming:
    """The runtime's names for the sglang installed here (the naming protocol of keys/schemes.py)."""

    family: Any
    spec: Any  # runtimes/jit_loader.py JitVersionSpec of this release
    sglang: SglangInstall
    environ: tuple[tuple[str, str], ...] = ()  # the variables the runtime will see that the key reads

    # -- the install --
    @classmethod
    def build(cls, family, sglang_version: str, environ: dict[str, str] | None = None) -> NinjaNaming:
        spec = family.release(sglang_version)
        if spec is None:
            raise EnvironmentProblem(f"SGLang {sglang_version}'s JIT modules are not modelled")
        install = find_sglang()
        if install is None:
            raise EnvironmentProblem(f"sglang is not importable here, so its JIT modules (sglang {sglang_version}) "
                                     "cannot be named or built",
                                     hint=f"install it: pip install --no-deps sglang=={sglang_version}")
        if install.version != sglang_version:
            raise EnvironmentProblem(f"the plan is for sglang {sglang_version} but sglang {install.version} is "
                                     f"installed ({install.package_dir}): its JIT modules differ",
                                     hint=f"plan with --sglang {install.version}, or install sglang=={sglang_version}")
        if _package_dir("tvm_ffi") is None:
            raise EnvironmentProblem("apache-tvm-ffi is not installed: sglang's JIT links and loads its modules "
                                     "with it", hint="pip install apache-tvm-ffi (the version your sglang pins)")
        env = dict(os.environ if environ is None else environ)
        keep = ("CUDA_HOME", "CUDA_PATH", "PATH", "CXX", "SGLANG_JIT_LOG_RESOURCE_USAGE")
        return cls(family, spec, install, tuple(sorted((k, env[k]) for k in keep if k in env)))

    @property
    def raw(self) -> dict[str, Any]:
        return dict(self.spec.raw)

    @property
    def env(self) -> dict[str, str]:
        return dict(self.environ)

    @property
    def kernel_path(self) -> Path:
        """paths.py:150-163: sglang/kernels/jit, resolved."""
        return (Path(self.sglang.package_dir).parent / self.spec.source_root).resolve()

    @property
    def target(self) -> str:
        """cache.py:228-230 (`sm90a`); arch.py:248-267 gives Hopper the `a` suffix."""
        major, minor = self.spec.arch
        return f"sm{major}{minor}{self.raw.get('arch_suffix', 'a')}"

    @property
    def target_name(self) -> str:
        major, minor = self.spec.arch
        return f"{major}.{minor}{self.raw.get('arch_suffix', 'a')}"

    def cuda_home(self) -> str:
        return toolkit_home(self.env)

    def nvcc(self) -> str:
        return os.path.join(self.cuda_home(), "bin", "nvcc")  # toolchain.py:335-346

    def cxx(self) -> str:
        return self.env.get("CXX", "c++")  # toolchain.py:390-397

    def _tvm_ffi(self) -> tuple[list[str], str, str]:
        """toolchain.py:424-435: (include dirs, library dir, library name)."""
        info = _libinfo(str(_package_dir("tvm_ffi")))
        lib = Path(info.find_libtvm_ffi())
        includes = list(dict.fromkeys([info.find_include_path(), info.find_dlpack_include_path()]))
        return includes, str(lib.parent), lib.stem.removeprefix("lib")

    def anchors(self) -> list[tuple[str, Path]]:
        """cache.py:113-136, most specific first."""
        candidates = [("kernels", self.kernel_path), ("tvm_ffi", _package_dir("tvm_ffi")),
                      ("pkg:flashinfer", _package_dir("flashinfer")), ("pkg:deep_gemm", _package_dir("deep_gemm")),
                      ("pkg:nvidia", _package_dir("nvidia")), ("toolkit", Path(self.nvcc()).parent.parent),
                      ("sitepkgs", Path(sysconfig.get_paths()["purelib"])), ("sys", Path("/usr"))]
        roots = [(t, p.resolve()) for t, p in candidates if p is not None and p.exists()]
        roots.sort(key=lambda item: len(str(item[1])), reverse=True)
        return roots

    def normalize_path(self, path: Path) -> tuple[str, str]:
        for token, root in self.anchors():
            try:
                return token, str(path.relative_to(root))
            except ValueError:
                continue
        return "abs", str(path)

    def normalize_text(self, text: str) -> str:
        for token, root in self.anchors():
            text = text.replace(str(root), f"<{token}>")
        return text

    def resolve_anchor(self, token: str, relpath: str) -> Path | None:
        if token == "abs":
            return Path(relpath)
        return next((base / relpath for t, base in self.anchors() if t == token), None)

    # -- the build key --
    def cuda_cflags(self, call: LoadJitCall) -> list[str]:
        """arch.py:297-320 (get_default_target_flags) + the call's own; loader.py:193-199 adds -Xptxas=-v under
        SGLANG_JIT_LOG_RESOURCE_USAGE."""
        major, minor = self.spec.arch
        extra = list(call.extra_cuda_cflags)
        if self.env.get("SGLANG_JIT_LOG_RESOURCE_USAGE", "").lower() in TRUE:
            extra.append("-Xptxas=-v")
        return [f"-DSGL_CUDA_ARCH={major * 100 + minor * 10}", "-std=c++20", "-O3", "--expt-relaxed-constexpr", *extra]

    def sources(self, call: LoadJitCall) -> list[str]:
        return [str((self.kernel_path / "csrc" / f).resolve()) for f in call.cuda_files]  # spec.py:125-134

    def ninja_file(self, call: LoadJitCall) -> str:
        """ninja.py:74-135 for a header-only module with CUDA sources only (every modelled module)."""
        tvm_includes, lib_dir, lib_name = self._tvm_ffi()
        includes = tvm_includes + [str(self.kernel_path / "include")]  # paths.py:164 DEFAULT_INCLUDE
        include_flags = [f"-I{p}" for p in includes]
        cxxflags = _quote_path_flags(["-fPIC", "-std=c++20", "-O3", *include_flags])
        target = f"{self.spec.arch[0]}{self.spec.arch[1]}{self.raw.get('arch_suffix', 'a')}"
        cudaflags = _quote_path_flags(["-Xcompiler", "-fPIC", f"-gencode=arch=compute_{target},code=sm_{target}",
                                       *self.cuda_cflags(call), *include_flags])
        stubs = os.path.join(self.cuda_home(), "lib64", "stubs")
        ldflags = _quote_path_flags(["-shared", f"-L{lib_dir}", f"-l{lib_name}", f"-L{self.cuda_home()}/lib64",
                                     "-lcudart", *(f.replace("{cuda_stubs}", stubs) for f in call.extra_ldflags)])
        name = self.module_name_of(call)
        q = lambda s: shlex.quote(s).replace("$", "$$")  # noqa: E731  (ninja.py:44-53)
        lines = ["ninja_required_version = 1.3", f"cxx = {q(self.cxx())}", f"nvcc = {q(self.nvcc())}",
                 f"cxxflags = {' '.join(cxxflags)}", f"cudaflags = {' '.join(cudaflags)}",
                 f"ldflags = {' '.join(ldflags)}", "",
                 "rule compile_cxx", "  depfile = $out.d",
                 '  command = $cxx -MD -MF "$out.d" $cxxflags -c "$in" -o "$out"', "",
                 "rule compile_cuda", "  depfile = $out.d",
                 '  command = $nvcc -MD -MF "$out.d" $cudaflags -c "$in" -o "$out"', "",
                 "rule link", '  command = $cxx $in $ldflags -o "$out"', "",
                 f"build cuda_0.o: compile_cuda {_escape('cuda.cu')}", "",
                 f"build {name}.so: link cuda_0.o", "", f"default {name}.so", ""]
        return "\n".join(lines)

    def environment_key(self) -> str:
        """cache.py:233-272 for CUDA."""
        compilers = [_version_text(self.nvcc()), _version_text(self.cxx())]
        versions = [(name, _dist(name)) for name in self.raw.get("versioned_packages", ())]
        return hash_parts([f"cuda:{self.target_name}", compilers, versions])

    def build_key(self, call: LoadJitCall) -> str:
        """cache.py:275-304."""
        sources = self.sources(call)
        digests = tuple((self.normalize_path(Path(p).resolve()), _sha256(Path(p).resolve())) for p in sorted(sources))
        units = [("", True, _wrapper_source(sources, list(call.cuda_wrappers)))]
        return hash_parts([call.args, digests, self.normalize_text(self.ninja_file(call)),
                           self.normalize_text(repr(units)), self.environment_key()])

    @staticmethod
    def module_name_of(call: LoadJitCall) -> str:
        return "sgl_kernel_jit_" + "_".join(call.args)  # spec.py:20,55-57

    # -- the naming protocol of keys/schemes.py --
    def module_name(self, module: JitModule) -> str:
        return self.module_name_of(load_jit_call(module))

    def entry_name(self, module: JitModule) -> str:
        """The runtime's scope directory for this module, relative to $SGLANG_JIT_CACHE_DIR (cache.py:322-325);
        a warmed entry is one deps-<key> leaf inside it."""
        call = load_jit_call(module)
        return f"{self.target}/{self.module_name_of(call)}/build-{self.build_key(call)}"

    def library(self, module: JitModule) -> str:
        return self.module_name(module) + ".so"

    def fingerprint(self) -> dict[str, Any]:
        return current_fingerprint(self.family, self.target_name, self)  # arch 9.0a: the key's cuda:9.0a

    def worker_job(self, pythons: list[str]) -> dict[str, Any]:
        return {"arch_override": self.spec.arch_override, "arch": list(self.spec.arch), "modules": list(pythons),
                "loader": self.raw["loader"], "ninja_cuda_home": self.cuda_home(), "family": self.family.id}

    @staticmethod
    def name_stem(family, sglang_version: str, module: JitModule) -> str:
        """The whole runtime name: it holds no source hash (spec.py:55-57)."""
        return NinjaNaming.module_name_of(load_jit_call(module))

    @staticmethod
    def current_fingerprint(family, arch: str) -> dict[str, Any]:
        return current_fingerprint(family, arch, None)

    # -- the runtime's hit test (cache.py:337-418) --
    def leaf_problem(self, leaf: Path, module: JitModule) -> str | None:
        """None when the runtime would load this leaf here, else why not (naming the first file that differs)."""
        try:
            entries = json.loads((leaf / DEPS_FILE).read_text())
        except FileNotFoundError:
            return f"{DEPS_FILE} missing"
        except (OSError, ValueError) as exc:
            return f"{DEPS_FILE} unreadable ({exc})"
        if not isinstance(entries, list) or not all(isinstance(e, list) and len(e) == 3 for e in entries):
            return f"{DEPS_FILE} is not a dependency list"
        current = []
        changed = []
        for root, relpath, digest in entries:
            path = self.resolve_anchor(root, relpath)
            now = _sha256(path) if path is not None else None
            if now is None:
                return f"recorded dependency {root}:{relpath} is missing here"
            if now != digest:
                changed.append(f"{root}:{relpath}")
            current.append((root, relpath, now))
        if changed:
            return f"recorded dependency {changed[0]} changed" + (f" (and {len(changed) - 1} more)" if len(changed) > 1
                                                                  else "")
        if LEAF_PREFIX + hash_parts(current) != leaf.name:
            return f"its dependency list does not hash to its name {leaf.name}"
        if not (leaf / self.library(module)).is_file():
            return f"{self.library(module)} missing"
        return None

    def hit(self, scope: Path, module: JitModule) -> Path | None:
        """The leaf the runtime would load from a scope directory (newest first), or None."""
        try:
            leaves = sorted((p for p in scope.iterdir() if p.name.startswith(LEAF_PREFIX)),
                            key=lambda p: p.stat().st_mtime, reverse=True)
        except OSError:
            return None
        return next((leaf for leaf in leaves[:MAX_LEAVES] if self.leaf_problem(leaf, module) is None), None)


def current_fingerprint(family, arch: str, naming: NinjaNaming | None) -> dict[str, Any]:
    """Every field of the release's own build key that is not the module's own (cache.py:233-272 and the paths
    its ninja file holds): the sglang release (its sources and loader), the target, both compilers (path as the
    ninja file names it, and their `--version`), the five versioned packages, the resource-usage switch."""
    env = naming.env if naming is not None else dict(os.environ)
    home = toolkit_home(env)
    nvcc = os.path.join(home, "bin", "nvcc")
    cxx = env.get("CXX", "c++")
    install = find_sglang()
    packages = (naming.raw.get("versioned_packages") if naming is not None else None) or (
        "apache-tvm-ffi", "flashinfer-python", "deep_gemm", "nvidia-mathdx", "torch")
    nvcc_text, cxx_text = _version_text(nvcc), _version_text(cxx)
    return {"sglang": install.version if install else None, "arch": arch, "cuda_home": home,
            "nvcc": nvcc, "nvcc_version": f"{_first_line(nvcc_text, 'release')} "
                                          f"(sha256 {hashlib.sha256(nvcc_text.encode()).hexdigest()[:12]})",
            "cxx": cxx, "cxx_version": f"{_first_line(cxx_text)} "
                                       f"(sha256 {hashlib.sha256(cxx_text.encode()).hexdigest()[:12]})",
            **{f"pkg_{p.replace('-', '_')}": _dist(p) for p in packages},
            "log_resource_usage": env.get("SGLANG_JIT_LOG_RESOURCE_USAGE", "").lower() in TRUE}


FINGERPRINT_FIELDS = ("sglang", "arch", "cuda_home", "nvcc", "nvcc_version", "cxx", "cxx_version",
                      "pkg_apache_tvm_ffi", "pkg_flashinfer_python", "pkg_deep_gemm", "pkg_nvidia_mathdx",
                      "pkg_torch", "log_resource_usage")
