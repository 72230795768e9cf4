"""The environment a cache was built for, and which differences make its entries miss.

Built without importing torch or DeepGEMM, so `verify` and `launch` can run it anywhere.
"""

from __future__ import annotations

import hashlib
import platform
from importlib import metadata
from typing import Any

from dgprecompile.host.toolchain import DeepGemmInstall, Nvcc, headers_hash, key_env
from dgprecompile.runtimes import JIT_FAMILIES, get_generation

# SGLang's own JIT modules: each loader family's section (present when a warm built its modules) holds what
# the release's own key holds (dgprecompile/runtimes/jit_loader.py fingerprint_fields)
JIT_FIELDS = ("sglang_jit.sglang", "sglang_jit.tvm_ffi", "sglang_jit.arch")  # the tvm-ffi family's


def _jit_fields(recorded: dict[str, Any], current: dict[str, Any] | None = None) -> tuple[str, ...]:
    """The JIT families' key fields, for each family section present in ``recorded`` (and ``current``)."""
    out: tuple[str, ...] = ()
    for family in JIT_FAMILIES.values():
        section = family.fingerprint_section
        if recorded.get(section) and (current is None or current.get(section)):
            out += tuple(f for f in family.key_fields() if f not in out)  # two families may share a section
    return out


def _dist_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def make_fingerprint(install: DeepGemmInstall, nvcc: Nvcc, num_sms: int, gpu: str | None = None,
                     environ: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "deepgemm": {
            "generation": install.generation,
            "distribution": install.distribution,
            "version": install.version,
            "package_dir": install.package_dir,
            "headers_sha256": headers_hash(install.include_dir),
        },
        "nvcc": {
            "path": nvcc.path,
            "release": ".".join(map(str, nvcc.release)),
            "version_sha256": hashlib.sha256(nvcc.version_text.encode()).hexdigest(),
        },
        "gpu": gpu,
        "num_sms": num_sms,
        "env": key_env(environ),
        "torch": _dist_version("torch"),
        "python": platform.python_version(),
    }


def key_fields(generation_id: str | None) -> tuple[str, ...]:
    """The fields whose difference makes the runtime look under another key (the generation's own list)."""
    return get_generation(generation_id or "sgl-deep-gemm-0.2").fingerprint_fields


def _get(fp: dict[str, Any], dotted: str) -> Any:
    value: Any = fp
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def differences(recorded: dict[str, Any], current: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(field, recorded, current) for every key-relevant field that differs."""
    fields = key_fields(_get(recorded, "deepgemm.generation") or _get(current, "deepgemm.generation"))
    fields = tuple(fields) + _jit_fields(recorded, current)  # compared only where both caches know them
    out = []
    for f in fields:
        a, b = _get(recorded, f), _get(current, f)
        if a != b:
            out.append((f, a, b))
    return out


def short_id(fp: dict[str, Any]) -> str:
    """A stable short hash of the key-relevant fields, for artifact names and CI cache keys."""
    fields = key_fields(_get(fp, "deepgemm.generation"))
    fields = tuple(fields) + _jit_fields(fp)
    text = "|".join(f"{f}={_get(fp, f)!r}" for f in fields)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
