"""warm's share for SGLang's torch.compile graphs (runtimes/inductor.py): prepared with the other runtimes' parts
(warm_setup's PREPARE, which asks :func:`gpu_problem`), run by the parent after the pool (:func:`run_items`).

The graphs need the job's GPU kind (inductor's key holds the live GPU's name): where none of the planned kind is
visible, the items are skipped with that reason and the warm goes on (verify then names them missing, and a strict
launch refuses to start without them). Items run one after another, each as ``parts`` subprocesses side by side
(compile/inductor_graphs.py ``--part i/n``), so that what appeared in the cache during an item is that item's: its
whole new entries are filed in the index (``extra``, by warm) and its record written (cache/inductor_graphs.py).
No threads: subprocesses in their own sessions, read one after another (each prints one line).
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

from dgprecompile.cache import inductor_graphs as records
from dgprecompile.errors import CompileFailed, DGError
from dgprecompile.runtimes import family_for_area

PARTS = 8  # most subprocesses of one item side by side (within --jobs)


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
    another; record its entries and its event."""
    installed = part.runtime.installed()
    for item in part.built:
        if records.item_coverage(setup.store, setup.store.read_index(), item.id, installed).status == records.COVERED:
            if item.id not in result.cached:  # counted as cached up front where prepare saw its record
                result.cached.append(item.id)
            continue
        on_event({"event": "start", "kernel": item.id})
        t0 = time.perf_counter()
        try:
            record = build_item(setup, part, item)
        except DGError as exc:
            result.failed[item.id] = exc.message
            on_event({"event": "failed", "kernel": item.id, "error": exc.message})
            continue
        seconds = round(time.perf_counter() - t0, 2)
        result.compiled[item.id] = seconds
        on_event({"event": "done", "kernel": item.id, "status": "compiled", "seconds": seconds,
                  "graphs": record["graphs"]})


def build_item(setup, part, item) -> dict[str, Any]:
    root = str(setup.store.root)
    env = dict(os.environ)
    for area in records.AREAS:
        fam = family_for_area(area)
        env.update(dict(fam.launch_env(root)))
        fam.area_dir(root).mkdir(parents=True, exist_ok=True)
    before = records.snapshot(root)
    argv = part.runtime.warm_argv(item, root, part.job["python"])
    reports = run_parts(argv, env, max(1, min(PARTS, setup.budget or setup.workers)))
    new = records.appeared(root, before)
    filed, broken = records.file_entries(setup.store, new)
    if broken or not filed:
        raise CompileFailed(f"{item.id}: " + (f"entries not whole: {', '.join(broken[:3])}" if broken
                                                  else "its calls compiled nothing and found nothing new"))
    record = {"item": item.id, "torch": reports[0]["torch"], "gpu": reports[0]["gpu"],
              "graphs": sum(int(r.get("counters", {}).get("fxgraph_cache_miss", 0)) for r in reports),
              "entries": filed, "seconds": round(sum(float(r.get("seconds") or 0) for r in reports), 2)}
    setup.store.update_index(lambda index: index.inductor.__setitem__(item.id, record))
    return record


def run_parts(argv: list[str], env: dict[str, str], parts: int) -> list[dict[str, Any]]:
    """The item's parts side by side, each in its own session; their reports, or one error naming the first that
    failed (the others are stopped with their process groups)."""
    import json

    with tempfile.TemporaryDirectory(prefix="dgprecompile-inductor-") as tmp:
        env = {**env, "SGLANG_CACHE_DIR": str(Path(tmp) / "sglang-cache")}
        procs = []
        try:
            for i in range(parts):
                log = open(Path(tmp) / f"part-{i}.log", "wb")  # noqa: SIM115 - closed below
                procs.append((subprocess.Popen([*argv, "--part", f"{i}/{parts}"], stdin=subprocess.DEVNULL,
                                               stdout=subprocess.PIPE, stderr=log, env=env,
                                               start_new_session=True), log))
            reports = []
            for i, (proc, log) in enumerate(procs):
                out, _ = proc.communicate()
                log.close()
                if proc.returncode != 0:
                    tail = (Path(tmp) / f"part-{i}.log").read_text(errors="replace").strip().splitlines()[-1:]
                    raise CompileFailed(f"python -m {argv[2]} part {i}/{parts} exited with code "
                                             f"{proc.returncode}: {(tail or ['no output'])[0][:600]}")
                reports.append(json.loads(out.decode().strip().splitlines()[-1]))
            return reports
        finally:
            for proc, log in procs:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                log.close()
