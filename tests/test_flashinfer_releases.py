"""FlashInfer's JIT modules for sglang releases other than 0.5.14 (data/flashinfer_modules.yaml, runtimes/flashinfer.py):
what `plan` lists for the 0.5.9, 0.5.17 and 0.5.23 server commands of Qwen3-MoE FP8 (--tp 8 --ep 8) and DeepSeek-V3 FP8
(--tp 8), what it names as not built and why, and the data file checked against the real wheels beside the venv
(each sglang's METADATA pin and its all-reduce fusion's architectures; each flashinfer-python's spec class)."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
from helpers import beside_venv

from dgprecompile.planning.plan import PlanRequest
from dgprecompile.planning.server_plan import plan_from_server
from dgprecompile.runtimes import FLASHINFER_MODULES

REPO = Path(__file__).resolve().parent.parent
QWEN = "python -m sglang.launch_server --model-path Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8 --tp 8 --ep 8"
DSV3 = json.loads((REPO / "dgprecompile" / "data" / "models" / "DeepSeek-V3.json").read_text())
DATA = FLASHINFER_MODULES.data()


def _plan(cmd: str, sglang: str):
    return plan_from_server(PlanRequest(sglang_cmd=cmd, sglang=sglang, sglang_precompile=False))


def _modules(plan) -> list[str]:
    return [it.module for it in plan.flashinfer.values()]


def _dsv3(tmp_path: Path, **change) -> str:
    (tmp_path / "config.json").write_text(json.dumps({**DSV3, **change}))
    return f"python -m sglang.launch_server --model-path {tmp_path} --tp 8"


def _sglang(version: str) -> Path | None:
    here = beside_venv(f"sglang-{version}", f"sglang-{version}.dist-info/METADATA")
    return Path(here) if here else None


def _pin(version: str) -> str | None:
    """The flashinfer-python the sglang wheel beside the venv pins (its METADATA), None where not installed."""
    where = _sglang(version)
    if where is None:
        return None
    meta = (where / f"sglang-{version}.dist-info" / "METADATA").read_text()
    return re.search(r"^Requires-Dist: flashinfer_python(?:\[[^\]]*\])?==(\S+)$", meta, re.M).group(1)


@pytest.mark.parametrize("sglang", ["0.5.17", "0.5.23"])
def test_the_two_models_plan_the_modules_their_path_builds(sglang, tmp_path):
    pin = DATA["releases"][sglang]["flashinfer"]
    assert _pin(sglang) in (None, pin)  # the wheel's own pin, where make setup installed it
    qwen = _plan(QWEN, sglang)
    # the default sampling backend and the all-reduce fusion (tp 8, Qwen3MoeForCausalLM on one node)
    assert _modules(qwen) == ["sampling", "trtllm_comm"]
    assert all(it.flashinfer == pin and it.id.endswith(f"@{pin}.sm90a") for it in qwen.flashinfer.values())
    assert any("dsv3_fused_routing: not built by this server (no grouped top-k in config.json)" in n
               for n in qwen.notes)
    assert any(f"2 planned for flashinfer-python {pin}" in n for n in qwen.notes)
    dsv3 = _plan(_dsv3(tmp_path), sglang)
    assert _modules(dsv3) == ["sampling", "trtllm_comm", "dsv3_fused_routing"]
    # each item says where sglang calls it in this release
    assert all(it.why == DATA["modules"][it.module]["releases"][sglang] for it in dsv3.flashinfer.values())


def test_059_samples_with_sgl_kernel_and_routes_dsv3_with_its_fused_shared_expert(tmp_path):
    qwen = _plan(QWEN, "0.5.9")
    assert _modules(qwen) == ["trtllm_comm"] and qwen.flashinfer["flashinfer:trtllm_comm@0.6.3.sm90a"]
    assert any("sampling: not used by sglang 0.5.9 (layers/sampler.py:21-26" in n for n in qwen.notes)
    dsv3 = _plan(_dsv3(tmp_path), "0.5.9")
    assert _modules(dsv3) == ["trtllm_comm"]  # --tp 8 fuses the shared expert: FlashInfer's routing is skipped
    assert any("dsv3_fused_routing: not built by this server (1 shared expert(s) fused into the routed MoE" in n
               for n in dsv3.notes)
    unfused = _plan(_dsv3(tmp_path) + " --disable-shared-experts-fusion", "0.5.9")
    assert _modules(unfused) == ["trtllm_comm", "dsv3_fused_routing"]


@pytest.mark.parametrize("sglang", ["0.5.17", "0.5.23"])
def test_the_commands_own_switches_name_what_is_not_built(sglang, tmp_path):
    off = _plan(QWEN + " --sampling-backend pytorch --enforce-disable-flashinfer-allreduce-fusion", sglang)
    assert off.flashinfer == {}
    assert any("sampling: not built by this server (--sampling-backend pytorch)" in n for n in off.notes)
    assert any("trtllm_comm: not built by this server (the all-reduce fusion is off: tp 8, Qwen3MoeForCausalLM, "
               "--enforce-disable-flashinfer-allreduce-fusion)" in n for n in off.notes)
    det = _plan(_dsv3(tmp_path) + " --enable-deterministic-inference", sglang)
    assert _modules(det) == ["dsv3_fused_routing"]  # deterministic: pytorch sampling, no fusion
    assert any("--enable-deterministic-inference: sampling backend pytorch" in n for n in det.notes)


def test_0523s_fused_routing_asks_renormalize(tmp_path):
    cmd = _dsv3(tmp_path, norm_topk_prob=False)
    assert "dsv3_fused_routing" in _modules(_plan(cmd, "0.5.17"))
    late = _plan(cmd, "0.5.23")
    assert "dsv3_fused_routing" not in _modules(late)
    assert any("dsv3_fused_routing: not built by this server (norm_topk_prob is not set" in n for n in late.notes)


# ---- the data file against the real wheels beside the venv ----------------------------------------------------


def _fusion_architectures(overrides: Path) -> tuple[set[str], int]:
    """_FLASHINFER_ALLREDUCE_FUSION_ARCHS of an sglang release's arg_groups/overrides.py, and its line."""
    for node in ast.parse(overrides.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "_FLASHINFER_ALLREDUCE_FUSION_ARCHS"
                                                for t in node.targets):
            return {c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant)}, node.lineno
    raise AssertionError(f"no _FLASHINFER_ALLREDUCE_FUSION_ARCHS in {overrides}")


