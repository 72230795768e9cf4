"""`doctor`'s checks: the toolchain found, the task limits, the task burst of SGLang's runtime precompile, a verdict.

No torch and no DeepGEMM import: versions come from importlib.metadata, the GPU from nvidia-smi, limits from
/proc and /sys (see limits.py). Every probe degrades to 'unknown' instead of failing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from dgprecompile.cache.store import CacheStore
from dgprecompile.diagnostics.limits import Limits, read_limits
from dgprecompile.errors import EXIT_CHECK_FAILED, EXIT_OK, DGError
from dgprecompile.fsutil import tree_size
from dgprecompile.host.toolchain import find_deepgemm, locate_nvcc, probe_nvcc
from dgprecompile.planning.plan import Plan
from dgprecompile.planning.profiles import Profile
from dgprecompile.runtimes import GENERATIONS

# Tasks of one nvcc compile at its peak, counting nvcc itself: measured with nvcc 13.0.88 compiling a legacy
# DeepGEMM kernel and a tiny .cu (polling /proc for the descendants: nvcc -> gcc/cudafe++/cicc/ptxas stages).
NVCC_TREE_TASKS = 4
# Threads a CUDA + NCCL training rank holds besides BLAS/OMP pools and its main thread (CUDA driver event and
# watchdog threads, NCCL proxy/watchdog threads, autograd and pin-memory threads): an assumption, override with
# --base-tasks.
RUNTIME_THREADS = 8


# ---- environment probes ----------------------------------------------------------------------------------


def nvcc_version(path: str) -> str | None:
    try:
        text = probe_nvcc(path).version_text
    except DGError:
        return None
    match = re.search(r"release (\d+\.\d+), V([\d.]+)", text)
    return match.group(2) if match else None


def dist_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def deepgemm_generation() -> dict[str, Any]:
    """Which DeepGEMM is importable, found without importing it."""
    install = find_deepgemm()
    if install is None:
        return {"distribution": None, "version": None, "generation": "not installed"}
    return {"distribution": install.distribution, "version": install.version,
            "generation": GENERATIONS[install.generation].label if install.generation in GENERATIONS
                          else install.generation,
            "package_dir": install.package_dir}


def gpu_info(nvidia_smi: str | None = None) -> dict[str, Any]:
    from dgprecompile.planning.plan import gpu_named, gpu_sms

    exe = nvidia_smi or shutil.which("nvidia-smi")
    if not exe:
        return {"name": None, "count": 0, "num_sms": None, "gpu": None, "note": "nvidia-smi not found"}
    try:
        res = subprocess.run([exe, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return {"name": None, "count": 0, "num_sms": None, "gpu": None, "note": f"nvidia-smi failed: {exc}"}
    names = [n.strip() for n in res.stdout.splitlines() if n.strip()]
    if res.returncode != 0 or not names:
        return {"name": None, "count": 0, "num_sms": None, "gpu": None,
                "note": (res.stderr or res.stdout).strip()[:200]}
    key = gpu_named(names[0])  # the --gpu a plan for this GPU names, as the proofs pick it
    sms = gpu_sms()[key] if key else None
    return {"name": names[0], "count": len(names), "num_sms": sms, "gpu": key,
            "note": "" if sms else "SM count unknown for this GPU name (pass --num-sms to plan)"}


def gpu_detail(gpu: dict[str, Any]) -> str:
    """The GPU row's detail: what nvidia-smi names, its SMs and the ``--gpu`` of its row of data/gpus.yaml."""
    if not gpu["name"]:
        return f"none seen ({gpu['note']})"
    if not gpu["gpu"]:
        return f"{gpu['count']} x {gpu['name']}, ? SMs: {gpu['note']}"
    return f"{gpu['count']} x {gpu['name']}, {gpu['num_sms']} SMs (plan --gpu {gpu['gpu']})"


