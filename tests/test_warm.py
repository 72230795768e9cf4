"""warm with the legacy backend: real nvcc compiles of real DeepGEMM kernels on this CPU machine."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import invoke
from helpers import NVCC, needs_legacy, needs_nvcc

from dgprecompile.cache.store import CacheStore, sha256_file
from dgprecompile.host.procfs import proc_stats
from dgprecompile.host.toolchain import find_deepgemm, find_nvcc
from dgprecompile.keys.legacy import LegacyKeyContext
from dgprecompile.planning.manifest import plan_from_dict, read_manifest, write_manifest
from dgprecompile.planning.plan import PlanRequest
from dgprecompile.planning.request import plan_from_request

pytestmark = [needs_legacy, needs_nvcc, pytest.mark.nvcc]


@pytest.fixture(scope="module")
def smallest_key_manifest(tmp_path_factory) -> Path:
    """The smallest key of the Qwen3-Coder-480B tp8/ep8 sglang-0.5.1 plan (masked w2: n=6144, k=2560, 20 groups)."""
    plan = plan_from_request(PlanRequest(model="Qwen3-Coder-480B", tp=8, ep=8, sglang="0.5.1"))
    data = plan.to_dict()
    shape = min(data["shapes"], key=lambda s: (s["kernels"], s["n"] * s["k"]))
    assert (shape["n"], shape["k"], shape["num_groups"]) == (6144, 2560, 20)
    keep = {b["kernel"] for b in shape["buckets"]}
    data["shapes"] = [shape]
    data["kernels"] = [k for k in data["kernels"] if k["id"] in keep]
    data["total_kernels"] = len(keep)
    path = tmp_path_factory.mktemp("manifest") / "smallest.yaml"
    write_manifest(plan_from_dict(data), path)
    return path


def warm_cmd(manifest, cache, *extra):
    return ["warm", "--manifest", manifest, "--cache-dir", cache, "--nvcc", NVCC, *extra]


def expected_entries(manifest) -> dict[str, str]:
    plan = read_manifest(manifest)
    ctx = LegacyKeyContext.build(find_deepgemm(), find_nvcc(NVCC))
    return {kid: ctx.entry_name(spec) for kid, spec in plan.kernels.items()}


def complete_entries(cache: Path) -> list[str]:
    return sorted(p.name for p in (cache / "cache").iterdir()
                  if (p / "kernel.cubin").is_file() and (p / "kernel.cu").is_file())


def test_warm_compiles_the_runtime_entries_then_nothing(runner, tmp_path, smallest_key_manifest):
    cache = tmp_path / "dg"
    first = invoke(runner, *warm_cmd(smallest_key_manifest, cache, "--json"))
    assert first.exit_code == 0, first.stderr
    summary = json.loads(first.stdout)
    assert summary["compiled"] == 5 and summary["failed"] == 0
    expected = expected_entries(smallest_key_manifest)
    assert sorted(expected.values()) == complete_entries(cache)
    assert sorted(os.listdir(cache / "cache")) == sorted(expected.values())  # nothing else, nothing partial
    index = CacheStore(cache).read_index()
    for kernel_id, entry in expected.items():
        record = index.kernels[kernel_id]
        assert record.entry == entry
        assert record.files["kernel.cubin"] == sha256_file(cache / "cache" / entry / "kernel.cubin")
    assert index.fingerprint["nvcc"]["path"] == NVCC
    assert index.fingerprint["deepgemm"]["generation"] == "legacy"

    second = invoke(runner, *warm_cmd(smallest_key_manifest, cache, "--json"))
    again = json.loads(second.stdout)
    assert (again["compiled"], again["already_cached"], again["failed"]) == (0, 5, 0)
    assert not list((cache / "dgprecompile" / "staging").iterdir())


def _worker_pids(parent: int) -> list[int]:
    """The warm's worker processes: children of its zygote (the worker process that forks them)."""
    stats = proc_stats()
    zygotes = {st.pid for st in stats if st.ppid == parent}
    return [st.pid for st in stats if st.ppid in zygotes]


