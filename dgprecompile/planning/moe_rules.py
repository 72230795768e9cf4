"""The server-argument rules that change a MoE layer's shape, per SGLang release (data/moe_rules.yaml): whether the
expert parallelism follows tp, whether DeepSeek-V3's shared expert is fused into the routed MoE (one more expert
on every rank, top-k + 1, no dense shared-expert MLP), and how many redundant experts each rank holds.

``resolve`` evaluates them for one server command (its options as that release parsed them, given or default) and
one model config; planning.shapes turns the result into expert counts. Nothing here imports torch or sglang.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from dgprecompile.data import load_yaml
from dgprecompile.errors import InputError

DATA = "moe_rules.yaml"
RULES_HINT = "drop that option from the server command, or pass the --sglang release it is meant for"


@dataclass(frozen=True)
class MoeLayout:
    """What the server arguments make of the model's MoE layers (sizes are applied by planning.shapes)."""

    ep: int  # the expert-parallel size after the release's ep = tp rules
    fused_shared_experts: int = 0  # shared experts folded into the routed MoE (0: their dense MLP stays)
    redundant_experts: int = 0  # --ep-num-redundant-experts
    notes: tuple[str, ...] = field(default=(), compare=False)


def _ranges() -> list[dict]:
    return load_yaml(DATA)["releases"]


def release_rules(version: str) -> dict | None:
    """The rules of the range holding ``version`` (an exact release), or None."""
    try:
        v = Version(version)
    except InvalidVersion:
        return None
    return next((r for r in _ranges() if v in SpecifierSet(r["sglang"], prereleases=True)), None)


def _bounds(spec: SpecifierSet) -> tuple[Version, Version, bool]:
    lo, hi, closed = Version("0"), Version("9999"), False
    for s in spec:
        if s.operator == ">=":
            lo = Version(s.version)
        elif s.operator in ("<", "<="):
            hi, closed = Version(s.version), s.operator == "<="
    return lo, hi, closed


def rules_for_profile(profile_range: SpecifierSet) -> list[dict]:
    """The rule ranges that share a release with a profile's range (a plan by profile id)."""
    plo, phi, pclosed = _bounds(profile_range)
    out = []
    for r in _ranges():
        rlo, rhi, rclosed = _bounds(SpecifierSet(r["sglang"]))
        if (rlo < phi or pclosed and rlo == phi) and (plo < rhi or rclosed and plo == rhi):
            out.append(r)
    return out


def _holds(cond: dict, facts: dict[str, Any]) -> bool:
    if "all" in cond:
        return all(_holds(c, facts) for c in cond["all"])
    value = facts.get(cond["fact"])
    if "is" in cond:
        return bool(value) if cond["is"] is True else value == cond["is"]
    if "in" in cond:
        return value in cond["in"]
    if "not_in" in cond:
        return value not in cond["not_in"]
    if "gt" in cond:
        return value is not None and value > cond["gt"]
    if "lt" in cond:
        return value is not None and value < cond["lt"]
    raise ValueError(f"{DATA}: a condition without an operator: {cond}")


# facts that are not server options (the rest are option dests, shown as their --option)
DERIVED_FACTS = ("architecture", "n_routed_experts", "n_shared_experts", "quant_method", "capability", "moe_ep_size")


def _shown(cond: dict, facts: dict[str, Any]) -> str:
    if "all" in cond:
        return " and ".join(_shown(c, facts) for c in cond["all"])
    name, value = cond["fact"], facts.get(cond["fact"])
    if name in DERIVED_FACTS:
        return f"{name} {value}"
    option = "--" + name.replace("_", "-")
    return option if value is True else f"{option} {value}"


def model_facts(config: dict, capability: int) -> dict[str, Any]:
    q = config.get("quantization_config") or {}
    return {"architecture": (config.get("architectures") or [None])[0],
            "n_routed_experts": config.get("n_routed_experts"), "n_shared_experts": config.get("n_shared_experts"),
            "quant_method": q.get("quant_method"), "capability": capability}


def _effective_ep(rules: dict, facts: dict[str, Any], tp: int, ep: int, notes: list[str], read: str) -> int:
    for cond in rules.get("refuse_when", []):
        if _holds(cond, facts):
            raise InputError(f"{_shown(cond, facts)}: sglang {read} refuses this option ({cond['where']})",
                             hint=RULES_HINT)
    for cond in rules.get("ep_equals_tp", []):
        if _holds(cond, facts) and ep != tp:
            notes.append(f"expert parallelism: {_shown(cond, facts)} sets ep = tp = {tp} (sglang {read} "
                         f"{cond['where']})")
            return tp
    return ep


