"""The two set-ups of the Makefile (issue 19 item 16), read with `make -n` (nothing is run): `make run` installs only
what the main job needs and keeps no wheel in the venv; `make test` (`make setup`) adds what the tests compare
against, including everything the default tests would otherwise fetch at test time."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def _dry(target: str) -> list[str]:
    """The commands `make TARGET` would run from scratch (-B: as if no stamp existed)."""
    # as a user types it: not as a sub-make of `make test` (CI runs the suite that way), whose MAKEFLAGS and
    # MAKELEVEL would add "Entering directory" lines and the outer make's flags
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES")}
    proc = subprocess.run(["make", "--no-print-directory", "-n", "-B", target], cwd=REPO, capture_output=True,
                          text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


TEST_ONLY = ["sgl-deep-gemm", "sglang-0.5.14", "sglang-kernel==0.4.2", "sgl-kernel==0.3.21", "[dev", "test]",
             "update_sglang_args.py --fetch", "flashinfer-python==0.7.2"]


def _downloads_into_venv(lines: list[str]) -> list[str]:
    """The `pip download` lines whose destination (-d) lies in the venv."""
    out = []
    for line in lines:
        words = line.split()
        if "download" in words and "-d" in words and words[words.index("-d") + 1].startswith(".venv"):
            out.append(line)
    return out


def test_make_run_installs_only_the_main_jobs_needs_and_keeps_no_wheel():
    lines = _dry("run")
    text = "\n".join(lines)
    for item in TEST_ONLY:
        assert item not in text, (item, text)
    assert "pip install -q torch==" in text and "-e '.[legacy]'" in text
    assert "tools/unpack_deep_gemm.py --fetch sgl-kernel==0.3.5" in text
    # no wheel is downloaded into the venv (the old set-up kept 2.0 GB of them in .venv/wheels)
    assert not _downloads_into_venv(lines), text
    assert "touch .venv/.installed-run" in text and ".installed-test" not in text
    assert lines[-2:] == [line for line in lines if "dgprecompile warm" in line or "dgprecompile verify" in line]


def test_make_test_adds_what_the_tests_compare_against():
    text = "\n".join(_dry("test"))
    for item in TEST_ONLY:
        assert item in text, (item, text)
    from test_server import SMALL_WHEELS  # the wheels the server tests read, never fetched by a test

    fetch = next(line for line in text.splitlines() if "update_sglang_args.py --fetch" in line)
    assert fetch.split("--fetch", 1)[1].split() == SMALL_WHEELS, fetch
    assert not _downloads_into_venv(text.splitlines()), text
    assert text.index("touch .venv/.installed-run") < text.index("touch .venv/.installed-test") < text.index("pytest")
    assert "\n".join(_dry("setup")) == text.rsplit("\n", 1)[0]  # `make setup` is the test set-up without the run
