"""SGLang's own JIT modules as data (data/sglang_jit.yaml): which modules each modelled sglang release builds
on the planned layers, with which template arguments, under which naming scheme. keys/sglang_jit.py computes
the runtime's directory names from these facts and the installed files."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

import yaml
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from dgprecompile.kernels import JitModule


@dataclass(frozen=True)
class JitVersionSpec:
    """One entry of data/sglang_jit.yaml: how one sglang release names, places and builds its modules."""

    sglang: SpecifierSet
    source_root: str
    include_dir: str
    name_prefix: str
    build_dir: str
    cache_dir_env: str
    cache_dir_default: str
    arch_override: str
    arch: tuple[int, int]
    modules: tuple[dict[str, Any], ...]
    build_seconds: float  # one module's build (MAX_JOBS=1), measured: warm hands the costliest work out first

    @property
    def arch_name(self) -> str:
        return f"{self.arch[0]}.{self.arch[1]}"


@lru_cache(maxsize=1)
def _load() -> tuple[JitVersionSpec, ...]:
    data = yaml.safe_load(resources.files("dgprecompile.data").joinpath("sglang_jit.yaml").read_text())
    return tuple(JitVersionSpec(SpecifierSet(v["sglang"]), v["source_root"], v["include_dir"], v["name_prefix"],
                                v["build_dir"], v["cache_dir_env"], v["cache_dir_default"], v["arch_override"],
                                tuple(v["arch"]), tuple(v["modules"]), float(v["build_seconds"])) for v in data["versions"])


def spec_for(sglang_version: str | None) -> JitVersionSpec | None:
    """The modelled naming/build scheme for an exact sglang version, or None (not modelled)."""
    if not sglang_version:
        return None
    try:
        parsed = Version(sglang_version)
    except InvalidVersion:
        return None
    return next((s for s in _load() if parsed in s.sglang), None)


def modules_for(sglang_version: str | None) -> list[JitModule]:
    spec = spec_for(sglang_version)
    if spec is None:
        return []
    return [JitModule(m["id"], m["path"], m["python"], m["builder"], tuple(m["args"]), tuple(m["marker"]),
                      tuple(str(t) for t in m["template"]), tuple(m["cuda_files"]), m.get("why", ""))
            for m in spec.modules]


def module_requirements(sglang_version: str | None) -> dict[str, dict[str, int]]:
    spec = spec_for(sglang_version)
    return {m["id"]: dict(m.get("requires") or {}) for m in spec.modules} if spec else {}


def modeled_versions() -> list[str]:
    """The exact sglang releases data/sglang_jit.yaml models (its '==X' entries)."""
    return [str(spec).lstrip("=") for s in _load() for spec in s.sglang if spec.operator == "=="]
