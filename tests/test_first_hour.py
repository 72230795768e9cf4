"""The first hour of a new user (issue 19 items 13-15): the design card's commands work as written, and every
refusal names the real fix."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from helpers import needs_dg013, needs_nvcc, needs_sgl014, sgl_deep_gemm_013_dir, sglang_014_dir

from dgprecompile.planning.manifest import plan_from_dict, read_manifest, write_manifest
from dgprecompile.planning.plan import PlanRequest
from dgprecompile.planning.request import plan_from_request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _cli(*args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dgprecompile", *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "COLUMNS": "200", **(env or {})})


EP_ALONE = ["--model", "Qwen3-Coder-480B", "--ep", "8", "--sglang", "0.5.1"]
NOTE = "note: tp 8: --ep 8 was given without --tp"


def test_plan_with_ep_alone_takes_tp_from_ep_and_says_so():
    proc = _cli("plan", *EP_ALONE, "--json", "-q")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert (plan["tp"], plan["ep"]) == (8, 8)
    # the same keys as the explicit --tp 8 --ep 8 plan: it is that plan, not a look-alike
    explicit = json.loads(_cli("plan", *EP_ALONE, "--tp", "8", "--json").stdout)
    assert plan["shapes"] == explicit["shapes"]
    shown = _cli("plan", *EP_ALONE)
    assert NOTE in shown.stderr, shown.stderr
    assert NOTE not in _cli("plan", *EP_ALONE, "--tp", "8").stderr


@pytest.mark.parametrize("command", [
    ["verify", "--cache-dir", "EMPTY"],
    ["doctor"],
    ["warm", "--cache-dir", "EMPTY", "--nvcc", "/nonexistent/nvcc"],  # stops at the nvcc check, after planning
    ["pack", "--cache-dir", "EMPTY", "-o", "EMPTY/a.tar.gz"],
    ["launch", "--cache-dir", "EMPTY", "--allow-missing", "--", "true"],
])
def test_every_planning_command_takes_tp_from_ep_alone(tmp_path, command):
    argv = [str(tmp_path) if a == "EMPTY" else a.replace("EMPTY", str(tmp_path)) for a in command]
    proc = _cli(argv[0], *EP_ALONE, *argv[1:])
    assert "must divide tp" not in proc.stderr, proc.stderr
    assert NOTE in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr


def test_an_ep_that_does_not_divide_an_explicit_tp_is_still_refused():
    proc = _cli("plan", *EP_ALONE, "--tp", "4")
    assert proc.returncode == 2 and "ep 8 must divide tp 4" in proc.stderr, proc.stderr


# ---- warm and verify agree when this machine cannot build SGLang's JIT modules (item 14) --------------------


@pytest.fixture(scope="module")
def jit_plan(tmp_path_factory):
    """The 0.5.14 deep_gemm-runner plan with its DeepGEMM buckets dropped: only SGLang's JIT modules."""
    data = plan_from_request(PlanRequest(model="Qwen3-Coder-480B", tp=8, ep=8, sglang="0.5.14",
                                         moe_runner_backend="deep_gemm")).to_dict()
    for shape in data["shapes"]:
        shape["buckets"], shape["aux_kernels"] = [], []
    data["kernels"], data["total_kernels"] = [], 0  # a trimmed manifest states its own count
    path = tmp_path_factory.mktemp("plan") / "jit.yaml"
    write_manifest(plan_from_dict(data), path)
    return path


def _without_sglang(*args):
    """The installed sgl-deep-gemm 0.1.3 (what 0.5.14 runs) but no sglang: a plain venv of the serving flow."""
    return _cli(*args, env={"PYTHONPATH": os.pathsep.join([REPO, sgl_deep_gemm_013_dir()])})


INSTALL = "pip install sglang==0.5.14 apache-tvm-ffi==0.1.9 ninja"


def _one_error(proc) -> tuple[str, str]:
    lines = proc.stderr.strip().splitlines()
    errors = [x for x in lines if x.startswith("error:")]
    hints = [x for x in lines if x.startswith("hint:")]
    assert len(errors) == 1 and len(hints) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return errors[0], hints[0]


@needs_nvcc
@needs_dg013
def test_warm_that_cannot_build_the_plans_jit_modules_fails_naming_the_install(jit_plan, tmp_path):
    warm = _without_sglang("warm", "--manifest", str(jit_plan), "--cache-dir", str(tmp_path))
    assert warm.returncode == 3, warm.stderr
    error, hint = _one_error(warm)
    modules = len(read_manifest(jit_plan).jit_modules)
    assert modules >= 2, modules
    assert f"of the plan's items not built ({modules} SGLang JIT modules" in error and "sglang is not importable" in error
    assert INSTALL in hint, hint
    verify = _without_sglang("verify", "--manifest", str(jit_plan), "--cache-dir", str(tmp_path))
    assert verify.returncode == 1, verify.stderr
    _, verify_hint = _one_error(verify)
    assert INSTALL in verify_hint, verify_hint  # the same fix, not "run warm" again


