"""Model config + parallel layout + SGLang profile -> the DeepGEMM keys SGLang calls (kernel_type, n, k, groups).

Everything is derived from config.json fields and SGLang's splitting rules; there are no per-model tables.
Rules (see docs/shapes.md for the sglang file:line of each):

* block-FP8 linears go to DeepGEMM's dense FP8 GEMM when n % 64 == 0 and k % 128 == 0 (else Triton);
* attention is tensor-parallel over tp: q heads split, kv heads split or replicated when fewer than tp;
* MoE experts: moe_tp = tp / ep, local experts = (experts + redundant) / ep + fused shared experts, top-k + fused
  (the server arguments' rules, planning.moe_rules); per-rank widths must be multiples of 128; whether they run on
  DeepGEMM (masked or contiguous) depends on the profile and --moe-runner-backend.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dgprecompile.errors import InputError
from dgprecompile.planning.models import ModelConfig
from dgprecompile.planning.profiles import Profile
from dgprecompile.runtimes.items import GemmKey, KernelType, ceil_div

MOE_BACKENDS = ("auto", "deep_gemm", "triton")


@dataclass(frozen=True)
class Parallel:
    tp: int = 1
    ep: int = 1
    moe_runner_backend: str = "auto"
    max_tokens: int = 16384  # the largest number of tokens in one forward on a rank (dense m)
    # SGLang's own precompile, when it stays on, calls every key with every m in 1..sweep_m_max (dense m, masked
    # expected_m, contiguous m); 0 when it is off (launch) or not planned
    sweep_m_max: int = 0
    # the server arguments' MoE rules (planning.moe_rules, data/moe_rules.yaml): shared experts fused into the
    # routed MoE (one more expert on every rank, top-k + that), and --ep-num-redundant-experts
    fused_shared_experts: int = 0
    redundant_experts: int = 0


@dataclass(frozen=True)
class TritonMoeShape:
    """MoE layers whose experts run on SGLang's Triton fused MoE: their shape on a rank (families.TRITON_MOE
    turns it into a warm item)."""

    layer: str
    count: int
    experts: int  # local experts on a rank
    global_experts: int
    hidden: int
    intermediate: int  # per rank
    topk: int


@dataclass
class ShapeSet:
    keys: list[GemmKey]
    notes: list[str] = field(default_factory=list)  # layers that do not reach DeepGEMM, and why
    triton_moe: list[TritonMoeShape] = field(default_factory=list)  # MoE layers on Triton fused MoE


@dataclass
class _Linear:
    layer: str
    n: int
    k: int
    count: int


def _field(cfg: dict[str, Any], name: str, model: ModelConfig, *alts: str) -> Any:
    for key in (name, *alts):
        if key in cfg and cfg[key] is not None:
            return cfg[key]
    raise InputError(f"{model.source}: config field {name!r} is missing (needed for model_type "
                     f"{cfg.get('model_type')!r})", hint="pass the model's own config.json (--model PATH)")


def _int_field(cfg, name, model, *alts) -> int:
    """A size field: its form (a positive int of bounded size) was checked by the ``model-config`` schema when
    the config was read (planning/models.py); here only whether it is there."""
    return _field(cfg, name, model, *alts)


def check_block_fp8(model: ModelConfig) -> None:
    q = model.config.get("quantization_config") or {}
    method = q.get("quant_method")
    block = q.get("weight_block_size")
    if method != "fp8" or list(block or []) != [128, 128]:
        what = f"quant_method={method!r}, weight_block_size={block!r}" if q else "no quantization_config"
        raise InputError(f"{model.name} is not a block-FP8 model ({what}): SGLang uses no DeepGEMM kernel for it, "
                         "so there is nothing to precompile",
                         hint="plan an FP8 checkpoint with 128x128 weight blocks (e.g. Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8)")


def _tp_fits(heads: int, kv_heads: int, tp: int) -> bool:
    return heads % tp == 0 and (kv_heads % tp == 0 if kv_heads >= tp else tp % kv_heads == 0)


def _tp_hint(heads: int, kv_heads: int) -> str:
    good = [tp for tp in (1, 2, 4, 8, 16, 32, 64) if _tp_fits(heads, kv_heads, tp)]
    return "choose --tp from " + ", ".join(map(str, good))


def _attention_split(heads: int, kv_heads: int, tp: int, model: ModelConfig) -> tuple[int, int]:
    hint = _tp_hint(heads, kv_heads)
    if heads % tp:
        raise InputError(f"tp {tp} does not divide the {heads} attention heads of {model.name}", hint=hint)
    if kv_heads >= tp:
        if kv_heads % tp:
            raise InputError(f"tp {tp} does not divide the {kv_heads} key/value heads of {model.name}", hint=hint)
        return heads // tp, kv_heads // tp
    if tp % kv_heads:
        raise InputError(f"{model.name} has {kv_heads} key/value heads, which SGLang can only replicate "
                         f"over a tp that is a multiple of it (got tp {tp})", hint=hint)
    return heads // tp, 1  # each rank holds one replicated kv head


class ExpertLayoutError(InputError):
    """SGLang refuses this tp/ep for the model's FP8 experts; ``working_ep`` lists the ep values it accepts."""

    def __init__(self, message: str, working_ep: list[int], option: str = "--ep"):
        self.working_ep = working_ep
        super().__init__(message, hint=self.hint_for(option))

    def hint_for(self, option: str) -> str:
        if not self.working_ep:
            return "no ep works at this tp; choose another tp"
        values = [str(e) for e in self.working_ep]
        listed = values[0] if len(values) == 1 else ", ".join(values[:-1]) + " or " + values[-1]
        return f"use {option} {listed} (each gives a per-rank expert width that is a multiple of 128)"


