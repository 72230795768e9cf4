"""Read every limit that caps how many threads and processes a job may start (no torch, no DeepGEMM).

A thread is a task to the kernel: ``pthread_create`` is ``clone()`` and fails with EAGAIN (Python:
``RuntimeError: can't start new thread``) when any of these is exhausted:

* RLIMIT_NPROC (``ulimit -u``): tasks of the real UID (per user namespace since Linux 5.14). The kernel skips the
  check for the root user of the initial user namespace and for tasks with CAP_SYS_RESOURCE or CAP_SYS_ADMIN
  (kernel/fork.c, copy_process), so in a plain root container it never bites.
* cgroup ``pids.max`` (v2: every level of the process's cgroup path; v1: the pids hierarchy): every task in the
  cgroup subtree, all users together. This is how docker ``--pids-limit``, podman, CRI-O ``pids_limit``, kubelet
  ``podPidsLimit`` and systemd ``TasksMax`` are enforced, and ``ulimit`` shows none of it.
* ``kernel.threads-max`` and ``kernel.pid_max``: tasks system-wide.
* ``vm.max_map_count`` (each thread stack is one more mapping, plus a guard) and, with ``vm.overcommit_memory=2``,
  the commit limit (each thread stack is committed at its full RLIMIT_STACK size).

Every root (``/proc``, ``/sys``) and the rlimits are parameters so tests can point them at synthetic trees.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

CAP_SYS_ADMIN = 21
CAP_SYS_RESOURCE = 24


@dataclass
class Limit:
    """One limit on tasks: what it is, its value and use now (None = unlimited or unknown), and whether it applies."""

    name: str
    source: str  # the file or call it was read from
    limit: int | None  # None: unlimited
    current: int | None  # tasks it counts now; None: unknown
    applies: bool = True  # False: read but does not bind this process (e.g. RLIMIT_NPROC for root)
    status: str = "ok"  # ok | unlimited | unknown | exempt
    note: str = ""

    @property
    def headroom(self) -> int | None:
        if not self.applies or self.limit is None or self.current is None:
            return None
        return self.limit - self.current


@dataclass
class Limits:
    uid: int
    tasks_self: int | None  # threads of the process itself
    task_limits: list[Limit] = field(default_factory=list)  # limits that count tasks
    max_map_count: int | None = None
    maps_self: int | None = None
    overcommit_memory: int | None = None
    overcommit_ratio: int | None = None
    commit_limit_kib: int | None = None
    committed_kib: int | None = None
    stack_bytes: int | None = None  # RLIMIT_STACK soft; a thread stack's default size
    cgroup_version: str = "none"  # v1 | v2 | hybrid | none
    cgroup_path_v2: str | None = None
    cgroup_path_v1_pids: str | None = None
    notes: list[str] = field(default_factory=list)

    def tightest(self) -> Limit | None:
        """The binding limit with the least headroom, or None when no binding limit could be read."""
        bound = [lim for lim in self.task_limits if lim.headroom is not None]
        return min(bound, key=lambda lim: lim.headroom) if bound else None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["task_limits"] = [dict(asdict(lim), headroom=lim.headroom) for lim in self.task_limits]
        tight = self.tightest()
        data["tightest"] = None if tight is None else {"name": tight.name, "headroom": tight.headroom}
        return data


# ---- small readers; every one returns None on any failure --------------------------------------------------


def read_text(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def read_int(path: Path) -> int | None:
    text = read_text(path)
    if text is None:
        return None
    try:
        return int(text.strip().split()[0])
    except (ValueError, IndexError):
        return None


def read_max(path: Path) -> tuple[bool, int | None]:
    """A pids.max-style file: (readable, value) where value None means 'max'."""
    text = read_text(path)
    if text is None:
        return False, None
    text = text.strip()
    if text == "max":
        return True, None
    try:
        return True, int(text)
    except ValueError:
        return False, None


def status_field(status_text: str | None, name: str) -> str | None:
    if status_text is None:
        return None
    for line in status_text.splitlines():
        if line.startswith(name + ":"):
            return line.split(":", 1)[1].strip()
    return None


def parse_cgroup_file(text: str | None) -> tuple[str | None, str | None]:
    """/proc/<pid>/cgroup -> (v2 path from the '0::' line, v1 path of the pids controller)."""
    v2 = v1 = None
    for line in (text or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hid, controllers, path = parts
        if hid == "0" and controllers == "":
            v2 = path.strip()
        elif "pids" in controllers.split(","):
            v1 = path.strip()
    return v2, v1


def cgroup_mounts(sys_root: Path) -> tuple[Path | None, Path | None]:
    """(the cgroup v2 mount holding the pids controller or None, the v1 pids hierarchy or None)."""
    base = sys_root / "fs" / "cgroup"
    v2 = None
    for cand in (base, base / "unified"):
        controllers = read_text(cand / "cgroup.controllers")
        if controllers is not None and "pids" in controllers.split():
            v2 = cand
            break
    v1 = None
    if (base / "pids" / "tasks").exists() or (base / "pids" / "cgroup.procs").exists():
        v1 = base / "pids"
    else:
        for entry in sorted(base.glob("*pids*")) if base.is_dir() else []:
            if entry.is_dir() and "pids" in entry.name.split(",") and (entry / "tasks").exists():
                v1 = entry
                break
    return v2, v1


def _chain(mount: Path, cg_path: str) -> list[Path]:
    """The cgroup directories from the process's own up to the mount root."""
    rel = [p for p in cg_path.strip("/").split("/") if p and p != ".."]
    out = []
    for i in range(len(rel), -1, -1):
        out.append(mount.joinpath(*rel[:i]))
    return out


