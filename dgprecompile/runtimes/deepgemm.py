"""The DeepGEMM runtime: what every DeepGEMM generation answers, and the compile backends they share.

A generation is one :class:`Generation` (legacy Python JIT: runtimes/deepgemm_legacy.py; the C++ JITs, their
generations as data: runtimes/deepgemm_cxx.py). Stages never branch on a generation's name; they ask it:

* planning: ``heuristic`` names its pure-Python kernel choice (planning/heuristics/registry.py holds each one;
  None where it is not modelled: keys only);
* keys: ``key_scheme`` names its entry-name calculator (keys/schemes.py), for the releases
  ``computes_keys(version)`` says it reproduces (``refuse_nvrtc``: the one refusal of its NVRTC switch);
* compile: ``backends`` (the first usable one is the default), ``choose_backend`` and ``sweep_backend``; each
  backend is a :class:`Backend` in ``BACKENDS`` (whether it needs a GPU, whether its workers preload in the
  zygote; its worker class: compile/backends/workers.py);
* traces and doctor: ``trace_api`` (what the launch hook records), ``load_tasks`` (tasks a warm load adds);
* fingerprint: ``fingerprint_fields``, the fields whose difference makes the runtime look under other keys;
* cache layout: ``entry_files``, what makes an entry whole for this runtime;
* launch: ``strict_by`` (:class:`~dgprecompile.runtimes.base.StrictBy`: the startup hook or the nvcc stand-in).

Importing this module imports nothing of the package but the foundation, so ``plan``/``verify``/``doctor`` stay
light.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from dgprecompile.errors import EnvironmentProblem, InputError
from dgprecompile.runtimes.base import StrictBy


@dataclass(frozen=True)
class Backend:
    """A compile backend: what it needs (its worker side: compile/backends/workers.py, under ``name``)."""

    name: str
    needs_gpu: bool
    preload: bool  # its workers import their libraries in the zygote before it forks (no CUDA)
    help: str  # what `warm --backend NAME` does
    sweeps: bool = False  # builds whatever the library chooses for every m of a key (keys-only plans)
    deepgemm: bool = True  # a DeepGEMM backend, a --backend choice (False: SGLang's own JIT modules)


BACKENDS: dict[str, Backend] = {b.name: b for b in (
    Backend("legacy", False, True, "the Python JIT's own build (no GPU)"),
    Backend("cxx", True, True, "launch each kernel once on a GPU so the C++ JIT compiles it"),
    Backend("nvcc", False, False, "build the C++-JIT entries whose names dgprecompile computes with nvcc directly (no GPU)"),
    Backend("sweep", True, True, "call the C++-JIT DeepGEMM on a GPU for every sampled m of each key and keep what it builds "
            "(docs/sweep.md)", sweeps=True),
    Backend("sglang-jit", False, True, "SGLang's own JIT modules, built with the installed sglang's builders (no GPU)", deepgemm=False),
    Backend("kernels-jit", False, True, "SGLang's own ninja-loader JIT modules (0.5.20+), built with the installed sglang's load_jit (no GPU)",
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


@dataclass(frozen=True)
class Generation:
    id: str
    label: str
    heuristic: str | None  # its pure-Python kernel choice (planning/heuristics/registry.py); None: keys only
    key_scheme: str | None  # its entry-name calculator (keys/schemes.py); None: names only known after a build
    key_versions: tuple[str, ...] | None  # releases whose keys key_scheme reproduces; None: every release
    backends: tuple[str, ...]  # in order of preference
    fingerprint_fields: tuple[str, ...]
    entry_files: tuple[str, ...]  # files the runtime needs in an entry; a missing one is a miss or fatal
    strict_by: StrictBy  # HOOK (the JIT is Python: the startup hook refuses) | STANDIN (the nvcc stand-in)
    gpu_validated: str | None = None  # what was checked against this library on a GPU, or None
    # releases whose computed entry names were compared with entries the runtime itself made on a GPU
    keys_proven_versions: tuple[str, ...] | None = None  # None: every release key_scheme covers
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
    area: str = "cache"  # DeepGEMM's own layout under a cache root: <root>/cache/<entry> (cache/store.py ENTRIES)
    kind: str = "deepgemm"  # the key of each stage's table that handles its items (runtimes/base.py)
    # what `verify --live` drives for its keys (launch/live.py LIVE_UNITS): SGLang's dense FP8 linear for the dense
    # keys and its masked DeepGEMM MoE runner for each pair of masked keys; contiguous keys are not driven
    live: tuple[str, ...] = ("dense", "masked")

    # -- planning --
    @property
    def models_kernels(self) -> bool:
        return self.heuristic is not None

    def not_modelled(self) -> InputError:
        """The refusal of a kernel choice this generation does not model (keys only)."""
        return InputError(f"the kernel choice of the {self.label} is not modelled: keys only",
                          hint="plan with an --sglang version whose DeepGEMM is modelled (`dgprecompile plan --help`)")

    def unchecked_m(self, kernel_type: str, m_max: int) -> int | None:
        """The largest m a GPU run checked for this kernel type, when m_max goes beyond it (else None)."""
        checked = dict(self.gpu_checked_m).get(kernel_type)
        return checked if checked is not None and m_max > checked else None

    # -- keys --
    def computes_keys(self, version: str | None) -> bool:
        if self.key_scheme is None:
            return False
        return self.key_versions is None or version in self.key_versions

    def keys_proven(self, version: str | None) -> bool:
        return self.computes_keys(version) and (self.keys_proven_versions is None
                                                or version in self.keys_proven_versions)

    def refuse_keys(self, install, environ: dict[str, str] | None = None) -> None:
        """Refuse to name entries for ``install`` where this generation cannot (keys/schemes.py key_context)."""
        if not self.computes_keys(install.version):
            raise InputError(f"dgprecompile cannot compute the cache keys of {install.distribution} "
                             f"{install.version}", hint=f"use --backend {' or '.join(self.usable_backends(install.version))}")
        self.refuse_nvrtc(os.environ if environ is None else environ)

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
