"""`plan`: keys, buckets and errors, driven through the CLI like a user would."""

from __future__ import annotations

import json

import pytest
from conftest import REPO, invoke
from helpers import run_in_fresh_python

from dgprecompile.cache.store import resolve_cache_dir
from dgprecompile.cli.main import cli
from dgprecompile.errors import InputError
from dgprecompile.planning.manifest import read_manifest
from dgprecompile.planning.plan import PlanRequest, parse_specforge_cmd, sglang_precompile_m_max
from dgprecompile.planning.profiles import resolve_profile
from dgprecompile.planning.request import plan_from_request


def keys_of(result):
    data = json.loads(result.stdout)
    return data, {(s["kernel_type"], s["n"], s["k"], s["num_groups"]) for s in data["shapes"]}


def test_acceptance_480b_sglang_051(runner):
    result = invoke(runner, "plan", "--model", "Qwen3-Coder-480B", "--tp", 8, "--ep", 8, "--sglang", "0.5.1",
                    "--format", "json")
    assert result.exit_code == 0
    data, keys = keys_of(result)
    assert keys == {("GEMM_NT_F8F8BF16", 1792, 6144, 1), ("GEMM_NT_F8F8BF16", 6144, 1536, 1),
                    ("GROUPED_GEMM_NT_F8F8BF16_MASKED", 5120, 6144, 20),
                    ("GROUPED_GEMM_NT_F8F8BF16_MASKED", 6144, 2560, 20)}
    for field in ("model", "tp", "ep", "sglang_profile", "num_sms", "total_kernels", "shapes"):
        assert field in data
    assert data["sglang_profile"] == "0.5.0-0.5.1" and data["num_sms"] == 132
    # distinct cubins per key, as counted with the library's own get_best_configs over m = 1..16384
    per_key = {(s["n"], s["k"]): s["kernels"] for s in data["shapes"]}
    assert per_key == {(1792, 6144): 26, (6144, 1536): 12, (5120, 6144): 5, (6144, 2560): 5}
    assert data["total_kernels"] == 48
    masked = [s for s in data["shapes"] if s["num_groups"] == 20]
    assert all(s["m_max"] == 820 for s in masked)  # expected_m = ceil(16384 * 8 / 160)
    # the profile used is always said
    assert "sglang profile 0.5.0-0.5.1" in result.stderr


def test_acceptance_480b_sglang_0514_default_moe_is_triton(runner):
    result = invoke(runner, "plan", "--model", "Qwen3-Coder-480B", "--tp", 8, "--ep", 8, "--sglang", "0.5.14",
                    "--format", "json")
    data, keys = keys_of(result)
    assert keys == {("GEMM_NT_F8F8BF16", 1792, 6144, 1), ("GEMM_NT_F8F8BF16", 6144, 1536, 1)}
    assert any("Triton" in n for n in data["notes"])
    # 0.1.x dense kernels have n and k as runtime values, so the two keys share kernels: 27 + 14 -> 31 distinct
    assert [s["kernels"] for s in data["shapes"]] == [27, 14] and data["total_kernels"] == 31


def test_0514_deep_gemm_runner_masked_local_expected_m_and_transpose(runner):
    data, keys = keys_of(invoke(runner, "plan", "-m", "Qwen3-Coder-480B", "--tp", 8, "--ep", 8, "--sglang",
                                "0.5.14", "--moe-runner-backend", "deep_gemm", "--format", "json"))
    masked = [s for s in data["shapes"] if s["kernel_type"].endswith("MASKED")]
    assert [s["m_max"] for s in masked] == [6554, 6554]  # ceil(16384 * 8 / 20 local experts)
    assert all(len(s["aux_kernels"]) == 1 and s["aux_kernels"][0].startswith("transpose_fp32") for s in masked)
    assert data["total_kernels"] == 37  # = the 37 entries an H200 sweep of every m created


