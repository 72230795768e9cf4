"""What a launch found once the job ended: its exit, refusals, what was compiled at run time, and misses.

The launcher (launch/launcher.py) lists the cache's entries and Triton's cache before the job and again after it;
the startup hook's events file holds the refusals; a traced (non-strict) run's calls are matched against the plan
(planning/trace.py) and the misses written where a later `dgprecompile warm` reads them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dgprecompile.cache.store import CacheStore
from dgprecompile.errors import EXIT_CHECK_FAILED, InputError
from dgprecompile.planning.plan import Plan
from dgprecompile.planning.trace import Call, find_misses, read_trace_dir, write_misses

DEFAULT_MISSES_FILE = "dgprecompile-misses.jsonl"


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
    scratch_removed: list[str] = field(default_factory=list)  # strict: DeepGEMM's tmp/ folders of refused compiles
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
                "cache_changes": self.cache_changes, "scratch_removed": self.scratch_removed,
                "left_behind": self.left_behind, "lost": self.lost,
                "signals": self.signals, "killed": self.killed,
                "capture": self.capture, "families": [f.to_dict() for f in self.families]}


def read_events(path: Path) -> list[dict[str, Any]]:
    """The startup hook's events (JSON lines); none where the file is absent or unreadable."""
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, json.JSONDecodeError):
        return []


def all_entries(store: CacheStore) -> list[str]:
    """Every runtime entry of the cache: DeepGEMM's by name, SGLang's JIT modules as tvm-ffi/<name> (the other
    families' entries are reported per family: launch/capture.py)."""
    from dgprecompile.cache.store import AREAS, ENTRIES
    from dgprecompile.runtimes import FILED_AREAS

    return [e if area == ENTRIES else f"{area}/{e}" for area in AREAS if area not in FILED_AREAS
            for e in store.list_entries(area)]


def listdir(path: str) -> set[str]:
    """The names in ``path``; none where it cannot be read."""
    try:
        return set(os.listdir(path))
    except OSError:
        return set()


def jit_areas() -> list[str]:
    from dgprecompile.runtimes import JIT_FAMILIES

    return sorted({f.area for f in JIT_FAMILIES.values()})


def names_planned_kernels(event: Mapping[str, Any]) -> bool:
    """Whether a refusal names the kernel by its plan id: the runtimes the startup hook refuses (strict_by "hook")
    report the kernel they were asked for; the nvcc stand-in and the other families name what they would build."""
    from dgprecompile.runtimes import GENERATIONS

    generation = GENERATIONS.get(str(event.get("generation")))
    return generation is not None and generation.strict_by == "hook"


def collect_misses(plan: Plan, trace_dir: str | None, misses_path: str | None, cache_dir: str,
                   result: LaunchResult) -> None:
    """A traced run: the calls the plan does not cover, into ``result`` and (when there are any, or asked for with
    --misses) the misses file."""
    calls = []
    if trace_dir and os.path.isdir(trace_dir):
        try:
            _headers, calls = read_trace_dir(Path(trace_dir))
        except InputError as exc:
            result.trace_warning = f"could not read the trace: {exc.message}"
    misses = find_misses(plan, calls)
    result.misses = [Miss(call, kernels) for call, kernels in misses]
    result.calls_recorded = len(calls)
    if not misses and not result.new_entries and not misses_path:
        return  # nothing to warm: no file left behind in the working directory (asked for with --misses, it is)
    path = misses_path or DEFAULT_MISSES_FILE
    write_misses(Path(path), plan, misses, {"cache_dir": cache_dir, "new_entries": result.new_entries,
                                            "calls_recorded": len(calls)})
    result.misses_path = os.path.abspath(path)
