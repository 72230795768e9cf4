"""Is an entry on disk the same build as a fresh one? Byte for byte, except where nvcc itself never repeats.

nvcc gives every compile's internal-linkage symbols a unique name: ``_INTERNAL_<8 hex>_<n>_<file>_<8 hex>_<digits>``
(and ``_GLOBAL__N__...`` for anonymous namespaces), with a hash and a number that change from run to run. Two
builds of one kernel.cu (sgl-deep-gemm 0.1.3, nvcc 13.0) differ in those names in ``.strtab`` and nowhere else.
So a cubin is compared with those three fields blanked in both files; every other byte must be equal. A byte that
differs is accepted only where the fresh build itself has such a field, so a changed instruction never passes.

The last number is the compiling process's id, so its length changes with the pid's digits (a busy machine, a pid
namespace): then the string table's length, the offsets into it and the file offsets after it move too. Such
cubins are compared as ELF files: every section by name, its header fields but the file offset, its bytes equal,
except the string tables (their names, the unique fields blanked) and the symbol tables (every field but the name
offset equal, the names they point at equal once blanked); the program headers but their file offsets.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

_UNIQUE = re.compile(rb"(?:_INTERNAL_|_GLOBAL__N__)([0-9a-f]{8})_(\d{1,4})_")
_TAIL = re.compile(rb"_([0-9a-f]{8})_(\d+)")
_SHT_SYMTAB, _SHT_STRTAB = 2, 3
_SECTION = struct.Struct("<IIQQQQIIQQ")  # ELF64: name, type, flags, addr, offset, size, link, info, align, entsize
_PROGRAM = struct.Struct("<IIQQQQQQ")  # ELF64: type, flags, offset, vaddr, paddr, filesz, memsz, align
_SYMBOL = 24  # bytes of one ELF64 symbol; its first 4 are the name's offset into the linked string table


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
    if not name.endswith(".cubin"):
        return False
    if len(a) == len(b) and blank_unique_names(a) == blank_unique_names(b):
        return True
    return same_elf(a, b)


def _elf(data: bytes):
    """(header without e_shoff/e_phoff, program headers without offsets, {section name: (fields, bytes, link)},
    sections in order) of an ELF64 little-endian file, or None where it is not one or does not parse."""
    if data[:4] != b"\x7fELF" or data[4:6] != b"\x02\x01" or len(data) < 64:
        return None
    phoff, shoff = struct.unpack_from("<QQ", data, 0x20)
    phentsize, phnum, shentsize, shnum, shstrndx = struct.unpack_from("<HHHHH", data, 0x36)
    try:
        programs = [_PROGRAM.unpack_from(data, phoff + i * phentsize) for i in range(phnum)]
        headers = [_SECTION.unpack_from(data, shoff + i * shentsize) for i in range(shnum)]
        names = headers[shstrndx] if shnum else None
    except (struct.error, IndexError):
        return None
    if names is None or any(h[4] + h[5] > len(data) for h in headers if h[1] != 8):  # 8: NOBITS, no bytes
        return None
    table = data[names[4]:names[4] + names[5]]
    sections = []
    for h in headers:
        end = table.find(b"\0", h[0])
        sections.append((table[h[0]:end if end >= 0 else None], h, b"" if h[1] == 8 else data[h[4]:h[4] + h[5]]))
    head = data[:0x20] + data[0x30:0x40]
    return head, [p[:2] + p[3:] for p in programs], sections


_MANGLED = re.compile(rb"(\d+)(?=_INTERNAL_|_GLOBAL__N__)")
_IDENT_HEAD = re.compile(rb"^(_INTERNAL_|_GLOBAL__N__)[0-9a-f]{8}_(\d{1,4})_")
_IDENT_TAIL = re.compile(rb"_[0-9a-f]{8}(?:_\d+)?$")


def canonical_names(data: bytes) -> bytes:
    """``data`` with each of nvcc's unique names in a mangled symbol (``<length><identifier>``) cut to its fixed
    parts: the length and the per-compile hashes and process id replaced by '#', the file name kept. The length
    tells where the identifier ends, so a process id of any number of digits is told from the next name's length."""
    out, at = bytearray(), 0
    for m in _MANGLED.finditer(data):
        if m.start() < at:
            continue
        found = _identifier(data, m)
        if found is None:
            continue
        cut, end, fixed = found
        out += data[at:cut] + b"#" + fixed
        at = end
    return bytes(out + data[at:])


def _identifier(data: bytes, m: re.Match):
    """Where a unique name's length starts, where the name ends and its fixed form; the run of digits before it may
    begin with the end of the name before it (``3__446_GLOBAL__N__...``: ``__4``, then 46), so each of its suffixes
    is tried, the longest first, until one gives a whole unique name."""
    digits, start = m.group(1), m.end()
    for k in range(len(digits)):
        length = int(digits[k:])
        ident = data[start:start + length]
        head = _IDENT_HEAD.match(ident)
        if len(ident) == length and head is not None and _IDENT_TAIL.search(ident):
            fixed = _IDENT_TAIL.sub(b"_#", head.group(1) + b"#_" + head.group(2) + b"_" + ident[head.end():])
            return m.start() + k, start + length, fixed
    return None


def _names(strtab: bytes, offset: int) -> bytes:
    end = strtab.find(b"\0", offset)
    return canonical_names(strtab[offset:end if end >= 0 else None])


def same_elf(a: bytes, b: bytes) -> bool:
    """Two cubins that differ only in the length of nvcc's unique names (see the module's note)."""
    ea, eb = _elf(a), _elf(b)
    if ea is None or eb is None or ea[0] != eb[0] or ea[1] != eb[1] or len(ea[2]) != len(eb[2]):
        return False
    for (na, ha, da), (nb, hb, db) in zip(ea[2], eb[2], strict=True):
        if canonical_names(na) != canonical_names(nb) or ha[1:4] + ha[6:] != hb[1:4] + hb[6:]:
            return False
        if ha[1] == _SHT_STRTAB:
            if [canonical_names(x) for x in da.split(b"\0")] != [canonical_names(x) for x in db.split(b"\0")]:
                return False
        elif ha[1] == _SHT_SYMTAB and ha[9] == _SYMBOL:
            if len(da) != len(db) or ha[6] >= len(ea[2]):
                return False
            sa, sb = ea[2][ha[6]][2], eb[2][hb[6]][2]
            for i in range(0, len(da), _SYMBOL):
                if da[i + 4:i + _SYMBOL] != db[i + 4:i + _SYMBOL]:
                    return False
                if _names(sa, int.from_bytes(da[i:i + 4], "little")) != _names(sb, int.from_bytes(db[i:i + 4], "little")):
                    return False
        elif ha[5] != hb[5] or da != db:
            return False
    return True
