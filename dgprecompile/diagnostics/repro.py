"""Recreate `RuntimeError: can't start new thread` for real, then show the warmed JIT-off path passing.

Three phases, all with N rank processes started at once (like the ranks of one node at the first forward):

1. ``pool`` (inside a task budget): per key, sglang 0.5.1's pattern -- a ThreadPoolExecutor(max_workers=4)
   whose threads each compile a real kernel on a cold cache (tqdm's thread_map is exactly such a pool).
2. ``warm`` (one process, outside the budget): compile every kernel serially, as `dgprecompile warm` does.
3. ``jit-off`` (inside the same budget): serial, no pool, every kernel only looked up in the warm cache; a
   cache miss is an error, not a compile.

The budget is a child cgroup with pids.max (v2 or v1) where this machine lets us make one, else RLIMIT_NPROC
for an unprivileged user. Everything made is removed in ``finally``.

Backends: ``nvcc`` compiles small generated .cu files (no DeepGEMM); ``legacy`` builds real kernels with the
Python-JIT DeepGEMM of sgl-kernel <= 0.3.6 (no GPU needed); ``cxx`` launches sgl-deep-gemm's fp8_gemm_nt on
dummy CUDA tensors (needs an SM90 GPU).

Run as ``python -m dgprecompile.diagnostics.repro SPEC_JSON`` this module is one rank (internal).
"""

from __future__ import annotations

import json
import os
import pwd
import resource
import shutil
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dgprecompile.diagnostics.limits import cgroup_mounts, count_user_tasks, parse_cgroup_file, read_text
from dgprecompile.errors import EXIT_CHECK_FAILED, EXIT_OK, EnvironmentProblem, InputError
from dgprecompile.host import scratch

# the key of the reported failure (sglang 0.5.1, layer.py L301: masked w2 of Qwen3-Coder-480B at TP8/EP8)
LEGACY_KEY = ("GROUPED_GEMM_NT_F8F8BF16_MASKED", 6144, 2560, 20)
CXX_KEYS = ((1792, 6144), (6144, 1536))  # the two dense keys of Qwen3-Coder-480B at TP8
CXX_MS = (1, 17, 33, 128, 256, 512, 1024, 2048, 4096, 8192)
MARGIN_PER_RANK = 2  # tasks beyond a rank's base: room for a transient subprocess (cuobjdump, nvcc --version)


# ==== the task budget =======================================================================================


class Budget:
    kind = "none"

    def __init__(self, tasks_max: int):
        self.tasks_max = tasks_max

    def preexec(self) -> None:  # runs in the child between fork and exec
        pass

    def current(self) -> int | None:
        return None

    def cleanup(self) -> None:
        pass

    def describe(self) -> str:
        return self.kind


class CgroupBudget(Budget):
    def __init__(self, tasks_max: int, path: Path, version: str):
        super().__init__(tasks_max)
        self.path = path
        self.kind = f"cgroup {version} pids.max"
        self.version = version

    def create(self) -> None:
        self.path.mkdir()
        (self.path / "pids.max").write_text(f"{self.tasks_max}\n")

    def preexec(self) -> None:
        with open(self.path / "cgroup.procs", "w") as fh:
            fh.write(str(os.getpid()))

    def current(self) -> int | None:
        text = read_text(self.path / "pids.current")
        return int(text) if text and text.strip().isdigit() else None

    def members(self) -> list[int]:
        text = read_text(self.path / "cgroup.procs") or ""
        return [int(p) for p in text.split() if p.isdigit()]

    def cleanup(self) -> None:
        if not self.path.exists():
            return
        for _ in range(50):
            pids = self.members()
            if not pids:
                break
            for pid in pids:  # only processes we started (or their nvcc children) live here
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.05)
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.05)

    def describe(self) -> str:
        return f"{self.kind} = {self.tasks_max} at {self.path}"


