"""`dgprecompile launch`: the job lives and dies with the launcher, and strict mode fails closed.

Real processes and real signals throughout: a launcher killed with SIGKILL, a job that ignores SIGTERM, Python
grandchildren that keep or reset PYTHONPATH, a job that compiles into the cache during a strict run. Every wait is
bounded.
"""

from __future__ import annotations

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

# A job like torchrun: it starts a worker in a session of its own; both write ready.<pid>, and with "ignore" both
# ignore SIGTERM.
JOB = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    out, mode = sys.argv[1], sys.argv[2]
    if mode == "ignore":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if len(sys.argv) > 3:
        subprocess.Popen([sys.executable, __file__, out, mode], start_new_session=True)
    open(os.path.join(out, f"ready.{os.getpid()}"), "w").close()
    time.sleep(120)
""")




def _job_pids(out: Path) -> list[int]:
    return [int(p.name.split(".")[1]) for p in out.glob("ready.*")]


def _start_job(tmp_path: Path, mode: str, grace: float) -> tuple[subprocess.Popen, list[int]]:
    script = tmp_path / "job.py"
    script.write_text(JOB)
    code = ("import os, sys; from dgprecompile.launch.supervise import run_child; "
            f"sys.exit(run_child([sys.executable, {str(script)!r}, {str(tmp_path)!r}, {mode!r}, 'worker'], "
            f"os.environ, kill_grace={grace}))")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert wait_for(lambda: len(_job_pids(tmp_path)) == 2), "the job and its worker did not start"
    return proc, _job_pids(tmp_path)


@pytest.mark.parametrize("mode", ["default", "ignore"])
def test_sigkill_of_the_launcher_ends_the_whole_job(tmp_path, mode):
    proc, pids = _start_job(tmp_path, mode, grace=1.0)
    proc.kill()
    proc.wait(timeout=10)
    try:
        # a SIGTERM-ignoring job is killed once the grace (1 s) has passed
        assert wait_for(lambda: not any(alive(p) for p in pids), timeout=10), "the job outlived the launcher"
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_job_ignoring_sigterm_is_killed_after_the_grace_and_launch_exits_143(tmp_path):
    plan = plan_from_calls([{"kernel_type": "GEMM_NT_F8F8BF16", "m": 64, "n": 512, "k": 512, "num_groups": 1}],
                           PlanRequest(sglang="0.5.1"))
    write_manifest(plan, tmp_path / "plan.yaml")
    (tmp_path / "job.py").write_text(JOB)
    cmd = [sys.executable, "-m", "dgprecompile", "launch", "--manifest", str(tmp_path / "plan.yaml"), "--cache-dir",
           str(tmp_path / "c"), "--allow-missing", "--kill-grace", "1.5", "--", sys.executable,
           str(tmp_path / "job.py"), str(tmp_path), "ignore", "worker"]
    proc = subprocess.Popen(cmd, env={**os.environ, "PYTHONPATH": str(REPO)}, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path)
    try:
        assert wait_for(lambda: len(_job_pids(tmp_path)) == 2), "the job did not start"
        pids = _job_pids(tmp_path)
        start = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 128 + signal.SIGTERM
        took = time.monotonic() - start
        assert 1.4 < took < 10, took
        assert not any(alive(p) for p in pids)
        err = proc.stderr.read()
        assert "launch got SIGTERM" in err and "got SIGKILL" in err and "exit 143" in err
    finally:
        proc.kill()
        for pid in _job_pids(tmp_path):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


# ---- strict mode proves its guard in every Python process --------------------------------------------------

PARENT = textwrap.dedent("""
    import multiprocessing, os, shutil, subprocess, sys, time
    mode = sys.argv[1]
    env = dict(os.environ)
    if mode == "reset":  # a wrapper that sets its own PYTHONPATH
        env["PYTHONPATH"] = "/nonexistent"
    if mode == "break":  # something removes the launch's scratch under a child's feet
        shutil.rmtree(os.environ["DGPRECOMPILE_GUARD_DIR"])
    if mode == "compile":  # a runtime compile the guard did not see, straight into the cache
        os.makedirs(os.path.join(os.environ["DG_JIT_CACHE_DIR"], "cache", "kernel.runtime.1"))
    child = subprocess.run([sys.executable, "-c", "import time; time.sleep(1); print('CHILD RAN')"], env=env)
    print("child exit", child.returncode)
    if mode == "fork":  # a forked worker shares the parent's guard
        ctx = multiprocessing.get_context("fork")
        p = ctx.Process(target=time.sleep, args=(1,))
        p.start()
        p.join()
