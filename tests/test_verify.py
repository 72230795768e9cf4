"""`dgprecompile verify` on a real legacy-compiled cache: presence, sha256, fingerprint, coverage from the keys.

The cache is warmed once per session (``warmed_cache``, 4 kernels, about 10-20 s on 2 cores) with the real nvcc
and the legacy DeepGEMM; tests copy it and damage the copy. test_artifact.py reuses the same warm.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import LEGACY_NVCC as NVCC
from helpers import PLAN, read_index, warm_once, write_index

from dgprecompile.cache.store import CacheStore
from dgprecompile.cli.main import cli
from dgprecompile.planning.plan import PlanRequest
from dgprecompile.planning.request import plan_from_request


@pytest.fixture(scope="session")
def warmed_cache(tmp_path_factory) -> Path:
    return warm_once(tmp_path_factory)


@pytest.fixture
def cache(warmed_cache, tmp_path) -> Path:
    dest = tmp_path / "deep_gemm"
    shutil.copytree(warmed_cache, dest)
    return dest


def verify(cache_dir: Path, *extra: str):
    return CliRunner().invoke(cli, ["verify", *PLAN, "--cache-dir", str(cache_dir), *extra], catch_exceptions=False)


pytestmark = pytest.mark.nvcc


def test_complete_cache_passes_with_coverage_proved(cache):
    res = verify(cache, "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["complete"] is True and data["coverage"] == "proved" and data["fingerprint_checked"] is True
    assert data["kernels_total"] == data["kernels_ok"] == 4
    assert data["missing"] == data["changed"] == data["stale"] == data["problems"] == []
    assert data["current_fingerprint_id"] == data["fingerprint_id"] and len(data["fingerprint_id"]) == 16

    text = verify(cache)
    assert text.exit_code == 0
    assert text.stdout.strip().splitlines() == [
        "complete: 4/4 kernels present and intact, fingerprint matches (coverage proved from the runtime's keys)"]


def test_api_for_launch_preflight(cache):
    from dgprecompile.cache.verify import VerifyReport, verify_cache

    plan = plan_from_request(PlanRequest(model="Qwen3-Coder-480B", tp=8, ep=8, sglang="0.5.1", max_tokens=32))
    report = verify_cache(plan, CacheStore(cache), nvcc=None, num_sms=None)
    assert isinstance(report, VerifyReport)
    assert report.complete is True and report.missing == [] and report.stale == []
    assert json.loads(json.dumps(report.to_dict()))["complete"] is True
    shutil.rmtree(cache / "cache")
    report = verify_cache(plan, CacheStore(cache), num_sms=78)
    assert report.complete is False
    assert sorted(report.missing) == sorted(plan.kernels)
    assert ("num_sms", 132, 78) in report.stale


def test_verify_imports_neither_torch_nor_deepgemm(cache):
    code = ("import sys\nfrom dgprecompile.cli.main import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n    code = e.code\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'deep_gemm'))\n"
            "print('IMPORTED', bad, 'EXIT', code)\n")
    proc = subprocess.run([sys.executable, "-c", code, "verify", *PLAN, "--cache-dir", str(cache)],
                          capture_output=True, text=True, timeout=120)
    assert "IMPORTED [] EXIT 0" in proc.stdout, proc.stdout + proc.stderr


def test_missing_entry_is_reported_with_a_fix(cache):
    index = read_index(cache)
    kid, record = sorted(index["kernels"].items())[0]
    shutil.rmtree(cache / "cache" / record["entry"])
    res = verify(cache)
    assert res.exit_code == 1
    assert "problems" in res.stdout and "missing" in res.stdout
    assert "error: incomplete: 3/4 kernels ok; 1 missing" in res.stderr
    assert "hint:" in res.stderr and "dgprecompile warm" in res.stderr
    assert "Traceback" not in res.output
    data = json.loads(verify(cache, "--json").stdout)
    assert data["complete"] is False and data["missing"] == [kid]


def test_changed_entry_fails_its_checksum(cache):
    index = read_index(cache)
    kid, record = sorted(index["kernels"].items())[1]
    cubin = cache / "cache" / record["entry"] / "kernel.cubin"
    blob = bytearray(cubin.read_bytes())
    blob[100] ^= 0xFF
    cubin.write_bytes(bytes(blob))
    res = verify(cache, "--json")
    assert res.exit_code == 1
    data = json.loads(res.stdout)
    assert data["changed"] == [kid] and data["missing"] == []
    assert "sha256 mismatch" in data["problems"][0]["detail"]


def test_an_index_that_lies_is_caught_by_the_computed_keys(cache, monkeypatch):
    """The index points a kernel at an intact entry under another name: the runtime would still miss."""
    index = read_index(cache)
    kid, record = sorted(index["kernels"].items())[0]
    real, fake = record["entry"], "kernel.gemm_fp8_fp8_bf16_nt.000000000000"
    (cache / "cache" / real).rename(cache / "cache" / fake)
    index["kernels"][kid]["entry"] = fake
    write_index(cache, index)
    data = json.loads(verify(cache, "--json").stdout)
    assert data["complete"] is False and data["missing"] == [kid]
    assert data["problems"][0]["entry"] == real and fake in data["problems"][0]["detail"]

    # checking the index alone (no DeepGEMM here) would have said complete, with a warning
    monkeypatch.setattr("dgprecompile.cache.verify.find_deepgemm", lambda: None)
    res = verify(cache, "--json")
    assert res.exit_code == 0
    data = json.loads(res.stdout)
    assert data["coverage"] == "index" and data["fingerprint_checked"] is False
    assert any("DeepGEMM is not importable" in w for w in data["warnings"])
    assert any("index-only" in w for w in data["warnings"])


def test_stale_fingerprint_lists_the_fields(cache):
    index = read_index(cache)
    index["fingerprint"]["deepgemm"]["headers_sha256"] = "0" * 64
    write_index(cache, index)
    res = verify(cache)
    assert res.exit_code == 1
    assert "deepgemm.headers_sha256" in res.stdout and "fingerprint differs in deepgemm.headers_sha256" in res.stderr


def test_the_nvcc_path_string_is_part_of_the_legacy_key(cache, tmp_path):
    other = tmp_path / "cuda" / "bin"
    other.mkdir(parents=True)
    (other / "nvcc").symlink_to(NVCC)  # the same compiler under another path: another key
    data = json.loads(verify(cache, "--json", "--nvcc", str(other / "nvcc")).stdout)
    assert data["complete"] is False and len(data["missing"]) == 4
    assert [s["field"] for s in data["stale"]] == ["nvcc.path"]


def test_num_sms_from_the_command_line_against_a_manifest(cache, tmp_path):
    manifest = tmp_path / "plan.yaml"
    assert CliRunner().invoke(cli, ["plan", *PLAN, "-o", str(manifest)], catch_exceptions=False).exit_code == 0
    ok = CliRunner().invoke(cli, ["verify", "--manifest", str(manifest), "--cache-dir", str(cache)],
                            catch_exceptions=False)
    assert ok.exit_code == 0, ok.output
    res = CliRunner().invoke(cli, ["verify", "--manifest", str(manifest), "--cache-dir", str(cache), "--num-sms",
                                   "78", "--json"], catch_exceptions=False)
    assert res.exit_code == 1
    assert json.loads(res.stdout)["stale"] == [{"field": "num_sms", "recorded": 132, "current": 78}]


def test_empty_cache_dir_is_incomplete(tmp_path):
    res = verify(tmp_path / "nothing-here", "--json")
    assert res.exit_code == 1
    data = json.loads(res.stdout)
    assert len(data["missing"]) == 4 and any("no dgprecompile index" in w for w in data["warnings"])


def test_verify_against_a_trace(cache, tmp_path):
    calls = [("GEMM_NT_F8F8BF16", m, 1792, 6144, 1) for m in (1, 32)]
    calls += [("GEMM_NT_F8F8BF16", m, 6144, 1536, 1) for m in (1, 32)]
    calls += [("GROUPED_GEMM_NT_F8F8BF16_MASKED", m, 5120, 6144, 20) for m in (1, 2)]
    calls += [("GROUPED_GEMM_NT_F8F8BF16_MASKED", m, 6144, 2560, 20) for m in (1, 2)]
    lines = [{"dgprecompile_trace": 1, "rank": 0, "pid": 1, "api": "legacy"}]
    lines += [{"kernel_type": t, "m": m, "n": n, "k": k, "num_groups": g, "count": 1} for t, m, n, k, g in calls]
    (tmp_path / "trace-rank0-1.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    res = CliRunner().invoke(cli, ["verify", "--trace", str(tmp_path), "--sglang", "0.5.1", "--cache-dir",
                                   str(cache), "--json"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["kernels_ok"] == 4
    both = CliRunner().invoke(cli, ["verify", "--trace", str(tmp_path), "--manifest", "x.yaml"],
                              catch_exceptions=False)
    assert both.exit_code == 2 and "not both" in both.stderr


def test_bad_manifest_is_one_line(tmp_path):
    res = CliRunner().invoke(cli, ["verify", "--manifest", str(tmp_path / "nope.yaml")], catch_exceptions=False)
    assert res.exit_code == 2
    assert res.stderr.startswith("error: manifest not found") and "Traceback" not in res.output


# ---- whole outputs (the --quiet form a CI log shows) ----------------------------------------------------------


def test_whole_output_of_a_complete_and_an_incomplete_cache(cache):
    res = verify(cache, "--quiet")
    assert (res.exit_code, res.stdout, res.stderr) == (
        0, "complete: 4/4 kernels present and intact, fingerprint matches (coverage proved from the runtime's "
           "keys)\n", "")
    kid, record = sorted(read_index(cache)["kernels"].items())[0]
    shutil.rmtree(cache / "cache" / record["entry"])
    res = CliRunner().invoke(cli, ["verify", *PLAN, "--cache-dir", str(cache), "--quiet"], catch_exceptions=False,
                             env={"COLUMNS": "400"})
    assert res.exit_code == 1
    assert res.stdout.startswith("problems\n") and kid in res.stdout
    assert res.stderr == (f"error: incomplete: 3/4 kernels ok; 1 missing (coverage proved from the runtime's keys)\n"
                          f"hint: run `dgprecompile warm` with the same plan and --cache-dir {cache}: it compiles "
                          "only what is missing and rebuilds what changed\n")
