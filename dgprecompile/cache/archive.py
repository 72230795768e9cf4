"""pack's streaming writer: entry files go from the cache into the tar one chunk at a time, never held whole.

Two passes over the entries' files, each file opened under the real cache root without following links
(cache/confine.py): the first checks each file (a regular file of one link, within the caps) and hashes it for
the manifest, which the archive holds first; the second streams each file into the tar, hashing again as it goes,
and refuses (nothing packed) a file that changed in between. Memory stays at a chunk per file whatever the sizes.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from dgprecompile.cache.confine import Limits, Refused, entry_dir, open_file, refusal, too_large
from dgprecompile.errors import CheckFailed

CHUNK = 1 << 20
CHANGED_HINT = "run pack again when no warm or job is writing the cache"


@dataclass(frozen=True)
class Member:
    name: str  # <area>/<entry>/<file>, as archived
    member_dir: str  # <area>/<entry>
    file: str
    sha256: str
    size: int
    ident: tuple[int, int]  # (st_dev, st_ino) at the first pass: the second reads the same file


def _hash_fd(fd: int) -> str:
    h = hashlib.sha256()
    for chunk in iter(lambda: os.read(fd, CHUNK), b""):
        h.update(chunk)
    return h.hexdigest()


def collect(root: Path, entries: Iterable[tuple[str, dict[str, str]]], limits: Limits) -> list[Member]:
    """First pass: each entry's (``member_dir``, {file: recorded sha256}) files, checked and hashed. Raises
    CheckFailed (nothing packed) for a link, a hard-linked or irregular file, a cap exceeded, or changed bytes."""
    out: list[Member] = []
    total = 0
    for member_dir, files in entries:
        try:
            with entry_dir(root, member_dir) as dfd:
                members = _collect_entry(root, dfd, member_dir, files, limits)
        except Refused as exc:
            raise refusal(str(exc)) from None
        out += members
        total += sum(m.size for m in members)
        if total > limits.artifact_bytes:
            raise refusal(f"more than {limits.artifact_bytes >> 20} MiB of entries (the cap on one artifact, "
                          "--max-artifact-mib)")
    return out


def _collect_entry(root: Path, dfd: int, member_dir: str, files: dict[str, str], limits: Limits) -> list[Member]:
    """One entry's files (opened under its directory ``dfd``), checked against the cap on one entry and hashed."""
    out: list[Member] = []
    size = 0
    for name, digest in sorted(files.items()):
        shown = f"{root}/{member_dir}/{name}"
        fd, st = open_file(dfd, name, shown)
        try:
            size += st.st_size
            if size > limits.entry_bytes:
                raise Refused(too_large(member_dir, limits))
            actual = _hash_fd(fd)
        finally:
            os.close(fd)
        if actual != digest:
            raise CheckFailed(f"{shown} differs from the index (or changed while packing); nothing "
                              "was packed", hint=CHANGED_HINT)
        out.append(Member(f"{member_dir}/{name}", member_dir, name, digest, st.st_size, (st.st_dev, st.st_ino)))
    return out


class _Hashing:
    """A file descriptor read for tarfile: hashes what it yields and refuses to end before ``size`` bytes."""

    def __init__(self, fd: int, size: int, shown: str):
        self.fd, self.left, self.shown, self.sha = fd, size, shown, hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        want = self.left if n is None or n < 0 else min(n, self.left)
        data = os.read(self.fd, want) if want else b""
        while len(data) < want:  # a short read is not the end; an empty one is
            more = os.read(self.fd, want - len(data))
            if not more:
                raise CheckFailed(f"{self.shown} shrank while packing; nothing was packed", hint=CHANGED_HINT)
            data += more
        self.left -= len(data)
        self.sha.update(data)
        return data


def tarinfo(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = 0
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.type = tarfile.REGTYPE
    return info


def write(raw: IO[bytes], root: Path, head: list[tuple[str, bytes]], members: list[Member]) -> None:
    """The gzip-compressed tar: ``head`` (name, bytes) first (the manifest, the index), then every member streamed
    from the cache (second pass). Deterministic: fixed modes, zero mtimes and owners, gzip mtime 0."""
    with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT, copybufsize=CHUNK) as tar:
            for name, data in head:
                tar.addfile(tarinfo(name, len(data)), io.BytesIO(data))
            for member in sorted(members, key=lambda m: m.name):
                _stream(tar, root, member)


def _stream(tar: tarfile.TarFile, root: Path, member: Member) -> None:
    shown = f"{root}/{member.name}"
    try:
        with entry_dir(root, member.member_dir) as dfd:
            fd, st = open_file(dfd, member.file, shown)
    except Refused as exc:
        raise refusal(str(exc)) from None
    try:
        if (st.st_dev, st.st_ino) != member.ident or st.st_size != member.size:
            raise CheckFailed(f"{shown} was replaced while packing; nothing was packed", hint=CHANGED_HINT)
        reader = _Hashing(fd, member.size, shown)
        tar.addfile(tarinfo(member.name, member.size), reader)
        if reader.sha.hexdigest() != member.sha256:
            raise CheckFailed(f"{shown} changed while packing; nothing was packed", hint=CHANGED_HINT)
    finally:
        os.close(fd)
