from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

REPO = Path(__file__).resolve().parent.parent

from ci_skips import pytest_runtest_makereport  # noqa: E402,F401  (CI=true: a skipped set-up provision fails)
from file_order import (  # noqa: E402,F401  (the heaviest files first; each file's seconds at the end)
    pytest_collection_modifyitems,
    pytest_runtest_logreport,
    pytest_terminal_summary,
)

# rollback protection keeps a copy of each cache's installed-build record in the user's state folder
# (cache/rollback.py): the tests' copies go to a folder of the session's, not to the developer's home
os.environ["XDG_STATE_HOME"] = __import__("tempfile").mkdtemp(prefix="dgp-state-")


def pytest_unconfigure(config):
    """The session's state folder goes with the session (one was left in TMPDIR per run)."""
    import shutil

    shutil.rmtree(os.environ["XDG_STATE_HOME"], ignore_errors=True)


@pytest.fixture(autouse=True)
def _no_user_sglang_env(monkeypatch):
    """Tests must not see the developer's own SGLang/DeepGEMM settings."""
    for name in list(os.environ):
        if name.startswith(("SGL_", "SGLANG_", "DG_JIT_", "DG_PRINT")):
            monkeypatch.delenv(name, raising=False)


@pytest.fixture
def runner():
    from click.testing import CliRunner

    return CliRunner()


def invoke(runner, *args, **kw):
    from dgprecompile.cli.main import cli

    return runner.invoke(cli, [str(a) for a in args], catch_exceptions=False, **kw)
