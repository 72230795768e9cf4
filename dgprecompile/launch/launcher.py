"""`dgprecompile launch` without click: preflight, the child's environment, running it, and what it missed.

The trainer runs unchanged in its own session, with the inherited stdin/stdout/stderr, under a supervisor
process that is its subreaper (launch/supervise.py: signals, the job's end, nothing outliving launch). The
launcher returns the job's exit code, or 128+N when signal N killed it, as a shell would; what a strict run
checks afterwards is launch/strictcheck.py's and cache/snapshot.py's.

Environment (every process the command starts inherits it):
* the profile's precompile switch(es) = 0, so SGLang never starts its runtime precompile;
* the profile's cache-dir variable(s) and DG_JIT_CACHE_DIR = the warmed cache;
* the DG_JIT_* values recorded in the cache's fingerprint (they are part of DeepGEMM's cache keys);
* legacy JIT: DG_JIT_NVCC_COMPILER = the nvcc the cache was warmed with (its path is in that JIT's keys);
* strict mode, C++ JITs: DG_JIT_NVCC_COMPILER = our nvcc stand-in (passes `--version` to the real nvcc, refuses
  compiles); legacy JIT: the startup hook makes its compilers raise;
* PYTHONPATH starts with the startup hook (tracing, legacy strict mode).
A value the user already set differently is never overridden: the launch is refused and says why.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import shutil
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dgprecompile.cache.store import CacheStore, resolve_cache_dir
from dgprecompile.cache.verify import COVERED_BY_SWEEP, VerifyReport, verify_roots
from dgprecompile.errors import EXIT_CHECK_FAILED, CheckFailed, EnvironmentProblem, InputError
from dgprecompile.host import scratch
from dgprecompile.host.toolchain import KEY_ENV_VARS, default_nvcc_path
from dgprecompile.keys.schemes import name_stem
from dgprecompile.launch.hook import HOOK_DIR, NVCC_STANDIN
from dgprecompile.launch.supervise import DEFAULT_KILL_GRACE, JobWatch, run_child
from dgprecompile.planning.plan import Plan, PlanRequest
from dgprecompile.planning.trace import Call, find_misses, read_trace_dir, write_misses

FALSY = ("0", "false", "no", "off", "n", "f")
DEFAULT_MISSES_FILE = "dgprecompile-misses.jsonl"
GUARD_DIR = "guard"  # under the launch's scratch: one "guard installed" record per Python process (strict)

# The SpecForge command of the report (sgl-project/SpecForge#264): SpecForge 49452e22, sglang 0.5.1.
# --tp-size/--ep-size/--model-path come from sglang's ServerArgs, --batch-size from BenchArgs.
DEFAULT_TRAIN_COMMAND = (
    "torchrun --standalone --nproc_per_node 8 scripts/train_eagle3_sgl_online.py "
    "--target-model-path Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8 "
    "--model-path Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8 "
    "--draft-model-config configs/qwen3-coder-480B-A35B-instruct-eagle3.json "
    "--train-data-path cache/dataset/opc.jsonl --output-dir outputs/Qwen3-Coder-480B-A35B-Instruct-FP8 "
    "--tp-size 8 --ep-size 8 --batch-size 1 --max-length 2048 --num-epochs 10 --learning-rate 1e-4 "
    "--chat-template qwen --cache-dir ./cache"
)


# ---- environment -----------------------------------------------------------------------------------------


@dataclass
class EnvSetting:
    name: str
    value: str
    why: str
    kept: bool = False  # the user had already set an equivalent value; left as it was


@dataclass
class LaunchEnv:
    env: dict[str, str]
    settings: list[EnvSetting]
    conflicts: list[str]
    notes: list[str] = field(default_factory=list)


def _alias(name: str) -> str | None:
    """The SGL_ spelling SGLang copies onto an SGLANG_ name at import (0.5.3rc2 on; never the other way)."""
    return "SGL_" + name[len("SGLANG_"):] if name.startswith("SGLANG_") else None


def _same_path(a: str, b: str) -> bool:
    return os.path.realpath(os.path.expanduser(a)) == os.path.realpath(os.path.expanduser(b))


def _same_roots(separator: str | None):
    """Path equality for a cache-dir variable, root by root where the runtime reads a list of roots."""
    def same(a: str, b: str) -> bool:
        if separator is None:
            return _same_path(a, b)
        left, right = a.split(separator), b.split(separator)
        return len(left) == len(right) and all(map(_same_path, left, right))
    return same


def _equal(a: str, b: str) -> bool:
    return a == b


@dataclass
class _EnvComposer:
    """The child's environment while compose_env builds it: each concern's helper sets its variables through
    put/off, which never override a value the user set (a differing one is a conflict, reported, not fixed)."""

    base_env: Mapping[str, str]
    env: dict[str, str]
    settings: list[EnvSetting] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def put(self, name: str, value: str, why: str, same: Callable[[str, str], bool] = _equal) -> None:
        have = self.base_env.get(name)
        if have is not None and not same(have, value):
            self.conflicts.append(f"{name}={have!r} is set, but {why} needs {name}={value!r}")
            return
        self.env[name] = value if have is None else have
        self.settings.append(EnvSetting(name, self.env[name], why, kept=have is not None))

    def off(self, name: str, why: str) -> None:
        have = self.base_env.get(name)
        if have is not None and have.strip().lower() in FALSY:
            self.settings.append(EnvSetting(name, have, why, kept=True))
        elif have is not None:
            self.conflicts.append(f"{name}={have!r} is set: it turns SGLang's runtime DeepGEMM precompile on, which "
                                  "starts compile threads in every rank (the failure launch exists to prevent); "
                                  f"unset it or set {name}=0")
        else:
            self.env[name] = "0"
            self.settings.append(EnvSetting(name, "0", why))

    def result(self) -> LaunchEnv:
        return LaunchEnv(self.env, self.settings, self.conflicts, self.notes)


def compose_env(plan: Plan, cache_dir: str, fingerprint: Mapping[str, Any], base_env: Mapping[str, str], *,
                strict: bool = True, trace_dir: str | None = None, run_dir: str | None = None,
                warm_hint: str = "", python: str | None = None, standin: str = NVCC_STANDIN,
                hook_dir: str = HOOK_DIR, shared: list[str] | tuple[str, ...] = (),
                families: list[tuple[str, str, str]] = ()) -> LaunchEnv:
    """The child's environment. Pure: reads only its arguments (and, for the C++ JIT, whether a path exists).

    One helper per concern, in this order (a later one sees what an earlier one set, and the settings table lists
    them in this order): SGLang's precompile off, the DeepGEMM cache dirs, SGLang's own JIT loader, the other
    families' caches (launch/capture.py), the fingerprint's key variables, the nvcc (recorded or stand-in), and
    last the startup hook's variables and PYTHONPATH."""
    c = _EnvComposer(base_env, dict(base_env))
    _precompile_env(c, plan)
    _deepgemm_cache_env(c, plan, cache_dir, shared)
    _jit_loader_env(c, plan, cache_dir, strict)
    _family_cache_env(c, families)
    _recorded_key_env(c, fingerprint)
    _nvcc_env(c, plan, fingerprint, strict, standin)
    _hook_env(c, plan, cache_dir, strict=strict, trace_dir=trace_dir, run_dir=run_dir, warm_hint=warm_hint,
              python=python, hook_dir=hook_dir, families=families)
    return c.result()


