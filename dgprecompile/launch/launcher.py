"""`dgprecompile launch` without click: prepare (preflight, the child's environment), run, and report.

The trainer runs unchanged in its own session, with the inherited stdin/stdout/stderr, under a supervisor
process that is its subreaper (launch/supervise.py: signals, the job's end, nothing outliving launch). The
launcher returns the job's exit code, or 128+N when signal N killed it, as a shell would; what a strict run
checks afterwards is launch/strictcheck.py's and cache/snapshot.py's.

Beside it: launch/preflight.py (does the cache cover the plan), launch/environment.py (the child's environment;
a value the user already set differently is never overridden: the launch is refused and says why),
launch/results.py (what the run compiled, refused and missed) and launch/jobline.py (the job's command line).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from dgprecompile.cache.store import CacheStore, resolve_cache_dir
from dgprecompile.cache.verify import VerifyReport
from dgprecompile.errors import InputError
from dgprecompile.host import scratch
from dgprecompile.launch.environment import (
    GUARD_DIR,
    LaunchEnv,
    compose_env,
    grad_mode_conflict,
    jit_name_prefixes,
    triton_cache_dir,
)
from dgprecompile.launch.hook import HOOK_DIR, NVCC_STANDIN
from dgprecompile.launch.preflight import preflight, warm_command
from dgprecompile.launch.results import (
    LaunchResult,
    all_entries,
    collect_misses,
    jit_areas,
    listdir,
    names_planned_kernels,
    read_events,
)
from dgprecompile.launch.supervise import DEFAULT_KILL_GRACE, JobWatch, run_child
from dgprecompile.planning.plan import Plan
from dgprecompile.runtimes.inductor import INDUCTOR_GRAPHS


@dataclass
class LaunchOptions:
    plan: Plan
    command: list[str]
    cache_dir: str | None = None
    strict: bool = True
    shared_cache: list[str] = field(default_factory=list)  # read-only roots searched after cache_dir (DeepJIT)
    allow_missing: bool = False
    trace_dir: str | None = None
    misses_path: str | None = None
    manifest: str | None = None
    model_arg: str | None = None
    kill_grace: float = DEFAULT_KILL_GRACE  # seconds from a forwarded signal to the SIGKILL of what is left
    capture: bool = False  # point every JIT family's cache into the cache root and file what the job built
    capture_entry_mib: int | None = None  # capture's cap on one entry (None: data/limits.yaml; launch/capture.py)


@dataclass
class PreparedLaunch:
    """Everything decided before the job starts: the preflight, the child's environment, its scratch folder."""

    opts: LaunchOptions
    store: CacheStore
    preflight: VerifyReport
    env: LaunchEnv
    run_dir: Path
    trace_dir: str | None
    warm_hint: str

    @property
    def cache_dir(self) -> str:
        return str(self.store.root)

    def cleanup(self) -> None:
        shutil.rmtree(self.run_dir, ignore_errors=True)


