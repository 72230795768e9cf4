"""The process table from /proc: who runs, under which parent and process group (doctor, launch, tests)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ProcStat:
    pid: int
    comm: str
    ppid: int
    pgid: int
    sid: int = 0  # session
    state: str = ""  # R, S, D, Z (a zombie: exited, not yet reaped) ...


def proc_stats(proc_root: str | Path = "/proc") -> list[ProcStat]:
    """pid, command name, parent and process group of every process (empty where /proc is unreadable)."""
    root = Path(proc_root)
    try:
        names = os.listdir(root)
    except OSError:
        return []
    out = []
    for name in names:
        if not name.isdigit():
            continue
        try:
            stat = (root / name / "stat").read_bytes().decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()  # the command name may itself hold spaces and parentheses
        out.append(ProcStat(int(name), stat[stat.find("(") + 1:stat.rfind(")")], int(fields[1]), int(fields[2]),
                              int(fields[3]), fields[0]))
    return out


def job_processes(root: int, stats: list[ProcStat] | None = None) -> list[ProcStat]:
    """Every live process of the job started as ``root`` in its own session: ``root``'s descendants (those that
    started sessions of their own included, e.g. torchrun's workers) and whatever is left in its session or
    process group (a daemon whose parent exited)."""
    stats = proc_stats() if stats is None else stats
    children: dict[int, list[ProcStat]] = {}
    for st in stats:
        children.setdefault(st.ppid, []).append(st)
    found = {st.pid: st for st in stats if st.pid == root or st.sid == root or st.pgid == root}
    todo = list(found)
    while todo:
        for child in children.get(todo.pop(), []):
            if child.pid not in found:
                found[child.pid] = child
                todo.append(child.pid)
    return list(found.values())


def descendants(root: int, stats: list[ProcStat] | None = None) -> list[ProcStat]:
    """Every live descendant of ``root`` (not ``root`` itself; zombies left out: they have ended)."""
    stats = proc_stats() if stats is None else stats
    children: dict[int, list[ProcStat]] = {}
    for st in stats:
        children.setdefault(st.ppid, []).append(st)
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child.pid != root:
                todo.append(child.pid)
                if child.state != "Z":
                    out.append(child)
    return out


def command_line(pid: int, words: int = 6) -> str:
    """The first ``words`` words of ``pid``'s command line (its command name where that is empty or gone)."""
    import shlex

    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        argv = []
    if not argv:
        try:
            with open(f"/proc/{pid}/comm") as f:
                return f"[{f.read().strip()}]"
        except OSError:
            return "?"
    return shlex.join(argv[:words]) + (" ..." if len(argv) > words else "")
