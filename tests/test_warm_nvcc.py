"""warm --backend nvcc: sgl-deep-gemm 0.1.3 cache entries built with real nvcc on this CPU machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers import NVCC, needs_dg013, needs_nvcc, sgl_deep_gemm_013_dir

from dgprecompile.keys.sgl_deep_gemm_01 import CxxKeyContext
from dgprecompile.planning.manifest import plan_from_dict, write_manifest
from dgprecompile.planning.plan import PlanRequest
from dgprecompile.planning.request import plan_from_request

pytestmark = [needs_dg013, needs_nvcc, pytest.mark.nvcc]


@pytest.fixture(scope="module")
def masked_w2_manifest(tmp_path_factory):
    """The smallest key of the 480B tp8/ep8 sglang-0.5.14 deep_gemm-runner plan: masked w2, 2 GEMMs + 1 transpose."""
    plan = plan_from_request(PlanRequest(model="Qwen3-Coder-480B", tp=8, ep=8, sglang="0.5.14",
                                         moe_runner_backend="deep_gemm"))
    data = plan.to_dict()
    shape = next(s for s in data["shapes"] if (s["n"], s["k"], s["num_groups"]) == (6144, 2560, 20))
    keep = {b["kernel"] for b in shape["buckets"]} | set(shape["aux_kernels"])
    data["shapes"], data["kernels"] = [shape], [k for k in data["kernels"] if k["id"] in keep]
    data["total_kernels"] = len(data["kernels"])  # a trimmed manifest states its own count
    data.pop("sglang_jit_modules", None)  # DeepGEMM only here; SGLang's own JIT modules: test_sglang_jit.py
    data.pop("inductor", None)  # the torch.compile items need the job's GPU: tests/test_inductor_graphs.py
    data.pop("flashinfer", None)  # FlashInfer's modules: tests/test_flashinfer_modules.py
    data.pop("triton_path", None)  # the model path's other Triton kernels: tests/test_triton_path.py
    path = tmp_path_factory.mktemp("m") / "w2.yaml"
    write_manifest(plan_from_dict(data), path)
    return path, plan_from_dict(data)


def run(*args):
    env = {**os.environ, "PYTHONPATH": sgl_deep_gemm_013_dir()}
    return subprocess.run([sys.executable, "-m", "dgprecompile", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=600)


def test_nvcc_backend_builds_the_runtime_entries_without_a_gpu(tmp_path, masked_w2_manifest):
    manifest, plan = masked_w2_manifest
    cache = tmp_path / "dg"
    first = run("warm", "--manifest", manifest, "--cache-dir", cache, "--nvcc", NVCC, "--json")
    assert first.returncode == 0, first.stderr
    summary = json.loads(first.stdout)
    assert (summary["backend"], summary["compiled"], summary["failed"]) == ("nvcc", 3, 0)
    include = os.path.join(sgl_deep_gemm_013_dir(), "deep_gemm", "include")
    ctx = CxxKeyContext(include, (13, 0))
    expected = sorted(ctx.entry_name(spec) for spec in plan.kernels.values())
    assert sorted(os.listdir(cache / "cache")) == expected
    for name in expected:
        entry = cache / "cache" / name
        assert sorted(os.listdir(entry)) == ["kernel.cu", "kernel.cubin"]
        assert (entry / "kernel.cubin").stat().st_size > 1000
        assert (entry / "kernel.cu").read_text().startswith("// Includes' hash value: ")
    verify = run("verify", "--manifest", manifest, "--cache-dir", cache, "--json")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert json.loads(verify.stdout)["coverage"] == "proved"
    again = json.loads(run("warm", "--manifest", manifest, "--cache-dir", cache, "--nvcc", NVCC, "--json").stdout)
    assert (again["compiled"], again["already_cached"]) == (0, 3)


def test_backend_choice_follows_the_installed_deepgemm(tmp_path, masked_w2_manifest):
    manifest, _ = masked_w2_manifest
    wrong = run("warm", "--manifest", manifest, "--cache-dir", tmp_path, "--backend", "legacy")
    assert wrong.returncode == 2 and "hint: use --backend nvcc or cxx" in wrong.stderr
    gpu = run("warm", "--manifest", manifest, "--cache-dir", tmp_path, "--backend", "cxx")
    assert gpu.returncode == 3 and "warm needs a GPU" in gpu.stderr
