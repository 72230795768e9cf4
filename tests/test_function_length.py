"""No function in the package is over about 60 lines or nested deeper than 5 blocks unless its docstring says why
(issue 24, item 2; issue 30, item 3), and no module is over 600 lines (issue 30, item 3).

A long function hides the decisions it makes: each piece is tested only through the whole. A deeply nested one
hides them in the same way, one indentation level at a time. The few that are long or deep on purpose (a port that
follows a library's function step for step) say so in their docstring with the words "on purpose" and the reason.
A module past 600 lines holds more than one concern: split it along them, there is no exception.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "dgprecompile"
LIMIT = 60  # lines from `def` to the function's last line, docstring included
DEPTH_LIMIT = 5  # blocks inside a function, one inside the other (an `elif` is its `if`'s level)
MODULE_LIMIT = 600  # lines of one module
# what opens a level: a compound statement, or a function or class defined inside the function
BLOCKS = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, ast.Match,
          ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef) + ((ast.TryStar,) if hasattr(ast, "TryStar") else ())


def _functions(root: Path):
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield str(path.relative_to(root)), node, "on purpose" in (ast.get_docstring(node) or "")


def long_functions(root: Path) -> list[tuple[str, str, int]]:
    """(file, function, lines) of every function over LIMIT lines whose docstring gives no reason."""
    out = []
    for name, node, excused in _functions(root):
        lines = node.end_lineno - node.lineno + 1
        if lines > LIMIT and not excused:
            out.append((name, node.name, lines))
    return out


def nesting(node: ast.AST) -> int:
    """How many blocks deep the code below ``node`` goes (an `elif` counts as its `if`)."""
    deepest = 0
    for child in ast.iter_child_nodes(node):
        elif_ = isinstance(node, ast.If) and isinstance(child, ast.If) and node.orelse == [child]
        opens = isinstance(child, BLOCKS) and not elif_
        deepest = max(deepest, nesting(child) + (1 if opens else 0))
    return deepest


def deep_functions(root: Path) -> list[tuple[str, str, int]]:
    """(file, function, depth) of every function nested deeper than DEPTH_LIMIT whose docstring gives no reason."""
    return [(name, node.name, nesting(node)) for name, node, excused in _functions(root)
            if nesting(node) > DEPTH_LIMIT and not excused]


def long_modules(root: Path) -> list[tuple[str, int]]:
    """(file, lines) of every module over MODULE_LIMIT lines."""
    out = []
    for path in sorted(root.rglob("*.py")):
        lines = len(path.read_text().splitlines())
        if lines > MODULE_LIMIT:
            out.append((str(path.relative_to(root)), lines))
    return out


def test_no_long_function_without_a_reason():
    found = long_functions(PACKAGE)
    assert not found, "functions over 60 lines without a stated reason: " + ", ".join(
        f"{f}:{name} ({n} lines)" for f, name, n in found)


def test_the_check_finds_a_long_function(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(LIMIT))
    (tmp_path / "long.py").write_text(f"def long():\n{body}\n")
    (tmp_path / "fine.py").write_text(f'def fine():\n    """Long on purpose: a test."""\n{body}\n')
    assert long_functions(tmp_path) == [("long.py", "long", LIMIT + 1)]


def test_no_deeply_nested_function_without_a_reason():
    found = deep_functions(PACKAGE)
    assert not found, f"functions nested deeper than {DEPTH_LIMIT} blocks without a stated reason: " + ", ".join(
        f"{f}:{name} ({n} deep)" for f, name, n in found)


DEEP = """
def deep(x):
    for a in x:
        if a:
            while a:
                with a:
                    try:
                        def inner():
                            return a
                    except OSError:
                        pass
"""

# five levels, the last an if/elif chain (one level however long), and a deep one that says why
FINE = """
def chain(x):
    for a in x:
        if a:
            while a:
                with a:
                    if a == 1:
                        pass
                    elif a == 2:
                        pass
                    elif a == 3:
                        pass
                    else:
                        pass


def excused(x):
    \"\"\"Deep on purpose: a test.\"\"\"
    for a in x:
        if a:
            while a:
                with a:
                    try:
                        if a:
                            pass
                    finally:
                        pass
"""


def test_the_check_finds_a_deeply_nested_function(tmp_path):
    (tmp_path / "deep.py").write_text(DEEP)
    (tmp_path / "fine.py").write_text(FINE)
    assert deep_functions(tmp_path) == [("deep.py", "deep", DEPTH_LIMIT + 1)]


def test_no_module_over_600_lines():
    found = long_modules(PACKAGE)
    assert not found, f"modules over {MODULE_LIMIT} lines (split them along their concerns): " + ", ".join(
        f"{f} ({n} lines)" for f, n in found)


def test_the_check_finds_a_long_module(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "long.py").write_text("x = 1\n" * (MODULE_LIMIT + 1))
    (tmp_path / "fine.py").write_text("x = 1\n" * MODULE_LIMIT)
    assert long_modules(tmp_path) == [("pkg/long.py", MODULE_LIMIT + 1)]
