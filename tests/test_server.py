"""SGLang server commands and SpecForge 0.2.0 configs as plan inputs (issue 10).

The option tables come from the real sglang wheels (downloaded with pip into .cache/sglang-wheels/, see
scripts/update_sglang_args.py); the server and `specforge` executables launched here are stand-ins
(tests/standins/), because the real ones need GPUs.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from dgprecompile.cli.main import cli
from dgprecompile.planning.plan import PlanRequest
from dgprecompile.planning.profiles import resolve_profile
from dgprecompile.planning.request import plan_from_request
from dgprecompile.planning.server_cmd import choose_table, parse_command, parse_server_args
from dgprecompile.planning.sglang_args import dump_table, read_table_file

REPO = Path(__file__).resolve().parent.parent
STANDINS = REPO / "tests" / "standins"
TABLES = REPO / "dgprecompile" / "data" / "sglang_args"
sys.path.insert(0, str(REPO / "scripts"))
import update_sglang_args  # noqa: E402

M480 = "Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8"
SMALL_WHEELS = ["0.5.1", "0.5.3", "0.5.4", "0.5.9", "0.5.14"]  # 2-5 MB each, and 12 MB (SpecForge 0.2.0's pin)
BIG_WHEELS = ["0.5.18", "0.5.20", "0.5.23"]  # 24-39 MB each: compared when DGPRECOMPILE_ALL_WHEELS=1
# (`python scripts/update_sglang_args.py --check` compares every table too)


def _run(*args, env=None):
    r = CliRunner().invoke(cli, [str(a) for a in args], env=env, catch_exceptions=False)
    return r


def _server(version: str, args: str):
    profile = resolve_profile(version).profile
    table, why = choose_table(profile, version)
    return parse_server_args(parse_command(f"python -m sglang.launch_server {args}"), table, why)


def _plan(cmd: str, sglang: str = "0.5.14", **kw):
    return plan_from_request(PlanRequest(sglang=sglang, sglang_cmd=f"python -m sglang.launch_server {cmd}", **kw))


def _one_error(r) -> str:
    lines = [line for line in r.output.splitlines() if line.startswith("error:")]
    assert r.exit_code == 2, r.output
    assert len(lines) == 1 and "hint:" in r.output and "Traceback" not in r.output, r.output
    return lines[0]


# ---- the option tables are SGLang's own -----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("version", SMALL_WHEELS + BIG_WHEELS)
def test_bundled_table_is_what_the_wheel_declares(version):
    """The committed table equals a fresh read of the real wheel's server_args.py (and arg_groups)."""
    if version in BIG_WHEELS and os.environ.get("DGPRECOMPILE_ALL_WHEELS") != "1":
        pytest.skip("a 24-39 MB wheel: set DGPRECOMPILE_ALL_WHEELS=1 (or run scripts/update_sglang_args.py --check)")
    fresh = update_sglang_args.table_for(version)
    assert dump_table(fresh) == (TABLES / f"{version}.json").read_text()
    assert len(fresh.options) > 150


@pytest.mark.parametrize("version,args,tp,ep", [
    ("0.5.1", f"--model {M480} --tp 8 --ep 8", 8, 8),  # --tp: argparse abbreviation of --tp-size (no alias)
    ("0.5.1", f"--model-path {M480} --tensor-parallel-size 8 --expert-parallel-size 4", 8, 4),
    ("0.5.9", f"--model-path={M480} --tp-size=8 --ep-size=2", 8, 2),
    ("0.5.14", f"--model {M480} --tp 8 --ep 8", 8, 8),
    ("0.5.14", f"--model-path {M480} --tensor-parallel-size 8", 8, 1),
    ("0.5.23", f"--model-path {M480} --tp 8 --expert-parallel-size 8", 8, 8),
])
def test_aliases_read_as_each_release_reads_them(version, args, tp, ep):
    s = _server(version, args)
    assert (s.model, s.tp, s.ep) == (M480, tp, ep)


def test_0_5_1_stores_tp_under_tensor_parallel_size():
    # argparse names the dest after the first long option; from_cli_args copies it (0.5.1 server_args.py:2068)
    s = _server("0.5.1", f"--model-path {M480} --tp-size 4")
    assert s.given["tensor_parallel_size"] == 4 and s.tp == 4


