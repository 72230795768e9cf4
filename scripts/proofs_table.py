"""Generate the tables of device proofs at HEAD from the records in bench/results/*/record.json.

usage:
  python scripts/proofs_table.py            # rewrite docs/proof.md's proofs block and the README's support block
  python scripts/proofs_table.py --check    # exit 1 when either block differs from what HEAD gives
  python scripts/proofs_table.py --print    # print the proofs block only

Two blocks, from one computation: docs/proof.md's full table (between its proofs markers: every row with its
record and why) and the README's compact support tables (between its support markers: one table per family,
whose rows and text come from docs/support.yaml, each row's "proven at HEAD" cell from the same cells).

One row per (sglang release, family): the rows bench/proof_families.yaml lists, then any other pair a record
names. A row's proof is the newest record (by date) for that pair whose family result is pass or fail. It holds at
HEAD only when the record names the commit that ran, that commit is an ancestor of HEAD, and no commit after it
touched the family's code or the common code (the paths in bench/proof_families.yaml:
`git log <commit>..HEAD -- <paths>`), or, where such a commit did, while a complete asks record beside it (asks.json:
every lookup the runtime made of the family in the run) holds the family's asks: tests/test_proof_asks.py holds
HEAD's plan to them on every commit, so a change that alters an ask fails there. Otherwise the row says "not proven
at HEAD" and why; with no record,
"not proven". In a shallow clone whose history does not reach a record's commit the answer is "unknown".
Exit codes: 0 ok, 1 --check found a difference, 2 a record, the families or the support file is invalid, a support
row renders wider than the README allows, or a document lacks its markers.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- proofs:begin -->", "<!-- proofs:end -->"
SUPPORT_BEGIN, SUPPORT_END = "<!-- support:begin -->", "<!-- support:end -->"
WIDTH = 120  # the README's widest line (tests/test_readme.py)
SUPPORT_KEYS = ("sglang", "release", "warmed", "limits")
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
          and isinstance(data.get("common"), list) and isinstance(data.get("rows", []), list)
          and isinstance(data.get("changed_asks", []), list)
          and all(isinstance(c, dict) and {"record", "family", "why"} <= set(c) for c in data.get("changed_asks", [])))
    if not ok:
        raise Refused(f"{path}: not a proof families file (schema 1 with common, families, rows, changed_asks)",
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
        doc["asks"] = asks_held(path.parent, doc)
        doc["changed_asks"] = {c["family"]: c["why"] for c in families.get("changed_asks", [])
                               if c["record"] == doc["name"]}
        out.append(doc)
    return out


def asks_held(folder: Path, record: dict) -> dict[str, int]:
    """family -> number of asks, for the families a complete asks record beside ``record`` in ``folder`` holds
    (asks.json or asks.json.gz: the runtime's every lookup of them in the run; tests/test_proof_asks.py holds HEAD's
    plan to each on every commit), else {}."""
    from dgprecompile import schemas
    from dgprecompile.errors import InputError
    from dgprecompile.launch.proof_asks import record_in, record_text

    path = record_in(folder)
    if path is None:
        return {}
    try:
        doc = json.loads(record_text(path))
    except (InputError, ValueError) as exc:
        raise Refused(f"{path}: not JSON: {exc}", "rewrite it (dgprecompile/data/schemas/proof-asks.json)") from exc
    problems = schemas.problems(doc, "proof-asks")
    if problems or doc["commit"] != record["commit"] or doc["sglang"] != record["sglang"]:
        raise Refused(f"{path}: {problems[0] if problems else 'not the commit or sglang of its record.json'}",
                      "fix the record (dgprecompile/data/schemas/proof-asks.json)")
    if not doc["complete"]:
        return {}
    return {fam: sum(len(v) for v in asks.values()) for fam, asks in doc["families"].items()}


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


def _outside(where: str, held: int | None, detail: str, why: str) -> Cell:
    """A record whose commit HEAD's history lacks: its complete asks still hold it (they, not the commit, are what
    tests/test_proof_asks.py holds HEAD's plan to); without asks it says nothing at HEAD."""
    if held:
        return Cell("proven", where, f"its {held} asks held at HEAD (tests/test_proof_asks.py; {why}); {detail}")
    return Cell("not proven at HEAD", where, why)


