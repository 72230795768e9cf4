"""GPU probe (device only): can an nvcc stand-in named by DG_JIT_NVCC_COMPILER refuse runtime compiles of the
C++-JIT DeepGEMM without changing its cache keys?

usage: python tests/gpu/probe_strict.py SWEEP.json   (the cache the sweep probe warmed)
Runs three child processes against that cache, each with DG_JIT_NVCC_COMPILER=tests/gpu/nvcc_probe.sh:
  1. pass-through, calls the sweep already made: must add no entry (key unchanged by the stand-in);
  2. deny, the same calls: must succeed (all hits);
  3. deny, a shape never compiled: must fail, and we record how (exception type and message).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

CHILD = r'''
import os, sys, json
import torch, deep_gemm
n, k, ms = int(sys.argv[1]), int(sys.argv[2]), [int(x) for x in sys.argv[3].split(",")]
a = torch.empty((max(ms), k), device="cuda", dtype=torch.float8_e4m3fn)
b = torch.empty((n, k), device="cuda", dtype=torch.float8_e4m3fn)
sfb = torch.ones((n // 128, k // 128), device="cuda", dtype=torch.float32)
d = torch.empty((max(ms), n), device="cuda", dtype=torch.bfloat16)
before = set(os.listdir(os.path.join(os.environ["DG_JIT_CACHE_DIR"], "cache")))
try:
    for m in ms:
        sfa = torch.ones((k // 128, (m + 3) // 4 * 4), device="cuda", dtype=torch.float32).t()[:m]
        deep_gemm.fp8_gemm_nt((a[:m], sfa), (b, sfb), d[:m])
    torch.cuda.synchronize()
    outcome = "ok"
except BaseException as exc:
    outcome = f"{type(exc).__module__}.{type(exc).__name__}: {exc}"
after = set(os.listdir(os.path.join(os.environ["DG_JIT_CACHE_DIR"], "cache")))
print(json.dumps({"outcome": outcome[:2000], "new_entries": sorted(after - before)}))
'''


def run(cache: str, deny: bool, n: int, k: int, ms: str, log: str) -> dict:
    here = os.path.dirname(os.path.abspath(__file__))
    env = {**os.environ, "DG_JIT_CACHE_DIR": cache, "DG_JIT_NVCC_COMPILER": os.path.join(here, "nvcc_probe.sh"),
           "DGP_PROBE_LOG": log, "DGP_PROBE_DENY": "1" if deny else "0"}
    env.pop("DG_PRINT_CONFIGS", None)
    proc = subprocess.run([sys.executable, "-c", CHILD, str(n), str(k), ms], env=env, capture_output=True,
                          text=True, timeout=600)
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "{}"
    try:
        data = json.loads(last)
    except json.JSONDecodeError:
        data = {"stdout_tail": proc.stdout[-1500:]}
    data["returncode"] = proc.returncode
    data["stderr_tail"] = proc.stderr[-1500:]
    with open(log) as f:
        data["nvcc_calls"] = [line.split(" ", 1)[1][:200] for line in f.read().splitlines()]
    open(log, "w").close()
    return data


def main() -> None:
    sweep = json.load(open(sys.argv[1]))
    cache = sweep["cache_dir"]
    log = os.path.join(os.path.dirname(os.path.abspath(sys.argv[1])), "nvcc-calls.log")
    open(log, "w").close()
    report = {
        "passthrough_warm": run(cache, False, 1792, 6144, "1,17,33,64,100,4096,16384", log),
        "deny_warm": run(cache, True, 6144, 1536, "1,17,500,8000", log),
        "deny_cold": run(cache, True, 2048, 2048, "64", log),
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
