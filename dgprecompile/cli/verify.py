"""`dgprecompile verify`: is every planned kernel in the cache, intact, and under this environment's keys?"""

from __future__ import annotations

import click

from dgprecompile.cache.store import CacheStore, resolve_cache_dir
from dgprecompile.cache.verify import VerifyReport, verify_cache
from dgprecompile.cli.options import cache_dir_option, output_options, plan_options, resolve_plan
from dgprecompile.output import Output


@click.command("verify")
@plan_options
@cache_dir_option
@click.option("--nvcc", default=None, metavar="PATH",
              help="nvcc the runtime will use (default: the one the cache was warmed with, else as the runtime "
                   "finds it); its path is part of the legacy JIT's key.")
@click.option("--trace", default=None, type=click.Path(file_okay=False), metavar="DIR",
              help="Verify the kernels a traced run called (instead of a plan).")
@output_options
def command(plan_request, manifest, config, cache_dir, nvcc, trace, out) -> VerifyReport:
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
    plan = resolve_plan(plan_request, manifest, trace=trace)
    report = verify_cache(plan, CacheStore(resolve_cache_dir(plan, cache_dir)), nvcc=nvcc, num_sms=plan_request.num_sms)
    for warning in report.warnings:
        out.warn(warning)
    return out.report(report, render)


def render(out: Output, report: VerifyReport) -> None:
    plan = report.plan
    out.info(f"cache: {report.cache_dir}   plan: {plan.model} tp={plan.tp} ep={plan.ep} sglang {plan.profile.id}: "
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
    else:
        out.error(report.verdict(), report.hint())
