"""Every YAML file a user gives is parsed with budgets: nodes counted as the aliases expand them, and nesting
depth. A billion laughs of anchors, a cycle, a 100,000-deep list: one `error:` line, exit 2, in bounded memory and
time, through the real CLI (issue 29 item 1). JSON inputs (config.json, run configs, misses files) likewise: too
deep, or a number Python will not convert, is one error line, never a RecursionError or ValueError traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import REPO
from test_input_schemas import MEMORY_CAP, SHAPES, cli, refused


def laughs(levels: int = 9, indent: str = "") -> str:
    """Anchors ten aliases wide, ``levels`` deep: 10**levels strings once expanded, a few hundred bytes here."""
    lines = [f"{indent}x0: &x0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"{indent}x{i}: &x{i} [{', '.join([f'*x{i - 1}'] * 10)}]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


def nested_laughs(levels: int) -> str:
    """The same as one flow value: each level the one before anchored, then nine aliases of it."""
    nested = "[lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"
    for i in range(levels):
        nested = f"[&x{i} {nested}, {', '.join([f'*x{i}'] * 9)}]"
    return nested


def bomb_manifest(tmp_path: Path) -> Path:
    """The checked-in manifest, valid in every field, plus one more key holding a billion laughs."""
    path = tmp_path / "plan.yaml"
    path.write_text(SHAPES.read_text() + "laughs:\n" + laughs(indent="  "))
    return path


def deep_manifest(tmp_path: Path) -> Path:
    path = tmp_path / "deep.yaml"
    path.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    return path


MAX_RSS = 192 << 20  # a refused command's whole interpreter (click, yaml, jsonschema) peaks near 40 MiB


# A small fresh interpreter forks the command with the caps set and reports that child's own peak RSS (wait4):
# forked from the test process itself (large once torch is imported), the child's peak would count the test
# process's pages until its exec.
_RUN_CAPPED = """
import os, resource, sys
cap, out = int(sys.argv[1]), sys.argv[2]
pid = os.fork()
if pid == 0:
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    resource.setrlimit(resource.RLIMIT_CPU, (60, 60))
    os.execv(sys.executable, [sys.executable, "-m", "dgprecompile", *sys.argv[3:]])
_pid, status, usage = os.wait4(pid, 0)
open(out, "w").write(str(usage.ru_maxrss * 1024))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def measured(args: list[str], tmp_path: Path) -> tuple[subprocess.CompletedProcess, int]:
    """`dgprecompile ARGS` in its own interpreter under a 1 GiB address-space cap and a 60 s CPU cap; the process
    and its peak resident memory in bytes (its own, measured by the small interpreter that started it)."""
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    rss = tmp_path / "rss"
    proc = subprocess.run([sys.executable, "-c", _RUN_CAPPED, str(MEMORY_CAP), str(rss), *args],
                          capture_output=True, text=True, env=env, cwd=REPO)
    return proc, int(rss.read_text())


def bounded(tmp_path: Path, proc_args: list[str], *words: str) -> None:
    """Refused (exit 2, one error line, no traceback) within 30 s, its peak RSS under MAX_RSS."""
    start = time.monotonic()
    proc, rss = measured(proc_args, tmp_path)
    refused(proc, *words)
    assert time.monotonic() - start < 30
    assert rss < MAX_RSS, f"peak RSS {rss >> 20} MiB"


@pytest.mark.parametrize("command", ["plan", "verify"])
def test_a_billion_laughs_manifest_is_refused_in_bounded_memory(tmp_path, command):
    path = bomb_manifest(tmp_path)
    cache = ["--cache-dir", str(tmp_path / "cache")] if command == "verify" else []
    bounded(tmp_path, [command, "--manifest", str(path), *cache], str(path),
            "100,000 nodes once its aliases are expanded", "hint: regenerate it")
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("command", ["plan", "verify"])
def test_a_100000_deep_manifest_is_refused_without_recursion_error(tmp_path, command):
    path = deep_manifest(tmp_path)
    bounded(tmp_path, [command, "--manifest", str(path)], str(path), "nested deeper than 64 levels")


