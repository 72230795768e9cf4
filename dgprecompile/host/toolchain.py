"""What a DeepGEMM cache key depends on, read without importing torch or DeepGEMM.

nvcc (path and version text), the installed DeepGEMM (distribution, version, location, header hash) and the
DG_JIT_* variables that change compiler flags.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata, util
from pathlib import Path

from dgprecompile.data import load_yaml
from dgprecompile.errors import EnvironmentProblem

# variables that change what DeepGEMM compiles or the key it files the result under
KEY_ENV_VARS = (
    "DG_JIT_OVERRIDE_CPP_STANDARD", "DG_JIT_CPP_STANDARD", "DG_JIT_PTXAS_VERBOSE", "DG_JIT_DEBUG",
    "DG_JIT_WITH_LINEINFO", "DG_JIT_USE_NVRTC", "DG_JIT_DISABLE_FFMA_INTERLEAVE", "DG_JIT_PTXAS_CHECK",
    "DG_JIT_CHECK_NO_SPILLS", "DG_JIT_CHECK_NO_LOCAL_MEMORY",
)


@dataclass(frozen=True)
class Nvcc:
    path: str
    version_text: str

    @property
    def release(self) -> tuple[int, int]:
        match = re.search(r"release (\d+)\.(\d+)", self.version_text)
        if not match:
            raise EnvironmentProblem(f"cannot read the version of nvcc at {self.path}")
        return int(match.group(1)), int(match.group(2))


NVCC_SEARCH = "DG_JIT_NVCC_COMPILER, CUDA_HOME, CUDA_PATH, /usr/local/cuda, PATH"


def locate_nvcc(environ: dict[str, str] | None = None) -> tuple[str | None, str]:
    """The nvcc a DeepGEMM runtime would use and what found it: DG_JIT_NVCC_COMPILER, else CUDA_HOME/CUDA_PATH,
    else /usr/local/cuda, else the first nvcc on PATH."""
    env = os.environ if environ is None else environ
    candidates = [(env.get("DG_JIT_NVCC_COMPILER"), "DG_JIT_NVCC_COMPILER")]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if env.get(var):
            candidates.append((os.path.join(env[var], "bin", "nvcc"), var))
    candidates.append(("/usr/local/cuda/bin/nvcc", "/usr/local/cuda"))
    candidates.append((shutil.which("nvcc", path=env.get("PATH")), "PATH"))
    for path, where in candidates:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path, where
    return None, f"not found ({NVCC_SEARCH})"


def default_nvcc_path(environ: dict[str, str] | None = None) -> str | None:
    return locate_nvcc(environ)[0]


def toolkit_libcuda_stub(homes: list[str | None]) -> Path | None:
    """The CUDA toolkit's link-time libcuda.so stub (``lib64/stubs``, else ``targets/<arch>/lib/stubs``) under the
    first of ``homes`` (empty ones skipped) that has one; None where none has."""
    for home in filter(None, homes):
        for stub in [Path(home) / "lib64" / "stubs" / "libcuda.so", *Path(home).glob("targets/*/lib/stubs/libcuda.so")]:
            if stub.is_file():
                return stub
    return None


def driver_libcuda_dirs(environ: dict[str, str] | None = None) -> list[str]:
    """The folders this machine's dynamic loader has the driver's ``libcuda.so.1`` in: those ``ldconfig -p`` lists,
    else the LD_LIBRARY_PATH folders that hold one (the places Triton's own search looks); [] without a driver."""
    env = os.environ if environ is None else environ
    try:
        listed = subprocess.run(["/sbin/ldconfig", "-p"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        listed = ""
    dirs = [os.path.dirname(line.split()[-1]) for line in listed.splitlines() if line.split()[:1] == ["libcuda.so.1"]]
    if not dirs:
        searched = env.get("LD_LIBRARY_PATH", "").split(":")
        dirs = [d for d in searched if d and os.path.exists(os.path.join(d, "libcuda.so.1"))]
    return list(dict.fromkeys(dirs))


@lru_cache(maxsize=8)
def probe_nvcc(path: str) -> Nvcc:
    try:
        proc = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvironmentProblem(f"cannot run nvcc at {path}: {exc}") from None
    if proc.returncode != 0 or "release" not in proc.stdout:  # one line: not what a program prints (a licence)
        said = (proc.stderr.strip() or proc.stdout.strip() or "nothing").splitlines()[0][:60]
        raise EnvironmentProblem(f"{path} is not nvcc: `--version` exited {proc.returncode} and named no CUDA "
                                 f"release (it printed: {said})",
                                 hint="pass --nvcc the CUDA toolkit's nvcc (e.g. /usr/local/cuda/bin/nvcc)")
    return Nvcc(path, proc.stdout)


def find_nvcc(path: str | None = None) -> Nvcc:
    if path is None:
        _refuse_missing_cuda_home(os.environ)
    chosen = path or default_nvcc_path()
    if chosen is None:
        raise EnvironmentProblem(f"no nvcc found ({NVCC_SEARCH})",
                                 hint="install the CUDA toolkit (nvcc >= 12.3) or pass --nvcc PATH")
    if not os.path.isfile(chosen):
        raise EnvironmentProblem(f"nvcc not found at {chosen}", hint="pass --nvcc PATH to an existing nvcc")
    return probe_nvcc(chosen)


def _refuse_missing_cuda_home(env) -> None:
    """CUDA_HOME (or CUDA_PATH) naming no directory is a typo, not "look elsewhere": the runtime's JIT reads the
    same variable, so a cache built with another nvcc would not be the one it looks up."""
    if env.get("DG_JIT_NVCC_COMPILER"):
        return
    for var in ("CUDA_HOME", "CUDA_PATH"):
        value = env.get(var)
        if value is not None and not os.path.isdir(value):
            from dgprecompile.errors import InputError

            raise InputError(f"{var}={value} is not a directory (it should be the CUDA toolkit, holding bin/nvcc)",
                             hint=f"set {var} to the CUDA toolkit (e.g. /usr/local/cuda) or unset it, or pass "
                                  "--nvcc PATH")
        if value is not None:
            return  # the first one set decides, as locate_nvcc reads them


@dataclass(frozen=True)
class DeepGemmInstall:
    distribution: str | None  # sgl-kernel, sgl-deep-gemm, deep-gemm; None when unknown
    version: str | None
    package_dir: str  # .../site-packages/deep_gemm
    generation: str  # an id of generations.GENERATIONS (sgl-kernel-cxx: headers not read)

    @property
    def include_dir(self) -> str:
        return os.path.join(self.package_dir, "include")


def _dist_owning(package_dir: str) -> tuple[str | None, str | None]:
    for name in ("sgl-deep-gemm", "sgl-kernel", "sglang-kernel", "deep-gemm", "deep_gemm"):
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        files = dist.files or []
        if any(str(f).startswith("deep_gemm/") for f in files):
            root = Path(str(dist.locate_file("deep_gemm")))
            if root.resolve() == Path(package_dir).resolve():
                return dist.metadata["Name"], dist.version
    return None, None


def generation_of(package_dir: str, distribution: str | None, version: str | None) -> str:
    # The package layout tells the JIT apart: the legacy Python JIT has deep_gemm/jit/compiler.py.
    if os.path.isfile(os.path.join(package_dir, "jit", "compiler.py")):
        return "legacy"
    if distribution == "sgl-deep-gemm" and version:
        return "sgl-deep-gemm-0.2" if version.split(".")[:2] >= ["0", "2"] else "sgl-deep-gemm-0.1"
    if distribution in ("sgl-kernel", "sglang-kernel", None):  # their C++ JITs: known by the headers
        known = known_headers().get(headers_hash(os.path.join(package_dir, "include")))
        if known:
            return known["generation"]
    if os.path.isdir(os.path.join(package_dir, "include", "deep_jit")):
        return "sgl-deep-gemm-0.2"
    return "sgl-kernel-cxx"


def find_deepgemm() -> DeepGemmInstall | None:
    """Locate the importable deep_gemm package without executing it."""
    spec = util.find_spec("deep_gemm")
    if spec is None or not spec.submodule_search_locations:
        return None
    package_dir = os.path.abspath(list(spec.submodule_search_locations)[0])
    dist, version = _dist_owning(package_dir)
    if version is None:
        version_file = Path(package_dir) / "VERSION"
        if version_file.is_file():
            version = version_file.read_text().strip()
    if dist is None and version is None:  # no metadata: a package known by its headers (data/deepgemm_headers.yaml)
        known = known_headers().get(headers_hash(os.path.join(package_dir, "include")))
        if known:
            dist, version = known["releases"][-1]
            return DeepGemmInstall(dist, version, package_dir, known["generation"])
    return DeepGemmInstall(dist, version, package_dir, generation_of(package_dir, dist, version))


@lru_cache(maxsize=1)
def known_headers() -> dict[str, dict]:
    data = load_yaml("deepgemm_headers.yaml")
    return {p["headers_sha256"]: p for p in data["packages"]}


def headers_hash(include_dir: str) -> str:
    """sha256 over every file under include/deep_gemm (names and bytes), for fingerprints."""
    h = hashlib.sha256()
    root = Path(include_dir) / "deep_gemm"
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(root)).encode() + b"\0")
        h.update(path.read_bytes())
    return h.hexdigest()


def key_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    env = os.environ if environ is None else environ
    return {k: env[k] for k in KEY_ENV_VARS if k in env}
