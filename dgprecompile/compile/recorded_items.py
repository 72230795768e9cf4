"""warm's share for the runtimes whose items are built by subprocesses writing the runtime's own cache, after the
pool: SGLang's torch.compile graphs (runtimes/inductor.py, on the job's GPU kind) and FlashInfer's JIT modules
(runtimes/flashinfer.py, GPU-free). Prepared with the other runtimes' parts (warm_setup's PREPARE, which asks
:func:`gpu_problem` where a runtime needs a GPU), run by the parent after the pool (:func:`run_items`).

Items run one after another, each as ``parts`` subprocesses side by side (the runtime's ``warm_argv`` plus
``--part i/n`` where it splits an item: ``parts`` > 1), so that what appeared in the runtime's areas during an item
is that item's: its whole new entries are filed in the index (``extra``, by warm) and its record written in the
runtime's index section (cache/item_records.py). No threads: subprocesses in their own sessions, read one after
another (each prints one line of JSON last).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from dgprecompile.cache import item_records as records
from dgprecompile.errors import CompileFailed, DGError
from dgprecompile.runtimes import family_for_area


def visible_gpu_names() -> list[str]:
    """The names of the GPUs this process would see (CUDA_VISIBLE_DEVICES honoured), from nvidia-smi."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) == "" or not shutil.which("nvidia-smi"):
        return []
    try:
        res = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    names = [line.strip() for line in res.stdout.splitlines() if line.strip()]
    wanted = os.environ.get("CUDA_VISIBLE_DEVICES")
    if wanted is not None:
        picks = [int(d) for d in wanted.split(",") if d.strip().isdigit()]
        names = [names[i] for i in picks if i < len(names)]
    return names


def gpu_problem(item, gpus: list[str], needs_gpu: str) -> str | None:
    """Why ``item`` cannot be built with ``gpus`` visible (None: its GPU kind is one of them)."""
    if item.device_name in gpus:
        return None
    return f"needs a visible {item.device_name} ({', '.join(sorted(set(gpus))) or 'no GPU'} here): {needs_gpu}"


def run_items(setup, part, on_event, result) -> None:
    """Build each item of ``part`` not covered yet (its record, read now: a stale fingerprint cleared it), one after
    another, or, for a runtime that names each item's entry itself (``entry_of``), all side by side; record its
    entries and its event."""
    runtime = part.runtime
    installed = runtime.installed()
    pending = []
    for item in part.built:
        index = setup.store.read_index()
        if records.item_coverage(setup.store, index, runtime, item.id, installed).status == records.COVERED:
            if item.id not in result.cached:  # counted as cached up front where prepare saw its record
                result.cached.append(item.id)
            continue
        pending.append(item)
    if hasattr(runtime, "entry_of"):
        _side_by_side(setup, part, pending, on_event, result)
        return
    for item in pending:
        on_event({"event": "start", "kernel": item.id})
        _settle(setup, item, time.perf_counter(), lambda it=item: build_item(setup, part, it), on_event, result)


def _settle(setup, item, t0: float, work, on_event, result) -> None:
    """Run ``work`` (what finishes the item) and count the item compiled or failed, with its event: a failure's
    first error lines, its whole output kept in the cache's log folder and a known cause's hint
    (compile/build_log.py)."""
    from dgprecompile.compile.build_log import describe

    try:
        work()
    except DGError as exc:
        failure = describe(exc.message, setup.store.root, item.id, setup.plan.sglang_version)
        result.failed[item.id] = failure.summary
        result.failure_details[item.id] = failure.event()
        on_event({"event": "failed", "kernel": item.id, "error": failure.summary, **failure.event()})
        return
    seconds = round(time.perf_counter() - t0, 2)
    result.compiled[item.id] = seconds
    on_event({"event": "done", "kernel": item.id, "status": "compiled", "seconds": seconds})


