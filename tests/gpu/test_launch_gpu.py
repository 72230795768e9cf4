"""Device proof of `dgprecompile launch --strict` (GPU machine only; skipped elsewhere).

For the installed DeepGEMM generation (sgl-deep-gemm 0.1.x -> sglang 0.5.14 profile; legacy -> 0.5.1), it plans a
small set of keys of Qwen3-Coder-480B tp8/ep8 (or uses DGP_LAUNCH_MANIFEST / DGP_LAUNCH_CACHE when set), warms
them, and runs the stand-in trainer (tests/gpu/standin_trainer.py) for DGP_LAUNCH_STEPS steps (default 1000)
under `launch --strict`: it must finish with no new cache entry and no thread or process started after step 1.
Then it deletes one warmed entry from a copy of the cache: the same run must fail on the first call of that kernel
with dgprecompile's strict-mode message. Results go to $OUT (or a temp dir) as JSON.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]
STANDIN = REPO / "tests" / "gpu" / "standin_trainer.py"


def _gpu_generation() -> str | None:
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    from dgprecompile.host.toolchain import find_deepgemm

    install = find_deepgemm()
    return install.generation if install else None


GENERATION = _gpu_generation()
skip = pytest.mark.skipif(GENERATION not in ("legacy", "sgl-deep-gemm-0.1"),
                          reason="needs a GPU and the legacy or sgl-deep-gemm 0.1.x DeepGEMM")


def _dg(*args, out: Path, name: str, timeout=1800) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "dgprecompile", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=REPO)
    (out / f"{name}.log").write_text(f"$ dgprecompile {' '.join(map(str, args))}\nrc={proc.returncode}\n"
                                     f"--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}\n")
    return proc


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    out = Path(os.environ.get("OUT") or tmp_path_factory.mktemp("launch-gpu"))
    out.mkdir(parents=True, exist_ok=True)
    manifest = os.environ.get("DGP_LAUNCH_MANIFEST")
    cache = os.environ.get("DGP_LAUNCH_CACHE")
    if not manifest:
        manifest = out / "plan.yaml"
        sglang = "0.5.1" if GENERATION == "legacy" else "0.5.14"
        backend = ["--moe-runner-backend", "deep_gemm"] if GENERATION != "legacy" else []
        r = _dg("plan", "--model", "Qwen3-Coder-480B", "--tp", 8, "--ep", 8, "--sglang", sglang, *backend,
                "--max-tokens", os.environ.get("DGP_LAUNCH_MAX_TOKENS", "2048"), "-o", manifest, out=out, name="plan")
        assert r.returncode == 0, r.stderr
    if not cache:
        cache = out / "cache"
    r = _dg("warm", "--manifest", manifest, "--cache-dir", cache, out=out, name="warm")
    assert r.returncode == 0, r.stderr
    return out, Path(manifest), Path(cache)


def _launch(manifest, cache, json_path, out, name, *extra):
    steps = os.environ.get("DGP_LAUNCH_STEPS", "1000")
    return _dg("launch", "--manifest", manifest, "--cache-dir", cache, "--strict", *extra, "--",
               sys.executable, STANDIN, "--manifest", manifest, "--steps", steps, "--json", json_path,
               out=out, name=name)


@skip
def test_strict_run_compiles_nothing_and_starts_nothing_after_step1(setup):
    out, manifest, cache = setup
    r = _launch(manifest, cache, out / "strict.json", out, "strict")
    report = json.loads((out / "strict.json").read_text())
    assert r.returncode == 0, r.stderr[-3000:]
    assert report["steps_done"] == int(os.environ.get("DGP_LAUNCH_STEPS", "1000"))
    assert report["new_entries"] == []
    assert report["new_entries_after_step1"] == []
    assert report["python_threads_started_after_step1"] == 0
    assert report["children_seen_after_step1"] == {}
    assert not report["children_reaped_after_step1"]
    assert report["threads_max_after_step1"] <= report["threads_after_step1"]


@skip
def test_strict_run_with_a_deleted_kernel_fails_on_its_first_call(setup):
    out, manifest, cache = setup
    broken = out / "cache-one-deleted"
    shutil.rmtree(broken, ignore_errors=True)
    shutil.copytree(cache, broken)
    index = json.loads((broken / "dgprecompile" / "index.json").read_text())
    kernel, record = sorted(index["kernels"].items())[0]
    shutil.rmtree(broken / "cache" / record["entry"])
    (out / "deleted.json").write_text(json.dumps({"kernel": kernel, "entry": record["entry"]}))
    r = _launch(manifest, broken, out / "deleted-run.json", out, "deleted", "--allow-missing")
    report = json.loads((out / "deleted-run.json").read_text())
    assert r.returncode != 0
    assert report["error"] is not None and report["steps_done"] == 0  # failed inside step 1
    assert "dgprecompile strict mode" in r.stderr
    assert "strict mode refused" in r.stderr
    assert report["new_entries"] == []  # nothing was compiled into the cache
