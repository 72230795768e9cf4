"""Is an entry on disk the same build as a fresh one? Byte for byte, except where nvcc itself never repeats.

nvcc gives every compile's internal-linkage symbols a unique name: ``_INTERNAL_<8 hex>_<n>_<file>_<8 hex>_<digits>``
(and ``_GLOBAL__N__...`` for anonymous namespaces), with a hash and a number that change from run to run. Two
builds of one kernel.cu (sgl-deep-gemm 0.1.3, nvcc 13.0) differ in those names in ``.strtab`` and nowhere else.
So a cubin is compared with those three fields blanked in both files; every other byte must be equal. A byte that
differs is accepted only where the fresh build itself has such a field, so a changed instruction never passes.
"""

from __future__ import annotations

import re
from pathlib import Path

_UNIQUE = re.compile(rb"(?:_INTERNAL_|_GLOBAL__N__)([0-9a-f]{8})_(\d{1,4})_")
_TAIL = re.compile(rb"_([0-9a-f]{8})_(\d+)")


def blank_unique_names(data: bytes) -> bytes:
    """``data`` with the per-compile hash and number fields of nvcc's internal symbol names set to '#'."""
    out = bytearray(data)
    for match in _UNIQUE.finditer(data):
        out[match.start(1):match.end(1)] = b"#" * 8
        tail = _TAIL.match(data, match.end() + int(match.group(2)))  # past the <n>-character file name
        if tail is not None:
            out[tail.start(1):tail.end(1)] = b"#" * 8
            out[tail.start(2):tail.end(2)] = b"#" * (tail.end(2) - tail.start(2))
    return bytes(out)


def same_file(name: str, mine: Path, theirs: Path) -> bool:
    """Whether two files of an entry called ``name`` hold the same build (a cubin: up to nvcc's unique names)."""
    a, b = mine.read_bytes(), theirs.read_bytes()
    if a == b:
        return True
    return name.endswith(".cubin") and len(a) == len(b) and blank_unique_names(a) == blank_unique_names(b)
