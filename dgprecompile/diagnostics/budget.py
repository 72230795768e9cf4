"""repro's task budget: a cap on the tasks (threads + processes) of the ranks it starts.

A child cgroup with pids.max (v2, else v1) where this machine lets us make one, else RLIMIT_NPROC for an
unprivileged user (root is exempt from it: the ranks then run as 'nobody'). :func:`make_budget` takes the first
that works and says why each earlier one was not used; a budget removes what it made in ``cleanup``.
"""

from __future__ import annotations

import os
import pwd
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

from dgprecompile.diagnostics.limits import cgroup_mounts, count_user_tasks, parse_cgroup_file, read_text
from dgprecompile.errors import EnvironmentProblem


class Budget:
    kind = "none"

    def __init__(self, tasks_max: int):
        self.tasks_max = tasks_max

    def preexec(self) -> None:  # runs in the child between fork and exec
        pass

    def current(self) -> int | None:
        return None

    def cleanup(self) -> None:
        pass

    def describe(self) -> str:
        return self.kind


class CgroupBudget(Budget):
    def __init__(self, tasks_max: int, path: Path, version: str):
        super().__init__(tasks_max)
        self.path = path
        self.kind = f"cgroup {version} pids.max"
        self.version = version

    def create(self) -> None:
        self.path.mkdir()
        (self.path / "pids.max").write_text(f"{self.tasks_max}\n")

    def preexec(self) -> None:
        with open(self.path / "cgroup.procs", "w") as fh:
            fh.write(str(os.getpid()))

    def current(self) -> int | None:
        text = read_text(self.path / "pids.current")
        return int(text) if text and text.strip().isdigit() else None

    def members(self) -> list[int]:
        text = read_text(self.path / "cgroup.procs") or ""
        return [int(p) for p in text.split() if p.isdigit()]

    def cleanup(self) -> None:
        if not self.path.exists():
            return
        for _ in range(50):
            pids = self.members()
            if not pids:
                break
            for pid in pids:  # only processes we started (or their nvcc children) live here
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.05)
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.05)

    def describe(self) -> str:
        return f"{self.kind} = {self.tasks_max} at {self.path}"


class RlimitBudget(Budget):
    def __init__(self, tasks_max: int, user: pwd.struct_passwd | None, in_use: int):
        super().__init__(tasks_max)
        self.user = user
        self.in_use = in_use  # tasks the UID already has; RLIMIT_NPROC counts them too
        self.limit = in_use + tasks_max
        self.kind = f"RLIMIT_NPROC as {user.pw_name if user else 'this user'}"

    def preexec(self) -> None:
        if self.user is not None:
            os.setgroups([])
            os.setgid(self.user.pw_gid)
            os.setuid(self.user.pw_uid)
        resource.setrlimit(resource.RLIMIT_NPROC, (self.limit, self.limit))

    def current(self) -> int | None:
        uid = self.user.pw_uid if self.user else os.getuid()
        n = count_user_tasks(Path("/proc"), uid)
        return None if n is None else n - self.in_use

    def describe(self) -> str:
        return f"{self.kind}: {self.limit} ({self.in_use} tasks of that user already + {self.tasks_max})"


def _try_v2(mount: Path, cg_path: str, name: str, tasks_max: int, why: list[str]) -> CgroupBudget | None:
    own = mount.joinpath(*[p for p in cg_path.strip("/").split("/") if p])
    parents = [own.parent, own] if own != mount else [own]
    for parent in parents:
        ctl = parent / "cgroup.subtree_control"
        enabled = (read_text(ctl) or "").split()
        if "pids" not in enabled:
            try:
                ctl.write_text("+pids")
            except OSError as exc:
                why.append(f"cgroup v2: cannot enable pids in {ctl}: {exc.strerror or exc}")
                continue
        budget = CgroupBudget(tasks_max, parent / name, "v2")
        try:
            budget.create()
            return budget
        except OSError as exc:
            why.append(f"cgroup v2: cannot make {budget.path}: {exc.strerror or exc}")
            budget.cleanup()
    return None


def _nobody() -> pwd.struct_passwd | None:
    for name in ("nobody", "nfsnobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    return None


def make_budget(tasks_max: int, mechanism: str = "auto", sys_root: str = "/sys", proc_root: str = "/proc",
                python: str = sys.executable) -> tuple[Budget, list[str]]:
    """The first budget mechanism this machine allows, and why each earlier one was not used."""
    why: list[str] = []
    name = f"dgprecompile-repro-{os.getpid()}"
    v2_path, v1_path = parse_cgroup_file(read_text(Path(proc_root) / "self" / "cgroup"))
    v2_mount, v1_mount = cgroup_mounts(Path(sys_root))
    if mechanism in ("auto", "cgroup"):
        if v2_mount is not None and v2_path is not None:
            budget = _try_v2(v2_mount, v2_path, name, tasks_max, why)
            if budget:
                return budget, why
        if v1_mount is not None and v1_path is not None:
            parent = v1_mount.joinpath(*[p for p in v1_path.strip("/").split("/") if p])
            budget = CgroupBudget(tasks_max, parent / name, "v1")
            try:
                budget.create()
                return budget, why
            except OSError as exc:
                why.append(f"cgroup v1: cannot make {budget.path}: {exc.strerror or exc}")
                budget.cleanup()
        if v2_mount is None and v1_mount is None:
            why.append("no cgroup pids controller mounted")
    if mechanism in ("auto", "rlimit"):
        user = _nobody() if os.geteuid() == 0 else None
        if os.geteuid() == 0 and user is None:
            why.append("RLIMIT_NPROC: root is exempt and there is no 'nobody' user to run the ranks as")
        else:
            uid = user.pw_uid if user else os.getuid()
            in_use = count_user_tasks(Path(proc_root), uid) or 0
            budget = RlimitBudget(tasks_max, user, in_use)
            hard = resource.getrlimit(resource.RLIMIT_NPROC)[1]
            if user is None and hard != resource.RLIM_INFINITY and hard < budget.limit:
                why.append(f"RLIMIT_NPROC: hard limit {hard} is below {budget.limit}")
            else:
                probe = subprocess.run([python, "-c", "pass"], preexec_fn=budget.preexec, capture_output=True,
                                       text=True)
                if probe.returncode == 0:
                    return budget, why
                why.append(f"RLIMIT_NPROC as {user.pw_name if user else 'this user'}: python does not start "
                           f"({(probe.stderr.strip().splitlines() or ['exit ' + str(probe.returncode)])[-1]})")
    raise EnvironmentProblem(
        "this machine allows no task budget: " + "; ".join(why or ["no mechanism tried"]),
        hint="run as root on a machine with a writable cgroup pids controller, or where an unprivileged user "
             "can run this Python")
