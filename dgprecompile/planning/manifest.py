"""Manifests: a plan saved as YAML (`plan -o`), which warm, verify, pack and launch read back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from dgprecompile.errors import InputError
from dgprecompile.fsutil import atomic_write_text
from dgprecompile.kernels import GemmKey, JitModule, KernelSpec, KernelType
from dgprecompile.planning.plan import MANIFEST_SCHEMA, Bucket, Plan, PlannedKey
from dgprecompile.planning.profiles import resolve_profile


def write_manifest(plan: Plan, path: Path) -> None:
    atomic_write_text(path, dump_yaml(plan.to_dict()))


def dump_yaml(data: dict[str, Any]) -> str:
    return yaml.safe_dump(data, sort_keys=False, width=120)


def read_manifest(path: Path) -> Plan:
    try:
        data = yaml.safe_load(Path(path).read_text())
    except FileNotFoundError:
        raise InputError(f"manifest not found: {path}", hint="write one with `dgprecompile plan ... -o FILE`") from None
    except (OSError, yaml.YAMLError) as exc:
        raise InputError(f"cannot read manifest {path}: {str(exc).splitlines()[0]}", hint="regenerate it with `dgprecompile plan ... -o FILE`") from None
    return plan_from_dict(data, str(path))


def plan_from_dict(data: Any, where: str = "manifest") -> Plan:
    if not isinstance(data, dict) or "shapes" not in data or "kernels" not in data:
        raise InputError(f"{where} is not a dgprecompile manifest (no shapes/kernels)", hint="regenerate it with `dgprecompile plan ... -o FILE`")
    if data.get("schema") != MANIFEST_SCHEMA:
        raise InputError(f"{where} has manifest schema {data.get('schema')!r}; this dgprecompile reads "
                         f"schema {MANIFEST_SCHEMA}", hint="regenerate it with `dgprecompile plan -o`")
    try:
        profile = resolve_profile(data["sglang_profile"]).profile
        sglang_version = data.get("sglang_version")
        if sglang_version is not None and not profile.contains(str(sglang_version)):
            raise InputError(f"{where}: sglang_version {sglang_version} is not in profile {profile.id}",
                             hint="regenerate it with `dgprecompile plan ... -o FILE`")
        kernels = {}
        for kd in data["kernels"]:
            spec = KernelSpec(kd["family"], tuple((k, v) for k, v in kd["params"].items()))
            if spec.id != kd["id"]:
                raise InputError(f"{where}: kernel id {kd['id']!r} does not match its parameters", hint="regenerate it with `dgprecompile plan ... -o FILE`")
            kernels[spec.id] = spec
        keys = []
        for sd in data["shapes"]:
            key = GemmKey(KernelType.parse(sd["kernel_type"]), int(sd["n"]), int(sd["k"]), int(sd["num_groups"]),
                          tuple(sd.get("layers", ())), int(sd["m_min"]), int(sd["m_max"]))
            buckets = [Bucket(int(b["m_min"]), int(b["m_max"]), int(b["m_rep"]), str(b["kernel"]))
                       for b in sd["buckets"]]
            aux = [str(a) for a in sd.get("aux_kernels", [])]
            for ref in [b.kernel for b in buckets] + aux:
                if ref not in kernels:
                    raise InputError(f"{where}: shape refers to unknown kernel {ref!r}", hint="regenerate it with `dgprecompile plan ... -o FILE`")
            keys.append(PlannedKey(key, buckets, aux))
        return Plan(model=data["model"], model_source=data.get("model_source", ""),
                    model_type=data.get("model_type", ""), tp=int(data["tp"]), ep=int(data["ep"]),
                    moe_runner_backend=data.get("moe_runner_backend", "auto"), max_tokens=int(data["max_tokens"]),
                    profile=profile, profile_reason=f"manifest {where}", num_sms=int(data["num_sms"]),
                    gpu=data.get("gpu"), keys=keys, kernels=kernels, notes=list(data.get("notes", [])),
                    heuristic=bool(data.get("kernel_model", True)),
                    sglang_version=None if sglang_version is None else str(sglang_version),
                    sweep_m_max=int(data.get("sglang_precompile_m_max", 0)), server=data.get("server"),
                    jit_modules={m.id: m for m in (JitModule.from_dict(d) for d in data.get("sglang_jit_modules", []))})
    except KeyError as exc:
        raise InputError(f"{where} is malformed: a required field {exc.args[0]!r} is missing", hint="regenerate it with `dgprecompile plan ... -o FILE`") from None
    except (TypeError, ValueError) as exc:
        raise InputError(f"{where} is malformed: {exc}", hint="regenerate it with `dgprecompile plan ... -o FILE`") from None


def manifest_name(plan: Plan) -> str:
    base = plan.model.replace("/", "_")
    return f"{base}.tp{plan.tp}.ep{plan.ep}.sglang-{plan.profile.id}.{plan.moe_runner_backend}.yaml"