def _precompile_env(c: _EnvComposer, plan: Plan) -> None:
    """The profile's precompile switch(es) off, and no SGL_ spelling that SGLang would copy back on."""
    profile = plan.profile
    base_env = c.base_env
    precompile = profile.env_names("precompile")
    for name in precompile:
        c.off(name, f"sglang {profile.id}: runtime precompile off")
        alias = _alias(name)
        if alias and alias not in precompile and alias in base_env and base_env[alias].strip().lower() not in FALSY:
            c.conflicts.append(f"{alias}={base_env[alias]!r} is set: this sglang copies it onto {name} at import, "
                               "turning the runtime precompile back on; unset it")


def _deepgemm_cache_env(c: _EnvComposer, plan: Plan, cache_dir: str, shared: list[str] | tuple[str, ...]) -> None:
    """The profile's cache-dir variable(s) and DG_JIT_CACHE_DIR at the warmed cache (then the shared roots)."""
    profile = plan.profile
    deepgemm = profile.deepgemm
    base_env = c.base_env
    cache_names = profile.env_names("cache_dir") + ["DG_JIT_CACHE_DIR"]
    roots = deepgemm.cache_dir_value(cache_dir, shared)  # the warmed cache, then any read-only shared roots
    same_roots = _same_roots(deepgemm.root_separator)
    for name in cache_names:
        c.put(name, roots, "the warmed cache" + (" and the shared caches after it" if shared else ""),
              same=same_roots)
        alias = _alias(name)
        if alias and alias not in cache_names and alias in base_env and not same_roots(base_env[alias], roots):
            c.conflicts.append(f"{alias}={base_env[alias]!r} is set: this sglang copies it onto {name}, away from "
                               f"the warmed cache {cache_dir}; unset it")


