"""Write one device proof's record.json (dgprecompile/data/schemas/proof-record.json) from what its script printed.

usage (tests/gpu/prove.sh calls it after each step):
  python3 tests/gpu/proof_record.py --name NAME --dir STEP_OUT --out RECORD --command CMD --sglang VERSION
      [--server CMD] [--wheels DIR ...] [--rc N] --expect FAMILY=FILE:REGEX ...

A family passes when every REGEX given for it matches a line of FILE (relative to STEP_OUT); it fails when the
script ran and one does not (the record names which). The commit is DGP_GIT (the full sha the caller took with
`git rev-parse HEAD` before the tree was copied: the device's copy has no .git); without one the record's commit
is null and it proves nothing at HEAD. Standard library only: it runs on the device before anything is installed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

MAX_READ = 4 << 20  # bytes read of one output file
PACKAGES = ("torch", "triton", "transformers", "sglang", "sgl-deep-gemm", "apache-tvm-ffi", "flashinfer-python")
WHEEL = re.compile(r"^([A-Za-z0-9_.]+?)-([0-9][^-]*)-")


def out_of(*argv: str) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def machine() -> str:
    gpus = out_of("nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader")
    gpu = "; ".join(sorted(set(gpus.splitlines()))) or "no GPU"
    return f"{platform.node() or 'device'}: {gpu}; {os.cpu_count()} cores"


def versions(wheel_dirs: list[str]) -> dict[str, str]:
    """This interpreter's packages, then the wheels the step installed (their file names), then nvcc."""
    from importlib import metadata

    found = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    for folder in wheel_dirs:
        for wheel in sorted(Path(folder).glob("**/*.whl")):
            match = WHEEL.match(wheel.name)
            if match and match[1].replace("_", "-").lower() in PACKAGES:
                found[match[1].replace("_", "-").lower()] = f"{match[2]} (wheel)"
    nvcc = out_of("nvcc", "--version").splitlines()
    if nvcc:
        found["nvcc"] = nvcc[-1]
    return found


def _found(step_dir: Path, name: str, regex: str) -> str | None:
    path = step_dir / name
    text = path.read_bytes()[:MAX_READ].decode(errors="replace") if path.is_file() else ""
    return next((line for line in text.splitlines() if re.search(regex, line)), None)


def _checked(step_dir: Path, pairs: list[tuple[str, str]]) -> tuple[list[str], list[str]]:
    """(the expectations not met, each as /REGEX/ not in FILE; the lines that met the others) of (FILE, REGEX) pairs."""
    missing, seen = [], []
    for name, regex in pairs:
        hit = _found(step_dir, name, regex)
        if hit is None:
            missing.append(f"/{regex}/ not in {name}")
        else:
            seen.append(hit.strip())
    return missing, seen


def judge(step_dir: Path, expects: list[str], rc: int | None, ran: str | None = None) -> dict[str, dict[str, str]]:
    """Each family's result from its FAMILY=FILE:REGEX expectations; ``ran`` (FILE:REGEX): the line that shows the
    job itself ran. Without it every family is "not-run" (the run stopped before its checks), not "fail": a proof
    that never started the job says nothing of what the job would have compiled."""
    wanted: dict[str, list[tuple[str, str]]] = {}
    for spec in expects:
        family, _, rest = spec.partition("=")
        name, _, regex = rest.partition(":")
        wanted.setdefault(family, []).append((name, regex))
    if ran:
        name, _, regex = ran.partition(":")
        if _found(step_dir, name, regex) is None:
            why = f"the job did not run: /{regex}/ not in {name}"
            return {family: {"result": "not-run", "detail": why} for family in wanted}
    families = {}
    for family, pairs in wanted.items():
        missing, seen = _checked(step_dir, pairs)
        result = "fail" if missing else "pass"
        detail = "; ".join(missing + seen if missing else seen)
        if rc not in (None, 0):
            detail = f"script exit {rc}; {detail}"
        families[family] = {"result": result, "detail": detail[:600]}
    return families


def judge_whole(step_dir: Path, specs: list[str], families: dict[str, dict[str, str]]) -> dict[str, str] | None:
    """What the run as a whole must show beside its families' verdicts (FILE:REGEX each: e.g. no refusal outside
    every family, the launch's own exit code 0); None where none is asked or no family was judged (not run)."""
    if not specs or all(v["result"] == "not-run" for v in families.values()):
        return None
    missing, seen = _checked(step_dir, [(name, regex) for name, _, regex in (s.partition(":") for s in specs)])
    return {"result": "fail" if missing else "pass", "detail": "; ".join(missing + seen)[:600]}


def record(args) -> dict:
    commit = os.environ.get("DGP_GIT", "").strip()
    families = judge(Path(args.dir), args.expect, args.rc, args.ran)
    whole = judge_whole(Path(args.dir), args.whole, families)
    results = {v["result"] for v in families.values()} | ({whole["result"]} if whole else set())
    doc = {"schema": 1, "name": args.name,
           "commit": commit if re.fullmatch(r"[0-9a-f]{40}", commit) else None,
           "date": os.environ.get("PROVE_STEP_START") or datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "command": args.command, "machine": machine(), "versions": versions(args.wheels),
           "sglang": args.sglang, "families": families, **({"whole": whole} if whole else {}),
           "result": "fail" if "fail" in results else "pass" if "pass" in results else "not-run",
           "files": "files.tar.gz beside this record: everything the step's script wrote"}
    if doc["commit"] is None:
        doc["commit_note"] = f"DGP_GIT was {commit!r}, not a full sha: this record proves nothing at HEAD"
    if args.server:
        doc["server_command"] = args.server
    return doc


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--name", required=True)
    p.add_argument("--dir", required=True, help="the folder the step's script wrote its outputs into")
    p.add_argument("--out", required=True, help="the record.json to write")
    p.add_argument("--command", required=True)
    p.add_argument("--sglang", required=True)
    p.add_argument("--server")
    p.add_argument("--wheels", nargs="*", default=[])
    p.add_argument("--rc", type=int)
    p.add_argument("--expect", action="append", default=[], help="FAMILY=FILE:REGEX (repeatable)")
    p.add_argument("--ran", help="FILE:REGEX: the line that shows the job ran (absent: every family not-run)")
    p.add_argument("--whole", action="append", default=[],
                   help="FILE:REGEX the run as a whole must show (repeatable): a miss fails the record, not a family")
    args = p.parse_args(argv)
    doc = record(args)
    tmp = Path(args.out + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, args.out)
    print(f"{args.name}: {doc['result']} " + ", ".join(f"{f} {v['result']}" for f, v in doc["families"].items())
          + (f"; the run as a whole {doc['whole']['result']}: {doc['whole']['detail']}" if "whole" in doc else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
