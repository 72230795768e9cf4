"""What the model driver (launch/model_driver.py) records of a run: each module's calls, failures and first-call
seconds (``Report``), the files a run adds to the JIT caches its environment names, torch.compile's own counters,
and the report written when the run is stopped. No SGLang or torch import at module level: the bench's arithmetic
(bench/first_forward_files.py) and the tests read these without either."""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

# every runtime cache the driver counts new files in: DeepGEMM's under each name a release reads (data/profiles.yaml
# env.cache_dir: SGLang's SGL_DG_CACHE_DIR / SGLANG_DG_CACHE_DIR, DeepJIT's DG_JIT_CACHE_DIR; a test holds them to it)
CACHE_VARS = ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "TVM_FFI_CACHE_DIR", "SGLANG_JIT_CACHE_DIR",
              "DG_JIT_CACHE_DIR", "SGL_DG_CACHE_DIR", "SGLANG_DG_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE",
              "CUTE_DSL_CACHE_DIR")


class Report:
    """What ran: calls per module, each module's failures (the first m and error, how many m failed; a module that
    failed at one m is still called at the others: a refusal at small m must not hide what larger m run), the
    stand-ins used."""

    def __init__(self, sync=None, counts=None) -> None:
        self.calls: dict[str, int] = {}
        self.failed: dict[str, dict[str, Any]] = {}
        self.standins: list[str] = []
        self.notes: list[str] = []
        # seconds: build, first forward, the pass over every m, decode, second forward
        self.times: dict[str, float] = {}
        # each module's first call in seconds, the GPU's work included (``sync``: torch.cuda.synchronize, before and
        # after it): what the first forward spends where (a load or a compile there is the module's first call's)
        self.sync = sync
        self.first_call_s: dict[str, float] = {}
        # what torch.compile did in each module's first call (``counts``: dynamo_counts, read either side of it): the
        # frames Dynamo traced and the graphs inductor compiled or loaded there, where any (a launched first forward
        # that compiles nothing still traces and loads: this says which module's seconds those are)
        self.counts = counts
        self.first_call_counts: dict[str, dict[str, int]] = {}
        # and the seconds torch.compile spent inside that first call, by torch's own timers (FIRST_CALL_SECONDS):
        # of a launched first forward's seconds, how many Dynamo's tracing and the cached graphs' load took
        self.first_call_torch_s: dict[str, dict[str, float]] = {}
        self.m_done: int | None = None  # the last m a pass over m finished (a run stopped early got this far)

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def call(self, name: str, m: int, fn, *args, **kwargs):
        first = self.sync is not None and name not in self.first_call_s and name not in self.failed
        if first:
            before = self.counts() if self.counts is not None else {}
            self.sync()
            t = time.perf_counter()
        try:
            out = fn(*args, **kwargs)
            if first:
                self.sync()
                self.first_call_s[name] = round(time.perf_counter() - t, 4)
                self._count_first(name, before)
        except Exception as exc:  # noqa: BLE001 - every failure is the proof's finding, reported by module
            seen = self.failed.setdefault(name, {"m": m, "error": f"{type(exc).__name__}: "
                                                                 f"{str(exc).splitlines()[0][:300]}", "count": 0})
            seen["count"] += 1
            return None
        self.calls[name] = self.calls.get(name, 0) + 1
        return out

    def _count_first(self, name: str, before: dict[str, int]) -> None:
        if self.counts is None:
            return
        after = self.counts()
        grew = {k: v - before.get(k, 0) for k, v in after.items() if k in FIRST_CALL_COUNTS and v > before.get(k, 0)}
        if grew:
            self.first_call_counts[name] = grew
        spent = {k: round(after[k] - before.get(k, 0.0), 4) for k in FIRST_CALL_SECONDS if k in after}
        spent = {k: v for k, v in spent.items() if v >= 0.0005}
        if spent:
            self.first_call_torch_s[name] = spent


