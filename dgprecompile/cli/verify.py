"""`dgprecompile verify`: is every planned kernel in the cache, intact, and under this environment's keys?"""

from __future__ import annotations

import click

from dgprecompile.cache.store import CacheStore, resolve_cache_dir
from dgprecompile.cache.sweeps import key_label
from dgprecompile.cache.verify import VerifyReport, verify_roots
from dgprecompile.cli.options import (
    cache_dir_option,
    output_options,
    plan_options,
    resolve_plan,
    shared_cache_option,
)
from dgprecompile.errors import EnvironmentProblem, InputError
from dgprecompile.output import Output

PATH_OPTION = "--cache-dir"  # where this command is told to write: named in the hint of a file error


@click.command("verify")
@plan_options
@cache_dir_option
@shared_cache_option
@click.option("--nvcc", default=None, metavar="PATH",
              help="nvcc the runtime will use (default: the one the cache was warmed with, else as the runtime "
                   "finds it); its path is part of the legacy JIT's key.")
@click.option("--trace", default=None, type=click.Path(file_okay=False), metavar="DIR",
              help="Verify the kernels a traced run called (instead of a plan).")
@click.option("--live", is_flag=True,
              help="GPU, in the job's own environment: call SGLang's own layers (sglang 0.5.14) over the plan's m "
                   "range with every JIT refused, and report any compile of any kind per key.")
@click.option("--live-m", type=click.Choice(["edges", "all"]), default="edges", show_default=True,
              help="--live: every m of each key's range, or each bucket's edges plus --live-sample random m.")
@click.option("--live-sample", type=click.IntRange(min=0), default=256, show_default=True,
              help="--live --live-m edges: random m values per key on top of the bucket edges.")
@click.option("--live-seed", type=int, default=0, show_default=True, help="--live: seed of the m sample and weights.")
@click.option("--live-units", type=click.Choice(["all", "jit"]), default="all", show_default=True,
              help="--live: DeepGEMM's layers and every SGLang JIT module, or the JIT modules only.")
@click.option("--live-log", type=click.Path(dir_okay=False), default=None,
              help="--live: keep the child's output (SGLang, DeepGEMM and refusal messages) in this file.")
@click.option("--live-server", default=None, metavar="CMD",
              help="--live, the independent proof: build SGLang's own model for one rank from this server command "
                   "and its model's config.json (nothing from the plan) and run it over the m range under strict "
                   "launch of this cache.")
@output_options
def command(plan_request, manifest, config, cache_dir, shared_cache, nvcc, trace, live, live_m, live_sample, live_seed,
            live_units, live_log, live_server,
            out):
    """Check that every planned kernel is in the cache, intact, and filed under this environment's keys.

    Needs no GPU and imports neither torch nor DeepGEMM. Checks each entry's sha256 against the index and
    compares the cache's fingerprint (DeepGEMM version, headers and location, nvcc, DG_JIT_* flags, SM count)
    with this machine. For the legacy JIT (sglang 0.5.0-0.5.1) it computes the exact entry name the runtime
    will look up for every kernel and checks it exists, so coverage is proved, not just recorded.
    Exit 0 when complete, 1 when not.

    \b
    Examples:
      dgprecompile verify --manifest plan.yaml --cache-dir /shared/deep_gemm
      dgprecompile verify --model Qwen3-Coder-480B --tp 8 --ep 8 \\
          --sglang 0.5.1 --json
      dgprecompile verify --manifest plan.yaml \\
          --num-sms 78   # the job runs on H20s
      dgprecompile verify --manifest plan.yaml --live \\
          --live-m all   # GPU: SGLang's own layers, every m
      dgprecompile verify --manifest plan.yaml --live \\
          --live-server "python -m sglang.launch_server --model-path M --tp 8"
      dgprecompile verify --manifest plan.yaml --cache-dir ~/.cache/dg \\
          --shared-cache /opt/dg   # DeepJIT roots

    With --live (GPU, sglang 0.5.14): builds SGLang's Fp8LinearMethod for each dense key and its
    DeepGemmRunnerCore masked path for each MoE key pair with random FP8 weights of the planned shapes, calls
    them for the chosen m values in a child process with `launch --strict`'s environment (every JIT refused), and
    reports per key refused compiles, new DeepGEMM entries, new SGLang JIT modules and new Triton kernels.
    Exit 1 on any compile or failed call, 3 without a usable GPU/sglang.
    """
    plan = resolve_plan(plan_request, manifest, trace=trace)
    if not plan.keys and not plan.jit_modules and not plan.triton_moe:  # "complete: 0/0" would pass an empty cache
        raise InputError(f"the plan for {plan.model} holds no kernel, so there is nothing to verify a cache against",
                         hint="verify the plan the job runs (`dgprecompile plan` shows what it holds)")
    store = CacheStore(resolve_cache_dir(plan, cache_dir))
    if live and live_server:
        return _model_live(plan, store, live_server, live_m, live_log, out)
    if live:
        from dgprecompile.launch.live import LiveOptions, run_live

        live_report = run_live(plan, store, LiveOptions(m_mode=live_m, sample=live_sample, seed=live_seed,
                                                        log=live_log, units=live_units), out)
        if live_report.environment_error:
            raise EnvironmentProblem(live_report.error or "the live check could not run here",
                                     hint="run it on a Hopper GPU node, in the job's own environment (its sglang, "
                                          "DeepGEMM and torch)")
        return out.report(live_report, render_live)
    report = verify_roots(plan, store, [CacheStore(d) for d in shared_cache], nvcc=nvcc, num_sms=plan_request.num_sms)
    for warning in report.warnings:
        out.warn(warning)
    return out.report(report, render)


