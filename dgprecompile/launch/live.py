"""`verify --live`: run SGLang's own layers over the plan's m range with every JIT refused, and report compiles.

The static `verify` proves the runtime's entry names exist; this proves, on a GPU in the user's own environment,
that SGLang's real code paths find everything warm. For every planned key it builds a layer through SGLang's own
objects with random FP8 weights of the planned shapes (no checkpoint): ``Fp8LinearMethod`` for each dense key,
``DeepGemmRunnerCore``'s masked path for each pair of masked MoE keys, and calls it for the chosen m values
(every m, or the bucket edges plus a random sample). The calls run in a child process (live_driver.py, run by
path: it needs only the standard library, torch and sglang) started with `launch --strict`'s environment: the
profile's precompile switch off, the warmed cache directories, DeepGEMM's nvcc stand-in refusing compiles and the
startup hook refusing tvm-ffi builds. Per key it reports refused compiles, new DeepGEMM entries, new SGLang JIT
modules and new Triton kernels (new directories in TRITON_CACHE_DIR, ~/.triton/cache by default; Triton is not
refused, only counted). Any of them, or a failed call, makes the report fail (exit 1).

This module imports neither torch nor sglang: only the child does.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from importlib import util
from pathlib import Path
from typing import Any

from dgprecompile.cache.store import CacheStore
from dgprecompile.errors import EXIT_CHECK_FAILED, EXIT_ENVIRONMENT, EnvironmentProblem, InputError
from dgprecompile.host import scratch
from dgprecompile.keys.schemes import key_context
from dgprecompile.planning.plan import Plan, PlannedKey
from dgprecompile.runtimes.items import KernelType

DRIVER = Path(__file__).with_name("live_driver.py")
M_MODES = ("edges", "all")
SUPPORTED = ("0.5.14",)  # sglang releases whose layer objects the driver builds (constructor signatures differ)


@dataclass
class LiveOptions:
    m_mode: str = "edges"  # edges: every bucket's first and last m plus `sample` random ones; all: every m
    sample: int = 256
    seed: int = 0
    python: str | None = None  # the interpreter of the user's environment (default: this one)
    log: str | None = None  # where to keep the child's output (stderr of SGLang, DeepGEMM and the hook)
    timeout: float | None = None
    units: str = "all"  # all: DeepGEMM's layers and every SGLang JIT module; jit: the JIT modules only
    jit_ms: tuple[int, ...] = (1, 7, 1024)  # token counts each JIT module's entry point is called with


@dataclass
class LiveReport:
    cache_dir: str
    sglang_version: str | None
    units: list[dict[str, Any]]
    outside: dict[str, list[str]] = field(default_factory=dict)  # compiles not inside a key's sweep (imports)
    error: str | None = None
    environment_error: bool = False
    device: str | None = None
    log: str | None = None
    warm_hint: str = ""
    naming_error: str | None = None  # why refused DeepGEMM compiles could not be mapped to the plan's kernel ids

    @property
    def hint(self) -> str:
        return f"warm what is named above: {self.warm_hint}" if self.warm_hint else "warm the cache again"

    @staticmethod
    def compiles_of(unit: dict[str, Any]) -> int:
        return (len(unit.get("refused", [])) + len(unit.get("new_deepgemm", [])) + len(unit.get("new_jit", []))
                + len(unit.get("new_triton", [])))

    @property
    def compiles(self) -> int:
        return sum(self.compiles_of(u) for u in self.units) + sum(len(v) for v in self.outside.values())

    @property
    def failed_calls(self) -> int:
        return sum(int(u.get("errors", 0)) for u in self.units)

    @property
    def ok(self) -> bool:
        return self.error is None and self.compiles == 0 and self.failed_calls == 0 and bool(self.units)

    @property
    def return_code(self) -> int:
        if self.environment_error:
            return EXIT_ENVIRONMENT
        return 0 if self.ok else EXIT_CHECK_FAILED

    def verdict(self) -> str:
        if self.error:
            return f"live check failed: {self.error}"
        calls = sum(int(u.get("calls", 0)) for u in self.units)
        if self.ok:
            return (f"no compile of any kind: {calls} calls through SGLang's own layers over {len(self.units)} "
                    f"layer kinds found every DeepGEMM kernel, SGLang JIT module and Triton kernel warm")
        return (f"{self.compiles} compile(s) and {self.failed_calls} failed call(s) in {calls} calls through "
                "SGLang's own layers")

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "verdict": self.verdict(), "cache_dir": self.cache_dir,
                "sglang_version": self.sglang_version, "device": self.device, "compiles": self.compiles,
                "failed_calls": self.failed_calls, "units": self.units, "outside_units": self.outside,
                "error": self.error, "log": self.log, "naming_error": self.naming_error}


# ---- what to call -----------------------------------------------------------------------------------------


def m_values(keys: list[PlannedKey], mode: str, sample: int, rng: random.Random) -> list[int]:
    """The m values to call the keys' layer with: every m of their range, or each bucket's first and last m (and
    its neighbours) plus ``sample`` random ones."""
    if mode not in M_MODES:
        raise InputError(f"--live-m must be one of {', '.join(M_MODES)}, not {mode!r}")
    lo = min(pk.key.m_min for pk in keys)
    hi = max(pk.key.m_max for pk in keys)
    if mode == "all":
        return list(range(lo, hi + 1))
    edges = {lo, hi}
    for pk in keys:
        for b in pk.buckets:
            edges |= {b.m_min, b.m_max, b.m_min - 1, b.m_max + 1}
    values = {m for m in edges if lo <= m <= hi}
    if sample > 0:
        values |= set(rng.sample(range(lo, hi + 1), min(sample, hi - lo + 1)))
    return sorted(values)


def live_units(plan: Plan, opts: LiveOptions, topk: int) -> tuple[list[dict[str, Any]], list[str]]:
    """One unit per layer kind to build, as each runtime of the plan says it is driven (its ``live``: LIVE_UNITS):
    a dense key, a masked MoE pair (w13 + w2) of one group count, one SGLang JIT module."""
    rng = random.Random(opts.seed)
    units: list[dict[str, Any]] = []
    notes: list[str] = []
    for runtime, items in plan.by_runtime():
        driven = {LIVE_KERNEL_TYPE.get(kind) for kind in runtime.live}
        for pk in plan.keys if runtime is plan.profile.deepgemm else ():
            if pk.key.kernel_type not in driven:
                notes.append(f"{pk.key.kernel_type.short} key n={pk.key.n} k={pk.key.k}: not exercised (the live "
                             "check builds SGLang's dense FP8 linear and its masked DeepGEMM MoE runner only)")
        for kind in runtime.live:
            if opts.units == "all" or kind in JIT_UNITS:  # --live-units jit: the JIT modules only
                units += LIVE_UNITS[kind](plan, items, opts, rng, topk, notes)
    return units, notes


def _dense_units(plan: Plan, items, opts: LiveOptions, rng: random.Random, topk: int,
                 notes: list[str]) -> list[dict[str, Any]]:
    return [{"kind": "dense", "keys": [list(pk.key.ident)], "n": pk.key.n, "k": pk.key.k,
             "layers": list(pk.key.layers), "ms": m_values([pk], opts.m_mode, opts.sample, rng)}
            for pk in plan.keys if pk.key.kernel_type == KernelType.GEMM_NT_F8F8BF16]


def _masked_units(plan: Plan, items, opts: LiveOptions, rng: random.Random, topk: int,
                  notes: list[str]) -> list[dict[str, Any]]:
    masked: dict[int, list[PlannedKey]] = {}
    for pk in plan.keys:
        if pk.key.kernel_type == KernelType.GROUPED_GEMM_NT_F8F8BF16_MASKED:
            masked.setdefault(pk.key.num_groups, []).append(pk)
    units = []
    for groups, pks in sorted(masked.items()):
        w13 = next((a for a in pks for b in pks if a.key.n == 2 * b.key.k and b.key.n == a.key.k), None)
        w2 = next((b for b in pks if w13 is not None and b is not w13 and b.key.n == w13.key.k
                   and 2 * b.key.k == w13.key.n), None)
        if w13 is None or w2 is None:
            notes.append(f"masked keys with {groups} groups do not pair into gate_up + down: not exercised")
            continue
        units.append({"kind": "masked", "keys": [list(w13.key.ident), list(w2.key.ident)], "experts": groups,
                      "hidden": w13.key.k, "width": w2.key.k, "topk": topk,
                      "layers": list(w13.key.layers) + list(w2.key.layers),
                      "ms": m_values([w13, w2], opts.m_mode, opts.sample, rng)})
    return units


def _jit_units(plan: Plan, modules, opts: LiveOptions, rng: random.Random, topk: int,
               notes: list[str]) -> list[dict[str, Any]]:
    """Each SGLang JIT module through its own entry point (or builder)."""
    return [{"kind": "jit", "keys": [list(k) for k in module.keys], "module": module.to_dict(),
             "layers": [module.path], "ms": list(opts.jit_ms)} for module in modules]


# the units `verify --live` can drive, by the name a runtime gives in its ``live`` (runtimes/base.py); the kernel
# type each DeepGEMM unit kind drives; the unit kinds `--live-units jit` keeps
LIVE_UNITS = {"dense": _dense_units, "masked": _masked_units, "jit": _jit_units}
LIVE_KERNEL_TYPE = {"dense": KernelType.GEMM_NT_F8F8BF16, "masked": KernelType.GROUPED_GEMM_NT_F8F8BF16_MASKED}
JIT_UNITS = ("jit",)


def _topk(plan: Plan) -> int:
    try:
        from dgprecompile.planning.models import load_model

        return int(load_model(plan.model).config.get("num_experts_per_tok") or 8)
    except Exception:  # the plan's model is not loadable here (a trace plan): a runtime argument only
        return 8


# ---- running it -------------------------------------------------------------------------------------------


def _check_environment(plan: Plan, python: str) -> None:
    if python == sys.executable:
        missing = [name for name in ("torch", "sglang", "deep_gemm") if util.find_spec(name) is None]
        if missing:
            raise EnvironmentProblem(f"verify --live runs SGLang's own layers and needs {', '.join(missing)} "
                                     "importable here", hint="run it in the job's own environment (a GPU node)")
    if plan.sglang_version is None:
        raise InputError("verify --live needs the plan's exact sglang release",
                         hint="plan with --sglang 0.5.14 (not a profile id), or run where sglang is installed")
    if plan.sglang_version not in SUPPORTED:
        raise InputError(f"verify --live builds the layers of sglang {', '.join(SUPPORTED)}; the plan is for "
                         f"{plan.sglang_version}", hint="plan with --sglang 0.5.14")


def run_live(plan: Plan, store: CacheStore, opts: LiveOptions, out=None) -> LiveReport:
    """Call the plan's layers in the live driver, a child with `launch --strict`'s environment; what it reported."""
    from dgprecompile.launch.preflight import warm_command

    python = opts.python or sys.executable
    _check_environment(plan, python)
    units, notes = live_units(plan, opts, _topk(plan))
    if not units:
        raise InputError("the plan has no dense or masked MoE key nor SGLang JIT module the live check can exercise")
    for note in notes:
        if out is not None:
            out.warn(note)
    cache_dir = str(store.root)
    fingerprint = store.read_index().fingerprint
    run_dir = scratch.run_dir("dgprecompile-live-")  # lock-held: a later run removes it if this one is killed
    try:
        hint = warm_command(plan, cache_dir)
        env = _strict_env(plan, cache_dir, fingerprint, run_dir, hint, python)
        _write_job(plan, store, units, opts, run_dir, env)
        log_path = Path(opts.log) if opts.log else run_dir / "child.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        if out is not None:
            out.info(f"live: {len(units)} layer kinds, {sum(len(u['ms']) for u in units)} calls, in a child "
                     f"process with launch --strict's environment; its output: {log_path}")
        code = _run_driver(python, run_dir, env, log_path, opts.timeout)
        report = LiveReport(cache_dir, plan.sglang_version, [], log=str(log_path) if opts.log else None,
                            warm_hint=hint)
        return _read_result(report, plan, store, run_dir, log_path, code)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def _strict_env(plan: Plan, cache_dir: str, fingerprint: dict[str, Any], run_dir: Path, hint: str,
                python: str) -> dict[str, str]:
    """`launch --strict`'s environment for the driver, with its guard folder and plan-info file in ``run_dir``;
    raises where the user's environment conflicts with the warmed cache."""
    from dgprecompile.launch.environment import GUARD_DIR, compose_env, jit_name_prefixes

    composed = compose_env(plan, cache_dir, fingerprint, os.environ, strict=True, run_dir=str(run_dir),
                           warm_hint=hint, python=python)
    (run_dir / GUARD_DIR).mkdir(exist_ok=True)  # strict: each process of the driver records its guard here
    if composed.conflicts:
        raise InputError("the environment conflicts with the warmed cache:\n"
                         + "\n".join(f"  {c}" for c in composed.conflicts),
                         hint="dgprecompile never overrides a value you set; change or unset those variables")
    (run_dir / "plan-info.json").write_text(json.dumps({"kernels": sorted(plan.kernels), "warm": hint,
                                                        "jit_modules": jit_name_prefixes(plan)}))
    return composed.env


