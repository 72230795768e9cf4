"""A plain (non-editable) install works: build the wheel, install it into a fresh venv, run every command.

Editable installs put the source tree on sys.path and so hide what a wheel lacks (a module it never imports by
itself, a data file left out of package-data). This builds the wheel the way a user's `pip install .` does,
installs it with its dependencies from the package index (or pip's cache) into a venv made from the bare
interpreter (no system site-packages, not this test venv), and runs from a directory outside the repo.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


def _run(argv, cwd, env=None, timeout=300):
    proc = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{argv}: {proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("install")
    src = work / "src"  # a copy, so the build leaves no build/ or egg-info in the checkout
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(".git", ".venv", ".cache", "out", "build", "*.egg-info",
                                                             "__pycache__", ".pytest_cache", ".ruff_cache"))
    base = getattr(sys, "_base_executable", sys.executable)  # the interpreter under this venv
    venv = work / "venv"
    # no pip inside (ensurepip is the slow part); this environment's pip installs into it with --python
    _run([base, "-m", "venv", "--without-pip", venv], work)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    build = ["--no-build-isolation"] if _has_setuptools(77) else []  # else pip fetches setuptools for the build
    _run([*pip, "wheel", "-q", "--no-deps", *build, "-w", work / "dist", src], work)
    wheels = list((work / "dist").glob("dgprecompile-*.whl"))
    assert len(wheels) == 1, wheels
    _run([*pip, "--python", venv / "bin" / "python", "install", "-q", wheels[0]], work, env=_clean_env())
    return venv


def _has_setuptools(major: int) -> bool:
    try:
        import setuptools
    except ImportError:
        return False
    return int(setuptools.__version__.split(".")[0]) >= major


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["COLUMNS"] = "200"
    return env


def test_the_wheel_is_a_plain_install(installed):
    py = installed / "bin" / "python"
    where = _run([py, "-c", "import dgprecompile, sys; print(dgprecompile.__file__); print(sys.flags.no_site)"],
                 installed, env=_clean_env()).stdout
    assert str(installed) in where and str(REPO) not in where
    listed = _run([sys.executable, "-m", "pip", "--python", py, "list", "--format", "json"], installed,
                  env=_clean_env()).stdout
    names = {p["name"].lower() for p in json.loads(listed)}
    assert "torch" not in names and "deep-gemm" not in names  # a clean venv: only the wheel and its few deps


def help_is_complete(command: str, out: str) -> None:
    """One command's --help from the wheel: its usage line and at least one example of that very command."""
    assert f"Usage: dgprecompile {command} " in out, (command, out[:200])
    examples = out.split("Examples:", 1)[1] if "Examples:" in out else ""
    assert f"dgprecompile {command}" in examples, (command, out)


def test_every_command_has_help(installed):
    from dgprecompile.cli.main import COMMANDS  # every command the CLI has, push and pull included

    exe = installed / "bin" / "dgprecompile"
    top = _run([exe, "--help"], installed, env=_clean_env()).stdout
    listed = [line.split()[0] for line in top.split("Commands:", 1)[1].splitlines() if line.startswith("  ")]
    for command in COMMANDS:
        assert command in listed, (command, top)
        help_is_complete(command, _run([exe, command, "--help"], installed, env=_clean_env()).stdout)
    assert "dgprecompile" in _run([installed / "bin" / "python", "-m", "dgprecompile", "--version"], installed,
                                  env=_clean_env()).stdout


def test_a_real_plan_from_the_wheel(installed, tmp_path):
    exe = installed / "bin" / "dgprecompile"
    proc = _run([exe, "plan", "--model", "Qwen3-Coder-480B", "--tp", 8, "--ep", 8, "--sglang", "0.5.1",
                 "--format", "json", "-o", tmp_path / "plan.yaml"], tmp_path, env=_clean_env())
    plan = json.loads(proc.stdout)
    assert plan["total_kernels"] == 48
    assert (tmp_path / "plan.yaml").stat().st_size > 0
    table = _run([exe, "plan", "--model", "Qwen3-Coder-480B", "--tp", 8, "--ep", 8, "--sglang", "0.5.1"], tmp_path,
                 env=_clean_env()).stdout
    assert "48 distinct kernels" in table
