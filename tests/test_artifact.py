"""`pack` and `unpack` with real archives of real legacy-compiled entries, and hand-crafted malicious ones.

Every refused or failed unpack must leave the target cache byte-for-byte as it was (``tree_hash``), print one
`error:` line with a `hint:`, exit non-zero, and show no traceback.
"""

from __future__ import annotations

import errno
import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import PLAN, assert_one_error, read_index, tree_hash, warm_once, write_index

from dgprecompile.cache.artifact import MANIFEST_MEMBER
from dgprecompile.cli.main import cli
from dgprecompile.keys.fingerprint import short_id

pytestmark = pytest.mark.nvcc


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def copy_cache(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest)
    return dest


def drop_entries(cache: Path, count: int) -> list[str]:
    """Remove the first ``count`` kernels' entries and index records; returns the entry names."""
    index = read_index(cache)
    gone = []
    for kid, record in sorted(index["kernels"].items())[:count]:
        shutil.rmtree(cache / "cache" / record["entry"])
        del index["kernels"][kid]
        gone.append(record["entry"])
    write_index(cache, index)
    return gone


@pytest.fixture(scope="session")
def packed(tmp_path_factory) -> tuple[Path, Path]:
    """(warmed cache, its artifact)."""
    cache = warm_once(tmp_path_factory)
    out = tmp_path_factory.mktemp("artifact") / "deepgemm.tar.gz"
    res = run("pack", *PLAN, "--cache-dir", str(cache), "-o", str(out))
    assert res.exit_code == 0, res.output
    return cache, out


def members_of(artifact: Path) -> list[tuple[tarfile.TarInfo, bytes | None]]:
    out = []
    with tarfile.open(artifact, "r:gz") as tar:
        for info in tar:
            out.append((info, tar.extractfile(info).read() if info.isreg() else None))
    return out


