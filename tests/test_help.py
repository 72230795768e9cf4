"""Help, comments and doc pointers stay true (issue 24 item 4, issue 19 item 17): every example line of every
command's --help is parsed by that command's real click parser, and every module, test, doc or file a comment
or help text points at exists."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
from pathlib import Path

import click
import pytest

from dgprecompile.cli.main import COMMANDS, cli

REPO = Path(__file__).resolve().parent.parent


def _examples(help_text: str) -> list[str]:
    """The indented command lines under ``Examples:`` (and the group's ``Typical flow:``), a line folded with a
    trailing `` \\`` joined to its continuation lines as a shell joins them."""
    lines, inside = [], False
    for line in re.sub(r"[ \t]*\\\n[ \t]*", " ", help_text).splitlines():
        stripped = line.strip()
        if stripped in ("Examples:", "Typical flow:"):
            inside = True
            continue
        if inside and not stripped:
            inside = False
        elif inside and stripped.startswith("dgprecompile "):
            lines.append(stripped)
    return lines


def _invocations(line: str, tmp: Path) -> list[list[str]]:
    """The dgprecompile argv of each command of one example line (`a && b`), comment dropped, $VARS set: a
    variable stands for a folder under tmp, or for a file there when the option it is the value of takes a file."""
    words = shlex.split(line, comments=True)
    out, current = [], []
    for word in words + ["&&"]:
        if word == "&&":
            if current:
                out.append(current)
            current = []
        elif word.startswith("$"):
            current.append(_stand_for(current, word, tmp))
        else:
            current.append(word)
    return [argv[1:] for argv in out if argv[0] == "dgprecompile"]


def _stand_for(argv: list[str], word: str, tmp: Path) -> str:
    """A real path for ``$VAR`` / ``$VAR/rest``: a new empty file when the option before it is a file path."""
    path = Path(re.sub(r"^\$\{?\w+\}?", lambda _: str(tmp), word))
    command = cli.get_command(None, argv[1]) if len(argv) > 1 and argv[0] == "dgprecompile" else None
    option = next((p for p in (command.params if command else ()) if argv[-1:] and argv[-1] in p.opts), None)
    if option is not None and isinstance(option.type, click.Path) and not option.type.dir_okay and path.is_dir():
        path = tmp / re.sub(r"\W", "", word)
        path.touch()
    return str(path)


def _parse(argv: list[str]) -> click.Context:
    """What click does with argv before the command body runs: option names, choices and types checked."""
    name, *rest = argv
    command = cli.get_command(None, name)
    assert command is not None, f"no command {name!r}"
    return command.make_context(name, list(rest), parent=click.Context(cli, info_name="dgprecompile"))


def _help(name: str | None) -> str:
    command = cli if name is None else cli.get_command(None, name)
    with click.Context(command, info_name=name or "dgprecompile") as ctx:
        return command.get_help(ctx)


@pytest.mark.parametrize("name", [None, *COMMANDS])
def test_every_help_example_parses(name, tmp_path):
    examples = _examples(_help(name))
    assert examples, f"{name or 'dgprecompile'} --help has no examples"
    for line in examples:
        invocations = _invocations(line, tmp_path)
        assert invocations, line
        for argv in invocations:
            try:
                ctx = _parse(argv)
            except click.ClickException as exc:
                raise AssertionError(f"{line!r}: {exc.format_message()}") from None
            assert ctx.command.name == argv[0]


@pytest.mark.parametrize("name", [None, *COMMANDS])
def test_every_help_line_fits_80_columns(name):
    """COLUMNS=80 (a terminal of 80, a pipe, a CI log): every line of every --help fits 80 columns, counted in
    characters; its examples fold with ` \\` continuations instead of running past the edge."""
    from click.testing import CliRunner

    result = CliRunner().invoke(cli, [name, "--help"] if name else ["--help"], env={"COLUMNS": "80"},
                                prog_name="dgprecompile", catch_exceptions=False)
    assert result.exit_code == 0, result.output
    wide = [line for line in result.output.splitlines() if len(line) > 80]
    assert not wide, "\n".join(wide)


def test_a_folded_example_is_one_command_line():
    help_text = "Examples:\n  dgprecompile push --to s3://b/x \\\n      --signing-key k.key   # once\n  dgprecompile push\n"
    assert _examples(help_text) == ["dgprecompile push --to s3://b/x --signing-key k.key   # once", "dgprecompile push"]


def test_a_wrong_example_would_be_caught(tmp_path):
    """The parse is strict: an option a command lacks, or a value outside its choices, fails."""
    for argv in (["warm", "--no-sglang-jit"], ["warm", "--backend", "fast"], ["unpack"]):
        with pytest.raises(click.ClickException):
            _parse(argv)


def test_examples_that_chain_commands_keep_their_cache_dir():
    """`unpack X --cache-dir D && verify ...` must verify D, not the default cache."""
    for name in COMMANDS:
        for line in _examples(_help(name)):
            parts = [shlex.split(p, comments=True) for p in line.split("&&")]
            dirs = [p[p.index("--cache-dir") + 1] if "--cache-dir" in p else None for p in parts]
            if any(dirs):
                assert len(set(dirs)) == 1, line


def test_warm_backend_help_names_every_generation_nvcc_builds():
    from dgprecompile.runtimes import GENERATIONS

    help_text = " ".join(_help("warm").split())
    for generation in GENERATIONS.values():
        if "nvcc" in generation.backends:
            assert generation.label in help_text, (generation.id, generation.label)


# ---- pointers in comments, help and docs ----------------------------------------------------------------------


def _tracked_text_files() -> list[Path]:
    names = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True).stdout.split()
    keep = (".py", ".md", ".yaml", ".yml", ".toml", ".txt", ".sh")
    return [REPO / n for n in names if n.endswith(keep) or os.path.basename(n) == "Makefile"]


def test_every_python_dash_m_module_named_exists():
    found = []
    for path in _tracked_text_files():
        for module in re.findall(r"python3? -m (dgprecompile[\w.]*)", path.read_text(errors="ignore")):
            if importlib.util.find_spec(module) is None:
                found.append(f"{path.relative_to(REPO)}: {module}")
    assert not found, found


# the user's trainer, named in its command lines and notes: files of SpecForge's repository
TRAINER_SCRIPTS = {"scripts/train_eagle3_sgl_online.py", "scripts/train_eagle3.py"}


def test_every_test_and_doc_pointer_names_a_file_that_exists():
    tests = {p.stem for p in (REPO / "tests").rglob("test_*.py")}
    functions = {f for p in (REPO / "tests").rglob("*.py") for f in re.findall(r"def (test_\w+)", p.read_text())}
    found = []
    for path in _tracked_text_files():
        if path.is_relative_to(REPO / "tests") or path.is_relative_to(REPO / "bench" / "results"):
            continue  # the tests' own data; records of past runs, kept as they were
        text = path.read_text(errors="ignore")
        for line in text.splitlines():
            if "SpecForge" in line or "abd0346d" in line:
                continue  # a path in SpecForge's repository, not in this one
            for ref in re.findall(r"\b(?:docs|tests|shapes|examples|scripts|tools)/[\w./-]+\.(?:md|py|yaml|json|sh)\b",
                                  line):
                if not (REPO / ref).exists() and ref not in TRAINER_SCRIPTS:
                    found.append(f"{path.relative_to(REPO)}: {ref}")
        for name in re.findall(r"\btest_[a-z0-9_]{4,}\b", text):
            if name not in tests and name not in functions:
                found.append(f"{path.relative_to(REPO)}: {name}")
    assert not found, found


def _documented_lines() -> list[tuple[str, int, str]]:
    """`dgprecompile ...` lines of the README's and docs' code blocks (continuation lines joined)."""
    out = []
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        inside, pending, start = False, "", 0
        for number, line in enumerate(doc.read_text().splitlines(), 1):
            if line.startswith("```"):
                inside, pending = not inside, ""
                continue
            text = line.strip()
            if not inside or not (pending or text.startswith("dgprecompile ")):
                continue
            start = start if pending else number
            pending += " " + text.rstrip("\\")
            if not text.endswith("\\"):
                out.append((doc.name, start, pending.strip()))
                pending = ""
    return out


def test_every_documented_command_line_parses(tmp_path):
    lines = _documented_lines()
    assert len(lines) > 10, lines
    for doc, number, line in lines:
        for argv in _invocations(line, tmp_path):
            try:
                _parse(argv)
            except click.ClickException as exc:
                raise AssertionError(f"{doc}:{number}: {line!r}: {exc.format_message()}") from None
