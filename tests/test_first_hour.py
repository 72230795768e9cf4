"""The first hour of a new user (issue 19 items 13-15): the design card's commands work as written, and every
refusal names the real fix."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


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