def cgroup_pids_limits(mount: Path, cg_path: str, version: str) -> list[Limit]:
    out = []
    for d in _chain(mount, cg_path):
        readable, value = read_max(d / "pids.max")
        if not readable:
            if (d / "pids.max").exists():
                out.append(Limit(f"cgroup {version} pids.max", str(d / "pids.max"), None, None, status="unknown",
                                 note="unreadable or malformed"))
            continue  # the root cgroup has no pids.max
        current = read_int(d / "pids.current")
        lim = Limit(f"cgroup {version} pids.max", str(d / "pids.max"), value, current)
        if value is None:
            lim.status = "unlimited"
        elif current is None:
            lim.status = "unknown"
            lim.note = "pids.current unreadable"
        out.append(lim)
    return out


def count_user_tasks(proc_root: Path, uid: int) -> int | None:
    """Tasks (threads) of every process whose real UID is ``uid`` (what RLIMIT_NPROC counts)."""
    total, seen = 0, False
    try:
        entries = [e for e in os.listdir(proc_root) if e.isdigit()]
    except OSError:
        return None
    for entry in entries:
        text = read_text(proc_root / entry / "status")
        uids = status_field(text, "Uid")
        threads = status_field(text, "Threads")
        if uids is None or threads is None:
            continue
        seen = True
        try:
            if int(uids.split()[0]) == uid:
                total += int(threads)
        except ValueError:
            continue
    return total if seen else None


def total_tasks(proc_root: Path) -> int | None:
    """Tasks system-wide: the denominator of /proc/loadavg's 4th field."""
    text = read_text(proc_root / "loadavg")
    try:
        return int(text.split()[3].split("/")[1]) if text else None
    except (IndexError, ValueError):
        return None


def nproc_exempt(proc_root: Path, uid: int) -> tuple[bool | None, str]:
    """Whether RLIMIT_NPROC is skipped for this process (kernel/fork.c): init-namespace root, CAP_SYS_RESOURCE/ADMIN."""
    status = read_text(proc_root / "self" / "status")
    cap_eff = status_field(status, "CapEff")
    caps = None
    if cap_eff is not None:
        try:
            caps = int(cap_eff, 16)
        except ValueError:
            caps = None
    uid_map = read_text(proc_root / "self" / "uid_map")
    init_ns = None
    if uid_map is not None:
        init_ns = any(re.fullmatch(r"\s*0\s+0\s+4294967295\s*", line) for line in uid_map.splitlines())
    if init_ns is False:
        # capable() checks the initial user namespace: capabilities held inside a user namespace do not exempt
        return False, "not exempt: inside a user namespace"
    if caps is not None and caps & ((1 << CAP_SYS_RESOURCE) | (1 << CAP_SYS_ADMIN)):
        which = [n for bit, n in ((CAP_SYS_RESOURCE, "CAP_SYS_RESOURCE"), (CAP_SYS_ADMIN, "CAP_SYS_ADMIN"))
                 if caps & (1 << bit)]
        return True, f"exempt: holds {' and '.join(which)}"
    if uid == 0 and init_ns:
        return True, "exempt: root of the initial user namespace"
    if caps is None:
        return None, "unknown whether exempt (CapEff unreadable)"
    return False, ""


def _rlimit(name: str) -> tuple[int | None, int | None]:
    import resource

    soft, hard = resource.getrlimit(getattr(resource, name))
    return (None if soft == resource.RLIM_INFINITY else soft), (None if hard == resource.RLIM_INFINITY else hard)