def _write_job(plan: Plan, store: CacheStore, units: list[dict[str, Any]], opts: LiveOptions, run_dir: Path,
               env: dict[str, str]) -> None:
    """The driver's job.json: the units to call, and the cache folders whose new entries count as compiles."""
    from dgprecompile.launch.environment import plan_jit_family, triton_cache_dir

    triton = triton_cache_dir(env)
    family = plan_jit_family(plan)
    jit_dirs = ([env.get(name) or os.path.expanduser(family.cache_default) for name in family.cache_env]
                if family else [])
    job = {"units": units, "seed": opts.seed, "events": str(run_dir / "events.jsonl"),
           "result": str(run_dir / "result.json"), "dirs": {
               "deepgemm": [str(store.area_dir("cache"))], "jit": jit_dirs, "triton": [triton]}}
    (run_dir / "job.json").write_text(json.dumps(job))


def _run_driver(python: str, run_dir: Path, env: dict[str, str], log_path: Path, timeout: float | None
                ) -> int | None:
    """Run the driver on the job with its output into ``log_path``; its exit code (None: it timed out)."""
    with open(log_path, "wb") as log:
        try:
            proc = subprocess.run([python, str(DRIVER), str(run_dir / "job.json")], env=env, stdout=log,
                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=timeout)
            return proc.returncode
        except subprocess.TimeoutExpired:
            return None


