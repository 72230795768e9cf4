"""docs/architecture.md stays in step with the package (issue 30 item 4): its drawing of the layers names every
package directory under dgprecompile/ that exists and no other, its table says what each one (sub-packages
included) holds, and no package imports one drawn above it or beside it, function-level imports included.

The package list is read from disk, so a package added or removed elsewhere (issue 30 item 1's runtimes/) fails
here until the doc follows. A package the drawing marks "planned" may be absent; PLANNED says which may be."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "dgprecompile"
DOC = REPO / "docs" / "architecture.md"
PLANNED = {"runtimes"}  # issue 30 item 1: drawn before it lands on this branch


def packages(root: Path = PACKAGE) -> set[str]:
    """Every package directory under root, as its path from root ("cache", "compile/backends")."""
    return {p.parent.relative_to(root).as_posix() for p in root.rglob("__init__.py") if p.parent != root}


def drawing(text: str) -> list[tuple[list[str], bool]]:
    """The layers of the doc's drawing, top first: the packages in each line's brackets, and whether it is planned."""
    section = text.split("## The layers", 1)[1]
    block = re.search(r"^```text\n(.*?)^```", section, flags=re.M | re.S)
    assert block, "docs/architecture.md: no ```text drawing under '## The layers'"
    layers = []
    for line in block.group(1).splitlines():
        inside = re.match(r"\s*\[([^\]]*)\](.*)", line)
        if inside:
            layers.append((re.findall(r"([a-z_]+)/", inside.group(1)), "planned" in inside.group(2)))
    return layers


def named_in_table(text: str) -> set[str]:
    return set(re.findall(r"^\| `dgprecompile/([a-z_/]+?)/`", text, flags=re.M))


def stage_imports(root: Path = PACKAGE) -> set[tuple[str, str, str]]:
    """(importing package, imported package, where) for every import between two top-level packages of root."""
    tops = {p.split("/")[0] for p in packages(root)}
    found = set()
    for path in root.rglob("*.py"):
        parts = path.relative_to(root).parts
        if len(parts) < 2 or parts[0] not in tops:
            continue
        package = [root.name, *parts[:-1]]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package[: len(package) - node.level + 1] if node.level else []
                names = [".".join(base + ([node.module] if node.module else []))]
                if not node.module:  # `from .. import keys`: the names are the modules
                    names = [f"{names[0]}.{a.name}" for a in node.names]
            else:
                continue
            for name in names:
                bits = name.split(".")
                if bits[0] == root.name and len(bits) > 1 and bits[1] in tops and bits[1] != parts[0]:
                    found.add((parts[0], bits[1], f"{path.relative_to(root.parent)}:{node.lineno}"))
    return found


def test_the_drawing_names_every_package_and_only_packages_that_exist():
    text = DOC.read_text()
    layers = drawing(text)
    drawn = [name for names, _ in layers for name in names]
    planned = {name for names, is_planned in layers if is_planned for name in names}
    tops = {p.split("/")[0] for p in packages()}
    assert len(drawn) == len(set(drawn)), f"a package is drawn twice: {drawn}"
    assert tops - set(drawn) == set(), f"packages missing from the drawing: {sorted(tops - set(drawn))}"
    assert set(drawn) - tops <= planned, f"drawn but not on disk: {sorted(set(drawn) - tops - planned)}"
    assert planned <= PLANNED, f"only {PLANNED} may be drawn as planned, not {sorted(planned - PLANNED)}"


def test_the_table_says_what_every_package_holds():
    text = DOC.read_text()
    named = named_in_table(text)
    planned = {name for names, is_planned in drawing(text) if is_planned for name in names}
    assert packages() - named == set(), f"packages the table does not describe: {sorted(packages() - named)}"
    assert named - packages() <= planned, f"the table describes what is not there: {sorted(named - packages())}"


def test_no_package_imports_one_drawn_above_or_beside_it():
    layers = drawing(DOC.read_text())
    level = {name: i for i, (names, _) in enumerate(layers) for name in names}
    bottom = len(layers) - 1  # the foundation: its members may import each other
    up = sorted(f"{where}: {src} imports {dst}" for src, dst, where in stage_imports()
                if src in level and dst in level and level[dst] <= level[src] and level[src] != bottom)
    assert not up, up


def test_the_readers_see_packages_layers_and_function_level_imports(tmp_path):
    root = tmp_path / "dgprecompile"
    for pkg in ("low", "high", "high/sub"):
        (root / pkg).mkdir(parents=True)
        (root / pkg / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "low" / "a.py").write_text("def f():\n    from dgprecompile.high import sub\n")
    (root / "high" / "sub" / "b.py").write_text("from ...low import a\n")
    assert packages(root) == {"low", "high", "high/sub"}
    assert stage_imports(root) == {("low", "high", "dgprecompile/low/a.py:2"),
                                   ("high", "low", "dgprecompile/high/sub/b.py:1")}
    doc = ("## The layers\n\n```text\n  [ high/ ]   top\n     |\n  [ next/ ]   planned: later\n"
           "  [ low/ ]  + modules\n```\n\n| `dgprecompile/high/sub/` | x |\n")
    assert drawing(doc) == [(["high"], False), (["next"], True), (["low"], False)]
    assert named_in_table(doc) == {"high/sub"}