def _fusion(rules: dict, model_type: str, facts: dict[str, Any], read: str) -> tuple[int, str]:
    """(fused shared experts, why)."""
    fusion = rules.get("shared_experts_fusion")
    shared = int(facts.get("n_shared_experts") or 0)
    if not fusion or model_type not in fusion["models"] or shared == 0:
        return 0, ""
    enforce = fusion.get("enforce")
    enforced = bool(enforce and facts.get(enforce["fact"]))
    for cond in fusion["off_when"]:
        if enforced and cond.get("enforced"):
            continue
        if _holds(cond, facts):
            return 0, (f"shared-experts fusion off: {_shown(cond, facts)} (sglang {read} {cond['where']}; "
                       f"decided at {fusion['decided']})")
    how = f"--enforce-shared-experts-fusion ({enforce['where']})" if enforced else "no condition turns it off"
    return shared, (f"shared-experts fusion on: {how}; the {shared} shared expert(s) join the routed MoE as "
                    f"expert(s) of every rank, top-k + {shared} (sglang {read} {fusion['decided']}; sizes "
                    f"{fusion['sizes']}), and mlp.shared_experts' dense MLP is not built ({fusion['dense_dropped']})")


def _resolve_one(rules: dict, options: dict[str, Any], config: dict, tp: int, ep: int, capability: int,
                 note_prefix: str) -> MoeLayout:
    read = str(rules["read"])
    notes: list[str] = []
    facts = {**options, **model_facts(config, capability)}
    ep = _effective_ep(rules, facts, tp, ep, notes, read)
    facts["moe_ep_size"] = ep
    fused, why = _fusion(rules, str(config.get("model_type")), facts, read)
    if why:
        notes.append(why)
    redundant = int(options.get("ep_num_redundant_experts") or 0)
    if redundant:
        notes.append(f"--ep-num-redundant-experts {redundant}: {redundant} more physical experts over the ep "
                     f"group (sglang {read} {rules['redundant_experts']['where']})")
    if notes and note_prefix:  # a rule applied: say which release's source it was read from
        notes.insert(0, note_prefix)
    return MoeLayout(ep, fused, redundant, tuple(notes))


def resolve(sglang_version: str | None, profile_range: SpecifierSet, options: dict[str, Any], config: dict,
            tp: int, ep: int, capability: int) -> MoeLayout:
    """The MoE layout of a server with ``options`` (dest -> value, given or default) on ``config``."""
    if sglang_version:
        rules = release_rules(sglang_version)
        if rules is None:
            return MoeLayout(ep, 0, int(options.get("ep_num_redundant_experts") or 0),
                             (f"MoE server-argument rules (data/{DATA}) were not read for sglang {sglang_version}: "
                              "shared-experts fusion not planned",))
        prefix = "" if str(rules["read"]) == sglang_version else (
            f"MoE rules of sglang {rules['read']} (read) applied to {sglang_version} (same range, not read)")
        return _resolve_one(rules, options, config, tp, ep, capability, prefix)
    layouts = {str(r["read"]): _resolve_one(r, options, config, tp, ep, capability, "")
               for r in rules_for_profile(profile_range)}
    if not layouts:
        return MoeLayout(ep, 0, int(options.get("ep_num_redundant_experts") or 0), ())
    if len(set(layouts.values())) > 1:
        which = ", ".join(f"{v}: {lay.fused_shared_experts} fused" for v, lay in layouts.items())
        raise InputError(f"the MoE shape of this server differs between the releases of this profile ({which})",
                         hint="pass the exact release with --sglang X.Y.Z")
    read, layout = next(iter(layouts.items()))
    head = (f"MoE rules: the same under every read release of this profile ({', '.join(layouts)}); as read from "
            f"{read}:",) if layout.notes else ()
    return MoeLayout(layout.ep, layout.fused_shared_experts, layout.redundant_experts, head + layout.notes)


def apply(par, model_config: dict, profile_range: SpecifierSet, gpu: str | None, sglang_version: str | None,
          options: dict[str, Any]):
    """``par`` (a planning.shapes.Parallel) with the layout's ep, fused shared experts and redundant experts; and
    the notes that say which rule applied, with its file:line."""
    from dataclasses import replace

    from dgprecompile.runtimes.triton_moe import gpu_device

    capability = int(gpu_device(gpu)["capability"])
    layout = resolve(sglang_version, profile_range, options, model_config, par.tp, par.ep, capability)
    return replace(par, ep=layout.ep, fused_shared_experts=layout.fused_shared_experts,
                   redundant_experts=layout.redundant_experts), list(layout.notes)


def all_to_all_kernels(sglang_version: str) -> str:
    """Where the release runs an all-to-all backend's experts on DeepGEMM (for the refusal), or ''."""
    rules = release_rules(sglang_version)
    if rules is None or "all_to_all" not in rules:
        return ""
    return f" (sglang {rules['read']}: {rules['all_to_all']['deepgemm']})"