def test_human_readable_ints_from_0_5_14():
    s = _server("0.5.14", f"--model-path {M480} --chunked-prefill-size -1 --max-prefill-tokens 32Ki")
    assert s.get("max_prefill_tokens") == 32768
    assert _server("0.5.14", f"--model-path {M480} --max-prefill-tokens 25.6k").get("max_prefill_tokens") == 25600


@pytest.mark.parametrize("version,args,needle", [
    ("0.5.23", f"--model-path {M480} --cuda-graph-max-bs 64", "ambiguous option: --cuda-graph-max-bs"),
    ("0.5.14", f"--model-path {M480} --no-such-option 1", "unrecognized arguments: --no-such-option"),
    ("0.5.14", "--tp 8", "required: --model-path"),
    ("0.5.1", f"--model-path {M480} --tp eight", "invalid int value"),
    ("0.5.1", f"--model-path {M480} --moe-runner-backend deep_gemm", "invalid choice: 'deep_gemm'"),
    ("0.5.23", f"--model-path {M480} --enable-spec-capture", "unrecognized arguments: --enable-spec-capture"),
])
def test_what_sglang_refuses_is_refused(version, args, needle):
    r = _run("plan", "--sglang", version, "--sglang-cmd", f"python -m sglang.launch_server {args}")
    line = _one_error(r)
    assert needle in line and f"sglang {version}" in line


def test_deprecated_cuda_graph_alias_still_works_in_0_5_14():
    s = _server("0.5.14", f"--model-path {M480} --cuda-graph-max-bs 64 --cuda-graph-bs 1 2 4")
    assert s.given["cuda_graph_max_bs_decode"] == 64 and s.get("cuda_graph_bs") == [1, 2, 4]


@pytest.mark.parametrize("version,option", [
    ("0.5.1", "--enable-dp-attention --dp-size 8"),
    ("0.5.14", "--enable-dp-attention --dp-size 8"),
    ("0.5.23", "--attn-dp-size 8"),
    ("0.5.1", "--enable-deepep-moe"),
    ("0.5.14", "--moe-a2a-backend deepep"),
    ("0.5.14", "--quantization w8a8_int8"),
    ("0.5.14", "--speculative-algorithm EAGLE3"),
    ("0.5.14", "--fp8-gemm-backend triton"),
    ("0.5.14", "--moe-runner-backend flashinfer_cutlass"),
    ("0.5.14", "--moe-dense-tp-size 1"),
    ("0.5.14", "--enable-fused-moe-sum-all-reduce"),
])
def test_unmodelled_options_are_refused_by_name(version, option):
    r = _run("plan", "--sglang", version, "--sglang-cmd",
             f"python -m sglang.launch_server --model-path {M480} --tp 8 --ep 8 {option}")
    line = _one_error(r)
    assert option.split()[0] in line and "does not model" in line


def test_checkpoint_quantization_is_accepted():
    assert _plan(f"--model-path {M480} --tp 8 --ep 8 --quantization fp8").tp == 8


# ---- the m range ----------------------------------------------------------------------------------------------


def _ranges(plan):
    return {(s.key.kernel_type.value, s.key.n, s.key.k): s.key.m_max for s in plan.keys}


def test_default_chunked_prefill_and_precompile_sweep():
    plan = _plan(f"--model-path {M480} --tp 8 --ep 8")
    assert plan.max_tokens == 8192 and plan.sweep_m_max == 16384
    assert set(_ranges(plan).values()) == {16384}
    off = _plan(f"--model-path {M480} --tp 8 --ep 8", sglang_precompile=False)
    assert set(_ranges(off).values()) == {8192} and off.sweep_m_max == 0


def test_chunked_prefill_off_reaches_the_longest_request():
    # 0.5.14 scheduler: the first request is admitted whole; one request holds up to context_len - 6 tokens
    plan = _plan(f"--model-path {M480} --tp 8 --ep 8 --chunked-prefill-size -1")
    assert plan.max_tokens == 262144 - 6 and plan.sweep_m_max == 65536
    assert set(_ranges(plan).values()) == {262138}
    short = _plan(f"--model-path {M480} --tp 8 --ep 8 --chunked-prefill-size -1 --context-length 2055")
    assert short.max_tokens == 16383  # several requests below --max-prefill-tokens 16384
    big = _plan(f"--model-path {M480} --tp 8 --ep 8 --chunked-prefill-size -1 --context-length 2055 "
                "--max-prefill-tokens 64k")
    assert big.max_tokens == 63999


