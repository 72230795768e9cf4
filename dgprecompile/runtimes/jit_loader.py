"""SGLang's own JIT loaders: what every loader family answers, and each release's modules as data.

SGLang builds CUDA modules of its own at run time, besides DeepGEMM's kernels. How it names, places, builds and
refuses them depends on the loader its release ships, not on the module: a *family* is one loader (tvm-ffi's
load_inline: runtimes/tvm_ffi.py; SGLang's own ninja loader: runtimes/sglang_ninja.py). No stage branches on a
family's or a release's name; each asks the :class:`JitFamily` that ``runtimes.family_for`` returns for the plan's
exact sglang release:

* planning: ``plan_modules(version, path)`` -- the modules a server with these options (:class:`ServerPath`)
  builds from process start to its first decode step, with template arguments, from the family's data file
  (``data_file``: one entry per release, each module with its builder, arguments, name parts and the ``when:``
  conditions on the path's facts under which SGLang builds it);
* keys: keys/schemes.py ``naming_for(family, version)`` -- an object that computes, for the sglang installed
  here, each module's ``entry_name`` (its directory relative to the family's cache area, as the runtime computes
  it) and ``library`` (the file whose presence makes the runtime load instead of build), and the ``fingerprint``;
* compile: ``backend`` (the compile backend whose worker builds a module GPU-free with the installed sglang's own
  builder ``python:builder(*args, **kwargs)``; compile/backends/workers.py) with ``build_params(naming, module)``
  per work item and ``worker_job(naming, modules)`` for the worker processes; ``not_recorded``: build files that
  are no part of a module (locks, ninja logs) and are dropped before the entry is installed;
* cache: ``area`` -- the directory under the dgprecompile cache root that holds this family's entries (and that
  the runtime's cache variable points at); ``entry_files(naming, module)`` -- what makes an entry whole;
* fingerprint: ``fingerprint_section`` and ``fingerprint_fields`` -- every field the release's own cache key
  holds (``key_fields()`` gives them dotted, for keys/fingerprint.py);
* launch: ``launch_env(cache_dir)`` -- each cache variable to set and its value; ``strict_env()`` -- the
  release's own strict switch (``strict_switch``) where it has one; ``hook_target`` -- the module whose build
  functions the startup hook (launch/hook) wraps to refuse builds where it has none; ``strict_by`` says which.

A module of a data file is built when every ``when:`` condition holds on the path's facts
(:meth:`ServerPath.facts`): ``fact: value`` (equal), ``fact: [a, b]`` (one of them), ``fact: {not: value}`` or
``{not: [a, b]}``. In ``args`` and ``template`` a string ``$fact`` is replaced by the fact's value (template
strings render booleans as sglang's make_cpp_args does: true/false).

How a new family plugs in: a module here with one ``JitFamily(...)`` (its release range, its own data file under
dgprecompile/data, its ``area``, ``cache_env`` and either a ``strict_switch`` or a ``hook_target``), listed in
runtimes/__init__.py; its naming class in keys/ (in keys/schemes.py's table under the family's id: a
``build(family, version)`` classmethod raising EnvironmentProblem when the installed sglang cannot be named, and
``entry_name``, ``library``, ``fingerprint``); its compile backend in compile/backends/workers.py under ``backend``.

Importing this module imports nothing of the package but the foundation (no torch, no sglang).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from dgprecompile.data import load_yaml
from dgprecompile.runtimes.base import StrictBy
from dgprecompile.runtimes.items import JitModule


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
class JitVersionSpec:
    """One entry of a family's data file: how one sglang release names, places and builds its modules."""

    sglang: SpecifierSet
    source_root: str
    include_dir: str
    name_prefix: str
    build_dir: str
    cache_dir_env: str
    cache_dir_default: str
    arch_override: str
    arch: tuple  # (major, minor) or (major, minor, suffix): the target the release's arch override is given
    modules: tuple[dict[str, Any], ...]
    source_hash: bool = True  # the name ends in sglang's relative source hash (0.5.14 on; 0.5.9-0.5.12 have none;
    # 0.5.13's is by absolute path, `source_hash: absolute`, computed by keys/sglang_jit.py TvmHashNaming)
    raw: tuple[tuple[str, Any], ...] = ()
    build_requires: tuple[str, ...] = ()  # what its JIT builds with beside sglang (the wheel's own pins)
    build_seconds: float = 45.0  # one module's build (MAX_JOBS=1), measured: warm hands the costliest work out first

    @property
    def arch_name(self) -> str:
        return f"{self.arch[0]}.{self.arch[1]}" + "".join(str(x) for x in self.arch[2:])

    def requirements(self) -> dict[str, dict[str, int]]:
        """Each module's ``requires:`` (what the device must have for SGLang to build it), by module id."""
        return {m["id"]: dict(m.get("requires") or {}) for m in self.modules}

    def install_command(self, sglang_version: str) -> str:
        """What to install so that this sglang can build its JIT modules here."""
        return " ".join(["pip install", f"sglang=={sglang_version}", *self.build_requires])


_FIELDS = ("source_root", "include_dir", "name_prefix", "build_dir", "cache_dir_env", "cache_dir_default",
           "arch_override")


def _spliced(modules: list) -> tuple[dict[str, Any], ...]:
    """A release's modules: an item that is a list (another release's list, by YAML alias) is spliced in."""
    return tuple(x for m in modules for x in (m if isinstance(m, list) else [m]))


