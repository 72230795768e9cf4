"""The CI=true rule of tests/ci_skips.py, on a real inner pytest run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

INNER = '''
import pytest

def test_needs_setup():
    pytest.skip("sgl-deep-gemm 0.1.3 not installed beside the venv (make setup)")

@pytest.mark.skipif(True, reason="the legacy DeepGEMM is not installed (make setup)")
def test_marked():
    pass

def test_needs_a_gpu():
    pytest.skip("needs a GPU")
'''


def _inner(tmp_path, ci: str | None) -> subprocess.CompletedProcess:
    (tmp_path / "test_inner.py").write_text(INNER)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "ci_skips", "-p", "no:cacheprovider",
                           "-rA", "--rootdir", str(tmp_path), str(tmp_path / "test_inner.py")],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)


def test_outside_ci_every_skip_stays_a_skip(tmp_path):
    proc = _inner(tmp_path, None)
    assert proc.returncode == 0 and "3 skipped" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("ci", ["true", "1"])
def test_in_ci_a_skipped_setup_provision_fails_and_a_gpu_skip_does_not(tmp_path, ci):
    proc = _inner(tmp_path, ci)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    # a skip in the call fails the test; one in set-up (a skipif mark, a fixture) errors it: either fails the run
    assert "FAILED test_inner.py::test_needs_setup" in proc.stdout, proc.stdout
    assert "ERROR test_inner.py::test_marked" in proc.stdout, proc.stdout
    assert "1 skipped" in proc.stdout and "needs a GPU" in proc.stdout, proc.stdout
    assert "CI=true: skipped a check that `make setup` provides" in proc.stdout, proc.stdout


def test_no_default_test_downloads_a_wheel():
    """The suite is offline once `make setup` ran: only a slow test may call the helpers that `pip download`
    (scripts/update_sglang_args.py's wheel() and table_for()); the rest read what set-up fetched."""
    import ast

    downloading = {"wheel", "table_for"}
    found = []
    for path in sorted(HERE.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef):
                continue
            slow = any("slow" in ast.unparse(d) for d in node.decorator_list)
            calls = [c for c in ast.walk(node) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
                     and c.func.attr in downloading and ast.unparse(c.func.value) == "update_sglang_args"]
            if calls and not slow:
                found.append(f"{path.name}:{node.lineno} {node.name}")
    assert not found, found
