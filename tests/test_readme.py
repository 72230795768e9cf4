"""The README is a front door (issue 30 item 4): short, readable at 120 columns, with the set-up, main-job and test
commands CI and the Makefile really run, one example of every command, and links that lead somewhere. Evidence
lives in docs/; every relative link of the README and of docs/*.md must name a file or folder that exists."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from dgprecompile.cli.main import COMMANDS

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
MAX_LINES, MAX_WIDTH = 160, 120


def code_blocks(text: str) -> list[str]:
    return re.findall(r"^```[a-z]*\n(.*?)^```", text, flags=re.M | re.S)


def prose(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)


def relative_links(doc: Path) -> list[str]:
    """The targets of the document's markdown links that point inside the repository (anchors cut off)."""
    targets = re.findall(r"\]\(([^)\s]+)\)", prose(doc.read_text()))
    return [t.split("#")[0] for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]


def test_the_readme_is_short_and_fits_in_120_columns():
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines (at most {MAX_LINES}): evidence goes to docs/"
    wide = [f"{n}: {len(line)}" for n, line in enumerate(lines, 1) if len(line) > MAX_WIDTH]
    assert not wide, f"README.md lines over {MAX_WIDTH} characters: {wide}"


def test_the_readme_gives_the_commands_the_makefile_and_ci_run():
    blocks = "\n".join(code_blocks(README.read_text()))
    commands = [line.split("#")[0].strip() for line in blocks.splitlines() if line.startswith("make ")]
    assert commands[:2] == ["make run", "make test"], commands
    targets = set(re.findall(r"^([a-z][\w-]*):", (REPO / "Makefile").read_text(), flags=re.M))
    missing = [c for c in commands if shlex.split(c)[1] not in targets]
    assert not missing, f"README make commands with no Makefile target: {missing}"
    ci = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()
          if line.strip() and not line.startswith("#")]
    assert ci[-1] == "make test", f".ci/run must run the README's test command, runs {ci[-1]!r}"


def test_the_readme_shows_every_command_once_at_least():
    blocks = "\n".join(code_blocks(README.read_text()))
    shown = set(re.findall(r"^dgprecompile ([a-z]+)\b", blocks, flags=re.M))
    assert set(COMMANDS) - shown == set(), f"commands with no example in the README: {set(COMMANDS) - shown}"
    assert shown <= set(COMMANDS), f"README examples of commands that do not exist: {shown - set(COMMANDS)}"


def test_every_relative_link_of_the_readme_and_docs_exists():
    broken = []
    for doc in [README, *sorted((REPO / "docs").glob("*.md"))]:
        broken += [f"{doc.relative_to(REPO)}: {t}" for t in relative_links(doc) if not (doc.parent / t).exists()]
    assert not broken, broken


def test_the_link_reader_sees_links_and_skips_code_and_urls(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("see [a](docs/a.md#part) and [web](https://example.com) [top](#top)\n"
                   "```sh\necho [b](not/a/link.md)\n```\n[c](../c/)\n")
    assert relative_links(doc) == ["docs/a.md", "../c/"]