def read_limits(proc_root: str | Path = "/proc", sys_root: str | Path = "/sys",
                rlimits: dict[str, tuple[int | None, int | None]] | None = None,
                uid: int | None = None) -> Limits:
    """Read every task limit for this process and its user.

    ``rlimits`` maps 'nproc' and 'stack' to (soft, hard) with None for unlimited; a name it lacks is read from
    this process.
    """
    proc_root, sys_root = Path(proc_root), Path(sys_root)
    rlimits = {"nproc": _rlimit("RLIMIT_NPROC"), "stack": _rlimit("RLIMIT_STACK"), **(rlimits or {})}
    status = read_text(proc_root / "self" / "status")
    if uid is None:
        uids = status_field(status, "Uid")
        uid = int(uids.split()[0]) if uids else os.getuid()
    threads = status_field(status, "Threads")
    lims = Limits(uid=uid, tasks_self=int(threads) if threads and threads.isdigit() else None)
    lims.task_limits.append(_nproc_limit(proc_root, uid, rlimits.get("nproc", (None, None))[0]))
    _read_cgroups(lims, proc_root, sys_root)
    lims.task_limits.extend(_system_limits(proc_root))
    _read_memory(lims, proc_root)
    lims.stack_bytes = rlimits.get("stack", (None, None))[0]
    return lims


def _nproc_limit(proc_root: Path, uid: int, soft: int | None) -> Limit:
    """RLIMIT_NPROC: the tasks of the user, unless the kernel exempts it."""
    user_tasks = count_user_tasks(proc_root, uid)
    exempt, why = nproc_exempt(proc_root, uid)
    lim = Limit("RLIMIT_NPROC (ulimit -u)", "getrlimit", soft, user_tasks,
                note=f"counts the tasks of uid {uid}, all its processes")
    if exempt:
        lim.applies, lim.status, lim.note = False, "exempt", f"{why}; {lim.note}"
    elif soft is None:
        lim.status = "unlimited"
    elif user_tasks is None:
        lim.status = "unknown"
    if exempt is None:
        lim.note = f"{why}; {lim.note}"
    return lim


def _read_cgroups(lims: Limits, proc_root: Path, sys_root: Path) -> None:
    """The pids limits of this process's cgroup (v2, v1 or both) and every ancestor."""
    v2_path, v1_path = parse_cgroup_file(read_text(proc_root / "self" / "cgroup"))
    v2_mount, v1_mount = cgroup_mounts(sys_root)
    versions = []
    if v2_mount is not None and v2_path is not None:
        versions.append("v2")
        lims.cgroup_path_v2 = v2_path
        lims.task_limits.extend(cgroup_pids_limits(v2_mount, v2_path, "v2"))
    if v1_mount is not None and v1_path is not None:
        versions.append("v1")
        lims.cgroup_path_v1_pids = v1_path
        lims.task_limits.extend(cgroup_pids_limits(v1_mount, v1_path, "v1"))
    lims.cgroup_version = "+".join(versions) or "none"
    if not versions:
        lims.notes.append("no cgroup pids controller found (or /proc/self/cgroup unreadable)")


def _system_limits(proc_root: Path) -> list[Limit]:
    """kernel.threads-max and kernel.pid_max against the tasks of the whole host."""
    tasks_now = total_tasks(proc_root)
    out = []
    for name, rel in (("kernel.threads-max", "sys/kernel/threads-max"), ("kernel.pid_max", "sys/kernel/pid_max")):
        value = read_int(proc_root / rel)
        lim = Limit(name, str(proc_root / rel), value, tasks_now,
                    note="tasks system-wide (all users, all containers on the host)")
        if value is None:
            lim.status = "unknown"
        elif tasks_now is None:
            lim.status = "unknown"
            lim.note = "tasks in use unknown (/proc/loadavg unreadable)"
        out.append(lim)
    return out


def _read_memory(lims: Limits, proc_root: Path) -> None:
    """Memory maps and overcommit: what a thread's stack reservation runs into once tasks are allowed."""
    lims.max_map_count = read_int(proc_root / "sys" / "vm" / "max_map_count")
    maps = read_text(proc_root / "self" / "maps")
    lims.maps_self = None if maps is None else len(maps.splitlines())
    lims.overcommit_memory = read_int(proc_root / "sys" / "vm" / "overcommit_memory")
    lims.overcommit_ratio = read_int(proc_root / "sys" / "vm" / "overcommit_ratio")
    meminfo = read_text(proc_root / "meminfo")
    for key, attr in (("CommitLimit", "commit_limit_kib"), ("Committed_AS", "committed_kib")):
        value = status_field(meminfo, key)
        if value:
            try:
                setattr(lims, attr, int(value.split()[0]))
            except ValueError:
                pass
