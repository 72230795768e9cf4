"""Manifests: a plan saved as YAML (`plan -o`), which warm, verify, pack and launch read back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from dgprecompile import schemas
from dgprecompile.documents import load_yaml_text
from dgprecompile.errors import InputError
from dgprecompile.fsutil import atomic_write_text, read_input
from dgprecompile.planning.plan import MANIFEST_SCHEMA, Bucket, Plan, PlannedKey
from dgprecompile.planning.profiles import resolve_profile
from dgprecompile.runtimes.items import (
    FlashInferItem,
    GemmKey,
    InductorGraphItem,
    JitModule,
    KernelSpec,
    KernelType,
    TritonMoeItem,
    TritonPathItem,
)


def write_manifest(plan: Plan, path: Path) -> None:
    atomic_write_text(path, dump_yaml(plan.to_dict()))


def dump_yaml(data: dict[str, Any]) -> str:
    return yaml.safe_dump(data, sort_keys=False, width=120)


REGENERATE = "regenerate it with `dgprecompile plan ... -o FILE`"


def read_manifest(path: Path) -> Plan:
    text = read_input(path, "manifest", hint="write one with `dgprecompile plan ... -o FILE`")
    return plan_from_dict(load_yaml_text(text, f"manifest {path}", hint=REGENERATE), str(path))


def plan_from_dict(data: Any, where: str = "manifest") -> Plan:
    """A Plan from a manifest document: its form checked against the ``manifest`` schema (data/schemas/), then what
    a schema cannot say (ranges in order, ep | tp, the counts it states, a generation that is the profile's)."""
    if not isinstance(data, dict) or "shapes" not in data or "kernels" not in data:
        raise InputError(f"{where} is not a dgprecompile manifest (no shapes/kernels)", hint=REGENERATE)
    if data.get("schema") != MANIFEST_SCHEMA:
        raise InputError(f"{where} has manifest schema {schemas.shown(data.get('schema'))}; this dgprecompile "
                         f"reads schema {MANIFEST_SCHEMA}", hint=REGENERATE)
    schemas.check(data, "manifest", where, hint=REGENERATE)
    profile = _profile(data, where)
    sglang_version = data.get("sglang_version")
    if sglang_version is not None and not profile.contains(str(sglang_version)):
        raise InputError(f"{where}: sglang_version {sglang_version} is not in profile {profile.id}", hint=REGENERATE)
    tp, ep = data["tp"], data["ep"]
    if ep > tp or tp % ep:
        raise InputError(f"{where}: ep {ep} does not divide tp {tp} (SGLang runs MoE tensor-parallel over tp/ep)",
                         hint=REGENERATE)
    kernels: dict[str, KernelSpec] = {}
    for i, kd in enumerate(data["kernels"]):
        spec = KernelSpec(kd["family"], tuple(kd["params"].items()))
        if spec.id != kd["id"]:
            raise InputError(f"{where}: kernels[{i}].id {schemas.shown(kd['id'])} does not match its parameters",
                             hint=REGENERATE)
        if spec.id in kernels:
            raise InputError(f"{where}: kernels[{i}]: kernel {schemas.shown(spec.id)} is listed twice",
                             hint=REGENERATE)
        kernels[spec.id] = spec
    heuristic = data.get("kernel_model", True)
    stated = data.get("total_kernels")
    if stated != (len(kernels) if heuristic else None) and not (stated is None and heuristic is False):
        raise InputError(f"{where}: total_kernels is {stated} but the manifest lists {len(kernels)} kernels",
                         hint=REGENERATE)
    keys = [_shape(sd, f"shapes[{i}]", kernels, where) for i, sd in enumerate(data["shapes"])]
    try:
        jit_modules = {m.id: m for m in (JitModule.from_dict(d) for d in data.get("sglang_jit_modules", []))}
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"{where}: sglang_jit_modules: malformed module ({schemas.shown(str(exc))})",
                         hint=REGENERATE) from None
    triton_moe = _triton_moe(data.get("triton_moe", []), where)  # manifests before it have no section
    inductor = _items(InductorGraphItem, data, where)
    flashinfer = _items(FlashInferItem, data, where)
    triton_path = _items(TritonPathItem, data, where)
    if not keys and not jit_modules and not triton_moe and not triton_path:
        raise InputError(f"{where} plans no kernel at all (no shapes, no SGLang JIT modules): there is nothing to "
                         "warm or verify", hint=REGENERATE)
    return Plan(model=data["model"], model_source=data.get("model_source", ""),
                model_type=data.get("model_type", ""), tp=tp, ep=ep,
                moe_runner_backend=data.get("moe_runner_backend", "auto"), max_tokens=data["max_tokens"],
                profile=profile, profile_reason=f"manifest {where}", num_sms=data["num_sms"],
                gpu=data.get("gpu"), keys=keys, kernels=kernels, notes=list(data.get("notes", [])),
                heuristic=bool(heuristic), sglang_version=None if sglang_version is None else str(sglang_version),
                sweep_m_max=data.get("sglang_precompile_m_max", 0), server=data.get("server"),
                jit_modules=jit_modules, triton_moe=triton_moe, inductor=inductor, flashinfer=flashinfer,
                triton_path=triton_path)


