"""Device proof of `warm --backend sweep` (GPU machine only; skipped elsewhere): runs tests/gpu/sweep_proof.sh
with sglang-kernel 0.4.2's deep_gemm (.whl-gen/sglang_kernel-0.4.2-deep_gemm.tgz, or $DGP_SWEEP_TGZ) and checks
what it proves: warm sweeps every chunk, verify is complete by sweep records (and the modelled plan's computed
entries are all among those the library built), a second warm sweeps nothing, a
fresh process calling every planned m creates 0 new entries, and a deleted entry is named by key and m range."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]
TGZ = Path(os.environ.get("DGP_SWEEP_TGZ") or REPO / ".whl-gen" / "sglang_kernel-0.4.2-deep_gemm.tgz")


def _has_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.mark.skipif(not _has_gpu() or not TGZ.is_file(), reason="needs a GPU and sglang-kernel 0.4.2's deep_gemm")
def test_sweep_warm_leaves_nothing_to_compile(tmp_path):
    env = dict(os.environ, OUT=str(tmp_path), TGZ=str(TGZ), KEEP_FILES="1")
    subprocess.run(["bash", str(REPO / "tests" / "gpu" / "sweep_proof.sh")], cwd=REPO, env=env, check=True,
                   timeout=900)
    load = lambda name: json.loads((tmp_path / f"{name}.json").read_text())  # noqa: E731
    warm1, warm2, verify1, verify2, recall = (load(n) for n in ("warm1", "warm2", "verify1", "verify2", "recall"))
    assert warm1["failed"] == 0 and warm1["compiled"] > 0
    assert verify1["complete"] and verify1["coverage"] == "sweep"
    # the modelled plan on the swept cache: every entry the model predicts was built by the library itself
    assert load("verify1m")["complete"], load("verify1m")["verdict"]
    assert warm2["compiled"] == 0 and warm2["already_cached"] == verify1["kernels_total"]
    assert sum(k["calls"] for k in recall["keys"]) > 0
    assert not [k for k in recall["keys"] if k["errors"] or k["truncated_at"]]
    assert sum(len(e[1]) for k in recall["keys"] for e in k["new_entries"]) == 0
    assert not verify2["complete"] and verify2["problems"] and all(" m " in p["kernel"] for p in verify2["problems"])
