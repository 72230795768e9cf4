"""The heaviest test files first, and each file's seconds at the end of the run.

`make test` runs one file per worker (xdist's loadfile) and hands the files out in collection order
(--no-loadscope-reorder; xdist's own reorder puts the files with the most tests first, which sent the files with a
four-minute build and few tests to the end, where one worker ran them while the other had nothing left). So the
collection is ordered by each file's measured seconds, longest first (tests/data/file_seconds.json), the files not
listed after them in their own order; a test's order inside its file is kept. The run's own per-file seconds are
printed at its end (the slowest), and written as that data file's JSON where DGP_FILE_SECONDS names a path, so the
order can be refreshed from a CI run. Loaded by tests/conftest.py.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

DATA = Path(__file__).parent / "data" / "file_seconds.json"
SHOWN = 12  # files in the run's closing list
_seconds: dict[str, float] = defaultdict(float)


def measured() -> dict[str, float]:
    return json.loads(DATA.read_text())["seconds"]


def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def pytest_collection_modifyitems(config, items):
    seconds = measured()
    items.sort(key=lambda item: -seconds.get(_file(item.nodeid), 0.0))  # stable: unlisted files keep their order


def pytest_runtest_logreport(report):
    _seconds[_file(report.nodeid)] += report.duration


def pytest_terminal_summary(terminalreporter):
    if not _seconds:
        return
    ranked = sorted(_seconds.items(), key=lambda kv: -kv[1])
    terminalreporter.write_sep("=", f"slowest {min(SHOWN, len(ranked))} files (seconds, setup to teardown)")
    for name, secs in ranked[:SHOWN]:
        terminalreporter.write_line(f"{secs:8.1f}  {name}")
    target = os.environ.get("DGP_FILE_SECONDS")
    if target:
        body = {"measured": "per-file seconds of one `make test` run (tests/file_order.py)",
                "seconds": {name: round(secs, 1) for name, secs in ranked}}
        Path(target).write_text(json.dumps(body, indent=1) + "\n")
