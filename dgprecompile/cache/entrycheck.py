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

And an entry's content must not contradict its name (:func:`content_problem`): nothing in it is a symbolic link
(a link makes one entry's bytes answer for another's name); the kernel in ``kernel.cubin`` is the one ``kernel.cu``
instantiates (nvcc names a kernel by its mangled symbol, ``.text.<symbol>``, whose template arguments hold N, K,
the block sizes, stages, ...: ``_ZN9deep_gemm15fp8_gemm_kernelILj6144ELj1536ELj64E...``); and, where the caller
hands in the runtime's key calculator (keys/*: ``name_for_source``), ``kernel.cu`` is the source whose key is the
entry's name. So a cubin swapped between entries, or a kernel.cu edited, is caught even where an index's recorded
hashes were rewritten to match.
"""

from __future__ import annotations

import os
import re
import struct
from pathlib import Path

from dgprecompile.errors import DGError

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


_TEXT = b".text."
_LITERAL = re.compile(rb"L[a-z](n?\d+)E")  # an integer/bool template argument: Lj6144E, Lb1E (enums are LN...E)
_INSTANCE = re.compile(r"&\s*([A-Za-z_]\w*)\s*<(.*?)>\s*\)", re.S)  # &kernel_name< args >)


def _sections(data: bytes) -> list[tuple[bytes, int, int]]:
    """(name, offset, size) of each section of a structurally whole ELF (cubin_problem None)."""
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    raw = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    str_off, str_size = raw[shstrndx][4], raw[shstrndx][5]
    strtab = data[str_off:str_off + str_size]
    return [(strtab[r[0]:].split(b"\0", 1)[0], r[4], r[5]) for r in raw]


def cubin_kernels(data: bytes) -> list[str]:
    """The mangled symbols of the kernels a whole cubin holds (its ``.text.<symbol>`` sections)."""
    return [name[len(_TEXT):].decode(errors="replace") for name, _, _ in _sections(data) if name.startswith(_TEXT)]


def source_instance(source: str) -> tuple[str, list[int]] | None:
    """The kernel template kernel.cu instantiates and its integer/bool arguments in order (``true`` 1, ``false`` 0;
    enum and type arguments left out), or None when it instantiates none."""
    found = _INSTANCE.search(source)
    if found is None:
        return None
    values = []
    for arg in found.group(2).split(","):
        arg = arg.strip()
        if re.fullmatch(r"-?\d+", arg):
            values.append(int(arg))
        elif arg in ("true", "false"):
            values.append(int(arg == "true"))
    return found.group(1), values


def _symbol_instance(symbol: str, name: str) -> list[int] | None:
    """The integer/bool template arguments of ``symbol`` when it is an instance of template ``name``, else None."""
    tag = f"{len(name)}{name}I"
    at = symbol.find(tag)
    if at < 0:
        return None
    return [int(v.replace(b"n", b"-")) for v in _LITERAL.findall(symbol[at + len(tag):].encode())]


def cubin_source_problem(cubin: bytes, source: str) -> str | None:
    """None when ``cubin`` (structurally whole) holds the kernel ``source`` (kernel.cu) instantiates, with the same
    template arguments; else what differs. A kernel.cu that instantiates nothing is not checked."""
    wanted = source_instance(source)
    if wanted is None:
        return None
    name, values = wanted
    symbols = cubin_kernels(cubin)
    found = [v for v in (_symbol_instance(s, name) for s in symbols) if v is not None]
    if not found:
        return f"kernel.cubin holds no {name} kernel, but kernel.cu instantiates one (holds: {', '.join(symbols)})"
    # nvcc adds defaulted template arguments after the written ones (transpose_fp32<512, 64, 20> is ...ELj21E)
    if any(v[:len(values)] == values for v in found):
        return None
    got = ", ".join(str(x) for x in found[0][:len(values)])
    return (f"kernel.cubin holds {name}<{got}> but kernel.cu instantiates {name}<{', '.join(map(str, values))}> "
            "(another kernel's cubin)")


def _families(entry: str) -> list[str]:
    """The JIT's kernel name inside an entry name: kernel.<family>.<digest> or <family>.<digest>."""
    base = entry.rsplit(".", 1)[0]
    return [base[len("kernel."):], base] if base.startswith("kernel.") else [base]


def link_problem(path: Path) -> str | None:
    """An entry directory that is a symbolic link, or holds one, is refused, never followed."""
    if path.is_symlink():
        return f"is a symbolic link (to {os.readlink(path)}), not an entry of its own"
    if path.is_dir():
        for child in sorted(path.iterdir()):
            if child.is_symlink():
                return f"{child.name} is a symbolic link (to {os.readlink(child)})"
    return None


def content_problem(path: Path, naming=None) -> str | None:
    """What in the entry directory ``path`` contradicts its name, or None when nothing does.

    Checks (each only where the entry has the files): no symbolic links; the kernel in ``kernel.cubin`` is the one
    ``kernel.cu`` instantiates, with the same template arguments; and when ``naming`` is given (the generation's key
    context, anything with ``name_for_source(family, source) -> entry name``), ``kernel.cu`` is the source whose
    runtime key is ``path.name``. Call it on a structurally whole entry (:func:`entry_problem` does)."""
    linked = link_problem(path)
    if linked or not path.is_dir():
        return linked
    cu, cubin = path / "kernel.cu", path / "kernel.cubin"
    source = cu.read_bytes().decode("utf-8", "surrogateescape") if cu.is_file() else None
    if source is not None and cubin.is_file():
        data = cubin.read_bytes()
        if cubin_problem(data, None) is None:
            problem = cubin_source_problem(data, source)
            if problem:
                return problem
    if source is not None and naming is not None and getattr(naming, "name_for_source", None):
        try:
            named = any(naming.name_for_source(f, source) == path.name for f in _families(path.name))
        except (OSError, ValueError, DGError) as exc:  # e.g. an edited kernel.cu including a header not installed
            return f"kernel.cu cannot be keyed here ({getattr(exc, 'message', exc)})"
        if not named:
            return "kernel.cu is not the source this entry's name is the runtime's key of (edited, or another entry's)"
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


def entry_problem(path: Path, arch: str | None, required: tuple[str, ...] = (), naming=None) -> str | None:
    """None when the entry directory ``path`` holds every ``required`` file, each checked file is whole and its
    content agrees with its name (:func:`content_problem`; ``naming``: the key context, when known)."""
    linked = link_problem(path)
    if linked:
        return linked
    if not path.is_dir():
        return "missing" if not path.exists() else "not a directory"
    for name in required:
        if not (path / name).is_file():
            return f"{name} missing"
    names = sorted(p.name for p in path.iterdir() if p.is_file())
    for name in checked_files(names):
        problem = file_problem(name, (path / name).read_bytes(), arch)
        if problem:
            return f"{name} {problem}"
    return content_problem(path, naming)