def write_archive(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            info.size = len(data) if data is not None else 0
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def expect_refusal(artifact: Path, target: Path, *words: str, code: int | None = None, extra=()):
    before = tree_hash(target)
    res = run("unpack", str(artifact), "--cache-dir", str(target), *extra)
    assert res.exit_code != 0, res.output
    if code is not None:
        assert res.exit_code == code, res.output
    assert "Traceback" not in res.output
    lines = res.stderr.strip().splitlines()
    assert lines[0].startswith("error: ") and len([x for x in lines if x.startswith("error:")]) == 1, res.stderr
    assert any(x.startswith("hint: ") for x in lines), res.stderr
    for w in words:
        assert w in res.stderr, res.stderr
    assert tree_hash(target) == before, "the cache changed"
    return res


@pytest.fixture
def target(packed, tmp_path) -> Path:
    """A cache holding the warmed entries minus two, for merges and failures."""
    cache = copy_cache(packed[0], tmp_path / "target")
    drop_entries(cache, 2)
    return cache


# ---- pack -----------------------------------------------------------------------------------------------


def test_an_interrupted_pack_leaves_no_artifact_and_nothing_beside_it_and_says_so(packed, tmp_path, monkeypatch):
    """Ctrl-C (or SIGTERM/SIGHUP, which dgprecompile turns into the same) while the archive streams its second
    member: exit 130, one line saying what was left (nothing at -o, no temporary file beside it, the cache as it
    was), not the message of the commands that write into the cache."""
    from dgprecompile.cache import archive

    cache, _ = packed
    real, streamed = archive._stream, []

    def stream_then_interrupt(tar, root, member):
        if streamed:
            raise KeyboardInterrupt
        streamed.append(member)
        real(tar, root, member)

    monkeypatch.setattr(archive, "_stream", stream_then_interrupt)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    before = tree_hash(cache)
    res = run("pack", *PLAN, "--cache-dir", str(cache), "-o", str(out_dir / "deepgemm.tar.gz"))
    assert streamed and res.exit_code == 130, res.output
    assert res.stderr.strip().splitlines()[-1] == ("error: interrupted: no artifact was written at -o (nothing "
                                                    "half-written beside it) and the cache is untouched")
    assert list(out_dir.iterdir()) == [] and tree_hash(cache) == before


def test_pack_is_deterministic_and_normalised(packed, tmp_path):
    cache, first = packed
    copy = copy_cache(cache, tmp_path / "copy")
    for p in (copy / "cache").rglob("*"):
        os.utime(p, (1_700_000_000, 1_700_000_000))
        if p.is_file():
            p.chmod(0o600)
    again = tmp_path / "again.tar.gz"
    assert run("pack", *PLAN, "--cache-dir", str(copy), "-o", str(again)).exit_code == 0
    assert again.read_bytes() == first.read_bytes()
    raw = first.read_bytes()
    assert raw[:2] == b"\x1f\x8b" and raw[4:8] == b"\0\0\0\0"  # gzip mtime 0
    members = members_of(first)
    names = [i.name for i, _ in members]
    assert names[0] == MANIFEST_MEMBER and names[1] == "dgprecompile/index.json"
    assert names[2:] == sorted(names[2:]) and len(names) == 2 + 4 * 2
    for info, _ in members:
        assert (info.mtime, info.uid, info.gid, info.uname, info.gname, info.mode) == (0, 0, 0, "", "", 0o644)
        assert info.isreg()
    manifest = json.loads(members[0][1])
    assert manifest["format"] == "dgprecompile-cache-artifact" and manifest["missing"] == []
    assert len(manifest["kernels"]) == 4
    for info, data in members[1:]:
        assert manifest["members"][info.name]["sha256"] == hashlib.sha256(data).hexdigest()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_pack_name_carries_the_fingerprint(packed, tmp_path):
    cache, _ = packed
    res = run("pack", *PLAN, "--cache-dir", str(cache), "-o", str(tmp_path / "ci" / "dg-{fingerprint}.tar.gz"))
    assert res.exit_code == 0, res.output
    fid = short_id(read_index(cache)["fingerprint"])
    assert res.stdout == f"{tmp_path / 'ci' / f'dg-{fid}.tar.gz'}\n"
    assert Path(res.stdout.strip()).is_file()


def test_pack_refuses_an_incomplete_cache(packed, tmp_path):
    cache = copy_cache(packed[0], tmp_path / "c")
    drop_entries(cache, 1)
    out = tmp_path / "out"
    res = run("pack", *PLAN, "--cache-dir", str(cache), "-o", str(out / "a.tar.gz"))
    assert res.exit_code == 1 and "1 of 4 planned kernels are not in the cache" in res.stderr
    assert "--allow-missing" in res.stderr
    assert not out.exists() or not list(out.iterdir())
    res = run("pack", *PLAN, "--cache-dir", str(cache), "-o", str(out / "a.tar.gz"), "--allow-missing", "--json")
    assert res.exit_code == 0, res.output
    assert len(json.loads(res.stdout)["missing"]) == 1
    assert len(json.loads(members_of(out / "a.tar.gz")[0][1])["missing"]) == 1


def test_pack_refuses_a_damaged_entry_and_a_cache_without_index(packed, tmp_path):
    cache = copy_cache(packed[0], tmp_path / "c")
    entry = sorted(read_index(cache)["kernels"].values(), key=lambda r: r["entry"])[0]["entry"]
    (cache / "cache" / entry / "kernel.cubin").write_bytes(b"not a cubin")
    res = run("pack", *PLAN, "--cache-dir", str(cache), "-o", str(tmp_path / "a.tar.gz"))
    assert res.exit_code == 1 and "differ from the index" in res.stderr and "hint:" in res.stderr
    res = run("pack", *PLAN, "--cache-dir", str(tmp_path / "empty"), "-o", str(tmp_path / "a.tar.gz"))
    assert res.exit_code == 1 and "no dgprecompile index" in res.stderr
    assert not (tmp_path / "a.tar.gz").exists()


# ---- unpack: the good paths -----------------------------------------------------------------------------


def test_unpack_into_an_empty_cache_then_verify(packed, tmp_path):
    _, artifact = packed
    dest = tmp_path / "fresh" / "deep_gemm"
    res = run("unpack", str(artifact), "--cache-dir", str(dest), "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert len(data["added"]) == 4 and data["already_present"] == [] and data["index_records_added"] == 4
    assert not list((dest / "dgprecompile" / "staging").iterdir())
    ver = run("verify", *PLAN, "--cache-dir", str(dest))
    assert ver.exit_code == 0 and ver.stdout.startswith("complete: 4/4")
    # a second unpack finds everything and changes nothing
    before = tree_hash(dest)
    again = run("unpack", str(artifact), "--cache-dir", str(dest))
    assert again.exit_code == 0 and "0 entries added, 4 already present" in again.stdout
    assert tree_hash(dest) == before


def test_a_changed_entry_refuses_unpack_unless_replace_changed(packed, target):
    """Issue 19 item 1: `unpack good.tar.gz` used to keep an entry that differs from the artifact's and exit 0, so
    the documented way out changed nothing. Now it is named in the refusal (nothing installed) with the flag as
    the hint, and --replace-changed swaps it for the artifact's checked entry."""
    _, artifact = packed
    index = read_index(target)
    changed = sorted(r["entry"] for r in index["kernels"].values())[0]
    (target / "cache" / changed / "kernel.cu").write_text("// someone else's entry\n")
    assert run("verify", *PLAN, "--cache-dir", str(target)).exit_code == 1
    res = expect_refusal(artifact, target, changed, "--replace-changed", "nothing was unpacked", code=1)
    assert "differs from the artifact's" in res.stderr
    res = run("unpack", str(artifact), "--cache-dir", str(target), "--replace-changed", "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["replaced"] == [changed] and len(data["added"]) == 2 and len(data["already_present"]) == 1
    assert f"replaced {changed}" in res.stderr
    assert (target / "cache" / changed / "kernel.cu").read_text() != "// someone else's entry\n"
    assert not list((target / "dgprecompile" / "staging").iterdir())
    ver = run("verify", *PLAN, "--cache-dir", str(target))
    assert ver.exit_code == 0 and ver.stdout.startswith("complete: 4/4"), ver.output


# ---- unpack: refused before touching anything ------------------------------------------------------------


def test_missing_empty_and_not_gzip(target, tmp_path):
    expect_refusal(tmp_path / "nope.tar.gz", target, "artifact not found", code=2)
    (tmp_path / "empty.tar.gz").write_bytes(b"")
    expect_refusal(tmp_path / "empty.tar.gz", target, "not gzip", code=2)
    (tmp_path / "text.tar.gz").write_text("hello, not an archive\n")
    expect_refusal(tmp_path / "text.tar.gz", target, "not gzip", code=2)
    (tmp_path / "junk.tar.gz").write_bytes(b"\x1f\x8b" + os.urandom(300))
    expect_refusal(tmp_path / "junk.tar.gz", target, "truncated or corrupt", code=2)


@pytest.mark.parametrize("keep", [0.5, 0.9, -30])
def test_truncated_archive(packed, target, tmp_path, keep):
    raw = packed[1].read_bytes()
    cut = int(len(raw) * keep) if keep > 0 else len(raw) + keep
    bad = tmp_path / "cut.tar.gz"
    bad.write_bytes(raw[:cut])
    expect_refusal(bad, target, str(bad), code=2)


def test_corrupt_member(packed, target, tmp_path):
    members = members_of(packed[1])
    info, data = next(m for m in members if m[0].name.endswith("kernel.cubin"))
    flipped = bytearray(data)
    flipped[64] ^= 1
    members = [(i, bytes(flipped) if i is info else d) for i, d in members]
    expect_refusal(write_archive(tmp_path / "bad.tar.gz", members), target, "is corrupt (sha256", code=2)


def test_wrong_format_and_schema(packed, target, tmp_path):
    members = members_of(packed[1])
    expect_refusal(write_archive(tmp_path / "a.tar.gz", members[1:]), target, "not a dgprecompile cache artifact")
    manifest = json.loads(members[0][1])
    for change, words in [({"format": "something-else"}, "another format"), ({"schema": 99}, "schema 99")]:
        edited = [(members[0][0], json.dumps({**manifest, **change}).encode()), *members[1:]]
        expect_refusal(write_archive(tmp_path / "b.tar.gz", edited), target, words, code=2)
    plain = tmp_path / "plain.tar.gz"
    with tarfile.open(plain, "w:gz") as tar:
        tar.add(__file__, arcname="README")
    expect_refusal(plain, target, "refusing member 'README'")


def _hostile(kind: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo({"abs": "/etc/evil", "dotdot": "cache/../../evil", "symlink": "cache/kernel.x.1/link",
                            "hardlink": "cache/kernel.x.1/hard", "chr": "cache/kernel.x.1/dev",
                            "blk": "cache/kernel.x.1/blk", "fifo": "cache/kernel.x.1/fifo",
                            "outside": "somewhere/else", "deep": "cache/kernel.x.1/sub/file"}[kind])
    info.type = {"symlink": tarfile.SYMTYPE, "hardlink": tarfile.LNKTYPE, "chr": tarfile.CHRTYPE,
                 "blk": tarfile.BLKTYPE, "fifo": tarfile.FIFOTYPE}.get(kind, tarfile.REGTYPE)
    if kind in ("symlink", "hardlink"):
        info.linkname = "/etc/passwd"
    return info


@pytest.mark.parametrize("kind,words", [
    ("abs", "absolute path"), ("dotdot", "'..'"), ("symlink", "a link"), ("hardlink", "a link"),
    ("chr", "a device"), ("blk", "a device"), ("fifo", "a fifo"), ("outside", "outside"), ("deep", "outside"),
])
def test_hostile_members_are_refused(packed, target, tmp_path, kind, words):
    members = members_of(packed[1])
    info = _hostile(kind)
    data = b"x" if info.isreg() else None
    # placed after the genuine members, so the refusal cannot depend on reading the manifest first
    bad = write_archive(tmp_path / f"{kind}.tar.gz", [*members, (info, data)])
    expect_refusal(bad, target, words, code=2)
    assert not Path("/etc/evil").exists()


def test_unlisted_and_duplicate_members(packed, target, tmp_path):
    members = members_of(packed[1])
    extra = tarfile.TarInfo("cache/kernel.gemm_fp8_fp8_bf16_nt.ffffffffffff/kernel.cubin")
    expect_refusal(write_archive(tmp_path / "u.tar.gz", [*members, (extra, b"x")]), target, "not listed")
    expect_refusal(write_archive(tmp_path / "d.tar.gz", [*members, members[-1]]), target, "appears twice")


# ---- fingerprints -----------------------------------------------------------------------------------------


def _with_fingerprint(packed, tmp_path, change) -> Path:
    members = members_of(packed[1])
    manifest = json.loads(members[0][1])
    index = json.loads(members[1][1])
    change(manifest["fingerprint"])
    change(index["fingerprint"])
    index_bytes = json.dumps(index).encode()
    manifest["members"]["dgprecompile/index.json"] = {"sha256": hashlib.sha256(index_bytes).hexdigest(),
                                                      "bytes": len(index_bytes)}
    return write_archive(tmp_path / "fp.tar.gz", [(members[0][0], json.dumps(manifest).encode()),
                                                   (members[1][0], index_bytes), *members[2:]])


def test_fingerprint_mismatch_is_refused_unless_forced(packed, target, tmp_path):
    def change(fp):
        fp["deepgemm"]["headers_sha256"] = "0" * 64
        fp["nvcc"]["release"] = "12.8"

    bad = _with_fingerprint(packed, tmp_path, change)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    res = expect_refusal(bad, fresh, "another environment", "deepgemm.headers_sha256", "nvcc.release", code=1)
    assert "--force" in res.stderr
    forced = run("unpack", str(bad), "--cache-dir", str(fresh), "--force", "--json")
    assert forced.exit_code == 0, forced.output
    assert len(json.loads(forced.stdout)["added"]) == 4 and "--force" in forced.stderr
    # forced into a cache built for this environment: entries are added, the index keeps its own fingerprint
    own = read_index(target)["fingerprint"]
    into = run("unpack", str(bad), "--cache-dir", str(target), "--force")
    assert into.exit_code == 0 and "2 entries added" in into.stdout and "keeps its own fingerprint" in into.stderr
    assert read_index(target)["fingerprint"] == own


def test_fingerprint_unverifiable_without_deepgemm(packed, target, tmp_path, monkeypatch):
    monkeypatch.setattr("dgprecompile.cache.verify.find_deepgemm", lambda: None)
    expect_refusal(packed[1], target, "could not be checked", "DeepGEMM is not importable", code=1)
    res = run("unpack", str(packed[1]), "--cache-dir", str(target), "--force")
    assert res.exit_code == 0 and "2 entries added" in res.stdout


# ---- failures while writing leave the cache as it was -----------------------------------------------------


def test_disk_full_while_extracting_is_rolled_back(packed, target, monkeypatch):
    import dgprecompile.cache.unpack as unpack

    real, calls = unpack._copy_stream, []

    def full(src, dest):
        calls.append(dest)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, "No space left on device", str(dest))
        return real(src, dest)

    monkeypatch.setattr(unpack, "_copy_stream", full)
    expect_refusal(packed[1], target, "no space left", "the cache is unchanged", code=3)
    assert len(calls) == 3


def test_disk_full_while_writing_the_index_removes_installed_entries(packed, target, monkeypatch):
    import dgprecompile.cache.store as cachestore

    def full(path, text):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(cachestore, "atomic_write_text", full)
    expect_refusal(packed[1], target, "no space left", code=3)


def test_a_real_full_filesystem(packed, tmp_path):
    """A 192 KiB tmpfs holding a cache of two entries; the artifact's other two do not fit."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=192k", "tmpfs", str(mnt)], check=True,
                       capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {exc}")
    try:
        cache = mnt / "deep_gemm"
        index = read_index(packed[0])
        big = sorted(index["kernels"].items(), key=lambda kv: -kv[1]["bytes"])[:2]
        skip = {record["entry"] for _, record in big}
        shutil.copytree(packed[0], cache, ignore=lambda d, names: [n for n in names if n in skip])
        for kid, _ in big:
            del index["kernels"][kid]
        write_index(cache, index)
        free = shutil.disk_usage(mnt).free
        assert free < sum(r["bytes"] for _, r in big), "the tmpfs is too large for this test"
        expect_refusal(packed[1], cache, f"no space left on {mnt}", "free", "needed", code=3)
    finally:
        subprocess.run(["umount", str(mnt)], check=False, capture_output=True, timeout=30)


def test_gzip_header_checks_do_not_need_the_whole_file(tmp_path, target):
    raw = gzip.compress(b"not a tar at all" * 100)
    (tmp_path / "x.tar.gz").write_bytes(raw)
    expect_refusal(tmp_path / "x.tar.gz", target, "truncated or corrupt", code=2)


# ---- issue 19: bounded expansion, every member checked, schemas, leftovers, the mount of -o -------------------


class _Zeros(io.RawIOBase):
    """``size`` zero bytes, streamed: a hostile member written without holding it in memory."""

    def __init__(self, size: int):
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        n = min(len(buf), self.left)
        buf[:n] = bytes(n)
        self.left -= n
        return n


def test_a_member_larger_than_declared_is_refused_before_it_is_read(packed, target, tmp_path):
    """Issue 19 item 4: a 1 MB artifact whose member expands to 1.1 GB was read to the end (then refused as
    corrupt). Now a member whose tar size differs from the size the manifest declares is refused unread
    (256 MiB here, to keep the test's own compression short)."""
    members = members_of(packed[1])
    victim = next(i for i, _ in members if i.name.endswith("kernel.cubin"))
    bomb = tmp_path / "bomb.tar.gz"
    with tarfile.open(bomb, "w:gz", format=tarfile.PAX_FORMAT, compresslevel=9) as tar:
        for info, data in members:
            if info is victim:
                info.size = 256 << 20
                tar.addfile(info, _Zeros(info.size))
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    assert bomb.stat().st_size < 1 << 20  # under 1 MB on disk, 256 MiB expanded
    expect_refusal(bomb, target, victim.name, "but the manifest declares", code=2)


def test_a_pax_header_bomb_is_refused(packed, target, tmp_path):
    """Tar framing past the declared sizes (a 32 MiB pax header, read into memory by tarfile) is refused: the
    decompressed stream may not grow past the manifest's sizes plus a fixed allowance per member."""
    members = members_of(packed[1])
    bomb = tarfile.TarInfo("cache/kernel.x.1/blob")
    bomb.pax_headers = {"comment": "x" * (32 << 20)}
    bad = write_archive(tmp_path / "pax.tar.gz", [*members, (bomb, b"")])
    expect_refusal(bad, target, "expands past the sizes its manifest declares", code=2)


def _replace_cubin(packed, tmp_path, data: bytes) -> Path:
    """The artifact with one cubin replaced by ``data``, and the index and manifest rewritten to match it."""
    members = members_of(packed[1])
    manifest, index = json.loads(members[0][1]), json.loads(members[1][1])
    info = next(i for i, _ in members if i.name.endswith("kernel.cubin"))
    entry = info.name.split("/")[1]
    record = next(r for r in [*index["kernels"].values(), *index["extra"].values()] if r["entry"] == entry)
    record["files"]["kernel.cubin"] = hashlib.sha256(data).hexdigest()
    index_bytes = json.dumps(index).encode()
    manifest["members"][info.name] = {"sha256": record["files"]["kernel.cubin"], "bytes": len(data)}
    manifest["members"]["dgprecompile/index.json"] = {"sha256": hashlib.sha256(index_bytes).hexdigest(),
                                                      "bytes": len(index_bytes)}
    out = [(members[0][0], json.dumps(manifest).encode()), (members[1][0], index_bytes)]
    out += [(i, data if i is info else d) for i, d in members[2:]]
    return write_archive(tmp_path / "cubin.tar.gz", out)


def test_a_cubin_over_64_mib_is_checked_not_installed(packed, target, tmp_path):
    """Issue 19 item 4: a consistent artifact with an 80 MiB cubin skipped the ELF check and failed at install
    with exit 4 (compile failed); every checked member is checked before anything is installed: exit 2."""
    bad = _replace_cubin(packed, tmp_path, bytes(80 << 20))
    expect_refusal(bad, target, "kernel.cubin", "larger than any loadable entry file", code=2)
    small = _replace_cubin(packed, tmp_path, b"\x7fELF" + bytes(200))
    expect_refusal(small, target, "not loadable", code=2)


@pytest.mark.parametrize("change,words", [
    (lambda m, i: (m["fingerprint"].__setitem__("deepgemm", "x"), i["fingerprint"].__setitem__("deepgemm", "x")),
     ["fingerprint.deepgemm", "is not an object"]),
    (lambda m, i: next(iter(i["kernels"].values())).__setitem__("entry", 123), ["kernels", "entry", "123"]),
    (lambda m, i: m.__setitem__("members", {"dgprecompile/index.json": {"sha256": "x", "bytes": -1}}),
     ["members"]),
    (lambda m, i: m.__setitem__("plan", "qwen"), ["plan", "is not an object"]),
])
def test_malformed_manifest_or_index_is_one_error(packed, target, tmp_path, change, words):
    """Issue 19 item 6: `{"deepgemm": "x"}` or `"entry": 123` gave an AttributeError traceback; the manifest and
    the embedded index are checked against their schemas (data/schemas/artifact-manifest.json, index.json)."""
    members = members_of(packed[1])
    manifest, index = json.loads(members[0][1]), json.loads(members[1][1])
    change(manifest, index)
    index_bytes = json.dumps(index).encode()
    if isinstance(manifest.get("members"), dict) and "dgprecompile/index.json" in manifest["members"] \
            and manifest["members"]["dgprecompile/index.json"].get("bytes", 0) >= 0:
        manifest["members"]["dgprecompile/index.json"] = {"sha256": hashlib.sha256(index_bytes).hexdigest(),
                                                          "bytes": len(index_bytes)}
    bad = write_archive(tmp_path / "m.tar.gz", [(members[0][0], json.dumps(manifest).encode()),
                                                (members[1][0], index_bytes), *members[2:]])
    expect_refusal(bad, target, *words, code=2)


def test_the_manifest_must_come_first(packed, target, tmp_path):
    members = members_of(packed[1])
    bad = write_archive(tmp_path / "late.tar.gz", [members[1], members[0], *members[2:]])
    expect_refusal(bad, target, "its first member is 'dgprecompile/index.json'", code=2)


def _big_artifact(packed, tmp_path, mib: int) -> Path:
    from dgprecompile.cache.store import CacheStore

    cache = copy_cache(packed[0], tmp_path / "big")
    entry = cache / "cache" / "kernel.padding.000000000000"
    entry.mkdir()
    (entry / "blob").write_bytes(os.urandom(mib << 20))
    store = CacheStore(cache)
    record = store.record_entry(entry.name, by="adopted")
    store.update_index(lambda index: index.extra.__setitem__(entry.name, record))
    out = tmp_path / "big.tar.gz"
    assert run("pack", *PLAN, "--cache-dir", str(cache), "-o", str(out)).exit_code == 0
    return out


def test_a_killed_unpack_leaves_nothing_the_next_one_keeps(packed, tmp_path):
    """Issue 19 item 8: SIGKILL mid-extraction left a partial file in staging that only warm/pull cleaned. The
    next unpack removes what a dead process left."""
    import signal
    import sys
    import time

    big = _big_artifact(packed, tmp_path, 48)
    dest = tmp_path / "dest"
    staging = dest / "dgprecompile" / "staging"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent.parent),
                                                         os.environ.get("PYTHONPATH", "")])}
    for _attempt in range(5):
        shutil.rmtree(dest, ignore_errors=True)
        proc = subprocess.Popen([sys.executable, "-m", "dgprecompile", "unpack", str(big), "--cache-dir", str(dest),
                                 ], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline, caught = time.monotonic() + 120, False
        while time.monotonic() < deadline and proc.poll() is None:
            if staging.is_dir() and any(p.is_file() for p in staging.rglob("*")):
                os.kill(proc.pid, signal.SIGKILL)
                caught = True
                break
            time.sleep(0.005)
        proc.communicate(timeout=60)
        if caught and any(p.is_file() for p in staging.rglob("*")):
            break
    else:
        pytest.skip("could not kill the unpack mid-extraction on this machine")
    assert not list((dest / "cache").glob("kernel.padding.*")), "a partial entry was installed"
    res = run("unpack", str(big), "--cache-dir", str(dest))
    assert res.exit_code == 0, res.output
    assert not list(staging.iterdir()), "the killed unpack's staging is still there"
    assert run("verify", *PLAN, "--cache-dir", str(dest)).exit_code == 0


def test_pack_onto_a_full_small_filesystem_names_its_mount(packed, tmp_path):
    """Issue 19 item 10: `pack -o` onto a full tmpfs said "no space left on / (67.9 GiB free)"."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(mnt)], check=True,
                       capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {exc}")
    try:
        assert packed[1].stat().st_size > 16 << 10, "the artifact fits the tmpfs: this test needs a larger one"
        res = run("pack", *PLAN, "--cache-dir", str(packed[0]), "-o", str(mnt / "a.tar.gz"))
        assert res.exit_code == 3, res.output
        assert_one_error(res, f"no space left on {mnt} (", "-o")
        assert list(mnt.iterdir()) == []
    finally:
        subprocess.run(["umount", str(mnt)], check=False, capture_output=True, timeout=30)


# ---- issue 22, local files: keys, the unsigned local default ----------------------------------------------------


def test_keygen_writes_a_private_key_only_its_owner_reads(tmp_path):
    res = run("keygen", str(tmp_path / "keys"), "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    private, public = Path(data["private_key"]), Path(data["public_key"])
    assert private.stat().st_mode & 0o777 == 0o600 and public.name == "dgprecompile-signing.pub"
    assert len(data["fingerprint"]) == 64
    text = run("keygen", str(tmp_path / "other"))
    assert text.stdout == f"{tmp_path / 'other' / 'dgprecompile-signing.pub'}\n" and "fingerprint: " in text.stderr
    assert "PRIVATE" not in text.output and private.read_text() not in text.output
    before = private.read_bytes()
    again = run("keygen", str(tmp_path / "keys"))
    assert again.exit_code == 2 and private.read_bytes() == before
    assert_one_error(again, "already exists", "never overwritten")


def test_signing_keys_are_files_only_their_owner_reads(packed, tmp_path, monkeypatch):
    run("keygen", str(tmp_path / "k"))
    key = tmp_path / "k" / "dgprecompile-signing.key"
    out = tmp_path / "a.tar.gz"
    key.chmod(0o644)
    res = run("pack", *PLAN, "--cache-dir", str(packed[0]), "-o", str(out), "--signing-key", str(key))
    assert res.exit_code == 2 and not out.exists()
    assert_one_error(res, "may be read by others (mode 0644)", f"chmod 600 {key}")
    key.chmod(0o600)
    monkeypatch.setenv("DGPRECOMPILE_SIGNING_KEY", key.read_text())  # the key itself, not a path: refused
    res = run("pack", *PLAN, "--cache-dir", str(packed[0]), "-o", str(out))
    assert res.exit_code == 2 and "PRIVATE" not in res.output and key.read_text()[40:80] not in res.output
    assert_one_error(res, "must name a key file")
    monkeypatch.setenv("DGPRECOMPILE_SIGNING_KEY", str(key))
    res = run("pack", *PLAN, "--cache-dir", str(packed[0]), "-o", str(out))
    assert res.exit_code == 0 and Path(f"{out}.sig").is_file(), res.output
    sig = json.loads(Path(f"{out}.sig").read_text())
    assert sig["manifest_sha256"] == hashlib.sha256(members_of(out)[0][1]).hexdigest()
    # a trusted private key is a mistake: nodes need only the .pub
    res = run("unpack", str(out), "--cache-dir", str(tmp_path / "c"), "--trusted-key", str(key))
    assert_one_error(res, "is a private key")
    # re-packing unsigned at the same path removes the signature of the bytes it replaced
    monkeypatch.delenv("DGPRECOMPILE_SIGNING_KEY")
    assert run("pack", *PLAN, "--cache-dir", str(packed[0]), "-o", str(out)).exit_code == 0
    assert not Path(f"{out}.sig").exists()


def test_local_unpack_verifies_when_keys_are_trusted(packed, tmp_path):
    run("keygen", str(tmp_path / "k"))
    run("keygen", str(tmp_path / "other"))
    pub, other = tmp_path / "k" / "dgprecompile-signing.pub", tmp_path / "other" / "dgprecompile-signing.pub"
    out = tmp_path / "a.tar.gz"
    assert run("pack", *PLAN, "--cache-dir", str(packed[0]), "-o", str(out), "--signing-key",
               str(tmp_path / "k" / "dgprecompile-signing.key")).exit_code == 0
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    expect_refusal(out, fresh, "not trusted here", "--trusted-key", code=2, extra=("--trusted-key", str(other)))
    res = run("unpack", str(out), "--cache-dir", str(fresh), "--trusted-key", str(other), "--trusted-key", str(pub))
    assert res.exit_code == 0 and "signed by trusted key" in res.stderr, res.output
    # unsigned, with trusted keys: refused; without: unpacked with a warning (a local file the user chose)
    Path(f"{out}.sig").unlink()
    expect_refusal(out, tmp_path / "f2", "is not signed", code=2, extra=("--trusted-key", str(pub)))
    res = run("unpack", str(out), "--cache-dir", str(tmp_path / "f3"))
    assert res.exit_code == 0 and "is not signed" in res.stderr and "warning:" in res.stderr, res.output
    res = run("unpack", str(out), "--cache-dir", str(tmp_path / "f4"), "--trusted-key", str(pub), "--allow-unsigned")
    assert res.exit_code == 2 and not (tmp_path / "f4").exists()
    assert_one_error(res, "contradict")


def test_commands_that_do_not_sign_stay_light(packed, tmp_path):
    """cryptography is imported only when a key is loaded: an unsigned local unpack, a pack without a key and
    verify never import it."""
    import sys

    code = ("import sys; from dgprecompile.cli.main import main\n"
            "try:\n main(sys.argv[1:])\nexcept SystemExit as e: print('RC', e.code, file=sys.stderr)\n"
            "print('CRYPTO', 'cryptography' in sys.modules, file=sys.stderr)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent.parent),
                                                         os.environ.get("PYTHONPATH", "")])}
    env.pop("DGPRECOMPILE_TRUSTED_KEYS", None)
    env.pop("DGPRECOMPILE_SIGNING_KEY", None)
    for argv in (["unpack", str(packed[1]), "--cache-dir", str(tmp_path / "c")],
                 ["pack", *PLAN, "--cache-dir", str(packed[0]), "-o", str(tmp_path / "a.tar.gz")],
                 ["verify", *PLAN, "--cache-dir", str(packed[0])]):
        proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env,
                              timeout=300)
        assert "RC 0" in proc.stderr and "CRYPTO False" in proc.stderr, (argv, proc.stderr)


def test_a_malformed_signature_is_refused(packed, tmp_path):
    run("keygen", str(tmp_path / "k"))
    pub = str(tmp_path / "k" / "dgprecompile-signing.pub")
    out = tmp_path / "a.tar.gz"
    assert run("pack", *PLAN, "--cache-dir", str(packed[0]), "-o", str(out), "--signing-key",
               str(tmp_path / "k" / "dgprecompile-signing.key")).exit_code == 0
    sig = Path(f"{out}.sig")
    good = json.loads(sig.read_text())
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    for text, words in [("not json at all", "not JSON"), (json.dumps({**good, "algorithm": "rsa"}), "algorithm"),
                        (json.dumps({**good, "signature": "A" * 86 + "=="}), "does not cover this manifest")]:
        sig.write_text(text)
        expect_refusal(out, fresh, *words, code=2, extra=("--trusted-key", pub))


# ---- issue 29 item 5: trust configured but empty, trusted keys others may change ---------------------------------


def _signed(packed, tmp_path) -> tuple[Path, Path]:
    """(an artifact signed by a fresh key pair, that pair's .pub)."""
    run("keygen", str(tmp_path / "k"))
    out = tmp_path / "signed.tar.gz"
    assert run("pack", *PLAN, "--cache-dir", str(packed[0]), "-o", str(out), "--signing-key",
               str(tmp_path / "k" / "dgprecompile-signing.key")).exit_code == 0
    return out, tmp_path / "k" / "dgprecompile-signing.pub"


def _rehashed(artifact: Path, dest: Path) -> Path:
    """``artifact`` with one cubin byte changed and its index and manifest rewritten to match (its .sig kept):
    what someone who can write where artifacts lie, but holds no key, would make."""
    members = members_of(artifact)
    manifest, index = json.loads(members[0][1]), json.loads(members[1][1])
    info, data = next(m for m in members if m[0].name.endswith("kernel.cubin"))
    flipped = bytearray(data)
    flipped[-1] ^= 1  # past the ELF structures: still loadable
    digest = hashlib.sha256(bytes(flipped)).hexdigest()
    for record in [*index["kernels"].values(), *index["extra"].values()]:
        if record["entry"] == info.name.split("/")[1]:
            record["files"]["kernel.cubin"] = digest
    index_bytes = json.dumps(index).encode()
    manifest["members"][info.name]["sha256"] = digest
    manifest["members"]["dgprecompile/index.json"] = {"sha256": hashlib.sha256(index_bytes).hexdigest(),
                                                      "bytes": len(index_bytes)}
    write_archive(dest, [(members[0][0], json.dumps(manifest).encode()), (members[1][0], index_bytes),
                         *[(i, bytes(flipped) if i is info else d) for i, d in members[2:]]])
    shutil.copy(f"{artifact}.sig", f"{dest}.sig")
    return dest


@pytest.mark.parametrize("value", [":", "", " : :", "::"])
def test_trusted_keys_set_but_empty_is_refused(packed, tmp_path, monkeypatch, value):
    """DGPRECOMPILE_TRUSTED_KEYS=":" read as "no trust configured": a tampered, re-hashed artifact was installed
    with a warning, exit 0. Trust configured but naming no key is no trust: refused, exit 2."""
    out, _ = _signed(packed, tmp_path)
    bad = _rehashed(out, tmp_path / "tampered.tar.gz")
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    monkeypatch.setenv("DGPRECOMPILE_TRUSTED_KEYS", value)
    expect_refusal(bad, fresh, "DGPRECOMPILE_TRUSTED_KEYS is set but names no key file", "--trusted-key", code=2)
    assert list(fresh.iterdir()) == []


def test_an_empty_trusted_key_option_is_refused(packed, tmp_path, monkeypatch):
    out, pub = _signed(packed, tmp_path)
    bad = _rehashed(out, tmp_path / "tampered.tar.gz")
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    monkeypatch.delenv("DGPRECOMPILE_TRUSTED_KEYS", raising=False)
    for extra in (("--trusted-key", ""), ("--trusted-key", str(pub), "--trusted-key", " ")):
        expect_refusal(bad, fresh, "--trusted-key was given an empty path", code=2, extra=extra)
    # the control: with the real key the same artifact is refused for its signature, without any it installs
    expect_refusal(bad, fresh, "does not cover this manifest", code=2, extra=("--trusted-key", str(pub)))
    res = run("unpack", str(bad), "--cache-dir", str(fresh))
    assert res.exit_code == 0 and "no trusted key is configured" in res.stderr, res.output


def test_a_trusted_key_others_may_change_is_refused(packed, tmp_path, monkeypatch):
    """A trusted .pub of mode 0666 was accepted silently; now refused as ssh refuses such a key: the file or a
    directory above it writable by group or others (not sticky), or owned by another user."""
    out, pub = _signed(packed, tmp_path)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    monkeypatch.delenv("DGPRECOMPILE_TRUSTED_KEYS", raising=False)
    for mode in (0o666, 0o664, 0o646):
        pub.chmod(mode)
        expect_refusal(out, fresh, str(pub), f"mode {mode:04o}", f"chmod go-w {pub}", code=2,
                       extra=("--trusted-key", str(pub)))
    pub.chmod(0o644)
    pub.parent.chmod(0o777)
    expect_refusal(out, fresh, f"the directory {pub.parent} is writable", f"chmod go-w {pub.parent}", code=2,
                   extra=("--trusted-key", str(pub)))
    monkeypatch.setenv("DGPRECOMPILE_TRUSTED_KEYS", str(pub))  # the variable's keys are checked the same way
    expect_refusal(out, fresh, f"chmod go-w {pub.parent}", code=2)
    link = tmp_path / "open" / "ci.pub"  # a link in a directory anyone may write: its target is safe, the link not
    pub.parent.chmod(0o755)
    link.parent.mkdir(mode=0o755)
    link.parent.chmod(0o777)
    link.symlink_to(pub)
    expect_refusal(out, fresh, f"chmod go-w {link.parent}", code=2, extra=("--trusted-key", str(link)))
    if os.getuid() == 0:  # another user's file: only root can make one here
        os.chown(pub, 65534, 65534)
        expect_refusal(out, fresh, "owned by uid 65534", code=2, extra=("--trusted-key", str(pub)))
        os.chown(pub, 0, 0)
    pub.parent.chmod(0o1777)  # sticky, as /tmp: nobody renames another user's entries there
    res = run("unpack", str(out), "--cache-dir", str(fresh), "--trusted-key", str(pub))
    assert res.exit_code == 0 and "signed by trusted key" in res.stderr, res.output


# ---- issue 29 item 5: rollback protection ----------------------------------------------------------------------

OLD_EPOCH, NEW_EPOCH = 1_700_000_000, 1_800_000_000  # 2023-11-14 22:13:20 UTC, 2027-01-15 08:00:00 UTC


def _pack_build(packed, tmp_path, monkeypatch, name: str, epoch: int | None, counter: int | None = None) -> Path:
    """A signed artifact of the session's cache with this build stamp (a real pack with the CI's variables)."""
    key = tmp_path / "k" / "dgprecompile-signing.key"
    if not key.exists():
        run("keygen", str(tmp_path / "k"))
    for var, value in (("SOURCE_DATE_EPOCH", epoch), ("DGPRECOMPILE_BUILD_COUNTER", counter)):
        if value is None:
            monkeypatch.delenv(var, raising=False)
        else:
            monkeypatch.setenv(var, str(value))
    out = tmp_path / f"{name}.tar.gz"
    res = run("pack", *PLAN, "--cache-dir", str(packed[0]), "-o", str(out), "--signing-key", str(key))
    assert res.exit_code == 0, res.output
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    monkeypatch.delenv("DGPRECOMPILE_BUILD_COUNTER", raising=False)
    return out


def test_an_older_build_is_refused_where_a_newer_one_was_installed(packed, tmp_path, monkeypatch):
    """A replayed older artifact, signed by the same key for the same fingerprint, installed without a word (and
    --replace-changed rolled a node back silently). Now the node records the newest build it installed and
    refuses an older one unless --allow-rollback, naming both builds."""
    monkeypatch.delenv("DGPRECOMPILE_TRUSTED_KEYS", raising=False)
    old = _pack_build(packed, tmp_path, monkeypatch, "old", OLD_EPOCH)
    new = _pack_build(packed, tmp_path, monkeypatch, "new", NEW_EPOCH)
    pub = str(tmp_path / "k" / "dgprecompile-signing.pub")
    assert json.loads(members_of(new)[0][1])["build"] == {"counter": 0, "time_ns": NEW_EPOCH * 10**9}
    node = tmp_path / "node"
    res = run("unpack", str(new), "--cache-dir", str(node), "--trusted-key", pub, "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["build"] == {"counter": 0, "time_ns": NEW_EPOCH * 10**9}
    assert "installed build 2027-01-15 08:00:00.000000 UTC (counter 0)" in data["notes"][0], data
    assert "rollback protection starts now" in data["notes"][0]
    for extra in ((), ("--replace-changed",), ("--force",)):
        expect_refusal(old, node, "is build 2023-11-14 22:13:20.000000 UTC (counter 0), older than build "
                       "2027-01-15 08:00:00.000000 UTC (counter 0)", "--allow-rollback", code=2,
                       extra=("--trusted-key", pub, *extra))
    res = run("unpack", str(old), "--cache-dir", str(node), "--trusted-key", pub, "--allow-rollback")
    assert res.exit_code == 0 and "installing it (--allow-rollback)" in res.stderr, res.output
    expect_refusal(old, node, "older than build 2027-01-15", code=2, extra=("--trusted-key", pub))  # still newest
    # a CI counter orders builds before their time: counter 1 of 2023 is newer than counter 0 of 2027
    newer = _pack_build(packed, tmp_path, monkeypatch, "counted", OLD_EPOCH, counter=1)
    res = run("unpack", str(newer), "--cache-dir", str(node), "--trusted-key", pub)
    assert res.exit_code == 0 and "(this cache had 2027-01-15 08:00:00.000000 UTC (counter 0))" in res.stderr
    expect_refusal(new, node, "(counter 0), older than build 2023-11-14 22:13:20.000000 UTC (counter 1)", code=2,
                   extra=("--trusted-key", pub))
    # a fresh node takes the old build, and says protection starts with it
    res = run("unpack", str(old), "--cache-dir", str(tmp_path / "fresh"), "--trusted-key", pub)
    assert res.exit_code == 0 and "installed build 2023-11-14" in res.stderr, res.output


def test_an_unstamped_artifact_is_refused_only_where_a_stamped_one_was_installed(packed, tmp_path, monkeypatch):
    """Artifacts packed before rollback protection carry no build: accepted with a note on a node that recorded
    nothing, refused where a newer (any stamped) build is recorded."""
    monkeypatch.delenv("DGPRECOMPILE_TRUSTED_KEYS", raising=False)
    new = _pack_build(packed, tmp_path, monkeypatch, "new", NEW_EPOCH)
    members = members_of(new)
    manifest = json.loads(members[0][1])
    del manifest["build"]
    manifest_bytes = json.dumps(manifest).encode()
    legacy = write_archive(tmp_path / "legacy.tar.gz", [(members[0][0], manifest_bytes), *members[1:]])
    from dgprecompile.cache.signing import load_signing_key

    Path(f"{legacy}.sig").write_bytes(load_signing_key(tmp_path / "k" / "dgprecompile-signing.key")
                                      .sign(manifest_bytes))
    pub = str(tmp_path / "k" / "dgprecompile-signing.pub")
    res = run("unpack", str(legacy), "--cache-dir", str(tmp_path / "fresh"), "--trusted-key", pub)
    assert res.exit_code == 0 and "carries no build stamp" in res.stderr, res.output
    assert not (tmp_path / "fresh" / "dgprecompile" / "installed-builds.json").exists()
    node = tmp_path / "node"
    assert run("unpack", str(new), "--cache-dir", str(node), "--trusted-key", pub).exit_code == 0
    expect_refusal(legacy, node, "carries no build stamp", "older than build 2027-01-15", "--allow-rollback",
                   code=2, extra=("--trusted-key", pub))


def test_a_bad_build_counter_or_record_is_one_error(packed, tmp_path, monkeypatch):
    out = tmp_path / "a.tar.gz"
    for value in ("abc", "-1", "1e3", str(1 << 64)):
        monkeypatch.setenv("DGPRECOMPILE_BUILD_COUNTER", value)
        res = run("pack", *PLAN, "--cache-dir", str(packed[0]), "-o", str(out))
        assert res.exit_code == 2 and not out.exists(), res.output
        assert_one_error(res, "DGPRECOMPILE_BUILD_COUNTER", "not a whole number")
    monkeypatch.delenv("DGPRECOMPILE_BUILD_COUNTER")
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "yesterday")
    res = run("pack", *PLAN, "--cache-dir", str(packed[0]), "-o", str(out))
    assert res.exit_code == 2 and not out.exists(), res.output
    assert_one_error(res, "SOURCE_DATE_EPOCH='yesterday' is not a whole number", "seconds since 1970")
    monkeypatch.delenv("SOURCE_DATE_EPOCH")
    monkeypatch.delenv("DGPRECOMPILE_TRUSTED_KEYS", raising=False)
    node = tmp_path / "node"
    (node / "dgprecompile").mkdir(parents=True)
    state = node / "dgprecompile" / "installed-builds.json"
    for damage in ("not json", json.dumps({"format": "dgprecompile-installed-builds", "schema": 1,
                                           "fingerprints": {"x": 1}})):
        state.write_text(damage)
        expect_refusal(packed[1], node, str(state), "--allow-rollback", code=2)
    state.unlink()
    os.mkfifo(state)  # never read: a FIFO would block the unpack forever
    expect_refusal(packed[1], node, "not a regular file", code=2)
    state.unlink()
    state.write_text("not json")
    res = run("unpack", str(packed[1]), "--cache-dir", str(node), "--allow-rollback")
    assert res.exit_code == 0, res.output
    assert json.loads(state.read_text())["format"] == "dgprecompile-installed-builds"


def test_keygen_under_umask_002_writes_a_public_key_nodes_accept(packed, tmp_path, monkeypatch):
    """Nodes now refuse a group-writable trusted key; keygen under a group-sharing umask (002, the default of many
    desktops) wrote a 0664 .pub in a 0775 directory, which they would refuse. It writes 0644 in 0755 now."""
    monkeypatch.delenv("DGPRECOMPILE_TRUSTED_KEYS", raising=False)
    old = os.umask(0o002)
    try:
        assert run("keygen", str(tmp_path / "keys")).exit_code == 0
    finally:
        os.umask(old)
    pub = tmp_path / "keys" / "dgprecompile-signing.pub"
    assert pub.stat().st_mode & 0o777 == 0o644 and pub.parent.stat().st_mode & 0o777 == 0o755
    out = tmp_path / "a.tar.gz"
    assert run("pack", *PLAN, "--cache-dir", str(packed[0]), "-o", str(out), "--signing-key",
               str(tmp_path / "keys" / "dgprecompile-signing.key")).exit_code == 0
    res = run("unpack", str(out), "--cache-dir", str(tmp_path / "node"), "--trusted-key", str(pub))
    assert res.exit_code == 0 and "signed by trusted key" in res.stderr, res.output
