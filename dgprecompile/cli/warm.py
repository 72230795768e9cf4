"""`dgprecompile warm`: compile every planned kernel into the persistent DeepGEMM cache."""

from __future__ import annotations

from pathlib import Path

import click

from dgprecompile.cli.options import cache_dir_option, output_options, plan_options, resolve_plan
from dgprecompile.compile.build_log import known_cause
from dgprecompile.compile.warm import run_warm
from dgprecompile.compile.warm_result import WarmResult
from dgprecompile.compile.warm_setup import WarmOptions, WarmSetup, prepare_warm
from dgprecompile.errors import InputError
from dgprecompile.output import Output
from dgprecompile.runtimes import BACKENDS, GENERATIONS
from dgprecompile.runtimes.deepgemm import DEEPGEMM_BACKENDS


def _parse_gpus(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"--gpus takes GPU indices; got {text!r}", hint="e.g. --gpus 0,1,2") from None


def _backend_help() -> str:
    """--backend's help, from the backend registry and the generation objects (which DeepGEMMs each GPU-free
    backend builds is the generations' to say)."""
    parts = []
    for name in DEEPGEMM_BACKENDS:
        backend = BACKENDS[name]
        gens = [g.label for g in GENERATIONS.values() if name in g.backends]
        parts.append(f"{name}: {backend.help}" + (f" ({'; '.join(gens)})" if not backend.needs_gpu and gens else ""))
    return "; ".join(parts) + ". Default: the installed DeepGEMM generation's first usable one; the sweep for " \
        "keys-only plans."


PATH_OPTION = "--cache-dir"  # where this command is told to write: named in the hint of a file error


@click.command("warm")
@plan_options
@cache_dir_option
@click.option("--backend", type=click.Choice(["auto", *DEEPGEMM_BACKENDS]), default="auto", help=_backend_help())
@click.option("--jobs", "-j", type=int, default=None,
              help="Worker processes (default: CPU cores, capped by the number of kernels).")
@click.option("--gpus", default=None, metavar="0,1,..", help="C++ JIT: GPUs to spread workers over (default all).")
@click.option("--nvcc", default=None, metavar="PATH",
              help="nvcc to compile with; its path is part of the legacy JIT's cache key (default as the runtime finds it).")
@click.option("--from-misses", type=click.Path(dir_okay=False), default=None,
              help="Warm the calls recorded in a misses file from `launch --no-strict` (instead of a plan).")
@click.option("--sglang-jit", "sglang_jit", type=click.Choice(["auto", "on", "off"]), default="auto",
              help="The plan's items that the installed sglang builds: its own JIT modules, its Triton fused-MoE "
                   "items, FlashInfer's modules and its torch.compile graphs (auto: when the plan's sglang is installed "
                   "here, else warm the rest and exit 3 naming what to install; on: fail at once if it is not; off: "
                   "leave them out, DeepGEMM's kernels only).")
@click.option("--keep-going", "keep_going", is_flag=True,
              help="Build what can be built even where the check before compiling finds a family's build lacking a "
                   "piece (a program, a CUDA toolkit header): those items then fail with their compiler's error.")
@output_options
def command(plan_request, manifest, config, cache_dir, backend, jobs, gpus, nvcc, from_misses, sglang_jit,
            keep_going, out) -> WarmResult:
    """Compile the plan's kernels into DeepGEMM's cache, serially in each worker process, no thread pools.

    Idempotent: a second run finds everything cached and compiles nothing. Interrupting it leaves no partial
    cache entry. Under torchrun (RANK/WORLD_SIZE set) each rank warms a disjoint share.

    \b
    Examples:
      dgprecompile warm --model Qwen3-Coder-480B --tp 8 --ep 8 --sglang 0.5.1
      dgprecompile warm --manifest plan.yaml --cache-dir /shared/deep_gemm \\
          --jobs 16
      dgprecompile warm --manifest plan.yaml --from-misses misses.jsonl
    """
    if from_misses is not None:
        from dgprecompile.planning.trace import plan_from_misses

        base = resolve_plan(plan_request, manifest) if (manifest or plan_request.model) else None
        plan = plan_from_misses(Path(from_misses), plan_request, base)
    else:
        plan = resolve_plan(plan_request, manifest)
    setup = prepare_warm(plan, WarmOptions(cache_dir=cache_dir, backend=backend, jobs=jobs, gpus=_parse_gpus(gpus),
                                           nvcc=nvcc, sglang_jit=sglang_jit, keep_going=keep_going))
    _announce(out, plan, setup)
    progress = out.progress(len(setup.items) + sum(len(p.built) - len(p.cached) for p in setup.parts), "warming",
                            seconds_per_item=plan.profile.seconds_per_kernel, workers=setup.workers)

    def on_event(event):
        kind = event.get("event")
        if kind == "fatal":
            out.failure("worker failed to start", event.get("error", ""))
        elif kind == "start":
            progress.started(event["kernel"])
        elif kind == "tick":
            progress.tick()
        elif kind in ("done", "failed"):
            progress.finished(compiled=kind == "done" and event.get("status") == "compiled")
            if event.get("replaced"):
                why = event.get("why") or "not loadable, or not what the index recorded"
                out.warn(f"{event['kernel']}: the entry in the cache was bad ({why}); rebuilt and replaced it")
            if kind == "failed" and not event.get("error", "").startswith("not started"):
                out.failure("failed", failure_text(event))

    with progress:
        result = run_warm(setup, on_event)
    return out.report(result, render)


