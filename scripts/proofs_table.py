"""Generate the README's table of device proofs at HEAD from the records in bench/results/*/record.json.

usage:
  python scripts/proofs_table.py            # rewrite the block between the README's proofs markers
  python scripts/proofs_table.py --check    # exit 1 when the README's block differs from what HEAD gives
  python scripts/proofs_table.py --print    # print the block only

One row per (sglang release, family): the rows bench/proof_families.yaml lists, then any other pair a record
names. A row's proof is the newest record (by date) for that pair whose family result is pass or fail. It holds at
HEAD only when the record names the commit that ran, that commit is an ancestor of HEAD, and no commit after it
touched the family's code or the common code (the paths in bench/proof_families.yaml:
`git log <commit>..HEAD -- <paths>`). Otherwise the row says "not proven at HEAD" and why; with no record,
"not proven". In a shallow clone whose history does not reach a record's commit the answer is "unknown".
Exit codes: 0 ok, 1 --check found a difference, 2 a record or the families file is invalid, or the README lacks
its markers.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- proofs:begin -->", "<!-- proofs:end -->"
JUDGED = ("pass", "fail")  # a record with "not-run" for a family says nothing about it
MAX_RECORD = 1 << 20  # bytes: a record is a few kB


class Refused(Exception):
    """Bad input: one error line and a hint."""

    def __init__(self, message: str, hint: str):
        super().__init__(message)
        self.hint = hint


@dataclass(frozen=True)
class Cell:
    status: str  # proven | not proven at HEAD | failed | unknown | not proven
    record: str  # the record's folder, commit and date, or "-"
    why: str


def git(repo: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), *argv], capture_output=True, text=True, timeout=60)


def load_families(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise Refused(f"{path}: cannot be read: {exc}", "restore it from git (git checkout -- <path>)") from exc
    ok = (isinstance(data, dict) and data.get("schema") == 1 and isinstance(data.get("families"), dict)
          and isinstance(data.get("common"), list) and isinstance(data.get("rows", []), list))
    if not ok:
        raise Refused(f"{path}: not a proof families file (schema 1 with common, families, rows)",
                      "restore it from git (git checkout -- <path>)")
    return data


def load_records(results: Path, families: dict) -> list[dict]:
    from dgprecompile import schemas

    out = []
    for path in sorted(results.glob("*/record.json")):
        if path.stat().st_size > MAX_RECORD:
            raise Refused(f"{path}: larger than {MAX_RECORD} bytes", "a record is a few kB: rewrite it")
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise Refused(f"{path}: not JSON: {exc}", "rewrite it (dgprecompile/data/schemas/proof-record.json)") from exc
        problems = schemas.problems(doc, "proof-record")
        unknown = sorted(set(doc.get("families", {})) - set(families["families"])) if not problems else []
        if problems or unknown or doc["name"] != path.parent.name:
            what = (problems[0] if problems else f"unknown family {', '.join(unknown)}" if unknown
                    else f"name {doc['name']!r} is not its folder's")
            raise Refused(f"{path}: {what}", "fix the record (dgprecompile/data/schemas/proof-record.json; family "
                          "ids are the keys of bench/proof_families.yaml)")
        out.append(doc)
    return out


def newest(records: list[dict], sglang: str, family: str) -> dict | None:
    judged = [r for r in records if r["sglang"] == sglang and r["families"].get(family, {}).get("result") in JUDGED]
    return max(judged, key=lambda r: (r["date"], r["name"]), default=None)


class History:
    """What HEAD's history says about a record's commit (one repository, asked once per question)."""

    def __init__(self, repo: Path):
        self.repo = repo
        self.shallow = git(repo, "rev-parse", "--is-shallow-repository").stdout.strip() == "true"

    def present(self, commit: str) -> bool:
        return git(self.repo, "cat-file", "-e", f"{commit}^{{commit}}").returncode == 0

    def is_ancestor(self, commit: str) -> bool | None:
        rc = git(self.repo, "merge-base", "--is-ancestor", commit, "HEAD").returncode
        return {0: True, 1: False}.get(rc)

    def first_change(self, commit: str, paths: list[str]) -> tuple[str, str] | None:
        """The oldest commit after ``commit`` (up to HEAD) that touched ``paths``, and the first such path."""
        proc = git(self.repo, "log", "--reverse", "--format=%H", "--name-only", f"{commit}..HEAD", "--", *paths)
        if proc.returncode != 0:
            raise Refused(f"git log {commit[:7]}..HEAD failed: {proc.stderr.strip()}", "run it in a git clone")
        lines = [line for line in proc.stdout.splitlines() if line.strip()]
        # the sha cut here, not by git's %h, whose length depends on the clone's object count
        return (lines[0][:7], lines[1] if len(lines) > 1 else "?") if lines else None


def cell(record: dict | None, family: str, paths: list[str], history: History) -> Cell:
    if record is None:
        return Cell("not proven", "-", "no record")
    commit, result = record["commit"], record["families"][family]["result"]
    where = f"`{record['name']}` at {commit[:7] if commit else '(no commit)'}, {record['date'][:10]}"
    detail = record["families"][family]["detail"]
    if result == "fail":
        return Cell("failed", where, detail)
    if commit is None:
        return Cell("not proven at HEAD", where, "the record names no commit: " + record.get("commit_note", ""))
    if not history.present(commit):
        if history.shallow:
            return Cell("unknown", where, "shallow clone: the commit is not in its history (git fetch --unshallow)")
        return Cell("not proven at HEAD", where, "the commit is not in this repository")
    ancestor = history.is_ancestor(commit)
    if ancestor is None or (ancestor is False and history.shallow):
        return Cell("unknown", where, "shallow clone: ancestry not known (git fetch --unshallow)")
    if not ancestor:
        return Cell("not proven at HEAD", where, "the commit is not an ancestor of HEAD")
    change = history.first_change(commit, paths)
    if change is not None:
        return Cell("not proven at HEAD", where, f"{change[0]} changed {change[1]} after it")
    return Cell("proven", where, detail)


def rows(families: dict, records: list[dict]) -> list[tuple[str, str]]:
    listed = [(str(r["sglang"]), r["family"]) for r in families.get("rows", [])]
    seen = set(listed)
    extra = sorted({(r["sglang"], f) for r in records if r["sglang"] for f, v in r["families"].items()
                    if v["result"] in JUDGED} - seen, key=lambda p: (tuple(map(int, p[0].split(".")[:3])), p[1]))
    return listed + extra


def render(families: dict, records: list[dict], history: History) -> str:
    lines = [BEGIN, "<!-- generated by `make proofs-table` (scripts/proofs_table.py) from bench/results/*/record.json"
             " and bench/proof_families.yaml: do not edit by hand -->", "",
             "| sglang | family | at HEAD | newest record | why |", "|---|---|---|---|---|"]
    for sglang, family in rows(families, records):
        paths = list(families["common"]) + list(families["families"][family]["paths"])
        c = cell(newest(records, sglang, family), family, paths, history)
        why = c.why.replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {sglang} | {family} | {c.status} | {c.record} | {why} |")
    return "\n".join(lines + ["", END])


def replace_block(text: str, block: str, readme: Path) -> str:
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise Refused(f"{readme}: needs exactly one {BEGIN} ... {END} block", "put the two markers back in README.md")
    head, rest = text.split(BEGIN, 1)
    return head + block + rest.split(END, 1)[1]


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--check", action="store_true", help="only report whether the README's block differs (exit 1)")
    p.add_argument("--print", dest="show", action="store_true", help="print the generated block")
    p.add_argument("--repo", type=Path, default=REPO, help="the git repository (default: this one)")
    p.add_argument("--readme", type=Path, help="default: <repo>/README.md")
    args = p.parse_args(argv)
    readme = args.readme or args.repo / "README.md"
    try:
        families = load_families(args.repo / "bench" / "proof_families.yaml")
        block = render(families, load_records(args.repo / "bench" / "results", families), History(args.repo))
        if args.show:
            print(block)
            return 0
        text = readme.read_text()
        new = replace_block(text, block, readme)
    except Refused as exc:
        print(f"error: {exc}\nhint: {exc.hint}", file=sys.stderr)
        return 2
    if args.check:
        if new != text:
            print(f"{readme}: the proofs table differs from the records at HEAD; run `make proofs-table`")
            return 1
        return 0
    if new != text:
        from dgprecompile.fsutil import atomic_write_text

        atomic_write_text(readme, new)
    print(f"{readme}: proofs table {'updated' if new != text else 'unchanged'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