def test_a_context_longer_than_the_model_needs_sglangs_opt_in(monkeypatch):
    # 0.5.14 configs/model_config.py:667-696: above the derived context length SGLang raises unless the env is set
    monkeypatch.delenv("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", raising=False)
    cmd = f"--model-path {M480} --tp 8 --ep 8 --chunked-prefill-size -1 --context-length 1048576 --moe-runner-backend deep_gemm"
    r = _run("plan", "--sglang", "0.5.14", "--sglang-cmd", f"python -m sglang.launch_server {cmd}")
    assert "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1" in _one_error(r) and "at most 262144" in r.output
    opted_in = plan_from_request(PlanRequest(sglang="0.5.14", sglang_cmd="env SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 "
                                             f"python -m sglang.launch_server {cmd}"))
    assert opted_in.max_tokens == 1048576 - 6
    # beyond the m a GPU run checked (tests/data/sweep_generations_h200.json run 3), the plan says so per key
    beyond = [n for n in opted_in.notes if "beyond the largest m checked on a GPU" in n]
    assert len(beyond) == 4 and any("(262208)" in n for n in beyond) and any("(104920)" in n for n in beyond)
    assert not [n for n in _plan(f"--model-path {M480} --tp 8 --ep 8 --chunked-prefill-size -1").notes
                if "beyond the largest m" in n]


def test_large_chunks_and_decode_batches():
    assert _plan(f"--model-path {M480} --tp 8 --ep 8 --chunked-prefill-size 16384").sweep_m_max == 32768
    assert _plan(f"--model-path {M480} --tp 8 --ep 8 --chunked-prefill-size 512 --max-running-requests 2048",
                 sglang_precompile=False).max_tokens == 2048


def test_masked_keys_cover_sglang_sweep_of_expected_m():
    plan = _plan(f"--model-path {M480} --tp 8 --ep 8 --moe-runner-backend deep_gemm")
    r = _ranges(plan)
    # real path: expected_m = ceil(8192 * 8 / 20) = 3277 (0.5.14 divides by local experts); the sweep: 16384
    assert r[("GROUPED_GEMM_NT_F8F8BF16_MASKED", 5120, 6144)] == 16384
    off = _ranges(_plan(f"--model-path {M480} --tp 8 --ep 8 --moe-runner-backend deep_gemm",
                        sglang_precompile=False))
    assert off[("GROUPED_GEMM_NT_F8F8BF16_MASKED", 5120, 6144)] == 3277


def test_warmup_transposes_on_the_dense_keys():
    """SGLang's warm-up passes row-major scales: transpose_fp32 with sf_k = k/128 on the dense keys (48 and 12)."""
    plan = _plan(f"--model-path {M480} --tp 8 --ep 8")
    aux = {(pk.key.n, pk.key.k): pk.aux for pk in plan.keys}
    assert aux[(1792, 6144)] == ["transpose_fp32:TH512.BMN64.SFK48"]
    assert aux[(6144, 1536)] == ["transpose_fp32:TH512.BMN64.SFK12"]
    assert "transpose_fp32:TH512.BMN64.SFK48" in plan.kernels
    off = _plan(f"--model-path {M480} --tp 8 --ep 8", sglang_precompile=False)
    assert not any(pk.aux for pk in off.keys)
    assert len(plan.kernels) == len(off.kernels) + 2 + (len(plan.kernels) - len(off.kernels) - 2)


def test_plan_cli_writes_the_server_into_the_manifest(tmp_path):
    cmd = f"python -m sglang.launch_server --model-path {M480} --tp 8 --ep 8"
    r = _run("plan", "--sglang", "0.5.14", "--sglang-cmd", cmd, "-o", tmp_path / "p.yaml")
    assert r.exit_code == 0, r.output
    data = yaml.safe_load((tmp_path / "p.yaml").read_text())
    assert data["server"]["command"] == cmd and data["sglang_precompile_m_max"] == 16384
    assert "SGLang's default 8192" in " ".join(r.output.split())  # a note, folded at its spaces to the width


def test_two_nodes():
    plan = _plan(f"--model-path {M480} --tp 16 --ep 16 --nnodes 2 --node-rank 1 --dist-init-addr 10.0.0.1:5000")
    assert plan.tp == 16 and any("over 2 nodes" in n for n in plan.notes)
    r = _run("plan", "--sglang", "0.5.14", "--sglang-cmd",
             f"python -m sglang.launch_server --model-path {M480} --tp 16 --nnodes 3")
    assert "--nnodes 3" in _one_error(r)