def _model_live(plan, store, server: str, live_m: str, live_log, out: Output):
    """The independent proof (dgprecompile/launch/model_live.py): every m up to the plan's largest forward, or its
    edges and a stride (--live-m edges)."""
    from dgprecompile.launch.model_live import run_model_live

    top = max(plan.max_tokens, 1)
    ms = f"1-{top}" if live_m == "all" else f"1-{min(top, 64)},{min(top, 65)}-{top}:61,{top}"
    report = run_model_live(plan, store, server, ms, live_log)
    if report.environment_error:
        lines = report.log.strip().splitlines() or ["no output"]
        why = next((ln[len("error: "):] for ln in lines if ln.startswith("error: ")), lines[-1])
        raise EnvironmentProblem("the model proof could not run here: " + why[:300],
                                 hint="run it on a Hopper GPU node, in the job's own environment (its sglang, "
                                      "DeepGEMM and torch); --live-log keeps the child's output")
    return out.report(report, render_model_live)


def render_model_live(out: Output, report) -> None:
    d = report.driver
    rows = [[name, str(n), ""] for name, n in sorted(d.get("calls", {}).items())]
    rows += [[name, "-", f"m={f['m']}: {f['error']}"] for name, f in sorted(d.get("failed", {}).items())]
    out.table(f"SGLang's own model, one rank of: {report.server}", ["module", "calls", "failure"], rows)
    for line in report.refusals[:10]:
        out.info(line)
    extra = d.get("new_cache_files") or {}
    if extra or d.get("dynamo", {}).get("compiled"):
        named = [f for v in extra.values() for f in v.get("files", [])][:5]
        out.info(f"compiled during the run: {sum(v.get('count', 0) for v in extra.values())} files "
                 f"({', '.join(named)}), {d.get('dynamo', {}).get('compiled', 0)} torch.compile frame(s)")
    if report.ok:
        out.data_text(f"ok: {sum(d.get('calls', {}).values())} calls, nothing compiled, nothing refused")
    else:
        out.error(f"the model proof failed (launch exit {report.launch_exit})",
                  "warm the plan the server runs; --live-log keeps the child's output")


def render(out: Output, report: VerifyReport) -> None:
    plan = report.plan
    for shared in report.shared_dirs:
        out.info(f"shared cache (read-only, searched after it): {shared}")
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


def render_live(out: Output, report) -> None:
    rows = []
    for u in report.units:
        keys = (f"{u['module']} ({u.get('through', '?')})" if u.get("kind") == "jit" and u.get("module")
                else " + ".join(key_label(k) for k in u["keys"]))
        found = [f"{len(u.get(f, []))} {label}" for f, label in (
            ("refused", "refused"), ("new_deepgemm", "DeepGEMM"), ("new_jit", "SGLang JIT"),
            ("new_triton", "Triton")) if u.get(f)]
        rows.append([keys, f"{u['calls']} ({u['m_min']}..{u['m_max']})", u.get("errors", 0),
                     ", ".join(found) or "none", f"{u.get('seconds', 0)} s"])
    out.table(f"live: SGLang's own layers on {report.device or 'the GPU'}",
              ["key(s)", "calls (m)", "failed calls", "compiles", "time"], rows)
    for u in report.units:
        for e in u.get("refused", []):
            out.warn(f"refused a {e.get('generation')} compile: {e.get('planned_kernel') or e.get('kernel')} "
                     f"(entry {e.get('entry')})")
        for kind in ("new_deepgemm", "new_jit", "new_triton"):
            for name in u.get(kind, []):
                out.warn(f"compiled at run time ({kind[4:]}): {name}")
        for text in u.get("error_samples", [])[:2]:
            out.warn(f"failed call: {text.splitlines()[0][:300]}")
    for kind, names in report.outside.items():
        out.warn(f"outside the sweeps ({kind}): {', '.join(map(str, names[:10]))}")
    if report.ok:
        out.data_text(report.verdict())
    else:
        out.error(report.verdict(), report.hint)
