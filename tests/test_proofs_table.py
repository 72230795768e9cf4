"""The device-proof tables (issue 33 item 4, issue 30 item 4): generated from bench/results/*/record.json by
scripts/proofs_table.py into docs/proof.md (every row, its record and why) and into the README's compact support
tables (docs/support.yaml's rows, their "proven at HEAD" cells from the same computation); a record proves a family
at HEAD only when it names the commit that ran and no commit after it touched the family's code
(bench/proof_families.yaml). Real git repositories throughout: this one for the committed blocks, temporary ones
(and a real shallow clone of one) for the staleness rule."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "proofs_table.py"

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def table(*argv: str, repo: Path = REPO) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, str(SCRIPT), "--repo", str(repo), *argv], capture_output=True, text=True,
                          timeout=120, env=env)


def git(repo: Path, *argv: str) -> str:
    proc = subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com",
                           "-c", "commit.gpgsign=false", *argv], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_the_committed_blocks_are_what_the_records_give_at_head():
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout: the table is made from its history")
    if git(REPO, "rev-parse", "--is-shallow-repository") == "true":
        pytest.skip("shallow clone: records' commits may lie outside its history (git fetch --unshallow)")
    proc = table("--check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # every existing result folder has its record, and every record is valid (else --check exits 2)
    folders = sorted(p.name for p in (REPO / "bench" / "results").iterdir() if p.is_dir())
    assert folders and all((REPO / "bench" / "results" / f / "record.json").is_file() for f in folders), folders


def test_families_name_paths_that_exist():
    data = yaml.safe_load((REPO / "bench" / "proof_families.yaml").read_text())
    paths = list(data["common"]) + [p for fam in data["families"].values() for p in fam["paths"]]
    missing = [p for p in paths if not (REPO / p).exists()]
    assert not missing, missing
    assert {"deepgemm", "sglang-jit", "triton-moe", "triton-host", "inductor", "flashinfer"} <= set(data["families"])
    assert {row["family"] for row in data["rows"]} <= set(data["families"])


FAMILIES = {"schema": 1, "common": ["core/"], "families": {"fam-a": {"title": "A", "paths": ["code/a.py"]},
                                                            "fam-b": {"title": "B", "paths": ["code/b.py"]}},
            "rows": [{"sglang": "0.5.14", "family": "fam-a"}, {"sglang": "0.5.14", "family": "fam-b"},
                     {"sglang": "0.5.23", "family": "fam-a"}]}
PROOF_DOC = "# t\n\nbefore\n\n<!-- proofs:begin -->\n<!-- proofs:end -->\n\nafter\n"
README = "# r\n\n<!-- support:begin -->\n<!-- support:end -->\n\nend\n"
SUPPORT = {"schema": 1, "tables": [
    {"title": "Family A", "family": "fam-a", "docs": ["docs/a.md"], "note": "A note.", "rows": [
        {"sglang": "0.5.14-0.5.16", "release": "a 1.0", "warmed": "GPU-free", "limits": "-", "proofs": ["0.5.14"]},
        {"sglang": "0.5.20-0.5.23", "release": "a 2.0", "warmed": "GPU-free", "limits": "none", "proofs": ["0.5.23"]},
        {"sglang": "0.5.0", "release": "b", "warmed": "no", "limits": "-", "family": "fam-b", "proofs": ["0.5.14"]},
        {"sglang": "all", "release": "none", "warmed": "-", "limits": "-"}]}]}


def record(name: str, commit: str | None, results: dict[str, str], date: str = "2026-12-02T01:00:00Z") -> dict:
    return {"schema": 1, "name": name, "commit": commit, "date": date, "command": "bash tests/gpu/prove.sh",
            "machine": "test", "versions": {"torch": "2.11.0"}, "sglang": "0.5.14",
            "families": {f: {"result": r, "detail": f"{f} {r}"} for f, r in results.items()},
            "result": "fail" if "fail" in results.values() else "pass"}


def write(repo: Path, rel: str, text: str) -> None:
    path = repo / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def commit_all(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def add_record(repo: Path, doc: dict) -> str:
    write(repo, f"bench/results/{doc['name']}/record.json", json.dumps(doc))
    return commit_all(repo, f"record {doc['name']}")


def support_rows(repo: Path) -> dict[str, str]:
    """The README's support tables: each row's sglang cell -> its "proven at HEAD" cell."""
    out = {}
    for line in (repo / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if line.startswith("| ") and len(cells) == 5 and cells[0] != "sglang":
            out[cells[0]] = cells[3]
    return out


def rows_of(repo: Path) -> dict[tuple[str, str], list[str]]:
    proc = table("--print", repo=repo)
    assert proc.returncode == 0, proc.stderr
    out = {}
    for line in proc.stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if len(cells) == 5 and cells[0][:1].isdigit():
            out[(cells[0], cells[1])] = cells[2:]
    return out


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "repo"
    r.mkdir()
    git(r, "init", "-q", "-b", "main")
    write(r, "bench/proof_families.yaml", yaml.safe_dump(FAMILIES))
    write(r, "docs/proof.md", PROOF_DOC)
    write(r, "README.md", README)
    write(r, "docs/support.yaml", yaml.safe_dump(SUPPORT))
    write(r, "code/a.py", "a = 1\n")
    write(r, "code/b.py", "b = 1\n")
    write(r, "core/c.py", "c = 1\n")
    write(r, "other.txt", "x\n")
    return r


def test_a_later_change_to_a_familys_code_makes_its_proof_stale(repo: Path):
    ran = commit_all(repo, "the tree the device ran")
    add_record(repo, record("run1", ran, {"fam-a": "pass", "fam-b": "pass"}))
    rows = rows_of(repo)
    assert rows[("0.5.14", "fam-a")][0] == "proven" and rows[("0.5.14", "fam-b")][0] == "proven", rows
    assert f"`run1` at {ran[:7]}" in rows[("0.5.14", "fam-a")][1]
    assert rows[("0.5.23", "fam-a")] == ["not proven", "-", "no record"]
    write(repo, "other.txt", "y\n")  # outside every family: nothing changes
    commit_all(repo, "docs")
    assert rows_of(repo)[("0.5.14", "fam-a")][0] == "proven"
    write(repo, "code/a.py", "a = 2\n")
    change = commit_all(repo, "change a")
    rows = rows_of(repo)
    assert rows[("0.5.14", "fam-a")] == ["not proven at HEAD", f"`run1` at {ran[:7]}, 2026-12-02",
                                         f"{change[:7]} changed code/a.py after it"], rows
    assert rows[("0.5.14", "fam-b")][0] == "proven"  # b's code did not change
    assert table(repo=repo).returncode == 0
    support = support_rows(repo)  # the README says the same as docs/proof.md, row by row
    assert support["0.5.14-0.5.16"] == "not proven at HEAD: 0.5.14" and support["0.5.0"] == "proven: 0.5.14", support
    assert support["0.5.20-0.5.23"] == "not proven: 0.5.23" and support["all"] == "-", support
    write(repo, "core/c.py", "c = 2\n")  # common code: every family's proof
    common = commit_all(repo, "change core")
    assert rows_of(repo)[("0.5.14", "fam-b")][2] == f"{common[:7]} changed core/c.py after it"


def test_a_complete_asks_record_keeps_the_proof_past_a_change_and_a_partial_one_does_not(repo: Path):
    """A family whose every ask in the run is recorded (asks.json, complete) stays proven after its code changes:
    tests/test_proof_asks.py holds HEAD's plan to the asks; a partial record (the deleted-entry run's victims) does
    not; an asks record of another commit is refused."""
    ran = commit_all(repo, "the tree the device ran")
    asks = {"format": "dgprecompile-proof-asks", "schema": 1, "name": "run1", "commit": ran,
            "date": "2026-12-02T01:00:00Z", "command": "bash tests/gpu/model_proof.sh", "device_s": 300,
            "complete": True, "how": "t", "server_command": "python -m sglang.launch_server --model-path m",
            "config": "config.json", "sglang": "0.5.14", "environment": {"gpu": "g", "versions": {}},
            "families": {"fam-a": {"entries": ["e1", "e2"]}}}
    write(repo, "bench/results/run1/asks.json", json.dumps(asks))
    add_record(repo, record("run1", ran, {"fam-a": "pass", "fam-b": "pass"}))
    write(repo, "code/a.py", "a = 2\n")
    write(repo, "code/b.py", "b = 2\n")
    change = commit_all(repo, "change a and b")
    rows = rows_of(repo)
    assert rows[("0.5.14", "fam-a")][0] == "proven", rows
    assert rows[("0.5.14", "fam-a")][2].startswith(f"its 2 asks held at HEAD (tests/test_proof_asks.py; {change[:7]}")
    assert rows[("0.5.14", "fam-b")][0] == "not proven at HEAD"  # no asks of it were recorded
    # asks HEAD no longer makes on purpose (bench/proof_families.yaml changed_asks): that family says why
    write(repo, "bench/proof_families.yaml", yaml.safe_dump({**FAMILIES, "changed_asks": [
        {"record": "run1", "family": "fam-a", "why": "launch now sets X"}]}))
    commit_all(repo, "an ask changed")
    assert rows_of(repo)[("0.5.14", "fam-a")] == ["not proven at HEAD", f"`run1` at {ran[:7]}, 2026-12-02",
                                                  "its asks changed: launch now sets X"]
    write(repo, "bench/proof_families.yaml", yaml.safe_dump({**FAMILIES, "changed_asks": [{"record": "run1"}]}))
    commit_all(repo, "a changed ask without its family")
    assert table("--print", repo=repo).returncode == 2
    write(repo, "bench/proof_families.yaml", yaml.safe_dump(FAMILIES))
    write(repo, "bench/results/run1/asks.json", json.dumps({**asks, "complete": False}))
    commit_all(repo, "partial")
    assert rows_of(repo)[("0.5.14", "fam-a")][0] == "not proven at HEAD"
    write(repo, "bench/results/run1/asks.json", json.dumps({**asks, "commit": "b" * 40}))
    commit_all(repo, "another commit's asks")
    proc = table("--print", repo=repo)
    assert proc.returncode == 2 and "not the commit or sglang of its record.json" in proc.stderr


def test_complete_asks_hold_a_record_whose_commit_is_in_no_history(repo: Path):
    """A run whose commit never reached main (a session that ended unsubmitted): its complete asks still hold the
    family at HEAD and the cell says the commit is missing; a family it has no asks of is not proven at HEAD."""
    commit_all(repo, "base")
    lost = "c" * 40
    asks = {"format": "dgprecompile-proof-asks", "schema": 1, "name": "lost", "commit": lost,
            "date": "2026-12-02T01:00:00Z", "command": "bash tests/gpu/model_proof.sh", "device_s": 300,
            "complete": True, "how": "t", "server_command": "python -m sglang.launch_server --model-path m",
            "config": "config.json", "sglang": "0.5.14", "environment": {"gpu": "g", "versions": {}},
            "families": {"fam-a": {"entries": ["e1"]}}}
    write(repo, "bench/results/lost/asks.json", json.dumps(asks))
    add_record(repo, record("lost", lost, {"fam-a": "pass", "fam-b": "pass"}))
    rows = rows_of(repo)
    assert rows[("0.5.14", "fam-a")][0] == "proven", rows
    assert rows[("0.5.14", "fam-a")][2].startswith("its 1 asks held at HEAD (tests/test_proof_asks.py; the commit is "
                                                   "not in this repository)")
    assert rows[("0.5.14", "fam-b")][::2] == ["not proven at HEAD", "the commit is not in this repository"]


def test_the_readme_names_every_record_behind_a_proven_cell_and_when_it_ran(repo: Path):
    """Two runs (two server commands) with complete asks both hold the row after its code changes: the README names
    both, with commit and date; a record that no longer proves (no asks, code changed) is not named."""
    ran = commit_all(repo, "the tree the device ran")
    for name, date in (("run-480b", "2026-12-02T01:00:00Z"), ("run-dsv3", "2026-12-03T01:00:00Z")):
        write(repo, f"bench/results/{name}/asks.json", json.dumps({
            "format": "dgprecompile-proof-asks", "schema": 1, "name": name, "commit": ran, "date": date,
            "command": "bash tests/gpu/model_proof.sh", "device_s": 300, "complete": True, "how": "t",
            "server_command": "python -m sglang.launch_server --model-path m", "config": "config.json",
            "sglang": "0.5.14", "environment": {"gpu": "g", "versions": {}}, "families": {"fam-a": {"entries": ["e"]}}}))
        add_record(repo, record(name, ran, {"fam-a": "pass"}, date=date))
    add_record(repo, record("run-old", ran, {"fam-a": "pass"}, date="2026-12-01T00:00:00Z"))
    write(repo, "code/a.py", "a = 2\n")
    commit_all(repo, "change a")
    assert table(repo=repo).returncode == 0
    readme = " ".join((repo / "README.md").read_text().split())
    assert (f"\"proven\" by: `run-480b` at {ran[:7]}, 2026-12-02; `run-dsv3` at {ran[:7]}, 2026-12-03."
            in readme), readme
    assert "run-old" not in readme

def test_the_newest_record_decides_and_a_record_must_name_an_ancestor(repo: Path):
    base = commit_all(repo, "base")
    add_record(repo, record("old", base, {"fam-a": "pass", "fam-b": "pass"}, date="2026-12-01T00:00:00Z"))
    add_record(repo, record("new", base, {"fam-a": "fail", "fam-b": "not-run"}))
    add_record(repo, record("nocommit", None, {"fam-a": "pass"}, date="2026-12-03T00:00:00Z") | {"sglang": "0.5.23"})
    git(repo, "checkout", "-q", "-b", "side")
    write(repo, "other.txt", "side\n")
    side = commit_all(repo, "a commit HEAD does not contain")
    git(repo, "checkout", "-q", "main")
    rows = rows_of(repo)
    assert rows[("0.5.14", "fam-a")][:2] == ["failed", f"`new` at {base[:7]}, 2026-12-02"]
    assert rows[("0.5.14", "fam-b")][0] == "proven"  # "not-run" says nothing: the older pass stands
    assert rows[("0.5.23", "fam-a")][0] == "not proven at HEAD" and "names no commit" in rows[("0.5.23", "fam-a")][2]
    add_record(repo, record("elsewhere", side, {"fam-b": "pass"}, date="2026-12-04T00:00:00Z"))
    assert rows_of(repo)[("0.5.14", "fam-b")][::2] == ["not proven at HEAD", "the commit is not an ancestor of HEAD"]


def test_check_mode_and_a_shallow_clone(repo: Path, tmp_path: Path):
    ran = commit_all(repo, "ran")
    add_record(repo, record("run1", ran, {"fam-a": "pass"}))
    assert table("--check", repo=repo).returncode == 1  # both blocks are still empty
    proc = table(repo=repo)
    assert proc.returncode == 0 and proc.stdout.count("updated") == 2, proc.stdout + proc.stderr
    text = (repo / "docs" / "proof.md").read_text()
    assert text.startswith("# t\n\nbefore\n\n<!-- proofs:begin -->") and text.endswith("<!-- proofs:end -->\n\nafter\n")
    assert "| 0.5.14 | fam-a | proven |" in text
    readme = (repo / "README.md").read_text()
    assert readme.startswith("# r\n\n<!-- support:begin -->") and readme.endswith("<!-- support:end -->\n\nend\n")
    assert "**Family A** (evidence: [a](docs/a.md))" in readme and "\nA note.\n" in readme
    assert "| 0.5.14-0.5.16 | a 1.0 | GPU-free | proven: 0.5.14 | - |" in readme
    assert table("--check", repo=repo).returncode == 0
    write(repo, "README.md", readme.replace("proven: 0.5.14", "proven: 0.5.15"))  # a hand edit of the README only
    assert table("--check", repo=repo).returncode == 1
    assert table(repo=repo).returncode == 0 and table("--check", repo=repo).returncode == 0
    commit_all(repo, "table")
    shallow = tmp_path / "shallow"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{repo}", str(shallow)], check=True, timeout=60)
    rows = rows_of(shallow)
    assert rows[("0.5.14", "fam-a")][0] == "unknown" and "shallow clone" in rows[("0.5.14", "fam-a")][2], rows


@pytest.mark.parametrize("breakage, message", [
    (lambda d: d.pop("commit"), "missing commit"),
    (lambda d: d.update(commit="abc123"), "commit"),
    (lambda d: d["families"].update({"nosuch": {"result": "pass", "detail": "x"}}), "unknown family nosuch"),
    (lambda d: d["families"]["fam-a"].update(result="ok"), "is not one of"),
])
def test_an_invalid_record_is_refused_with_one_error_and_the_readme_untouched(repo: Path, breakage, message):
    ran = commit_all(repo, "ran")
    doc = record("run1", ran, {"fam-a": "pass"})
    breakage(doc)
    add_record(repo, doc)
    refused_untouched(repo, message)


def refused_untouched(repo: Path, message: str) -> None:
    before = [(repo / doc).read_bytes() for doc in ("README.md", "docs/proof.md")]
    proc = table(repo=repo)
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert [line for line in lines if line.startswith("error:")] == lines[:1] and message in lines[0], lines
    assert lines[1].startswith("hint: ") and len(lines) == 2, lines
    assert [(repo / doc).read_bytes() for doc in ("README.md", "docs/proof.md")] == before


@pytest.mark.parametrize("breakage, message", [
    (lambda s: s["tables"][0]["rows"][0].update(proofs=["0.5.99"]), "(0.5.99, fam-a), which is not a row"),
    (lambda s: s["tables"][0]["rows"][0].update(proofs="0.5.14"), "proofs as a list"),
    (lambda s: s["tables"][0]["rows"][0].update(family="nosuch"), "a family of bench/proof_families.yaml"),
    (lambda s: s["tables"][0]["rows"][0].pop("limits"), "needs sglang, release, warmed, limits"),
    (lambda s: s["tables"][0]["rows"][0].update(limits="x" * 120), "characters (at most 120)"),
    (lambda s: s["tables"][0].pop("rows"), "needs a title, docs and rows"),
])
def test_an_invalid_support_file_is_refused_with_both_documents_untouched(repo: Path, breakage, message):
    commit_all(repo, "ran")
    support = json.loads(json.dumps(SUPPORT))
    breakage(support)
    write(repo, "docs/support.yaml", yaml.safe_dump(support))
    refused_untouched(repo, message)


def test_a_document_without_its_markers_is_refused(repo: Path):
    commit_all(repo, "ran")
    write(repo, "README.md", "# r\n\nno markers\n")
    refused_untouched(repo, "README.md: needs exactly one <!-- support:begin --> ... <!-- support:end --> block")


PROVE = REPO / "tests" / "gpu" / "prove.sh"
# each step of prove.sh against the outputs its script left in a committed result folder (real device output)
STEP_OUTPUTS = [("headline", "2026-12-01-h200-headline", {"deepgemm", "sglang-jit", "triton-host"}),
                ("triton-plan", "2026-12-02-h200-triton-plan", {"triton-moe"}),
                ("triton-moe-0523", "2026-12-02-h200-triton-moe-0523", {"triton-moe"}),
                ("live", "2026-12-01-h200-R11-run2", {"deepgemm", "sglang-jit"}),
                ("gen-sk-0.3.21-src", "2026-12-01-h200-sk0321-src", {"deepgemm"})]


def prove_record(step: str, folder: Path, out: Path, dgp_git: str = "a" * 40) -> dict:
    expects = subprocess.run(["bash", str(PROVE), "expect", step], capture_output=True, text=True, timeout=60,
                             check=True).stdout.splitlines()
    assert expects, step
    argv = [sys.executable, str(REPO / "tests" / "gpu" / "proof_record.py"), "--name", folder.name, "--dir",
            str(folder), "--out", str(out), "--command", f"bash tests/gpu/prove.sh {step}", "--sglang", "0.5.14",
            "--rc", "0"] + [a for e in expects for a in ("--expect", e)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, env={**os.environ, "DGP_GIT": dgp_git})
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text())


@pytest.mark.parametrize("step, folder, families", STEP_OUTPUTS)
def test_prove_steps_judge_their_scripts_real_output(step, folder, families, tmp_path):
    from dgprecompile import schemas

    doc = prove_record(step, REPO / "bench" / "results" / folder, tmp_path / "record.json")
    assert schemas.problems(doc, "proof-record") == []
    assert doc["commit"] == "a" * 40 and doc["result"] == "pass", doc
    assert set(doc["families"]) == families and all(v["result"] == "pass" for v in doc["families"].values())


def test_a_model_proof_whose_job_never_ran_is_not_run_not_failed(tmp_path):
    """sglang 0.5.23's 480B proof on the H200 (real output): the stack warmed and verified, but the model driver died
    before its first call; with model_proof.sh's --ran line every family is "not-run" (no verdict on the product),
    and the same output with that line present is judged family by family."""
    src = REPO / "bench" / "results" / "2026-12-05-h200-model-480b-0523"
    ran = "summary.txt:^driver: [1-9][0-9]* modules"
    expects = [f"{f}=summary.txt:^family {f}: refused 0, new 0$" for f in ("deepgemm", "triton-moe")]
    argv = [sys.executable, str(REPO / "tests" / "gpu" / "proof_record.py"), "--name", src.name, "--command", "c",
            "--sglang", "0.5.23", "--ran", ran] + [a for e in expects for a in ("--expect", e)]
    folder = tmp_path / src.name
    shutil.copytree(src, folder)
    for text, want in (((folder / "summary.txt").read_text(), "not-run"),
                       ((folder / "summary.txt").read_text().replace("driver: 0 modules", "driver: 26 modules"), "pass")):
        (folder / "summary.txt").write_text(text)
        proc = subprocess.run(argv + ["--dir", str(folder), "--out", str(tmp_path / "r.json")], capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        doc = json.loads((tmp_path / "r.json").read_text())
        assert doc["result"] == want and {v["result"] for v in doc["families"].values()} == {want}, doc


def test_a_proof_whose_check_did_not_hold_is_a_failed_record(tmp_path):
    src = REPO / "bench" / "results" / "2026-12-02-h200-triton-plan"
    folder = tmp_path / src.name
    shutil.copytree(src, folder)
    text = (folder / "summary.txt").read_text()
    assert "strict-deleted rc=1\n" in text
    (folder / "summary.txt").write_text(text.replace("strict-deleted rc=1\n", "strict-deleted rc=0\n"))
    doc = prove_record("triton-plan", folder, tmp_path / "record.json", dgp_git="not-a-sha")
    assert doc["result"] == "fail" and doc["families"]["triton-moe"]["result"] == "fail"
    assert "strict-deleted rc=1" in doc["families"]["triton-moe"]["detail"]
    assert doc["commit"] is None and "not-a-sha" in doc["commit_note"]
    # a run whose outputs did not come back (the 2026-12-01 jit_live_proof.sh call lost logs.txt to the 8-file limit)
    doc = prove_record("sglang-jit", REPO / "bench" / "results" / "2026-12-01-h200-sglang-jit", tmp_path / "r2.json")
    assert doc["families"]["sglang-jit"]["result"] == "fail" and "not in logs.txt" in doc["families"]["sglang-jit"]["detail"]


def test_prove_refuses_without_the_commit_and_names_its_steps():
    env = {k: v for k, v in os.environ.items() if k != "DGP_GIT"}
    proc = subprocess.run(["bash", str(PROVE), "headline"], capture_output=True, text=True, timeout=60, env=env,
                          cwd=REPO)
    assert proc.returncode == 2 and proc.stderr.splitlines()[0].startswith("error: DGP_GIT"), proc.stderr
    assert proc.stderr.splitlines()[1].startswith("hint: ") and len(proc.stderr.splitlines()) == 2
    proc = subprocess.run(["bash", str(PROVE), "nosuch"], capture_output=True, text=True, timeout=60, cwd=REPO,
                          env={**os.environ, "DGP_GIT": "b" * 40})
    assert proc.returncode == 2 and "no step 'nosuch'" in proc.stderr
    listed = subprocess.run(["bash", str(PROVE), "list"], capture_output=True, text=True, timeout=60, cwd=REPO,
                            check=True).stdout
    for script in ("headline", "sglang-jit", "live", "triton-plan", "triton-moe-0523", "gen-0.1.3", "model-480b"):
        assert f"\n{script} " in "\n" + listed, listed


def test_a_refusal_outside_every_family_or_a_failed_launch_fails_the_run_not_a_family(tmp_path):
    """sglang 0.5.23's DeepSeek-V3 on the H100 (real output): every planned family 0 refused, but the launch refused
    one unplanned Triton kernel (`family other: refused 9`) and exited 1; model_proof.sh's --whole lines make that
    the record's result while each family keeps its own verdict; the same output with neither is a pass."""
    from dgprecompile import schemas

    src = REPO / "bench" / "results" / "2026-12-06-h100-model-dsv3-0523"
    folder = tmp_path / src.name
    shutil.copytree(src, folder)
    argv = [sys.executable, str(REPO / "tests" / "gpu" / "proof_record.py"), "--name", src.name, "--command", "c",
            "--sglang", "0.5.23", "--dir", str(folder), "--out", str(tmp_path / "r.json"),
            "--ran", "summary.txt:^driver: [1-9][0-9]* modules",
            "--expect", "deepgemm=summary.txt:^family deepgemm: refused 0, new 0$",
            "--whole", "summary.txt:^family other: refused 0, new 0$", "--whole", "summary.txt:^strict proof rc=0$"]
    text = (folder / "summary.txt").read_text()
    fixed = text.replace("family other: refused 9, new 0", "family other: refused 0, new 0").replace(
        "strict proof rc=1", "strict proof rc=0")
    for summary, want in ((text, "fail"), (fixed, "pass")):
        (folder / "summary.txt").write_text(summary)
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        doc = json.loads((tmp_path / "r.json").read_text())
        assert schemas.problems(doc, "proof-record") == []
        assert doc["families"]["deepgemm"]["result"] == "pass"
        assert doc["result"] == doc["whole"]["result"] == want, doc
    assert "refused 0" in doc["whole"]["detail"] and "rc=0" in doc["whole"]["detail"]