@needs_nvcc
@needs_dg013
def test_warm_sglang_jit_off_names_the_option_that_exists(jit_plan, tmp_path):
    proc = _without_sglang("warm", "--manifest", str(jit_plan), "--cache-dir", str(tmp_path), "--sglang-jit", "off")
    assert proc.returncode == 0, proc.stderr
    assert "--no-sglang-jit" not in proc.stderr and "not built (--sglang-jit off)" in proc.stderr, proc.stderr
    assert "warning:" not in proc.stderr, proc.stderr  # asked for, so a note


@needs_nvcc
@needs_dg013
def test_warm_prints_a_cache_dir_with_brackets_as_given(jit_plan, tmp_path):
    weird = tmp_path / "[weird]"
    proc = _without_sglang("warm", "--manifest", str(jit_plan), "--cache-dir", str(weird), "--sglang-jit", "off")
    assert proc.returncode == 0, proc.stderr
    assert f"cache: {weird}   backend:" in proc.stderr, proc.stderr


@needs_sgl014
def test_the_install_named_is_what_the_sglang_wheel_pins():
    """Compared with the real sglang 0.5.14 wheel's metadata, not with the data file that holds it."""
    import glob

    meta = glob.glob(os.path.join(sglang_014_dir(), "sglang-0.5.14.dist-info", "METADATA"))
    assert meta, "the sglang 0.5.14 wheel's metadata is not beside the venv"
    requires = {line.split(":", 1)[1].strip() for line in open(meta[0]) if line.startswith("Requires-Dist:")}
    for requirement in INSTALL.split()[3:]:
        assert requirement in requires, (requirement, sorted(r for r in requires if "tvm" in r or "ninja" in r))


# ---- item 15: what a new user meets first ----------------------------------------------------------------------


def test_a_missing_config_json_path_is_named_as_a_missing_file(tmp_path):
    for spec in (str(tmp_path / "nope" / "config.json"), "./nope/config.json", "nope/config.json",
                 str(tmp_path / "model-dir") + "/"):
        proc = _cli("plan", "--model", spec)
        assert proc.returncode == 2, proc.stderr
        error, hint = _one_error(proc)
        assert "does not exist" in error and "unknown model" not in error, proc.stderr
    # a name is still a name
    error, _ = _one_error(_cli("plan", "--model", "no-such-model"))
    assert "unknown model 'no-such-model'" in error


def _with_stock_sglang(*args):
    return _cli(*args, env={"PYTHONPATH": os.pathsep.join([REPO, sglang_014_dir()])})


SPECFORGE_RUN = os.path.join(REPO, "examples", "specforge-0.2", "run.yaml")


@needs_sgl014
@pytest.mark.parametrize("command", [["plan"], ["launch", "--cache-dir", "EMPTY"]])
def test_specforge_config_with_stock_sglang_names_the_patch(tmp_path, command):
    """The real sglang 0.5.14 wheel (no spec-capture patch) installed: the capture server's own options are
    not the user's mistake; the fix is SpecForge's sglang patch."""
    argv = [str(tmp_path) if a == "EMPTY" else a for a in command]
    tail = ["--", "specforge", "train", "-c", SPECFORGE_RUN] if command[0] == "launch" else []
    proc = _with_stock_sglang(*argv, "--specforge-config", SPECFORGE_RUN, *tail)
    assert proc.returncode == 2, proc.stderr
    error, hint = _one_error(proc)
    assert "--enable-spec-capture" in error and "stock sglang" in error, error
    assert "spec-capture.patch" in hint and "fix the command" not in hint, hint


def test_launch_finds_a_command_of_its_own_venv_that_is_not_on_path(tmp_path):
    """`make train` runs .venv/bin/dgprecompile with the venv not activated: torchrun is in .venv/bin only."""
    here = os.path.dirname(sys.executable)
    assert os.path.isfile(os.path.join(here, "pytest")), "the tests run from a venv that has pytest"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": REPO}
    proc = _cli("launch", "--model", "Qwen3-Coder-480B", "--tp", "8", "--ep", "8", "--sglang", "0.5.1",
                "--cache-dir", str(tmp_path), "--allow-missing", "--", "pytest", "--version", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "pytest" in proc.stdout + proc.stderr and "command not found" not in proc.stderr
    missing = _cli("launch", "--model", "Qwen3-Coder-480B", "--tp", "8", "--ep", "8", "--sglang", "0.5.1",
                   "--cache-dir", str(tmp_path), "--allow-missing", "--", "no-such-command-xyz", env=env)
    assert missing.returncode == 2 and "command not found: no-such-command-xyz" in missing.stderr, missing.stderr


def test_unpack_help_example_verifies_the_cache_it_unpacked_into():
    from dgprecompile.cli.unpack import command

    for line in re.sub(r"[ \t]*\\\n[ \t]*", " ", command.help).splitlines():  # a ` \` fold joined
        if "unpack" in line and "&& dgprecompile verify" in line:
            unpack, verify = line.split("&&")
            where = unpack.split("--cache-dir")[1].split()[0]
            assert f"--cache-dir {where}" in verify, line
            break
    else:
        raise AssertionError("the example of unpack then verify is gone")
