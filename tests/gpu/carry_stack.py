"""The data file of a carried serving stack (issue 44 item 1: tests/gpu/stack_0523.yaml), read for
tests/gpu/carry_stack.sh, which cuts the wheels into pieces with carry_pieces.py (split/keep/join are its).

  specs             the pins, one `package==version` a line (what `fetch` asks pip for)
  check DIR         every pinned wheel is DIR/<wheel> with the data file's size and sha256 (exit 1 naming each that
                    is not); then prints the paths in the data file's order (the stream's order for split)
  installs DIR      the paths of the wheels installed into the stack's target (install: false ones are left out)
  modules           the model path's modules (model_path_modules), one a line, for `carry_stack.sh imports`
  pieces            how many pieces split cuts the data file's sizes into, and the call table (README-stack0523.md)
  tree              the working tree a call carries (tracked and untracked-not-ignored files), with one piece and the
                    margin: exit 1 when a piece + the tree + 1 MiB is over the carry limit

STACK_FILE (default: stack_0523.yaml beside this file) names the data file; CARRY_DIR (default .carry/stack) is
where split puts the pieces, so the carry paths printed are CARRY_DIR/pNN.
Exit codes: 0 done, 1 a check failed, 2 bad usage or a data file that does not hold its own schema.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # the checkout: dgprecompile's schemas
MARGIN = 1 << 20  # what the tree may grow between `tree` here and the calls


def _fail(code: int, message: str, hint: str) -> int:
    print(f"error: {message}\nhint: {hint}", file=sys.stderr)
    return code


def load(path: str | None = None) -> dict:
    path = path or os.environ.get("STACK_FILE") or os.path.join(HERE, "stack_0523.yaml")
    with open(path) as f:
        return yaml.safe_load(f)


def problems(data: dict) -> list[str]:
    """What keeps the data file from being one: its schema (dgprecompile/data/schemas/stack.json), then what a schema
    cannot say: each wheel's file is its package at its version, no wheel twice, one installed version per package.
    On the device before the stack is installed there is no jsonschema: the schema part is left to the calls here
    (fetch, split) and the tests, which run it on the same committed file."""
    try:
        from dgprecompile import schemas

        out = schemas.problems(data, "stack")
    except ImportError:
        out = []
    if out:
        return out
    seen, installed = set(), {}
    for i, entry in enumerate(data["carried"]):
        label = f"carried[{i}] ({entry['package']})"
        wheel, version = entry["wheel"], entry["version"]
        if not wheel.lower().startswith(f"{entry['package'].replace('-', '_')}-{version}-".lower()):
            out.append(f"{label}: wheel {wheel} is not {entry['package']} {version}")
        if wheel in seen:
            out.append(f"{label}: {wheel} twice")
        seen.add(wheel)
        if entry.get("install", True):
            installed.setdefault(entry["package"], []).append(version)
    return out + [f"{pkg} installed at {len(v)} versions ({', '.join(v)}): mark all but one install: false"
                  for pkg, v in installed.items() if len(v) > 1]


def piece_count(data: dict) -> int:
    total = sum(e["size"] for e in data["carried"])
    return -(-total // data["piece_bytes"])


def call_table(data: dict, carry_dir: str) -> list[str]:
    """The calls of README-stack0523.md for these sizes: one `keep` per piece; the last piece's call keeps it itself
    and installs; then the proof, carrying nothing (the machine still holds the installed stack under /tmp)."""
    n = piece_count(data)
    rows = [f"| {i} | `[\"{carry_dir}/p{i:02d}\"]` | `bash tests/gpu/carry_stack.sh keep` |" for i in range(1, n)]
    rows.append(f"| {n} | `[\"{carry_dir}/p{n:02d}\"]` | install and imports (keeps p{n:02d} itself) |")
    rows.append(f"| {n + 1} | `[]` | the proof (tests/gpu/model_proof.sh with STACK) |")
    return rows


def check(data: dict, folder: str) -> int:
    bad = []
    for entry in data["carried"]:
        path = os.path.join(folder, entry["wheel"])
        if not os.path.isfile(path):
            bad.append(f"{entry['wheel']}: missing")
            continue
        size = os.path.getsize(path)
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        if size != entry["size"] or h.hexdigest() != entry["sha256"]:
            bad.append(f"{entry['wheel']}: {size} bytes, sha256 {h.hexdigest()} (the data file: {entry['size']}, "
                       f"{entry['sha256']})")
    if bad:
        for line in bad:
            print(f"  {line}", file=sys.stderr)
        return _fail(1, f"{len(bad)} of {len(data['carried'])} wheels in {folder} are not the pinned ones",
                     "bash tests/gpu/carry_stack.sh fetch (here), or carry the pieces of one split again (there)")
    for entry in data["carried"]:
        print(os.path.join(folder, entry["wheel"]))
    return 0


def tree_bytes() -> int | None:
    """The bytes of the working tree a device call sends (tracked and untracked-not-ignored files); None where
    the working directory is not a git checkout."""
    res = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         capture_output=True)
    if res.returncode != 0:
        return None
    return sum(os.path.getsize(p) for p in res.stdout.decode().split("\0") if p and os.path.isfile(p))


def tree(data: dict) -> int:
    size = tree_bytes()
    if size is None:
        print("tree: not a git checkout here (nothing travels beside the pieces)")
        return 0
    total, limit = size + data["piece_bytes"] + MARGIN, data["carry_limit_bytes"]
    print(f"tree: {size} bytes; a piece {data['piece_bytes']} + tree + 1 MiB margin = {total} of {limit}")
    if total > limit:
        return _fail(1, f"a piece with the working tree is {total - limit} bytes over the {limit} a call carries",
                     "lower piece_bytes in the data file (and the call table of README-stack0523.md), or ignore "
                     "untracked files")
    return 0


def main(argv: list[str]) -> int:
    data = load()
    wrong = problems(data)
    if wrong:
        for line in wrong:
            print(f"  {line}", file=sys.stderr)
        return _fail(2, f"the data file does not hold its schema ({len(wrong)} problems)", "fix the data file")
    carry_dir = os.environ.get("CARRY_DIR", ".carry/stack")
    if argv == ["specs"]:
        print("\n".join(f"{e['package']}=={e['version']}" for e in data["carried"]))
    elif argv[:1] == ["check"] and len(argv) == 2:
        return check(data, argv[1])
    elif argv[:1] == ["installs"] and len(argv) == 2:
        print("\n".join(os.path.join(argv[1], e["wheel"]) for e in data["carried"] if e.get("install", True)))
    elif argv == ["modules"]:
        print("\n".join(data.get("model_path_modules", [])))
    elif argv == ["pieces"]:
        total = sum(e["size"] for e in data["carried"])
        print(f"{len(data['carried'])} wheels, {total} bytes ({total / 1e6:.1f} MB): {piece_count(data)} pieces of "
              f"at most {data['piece_bytes']} bytes: {piece_count(data)} carry calls, then the proof call")
        print("\n".join(call_table(data, carry_dir)))
    elif argv == ["tree"]:
        return tree(data)
    else:
        return _fail(2, f"unknown command: {' '.join(argv) or '(none)'}",
                     "usage: carry_stack.py specs | check DIR | installs DIR | modules | pieces | tree")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