def cache_info(profile: Profile, plan: Plan | None, cache_dir: str | Path) -> dict[str, Any]:
    path = Path(cache_dir)
    info: dict[str, Any] = {"path": str(path), "exists": path.is_dir(), "writable": None, "bytes": None,
                            "coverage": "unknown"}
    probe = path if path.is_dir() else next((p for p in path.parents if p.exists()), None)
    info["writable"] = bool(probe and os.access(probe, os.W_OK | os.X_OK))
    if path.is_dir():
        info["bytes"] = tree_size(path)
    if plan is not None and path.is_dir():
        try:  # the warm index, when there is one; read-only
            store = CacheStore(path)
            if Path(store.index_path).is_file():
                indexed = store.read_index().kernels
                have = sum(1 for kid in plan.kernels if kid in indexed)
                info["coverage"] = f"{have} of {plan.total_kernels} planned kernels indexed"
            else:
                info["coverage"] = "unknown (no dgprecompile index: not warmed by dgprecompile)"
        except DGError as exc:  # a damaged index must not stop the other checks
            info["coverage"] = f"unknown ({exc.message})"
    return info



def every_rank_precompiles(profile: Profile) -> bool:
    pre = profile.precompile or {}
    if "every_rank" in pre:
        return bool(pre["every_rank"])
    return str(pre.get("who", "every-rank")) == "every-rank"


def switch_spelling(profile: Profile) -> dict[str, Any]:
    """The environment names this sglang reads, and whether the other spelling would be ignored."""
    env = {k: profile.env_names(k) for k in (profile.env or {})}
    flat = [n for names in env.values() for n in names]
    has_sgl = any(n.startswith("SGL_") for n in flat)
    has_sglang = any(n.startswith("SGLANG_") for n in flat)
    if has_sgl and has_sglang:
        prefix, other = "SGL_/SGLANG_", "both spellings are read"
    elif has_sgl:
        prefix, other = "SGL_", "SGLANG_* names are ignored by this sglang"
    elif has_sglang:
        prefix, other = "SGLANG_", "SGL_* names still work: sglang copies them to SGLANG_* with a deprecation warning"
    else:
        prefix, other = "?", "unknown"
    return {"prefix": prefix, "names": env, "other_spelling": other,
            "set_now": {n: os.environ[n] for n in flat if n in os.environ}}


# ---- burst model ------------------------------------------------------------------------------------------


@dataclass
class BurstModel:
    ranks: int = 8
    base_tasks: int | None = None  # per rank; None: computed from the fields below
    runtime_threads: int = RUNTIME_THREADS
    blas_threads: int | None = None  # None: OPENBLAS_NUM_THREADS / OMP_NUM_THREADS / CPU count
    dataloader_workers: int = 0
    tasks_per_dataloader_worker: int = 1
    nvcc_tree_tasks: int = NVCC_TREE_TASKS
    compile_workers: int | None = None  # None: the profile's env (SGL_JIT_DEEPGEMM_COMPILE_WORKERS) or default

    def base(self) -> int:
        if self.base_tasks is not None:
            return self.base_tasks
        return 1 + self.runtime_threads + self.blas() + self.dataloader_workers * self.tasks_per_dataloader_worker

    def blas(self) -> int:
        if self.blas_threads is not None:
            return self.blas_threads
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
            value = os.environ.get(var, "")
            if value.isdigit() and int(value) > 0:
                return int(value)
        return os.cpu_count() or 1


@dataclass
class Burst:
    name: str
    per_rank: int
    total: int
    detail: str


