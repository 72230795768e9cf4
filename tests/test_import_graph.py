"""The package's import graph: stages import only downward, nothing imports in a circle, and no class is found
by a "module:Class" string (issue 30, item 1).

Every import is read from the syntax tree, the module-level ones and those inside functions alike: an import
moved into a function to dodge a circle is still an arrow of the graph. The layers, lowest first, are data below;
a module may import its own stage (its first package under dgprecompile/, or the top-level module itself),
a stage of a lower layer, and, in the foundation only, the other foundation modules.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "dgprecompile"

# the stages (a top-level module or package under dgprecompile/), lowest layer first
LAYERS: tuple[tuple[str, ...], ...] = (
    # foundation: errors, files, documents and their schemas, data loading, the one Output, this machine
    ("errors", "fsutil", "documents", "schemas", "data", "output", "host"),
    ("runtimes",),  # what each runtime is: the floor of the stages
    ("keys",),  # the entry names each runtime looks up
    ("planning",),
    ("cache",),
    ("compile",),
    ("launch", "diagnostics"),
    ("cli",),
    ("__main__",),  # python -m dgprecompile
)
# layers whose stages may import each other (the foundation's modules are small and share one floor)
PEERS = {0}
# at most this many modules directly under dgprecompile/ (__init__.py and __main__.py included)
MAX_TOP_LEVEL_MODULES = 8
# The one module that imports modules of the package by a computed name, with its reason:
#   cli/main.py: loads a subcommand's module (dgprecompile.cli.<command>) only when that command runs, so that
#   `plan`, `verify` and `doctor` import none of the others' libraries; it stays inside the cli stage
COMPUTED_IMPORTS = {"cli/main.py"}

CLASS_STRING = re.compile(r"^dgprecompile(\.\w+)+:\w+")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports(name: str, path: Path, known: dict[str, Path]) -> Iterator[tuple[str, int]]:
    """(imported dgprecompile module, line) for every import statement of the module, wherever it stands."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            # `from pkg import mod` imports pkg (its __init__) and then pkg.mod
            targets = [base] + [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known]
        else:
            continue
        for target in targets:
            if target.split(".")[0] == "dgprecompile":
                resolved = _resolve(target, known)
                if resolved and resolved != name:
                    yield resolved, node.lineno


def graph(known: dict[str, Path] | None = None) -> dict[str, dict[str, int]]:
    known = modules() if known is None else known
    out: dict[str, dict[str, int]] = {}
    for name, path in known.items():
        out[name] = {}
        for target, line in imports(name, path, known):
            out[name].setdefault(target, line)
    return out


def stage(module: str) -> str | None:
    """The stage a module belongs to (None: the package's own __init__, which imports nothing)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def layer_of(stage_name: str) -> int:
    for i, layer in enumerate(LAYERS):
        if stage_name in layer:
            return i
    raise AssertionError(f"dgprecompile/{stage_name} is in no layer: add it to LAYERS in {__file__}")


def upward(g: dict[str, dict[str, int]]) -> list[str]:
    bad = []
    for src, targets in g.items():
        for dst, line in targets.items():
            s, d = stage(src), stage(dst)
            if s is None or d is None or s == d:
                continue
            ls, ld = layer_of(s), layer_of(d)
            if ld > ls or (ld == ls and ls not in PEERS):
                bad.append(f"{src}:{line} imports {dst} ({s} is layer {ls}, {d} is layer {ld})")
    return bad


def circles(g: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    for root in g:
        if root in index:
            continue
        work = [(root, iter(g[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(g.get(child, {}))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def class_strings(path: Path, root: Path = PACKAGE) -> list[str]:
    """"module:Class" strings naming the package's code, and computed imports of the package's modules."""
    rel = path.relative_to(root).as_posix()
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and CLASS_STRING.match(node.value):
            found.append(f"{rel}:{node.lineno}: {node.value!r}")
        if isinstance(node, ast.Call) and rel not in COMPUTED_IMPORTS:
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            text = " ".join(ast.unparse(a) for a in node.args)
            if called in ("import_module", "__import__") and "dgprecompile" in text:
                found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_graph_reads_function_level_and_relative_imports(tmp_path):
    pkg = tmp_path / "dgprecompile"
    (pkg / "keys").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "errors.py").write_text("def f():\n    from dgprecompile.keys import deep\n")
    (pkg / "keys" / "__init__.py").write_text("")
    (pkg / "keys" / "deep.py").write_text("from .. import errors\nimport dgprecompile.keys\n")
    known = {module_name_in(p, tmp_path): p for p in pkg.rglob("*.py")}
    g = {n: dict(imports(n, p, known)) for n, p in known.items()}
    assert g["dgprecompile.errors"] == {"dgprecompile.keys": 2, "dgprecompile.keys.deep": 2}
    assert g["dgprecompile.keys.deep"] == {"dgprecompile": 1, "dgprecompile.errors": 1, "dgprecompile.keys": 2}
    assert circles(g) == [["dgprecompile.errors", "dgprecompile.keys.deep"]]
    assert upward(g) == ["dgprecompile.errors:2 imports dgprecompile.keys (errors is layer 0, keys is layer 2)",
                         "dgprecompile.errors:2 imports dgprecompile.keys.deep (errors is layer 0, keys is layer 2)"]


def module_name_in(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_the_string_scan_sees_a_class_string_and_a_computed_import(tmp_path):
    f = tmp_path / "x.py"
    f.write_text('W = "dgprecompile.compile.backends.cxx:CxxWorker"\nimport importlib\n'
                 'importlib.import_module(f"dgprecompile.keys.{name}")\nimportlib.import_module(data["python"])\n')
    assert [s.split(":")[1] for s in class_strings(f, tmp_path)] == ["1", "3"]


def test_no_circle():
    assert circles(graph()) == []


def test_no_import_goes_up_a_layer():
    assert upward(graph()) == []


def test_no_class_is_found_by_a_string():
    assert [hit for p in sorted(PACKAGE.rglob("*.py")) for hit in class_strings(p)] == []


def test_every_stage_has_a_layer():
    for name in modules():
        if stage(name) is not None:
            layer_of(stage(name))


def test_few_top_level_modules():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top
