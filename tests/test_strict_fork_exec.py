"""A strict `launch` counts Python processes without a guard record, from what it sees in /proc every 0.25 s. A
Python process that starts another program (subprocess: fork, then exec in C, with no Python at-fork handler)
shows the parent's interpreter and command line until its exec: it is no Python process of its own and must not
fail the run (torch's inductor runs `g++ --version` at every cache hit; found with tests/test_inductor_capture.py).
A program started that way which turns out to be Python without the guard still fails it."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from dgprecompile.cli.main import cli
from dgprecompile.planning.manifest import write_manifest
from dgprecompile.planning.plan import PlanRequest
from dgprecompile.planning.trace import plan_from_calls

REPO = Path(__file__).resolve().parent.parent

# fork with libc's fork (no Python at-fork handler runs, as in subprocess's C fork), wait in the fork a second
# (four of launch's looks) as the parent's interpreter, then exec argv[1:]
CHILD = textwrap.dedent("""
    import ctypes, os, sys, time
    pid = ctypes.CDLL(None, use_errno=True).fork()
    if pid == 0:
        time.sleep(1.0)
        os.execv(sys.argv[1], sys.argv[1:])
    _, status = os.waitpid(pid, 0)
    sys.exit(os.waitstatus_to_exitcode(status))
""")


@pytest.fixture
def job(tmp_path, monkeypatch):
    for name in list(os.environ):
        if name.startswith(("SGL_", "SGLANG_", "DG_JIT_", "DGPRECOMPILE_")):
            monkeypatch.delenv(name, raising=False)
    (tmp_path / "child.py").write_text(CHILD)
    plan = plan_from_calls([{"kernel_type": "GEMM_NT_F8F8BF16", "m": 64, "n": 512, "k": 512, "num_groups": 1}],
                           PlanRequest(sglang="0.5.1"))
    write_manifest(plan, tmp_path / "plan.yaml")
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def launch(*argv):
    return CliRunner().invoke(cli, ["launch", "--manifest", "plan.yaml", "--cache-dir", "cache", "--allow-missing",
                                    "--", sys.executable, "child.py", *argv], catch_exceptions=False)


def test_a_fork_on_its_way_to_another_program_is_no_unguarded_python(job):
    r = launch("/bin/true")
    assert r.exit_code == 0, r.output
    assert "strict mode was not active" not in r.output


def test_a_fork_that_becomes_python_without_the_guard_still_fails_the_run(job):
    r = launch(sys.executable, "-I", "-c", "import time; time.sleep(1.0)")  # -I: no PYTHONPATH, no hook
    assert r.exit_code == 1, r.output
    assert "strict mode was not active in 1 Python process(es)" in r.output and "-I -c" in r.output, r.output