def failure_text(event: dict) -> str:
    """A failed item as warm prints it: its id and the compiler's first error lines, where its whole log is kept,
    the known cause's hint (compile/build_log.py); the whole error where no error lines were picked."""
    errors = event.get("errors")
    if not errors:
        return f"{event['kernel']}\n{event.get('error', '')}"
    return "\n".join([f"{event['kernel']}: {errors[0]}", *(f"  {e}" for e in errors[1:]),
                      *([f"  log: {event['log']}"] if event.get("log") else []),
                      *([f"  hint: {event['hint']}"] if event.get("hint") else [])])


def _jit_line(plan, setup: WarmSetup, part) -> str:
    area = setup.store.root / part.job["area"]
    names = " and ".join(f"{name}={value}" for name, value in part.job.get("launch_env", []))
    return (f"SGLang JIT modules: built with the installed sglang {plan.sglang_version}'s own builders into "
            f"{area} (one ninja job per worker: MAX_JOBS=1); the runtime reads them with {names} (launch sets it)")


def _triton_moe_line(plan, setup: WarmSetup, part) -> str:
    runtime = part.runtime
    return (f"{runtime.label}: each item's m set is cut into {len(part.work)} chunk(s) in all, each "
            f"`python -m {runtime.warm_module}` started at once within the --jobs budget "
            f"(this interpreter, no GPU: CUDA_VISIBLE_DEVICES=\"\"), Triton "
            f"{part.job['installed']['triton']} writing into {setup.store.root / runtime.area}")


def _inductor_line(plan, setup: WarmSetup, part) -> str:
    return (f"{part.runtime.label}: each item's graphs built by `python -m {part.runtime.warm_module}` on the "
            f"visible GPU after the rest (SGLang's own compiled functions), into {setup.store.root / 'inductor'} "
            f"and {setup.store.root / 'triton'}")


def _flashinfer_line(plan, setup: WarmSetup, part) -> str:
    return (f"{part.runtime.label}: each built by `python -m {part.runtime.warm_module}` after the rest, "
            f"GPU-free (FlashInfer's own builder, target {', '.join(sorted({m.arch for m in part.built}))}), into "
            f"{setup.store.root / part.runtime.area}")


def _triton_path_line(plan, setup: WarmSetup, part) -> str:
    return (f"{part.runtime.label}: each item by `python -m {part.runtime.warm_module}` after the rest, GPU-free "
            f"(SGLang's own wrappers on meta tensors, Triton's own JIT), into {setup.store.root / part.runtime.area}")


# what warm says about each runtime's items beside DeepGEMM's kernels, by its kind (runtimes/base.py Runtime.kind)
PLURAL = {"sglang-jit": "SGLang JIT modules", "triton-moe": "Triton fused-MoE items",
          "inductor-graph": "torch.compile items", "flashinfer-module": "FlashInfer modules",
          "triton-path": "model-path Triton items"}
ANNOUNCE = {"sglang-jit": _jit_line, "triton-moe": _triton_moe_line, "inductor-graph": _inductor_line,
            "flashinfer-module": _flashinfer_line, "triton-path": _triton_path_line}


def _announce(out: Output, plan, setup: WarmSetup) -> None:
    """What is about to be built, where, with which budget; what the user should know first."""
    unit = "sweep chunks" if BACKENDS[setup.backend].sweeps else "kernels"
    built = [(p, len(p.built)) for p in setup.parts if p.built]
    out.info(f"plan: {plan.model} tp={plan.tp} ep={plan.ep} sglang {plan.profile.id}: {len(setup.items)} {unit}"
             + "".join(f" + {n} {PLURAL[p.runtime.kind]}" for p, n in built)
             + (f" (rank {setup.rank} of {setup.world})" if setup.world > 1 else ""))
    for part, _ in built:
        out.info(ANNOUNCE[part.runtime.kind](plan, setup, part))
    for module, why in setup.skipped.items():
        if setup.missing is None:  # --sglang-jit off: asked for
            out.note(f"not built ({why}): {module}")
        else:
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



