"""Under CI=true a skip of a check that `make setup` provides is a failure (issue 19 item 17).

A test that needs something set-up installs (a DeepGEMM release beside the venv, the sglang 0.5.14 wheel's files,
the legacy DeepGEMM, the test extra's tools, the sglang 0.5.1 wheel) skips with a reason naming `make setup`, so a
developer without them still gets a run. In CI those are provided: a skip there means the set-up is broken and
the check silently did not run, so it fails the run instead. Skips for what set-up cannot give (a GPU, root, a
tmpfs mount, nvcc) stay skips. Loaded by tests/conftest.py.
"""

from __future__ import annotations

import os

import pytest

SETUP_PROVIDES = "make setup"  # the words every skip of a set-up provision carries in its reason


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def skip_reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr or "")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and in_ci() and not hasattr(report, "wasxfail"):
        reason = skip_reason(report)
        if SETUP_PROVIDES in reason:
            report.outcome = "failed"
            report.longrepr = (f"CI=true: skipped a check that `make setup` provides, so it did not run: {reason}")