def _cited(where: str, what: str) -> int:
    """The line `where` cites for `what` (overrides.py:N-M (what) or :N (what))."""
    return int(re.search(r":(\d+)(?:-\d+)? \(" + re.escape(what), where).group(1))


def test_the_data_matches_each_installed_sglang_release():
    checked = []
    for version, release in DATA["releases"].items():
        where = _sglang(version)
        if where is None:
            continue
        assert _pin(version) == release["flashinfer"], version
        overrides = where / "sglang" / "srt" / "arg_groups" / "overrides.py"
        if not overrides.exists():  # 0.5.14: the rule is inline in server_args.py, its list at the cited lines
            lines = (where / "sglang" / "srt" / "server_args.py").read_text().splitlines()
            first, last = map(int, re.search(r":(\d+)-(\d+) \(architectures", release["where"]).groups())
            archs = set(re.findall(r'^\s*"([A-Za-z0-9_]+)",$', "\n".join(lines[first - 1:last]), re.M))
            assert archs == set(DATA["fusion_architectures"][release["fusion"]]), version
            assert "_FLASHINFER_ALLREDUCE_FUSION_ARCHS" not in "\n".join(lines)
            checked.append(version)
            continue
        archs, line = _fusion_architectures(overrides)
        assert archs == set(DATA["fusion_architectures"][release["fusion"]]), version
        assert _cited(release["where"], "architectures") == line, version
        lines = overrides.read_text().splitlines()
        assert lines[_cited(release["where"], "sampling backend") - 1].startswith("def _sampling_backend_default"), \
            version
        assert "_flashinfer_allreduce_fusion_auto_enable" in lines[_cited(release["where"], "all-reduce fusion") - 1]
        topk = (where / "sglang" / "srt" / "layers" / "moe" / "topk.py").read_text()
        assert ("        and renormalize\n" in topk) == release.get("routing_needs_renormalize", False), version
        checked.append(version)
    assert {"0.5.9", "0.5.14", "0.5.15", "0.5.16", "0.5.17", "0.5.23"} <= set(checked) or not _sglang("0.5.23"), \
        checked


@pytest.mark.parametrize("version", ["0.6.3", "0.6.12", "0.7.2"])
def test_the_spec_class_and_prebuilt_modules_match_each_installed_flashinfer(version):
    here = beside_venv(f"flashinfer-{version}", "flashinfer/jit/core.py")
    if here is None:
        pytest.skip(f"flashinfer-python {version} beside the venv (make setup)")
    facts = DATA["flashinfer"][version]
    core = (Path(here) / "flashinfer" / "jit" / "core.py").read_text()
    assert ("\nclass JitSpecNvcc(" in core) == (facts["spec_class"] == "JitSpecNvcc")
    # no module ships in the wheel's data/aot, and flashinfer-jit-cache is not installed with it: nothing prebuilt
    assert not (Path(here) / "flashinfer" / "data" / "aot").exists() and not facts.get("prebuilt")
    assert not list(Path(here).glob("flashinfer_jit_cache*"))
