"""The CI examples users copy into their pipelines: valid GitHub workflows, and clean under zizmor.

Both tools are real, installed from PyPI by `make setup` (the `test` extra), and run offline: check-jsonschema
against its vendored GitHub-workflow schema, zizmor with its online audits off, at the pedantic persona (every
finding the default persona reports and more). Each tool is also shown a bad workflow, so a silent tool cannot
pass these tests.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
WORKFLOWS = sorted((REPO / "examples" / "ci").glob("*.yml"))


def tool(name: str) -> str:
    path = shutil.which(name, path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    if path is None:
        pytest.skip(f"{name} is not installed (pip install -e '.[test]'; make setup installs the test extra)")
    return path


def run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env={**os.environ, "NO_COLOR": "1"})


def test_there_are_examples():
    names = {p.name for p in WORKFLOWS}
    assert {"deepgemm-cache.yml", "deepgemm-cache-s3.yml"} <= names


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_schema(workflow):
    res = run(tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(workflow))
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_zizmor_finds_nothing(workflow):
    res = run(tool("zizmor"), "--offline", "--persona", "pedantic", str(workflow))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "No findings" in res.stdout + res.stderr


def test_the_tools_do_fail_on_a_bad_workflow(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text("name: bad\non: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n"
                   "      - uses: actions/checkout@v4\n      - run: echo ${{ github.event.head_commit.message }}\n")
    res = run(tool("zizmor"), "--offline", str(bad))
    assert res.returncode != 0 and "unpinned-uses" in res.stdout and "template-injection" in res.stdout
    bad.write_text("name: bad\non: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    stepz: []\n")
    res = run(tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(bad))
    assert res.returncode != 0 and "stepz" in res.stdout


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_hardening_rules_hold(workflow):
    """What zizmor checks, stated directly: SHAs, no token permission by default, no persisted credentials,
    no expression inside a `run:` script."""
    data = yaml.safe_load(workflow.read_text())
    assert data["permissions"] == {}
    for name, job in data["jobs"].items():
        assert "permissions" in job, name
        assert "@sha256:" in job["container"]["image"] or "@${{" in job["container"]["image"], name
        for step in job["steps"]:
            if "uses" in step:
                assert re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", step["uses"]), step["uses"]
            if step.get("uses", "").startswith("actions/checkout@"):
                assert step["with"]["persist-credentials"] is False
            if "run" in step:
                assert "${{" not in step["run"], step["run"]


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_warm_signs_and_nodes_verify(workflow, tmp_path):
    """Issue 22: the job that builds signs with the key from the secret store (written to a file only the runner
    user reads, exactly as the step's shell lines do it here), and the node side trusts the committed .pub."""
    data = yaml.safe_load(workflow.read_text())
    assert data["env"]["DGPRECOMPILE_TRUSTED_KEYS"] == "ci/dgprecompile-signing.pub"
    warm = data["jobs"]["warm"]["steps"]
    signing = [s for s in warm if "--signing-key" in s.get("run", "")]
    assert len(signing) == 1 and signing[0]["env"]["DG_SIGNING_KEY"] == "${{ secrets.DG_SIGNING_KEY }}"
    script = signing[0]["run"]
    lines = [x.strip() for x in script.splitlines() if "DG_SIGNING_KEY" in x or x.strip().startswith("key=")]
    # the secret reaches a file by those lines, and dgprecompile accepts that file as a signing key
    from click.testing import CliRunner

    from dgprecompile.cache.signing import load_signing_key
    from dgprecompile.cli.main import cli

    assert CliRunner().invoke(cli, ["keygen", str(tmp_path / "k")]).exit_code == 0
    secret = (tmp_path / "k" / "dgprecompile-signing.key").read_text().strip()  # as pasted into the secret store
    env = {**os.environ, "DG_SIGNING_KEY": secret, "RUNNER_TEMP": str(tmp_path)}
    res = subprocess.run(["bash", "-euc", "umask 022\n" + "\n".join(lines)], env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    written = tmp_path / "dgprecompile-signing.key"
    assert written.stat().st_mode & 0o777 == 0o600
    assert load_signing_key(written).fingerprint == load_signing_key(tmp_path / "k" / "dgprecompile-signing.key").fingerprint
    assert "secrets." not in str(data["jobs"]["train"])  # nodes never see the private key
