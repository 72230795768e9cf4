"""A plan request (the plan options, a trainer command, a server command or a SpecForge config) resolved once."""

from __future__ import annotations

from dgprecompile.errors import InputError
from dgprecompile.planning.models import load_model
from dgprecompile.planning.plan import (
    Plan,
    PlanRequest,
    build_plan,
    parse_specforge_cmd,
    resolve_num_sms,
    sglang_precompile_m_max,
)
from dgprecompile.planning.profiles import resolve_profile
from dgprecompile.planning.server_cmd import grad_mode_from
from dgprecompile.planning.server_plan import plan_from_server
from dgprecompile.planning.shapes import Parallel


def plan_from_request(req: PlanRequest) -> Plan:
    if req.sglang_cmd is not None or req.specforge_config is not None:
        return plan_from_server(req)
    if req.model is None:
        raise InputError("no model given", hint="pass --model NAME (e.g. Qwen3-Coder-480B) or --manifest FILE")
    if req.max_tokens is not None and req.specforge_cmd is not None:
        raise InputError("pass --max-tokens or --specforge-cmd, not both",
                         hint="--specforge-cmd already sets the largest forward")
    tp, ep = req.tp, req.ep
    if req.specforge_cmd is not None:
        trainer = parse_specforge_cmd(req.specforge_cmd)
        tp = trainer.tp if tp is None else tp
        ep = trainer.ep if ep is None else ep
        max_tokens = trainer.max_tokens
    elif req.max_tokens is not None:
        max_tokens = req.max_tokens
    else:
        max_tokens = sglang_precompile_m_max(req.chunked_prefill_size)
    assumed = []
    if tp is None and ep is not None and ep > 1:
        # SGLang runs MoE tensor-parallel over tp/ep, so ep must divide tp: `--ep 8` alone means 8 GPUs, tp 8
        tp = ep
        assumed.append(f"tp {ep}: --ep {ep} was given without --tp, and SGLang needs ep to divide tp "
                       "(pass --tp to choose another)")
    model = load_model(req.model)
    choice = resolve_profile(req.sglang)
    sweep = sglang_precompile_m_max(req.chunked_prefill_size) if req.sglang_precompile else 0
    par = Parallel(tp=1 if tp is None else tp, ep=1 if ep is None else ep, moe_runner_backend=req.moe_runner_backend,
                   max_tokens=max_tokens, sweep_m_max=sweep)
    plan = build_plan(model, choice.profile, par, resolve_num_sms(req.gpu, req.num_sms), req.gpu, choice.reason,
                      choice.sglang_version, keys_only=req.keys_only, grad=grad_mode_from(None))
    plan.assumed = assumed
    return plan
