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
        out.append(ProcStat(int(name), stat[stat.find("(") + 1:stat.rfind(")")], int(fields[1]), int(fields[2])))
    return out
