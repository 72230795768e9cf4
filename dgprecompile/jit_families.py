"""SGLang's own JIT loader families: every fact that differs between them, in one object each.

SGLang builds CUDA modules of its own at run time, besides DeepGEMM's kernels. How it names, places, builds and
refuses them depends on the loader its release ships, not on the module: a *family* is one loader. As for
DeepGEMM's :class:`~dgprecompile.generations.Generation`, no stage branches on a family's or a release's name;
each stage asks the :class:`JitFamily` that :func:`family_for` returns for the plan's exact sglang release:

* planning: ``plan_modules(version, path)`` -- the modules a server with these options (:class:`ServerPath`)
  builds from process start to its first decode step, with template arguments, from the family's data file
  (``data_file``: one entry per release, each module with its builder, arguments, name parts and the ``when:``
  conditions on the path's facts under which SGLang builds it);
* keys: ``naming(version)`` -- an object (``naming_class``) that computes, for the sglang installed here, each
  module's ``entry_name`` (its directory relative to the family's cache area, as the runtime computes it) and
  ``library`` (the file whose presence makes the runtime load instead of build), and the ``fingerprint`` dict;
* compile: ``backend`` (the compile-backend name whose worker builds a module GPU-free with the installed
  sglang's own builder ``python:builder(*args, **kwargs)``, e.g. a module's ``_jit_*_module`` function, or the
  release's ``load_jit`` itself where the builder does more than build -- custom all-reduce reads the device's
  properties right after), dgprecompile/compile/backends) with ``build_params(naming, module)`` per work item and
  ``worker_job(naming, modules)`` for the worker processes; ``not_recorded``: build files that are no part of a
  module (locks, ninja logs) and are dropped before the entry is installed;
* cache: ``area`` -- the directory under the dgprecompile cache root that holds this family's entries (and that
  the runtime's cache variable points at); ``entry_files(naming, module)`` -- what makes an entry whole;
* fingerprint: ``fingerprint_section`` and ``fingerprint_fields`` -- every field the release's own cache key
  holds (``key_fields()`` gives them dotted, for keys/fingerprint.py); ``current_fingerprint(arch)``;
* launch: ``launch_env(cache_dir)`` -- each cache variable to set and its value; ``strict_env()`` -- the
  release's own strict switch (``strict_switch``) where it has one; ``hook_target`` -- the module whose build
  functions the startup hook (launch/hook) wraps to refuse builds where it has none; ``strict_by`` says which.

How a second family plugs in (e.g. SGLang's own ninja loader in ``sglang/kernels/jit``, 0.5.17 on): add one
``JitFamily(...)`` to ``FAMILIES`` below with its release range, its own data file under dgprecompile/data (same
schema as data/sglang_jit.yaml's ``modules``; release-level fields are the family's own and read only by its
naming class), its naming class (``naming_class``: a ``build(version)`` classmethod raising EnvironmentProblem
when the installed sglang cannot be named, and ``entry_name``, ``library``, ``fingerprint``), its compile backend
(registered in compile/backends/__init__.py under ``backend``), its ``area``, ``cache_env`` and either a
``strict_switch`` or a ``hook_target``. Nothing else changes: every stage already asks the family.

Importing this module imports nothing else of the package but errors; the data, naming and planning modules are
named here and loaded on first use, so ``plan``/``verify``/``doctor`` stay light (no torch, no sglang).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from dgprecompile.errors import InputError


def _load(target: str) -> Any:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class ServerPath:
    """The facts of one server's path that decide which JIT modules it builds, as planning reads them from the
    user's command (or --model's defaults) and the model's config.json. A family's data file names these facts
    in its modules' ``when:`` conditions and ``$fact`` template/argument substitutions (``facts()``)."""

    model_type: str  # config.json model_type: qwen3_moe, deepseek_v3, ...
    dtype: str = "bfloat16"  # activations (--dtype, else config.json torch_dtype)
    quant: str | None = None  # config.json quant_method (fp8) or None
    tp: int = 1
    ep: int = 1
    moe_runner: str = "auto"  # --moe-runner-backend as given (auto, triton, deep_gemm)
    attention_backend: str = "auto"  # --attention-backend as given (auto: the release's default)
    chunked_prefill: int = 8192  # --chunked-prefill-size (-1: off)
    cuda_graph: bool = True  # not --disable-cuda-graph
    custom_all_reduce: bool = True  # not --disable-custom-all-reduce
    kv_cache_dtype: str = "auto"  # --kv-cache-dtype (auto: the model's dtype)
    nnodes: int = 1
    gemm_paths: frozenset[str] = frozenset()  # DeepGEMM paths the plan has keys on: dense, masked, contig
    model: tuple[tuple[str, Any], ...] = ()  # model facts read from config.json (head_dim, rope_dim, rope_neox...)
    env: tuple[tuple[str, str], ...] = ()  # SGLANG_* switches the user set that the data names
    extra: tuple[tuple[str, Any], ...] = ()  # other server options the data names (enable_fused_qk_norm_rope...)

    def facts(self) -> dict[str, Any]:
        out: dict[str, Any] = {"model_type": self.model_type, "dtype": self.dtype, "quant": self.quant,
                               "tp": self.tp, "ep": self.ep, "multi_gpu": self.tp > 1, "moe_runner": self.moe_runner,
                               "attention_backend": self.attention_backend,
                               "chunked_prefill": self.chunked_prefill > 0, "cuda_graph": self.cuda_graph,
                               "custom_all_reduce": self.custom_all_reduce, "nnodes": self.nnodes,
                               "kv_cache_dtype": self.kv_cache_dtype}
        out.update({f"gemm_{p}": True for p in self.gemm_paths})
        out.update(dict(self.model))
        out.update({f"env_{k}": v for k, v in self.env})
        out.update(dict(self.extra))
        return out