def _jit_loader_env(c: _EnvComposer, plan: Plan, cache_dir: str, strict: bool) -> None:
    """SGLang's own JIT loader: its cache variable(s) at the family's area of the cache, and (strict) the
    release's own switch that refuses runtime builds."""
    family = plan_jit_family(plan)
    if family is None:
        return
    for name, value in family.launch_env(cache_dir):
        c.put(name, value, f"SGLang's own JIT modules ({family.label}): loaded from here, warmed"
              if plan.jit_modules else f"SGLang's own JIT modules ({family.label}): built here once", same=_same_path)
    if strict:
        for name, value in family.strict_env().items():
            c.put(name, value, "strict: the release's own switch refuses runtime JIT builds")


def _family_cache_env(c: _EnvComposer, families: list[tuple[str, str, str]] | tuple[()]) -> None:
    """The other JIT families' cache variables (launch/capture.py); their DGPRECOMPILE_ switches go to the hook."""
    for name, value, why in [f for f in families if not f[0].startswith("DGPRECOMPILE_")]:
        c.put(name, value, why, same=_same_path if name.endswith(("_DIR", "_BASE")) else _equal)


def _recorded_key_env(c: _EnvComposer, fingerprint: Mapping[str, Any]) -> None:
    """The DG_JIT_* values the cache was warmed with (part of DeepGEMM's cache keys); one it lacks must be unset."""
    base_env = c.base_env
    recorded_env = dict(fingerprint.get("env") or {})
    for name in KEY_ENV_VARS:
        if name in recorded_env:
            c.put(name, str(recorded_env[name]), "recorded in the cache fingerprint (part of the cache key)")
        elif name in base_env and fingerprint:
            c.conflicts.append(f"{name}={base_env[name]!r} is set, but the cache was warmed without it: it changes "
                               "DeepGEMM's cache keys, so every warmed entry would miss; unset it (or warm with it "
                               "set)")


def _nvcc_env(c: _EnvComposer, plan: Plan, fingerprint: Mapping[str, Any], strict: bool, standin: str) -> None:
    """A Python JIT (strict_by "hook"): the nvcc it was warmed with; a C++ JIT in strict mode: the stand-in."""
    deepgemm = plan.profile.deepgemm
    recorded_nvcc = (fingerprint.get("nvcc") or {}).get("path")
    if deepgemm.strict_by == "hook":  # a Python JIT: the startup hook refuses its compiles
        _python_jit_nvcc_env(c, plan, fingerprint, recorded_nvcc)
    elif strict:
        _standin_env(c, recorded_nvcc, standin)


