"""The DeepGEMM generations: every fact that differs between them, in one object each.

Stages never branch on a generation's name; they ask its :class:`Generation`:

* planning: ``heuristic()``, the pure-Python kernel choice (None where it is not modelled);
* keys: ``key_context(install, nvcc)``, the exact entry names the runtime looks up, for the releases
  ``computes_keys(version)`` says it reproduces (``refuse_nvrtc``: the one refusal of its NVRTC switch);
* compile: ``backends`` (the first usable one is the default), ``choose_backend`` and ``sweep_backend``; each
  backend is a :class:`Backend` in ``BACKENDS`` (its worker class, zygote preload, whether it needs a GPU);
* traces and doctor: ``trace_api`` (what the launch hook records), ``load_tasks`` (tasks a warm load adds);
* fingerprint: ``fingerprint_fields``, the fields whose difference makes the runtime look under other keys;
* cache layout: ``entry_files``, what makes an entry whole for this runtime;
* launch: ``strict_by`` (how a runtime compile is refused: the startup hook or the nvcc stand-in).

Importing this module imports nothing else of the package: the heuristic and key modules are named here and
loaded on first use, so ``plan``/``verify``/``doctor`` stay light.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from functools import cache
from typing import Any

from dgprecompile.errors import EnvironmentProblem, InputError


@dataclass(frozen=True)
class Backend:
    """A compile backend: what it needs, and where its worker side lives (dgprecompile.compile.backends)."""

    name: str
    needs_gpu: bool
    worker: str  # "module:Class" built in each worker from its job
    preload: str | None  # "module:function(job)" run in the zygote before it forks (no CUDA); None: nothing
    help: str  # what `warm --backend NAME` does
    sweeps: bool = False  # builds whatever the library chooses for every m of a key (keys-only plans)
    deepgemm: bool = True  # a DeepGEMM backend, a --backend choice (False: SGLang's own JIT modules)


_BK = "dgprecompile.compile.backends."
BACKENDS: dict[str, Backend] = {b.name: b for b in (
    Backend("legacy", False, _BK + "legacy:LegacyWorker", _BK + "legacy:preload",
            "the Python JIT's own build (no GPU)"),
    Backend("cxx", True, _BK + "cxx:CxxWorker", _BK + "cxx:preload",
            "launch each kernel once on a GPU so the C++ JIT compiles it"),
    Backend("nvcc", False, _BK + "nvcc01:NvccCxxWorker", None,
            "build the C++-JIT entries whose names dgprecompile computes with nvcc directly (no GPU)"),
    Backend("sweep", True, _BK + "sweep:SweepWorker", _BK + "cxx:preload",
            "call the C++-JIT DeepGEMM on a GPU for every sampled m of each key and keep what it builds "
            "(docs/sweep.md)", sweeps=True),
    Backend("sglang-jit", False, _BK + "sglang_jit:SglangJitWorker", _BK + "sglang_jit:preload",
            "SGLang's own JIT modules, built with the installed sglang's builders (no GPU)", deepgemm=False),
    Backend("kernels-jit", False, _BK + "sglang_jit_ninja:SglangNinjaWorker", _BK + "sglang_jit_ninja:preload",
            "SGLang's own ninja-loader JIT modules (0.5.20+), built with the installed sglang's load_jit (no GPU)",
            deepgemm=False),
)}
DEEPGEMM_BACKENDS = tuple(name for name, b in BACKENDS.items() if b.deepgemm)  # `warm --backend` choices
SGLANG_JIT_BACKEND = next(name for name, b in BACKENDS.items() if not b.deepgemm)


def get_backend(name: str) -> Backend:
    try:
        return BACKENDS[name]
    except KeyError:
        raise unknown_backend(name) from None


def unknown_backend(name: str | None) -> InputError:
    return InputError(f"unknown backend {name!r}", hint=f"choose from {', '.join(DEEPGEMM_BACKENDS)} or auto")


def _load(target: str) -> Any:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class Generation:
    id: str
    label: str
    heuristic_class: str | None  # "module:Class" of the pure-Python kernel choice; None: keys only
    key_class: str | None  # "module:Class" computing entry names; None: names only known after a build
    key_versions: tuple[str, ...] | None  # releases whose keys key_class reproduces; None: every release
    backends: tuple[str, ...]  # in order of preference
    fingerprint_fields: tuple[str, ...]
    entry_files: tuple[str, ...]  # files the runtime needs in an entry; a missing one is a miss or fatal
    strict_by: str  # "hook" (the JIT is Python: the startup hook refuses) | "nvcc-standin"
    gpu_validated: str | None = None  # what was checked against this library on a GPU, or None
    # releases whose computed entry names were compared with entries the runtime itself made on a GPU
    keys_proven_versions: tuple[str, ...] | None = None  # None: every release key_class covers
    # the largest m (per kernel_type value) at which a GPU run compared the model with the library; () none
    gpu_checked_m: tuple[tuple[str, int], ...] = ()
    # the runtime reads its cache-dir variable as a list of roots joined by this separator: the first written, the
    # others read-only lookups in order (the first root holding a committed entry wins); None: one directory only
    root_separator: str | None = None
    # the DeepGEMM API the launch hook records in a trace header ("api") for this generation's runtime
    trace_api: str = "cxx"
    # tasks its runtime adds per rank while loading a warmed kernel with the JIT off (the legacy one runs
    # cuobjdump once per kernel it loads); doctor's warm-cache burst
    load_tasks: int = 0
    # the switch that makes its runtime compile with NVRTC, under keys dgprecompile does not compute; None: none
    nvrtc_switch: str | None = "DG_JIT_USE_NVRTC"

    # -- planning --
    @property
    def models_kernels(self) -> bool:
        return self.heuristic_class is not None

    def heuristic(self):
        if self.heuristic_class is None:
            raise InputError(f"the kernel choice of the {self.label} is not modelled: keys only",
                             hint="plan with an --sglang version whose DeepGEMM is modelled (`dgprecompile plan --help`)")
        return _heuristic(self.heuristic_class)

    def unchecked_m(self, kernel_type: str, m_max: int) -> int | None:
        """The largest m a GPU run checked for this kernel type, when m_max goes beyond it (else None)."""
        checked = dict(self.gpu_checked_m).get(kernel_type)
        return checked if checked is not None and m_max > checked else None

    # -- keys --
    def computes_keys(self, version: str | None) -> bool:
        if self.key_class is None:
            return False
        return self.key_versions is None or version in self.key_versions

    def keys_proven(self, version: str | None) -> bool:
        return self.computes_keys(version) and (self.keys_proven_versions is None
                                                or version in self.keys_proven_versions)

    def key_context(self, install, nvcc, environ: dict[str, str] | None = None):
        """The entry-name calculator for this install and nvcc (see computes_keys)."""
        if not self.computes_keys(install.version):
            raise InputError(f"dgprecompile cannot compute the cache keys of {install.distribution} "
                             f"{install.version}", hint=f"use --backend {' or '.join(self.usable_backends(install.version))}")
        self.refuse_nvrtc(os.environ if environ is None else environ)
        return _load(self.key_class).build(install, nvcc, environ)

    # -- cache layout --
    def cache_dir_value(self, cache_dir: str, shared: list[str] | tuple[str, ...] = ()) -> str:
        """The value of the runtime's cache-dir variable for a writable ``cache_dir`` plus read-only ``shared``
        roots searched after it (a runtime that splits the variable would also split a path holding the
        separator: such a path is refused)."""
        if self.root_separator is None:
            if shared:
                raise InputError(f"the {self.label} reads one cache directory, so --shared-cache cannot be used "
                                 "with it", hint="unpack the shared artifact into --cache-dir instead (DeepJIT, "
                                 "sgl-deep-gemm 0.2.x / sglang 0.5.20+, searches several roots)")
            return cache_dir
        roots = [cache_dir, *shared]
        bad = next((r for r in roots if self.root_separator in r), None)
        if bad is not None:
            raise InputError(f"the cache directory {bad!r} contains {self.root_separator!r}, which the {self.label} "
                             "reads as a separator between cache roots",
                             hint="use a directory whose path has no such character")
        return self.root_separator.join(roots)
    def refuse_nvrtc(self, environ) -> None:
        """The one refusal of a runtime set to compile with NVRTC (exit 2: the user's setting)."""
        if self.nvrtc_switch and int(environ.get(self.nvrtc_switch, "0") or 0):
            gpu = [b for b in self.backends if BACKENDS[b].needs_gpu]
            raise InputError(f"{self.nvrtc_switch} is set: that runtime compiles with NVRTC under other keys, "
                             "which dgprecompile does not compute",
                             hint=f"unset {self.nvrtc_switch} (sglang's SGL_DG_USE_NVRTC sets it too)"
                                  + (f", or use --backend {gpu[0]}" if gpu else ""))

    # -- compile --
    @property
    def sweep_backend(self) -> str | None:
        """The backend that builds keys-only plans (the library chooses for every m), or None."""
        return next((b for b in self.backends if BACKENDS[b].sweeps), None)

    def usable_backends(self, version: str | None) -> list[str]:
        """Backends that can compile for this release: the GPU-free ones need computable keys."""
        return [b for b in self.backends if BACKENDS[b].needs_gpu or self.computes_keys(version)]

    def choose_backend(self, requested: str | None, install) -> str:
        usable = self.usable_backends(install.version)
        if requested in (None, "auto"):
            if not usable:
                raise EnvironmentProblem(f"no backend can compile for {install.distribution} {install.version}",
                                         hint="install a DeepGEMM release the profile table lists (README)")
            return usable[0]
        if requested not in DEEPGEMM_BACKENDS:
            raise unknown_backend(requested)
        if requested not in usable:
            raise InputError(f"backend {requested} cannot compile for the installed {self.id} DeepGEMM "
                             f"({install.distribution} {install.version})",
                             hint=f"use --backend {' or '.join(usable) or 'auto'}")
        return requested


@cache
def _heuristic(target: str):
    return _load(target)()


def load_key_class(target: str):
    """The key-context class a Generation names (workers rebuild the parent's context from its fields)."""
    return _load(target)


# sgl-deep-gemm releases whose generated code (the _C.so format strings) was read; keys/cxx_templates.py maps each
# to its template and tests/test_cxx_keys.py checks both lists agree. Release candidates were not read.
SDG_01_KEY_VERSIONS = ("0.1.0", "0.1.1", "0.1.2", "0.1.3", "0.1.4", "0.1.4.post1", "0.1.5", "0.1.5.post1",
                       "0.1.5.post2", "0.1.5.post3", "0.1.6", "0.1.7")
# sgl-kernel / sglang-kernel releases whose bundled deep_gemm was read (headers, .so format, flag and key strings):
# sgl-kernel 0.3.14.post1-0.3.18.post2 share one header set and the 17-slot format; sgl-kernel 0.3.19 and
# sglang-kernel 0.4.0-0.4.2 another header set and the 18-slot format (keys/cxx_templates.py SK_RELEASE_TEMPLATE)
SK_KEY_VERSIONS = ("0.3.14.post1", "0.3.15", "0.3.16.post3", "0.3.16.post4", "0.3.16.post5", "0.3.17",
                   "0.3.17.post1", "0.3.18.post2", "0.3.19", "0.4.0", "0.4.1", "0.4.2")
# sgl-kernel 0.3.7-0.3.9.post2 (the releases sglang 0.5.1.post3-0.5.3rc0 pin): one header set, the 16-slot format,
# 0.3.14.post1's flag and key strings (keys/cxx_templates.py SK_RELEASE_TEMPLATE; docs/heuristics.md)
SK_037_KEY_VERSIONS = ("0.3.7", "0.3.7.post1", "0.3.8", "0.3.9.post2")
# sgl-kernel 0.3.20-0.3.21 (sglang 0.5.7-0.5.9): one header set (SGF@54f99a8's), the 21-slot format
SK_0320_KEY_VERSIONS = ("0.3.20", "0.3.21")
SDG_02_KEY_VERSIONS = ("0.2.0", "0.2.1", "0.2.1.post1", "0.2.2", "0.2.3", "0.2.3.post1", "0.2.3.post2", "0.2.5")


# what the sgl-kernel / sglang-kernel wave generations share: backends, and the include path (-I<install>/include)
# and the header bytes in the key (the version is not); the largest m each one's device runs checked (the
# sweeps of tests/gpu/sweep_generations.sh: dense to 65,473, masked expected_m to 8,200; the tests tie them to the
# record)
_SK_WAVES = dict(backends=("nvcc", "cxx", "sweep"),
                 fingerprint_fields=("deepgemm.generation", "deepgemm.headers_sha256", "deepgemm.package_dir",
                                     "nvcc.release", "env", "num_sms"),
                 entry_files=("kernel.cu", "kernel.cubin"), strict_by="nvcc-standin")
_SK_CHECKED_M = (("GEMM_NT_F8F8BF16", 65473), ("GROUPED_GEMM_NT_F8F8BF16_MASKED", 8200))

_KEYS_01 = ("deepgemm.generation", "deepgemm.version", "deepgemm.headers_sha256", "nvcc.release", "env", "num_sms")

GENERATIONS: dict[str, Generation] = {g.id: g for g in (
    Generation(
        id="legacy", label="legacy Python-JIT DeepGEMM (sgl-kernel <= 0.3.6)",
        heuristic_class="dgprecompile.planning.heuristics.legacy:LegacyHeuristic",
        key_class="dgprecompile.keys.legacy:LegacyKeyContext", key_versions=None,
        backends=("legacy",),
        # the nvcc path string and the absolute include path are part of this JIT's key
        fingerprint_fields=("deepgemm.generation", "deepgemm.headers_sha256", "deepgemm.package_dir", "nvcc.path",
                            "nvcc.release", "env", "num_sms"),
        entry_files=("kernel.cubin",), strict_by="hook", trace_api="legacy", load_tasks=1,
        gpu_validated="every m against the library's get_best_configs; CPU-built entries served an H200 run",
    ),
    Generation(
        # an sgl-kernel / sglang-kernel whose headers data/deepgemm_headers.yaml does not list (sgl-kernel 0.3.9,
        # 0.3.9.post1, 0.3.10-0.3.13: no sglang release pins them; a newer release): no profile names it
        id="sgl-kernel-cxx", label="C++-JIT DeepGEMM of an sgl-kernel release whose headers were not read",
        heuristic_class=None, key_class=None, key_versions=None, backends=("cxx", "sweep"),
        fingerprint_fields=_KEYS_01, entry_files=("kernel.cu", "kernel.cubin"), strict_by="nvcc-standin",
    ),
    Generation(
        id="sgl-kernel-waves-0.3.20", label="C++-JIT DeepGEMM bundled in sgl-kernel 0.3.20-0.3.21",
        # the wave rule's later revision (SGF@54f99a8, whose headers and .so strings equal these wheels')
        heuristic_class="dgprecompile.planning.heuristics.sm90_waves:Sm90WaveHeuristic0320",
        # sgl-kernel-waves' key scheme with 0.1.x's verbose-ptxas flags, 21-slot code
        key_class="dgprecompile.keys.sglang_kernel:Sk0320KeyContext", key_versions=SK_0320_KEY_VERSIONS,
        # names and kernel.cu equal every entry 0.3.21's JIT made on an H200, its host code rebuilt from its source
        # (the wheel's own .so is a CUDA 12 / torch 2.9 build); 0.3.20 ships the same headers and strings
        keys_proven_versions=("0.3.21",),
        **_SK_WAVES,
        gpu_validated="sgl-kernel 0.3.21's headers and Python with its host code rebuilt on an H200 from SGF@54f99a8 "
                      "(the wheel's .so links CUDA 12 / torch 2.9): every sampled m of the 480B tp8/ep8 dense keys and "
                      "masked expected_m 1-8,200 against DG_PRINT_CONFIGS; after a GPU-free nvcc warm 89,806 calls "
                      "compiled nothing (tests/data/sweep_generations_h200.json, run 5)",
        gpu_checked_m=_SK_CHECKED_M,
    ),
    Generation(
        id="sgl-kernel-waves-0.3.7", label="C++-JIT DeepGEMM bundled in sgl-kernel 0.3.7-0.3.9.post2",
        # the wave rule's earlier revision (SGF@b981e3e, whose headers and .so strings equal these wheels')
        heuristic_class="dgprecompile.planning.heuristics.sm90_waves:Sm90WaveHeuristic037",
        # sgl-kernel-waves' key scheme (the same compiler.hpp, hash.hpp, kernel_runtime.hpp blobs), 16-slot code
        key_class="dgprecompile.keys.sglang_kernel:SkKeyContext", key_versions=SK_037_KEY_VERSIONS,
        # names and kernel.cu equal every entry 0.3.9.post2's JIT made on an H200, its host code rebuilt from its
        # source (the wheel's own .so is a CUDA 12 / torch 2.8 build); 0.3.7-0.3.8 ship the same headers and strings
        keys_proven_versions=("0.3.9.post2",),
        **_SK_WAVES,
        gpu_validated="sgl-kernel 0.3.9.post2's headers and Python with its host code rebuilt on an H200 from "
                      "SGF@b981e3e (the wheel's .so links CUDA 12 / torch 2.8): every sampled m of the 480B tp8/ep8 "
                      "keys against DG_PRINT_CONFIGS; after a GPU-free nvcc warm of the sglang 0.5.2 plan 43,930 "
                      "calls compiled nothing (tests/data/sweep_generations_h200.json, run 7)",
        gpu_checked_m=_SK_CHECKED_M,
    ),
    Generation(
        id="sgl-kernel-waves",
        label="C++-JIT DeepGEMM bundled in sgl-kernel 0.3.14.post1-0.3.19 / sglang-kernel 0.4.0-0.4.2",
        # the wave rule with a minimised SM count (another rule than 0.1.x's), read from SGF@5f8a71a (= SGF@f4adba8's)
        heuristic_class="dgprecompile.planning.heuristics.sm90_waves:Sm90WaveHeuristic",
        key_class="dgprecompile.keys.sglang_kernel:SkKeyContext", key_versions=SK_KEY_VERSIONS,
        # names and kernel.cu equal every entry its runtime made on an H200 (tests/test_sk_generation.py), and every
        # entry 0.3.16.post3's JIT made there with its host code rebuilt from source (tests/test_sk_source_records.py)
        keys_proven_versions=("0.4.2", "0.3.16.post3"),
        **_SK_WAVES,
        gpu_validated="sglang-kernel 0.4.2: every sampled m of the 480B tp8/ep8 dense keys (to 65,536) and masked "
                      "expected_m 1-8,200 against DG_PRINT_CONFIGS on an H200; after a GPU-free nvcc warm 89,806 calls compiled "
                      "nothing (tests/data/sweep_generations_h200.json, run 4); sgl-kernel 0.3.16.post3's headers and "
                      "Python with its host code rebuilt there from SGF@f4adba8: the same checks (run 6)",
        gpu_checked_m=_SK_CHECKED_M,
    ),
    Generation(
        id="sgl-deep-gemm-0.1", label="sgl-deep-gemm 0.1.x (C++ JIT, tvm-ffi)",
        heuristic_class="dgprecompile.planning.heuristics.sm90_cxx:Sm90CxxHeuristic",
        # one key scheme for 0.1.0-0.1.7; the generated code differs at 0.1.4 (keys/cxx_templates.py)
        key_class="dgprecompile.keys.sgl_deep_gemm_01:CxxKeyContext",
        key_versions=SDG_01_KEY_VERSIONS,
        # names and kernel.cu equal entries the runtime made on an H200 (tests/test_generation_records.py)
        keys_proven_versions=("0.1.3", "0.1.4.post1", "0.1.5.post1"),
        backends=("nvcc", "cxx", "sweep"),
        # the include path (-I<install>/include) is part of the 0.1.x key: the install location must match
        fingerprint_fields=_KEYS_01[:3] + ("deepgemm.package_dir",) + _KEYS_01[3:],
        entry_files=("kernel.cu", "kernel.cubin"), strict_by="nvcc-standin",
        gpu_validated="sgl-deep-gemm 0.1.3, 0.1.4.post1, 0.1.5.post1: every sampled m of the 480B tp8/ep8 keys "
                      "against DG_PRINT_CONFIGS on an H200 (tests/data/sweep_generations_h200.json)",
        # runs 1-3 of that record (0.1.3 dense and masked to these m; contiguous by 0.1.4.post1/0.1.5.post1)
        gpu_checked_m=(("GEMM_NT_F8F8BF16", 262208), ("GROUPED_GEMM_NT_F8F8BF16_MASKED", 104920),
                       ("GROUPED_GEMM_NT_F8F8BF16_CONTIG", 263168)),
    ),
    Generation(
        id="sgl-deep-gemm-0.2", label="sgl-deep-gemm 0.2.x (DeepJIT)",
        # 0.2.x keeps 0.1.x's SM90 heuristic source (docs/heuristics.md); not run on a GPU
        heuristic_class="dgprecompile.planning.heuristics.sm90_cxx:Sm90CxxHeuristic",
        # DeepJIT's key is computable (keys/deepjit.py): source + headers, nvcc --version text, flags, CUTLASS
        key_class="dgprecompile.keys.deepjit:DeepJitKeyContext", key_versions=SDG_02_KEY_VERSIONS,
        keys_proven_versions=(),  # no 0.2.x call could run on the device (torch 2.11): names read, not observed
        backends=("nvcc", "cxx", "sweep"),
        fingerprint_fields=("deepgemm.generation", "deepgemm.version", "deepgemm.headers_sha256",
                            "nvcc.version_sha256", "env", "num_sms"),
        entry_files=("kernel.cu", "kernel.cubin", ".committed"), strict_by="nvcc-standin",
        # DeepJIT's DiskCache::from_env (deep_jit/cache/disk.hpp): DG_JIT_CACHE_DIR (else DJ_JIT_CACHE_DIR) is
        # PATH_1:PATH_2:...; entries are looked up in every root in order, built and committed only in the first
        root_separator=":",
        nvrtc_switch=None,  # DeepJIT has no NVRTC path (its wheels do not hold the switch's name)
    ),
)}


def get_generation(generation_id: str) -> Generation:
    try:
        return GENERATIONS[generation_id]
    except KeyError:
        raise InputError(f"unknown DeepGEMM generation {generation_id!r}; known: {', '.join(GENERATIONS)}",
                         hint="regenerate the manifest with `dgprecompile plan -o`") from None
