"""A failed build said in the compiler's own words, the same way for every family (DeepGEMM's nvcc, SGLang's JIT
builders, FlashInfer's ninja, Triton): its first ``error`` lines (nvcc, gcc, ptxas, the linker; else the Python
exception that ended it), the whole log kept in the cache's log folder (``<cache>/dgprecompile/logs/<item>.log``),
and a hint where the cause is a known one (data/build_needs.yaml: a missing CUDA header names its toolkit component
and what ships it, a missing Python module its package and the release the plan was made for).

:func:`describe` is what every family's failure goes through: the worker (compile/worker.py), the parent's
subprocess families (compile/recorded_items.py, the Triton chunks in compile/warm_pool.py).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from dgprecompile.data import load_yaml

DATA = "build_needs.yaml"
SCHEMA = "build-needs"
LOGS = ("dgprecompile", "logs")  # under the cache root
SHOWN = 3  # error lines kept per failure
WIDTH = 300  # characters kept per error line

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# a compiler's, assembler's or linker's error line: "x.cu(12): error: ...", "y.h:20:10: fatal error: ...",
# "nvcc fatal   : ...", "ptxas error   : ...", "error #20: ...", "ld: cannot find -lcuda", "undefined reference to"
_ERROR = re.compile(r"\bfatal error\b|\berror\b(\s*#\w+)?\s*:|^(nvcc|ptxas|nvlink|fatbinary|cicc)\s+(fatal|error)\s*:"
                    r"|cannot find -l|undefined reference to|catastrophic error", re.I)
# what follows a real error and says nothing of its own
_NOISE = re.compile(r"ninja: build stopped|^FAILED:|collect2: error: ld returned|^error: command .* failed"
                    r"|errors? detected in the compilation|^\[\d+/\d+\]", re.I)
# the line a Python exception ends with: "ModuleNotFoundError: No module named 'x'"
_PYTHON = re.compile(r"^(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception)(?::\s|$)")
# an absolute path in front of a file:line, cut to its last two components
_PATH = re.compile(r"^/\S*/([^/\s]+/[^/\s:(]+)(?=[:(]\d)")
# a located error inside a longer line ("NVCC compilation failed: stdout: , stderr: /x/y.h(2): error: ..."): from its
# file:line on
_LOCATED = re.compile(r"(?:^|\s)(\S+(?:\(\d+\)|:\d+(?::\d+)?):\s*(?:fatal |catastrophic )?error\b.*)", re.I)
_HEADER = re.compile(r"fatal error:\s*([\w./+-]+):\s*No such file|cannot open source file \"([^\"]+)\"")
_MODULE = re.compile(r"No module named '([\w.]+)'")


@cache
def facts() -> dict[str, Any]:
    """data/build_needs.yaml, checked against its schema once per process."""
    from dgprecompile import schemas

    doc = load_yaml(DATA)
    return schemas.check(doc, SCHEMA, DATA, hint=f"fix {DATA} (data/schemas/{SCHEMA}.json says what each field holds)")


def _trim(line: str) -> str:
    line = _ANSI.sub("", line).strip()
    located = _LOCATED.search(line)
    line = _PATH.sub(r"\1", located.group(1) if located else line)
    return line if len(line) <= WIDTH else line[:WIDTH - 3] + "..."


def first_errors(text: str, limit: int = SHOWN) -> list[str]:
    """The first ``limit`` distinct error lines of a build's output, trimmed: the compilers' and the linker's; where
    there are none, the Python exceptions' (the first raised first); else the last line it printed."""
    lines = [_trim(x) for x in text.splitlines() if x.strip()]
    for keep in (lambda x: _ERROR.search(x) and not _NOISE.search(x), _PYTHON.match):
        picked: list[str] = []
        for line in lines:
            if keep(line) and line not in picked:
                picked.append(line)
        if picked:
            return picked[:limit]
    return lines[-1:]


def _sglang_pin(package: str, release: str | None) -> str:
    """``package``'s requirement as the installed sglang (when it is the plan's ``release``) pins it, else ''."""
    from importlib import metadata

    try:
        if release is None or metadata.version("sglang") != release:
            return ""
        wanted = re.compile(rf"^{re.escape(package)}\s*([^;\s]*)", re.I)
        return next((m.group(1) for r in metadata.requires("sglang") or [] if (m := wanted.match(r))), "")
    except metadata.PackageNotFoundError:
        return ""


def header_hint(header: str) -> str | None:
    """What ships ``header`` (its toolkit component), where the data file knows it."""
    known = facts()["headers"].get(Path(header).name)
    return f"{header} is one of the {known['component']}: install {known['ships']}" if known else None


def module_hint(module: str, release: str | None) -> str:
    top = module.split(".")[0]
    package = facts()["python"].get(top, top)
    pin = _sglang_pin(package, release)
    plan = f"the plan was made for sglang {release}" if release else "the plan names no sglang release"
    return (f"the Python module {top} is not importable where the build ran: install {package}{pin} ({plan}"
            + (f", which pins {package}{pin})" if pin else ")"))


def known_cause(lines: list[str], release: str | None = None) -> str | None:
    """A hint for the first of ``lines`` whose cause the data file knows (None: none)."""
    for line in lines:
        if (m := _HEADER.search(line)) and (hint := header_hint(m.group(1) or m.group(2))):
            return hint
        if m := _MODULE.search(line):
            return module_hint(m.group(1), release)
    return None


def log_path(root: str | Path, item: str) -> Path:
    """Where the log of ``item``'s last failed build is kept under the cache ``root``."""
    name = re.sub(r"[^A-Za-z0-9._@+-]", "_", item)
    if len(name) > 120:
        name = name[:100] + "-" + hashlib.sha256(item.encode()).hexdigest()[:16]
    return Path(root).joinpath(*LOGS, name + ".log")


def keep_log(root: str | Path, item: str, text: str) -> str | None:
    """Write ``text`` as ``item``'s log (whole, or not at all); its path, or None where it could not be written."""
    from dgprecompile.fsutil import atomic_write_text

    path = log_path(root, item)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, text if text.endswith("\n") else text + "\n")
    except OSError:
        return None
    return str(path)


@dataclass
class Failure:
    """One failed build: how it ended (``summary``, one line), its first error lines, its kept log, a hint."""

    summary: str
    errors: list[str] = field(default_factory=list)
    log: str | None = None
    hint: str | None = None

    def event(self) -> dict[str, Any]:
        """The fields a ``failed`` event carries beside its ``error``."""
        return {"errors": self.errors, "log": self.log, "hint": self.hint}


def describe(text: str, root: str | Path | None, item: str, release: str | None = None) -> Failure:
    """``item``'s failed build from everything it printed (``text``): the log kept under ``root`` (None: not kept),
    its first error lines, one summary line (what ended it, then the first error), the known cause's hint."""
    errors = first_errors(text)
    head = next((_trim(x) for x in text.splitlines() if x.strip()), "failed")
    summary = head if not errors or errors[0] in head else f"{head.rstrip(':')}: {errors[0]}"
    log = keep_log(root, item, text) if root is not None else None
    return Failure(summary[:2 * WIDTH], errors, log, known_cause(errors, release))
