"""warm --backend nvcc for the newer C++-JIT generations: real nvcc builds on this CPU machine of sgl-deep-gemm
0.1.7's (sglang 0.5.19), 0.2.0's (sglang 0.5.20, DeepJIT), sglang-kernel 0.4.2's (sglang 0.5.11) and sgl-kernel
0.3.16.post3's (sglang 0.5.4), sgl-kernel 0.3.9.post2's (sglang 0.5.2: the 16-slot format of 0.3.7-0.3.9.post2) and
sgl-kernel 0.3.21's (sglang 0.5.9: the 21-slot format of 0.3.20-0.3.21) kernels, landing
under the names their key modules compute, with the files each runtime needs, proved by `verify` and idempotent. (That those names are the ones the
runtime itself makes is checked against device records in tests/test_generation_records.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers import NVCC, bundled_deep_gemm_dir, needs_nvcc, sgl_deep_gemm_dir

from dgprecompile.host.toolchain import DeepGemmInstall, probe_nvcc
from dgprecompile.keys.schemes import key_class
from dgprecompile.planning.manifest import plan_from_dict, write_manifest
from dgprecompile.planning.plan import PlanRequest
from dgprecompile.planning.request import plan_from_request

pytestmark = [needs_nvcc, pytest.mark.nvcc, pytest.mark.slow]

# release (sk-: the deep_gemm bundled in sgl-kernel 0.3.x / sglang-kernel 0.4.x), the sglang that pins it, the files of
# an entry, and whether the device record holds entries that release's runtime made (then warm says nothing about
# unobserved names)
CASES = [("0.1.7", "0.5.19", ["kernel.cu", "kernel.cubin"], False),
         ("0.2.0", "0.5.20", [".committed", "kernel.cu", "kernel.cubin", "meta.json"], True),
         ("sk-0.4.2", "0.5.11", ["kernel.cu", "kernel.cubin"], True),
         ("sk-0.3.16.post3", "0.5.4", ["kernel.cu", "kernel.cubin"], True),
         ("sk-0.3.9.post2", "0.5.2", ["kernel.cu", "kernel.cubin"], True),
         ("sk-0.3.21", "0.5.9", ["kernel.cu", "kernel.cubin"], True)]


def _dir(release):
    return bundled_deep_gemm_dir(release[3:]) if release.startswith("sk-") else sgl_deep_gemm_dir(release)


def _env(release):
    return {**os.environ, "PYTHONPATH": _dir(release)}


def run(release, *args):
    return subprocess.run([sys.executable, "-m", "dgprecompile", *map(str, args)], capture_output=True, text=True,
                          env=_env(release), timeout=900)


@pytest.mark.parametrize("release,sglang,files,observed", CASES, ids=[c[0] for c in CASES])
def test_nvcc_backend_builds_entries_for_the_release(tmp_path, release, sglang, files, observed):
    if _dir(release) is None:
        pytest.skip(f"{release} not installed beside the venv (make setup)")
    # the masked w2 key of the 480B tp8/ep8 deep_gemm-runner plan, first bucket only: one GEMM + its transpose
    # (sglang 0.5.2 has no deep_gemm runner option: its EPMoE runs masked DeepGEMM with ep > 1)
    runner = "auto" if sglang == "0.5.2" else "deep_gemm"
    plan = plan_from_request(PlanRequest(model="Qwen3-Coder-480B", tp=8, ep=8, sglang=sglang,
                                         moe_runner_backend=runner))
    data = plan.to_dict()
    shape = next(s for s in data["shapes"] if (s["kernel_type"], s["n"], s["k"]) ==
                 ("GROUPED_GEMM_NT_F8F8BF16_MASKED", 6144, 2560))
    shape["buckets"] = shape["buckets"][:1]
    shape["m_max"] = shape["buckets"][0]["m_max"]
    keep = {b["kernel"] for b in shape["buckets"]} | set(shape["aux_kernels"])
    data["shapes"], data["kernels"] = [shape], [k for k in data["kernels"] if k["id"] in keep]
    data["total_kernels"] = len(data["kernels"])  # a trimmed manifest states its own count
    data["sglang_jit_modules"] = []  # DeepGEMM's kernels only (0.5.20's plan lists SGLang's ninja modules too)
    data.pop("flashinfer", None)  # FlashInfer's modules: tests/test_flashinfer_modules.py
    data.pop("triton_path", None)  # the model path's other Triton kernels: tests/test_triton_path.py
    small = plan_from_dict(data)
    manifest = tmp_path / "plan.yaml"
    write_manifest(small, manifest)
    cache = tmp_path / "dg"

    first = run(release, "warm", "--manifest", manifest, "--cache-dir", cache, "--nvcc", NVCC, "--json")
    assert first.returncode == 0, first.stderr
    summary = json.loads(first.stdout)
    assert (summary["backend"], summary["compiled"], summary["failed"]) == ("nvcc", 2, 0)
    # 0.1.7 did not run on the device under torch 2.11 (tests/data/sweep_generations_h200.json): warm says its names
    # are unobserved; 0.2.0's runtime made entries under the computed names under torch 2.14.1
    # (tests/data/torch214_generations_h200.json); sglang-kernel 0.4.2's runtime and sgl-kernel 0.3.21's, 0.3.16.post3's and 0.3.9.post2's (their host
    # code rebuilt from source there) made entries under the computed names
    assert ("were not yet compared with entries its runtime made on a GPU" in first.stderr) is not observed

    # the names the key module computes for this install, from a separate process's view of it
    code = ("import json; from dgprecompile.host.toolchain import find_deepgemm; d = find_deepgemm(); "  # as warm sees it
            "print(json.dumps([d.distribution, d.version, d.generation, d.package_dir]))")
    dist, version, generation, package_dir = json.loads(subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=_env(release), check=True).stdout)
    assert version == release.removeprefix("sk-") and generation == small.profile.generation
    ctx_class = key_class(small.profile.deepgemm.key_scheme)
    ctx = ctx_class.build(DeepGemmInstall(dist, version, package_dir, generation), probe_nvcc(NVCC), {})
    expected = sorted(ctx.entry_name(spec) for spec in small.kernels.values())
    assert sorted(os.listdir(cache / "cache")) == expected
    for name in expected:
        entry = cache / "cache" / name
        assert sorted(os.listdir(entry)) == files
        assert (entry / "kernel.cubin").stat().st_size > 1000
        assert (entry / "kernel.cu").read_text() == ctx.source(small.kernels[
            next(k for k, s in small.kernels.items() if ctx.entry_name(s) == name)])

    verify = run(release, "verify", "--manifest", manifest, "--cache-dir", cache, "--json")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert json.loads(verify.stdout)["coverage"] == "proved"
    again = json.loads(run(release, "warm", "--manifest", manifest, "--cache-dir", cache, "--nvcc", NVCC,
                           "--json").stdout)
    assert (again["compiled"], again["already_cached"]) == (0, 2)

    # the cache travels as an artifact with every file the runtime needs (0.2.x: the .committed marker too)
    artifact = tmp_path / "cache.tar.gz"
    packed = run(release, "pack", "--manifest", manifest, "--cache-dir", cache, "-o", artifact)
    assert packed.returncode == 0, packed.stderr
    other = tmp_path / "unpacked"
    unpacked = run(release, "unpack", artifact, "--cache-dir", other)
    assert unpacked.returncode == 0, unpacked.stderr
    for name in expected:
        assert sorted(os.listdir(other / "cache" / name)) == files
    verify = run(release, "verify", "--manifest", manifest, "--cache-dir", other, "--json")
    assert verify.returncode == 0 and json.loads(verify.stdout)["coverage"] == "proved", verify.stdout