@dataclass(frozen=True)
class JitFamily:
    id: str  # also the `family` field of a manifest's JIT module
    label: str
    releases: str  # PEP 440 specifier of the sglang releases whose JIT is this loader
    data_file: str  # under dgprecompile/data: per release, its naming facts and modules
    naming_class: str  # "module:Class" with build(version) -> naming (entry_name, library, fingerprint)
    backend: str  # compile backend that builds a module with the installed sglang's own builder
    area: str  # sub-directory of a dgprecompile cache root holding this family's entries
    cache_env: tuple[str, ...]  # the runtime's cache variable(s); launch points each at <cache>/<area>
    cache_default: str  # where the runtime puts modules when the variable is unset (for messages)
    fingerprint_section: str  # the fingerprint's section for this family
    fingerprint_fields: tuple[str, ...]  # everything the release's own cache key holds, in that section
    strict_switch: tuple[tuple[str, str], ...] = ()  # the release's own "refuse to compile" variable(s) and value
    hook_target: str | None = None  # module whose build functions the startup hook wraps (no switch)
    not_recorded: tuple[str, ...] = ()  # files a build leaves that are no part of the module
    entry_depth: int = 1  # path components of one entry's name under the area (the store nests that deep)
    planner: str = "dgprecompile.planning.sglang_jit:plan_modules"  # (family, version, path) -> (modules, notes)

    # -- planning --
    def covers(self, version: str | None) -> bool:
        """True when ``version`` is one of this family's releases (modelled or not)."""
        from packaging.specifiers import SpecifierSet
        from packaging.version import InvalidVersion, Version

        if not version:
            return False
        try:
            return Version(version) in SpecifierSet(self.releases)
        except InvalidVersion:
            return False

    def modelled(self, version: str | None) -> bool:
        """True when the family's data file holds this exact release's inventory."""
        return version in self.modelled_versions()

    def modelled_versions(self) -> list[str]:
        from dgprecompile.planning.sglang_jit import modelled_versions

        return modelled_versions(self)

    def release(self, version: str):
        """The data file's entry for an exact release (planning.sglang_jit.ReleaseSpec), or None."""
        from dgprecompile.planning.sglang_jit import release_spec

        return release_spec(self, version)

    def plan_modules(self, version: str, path: ServerPath):
        """(modules, notes): the JitModules (dgprecompile.kernels) this release builds on ``path``, in build order."""
        return _load(self.planner)(self, version, path)

    # -- keys --
    def naming(self, version: str):
        """The runtime's names for the sglang installed here (EnvironmentProblem when it is not ``version``)."""
        return _load(self.naming_class).build(self, version)

    def name_stem(self, version: str, module) -> str:
        """The part of the module's runtime name computable without sglang installed (the refusal message
        tells planned from unplanned modules by it)."""
        return _load(self.naming_class).name_stem(self, version, module)

    def key_fields(self) -> tuple[str, ...]:
        return tuple(f"{self.fingerprint_section}.{f}" for f in self.fingerprint_fields)

    def current_fingerprint(self, arch: str) -> dict[str, Any]:
        """This machine's values of the family's fingerprint fields (None where a package is absent)."""
        return _load(self.naming_class).current_fingerprint(self, arch)

    # -- compile --
    def build_params(self, naming, module) -> dict[str, Any]:
        """A work item's params: how to build ``module`` and the entry and file it must produce."""
        return {"python": module.python, "builder": module.builder, "args": list(module.args),
                "kwargs": dict(module.kwargs), "entry": naming.entry_name(module), "library": naming.library(module)}

    def worker_job(self, naming, modules) -> dict[str, Any]:
        """What every worker of ``backend`` needs beside the cache: the arch override, the builder modules."""
        return naming.worker_job(sorted({m.python for m in modules}))

    # -- cache --
    def entry_files(self, naming, module) -> tuple[str, ...]:
        return (naming.library(module),)

    def installed_entry(self, naming, module, area_dir) -> str | None:
        """The entry (relative to the family's area ``area_dir``) the runtime would load ``module`` from, or None.
        Here: the computed entry, when every file of entry_files is in it."""
        from pathlib import Path

        entry = naming.entry_name(module)
        return entry if all((Path(area_dir) / entry / f).is_file() for f in self.entry_files(naming, module)) else None

    def missing_detail(self, naming, module, area_dir) -> str | None:
        """Why installed_entry found nothing, when the family can say more than "missing" (else None)."""
        return None

    # -- launch --
    @property
    def strict_by(self) -> str:
        """'switch' (the release's own variable refuses builds) or 'hook' (the startup hook wraps the builder)."""
        return "switch" if self.strict_switch else "hook"

    def launch_env(self, cache_dir: str) -> list[tuple[str, str]]:
        """(variable, value) for each cache variable: the family's area of the warmed cache."""
        import os

        return [(name, os.path.join(cache_dir, self.area)) for name in self.cache_env]

    def strict_env(self) -> dict[str, str]:
        return dict(self.strict_switch)


