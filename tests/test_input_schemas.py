"""Every file a user passes is checked against its declarative schema (data/schemas/) and read with a cap: one
`error:` line naming the field, a `hint:`, exit 2, never a traceback; memory and time bounded whatever the
number or file (issue 19 items 3, 6, 7; issue 24 item 3)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import REPO

SHAPES = REPO / "shapes" / "Qwen3-Coder-480B-A35B-Instruct-FP8.tp8.ep8.sglang-0.5.7-0.5.9.deep_gemm.yaml"
BUNDLED = REPO / "dgprecompile" / "data" / "models" / "Qwen3-30B-A3B-FP8.json"
MEMORY_CAP = 1 << 30  # address space for a whole dgprecompile process: a set of every m would need far more


def cli(*args: str, memory: int | None = MEMORY_CAP, timeout: float = 60) -> subprocess.CompletedProcess:
    """`dgprecompile ARGS` in its own interpreter, under an address-space limit (RLIMIT_AS)."""
    def limit():
        if memory:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.run([sys.executable, "-m", "dgprecompile", *args], capture_output=True, text=True,
                          timeout=timeout, preexec_fn=limit, env=env, cwd=REPO)


def refused(proc: subprocess.CompletedProcess, *words: str, code: int = 2) -> str:
    out = proc.stdout + proc.stderr
    assert proc.returncode == code, out
    assert "Traceback" not in out, out
    lines = proc.stderr.strip().splitlines()
    assert lines and lines[0].startswith("error: ") and sum(x.startswith("error:") for x in lines) == 1, proc.stderr
    assert any(x.startswith("hint: ") for x in lines), proc.stderr
    for w in words:
        assert w in proc.stderr, proc.stderr
    return proc.stderr


def manifest(tmp_path: Path, change) -> Path:
    data = yaml.safe_load(SHAPES.read_text())
    change(data)
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


# ---- manifests (item 7) ----------------------------------------------------------------------------------

@pytest.mark.parametrize("change, words", [
    (lambda d: d.update(tp=-8), ["tp: -8 is below"]),
    (lambda d: d.update(ep=10 ** 20), ["ep: 100000000000000000000 is above"]),
    (lambda d: d.update(ep=3), ["ep 3 does not divide tp 8"]),
    (lambda d: d.update(total_kernels=d["total_kernels"] - 1), ["total_kernels is 85", "lists 86"]),
    (lambda d: d["deepgemm"].update(generation="sm100-future"), ["deepgemm.generation 'sm100-future'"]),
    (lambda d: d.update(sglang_profile="9.9-9.9"), ["sglang_profile"]),
    (lambda d: d["shapes"][0].update(m_min=99999), ["shapes[0]: m_min 99999 is above m_max"]),
    (lambda d: d["shapes"][0]["buckets"][0].update(m_min=50, m_max=10), ["shapes[0].buckets[0]"]),
    (lambda d: d["shapes"][0].update(n="wide"), ["shapes[0].n: 'wide' is not an integer"]),
    (lambda d: d.update(shapes=[], kernels=[], total_kernels=0, sglang_jit_modules=[]), ["plans no kernel at all"]),
])
def test_invalid_manifests_are_refused_by_verify(tmp_path, change, words):
    path = manifest(tmp_path, change)
    refused(cli("verify", "--manifest", str(path), "--cache-dir", str(tmp_path / "cache")), *words)
    assert not (tmp_path / "cache").exists()


def test_the_checked_in_manifests_satisfy_the_schema():
    from dgprecompile.schemas import problems

    for path in sorted((REPO / "shapes").glob("*.yaml")):
        if path.name != "index.yaml":
            assert problems(yaml.safe_load(path.read_text()), "manifest") == [], path.name


# ---- bounded input (item 3) ------------------------------------------------------------------------------

@pytest.fixture
def endless(tmp_path) -> str:
    """A regular file of 1 TiB (sparse: it takes no disk). /dev/zero itself is refused before any read, as a
    device (test_non_regular_inputs.py)."""
    path = tmp_path / "endless"
    with open(path, "wb") as f:
        f.truncate(1 << 40)
    return str(path)


def test_an_endless_manifest_is_refused_within_bounded_memory(endless):
    start = time.monotonic()
    refused(cli("verify", "--manifest", endless), endless, "larger than")
    assert time.monotonic() - start < 30


@pytest.mark.parametrize("args, words", [
    (["--max-tokens", "1000000000000"], ["--max-tokens", "2147483647"]),
    (["--max-tokens", "2147483000"], ["beyond the 1,048,576", "--keys-only"]),
    (["--chunked-prefill-size", "99999999999"], ["--chunked-prefill-size"]),
])
def test_huge_m_is_refused_at_once_in_bounded_memory(args, words):
    start = time.monotonic()
    refused(cli("plan", "--model", "Qwen3-Coder-480B", "--tp", "8", "--ep", "8", *args), *words)
    assert time.monotonic() - start < 30


def test_m_ranges_are_made_one_at_a_time():
    """The breakpoints of a 2^31 range are read lazily, under a 1 GiB address-space cap (a set of every 64th m
    up to 2^31 would need several GiB): the first few arrive at once."""
    code = ("from itertools import islice; from dgprecompile.runtimes.items import KernelType; "
            "from dgprecompile.planning.heuristics.sm90_waves import Sm90WaveHeuristic0320; "
            "print(list(islice(Sm90WaveHeuristic0320().breakpoints(KernelType.GEMM_NT_F8F8BF16, 2 ** 31 - 1), 8)))")

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))

    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30,
                          preexec_fn=limit, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[15, 16, 31, 32, 64, 127, 128, 192]"


@pytest.mark.parametrize("what", ["config", "model"])
def test_endless_config_files_are_refused(what, endless):
    args = ["--config", endless] if what == "config" else ["--model", endless]
    refused(cli("plan", *args), endless, "larger than")


# ---- --config values go through the command line's types (item 6) -------------------------------------

@pytest.mark.parametrize("text, words", [
    ('tp: "eight"\n', ["tp: 'eight' is not an integer"]),
    ("tp: 0\n", ["tp: 0 is not in the range"]),
    ("max_tokens: 1000000000000\n", ["max_tokens: 1000000000000 is not in the range"]),
    ("gpu: a100\n", ["gpu: 'a100' is not one of"]),
    ("moe_runner_backend: fast\n", ["moe_runner_backend: 'fast' is not one of"]),
    ("keys_only: maybe\n", ["keys_only: 'maybe' is not a boolean"]),
    ("bogus: 1\n", ["unknown keys 'bogus'"]),
])
def test_bad_config_values_name_the_key(tmp_path, text, words):
    path = tmp_path / "train.yaml"
    path.write_text("model: Qwen3-Coder-480B\n" + text)
    refused(cli("plan", "--config", str(path)), str(path), *words)


def test_the_shipped_train_yaml_still_plans():
    proc = cli("plan", "--config", str(REPO / "train.yaml"), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["tp"] == 8


# ---- config.json (item 6, issue 19 item 15) ---------------------------------------------------------------

@pytest.mark.parametrize("change, words", [
    (lambda c: c.update(hidden_size=1e30), ["hidden_size: 1e+30 is not an integer"]),
    (lambda c: c.update(quantization_config="fp8"), ["quantization_config: 'fp8' is not an object"]),
    (lambda c: c.update(num_hidden_layers=-1), ["num_hidden_layers: -1 is below"]),
])
def test_bad_model_configs_name_the_field(tmp_path, change, words):
    config = json.loads(BUNDLED.read_text())
    change(config)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    refused(cli("plan", "--model", str(path)), str(path), *words)


@pytest.mark.parametrize("sglang", ["0.5.1", "0.5.9", "0.5.14"])
def test_a_hidden_size_no_kernel_fits_names_the_field_and_model(tmp_path, sglang):
    """hidden_size 16777216 is within the schema (one size cap for every field) but makes a k that not one
    pipeline stage of any kernel fits in shared memory: one error naming the field and the model (issue 29
    item 6; was a ValueError traceback from the kernel model)."""
    config = json.loads(BUNDLED.read_text())
    config["hidden_size"] = 16777216
    path = tmp_path / "big" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(config))
    refused(cli("plan", "--model", str(path), "--sglang", sglang), "big", str(path), "hidden_size 16777216",
            "k=16777216", "no DeepGEMM kernel fits in shared memory")


@pytest.mark.parametrize("spec", ["/nonexistent/dir/config.json", "./missing-config.json"])
def test_a_missing_config_path_says_the_file_does_not_exist(spec):
    err = refused(cli("plan", "--model", spec), "does not exist")
    assert "unknown model" not in err


# ---- SpecForge run configs ---------------------------------------------------------------------------------

RUN_YAML = REPO / "examples" / "specforge-0.2" / "run.yaml"


@pytest.mark.parametrize("old, new, words", [
    ("  sglang_ep_size: 4 ", '  sglang_ep_size: "four" ', ["model.sglang_ep_size: 'four' is not an integer"]),
    ("          tp_size: 4", "          tp_size: [4]",
     ["deployment.disaggregated.managed_local.capture_servers[0].tp_size: [4] is not an integer"]),
    ("  max_length: 2048 ", "  max_length: 0 ", ["data.max_length: 0 is below"]),
    ("        - port: 30000", "        - port: 99999999", ["capture_servers[0].port: 99999999 is above"]),
])
def test_bad_specforge_configs_name_the_field(tmp_path, old, new, words):
    text = RUN_YAML.read_text()
    assert old in text
    path = tmp_path / "run.yaml"
    path.write_text(text.replace(old, new))
    refused(cli("plan", "--specforge-config", str(path)), str(path), *words)


def test_an_endless_specforge_config_is_refused(endless):
    refused(cli("plan", "--specforge-config", endless), endless, "larger than")


def test_an_endless_misses_file_is_refused(endless):
    refused(cli("warm", "--from-misses", endless, "--model", "Qwen3-Coder-480B", "--tp", "8", "--ep", "8"),
            endless, "larger than")


def test_a_trace_call_beyond_32_bit_m_is_refused(tmp_path):
    misses = tmp_path / "misses.jsonl"
    misses.write_text(json.dumps({"dgprecompile_misses": 1}) + "\n" + json.dumps(
        {"kernel_type": "GEMM_NT_F8F8BF16", "m": 10 ** 12, "n": 1792, "k": 6144, "num_groups": 1}) + "\n")
    refused(cli("warm", "--from-misses", str(misses), "--model", "Qwen3-Coder-480B", "--tp", "8", "--ep", "8"),
            "impossible call")


@pytest.mark.parametrize("extra", ["", " --moe-runner-backend deep_gemm"])
def test_every_model_path_triton_item_a_plan_writes_reads_back(tmp_path, extra):
    """A plan file is read back through the manifest schema (warm, verify, launch read it): every model-path Triton
    kernel the plan can name must pass it. DeepSeek-V3 --tp 8 on 0.5.23 names the MoE align (and, with the deep_gemm
    runner, its dispatch); on the H100 (2026-12-06, at 68f775e) warm refused such a plan: the align was planned, but
    the schema did not list it."""
    out = tmp_path / "plan.yaml"
    server = "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 8" + extra
    r = subprocess.run([sys.executable, "-m", "dgprecompile", "plan", "--sglang-cmd", server, "--sglang", "0.5.23",
                        "--gpu", "h100", "-o", str(out)], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert r.returncode == 0, r.stderr
    written = {it["kernel"] for it in yaml.safe_load(out.read_text())["triton_path"]}
    # the default runner's Triton MoE takes the align; the deep_gemm runner its own dispatch instead
    assert ("moe_align_small_numel" in written) != bool(extra) and ("moe_dispatch_index" in written) == bool(extra)
    assert ("pad_expert_counts" in written) == bool(extra)  # and the compact layout's padding
    assert ("ep_scatter_1" in written) == ("ep_scatter_2" in written) == bool(extra)  # and its scatter's two kernels
    assert ("post_reorder" in written) == bool(extra)  # and its post-permute
    from dgprecompile.planning.manifest import read_manifest

    assert {it.kernel for it in read_manifest(out).triton_path.values()} == written


def test_the_plan_files_schema_admits_every_model_path_triton_kernel_the_data_file_has():
    """Each kernel data/triton_path.yaml can plan is one the manifest schema admits (and no other): a kernel added to
    the data file alone makes plans that warm, verify and launch refuse on read-back (as the align's did, above)."""
    from dgprecompile.runtimes.triton_moe import TRITON_PATH

    schema = json.loads((REPO / "dgprecompile" / "data" / "schemas" / "manifest.json").read_text())
    admitted = schema["$defs"]["triton_path"]["properties"]["kernel"]["enum"]
    assert sorted(admitted) == sorted(TRITON_PATH.data()["kernels"])
