"""bench/nvcc_split.py's mechanics against real nvcc and cuobjdump (Triton's, where the toolkit has none): one unit
compiled with its own flags and with ``-split-compile`` appended, alternating, and the SASS of the two objects
compared; an object with no kernel is no evidence either way. The FlashInfer figures themselves are a bench run
(bench/results/2026-12-05-cpu-nvcc-split), not a test."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest
from helpers import NVCC, beside_venv

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
import nvcc_split  # noqa: E402

TRITON = beside_venv("triton-3.6.0", "triton/__init__.py")
KERNEL = """__global__ void axpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
"""


@pytest.fixture
def tool(monkeypatch):
    if TRITON is None and not Path(NVCC).with_name("cuobjdump").exists():
        pytest.skip("no cuobjdump: the toolkit's, or Triton 3.6.0's beside the venv (make setup)")
    if TRITON:
        monkeypatch.syspath_prepend(TRITON)
    return nvcc_split.cuobjdump(NVCC)


def test_a_unit_is_timed_both_ways_and_its_sass_compared(tmp_path, tool):
    (tmp_path / "k.cu").write_text(KERNEL)
    command = shlex.join([NVCC, "-gencode=arch=compute_90a,code=sm_90a", "-O3", "-c", str(tmp_path / "k.cu"), "-o",
                          str(tmp_path / "unused.o")])
    r = nvcc_split.bench_unit("k.cu", command, tmp_path, split=2, rounds=1)
    assert r["kernels"] == 1 and r["sass_same"] and r["sass_lines_differing"] == 0, r
    assert [len(r["runs"][k]) for k in ("flashinfer", "split")] == [1, 1] and r["wall_ratio"] > 0
    assert not (tmp_path / "unused.o").exists()  # each run writes its own object, named by the unit and the way


def test_another_kernel_differs_and_an_object_without_kernels_is_no_evidence(tmp_path, tool):
    (tmp_path / "a.cu").write_text(KERNEL)
    (tmp_path / "b.cu").write_text(KERNEL.replace("a * x[i] + y[i]", "a * x[i] - y[i]"))
    (tmp_path / "none.cu").write_text("int host_only(int x) { return x + 1; }\n")
    for name in ("a", "b", "none"):
        nvcc_split.compile_once(shlex.join([NVCC, "-gencode=arch=compute_90a,code=sm_90a", "-c",
                                            str(tmp_path / f"{name}.cu"), "-o", "x"]), tmp_path / f"{name}.o", None)
    a, b = nvcc_split.sass(tmp_path / "a.o", tool), nvcc_split.sass(tmp_path / "b.o", tool)
    assert a and b and a != b
    assert nvcc_split.sass(tmp_path / "none.o", tool) == []
    command = shlex.join([NVCC, "-gencode=arch=compute_90a,code=sm_90a", "-c", str(tmp_path / "none.cu"), "-o", "x"])
    assert nvcc_split.bench_unit("none.cu", command, tmp_path, split=2, rounds=1)["sass_same"] is None


def test_a_module_is_split_only_where_a_record_shows_every_unit_unchanged():
    """data/flashinfer_modules.yaml's ``split_compile`` (warm adds -split-compile=0 to those modules' units) holds
    to the bench's records: each listed module, flashinfer-python and nvcc release has a record of this bench whose
    every unit of the module kept its SASS (a unit without kernels is no evidence against), and no record shows a
    listed pair changing a kernel (2026-12-07: 0.7.2's trtllm_allreduce_fusion.cu did; 0.6.12's did not)."""
    import json
    import re

    from dgprecompile.runtimes import FLASHINFER_MODULES

    verdicts: dict[tuple[str, str, str], list[bool | None]] = {}
    for path in (REPO / "bench" / "results").glob("*/nvcc_split.json"):
        run = json.loads(path.read_text())
        release = re.search(r"cuda_(\d+\.\d+)", run["nvcc"]).group(1)
        for unit in run["units"]:
            verdicts.setdefault((unit["spec"], run["flashinfer"], release), []).append(unit["sass_same"])
    modules = FLASHINFER_MODULES.data()["modules"]
    listed = {(m["spec"], version, release) for m in modules.values()
              for version, releases in m.get("split_compile", {}).items() for release in releases}
    assert listed, "no module is split: the data file lost its split_compile"
    for key in listed:
        assert key in verdicts and False not in verdicts[key] and True in verdicts[key], (key, verdicts.get(key))
    changed = {key for key, seen in verdicts.items() if False in seen}
    assert ("flashinfer.jit.comm:gen_trtllm_comm_module", "0.7.2", "13.0") in changed  # the record that says so
    assert not listed & changed