@pytest.mark.parametrize("version,profile,masked", [
    ("0.5.0rc2", "0.5.0-0.5.1", True), ("0.5.1.post2", "0.5.0-0.5.1", True),
    ("0.5.1.post3", "0.5.1.post3-0.5.3rc0", True), ("0.5.3rc0", "0.5.1.post3-0.5.3rc0", True),
    ("0.5.3rc2", "0.5.3rc2-0.5.3", True), ("0.5.3", "0.5.3rc2-0.5.3", True),
    ("0.5.3.post1", "0.5.3.post1-0.5.6", False), ("0.5.6.post2", "0.5.3.post1-0.5.6", False),
    ("0.5.7", "0.5.7-0.5.9", False), ("0.5.9", "0.5.7-0.5.9", False),
    ("0.5.10rc0", "0.5.10-0.5.11", False), ("0.5.10", "0.5.10-0.5.11", False), ("0.5.11", "0.5.10-0.5.11", False),
    ("0.5.12", "0.5.12-0.5.16", False), ("0.5.17", "0.5.17-0.5.19", False), ("0.5.23", "0.5.20-0.5.23", False),
])
def test_profile_boundaries(version, profile, masked):
    p = resolve_profile(version).profile
    assert p.id == profile
    assert (p.moe_kernel("auto") == "masked") is masked


def test_profile_env_spellings():
    old = resolve_profile("0.5.1").profile
    new = resolve_profile("0.5.14").profile
    assert old.env_names("precompile") == ["SGL_JIT_DEEPGEMM_PRECOMPILE"]
    assert new.env_names("precompile") == ["SGLANG_JIT_DEEPGEMM_PRECOMPILE"]
    assert old.cache_dir({}).endswith("/.cache/deep_gemm")
    assert old.cache_dir({"SGL_DG_CACHE_DIR": "/x/y"}) == "/x/y"
    late = resolve_profile("0.5.23").profile
    assert late.cache_dir({}).endswith("/.cache/sglang/deep_gemm")
    mid = resolve_profile("0.5.18").profile
    assert mid.cache_dir({}, "0.5.18").endswith("/.cache/sglang/deep_gemm")
    assert mid.cache_dir({}, "0.5.17").endswith("/.cache/deep_gemm")


def test_kv_heads_replicated_when_fewer_than_tp(runner):
    # Qwen3-30B-A3B: 32 q heads, 4 kv heads; at tp 8 each rank holds 4 q heads and one replicated kv head
    data, keys = keys_of(invoke(runner, "plan", "-m", "Qwen3-30B-A3B", "--tp", 8, "--ep", 8, "--sglang", "0.5.1",
                                "--format", "json"))
    assert ("GEMM_NT_F8F8BF16", (4 + 2) * 128, 2048, 1) in keys
    assert ("GEMM_NT_F8F8BF16", 2048, 4 * 128, 1) in keys
    assert ("GROUPED_GEMM_NT_F8F8BF16_MASKED", 2 * 768, 2048, 16) in keys


def test_epmoe_needs_expert_parallelism(runner):
    # sglang <= 0.5.3 builds EPMoE (masked DeepGEMM) only when ep > 1; ep 1 runs the experts on Triton
    data, keys = keys_of(invoke(runner, "plan", "-m", "Qwen3-30B-A3B", "--tp", 2, "--ep", 1, "--sglang", "0.5.1",
                                "--format", "json"))
    assert {k[0] for k in keys} == {"GEMM_NT_F8F8BF16"}
    assert any("only when ep > 1" in n for n in data["notes"])


def test_moe_tp_splits_expert_width(runner):
    # tp 8, ep 2: moe_tp 4 -> 2560/4 = 640 columns per rank, 80 experts per rank
    data, keys = keys_of(invoke(runner, "plan", "-m", "Qwen3-Coder-480B", "--tp", 8, "--ep", 2, "--sglang",
                                "0.5.1", "--format", "json"))
    assert ("GROUPED_GEMM_NT_F8F8BF16_MASKED", 1280, 6144, 80) in keys
    assert ("GROUPED_GEMM_NT_F8F8BF16_MASKED", 6144, 640, 80) in keys