def cell(record: dict | None, family: str, paths: list[str], history: History) -> Cell:
    if record is None:
        return Cell("not proven", "-", "no record")
    commit, result = record["commit"], record["families"][family]["result"]
    where = f"`{record['name']}` at {commit[:7] if commit else '(no commit)'}"
    if not record["name"].startswith(record["date"][:10]):  # the folder's name says when it ran, or this does
        where += f", {record['date'][:10]}"
    detail = record["families"][family]["detail"]
    if result == "fail":
        return Cell("failed", where, detail)
    if family in record.get("changed_asks", {}):  # bench/proof_families.yaml changed_asks
        return Cell("not proven at HEAD", where, "its asks changed: " + record["changed_asks"][family])
    if commit is None:
        return Cell("not proven at HEAD", where, "the record names no commit: " + record.get("commit_note", ""))
    held = record.get("asks", {}).get(family)
    if not history.present(commit):
        if history.shallow:
            return Cell("unknown", where, "shallow clone: the commit is not in its history (git fetch --unshallow)")
        return _outside(where, held, detail, "the commit is not in this repository")
    ancestor = history.is_ancestor(commit)
    if ancestor is None or (ancestor is False and history.shallow):
        return Cell("unknown", where, "shallow clone: ancestry not known (git fetch --unshallow)")
    if not ancestor:
        return _outside(where, held, detail, "the commit is not an ancestor of HEAD")
    change = history.first_change(commit, paths)
    if change is not None and held:  # the run's every ask of the family, held against HEAD's plan by make test
        return Cell("proven", where, f"its {held} asks held at HEAD (tests/test_proof_asks.py; {change[0]} changed "
                    f"{change[1]} after it); {detail}")
    if change is not None:
        return Cell("not proven at HEAD", where, f"{change[0]} changed {change[1]} after it")
    return Cell("proven", where, detail)


def rows(families: dict, records: list[dict]) -> list[tuple[str, str]]:
    listed = [(str(r["sglang"]), r["family"]) for r in families.get("rows", [])]
    seen = set(listed)
    extra = sorted({(r["sglang"], f) for r in records if r["sglang"] for f, v in r["families"].items()
                    if v["result"] in JUDGED} - seen, key=lambda p: (tuple(map(int, p[0].split(".")[:3])), p[1]))
    return listed + extra


class Cells:
    """The cell of each (sglang, family), computed once for both documents."""

    def __init__(self, families: dict, records: list[dict], history: History):
        self.families, self.records, self.history, self.done = families, records, history, {}

    def paths(self, family: str) -> list[str]:
        """The code a record of ``family`` stops counting for when a later commit touches it."""
        return list(self.families["common"]) + list(self.families["families"][family]["paths"])

    def __call__(self, sglang: str, family: str) -> Cell:
        if (sglang, family) not in self.done:
            self.done[(sglang, family)] = cell(newest(self.records, sglang, family), family, self.paths(family),
                                               self.history)
        return self.done[(sglang, family)]

    def proving(self, sglang: str, family: str) -> list[str]:
        """Every record (oldest first) that proves the (sglang, family) at HEAD, where its newest one does."""
        if self(sglang, family).status != "proven":
            return []
        judged = sorted((r for r in self.records if r["sglang"] == sglang
                         and r["families"].get(family, {}).get("result") == "pass"), key=lambda r: (r["date"], r["name"]))
        return [c.record for c in (cell(r, family, self.paths(family), self.history) for r in judged)
                if c.status == "proven"]


def render(families: dict, records: list[dict], cells: Cells) -> str:
    lines = [BEGIN, "<!-- generated by `make proofs-table` (scripts/proofs_table.py) from bench/results/*/record.json"
             " and bench/proof_families.yaml: do not edit by hand -->", "",
             "| sglang | family | at HEAD | newest record | why |", "|---|---|---|---|---|"]
    for sglang, family in rows(families, records):
        c = cells(sglang, family)
        why = c.why.replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {sglang} | {family} | {c.status} | {c.record} | {why} |")
    return "\n".join(lines + ["", END])


def load_support(path: Path, families: dict) -> list[dict]:
    """docs/support.yaml: the README's tables, one per family: title, docs, rows (sglang, release, warmed, limits,
    proofs: the sglang releases whose cell of the table's family, or the row's own, says what is proven)."""
    hint = "restore it from git (git checkout -- docs/support.yaml); its format is in its header comment"
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise Refused(f"{path}: cannot be read: {exc}", hint) from exc
    tables = data.get("tables") if isinstance(data, dict) and data.get("schema") == 1 else None
    if not isinstance(tables, list) or not tables:
        raise Refused(f"{path}: not a support file (schema 1 with a list of tables)", hint)
    listed = {(str(r["sglang"]), r["family"]) for r in families.get("rows", [])}
    for n, table in enumerate(tables, 1):
        ok = (isinstance(table, dict) and isinstance(table.get("title"), str) and isinstance(table.get("docs"), list)
              and isinstance(table.get("rows"), list) and table["rows"])
        if not ok:
            raise Refused(f"{path}: table {n} needs a title, docs and rows", hint)
        for row in table["rows"]:
            family = row.get("family", table.get("family")) if isinstance(row, dict) else None
            proofs = row.get("proofs", []) if isinstance(row, dict) else None
            if (family not in families["families"] or not all(isinstance(row.get(k), str) for k in SUPPORT_KEYS)
                    or not isinstance(proofs, list) or not all(isinstance(v, str) for v in proofs)):
                raise Refused(f"{path}: table {table['title']!r}: row {row!r} needs {', '.join(SUPPORT_KEYS)} as text, "
                              "proofs as a list of releases and a family of bench/proof_families.yaml", hint)
            unlisted = [v for v in proofs if (v, family) not in listed]
            if unlisted:
                raise Refused(f"{path}: table {table['title']!r} names ({unlisted[0]}, {family}), which is not a "
                              "row of bench/proof_families.yaml", "add it to that file's rows (docs/proof.md shows them)")
    return tables