def _default_sigint() -> None:
    # a test run started in the background inherits SIGINT ignored, and Python then never raises
    # KeyboardInterrupt; give the warm the terminal's default, as a user's shell would
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start_warm(manifest, cache, *extra, env=None):
    return subprocess.Popen([sys.executable, "-m", "dgprecompile", *map(str, warm_cmd(manifest, cache, *extra))],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=_default_sigint)


def test_worker_thread_count_stays_flat(tmp_path, smallest_key_manifest):
    """Workers compile in their main thread: no pool, so their thread count never grows during the warm."""
    proc = _start_warm(smallest_key_manifest, tmp_path / "dg", "--jobs", "2")
    samples: dict[int, list[int]] = {}
    while proc.poll() is None:
        for pid in _worker_pids(proc.pid):
            try:
                samples.setdefault(pid, []).append(len(os.listdir(f"/proc/{pid}/task")))
            except FileNotFoundError:
                pass
        time.sleep(0.05)
    assert proc.returncode == 0, proc.stderr.read()
    assert len(samples) == 2
    for counts in samples.values():
        assert len(counts) > 10
        assert max(counts) <= 2, counts  # the main thread (+ at most one the CUDA/torch import leaves)
        settled = counts[len(counts) // 4:]
        assert max(settled) == min(settled), counts


def test_killed_worker_leaves_no_partial_entry_and_rerun_finishes(tmp_path, smallest_key_manifest):
    cache = tmp_path / "dg"
    proc = _start_warm(smallest_key_manifest, cache, "--jobs", "2")
    victim = None
    deadline = time.time() + 120
    while victim is None and time.time() < deadline:  # wait until a worker is inside an nvcc compile
        for pid in _worker_pids(proc.pid):
            children = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
            if children:
                victim = pid
                break
        time.sleep(0.05)
    assert victim is not None
    os.kill(victim, signal.SIGKILL)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 4, err
    assert "killed by signal 9" in err
    for entry in (cache / "cache").iterdir():  # only complete entries, never a half-written one
        assert (entry / "kernel.cubin").is_file() and (entry / "kernel.cu").is_file()
    rerun = _start_warm(smallest_key_manifest, cache, "--json")
    out, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err
    assert json.loads(out)["failed"] == 0
    assert complete_entries(cache) == sorted(expected_entries(smallest_key_manifest).values())
    assert not list((cache / "dgprecompile" / "staging").iterdir())


def test_ctrl_c_stops_cleanly(tmp_path, smallest_key_manifest):
    cache = tmp_path / "dg"
    proc = _start_warm(smallest_key_manifest, cache, "--jobs", "2")
    deadline = time.time() + 60
    while not _worker_pids(proc.pid) and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(2.0)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    for entry in (cache / "cache").iterdir():
        assert (entry / "kernel.cubin").is_file() and (entry / "kernel.cu").is_file()
    assert not _worker_pids(proc.pid)


def test_two_warms_at_once_share_the_work_safely(tmp_path, smallest_key_manifest):
    cache = tmp_path / "dg"
    a = _start_warm(smallest_key_manifest, cache, "--jobs", "1", "--json")
    b = _start_warm(smallest_key_manifest, cache, "--jobs", "1", "--json")
    (out_a, err_a), (out_b, err_b) = a.communicate(timeout=300), b.communicate(timeout=300)
    assert a.returncode == 0 and b.returncode == 0, err_a + err_b
    ra, rb = json.loads(out_a), json.loads(out_b)
    assert ra["compiled"] + rb["compiled"] == 5  # per-kernel locks: no kernel compiled twice
    assert complete_entries(cache) == sorted(expected_entries(smallest_key_manifest).values())


def test_a_failing_kernel_is_named_and_the_others_complete(tmp_path, smallest_key_manifest):
    plan = read_manifest(smallest_key_manifest)
    victim = sorted(plan.kernels.values(), key=lambda s: s.id)[0]
    bn = dict(victim.params)["BN"]
    bm = dict(victim.params)["BM"]
    fake = tmp_path / "nvcc"
    # a stand-in nvcc: --version and every other kernel go to the real one; the victim's source fails to compile
    fake.write_text(f"""#!/bin/sh
for a in "$@"; do case "$a" in *.cu) src="$a";; esac; done
if [ -n "$src" ] && tr -d ' \\n' < "$src" | grep -q '<6144,2560,{bm},{bn},'; then
  echo "kernel.cu(1): error: injected failure for the test" >&2; exit 1
fi
exec {NVCC} "$@"
""")
    fake.chmod(0o755)
    cache = tmp_path / "dg"
    result = subprocess.run([sys.executable, "-m", "dgprecompile", "warm", "--manifest", str(smallest_key_manifest),
                             "--cache-dir", str(cache), "--nvcc", str(fake), "--json"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 4, result.stderr
    summary = json.loads(result.stdout)
    assert summary["failed"] == 1 and summary["compiled"] == 4
    assert victim.id in summary["failures"]
    assert "injected failure for the test" in summary["failures"][victim.id]
    assert victim.id in result.stderr


def test_torchrun_ranks_take_disjoint_shares(tmp_path, smallest_key_manifest):
    cache = tmp_path / "dg"
    compiled = []
    for rank in (0, 1):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank)}
        proc = _start_warm(smallest_key_manifest, cache, "--json", env=env)
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        compiled.append(json.loads(out)["compiled"])
    assert compiled == [3, 2]
    assert complete_entries(cache) == sorted(expected_entries(smallest_key_manifest).values())


def test_plan_for_another_generation_is_refused(runner, tmp_path):
    result = invoke(runner, "warm", "--model", "Qwen3-Coder-480B", "--tp", 8, "--ep", 8, "--sglang", "0.5.14",
                    "--cache-dir", tmp_path)
    assert result.exit_code == 3
    assert "installed one is legacy" in result.stderr


SUPERVISOR = r'''
import ctypes, json, os, signal, subprocess, sys, time
ctypes.CDLL(None).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER: whatever warm leaves behind becomes our child
signum, argv, env = int(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3])
proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)

def tree(root):
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = open(f"/proc/{d}/stat").read()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += kids.get(pid, [])
    return out

def comm(pid):
    try:
        stat = open(f"/proc/{pid}/stat").read()
        return stat.split("(", 1)[1].rsplit(")", 1)[0], stat.rsplit(")", 1)[1].split()[0]
    except OSError:
        return None, None

deadline = time.time() + 300
while time.time() < deadline and proc.poll() is None:  # wait until a compiler runs under a worker
    if any(comm(p)[0] in ("nvcc", "cicc", "ptxas", "cudafe++") for p in tree(proc.pid)):
        break
    time.sleep(0.05)
compiling = proc.poll() is None
time.sleep(0.5)
proc.send_signal(signum)
out, err = proc.communicate(timeout=120)
time.sleep(0.5)
left = [(p, *comm(p)) for p in tree(os.getpid()) if p != os.getpid()]
print(json.dumps({"rc": proc.returncode, "stderr": err, "compiling": compiling, "left": left}))
'''


@pytest.mark.parametrize("signum,code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_sigterm_and_sighup_stop_warm_like_ctrl_c(tmp_path, smallest_key_manifest, signum, code):
    """What schedulers, `timeout` and a closed terminal send: every worker and compiler stopped (none left
    running or defunct, watched from a subreaper), scratch and staging removed, one line, exit 128 + signal."""
    cache, scratch = tmp_path / "dg", tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    argv = [sys.executable, "-m", "dgprecompile", *map(str, warm_cmd(smallest_key_manifest, cache, "--jobs", "2"))]
    res = subprocess.run([sys.executable, "-c", SUPERVISOR, str(int(signum)), json.dumps(argv), json.dumps(env)],
                         capture_output=True, text=True, timeout=600)
    report = json.loads(res.stdout)
    assert report["compiling"], report
    assert report["rc"] == code, report["stderr"]
    err = report["stderr"]
    assert "Traceback" not in err and "BrokenPipe" not in err
    assert err.strip().splitlines()[-1] == "error: interrupted: nothing half-written was left in the cache", err
    assert report["left"] == [], report["left"]  # no nvcc/cicc/ptxas alive or defunct, no worker
    assert not [p.name for p in scratch.iterdir() if p.name.startswith("dgprecompile-warm-")]
    assert not list((cache / "dgprecompile" / "staging").iterdir())
    for entry in (cache / "cache").iterdir():
        assert (entry / "kernel.cubin").is_file() and (entry / "kernel.cu").is_file()


def test_a_worker_whose_warm_is_gone_exits_without_a_traceback(tmp_path, smallest_key_manifest):
    """The event pipe to the parent closes under a worker (its warm was killed): the worker's log must not
    fill with a BrokenPipeError traceback, and it stops (exit 141: the SIGPIPE it stands for)."""
    from dgprecompile.compile.warm_setup import WarmOptions, prepare_warm, worker_job

    job = tmp_path / "job.json"
    plan = read_manifest(smallest_key_manifest)
    setup = prepare_warm(plan, WarmOptions(cache_dir=str(tmp_path / "dg"), nvcc=NVCC))
    job.write_text(json.dumps(worker_job(setup)))
    events_r, events_w = os.pipe()
    log = tmp_path / "worker.log"
    item = {"kernel": "x", "family": "gemm_fp8_fp8_bf16_nt", "params": {}, "kernel_type": "GEMM_NT_F8F8BF16",
            "n": 1, "k": 1, "num_groups": 1, "m": 1}
    with open(log, "wb") as logf:
        proc = subprocess.Popen([sys.executable, "-m", "dgprecompile.compile.worker", str(job)],
                                stdin=subprocess.PIPE, stdout=events_w, stderr=logf, text=True)
    os.close(events_w)
    with os.fdopen(events_r) as events:
        assert json.loads(events.readline())["event"] == "ready"
    assert plan.kernels  # the reader is gone now; the worker's next event hits a closed pipe
    proc.stdin.write(json.dumps({"backend": setup.backend, "item": item}) + "\n")
    proc.stdin.close()
    assert proc.wait(timeout=120) == 141
    assert "Traceback" not in log.read_text(), log.read_text()


KILL9 = r'''
import ctypes, json, os, signal, subprocess, sys, time
ctypes.CDLL(None).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER: whatever warm leaves behind becomes our child
argv, env, entries = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)

def stat(pid):
    try:
        s = open(f"/proc/{pid}/stat").read()
        return s.split("(", 1)[1].rsplit(")", 1)[0], s.rsplit(")", 1)[1].split()
    except OSError:
        return None, None

def tree(root):
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            fields = stat(d)[1]
            if fields and fields[0] != "Z":
                kids.setdefault(int(fields[1]), []).append(int(d))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += kids.get(pid, [])
    return [p for p in out if p != root]

def reap():
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                return
        except ChildProcessError:
            return

def listing():
    try:
        return sorted(os.listdir(entries))
    except OSError:
        return []

deadline = time.time() + 300
while time.time() < deadline and proc.poll() is None:  # both workers compiling
    if sum(stat(p)[0] == "cicc" for p in tree(os.getpid())) >= 2:
        break
    time.sleep(0.02)
compiling = proc.poll() is None
proc.kill()
proc.wait()
at_kill = listing()
time.sleep(2.0)
reap()
left = [(p, stat(p)[0]) for p in tree(os.getpid())]
time.sleep(8.0)  # the old warm's workers went on for about 6.5 s and installed what they were compiling
reap()
print(json.dumps({"compiling": compiling, "left": left, "at_kill": at_kill, "after": listing(),
                  "left_later": [(p, stat(p)[0]) for p in tree(os.getpid())]}))
for p in tree(os.getpid()):
    os.kill(p, signal.SIGKILL)
'''


def test_a_sigkilled_warm_leaves_no_compiler_running_and_installs_nothing_after(tmp_path, smallest_key_manifest):
    """`kill -9` of warm mid-compile (issue 29 item 3): its zygote, workers and their nvcc/cicc/ptxas end at once
    (parent-death signals, the worker groups killed), and no entry appears in the cache after warm died."""
    cache, scratch = tmp_path / "dg", tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    argv = [sys.executable, "-m", "dgprecompile", *map(str, warm_cmd(smallest_key_manifest, cache, "--jobs", "2"))]
    res = subprocess.run([sys.executable, "-c", KILL9, json.dumps(argv), json.dumps(env), str(cache / "cache")],
                         capture_output=True, text=True, timeout=600)
    report = json.loads(res.stdout)
    assert report["compiling"], report
    assert report["left"] == [], report  # nothing of warm runs 2 s after its SIGKILL
    assert report["left_later"] == [], report
    assert report["after"] == report["at_kill"], report  # nothing installed after warm died
