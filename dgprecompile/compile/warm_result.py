"""warm's result: what was compiled, found cached, skipped and failed, from the workers' events.

The pool (compile/warm_pool.py) hands each event to :func:`record_event`; the CLI renders the result and
``return_code`` says how the warm ended (0, 3 for what this machine lacks, 4 for a failed compile).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dgprecompile.errors import EXIT_COMPILE_FAILED, EXIT_ENVIRONMENT, EXIT_OK


@dataclass
class WarmResult:
    compiled: dict[str, float] = field(default_factory=dict)  # kernel -> seconds
    cached: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    # per failed item: its first error lines, the log kept in the cache's log folder, a known cause's hint
    failure_details: dict[str, dict[str, Any]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # planned items of other runtimes not built here, and why
    skipped_kinds: dict[str, int] = field(default_factory=dict)  # how many of them, by their runtime's kind
    missing: str | None = None  # what to install so that the skipped modules can be built (exit 3)
    fatal: list[str] = field(default_factory=list)  # workers that could not start
    no_space: str | None = None  # the first "no space left on <mount>" a worker met; the rest was not started
    no_space_hint: str | None = None  # what to free, and roughly how much the unbuilt kernels need
    no_space_tmpdir: bool = False  # the full filesystem is TMPDIR's (the compilers' scratch), not the cache's
    unindexed: list[str] = field(default_factory=list)  # installed, not yet in the index (the next warm adds them)
    ready_seconds: list[float] = field(default_factory=list)  # when each worker was set up, from the start
    started: dict[str, float] = field(default_factory=dict)  # when each unit was handed out, from the start
    preloaded_seconds: tuple[float, float] | None = None  # when the zygote's imports were done, and how long they took
    last_result_seconds: float = 0.0  # when the last kernel finished, from the start
    wall_seconds: float = 0.0
    children_cpu_seconds: float = 0.0  # CPU seconds of every process the warm started and waited for (compilers too)
    cache_bytes: int = 0
    workers: int = 0
    jobs: int = 0  # the --jobs budget the workers and FlashInfer's builds (MAX_JOBS) shared
    cache_dir: str = ""
    release: str | None = None  # the sglang release the plan was made for (named in a missing package's hint)
    backend: str = ""
    kernels: int = 0  # kernels this warm (or this rank's share) had to have in the cache
    jit_modules: int = 0  # SGLang JIT modules this warm had to have in the cache
    jit_ids: list[str] = field(default_factory=list)  # which of the items are SGLang JIT modules
    triton_ids: list[str] = field(default_factory=list)  # which of the items are Triton fused-MoE items
    triton_planned: list[str] = field(default_factory=list)  # the plan's Triton fused-MoE items (built or not)
    chunk_seconds: dict[str, float] = field(default_factory=dict)  # each Triton MoE chunk's subprocess, seconds

    @property
    def ok(self) -> bool:
        return not self.failed

    @property
    def return_code(self) -> int:
        if self.no_space or (self.fatal and self.failed):  # the machine lacks (a working) part of a backend
            return EXIT_ENVIRONMENT
        if not self.ok:
            return EXIT_COMPILE_FAILED
        # the plan holds modules this machine cannot build: verify would fail, so warm does not pass either
        return EXIT_ENVIRONMENT if self.missing else EXIT_OK

    def to_dict(self) -> dict[str, Any]:
        return {"cache_dir": self.cache_dir, "backend": self.backend, "kernels": self.kernels,
                "sglang_jit_modules": self.jit_modules, "compiled": len(self.compiled),
                "already_cached": len(self.cached), "failed": len(self.failed),
                "failures": self.failed, "failure_details": self.failure_details, "skipped": self.skipped,
                "install": self.missing, "wall_seconds": round(self.wall_seconds, 2),
                "children_cpu_seconds": round(self.children_cpu_seconds, 2),
                "compile_seconds_sum": round(sum(self.compiled.values()), 2), "cache_bytes": self.cache_bytes,
                "workers": self.workers, "jobs": self.jobs, "no_space": self.no_space,
                "workers_not_started": self.fatal,
                "installed_not_indexed": self.unindexed,
                "item_seconds": {k: round(v, 2) for k, v in sorted(self.compiled.items())},
                "sglang_jit_module_ids": list(self.jit_ids), "triton_moe_item_ids": list(self.triton_ids),
                "triton_moe_chunk_seconds": {k: round(v, 2) for k, v in sorted(self.chunk_seconds.items())},
                "timeline": {"workers_ready_first_s": round(min(self.ready_seconds), 2) if self.ready_seconds else None,
                             "workers_ready_last_s": round(max(self.ready_seconds), 2) if self.ready_seconds else None,
                             "last_kernel_done_s": round(self.last_result_seconds, 2),
                             **({"zygote_preloaded_s": round(self.preloaded_seconds[0], 2),
                                 "zygote_import_s": self.preloaded_seconds[1]} if self.preloaded_seconds else {}),
                             "unit_started_s": {k: round(v, 2) for k, v in sorted(self.started.items())}}}


def record_event(event: dict[str, Any], result: WarmResult, on_event: Callable[[dict[str, Any]], None]) -> None:
    """One worker event into ``result`` (compiled, cached, failed, a worker that could not start, a full disk),
    then passed on to ``on_event``."""
    kind = event.get("event")
    kernel = event.get("kernel")
    if kind == "done":
        if event["status"] == "compiled":
            result.compiled[kernel] = float(event.get("seconds") or 0.0)
        else:
            result.cached.append(kernel)
        if event.get("unindexed"):  # installed whole, but the disk filled before the index recorded it
            result.unindexed.append(kernel)
            if result.no_space is None:
                result.no_space = event.get("error")
                result.no_space_tmpdir = bool(event.get("no_space_tmpdir"))
    elif kind == "failed":
        result.failed[kernel] = event.get("error", "failed")
        if event.get("errors"):
            result.failure_details[kernel] = {k: event.get(k) for k in ("errors", "log", "hint")}
        if event.get("no_space") and result.no_space is None:
            result.no_space = event.get("error")
            result.no_space_tmpdir = bool(event.get("no_space_tmpdir"))
    elif kind == "fatal":
        result.fatal.append(event.get("error", "worker failed to start"))
    on_event(event)