def test_ep_that_sglang_cannot_load_names_the_working_choices():
    r = _run("plan", "--sglang", "0.5.14", "--sglang-cmd",
             f"python -m sglang.launch_server --model-path {M480} --tp 8 --ep 1")
    assert "320 columns" in _one_error(r) and "use --ep-size 2, 4 or 8" in r.output


def test_server_command_and_model_options_exclude_each_other():
    r = _run("plan", "--model", M480, "--sglang-cmd", f"python -m sglang.launch_server --model-path {M480}")
    assert "--model" in _one_error(r)
    r = _run("plan", "--sglang-cmd", "torchrun train.py --tp-size 8")
    assert "not an SGLang server command" in _one_error(r)


def test_sglang_serve_and_compile_deep_gemm_entry_points():
    for prefix in ("sglang serve", "python3 -m sglang.compile_deep_gemm", "env A=1 python -msglang.launch_server"):
        plan = plan_from_request(PlanRequest(sglang="0.5.23", sglang_cmd=f"{prefix} --model-path {M480} --tp 8 --ep 8"))
        assert plan.tp == 8


# ---- the installed sglang's own server_args.py ----------------------------------------------------------------


@pytest.fixture
def installed_sglang_0_5_1(tmp_path, monkeypatch):
    """A site dir with the stand-in sglang package, the REAL server_args.py of sglang 0.5.1 (from its wheel) and a
    dist-info saying 0.5.1: what dgprecompile finds when the user has sglang 0.5.1 installed. The wheel is the one
    `make setup` downloads into .cache/sglang-wheels/0.5.1; nothing is downloaded at test time."""
    found = update_sglang_args.local_wheel("0.5.1")
    if found is None:
        pytest.skip("the sglang 0.5.1 wheel is not in .cache/sglang-wheels/0.5.1 (make setup)")
    site = tmp_path / "site"
    shutil.copytree(STANDINS / "sglang", site / "sglang")
    with zipfile.ZipFile(found) as zf:
        (site / "sglang" / "srt").mkdir()
        (site / "sglang" / "srt" / "server_args.py").write_bytes(zf.read("sglang/srt/server_args.py"))
    info = site / "sglang-0.5.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.1\n")
    monkeypatch.syspath_prepend(str(site))
    return site


def test_the_installed_sglang_is_read_at_run_time(installed_sglang_0_5_1):
    plan = plan_from_request(PlanRequest(sglang_cmd=f"python -m sglang.launch_server --model {M480} --tp 8 --ep 8"))
    assert plan.profile.id == "0.5.0-0.5.1" and "installed sglang 0.5.1" in plan.profile_reason
    assert any("the installed sglang 0.5.1's server_args.py" in n for n in plan.notes)


# ---- launch -- python -m sglang.launch_server ... --------------------------------------------------------------


def _standin_env(tmp_path, site: Path | None = None, **extra):
    path = [str(site)] if site else []
    path.append(str(STANDINS))
    env = {"PYTHONPATH": os.pathsep.join(path), "STANDIN_RECORD": str(tmp_path / "record.jsonl"),
           "PATH": str(STANDINS) + os.pathsep + os.environ["PATH"]}
    env.update(extra)
    return env


def _records(tmp_path):
    return [json.loads(x) for x in (tmp_path / "record.jsonl").read_text().splitlines()]


def test_launch_server_command_records_env_and_arguments(tmp_path):
    server = ["-m", "sglang.launch_server", "--model-path", M480, "--tp", "8", "--ep-size", "8", "--port", "30001"]
    r = _run("launch", "--sglang", "0.5.14", "--cache-dir", tmp_path / "cache", "--allow-missing", "--",
             sys.executable, *server, env=_standin_env(tmp_path))
    assert r.exit_code == 0, r.output
    assert "tp=8 ep=8 sglang 0.5.12-0.5.16" in r.output  # planned from the server command, not as a trainer
    (rec,) = _records(tmp_path)
    assert rec["module"] == "sglang.launch_server" and rec["argv"] == server[2:]  # unchanged
    env = rec["env"]
    assert env["SGLANG_JIT_DEEPGEMM_PRECOMPILE"] == "0"
    assert env["SGLANG_DG_CACHE_DIR"] == env["DG_JIT_CACHE_DIR"] == str(tmp_path / "cache")
    assert env["DGPRECOMPILE_STRICT"] == "1"


