"""No function in the package is over about 60 lines unless its docstring says why (issue 24, item 2).

A long function hides the decisions it makes: each piece is tested only through the whole. The few that are long
on purpose (a port that follows a library's function step for step) say so in their docstring with the words
"on purpose" and the reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "dgprecompile"
LIMIT = 60  # lines from `def` to the function's last line, docstring included


def long_functions(root: Path) -> list[tuple[str, str, int]]:
    """(file, function, lines) of every function over LIMIT lines whose docstring gives no reason."""
    out = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            lines = node.end_lineno - node.lineno + 1
            if lines > LIMIT and "on purpose" not in (ast.get_docstring(node) or ""):
                out.append((str(path.relative_to(root)), node.name, lines))
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