@pytest.mark.parametrize("command", ["plan", "launch"])
def test_a_billion_laughs_in_config_tp_is_refused_in_bounded_memory(tmp_path, command):
    path = tmp_path / "train.yaml"
    path.write_text(f"model: Qwen3-Coder-480B\ntp: {nested_laughs(9)}\n")  # the only keys: both known
    ran = tmp_path / "ran"
    extra = ["--", sys.executable, "-c", f"open({str(ran)!r}, 'w')"] if command == "launch" else []
    bounded(tmp_path, [command, "--config", str(path), *extra], str(path), "aliases are expanded")
    assert not ran.exists()


def test_a_cyclic_alias_is_refused(tmp_path):
    path = tmp_path / "train.yaml"
    path.write_text("model: Qwen3-Coder-480B\ntp: &a [1, *a]\n")
    bounded(tmp_path, ["plan", "--config", str(path)], str(path), "alias *a at line 2 is inside the node it names")


def test_a_billion_laughs_specforge_config_is_refused(tmp_path):
    path = tmp_path / "run.yaml"
    run = (REPO / "examples" / "specforge-0.2" / "run.yaml").read_text()
    path.write_text(run + "laughs:\n" + laughs(indent="  "))
    bounded(tmp_path, ["plan", "--specforge-config", str(path)], str(path), "aliases are expanded")


def test_an_int_too_long_for_python_is_one_error(tmp_path):
    path = tmp_path / "train.yaml"
    path.write_text("model: Qwen3-Coder-480B\ntp: " + "9" * 5000 + "\n")
    refused(cli("plan", "--config", str(path)), str(path), "4300 digits")


def test_shown_cuts_before_it_walks_a_huge_value():
    """schemas.shown on a value that stands for 10**30 nodes (shared lists): instant, and the same text json.dumps
    would start with."""
    code = ("from dgprecompile import schemas\n"
            "x = ['lol'] * 10\nfor _ in range(30): x = [x] * 10\nprint(schemas.shown(x))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[" * 31 + '"lol", "lol", "lol", "lol"...'


def test_aliases_inside_the_budget_still_get_one_short_error(tmp_path):
    """11,111 nodes in `tp:` (within the budget): the schema's message quotes 60 characters of it."""
    path = tmp_path / "train.yaml"
    path.write_text(f"model: Qwen3-Coder-480B\ntp: {nested_laughs(3)}\n")
    err = refused(cli("plan", "--config", str(path)), str(path), "tp: [[[[")
    assert len(err.splitlines()[0]) < 200, err


def test_the_budgets_read_every_shipped_yaml_as_pyyaml_does():
    """The shipped manifests, run configs and train.yaml: the same document as yaml.safe_load gives, far inside
    the budgets (the largest manifest has 4,740 nodes)."""
    from dgprecompile.documents import load_yaml_text

    paths = [*(REPO / "shapes").glob("*.yaml"), REPO / "train.yaml", *(REPO / "examples").rglob("*.yaml")]
    assert len(paths) > 10
    for path in paths:
        text = path.read_text()
        assert load_yaml_text(text, str(path), "h", max_nodes=10_000, max_depth=10) == yaml.safe_load(text), path


# ---- JSON inputs -------------------------------------------------------------------------------------------

MODEL = ["--model", "Qwen3-Coder-480B", "--tp", "8", "--ep", "8"]


def test_a_config_json_number_of_5000_digits_is_one_error(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "qwen3_moe", "hidden_size": ' + "9" * 5000 + "}")
    refused(cli("plan", "--model", str(path)), str(path), "4300 digits")


def test_a_deep_json_run_config_is_one_error(tmp_path):
    path = tmp_path / "run.json"
    path.write_text('{"model": ' + "[" * 100_000 + "]" * 100_000 + "}")
    refused(cli("plan", "--specforge-config", str(path)), str(path), "nested deeper than 64 levels")


@pytest.mark.parametrize("line", ["[" * 100_000 + "]" * 100_000,
                                  '{"kernel_type": "GEMM_NT_F8F8BF16", "m": 1' + "0" * 5000 + "}",
                                  "[" * 200 + "]" * 200])
def test_a_misses_line_too_deep_or_too_long_is_one_error(tmp_path, line):
    path = tmp_path / "misses.jsonl"
    header = json.dumps({"dgprecompile_misses": 1})
    path.write_text(f"{header}\n{line}\n{header}\n")
    refused(cli("warm", "--from-misses", str(path), *MODEL), f"{path}:2 is not a call")