@lru_cache(maxsize=4)
def _releases(data_file: str = "sglang_jit.yaml") -> tuple[JitVersionSpec, ...]:
    data = load_yaml(data_file)
    return tuple(JitVersionSpec(SpecifierSet(v["sglang"]), *(v[f] for f in _FIELDS), tuple(v["arch"]),
                                _spliced(v["modules"]), v.get("source_hash", True) is True,
                                tuple((k, x) for k, x in v.items() if k != "modules"),
                                tuple(v.get("build_requires", ())), float(v.get("build_seconds", 45.0)))
                 for v in data["versions"])


def release_spec(family, sglang_version: str | None) -> JitVersionSpec | None:
    """The modelled naming/build scheme for an exact sglang version, or None (not modelled)."""
    if not sglang_version:
        return None
    try:
        parsed = Version(sglang_version)
    except InvalidVersion:
        return None
    return next((s for s in _releases(family.data_file) if parsed in s.sglang), None)


def modelled_versions(family) -> list[str]:
    """The exact sglang releases a family's data file models (its '==X' entries in the family's range: two
    families may share a data file)."""
    return [v for s in _releases(family.data_file) for spec in s.sglang if spec.operator == "=="
            for v in [str(spec).lstrip("=")] if family.covers(v)]



def _holds(condition: Any, value: Any) -> bool:
    if isinstance(condition, dict) and set(condition) == {"not"}:
        return not _holds(condition["not"], value)
    if isinstance(condition, list):
        return value in condition
    return value == condition


def _subst(value: Any, facts: dict[str, Any]) -> Any:
    if isinstance(value, str) and value.startswith("$"):
        name = value[1:]
        if name not in facts:
            raise KeyError(name)
        return facts[name]
    if isinstance(value, list):
        return [_subst(v, facts) for v in value]
    if isinstance(value, dict):
        return {k: _subst(v, facts) for k, v in value.items()}
    return value


def _render(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def module_from_data(family, m: dict[str, Any], facts: dict[str, Any]) -> JitModule:
    return JitModule(m["id"], m["path"], m["python"], m["builder"], tuple(_subst(m.get("args", []), facts)),
                     tuple(_render(t) for t in _subst(m["marker"], facts)),
                     tuple(_render(t) for t in _subst(m["template"], facts)),
                     tuple(m["cuda_files"]), m.get("why", ""), family=family.id,
                     kwargs=tuple(_subst(m.get("kwargs") or {}, facts).items()))


def plan_modules(family, sglang_version: str, path) -> tuple[list[JitModule], list[str]]:
    """The modules the release builds on ``path`` (a ServerPath), in the data file's order, and notes on the
    modules left out for a fact the path lacks."""
    spec = release_spec(family, sglang_version)
    if spec is None:
        return [], []
    facts = path.facts()
    out: list[JitModule] = []
    notes: list[str] = []
    seen: set[str] = set()
    for m in spec.modules:
        when = m.get("when") or {}
        if not all(_holds(cond, facts.get(name)) for name, cond in when.items()):
            continue
        try:
            module = module_from_data(family, m, facts)
        except KeyError as missing:
            notes.append(f"{m['id']}: not planned, the model's config does not give {missing.args[0]}")
            continue
        if module.id not in seen:
            seen.add(module.id)
            out.append(module)
    # paths the data says it has not read for this release (``unmodelled:``, each a ``when:`` and a ``note``): the
    # modules SGLang builds there are not planned, and a strict launch refuses them by name
    for gap in dict(spec.raw).get("unmodelled") or []:
        if all(_holds(cond, facts.get(name)) for name, cond in (gap.get("when") or {}).items()):
            notes.append(f"sglang {sglang_version}: {gap['note']}")
    return out, notes


@dataclass(frozen=True)
class JitFamily:
    id: str  # also the `family` field of a manifest's JIT module
    label: str
    releases: str  # PEP 440 specifier of the sglang releases whose JIT is this loader
    data_file: str  # under dgprecompile/data: per release, its naming facts and modules
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
    kind: str = "sglang-jit"  # the key of each stage's table that handles its modules (runtimes/base.py)
    live: tuple[str, ...] = ("jit",)  # `verify --live`: each module through its own entry point (or builder)

    # -- planning --
    def covers(self, version: str | None) -> bool:
        """True when ``version`` is one of this family's releases (modelled or not)."""
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
        return modelled_versions(self)

    def release(self, version: str | None) -> JitVersionSpec | None:
        """The data file's entry for an exact release, or None."""
        return release_spec(self, version)

    def plan_modules(self, version: str, path: ServerPath) -> tuple[list[JitModule], list[str]]:
        """(modules, notes): the JitModules this release builds on ``path``, in build order."""
        return plan_modules(self, version, path)

    # -- keys: the runtime's names for an install are computed in keys/schemes.py (naming_for) --
    def key_fields(self) -> tuple[str, ...]:
        return tuple(f"{self.fingerprint_section}.{f}" for f in self.fingerprint_fields)

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
        entry = naming.entry_name(module)
        return entry if all((Path(area_dir) / entry / f).is_file() for f in self.entry_files(naming, module)) else None

    def missing_detail(self, naming, module, area_dir) -> str | None:
        """Why installed_entry found nothing, when the family can say more than "missing" (else None)."""
        return None

    # -- launch --
    @property
    def strict_by(self) -> StrictBy:
        """SWITCH (the release's own variable refuses builds) or HOOK (the startup hook wraps the builder)."""
        return StrictBy.SWITCH if self.strict_switch else StrictBy.HOOK

    def launch_env(self, cache_dir: str) -> list[tuple[str, str]]:
        """(variable, value) for each cache variable: the family's area of the warmed cache."""
        return [(name, os.path.join(cache_dir, self.area)) for name in self.cache_env]

    def strict_env(self) -> dict[str, str]:
        return dict(self.strict_switch)