def build_item(setup, part, item) -> dict[str, Any]:
    """Run the item's subprocesses with the runtime's areas set up as launch sets them, file what appeared, write
    its record: what the subprocesses reported (``record`` of the first report, each runtime's own fields), its
    entries and the seconds they took."""
    runtime = part.runtime
    root = str(setup.store.root)
    env = _areas_env(root, runtime, part)
    before = records.snapshot(root, runtime.areas)
    parts = max(1, min(runtime.parts, setup.budget or setup.workers))
    reports = run_parts(runtime.warm_argv(item, root, part.job["python"]), env, parts)
    new = records.appeared(root, before)
    filed, broken = records.file_entries(setup.store, new)
    if broken or not filed:
        raise CompileFailed(f"{item.id}: " + (f"entries not whole: {', '.join(broken[:3])}" if broken
                                                  else "its build made nothing new in the cache"))
    record = {"item": item.id, **reports[0]["record"], "entries": filed,
              "seconds": round(sum(float(r.get("seconds") or 0) for r in reports), 2)}
    if "graphs" in record:  # inductor: the graphs every part compiled
        record["graphs"] = sum(int(r["record"].get("graphs", 0)) for r in reports)
    setup.store.update_index(lambda index: records.records(index, runtime).__setitem__(item.id, record))
    return record


def _side_by_side(setup, part, items, on_event, result) -> None:
    """Items whose entries their runtime names (FlashInfer's module directories): every item's subprocess at once,
    the --jobs budget shared among them (MAX_JOBS each), then each item's own entry filed and recorded."""
    if not items:
        return
    runtime = part.runtime
    root = str(setup.store.root)
    env = _areas_env(root, runtime, part)
    env["MAX_JOBS"] = str(max(1, (setup.budget or setup.workers or 1) // len(items)))
    t0 = time.perf_counter()
    for item in items:
        on_event({"event": "start", "kernel": item.id})
    outcomes = run_each([runtime.warm_argv(item, root, part.job["python"]) for item in items], env)

    def file_one(item, report, error) -> None:
        if error is not None:
            raise CompileFailed(f"{item.id}: {error}")
        filed, broken = records.file_entries(setup.store, [f"{runtime.area}/{runtime.entry_of(item)}"])
        if broken or not filed:
            raise CompileFailed(f"{item.id}: its entry {runtime.area}/{runtime.entry_of(item)} is not whole")
        record = {"item": item.id, **report["record"], "entries": filed, "seconds": report.get("seconds")}
        setup.store.update_index(lambda index: records.records(index, runtime).__setitem__(item.id, record))

    for item, (report, error) in zip(items, outcomes, strict=True):
        _settle(setup, item, t0, lambda it=item, r=report, e=error: file_one(it, r, e), on_event, result)


def _areas_env(root: str, runtime, part) -> dict[str, str]:
    """The environment of an item's subprocess: the runtime's areas as launch sets them, and its job's own."""
    env = {**os.environ, **dict(part.job.get("env", {}))}
    for area in runtime.areas:
        fam = family_for_area(area)
        env.update(dict(fam.launch_env(root)))
        fam.workspace(root)
    return env


def run_each(argvs: list[list[str]], env: dict[str, str]) -> list[tuple[dict[str, Any] | None, str | None]]:
    """Every command side by side, each in its own session; per command its report (its last stdout line, JSON)
    or why it failed: its exit code, then everything it printed (an interrupt stops them all with their process
    groups)."""
    import json

    with tempfile.TemporaryDirectory(prefix="dgprecompile-items-") as tmp:
        procs = []
        try:
            for i, argv in enumerate(argvs):
                log = open(Path(tmp) / f"item-{i}.log", "wb")  # noqa: SIM115 - closed below
                procs.append((subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
                                               env=env, start_new_session=True), log))
            out = []
            for i, (proc, log) in enumerate(procs):
                text, _ = proc.communicate()
                log.close()
                if proc.returncode != 0:
                    printed = (Path(tmp) / f"item-{i}.log").read_text(errors="replace").strip() or "no output"
                    out.append((None, f"exited with code {proc.returncode}:\n{printed}"))
                else:
                    out.append((json.loads(text.decode().strip().splitlines()[-1]), None))
            return out
        finally:
            for proc, log in procs:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                log.close()


def run_parts(argv: list[str], env: dict[str, str], parts: int) -> list[dict[str, Any]]:
    """The item's parts side by side (:func:`run_each`); their reports, or one error naming the first that failed.
    SGLang's own cache (its compiled functions' other files) goes to a scratch folder of this run."""
    with tempfile.TemporaryDirectory(prefix="dgprecompile-sglang-cache-") as tmp:
        outcomes = run_each([[*argv, *(["--part", f"{i}/{parts}"] if parts > 1 else [])] for i in range(parts)],
                            {**env, "SGLANG_CACHE_DIR": tmp})
    for i, (_, error) in enumerate(outcomes):
        if error is not None:
            raise CompileFailed(f"python -m {argv[2]} part {i}/{parts} {error}")
    return [report for report, _ in outcomes]