def prepare_launch(opts: LaunchOptions) -> PreparedLaunch:
    """Check the cache against the plan and compose the child's environment. Raises when the cache does not
    cover the plan (unless allow_missing: then ``preflight.complete`` is False) or the environment conflicts."""
    plan = opts.plan
    if not opts.command:
        raise InputError("no command to launch", hint="dgprecompile launch --manifest plan.yaml -- torchrun ...")
    if not opts.strict:  # a job inside a strict launch must not start one that compiles
        from dgprecompile.host import lifeline

        lifeline.refuse_inside_strict_launch("dgprecompile launch --no-strict")
    store = CacheStore(resolve_cache_dir(plan, opts.cache_dir))
    hint = warm_command(plan, str(store.root), opts.manifest, opts.model_arg)
    grad = grad_mode_conflict(plan, opts.command, os.environ)
    if grad:
        raise InputError(grad, hint="plan where the job's environment is as it runs (plan reads "
                                    f"{INDUCTOR_GRAPHS.grad_variable}), warm it, and pass that plan with --manifest")
    report = preflight(plan, store, [CacheStore(d) for d in opts.shared_cache], allow_missing=opts.allow_missing,
                       hint=hint)
    run_dir = scratch.run_dir("dgprecompile-launch-")  # locked: a later run removes it if this one is killed
    try:
        trace_dir = opts.trace_dir
        if trace_dir is None and not opts.strict:
            trace_dir = str(run_dir / "trace")
        if trace_dir:
            trace_dir = os.path.abspath(trace_dir)
            os.makedirs(trace_dir, exist_ok=True)
        standin = NVCC_STANDIN
        if not os.access(standin, os.X_OK):  # an install that dropped the mode bits
            (run_dir / "bin").mkdir()
            standin = str(run_dir / "bin" / "nvcc")
            shutil.copy(NVCC_STANDIN, standin)
            os.chmod(standin, 0o755)
            shutil.copy(os.path.join(HOOK_DIR, "_dgprecompile_hook.py"), run_dir / "_dgprecompile_hook.py")
        from dgprecompile.cache.relocate import relocate
        from dgprecompile.launch.capture import family_env

        moved = relocate(store)  # entries filed at another root: Triton's group files name absolute paths
        families = family_env(store.root, store.read_index(), capture=opts.capture, strict=opts.strict)
        composed = compose_env(plan, str(store.root), report.recorded_fingerprint, os.environ, strict=opts.strict,
                               trace_dir=trace_dir, run_dir=str(run_dir), warm_hint=hint, standin=standin,
                               shared=[str(CacheStore(d).root) for d in opts.shared_cache], families=families)
        if moved:
            composed.notes.append(f"{len(moved)} filed Triton entries pointed at {store.root} (filled elsewhere)")
        if composed.conflicts:
            raise InputError("the environment conflicts with the warmed cache:\n" +
                             "\n".join(f"  {c}" for c in composed.conflicts),
                             hint="dgprecompile never overrides a value you set; change or unset those variables")
        (run_dir / GUARD_DIR).mkdir()
        (run_dir / "plan-info.json").write_text(json.dumps({"kernels": sorted(plan.kernels), "warm": hint,
                                                            "jit_modules": jit_name_prefixes(plan)}))
    except BaseException:
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    return PreparedLaunch(opts, store, report, composed, run_dir, trace_dir, hint)


def run_launch(prepared: PreparedLaunch) -> LaunchResult:
    """Run the job with the prepared environment; collect refusals, entries compiled at run time and misses."""
    opts, plan, store = prepared.opts, prepared.opts.plan, prepared.store
    try:
        before = set(all_entries(store))
        triton_dir = triton_cache_dir(prepared.env.env)
        triton_before = listdir(triton_dir)
        from dgprecompile.launch import capture

        families_before = capture.snapshot(store.root)
        from dgprecompile.cache import snapshot

        cache_before = snapshot.take(store.root) if opts.strict else {}
        watch = JobWatch(scan=opts.strict, guard=str(prepared.run_dir / GUARD_DIR))
        code = run_child(opts.command, prepared.env.env, kill_grace=opts.kill_grace, watch=watch, strict=opts.strict)
        result = LaunchResult(code, opts.strict, cache_dir=prepared.cache_dir, warm_hint=prepared.warm_hint,
                              signals=list(watch.signals), killed=watch.killed, capture=opts.capture,
                              left_behind=watch.left_behind, lost=watch.lost)
        if opts.strict:
            from dgprecompile.launch.strictcheck import read_guards

            result.unguarded, result.guard_failures, result.strict_off = read_guards(prepared.run_dir / GUARD_DIR,
                                                                                     watch)
            result.scratch_removed = snapshot.remove_new_scratch(store.root, cache_before)
            result.cache_changes = snapshot.diff(cache_before, snapshot.take(store.root)).to_dict()
        result.families = capture.compiled_during(store.root, families_before)
        if opts.capture:
            capture.file_captured(store, result.families, prepared.env.env, capture.planned_kernels(plan),
                                  entry_mib=opts.capture_entry_mib)
        result.refusals = [e for e in read_events(prepared.run_dir / "events.jsonl") if e.get("event") == "refused"]
        result.refusals_outside_plan = bool(result.refusals) and all(
            e.get("kernel") and names_planned_kernels(e) and e["kernel"] not in plan.kernels
            for e in result.refusals)
        new = sorted(set(all_entries(store)) - before)
        areas = jit_areas()
        result.new_jit_modules = [e for e in new if e.split("/", 1)[0] in areas]
        result.new_entries = [e for e in new if e not in result.new_jit_modules]
        result.triton_cache_dir = triton_dir
        result.new_triton = sorted(listdir(triton_dir) - triton_before)
        if not opts.strict:
            collect_misses(plan, prepared.trace_dir, opts.misses_path, prepared.cache_dir, result)
        return result
    finally:
        prepared.cleanup()
