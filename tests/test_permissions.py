"""Files follow the umask; a cache warmed by root is usable by another user; what that user may not read or
write gives one `error:` line with a `hint:`, a non-zero exit and no traceback.

Runs the commands as a real second user (``useradd``, ``runuser``), since root ignores permissions.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest
from test_artifact import drop_entries, packed, tree_hash  # noqa: F401  (packed: the session's artifact)
from test_verify import NVCC, PLAN, warm_once

REPO = Path(__file__).resolve().parent.parent
OTHER = "dgp-test-other"

pytestmark = pytest.mark.nvcc


def _cli(args, umask=0o022, cwd=None):
    return subprocess.run([sys.executable, "-m", "dgprecompile", *map(str, args)], capture_output=True, text=True,
                          timeout=600, cwd=cwd, preexec_fn=lambda: os.umask(umask))


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


@pytest.mark.parametrize("umask,file_mode", [(0o022, 0o644), (0o077, 0o600)])
def test_written_files_follow_the_umask(tmp_path_factory, tmp_path, umask, file_mode):
    cache = tmp_path / "dg"
    shutil.copytree(warm_once(tmp_path_factory), cache)
    (cache / "dgprecompile" / "index.json").chmod(0o600)
    res = _cli(["warm", *PLAN, "--cache-dir", cache, "--nvcc", NVCC], umask)  # all cached; rewrites the index
    assert res.returncode == 0, res.stderr
    assert _mode(cache / "dgprecompile" / "index.json") == file_mode
    res = _cli(["plan", *PLAN, "-o", tmp_path / "plan.yaml"], umask)
    assert res.returncode == 0, res.stderr
    assert _mode(tmp_path / "plan.yaml") == file_mode
    res = _cli(["pack", *PLAN, "--cache-dir", cache, "-o", tmp_path / "a.tar.gz"], umask)
    assert res.returncode == 0, res.stderr
    assert _mode(tmp_path / "a.tar.gz") == file_mode


def test_installed_entries_are_readable_by_everyone_under_umask_022(tmp_path_factory):
    cache = warm_once(tmp_path_factory)  # warmed in this process
    if os.umask(0o022) != 0o022:
        pytest.skip("the test process does not run under umask 022")
    for entry in (cache / "cache").iterdir():
        assert _mode(entry) == 0o755, entry
        for f in entry.iterdir():
            assert _mode(f) == 0o644, f


# ---- another user -----------------------------------------------------------------------------------------


def _other_python() -> tuple[str, str] | None:
    """(interpreter, PYTHONPATH) with which the other user runs this checkout and its dependencies."""
    site = sysconfig.get_paths()["purelib"]
    pythonpath = f"{REPO}:{site}"
    minor = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for py in (sys.executable, f"/usr/bin/{minor}", f"/usr/local/bin/{minor}"):
        if not os.path.isfile(py):
            continue
        probe = subprocess.run(["runuser", "-u", OTHER, "--", "env", f"PYTHONPATH={pythonpath}", py, "-c",
                                "import dgprecompile.cli.main, deep_gemm, filelock"], capture_output=True, timeout=60)
        if probe.returncode == 0:
            return py, pythonpath
    return None


@pytest.fixture(scope="module")
def other():
    if os.geteuid() != 0:
        pytest.skip("needs root to add a second user")
    if subprocess.run(["id", OTHER], capture_output=True).returncode != 0:
        made = subprocess.run(["useradd", "-M", "-s", "/bin/sh", OTHER], capture_output=True, text=True)
        if made.returncode != 0:
            pytest.skip(f"cannot add a user: {made.stderr.strip()}")
    found = _other_python()
    if found is None:
        pytest.skip(f"{OTHER} cannot run this checkout's interpreter and site-packages (are they under /root?)")
    return found


@pytest.fixture
def shared(tmp_path_factory):
    """A root-owned directory other users may enter (pytest's own tmp dirs are 0700)."""
    d = Path(tempfile.mkdtemp(prefix="dgp-shared-", dir="/tmp"))
    d.chmod(0o755)
    cache = d / "deep_gemm"
    shutil.copytree(warm_once(tmp_path_factory), cache)  # modes as warm wrote them
    yield d
    shutil.rmtree(d, ignore_errors=True)


def as_other(other, *args, cwd="/tmp"):
    py, pythonpath = other
    return subprocess.run(["runuser", "-u", OTHER, "--", "env", f"PYTHONPATH={pythonpath}", "HOME=/tmp",
                           f"PATH={os.environ.get('PATH', '/usr/bin:/bin')}", py, "-m", "dgprecompile",
                           *map(str, args)], capture_output=True, text=True, timeout=600, cwd=cwd)


def refused(res, *words):
    assert res.returncode != 0, res.stdout + res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    lines = res.stderr.strip().splitlines()
    errors = [x for x in lines if x.startswith("error:")]
    assert len(errors) == 1, res.stderr
    assert any(x.startswith("hint:") for x in lines), res.stderr
    for w in words:
        assert w in res.stderr, res.stderr
    return errors[0]


def test_a_cache_warmed_by_root_is_usable_by_another_user(other, shared):
    cache = shared / "deep_gemm"
    res = as_other(other, "verify", *PLAN, "--cache-dir", cache)
    assert res.returncode == 0, res.stderr
    assert "complete" in res.stdout
    res = as_other(other, "launch", *PLAN, "--cache-dir", cache, "--", "/bin/true")
    assert res.returncode == 0, res.stderr


def test_warm_into_a_cache_the_user_may_not_write(other, shared):
    drop_entries(shared / "deep_gemm", 1)  # something to build, which this user may not do
    before = tree_hash(shared / "deep_gemm")
    res = as_other(other, "warm", *PLAN, "--cache-dir", shared / "deep_gemm", "--nvcc", NVCC)
    refused(res, "permission denied", "owned by root")
    assert tree_hash(shared / "deep_gemm") == before


def test_warm_of_a_read_only_cache_that_holds_everything_is_a_success(other, shared):
    """Nothing to do is success (issue 19 item 10): exit 0, every kernel reported cached, nothing written."""
    cache = shared / "deep_gemm"
    before = tree_hash(cache)
    res = as_other(other, "warm", *PLAN, "--cache-dir", cache, "--nvcc", NVCC, "--json")
    assert res.returncode == 0, res.stderr
    report = __import__("json").loads(res.stdout)
    assert report["compiled"] == 0 and report["failed"] == 0 and report["already_cached"] == report["kernels"] > 0
    assert tree_hash(cache) == before


def test_warm_with_an_entry_this_user_may_not_read(other, shared):
    """Without CAP_DAC_OVERRIDE: one error naming the file and who owns it, no traceback, nothing changed."""
    cache = shared / "deep_gemm"
    subprocess.run(["chmod", "-R", "o+rwX", str(cache)], check=True)  # a cache shared for writing
    entry = sorted((cache / "cache").iterdir())[0]
    (entry / "kernel.cubin").chmod(0o600)
    before = tree_hash(cache)
    res = as_other(other, "warm", *PLAN, "--cache-dir", cache, "--nvcc", NVCC)
    refused(res, "permission denied", "kernel.cubin", "owned by root")
    assert tree_hash(cache) == before


def test_unpack_into_a_populated_read_only_cache(other, shared, packed):  # noqa: F811
    cache = shared / "deep_gemm"
    drop_entries(cache, 2)  # so the artifact has something to add
    art = shared / "a.tar.gz"
    shutil.copy(packed[1], art)
    art.chmod(0o644)
    before = tree_hash(cache)
    res = as_other(other, "unpack", art, "--cache-dir", cache)
    refused(res, "permission denied")
    assert tree_hash(cache) == before


@pytest.mark.parametrize("command", ["verify", "launch", "warm"])
def test_an_unreadable_index(other, shared, command):
    cache = shared / "deep_gemm"
    (cache / "dgprecompile" / "index.json").chmod(0o600)
    extra = {"launch": ["--", "/bin/true"], "warm": ["--nvcc", NVCC], "verify": []}[command]
    res = as_other(other, command, *PLAN, "--cache-dir", cache, *extra)
    refused(res, "permission denied", "index.json")


def test_an_unreadable_entry_file(other, shared):
    cache = shared / "deep_gemm"
    entry = sorted((cache / "cache").iterdir())[0]
    (entry / "kernel.cubin").chmod(0o600)
    res = as_other(other, "verify", *PLAN, "--cache-dir", cache)
    refused(res, "permission denied", "kernel.cubin")