def write_report(path: str | None, doc: dict) -> str:
    """The report as the driver writes it (sorted keys, indent 1), into ``path`` where one is given; its text."""
    text = json.dumps(doc, indent=1, sort_keys=True)
    if path:
        with open(path, "w") as f:
            f.write(text + "\n")
    return text


def stop_writes_report(path: str, document) -> None:
    """On SIGTERM (bench/first_forward.sh's PHASE_S: ``timeout`` ends a cold run a device call cannot wait for), write
    the report so far to ``path``, ``stopped`` set, and exit 143 at once: the first forward's seconds, each module's
    first call and how far the pass over m got (``m_done``) survive a run cut short. The exit skips the interpreter's
    shutdown, which would wait on the runtime's compile threads."""

    def on_term(signum, _frame) -> None:
        try:
            write_report(path, document(stopped=signal.Signals(signum).name))
        finally:
            os._exit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)


# files a runtime writes in its cache whenever it is imported, a build or not: FlashInfer's JIT log
# (flashinfer/jit/core.py opens <version>[/<archs>]/flashinfer_jit.log at import). Not a compile.
RUNTIME_LOGS = frozenset(["flashinfer_jit.log"])
SHOWN_FILES = 20  # new files named per cache folder (the count is whole)


def cache_files() -> dict[str, set[str]]:
    """The files (relative paths) under each JIT cache folder the job's environment names: what a compile adds.
    The runtimes' own logs (RUNTIME_LOGS) are left out."""
    out = {}
    for var in CACHE_VARS:
        root = os.environ.get(var)
        if root and os.path.isdir(root):
            out[var] = {os.path.relpath(os.path.join(d, f), root) for d, _, files in os.walk(root)
                        for f in files if f not in RUNTIME_LOGS}
    return out


def new_files(before: dict[str, set[str]], after: dict[str, set[str]]) -> dict[str, dict]:
    """Per cache folder, the files ``after`` holds that ``before`` did not: their count and the first names."""
    out = {}
    for var, files in after.items():
        added = sorted(files - before.get(var, set()))
        if added:
            out[var] = {"count": len(added), "files": added[:SHOWN_FILES]}
    return out


# the counters a module's first call is charged with (Report.first_call_counts)
FIRST_CALL_COUNTS = ("traced", "inductor_compiled", "inductor_loaded")
# the seconds it is charged with: our name -> torch's own timer (torch._dynamo.utils.compilation_time_metrics, what
# dynamo_timed records): all of torch.compile's work for a frame, Dynamo's bytecode tracing within it, the backend
# (AOTAutograd and inductor: a compile, or the FX graph cache's hit and its load) within that, and the load of
# inductor's generated module (its kernels included) within the backend. A timer torch did not run is left out.
FIRST_CALL_SECONDS = {"torch_compile_s": "_compile.compile_inner", "tracing_s": "bytecode_tracing",
                      "backend_s": "OutputGraph.call_user_compiler", "module_load_s": "PyCodeCache.load_by_key_path"}


def dynamo_counts() -> dict[str, float]:
    """torch.compile's own counters in this process: frames Dynamo traced (``traced``: every process traces the
    Python of a compiled function again, a cache hit or not), graphs inductor compiled (``inductor_compiled``: its
    FX graph cache's misses, the compiles) and loaded (``inductor_loaded``: its hits), and the seconds its own
    timers have summed so far (FIRST_CALL_SECONDS)."""
    try:
        from torch._dynamo.utils import compilation_time_metrics, counters
    except ImportError:
        return {}
    inductor = counters.get("inductor", {})
    seconds = {k: round(sum(compilation_time_metrics[metric]), 4) for k, metric in FIRST_CALL_SECONDS.items()
               if compilation_time_metrics.get(metric)}
    return {"traced": int(counters["frames"].get("ok", 0)) if "frames" in counters else 0,
            "inductor_compiled": int(inductor.get("fxgraph_cache_miss", 0)),
            "inductor_loaded": int(inductor.get("fxgraph_cache_hit", 0)),
            **{f"stats.{k}": int(v) for k, v in counters.get("stats", {}).items()}, **seconds}
