"""No stage branches on a generation's, profile's, backend's or JIT family's name (issue 24, item 1).

Every such fact lives in its object (dgprecompile/runtimes/: each runtime, Generation, Backend, JitFamily;
planning/profiles.py and data/profiles.yaml: Profile; data/sglang_jit*.yaml: the SGLang JIT families' modules), and
the stages ask it. This test walks
the package's syntax trees and fails on a comparison (==, !=, in, not in, a match case) of such a name, written
as a string, outside those modules.
"""

from __future__ import annotations

import ast
from pathlib import Path

from dgprecompile.compile.sweep import SWEEP_FAMILY
from dgprecompile.planning.heuristics.sm90_cxx import FAMILY as CXX_FAMILY
from dgprecompile.planning.profiles import all_profiles
from dgprecompile.runtimes import BACKENDS, GENERATIONS, RUNTIMES
from dgprecompile.runtimes.items import TRANSPOSE_FAMILY

PACKAGE = Path(__file__).resolve().parent.parent / "dgprecompile"

# the modules that hold the objects: they may name what they define
OBJECT_MODULES = {"planning/profiles.py"}
OBJECT_DIRS = ("runtimes/",)

# The one exception, with its reason:
#   launch/hook/*: the startup hook runs inside the user's job and imports nothing of the package, so it is told
#   the generation by name in an environment variable
ALLOWED: set[str] = set()
ALLOWED_DIRS = ("launch/hook/",)


def names() -> set[str]:
    families = {"sglang_jit", SWEEP_FAMILY, TRANSPOSE_FAMILY}  # work-item families: JIT modules, sweep chunks,
    families |= {name for name, _ in CXX_FAMILY.values()}  # and the C++ JITs' kernel families
    return set(GENERATIONS) | set(BACKENDS) | {r.id for r in RUNTIMES} | {p.id for p in all_profiles()} | families


def _strings(node: ast.AST) -> list[str]:
    """The string literals a comparison operand is: "x", or ("x", "y") / ["x"] / {"x"}."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def name_comparisons(source: str, known: set[str]) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            hits = [s for operand in (node.left, *node.comparators) for s in _strings(operand) if s in known]
        elif isinstance(node, ast.match_case):
            hits = [n.value.value for n in ast.walk(node.pattern)
                    if isinstance(n, ast.MatchValue) and isinstance(n.value, ast.Constant) and n.value.value in known]
        else:
            continue
        found += [(node.lineno if hasattr(node, "lineno") else node.pattern.lineno, h) for h in hits]
    return found


def test_the_scanner_sees_each_kind_of_comparison():
    known = {"legacy", "0.5.12-0.5.16", "nvcc"}
    source = '''
if profile.generation == "legacy": pass
if profile.id != "0.5.12-0.5.16": pass
if backend in ("nvcc", "auto"): pass
if apis == {"legacy"}: pass
match backend:
    case "nvcc": pass
x = {"legacy": 1}  # a key, not a comparison
if backend == other: pass  # a variable: the object was asked
'''
    assert [h for _, h in name_comparisons(source, known)] == ["legacy", "0.5.12-0.5.16", "nvcc", "legacy", "nvcc"]


def test_no_stage_compares_a_generation_profile_backend_or_family_name():
    known = names()
    offences = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel in OBJECT_MODULES or rel.startswith(OBJECT_DIRS) or rel in ALLOWED or rel.startswith(ALLOWED_DIRS):
            continue
        offences += [f"{rel}:{line}: compares the name {name!r}" for line, name in
                     name_comparisons(path.read_text(), known)]
    assert not offences, "ask the generation/profile/backend object instead:\n" + "\n".join(offences)


def test_the_allowlist_names_only_files_that_still_need_it():
    """When the lead has cleaned an allowlisted file, it leaves the list."""
    known = names()
    for rel in ALLOWED:
        assert name_comparisons((PACKAGE / rel).read_text(), known), f"{rel} no longer needs the allowlist"