@dataclass(frozen=True)
class NinjaJitFamily(JitFamily):
    """SGLang's own ninja loader (sglang/kernels/jit, 0.5.20 on): a module's build key covers the compilers'
    paths, so besides the cache variable launch keeps the CUDA_HOME the warm built with (keys/sglang_jit_ninja.py);
    a work item calls the release's own ``load_jit`` with the data file's arguments."""

    def build_params(self, naming, module) -> dict[str, Any]:
        from dgprecompile.keys.sglang_jit_ninja import load_jit_call

        call = load_jit_call(module)
        return {"python": module.python, "builder": module.builder, "args": list(call.args),
                "kwargs": {"cuda_files": list(call.cuda_files), "cuda_wrappers": [list(w) for w in call.cuda_wrappers],
                           "extra_cuda_cflags": list(call.extra_cuda_cflags),
                           "extra_ldflags": list(call.extra_ldflags)},
                "entry": naming.entry_name(module), "library": naming.library(module), "module": module.to_dict()}

    def installed_entry(self, naming, module, area_dir) -> str | None:
        """A warmed entry is one deps-<key> leaf inside the computed build-key directory (its deps key is known
        only after the build): the leaf the runtime's own hit test picks (keys/sglang_jit_ninja.py), or None."""
        from pathlib import Path

        scope = naming.entry_name(module)
        leaf = naming.hit(Path(area_dir) / scope, module)
        return f"{scope}/{leaf.name}" if leaf is not None else None

    def missing_detail(self, naming, module, area_dir) -> str | None:
        """The runtime's reason to pass over each leaf there is (a recorded header that changed, ...)."""
        from pathlib import Path

        scope = naming.entry_name(module)
        leaves = sorted(p for p in (Path(area_dir) / scope).glob("deps-*") if p.is_dir())
        if not leaves:
            others = sorted(p.name for p in (Path(area_dir) / scope).parent.glob("build-*"))
            return (f"no build under {self.area}/{scope}" + (f"; the cache has {', '.join(others)} for this module, "
                    "built where the compilers, packages or paths differ (verify's fingerprint names them)"
                    if others else ""))
        return f"{self.area}/{scope}/{leaves[0].name}: {naming.leaf_problem(leaves[0], module)}"

    def launch_env(self, cache_dir: str, recorded: dict[str, Any] | None = None,
                   environ: dict[str, str] | None = None) -> list[tuple[str, str]]:
        """The cache variable, and CUDA_HOME as the warm saw it when the job's environment names no toolkit
        (its spelling is in every build key: toolchain.py:300-314, cache.py:307-314). ``recorded``: the cache's
        fingerprint section (default: read from the cache's index)."""
        import json
        import os

        env = os.environ if environ is None else environ
        out = super().launch_env(cache_dir)
        if recorded is None:
            from dgprecompile.errors import DGError
            from dgprecompile.fsutil import read_input_bytes

            try:  # a FIFO or a device there is refused before any read (it would block)
                doc = json.loads(read_input_bytes(os.path.join(cache_dir, "dgprecompile", "index.json"),
                                                  "the cache index", hint=""))
                recorded = (doc.get("fingerprint") or {}).get(self.fingerprint_section)
            except (DGError, OSError, ValueError, AttributeError, RecursionError):
                recorded = None
        home = (recorded or {}).get("cuda_home")
        if home and not (env.get("CUDA_HOME") or env.get("CUDA_PATH")):
            out.append(("CUDA_HOME", str(home)))
        return out


