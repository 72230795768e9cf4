"""tests/gpu/cache_opens.py, the model proof's record of what the job opened in the cache (issue 43): real inotify
watches on a real tree, a real other process opening files in it, and the asks record it makes, valid under
data/schemas/proof-asks.json."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dgprecompile.launch.proof_asks import load_record

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "tests" / "gpu" / "cache_opens.py"
ROPE = "sgl_kernel_jit_fused_rope_true_128_true_bf16_t_57b2f3a46420e695"
NINJA = "sgl_kernel_jit_fused_rope_true_128_true_bf16_t_bf16_t"  # sglang 0.5.20 on: <arch>/<module>/build-<key>/
FILES = ["cache/kernel.a.1/kernel.cubin", "cache/kernel.a.1/kernel.cu", "cache/kernel.b.2/kernel.cubin",
         f"tvm-ffi/{ROPE}__arch_9.0/{ROPE}.so", "flashinfer/0.6.12/90a/cached_ops/sampling/sampling.so",
         "triton/ABC/fused_moe_kernel.cubin", f"sglang-jit/sm90a/{NINJA}/build-017b/deps-9/{NINJA}.so"]


def _tree(root: Path) -> None:
    for rel in FILES:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(b"x")


JOB = textwrap.dedent("""
    import os, sys, time
    root = sys.argv[1]
    for rel in ("cache/kernel.a.1/kernel.cubin", "tvm-ffi/{rope}__arch_9.0/{rope}.so",
                "flashinfer/0.6.12/90a/cached_ops/sampling/sampling.so", "triton/ABC/fused_moe_kernel.cubin",
                "sglang-jit/sm90a/{ninja}/build-017b/deps-9/{ninja}.so"):
        with open(os.path.join(root, rel), "rb") as f:
            f.read()
    os.stat(os.path.join(root, "cache/kernel.b.2/kernel.cubin"))  # looked at, not loaded
    os.makedirs(os.path.join(root, "tvm-ffi/late"))
    time.sleep(1.0)
    open(os.path.join(root, "tvm-ffi/late/late.so"), "wb").close()
""").replace("{rope}", ROPE).replace("{ninja}", NINJA)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")
def test_what_another_process_opens_is_recorded_per_family_and_makes_a_valid_asks_record(tmp_path):
    root = tmp_path / "cache-root"
    _tree(root)
    opens, marks = tmp_path / "opens.json", tmp_path / "marks"
    marks.mkdir()
    watcher = subprocess.Popen([sys.executable, str(SCRIPT), "watch", str(root), "cache", "tvm-ffi", "sglang-jit",
                                "flashinfer",
                                "--marks", str(marks), "--out", str(opens)], stdout=subprocess.PIPE, text=True)
    try:
        assert watcher.stdout.readline().startswith("watching ")
        read_all = [sys.executable, "-c", "import pathlib, sys; [p.read_bytes() for p in "
                    "pathlib.Path(sys.argv[1]).rglob('*') if p.is_file()]", str(root)]
        subprocess.run(read_all, check=True, timeout=60)  # the launcher's own reads, before the job
        (marks / "started").touch()
        subprocess.run([sys.executable, "-c", JOB, str(root)], check=True, timeout=60)
        (marks / "ended").touch()
        subprocess.run(read_all, check=True, timeout=60)  # and after it
    finally:
        watcher.send_signal(signal.SIGTERM)
        assert watcher.wait(timeout=30) == 0
    seen = json.loads(opens.read_text())
    opened = seen["opened"]
    assert seen["job_ended"] and seen["overflow"] == 0
    assert set(opened) == {"cache/kernel.a.1/kernel.cubin", f"tvm-ffi/{ROPE}__arch_9.0/{ROPE}.so",
                           "flashinfer/0.6.12/90a/cached_ops/sampling/sampling.so", "tvm-ffi/late/late.so",
                           f"sglang-jit/sm90a/{NINJA}/build-017b/deps-9/{NINJA}.so"}, opened
    # the job's stderr: a refusal names a module the cache did not hold
    stderr = tmp_path / "strict.err"
    stderr.write_text("dgprecompile strict mode: SGLang tried to build its JIT module sgl_kernel_jit_x_1 at run time "
                      "(tvm-ffi)\nRuntimeError: JIT module 'sgl_kernel_jit_y' has no usable cached build under /c/sgl"
                      "ang-jit/sm90a/sgl_kernel_jit_y/build-1, and SGLANG_CRASH_ON_JIT_COMPILE forbids compiling\n")
    template = json.loads((REPO / "bench/results/2026-12-03-h200-model-480b/asks.json").read_text())
    (tmp_path / "template.json").write_text(json.dumps({**template, "complete": True, "families": {}}))
    (tmp_path / "config.json").write_text("{}")
    # the driver's report: the calls it recorded inside the job (launch/model_asks.py)
    driver_asks = {"triton-moe": {"calls": [{"experts": 20, "hidden": 6144, "intermediate": 2560, "topk": 8,
                                             "ms": [[1, 8192]]}]},
                   "inductor": {"calls": [{"function": "sglang.srt.x.f", "args": [{"shape": ["m", 8], "dtype": "int64"},
                                                                                 0, 1.5], "grad": "no_grad",
                                           "ms": [[1, 2], [8, 8]]}]}}
    (tmp_path / "driver.json").write_text(json.dumps({"calls": {}, "asks": driver_asks}))
    for driver, extra in ((None, {}), (tmp_path / "driver.json", driver_asks)):
        res = subprocess.run([sys.executable, str(SCRIPT), "asks", "--opens", str(opens), "--refusals", str(stderr),
                              "--template", str(tmp_path / "template.json"), "--out", str(tmp_path / "asks.json"),
                              *(["--driver", str(driver)] if driver else [])],
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        record = load_record(tmp_path / "asks.json")
        assert record["families"] == {
            "deepgemm": {"entries": ["kernel.a.1"]},
            "sglang-jit": {"entries": ["late", f"{ROPE}__arch_9.0"],
                           "modules": [NINJA, "sgl_kernel_jit_x_1", "sgl_kernel_jit_y"]},
            "flashinfer": {"entries": ["0.6.12/90a/cached_ops/sampling"]}, **extra}
