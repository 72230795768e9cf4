"""`dgprecompile launch`: nothing the job starts outlives it, and strict mode cannot be switched off from inside.

Real launches of the real CLI, real processes (setsid'd, double-forked, ignoring SIGTERM), real signals including
`kill -9` of the launcher, and /proc read afterwards to see that nothing survived. Every wait is bounded.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers import alive, wait_for

from dgprecompile.planning.manifest import write_manifest
from dgprecompile.planning.plan import PlanRequest
from dgprecompile.planning.trace import plan_from_calls

REPO = Path(__file__).resolve().parent.parent
CALL = {"kernel_type": "GEMM_NT_F8F8BF16", "m": 64, "n": 512, "k": 512, "num_groups": 1}




def _kill(pids) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _pids(folder: Path, prefix: str) -> list[int]:
    out = []
    for p in folder.glob(prefix + "*"):
        try:
            out.append(int(p.read_text().strip()))
        except ValueError:  # being written
            pass
    return out


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DG_JIT_", "DGPRECOMPILE_", "SGL_", "SGLANG_"))}
    return {**env, "PYTHONPATH": str(REPO)}


def _launch_cmd(tmp_path: Path, *job: str, sglang: str = "0.5.1", extra: tuple[str, ...] = ()) -> list[str]:
    write_manifest(plan_from_calls([CALL], PlanRequest(sglang=sglang)), tmp_path / "plan.yaml")
    return [sys.executable, "-m", "dgprecompile", "launch", "--manifest", str(tmp_path / "plan.yaml"), "--cache-dir",
            str(tmp_path / "c"), "--allow-missing", "--kill-grace", "1", *extra, "--", *job]


# A job that starts a process in a session of its own which ignores SIGTERM (issue 29 item 3), writes its pid to
# escaped.pid, then waits (or, with "exit", returns at once: the escaped process is left behind).
ESCAPE = ('setsid bash -c \'trap "" TERM; echo $$ > {out}/escaped.pid; exec sleep 777\' & '
          'while [ ! -s {out}/escaped.pid ]; do sleep 0.05; done; {tail}')


def _escaping_launch(tmp_path: Path, tail: str, **kw) -> tuple[subprocess.Popen, int]:
    cmd = _launch_cmd(tmp_path, "bash", "-c", ESCAPE.format(out=tmp_path, tail=tail), **kw)
    proc = subprocess.Popen(cmd, env=_env(), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert wait_for(lambda: _pids(tmp_path, "escaped.pid")), "the job did not start its process"
    return proc, _pids(tmp_path, "escaped.pid")[0]


def test_kill_9_of_launch_ends_a_setsid_process_that_ignores_sigterm(tmp_path):
    proc, escaped = _escaping_launch(tmp_path, "sleep 60")
    try:
        time.sleep(0.3)
        proc.kill()
        proc.wait(timeout=10)
        # SIGTERM is ignored: SIGKILL after the grace (1 s)
        assert wait_for(lambda: not alive(escaped), timeout=10), "the setsid'd process outlived a kill -9 of launch"
    finally:
        _kill([escaped])
        proc.kill()


def test_sigterm_of_launch_ends_a_setsid_process_that_ignores_it(tmp_path):
    proc, escaped = _escaping_launch(tmp_path, "sleep 60")
    try:
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 143
        assert not alive(escaped), "the setsid'd process outlived launch"
    finally:
        _kill([escaped])
        proc.kill()


DAEMON = textwrap.dedent("""
    import os, sys, time
    if os.fork() == 0:          # a classic daemon: fork, setsid, fork again, the middle one exits
        os.setsid()
        if os.fork() == 0:
            open(sys.argv[1] + ".tmp", "w").write(str(os.getpid()))
            os.rename(sys.argv[1] + ".tmp", sys.argv[1])
            time.sleep(300)
        os._exit(0)
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.05)
    print("job done")
