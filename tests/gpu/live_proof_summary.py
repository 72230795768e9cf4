"""Summarise tests/gpu/live_proof.sh's files into OUT/summary.json: versions, timings, and each check's verdict.

usage: python3 tests/gpu/live_proof_summary.py OUT      (exit 0 when every check holds)
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path


def load(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def main(out: Path) -> int:
    warm, verify = load(out / "warm.json"), load(out / "verify.json")
    live_all, live_del = load(out / "live_all.json"), load(out / "live_deleted.json")
    deleted = [line.split("\t") for line in (out / "deleted.txt").read_text().splitlines() if line.strip()] \
        if (out / "deleted.txt").is_file() else []
    nvcc = subprocess.run(["/usr/local/cuda/bin/nvcc", "--version"], capture_output=True, text=True).stdout
    checks = {}
    checks["warm: every DeepGEMM kernel and both SGLang JIT modules built, none failed or skipped"] = bool(
        warm and warm.get("failed") == 0 and warm.get("sglang_jit_modules") == 2 and not warm.get("skipped"))
    checks["static verify: complete, coverage proved"] = bool(verify and verify.get("complete")
                                                              and verify.get("coverage") == "proved")
    checks["live, every m: 0 compiles of any kind, 0 failed calls"] = bool(
        live_all and live_all.get("ok") and live_all.get("compiles") == 0 and live_all.get("failed_calls") == 0
        and len(live_all.get("units", [])) == 3)
    refused = [e for u in (live_del or {}).get("units", []) for e in u.get("refused", [])]
    named = {str(e.get("planned_kernel") or "") for e in refused} | {str(e.get("kernel")) for e in refused} \
        | {str(e.get("entry")) for e in refused}
    for kid, where in deleted:
        entry = where.split("/", 1)[1]
        checks[f"live after deleting {kid}: named"] = kid in named or entry in named
    checks["live after deleting: exit 1 (report not ok)"] = bool(live_del and not live_del.get("ok"))
    summary = {
        "pass": all(checks.values()), "checks": checks,
        "versions": {name: version(name) for name in ("sglang", "apache-tvm-ffi", "sgl-deep-gemm", "torch",
                                                       "transformers", "triton")}
        | {"nvcc": next((ln for ln in nvcc.splitlines() if "release" in ln), None),
           "gpu": (live_all or {}).get("device")},
        "warm": {k: (warm or {}).get(k) for k in ("kernels", "sglang_jit_modules", "compiled", "already_cached",
                                                  "failed", "wall_seconds", "timeline", "workers")},
        "live_all": {"verdict": (live_all or {}).get("verdict"),
                     "units": [{k: u.get(k) for k in ("kind", "keys", "calls", "m_min", "m_max", "errors", "seconds",
                                                      "check", "new_deepgemm", "new_jit", "new_triton")}
                               for u in (live_all or {}).get("units", [])]},
        "live_deleted": {"verdict": (live_del or {}).get("verdict"), "deleted": deleted,
                         "refused": [{k: e.get(k) for k in ("generation", "kernel", "entry", "planned_kernel")}
                                     for e in refused[:6]], "refused_total": len(refused),
                         "failed_calls": (live_del or {}).get("failed_calls")},
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps({"pass": summary["pass"], "checks": checks}, indent=1))
    return 0 if summary["pass"] else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
