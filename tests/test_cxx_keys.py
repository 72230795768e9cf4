"""sgl-deep-gemm 0.1.x cache keys computed without the library equal the names an H200 warm produced."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers import needs_dg013, sgl_deep_gemm_013_dir

from dgprecompile.keys.sgl_deep_gemm_01 import CxxKeyContext, digest
from dgprecompile.planning.manifest import read_manifest

REPO = Path(__file__).resolve().parent.parent
MANIFEST = REPO / "shapes/Qwen3-Coder-480B-A35B-Instruct-FP8.tp8.ep8.sglang-0.5.12-0.5.16.deep_gemm.yaml"
RUNS = sorted((REPO / "bench/results").glob("2026-11-30-h200-run*/**/b_index.json"))


def test_digest_is_two_seeded_fnv1a_with_splitmix():
    assert len(digest("")) == 32 and digest("a") != digest("b")
    assert digest("abc") == digest(b"abc")


@needs_dg013
@pytest.mark.parametrize("index_path", RUNS, ids=lambda p: p.parent.parent.name)
def test_entry_names_equal_the_h200_warms(index_path):
    """Each device run installed 0.1.3 at another temporary path: the names differ per run and must all match."""
    index = json.loads(index_path.read_text())
    plan = read_manifest(MANIFEST)
    device_include = index["fingerprint"]["deepgemm"]["package_dir"] + "/include"
    ctx = CxxKeyContext(device_include, (13, 0), header_root=os.path.join(sgl_deep_gemm_013_dir(), "deep_gemm",
                                                                         "include"))
    assert len(index["kernels"]) == 37
    for kernel_id, record in index["kernels"].items():
        assert ctx.entry_name(plan.kernels[kernel_id]) == record["entry"], kernel_id


def test_key_inputs_change_the_name():
    plan = read_manifest(MANIFEST)
    spec = next(iter(plan.kernels.values()))
    root = sgl_deep_gemm_013_dir()
    if root is None:
        pytest.skip("sgl-deep-gemm 0.1.3 headers needed (make setup)")
    inc = os.path.join(root, "deep_gemm", "include")
    base = CxxKeyContext(inc, (13, 0)).entry_name(spec)
    assert CxxKeyContext(inc, (12, 9)).entry_name(spec) != base  # nvcc release
    assert CxxKeyContext(inc + "/", (13, 0), header_root=inc).entry_name(spec) != base  # install path string
    assert CxxKeyContext(inc, (13, 0), cpp_standard=17).entry_name(spec) != base
    assert CxxKeyContext.from_env(inc, (13, 0), {"DG_JIT_PTXAS_CHECK": "1"}).entry_name(spec) != base
