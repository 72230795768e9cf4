"""warm repairs what it can and says in one line what it cannot (issue 19 items 6 and 10): real nvcc compiles of
real legacy DeepGEMM kernels."""

from __future__ import annotations

import json
import subprocess

import pytest
from helpers import needs_legacy, needs_nvcc
from test_scratch import ENV, _warm_argv, small_manifest  # noqa: F401  (small_manifest: a 5-kernel plan)

pytestmark = [needs_legacy, needs_nvcc, pytest.mark.nvcc]


def _warm(manifest, cache, *extra, env=None):
    return subprocess.run(_warm_argv(manifest, cache, *extra), capture_output=True, text=True, env=env or ENV,
                          timeout=600)


def test_a_regular_file_in_an_entrys_place_is_repaired(tmp_path, small_manifest):  # noqa: F811
    cache = tmp_path / "dg"
    first = _warm(small_manifest, cache, "--json")
    assert first.returncode == 0, first.stderr
    entry = sorted((cache / "cache").iterdir())[0]
    subprocess.run(["rm", "-rf", str(entry)], check=True)
    entry.write_text("not an entry")
    again = _warm(small_manifest, cache, "--json")
    assert again.returncode == 0, again.stderr
    assert "Traceback" not in again.stderr and "NotADirectoryError" not in again.stderr
    assert json.loads(again.stdout)["failed"] == 0
    assert entry.is_dir() and (entry / "kernel.cubin").is_file()
    verify = subprocess.run(_warm_argv(small_manifest, cache)[:3] + ["verify", "--manifest", str(small_manifest),
                                                                      "--cache-dir", str(cache)],
                            capture_output=True, text=True, env=ENV, timeout=300)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    third = _warm(small_manifest, cache, "--json")
    assert third.returncode == 0 and json.loads(third.stdout)["compiled"] == 0, third.stderr
