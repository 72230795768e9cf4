"""The local cache index (<cache>/dgprecompile/index.json) is checked against the index schema, as an artifact's
is: an entry that is a number, `kernels` or `extra` as a list, a list for the whole document: one `error:` line
naming the file and the field, a hint to rebuild it, exit 1 (a check failed), in every command that reads it;
never an AttributeError (issue 29 item 6)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import REPO
from helpers import LEGACY_NVCC, PLAN, tree_hash, warm_once
from test_input_schemas import cli

from dgprecompile.cli.main import cli as main_cli

MANIFEST = REPO / "shapes" / "Qwen3-Coder-480B-A35B-Instruct-FP8.tp8.ep8.sglang-0.5.0-0.5.1.auto.yaml"

DAMAGED = {
    "entry-a-number": ({"schema": 1, "fingerprint": {}, "kernels": {"k1": 5}}, "kernels.k1: 5 is not an object"),
    "kernels-a-list": ({"schema": 1, "fingerprint": {}, "kernels": []}, "kernels: [] is not an object"),
    "extra-a-list": ({"schema": 1, "fingerprint": {}, "kernels": {}, "extra": [1]}, "extra: [1] is not an object"),
    "files-a-list": ({"schema": 1, "fingerprint": {}, "kernels": {"k1": {"entry": "e", "files": [], "bytes": 1}}},
                     "kernels.k1.files: [] is not an object"),
    "a-list": ([1, 2], "(the document): [1, 2] is not an object"),
}


def refused(proc, *words: str, code: int) -> None:
    """Exit ``code``, no traceback, exactly one `error:` line (after any progress line) and a `hint:`."""
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "AttributeError" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert sum(x.startswith("error: ") for x in lines) == 1, proc.stderr
    assert any(x.startswith("hint: ") for x in lines), proc.stderr
    for w in words:
        assert w in proc.stderr, proc.stderr


def damaged_cache(root: Path, doc) -> Path:
    (root / "dgprecompile").mkdir(parents=True)
    (root / "dgprecompile" / "index.json").write_text(json.dumps(doc))
    return root


def commands(cache: Path, tmp_path: Path) -> dict[str, list[str]]:
    return {
        "verify": ["verify", "--manifest", str(MANIFEST), "--cache-dir", str(cache)],
        "warm": ["warm", "--manifest", str(MANIFEST), "--cache-dir", str(cache), "--nvcc", LEGACY_NVCC],
        "pack": ["pack", "--manifest", str(MANIFEST), "--cache-dir", str(cache), "-o", str(tmp_path / "a.tar.gz")],
        "launch": ["launch", "--manifest", str(MANIFEST), "--cache-dir", str(cache), "--",
                   sys.executable, "-c", f"open({str(tmp_path / 'ran')!r}, 'w')"],
    }


@pytest.mark.parametrize("command", ["verify", "warm", "pack", "launch"])
@pytest.mark.parametrize("damage", sorted(DAMAGED))
def test_a_damaged_local_index_is_one_error(tmp_path, command, damage):
    doc, words = DAMAGED[damage]
    cache = damaged_cache(tmp_path / "cache", doc)
    before = tree_hash(cache)
    refused(cli(*commands(cache, tmp_path)[command]), f"{cache}/dgprecompile/index.json is damaged", words,
            "hint: move it away and run `dgprecompile warm` again", code=1)
    assert tree_hash(cache) == before
    assert not (tmp_path / "ran").exists() and not (tmp_path / "a.tar.gz").exists()


def test_an_index_of_another_schema_version_is_still_named_so(tmp_path):
    cache = damaged_cache(tmp_path / "cache", {"schema": 2, "kernels": []})
    refused(cli(*commands(cache, tmp_path)["verify"]), "index schema 2 is not 1", code=2)


@pytest.mark.nvcc
@pytest.mark.parametrize("damage", ["entry-a-number", "extra-a-list"])
def test_unpack_into_a_cache_with_a_damaged_index_changes_nothing(tmp_path_factory, tmp_path, damage):
    warmed = warm_once(tmp_path_factory)
    artifact = tmp_path / "a.tar.gz"
    res = CliRunner().invoke(main_cli, ["pack", *PLAN, "--cache-dir", str(warmed), "-o", str(artifact)],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    target = tmp_path / "target"
    shutil.copytree(warmed, target)
    (target / "dgprecompile" / "index.json").write_text(json.dumps(DAMAGED[damage][0]))
    before = tree_hash(target)
    refused(cli("unpack", str(artifact), "--cache-dir", str(target)), "index.json is damaged", DAMAGED[damage][1],
            code=1)
    assert tree_hash(target) == before