def _python_jit_nvcc_env(c: _EnvComposer, plan: Plan, fingerprint: Mapping[str, Any], recorded_nvcc: str | None
                         ) -> None:
    """No NVRTC switch over an NVCC cache, and the recorded nvcc path where it is part of the JIT's keys."""
    deepgemm = plan.profile.deepgemm
    base_env = c.base_env
    if int(fingerprint.get("env", {}).get("DG_JIT_USE_NVRTC", 0) or 0) == 0:
        for name in ("SGL_DG_USE_NVRTC",):
            if base_env.get(name, "0").strip().lower() not in FALSY:
                c.conflicts.append(f"{name}={base_env[name]!r} is set: the cache holds NVCC builds, and NVRTC "
                                   "builds have other keys; unset it")
    if recorded_nvcc and "nvcc.path" in deepgemm.fingerprint_fields:
        c.put("DG_JIT_NVCC_COMPILER", recorded_nvcc, f"{deepgemm.id} JIT: the nvcc path is part of its cache key")
    else:
        c.notes.append("the cache has no fingerprint: DG_JIT_NVCC_COMPILER left as found")


def _standin_env(c: _EnvComposer, recorded_nvcc: str | None, standin: str) -> None:
    """Strict, C++ JIT: DG_JIT_NVCC_COMPILER is our stand-in, which runs the real nvcc for `--version` only."""
    base_env = c.base_env
    real = base_env.get("DG_JIT_NVCC_COMPILER")
    why_real = "your DG_JIT_NVCC_COMPILER"
    if not real:
        if recorded_nvcc and os.path.isfile(recorded_nvcc):
            real, why_real = recorded_nvcc, "the nvcc recorded in the cache fingerprint"
        else:
            real, why_real = default_nvcc_path(dict(base_env)), "the nvcc the runtime would find"
    if not real:
        raise EnvironmentProblem("strict mode needs the real nvcc for the JIT's `nvcc --version` (part of its "
                                 "cache key), and none was found",
                                 hint="set DG_JIT_NVCC_COMPILER or CUDA_HOME, or use --no-strict")
    c.env["DG_JIT_NVCC_COMPILER"] = standin
    c.settings.append(EnvSetting("DG_JIT_NVCC_COMPILER", standin, "strict: nvcc stand-in refuses runtime compiles"))
    c.env["DGPRECOMPILE_REAL_NVCC"] = real
    c.settings.append(EnvSetting("DGPRECOMPILE_REAL_NVCC", real, f"stand-in runs it for --version ({why_real})"))


def _hook_env(c: _EnvComposer, plan: Plan, cache_dir: str, *, strict: bool, trace_dir: str | None,
              run_dir: str | None, warm_hint: str, python: str | None, hook_dir: str,
              families: list[tuple[str, str, str]] | tuple[()]) -> None:
    """The startup hook's DGPRECOMPILE_* variables (any other, from an outer launch, dropped) and PYTHONPATH."""
    hook_vars = _hook_vars(c, plan, cache_dir, strict=strict, trace_dir=trace_dir, run_dir=run_dir,
                           warm_hint=warm_hint, python=python, families=families)
    env = c.env
    stale = [n for n in env if n.startswith("DGPRECOMPILE_") and n not in hook_vars and n != "DGPRECOMPILE_REAL_NVCC"]
    for name in stale:
        del env[name]  # ours; a stale value from an outer launch must not leak in
    env.update(hook_vars)
    _hook_pythonpath(c, plan, strict=strict, trace_dir=trace_dir, hook_dir=hook_dir)


