"""The server-argument rules that change a MoE shape (issue 33 item 2): DeepSeek-V3's shared expert fused into the
routed MoE, --ep-num-redundant-experts, --enable-ep-moe, per SGLang release (data/moe_rules.yaml).

Server commands are read with the option tables of the real sglang wheels (dgprecompile/data/sglang_args/, which
test_server.py checks equal to the wheels); the plans are the real planner's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from dgprecompile.cli.main import cli
from dgprecompile.data import load_yaml
from dgprecompile.planning.moe_rules import DERIVED_FACTS, release_rules
from dgprecompile.planning.plan import PlanRequest
from dgprecompile.planning.profiles import resolve_profile
from dgprecompile.planning.request import plan_from_request
from dgprecompile.planning.server_cmd import choose_table, parse_command, parse_server_args

M480 = "Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8"
# DeepSeek-V3's public config.json (the fields plan and SGLang's fusion check read)
DEEPSEEK_V3 = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
               "num_attention_heads": 128, "num_key_value_heads": 128, "num_hidden_layers": 61, "q_lora_rank": 1536,
               "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
               "intermediate_size": 18432, "moe_intermediate_size": 2048, "n_routed_experts": 256,
               "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3,
               "max_position_embeddings": 163840, "torch_dtype": "bfloat16",
               "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096},
               "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128], "fmt": "e4m3"}}
SHARED_DENSE = {(512, 7168), (7168, 256)}  # mlp.shared_experts gate_up / down at tp 8
RULES_READ = ["0.5.1", "0.5.4", "0.5.9", "0.5.14", "0.5.17", "0.5.23"]


@pytest.fixture(scope="module")
def dsv3(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("DeepSeek-V3")
    (d / "config.json").write_text(json.dumps(DEEPSEEK_V3))
    return d


def _plan(version: str, args: str):
    return plan_from_request(PlanRequest(sglang=version, sglang_cmd=f"python -m sglang.launch_server {args}",
                                         sglang_precompile=False))


def _moe(plan) -> list[tuple[int, int, int, int, int]]:
    """(local experts, global experts, top-k, per-rank width, m bound) of each Triton MoE item."""
    return [(t.experts, t.global_experts, t.topk, t.intermediate, t.m_bound) for t in plan.triton_moe.values()]


def _dense(plan) -> set[tuple[int, int]]:
    return {(pk.key.n, pk.key.k) for pk in plan.keys if pk.key.num_groups == 1}


def _note(plan, needle: str) -> str:
    found = [n for n in plan.notes if needle in n]
    assert found, plan.notes
    return found[0]


# ---- the data names what the real option tables hold --------------------------------------------------------------


def _facts(cond: dict) -> list[str]:
    return [f for c in cond["all"] for f in _facts(c)] if "all" in cond else [cond["fact"]]


@pytest.mark.parametrize("version", RULES_READ)
def test_every_option_a_rule_tests_is_an_option_of_that_release(version):
    """Each rule's server option is one the release's own ServerArgs declares (its wheel's table), and each value a
    rule compares with is one of that option's choices: a misspelt option or value would never match."""
    rules = release_rules(version)
    assert rules is not None and str(rules["read"]) == version
    table, _ = choose_table(resolve_profile(version).profile, version)
    options = table.by_dest()
    conds = list(rules.get("ep_equals_tp", [])) + list(rules.get("refuse_when", []))
    conds += rules["shared_experts_fusion"]["off_when"]
    if "enforce" in rules["shared_experts_fusion"]:
        conds.append(rules["shared_experts_fusion"]["enforce"])
    for cond in conds:
        for c in (cond["all"] if "all" in cond else [cond]):
            if c["fact"] in DERIVED_FACTS:
                continue
            assert c["fact"] in options, (version, c["fact"])
            choices = options[c["fact"]].choices
            for value in c.get("in", []) + c.get("not_in", []):
                assert choices is None or value in choices, (version, c["fact"], value)
    assert "ep_num_redundant_experts" in options and "disable_shared_experts_fusion" in options
    assert ":" in rules["shared_experts_fusion"]["decided"] and ":" in rules["redundant_experts"]["where"]


def test_every_release_range_is_covered_once():
    ranges = [r["sglang"] for r in load_yaml("moe_rules.yaml")["releases"]]
    for v in ["0.5.0", "0.5.1", "0.5.2", "0.5.3", "0.5.4", "0.5.9", "0.5.12", "0.5.14", "0.5.16", "0.5.17", "0.5.20",
              "0.5.23"]:
        rules = release_rules(v)
        assert rules is not None and sum(1 for r in ranges if r == rules["sglang"]) == 1, v
    assert release_rules("0.5.24") is None


@pytest.mark.parametrize("version,args,ep", [
    ("0.5.1", f"--model-path {M480} --tp-size 8 --enable-ep-moe", 8),  # 0.5.1 server_args.py:310-313
    ("0.5.1", f"--model-path {M480} --tp-size 8 --ep-size 2", 2),
])
def test_enable_ep_moe_sets_ep_to_tp_where_the_release_has_it(version, args, ep):
    profile = resolve_profile(version).profile
    table, why = choose_table(profile, version)
    s = parse_server_args(parse_command(f"python -m sglang.launch_server {args}"), table, why)
    assert s.ep == (1 if ep == 8 else ep)  # what the command says; the release's rule (data) makes it tp
    plan = _plan(version, args)
    assert plan.ep == ep
    if ep == 8:
        assert "server_args.py:310-313" in _note(plan, "--enable-ep-moe sets ep = tp = 8")


def test_enable_ep_moe_is_refused_where_sglang_refuses_it():
    # 0.5.3/0.5.4: --enable-ep-moe is a DeprecatedAction that raises (0.5.4 server_args.py:3277-3281, :3791-3798)
    r = CliRunner().invoke(cli, ["plan", "--sglang", "0.5.4", "--sglang-cmd",
                                 f"python -m sglang.launch_server --model-path {M480} --tp 8 --enable-ep-moe"])
    errors = [line for line in r.output.splitlines() if line.startswith("error:")]
    assert r.exit_code == 2 and len(errors) == 1 and "hint:" in r.output and "Traceback" not in r.output
    assert "--enable-ep-moe" in errors[0] and "server_args.py:3277-3281" in errors[0]


# ---- DeepSeek-V3's shared expert -----------------------------------------------------------------------------------


@pytest.mark.parametrize("version,where", [("0.5.14", "deepseek_v2.py:2602"), ("0.5.23", "deepseek_v2.py:3324-3394")])
def test_deepseek_v3_tp8_fuses_the_shared_expert(dsv3, version, where):
    """SGLang's documented DeepSeek-V3 command on 8 H200s: 257 experts, top-9, on every rank (ep 1), the shared
    expert's dense linears gone; the m bound is the tuned E=257,N=256 H200 config's largest m."""
    plan = _plan(version, f"--model-path {dsv3} --tp 8")
    assert (plan.tp, plan.ep) == (8, 1)
    assert _moe(plan) == [(257, 257, 9, 256, 4096)]
    assert not SHARED_DENSE & _dense(plan)
    assert where in _note(plan, "shared-experts fusion on")
    assert "no dense shared-expert linears" in _note(plan, "mlp.shared_experts (x58): fused")


@pytest.mark.parametrize("version", ["0.5.14", "0.5.23"])
def test_deepseek_v3_tp8_ep8_keeps_the_shared_expert_apart(dsv3, version):
    plan = _plan(version, f"--model-path {dsv3} --tp 8 --ep 8")
    assert (plan.tp, plan.ep) == (8, 8)
    assert [m[:4] for m in _moe(plan)] == [(32, 256, 8, 2048)]
    assert SHARED_DENSE <= _dense(plan)
    assert "moe_ep_size 8" in _note(plan, "shared-experts fusion off")


@pytest.mark.parametrize("version", ["0.5.14", "0.5.23"])
def test_disable_shared_experts_fusion(dsv3, version):
    plan = _plan(version, f"--model-path {dsv3} --tp 8 --disable-shared-experts-fusion")
    assert _moe(plan) == [(256, 256, 8, 256, 4096)]
    assert SHARED_DENSE <= _dense(plan)
    assert "--disable-shared-experts-fusion" in _note(plan, "shared-experts fusion off")


@pytest.mark.parametrize("version", ["0.5.14", "0.5.23"])
def test_enforce_shared_experts_fusion_under_ep(dsv3, version):
    # --enforce-shared-experts-fusion skips the ep check: every rank holds its 32 routed experts + the shared one
    plan = _plan(version, f"--model-path {dsv3} --tp 8 --ep 8 --enforce-shared-experts-fusion")
    assert [m[:4] for m in _moe(plan)] == [(33, 257, 9, 2048)]
    assert not SHARED_DENSE & _dense(plan)


def test_deep_gemm_runner_gets_the_fused_experts_as_groups(dsv3):
    plan = _plan("0.5.14", f"--model-path {dsv3} --tp 8 --moe-runner-backend deep_gemm")
    grouped = {(pk.key.n, pk.key.k, pk.key.num_groups) for pk in plan.keys if pk.key.num_groups > 1}
    assert grouped == {(512, 7168, 257), (7168, 256, 257)}


@pytest.mark.parametrize("version", ["0.5.1", "0.5.4", "0.5.9"])
def test_older_releases_fuse_at_ep_1_only(dsv3, version):
    fused = _plan(version, f"--model-path {dsv3} --tp 8 --moe-runner-backend deep_gemm"
                  if version != "0.5.1" else f"--model-path {dsv3} --tp 8")
    assert not SHARED_DENSE & _dense(fused)
    assert "shared-experts fusion on" in _note(fused, "fusion on")
    apart = _plan(version, f"--model-path {dsv3} --tp 8 --ep 8")
    assert SHARED_DENSE <= _dense(apart)
    grouped = {pk.key.num_groups for pk in apart.keys if pk.key.num_groups > 1}
    assert grouped in (set(), {32})  # EPMoE (0.5.1) masked over 32 local experts; later: Triton


def test_profile_plan_applies_the_rules_common_to_its_releases(dsv3):
    r = CliRunner().invoke(cli, ["plan", "-m", str(dsv3), "--tp", "8", "--sglang", "0.5.12-0.5.16",
                                 "--moe-runner-backend", "deep_gemm", "--format", "json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert {(s["n"], s["k"], s["num_groups"]) for s in data["shapes"] if s["num_groups"] > 1} == {
        (512, 7168, 257), (7168, 256, 257)}
    assert any("the same under every read release of this profile (0.5.9, 0.5.14)" in n for n in data["notes"])


# ---- redundant experts ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["0.5.14", "0.5.23"])
def test_redundant_experts_add_local_experts(dsv3, version):
    plan = _plan(version, f"--model-path {dsv3} --tp 8 --ep 8 --ep-num-redundant-experts 32")
    assert [m[:4] for m in _moe(plan)] == [(36, 288, 8, 2048)]  # (256 + 32) / 8
    assert "--ep-num-redundant-experts 32" in _note(plan, "more physical experts")
    qwen = _plan(version, f"--model-path {M480} --tp 8 --ep 8 --ep-num-redundant-experts 32")
    assert [m[:4] for m in _moe(qwen)] == [(24, 192, 8, 2560)]  # (160 + 32) / 8


@pytest.mark.parametrize("version", ["0.5.14", "0.5.23"])
def test_qwen3_moe_tp8_ep8_is_unchanged(version):
    plan = _plan(version, f"--model-path {M480} --tp 8 --ep 8")
    assert [m[:4] for m in _moe(plan)] == [(20, 160, 8, 2560)]
    assert not any("fusion" in n or "redundant" in n for n in plan.notes)


def test_redundant_experts_that_ep_does_not_divide_are_refused():
    r = CliRunner().invoke(cli, ["plan", "--sglang", "0.5.14", "--sglang-cmd",
                                 f"python -m sglang.launch_server --model-path {M480} --tp 8 --ep 8 "
                                 "--ep-num-redundant-experts 4"])
    errors = [line for line in r.output.splitlines() if line.startswith("error:")]
    assert r.exit_code == 2 and len(errors) == 1 and "Traceback" not in r.output
    assert "160 experts + 4 redundant" in errors[0] and "--ep-num-redundant-experts" in r.output


# ---- every file:line in the data holds what the rule says ------------------------------------------------------------

REPO = Path(__file__).resolve().parent.parent
# what a cited range must mention for each fact (SGLang's own spelling of the check)
ANCHORS = {"disable_shared_experts_fusion": ["disable_shared_experts_fusion"],
           "enforce_shared_experts_fusion": ["enforce_shared_experts_fusion"],
           "moe_ep_size": ["moe_ep_size", "expert_parallel_world_size"], "architecture": ["architectures"],
           "n_routed_experts": ["n_routed_experts"], "n_shared_experts": ["n_shared_experts"],
           "capability": ["capability"], "quant_method": ["quark"], "enable_two_batch_overlap": ["tbo"],
           "enable_single_batch_overlap": ["sbo"], "enable_ep_moe": ["enable-ep-moe", "enable_ep_moe"],
           "enable_deepep_moe": ["enable-deepep-moe", "enable_deepep_moe", "deepep"],
           "moe_runner_backend": ["moe_runner_backend", "runner"], "moe_a2a_backend": ["a2a", "deepep"]}


def _sources(version: str) -> dict[str, list[str]] | None:
    """The release's srt/*.py files (lines), from the wheel `make setup` keeps or the unpacked release."""
    import zipfile

    wheels = sorted((REPO / ".cache" / "sglang-wheels" / version).glob(f"sglang-{version}-*.whl"))
    if wheels:
        with zipfile.ZipFile(wheels[0]) as zf:
            return {n[len("sglang/"):]: zf.read(n).decode().splitlines() for n in zf.namelist()
                    if n.startswith("sglang/srt/") and n.endswith(".py")}
    unpacked = REPO / ".venv" / f"sglang-{version}" / "sglang"
    if (unpacked / "srt" / "server_args.py").is_file():
        return {str(p.relative_to(unpacked)): p.read_text().splitlines() for p in (unpacked / "srt").rglob("*.py")}
    return None


def _cited(where: str) -> list[tuple[str, int, int]]:
    """(path, first, last) of each `srt/x.py:12-34`, `:56` in a citation (a bare `:N` continues the last path)."""
    import re

    out, path = [], None
    for m in re.finditer(r"(srt/[\w/]+\.py|layers/[\w/]+\.py)?:(\d+)(?:-(\d+))?", where):
        path = m.group(1) or path
        if path is not None:
            out.append(("srt/" + path if path.startswith("layers/") else path, int(m.group(2)),
                        int(m.group(3) or m.group(2))))
    return out


def _text(src: dict[str, list[str]], where: str) -> str:
    spans = _cited(where)
    assert spans, where
    text = []
    for path, lo, hi in spans:
        assert path in src and 1 <= lo <= hi <= len(src[path]), (path, lo, hi)
        text += src[path][lo - 1:hi]
    return "\n".join(text)


@pytest.mark.parametrize("version", ["0.5.1", "0.5.4", "0.5.9", "0.5.14", "0.5.23"])  # what `make setup` keeps
def test_every_cited_line_holds_the_check(version):
    src = _sources(version)
    if src is None:
        pytest.skip(f"sglang {version}'s files are not here (make setup)")
    rules = release_rules(version)
    fusion = rules["shared_experts_fusion"]
    assert "shared_experts" in _text(src, fusion["decided"])
    assert "num_fused_shared_experts" in _text(src, fusion["sizes"])
    assert "num_fused_shared_experts == 0" in _text(src, fusion["dense_dropped"])
    assert "ep_num_redundant_experts" in _text(src, rules["redundant_experts"]["where"])
    kernels = _text(src, rules["all_to_all"]["deepgemm"])
    assert "deepep" in kernels.lower() and ("masked" in kernels or "deep_gemm" in kernels), version
    conds = list(rules.get("ep_equals_tp", [])) + list(rules.get("refuse_when", [])) + fusion["off_when"]
    conds += [fusion["enforce"]] if "enforce" in fusion else []
    for cond in conds:
        text = _text(src, cond["where"]).lower()
        for fact in _facts(cond):
            assert any(a.lower() in text for a in ANCHORS[fact]), (version, fact, cond["where"])
        for value in [v for c in (cond["all"] if "all" in cond else [cond]) for v in c.get("in", [])
                      if isinstance(v, str) and c["fact"] in ("moe_runner_backend", "moe_a2a_backend")]:
            assert value in text or value.replace("_", "") in text or f"is_{value}" in text, (version, value)


@pytest.mark.parametrize("version,args,layout", [
    ("0.5.14", "--tp 8", (1, 1, 0)),
    ("0.5.14", "--tp 8 --disable-shared-experts-fusion", (1, 0, 0)),
    ("0.5.14", "--tp 8 --ep 8 --enforce-shared-experts-fusion", (8, 1, 0)),
    ("0.5.14", "--tp 8 --ep 8 --ep-num-redundant-experts 32", (8, 0, 32)),
    ("0.5.9", "--tp 8 --ep-num-redundant-experts 16", (1, 1, 16)),
    ("0.5.1", "--tp 8 --enable-ep-moe", (8, 0, 0)),
    ("0.5.1", "--tp 8 --disable-shared-experts-fusion", (1, 0, 0)),
])
def test_rules_on_options_parsed_with_the_wheels_own_server_args(version, args, layout):
    """The command parsed with the option table read from the real wheel's server_args.py (not the bundled copy),
    then the release's rules: (ep, fused shared experts, redundant experts)."""
    from dgprecompile.planning.moe_rules import resolve
    from dgprecompile.planning.sglang_args import OptionTable, extract_options, sources_from_wheel

    wheels = sorted((REPO / ".cache" / "sglang-wheels" / version).glob(f"sglang-{version}-*.whl"))
    if not wheels:
        pytest.skip(f"sglang {version}'s wheel is not in .cache/sglang-wheels (make setup)")
    table = OptionTable(version, f"wheel:{wheels[0].name}", extract_options(sources_from_wheel(str(wheels[0]))))
    s = parse_server_args(parse_command(f"python -m sglang.launch_server --model-path x {args}"), table, "wheel")
    got = resolve(version, resolve_profile(version).profile.sglang, s.options(), DEEPSEEK_V3, s.tp, s.ep, 90)
    assert (got.ep, got.fused_shared_experts, got.redundant_experts) == layout


def test_all_to_all_refusal_names_where_sglang_runs_those_experts():
    r = CliRunner().invoke(cli, ["plan", "--sglang", "0.5.14", "--sglang-cmd",
                                 f"python -m sglang.launch_server --model-path {M480} --tp 8 --moe-a2a-backend deepep"])
    errors = [line for line in r.output.splitlines() if line.startswith("error:")]
    assert r.exit_code == 2 and len(errors) == 1 and "hint:" in r.output and "Traceback" not in r.output
    assert "--moe-a2a-backend deepep" in errors[0] and "moe_runner/deep_gemm.py:665-666" in errors[0]
