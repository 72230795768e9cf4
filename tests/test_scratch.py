"""Scratch and staging directories judged by the lock their live process holds, never by a PID (issue 19 items
5 and 8): warms in two PID namespaces sharing one cache, and real signals of real warms compiling with nvcc."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO
from helpers import NVCC, needs_legacy, needs_nvcc

from dgprecompile.host import scratch
from dgprecompile.host.procfs import proc_stats
from dgprecompile.planning.manifest import plan_from_dict, write_manifest
from dgprecompile.planning.plan import PlanRequest
from dgprecompile.planning.request import plan_from_request

UNSHARE = shutil.which("unshare")
ENV = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}

HOLDER = """
import sys, time
from dgprecompile.host import scratch
path = scratch.make(sys.argv[1], "held-")
print(path, flush=True)
time.sleep(600)
"""


def _in_new_pid_namespace(argv: list[str]) -> list[str]:
    return [UNSHARE, "--pid", "--fork", "--kill-child", *argv]


def _hold(base: Path, namespace: bool) -> tuple[subprocess.Popen, Path]:
    argv = [sys.executable, "-c", HOLDER, str(base)]
    proc = subprocess.Popen(_in_new_pid_namespace(argv) if namespace else argv, stdout=subprocess.PIPE, text=True,
                            env=ENV)
    line = proc.stdout.readline().strip()
    assert line, "the holder did not start"
    return proc, Path(line)


@pytest.mark.skipif(UNSHARE is None or os.geteuid() != 0, reason="needs unshare and root (a new PID namespace)")
def test_a_scratch_held_in_another_pid_namespace_is_kept_until_its_process_dies(tmp_path):
    proc, held = _hold(tmp_path, namespace=True)
    try:
        pid_there = int(json.loads((held / scratch.LOCK_NAME).read_text())["pid"])
        assert pid_there < 100  # a PID of that namespace: it names some other process here, or none
        assert scratch.clean_stale(tmp_path) == 0 and held.is_dir()
        assert scratch.held(held)
    finally:
        proc.kill()
        proc.wait()
    deadline = time.time() + 10
    while scratch.held(held) and time.time() < deadline:
        time.sleep(0.05)
    assert scratch.clean_stale(tmp_path) == 1 and not held.exists()


def test_a_dead_runs_scratch_is_removed_and_a_live_ones_kept(tmp_path):
    live_proc, live = _hold(tmp_path, namespace=False)
    dead_proc, dead = _hold(tmp_path, namespace=False)
    dead_proc.send_signal(signal.SIGKILL)
    dead_proc.wait()
    try:
        assert scratch.clean_stale(tmp_path, "held-") == 1
        assert live.is_dir() and not dead.exists()
    finally:
        live_proc.kill()
        live_proc.wait()


# ---- real warms ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def small_manifest(tmp_path_factory) -> Path:
    """The smallest key of the Qwen3-Coder-480B tp8/ep8 sglang-0.5.1 plan: 5 legacy kernels."""
    data = plan_from_request(PlanRequest(model="Qwen3-Coder-480B", tp=8, ep=8, sglang="0.5.1")).to_dict()
    shape = min(data["shapes"], key=lambda s: (s["kernels"], s["n"] * s["k"]))
    keep = {b["kernel"] for b in shape["buckets"]}
    data["shapes"], data["kernels"] = [shape], [k for k in data["kernels"] if k["id"] in keep]
    data["total_kernels"] = len(data["kernels"])
    path = tmp_path_factory.mktemp("manifest") / "small.yaml"
    write_manifest(plan_from_dict(data), path)
    return path


def _warm_argv(manifest: Path, cache: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "dgprecompile", "warm", "--manifest", str(manifest), "--cache-dir", str(cache),
            "--nvcc", str(NVCC), *extra]


def _descendants(root: int) -> list:
    stats = proc_stats()
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        kids = [st for st in stats if st.ppid == pid]
        out += kids
        todo += [st.pid for st in kids]
    return out


def _wait_for_compiler(proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        if any(st.comm in ("cicc", "ptxas", "cudafe++") for st in _descendants(proc.pid)):
            return
        time.sleep(0.05)
    raise AssertionError("no compiler started under the warm")


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a background test run inherits SIGINT ignored


@needs_legacy
@needs_nvcc
@pytest.mark.nvcc
@pytest.mark.skipif(UNSHARE is None or os.geteuid() != 0, reason="needs unshare and root (a new PID namespace)")
def test_two_warms_in_two_pid_namespaces_share_one_cache(tmp_path, small_manifest):
    """A warm in another PID namespace (another container) on the same cache must not take a live warm's
    staging root for a dead one's: every kernel of both warms succeeds."""
    cache = tmp_path / "dg"
    here = subprocess.Popen(_warm_argv(small_manifest, cache, "--jobs", "1", "--json"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV)
    _wait_for_compiler(here)
    staging = list((cache / "dgprecompile" / "staging").iterdir())
    assert staging, "the live warm has a staging root"
    there = subprocess.run(_in_new_pid_namespace(_warm_argv(small_manifest, cache, "--jobs", "1", "--json")),
                           capture_output=True, text=True, env=ENV, timeout=600)
    out, err = here.communicate(timeout=600)
    assert here.returncode == 0 and json.loads(out)["failed"] == 0, err
    assert there.returncode == 0 and json.loads(there.stdout)["failed"] == 0, there.stderr
    assert not list((cache / "dgprecompile" / "staging").iterdir())


@needs_legacy
@needs_nvcc
@pytest.mark.nvcc
@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_an_interrupted_warm_leaves_nothing_in_tmpdir(tmp_path, small_manifest, signum, code):
    """nvcc writes tmpxft_* intermediates (megabytes per compile) to TMPDIR: warm gives its compilers a TMPDIR
    inside its own scratch, removed with it."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    proc = subprocess.Popen(_warm_argv(small_manifest, tmp_path / "dg", "--jobs", "2"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**ENV, "TMPDIR": str(tmpdir)},
                            preexec_fn=_default_sigint)
    _wait_for_compiler(proc)
    time.sleep(1.0)  # well inside the compile: cicc/ptxas have written their intermediates
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    assert not _descendants(proc.pid)
    assert sorted(p.name for p in tmpdir.rglob("*")) == [], "left in TMPDIR"


@needs_legacy
@needs_nvcc
@pytest.mark.nvcc
def test_a_sigkilled_warms_scratch_is_removed_by_the_next_warm(tmp_path, small_manifest):
    tmpdir, cache = tmp_path / "tmp", tmp_path / "dg"
    tmpdir.mkdir()
    env = {**ENV, "TMPDIR": str(tmpdir)}
    proc = subprocess.Popen(_warm_argv(small_manifest, cache, "--jobs", "1"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    _wait_for_compiler(proc)
    time.sleep(1.0)
    compilers = [st.pid for st in _descendants(proc.pid) if st.comm in ("nvcc", "cicc", "ptxas", "cudafe++")]
    os.killpg(proc.pid, signal.SIGKILL)  # warm's process group: the warm runs no cleanup
    proc.communicate(timeout=60)
    left = [p.name for p in tmpdir.iterdir()]
    assert any(n.startswith("dgprecompile-warm-") for n in left), left
    # the zygote, in a session of its own, ends the worker and its compilers (a cicc or nvcc left running goes on
    # writing into the scratch), and holds the scratch's lock until it has: no run removes it under them
    deadline = time.time() + 30
    while time.time() < deadline:
        alive = [st.comm for st in proc_stats() if st.pid in compilers and st.state != "Z"]
        if not alive:
            break
        assert scratch.held(tmpdir / left[0]), f"{alive} still run in a scratch whose lock is free"
        time.sleep(0.02)
    assert not alive, f"{alive} outlived the warm by 30 s"
    assert list((cache / "dgprecompile" / "staging").iterdir())
    rerun = subprocess.run(_warm_argv(small_manifest, cache, "--json"), capture_output=True, text=True, env=env,
                           timeout=600)
    assert rerun.returncode == 0 and json.loads(rerun.stdout)["failed"] == 0, rerun.stderr
    assert [p.name for p in tmpdir.iterdir()] == []
    assert not list((cache / "dgprecompile" / "staging").iterdir())


@needs_legacy
@needs_nvcc
@pytest.mark.nvcc
def test_a_full_tmpdir_is_named_as_tmpdir_not_the_cache(tmp_path, small_manifest):
    """nvcc's intermediates fill a small TMPDIR (a real 64 KiB tmpfs) while the cache has room: the error names
    that mount and the hint says TMPDIR, not --cache-dir (issue 19 item 10)."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(tmpdir)], check=True,
                       capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {exc}")
    try:
        res = subprocess.run(_warm_argv(small_manifest, tmp_path / "dg", "--jobs", "1"), capture_output=True,
                             text=True, env={**ENV, "TMPDIR": str(tmpdir)}, timeout=600)
        assert res.returncode == 3, res.stderr
        assert "Traceback" not in res.stderr
        errors = [x for x in res.stderr.splitlines() if x.startswith("error:")]
        hints = [x for x in res.stderr.splitlines() if x.startswith("hint:")]
        assert len(errors) == 1 and f"no space left on {tmpdir}" in errors[0], res.stderr
        assert hints and "TMPDIR" in hints[-1] and "--cache-dir" not in hints[-1], res.stderr
        assert [p.name for p in tmpdir.iterdir()] == []  # its scratch went with it
    finally:
        subprocess.run(["umount", "-l", str(tmpdir)], check=False, capture_output=True, timeout=30)


def test_a_sigkilled_launchs_scratch_is_removed_by_the_next_launch(tmp_path):
    """launch's run scratch (TMPDIR/dgprecompile-launch-*) is lock-held: SIGKILL leaves it, the next launch
    removes it."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = {**ENV, "TMPDIR": str(tmpdir)}
    argv = [sys.executable, "-m", "dgprecompile", "launch", "--model", "Qwen3-Coder-480B", "--tp", "8", "--ep", "8",
            "--sglang", "0.5.1", "--max-tokens", "32", "--cache-dir", str(tmp_path / "dg"), "--allow-missing", "--"]
    marker = tmp_path / "started"
    proc = subprocess.Popen([*argv, "sh", "-c", f"touch {marker}; exec sleep 300"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 120
    while not marker.exists() and time.time() < deadline:
        time.sleep(0.05)
    assert marker.exists(), "the job did not start"
    job = [st.pid for st in _descendants(proc.pid)]
    proc.send_signal(signal.SIGKILL)
    for pid in job:  # the job outlives a SIGKILLed launcher today (issue 19 item 9, not this test's subject)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.communicate(timeout=60)
    left = [p.name for p in tmpdir.iterdir()]
    assert any(n.startswith("dgprecompile-launch-") for n in left), left
    again = subprocess.run([*argv, "true"], capture_output=True, text=True, env=env, timeout=120)
    assert again.returncode == 0, again.stderr
    assert [p.name for p in tmpdir.iterdir()] == []


def _dead_scratch(base: Path) -> Path:
    proc, path = _hold(base, namespace=False)
    proc.kill()
    proc.wait()
    return path


def _age_by(path: Path, seconds: float) -> None:
    old = time.time() - seconds
    for p in (path, *path.iterdir()):
        os.utime(p, (old, old))


def test_another_hosts_scratch_is_kept_until_it_is_clearly_abandoned(tmp_path):
    """On a network filesystem another host's lock may not reach here: a free lock written by another boot id
    is stale only once the directory is also a day untouched."""
    path = _dead_scratch(tmp_path)
    lock = path / scratch.LOCK_NAME
    lock.write_text(json.dumps({**json.loads(lock.read_text()), "host": "another-host-boot-id"}))
    assert scratch.clean_stale(tmp_path) == 0 and path.is_dir()
    _age_by(path, scratch.FOREIGN_STALE_SECONDS + 60)
    assert scratch.clean_stale(tmp_path) == 1 and not path.exists()


def test_a_directory_without_a_lock_is_removed_only_when_old(tmp_path):
    """An older dgprecompile's staging root (no lock): kept while it changes, removed after an hour untouched."""
    legacy = tmp_path / "12345-1700000000000000000"
    legacy.mkdir()
    (legacy / "kernel.cu").write_text("x")
    assert scratch.clean_stale(tmp_path) == 0 and legacy.is_dir()
    _age_by(legacy, scratch.UNLOCKED_STALE_SECONDS + 60)
    assert scratch.clean_stale(tmp_path) == 1 and not legacy.exists()


STUCK_BEFORE_RENAME = """
import os, sys, time
from dgprecompile.host import scratch
def stuck(src, dst):  # the instant between locking the temporary lock file and renaming it into place
    print(os.path.dirname(src), flush=True)
    time.sleep(600)
os.rename = stuck
scratch.make(sys.argv[1], "held-")
"""


def test_a_scratch_killed_before_its_lock_was_renamed_is_removed_at_once(tmp_path):
    """CI met it (test_artifact's killed unpack): SIGKILL between locking ``.owner.<pid>.tmp`` and renaming it to
    ``.owner.lock`` left a directory without the lock, which was kept for an hour. A live maker in that instant holds
    the temporary lock and is kept; once it is dead, the next cleaner removes the directory."""
    proc = subprocess.Popen([sys.executable, "-c", STUCK_BEFORE_RENAME, str(tmp_path)], stdout=subprocess.PIPE,
                            text=True, env=ENV)
    try:
        path = Path(proc.stdout.readline().strip())
        assert path.parent == tmp_path and [p.name for p in path.iterdir()] == [f".owner.{proc.pid}.tmp"]
        assert scratch.clean_stale(tmp_path) == 0 and path.is_dir()  # its maker holds the temporary lock
    finally:
        proc.kill()
        proc.wait()
    assert scratch.clean_stale(tmp_path) == 1 and not path.exists()


def test_a_maker_whose_new_lock_a_cleaner_holds_starts_over(tmp_path, monkeypatch):
    """A cleaner's probe of a temporary lock can meet a maker between its open and its lock: the maker's lock is
    then refused; it removes that directory and makes another, whose lock it holds."""
    import fcntl

    real, refused = fcntl.flock, []

    def flock(fd, op):
        if not refused:
            refused.append(os.readlink(f"/proc/self/fd/{fd}"))
            raise BlockingIOError("held by a cleaner's probe")
        return real(fd, op)

    monkeypatch.setattr(scratch.fcntl, "flock", flock)
    path = scratch.make(tmp_path, "held-")
    monkeypatch.setattr(scratch.fcntl, "flock", real)
    try:
        assert refused and not Path(refused[0]).parent.exists() and Path(refused[0]).parent != path
        assert [p.name for p in tmp_path.iterdir()] == [path.name] and scratch.held(path)
    finally:
        scratch.release(path)