def _hook_vars(c: _EnvComposer, plan: Plan, cache_dir: str, *, strict: bool, trace_dir: str | None,
               run_dir: str | None, warm_hint: str, python: str | None,
               families: list[tuple[str, str, str]] | tuple[()]) -> dict[str, str]:
    """What the startup hook reads: strict mode, the plan's kernels and where to record events, guards and calls."""
    from dgprecompile.runtimes import hook_targets

    hook_vars = {"DGPRECOMPILE_STRICT": "1" if strict else "0", "DGPRECOMPILE_GENERATION": plan.profile.deepgemm.id,
                 "DGPRECOMPILE_JIT_HOOKS": ",".join(hook_targets()),
                 "DGPRECOMPILE_CACHE_DIR": cache_dir, "DGPRECOMPILE_PYTHON": python or sys.executable,
                 "DGPRECOMPILE_WARM_HINT": warm_hint}
    if run_dir:
        hook_vars["DGPRECOMPILE_PLAN_INFO"] = os.path.join(run_dir, "plan-info.json")
        hook_vars["DGPRECOMPILE_EVENTS"] = os.path.join(run_dir, "events.jsonl")
        if strict:  # each Python process of the job proves its guard is on by a record here
            hook_vars["DGPRECOMPILE_GUARD_DIR"] = os.path.join(run_dir, GUARD_DIR)
    if trace_dir:
        hook_vars["DGPRECOMPILE_TRACE_DIR"] = str(trace_dir)
        c.settings.append(EnvSetting("DGPRECOMPILE_TRACE_DIR", str(trace_dir), "trace every DeepGEMM call"))
    for name, value, why in families:
        if name.startswith("DGPRECOMPILE_"):  # ours (the hook's per-family strict switch): never the user's
            hook_vars[name] = value
            c.settings.append(EnvSetting(name, value, why))
    return hook_vars


def _hook_pythonpath(c: _EnvComposer, plan: Plan, *, strict: bool, trace_dir: str | None, hook_dir: str) -> None:
    """PYTHONPATH starts with the startup hook; its settings row says what the hook does in this launch."""
    from dgprecompile.runtimes import hook_targets

    generation = plan.profile.deepgemm.id
    old = c.base_env.get("PYTHONPATH")
    c.env["PYTHONPATH"] = hook_dir + (os.pathsep + old if old else "")
    active = (([f"{generation} strict"] if strict and plan.profile.deepgemm.strict_by == "hook" else [])
              + ([f"{', '.join(hook_targets())} builds refused"] if strict and hook_targets() else [])
              + (["trace"] if trace_dir else []))
    c.settings.append(EnvSetting("PYTHONPATH", hook_dir + (os.pathsep + "..." if old else ""),
                                 "startup hook: " + (", ".join(active) if active else "inactive")))


# ---- preflight ---------------------------------------------------------------------------------------


def all_entries(store: CacheStore) -> list[str]:
    """Every runtime entry of the cache: DeepGEMM's by name, SGLang's JIT modules as tvm-ffi/<name> (the other
    families' entries are reported per family: launch/capture.py)."""
    from dgprecompile.cache.store import AREAS, ENTRIES
    from dgprecompile.runtimes.captured import FILED_AREAS

    return [e if area == ENTRIES else f"{area}/{e}" for area in AREAS if area not in FILED_AREAS
            for e in store.list_entries(area)]


def triton_cache_dir(env: Mapping[str, str]) -> str:
    """Where Triton keeps compiled kernels for a process with environment ``env`` (its default: ~/.triton/cache)."""
    return env.get("TRITON_CACHE_DIR") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".triton", "cache")


def _listdir(path: str) -> set[str]:
    try:
        return set(os.listdir(path))
    except OSError:
        return set()


def plan_jit_family(plan: Plan):
    """The JitFamily of the plan's modules, else of its exact sglang release (None: no JIT of its own)."""
    from dgprecompile.runtimes import family_for, get_family

    ids = sorted({m.family for m in plan.jit_modules.values()})
    return get_family(ids[0]) if ids else family_for(plan.sglang_version)


def jit_name_prefixes(plan: Plan) -> list[str]:
    """The runtime names of the plan's SGLang JIT modules, as far as they are known without sglang installed
    (the family's name_stem: the tvm-ffi family's less the source hash)."""
    family = plan_jit_family(plan)
    if family is None or not plan.jit_modules:
        return []
    return [name_stem(family, plan.sglang_version or "", m) for m in plan.jit_modules.values()]