def test_launch_server_refuses_a_cold_cache_and_names_the_warm_command(tmp_path):
    r = _run("launch", "--sglang", "0.5.14", "--cache-dir", tmp_path / "cache", "--", sys.executable, "-m",
             "sglang.launch_server", "--model-path", M480, "--tp", "8", "--ep", "8", env=_standin_env(tmp_path))
    assert r.exit_code == 1
    assert "dgprecompile warm --sglang-cmd" in r.output and not (tmp_path / "record.jsonl").exists()


def test_launch_refuses_an_unmodelled_server_option(tmp_path):
    r = _run("launch", "--sglang", "0.5.14", "--allow-missing", "--", sys.executable, "-m", "sglang.launch_server",
             "--model-path", M480, "--tp", "8", "--enable-dp-attention", env=_standin_env(tmp_path))
    assert "--enable-dp-attention" in _one_error(r) and not (tmp_path / "record.jsonl").exists()


@pytest.mark.slow
@pytest.mark.nvcc
def test_launch_with_no_other_option_after_warm(tmp_path, installed_sglang_0_5_1):
    """With sglang 0.5.1 "installed" (its real server_args.py), `launch -- python -m sglang.launch_server ...` needs
    no option: the profile, the options and the cache dir come from the installation and the environment."""
    from helpers import legacy_deepgemm_dir

    if legacy_deepgemm_dir() is None:
        pytest.skip("the legacy DeepGEMM (sgl-kernel 0.3.5) is not installed (make setup)")
    server = ["-m", "sglang.launch_server", "--model-path", "Qwen/Qwen3-30B-A3B-FP8", "--tp", "4", "--ep", "4",
              "--chunked-prefill-size", "64", "--cuda-graph-max-bs", "8"]
    env = _standin_env(tmp_path, installed_sglang_0_5_1, SGL_DG_CACHE_DIR=str(tmp_path / "dg"))
    cold = _run("launch", "--", sys.executable, *server, env=env)
    assert cold.exit_code == 1, cold.output
    hint = next(line for line in cold.output.splitlines() if "dgprecompile warm" in line)
    warm = hint[hint.index("dgprecompile warm"):hint.index("  (or pass --allow-missing")]
    argv = shlex.split(warm)[2:]
    assert argv[0] == "--sglang-cmd"
    w = _run("warm", *argv, "-j", "2", env=env)
    assert w.exit_code == 0, w.output
    ok = _run("launch", "--", sys.executable, *server, env=env)
    assert ok.exit_code == 0, ok.output
    (rec,) = _records(tmp_path)
    assert rec["argv"] == server[2:] and rec["env"]["SGL_JIT_DEEPGEMM_PRECOMPILE"] == "0"
    assert rec["env"]["SGL_DG_CACHE_DIR"] == str(tmp_path / "dg")


# ---- SpecForge 0.2.0 -----------------------------------------------------------------------------------------

EX = REPO / "examples" / "specforge-0.2"


def test_specforge_managed_local_plans_its_capture_server():
    plan = plan_from_request(PlanRequest(specforge_config=str(EX / "run.yaml")))
    assert (plan.model, plan.tp, plan.ep, plan.profile.id) == ("Qwen3-30B-A3B-FP8", 4, 4, "0.5.12-0.5.16")
    assert plan.max_tokens == 16383 and plan.sweep_m_max == 65536  # context 2048 + 7, chunked prefill -1
    cmd = plan.server["command"]
    assert "--chunked-prefill-size -1" in cmd and "--enable-spec-capture" in cmd and "--context-length 2055" in cmd
    assert plan.server["specforge"]["capture_servers"][0]["tp_size"] == 4


def _yaml(tmp_path, data) -> Path:
    p = tmp_path / "run.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def test_specforge_external_server_means_the_server_command_is_the_input():
    r = _run("plan", "--specforge-config", EX / "run-480b-external.yaml")
    assert "external capture servers" in _one_error(r) and "--sglang-cmd" in r.output


def test_specforge_legacy_server_urls_are_external_too(tmp_path):
    data = yaml.safe_load((EX / "run.yaml").read_text())
    data["deployment"] = {}
    data["training"]["server_urls"] = ["http://10.0.0.5:30000"]
    assert "10.0.0.5" in _one_error(_run("plan", "--specforge-config", _yaml(tmp_path, data)))


