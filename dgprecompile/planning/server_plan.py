"""Plans from what starts SGLang today: a server command line (``--sglang-cmd``) or a SpecForge 0.2.0 run config
(``--specforge-config``), read the way that SGLang release reads its options (:mod:`.server_cmd`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dgprecompile.errors import InputError
from dgprecompile.planning.models import load_model
from dgprecompile.planning.plan import Plan, PlanRequest, build_plan, resolve_num_sms
from dgprecompile.planning.profiles import resolve_profile
from dgprecompile.planning.server_cmd import (
    check_modelled,
    choose_table,
    grad_mode_from,
    parse_command,
    parse_server_args,
    token_bound,
)
from dgprecompile.planning.shapes import MOE_BACKENDS, ExpertLayoutError, Parallel

# plan options that the server command (or run.yaml) decides; passing them as well is ambiguous
_DECIDED_BY_SERVER = {"model": "--model", "tp": "--tp", "ep": "--ep", "specforge_cmd": "--specforge-cmd",
                      "chunked_prefill_size": "--chunked-prefill-size"}


def jit_path_options(settings) -> dict:
    """The server options that change which of SGLang's own JIT modules it builds (planning.sglang_jit)."""
    from dgprecompile.planning.sglang_jit import PATH_OPTIONS

    names = ("dtype", "kv_cache_dtype", "attention_backend", "disable_cuda_graph", "disable_custom_all_reduce",
             "chunked_prefill_size", "nnodes", *PATH_OPTIONS)
    return {n: settings.get(n) for n in names if settings.get(n) is not None}


@dataclass
class _ServerSource:
    """Where the server command comes from: --sglang-cmd as given, or the capture server a SpecForge config starts."""

    argv: Any
    version: str | None
    what: str  # how messages name it
    ep_option: str  # the option a user changes to fix the expert layout
    run: Any = None  # the SpecForge run, for --specforge-config


def _check_request(req: PlanRequest) -> str:
    """Refuse options that say again what the server command decides; returns the source's option name."""
    if req.sglang_cmd is not None and req.specforge_config is not None:
        raise InputError("pass --sglang-cmd or --specforge-config, not both")
    source = "--sglang-cmd" if req.sglang_cmd is not None else "--specforge-config"
    for attr, flag in _DECIDED_BY_SERVER.items():
        if getattr(req, attr) is not None:
            raise InputError(f"{flag} and {source} both say how the server runs",
                             hint=f"drop {flag}: it is read from the {'command' if source == '--sglang-cmd' else 'config'}")
    if req.moe_runner_backend not in (None, "auto"):
        raise InputError(f"--moe-runner-backend and {source} both say how the server runs",
                         hint="put --moe-runner-backend into the server command")
    return source


def _server_source(req: PlanRequest) -> _ServerSource:
    if req.specforge_config is None:
        return _ServerSource(req.sglang_cmd, req.sglang, "the server command", "--ep-size")
    from dgprecompile.planning.specforge_config import facts, read_specforge_config

    run = read_specforge_config(req.specforge_config)
    version = req.sglang
    if version is None:
        from dgprecompile.planning.profiles import installed_sglang_version

        version = installed_sglang_version() or str(facts()["sglang"])
    return _ServerSource(run.servers[0].argv, version, f"the capture server of {req.specforge_config}",
                         "model.sglang_ep_size", run)


def plan_from_server(req: PlanRequest) -> Plan:
    """The plan of a server command (--sglang-cmd) or of a SpecForge run's capture server, read as the profile's
    SGLang release reads its options."""
    source = _check_request(req)
    src = _server_source(req)
    command = parse_command(src.argv, source)
    choice = resolve_profile(src.version)
    profile, reason = choice.profile, choice.reason
    if src.run is not None and req.sglang is None:
        from dgprecompile.planning.specforge_config import facts

        if src.version == str(facts()["sglang"]):
            reason = f"SpecForge 0.2.0 pins sglang {src.version}"
    table, table_reason = choose_table(profile, choice.sglang_version or src.version)
    settings = parse_server_args(command, table, table_reason)
    model = load_model(settings.model)
    quant = (model.config.get("quantization_config") or {}).get("quant_method")
    check_modelled(settings, quant)
    if settings.moe_runner_backend not in MOE_BACKENDS:  # check_modelled refuses it when given; defaults are auto
        raise InputError(f"--moe-runner-backend {settings.moe_runner_backend} is not modelled")
    bound = token_bound(settings, model.config)
    precompile = True if req.sglang_precompile is None else req.sglang_precompile
    par = Parallel(tp=settings.tp, ep=settings.ep, moe_runner_backend=settings.moe_runner_backend,
                   max_tokens=req.max_tokens or bound.max_tokens, sweep_m_max=bound.sweep_m_max if precompile else 0)
    try:
        plan = build_plan(model, profile, par, resolve_num_sms(req.gpu, req.num_sms), req.gpu, reason,
                          choice.sglang_version or (table.sglang if table.origin.startswith("installed:") else None),
                          keys_only=req.keys_only, server_options=jit_path_options(settings),
                          moe_options=settings.options(), moe_version=choice.sglang_version or table.sglang,
                          grad=grad_mode_from(command))
    except ExpertLayoutError as exc:
        raise InputError(f"{src.what}: {exc.message}", hint=exc.hint_for(src.ep_option)) from None
    plan.notes = _server_notes(req, src, table_reason, bound, settings, precompile) + plan.notes
    plan.server = settings.to_dict()
    if src.run is not None:
        plan.server["specforge"] = src.run.to_dict()
    return plan


def _server_notes(req: PlanRequest, src: _ServerSource, table_reason: str, bound, settings, precompile: bool
                  ) -> list[str]:
    notes = [f"{src.what} read with {table_reason}"]
    notes += [f"largest forward on a rank: {line}" for line in bound.lines]
    if req.max_tokens:
        notes.append(f"--max-tokens {req.max_tokens} replaces the server's bound {bound.max_tokens}")
    if precompile:
        notes.append(f"SGLang's own DeepGEMM precompile, if it stays on, sweeps every key over m = 1.."
                     f"{bound.sweep_m_max} with row-major warm-up scales: planned too (--no-sglang-precompile "
                     "leaves that out; `dgprecompile launch` turns that precompile off)")
    if settings.nnodes > 1:
        notes.append(f"tp {settings.tp} over {settings.nnodes} nodes ({settings.tp // settings.nnodes} GPUs each): "
                     "every node compiles the same kernels; warm once and unpack the artifact on each node")
    return notes