FAMILIES: dict[str, JitFamily] = {f.id: f for f in (
    JitFamily(
        id="tvm-ffi", label="SGLang's tvm-ffi load_inline JIT (sglang/jit_kernel, 0.5.9-0.5.16)",
        # 0.5.9 names modules without a source hash and builds in tvm-ffi's own directory; 0.5.14-0.5.16 name
        # them with the hash under _jit_build_dir_name (docs/sglang-jit.md): the data file says which per release
        releases=">=0.5.9,<0.5.17", data_file="sglang_jit.yaml",
        naming_class="dgprecompile.keys.sglang_jit:JitNaming", backend="sglang-jit", area="tvm-ffi",
        cache_env=("TVM_FFI_CACHE_DIR",), cache_default="~/.cache/tvm-ffi", fingerprint_section="sglang_jit",
        # the directory name holds the sources' hash (sglang's files: its version), the tvm-ffi version, the arch
        fingerprint_fields=("sglang", "tvm_ffi", "arch"),
        hook_target="tvm_ffi.cpp.extension",  # load_inline/load call build_inline/build there, only on a miss
        not_recorded=("lock", ".ninja_log", ".ninja_deps"),
    ),
    NinjaJitFamily(
        id="sglang-ninja", label="SGLang's own ninja JIT loader (sglang/kernels/jit, 0.5.20-0.5.23)",
        # 0.5.17 is still tvm-ffi load_inline under kernels/jit; 0.5.18-0.5.19 have this loader but no strict
        # switch (SGLANG_CRASH_ON_JIT_COMPILE arrives in 0.5.20): neither is this family (docs/sglang-jit-ninja.md)
        releases=">=0.5.20,<0.5.24", data_file="sglang_jit_ninja.yaml",
        naming_class="dgprecompile.keys.sglang_jit_ninja:NinjaNaming", backend="kernels-jit", area="sglang-jit",
        cache_env=("SGLANG_JIT_CACHE_DIR",), cache_default="~/.cache/sglang/jit", fingerprint_section="sglang_ninja",
        fingerprint_fields=("sglang", "arch", "cuda_home", "nvcc", "nvcc_version", "cxx", "cxx_version",
                            "pkg_apache_tvm_ffi", "pkg_flashinfer_python", "pkg_deep_gemm", "pkg_nvidia_mathdx",
                            "pkg_torch", "log_resource_usage"),
        # loader.py:253-259 (0.5.23; 0.5.20 loader.py:131): a miss raises RuntimeError before the build lock
        strict_switch=(("SGLANG_CRASH_ON_JIT_COMPILE", "1"),),
        # a leaf keeps only what the runtime reads (cache.py:369-418): the build's objects, sources and logs go
        not_recorded=("build.ninja", "cuda.cu", "cuda_0.o", "cuda_0.o.d", ".ninja_log", ".ninja_deps"),
        entry_depth=4,  # <target>/<module>/build-<key>/deps-<key>
    ),
)}


def family_for(sglang_version: str | None) -> JitFamily | None:
    """The loader family of an exact sglang release, or None (no JIT of its own, or not a known family)."""
    return next((f for f in FAMILIES.values() if f.covers(sglang_version)), None)


def get_family(family_id: str) -> JitFamily:
    try:
        return FAMILIES[family_id]
    except KeyError:
        raise InputError(f"unknown SGLang JIT family {family_id!r}; known: {', '.join(FAMILIES)}",
                         hint="regenerate the manifest with `dgprecompile plan -o`") from None


def hook_targets() -> list[str]:
    """Every module the startup hook wraps in strict mode (the families without a switch of their own)."""
    return [f.hook_target for f in FAMILIES.values() if f.hook_target]
