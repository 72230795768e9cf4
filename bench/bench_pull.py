"""Pull + verify from an S3 server against warming here, side by side in one run (CPU machine, legacy JIT).

  (w) `dgprecompile warm` of the plan into an empty cache, then `verify`: what a node does without a shared warm;
  (p) `dgprecompile push` of that cache to a local S3 server (moto's standalone server on 127.0.0.1, a real
      HTTP S3 API through s3fs), then on an empty cache `dgprecompile pull` (download, every check, unpack,
      verify), then a separate `verify`: what a node does with one.
Each step is a fresh `python -m dgprecompile` process, timed from outside (so every import counts), repeated
--repeat times for the pull. Wall seconds depend on what else the machine runs (load averages are recorded);
CPU seconds of each step's process tree (cpu_s) much less so. Writes summary.json and the step outputs under OUTDIR.

usage: python bench/bench_pull.py [--manifest M] [--out bench/results/DATE-cpu-pull] [--repeat 3]
Needs nvcc and the legacy DeepGEMM (make setup), and the test extra (moto[server], s3fs).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
DEFAULT = "shapes/Qwen3-Coder-480B-A35B-Instruct-FP8.tp8.ep8.sglang-0.5.0-0.5.1.auto.yaml"


CPU: dict[str, float] = {}  # step name -> CPU seconds (user + sys) of its process tree


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def dg(env, out: Path, name: str, *args: str) -> tuple[float, subprocess.CompletedProcess]:
    cpu0 = _children_cpu()
    start = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "dgprecompile", *args], env=env, capture_output=True, text=True,
                         cwd=REPO, timeout=1800)
    seconds = time.perf_counter() - start
    CPU[name] = round(_children_cpu() - cpu0, 2)  # waited-for descendants only (warm's workers are)
    (out / f"{name}.stdout").write_text(res.stdout)
    (out / f"{name}.stderr").write_text(res.stderr)
    if res.returncode != 0:
        raise SystemExit(f"{name} failed ({res.returncode}): {res.stderr[-2000:]}")
    return seconds, res


def tree_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in (root / "cache").rglob("*") if p.is_file())


def machine() -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    nvcc = subprocess.run(["/usr/local/cuda/bin/nvcc", "--version"], capture_output=True, text=True).stdout
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(), "kernel": platform.release(),
            "nvcc": nvcc.strip().splitlines()[-1] if nvcc else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--manifest", default=DEFAULT)
    ap.add_argument("--out", default=None)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    when = datetime.datetime.now(datetime.timezone.utc)
    out = Path(args.out or REPO / "bench" / "results" / f"{when:%Y-%m-%d-%H%M}-cpu-pull")
    out.mkdir(parents=True, exist_ok=True)

    from s3server import S3Server

    load_before = Path("/proc/loadavg").read_text().split()[:3]
    work = Path(tempfile.mkdtemp(prefix="bench-pull-"))
    server = S3Server(log=out / "moto.log")
    try:
        server.bucket("bench")
        env = {**os.environ, **server.env, "PYTHONPATH": str(REPO)}
        m = ["--manifest", args.manifest]
        warmed = work / "warmed"
        warm_s, warm = dg(env, out, "w_warm", "warm", *m, "--cache-dir", str(warmed), "--json")
        wverify_s, _ = dg(env, out, "w_verify", "verify", *m, "--cache-dir", str(warmed), "--json")
        push_s, push = dg(env, out, "p_push", "push", *m, "--cache-dir", str(warmed), "--to", "s3://bench/480b",
                          "--json")
        pushed = json.loads(push.stdout)
        pulls = []
        for i in range(args.repeat):
            node = work / f"node{i}"
            pull_s, pull = dg(env, out, f"p_pull{i}", "pull", *m, "--cache-dir", str(node), "--from",
                              "s3://bench/480b", "--json")
            pverify_s, ver = dg(env, out, f"p_verify{i}", "verify", *m, "--cache-dir", str(node), "--json")
            stats = json.loads(pull.stdout)
            assert stats["outcome"] == "hit" and stats["complete"] and json.loads(ver.stdout)["complete"]
            pulls.append({"pull_s": round(pull_s, 2), "verify_s": round(pverify_s, 2),
                          "pull_plus_verify_s": round(pull_s + pverify_s, 2), "pull_stats": stats["seconds"],
                          "bytes": stats["bytes"]})
        # once more in text mode, for the stats line a person sees (not timed into the summary)
        _, text = dg(env, out, "p_pull_text", "pull", *m, "--cache-dir", str(work / "node-text"), "--from",
                     "s3://bench/480b")
        best = min(pulls, key=lambda p: p["pull_plus_verify_s"])
        warm_total = warm_s + wverify_s
        summary = {
            "date": when.isoformat(timespec="seconds"), "machine": machine(),
            "command": f"python bench/bench_pull.py --manifest {args.manifest} --repeat {args.repeat}",
            "kernels_compiled": json.loads(warm.stdout)["compiled"], "warm_workers": json.loads(warm.stdout)["workers"],
            "warm_s": round(warm_s, 2), "warm_verify_s": round(wverify_s, 2), "warm_plus_verify_s": round(warm_total, 2),
            "push_s": round(push_s, 2), "artifact_bytes": pushed["bytes"], "cache_entry_bytes": tree_bytes(warmed),
            "pulls": pulls, "pull_text_stats_line": text.stdout.strip(),
            "pull_plus_verify_s_median": sorted(p["pull_plus_verify_s"] for p in pulls)[len(pulls) // 2],
            "ratio_warm_over_pull_best": round(warm_total / best["pull_plus_verify_s"], 1),
        }
        summary["ratio_warm_over_pull_median"] = round(warm_total / summary["pull_plus_verify_s_median"], 1)
        # the machine may be shared: the 1/5/15-minute load averages before and after, on os.cpu_count() cores
        summary["cpu_s"] = dict(CPU)
        summary["loadavg_before_after"] = [load_before, Path("/proc/loadavg").read_text().split()[:3]]
        (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
        print(json.dumps(summary, indent=1))
    finally:
        server.kill()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
