"""`dgprecompile doctor`: will this job hit `can't start new thread`? The limits, the burst, a verdict."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from dgprecompile.cache.store import resolve_cache_dir
from dgprecompile.cli.options import cache_dir_option, output_options, plan_options, resolve_plan
from dgprecompile.output import MARKS, Output, styled

if TYPE_CHECKING:
    from dgprecompile.diagnostics.doctor import Diagnosis


def _rlimit(text: str | None) -> tuple[int | None, int | None] | None:
    if text is None:
        return None
    value = None if text in ("unlimited", "max") else int(text)
    return value, value


PATH_OPTION = "--cache-dir"  # where this command is told to write: named in the hint of a file error


@click.command("doctor")
@plan_options
@click.option("--ranks", type=click.IntRange(min=1), default=8, show_default=True,
              help="Rank processes of the job on this node (GPUs per node).")
@click.option("--base-tasks", type=click.IntRange(min=1), default=None,
              help="Tasks one rank holds before any DeepGEMM compile (default: 1 + 8 CUDA/NCCL/torch threads + "
                   "BLAS threads + dataloader workers).")
@click.option("--dataloader-workers", type=click.IntRange(min=0), default=0, show_default=True,
              help="DataLoader worker processes per rank.")
@click.option("--compile-workers", type=click.IntRange(min=0), default=None,
              help="Threads of SGLang's precompile pool (default: the profile's, or its env variable).")
@cache_dir_option
@output_options
@click.option("--proc-root", default="/proc", hidden=True)
@click.option("--sys-root", default="/sys", hidden=True)
@click.option("--rlimit-nproc", default=None, hidden=True, help="Soft=hard RLIMIT_NPROC to assume (tests).")
@click.option("--rlimit-stack", default=None, hidden=True)
@click.option("--uid", type=int, default=None, hidden=True)
@click.option("--nvidia-smi", "nvidia_smi", default=None, hidden=True)
def command(plan_request, manifest, config, ranks, base_tasks, dataloader_workers, compile_workers, cache_dir,
            out, proc_root, sys_root, rlimit_nproc, rlimit_stack, uid, nvidia_smi) -> Diagnosis:
    """Check the task limits, the toolchain and the cache, and predict `can't start new thread`.

    Reads RLIMIT_NPROC, the cgroup v2/v1 pids.max along this process's cgroup path, kernel threads-max and
    pid_max, vm.max_map_count and overcommit; estimates the task burst of SGLang's runtime DeepGEMM precompile
    for the plan and rank count, and of a warmed launch with JIT off. Exit 1 when it predicts the failure.

    \b
    Examples:
      dgprecompile doctor
      dgprecompile doctor --model Qwen3-Coder-480B --tp 8 --ep 8 \\
          --sglang 0.5.1 --ranks 8
      dgprecompile doctor --manifest plan.yaml --dataloader-workers 4 --json
    """
    from dgprecompile.diagnostics.doctor import BurstModel, run_doctor
    from dgprecompile.planning.profiles import resolve_profile

    plan = resolve_plan(plan_request, manifest) if (plan_request.model is not None or manifest is not None) else None
    source = plan or resolve_profile(plan_request.sglang)
    rlimits = {name: _rlimit(text) for name, text in (("nproc", rlimit_nproc), ("stack", rlimit_stack))
               if text is not None}
    report = run_doctor(source.profile, plan, resolve_cache_dir(source, cache_dir),
                        BurstModel(ranks=ranks, base_tasks=base_tasks, dataloader_workers=dataloader_workers,
                                   compile_workers=compile_workers),
                        proc_root=proc_root, sys_root=sys_root, rlimits=rlimits, uid=uid, nvidia_smi=nvidia_smi)
    return out.report(report, render)


def render(out: Output, report: Diagnosis) -> None:
    plan = report.plan
    where = f"plan {plan['model']} ({plan['keys']} keys)" if plan else "no plan (assuming a key fills the pool)"
    # every line of prose folds to the width at its spaces (a pipe's 80 columns show it all, nothing cut)
    out.info("sglang profile ", styled(report.profile_id, "bold"), f", {report.ranks} ranks, {where}", hanging=2)
    if any(c.fix for c in report.checks):
        out.table(None, ["", "check", "detail", "fix"], [[MARKS[c.mark], c.name, c.detail, c.fix] for c in report.checks])
    else:  # nothing to fix: no empty column
        out.table(None, ["", "check", "detail"], [[MARKS[c.mark], c.name, c.detail] for c in report.checks])
    out.data_wrapped(f"verdict: {report.verdict}", hanging=len("verdict: "))
    if report.predicts_failure:
        out.error("doctor predicts `can't start new thread` for this job", report.fix, wrap=True)
    else:
        out.info(MARKS["ok"], " no failure predicted")
