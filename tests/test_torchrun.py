"""`torchrun --nproc_per_node 2 -m dgprecompile warm`: two real ranks, started together by torch's own launcher,
warm one plan into one shared cache. Each kernel is built once (by one rank), nothing is adopted or left in
staging, and verify then finds the plan complete. Real torchrun (torch's elastic agent), real nvcc, the legacy
DeepGEMM (GPU-free), CPU only: what the two-GPU run of the multi-rank issue needs from the warm side."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import NVCC, needs_legacy, needs_nvcc

from dgprecompile.cache.store import CacheStore
from dgprecompile.planning.manifest import read_manifest

pytestmark = [needs_legacy, needs_nvcc, pytest.mark.nvcc, pytest.mark.slow]

TORCHRUN = shutil.which("torchrun", path=os.path.dirname(sys.executable))


@pytest.mark.skipif(TORCHRUN is None, reason="torchrun is not installed beside this python")
def test_two_torchrun_ranks_warm_one_shared_cache_each_kernel_once(tmp_path):
    from dgprecompile.planning.manifest import plan_from_dict, write_manifest
    from dgprecompile.planning.plan import PlanRequest
    from dgprecompile.planning.request import plan_from_request

    plan = plan_from_request(PlanRequest(model="Qwen3-Coder-480B", tp=8, ep=8, sglang="0.5.1"))
    data = plan.to_dict()
    shape = min(data["shapes"], key=lambda s: (s["kernels"], s["n"] * s["k"]))
    keep = {b["kernel"] for b in shape["buckets"]}
    data["shapes"], data["total_kernels"] = [shape], len(keep)
    data["kernels"] = [k for k in data["kernels"] if k["id"] in keep]
    manifest = tmp_path / "plan.yaml"
    write_manifest(plan_from_dict(data), manifest)

    cache, logs = tmp_path / "shared-cache", tmp_path / "logs"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(
        p for p in (str(Path(__file__).resolve().parent.parent), os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.run([TORCHRUN, "--standalone", "--nproc_per_node", "2", "--log-dir", str(logs),
                           "--redirects", "1", "-m", "dgprecompile", "warm", "--manifest", str(manifest),
                           "--cache-dir", str(cache), "--nvcc", NVCC, "--jobs", "1", "--json"],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summaries = [json.loads(p.read_text()) for p in sorted(logs.rglob("stdout.log"))]
    assert len(summaries) == 2, sorted(str(p) for p in logs.rglob("*"))
    assert sorted(s["kernels"] for s in summaries) == [len(keep) // 2, len(keep) - len(keep) // 2]
    assert sum(s["compiled"] for s in summaries) == len(keep)  # every kernel built, by exactly one rank
    assert all(s["failed"] == 0 and s["already_cached"] == 0 for s in summaries)

    index = CacheStore(cache).read_index()
    planned = read_manifest(manifest).kernels
    assert sorted(index.kernels) == sorted(planned)
    assert {r.by for r in index.kernels.values()} == {"warm"}  # built here, none adopted from the other rank
    assert len({r.entry for r in index.kernels.values()}) == len(keep)
    assert not any((cache / "dgprecompile" / "staging").iterdir())

    verify = subprocess.run([sys.executable, "-m", "dgprecompile", "verify", "--manifest", str(manifest),
                             "--cache-dir", str(cache), "--json"], capture_output=True, text=True, timeout=120,
                            env=env)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert json.loads(verify.stdout)["complete"] is True