def test_specforge_ep_1_at_tp_8_is_refused_with_the_working_choices(tmp_path):
    """SpecForge's own 480B example sets sglang_ep_size 1; at tp 8 SGLang cannot load the FP8 experts."""
    data = yaml.safe_load((EX / "run.yaml").read_text())
    data["model"]["target_model_path"] = M480
    data["model"]["sglang_ep_size"] = 1
    srv = data["deployment"]["disaggregated"]["managed_local"]["capture_servers"][0]
    srv.update(tp_size=8, cuda_visible_devices=[str(i) for i in range(8)])
    r = _run("plan", "--specforge-config", _yaml(tmp_path, data))
    assert "320 columns" in _one_error(r) and "use model.sglang_ep_size 2, 4 or 8" in r.output


@pytest.mark.parametrize("change,needle", [
    ({"deployment": {"mode": "local_colocated"}}, "colocated online training is no longer supported"),
    ({"data": {"hidden_states_path": "/h", "max_length": 2048}}, "offline run"),
    ({"model": {"target_model_path": M480, "sglang_ep_size": 3}}, "sglang_ep_size 3 must be no larger"),
    ({"model": {"target_model_path": M480, "sglang_no_such": 1}}, "not a SpecForge 0.2.0 field"),
])
def test_specforge_bad_configs(tmp_path, change, needle):
    data = yaml.safe_load((EX / "run.yaml").read_text())
    data.update(change)
    assert needle in _one_error(_run("plan", "--specforge-config", _yaml(tmp_path, data)))


def test_launch_specforge_train_reaches_the_capture_server(tmp_path):
    """`launch --specforge-config run.yaml -- specforge train -c run.yaml`: the stand-in `specforge` starts the
    stand-in server the way SpecForge does (its environment plus CUDA_VISIBLE_DEVICES)."""
    plan = plan_from_request(PlanRequest(specforge_config=str(EX / "run.yaml")))
    server = ["python", "-m", "sglang.launch_server", *parse_command(plan.server["command"]).server_args]
    env = _standin_env(tmp_path, STANDIN_SERVER_CMD=json.dumps(server), STANDIN_DEVICES="0,1,2,3")
    r = _run("launch", "--specforge-config", EX / "run.yaml", "--cache-dir", tmp_path / "c", "--allow-missing",
             "--", "specforge", "train", "-c", EX / "run.yaml", env=env)
    assert r.exit_code == 0, r.output
    (rec,) = _records(tmp_path)
    assert rec["env"]["SGLANG_JIT_DEEPGEMM_PRECOMPILE"] == "0" and rec["env"]["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
    assert "--enable-spec-capture" in rec["argv"]
    # without --specforge-config, `specforge train -c FILE` is recognised too
    r2 = _run("launch", "--cache-dir", tmp_path / "c", "--allow-missing", "--", "specforge", "train", "-c",
              EX / "run.yaml", env=env)
    assert r2.exit_code == 0 and "tp=4 ep=4" in r2.output


def test_the_2025_trainer_path_is_unchanged(tmp_path):
    cmd = ("torchrun --standalone --nproc_per_node 8 scripts/train_eagle3_sgl_online.py --target-model-path x "
           "--tp-size 8 --ep-size 8 --batch-size 1 --max-length 2048")
    plan = plan_from_request(PlanRequest(model=M480, sglang="0.5.1", specforge_cmd=cmd))
    assert plan.max_tokens == 16384 and plan.sweep_m_max == 0 and len(plan.kernels) == 48


def test_standin_is_importable_only_from_its_folder():
    """The stand-in must never shadow a real sglang in the test process or in the children the tests start with
    this session's environment, and must load where a test puts its folder on the path."""
    import importlib.util

    def where(env):
        return subprocess.run([sys.executable, "-c", "import importlib.util as u; print(u.find_spec('sglang'))"],
                              capture_output=True, text=True, env=env).stdout

    here = importlib.util.find_spec("sglang")
    assert here is None or "standins" not in str(here.origin)
    assert str(STANDINS) not in sys.path
    assert "standins" not in where(dict(os.environ))  # the session's own environment, PYTHONPATH included
    # the check sees the stand-in when it is there
    put = {**os.environ, "PYTHONPATH": os.pathsep.join([str(STANDINS), os.environ.get("PYTHONPATH", "")])}
    assert str(STANDINS) in where(put)


def test_table_files_are_valid():
    for path in TABLES.glob("*.json"):
        table = read_table_file(path)
        assert table.options and all(o.names and o.dest for o in table.options)