""")


@pytest.mark.parametrize("strict", [True, False])
def test_a_daemon_the_job_leaves_is_ended_and_named(tmp_path, strict):
    (tmp_path / "daemon.py").write_text(DAEMON)
    cmd = _launch_cmd(tmp_path, sys.executable, str(tmp_path / "daemon.py"), str(tmp_path / "daemon.pid"),
                      extra=() if strict else ("--no-strict",))
    try:  # (a daemon left running holds launch's stdout open: run() would wait for it until the timeout)
        r = subprocess.run(cmd, env=_env(), cwd=tmp_path, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        _kill(_pids(tmp_path, "daemon.pid"))
        raise
    daemon = _pids(tmp_path, "daemon.pid")
    try:
        assert daemon and "job done" in r.stdout, r.stderr
        assert not alive(daemon[0]), "the daemon outlived launch"
        assert f"pid {daemon[0]}: " in r.stderr and "daemon.py" in r.stderr
        assert "Traceback" not in r.stderr
        if strict:  # the job exited 0, but left a process behind: a strict run fails
            assert r.returncode == 1, r.stderr
            assert "error: the job left 1 process(es) running when it ended (launch ended them)" in r.stderr
        else:
            assert r.returncode == 0, r.stderr
            assert "warning: the job left 1 process(es) running" in r.stderr
    finally:
        _kill(daemon)


def test_a_job_that_ends_cleanly_passes_with_nothing_left_behind(tmp_path):
    r = subprocess.run(_launch_cmd(tmp_path, "bash", "-c", "sleep 0.2 & wait; echo fine"), env=_env(), cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "fine" in r.stdout, r.stderr
    assert "error:" not in r.stderr and "running when it ended" not in r.stderr


# ---- strict mode is decided by the launcher's records, not the job's environment ---------------------------


def _strict_job(tmp_path: Path, script: str, sglang: str = "0.5.1") -> subprocess.CompletedProcess:
    cache = tmp_path / "c"
    for name, data in (("A", b"A" * 300), ("B", b"B" * 300)):
        (cache / "cache" / name).mkdir(parents=True)
        (cache / "cache" / name / "kernel.cubin").write_bytes(data)
    cmd = _launch_cmd(tmp_path, "bash", "-c", script, sglang=sglang)
    return subprocess.run(cmd, env=_env(), cwd=tmp_path, capture_output=True, text=True, timeout=300)


def test_an_entry_overwritten_during_a_strict_run_fails_it(tmp_path):
    c = tmp_path / "c" / "cache"
    # cp keeps A's inode and size; touch puts its mtime back: the change must still be seen
    r = _strict_job(tmp_path, f"cp {c}/B/kernel.cubin {c}/A/kernel.cubin && touch -r {c}/B {c}/A/kernel.cubin")
    assert r.returncode == 1, r.stderr
    assert "error: strict run, but 1 cache entries were changed during it: A" in r.stderr
    assert "Traceback" not in r.stderr


def test_an_entry_removed_during_a_strict_run_fails_it(tmp_path):
    r = _strict_job(tmp_path, f"rm -r {tmp_path}/c/cache/B")
    assert r.returncode == 1, r.stderr
    assert "error: strict run, but 1 cache entries were removed during it: B" in r.stderr


def test_a_triton_entry_written_during_a_strict_run_fails_it(tmp_path):
    entry = tmp_path / "c" / "triton" / "ABCDEF"
    r = _strict_job(tmp_path, f"export DGPRECOMPILE_STRICT_FAMILIES=triton; mkdir -p {entry} && "
                              f"echo x > {entry}/k.cubin && echo '{{}}' > {entry}/__grp__k.json")
    assert r.returncode == 1, r.stderr
    assert "error: strict run, but 1 cache entries were compiled during it: triton/ABCDEF" in r.stderr


def test_a_refusal_the_job_catches_still_fails_the_launch(tmp_path):
    """The C++ JIT's nvcc stand-in refuses; the job catches it and exits 0 (issue 33 item 5): launch exits 1."""
    cu = tmp_path / "kernel.x" / "kernel.cu"
    cu.parent.mkdir()
    cu.write_text("auto ptr = reinterpret_cast<void*>(&sm90_fp8_gemm_1d2d_impl<0, 0, 64, 16>);\n")
    r = _strict_job(tmp_path, f'"$DG_JIT_NVCC_COMPILER" {cu} -o {tmp_path}/x.cubin || echo caught; exit 0',
                    sglang="0.5.14")
    assert "caught" in r.stdout, r.stderr
    assert r.returncode == 1, r.stderr
    assert "error: strict mode refused 1 runtime compile(s): sm90_fp8_gemm_1d2d_impl<0, 0, 64, 16>" in r.stderr