class RlimitBudget(Budget):
    def __init__(self, tasks_max: int, user: pwd.struct_passwd | None, in_use: int):
        super().__init__(tasks_max)
        self.user = user
        self.in_use = in_use  # tasks the UID already has; RLIMIT_NPROC counts them too
        self.limit = in_use + tasks_max
        self.kind = f"RLIMIT_NPROC as {user.pw_name if user else 'this user'}"

    def preexec(self) -> None:
        if self.user is not None:
            os.setgroups([])
            os.setgid(self.user.pw_gid)
            os.setuid(self.user.pw_uid)
        resource.setrlimit(resource.RLIMIT_NPROC, (self.limit, self.limit))

    def current(self) -> int | None:
        uid = self.user.pw_uid if self.user else os.getuid()
        n = count_user_tasks(Path("/proc"), uid)
        return None if n is None else n - self.in_use

    def describe(self) -> str:
        return f"{self.kind}: {self.limit} ({self.in_use} tasks of that user already + {self.tasks_max})"


def _try_v2(mount: Path, cg_path: str, name: str, tasks_max: int, why: list[str]) -> CgroupBudget | None:
    own = mount.joinpath(*[p for p in cg_path.strip("/").split("/") if p])
    parents = [own.parent, own] if own != mount else [own]
    for parent in parents:
        ctl = parent / "cgroup.subtree_control"
        enabled = (read_text(ctl) or "").split()
        if "pids" not in enabled:
            try:
                ctl.write_text("+pids")
            except OSError as exc:
                why.append(f"cgroup v2: cannot enable pids in {ctl}: {exc.strerror or exc}")
                continue
        budget = CgroupBudget(tasks_max, parent / name, "v2")
        try:
            budget.create()
            return budget
        except OSError as exc:
            why.append(f"cgroup v2: cannot make {budget.path}: {exc.strerror or exc}")
            budget.cleanup()
    return None