def jit_areas() -> list[str]:
    from dgprecompile.runtimes import JIT_FAMILIES

    return sorted({f.area for f in JIT_FAMILIES.values()})


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


# ---- the whole launch ------------------------------------------------------------------------------------


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


@dataclass
class Miss:
    call: Call
    kernels: list[str]


@dataclass
class LaunchResult:
    exit_code: int
    strict: bool
    new_entries: list[str] = field(default_factory=list)
    refusals: list[dict[str, Any]] = field(default_factory=list)
    refusals_outside_plan: bool = False  # every refused kernel is one the plan does not list
    misses: list[Miss] = field(default_factory=list)
    misses_path: str | None = None
    calls_recorded: int | None = None  # non-strict: calls the trace recorded (None: not traced)
    trace_warning: str | None = None
    cache_dir: str = ""
    warm_hint: str = ""
    new_jit_modules: list[str] = field(default_factory=list)  # SGLang JIT modules built during the run (<area>/<dir>)
    new_triton: list[str] = field(default_factory=list)  # Triton kernels compiled during the run (not warmed)
    triton_cache_dir: str = ""
    unguarded: dict[int, str] = field(default_factory=dict)  # strict: Python processes without the guard's record
    guard_failures: list[str] = field(default_factory=list)  # strict: processes whose guard could not install
    strict_off: dict[int, str] = field(default_factory=dict)  # strict: processes whose guard says strict was off
    cache_changes: dict[str, list[str]] = field(default_factory=dict)  # strict: added/changed/removed entries
    left_behind: list[str] = field(default_factory=list)  # still running when the job ended (then ended)
    lost: str | None = None  # the supervisor died before the job ended
    signals: list[int] = field(default_factory=list)  # signals the launcher received (and forwarded)
    killed: bool = False  # the grace ran out and what was left of the job got SIGKILL

    @property
    def strict_failed(self) -> bool:
        """A strict run in which anything was compiled, added to, changed in or removed from the cache, anything
        was refused (caught by the job or not), a Python process ran without its guard or with strict mode off,
        or the job left processes behind."""
        return self.strict and bool(self.new_entries or self.new_jit_modules or self.unguarded or self.guard_failures
                                    or self.strict_off or any(self.cache_changes.values()) or self.refusals
                                    or self.left_behind or self.lost)
    families: list[Any] = field(default_factory=list)  # launch.capture.FamilyReport per JIT family
    capture: bool = False

    @property
    def hidden_misses(self) -> dict[str, list[str]]:
        """Capture: entries holding a planned kernel (a warm's miss), never filed (launch/capture.py)."""
        return {name: kernels for f in self.families for name, kernels in getattr(f, "hidden", {}).items()}

    @property
    def return_code(self) -> int:
        # the job's own exit code (128+N when signal N ended it, or when the launcher got signal N), as a shell
        # reports; a strict run that failed its guarantee is not a success even where the job exited 0
        if self.exit_code == 0 and (self.strict_failed or self.hidden_misses):
            return EXIT_CHECK_FAILED
        return self.exit_code

    def to_dict(self) -> dict[str, Any]:
        return {"exit_code": self.exit_code, "strict": self.strict, "cache_dir": self.cache_dir,
                "new_entries": self.new_entries, "new_jit_modules": self.new_jit_modules, "refusals": self.refusals,
                "misses": [{**m.call.to_dict(), "kernels": m.kernels} for m in self.misses],
                "misses_path": self.misses_path, "calls_recorded": self.calls_recorded,
                "new_triton": self.new_triton, "triton_cache_dir": self.triton_cache_dir,
                "unguarded": {str(k): v for k, v in sorted(self.unguarded.items())},
                "guard_failures": self.guard_failures, "strict_off": {str(k): v for k, v in sorted(self.strict_off.items())},
                "cache_changes": self.cache_changes, "left_behind": self.left_behind, "lost": self.lost,
                "signals": self.signals, "killed": self.killed,
                "capture": self.capture, "families": [f.to_dict() for f in self.families]}


