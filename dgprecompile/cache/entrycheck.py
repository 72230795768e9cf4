"""Is a cache entry's content something the runtime can load? Checked on the bytes, not on a recorded hash.

A disk that fills up mid-compile leaves files that exist but are empty or cut short; a sha256 recorded after
the fact matches them perfectly. So an entry counts as good only when every file the runtime reads is whole:

* ``*.cubin``: an ELF64 little-endian object for NVIDIA CUDA (``e_machine`` EM_CUDA = 190) whose section table,
  sections, program headers and segments lie inside the file (nvcc writes the program headers last), built for the planned SM architecture. nvcc records the SM number in ``e_flags``: bits
  8-15 from ELF ABI version 8 on (nvcc 13.0: ``-arch sm_90a`` gives ``e_flags`` 0x6005a04), bits 0-7 before.
  The ``a`` (architecture-specific) suffix is not in ``e_flags`` (sm_90 and sm_90a give the same value) but in
  the ptxas command line nvcc stores in the ``.note.nv.tkinfo`` section (``-arch sm_90a``); when that note is
  there, its architecture must be the planned one.
* ``kernel.cu``: not empty.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

EM_CUDA = 190
ELF_MAGIC = b"\x7fELF"
_TKINFO_ARCH = re.compile(rb"-arch (sm_\d+[a-z]?)\b")
_ARCH = re.compile(r"sm_(\d+)([a-z]?)$")


def arch_number(arch: str) -> int:
    match = _ARCH.match(arch)
    if not match:
        raise ValueError(f"not an SM architecture: {arch!r}")
    return int(match.group(1))


def cubin_problem(data: bytes, arch: str | None) -> str | None:
    """None when ``data`` is a whole CUDA ELF for ``arch`` (e.g. "sm_90a"; None: any), else what is wrong."""
    if not data:
        return "empty (0 bytes)"
    if len(data) < 64 or data[:4] != ELF_MAGIC:
        return f"not an ELF file ({len(data)} bytes)"
    if data[4] != 2 or data[5] != 1:
        return "not a 64-bit little-endian ELF"
    machine = struct.unpack_from("<H", data, 18)[0]
    if machine != EM_CUDA:
        return f"ELF for machine {machine}, not NVIDIA CUDA ({EM_CUDA})"
    phoff, shoff = struct.unpack_from("<QQ", data, 0x20)
    flags = struct.unpack_from("<I", data, 0x30)[0]
    phentsize, phnum, shentsize, shnum, shstrndx = struct.unpack_from("<HHHHH", data, 0x36)
    if shnum == 0 or shentsize < 64 or shoff + shnum * shentsize > len(data) or shstrndx >= shnum:
        return f"truncated ({len(data)} bytes; its section table ends past the end of the file)"
    if phnum and phoff + phnum * phentsize > len(data):  # nvcc puts the program headers last
        return f"truncated ({len(data)} bytes; its program headers end past the end of the file)"
    for i in range(phnum):
        offset, filesz = struct.unpack_from("<Q8x8xQ", data, phoff + i * phentsize + 8)
        if offset + filesz > len(data):
            return f"truncated ({len(data)} bytes; a segment ends past the end of the file)"
    sections = []
    for i in range(shnum):
        name, _type, _flags, _addr, offset, size = struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize)
        if _type != 8 and offset + size > len(data):  # SHT_NOBITS occupies no file bytes
            return f"truncated ({len(data)} bytes; a section ends past the end of the file)"
        sections.append((name, _type, offset, size))
    if arch is None:
        return None
    sm = (flags >> 8) & 0xFF if data[8] >= 8 else flags & 0xFF
    want = arch_number(arch)
    if sm != want:
        return f"built for sm_{sm}, not the planned {arch}"
    _, _, str_off, str_size = sections[shstrndx]
    strtab = data[str_off:str_off + str_size]
    for name, _type, offset, size in sections:
        if strtab[name:name + 16].split(b"\0", 1)[0] == b".note.nv.tkinfo":
            found = _TKINFO_ARCH.search(data[offset:offset + size])
            if found and found.group(1).decode() != arch:
                return f"built for {found.group(1).decode()}, not the planned {arch}"
    return None


def file_problem(name: str, data: bytes, arch: str | None) -> str | None:
    """What is wrong with one entry file's bytes, or None."""
    if name.endswith(".cubin"):
        return cubin_problem(data, arch)
    if name == "kernel.cu" and not data:
        return "empty (0 bytes)"
    return None


def checked_files(names) -> list[str]:
    """The files of an entry whose content is checked (the ones the runtime reads)."""
    return [n for n in names if n.endswith(".cubin") or n == "kernel.cu"]


def entry_problem(path: Path, arch: str | None, required: tuple[str, ...] = ()) -> str | None:
    """None when the entry directory ``path`` holds every ``required`` file and each checked file is whole."""
    if not path.is_dir():  # a regular file or a dangling link in an entry's place is a bad entry, not a missing one
        return "not a directory" if path.is_symlink() or path.exists() else "missing"
    for name in required:
        if not (path / name).is_file():
            return f"{name} missing"
    names = sorted(p.name for p in path.iterdir() if p.is_file())
    for name in checked_files(names):
        problem = file_problem(name, (path / name).read_bytes(), arch)
        if problem:
            return f"{name} {problem}"
    return None
