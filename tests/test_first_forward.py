"""bench/first_forward.sh's arithmetic (bench/first_forward_files.py, issue 45), run as the bench runs it: what a cold
run's caches hold per family and when it landed; the summary's figures from the phases' files (model_proof.sh's
committed summary.txt for the warm's device seconds). The bench itself needs the H200."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from dgprecompile.launch.model_report import CACHE_VARS

REPO = Path(__file__).resolve().parent.parent
TOOL = REPO / "bench" / "first_forward_files.py"
PROOF_480B = REPO / "bench" / "results" / "2026-12-05-h200-model-480b-0523"  # an uncarried proof: its warms built all


def run(*args: str) -> dict:
    proc = subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def touch(path: Path, when: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x")
    os.utime(path, (when, when))


def test_each_familys_files_and_when_they_landed_flashinfers_log_not_counted(tmp_path):
    start = 1_000_000.0
    touch(tmp_path / "deepgemm/cache/kernel.a/kernel.cubin", start + 12)
    touch(tmp_path / "deepgemm/cache/kernel.b/kernel.cubin", start + 40.5)
    touch(tmp_path / "triton/ABC/fused_moe_kernel.cubin", start + 70)
    touch(tmp_path / "flashinfer/.cache/flashinfer/0.6.12/90a/flashinfer_jit.log", start + 1)
    touch(tmp_path / "flashinfer/.cache/flashinfer/0.6.12/90a/cached_ops/sampling/sampling.so", start + 250)
    (tmp_path / "inductor").mkdir()  # a folder without files: no family row
    got = run(str(tmp_path), str(start))
    assert got == {"deepgemm": {"files": 2, "first_s": 12.0, "last_s": 40.5, "span_s": 28.5},
                   "triton": {"files": 1, "first_s": 70.0, "last_s": 70.0, "span_s": 0.0},
                   "flashinfer": {"files": 1, "first_s": 250.0, "last_s": 250.0, "span_s": 0.0}}


def test_a_fresh_cache_puts_every_cache_the_driver_counts_and_home_in_its_folder(tmp_path):
    proc = subprocess.run([sys.executable, str(TOOL), "--env", str(tmp_path)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    env = dict(line.split("=", 1) for line in proc.stdout.splitlines())
    assert set(CACHE_VARS) | {"HOME", "CUDA_CACHE_PATH"} == env.keys(), env
    assert all(Path(v).parent == tmp_path for v in env.values()) and len(set(env.values())) == len(env), env


def test_the_summary_takes_each_phases_own_figures(tmp_path):
    (tmp_path / "proof").mkdir()
    shutil.copy(PROOF_480B / "summary.txt", tmp_path / "proof" / "summary.txt")  # a real run's device seconds
    (tmp_path / "proof" / "driver.json").write_text(json.dumps(
        {"times": {"first_forward_s": 4.2, "pass_s": 90.0, "decode_s": 1.5, "second_forward_s": 4.0},
         "first_call_s": {"embed_tokens": 0.95, "norm": 0.01},
         "first_call_counts": {"embed_tokens": {"traced": 2, "inductor_loaded": 1}},
         "first_call_torch_s": {"embed_tokens": {"torch_compile_s": 0.81, "tracing_s": 0.05, "backend_s": 0.7},
                                "decode.mlp": {"torch_compile_s": 0.02}}}))
    (tmp_path / "proof" / "warm.json").write_text(json.dumps({"item_seconds": {"a": 3.0, "b": 29.1}}))
    firsts = {f"layers.{i}.mlp": float(i) for i in range(10)}
    (tmp_path / "cold.json").write_text(json.dumps({"times": {"first_forward_s": 84.0, "pass_s": 400.0},
                                                    "first_call_s": firsts}))
    (tmp_path / "cold_files.json").write_text(json.dumps({"deepgemm": {"files": 2}}))
    (tmp_path / "warm1.json").write_text(json.dumps({"wall_seconds": 32.01, "item_seconds": {"a": 3.0}}))
    (tmp_path / "cold8").mkdir()
    for i, s in enumerate((120.0, 150.5, None)):
        (tmp_path / "cold8" / f"driver-{i}.json").write_text(json.dumps({"times": {"first_forward_s": s}}))
    doc = run("--summary", str(tmp_path), "--server", "python -m sglang.launch_server --tp 8", "--commit", "abc",
              "--device-s", "512")
    assert doc["commit"] == "abc" and doc["device_s"] == 512
    (row,) = doc["servers"]
    assert row["warm_wall_s"] == 329 + 59  # the 480B proof's GPU-hidden and GPU-visible warms
    assert row["warm_steps_s"] == {"install": 20, "plan": 1, "warm": 329, "warm-gpu": 59}
    assert row["launched_first_forward_s"] == 4.2 and row["second_forward_s"] == 4.0
    assert row["launched_over_second"] == 1.05 and row["cold_over_launched"] == 20.0
    assert row["cold_8proc_first_forward_s"] == 150.5 and row["cold_8proc_drivers"] == 3
    assert row["longest_compile_s"] == 29.1 and row["cold_families"] == {"deepgemm": {"files": 2}}
    # the cold first forward's eight costliest first calls, longest first
    assert list(row["cold_first_calls_s"].items()) == [(f"layers.{i}.mlp", float(i)) for i in range(9, 1, -1)]
    assert row["launched_first_calls_s"] == {"embed_tokens": 0.95, "norm": 0.01}
    assert row["launched_first_calls_counts"] == {"embed_tokens": {"traced": 2, "inductor_loaded": 1}}
    assert row["cold_first_calls_counts"] == {}  # a report from before the driver counted them
    # torch's own timers in those first calls, and their sum over every first call (one outside the costliest too)
    assert row["launched_first_calls_torch_s"] == {"embed_tokens": {"torch_compile_s": 0.81, "tracing_s": 0.05,
                                                                    "backend_s": 0.7}}
    assert row["launched_torch_compile_s"] == 0.83
    assert row["cold_first_calls_torch_s"] == {} and "cold_torch_compile_s" not in row
    # the one-run warm (phase warm1) against the longest item (here the pool's: no phase alone)
    assert row["warm_one_run_s"] == 32.01 and row["warm_one_run_over_longest"] == 1.1
    assert (row["warm_one_run_longest_item"], row["warm_one_run_longest_item_s"]) == ("a", 3.0)


def test_a_carried_proofs_warms_are_no_whole_warm(tmp_path):
    """A launched phase that unpacked a carried artifact warmed only what was not carried (2026-12-07: 22 + 70 s of
    the 480B's Triton MoE item and graphs): the summary does not call that the warm's wall."""
    (tmp_path / "proof").mkdir()
    (tmp_path / "proof" / "summary.txt").write_text("device seconds: carried 2\ndevice seconds: warm 22\n"
                                                    "device seconds: warm-gpu 70\n")
    (row,) = run("--summary", str(tmp_path))["servers"]
    assert row["warm_wall_s"] is None and row["warm_steps_s"] == {"carried": 2, "warm": 22, "warm-gpu": 70}


def test_a_carried_proofs_warm_gives_no_longest_compile_and_the_one_run_warm_is_held_to_its_own_longest(tmp_path):
    """2026-12-07, DeepSeek-V3: the carried proof's warm rebuilt the Triton MoE item only; its items are not the
    plan's longest compile. The one-run warm (warm1) is held to its longest item timed inside it instead."""
    (tmp_path / "proof").mkdir()
    (tmp_path / "proof" / "summary.txt").write_text("device seconds: carried 1\ndevice seconds: warm 21\n")
    (tmp_path / "proof" / "warm.json").write_text(json.dumps({"item_seconds": {"triton_moe:x": 100.73}}))
    (tmp_path / "warm1.json").write_text(json.dumps({"wall_seconds": 169.51, "item_seconds": {
        "flashinfer:trtllm_comm": 164.9, "triton_moe:x": 116.13}}))
    (row,) = run("--summary", str(tmp_path))["servers"]
    assert row["longest_compile_s"] is None and "carried" in row["longest_compile_note"]
    assert row["warm_one_run_over_longest"] is None
    assert (row["warm_one_run_longest_item"], row["warm_one_run_over_longest_item"]) == ("flashinfer:trtllm_comm", 1.03)


def test_an_alone_warm_on_one_job_is_not_the_modules_alone_time(tmp_path):
    """The 2026-12-07 alone phases ran `warm --jobs $(nproc)` where the script had exported OMP_NUM_THREADS=1, so
    nproc said 1: FlashInfer's ninja built trtllm_comm's units one after another (320 s, the units' sum; the same
    module took 178 s inside a 16-job warm). Such a report (jobs 1, or none recorded) is left out, and said so."""
    for i, (wall, jobs) in enumerate(((320.39, None), (115.07, 1), (150.2, 16))):
        (tmp_path / f"alone-{i}.json").write_text(json.dumps({"wall_seconds": wall, "item_seconds": {f"m{i}": wall},
                                                              **({"jobs": jobs} if jobs else {})}))
    (row,) = run("--summary", str(tmp_path))["servers"]
    assert (row["longest_compile_s"], row["longest_compile_item"]) == (150.2, "m2")
    assert row["alone_left_out"].startswith("2 alone warm(s) on one job")


def test_a_phase_not_run_leaves_its_figures_empty(tmp_path):
    (row,) = run("--summary", str(tmp_path))["servers"]
    assert row["cold_first_forward_s"] is None and row["warm_wall_s"] is None
    assert row["cold_8proc_first_forward_s"] is None and row["launched_over_second"] is None
    assert row["warm_one_run_s"] is None and row["warm_one_run_over_longest"] is None


def test_a_cold_run_cut_short_says_so_and_how_far_its_pass_got(tmp_path):
    """PHASE_S: the cold driver stopped by SIGTERM wrote its report so far (model_driver.stop_writes_report)."""
    (tmp_path / "cold.json").write_text(json.dumps({"times": {"first_forward_s": 212.0}, "m_done": 96,
                                                    "stopped": "SIGTERM"}))
    (tmp_path / "cold8").mkdir()
    for i, stopped in enumerate(("SIGTERM", None)):
        (tmp_path / "cold8" / f"driver-{i}.json").write_text(json.dumps({"times": {"first_forward_s": 300.0},
                                                                         **({"stopped": stopped} if stopped else {})}))
    (row,) = run("--summary", str(tmp_path))["servers"]
    assert (row["cold_first_forward_s"], row["cold_pass_s"]) == (212.0, None)
    assert (row["cold_stopped"], row["cold_m_done"]) == ("SIGTERM", 96)
    assert (row["cold_8proc_drivers"], row["cold_8proc_stopped"]) == (2, 1)


def test_each_long_item_gets_a_manifest_of_its_own_and_the_summary_takes_the_longest_alone(tmp_path):
    """Phase alone: the README's 0.5.14 480B server plan cut into one manifest per GPU-free item that is no DeepGEMM
    kernel (FlashInfer's two modules, the Triton MoE item, SGLang's JIT modules), each a valid manifest holding that
    item only; the summary's longest compile is then the longest of those warms' walls, named."""
    from dgprecompile.planning.manifest import read_manifest, write_manifest
    from dgprecompile.planning.plan import PlanRequest
    from dgprecompile.planning.server_plan import plan_from_server

    cmd = "python -m sglang.launch_server --model-path Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8 --tp 8 --ep 8"
    plan = plan_from_server(PlanRequest(sglang_cmd=cmd, sglang="0.5.14", sglang_precompile=False))
    write_manifest(plan, tmp_path / "plan.yaml")
    proc = subprocess.run([sys.executable, str(TOOL), "--alone", str(tmp_path / "plan.yaml"), str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    ids = proc.stdout.split()
    assert ids == [*plan.flashinfer, *plan.triton_moe, *plan.jit_modules]
    assert len(plan.flashinfer) == 2 and len(plan.triton_moe) == 1
    for i, ident in enumerate(ids):
        one = read_manifest(tmp_path / f"alone-{i}.yaml")
        assert [it.id for it in one.items] == [ident] and one.kernels == {}
    for i, (wall, item) in enumerate(((41.0, ids[2]), (186.2, ids[0]), (150.9, ids[1]))):
        (tmp_path / f"alone-{i}.json").write_text(json.dumps({"wall_seconds": wall, "item_seconds": {item: wall - 1},
                                                              "jobs": 16}))
    (row,) = run("--summary", str(tmp_path))["servers"]
    assert row["longest_compile_s"] == 186.2 and row["longest_compile_item"] == ids[0]
    assert "alone" in row["longest_compile_note"]


def test_a_record_at_a_later_commit_names_the_record_its_cold_phases_came_from(tmp_path):
    """COLD_FROM=<record>: the cold phases (SGLang alone, nothing of dgprecompile's) are taken from an earlier
    record's files.tar.gz, as first_forward.sh's own tar line takes them; the summary names that record and commit."""
    rec = REPO / "bench" / "results" / "2026-12-07-h100-first-forward-dsv3"
    subprocess.run(["tar", "-xzf", str(rec / "files.tar.gz"), "-C", str(tmp_path), "./cold.json", "./cold_files.json",
                    "./cold8", "./cold8_files.json"], check=True, timeout=60)
    (tmp_path / "cold_from.json").write_text(json.dumps({"record": str(rec), "commit": "c696669"}))
    (row,) = run("--summary", str(tmp_path))["servers"]
    assert row["cold_from"]["commit"] == "c696669"
    assert (row["cold_first_forward_s"], row["cold_8proc_first_forward_s"]) == (173.4, 138.002)


def test_the_split_check_gives_the_jobs_line_and_the_launchs_exit_code(tmp_path):
    assert "split_check" not in run("--summary", str(tmp_path))["servers"][0]  # not run: no row
    (tmp_path / "split_check.rc").write_text("split check: launch rc=0\n")
    (tmp_path / "split_check.txt").write_text('dgprecompile: strict\n{"ok": true, "split_compile": true}\n')
    (row,) = run("--summary", str(tmp_path))["servers"]
    assert row["split_check"] == {"launch_rc": 0, "job": {"ok": True, "split_compile": True}}
    (tmp_path / "split_check.rc").write_text("split check: launch rc=1\n")
    (tmp_path / "split_check.txt").write_text("Traceback ...\n")
    (row,) = run("--summary", str(tmp_path))["servers"]
    assert row["split_check"] == {"launch_rc": 1, "job": None}


def test_a_triton_moe_items_time_inside_the_warm_is_its_chunks_wall_not_their_sum(tmp_path):
    """2026-12-07 DeepSeek-V3 (split trtllm_comm): warm's item_seconds gave the Triton MoE item 185.5 s, the sum of its
    5 chunks run side by side; inside the 151.2 s warm it took the chunks' wall, and the longest item was trtllm_comm."""
    rec = REPO / "bench" / "results" / "2026-12-07-h100-first-forward-dsv3-split" / "warm1.json"
    shutil.copy(rec, tmp_path / "warm1.json")
    (row,) = run("--summary", str(tmp_path))["servers"]
    assert row["warm_one_run_longest_item"] == "flashinfer:trtllm_comm@0.6.12.sm90a"
    assert (row["warm_one_run_longest_item_s"], row["warm_one_run_over_longest_item"]) == (138.9, 1.09)


def test_the_one_run_warms_cpu_seconds_give_the_cores_it_kept_busy(tmp_path):
    (tmp_path / "warm1.json").write_text(json.dumps({"wall_seconds": 150.0, "children_cpu_seconds": 1800.0,
                                                     "item_seconds": {"a": 100.0}}))
    (row,) = run("--summary", str(tmp_path))["servers"]
    assert (row["warm_one_run_cpu_s"], row["warm_one_run_cores_busy"]) == (1800.0, 12.0)
    (tmp_path / "warm1.json").write_text(json.dumps({"wall_seconds": 150.0, "item_seconds": {"a": 100.0}}))
    assert "warm_one_run_cpu_s" not in run("--summary", str(tmp_path))["servers"][0]  # a warm before the field
