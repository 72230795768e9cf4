"""Benchmark (issue 33 item 2, speed): a server plan's whole GPU-free warm, its Triton fused-MoE item included,
against its limit max(sum / workers, longest single unit). Target: wall / limit <= 1.3.

One cold `dgprecompile warm --backend nvcc --sglang-jit on --jobs N --json` of the plan of a server command
(default: the README's 0.5.14 server command), timed from outside as the whole process. The limit comes from that
warm's own --json report: the units it scheduled are DeepGEMM kernels and SGLang JIT modules (item_seconds) and
the Triton MoE item's chunks (triton_moe_chunk_seconds: each chunk's subprocess, its imports included); sum /
workers is what N workers could not beat, and no schedule ends before its longest unit. Also given: the limit with
the Triton item as one unit (the sum of its chunks: what one process would at least have taken), the timeline
(workers ready, last item done), the load of the machine before and after (it may be shared), versions, command.

    PYTHONPATH=. .venv/bin/python bench/bench_triton_warm.py OUTDIR [--jobs N] [--sglang-cmd CMD]
        [--kernels K] [--jit J] [--m-max M] [--standins]

--kernels/--jit/--m-max trim the plan (the first K DeepGEMM kernels, the first J SGLang JIT modules, the Triton
item's m to 1..M) for a small machine; --standins uses the repository's named stand-ins for sgl-kernel and
torchvision (tests/standins; the CPU test machine has no sgl-kernel wheel). Needs what `make setup` puts beside
the venv: sglang 0.5.14, Triton 3.6.0, sgl-deep-gemm 0.1.3, and nvcc >= 12.3.
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
SITE = [str(VENV / "sglang-0.5.14"), str(VENV / "triton-3.6.0"), str(VENV / "sgl-deep-gemm-0.1.3")]


def _env(standins: bool) -> dict[str, str]:
    path = SITE[:1] + ([str(REPO / "tests" / "standins")] if standins else []) + SITE[1:] + [str(REPO)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    if standins:
        env.update({"DGP_STANDINS": "sgl_kernel,torchvision", "DGP_TRANSFORMERS_EXIST_OK": "1"})
    return env


def _dgp(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dgprecompile", *args], capture_output=True, text=True, env=env)


def _load() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def trim(manifest: Path, kernels: int | None, jit: int | None, m_max: int | None) -> None:
    """Keep the first ``kernels`` DeepGEMM kernels (and the buckets built by them), the first ``jit`` SGLang JIT
    modules, the Triton MoE items' m up to ``m_max``."""
    sys.path.insert(0, str(REPO))
    from dgprecompile.planning.manifest import read_manifest, write_manifest
    from dgprecompile.runtimes.items import TritonMoeItem

    data = read_manifest(manifest).to_dict()
    if kernels is not None:
        keep = {k["id"] for k in data["kernels"][:kernels]}
        for shape in data["shapes"]:
            shape["buckets"] = [b for b in shape["buckets"] if b["kernel"] in keep]
            shape["aux_kernels"] = [k for k in shape["aux_kernels"] if k in keep]
        data["kernels"] = [k for k in data["kernels"] if k["id"] in keep]
        data["total_kernels"] = len(data["kernels"])
    if jit is not None:
        data["sglang_jit_modules"] = data.get("sglang_jit_modules", [])[:jit]
    if m_max is not None:
        items = [TritonMoeItem.from_dict(t) for t in data.get("triton_moe", [])]
        data["triton_moe"] = [TritonMoeItem(**{**t.__dict__, "m_max": min(t.m_max, m_max)}).to_dict() for t in items]
    from dgprecompile.planning.manifest import plan_from_dict

    write_manifest(plan_from_dict(data), manifest)


def limits(summary: dict) -> dict:
    """The limit from warm's own report: its units' seconds, their sum / workers and the longest unit."""
    triton = set(summary["triton_moe_item_ids"])
    units = {k: v for k, v in summary["item_seconds"].items() if k not in triton}
    units.update(summary["triton_moe_chunk_seconds"])
    workers = summary["workers"]
    total = sum(units.values())
    limit = max(total / workers, max(units.values(), default=0.0))
    whole = {k: v for k, v in summary["item_seconds"].items()}  # the Triton item as one unit (its chunks' sum)
    return {"workers": workers, "units": len(units), "unit_s_sum": round(total, 1),
            "sum_over_workers_s": round(total / workers, 1), "longest_unit_s": round(max(units.values(), default=0), 1),
            "longest_unit": max(units, key=units.get) if units else None, "limit_s": round(limit, 1),
            "triton_item_s_as_one_unit": {k: v for k, v in whole.items() if k in triton},
            "limit_with_triton_as_one_unit_s": round(max(sum(whole.values()) / workers,
                                                         max(whole.values(), default=0.0)), 1)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--sglang-cmd", default=SERVER_CMD)
    ap.add_argument("--kernels", type=int)
    ap.add_argument("--jit", type=int)
    ap.add_argument("--m-max", type=int)
    ap.add_argument("--standins", action="store_true")
    opts = ap.parse_args()
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    env = _env(opts.standins)
    work = Path(tempfile.mkdtemp(prefix="bench-triton-warm-"))
    manifest = work / "plan.yaml"
    plan = _dgp(["plan", "--sglang", "0.5.14", "--sglang-cmd", opts.sglang_cmd, "-o", str(manifest)], env)
    if plan.returncode:
        print(plan.stderr, file=sys.stderr)
        return 1
    trim(manifest, opts.kernels, opts.jit, opts.m_max)
    warm_args = ["warm", "--manifest", str(manifest), "--cache-dir", str(work / "cache"), "--nvcc", NVCC,
                 "--backend", "nvcc", "--sglang-jit", "on", "--jobs", str(opts.jobs), "--json"]
    load_before = _load()
    t0 = time.perf_counter()
    warm = _dgp(warm_args, env)
    wall = time.perf_counter() - t0
    load_after = _load()
    (out / "warm.stderr.txt").write_text(warm.stderr[-200000:])
    if warm.returncode:
        print(warm.stderr[-3000:], file=sys.stderr)
        return 1
    summary = json.loads(warm.stdout)
    (out / "warm.json").write_text(json.dumps(summary, indent=1) + "\n")
    lim = limits(summary)
    res = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "command": "PYTHONPATH=. .venv/bin/python bench/bench_triton_warm.py " + " ".join(sys.argv[1:]),
           "server_command": opts.sglang_cmd, "trim": {"kernels": opts.kernels, "jit": opts.jit, "m_max": opts.m_max},
           "machine": f"{platform.machine()}, {os.cpu_count()} CPUs", "python": platform.python_version(),
           "loadavg_before": load_before, "loadavg_after": load_after,
           "kernels": summary["kernels"], "sglang_jit_modules": summary["sglang_jit_modules"],
           "triton_moe_items": len(summary["triton_moe_item_ids"]), "compiled": summary["compiled"],
           "failed": summary["failed"], "wall_s": round(wall, 1), "inside_wall_s": summary["wall_seconds"], **lim,
           "wall_over_limit": round(wall / lim["limit_s"], 3) if lim["limit_s"] else None,
           "inside_wall_over_limit": round(summary["wall_seconds"] / lim["limit_s"], 3) if lim["limit_s"] else None,
           "target": 1.3, "timeline": summary["timeline"]}
    (out / "summary.json").write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
