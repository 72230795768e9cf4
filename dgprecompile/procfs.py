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
                              int(fields[3])))
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
