"""What a strict `launch` checks after the job, from its own records rather than the job's word.

The job can change its own environment (DGPRECOMPILE_STRICT=0, another PYTHONPATH, another cache directory) and
catch a refusal, so its exit code and variables prove nothing. These records do: the guard record each Python
process of the job wrote (and whether it says strict mode was on), the processes the launcher saw, the refusals
the guards logged, a snapshot of every area of the cache before and after the run (dgprecompile.cache.snapshot),
and what the supervisor had to end after the job's first process exited. Any of them fails the run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from dgprecompile.launch.supervise import JobWatch


def read_guards(guard: Path, watch: JobWatch) -> tuple[dict[int, str], list[str], dict[int, str]]:
    """(Python processes the launcher saw without a guard record, "pid N: why" for each guard that failed to
    install, pid -> command of each process whose guard record says strict mode was off)."""
    try:
        names = set(os.listdir(guard))
    except OSError:
        names = set()
    unguarded = watch.unguarded()
    failures, strict_off = [], {}
    for name in sorted(names):
        try:
            text = (guard / name).read_text(errors="replace").strip()
        except OSError:
            text = ""
        if name.startswith("failed-"):
            failures.append(f"pid {name[len('failed-'):]}: {text or '?'}")
            continue
        try:
            record: dict[str, Any] = json.loads(text)
        except ValueError:
            record = {}
        if record.get("strict") is not True and name.isdigit():
            argv = record.get("argv") if isinstance(record.get("argv"), list) else []
            strict_off[int(name)] = watch.python.get(int(name)) or " ".join(map(str, argv)) or "?"
    return unguarded, failures, strict_off