def estimate_bursts(profile: Profile, plan: Plan | None, model: BurstModel) -> tuple[Burst, Burst, int]:
    """(the runtime precompile's peak on a cold cache, the warmed JIT-off launch's peak, kernels of the worst key)."""
    pre = profile.precompile or {}
    workers = model.compile_workers
    if workers is None:
        value = next((os.environ[n] for n in profile.env_names("compile_workers") if n in os.environ), "")
        workers = int(value) if value.isdigit() else int(pre.get("thread_pool_workers") or 0)
    if plan is not None and plan.keys:
        worst = max(len(pk.kernel_ids) for pk in plan.keys)
    else:
        worst = max(workers, 1)  # no plan: assume a key fills the pool
    base = model.base()
    tree = model.nvcc_tree_tasks
    if workers > 0:  # 0.5.0-0.5.1: a thread pool per key, on every rank
        pool = min(workers, worst)
        per_rank = base + pool + pool * tree
        detail = (f"{base} base + {pool} pool threads + {pool} nvcc trees x {tree} tasks "
                  f"(thread_map, {workers} workers, {worst} kernels in the largest key)")
        ranks_compiling = model.ranks if every_rank_precompiles(profile) else 1
    else:  # later: serial, one compile at a time in the calling thread
        per_rank = base + tree
        detail = f"{base} base + 1 nvcc tree x {tree} tasks (serial compile in the calling thread)"
        ranks_compiling = model.ranks  # the others JIT on a miss, one kernel each at a time
    total = ranks_compiling * per_rank + (model.ranks - ranks_compiling) * base
    cold = Burst("runtime precompile, cold cache", per_rank, total, f"{detail}; x {model.ranks} ranks")
    # Warm cache, JIT off: no pool, no compile. The legacy runtime still runs cuobjdump once per kernel it loads.
    extra = profile.deepgemm.load_tasks
    warm = Burst("warmed cache, JIT off", base + extra, model.ranks * (base + extra),
                 f"{base} base" + (" + 1 cuobjdump while loading a kernel" if extra else "") + f"; x {model.ranks} ranks")
    return cold, warm, worst


# ---- verdict ------------------------------------------------------------------------------------------------


@dataclass
class Check:
    name: str
    mark: str  # ok | warn | fail | info
    detail: str
    fix: str = ""


@dataclass
class Diagnosis:
    checks: list[Check]
    limits: Limits
    cold: Burst
    warm: Burst
    headroom: int | None
    tightest: str | None
    predicts_failure: bool
    verdict: str
    environment: dict[str, Any] = field(default_factory=dict)
    profile_id: str = ""
    ranks: int = 0
    plan: dict[str, Any] | None = None  # model, keys, kernels of the plan it judged, if any
    build_missing: list[str] = field(default_factory=list)  # what the plan's builds lack here (compile/build_needs.py)

    @property
    def return_code(self) -> int:
        return EXIT_CHECK_FAILED if self.predicts_failure or self.build_missing else EXIT_OK

    @property
    def fix(self) -> str | None:
        """The fix of the first failed check."""
        return next((c.fix for c in self.checks if c.mark == "fail" and c.fix), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "sglang_profile": self.profile_id,
            "ranks": self.ranks,
            "plan": self.plan,
            "verdict": self.verdict,
            "predicts_failure": self.predicts_failure,
            "tightest_limit": self.tightest,
            "headroom": self.headroom,
            "bursts": {"runtime_precompile": asdict(self.cold), "warm_jit_off": asdict(self.warm)},
            "checks": [asdict(c) for c in self.checks],
            "limits": self.limits.to_dict(),
            "environment": self.environment,
            "build_needs_missing": self.build_missing,
        }


def _fmt(value: int | None) -> str:
    return "unlimited" if value is None else str(value)