def _read_events(path: Path) -> list[dict[str, Any]]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, json.JSONDecodeError):
        return []


def _preflight_failure(plan: Plan, report: VerifyReport) -> str:
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
    report = verify_roots(plan, store, [CacheStore(d) for d in opts.shared_cache])
    if not report.complete and not opts.allow_missing:
        raise CheckFailed(_preflight_failure(plan, report),
                          hint=f"warm it first: {hint}  (or pass --allow-missing to start anyway)")
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
        from dgprecompile.launch.capture import family_env, relocate

        try:  # entries filed at another root: Triton's group files name absolute paths, it would miss them here
            moved = relocate(store)
        except OSError:  # a read-only cache: left as it is (Triton misses them; strict refuses by name)
            moved = []
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
        triton_before = _listdir(triton_dir)
        from dgprecompile.launch import capture

        families_before = capture.snapshot(store.root)
        from dgprecompile.cache import snapshot

        cache_before = snapshot.take(store.root) if opts.strict else {}
        watch = JobWatch(scan=opts.strict)
        code = run_child(opts.command, prepared.env.env, kill_grace=opts.kill_grace, watch=watch, strict=opts.strict)
        result = LaunchResult(code, opts.strict, cache_dir=prepared.cache_dir, warm_hint=prepared.warm_hint,
                              signals=list(watch.signals), killed=watch.killed, capture=opts.capture,
                              left_behind=watch.left_behind, lost=watch.lost)
        if opts.strict:
            from dgprecompile.launch.strictcheck import read_guards

            result.unguarded, result.guard_failures, result.strict_off = read_guards(prepared.run_dir / GUARD_DIR,
                                                                                     watch)
            result.cache_changes = snapshot.diff(cache_before, snapshot.take(store.root)).to_dict()
        result.families = capture.compiled_during(store.root, families_before)
        if opts.capture:
            capture.file_captured(store, result.families, prepared.env.env, capture.planned_kernels(plan),
                                  entry_mib=opts.capture_entry_mib)
        result.refusals = [e for e in _read_events(prepared.run_dir / "events.jsonl") if e.get("event") == "refused"]
        result.refusals_outside_plan = bool(result.refusals) and all(
            e.get("kernel") and _names_planned_kernels(e) and e["kernel"] not in plan.kernels
            for e in result.refusals)
        new = sorted(set(all_entries(store)) - before)
        areas = jit_areas()
        result.new_jit_modules = [e for e in new if e.split("/", 1)[0] in areas]
        result.new_entries = [e for e in new if e not in result.new_jit_modules]
        result.triton_cache_dir = triton_dir
        result.new_triton = sorted(_listdir(triton_dir) - triton_before)
        if not opts.strict:
            _collect_misses(opts, plan, prepared, result)
        return result
    finally:
        prepared.cleanup()


def _names_planned_kernels(event: Mapping[str, Any]) -> bool:
    """Whether a refusal names the kernel by its plan id: the runtimes the startup hook refuses (strict_by "hook")
    report the kernel they were asked for; the nvcc stand-in and the other families name what they would build."""
    from dgprecompile.runtimes import GENERATIONS

    generation = GENERATIONS.get(str(event.get("generation")))
    return generation is not None and generation.strict_by == "hook"


def _collect_misses(opts: LaunchOptions, plan: Plan, prepared: PreparedLaunch, result: LaunchResult) -> None:
    calls = []
    trace_dir = prepared.trace_dir
    if trace_dir and os.path.isdir(trace_dir):
        try:
            _headers, calls = read_trace_dir(Path(trace_dir))
        except InputError as exc:
            result.trace_warning = f"could not read the trace: {exc.message}"
    misses = find_misses(plan, calls)
    result.misses = [Miss(call, kernels) for call, kernels in misses]
    result.calls_recorded = len(calls)
    if not misses and not result.new_entries and not opts.misses_path:
        return  # nothing to warm: no file left behind in the working directory (asked for with --misses, it is)
    path = opts.misses_path or DEFAULT_MISSES_FILE
    write_misses(Path(path), plan, misses, {"cache_dir": prepared.cache_dir, "new_entries": result.new_entries,
                                            "calls_recorded": len(calls)})
    result.misses_path = os.path.abspath(path)


