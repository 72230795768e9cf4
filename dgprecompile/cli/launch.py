"""`dgprecompile launch`: check the cache, then run the unchanged trainer with runtime JIT off."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

import click

from dgprecompile.cli.options import cache_dir_option, output_options, plan_options, resolve_plan
from dgprecompile.output import Output

if TYPE_CHECKING:
    from dgprecompile.launch.launcher import LaunchResult, PreparedLaunch


@click.command("launch", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@plan_options
@cache_dir_option
@click.option("--strict/--no-strict", default=True, show_default=True,
              help="Strict: any DeepGEMM compile at run time fails at once, naming the kernel. Non-strict: allowed, "
                   "traced, and reported at exit with a misses file.")
@click.option("--allow-missing", is_flag=True, help="Start even when the cache lacks planned kernels.")
@click.option("--trace", "trace_dir", type=click.Path(file_okay=False), default=None,
              help="Record every DeepGEMM call of every rank as JSON lines in DIR (for `plan --from-trace`).")
@click.option("--misses", "misses_path", type=click.Path(dir_okay=False), default=None,
              help="Non-strict: where to write the misses file (default ./dgprecompile-misses.jsonl).")
@click.option("--pull", "pull_from", default=None, metavar="URL-PREFIX",
              help="First `dgprecompile pull --from URL-PREFIX`: fetch this machine's artifact unless the cache is "
                   "complete; launch only when it is.")
@output_options
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def command(plan_request, manifest, config, cache_dir, strict, allow_missing, trace_dir, misses_path,
            pull_from, out, command) -> LaunchResult:
    """Run COMMAND (e.g. torchrun ...) with SGLang's runtime DeepGEMM precompile off and the warmed cache.

    Checks the cache against the plan first and refuses to start when kernels are missing. The command's
    output, exit code and signals pass through; Ctrl-C and SIGTERM reach every process of the job.

    \b
    Examples:
      dgprecompile launch --manifest plan.yaml -- torchrun --nproc_per_node 8 train.py ...
      dgprecompile launch --config train.yaml
      dgprecompile launch --manifest plan.yaml --no-strict -- python train.py   # records misses
      dgprecompile launch --manifest plan.yaml --trace traces/ -- python train.py
      dgprecompile launch -- python -m sglang.launch_server --model-path Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8 --tp 8
      dgprecompile launch --specforge-config run.yaml -- specforge train -c run.yaml
      dgprecompile launch --pull s3://my-bucket/dg/train-480b --manifest plan.yaml -- torchrun ...   # node start-up
    """
    from dgprecompile.launch.launcher import (
        LaunchOptions,
        job_command,
        prepare_launch,
        request_for_job,
        run_launch,
    )

    argv, note = job_command(list(command), config, plan_request)
    if note:
        out.info(note)
    plan_request = request_for_job(plan_request, argv, manifest)
    plan = resolve_plan(plan_request, manifest)
    out.info(f"plan: {plan.model} tp={plan.tp} ep={plan.ep} sglang {plan.profile.id} "
             f"({plan.profile_reason}): {len(plan.kernels)} kernels")
    if pull_from is not None:
        from dgprecompile.cache.fleet import pull
        from dgprecompile.cache.store import CacheStore, resolve_cache_dir
        from dgprecompile.cli.pull import render_problem

        store = CacheStore(resolve_cache_dir(plan, cache_dir))
        pulled = pull(plan, store, pull_from, num_sms=plan_request.num_sms)
        for warning in pulled.warnings:
            out.warn(warning)
        out.info(pulled.stats_line())  # stderr: stdout is the job's
        if pulled.return_code:
            if not allow_missing:
                render_problem(out, pulled)
                return pulled
            out.warn(f"{pulled.reason()}; starting anyway (--allow-missing)")
        cache_dir = str(store.root)
    prepared = prepare_launch(LaunchOptions(plan=plan, command=argv, cache_dir=cache_dir, strict=strict,
                                            allow_missing=allow_missing, trace_dir=trace_dir,
                                            misses_path=misses_path, manifest=manifest, model_arg=plan_request.model))
    render_prepared(out, prepared)
    return out.report(run_launch(prepared), render_result)


def render_prepared(out: Output, prepared: PreparedLaunch) -> None:
    plan, check = prepared.opts.plan, prepared.preflight
    if check.complete:
        out.info(f"preflight: {len(plan.kernels)} planned kernels"
                 + (f" + {len(plan.jit_modules)} SGLang JIT modules" if plan.jit_modules else "")
                 + f" in {prepared.cache_dir} ({check.verdict()})")
    else:
        out.warn(f"{len(check.missing)} of {len(plan.kernels)} kernels missing, {len(check.changed)} changed "
                 f"in {prepared.cache_dir} ({check.verdict()}) - starting anyway (--allow-missing)")
    strict = "strict" if prepared.opts.strict else "non-strict"
    out.table(f"environment for the job ({strict}, sglang {plan.profile.id}, {plan.profile.generation} DeepGEMM)",
              ["variable", "value", "why"],
              [[s.name, s.value, s.why + (" (already set)" if s.kept else "")] for s in prepared.env.settings],
              to_stderr=True, no_wrap=("variable",))
    for note in prepared.env.notes:
        out.info(f"[dim]note:[/] {note}")
    out.info("starting: " + shlex.join(prepared.opts.command))


def render_result(out: Output, result: LaunchResult) -> None:
    if result.new_triton:
        out.warn(f"{len(result.new_triton)} Triton kernel(s) compiled at run time into {result.triton_cache_dir} "
                 "(dgprecompile does not warm Triton; a later run with the same cache finds them)")
    if result.refusals:
        seen = sorted({str(e.get("kernel") or e.get("entry")) for e in result.refusals})
        out.error(f"strict mode refused {len(result.refusals)} runtime compile(s): " + ", ".join(seen[:10]),
                  hint=("those kernels are outside the plan: record the job's shapes with --no-strict (misses "
                        "file) or --trace, then warm them" if result.refusals_outside_plan
                        else f"warm the cache: {result.warm_hint}"))
    if result.strict:
        appeared = result.new_entries + result.new_jit_modules
        if appeared:
            out.warn(f"{len(appeared)} cache entries appeared during a strict run (another process "
                     "compiled into this cache?): " + ", ".join(appeared[:10]))
        return
    if result.trace_warning:
        out.warn(result.trace_warning)
    if result.new_jit_modules:
        out.table(f"{len(result.new_jit_modules)} SGLang JIT modules built at run time (now in the cache: a "
                  "later strict launch loads them; plan them with the server command to warm them)", ["module"],
                  [[e] for e in result.new_jit_modules], to_stderr=True)
    if result.new_entries:
        out.table(f"{len(result.new_entries)} DeepGEMM cache entries compiled at run time", ["entry"],
                  [[e] for e in result.new_entries], to_stderr=True)
    elif not result.new_jit_modules:
        out.info("no cache entry was compiled at run time")
    if result.misses:
        out.table(f"{len(result.misses)} recorded calls outside the plan",
                  ["kernel_type", "m", "n", "k", "groups", "calls", "kernel"],
                  [[m.call.kernel_type.short, m.call.m, m.call.n, m.call.k, m.call.num_groups, m.call.count,
                    "\n".join(m.kernels)] for m in result.misses], to_stderr=True)
    if result.misses or result.new_entries:
        out.info(f"misses written to {result.misses_path}; warm them with: "
                 f"dgprecompile warm --from-misses {shlex.quote(result.misses_path)} --cache-dir "
                 f"{shlex.quote(result.cache_dir)}")
    if not result.calls_recorded:  # the job made no DeepGEMM call: DeepGEMM's own advice does not apply
        if result.new_entries:
            out.warn("DeepGEMM entries were compiled but no DeepGEMM call was recorded (did the job import "
                     "deep_gemm in a Python process it started?)")
        else:
            out.info("no DeepGEMM call was recorded")
        return
    if result.new_entries and not result.misses:
        out.warn("entries were compiled but every recorded call is in the plan: they may be kernels the plan "
                 "does not model (or deep_gemm was called outside the traced entry points)")