def test_the_scratch_a_refused_deepgemm_compile_leaves_is_removed_and_not_called_compiled(tmp_path):
    """C++ DeepGEMM writes a kernel's sources under <cache>/tmp/<dir>/ before it runs its compiler; under strict
    launch that compiler is the refusing stand-in, so the folder is a refusal's scratch (the H200 proof's
    deleted-entry run left 128 such files and launch called them compiled entries). Launch removes the folders
    the run made, keeps one that was there before, and reports the refusal, not a compile."""
    old = tmp_path / "c" / "tmp" / "before-run"
    old.mkdir(parents=True)
    (old / "kernel.cu").write_text("kept\n")
    scratch = tmp_path / "c" / "tmp" / "1527-03d6f4e0"
    src = "auto ptr = reinterpret_cast<void*>(&sm90_fp8_gemm_1d2d_impl<0, 0, 64, 16>);"
    r = _strict_job(tmp_path, f"mkdir -p {scratch} && echo '{src}' > {scratch}/kernel.cu && "
                              f'"$DG_JIT_NVCC_COMPILER" {scratch}/kernel.cu -o {scratch}/kernel.cubin; exit 0',
                    sglang="0.5.14")
    assert r.returncode == 1, r.stderr
    assert "error: strict mode refused 1 runtime compile(s): sm90_fp8_gemm_1d2d_impl<0, 0, 64, 16>" in r.stderr
    assert "compiled during it" not in r.stderr and "removed 1 scratch folder(s)" in r.stderr, r.stderr
    assert not scratch.exists() and (old / "kernel.cu").read_text() == "kept\n"


def test_a_nested_warm_with_strict_switched_off_compiles_nothing_and_fails_the_launch(tmp_path):
    """`DGPRECOMPILE_STRICT=0 dgprecompile warm --cache-dir OTHER` inside a strict job (issue 29 item 2): the
    warm refuses (the strict launch's supervisor is its ancestor, whatever the variables say), nothing is built,
    and launch exits 1 naming the process that ran with strict mode off."""
    other = tmp_path / "other"
    nvcc = next((p for p in ("/usr/local/cuda/bin/nvcc", "/usr/local/cuda-13.0/bin/nvcc") if os.path.isfile(p)),
                "nvcc")
    warm = (f"DGPRECOMPILE_STRICT=0 {sys.executable} -m dgprecompile warm --manifest {tmp_path}/plan.yaml "
            f"--cache-dir {other} --nvcc {nvcc} --jobs 1; echo warm exit $?; exit 0")
    r = _strict_job(tmp_path, warm)
    assert "warm exit 1" in r.stdout, r.stdout + r.stderr
    assert "strict mode: a strict `dgprecompile launch` (its supervisor, pid" in r.stderr
    assert not (other / "cache").is_dir() or not os.listdir(other / "cache")
    assert r.returncode == 1, r.stderr
    assert "error: strict mode was switched off inside the job in 1 Python process(es)" in r.stderr
    assert "dgprecompile warm" in r.stderr


def test_a_nested_non_strict_launch_is_refused_even_with_the_variables_reset(tmp_path):
    inner = (f"env -u DGPRECOMPILE_STRICT -u PYTHONPATH PYTHONPATH={REPO} {sys.executable} -m dgprecompile launch "
             f"--manifest {tmp_path}/plan.yaml --cache-dir {tmp_path}/c --allow-missing --no-strict -- "
             "echo INNER RAN; echo inner exit $?")
    r = _strict_job(tmp_path, inner)
    assert "INNER RAN" not in r.stdout and "inner exit 1" in r.stdout, r.stdout + r.stderr
    assert "`dgprecompile launch --no-strict` would compile during it; refused" in r.stderr
    assert r.returncode == 1, r.stderr  # the refusal is logged for the outer launch, and its guard was missing


def test_the_supervisor_runs_the_job_and_reports_json(tmp_path):
    cmd = _launch_cmd(tmp_path, "bash", "-c", "exit 0")
    cmd.insert(cmd.index("--allow-missing"), "--json")
    r = subprocess.run(cmd, env=_env(), cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["left_behind"] == [] and data["strict_off"] == {} and data["lost"] is None
    assert data["cache_changes"] == {"added": [], "changed": [], "removed": []}
