"""Write one record.json per sglang release from an issue-32 run's SUMMARY.txt (tests/gpu/deepgemm_torch214_proof.sh).

usage: python3 bench/results/2026-12-02-h200-torch214-generations/torch214_records.py RESULT_DIR COMMIT DATE [COMMAND]
RESULT_DIR holds SUMMARY.txt, machine.txt and torch-check.txt as the device call returned them; each release's record
goes to bench/results/<RESULT_DIR's name>-sglang-<release>/record.json. A release passes when its cold sweep ran, its
GPU-free warm built entries and the sweep after that warm made 0 new entries (the kernel model matched every choice
and every entry the runtime looked up had the name the warm computed). Standard library only."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

LINE = re.compile(r"^(?P<dg>\S+) \(sglang (?P<sglang>[0-9.]+)\): cold (?P<cold>\d+) calls, (?P<distinct>\d+) distinct "
                  r"entries; warm rc=(?P<rc>\d+) entries=(?P<warmed>\d+); sweep after warm (?P<after>\d+|-) calls, "
                  r"(?P<new>\d+|-) new entries")


def main(argv: list[str]) -> int:
    src, commit, date = Path(argv[0]), argv[1], argv[2]
    command = argv[3] if len(argv) > 3 else ("bash tests/gpu/carry_torch.sh keep (calls 1-9), then bash tests/gpu/"
                                             "deepgemm_torch214_proof.sh 440 (tests/gpu/README-torch214.md)")
    machine = (src / "machine.txt").read_text().strip().replace("\n", "; ")
    for line in (src / "SUMMARY.txt").read_text().splitlines():
        m = LINE.match(line)
        if not m:
            continue
        ok = m["new"] == "0" and m["warmed"] != "0"
        name = f"{src.name}-sglang-{m['sglang']}"
        record = {"schema": 1, "name": name, "commit": commit, "date": date,
                  "command": command,
                  "machine": machine, "sglang": m["sglang"],
                  "versions": {"torch": "2.14.1+cu130 (carried)", "sgl-deep-gemm": m["dg"], "python": "3.12.3"},
                  "families": {"deepgemm": {"result": "pass" if ok else "fail", "detail": line[:600]}},
                  "result": "pass" if ok else "fail", "files": f"../{src.name}/ (SUMMARY.txt, results.tar.gz)"}
        out = src.parent / name / "record.json"
        out.parent.mkdir(exist_ok=True)
        out.write_text(json.dumps(record, indent=1) + "\n")
        print(out, record["result"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
