"""`dgprecompile repro`: make `can't start new thread` happen under a task budget, then show the fix passing."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from dgprecompile.cli.options import output_options
from dgprecompile.output import MARKS, Output, styled

if TYPE_CHECKING:
    from dgprecompile.diagnostics.repro import ReproReport


@click.command("repro")
@click.option("--ranks", type=click.IntRange(min=1), default=2, show_default=True,
              help="Rank processes started at once (a node has 8; 2 keeps a small CPU machine quick).")
@click.option("--tasks-max", type=click.IntRange(min=1), default=None,
              help="Task budget for all ranks together (default: ranks x (tasks of one idle rank + 2), "
                   "measured: enough for the serial path, too few for the pool).")
@click.option("--backend", type=click.Choice(["nvcc", "legacy", "cxx"]), default="nvcc", show_default=True,
              help="nvcc: small generated .cu files; legacy: real kernels with the Python-JIT DeepGEMM of "
                   "sgl-kernel 0.3.5 (sglang 0.5.1), no GPU; cxx: sgl-deep-gemm fp8_gemm_nt launches (GPU).")
@click.option("--workers", type=click.IntRange(min=1), default=4, show_default=True,
              help="Threads per pool (SGL_JIT_DEEPGEMM_COMPILE_WORKERS).")
@click.option("--keys", type=click.IntRange(min=1), default=1, show_default=True,
              help="Keys per rank, each with its own pool (cxx: up to 2 dense keys; legacy: the failing key).")
@click.option("--kernels", type=click.IntRange(min=1), default=4, show_default=True,
              help="Kernels per key (legacy: the masked w2 key of the report has 5; cxx: m values, up to 10).")
@click.option("--mechanism", type=click.Choice(["auto", "cgroup", "rlimit"]), default="auto", show_default=True,
              help="How to impose the budget: a child cgroup with pids.max, or RLIMIT_NPROC as an unprivileged user.")
@click.option("--nvcc", default=None, help="nvcc to compile with (default: as doctor finds it).")
@click.option("--deepgemm-path", type=click.Path(file_okay=False, exists=True), default=None,
              help="A directory holding the deep_gemm package to use (put first on the ranks' PYTHONPATH).")
@click.option("--timeout", type=float, default=300.0, show_default=True, help="Seconds per phase.")
@click.option("--keep", is_flag=True, help="Keep the scratch directory (cache, logs) for inspection.")
@output_options
def command(ranks, tasks_max, backend, workers, keys, kernels, mechanism, nvcc, deepgemm_path, timeout, keep,
            out) -> ReproReport:
    """Recreate the failure: SGLang 0.5.1's 4-thread precompile pool on N ranks inside a task budget.

    Phase 1 (pool): each rank compiles real kernels with a ThreadPoolExecutor per key on a cold cache, inside
    a child cgroup with pids.max (or RLIMIT_NPROC as 'nobody'): `can't start new thread` (or EAGAIN from fork).
    Phase 2 (warm): one process compiles the same kernels serially, outside the budget.
    Phase 3 (jit-off): the same ranks, same budget, serial lookups in the warm cache: it completes.
    Every cgroup, process and scratch file it made is removed. Exit 0 when reproduced, 1 when not, 3 when
    the machine allows no budget.

    \b
    Examples:
      dgprecompile repro
      dgprecompile repro --backend legacy --ranks 2 --kernels 3
      dgprecompile repro --backend cxx --ranks 8 --keys 2 \\
          --deepgemm-path $SITE   # on an H200
    """
    from dgprecompile.diagnostics.repro import Repro, ReproConfig

    cfg = ReproConfig(ranks=ranks, backend=backend, tasks_max=tasks_max, workers=workers, keys=keys,
                      kernels=kernels, mechanism=mechanism, nvcc=nvcc, deepgemm_path=deepgemm_path, timeout=timeout,
                      keep=keep)
    return out.report(Repro(cfg, log=out.info).run(), render)


def render(out: Output, report: ReproReport) -> None:
    for skipped in report.skipped_mechanisms:
        out.info(styled("not used:", "dim"), f" {skipped}")
    rows = []
    for name, phase in report.phases.items():
        mark = MARKS["ok"] if phase.ok else MARKS["fail"]
        where = "outside the budget" if name == "warm" else f"budget {report.tasks_max}"
        kernels_done = sum(int(r.result.get("kernels", 0)) for r in phase.ranks)
        rows.append([mark, name, len(phase.ranks), where, "-" if phase.peak_tasks is None else phase.peak_tasks,
                     kernels_done, f"{phase.seconds:.1f}s", "; ".join(phase.errors()) or "completed"])
    out.data_text(f"budget: {report.budget}")
    out.table(None, ["", "phase", "ranks", "where", "peak tasks", "kernels", "time", "result"], rows)
    pool = report.phases.get("pool")
    failed = [r for r in pool.ranks if not r.ok] if pool else []
    failing = next((r for r in failed if "can't start new thread" in r.result.get("error", "")),
                   failed[0] if failed else None)
    if failing is not None:
        out.data_text(f"rank {failing.rank} of the pool phase, last frames:\n{failing.last_frames()}")
    failure = report.failure()
    if failure is None:
        out.info(MARKS["ok"], f" reproduced: the 0.5.1 pool pattern fails inside {report.tasks_max} tasks; "
                 f"the warmed JIT-off path completes inside the same budget")
    else:
        out.error(*failure)