def command_from_config(config: Mapping[str, Any]) -> list[str] | None:
    value = config.get("command")
    if value is None:
        return None
    if isinstance(value, str):
        try:
            return shlex.split(value)
        except ValueError as exc:
            raise InputError(f"train.yaml command: {exc}", hint="quote the command as one YAML string or a list") from None
    if isinstance(value, list) and all(isinstance(x, (str, int, float)) for x in value):
        return [str(x) for x in value]
    raise InputError("train.yaml `command` must be a string or a list of strings", hint="see train.yaml")


def resolve_command(argv: list[str], config: Mapping[str, Any]) -> tuple[list[str], str | None]:
    """The job to run: the command line after ``--``, else the config's `command:`, else (a config without one)
    the default SpecForge command. Returns it and a note saying where it came from, if not the command line."""
    argv = list(argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if argv:
        return argv, None
    argv = command_from_config(config) or []
    if argv:
        return argv, None
    if config:
        return shlex.split(DEFAULT_TRAIN_COMMAND), "no `command:` in the config: using the default SpecForge command"
    raise InputError("no command to launch", hint="dgprecompile launch --manifest plan.yaml -- torchrun ...")


def looks_like_specforge(argv: list[str]) -> bool:
    """A 2025 SpecForge training command line (in-process SGLang), from which the plan's tp/ep/largest forward can
    be read. SGLang server commands are recognised before this (planning.server_cmd.find_server_command)."""
    return any("train_eagle3" in a for a in argv) or "--tp-size" in argv


def specforge_train_config(argv: list[str]) -> str | None:
    """The run config of `specforge train -c run.yaml` (SpecForge 0.2.0 cli.py:173), else None."""
    for i, arg in enumerate(argv[:-1]):
        if (arg == "specforge" or arg.endswith("/specforge")) and argv[i + 1] == "train":
            rest = argv[i + 2:]
            for j, a in enumerate(rest):
                if a in ("-c", "--config") and j + 1 < len(rest):
                    return rest[j + 1]
                if a.startswith("--config="):
                    return a.split("=", 1)[1]
    return None


def job_command(given: list[str], config: Mapping[str, Any], plan_request: PlanRequest) -> tuple[list[str], str | None]:
    """The job to run (resolve_command); with only --specforge-config, SpecForge 0.2.0's own trainer on it."""
    if not [a for a in given if a != "--"] and plan_request.specforge_config is not None:
        given = ["specforge", "train", "-c", plan_request.specforge_config]  # SpecForge 0.2.0 cli.py:173
    return resolve_command(given, config)


def request_for_job(plan_request: PlanRequest, argv: list[str], manifest: str | None) -> PlanRequest:
    """What the job's own command line says about the plan, where no option said it: an SGLang server command,
    `specforge train -c run.yaml`, or a 2025 SpecForge trainer command. launch turns SGLang's own precompile off."""
    from dgprecompile.planning.server_cmd import find_server_command

    undecided = (manifest is None and plan_request.specforge_cmd is None and plan_request.sglang_cmd is None
                 and plan_request.specforge_config is None)
    if undecided and plan_request.model is None and find_server_command(argv) is not None:
        plan_request = dataclasses.replace(plan_request, sglang_cmd=list(argv))  # the server itself
    elif undecided and plan_request.model is None and specforge_train_config(argv) is not None:
        plan_request = dataclasses.replace(plan_request, specforge_config=specforge_train_config(argv))
    elif undecided and plan_request.max_tokens is None and looks_like_specforge(argv):
        plan_request = dataclasses.replace(plan_request, specforge_cmd=shlex.join(argv))
    if plan_request.sglang_precompile is None:
        plan_request = dataclasses.replace(plan_request, sglang_precompile=False)
    return plan_request
