"""Triton 3.5.1 (torch 2.9.1's pin, so sglang 0.5.9-0.5.10's stack) and its host modules, against the real thing on
this GPU-less machine: sglang 0.5.9's own fused MoE warmed by Triton 3.5.1, then ``cuda_utils`` and each kernel's
``__triton_launcher`` built with Triton 3.5.1's own code. 3.5 links them ``-lcuda`` (the unversioned libcuda.so,
which no folder here has: compile/triton_host.py ``link_libcuda`` gives the linker one); before, the warm left them
to `launch --capture`. Triton 3.5.1's own runtime then finds and loads every module under the key it computes, its
C build refused by strict launch's own wrapper (tests/test_triton_host.py's PROOF). The libcuda.so.1 loaded is a
STAND-IN (no driver here); sgl-kernel and torchvision are stand-ins (tests/standins), named as such."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import STANDINS, beside_venv
from test_triton_host import WARM, _elf, _files, loaded_as_warmed, run_proof

REPO = Path(__file__).resolve().parent.parent
TRITON = Path(os.environ.get("DGP_TRITON35_DIR", REPO / ".venv" / "triton-3.5.1"))
CHAIN = [beside_venv(name, probe) for name, probe in (("sglang-0.5.9", "sglang-0.5.9.dist-info/METADATA"),
                                                      ("xgrammar-0.2.1", "xgrammar/__init__.py"),
                                                      ("sglang-0.5.14", "sglang/jit_kernel/utils.py"),
                                                      ("sglang-0.5.23", "sglang-0.5.23.dist-info/METADATA"))]
pytestmark = [pytest.mark.skipif(not (TRITON / "triton" / "__init__.py").is_file(),
                                 reason=f"no Triton 3.5.1 at {TRITON} (make setup installs it)"),
              pytest.mark.skipif(None in CHAIN, reason="sglang 0.5.9's import chain not beside the venv (make setup)"),
              pytest.mark.slow]


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([*map(str, CHAIN), STANDINS, str(TRITON), str(REPO)]),
            "DGP_STANDINS": "sgl_kernel,torchvision", "DGP_TRANSFORMERS_EXIST_OK": "1", "CUDA_VISIBLE_DEVICES": "",
            **extra}


@pytest.fixture(scope="module")
def warmed(tmp_path_factory):
    root = tmp_path_factory.mktemp("host35") / "cache"
    env = _env()
    env.pop("TRITON_LIBCUDA_PATH", None)
    res = subprocess.run([sys.executable, *WARM, "--cache-dir", str(root)], env=env, capture_output=True, text=True,
                         timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    return root, json.loads(res.stdout)


def test_a_gpu_free_warm_builds_0_5_9s_host_modules_under_triton_3_5_1(warmed):
    root, report = warmed
    host = report["host_modules"]
    assert report["triton"] == "3.5.1" and "left_to_capture" not in host, host
    assert sorted(host["launchers"]) == sorted(report["entries"]) and len(report["entries"]) == 4
    assert host["machine"]["key"]["triton"] == "3.5.1" and "folders" not in host["machine"]["key"]
    suffix = host["machine"]["key"]["ext_suffix"]
    built = [root / "triton" / b for b in host["built"]]
    assert sorted(p.name for p in built) == [f"__triton_launcher{suffix}", f"cuda_utils{suffix}"]
    for so in built:
        needed, undefined = _elf(so)
        assert "libcuda.so.1" in needed, (so, needed)  # -lcuda resolved to a library whose soname is the driver's
        assert {"cuCtxGetCurrent", "cuDeviceGet"} <= {s for s in undefined if s.startswith("cu")}, so


def test_triton_3_5_1s_own_runtime_loads_every_module_and_builds_none(warmed, tmp_path):
    """PROOF: Triton 3.5.1's JIT compiles 0.5.9's kernels again (hits), its CudaUtils() and each kernel's
    CudaLauncher() look their modules up with its own key and load them; its C build refused."""
    root, report = warmed
    before, proof = run_proof(root, tmp_path, _env)
    assert proof["kernels"] == 4
    loaded_as_warmed(root, report["host_modules"], proof)
    assert _files(root / "triton") == before  # nothing compiled, nothing written