def _items(cls, data: dict[str, Any], where: str) -> dict:
    """The items of the manifest section of ``cls`` (an item type with from_dict and a ``section``), by id; one
    error where an id does not match its fields or is listed twice (manifests before the section have none)."""
    out: dict = {}
    for i, d in enumerate(data.get(cls.section, [])):
        item = cls.from_dict(d)
        if item.id != d["id"] or item.id in out:
            problem = "does not match its fields" if item.id != d["id"] else "is listed twice"
            raise InputError(f"{where}: {cls.section}[{i}].id {schemas.shown(d['id'])} {problem}", hint=REGENERATE)
        out[item.id] = item
    return out


def _triton_moe(items: list[dict[str, Any]], where: str) -> dict[str, TritonMoeItem]:
    out: dict[str, TritonMoeItem] = {}
    for i, d in enumerate(items):
        item = TritonMoeItem.from_dict(d)
        if item.id != d["id"]:
            raise InputError(f"{where}: triton_moe[{i}].id {schemas.shown(d['id'])} does not match its fields "
                             f"({item.id})", hint=REGENERATE)
        if item.m_min > item.m_max:
            raise InputError(f"{where}: triton_moe[{i}]: m_min {item.m_min} is above m_max {item.m_max}",
                             hint=REGENERATE)
        if item.id in out:
            raise InputError(f"{where}: triton_moe[{i}]: item {schemas.shown(item.id)} is listed twice",
                             hint=REGENERATE)
        out[item.id] = item
    return out


def _profile(data: dict[str, Any], where: str):
    try:
        profile = resolve_profile(data["sglang_profile"]).profile
    except InputError as exc:
        raise InputError(f"{where}: sglang_profile: {exc.message}", hint=REGENERATE) from None
    generation = (data.get("deepgemm") or {}).get("generation")
    if generation is not None and generation != profile.generation:
        raise InputError(f"{where}: deepgemm.generation {schemas.shown(generation)} is not the DeepGEMM generation "
                         f"of profile {profile.id} ({profile.generation})", hint=REGENERATE)
    return profile


def _shape(sd: dict[str, Any], field: str, kernels: dict[str, KernelSpec], where: str) -> PlannedKey:
    if sd["m_min"] > sd["m_max"]:
        raise InputError(f"{where}: {field}: m_min {sd['m_min']} is above m_max {sd['m_max']}", hint=REGENERATE)
    key = GemmKey(KernelType.parse(sd["kernel_type"]), sd["n"], sd["k"], sd["num_groups"],
                  tuple(sd.get("layers", ())), sd["m_min"], sd["m_max"])
    buckets = []
    for j, b in enumerate(sd["buckets"]):
        if not sd["m_min"] <= b["m_min"] <= b["m_rep"] <= b["m_max"] <= sd["m_max"]:
            raise InputError(f"{where}: {field}.buckets[{j}]: m {b['m_min']}..{b['m_max']} (representative "
                             f"{b['m_rep']}) is not an ordered range inside the shape's m {sd['m_min']}..{sd['m_max']}",
                             hint=REGENERATE)
        if buckets and b["m_min"] <= buckets[-1].m_max:
            raise InputError(f"{where}: {field}.buckets[{j}] overlaps the bucket before it", hint=REGENERATE)
        buckets.append(Bucket(b["m_min"], b["m_max"], b["m_rep"], b["kernel"]))
    aux = list(sd.get("aux_kernels", []))
    for ref in [b.kernel for b in buckets] + aux:
        if ref not in kernels:
            raise InputError(f"{where}: {field} refers to unknown kernel {schemas.shown(ref)}", hint=REGENERATE)
    return PlannedKey(key, buckets, aux)


def manifest_name(plan: Plan) -> str:
    base = plan.model.replace("/", "_")
    return f"{base}.tp{plan.tp}.ep{plan.ep}.sglang-{plan.profile.id}.{plan.moe_runner_backend}.yaml"
