"""What each planned family's build needs that can be checked in a moment, checked before anything compiles: the
programs its builder runs (ninja, the C++ compiler FlashInfer's and tvm-ffi's ninja files name, the C compiler
Triton builds its launchers with) and, per FlashInfer module, the headers its sources include from the CUDA toolkit
(cuRAND's for ``sampling``). The facts are data (data/build_needs.yaml ``families``); warm refuses at once naming
every missing piece (``--keep-going``: build what it can), ``doctor --manifest`` shows them as failed checks.
"""

from __future__ import annotations

import os
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

from dgprecompile.compile.build_log import facts, header_hint

# where FlashInfer's nvcc compiles take extra flags from (flashinfer/jit/cpp_ext.py, 0.6.3-0.7.2): its -I folders
# are searched for headers too
FLASHINFER_FLAGS = "FLASHINFER_EXTRA_CUDAFLAGS"
FLASHINFER_CFLAGS = "FLASHINFER_EXTRA_CFLAGS"  # its C++ (not CUDA) sources' compiles (flashinfer/jit/cpp_ext.py)


@dataclass(frozen=True)
class Missing:
    """One piece a family's build needs and this machine lacks: which items, what, and what to do."""

    items: tuple[str, ...]
    what: str
    hint: str

    def line(self) -> str:
        shown = ", ".join(self.items[:2]) + (f" and {len(self.items) - 2} more" if len(self.items) > 2 else "")
        return f"{shown}: {self.what}"


def _program(need: dict, env: dict[str, str]) -> str | None:
    """Why none of ``need``'s programs can be run here (None: one can)."""
    chosen = env.get(need["variable"], "") if need.get("variable") else ""
    names = shlex.split(chosen)[:1] or need["any"]
    if any(shutil.which(n, path=env.get("PATH")) for n in names):
        return None
    by = f" (${need['variable']})" if chosen else ""
    return f"{' or '.join(names)}{by} not found on PATH"


def include_dirs(cuda_home: str | None, env: dict[str, str], flags: str = FLASHINFER_FLAGS) -> list[Path]:
    """The folders a FlashInfer compile searches for a toolkit header: the toolkit's include folders, the -I and
    -isystem folders of ``flags`` (FLASHINFER_EXTRA_CUDAFLAGS for its nvcc compiles, FLASHINFER_EXTRA_CFLAGS for
    its C++ ones), CPATH and CPLUS_INCLUDE_PATH, the system's."""
    dirs: list[Path] = []
    home = cuda_home or env.get("CUDA_HOME") or env.get("CUDA_PATH")
    if home:
        dirs += [Path(home) / "include", *sorted(Path(home).glob("targets/*/include"))]
    words = shlex.split(env.get(flags, ""))
    for i, word in enumerate(words):
        if word in ("-I", "-isystem") and i + 1 < len(words):
            dirs.append(Path(words[i + 1]))
        elif word.startswith("-isystem") and len(word) > len("-isystem"):
            dirs.append(Path(word[len("-isystem"):]))
        elif word.startswith("-I") and len(word) > 2:
            dirs.append(Path(word[2:]))
    for var in ("CPATH", "CPLUS_INCLUDE_PATH"):
        dirs += [Path(p) for p in env.get(var, "").split(os.pathsep) if p]
    return dirs + [Path("/usr/local/include"), Path("/usr/include")]


def _headers(kind: str, items: list, dirs: list[Path], cxx_dirs: list[Path]) -> list[Missing]:
    """Per module of ``items`` whose sources include toolkit headers: those found in none of ``dirs`` (its nvcc
    compiles' folders) and those its C++ sources include (``cxx_headers``) found in none of ``cxx_dirs``."""
    family = facts()["families"].get(kind, {})
    modules, cxx = family.get("modules", {}), family.get("cxx_headers", {})
    out = []
    for module, headers in modules.items():
        ids = tuple(it.id for it in items if getattr(it, "module", None) == module)
        if not ids:
            continue
        for where, wanted, said in ((dirs, headers, ""),
                                    (cxx_dirs, cxx.get(module, []), f" (its C++ sources: {FLASHINFER_CFLAGS})")):
            lost = [h for h in wanted if not any((d / h).is_file() for d in where)]
            if lost:
                hint = header_hint(lost[0]) or f"install what ships {lost[0]}"
                out.append(Missing(ids, f"{module} includes {', '.join(lost)}{said}, found in none of "
                                        f"{', '.join(str(d) for d in where)}", hint))
    return out


def check(parts: list[tuple[str, list]], cuda_home: str | None, env: dict[str, str] | None = None) -> list[Missing]:
    """Every missing piece of the builds of ``parts`` ((runtime kind, the items it builds) each), in plan order."""
    env = dict(os.environ if env is None else env)
    families = facts()["families"]
    out: list[Missing] = []
    for kind, items in parts:
        family = families.get(kind)
        if family is None or not items:
            continue
        ids = tuple(it.id for it in items)
        for need in family["programs"]:
            why = _program(need, env)
            if why:
                out.append(Missing(ids, f"{family['label']}: {why}",
                                   f"install {need['any'][0]} (or put it on PATH)"))
        out += _headers(kind, items, include_dirs(cuda_home, env), include_dirs(cuda_home, env, FLASHINFER_CFLAGS))
    return out


def refusal(missing: list[Missing]) -> tuple[str, str]:
    """warm's one error line and its hint for ``missing`` (every piece named, each distinct hint once)."""
    hints = list(dict.fromkeys(m.hint for m in missing))
    return ("this machine lacks what the plan's builds need (checked before compiling): "
            + "; ".join(m.line() for m in missing),
            "; ".join(hints) + "; then warm again (or --keep-going: build the rest, those fail)")