@pytest.mark.parametrize("args,message", [
    (["-m", "no-such-model"], "unknown model"),
    (["-m", "Qwen3-Coder-480B", "--tp", 8, "--ep", 3], "ep 3 must divide tp 8"),
    (["-m", "Qwen3-Coder-480B", "--tp", 8, "--ep", 8, "--sglang", "0.4.0"], "not supported"),
    (["-m", "Qwen3-Coder-480B", "--tp", 8, "--ep", 8, "--sglang", "banana"], "is not an sglang version"),
    (["-m", "Qwen3-Coder-480B", "--tp", 8, "--ep", 8, "--sglang", "0.5.3.post1-0.5.11"], "not a profile id; the profiles"),
    (["-m", "Qwen3-Coder-480B", "--tp", 5], "tp 5 does not divide the 96 attention heads"),
    (["-m", "Qwen3-Coder-480B", "--tp", 12, "--ep", 12], "replicate"),
    (["-m", "Qwen3-Coder-480B", "--tp", 8, "--ep", 1], "not a multiple of the 128-wide FP8 weight block"),
    (["-m", "Qwen3-Coder-480B", "--tp", 0], "Invalid value for '--tp'"),
    (["-m", "Qwen3-Coder-480B", "--gpu", "h20", "--num-sms", 132], "has 78 SMs"),
    (["-m", "Qwen3-Coder-480B", "--max-tokens", 10, "--specforge-cmd", "x"], "not both"),
    (["-m", "Qwen3-Coder-480B", "--tp", 8, "--ep", 8, "--sglang", "0.5.1", "--moe-runner-backend", "deep_gemm"],
     "has no --moe-runner-backend deep_gemm"),
])
def test_bad_input_is_one_line_and_exit_2(runner, args, message):
    result = invoke(runner, "plan", *args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert "Traceback" not in result.output
    if not message.startswith("Invalid value"):  # click's own usage errors keep click's format
        assert result.stderr.strip().splitlines()[0].startswith("error:")


def test_ep_not_dividing_experts(runner, tmp_path):
    cfg = json.loads((REPO / "dgprecompile/data/models/Qwen3-30B-A3B-FP8.json").read_text())
    cfg["num_experts"] = 100
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    result = invoke(runner, "plan", "-m", path, "--tp", 8, "--ep", 8)
    assert result.exit_code == 2 and "ep 8 does not divide the 100 experts" in result.stderr


@pytest.mark.parametrize("mutate,message", [
    (lambda c: c.pop("quantization_config"), "not a block-FP8 model"),
    (lambda c: c["quantization_config"].update(weight_block_size=[64, 64]), "not a block-FP8 model"),
    (lambda c: c.pop("hidden_size"), "'hidden_size' is missing"),
    (lambda c: c.update(model_type="llama"), "'llama' is not supported"),
    (lambda c: c.update(num_attention_heads="many"), "num_attention_heads: 'many' is not an integer"),
])
def test_bad_configs(runner, tmp_path, mutate, message):
    cfg = json.loads((REPO / "dgprecompile/data/models/Qwen3-30B-A3B-FP8.json").read_text())
    mutate(cfg)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    result = invoke(runner, "plan", "-m", tmp_path)  # a model directory
    assert result.exit_code == 2 and message in result.stderr, result.stderr


def test_unreadable_config_files(runner, tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    assert "not valid JSON" in invoke(runner, "plan", "-m", bad).stderr
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    assert "without a config.json" in invoke(runner, "plan", "-m", empty_dir).stderr


def test_hf_cache_lookup_is_offline(runner, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    snap = tmp_path / "hub" / "models--acme--moe-fp8" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text((REPO / "dgprecompile/data/models/Qwen3-30B-A3B-FP8.json").read_text())
    (tmp_path / "hub" / "models--acme--moe-fp8" / "refs").mkdir()
    (tmp_path / "hub" / "models--acme--moe-fp8" / "refs" / "main").write_text("abc123")
    data, _ = keys_of(invoke(runner, "plan", "-m", "acme/moe-fp8", "--tp", 4, "--ep", 4, "--sglang", "0.5.1",
                             "--format", "json"))
    assert data["model_source"] == "hf-cache:acme/moe-fp8@abc123"
    missing = invoke(runner, "plan", "-m", "acme/not-downloaded")
    assert missing.exit_code == 2 and "local Hugging Face cache" in missing.stderr


def test_specforge_command_sets_tp_ep_and_max_tokens():
    cmd = ("torchrun --standalone --nproc_per_node 8 scripts/train_eagle3.py --target-model-path X "
           "--tp-size 8 --ep-size 8 --batch-size 2 --max-length=1024")
    shape = parse_specforge_cmd(cmd)
    assert (shape.tp, shape.ep, shape.batch_size, shape.max_length, shape.max_tokens) == (8, 8, 2, 1024, 16384)
    plan = plan_from_request(PlanRequest(model="Qwen3-Coder-480B", sglang="0.5.1", specforge_cmd=cmd))
    assert (plan.tp, plan.ep, plan.max_tokens) == (8, 8, 16384)
    assert {pk.key.m_max for pk in plan.keys if pk.key.num_groups == 20} == {820}


def test_chunked_prefill_rule():
    assert sglang_precompile_m_max(None) == 16384
    assert sglang_precompile_m_max(8192) == 16384
    assert sglang_precompile_m_max(16384) == 32768
    assert sglang_precompile_m_max(-1) == 65536
    assert sglang_precompile_m_max(100000) == 131072


def test_buckets_tile_the_m_range_and_manifest_round_trips(runner, tmp_path):
    out = tmp_path / "plan.yaml"
    result = invoke(runner, "plan", "-m", "Qwen3-Coder-480B", "--tp", 8, "--ep", 8, "--sglang", "0.5.1",
                    "--gpu", "h20", "-o", out)
    assert result.exit_code == 0 and out.exists()
    from dgprecompile.planning.manifest import read_manifest

    plan = read_manifest(out)
    assert plan.num_sms == 78
    for pk in plan.keys:
        covered = [m for b in pk.buckets for m in range(b.m_min, b.m_max + 1)]
        assert covered == list(range(pk.key.m_min, pk.key.m_max + 1))
        assert all(b.m_min <= b.m_rep <= b.m_max for b in pk.buckets)
    again = invoke(runner, "plan", "--manifest", out, "--format", "json")
    assert json.loads(again.stdout)["total_kernels"] == plan.total_kernels


def test_bad_manifest(runner, tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text("schema: 99\nshapes: []\nkernels: []\n")
    result = invoke(runner, "plan", "--manifest", path)
    assert result.exit_code == 2 and "schema 99" in result.stderr
    path.write_text("just text")
    assert "not a dgprecompile manifest" in invoke(runner, "plan", "--manifest", path).stderr


def test_deepseek_v3_keys(runner, tmp_path):
    # DeepSeek-V3's public config.json values (the fields plan reads)
    cfg = {"model_type": "deepseek_v3", "hidden_size": 7168, "num_attention_heads": 128, "num_hidden_layers": 61,
           "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
           "v_head_dim": 128, "intermediate_size": 18432, "moe_intermediate_size": 2048, "n_routed_experts": 256,
           "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3,
           "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128], "fmt": "e4m3"}}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    data, keys = keys_of(invoke(runner, "plan", "-m", tmp_path, "--tp", 8, "--ep", 8, "--sglang", "0.5.1",
                                "--format", "json"))
    dense = {(n, k) for t, n, k, g in keys if t == "GEMM_NT_F8F8BF16"}
    assert dense == {(2112, 7168), (3072, 1536), (4096, 512), (7168, 2048), (4608, 7168), (7168, 2304),
                     (512, 7168), (7168, 256)}
    assert ("GROUPED_GEMM_NT_F8F8BF16_MASKED", 4096, 7168, 32) in keys
    assert ("GROUPED_GEMM_NT_F8F8BF16_MASKED", 7168, 2048, 32) in keys


def test_keys_only_plan_lists_keys_without_kernels(runner):
    # every profile's kernel choice is modelled; --keys-only leaves it to the library (warm --backend sweep)
    args = ["plan", "-m", "Qwen3-Coder-480B", "--tp", 8, "--ep", 8, "--sglang", "0.5.9", "--moe-runner-backend",
            "deep_gemm", "--format", "json"]
    data, keys = keys_of(invoke(runner, *args, "--keys-only"))
    assert len(keys) == 4 and data["total_kernels"] is None and data["kernel_model"] is False
    modelled, modelled_keys = keys_of(invoke(runner, *args))
    assert modelled_keys == keys and modelled["kernel_model"] is True and modelled["total_kernels"] > 0
    text = invoke(runner, *args[:-2], "--keys-only")
    assert "4 keys, keys only" in text.output
    # the legacy Python JIT has no sweep warm: refused with the fix
    refused = runner.invoke(cli, ["plan", "-m", "Qwen3-Coder-480B", "--tp", "8", "--ep", "8", "--sglang", "0.5.1",
                                  "--keys-only"])
    assert refused.exit_code == 2 and "error: --keys-only" in refused.output and "hint: plan without --keys-only" in refused.output


def test_plan_imports_neither_torch_nor_deep_gemm():
    proc, heavy = run_in_fresh_python(["plan", "--model", "Qwen3-Coder-480B", "--tp", "8", "--ep", "8",
                                       "--sglang", "0.5.1", "--format", "json"])
    assert heavy == [], proc.stderr
    assert json.loads(proc.stdout)["total_kernels"] == 48


def test_exact_sglang_version_travels_and_picks_the_cache_dir(runner, tmp_path, monkeypatch):
    # sglang 0.5.18 reads ~/.cache/sglang/deep_gemm; 0.5.17 (same profile) ~/.cache/deep_gemm
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("SGLANG_DG_CACHE_DIR", "SGL_DG_CACHE_DIR", "DG_JIT_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)
    for version, where in (("0.5.18", ".cache/sglang/deep_gemm"), ("0.5.17", ".cache/deep_gemm")):
        manifest = tmp_path / f"{version}.yaml"
        invoke(runner, "plan", "-m", "Qwen3-Coder-480B", "--tp", 8, "--ep", 8, "--sglang", version, "-o", manifest)
        plan = read_manifest(manifest)
        assert plan.sglang_version == version and plan.profile.id == "0.5.17-0.5.19"
        assert resolve_cache_dir(plan) == tmp_path / where
        data = json.loads(runner.invoke(cli, ["verify", "--manifest", str(manifest), "--json"]).stdout)
        assert data["cache_dir"] == str(tmp_path / where)


def test_manifest_sglang_version_must_fit_its_profile(runner, tmp_path):
    manifest = tmp_path / "plan.yaml"
    invoke(runner, "plan", "-m", "Qwen3-Coder-480B", "--tp", 8, "--ep", 8, "--sglang", "0.5.14", "-o", manifest)
    manifest.write_text(manifest.read_text().replace("sglang_version: 0.5.14", "sglang_version: 0.5.18"))
    res = runner.invoke(cli, ["plan", "--manifest", str(manifest)])
    assert res.exit_code == 2 and "sglang_version 0.5.18 is not in profile 0.5.12-0.5.16" in res.stderr


def test_without_sglang_the_installed_deepgemm_picks_the_profile(runner, monkeypatch):
    from dgprecompile.host.toolchain import DeepGemmInstall

    monkeypatch.setattr("dgprecompile.planning.profiles.installed_sglang_version", lambda: None)
    cases = [("legacy", "sgl-kernel", "0.3.5", "0.5.0-0.5.1"),
             ("sgl-deep-gemm-0.1", "sgl-deep-gemm", "0.1.3", "0.5.12-0.5.16"),
             ("sgl-deep-gemm-0.1", "sgl-deep-gemm", "0.1.7", "0.5.17-0.5.19"),
             ("sgl-deep-gemm-0.2", "sgl-deep-gemm", "0.2.5", "0.5.20-0.5.23")]
    for generation, dist, version, profile in cases:
        install = DeepGemmInstall(dist, version, "/x/deep_gemm", generation)
        monkeypatch.setattr("dgprecompile.host.toolchain.find_deepgemm", lambda install=install: install)
        res = runner.invoke(cli, ["plan", "-m", "Qwen3-Coder-480B", "--tp", 8, "--ep", 8, "--format", "json"])
        assert res.exit_code == 0, res.stderr
        assert json.loads(res.stdout)["sglang_profile"] == profile
        # the profile line folds at its spaces to the width (80 under CliRunner): read it with its lines joined
        assert f"the installed DeepGEMM ({dist} {version}) is this profile's" in " ".join(res.stderr.split())
    monkeypatch.setattr("dgprecompile.host.toolchain.find_deepgemm", lambda: None)
    res = runner.invoke(cli, ["plan", "-m", "Qwen3-Coder-480B", "--format", "json"])
    assert json.loads(res.stdout)["sglang_profile"] == "0.5.20-0.5.23" and "pass --sglang" in res.stderr


def test_whole_yaml_output_is_the_checked_in_manifest(runner):
    # `plan --format yaml` on stdout is the manifest `plan -o` writes; only the config's absolute path differs
    res = runner.invoke(cli, ["plan", "-m", "Qwen3-Coder-480B", "--tp", "8", "--ep", "8", "--sglang", "0.5.1",
                              "--format", "yaml", "--quiet"], catch_exceptions=False)
    assert res.exit_code == 0 and res.stderr == ""
    lines = res.stdout.splitlines()
    source = next(i for i, line in enumerate(lines) if line.startswith("model_source: bundled:"))
    lines[source] = "model_source: bundled:Qwen3-Coder-480B-A35B-Instruct-FP8.json"
    expected = (REPO / "shapes" / "Qwen3-Coder-480B-A35B-Instruct-FP8.tp8.ep8.sglang-0.5.0-0.5.1.auto.yaml").read_text()
    assert "\n".join(lines) + "\n" == expected


def test_specforge_command_read_as_argparse_reads_it():
    # the trainer's own parser (argparse): `--opt=value`, `--opt value`, the last of repeated options, flags and
    # options it does not know left alone; torchrun's options before the script are torchrun's
    cmd = ("torchrun --nnodes 1 --nproc_per_node=8 scripts/train_eagle3_online.py --resume --tp-size 4 "
           "--cache-dir /tmp/c --max-length=4096 --tp-size=8 --chat-template qwen")
    shape = parse_specforge_cmd(cmd)
    assert (shape.tp, shape.ep, shape.batch_size, shape.max_length) == (8, None, 1, 4096)
    assert parse_specforge_cmd("python scripts/train_eagle3_online.py --target-tp-size 2 --sglang-ep-size 2").ep == 2


@pytest.mark.parametrize("cmd, message", [
    ("train.py --tp-size", "expected one argument"),
    ("train.py --tp-size eight", "must be an integer, got 'eight'"),
    ("train.py --max-length 0", "must be positive"),
    ("train.py --batch-size '1", "cannot parse --specforge-cmd"),
])
def test_specforge_command_refusals_name_the_option(cmd, message):
    with pytest.raises(InputError) as exc:
        parse_specforge_cmd(cmd)
    assert message in exc.value.message and exc.value.hint