def _nobody() -> pwd.struct_passwd | None:
    for name in ("nobody", "nfsnobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    return None


def make_budget(tasks_max: int, mechanism: str = "auto", sys_root: str = "/sys", proc_root: str = "/proc",
                python: str = sys.executable) -> tuple[Budget, list[str]]:
    """The first budget mechanism this machine allows, and why each earlier one was not used."""
    why: list[str] = []
    name = f"dgprecompile-repro-{os.getpid()}"
    v2_path, v1_path = parse_cgroup_file(read_text(Path(proc_root) / "self" / "cgroup"))
    v2_mount, v1_mount = cgroup_mounts(Path(sys_root))
    if mechanism in ("auto", "cgroup"):
        if v2_mount is not None and v2_path is not None:
            budget = _try_v2(v2_mount, v2_path, name, tasks_max, why)
            if budget:
                return budget, why
        if v1_mount is not None and v1_path is not None:
            parent = v1_mount.joinpath(*[p for p in v1_path.strip("/").split("/") if p])
            budget = CgroupBudget(tasks_max, parent / name, "v1")
            try:
                budget.create()
                return budget, why
            except OSError as exc:
                why.append(f"cgroup v1: cannot make {budget.path}: {exc.strerror or exc}")
                budget.cleanup()
        if v2_mount is None and v1_mount is None:
            why.append("no cgroup pids controller mounted")
    if mechanism in ("auto", "rlimit"):
        user = _nobody() if os.geteuid() == 0 else None
        if os.geteuid() == 0 and user is None:
            why.append("RLIMIT_NPROC: root is exempt and there is no 'nobody' user to run the ranks as")
        else:
            uid = user.pw_uid if user else os.getuid()
            in_use = count_user_tasks(Path(proc_root), uid) or 0
            budget = RlimitBudget(tasks_max, user, in_use)
            hard = resource.getrlimit(resource.RLIMIT_NPROC)[1]
            if user is None and hard != resource.RLIM_INFINITY and hard < budget.limit:
                why.append(f"RLIMIT_NPROC: hard limit {hard} is below {budget.limit}")
            else:
                probe = subprocess.run([python, "-c", "pass"], preexec_fn=budget.preexec, capture_output=True,
                                       text=True)
                if probe.returncode == 0:
                    return budget, why
                why.append(f"RLIMIT_NPROC as {user.pw_name if user else 'this user'}: python does not start "
                           f"({(probe.stderr.strip().splitlines() or ['exit ' + str(probe.returncode)])[-1]})")
    raise EnvironmentProblem(
        "this machine allows no task budget: " + "; ".join(why or ["no mechanism tried"]),
        hint="run as root on a machine with a writable cgroup pids controller, or where an unprivileged user "
             "can run this Python")


# ==== what one rank does =====================================================================================


def _threads() -> int:
    text = read_text(Path("/proc/self/status")) or ""
    for line in text.splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return 0


class NvccBackend:
    """Small generated kernels compiled with nvcc: the same process pattern as the legacy JIT, no DeepGEMM."""

    resolves_nvcc = True  # its keys name the nvcc it runs: the real path, not a symlink
    jit_off_by_refusing_nvcc = False  # with the JIT off, a lookup only reads the cache

    def __init__(self, spec: dict[str, Any]):
        self.nvcc = spec["nvcc"]
        self.cache = Path(spec["cache_dir"]) / "cache"

    def keys(self, spec: dict[str, Any]) -> list[list[Any]]:
        return [[(k, i) for i in range(spec["kernels"])] for k in range(spec["keys"])]

    def _entry(self, item) -> Path:
        return self.cache / f"kernel.k{item[0]}_{item[1]}"

    def compile(self, item) -> str:
        entry = self._entry(item)
        if (entry / "kernel.cubin").exists():
            return entry.name
        entry.mkdir(parents=True, exist_ok=True)
        k, i = item
        src = entry / f"kernel.{os.getpid()}.{time.monotonic_ns()}.cu"
        src.write_text(
            "template <int A, int B> __global__ void kern(float* x, const float* y, int n) {\n"
            "  int t = blockIdx.x * blockDim.x + threadIdx.x;\n"
            "  float acc = 0.f;\n"
            "  #pragma unroll\n"
            "  for (int j = 0; j < 16; ++j) acc += y[(t + j * A) % n] * (B + j);\n"
            "  if (t < n) x[t] = acc;\n}\n"
            f"template __global__ void kern<{k + 1}, {i + 1}>(float*, const float*, int);\n")
        tmp = entry / f"kernel.{os.getpid()}.{time.monotonic_ns()}.cubin"
        res = subprocess.run([self.nvcc, str(src), "-cubin", "-o", str(tmp), "-gencode=arch=compute_90a,code=sm_90a",
                              "-O3"], capture_output=True, text=True)
        src.unlink(missing_ok=True)
        if res.returncode != 0:
            raise RuntimeError(f"nvcc failed: {res.stderr.strip()[-400:]}")
        os.replace(tmp, entry / "kernel.cubin")
        return entry.name

    def lookup(self, item) -> str:
        cubin = self._entry(item) / "kernel.cubin"
        if not cubin.is_file():
            raise RuntimeError(f"JIT is off and {cubin} is not in the cache")
        cubin.read_bytes()
        return cubin.parent.name


class LegacyBackend:
    """Real kernels of the masked key that failed in the report, built by the Python-JIT DeepGEMM (sgl-kernel 0.3.5)."""

    resolves_nvcc = False
    jit_off_by_refusing_nvcc = False

    def __init__(self, spec: dict[str, Any]):
        import deep_gemm  # noqa: F401  (imports torch, as a rank has)
        import deep_gemm.jit.compiler as compiler
        import deep_gemm.jit.runtime as runtime

        # CPU-only torch has no CUDA_HOME; the JIT needs it for nvcc (and cuobjdump at launch)
        home = os.path.dirname(os.path.dirname(os.path.realpath(spec["nvcc"])))
        if compiler.CUDA_HOME is None:
            compiler.CUDA_HOME = home
        if runtime.CUDA_HOME is None:
            runtime.CUDA_HOME = home
        from deep_gemm.jit import build
        from deep_gemm.jit_kernels.runtime import FP8GemmRuntime

        self.compiler, self.build, self.runtime_cls = compiler, build, FP8GemmRuntime

    def keys(self, spec: dict[str, Any]) -> list[list[Any]]:
        return [legacy_kernels(spec["kernels"])]

    def compile(self, item) -> str:
        from dgprecompile.planning.heuristics.legacy import template_kwargs

        family, spec = item
        kwargs = template_kwargs(spec)
        rt = self.build(family, self.runtime_cls.generate(kwargs), self.runtime_cls, kwargs)
        return os.path.basename(rt.path)

    def lookup(self, item) -> str:
        def refuse(cls, name, code, target_path):
            raise RuntimeError(f"JIT is off and {name} is not in the cache")

        self.compiler.NVCCCompiler.compile = classmethod(refuse)
        return self.compile(item)


def legacy_kernels(count: int):
    """The first ``count`` distinct kernels of the failing masked key, over m = 1..16384 (H200: 132 SMs)."""
    from dgprecompile.planning.heuristics.legacy import BUILD_NAME, LegacyHeuristic
    from dgprecompile.runtimes.items import KernelType

    kt = KernelType(LEGACY_KEY[0])
    h = LegacyHeuristic()
    seen: dict[str, Any] = {}
    for m in h.breakpoints(kt, 16384):
        spec = h.kernel(kt, m, LEGACY_KEY[1], LEGACY_KEY[2], LEGACY_KEY[3], 132)
        seen.setdefault(spec.id, (BUILD_NAME[kt][0], spec))
        if len(seen) >= count:
            break
    return list(seen.values())


class CxxBackend:
    """sgl-deep-gemm (C++ JIT): each pool thread launches fp8_gemm_nt for one m, compiling on a miss. GPU only."""

    resolves_nvcc = False
    jit_off_by_refusing_nvcc = True  # the library itself compiles on a miss: DG_JIT_NVCC_COMPILER refuses

    def __init__(self, spec: dict[str, Any]):
        import deep_gemm
        import torch

        if not torch.cuda.is_available():
            raise EnvironmentProblem("--backend cxx needs a CUDA GPU and sgl-deep-gemm")
        self.torch, self.dg = torch, deep_gemm
        torch.cuda.init()
        torch.empty(1, device="cuda")

    def keys(self, spec: dict[str, Any]) -> list[list[Any]]:
        ms = CXX_MS[: spec["kernels"]] if spec["kernels"] else CXX_MS
        return [[(n, k, m) for m in ms] for n, k in CXX_KEYS[: spec["keys"]]]

    def compile(self, item) -> str:
        torch = self.torch
        n, k, m = item
        torch.cuda.set_device(0)
        a = torch.empty((m, k), device="cuda", dtype=torch.float8_e4m3fn)
        sfa = torch.ones((m, (k + 127) // 128), device="cuda", dtype=torch.float32)
        b = torch.empty((n, k), device="cuda", dtype=torch.float8_e4m3fn)
        sfb = torch.ones(((n + 127) // 128, (k + 127) // 128), device="cuda", dtype=torch.float32)
        d = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
        self.dg.fp8_gemm_nt((a, sfa), (b, sfb), d)
        torch.cuda.synchronize()
        return f"n{n}.k{k}.m{m}"

    lookup = compile  # with JIT off the parent points DG_JIT_NVCC_COMPILER at a wrapper that refuses to compile


# repro's own backends (the process patterns it reproduces), by the name --backend takes
REPRO_BACKENDS: dict[str, type] = {"nvcc": NvccBackend, "legacy": LegacyBackend, "cxx": CxxBackend}
BACKENDS = tuple(REPRO_BACKENDS)


def _backend(spec: dict[str, Any]):
    return REPRO_BACKENDS[spec["backend"]](spec)


def rank_main(spec: dict[str, Any]) -> int:
    """One rank: imports, waits for the go signal, then runs its phase; the last stdout line is a JSON result."""
    from concurrent.futures import ThreadPoolExecutor

    rank, phase, sync = spec["rank"], spec["phase"], spec.get("sync_dir")
    backend = _backend(spec)
    keys = backend.keys(spec)
    base = _threads()
    if sync:
        Path(sync, f"ready.{rank}").touch()
        deadline = time.monotonic() + 600
        go = Path(sync, "go")
        while not go.exists() and time.monotonic() < deadline:
            time.sleep(0.001)
    t0 = time.monotonic()
    done = []
    if phase == "probe":
        pass
    elif phase == "pool":
        for items in keys:  # sglang 0.5.1 compile_utils: thread_map(compile_func, configs, max_workers=4) per key
            with ThreadPoolExecutor(max_workers=spec["workers"], thread_name_prefix=f"rank{rank}") as pool:
                done.extend(pool.map(backend.compile, items))
    elif phase == "warm":
        for items in keys:
            done.extend(backend.compile(item) for item in items)
    elif phase == "jit-off":
        for items in keys:
            done.extend(backend.lookup(item) for item in items)
    print(json.dumps({"rank": rank, "phase": phase, "ok": True, "base_threads": base, "kernels": len(done),
                      "seconds": round(time.monotonic() - t0, 2)}), flush=True)
    return 0


def _rank_entry(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    try:
        return rank_main(spec)
    except BaseException as exc:  # report every failure the same way, including the one we are here to cause
        traceback.print_exc()
        print(json.dumps({"rank": spec.get("rank"), "phase": spec.get("phase"), "ok": False,
                          "error": f"{type(exc).__name__}: {exc}"}), flush=True)
        return 1


# ==== the driver ===============================================================================================


@dataclass
class RankResult:
    rank: int
    returncode: int
    result: dict[str, Any]
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and bool(self.result.get("ok"))

    def last_frames(self, lines: int = 8) -> str:
        tb = self.stderr.strip().splitlines()
        starts = [i for i, line in enumerate(tb) if line.startswith("Traceback")]
        block = tb[starts[-1]:] if starts else tb
        return "\n".join(block[-lines:])


@dataclass
class PhaseResult:
    phase: str
    ranks: list[RankResult]
    seconds: float
    peak_tasks: int | None

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.ranks)

    def errors(self) -> list[str]:
        return sorted({r.result.get("error", f"exit {r.returncode}") for r in self.ranks if not r.ok})


@dataclass
class ReproConfig:
    ranks: int = 2
    backend: str = "nvcc"
    tasks_max: int | None = None
    workers: int = 4
    keys: int = 1
    kernels: int = 4
    mechanism: str = "auto"
    nvcc: str | None = None
    deepgemm_path: str | None = None
    timeout: float = 300.0
    keep: bool = False


@dataclass
class ReproReport:
    config: ReproConfig
    budget: str
    budget_kind: str
    tasks_max: int
    base_threads: int
    skipped_mechanisms: list[str]
    phases: dict[str, PhaseResult] = field(default_factory=dict)

    @property
    def reproduced(self) -> bool:
        pool, off = self.phases.get("pool"), self.phases.get("jit-off")
        return bool(pool and not pool.ok and off and off.ok)

    @property
    def return_code(self) -> int:
        return EXIT_OK if self.reproduced else EXIT_CHECK_FAILED

    def failure(self) -> tuple[str, str] | None:
        """Why the failure was not reproduced, and the fix; None when it was."""
        if self.reproduced:
            return None
        pool, off = self.phases.get("pool"), self.phases.get("jit-off")
        if pool is not None and pool.ok:
            return (f"not reproduced: the pool phase fit in {self.tasks_max} tasks",
                    "pass a smaller --tasks-max, or more --ranks/--workers")
        return ("the warmed JIT-off phase failed inside the budget: " + "; ".join(off.errors() if off else []),
                "pass a larger --tasks-max")

    def to_dict(self) -> dict[str, Any]:
        return {
            "reproduced": self.reproduced, "backend": self.config.backend, "ranks": self.config.ranks,
            "budget": self.budget, "budget_kind": self.budget_kind, "tasks_max": self.tasks_max,
            "base_threads_per_rank": self.base_threads, "skipped_mechanisms": self.skipped_mechanisms,
            "phases": {name: {"ok": p.ok, "seconds": round(p.seconds, 2), "peak_tasks": p.peak_tasks,
                              "errors": p.errors(),
                              "ranks": [{"rank": r.rank, "returncode": r.returncode, **r.result} for r in p.ranks],
                              "traceback_tail": next((r.last_frames() for r in p.ranks if not r.ok), None)}
                       for name, p in self.phases.items()},
        }


class Repro:
    def __init__(self, config: ReproConfig, log=None):
        if config.backend not in BACKENDS:
            raise InputError(f"unknown backend {config.backend!r}; choose one of {', '.join(BACKENDS)}")
        if config.ranks < 1 or config.workers < 1 or config.keys < 1 or config.kernels < 1:
            raise InputError("--ranks, --workers, --keys and --kernels must be positive")
        self.config = config
        self.log = log or (lambda msg: None)
        self.procs: list[subprocess.Popen] = []
        self.workdir: Path | None = None
        self.budget: Budget | None = None

    # -- plumbing --
    def _env(self, jit_off: bool) -> dict[str, str]:
        env = dict(os.environ)
        env.update({"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                    "PYTHONUNBUFFERED": "1", "DG_JIT_CACHE_DIR": str(self.workdir / "dg"),
                    "DG_JIT_NVCC_COMPILER": self.nvcc, "HOME": str(self.workdir)})
        root = str(Path(__file__).resolve().parents[2])
        paths = [p for p in (self.config.deepgemm_path, root, env.get("PYTHONPATH")) if p]
        env["PYTHONPATH"] = os.pathsep.join(paths)
        if jit_off and REPRO_BACKENDS[self.config.backend].jit_off_by_refusing_nvcc:
            env["DG_JIT_NVCC_COMPILER"] = str(self._refusing_nvcc())
        return env

    def _refusing_nvcc(self) -> Path:
        """An nvcc that answers --version (part of the C++ JIT's cache key) and refuses to compile."""
        path = self.workdir / "nvcc-jit-off"
        path.write_text(f'#!/bin/sh\nif [ "$1" = "--version" ]; then exec "{self.nvcc}" --version; fi\n'
                        'echo "dgprecompile repro: JIT is off, refusing to compile: $*" >&2\nexit 1\n')
        path.chmod(0o755)
        return path

    def _spec(self, rank: int, phase: str, sync: Path | None) -> str:
        return json.dumps({"rank": rank, "phase": phase, "backend": self.config.backend, "nvcc": self.nvcc,
                           "cache_dir": str(self.workdir / "dg"), "keys": self.config.keys,
                           "kernels": self.config.kernels, "workers": self.config.workers,
                           "sync_dir": str(sync) if sync else None})

    def _run_phase(self, phase: str, ranks: int, budget: Budget | None) -> PhaseResult:
        sync = self.workdir / f"sync-{phase}"
        sync.mkdir(mode=0o777)
        sync.chmod(0o777)
        env = self._env(jit_off=phase == "jit-off")
        preexec = budget.preexec if budget else None
        self.procs = []
        t0 = time.monotonic()
        for rank in range(ranks):
            self.procs.append(subprocess.Popen(
                [sys.executable, "-m", "dgprecompile.diagnostics.repro", self._spec(rank, phase, sync)], env=env,
                cwd=str(self.workdir), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                preexec_fn=preexec, start_new_session=True))
        # release all ranks together once each has imported (or died trying)
        peak = None
        deadline = time.monotonic() + self.config.timeout
        while time.monotonic() < deadline:
            ready = sum(1 for r in range(ranks) if (sync / f"ready.{r}").exists())
            dead = sum(1 for p in self.procs if p.poll() is not None)
            if ready + dead >= ranks:
                break
            time.sleep(0.01)
        (sync / "go").touch()
        while any(p.poll() is None for p in self.procs):
            if time.monotonic() > deadline:
                self._kill_all()
                raise EnvironmentProblem(f"repro phase {phase} ran past {self.config.timeout:.0f} s")
            if budget is not None:
                cur = budget.current()
                if cur is not None:
                    peak = cur if peak is None else max(peak, cur)
            time.sleep(0.005)
        results = []
        for rank, p in enumerate(self.procs):
            out, err = p.communicate()
            lines = [line for line in out.splitlines() if line.startswith("{")]
            try:
                result = json.loads(lines[-1]) if lines else {}
            except json.JSONDecodeError:
                result = {}
            if p.returncode != 0 and not result.get("error"):
                tail = (err.strip().splitlines() or [f"exit {p.returncode}"])[-1]
                result = {"ok": False, "error": tail}
            results.append(RankResult(rank, p.returncode, result, err))
        self.procs = []
        return PhaseResult(phase, results, time.monotonic() - t0, peak)

    def _kill_all(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)  # the rank's own session: it and its nvcc children
                except (ProcessLookupError, PermissionError):
                    p.kill()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.procs = []

    def _find_nvcc(self) -> str:
        from dgprecompile.host.toolchain import default_nvcc_path

        nvcc = self.config.nvcc or default_nvcc_path()
        if not nvcc or not os.access(nvcc, os.X_OK):
            raise EnvironmentProblem("repro needs nvcc", hint="install the CUDA toolkit or pass --nvcc PATH")
        return os.path.realpath(nvcc) if REPRO_BACKENDS[self.config.backend].resolves_nvcc else nvcc

    # -- the run --
    def run(self) -> ReproReport:
        self.nvcc = self._find_nvcc()
        self.workdir = scratch.run_dir("dgprecompile-repro-")  # lock-held: removed by a later run if killed
        self.workdir.chmod(0o777)  # the ranks may run as an unprivileged user
        (self.workdir / "dg").mkdir(mode=0o777)
        (self.workdir / "dg").chmod(0o777)
        try:
            probe = self._run_phase("probe", 1, None)
            if not probe.ok:
                raise EnvironmentProblem(f"a {self.config.backend} rank does not start here: "
                                         f"{'; '.join(probe.errors())}",
                                         hint=probe.ranks[0].last_frames(4) if probe.ranks else None)
            base = int(probe.ranks[0].result.get("base_threads") or 1)
            tasks_max = self.config.tasks_max or self.config.ranks * (base + MARGIN_PER_RANK)
            need = self.config.ranks * (base + self.config.workers)
            self.log(f"each rank holds {base} task(s) after its imports; the pool pattern needs at least "
                     f"{need} tasks for {self.config.ranks} ranks before any nvcc starts")
            self.budget, skipped = make_budget(tasks_max, self.config.mechanism)
            report = ReproReport(self.config, self.budget.describe(), self.budget.kind, tasks_max, base, skipped)
            self.log(f"budget: {self.budget.describe()}")
            for phase, ranks, budget in (("pool", self.config.ranks, self.budget), ("warm", 1, None),
                                         ("jit-off", self.config.ranks, self.budget)):
                self.log(f"phase {phase}: {ranks} rank(s)" + (" inside the budget" if budget else " outside it"))
                report.phases[phase] = self._run_phase(phase, ranks, budget)
                if phase == "warm" and not report.phases[phase].ok:
                    raise EnvironmentProblem("the warm step failed outside the budget: "
                                             + "; ".join(report.phases[phase].errors()),
                                             hint=report.phases[phase].ranks[0].last_frames(6))
            return report
        finally:
            self._kill_all()
            if self.budget is not None:
                self.budget.cleanup()
            if not self.config.keep and self.workdir is not None:
                shutil.rmtree(self.workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(_rank_entry(sys.argv[1:]))
