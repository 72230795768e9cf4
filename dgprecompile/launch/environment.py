"""The job's environment under `dgprecompile launch`, composed from the plan, the cache and the user's own.

Every process the command starts inherits it:
* the profile's precompile switch(es) = 0, so SGLang never starts its runtime precompile;
* the profile's cache-dir variable(s) and DG_JIT_CACHE_DIR = the warmed cache;
* the DG_JIT_* values recorded in the cache's fingerprint (they are part of DeepGEMM's cache keys);
* legacy JIT: DG_JIT_NVCC_COMPILER = the nvcc the cache was warmed with (its path is in that JIT's keys);
* strict mode, C++ JITs: DG_JIT_NVCC_COMPILER = our nvcc stand-in (passes `--version` to the real nvcc, refuses
  compiles); legacy JIT: the startup hook makes its compilers raise;
* strict (and --capture): every other JIT family's cache variable at its area of the cache, whatever the cache holds
  (launch/capture.py family_env): a compile lands where it is refused or counted;
* PYTHONPATH starts with the startup hook (tracing, legacy strict mode).
A value the user already set differently is never overridden: it is a conflict, and launch refuses and says why.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dgprecompile.errors import EnvironmentProblem
from dgprecompile.host.toolchain import KEY_ENV_VARS, default_nvcc_path, driver_libcuda_dirs
from dgprecompile.keys.schemes import name_stem
from dgprecompile.launch.hook import HOOK_DIR, NVCC_STANDIN
from dgprecompile.planning.plan import Plan

FALSY = ("0", "false", "no", "off", "n", "f")
GUARD_DIR = "guard"  # under the launch's scratch: one "guard installed" record per Python process (strict)


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
    """The child's environment. Pure: reads only its arguments (and whether a path exists: for the C++ JIT, and the
    libcuda.so.1 Triton's key may hold, and where it is not there, the folders the loader finds the driver in).

    One helper per concern, in this order (a later one sees what an earlier one set, and the settings table lists
    them in this order): SGLang's precompile off, the DeepGEMM cache dirs, SGLang's own JIT loader, the other
    families' caches (launch/capture.py), Triton's libcuda folder, the fingerprint's key variables, the nvcc
    (recorded or stand-in), and last the startup hook's variables and PYTHONPATH."""
    c = _EnvComposer(base_env, dict(base_env))
    _precompile_env(c, plan)
    for runtime in job_runtimes(plan):  # each runtime the job runs, as its kind sets it up (RUNTIME_ENV)
        RUNTIME_ENV[runtime.kind](c, plan, runtime, cache_dir, strict=strict, shared=shared)
    _family_cache_env(c, families)
    _triton_libcuda_env(c)
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


def _deepgemm_cache_env(c: _EnvComposer, plan: Plan, deepgemm, cache_dir: str, *, strict: bool,
                        shared: list[str] | tuple[str, ...]) -> None:
    """The profile's cache-dir variable(s) and DG_JIT_CACHE_DIR at the warmed cache (then the shared roots)."""
    profile = plan.profile
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


def _jit_loader_env(c: _EnvComposer, plan: Plan, family, cache_dir: str, *, strict: bool,
                    shared: list[str] | tuple[str, ...]) -> None:
    """SGLang's own JIT loader: its cache variable(s) at the family's area of the cache, and (strict) the
    release's own switch that refuses runtime builds."""
    for name, value in family.launch_env(cache_dir):
        c.put(name, value, f"SGLang's own JIT modules ({family.label}): loaded from here, warmed"
              if plan.jit_modules else f"SGLang's own JIT modules ({family.label}): built here once", same=_same_path)
    if strict:
        for name, value in family.strict_env().items():
            c.put(name, value, "strict: the release's own switch refuses runtime JIT builds")


def _flashinfer_env(c: _EnvComposer, plan: Plan, runtime, cache_dir: str, *, strict: bool,
                    shared: list[str] | tuple[str, ...]) -> None:
    """FlashInfer's target archs as the warm built its modules for: they name the modules' directory (jit/env.py),
    which FlashInfer would otherwise take from the GPUs it sees. Its workspace variable is the captured family's
    (launch/capture.py family_env)."""
    archs = " ".join(sorted({it.arch for it in plan.flashinfer.values()}))
    c.put("FLASHINFER_CUDA_ARCH_LIST", archs, f"{runtime.label}: the archs the cache's modules were built for "
          "(part of their directory)")


# how launch sets up each runtime the job runs, by its kind (runtimes/base.py Runtime.kind): the captured families
# are set up from the cache's areas (launch/capture.py family_env), the Triton MoE's entries are Triton's (ditto)
RUNTIME_ENV = {"deepgemm": _deepgemm_cache_env, "sglang-jit": _jit_loader_env, "flashinfer-module": _flashinfer_env}


