"""`dgprecompile verify`: is every planned kernel in the cache, intact, and under this environment's keys?"""

from __future__ import annotations

from pathlib import Path

import click

from dgprecompile.cache.store import CacheStore, resolve_cache_dir
from dgprecompile.cache.verify import verify_cache
from dgprecompile.cli.options import cache_dir_option, json_option, plan_options, resolve_plan
from dgprecompile.errors import EXIT_CHECK_FAILED, CheckFailed, InputError
from dgprecompile.output import Output
from dgprecompile.planning.plan import Plan, PlanRequest


def plan_for(plan_request: PlanRequest, manifest: str | None, trace: str | None) -> Plan:
    """The plan from --trace DIR (the DeepGEMM calls a run recorded), --manifest, or the plan options."""
    if trace is None:
        return resolve_plan(plan_request, manifest)
    if manifest is not None:
        raise InputError("pass --trace or --manifest, not both")
    from dgprecompile.planning.trace import plan_from_trace

    return plan_from_trace(Path(trace), plan_request)


@click.command("verify")
@plan_options
@cache_dir_option
@click.option("--nvcc", default=None, metavar="PATH",
              help="nvcc the runtime will use (default: the one the cache was warmed with, else as the runtime "
                   "finds it); its path is part of the legacy JIT's key.")
@click.option("--trace", default=None, type=click.Path(file_okay=False), metavar="DIR",
              help="Verify the kernels a traced run called (instead of a plan).")
@json_option
def command(plan_request, manifest, config, cache_dir, nvcc, trace, as_json) -> None:
    """Check that every planned kernel is in the cache, intact, and filed under this environment's keys.

    Needs no GPU and imports neither torch nor DeepGEMM. Checks each entry's sha256 against the index and
    compares the cache's fingerprint (DeepGEMM version, headers and location, nvcc, DG_JIT_* flags, SM count)
    with this machine. For the legacy JIT (sglang 0.5.0-0.5.1) it computes the exact entry name the runtime
    will look up for every kernel and checks it exists, so coverage is proved, not just recorded.
    Exit 0 when complete, 1 when not.

    \b
    Examples:
      dgprecompile verify --manifest plan.yaml --cache-dir /shared/deep_gemm
      dgprecompile verify --model Qwen3-Coder-480B --tp 8 --ep 8 --sglang 0.5.1 --json
      dgprecompile verify --manifest plan.yaml --num-sms 78      # the job runs on H20s
    """
    out = Output(quiet=as_json)
    plan = plan_for(plan_request, manifest, trace)
    store = CacheStore(resolve_cache_dir(plan, cache_dir))
    report = verify_cache(plan, store, nvcc=nvcc, num_sms=plan_request.num_sms)
    for warning in report.warnings:
        out.warn(warning)
    if as_json:
        out.data_json(report.to_dict())
        if not report.complete:
            raise click.exceptions.Exit(EXIT_CHECK_FAILED)
        return
    out.info(f"cache: {store.root}   plan: {plan.model} tp={plan.tp} ep={plan.ep} sglang {plan.profile.id}: "
             f"{len(report.kernels)} kernels")
    if report.problems:
        out.table("problems", ["kernel", "status", "entry", "detail"],
                  [[k.kernel, k.status, k.entry or "-", k.detail] for k in report.problems])
    if report.stale:
        out.table("fingerprint differences (the runtime here looks under other keys)",
                  ["field", "cache built for", "this environment"],
                  [[f, a, b] for f, a, b in report.stale])
    if report.complete:
        out.data_text(report.verdict())
        return
    where = f"--cache-dir {store.root}"
    if report.stale:
        hint = (f"warm again here (`dgprecompile warm ... {where}`), or run where the recorded DeepGEMM/nvcc "
                "sit at the recorded paths")
    else:
        hint = f"run `dgprecompile warm` with the same plan and {where}: it compiles only what is missing"
    raise CheckFailed(report.verdict(), hint=hint)