def _read_result(report: LiveReport, plan: Plan, store: CacheStore, run_dir: Path, log_path: Path,
                 code: int | None) -> LiveReport:
    """``report`` filled from the driver's result.json; without one, an error with the tail of its output."""
    try:
        result = json.loads((run_dir / "result.json").read_text())
    except (OSError, ValueError):
        tail = log_path.read_text(errors="replace").strip().splitlines()[-12:]
        report.error = ("the live driver " + ("timed out" if code is None else f"exited with {code}")
                        + " without a result:\n" + "\n".join(tail))
        return report
    report.units = result.get("units", [])
    report.outside = result.get("outside", {})
    report.device = result.get("device")
    report.error = result.get("error")
    report.environment_error = bool(result.get("environment_error"))
    _name_refusals(report, plan, store)
    return report


def _name_refusals(report: LiveReport, plan: Plan, store: CacheStore) -> None:
    """Add the plan's kernel id to each refused compile: SGLang JIT modules by their directory, sgl-deep-gemm
    0.1.x kernels by the template instantiation the refused kernel.cu holds (its build runs in a scratch dir)."""
    index = store.read_index()
    by_entry = {rec.entry: kid for kid, rec in index.kernels.items()}
    by_template: dict[str, str] = {}
    generation = plan.profile.deepgemm
    try:
        from dgprecompile.host.toolchain import find_deepgemm, find_nvcc
        from dgprecompile.launch.hook._dgprecompile_hook import describe_source

        install = find_deepgemm()
        if install is None or install.generation != plan.profile.generation:
            report.naming_error = (f"the DeepGEMM here ({install.generation if install else 'none'}) is not the "
                                   f"plan's {plan.profile.generation}")
        elif generation.computes_keys(install.version):
            ctx = key_context(generation, install, find_nvcc((index.fingerprint.get("nvcc") or {}).get("path")))
            if hasattr(ctx, "source"):
                by_template = {describe_source(ctx.source(spec)) or "": kid for kid, spec in plan.kernels.items()}
    except Exception as exc:  # naming is a courtesy: the refusal itself is already reported
        report.naming_error = f"{type(exc).__name__}: {exc}"
    for unit in report.units:
        for event in unit.get("refused", []):
            kid = by_entry.get(str(event.get("entry"))) or by_template.get(str(event.get("kernel")))
            if kid:
                event["planned_kernel"] = kid
