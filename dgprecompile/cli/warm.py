"""`dgprecompile warm`: compile every planned kernel into the persistent DeepGEMM cache."""

from __future__ import annotations

from pathlib import Path

import click

from dgprecompile.cli.options import cache_dir_option, output_options, plan_options, resolve_plan
from dgprecompile.compile.warm import WarmOptions, WarmResult, prepare_warm, run_warm
from dgprecompile.errors import InputError
from dgprecompile.output import Output


def _parse_gpus(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"--gpus takes GPU indices; got {text!r}", hint="e.g. --gpus 0,1,2") from None


@click.command("warm")
@plan_options
@cache_dir_option
@click.option("--backend", type=click.Choice(["auto", "legacy", "cxx", "nvcc", "sweep"]), default="auto",
              help="legacy: the Python JIT's own build (no GPU); cxx: launch each kernel once on a GPU so the C++ "
                   "JIT compiles it; nvcc: build sgl-deep-gemm 0.1.0-0.2.5 entries with nvcc directly (no GPU); "
                   "sweep: call the C++-JIT DeepGEMM on a GPU for every sampled m of each key and keep what it "
                   "builds (docs/sweep.md). Default: legacy, nvcc or cxx by the installed DeepGEMM; sweep for "
                   "keys-only plans.")
@click.option("--jobs", "-j", type=int, default=None,
              help="Worker processes (default: CPU cores, capped by the number of kernels).")
@click.option("--gpus", default=None, metavar="0,1,..", help="C++ JIT: GPUs to spread workers over (default all).")
@click.option("--nvcc", default=None, metavar="PATH",
              help="nvcc to compile with; its path is part of the legacy JIT's cache key (default as the runtime finds it).")
@click.option("--from-misses", type=click.Path(dir_okay=False), default=None,
              help="Warm the calls recorded in a misses file from `launch --no-strict` (instead of a plan).")
@click.option("--sglang-jit", "sglang_jit", type=click.Choice(["auto", "on", "off"]), default="auto",
              help="SGLang's own JIT modules of the plan (sglang 0.5.14): build them with the installed sglang into "
                   "<cache>/tvm-ffi (auto: when that sglang is installed here; on: fail if it is not).")
@output_options
def command(plan_request, manifest, config, cache_dir, backend, jobs, gpus, nvcc, from_misses, sglang_jit,
            out) -> WarmResult:
    """Compile the plan's kernels into DeepGEMM's cache, serially in each worker process, no thread pools.

    Idempotent: a second run finds everything cached and compiles nothing. Interrupting it leaves no partial
    cache entry. Under torchrun (RANK/WORLD_SIZE set) each rank warms a disjoint share.

    \b
    Examples:
      dgprecompile warm --model Qwen3-Coder-480B --tp 8 --ep 8 --sglang 0.5.1
      dgprecompile warm --manifest plan.yaml --cache-dir /shared/deep_gemm --jobs 16
      dgprecompile warm --manifest plan.yaml --from-misses misses.jsonl
    """
    if from_misses is not None:
        from dgprecompile.planning.trace import plan_from_misses

        base = resolve_plan(plan_request, manifest) if (manifest or plan_request.model) else None
        plan = plan_from_misses(Path(from_misses), plan_request, base)
    else:
        plan = resolve_plan(plan_request, manifest)
    setup = prepare_warm(plan, WarmOptions(cache_dir=cache_dir, backend=backend, jobs=jobs, gpus=_parse_gpus(gpus),
                                           nvcc=nvcc, sglang_jit=sglang_jit))
    unit = "sweep chunks" if setup.backend == "sweep" else "kernels"
    out.info(f"plan: {plan.model} tp={plan.tp} ep={plan.ep} sglang {plan.profile.id}: {len(setup.items)} {unit}"
             + (f" + {len(setup.jit_items)} SGLang JIT modules" if setup.jit_items else "")
             + (f" (rank {setup.rank} of {setup.world})" if setup.world > 1 else ""))
    if setup.jit_items:
        area = setup.store.root / setup.jit_job["area"]
        names = " and ".join(f"{name}={value}" for name, value in setup.jit_job.get("launch_env", []))
        out.info(f"SGLang JIT modules: built with the installed sglang {plan.sglang_version}'s own builders into "
                 f"{area} (one ninja job per worker: MAX_JOBS=1); the runtime reads them with {names} (launch sets it)")
    for module, why in setup.jit_skipped.items():
        out.warn(f"not built: {module}: {why}")
    out.info(f"cache: {setup.store.root}   backend: {setup.backend}   nvcc: {setup.fingerprint['nvcc']['path']} "
             f"({setup.fingerprint['nvcc']['release']})")
    out.info(f"task budget: {setup.workers} worker processes x (1 thread + 1 compiler tree of <= 4 tasks) "
             f"= at most {setup.task_budget} tasks; no thread pools")
    for note in setup.notes:
        out.warn(note)
    for label in setup.swept:
        out.info(f"cached: {label}")
    for field, was, now in setup.stale:
        out.warn(f"cache index was built for {field}={was!r}, now {now!r}: its entries will not be found; "
                 "re-indexing for this environment")

    progress = out.progress(len(setup.items) + len(setup.jit_items), "warming",
                            seconds_per_item=plan.profile.seconds_per_kernel, workers=setup.workers)

    def on_event(event):
        kind = event.get("event")
        if kind == "fatal":
            out.err.print(f"[red]worker failed to start:[/] {event.get('error', '')}")
        elif kind == "start":
            progress.started(event["kernel"])
        elif kind == "tick":
            progress.tick()
        elif kind in ("done", "failed"):
            progress.finished(compiled=kind == "done" and event.get("status") == "compiled")
            if event.get("replaced"):
                out.warn(f"{event['kernel']}: the entry in the cache was not loadable; rebuilt and replaced it")
            if kind == "failed" and not event.get("error", "").startswith("not started"):
                out.err.print(f"[red]failed:[/] {event['kernel']}\n{event.get('error', '')}")

    with progress:
        result = run_warm(setup, on_event)
    return out.report(result, render)


def render(out: Output, result: WarmResult) -> None:
    out.table("warm summary", ["compiled", "already cached", "failed", "wall time", "compile time (sum)",
                               "workers", "cache size"],
              [[len(result.compiled), len(result.cached), len(result.failed), f"{result.wall_seconds:.1f} s",
                f"{sum(result.compiled.values()):.1f} s", result.workers, f"{result.cache_bytes / 1e6:.1f} MB"]])
    if result.no_space:
        out.error(f"{result.no_space}; {len(result.failed)} kernels not built, nothing partial was installed",
                  result.no_space_hint)
    elif result.failed:
        out.error(f"{len(result.failed)} of {result.kernels} kernels failed to compile: "
                  + ", ".join(sorted(result.failed)[:5]), "the compiler's output for each is printed above")
