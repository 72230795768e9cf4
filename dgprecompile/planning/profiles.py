"""SGLang generations: which DeepGEMM, which environment switches, which MoE path (data/profiles.yaml)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import metadata
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from dgprecompile.data import load_yaml
from dgprecompile.errors import InputError
from dgprecompile.runtimes import Generation, get_generation


@dataclass(frozen=True)
class Profile:
    id: str
    sglang: SpecifierSet
    summary: str
    generation: str  # an id of generations.GENERATIONS
    deepgemm_distribution: str
    deepgemm_version: str
    env: dict[str, str]
    cache_dir_default: str
    precompile: dict[str, Any]
    moe: dict[str, str]
    seconds_per_kernel: float
    bytes_per_entry: int
    sm_arch: str = "sm_90a"  # the architecture its JIT builds cubins for; entries are checked against it
    spec_capture_options: bool = False  # server commands may carry SpecForge's --enable-spec-capture options
    raw: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @property
    def deepgemm(self) -> Generation:
        """The DeepGEMM generation this SGLang range runs: every generation-specific fact lives there."""
        return get_generation(self.generation)

    def env_names(self, switch: str) -> list[str]:
        value = self.env.get(switch) or []
        return [value] if isinstance(value, str) else list(value)

    def cache_dir(self, environ: dict[str, str] | None = None, sglang_version: str | None = None) -> str:
        """The directory the runtime of this generation compiles into, given an environment."""
        environ = os.environ if environ is None else environ
        default = self.cache_dir_default
        if sglang_version is None:  # a plan by profile id: the installed sglang's, when it is of this profile
            installed = installed_sglang_version()
            sglang_version = installed if installed and self.contains(installed) else None
        if sglang_version:
            for since, path in sorted(self.raw.get("cache_dir_default_from", {}).items(), key=lambda i: Version(i[0])):
                if Version(sglang_version) >= Version(since):
                    default = path
        for name in self.env_names("cache_dir"):
            if environ.get(name):
                default = environ[name]
                break
        return os.path.abspath(os.path.expanduser(default))

    def contains(self, sglang_version: str) -> bool:
        try:
            return Version(sglang_version) in self.sglang
        except InvalidVersion:
            return False

    def moe_kernel(self, backend: str) -> str | None:
        """'masked', 'contig', 'masked+contig' or None (Triton) for --moe-runner-backend ``backend``."""
        value = self.moe.get(backend)
        return None if value in (None, "none", "triton") else value


@lru_cache(maxsize=1)
def _load() -> tuple[list[Profile], dict[str, Any]]:
    data = load_yaml("profiles.yaml")
    out = []
    for p in data["profiles"]:
        out.append(Profile(
            id=p["id"], sglang=SpecifierSet(p["sglang"], prereleases=True), summary=p["summary"],
            generation=p["deepgemm"]["generation"], deepgemm_distribution=p["deepgemm"]["distribution"],
            deepgemm_version=str(p["deepgemm"]["version"]), env=p["env"], cache_dir_default=p["cache_dir_default"],
            precompile=p["precompile"], moe=p["moe"], seconds_per_kernel=float(p["seconds_per_kernel"]),
            bytes_per_entry=int(p["bytes_per_entry"]), sm_arch=p["sm_arch"],
            spec_capture_options=bool(p.get("spec_capture_options", False)), raw=p,
        ))
    return out, data


def all_profiles() -> list[Profile]:
    return list(_load()[0])


def installed_sglang_version() -> str | None:
    try:
        return metadata.version("sglang")
    except metadata.PackageNotFoundError:
        return None


@dataclass(frozen=True)
class ProfileChoice:
    """The profile a command works with, the exact sglang version when one is known, and why."""

    profile: Profile
    sglang_version: str | None
    reason: str


def _by_installed_deepgemm(profiles: list[Profile]) -> ProfileChoice | None:
    """The newest profile whose DeepGEMM is the one installed here (found without importing it)."""
    from dgprecompile.host.toolchain import find_deepgemm

    install = find_deepgemm()
    if install is None:
        return None
    for p in reversed(profiles):
        versions = SpecifierSet(str(p.raw["deepgemm"].get("versions", "")), prereleases=True)
        if p.generation != install.generation:
            continue
        try:
            if install.version is not None and Version(install.version) not in versions:
                continue
        except InvalidVersion:
            pass
        what = f"{install.distribution or 'deep_gemm'} {install.version or ''}".strip()
        return ProfileChoice(p, None, f"no sglang installed; the installed DeepGEMM ({what}) is this profile's")
    return None


def resolve_profile(version: str | None) -> ProfileChoice:
    """The profile for an sglang version or profile id. With None: the installed sglang's; else the profile of
    the installed DeepGEMM; else the newest, saying so."""
    profiles = all_profiles()
    if version is None:
        installed = installed_sglang_version()
        if installed is None:
            return _by_installed_deepgemm(profiles) or ProfileChoice(
                profiles[-1], None, f"newest supported profile {profiles[-1].id} (no sglang or DeepGEMM installed; "
                                    "pass --sglang)")
        version, why = installed, f"installed sglang {installed}"
    else:
        why = f"--sglang {version}"
    for p in profiles:
        if version == p.id:
            return ProfileChoice(p, None, why)
    try:
        parsed = Version(version)
    except InvalidVersion:
        if "-" in version:  # a profile id, maybe one from before a profile was split
            raise InputError(f"{version!r} is not a profile id; the profiles are {', '.join(p.id for p in profiles)}",
                             hint="pass one of those ids, or the exact sglang version (e.g. --sglang 0.5.9)") from None
        raise InputError(f"{version!r} is not an sglang version",
                         hint="pass e.g. --sglang 0.5.1 or --sglang 0.5.14") from None
    for p in profiles:
        if parsed in p.sglang:
            return ProfileChoice(p, str(parsed), why)
    ranges = "; ".join(f"{p.id} ({p.sglang})" for p in profiles)
    raise InputError(f"sglang {version} is not supported; supported: {ranges}",
                     hint="pass --sglang with a version of one of these ranges (`dgprecompile plan --help`)")