def working_ep_sizes(experts: int, width: int, tp: int) -> list[int]:
    """The ep values SGLang loads block-FP8 experts with at this tp: ep | tp, ep | experts, (width / (tp/ep)) % 128 == 0."""
    out = []
    for ep in range(1, tp + 1):
        moe_tp = tp // ep
        if tp % ep == 0 and experts % ep == 0 and width % moe_tp == 0 and (width // moe_tp) % 128 == 0:
            out.append(ep)
    return out


def _moe_split(experts: int, width: int, par: Parallel, model: ModelConfig) -> tuple[int, int]:
    """(local experts, per-rank width); ``experts`` the model's routed experts (redundant and fused shared ones are
    added here: SGLang asserts (experts + redundant) % ep == 0, 0.5.14 eplb/expert_location.py:197-203)."""
    if par.ep > par.tp or par.tp % par.ep:
        raise InputError(f"ep {par.ep} must divide tp {par.tp} (SGLang runs MoE tensor-parallel over tp/ep)",
                         hint=f"choose --ep from the divisors of --tp {par.tp}")
    physical = experts + par.redundant_experts
    if physical % par.ep:
        what = f"{experts} experts" + (f" + {par.redundant_experts} redundant" if par.redundant_experts else "")
        raise InputError(f"ep {par.ep} does not divide the {what} of {model.name}",
                         hint="choose an --ep that divides both --tp and the expert count"
                              + (" (with --ep-num-redundant-experts)" if par.redundant_experts else ""))
    moe_tp = par.tp // par.ep
    if width % moe_tp or (width // moe_tp) % 128:
        raise ExpertLayoutError(f"ep {par.ep} at tp {par.tp}: the expert width {width} split over moe tp {moe_tp} "
                                f"gives {width / moe_tp:g} columns per rank, not a multiple of the 128-wide FP8 "
                                "weight block: SGLang refuses to load this layout",
                                working_ep_sizes(experts, width, par.tp))
    return physical // par.ep + par.fused_shared_experts, width // moe_tp


def _dense_keys(linears: list[_Linear], par: Parallel, notes: list[str]) -> list[GemmKey]:
    keys: dict[tuple[int, int], GemmKey] = {}
    for lin in linears:
        where = f"{lin.layer} x{lin.count}"
        if lin.n % 64 or lin.k % 128:
            notes.append(f"{where}: n={lin.n}, k={lin.k} fails DeepGEMM's n%64/k%128 gate -> Triton")
            continue
        prev = keys.get((lin.n, lin.k))
        layers = (prev.layers if prev else ()) + (where,)
        keys[(lin.n, lin.k)] = GemmKey(KernelType.GEMM_NT_F8F8BF16, lin.n, lin.k, 1, layers, 1,
                                       max(par.max_tokens, par.sweep_m_max))
    return list(keys.values())


def _moe_keys(profile: Profile, par: Parallel, hidden: int, experts: int, topk: int, width: int, layers: int,
              model: ModelConfig, notes: list[str], prefix: str = "mlp.experts",
              triton: list[TritonMoeShape] | None = None) -> list[GemmKey]:
    """The DeepGEMM keys of the MoE layers; where they run on Triton fused MoE instead, their shape goes into
    ``triton`` (and a note says no DeepGEMM)."""
    local, per_rank = _moe_split(experts, width, par, model)
    experts += par.fused_shared_experts + par.redundant_experts  # the MoE's global (physical) experts
    topk += par.fused_shared_experts
    on_triton = TritonMoeShape(prefix, layers, local, experts, hidden, per_rank, topk)
    if par.moe_runner_backend not in profile.moe:
        raise InputError(f"sglang {profile.id} has no --moe-runner-backend {par.moe_runner_backend} "
                         f"(its EPMoE runs the experts on masked DeepGEMM whenever ep > 1)",
                         hint="drop --moe-runner-backend, or plan for a newer --sglang")
    kinds = profile.moe_kernel(par.moe_runner_backend)
    if profile.moe.get("needs_ep") and par.ep == 1:
        notes.append(f"{prefix} (x{layers}): sglang {profile.id} uses EPMoE (masked DeepGEMM) only when ep > 1; "
                     "with ep 1 the experts run on Triton fused MoE, no DeepGEMM")
        if triton is not None:
            triton.append(on_triton)
        return []
    if kinds is None:
        notes.append(f"{prefix} (x{layers}): Triton fused MoE under sglang {profile.id} with "
                     f"--moe-runner-backend {par.moe_runner_backend}, no DeepGEMM")
        if triton is not None:
            triton.append(on_triton)
        return []
    out = []
    t = par.max_tokens
    for kind in kinds.split("+"):
        if kind == "masked":
            divisor = experts if profile.moe.get("expected_m", "global") == "global" else local
            e_max = max(1, ceil_div(t * topk, divisor))
            ktype, m_max = KernelType.GROUPED_GEMM_NT_F8F8BF16_MASKED, max(e_max, par.sweep_m_max)
        else:
            # contiguous layout: rows padded per expert to the 128-row alignment
            ktype = KernelType.GROUPED_GEMM_NT_F8F8BF16_CONTIG
            m_max = max(ceil_div(t * topk + local * 127, 128) * 128, par.sweep_m_max // 128 * 128)
        out.append(GemmKey(ktype, 2 * per_rank, hidden, local, (f"{prefix}.w13 (gate_up) x{layers}",), 1, m_max))
        out.append(GemmKey(ktype, hidden, per_rank, local, (f"{prefix}.w2 (down) x{layers}",), 1, m_max))
    return out


def _qwen3_moe(model: ModelConfig, profile: Profile, par: Parallel) -> ShapeSet:
    cfg = model.config
    hidden = _int_field(cfg, "hidden_size", model)
    heads = _int_field(cfg, "num_attention_heads", model)
    kv = _int_field(cfg, "num_key_value_heads", model)
    head_dim = cfg.get("head_dim") or hidden // heads
    layers = _int_field(cfg, "num_hidden_layers", model)
    experts = _int_field(cfg, "num_experts", model)
    topk = _int_field(cfg, "num_experts_per_tok", model)
    width = _int_field(cfg, "moe_intermediate_size", model)
    q_per, kv_per = _attention_split(heads, kv, par.tp, model)
    notes: list[str] = ["mlp.gate (router) and lm_head stay bf16: not DeepGEMM"]
    dense = [
        _Linear("self_attn.qkv_proj", (q_per + 2 * kv_per) * head_dim, hidden, layers),
        _Linear("self_attn.o_proj", hidden, q_per * head_dim, layers),
    ]
    keys = _dense_keys(dense, par, notes)
    triton: list[TritonMoeShape] = []
    keys += _moe_keys(profile, par, hidden, experts, topk, width, layers, model, notes, triton=triton)
    return ShapeSet(keys, notes, triton)


def _deepseek_v3(model: ModelConfig, profile: Profile, par: Parallel) -> ShapeSet:
    cfg = model.config
    hidden = _int_field(cfg, "hidden_size", model)
    heads = _int_field(cfg, "num_attention_heads", model)
    layers = _int_field(cfg, "num_hidden_layers", model)
    q_lora = cfg.get("q_lora_rank")
    kv_lora = _int_field(cfg, "kv_lora_rank", model)
    nope = _int_field(cfg, "qk_nope_head_dim", model)
    rope = _int_field(cfg, "qk_rope_head_dim", model)
    v_dim = _int_field(cfg, "v_head_dim", model)
    inter = _int_field(cfg, "intermediate_size", model)
    width = _int_field(cfg, "moe_intermediate_size", model)
    experts = _int_field(cfg, "n_routed_experts", model)
    topk = _int_field(cfg, "num_experts_per_tok", model)
    shared = cfg.get("n_shared_experts") or 0
    first_dense = cfg.get("first_k_dense_replace") or 0
    if heads % par.tp:
        raise InputError(f"tp {par.tp} does not divide the {heads} attention heads of {model.name}",
                         hint="choose a --tp that divides the attention heads")
    if inter % par.tp or (inter // par.tp) % 128:
        raise InputError(f"the dense MLP width {inter} split over tp {par.tp} is not a multiple of 128: "
                         "SGLang refuses to load this layout", hint="choose a smaller --tp")
    h = heads // par.tp
    moe_layers = layers - first_dense
    notes = ["mlp.gate (router) and lm_head stay bf16: not DeepGEMM",
             "kv_b_proj's absorbed (decode) form runs as a bf16 batched matmul: not DeepGEMM"]
    dense: list[_Linear] = []
    if q_lora:
        dense.append(_Linear("self_attn.fused_qkv_a_proj_with_mqa", q_lora + kv_lora + rope, hidden, layers))
        dense.append(_Linear("self_attn.q_b_proj", h * (nope + rope), q_lora, layers))
    else:
        dense.append(_Linear("self_attn.q_proj", h * (nope + rope), hidden, layers))
        dense.append(_Linear("self_attn.kv_a_proj_with_mqa", kv_lora + rope, hidden, layers))
    dense.append(_Linear("self_attn.kv_b_proj", h * (nope + v_dim), kv_lora, layers))
    dense.append(_Linear("self_attn.o_proj", hidden, h * v_dim, layers))
    if first_dense:
        dense.append(_Linear("mlp.gate_up_proj", 2 * inter // par.tp, hidden, first_dense))
        dense.append(_Linear("mlp.down_proj", hidden, inter // par.tp, first_dense))
    if shared and moe_layers and par.fused_shared_experts:
        fused = par.fused_shared_experts
        notes.append(f"mlp.shared_experts (x{moe_layers}): fused into mlp.experts as {fused} more expert(s) on every "
                     f"rank, top-k + {fused}: no dense shared-expert linears")
    elif shared and moe_layers:
        s_width = width * shared
        if s_width % par.tp or (s_width // par.tp) % 128:
            raise InputError(f"the shared-expert width {s_width} split over tp {par.tp} is not a multiple of 128: "
                             "SGLang refuses to load this layout", hint="choose a smaller --tp")
        dense.append(_Linear("mlp.shared_experts.gate_up_proj", 2 * s_width // par.tp, hidden, moe_layers))
        dense.append(_Linear("mlp.shared_experts.down_proj", hidden, s_width // par.tp, moe_layers))
    keys = _dense_keys(dense, par, notes)
    triton: list[TritonMoeShape] = []
    if moe_layers:
        keys += _moe_keys(profile, par, hidden, experts, topk, width, moe_layers, model, notes, triton=triton)
    return ShapeSet(keys, notes, triton)


ARCHITECTURES: dict[str, Callable[[ModelConfig, Profile, Parallel], ShapeSet]] = {
    "qwen3_moe": _qwen3_moe,
    "deepseek_v3": _deepseek_v3,
}


def model_shapes(model: ModelConfig, profile: Profile, par: Parallel) -> ShapeSet:
    if par.tp < 1 or par.ep < 1:
        raise InputError("--tp and --ep must be positive integers", hint="e.g. --tp 8 --ep 8")
    if par.max_tokens < 1:
        raise InputError("the largest tokens per forward must be a positive integer", hint="e.g. --max-tokens 16384")
    if par.moe_runner_backend not in MOE_BACKENDS:
        raise InputError(f"--moe-runner-backend must be one of {', '.join(MOE_BACKENDS)}",
                         hint="pass the value the job passes to SGLang (default auto)")
    model_type = model.config.get("model_type")
    build = ARCHITECTURES.get(model_type)
    if build is None:
        raise InputError(f"{model.name}: model_type {model_type!r} is not supported "
                         f"(supported: {', '.join(sorted(ARCHITECTURES))})",
                         hint="plan a Qwen3-MoE or DeepSeek-V3 architecture FP8 model")
    check_block_fp8(model)
    return build(model, profile, par)