""")


def _strict_launch(tmp_path: Path, mode: str) -> subprocess.CompletedProcess:
    plan = plan_from_calls([{"kernel_type": "GEMM_NT_F8F8BF16", "m": 64, "n": 512, "k": 512, "num_groups": 1}],
                           PlanRequest(sglang="0.5.1"))
    write_manifest(plan, tmp_path / "plan.yaml")
    (tmp_path / "parent.py").write_text(PARENT)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DG_JIT_", "DGPRECOMPILE_", "SGL_"))}
    cmd = [sys.executable, "-m", "dgprecompile", "launch", "--manifest", str(tmp_path / "plan.yaml"), "--cache-dir",
           str(tmp_path / "c"), "--allow-missing", "--", sys.executable, str(tmp_path / "parent.py"), mode]
    return subprocess.run(cmd, env={**env, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)


@pytest.mark.parametrize("mode", ["keep", "fork"])
def test_strict_passes_when_every_python_process_is_guarded(tmp_path, mode):
    r = _strict_launch(tmp_path, mode)
    assert r.returncode == 0, r.stderr
    assert "CHILD RAN" in r.stdout and "error:" not in r.stderr


def test_strict_fails_a_job_whose_wrapper_resets_pythonpath(tmp_path):
    r = _strict_launch(tmp_path, "reset")
    assert "CHILD RAN" in r.stdout and "child exit 0" in r.stdout  # the job itself succeeded
    assert r.returncode == 1, r.stderr
    assert "strict mode was not active in 1 Python process(es) of the job" in r.stderr
    assert "time.sleep(1)" in r.stderr  # named by its command line
    assert "hint: keep the PYTHONPATH launch sets" in r.stderr and "Traceback" not in r.stderr


def test_strict_stops_a_process_whose_guard_cannot_install(tmp_path):
    r = _strict_launch(tmp_path, "break")
    assert "CHILD RAN" not in r.stdout and "child exit 97" in r.stdout
    assert "the guard could not be installed in this Python process" in r.stderr
    assert r.returncode == 1, r.stderr


def test_strict_run_that_compiled_anything_fails_naming_it(tmp_path):
    r = _strict_launch(tmp_path, "compile")
    assert "child exit 0" in r.stdout
    assert r.returncode == 1, r.stderr
    assert "error: strict run, but 1 cache entries were compiled during it: kernel.runtime.1" in r.stderr


def test_strict_fails_the_import_it_cannot_guard(tmp_path):
    """A deep_gemm.jit.compiler whose compilers the guard does not know (a stand-in module without NVCCCompiler /
    NVRTCCompiler, as a changed DeepGEMM would be): importing it fails under strict mode instead of running
    unguarded; without strict mode the import goes on."""
    fake = tmp_path / "fake" / "deep_gemm" / "jit"
    fake.mkdir(parents=True)
    (fake.parent / "__init__.py").write_text("")
    (fake / "__init__.py").write_text("")
    (fake / "compiler.py").write_text("class SomeOtherCompiler:\n    pass\n")
    (tmp_path / "job.py").write_text("import deep_gemm.jit.compiler\nprint('IMPORTED')\n")
    plan = plan_from_calls([{"kernel_type": "GEMM_NT_F8F8BF16", "m": 64, "n": 512, "k": 512, "num_groups": 1}],
                           PlanRequest(sglang="0.5.1"))
    write_manifest(plan, tmp_path / "plan.yaml")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DG_JIT_", "DGPRECOMPILE_", "SGL_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "fake"), str(REPO)])

    def launch(*extra):
        cmd = [sys.executable, "-m", "dgprecompile", "launch", "--manifest", str(tmp_path / "plan.yaml"),
               "--cache-dir", str(tmp_path / "c"), "--allow-missing", *extra, "--", sys.executable,
               str(tmp_path / "job.py")]
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)

    strict = launch()
    assert strict.returncode == 1 and "IMPORTED" not in strict.stdout, strict.stderr
    assert "dgprecompile strict mode: could not guard deep_gemm.jit.compiler" in strict.stderr
    loose = launch("--no-strict")
    assert loose.returncode == 0 and "IMPORTED" in loose.stdout, loose.stderr
