"""DeepJIT's several cache roots (sgl-deep-gemm 0.2.x, sglang 0.5.20+): a read-only shared cache (an image layer,
a network mount) searched after the writable local one.

The runtime's rule, read from the DeepJIT headers the 0.2.x wheels ship (deep_jit/cache/disk.hpp,
``DiskCache::from_env`` and ``DiskCache::entry``): ``DG_JIT_CACHE_DIR`` (else ``DJ_JIT_CACHE_DIR``) is
``PATH_1:PATH_2:...``; a kernel is looked up as ``<root>/cache/<tag>.<digest>/.committed`` in every root in order
and the first hit is loaded; a miss is built under ``PATH_1/tmp/<uuid>`` and committed to ``PATH_1/cache``. So
`verify --shared-cache` judges each kernel by the first root that holds it, and `launch --shared-cache` hands the
runtime exactly that list. Real nvcc builds of sgl-deep-gemm 0.2.0 kernels (its headers from the PyPI wheel)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from helpers import NVCC, needs_nvcc, sgl_deep_gemm_dir

from dgprecompile.planning.manifest import plan_from_dict, write_manifest
from dgprecompile.planning.plan import PlanRequest
from dgprecompile.planning.request import plan_from_request

pytestmark = [needs_nvcc, pytest.mark.nvcc, pytest.mark.slow]
DG020 = sgl_deep_gemm_dir("0.2.0")
needs_dg020 = pytest.mark.skipif(DG020 is None, reason="sgl-deep-gemm 0.2.0 not installed beside the venv (make setup)")


def run(*args, pythonpath=DG020, **extra_env):
    env = {**os.environ, **extra_env,
           "PYTHONPATH": os.pathsep.join(p for p in (pythonpath, os.environ.get("PYTHONPATH")) if p)}
    return subprocess.run([sys.executable, "-m", "dgprecompile", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=900)


def one_error(res) -> str:
    lines = res.stderr.strip().splitlines()
    assert "Traceback" not in res.stderr + res.stdout
    assert [x for x in lines if x.startswith("error:")] and len([x for x in lines if x.startswith("error:")]) == 1, \
        res.stderr
    assert any(x.startswith("hint:") for x in lines), res.stderr
    return res.stderr


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """A 0.2.0 plan (the 480B tp8/ep8 deep_gemm-runner masked w2 key, first bucket: one GEMM and its transpose)
    warmed with real nvcc into what plays the shared, read-only cache."""
    if DG020 is None:
        pytest.skip("sgl-deep-gemm 0.2.0 not installed beside the venv (make setup)")
    tmp = tmp_path_factory.mktemp("roots")
    data = plan_from_request(PlanRequest(model="Qwen3-Coder-480B", tp=8, ep=8, sglang="0.5.20",
                                         moe_runner_backend="deep_gemm")).to_dict()
    shape = next(s for s in data["shapes"] if (s["kernel_type"], s["n"], s["k"]) ==
                 ("GROUPED_GEMM_NT_F8F8BF16_MASKED", 6144, 2560))
    shape["buckets"] = shape["buckets"][:1]
    shape["m_max"] = shape["buckets"][0]["m_max"]
    keep = {b["kernel"] for b in shape["buckets"]} | set(shape["aux_kernels"])
    data["shapes"], data["kernels"] = [shape], [k for k in data["kernels"] if k["id"] in keep]
    data["total_kernels"] = len(data["kernels"])
    data["sglang_jit_modules"] = []  # DeepGEMM's roots only: SGLang's own modules live in --cache-dir alone
    data.pop("inductor", None)  # the torch.compile items need the job's GPU: tests/test_inductor_graphs.py
    data.pop("flashinfer", None)  # FlashInfer's modules: tests/test_flashinfer_modules.py
    data.pop("triton_path", None)  # the model path's other Triton kernels: tests/test_triton_path.py
    manifest = tmp / "plan.yaml"
    write_manifest(plan_from_dict(data), manifest)
    cache = tmp / "shared"
    warmed = run("warm", "--manifest", manifest, "--cache-dir", cache, "--nvcc", NVCC, "--json")
    assert warmed.returncode == 0, warmed.stderr
    assert json.loads(warmed.stdout)["compiled"] == 2
    return manifest, cache


@needs_dg020
def test_verify_finds_the_plan_in_the_shared_root(shared, tmp_path):
    manifest, cache = shared
    local = tmp_path / "local"
    alone = run("verify", "--manifest", manifest, "--cache-dir", local, "--json")
    assert alone.returncode == 1 and len(json.loads(alone.stdout)["missing"]) == 2
    both = run("verify", "--manifest", manifest, "--cache-dir", local, "--shared-cache", cache, "--json")
    assert both.returncode == 0, both.stdout + both.stderr
    report = json.loads(both.stdout)
    assert report["complete"] and report["coverage"] == "proved"
    assert report["shared_cache_dirs"] == [str(cache)]
    assert not local.exists()  # a verify writes nothing


@needs_dg020
def test_a_bad_entry_in_the_first_root_hides_the_good_shared_one(shared, tmp_path):
    """The runtime loads the first committed entry it finds: a cut-short copy in the local root is what it would
    load, although the shared root holds a good one."""
    manifest, cache = shared
    local = tmp_path / "local"
    entry = next(p for p in (cache / "cache").iterdir() if (p / ".committed").exists())
    shutil.copytree(entry, local / "cache" / entry.name)
    cubin = local / "cache" / entry.name / "kernel.cubin"
    cubin.write_bytes(cubin.read_bytes()[:200])
    res = run("verify", "--manifest", manifest, "--cache-dir", local, "--shared-cache", cache, "--json")
    assert res.returncode == 1, res.stdout
    report = json.loads(res.stdout)
    assert [p["entry"] for p in report["problems"]] == [entry.name]
    assert report["problems"][0]["status"] == "invalid"


@needs_dg020
def test_launch_hands_the_runtime_the_roots_in_lookup_order(shared, tmp_path):
    manifest, cache = shared
    local = tmp_path / "local"
    show = "import os; print(os.environ['DG_JIT_CACHE_DIR']); print(os.environ['SGLANG_DG_CACHE_DIR'])"
    res = run("launch", "--manifest", manifest, "--cache-dir", local, "--shared-cache", cache, "--",
              sys.executable, "-c", show)
    assert res.returncode == 0, res.stderr
    # sglang 0.5.20+ copies SGLANG_DG_CACHE_DIR onto DG_JIT_CACHE_DIR at import: both carry the list
    assert res.stdout.split() == [f"{local}:{cache}"] * 2
    # a value the user set is kept when it names the same roots, refused when it names others
    same = run("launch", "--manifest", manifest, "--cache-dir", local, "--shared-cache", cache, "--",
               sys.executable, "-c", "import os; print(os.environ['DG_JIT_CACHE_DIR'])",
               DG_JIT_CACHE_DIR=f"{local}/:{cache}")
    assert same.returncode == 0, same.stderr
    other = run("launch", "--manifest", manifest, "--cache-dir", local, "--shared-cache", cache, "--", "true",
                DG_JIT_CACHE_DIR=str(local))
    assert other.returncode == 2 and "DG_JIT_CACHE_DIR" in one_error(other)


@needs_dg020
def test_a_path_holding_the_separator_is_refused(shared, tmp_path):
    manifest, cache = shared
    res = run("verify", "--manifest", manifest, "--cache-dir", tmp_path / "a:b", "--shared-cache", cache)
    assert res.returncode == 2 and "separator" in one_error(res)


def test_a_one_root_runtime_refuses_shared_caches(tmp_path):
    """sgl-deep-gemm 0.1.x reads DG_JIT_CACHE_DIR as one directory: a list would be one odd path to it."""
    res = run("verify", "--model", "Qwen3-Coder-480B", "--tp", 8, "--ep", 8, "--sglang", "0.5.14",
              "--cache-dir", tmp_path / "local", "--shared-cache", tmp_path / "shared", pythonpath=None)
    assert res.returncode == 2
    assert "reads one cache directory" in one_error(res)