def limit_checks(limits: Limits) -> list[Check]:
    out = []
    for lim in limits.task_limits:
        if lim.status == "exempt":
            out.append(Check(lim.name, "info", f"{_fmt(lim.limit)}; {lim.note}"))
        elif lim.status == "unknown":
            out.append(Check(lim.name, "warn", f"unknown ({lim.source}{': ' + lim.note if lim.note else ''})",
                             f"check {lim.name} by hand where the job runs (doctor could not read it here)"))
        elif lim.status == "unlimited":
            out.append(Check(lim.name, "ok", f"unlimited ({lim.source})"))
        else:
            out.append(Check(lim.name, "ok", f"{lim.current} of {lim.limit} in use, headroom {lim.headroom} "
                                             f"({lim.source})"))
    if limits.max_map_count is None:
        out.append(Check("vm.max_map_count", "warn", "unknown", "read /proc/sys/vm/max_map_count by hand"))
    else:
        out.append(Check("vm.max_map_count", "ok" if limits.max_map_count >= 65530 else "warn",
                         f"{limits.max_map_count} per process (each thread stack adds a mapping and a guard); "
                         f"this process maps {_fmt(limits.maps_self)}",
                         "" if limits.max_map_count >= 65530 else "sysctl -w vm.max_map_count=65530 (or more)"))
    if limits.overcommit_memory is None:
        out.append(Check("vm.overcommit_memory", "warn", "unknown", "read /proc/sys/vm/overcommit_memory by hand"))
    else:
        mode = {0: "heuristic", 1: "always", 2: "strict"}.get(limits.overcommit_memory, "?")
        detail = f"{limits.overcommit_memory} ({mode})"
        if limits.overcommit_memory == 2 and limits.commit_limit_kib is not None:
            detail += (f"; CommitLimit {limits.commit_limit_kib // 1024} MiB, committed "
                       f"{_fmt(limits.committed_kib and limits.committed_kib // 1024)} MiB: every thread commits "
                       f"its full stack ({_fmt(limits.stack_bytes and limits.stack_bytes // 1048576)} MiB)")
        out.append(Check("vm.overcommit_memory", "warn" if limits.overcommit_memory == 2 else "ok", detail,
                         "" if limits.overcommit_memory != 2 else "sysctl -w vm.overcommit_memory=0, or a smaller "
                         "thread stack (ulimit -s) so each thread commits less"))
    return out


def run_doctor(profile: Profile, plan: Plan | None, cache_dir: str | Path, model: BurstModel, *,
               proc_root: str | Path = "/proc", sys_root: str | Path = "/sys",
               rlimits: dict[str, tuple[int | None, int | None]] | None = None, uid: int | None = None,
               nvidia_smi: str | None = None) -> Diagnosis:
    """Everything `doctor` checks: the toolchain, GPU and cache, the task limits, and the burst verdict."""
    env_checks, environment = environment_checks(profile, plan, cache_dir, nvidia_smi)
    diag = diagnose(read_limits(proc_root, sys_root, rlimits=rlimits, uid=uid), profile, plan, model, environment)
    diag.checks = env_checks + diag.checks
    diag.profile_id, diag.ranks = profile.id, model.ranks
    if plan is not None:
        diag.plan = {"model": plan.model, "keys": len(plan.keys), "kernels": plan.total_kernels}
        build = build_checks(plan, environment["nvcc"]["path"])
        diag.checks += build
        diag.build_missing = [c.detail for c in build if c.mark == "fail"]
    return diag


def build_checks(plan: Plan, nvcc: str | None) -> list[Check]:
    """What the plan's families' builds need that warm checks before compiling (compile/build_needs.py): one row
    per missing piece (failed), or one row saying all is there."""
    from dgprecompile.compile.build_needs import check

    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or (
        str(Path(nvcc).resolve().parent.parent) if nvcc else None)
    missing = check([(runtime.kind, items) for runtime, items in plan.by_runtime()[1:]], home)
    if not missing:
        return [Check("build needs", "ok", "every program and toolkit header the plan's builds need is here")]
    return [Check("build needs", "fail", m.line(), m.hint) for m in missing]


