"""limits.py on synthetic /proc and /sys trees (cgroup v1, v2, broken files) and on this machine."""

from __future__ import annotations

import resource
from pathlib import Path

from dgprecompile.diagnostics.limits import parse_cgroup_file, read_limits

FIX = Path(__file__).parent / "fixtures" / "doctor"
RL = {"nproc": (1048576, 1048576), "stack": (8 << 20, None)}


def tree(name: str):
    return FIX / name / "proc", FIX / name / "sys"


def by_name(limits, name):
    return [lim for lim in limits.task_limits if lim.name == name]


def test_parse_cgroup_file():
    assert parse_cgroup_file("12:pids:/docker/x\n0::/\n") == ("/", "/docker/x")
    assert parse_cgroup_file("0::/a/b\n") == ("/a/b", None)
    assert parse_cgroup_file("5:cpu,pids:/y\n") == (None, "/y")
    assert parse_cgroup_file(None) == (None, None)


def test_v1_tight():
    proc, sys_ = tree("v1_tight")
    lims = read_limits(proc, sys_, rlimits=RL)
    assert lims.cgroup_version == "v1"
    assert lims.cgroup_path_v1_pids == "/docker/abc123"
    v1 = by_name(lims, "cgroup v1 pids.max")
    assert [(lim.limit, lim.current) for lim in v1] == [(200, 40), (None, 500)]
    nproc = by_name(lims, "RLIMIT_NPROC (ulimit -u)")[0]
    assert nproc.applies and nproc.limit == 1048576 and nproc.current == 13  # uid 1000: 3 + 10 threads
    tight = lims.tightest()
    assert tight.name == "cgroup v1 pids.max" and tight.headroom == 160
    assert lims.max_map_count == 65530 and lims.maps_self == 42
    assert lims.commit_limit_kib == 8000000


def test_v2_walks_up_to_the_tightest_ancestor():
    proc, sys_ = tree("v2_tight")
    lims = read_limits(proc, sys_, rlimits=RL)
    assert lims.cgroup_version == "v2"
    v2 = by_name(lims, "cgroup v2 pids.max")
    assert [lim.headroom for lim in v2] == [None, 4036, 100]
    assert lims.tightest().headroom == 100
    assert lims.tightest().source.endswith("kubepods/pids.max")


def test_root_is_exempt_from_nproc():
    proc, sys_ = tree("v2_generous")
    lims = read_limits(proc, sys_, rlimits={"nproc": (5, 5), "stack": (None, None)}, uid=0)
    nproc = by_name(lims, "RLIMIT_NPROC (ulimit -u)")[0]
    assert nproc.status == "exempt" and not nproc.applies and nproc.headroom is None
    assert lims.tightest().headroom == 100000 - 20


def test_broken_files_degrade_to_unknown():
    proc, sys_ = tree("broken")
    lims = read_limits(proc, sys_, rlimits=RL)
    assert lims.cgroup_version == "none"
    for name in ("kernel.threads-max", "kernel.pid_max"):
        assert by_name(lims, name)[0].status == "unknown"
    assert lims.max_map_count is None and lims.commit_limit_kib is None
    nproc = by_name(lims, "RLIMIT_NPROC (ulimit -u)")[0]
    assert "unknown whether exempt" in nproc.note
    assert lims.tightest().name == "RLIMIT_NPROC (ulimit -u)"


def test_real_machine_matches_proc():
    lims = read_limits()
    soft = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    nproc = by_name(lims, "RLIMIT_NPROC (ulimit -u)")[0]
    assert nproc.limit == (None if soft == resource.RLIM_INFINITY else soft)
    assert by_name(lims, "kernel.pid_max")[0].limit == int(Path("/proc/sys/kernel/pid_max").read_text())
    assert by_name(lims, "kernel.threads-max")[0].limit == int(Path("/proc/sys/kernel/threads-max").read_text())
    assert lims.max_map_count == int(Path("/proc/sys/vm/max_map_count").read_text())