def render(out: Output, result: WarmResult) -> None:
    out.table("warm summary", ["compiled", "already cached", "failed", "wall time", "compile time (sum)",
                               "workers", "cache size"],
              [[len(result.compiled), len(result.cached), len(result.failed), f"{result.wall_seconds:.1f} s",
                f"{sum(result.compiled.values()):.1f} s", result.workers, f"{result.cache_bytes / 1e6:.1f} MB"]])
    kinds, slowest = compile_times(result)
    if kinds:
        out.table("compile time per kind", ["kind", "compiled", "sum", "longest"], kinds)
        out.table("slowest compiles", ["item", "seconds"], slowest, no_wrap=("item",))
    if result.no_space:
        kept = (f"; {len(result.compiled)} compiled and installed whole" if result.compiled else "") + (
            f" ({len(result.unindexed)} not yet in the index: the next warm records them)" if result.unindexed else "")
        out.error(f"{result.no_space}; {len(result.failed)} kernels not built, nothing partial was installed{kept}",
                  result.no_space_hint)
    elif result.fatal and result.failed:
        names = sorted(result.failed)
        out.error(f"{result.fatal[0]}: {len(names)} not built: {', '.join(names[:3])}"
                  + (f" and {len(names) - 3} more" if len(names) > 3 else ""),
                  (known_cause(result.fatal, result.release) or "fix or reinstall the library it names (importing "
                   "it by hand shows the whole error)") + ", then warm again: what was built stays in the cache")
    elif result.failed:
        total = max(result.kernels, len(result.compiled) + len(result.cached) + len(result.failed))
        out.error(f"{len(result.failed)} of {total} items failed to build: " + _failed_names(result),
                  _failed_hint(result))
    elif result.missing:
        why = next(iter(result.skipped.values()), "")
        what = ", ".join(f"{n} {PLURAL.get(kind, kind)}" for kind, n in result.skipped_kinds.items())
        out.error(f"{len(result.skipped)} of the plan's items not built ({what}): {why}",
                  f"{result.missing}, then warm again (`verify` fails until they are built; --sglang-jit off warms "
                  "DeepGEMM's kernels only)")


def _failed_names(result: WarmResult, shown: int = 5) -> str:
    """The first failed items, each with its first error line where one was picked."""
    names = sorted(result.failed)[:shown]
    return ", ".join(f"{n} ({d['errors'][0]})" if (d := result.failure_details.get(n)) and d.get("errors") else n
                     for n in names)


def _failed_hint(result: WarmResult) -> str:
    """The first known cause's hint, else where the logs are kept."""
    details = [result.failure_details[n] for n in sorted(result.failure_details)]
    hint = next((d["hint"] for d in details if d.get("hint")), None)
    logs = next((str(Path(d["log"]).parent) for d in details if d.get("log")), None)
    if hint:
        return hint + (f"; the whole logs are in {logs}" if logs else "")
    return (f"each one's first error lines are printed above, its whole log in {logs}" if logs
            else "the compiler's output for each is printed above")


def compile_times(result: WarmResult, shown: int = 3) -> tuple[list[list[str]], list[list[str]]]:
    """Per kind of item (DeepGEMM kernels, SGLang JIT modules): how many compiled, their seconds summed, the
    longest; and the ``shown`` slowest items of each kind with their seconds (--json: every item's
    item_seconds)."""
    jit, triton = set(result.jit_ids), set(result.triton_ids)
    kinds, slowest = [], []
    for kind, ids in (("DeepGEMM kernels", [k for k in result.compiled if k not in jit | triton]),
                      ("SGLang JIT modules", [k for k in result.compiled if k in jit]),
                      ("Triton fused-MoE items", [k for k in result.compiled if k in triton])):
        if not ids:
            continue
        top = sorted(ids, key=lambda k: -result.compiled[k])[:shown]
        kinds.append([kind, str(len(ids)), f"{sum(result.compiled[k] for k in ids):.1f} s",
                      f"{result.compiled[top[0]]:.1f} s"])
        slowest += [[k, f"{result.compiled[k]:.1f} s"] for k in top]
    return kinds, slowest
