"""`dgprecompile launch`: check the cache, then run the unchanged trainer with runtime JIT off."""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

from dgprecompile.cli.options import (
    cache_dir_option,
    output_options,
    plan_options,
    resolve_plan,
    shared_cache_option,
    trust_options,
)
from dgprecompile.output import Output

if TYPE_CHECKING:
    from dgprecompile.cache.fleet import PullReport
    from dgprecompile.cache.signing import Trust
    from dgprecompile.launch.launcher import PreparedLaunch
    from dgprecompile.launch.results import LaunchResult
    from dgprecompile.planning.plan import Plan, PlanRequest


PATH_OPTION = "--cache-dir"  # where this command is told to write: named in the hint of a file error


@click.command("launch", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@plan_options
@cache_dir_option
@shared_cache_option
@click.option("--strict/--no-strict", default=True, show_default=True,
              help="Strict: any DeepGEMM compile at run time fails at once, naming the kernel. Non-strict: allowed, "
                   "traced, and reported at exit with a misses file.")
@click.option("--allow-missing", is_flag=True, help="Start even when the cache lacks planned kernels.")
@click.option("--trace", "trace_dir", type=click.Path(file_okay=False), default=None,
              help="Record every DeepGEMM call of every rank as JSON lines in DIR (for `plan --from-trace`).")
@click.option("--misses", "misses_path", type=click.Path(dir_okay=False), default=None,
              help="Non-strict: where to write the misses file (default ./dgprecompile-misses.jsonl, written only when "
                   "something was missed or compiled).")
@click.option("--pull", "pull_from", default=None, metavar="URL-PREFIX",
              help="First `dgprecompile pull --from URL-PREFIX`: fetch this machine's artifact unless the cache is "
                   "complete; launch only when it is. The artifact must be signed by a --trusted-key.")
@click.option("--replace-changed", is_flag=True,
              help="With --pull: replace cache entries whose bytes differ from the artifact's.")
@trust_options
@click.option("--capture", is_flag=True,
              help="Non-strict: point Triton's, FlashInfer's, inductor's and CuTe-DSL's caches into the cache and "
                   "file the whole Triton entries the job built in its index (pack/push/pull carry them).")
@click.option("--max-entry-mib", type=click.IntRange(min=1, max=1 << 20), default=None, metavar="MIB",
              help="With --capture: file no entry larger than this (default: 64, data/limits.yaml).")
@click.option("--kill-grace", type=click.FloatRange(min=0, max=3600), default=10.0, show_default=True,
              metavar="SECONDS",
              help="After a SIGINT/SIGTERM/SIGHUP is forwarded to the job, SIGKILL what is left of it this many "
                   "seconds later. launch then exits 128 + the signal (143 for SIGTERM).")
@output_options
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def command(plan_request, manifest, config, cache_dir, shared_cache, strict, allow_missing, trace_dir, misses_path,
            pull_from, replace_changed, trust, capture, max_entry_mib, kill_grace, out,
            command) -> LaunchResult:
    """Run COMMAND (e.g. torchrun ...) with SGLang's runtime DeepGEMM precompile off and the warmed cache.

    Checks the cache against the plan first and refuses to start when kernels are missing. The command's
    output and exit code pass through; Ctrl-C and SIGTERM reach every process of the job, what ignores them is
    killed after --kill-grace seconds, and the job never outlives the launcher (even a `kill -9` of it).
    Strict: a Python process of the job running without the guard (a wrapper that resets PYTHONPATH) or with
    strict switched off, any refusal (caught or not), a cache entry added, changed or removed during the run, or
    a process the job left behind fails the launch (exit 1 where the job itself exited 0).
    With --json the report is the only thing on stdout: the job's stdout goes to stderr.

    \b
    Examples:
      dgprecompile launch --manifest plan.yaml -- \\
          torchrun --nproc_per_node 8 train.py ...
      dgprecompile launch --config train.yaml
      dgprecompile launch --manifest plan.yaml --no-strict -- \\
          python train.py   # records misses
      dgprecompile launch --capture -- \\
          python -m sglang.launch_server ...   # once: files Triton's kernels
      dgprecompile launch --manifest plan.yaml --trace traces/ -- python train.py
      dgprecompile launch -- python -m sglang.launch_server \\
          --model-path Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8 --tp 8
      dgprecompile launch --specforge-config run.yaml -- \\
          specforge train -c run.yaml
      dgprecompile launch --pull s3://my-bucket/dg/train-480b \\
          --trusted-key ci.pub --manifest plan.yaml -- torchrun ...
      dgprecompile launch --manifest plan.yaml --shared-cache /opt/dg -- \\
          python -m sglang.launch_server ...
    """
    from dgprecompile.launch.launcher import LaunchOptions, prepare_launch, run_launch

    argv, plan_request, plan = _job_and_plan(out, list(command), config, plan_request, manifest)
    if pull_from is not None:
        cache_dir, refused = _pull_first(out, plan, cache_dir, pull_from, num_sms=plan_request.num_sms, trust=trust,
                                         replace_changed=replace_changed, allow_missing=allow_missing)
        if refused is not None:
            return refused
    if capture:
        strict = False  # a capture run lets every family compile, and records what it built
    prepared = prepare_launch(LaunchOptions(plan=plan, command=argv, cache_dir=cache_dir, strict=strict,
                                            shared_cache=list(shared_cache), allow_missing=allow_missing,
                                            trace_dir=trace_dir, misses_path=misses_path, manifest=manifest,
                                            model_arg=plan_request.model, kill_grace=kill_grace, capture=capture,
                                            capture_entry_mib=max_entry_mib))
    render_prepared(out, prepared)
    with _job_stdout_to_stderr(out.json_mode):
        result = run_launch(prepared)
    return out.report(result, render_result)


@contextmanager
def _job_stdout_to_stderr(active: bool) -> Iterator[None]:
    """Under --json the job's stdout (file descriptor 1, which every process of it inherits) is our stderr, so
    the report is the only thing on stdout; restored for the report."""
    if not active:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _job_and_plan(out: Output, given: list[str], config: Mapping[str, Any], plan_request: PlanRequest,
                  manifest: str | None) -> tuple[list[str], PlanRequest, Plan]:
    """The job's command line, the plan request completed from it, and the plan (one info line on stderr)."""
    from dgprecompile.launch.jobline import job_command, request_for_job

    argv, note = job_command(given, config, plan_request)
    if note:
        out.info(note)
    from dgprecompile.launch.job_script import require_job_script

    require_job_script(argv, _config_path() if not [a for a in given if a != "--"] else None)
    plan_request = request_for_job(plan_request, argv, manifest)
    plan = resolve_plan(plan_request, manifest)
    out.info(f"plan: {plan.model} tp={plan.tp} ep={plan.ep} sglang {plan.profile.id} "
             f"({plan.profile_reason}): {len(plan.kernels)} kernels")
    return argv, plan_request, plan


def _config_path() -> str | None:
    """The --config file of this command line (where a job from its `command:` came from)."""
    params = click.get_current_context().params
    return params.get("config_file") or None


def _pull_first(out: Output, plan: Plan, cache_dir: str | None, pull_from: str, *, num_sms: int | None,
                trust: Trust | None, replace_changed: bool,
                allow_missing: bool) -> tuple[str | None, PullReport | None]:
    """--pull: fetch this machine's artifact into the cache first. Returns the cache to launch with, and the pull's
    report where the launch must not start (the cache is still incomplete and --allow-missing was not given)."""
    from dgprecompile.cache.fleet import pull
    from dgprecompile.cache.store import CacheStore, resolve_cache_dir
    from dgprecompile.cli.pull import render_problem

    store = CacheStore(resolve_cache_dir(plan, cache_dir))
    pulled = pull(plan, store, pull_from, num_sms=num_sms, trust=trust, replace_changed=replace_changed)
    for warning in pulled.warnings:
        out.warn(warning)
    for note in pulled.notes:
        out.info(note)
    out.info(pulled.stats_line())  # stderr: stdout is the job's
    if pulled.return_code:
        if not allow_missing:
            render_problem(out, pulled)
            return cache_dir, pulled
        out.warn(f"{pulled.reason()}; starting anyway (--allow-missing)")
    return str(store.root), None


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
        out.note(note)
    out.info("starting: " + shlex.join(prepared.opts.command))


def render_families(out: Output, result: LaunchResult) -> None:
    rows = [[f.label, str(len(f.new)), str(len(f.filed)) if result.capture else "-", str(len(f.not_whole)),
             ", ".join(sorted(set(f.kernels))[:8]) + (" ..." if len(set(f.kernels)) > 8 else "")]
            for f in result.families if f.new]
    if rows:
        out.table("compiled at run time, per JIT family" + (" (captured)" if result.capture else ""),
                  ["family", "new", "filed", "not whole", "kernels"], rows, to_stderr=True, no_wrap=("family",))
    for f in result.families:
        for name, why in sorted(f.not_whole.items()):
            out.warn(f"{f.label} entry {name} not filed: {why}")
        if f.new and f.note:
            out.note(f"{f.label}: {f.note}")


def refused_names(refusals: list[dict[str, Any]], shown: int = 10) -> str:
    """The distinct names strict mode refused, each with its count where it was refused more than once (inductor's
    names carry Dynamo's compile id, one per attempt: dropped, so a graph refused at every m is one name)."""
    import re
    from collections import Counter

    counts = Counter(re.sub(r" \[compile id [^\]]*\]", "", str(e.get("kernel") or e.get("entry"))) for e in refusals)
    names = [f"{name} (x{n})" if n > 1 else name for name, n in sorted(counts.items())]
    return ", ".join(names[:shown]) + (f", and {len(names) - shown} more" if len(names) > shown else "")


def _captured_hint(refusals: list[dict[str, Any]]) -> str | None:
    """Where every refusal is of a captured family (Triton, FlashInfer, inductor): the families by name and the
    capture that files their entries; else None."""
    from dgprecompile.runtimes import CAPTURED

    labels = {f.id: f.label for f in CAPTURED}
    families = sorted({str(e.get("generation")) for e in refusals})
    if not all(f in labels for f in families):
        return None
    return (f"{', '.join(labels[f] for f in families)}: the cache holds no entry for them; let the job build them "
            "once with `dgprecompile launch --capture ...` (filed in the cache, loaded by later strict launches)")


def render_result(out: Output, result: LaunchResult) -> None:
    render_families(out, result)
    if result.hidden_misses:
        shown = ", ".join(f"{e} ({', '.join(k)})" for e, k in sorted(result.hidden_misses.items())[:5])
        out.error("a capture must never hide a warm's miss: the job compiled planned kernels (not filed, "
                  f"removed): {shown}",
                  hint=f"the warm did not cover what the job ran: warm again ({result.warm_hint}) and check the "
                  "plan against the job (`dgprecompile verify --live`)")
    if result.new_triton and not result.capture:
        out.warn(f"{len(result.new_triton)} Triton kernel(s) compiled at run time into {result.triton_cache_dir} "
                 "(file them in the cache with one `dgprecompile launch --capture` run)")
    if result.refusals:
        out.error(f"strict mode refused {len(result.refusals)} runtime compile(s): " + refused_names(result.refusals),
                  hint=("those kernels are outside the plan: record the job's shapes with --no-strict (misses "
                        "file) or --trace, then warm them" if result.refusals_outside_plan
                        else _captured_hint(result.refusals) or f"warm the cache: {result.warm_hint}"))
    _render_lifetime(out, result)
    if result.strict:
        _render_strict(out, result)
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


def _render_lifetime(out: Output, result: LaunchResult) -> None:
    """Signals launch forwarded, a supervisor lost, processes the job left behind (non-strict: a warning)."""
    if result.signals:
        import signal

        name = signal.Signals(result.signals[0]).name
        out.info(f"launch got {name}, forwarded it to the job"
                 + ("; what was left of it after the grace got SIGKILL" if result.killed else "")
                 + f"; exit {128 + result.signals[0]}")
    if result.lost:
        out.error(f"{result.lost}; what was found of the job was killed",
                  hint="do not signal the supervisor (`ps` shows it as dgp-strict or dgp-launch); signal launch")
    if result.left_behind and not result.strict:
        out.warn(f"the job left {len(result.left_behind)} process(es) running when it ended; launch ended them: "
                 + "; ".join(_one_line(line) for line in result.left_behind[:5]))


def _render_strict(out: Output, result: LaunchResult) -> None:
    """A strict run that compiled anything, or ran a Python process without its guard, failed: one error each."""
    changes = result.cache_changes
    appeared = sorted(set(result.new_entries + result.new_jit_modules + [
        n for n in changes.get("added", []) if not _own_record(n)]))
    if appeared:
        more = f" and {len(appeared) - 10} more" if len(appeared) > 10 else ""
        out.error(f"strict run, but {len(appeared)} cache entries were compiled during it: "
                  + ", ".join(appeared[:10]) + more,
                  hint=f"warm them before the run ({result.warm_hint}), and make sure no other process compiles "
                       f"into {result.cache_dir} while a strict job runs")
    _render_cache_changes(out, result)
    if result.scratch_removed:
        out.info(f"removed {len(result.scratch_removed)} scratch folder(s) DeepGEMM left under "
                 f"{result.cache_dir}/tmp for the compiles strict mode refused (nothing was built)")
    if result.strict_off:
        shown = [f"pid {pid}: {_one_line(cmd)}" for pid, cmd in sorted(result.strict_off.items())[:5]]
        out.error(f"strict mode was switched off inside the job in {len(result.strict_off)} Python process(es) "
                  "(their guard records say strict was off: DGPRECOMPILE_STRICT changed): " + "; ".join(shown),
                  hint="leave the variables launch sets as they are; to let the job compile, launch it with "
                       "--no-strict")
    if result.left_behind:
        out.error(f"the job left {len(result.left_behind)} process(es) running when it ended (launch ended them): "
                  + "; ".join(_one_line(line) for line in result.left_behind[:5]),
                  hint="have the job wait for what it starts; a daemon does not outlive a strict launch")
    if result.guard_failures:
        out.error("strict mode's guard could not be installed in: " + "; ".join(result.guard_failures[:5]),
                  hint="see the message the process printed; `dgprecompile doctor` checks the environment")
    if result.unguarded:
        shown = [f"pid {pid}: {_one_line(cmd)}" for pid, cmd in sorted(result.unguarded.items())[:5]]
        out.error(f"strict mode was not active in {len(result.unguarded)} Python process(es) of the job "
                  "(none held its guard record: the launch's PYTHONPATH was reset or dropped, by a wrapper, `env -i` or a "
                  "re-exec with another environment, or python ran with -I/-S/-E): "
                  + "; ".join(shown),
                  hint="keep the PYTHONPATH launch sets (prepend to it rather than replace it) in every wrapper "
                       "of the job, or run with --no-strict to trace instead")


def _one_line(command: str, limit: int = 160) -> str:
    """A process's command line inside one error line: a ``python -c`` script's newlines and indents as single
    spaces, cut at ``limit`` characters."""
    text = " ".join(command.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _own_record(name: str) -> bool:
    """A path of dgprecompile's own folder of the cache (its index, its installed-build record)."""
    from dgprecompile.cache.store import OURS

    return name.startswith(f"{OURS}/")


def _render_cache_changes(out: Output, result: LaunchResult) -> None:
    """Entries of the cache that were there before a strict run and changed or went during it, and the cache's own
    records that were added, changed or removed."""
    for kind in ("changed", "removed"):
        names = [n for n in result.cache_changes.get(kind, []) if not _own_record(n)]
        if names:
            more = f" and {len(names) - 10} more" if len(names) > 10 else ""
            out.error(f"strict run, but {len(names)} cache entries were {kind} during it: " + ", ".join(names[:10])
                      + more, hint=f"check the cache with `dgprecompile verify --cache-dir {result.cache_dir}` and "
                                   "warm it again; nothing may write into the cache while a strict job runs")
    for kind in ("added", "changed", "removed"):
        names = [n for n in result.cache_changes.get(kind, []) if _own_record(n)]
        if names:
            out.error(f"strict run, but the cache's own records were {kind} during it: " + ", ".join(names[:10]),
                      hint="only dgprecompile writes its index and build records: check the cache with `dgprecompile "
                           f"verify --cache-dir {result.cache_dir}` and unpack or warm it again")