def proven(row: dict, family: str, cells: Cells) -> str:
    """One cell of a support table: each status with the releases it holds for, in the order the row lists them."""
    by_status: dict[str, list[str]] = {}
    for sglang in row.get("proofs", []):
        by_status.setdefault(cells(sglang, family).status, []).append(sglang)
    return "; ".join(f"{status}: {', '.join(versions)}" for status, versions in by_status.items()) or "-"


def render_support(tables: list[dict], cells: Cells) -> str:
    lines = [SUPPORT_BEGIN, "<!-- generated by `make proofs-table` (scripts/proofs_table.py) from docs/support.yaml: "
             "do not edit -->"]
    proving: list[str] = []  # the records behind the "proven" cells, in the order the tables name them
    for table in tables:
        links = ", ".join(f"[{Path(d).stem}]({d})" for d in table["docs"])
        lines += ["", f"**{table['title']}** (evidence: {links})", "",
                  "| sglang | release | warmed | proven at HEAD | limits |", "|---|---|---|---|---|"]
        for row in table["rows"]:
            text = [row[k] for k in SUPPORT_KEYS[:3]] + [proven(row, row.get("family", table.get("family")), cells),
                                                         row["limits"]]
            lines.append("| " + " | ".join(t.replace("|", "\\|").replace("\n", " ") for t in text) + " |")
            for sglang in row.get("proofs", []):
                proving += [r for r in cells.proving(sglang, row.get("family", table.get("family"))) if r not in proving]
        if table.get("note"):
            lines += [""] + textwrap.wrap(str(table["note"]), WIDTH, break_on_hyphens=False)
    if proving:  # each "proven" cell says which record and when it ran
        lines += [""] + textwrap.wrap("\"proven\" by: " + "; ".join(proving) + ".",
                                      WIDTH, break_on_hyphens=False)
    wide = [line for line in lines if len(line) > WIDTH]
    if wide:
        raise Refused(f"docs/support.yaml: a README line would be {len(wide[0])} characters (at most {WIDTH}): "
                      f"{wide[0][:60]}...", "shorten that text in docs/support.yaml")
    return "\n".join(lines + ["", SUPPORT_END])


def replace_block(text: str, block: str, doc: Path, markers: tuple[str, str] = (BEGIN, END)) -> str:
    begin, end = markers
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise Refused(f"{doc}: needs exactly one {begin} ... {end} block", f"put the two markers back in {doc.name}")
    head, rest = text.split(begin, 1)
    return head + block + rest.split(end, 1)[1]


def updated(args: argparse.Namespace) -> list[tuple[Path, str, str]]:
    """Each document the tables go into: its path, its text now, its text with the blocks made at HEAD."""
    families = load_families(args.repo / "bench" / "proof_families.yaml")
    records = load_records(args.repo / "bench" / "results", families)
    cells = Cells(families, records, History(args.repo))
    block = render(families, records, cells)
    support = render_support(load_support(args.support or args.repo / "docs" / "support.yaml", families), cells)
    if args.show:
        print(block)
        return []
    out = []
    for doc, new, markers in ((args.proof_doc or args.repo / "docs" / "proof.md", block, (BEGIN, END)),
                              (args.readme or args.repo / "README.md", support, (SUPPORT_BEGIN, SUPPORT_END))):
        try:
            text = doc.read_text()
        except OSError as exc:
            raise Refused(f"{doc}: cannot be read: {exc}", "restore it from git (git checkout -- <path>)") from exc
        out.append((doc, text, replace_block(text, new, doc, markers)))
    return out


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--check", action="store_true", help="only report whether a block differs (exit 1)")
    p.add_argument("--print", dest="show", action="store_true", help="print the proofs block, write nothing")
    p.add_argument("--repo", type=Path, default=REPO, help="the git repository (default: this one)")
    p.add_argument("--readme", type=Path, help="default: <repo>/README.md (the support block)")
    p.add_argument("--proof-doc", type=Path, help="default: <repo>/docs/proof.md (the proofs block)")
    p.add_argument("--support", type=Path, help="default: <repo>/docs/support.yaml")
    args = p.parse_args(argv)
    try:
        docs = updated(args)
    except Refused as exc:
        print(f"error: {exc}\nhint: {exc.hint}", file=sys.stderr)
        return 2
    if args.show:
        return 0
    if args.check:
        stale = [doc for doc, text, new in docs if new != text]
        for doc in stale:
            print(f"{doc}: the tables differ from the records at HEAD; run `make proofs-table`")
        return 1 if stale else 0
    from dgprecompile.fsutil import atomic_write_text

    for doc, text, new in docs:
        if new != text:
            atomic_write_text(doc, new)
        print(f"{doc}: {'updated' if new != text else 'unchanged'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