def diagnose(limits: Limits, profile: Profile, plan: Plan | None, model: BurstModel,
             environment: dict[str, Any] | None = None) -> Diagnosis:
    checks = limit_checks(limits)
    cold, warm, _worst = estimate_bursts(profile, plan, model)
    tight = limits.tightest()
    headroom = tight.headroom if tight else None
    # strict overcommit: stacks of the burst must fit the uncommitted memory
    mem_room = None
    if limits.overcommit_memory == 2 and limits.commit_limit_kib is not None and limits.committed_kib is not None \
            and limits.stack_bytes:
        mem_room = (limits.commit_limit_kib - limits.committed_kib) * 1024 // limits.stack_bytes
    candidates = [(h, n) for h, n in ((headroom, tight.name if tight else None),
                                      (mem_room, "commit limit (overcommit_memory=2)")) if h is not None]
    if candidates:
        headroom, tight_name = min(candidates)
    else:
        tight_name = None
    warm_cmd = "dgprecompile warm --manifest plan.yaml, then dgprecompile launch --manifest plan.yaml -- <trainer>"
    if headroom is None:
        verdict = (f"no binding task limit found; the cold-cache precompile peaks at about {cold.total} tasks "
                   f"({warm.total} warmed with JIT off)")
        checks.append(Check("task burst", "ok", verdict))
        predicts = False
    elif cold.total > headroom:
        predicts = True
        fix = (warm_cmd if warm.total <= headroom else
               f"raise {tight_name} (the warmed launch alone needs about {warm.total} tasks)")
        verdict = (f"the runtime precompile needs about {cold.total} tasks but {tight_name} leaves {headroom}: "
                   f"expect `RuntimeError: can't start new thread` at the first forward")
        checks.append(Check("task burst (runtime precompile)", "fail", f"{cold.total} > {headroom}: {cold.detail}",
                            fix))
        checks.append(Check("task burst (warmed, JIT off)", "ok" if warm.total <= headroom else "fail",
                            f"{warm.total} vs {headroom}: {warm.detail}",
                            "" if warm.total <= headroom else f"raise {tight_name}"))
        if warm.total > headroom:
            verdict += "; even the warmed JIT-off launch does not fit"
    else:
        predicts = False
        margin = headroom - cold.total
        mark = "warn" if margin < max(16, cold.total // 4) else "ok"
        verdict = f"the runtime precompile needs about {cold.total} tasks; {tight_name} leaves {headroom}"
        checks.append(Check("task burst (runtime precompile)", mark, f"{cold.total} <= {headroom}: {cold.detail}",
                            "" if mark == "ok" else f"little margin: consider {warm_cmd}"))
        checks.append(Check("task burst (warmed, JIT off)", "ok", f"{warm.total} <= {headroom}: {warm.detail}"))
    return Diagnosis(checks, limits, cold, warm, headroom, tight_name, predicts, verdict, environment or {})


def environment_checks(profile: Profile, plan: Plan | None, cache_dir: str | Path,
                       nvidia_smi: str | None = None) -> tuple[list[Check], dict[str, Any]]:
    env: dict[str, Any] = {}
    checks = []
    nvcc, where = locate_nvcc()
    version = nvcc_version(nvcc) if nvcc else None
    env["nvcc"] = {"path": nvcc, "found_by": where, "version": version}
    if nvcc:
        checks.append(Check("nvcc", "ok" if version else "warn", f"{nvcc} ({where}), version {version or 'unknown'}",
                            "" if version else "point CUDA_HOME or DG_JIT_NVCC_COMPILER at the CUDA toolkit's nvcc"))
    else:
        checks.append(Check("nvcc", "fail", where, "install the CUDA toolkit or set DG_JIT_NVCC_COMPILER"))
    dg = deepgemm_generation()
    env["deepgemm"] = dg
    checks.append(Check("DeepGEMM", "ok" if dg["version"] else "info",
                        f"{dg['generation']}" + (f" ({dg['distribution']} {dg['version']})" if dg["version"] else "")))
    sg = dist_version("sglang")
    spelling = switch_spelling(profile)
    env["sglang"] = {"version": sg, "profile": profile.id, "switches": spelling}
    checks.append(Check("sglang", "ok" if sg else "info",
                        f"{sg or 'not installed'}; profile {profile.id} reads {spelling['prefix']}* "
                        f"({', '.join(n for ns in spelling['names'].values() for n in ns)}); {spelling['other_spelling']}"))
    gpu = gpu_info(nvidia_smi)
    env["gpu"] = gpu
    checks.append(Check("GPU", "ok" if gpu["name"] else "info", gpu_detail(gpu)))
    cache = cache_info(profile, plan, cache_dir)
    env["cache"] = cache
    size = "absent" if cache["bytes"] is None else f"{cache['bytes'] / 1048576:.1f} MiB"
    checks.append(Check("cache directory", "ok" if cache["writable"] else "warn",
                        f"{cache['path']} ({size}, {'writable' if cache['writable'] else 'not writable'}, "
                        f"coverage {cache['coverage']})",
                        "" if cache["writable"] else "point the cache variable at a writable directory"))
    return checks, env
