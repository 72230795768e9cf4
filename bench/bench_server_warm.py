"""CPU benchmark (issue 20 item 5): the sglang 0.5.14 server plan's whole GPU-free warm against its own limit.

One run, side by side: (b) `dgprecompile warm --backend nvcc --sglang-jit on --jobs N` of the plan planned from
the README's 0.5.14 server command (DeepGEMM's kernels and SGLang's JIT modules in one worker budget) on a cold
cache, timed from outside as the whole process; (c) its limit, the sum of the single-item build times that same
warm measured (--json item_seconds) / N workers. Target: b/c <= 1.3. Also written: the load of the machine
before and after (other engineers share it), the per-item times, versions, date and command.

    PYTHONPATH=. .venv/bin/python bench/bench_server_warm.py OUTDIR [--jobs N]

Needs what `make setup` puts beside the venv: sglang 0.5.14 (its jit_kernel), sgl-deep-gemm 0.1.3, nvcc >= 12.3.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VENV = REPO / ".venv"
SERVER_CMD = ("python -m sglang.launch_server --model-path Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8 "
              "--tp 8 --ep 8")
NVCC = next((p for p in ("/usr/local/cuda/bin/nvcc", "/usr/local/cuda-13.0/bin/nvcc") if os.path.exists(p)), "nvcc")


def _dgp(args: list[str], pythonpath: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*pythonpath, str(REPO)])}
    return subprocess.run([sys.executable, "-m", "dgprecompile", *args], capture_output=True, text=True, env=env)


def _load() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    opts = ap.parse_args()
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    path = [str(VENV / "sglang-0.5.14"), str(REPO / "tests" / "standins"), str(VENV / "sgl-deep-gemm-0.1.3")]
    work = Path(tempfile.mkdtemp(prefix="bench-server-warm-"))
    manifest = work / "plan.yaml"
    plan = _dgp(["plan", "--sglang", "0.5.14", "--sglang-cmd", SERVER_CMD, "-o", str(manifest)], path)
    if plan.returncode:
        print(plan.stderr, file=sys.stderr)
        return 1
    warm_args = ["warm", "--manifest", str(manifest), "--cache-dir", str(work / "cache"), "--nvcc", NVCC,
                 "--backend", "nvcc", "--sglang-jit", "on", "--jobs", str(opts.jobs), "--json"]
    load_before = _load()
    t0 = time.perf_counter()
    warm = _dgp(warm_args, path)
    b = time.perf_counter() - t0
    load_after = _load()
    if warm.returncode:
        print(warm.stderr[-3000:], file=sys.stderr)
        return 1
    summary = json.loads(warm.stdout)
    (out / "warm.json").write_text(json.dumps(summary, indent=1) + "\n")
    seconds = summary["item_seconds"]
    workers = summary["workers"]
    c = sum(seconds.values()) / workers
    jit = {k: v for k, v in seconds.items() if k in summary["sglang_jit_module_ids"]}
    res = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": "PYTHONPATH=. .venv/bin/python bench/bench_server_warm.py " + " ".join(sys.argv[1:]),
        "warm_command": "dgprecompile " + " ".join(warm_args[:1] + ["--manifest", "<plan>", "--cache-dir", "<cold>"]
                                                   + warm_args[5:]),
        "server_command": SERVER_CMD, "machine": f"{platform.machine()}, {os.cpu_count()} CPUs "
                                                 "(shared with other engineers' test runs)",
        "python": platform.python_version(), "nvcc": NVCC,
        "loadavg_before": load_before, "loadavg_after": load_after,
        "kernels": summary["kernels"], "sglang_jit_modules": summary["sglang_jit_modules"],
        "compiled": summary["compiled"], "failed": summary["failed"], "workers": workers,
        "b_warm_wall_s": round(b, 1), "b_inside_wall_s": summary["wall_seconds"],
        "c_limit_s": round(c, 1), "b_over_c": round(b / c, 3),
        "single_item_s_sum": round(sum(seconds.values()), 1),
        "jit_module_s": jit, "deepgemm_kernel_s_min_max": [min(v for k, v in seconds.items() if k not in jit),
                                                           max(v for k, v in seconds.items() if k not in jit)],
        "timeline": summary["timeline"],
    }
    (out / "summary.json").write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
