"""launch's preflight: does the cache cover the plan, and which `dgprecompile warm` would make it.

Checked before anything of the job's is prepared (cache/verify.py's verify_roots, the shared caches after the
warmed one); a cache that does not cover the plan refuses the launch, naming what is missing or changed and the
exact warm command, unless --allow-missing lets the job start anyway.
"""

from __future__ import annotations

import os
import shlex

from dgprecompile.cache.store import CacheStore
from dgprecompile.cache.verify import COVERED_BY_SWEEP, VerifyReport, verify_roots
from dgprecompile.errors import CheckFailed
from dgprecompile.planning.plan import Plan


def preflight(plan: Plan, store: CacheStore, shared: list[CacheStore], *, allow_missing: bool,
              hint: str) -> VerifyReport:
    """The cache (then the shared ones) against the plan; refused, with ``hint`` (the warm command), when it does
    not cover the plan and ``allow_missing`` is off."""
    report = verify_roots(plan, store, shared)
    if not report.complete and not allow_missing:
        raise CheckFailed(preflight_failure(plan, report),
                          hint=f"warm it first: {hint}  (or pass --allow-missing to start anyway)")
    return report


def preflight_failure(plan: Plan, report: VerifyReport) -> str:
    """What the cache lacks for the plan: a summary line, then the first missing, changed and unchecked entries."""
    lines = [f"  {what}: {kid}" for what in ("missing", "changed", "unchecked") for kid in getattr(report, what)[:20]]
    more = len(report.missing) + len(report.changed) + len(report.unchecked) - len(lines)
    if more > 0:
        lines.append(f"  ... and {more} more")
    lines += [f"  fingerprint: {f} was {was!r} when warmed, is {now!r} here" for f, was, now in report.stale]
    what = (f"{len(plan.keys)} keys' m ranges" if report.coverage == COVERED_BY_SWEEP
            else f"{len(plan.kernels) + len(plan.jit_modules)} kernels")
    summary = (f"the cache {report.cache_dir} does not cover the plan ({len(report.missing)} of "
               f"{what} missing, {len(report.changed)} changed"
               + (", fingerprint differs" if report.stale else "") + f"; {report.verdict()})")
    return summary + ("\n" + "\n".join(lines) if lines else "")


def warm_command(plan: Plan, cache_dir: str, manifest: str | None = None, model_arg: str | None = None) -> str:
    """The exact `dgprecompile warm` command that fills ``cache_dir`` for ``plan``."""
    server = getattr(plan, "server", None) or {}
    if manifest:
        parts = ["dgprecompile", "warm", "--manifest", os.path.abspath(manifest)]
    elif server.get("specforge"):
        parts = ["dgprecompile", "warm", "--specforge-config", server["specforge"]["config"], "--sglang",
                 getattr(plan, "sglang_version", None) or server["sglang_options"], "--num-sms", str(plan.num_sms)]
    elif server:
        parts = ["dgprecompile", "warm", "--sglang-cmd", server["command"], "--sglang",
                 getattr(plan, "sglang_version", None) or server["sglang_options"], "--num-sms", str(plan.num_sms)]
    else:
        parts = ["dgprecompile", "warm", "--model", model_arg or plan.model, "--tp", str(plan.tp), "--ep",
                 str(plan.ep), "--sglang", plan.sglang_version if plan.jit_modules else plan.profile.id,
                 "--moe-runner-backend", plan.moe_runner_backend,
                 "--max-tokens", str(plan.max_tokens), "--num-sms", str(plan.num_sms)]
    if server and not manifest and not getattr(plan, "sweep_m_max", 0):
        parts.append("--no-sglang-precompile")  # what launch needs: it turns SGLang's own precompile off
    if not plan.heuristic:  # keys only: DeepGEMM itself chooses, on a GPU, for every m of each key
        parts += ["--backend", "sweep"]
    parts += ["--cache-dir", cache_dir]
    return shlex.join(parts)
