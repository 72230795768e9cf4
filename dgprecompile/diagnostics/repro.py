"""Recreate `RuntimeError: can't start new thread` for real, then show the warmed JIT-off path passing.

Three phases, all with N rank processes started at once (like the ranks of one node at the first forward):

1. ``pool`` (inside a task budget): per key, sglang 0.5.1's pattern -- a ThreadPoolExecutor(max_workers=4)
   whose threads each compile a real kernel on a cold cache (tqdm's thread_map is exactly such a pool).
2. ``warm`` (one process, outside the budget): compile every kernel serially, as `dgprecompile warm` does.
3. ``jit-off`` (inside the same budget): serial, no pool, every kernel only looked up in the warm cache; a
   cache miss is an error, not a compile.

The budget (diagnostics/budget.py) is a child cgroup with pids.max (v2 or v1) where this machine lets us make one,
else RLIMIT_NPROC for an unprivileged user. Each rank is a ``python -m dgprecompile.diagnostics.repro_rank``
process (its backends are there). Everything made is removed in ``finally``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dgprecompile.diagnostics.budget import Budget, make_budget
from dgprecompile.diagnostics.repro_rank import BACKENDS, REPRO_BACKENDS
from dgprecompile.errors import EXIT_CHECK_FAILED, EXIT_OK, EnvironmentProblem, InputError
from dgprecompile.host import scratch

MARGIN_PER_RANK = 2  # tasks beyond a rank's base: room for a transient subprocess (cuobjdump, nvcc --version)
OUT_OF_TASKS = ("can't start new thread", "Resource temporarily unavailable")  # a refused thread / fork (EAGAIN)


@dataclass
class RankResult:
    rank: int
    returncode: int
    result: dict[str, Any]
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and bool(self.result.get("ok"))

    @property
    def out_of_tasks(self) -> bool:
        """Its error is the task limit's: a thread (the user's error) or a process (EAGAIN) refused."""
        return any(m in str(self.result.get("error", "")) for m in OUT_OF_TASKS)

    def last_frames(self, lines: int = 8) -> str:
        """The end of the last traceback this rank printed that names the task limit's refusal, else of its last."""
        tb = self.stderr.strip().splitlines()
        starts = [i for i, line in enumerate(tb) if line.startswith("Traceback")]
        blocks = [tb[a:b] for a, b in zip(starts, starts[1:] + [len(tb)], strict=True)] or [tb]
        block = next((b for b in reversed(blocks) if any(m in line for line in b for m in OUT_OF_TASKS)), blocks[-1])
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

    def traceback_tail(self) -> str | None:
        """The traceback to show: of a rank the task limit stopped, where one was (which clone() fails first, and
        so which rank, is a matter of timing; another rank may have failed on what followed), else the first."""
        failed = [r for r in self.ranks if not r.ok]
        shown = next((r for r in failed if r.out_of_tasks), failed[0] if failed else None)
        return shown.last_frames() if shown else None


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
                              "traceback_tail": p.traceback_tail()}
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
                [sys.executable, "-m", "dgprecompile.diagnostics.repro_rank", self._spec(rank, phase, sync)], env=env,
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