def grad_mode_conflict(plan: Plan, command: list[str], base_env: Mapping[str, str]) -> str | None:
    """Where the job's forwards would run under another autograd mode than the plan's torch.compile graphs were
    planned (and warmed) under, why: their entries differ, so every graph would compile again (strict refuses it).
    The job's mode is read as plan reads it: an assignment before the server command, else the environment."""
    from dgprecompile.planning.server_cmd import find_server_command, grad_mode_from
    from dgprecompile.runtimes.inductor import INDUCTOR_GRAPHS

    planned = {item.grad for item in plan.inductor.values()}
    if not planned:
        return None
    variable = INDUCTOR_GRAPHS.grad_variable
    job = grad_mode_from(find_server_command(command), base_env)
    if planned == {job}:
        return None
    shown = INDUCTOR_GRAPHS.grad_shown
    return (f"the job runs its forwards under {shown(job)} ({variable}="
            f"{base_env.get(variable, '') or 'unset'} as it has it), but the plan's torch.compile graphs were "
            f"planned under {' and '.join(shown(g) for g in sorted(planned))}: each would compile again")


def job_runtimes(plan: Plan) -> list:
    """The runtimes of the plan's job whose caches launch points at the warmed cache: its DeepGEMM generation, the
    JIT family of its planned modules (else of its exact sglang release, which builds its modules once), and
    FlashInfer's modules where it plans them."""
    from dgprecompile.runtimes import FLASHINFER_MODULES

    family = plan_jit_family(plan)
    return [plan.profile.deepgemm, *([family] if family is not None else []),
            *([FLASHINFER_MODULES] if plan.flashinfer else [])]


def _family_cache_env(c: _EnvComposer, families: list[tuple[str, str, str]] | tuple[()]) -> None:
    """The other JIT families' cache variables (launch/capture.py); their DGPRECOMPILE_ switches go to the hook."""
    for name, value, why in [f for f in families if not f[0].startswith("DGPRECOMPILE_")]:
        c.put(name, value, why, same=_same_path if name.endswith(("_DIR", "_BASE")) else _equal)


def _triton_libcuda_env(c: _EnvComposer, folder: str | None = None,
                        driver: Callable[[], list[str]] = driver_libcuda_dirs) -> None:
    """Triton 3.8 keys its ``cuda_utils`` by the folders of the machine's libcuda.so.1 (TRITON_LIBCUDA_PATH, else
    ldconfig's): the job gets the folder warm keyed with, by the rule both follow (runtimes/triton_moe.py
    ``job_libcuda_dir``): the user's own value is kept (a warm under the same value keys with it); else the data
    file's folder (or ``folder``) is set on every machine. Where this machine's driver lies elsewhere (``driver``:
    the folders its loader finds libcuda.so.1 in), the module loads it through the loader's search, and a module
    Triton builds at run time (non-strict) links against it through LIBRARY_PATH, which the key does not hold."""
    from dgprecompile.runtimes import TRITON_MOE

    name = "TRITON_LIBCUDA_PATH"
    value, whose = TRITON_MOE.job_libcuda_dir(c.base_env, folder)
    if whose == "yours":
        c.settings.append(EnvSetting(name, value, "Triton's libcuda folder, yours (warm with the same: "
                                     "Triton 3.8's cuda_utils key holds it)", kept=True))
        return
    c.put(name, value, "Triton's libcuda folder, as warm keyed Triton 3.8's cuda_utils with it")
    if c.env.get(name) != value or os.path.exists(os.path.join(value, "libcuda.so.1")):  # a conflict, or there
        return
    found = driver()
    if not found:  # no driver here: nothing to link against (a job without a GPU)
        return
    joined = ":".join([*found, *filter(None, c.env.get("LIBRARY_PATH", "").split(":"))])
    c.env["LIBRARY_PATH"] = joined
    c.settings.append(EnvSetting("LIBRARY_PATH", joined, f"this machine's libcuda.so.1 ({', '.join(found)}), for "
                                 f"a Triton module linked at run time while {name} names {value}"))


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


def plan_jit_family(plan: Plan):
    """The JitFamily of the plan's modules, else of its exact sglang release (None: no JIT of its own)."""
    from dgprecompile.runtimes import family_for

    modules = sorted(plan.jit_modules.values(), key=lambda m: m.runtime_id)  # a plan has one family's (warm refuses two)
    return plan.runtime_of(modules[0]) if modules else family_for(plan.sglang_version)


def jit_name_prefixes(plan: Plan) -> list[str]:
    """The runtime names of the plan's SGLang JIT modules, as far as they are known without sglang installed
    (the family's name_stem: the tvm-ffi family's less the source hash)."""
    family = plan_jit_family(plan)
    if family is None or not plan.jit_modules:
        return []
    return [name_stem(family, plan.sglang_version or "", m) for m in plan.jit_modules.values()]


def triton_cache_dir(env: Mapping[str, str]) -> str:
    """Where Triton keeps compiled kernels for a process with environment ``env`` (its default: ~/.triton/cache)."""
    return env.get("TRITON_CACHE_DIR") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".triton", "cache")
