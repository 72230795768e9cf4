"""`push`, `pull`, `pack -o URL`, `unpack URL`, `launch --pull` against a real S3 server on 127.0.0.1.

The server is moto's standalone S3 server in its own process (tests/s3server.py), started by these tests on a
free port; the client side is the real s3fs (and fsspec's HTTP filesystem for the read-only node), given only
the standard AWS variables. The artifacts are real: packed from the session's legacy warm (test_verify.py).
A refused or failed pull must leave the target cache byte-for-byte as it was (apart from the pull's lock file,
which stays by design as the kernel locks do) and no temporary file.
"""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import PLAN, assert_one_error, read_index, tree_hash, warm_once
from s3server import S3Server
from test_artifact import copy_cache, drop_entries, members_of, write_archive

from dgprecompile.cache.remote import redact, scrub
from dgprecompile.cache.store import CacheStore
from dgprecompile.cli.main import cli
from dgprecompile.keys.fingerprint import short_id

pytestmark = pytest.mark.nvcc
REPO = Path(__file__).resolve().parent.parent
_names = itertools.count()


def not_a_lock(rel: str) -> bool:
    return rel.startswith("dgprecompile/locks/") and rel.endswith(".lock")


def same_tree(root: Path) -> str:
    return tree_hash(root, skip=not_a_lock)


@dataclass
class Result:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def run(*args: str) -> Result:
    res = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
    return Result(res.exit_code, res.stdout, res.stderr)


def run_process(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "dgprecompile", *map(str, args)], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)


def finish(proc: subprocess.Popen, timeout: float = 120) -> Result:
    out, err = proc.communicate(timeout=timeout)
    return Result(proc.returncode, out, err)


@pytest.fixture(scope="module")
def s3():
    server = S3Server()
    yield server
    server.kill()


@dataclass
class Keys:
    key: Path  # the CI's private key
    pub: Path  # what nodes trust


@pytest.fixture(scope="module")
def ci_key(tmp_path_factory) -> Keys:
    """The CI's signing key pair, made by `dgprecompile keygen` (a real Ed25519 key)."""
    d = tmp_path_factory.mktemp("ci-key")
    assert run("keygen", d).exit_code == 0
    return Keys(d / "dgprecompile-signing.key", d / "dgprecompile-signing.pub")


@pytest.fixture
def other_key(tmp_path) -> Keys:
    """Another key pair: an attacker's, or the CI's next key in a rotation."""
    assert run("keygen", tmp_path / "other-key").exit_code == 0
    return Keys(tmp_path / "other-key" / "dgprecompile-signing.key", tmp_path / "other-key" / "dgprecompile-signing.pub")


@pytest.fixture
def s3env(s3, monkeypatch, ci_key) -> dict[str, str]:
    """The S3 server's variables, and the signed flow of the CI examples: pushes sign with the CI's key
    (DGPRECOMPILE_SIGNING_KEY), pulls trust its public key (DGPRECOMPILE_TRUSTED_KEYS)."""
    for name, value in s3.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("DGPRECOMPILE_SIGNING_KEY", str(ci_key.key))
    monkeypatch.setenv("DGPRECOMPILE_TRUSTED_KEYS", str(ci_key.pub))
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


def sign(key: Path, manifest: bytes) -> bytes:
    """A signature document over ``manifest`` made with ``key`` (as CI, or an attacker with their own key, would)."""
    from dgprecompile.cache.signing import load_signing_key

    return load_signing_key(key).sign(manifest)


@pytest.fixture
def bucket(s3) -> str:
    return s3.bucket(f"dg-{next(_names)}")


@pytest.fixture(scope="module")
def warmed(tmp_path_factory) -> tuple[Path, str, bytes]:
    """(the warmed cache, its fingerprint id, its artifact's bytes)."""
    cache = warm_once(tmp_path_factory)
    out = tmp_path_factory.mktemp("art") / "a.tar.gz"
    assert run("pack", *PLAN, "--cache-dir", cache, "-o", out).exit_code == 0
    return cache, short_id(read_index(cache)["fingerprint"]), out.read_bytes()


@pytest.fixture
def target(warmed, tmp_path) -> Path:
    cache = copy_cache(warmed[0], tmp_path / "target")
    drop_entries(cache, 2)
    return cache


def get(s3, bucket: str, key: str) -> bytes:
    return s3.client().get_object(Bucket=bucket, Key=key)["Body"].read()


def keys(s3, bucket: str) -> list[str]:
    return sorted(o["Key"] for o in s3.client().list_objects_v2(Bucket=bucket).get("Contents", []))


def no_staging(cache: Path) -> bool:
    base = cache / "dgprecompile" / "staging"
    return not base.exists() or not list(base.iterdir())


# ---- the good paths ---------------------------------------------------------------------------------------


def test_this_machine_names_the_warmed_artifact(warmed, tmp_path):
    """pull asks for the id `verify --json` computes on an empty cache: the one the warm here recorded."""
    res = run("verify", *PLAN, "--cache-dir", tmp_path / "none", "--json")
    assert json.loads(res.stdout)["current_fingerprint_id"] == warmed[1]


def test_push_then_pull(s3, s3env, bucket, warmed, tmp_path):
    cache, fid, artifact = warmed
    prefix = f"s3://{bucket}/plans/480b"
    res = run("push", *PLAN, "--cache-dir", cache, "--to", prefix)
    assert res.exit_code == 0, res.output
    assert res.stdout == f"{prefix}/deepgemm-{fid}.tar.gz\n" and "push: created" in res.stderr
    assert get(s3, bucket, f"plans/480b/deepgemm-{fid}.tar.gz") == artifact  # the same bytes as `pack` writes
    # the artifact and its signature, no temporary key left
    assert keys(s3, bucket) == [f"plans/480b/deepgemm-{fid}.tar.gz", f"plans/480b/deepgemm-{fid}.tar.gz.sig"]

    dest = tmp_path / "node" / "deep_gemm"
    res = run("pull", *PLAN, "--cache-dir", dest, "--from", prefix)
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith(f"pull: hit {prefix}/deepgemm-{fid}.tar.gz: ") and "4/4 kernels, complete" in res.stdout
    assert run("verify", *PLAN, "--cache-dir", dest).exit_code == 0
    assert no_staging(dest)
    before = tree_hash(dest)
    again = run("pull", *PLAN, "--cache-dir", dest, "--from", prefix, "--json")
    data = json.loads(again.stdout)
    assert again.exit_code == 0 and data["outcome"] == "present" and data["bytes"] == 0 and data["complete"]
    assert tree_hash(dest) == before


def test_pull_json_has_the_stats(s3env, bucket, warmed, target):
    cache, fid, artifact = warmed
    assert run("push", *PLAN, "--cache-dir", cache, "--to", f"s3://{bucket}/p").exit_code == 0
    res = run("pull", *PLAN, "--cache-dir", target, "--from", f"s3://{bucket}/p", "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["outcome"] == "hit" and data["bytes"] == len(artifact) and data["fingerprint_id"] == fid
    assert len(data["unpack"]["added"]) == 2 and data["verify"]["complete"]
    assert set(data["seconds"]) == {"download", "unpack", "verify", "total"}
    assert data["seconds"]["total"] >= data["seconds"]["download"] > 0


def test_second_push_keeps_the_first_object(s3, s3env, bucket, warmed):
    cache, fid, _ = warmed
    prefix = f"s3://{bucket}/p"
    assert run("push", *PLAN, "--cache-dir", cache, "--to", prefix).exit_code == 0
    key = f"p/deepgemm-{fid}.tar.gz"
    etag = s3.client().head_object(Bucket=bucket, Key=key)["ETag"]
    res = run("push", *PLAN, "--cache-dir", cache, "--to", prefix, "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["outcome"] == "exists" and "already holds the same artifact" in res.stderr
    assert s3.client().head_object(Bucket=bucket, Key=key)["ETag"] == etag


def test_concurrent_pushes_leave_one_whole_object(s3, s3env, bucket, warmed):
    cache, fid, artifact = warmed
    prefix = f"s3://{bucket}/race"
    procs = [run_process(s3env, "push", *PLAN, "--cache-dir", cache, "--to", prefix, "--json") for _ in range(3)]
    results = [finish(p) for p in procs]
    assert all(r.exit_code == 0 for r in results), [r.output for r in results]
    outcomes = sorted(json.loads(r.stdout)["outcome"] for r in results)
    assert outcomes == ["created", "exists", "exists"], outcomes
    assert get(s3, bucket, f"race/deepgemm-{fid}.tar.gz") == artifact
    assert keys(s3, bucket) == [f"race/deepgemm-{fid}.tar.gz", f"race/deepgemm-{fid}.tar.gz.sig"]


def test_pack_and_unpack_by_url(s3, s3env, bucket, warmed, tmp_path, monkeypatch):
    cache, fid, artifact = warmed
    url = f"s3://{bucket}/x/dg-{{fingerprint}}.tar.gz"
    res = run("pack", *PLAN, "--cache-dir", cache, "-o", url)
    assert res.exit_code == 0 and res.stdout == f"s3://{bucket}/x/dg-{fid}.tar.gz\n", res.output
    assert get(s3, bucket, f"x/dg-{fid}.tar.gz") == artifact
    dest = tmp_path / "u"
    res = run("unpack", f"s3://{bucket}/x/dg-{fid}.tar.gz", "--cache-dir", dest, "--json")
    assert res.exit_code == 0, res.output
    assert len(json.loads(res.stdout)["added"]) == 4 and no_staging(dest)
    # no --cache-dir: the directory the packed sglang profile's runtime uses here, read from the object's head
    monkeypatch.setenv("SGL_DG_CACHE_DIR", str(tmp_path / "runtime-default"))
    res = run("unpack", f"s3://{bucket}/x/dg-{fid}.tar.gz", "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["cache_dir"] == str(tmp_path / "runtime-default"), res.output
    assert len(json.loads(res.stdout)["added"]) == 4
    # file:// URLs go through fsspec's local filesystem; the name appears by one link/rename
    res = run("pack", *PLAN, "--cache-dir", cache, "-o", f"file://{tmp_path}/files/{{fingerprint}}.tar.gz")
    assert res.exit_code == 0 and (tmp_path / "files" / f"{fid}.tar.gz").read_bytes() == artifact
    assert sorted(p.name for p in (tmp_path / "files").iterdir()) == [f"{fid}.tar.gz", f"{fid}.tar.gz.sig"]
    res = run("unpack", f"file://{tmp_path}/files/{fid}.tar.gz", "--cache-dir", tmp_path / "u2")
    assert res.exit_code == 0 and "4 entries added" in res.stdout, res.output


def test_pull_from_a_directory_prefix(warmed, tmp_path, ci_key):
    cache, fid, artifact = warmed
    shared = tmp_path / "shared"
    res = run("push", *PLAN, "--cache-dir", cache, "--to", shared, "--signing-key", ci_key.key)
    assert res.exit_code == 0 and (shared / f"deepgemm-{fid}.tar.gz").read_bytes() == artifact
    assert (shared / f"deepgemm-{fid}.tar.gz.sig").is_file()
    assert run("push", *PLAN, "--cache-dir", cache, "--to", shared).exit_code == 0  # exists: kept
    # a directory prefix is a shared store too: without a trusted key nothing is installed
    res = run("pull", *PLAN, "--cache-dir", tmp_path / "c0", "--from", shared)
    assert res.exit_code == 2, res.output
    assert not (tmp_path / "c0" / "cache").exists() or not list((tmp_path / "c0" / "cache").iterdir())
    assert_one_error(res, "no trusted key is configured", "--trusted-key")
    res = run("pull", *PLAN, "--cache-dir", tmp_path / "c", "--from", shared, "--trusted-key", ci_key.pub)
    assert res.exit_code == 0 and "pull: hit" in res.stdout, res.output


# ---- misses and refusals -----------------------------------------------------------------------------------


def _other_fingerprint(warmed, tmp_path) -> Path:
    """The warmed artifact relabelled as built with other headers and nvcc 12.8 (checksums kept consistent)."""
    members = members_of_bytes(warmed[2], tmp_path)
    manifest, index = json.loads(members[0][1]), json.loads(members[1][1])
    for fp in (manifest["fingerprint"], index["fingerprint"]):
        fp["deepgemm"]["headers_sha256"] = "0" * 64
        fp["nvcc"]["release"] = "12.8"
    manifest["fingerprint_id"] = short_id(manifest["fingerprint"])
    index_bytes = json.dumps(index).encode()
    manifest["members"]["dgprecompile/index.json"] = {"sha256": hashlib.sha256(index_bytes).hexdigest(),
                                                      "bytes": len(index_bytes)}
    return write_archive(tmp_path / f"deepgemm-{manifest['fingerprint_id']}.tar.gz",
                         [(members[0][0], json.dumps(manifest).encode()), (members[1][0], index_bytes), *members[2:]])


def members_of_bytes(data: bytes, tmp_path: Path):
    path = tmp_path / f"in-{next(_names)}.tar.gz"
    path.write_bytes(data)
    return members_of(path)


def test_missing_fingerprint(s3, s3env, bucket, warmed, target, tmp_path):
    other = _other_fingerprint(warmed, tmp_path)
    s3.client().put_object(Bucket=bucket, Key=f"p/{other.name}", Body=other.read_bytes())
    before = same_tree(target)
    res = run("pull", *PLAN, "--cache-dir", target, "--from", f"s3://{bucket}/p")
    assert res.exit_code == 5, res.output
    assert_one_error(res, f"no artifact for this machine's fingerprint {warmed[1]}", "deepgemm.headers_sha256",
                     "nvcc.path", f"{other.name} (differs in deepgemm.headers_sha256, nvcc.release)",
                     f"dgprecompile push --to s3://{bucket}/p")
    assert same_tree(target) == before and no_staging(target)
    data = json.loads(run("pull", *PLAN, "--cache-dir", target, "--from", f"s3://{bucket}/p", "--json").stdout)
    assert data["outcome"] == "miss" and data["available"][0]["name"] == other.name
    assert {d["field"] for d in data["available"][0]["differences"]} == {"deepgemm.headers_sha256", "nvcc.release"}
    empty = run("pull", *PLAN, "--cache-dir", target, "--from", f"s3://{bucket}/nothing-here")
    assert empty.exit_code == 5 and "the prefix holds no artifact" in empty.stderr


def test_launch_pull_misses_and_runs_nothing(s3env, bucket, target, tmp_path):
    flag = tmp_path / "ran"
    res = run("launch", "--pull", f"s3://{bucket}/none", *PLAN, "--cache-dir", target, "--",
              sys.executable, "-c", f"open({str(flag)!r}, 'w')")
    assert res.exit_code == 5 and not flag.exists(), res.output
    assert_one_error(res, "no artifact for this machine's fingerprint")


def test_launch_pull_then_launch(s3env, bucket, warmed, tmp_path):
    assert run("push", *PLAN, "--cache-dir", warmed[0], "--to", f"s3://{bucket}/p").exit_code == 0
    node = tmp_path / "node"
    res = finish(run_process(s3env, "launch", "--pull", f"s3://{bucket}/p", *PLAN, "--cache-dir", node, "--",
                             sys.executable, "-c", "import os; print('cache', os.environ['DG_JIT_CACHE_DIR'])"))
    assert res.exit_code == 0, res.output
    assert "pull: hit" in res.stderr and f"cache {node}" in res.stdout


def test_corrupt_object_is_refused(s3, s3env, bucket, warmed, target, tmp_path, ci_key):
    """A tampered member: the manifest and its genuine signature kept, one cubin's bytes changed."""
    members = members_of_bytes(warmed[2], tmp_path)
    info, data = next(m for m in members if m[0].name.endswith("kernel.cubin"))
    flipped = bytearray(data)
    flipped[64] ^= 1
    bad = write_archive(tmp_path / "bad.tar.gz", [(i, bytes(flipped) if i is info else d) for i, d in members])
    s3.client().put_object(Bucket=bucket, Key=f"p/deepgemm-{warmed[1]}.tar.gz", Body=bad.read_bytes())
    s3.client().put_object(Bucket=bucket, Key=f"p/deepgemm-{warmed[1]}.tar.gz.sig", Body=sign(ci_key.key, members[0][1]))
    before = same_tree(target)
    res = run("pull", *PLAN, "--cache-dir", target, "--from", f"s3://{bucket}/p")
    assert res.exit_code == 2, res.output
    assert_one_error(res, "is corrupt (sha256", f"s3://{bucket}/p/deepgemm-{warmed[1]}.tar.gz", "nothing was unpacked")
    assert same_tree(target) == before and no_staging(target)


def _big_artifact(warmed, tmp_path, mib: int) -> bytes:
    """The warmed artifact plus an incompressible extra entry of ``mib`` MiB, for a transfer that takes time."""
    cache = copy_cache(warmed[0], tmp_path / "big")
    entry = cache / "cache" / "kernel.padding.000000000000"
    entry.mkdir()
    (entry / "blob").write_bytes(os.urandom(mib << 20))
    store = CacheStore(cache)
    record = store.record_entry(entry.name, by="adopted")
    store.update_index(lambda index: index.extra.__setitem__(entry.name, record))
    out = tmp_path / "big.tar.gz"
    assert run("pack", *PLAN, "--cache-dir", cache, "-o", out).exit_code == 0
    return out.read_bytes()


@pytest.mark.slow
def test_server_killed_mid_download_installs_nothing(warmed, target, tmp_path):
    slow = S3Server(throttle=4 << 20, log=tmp_path / "slow.log")  # 4 MiB/s: 24 MiB take 6 s
    try:
        slow.bucket("slow")
        data = _big_artifact(warmed, tmp_path, 24)
        slow.client().put_object(Bucket="slow", Key=f"p/deepgemm-{warmed[1]}.tar.gz", Body=data)
        env = {**os.environ, **slow.env, "PYTHONPATH": str(REPO)}
        before = same_tree(target)
        proc = run_process(env, "pull", *PLAN, "--cache-dir", target, "--from", "s3://slow/p", "--allow-unsigned")
        staging = target / "dgprecompile" / "staging"
        deadline, partial = time.monotonic() + 60, 0
        while time.monotonic() < deadline and proc.poll() is None:
            sizes = [f.stat().st_size for f in staging.glob("*/*.tar.gz")] if staging.exists() else []
            partial = max(sizes, default=0)
            if partial > 2 << 20:
                break
            time.sleep(0.05)
        assert 0 < partial < len(data), "the download did not start, or finished before the kill"
        slow.kill()
        res = finish(proc, timeout=120)
    finally:
        slow.kill()
    assert res.exit_code == 3, res.output
    assert_one_error(res, "downloading s3://slow/p/", "nothing was installed")
    assert same_tree(target) == before and no_staging(target)


@pytest.mark.slow
def test_concurrent_pulls_end_with_one_complete_cache(s3env, bucket, warmed, tmp_path):
    assert run("push", *PLAN, "--cache-dir", warmed[0], "--to", f"s3://{bucket}/p").exit_code == 0
    shared = tmp_path / "shared" / "deep_gemm"
    procs = [run_process(s3env, "pull", *PLAN, "--cache-dir", shared, "--from", f"s3://{bucket}/p", "--json")
             for _ in range(4)]
    results = [finish(p, timeout=180) for p in procs]
    assert all(r.exit_code == 0 for r in results), [r.output for r in results]
    outcomes = sorted(json.loads(r.stdout)["outcome"] for r in results)
    assert outcomes == ["hit", "present", "present", "present"], outcomes  # one download, under the pull lock
    ver = run("verify", *PLAN, "--cache-dir", shared, "--json")
    assert ver.exit_code == 0 and json.loads(ver.stdout)["kernels_ok"] == 4
    assert len(read_index(shared)["kernels"]) == 4 and no_staging(shared)


# ---- a read-only node: anonymous https-style access, nothing it could write --------------------------------


def test_read_only_node_over_http(s3, s3env, bucket, warmed, tmp_path, monkeypatch):
    """A node with no credentials reads a public prefix over plain HTTP; it cannot push there, and a private
    object is refused to it with one error and nothing installed."""
    cache, fid, _ = warmed
    for prefix in ("pub", "private"):
        assert run("push", *PLAN, "--cache-dir", cache, "--to", f"s3://{bucket}/{prefix}").exit_code == 0
    for key in (f"pub/deepgemm-{fid}.tar.gz", f"pub/deepgemm-{fid}.tar.gz.sig"):
        s3.client().put_object_acl(Bucket=bucket, Key=key, ACL="public-read")
    for name in s3.env:
        monkeypatch.delenv(name)
    base = f"{s3.endpoint}/{bucket}"
    node = tmp_path / "node"
    res = run("pull", *PLAN, "--cache-dir", node, "--from", f"{base}/pub")
    assert res.exit_code == 0 and "pull: hit" in res.stdout, res.output
    assert run("verify", *PLAN, "--cache-dir", node).exit_code == 0
    res = run("push", *PLAN, "--cache-dir", cache, "--to", f"{base}/pub")
    assert res.exit_code == 2
    assert_one_error(res, "read-only")
    fresh = tmp_path / "fresh"
    res = run("pull", *PLAN, "--cache-dir", fresh, "--from", f"{base}/private")
    assert res.exit_code == 3, res.output
    assert_one_error(res, "403")
    assert not list((fresh / "cache").iterdir()) and no_staging(fresh)


def test_a_complete_cache_fetches_and_writes_nothing(warmed, tmp_path):
    """A node whose cache was filled elsewhere (e.g. mounted read-only): pull only verifies; the bucket named
    here does not exist and no endpoint is configured, so any request would fail."""
    cache = copy_cache(warmed[0], tmp_path / "ro")
    before = tree_hash(cache)
    res = run("pull", *PLAN, "--cache-dir", cache, "--from", "s3://nowhere-at-all/p")
    assert res.exit_code == 0 and "cache already complete (4/4 kernels), nothing fetched" in res.stdout, res.output
    assert tree_hash(cache) == before


# ---- bad input -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("url,extra", [("gs://bucket/dg", "gcs"), ("az://container/dg", "azure")])
def test_missing_backend_names_the_extra(target, url, extra):
    backend = {"gcs": "gcsfs", "azure": "adlfs"}[extra]
    if importlib.util.find_spec(backend) is not None:
        pytest.skip(f"{backend} is installed here: this test needs a backend that is not")
    for argv in (["pull", *PLAN, "--cache-dir", target, "--from", url], ["unpack", f"{url}/x.tar.gz"],
                 ["push", *PLAN, "--cache-dir", target, "--to", url]):
        res = run(*argv)
        assert res.exit_code == 3, res.output
        assert_one_error(res, "is not installed", f"pip install 'dgprecompile[{extra}]'")


def test_pull_without_deepgemm_names_the_fix(target, monkeypatch):
    """No DeepGEMM here: the artifact's name cannot be computed; nothing is fetched or written."""
    monkeypatch.setattr("dgprecompile.cache.verify.find_deepgemm", lambda: None)
    before = tree_hash(target)
    res = run("pull", *PLAN, "--cache-dir", target, "--from", "s3://nowhere-at-all/p")
    assert res.exit_code == 3
    assert_one_error(res, "cannot compute this machine's fingerprint", "DeepGEMM is not importable")
    assert tree_hash(target) == before


def test_unknown_scheme(target):
    res = run("pull", *PLAN, "--cache-dir", target, "--from", "nosuchscheme://x/y")
    assert res.exit_code == 2
    assert_one_error(res, "unknown URL scheme nosuchscheme://")


def test_urls_never_show_credentials(s3, s3env, target):
    secret_url = f"http://alice:hunter2@127.0.0.1:{s3.port}/nobucket/p?X-Amz-Signature=topsecret"
    res = run("pull", *PLAN, "--cache-dir", target, "--from", secret_url)
    assert res.exit_code in (3, 5), res.output
    assert "hunter2" not in res.output and "topsecret" not in res.output and "alice" not in res.output
    assert f"http://127.0.0.1:{s3.port}/nobucket/p" in res.output
    res = run("unpack", "http://bob:pw123@127.0.0.1:1/x.tar.gz?sig=abc123", "--cache-dir", target)
    assert res.exit_code == 3 and "pw123" not in res.output and "abc123" not in res.output, res.output
    assert_one_error(res, "http://127.0.0.1:1/x.tar.gz")


def test_redact_and_scrub():
    assert redact("s3://key:secret@bucket/p/a.tar.gz?versionId=1#x") == "s3://bucket/p/a.tar.gz"
    assert redact("/local/path") == "/local/path"
    text = "GET https://u:p@host/a?sig=1 failed; also http://h/b?token=2 and s3://b/c"
    assert scrub(text) == "GET https://host/a failed; also http://h/b and s3://b/c"


# ---- issue 22: a pull installs only what a trusted key signed -----------------------------------------------


def _pull_refused(target: Path, prefix: str, *words: str, extra=()) -> Result:
    """A pull that must install nothing: exit 2, one error, the cache as it was, no staging left."""
    before = same_tree(target)
    res = run("pull", *PLAN, "--cache-dir", target, "--from", prefix, *extra)
    assert res.exit_code == 2, res.output
    assert_one_error(res, *words, "nothing was installed")
    assert same_tree(target) == before and no_staging(target)
    return res


def _tampered(warmed, tmp_path) -> tuple[bytes, bytes]:
    """(artifact, its original manifest): one cubin's bytes changed and the index and manifest rewritten to match,
    as someone who can write the bucket but holds no key would make it."""
    members = members_of_bytes(warmed[2], tmp_path)
    manifest, index = json.loads(members[0][1]), json.loads(members[1][1])
    info, data = next(m for m in members if m[0].name.endswith("kernel.cubin"))
    flipped = bytearray(data)
    flipped[-1] ^= 1  # past the ELF structures: still loadable, so only the signature can tell
    digest = hashlib.sha256(bytes(flipped)).hexdigest()
    entry = info.name.split("/")[1]
    for record in [*index["kernels"].values(), *index["extra"].values()]:
        if record["entry"] == entry:
            record["files"]["kernel.cubin"] = digest
    index_bytes = json.dumps(index).encode()
    manifest["members"][info.name]["sha256"] = digest
    manifest["members"]["dgprecompile/index.json"] = {"sha256": hashlib.sha256(index_bytes).hexdigest(),
                                                      "bytes": len(index_bytes)}
    out = write_archive(tmp_path / f"t-{next(_names)}.tar.gz",
                        [(members[0][0], json.dumps(manifest).encode()), (members[1][0], index_bytes),
                         *[(i, bytes(flipped) if i is info else d) for i, d in members[2:]]])
    return out.read_bytes(), members[0][1]


def test_signed_round_trip(s3, s3env, bucket, warmed, target, ci_key):
    cache, fid, _ = warmed
    res = run("push", *PLAN, "--cache-dir", cache, "--to", f"s3://{bucket}/p", "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["signature"] == f"s3://{bucket}/p/deepgemm-{fid}.tar.gz.sig" and len(data["signed_by"]) == 64
    sig = json.loads(get(s3, bucket, f"p/deepgemm-{fid}.tar.gz.sig"))
    assert sig["key"] == data["signed_by"] and sig["algorithm"] == "ed25519"
    res = run("pull", *PLAN, "--cache-dir", target, "--from", f"s3://{bucket}/p", "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["unpack"]["signature"].startswith(f"signed by trusted key {sig['key'][:16]}")
    assert run("verify", *PLAN, "--cache-dir", target).exit_code == 0
    assert str(ci_key.key) not in res.output and "PRIVATE" not in res.output


def test_unsigned_is_refused(s3, s3env, bucket, warmed, target, monkeypatch):
    monkeypatch.delenv("DGPRECOMPILE_SIGNING_KEY")
    res = run("push", *PLAN, "--cache-dir", warmed[0], "--to", f"s3://{bucket}/p")
    assert res.exit_code == 0 and "is not signed" in res.stderr, res.output
    assert keys(s3, bucket) == [f"p/deepgemm-{warmed[1]}.tar.gz"]
    _pull_refused(target, f"s3://{bucket}/p", "is not signed", "trusted keys are configured")
    # no trusted key at all: a bucket is a shared store, so a pull installs nothing ...
    monkeypatch.delenv("DGPRECOMPILE_TRUSTED_KEYS")
    _pull_refused(target, f"s3://{bucket}/p", "no trusted key is configured", "--allow-unsigned")
    res = run("unpack", f"s3://{bucket}/p/deepgemm-{warmed[1]}.tar.gz", "--cache-dir", target)
    assert res.exit_code == 2 and "no trusted key is configured" in res.stderr, res.output
    # ... unless told to, loudly
    res = run("pull", *PLAN, "--cache-dir", target, "--from", f"s3://{bucket}/p", "--allow-unsigned")
    assert res.exit_code == 0 and "pull: hit" in res.stdout, res.output
    assert "--allow-unsigned: NOT checking who built" in res.stderr


def test_launch_pull_refuses_unsigned_and_runs_nothing(s3, s3env, bucket, warmed, target, tmp_path, monkeypatch):
    monkeypatch.delenv("DGPRECOMPILE_SIGNING_KEY")
    assert run("push", *PLAN, "--cache-dir", warmed[0], "--to", f"s3://{bucket}/p").exit_code == 0
    flag = tmp_path / "ran"
    res = run("launch", "--pull", f"s3://{bucket}/p", *PLAN, "--cache-dir", target, "--",
              sys.executable, "-c", f"open({str(flag)!r}, 'w')")
    assert res.exit_code == 2 and not flag.exists(), res.output
    assert_one_error(res, "is not signed")


def test_wrong_key_is_refused(s3, s3env, bucket, warmed, target, other_key):
    assert run("push", *PLAN, "--cache-dir", warmed[0], "--to", f"s3://{bucket}/p").exit_code == 0
    _pull_refused(target, f"s3://{bucket}/p", "which is not trusted here", "--trusted-key",
                  extra=("--trusted-key", other_key.pub))


def test_tampered_manifest_is_refused(s3, s3env, bucket, warmed, target, tmp_path):
    """The bucket's writer changes a cubin and rewrites the hashes to match, keeping CI's signature."""
    assert run("push", *PLAN, "--cache-dir", warmed[0], "--to", f"s3://{bucket}/p").exit_code == 0
    body, _ = _tampered(warmed, tmp_path)
    s3.client().put_object(Bucket=bucket, Key=f"p/deepgemm-{warmed[1]}.tar.gz", Body=body)
    _pull_refused(target, f"s3://{bucket}/p", "does not cover this manifest")


def test_tampered_manifest_installs_without_the_check(s3, s3env, bucket, warmed, target, tmp_path, monkeypatch):
    """The control for the test above: the tampered object is a well-formed artifact (every hash consistent), so
    nothing but the signature tells it from CI's."""
    body, _ = _tampered(warmed, tmp_path)
    s3.client().put_object(Bucket=bucket, Key=f"p/deepgemm-{warmed[1]}.tar.gz", Body=body)
    monkeypatch.delenv("DGPRECOMPILE_TRUSTED_KEYS")
    res = run("pull", *PLAN, "--cache-dir", target, "--from", f"s3://{bucket}/p", "--allow-unsigned")
    assert res.exit_code == 0 and "pull: hit" in res.stdout, res.output


def test_resigned_by_an_untrusted_key_is_refused(s3, s3env, bucket, warmed, target, tmp_path, other_key, ci_key):
    body, _ = _tampered(warmed, tmp_path)
    manifest = members_of_bytes(body, tmp_path)[0][1]
    s3.client().put_object(Bucket=bucket, Key=f"p/deepgemm-{warmed[1]}.tar.gz", Body=body)
    s3.client().put_object(Bucket=bucket, Key=f"p/deepgemm-{warmed[1]}.tar.gz.sig", Body=sign(other_key.key, manifest))
    _pull_refused(target, f"s3://{bucket}/p", "which is not trusted here")
    # the attacker's signature claiming to be by the trusted key
    forged = json.loads(sign(other_key.key, manifest))
    forged["key"] = json.loads(sign(ci_key.key, manifest))["key"]
    s3.client().put_object(Bucket=bucket, Key=f"p/deepgemm-{warmed[1]}.tar.gz.sig", Body=json.dumps(forged).encode())
    _pull_refused(target, f"s3://{bucket}/p", "does not cover this manifest")


def test_key_rotation(s3, s3env, bucket, warmed, target, tmp_path, ci_key, other_key, monkeypatch):
    """Nodes trust the old and the new key during a rotation (DGPRECOMPILE_TRUSTED_KEYS=old:new): artifacts signed
    by either install; once the old key is dropped, what only it signed is refused."""
    cache, fid, _ = warmed
    assert run("push", *PLAN, "--cache-dir", cache, "--to", f"s3://{bucket}/old").exit_code == 0
    assert run("push", *PLAN, "--cache-dir", cache, "--to", f"s3://{bucket}/new",
               "--signing-key", other_key.key).exit_code == 0
    assert get(s3, bucket, f"old/deepgemm-{fid}.tar.gz.sig") != get(s3, bucket, f"new/deepgemm-{fid}.tar.gz.sig")
    monkeypatch.setenv("DGPRECOMPILE_TRUSTED_KEYS", f"{ci_key.pub}:{other_key.pub}")
    for prefix in ("old", "new"):
        res = run("pull", *PLAN, "--cache-dir", tmp_path / prefix, "--from", f"s3://{bucket}/{prefix}")
        assert res.exit_code == 0 and "pull: hit" in res.stdout, res.output
    monkeypatch.setenv("DGPRECOMPILE_TRUSTED_KEYS", str(other_key.pub))
    _pull_refused(target, f"s3://{bucket}/old", "which is not trusted here")
    assert run("pull", *PLAN, "--cache-dir", target, "--from", f"s3://{bucket}/new").exit_code == 0


def test_unsigned_object_is_refused_before_its_download(s3, s3env, bucket, warmed, target, monkeypatch):
    """The signature is checked against the object's manifest, read from its first bytes, before the download:
    a refused object is never downloaded (the download function is watched, not replaced: it must not run)."""
    monkeypatch.delenv("DGPRECOMPILE_SIGNING_KEY")
    assert run("push", *PLAN, "--cache-dir", warmed[0], "--to", f"s3://{bucket}/p").exit_code == 0
    import dgprecompile.cache.remote as remote

    calls = []
    monkeypatch.setattr(remote, "download", lambda *a, **k: calls.append(a) or (_ for _ in ()).throw(AssertionError))
    _pull_refused(target, f"s3://{bucket}/p", "is not signed")
    assert calls == []
    # a fresh node's cache directory is not even made
    fresh = target.parent / "fresh-node"
    res = run("pull", *PLAN, "--cache-dir", fresh, "--from", f"s3://{bucket}/p")
    assert res.exit_code == 2 and not fresh.exists(), res.output


# ---- issue 19: an entry that differs from the artifact's, malformed artifacts via pull, URLs --------------------


def test_pull_replaces_a_changed_entry_when_asked(s3env, bucket, warmed, target):
    """Issue 19 item 1: pull said `run warm` about an entry that differs from the artifact (a loop); the refusal
    names the entry and --replace-changed, which swaps it for the artifact's."""
    assert run("push", *PLAN, "--cache-dir", warmed[0], "--to", f"s3://{bucket}/p").exit_code == 0
    entry = sorted(r["entry"] for r in read_index(target)["kernels"].values())[0]
    (target / "cache" / entry / "kernel.cu").write_text("// changed\n")
    before = same_tree(target)
    res = run("pull", *PLAN, "--cache-dir", target, "--from", f"s3://{bucket}/p")
    assert res.exit_code == 1, res.output
    assert_one_error(res, entry, "--replace-changed")
    assert same_tree(target) == before and no_staging(target)
    res = run("pull", *PLAN, "--cache-dir", target, "--from", f"s3://{bucket}/p", "--replace-changed", "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["unpack"]["replaced"] == [entry] and data["complete"]


@pytest.mark.parametrize("where,change,words", [
    ("fingerprint", lambda m, i: (m["fingerprint"].__setitem__("deepgemm", "x"),
                                  i["fingerprint"].__setitem__("deepgemm", "x")), ["fingerprint.deepgemm"]),
    ("entry", lambda m, i: next(iter(i["kernels"].values())).__setitem__("entry", 123), ["entry", "123"]),
])
def test_pull_of_a_malformed_artifact_is_one_error(s3, s3env, bucket, warmed, target, tmp_path, ci_key, where,
                                                   change, words):
    """Issue 19 item 6 via pull: an AttributeError traceback before; now one error naming the field, signed or not."""
    members = members_of_bytes(warmed[2], tmp_path)
    manifest, index = json.loads(members[0][1]), json.loads(members[1][1])
    change(manifest, index)
    index_bytes = json.dumps(index).encode()
    manifest["members"]["dgprecompile/index.json"] = {"sha256": hashlib.sha256(index_bytes).hexdigest(),
                                                      "bytes": len(index_bytes)}
    manifest_bytes = json.dumps(manifest).encode()
    bad = write_archive(tmp_path / "m.tar.gz", [(members[0][0], manifest_bytes), (members[1][0], index_bytes),
                                               *members[2:]])
    s3.client().put_object(Bucket=bucket, Key=f"p/deepgemm-{warmed[1]}.tar.gz", Body=bad.read_bytes())
    s3.client().put_object(Bucket=bucket, Key=f"p/deepgemm-{warmed[1]}.tar.gz.sig", Body=sign(ci_key.key, manifest_bytes))
    before = same_tree(target)
    res = run("pull", *PLAN, "--cache-dir", target, "--from", f"s3://{bucket}/p")
    assert res.exit_code == 2, res.output
    assert_one_error(res, *words)
    assert same_tree(target) == before and no_staging(target)


@pytest.mark.parametrize("url,words", [
    ("s3://", "'s3://' names no bucket"), ("://x", "is not a URL"), ("s3://UPPER_bad/x", "not a valid bucket name"),
    ("https:///x", "names no host"),
])
def test_malformed_urls_are_bad_input(target, url, words):
    """Issue 19 item 10: these were reported as "no artifact" (exit 5); they are bad input (exit 2), found before
    anything is verified, fetched or packed."""
    for argv in (["pull", *PLAN, "--cache-dir", target, "--from", url],
                 ["push", *PLAN, "--cache-dir", target, "--to", url],
                 ["launch", "--pull", url, *PLAN, "--cache-dir", target, "--", "true"]):
        res = run(*argv)
        assert res.exit_code == 2, (argv, res.output)
        assert_one_error(res, words)
    if url != "://x":  # a local path for unpack; "artifact not found" is right there
        res = run("unpack", f"{url}/a.tar.gz" if not url.endswith("x") else url, "--cache-dir", target)
        assert res.exit_code == 2, res.output


def test_push_completes_or_removes_the_signature_beside_an_object(s3, s3env, bucket, warmed, monkeypatch):
    """A push finding the same manifest bytes unsigned (one killed between its two uploads) adds its signature;
    an unsigned --replace removes a signature that no longer covers the object."""
    fid = warmed[1]
    monkeypatch.delenv("DGPRECOMPILE_SIGNING_KEY")
    assert run("push", *PLAN, "--cache-dir", warmed[0], "--to", f"s3://{bucket}/p").exit_code == 0
    assert keys(s3, bucket) == [f"p/deepgemm-{fid}.tar.gz"]
    res = run("push", *PLAN, "--cache-dir", warmed[0], "--to", f"s3://{bucket}/p", "--signing-key",
              os.environ["DGPRECOMPILE_TRUSTED_KEYS"].replace(".pub", ".key"), "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["outcome"] == "exists", res.output
    assert keys(s3, bucket) == [f"p/deepgemm-{fid}.tar.gz", f"p/deepgemm-{fid}.tar.gz.sig"]
    res = run("push", *PLAN, "--cache-dir", warmed[0], "--to", f"s3://{bucket}/p", "--replace")
    assert res.exit_code == 0 and "is not signed" in res.stderr, res.output
    assert keys(s3, bucket) == [f"p/deepgemm-{fid}.tar.gz"]


# ---- issue 29 item 5: trust configured but empty, trusted keys others may change ---------------------------------


@pytest.mark.parametrize("value", [":", ""])
def test_pull_and_launch_pull_refuse_trust_set_but_empty(s3, s3env, bucket, warmed, target, tmp_path, monkeypatch,
                                                         value):
    """DGPRECOMPILE_TRUSTED_KEYS=":" must not read as "no trust configured" anywhere: with --allow-unsigned a pull
    installed a tampered, re-hashed object under it (the variable was ignored); now pull, launch --pull and
    unpack URL all refuse it, exit 2, nothing installed, the job never started."""
    body, _ = _tampered(warmed, tmp_path)
    s3.client().put_object(Bucket=bucket, Key=f"p/deepgemm-{warmed[1]}.tar.gz", Body=body)
    monkeypatch.setenv("DGPRECOMPILE_TRUSTED_KEYS", value)
    _pull_refused(target, f"s3://{bucket}/p", "names no key file", "--trusted-key")
    _pull_refused(target, f"s3://{bucket}/p", "names no key file", "--trusted-key", extra=("--allow-unsigned",))
    flag = tmp_path / "ran"
    before = same_tree(target)
    res = run("launch", "--pull", f"s3://{bucket}/p", *PLAN, "--cache-dir", target, "--allow-unsigned", "--",
              sys.executable, "-c", f"open({str(flag)!r}, 'w')")
    assert res.exit_code == 2 and not flag.exists(), res.output
    assert_one_error(res, "names no key file", "--trusted-key")
    res = run("unpack", f"s3://{bucket}/p/deepgemm-{warmed[1]}.tar.gz", "--cache-dir", target, "--allow-unsigned")
    assert res.exit_code == 2, res.output
    assert_one_error(res, "names no key file")
    assert same_tree(target) == before and no_staging(target)


def test_pull_refuses_a_world_writable_trusted_key(s3, s3env, bucket, warmed, target, ci_key):
    assert run("push", *PLAN, "--cache-dir", warmed[0], "--to", f"s3://{bucket}/p").exit_code == 0
    ci_key.pub.chmod(0o666)
    try:
        _pull_refused(target, f"s3://{bucket}/p", str(ci_key.pub), "mode 0666", f"chmod go-w {ci_key.pub}")
    finally:
        ci_key.pub.chmod(0o644)
    assert run("pull", *PLAN, "--cache-dir", target, "--from", f"s3://{bucket}/p").exit_code == 0


def test_pull_refuses_a_replayed_older_artifact(s3, s3env, bucket, warmed, target, tmp_path, monkeypatch):
    """The bucket's writer puts back an older artifact (and its .sig) that the CI key genuinely signed for the
    same fingerprint: it installed without a word. Now pull and launch --pull refuse it where a newer build was
    installed, naming both; --allow-rollback takes it."""
    cache, fid, _ = warmed
    name = f"deepgemm-{fid}.tar.gz"
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    assert run("push", *PLAN, "--cache-dir", cache, "--to", f"s3://{bucket}/old").exit_code == 0
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1800000000")
    assert run("push", *PLAN, "--cache-dir", cache, "--to", f"s3://{bucket}/p").exit_code == 0
    monkeypatch.delenv("SOURCE_DATE_EPOCH")
    res = run("pull", *PLAN, "--cache-dir", target, "--from", f"s3://{bucket}/p")
    assert res.exit_code == 0 and "installed build 2027-01-15" in res.stderr, res.output
    assert "rollback protection starts now" in res.stderr
    for key in (name, f"{name}.sig"):  # the replay: the old object and its genuine signature over the new ones
        s3.client().put_object(Bucket=bucket, Key=f"p/{key}", Body=get(s3, bucket, f"old/{key}"))
    drop_entries(target, 2)  # a node that lost entries pulls again
    import dgprecompile.cache.remote as remote

    calls = []
    with monkeypatch.context() as watch:  # refused on the object's signed manifest: never downloaded
        watch.setattr(remote, "download", lambda *a, **k: calls.append(a) or (_ for _ in ()).throw(AssertionError))
        _pull_refused(target, f"s3://{bucket}/p", "is build 2023-11-14 22:13:20.000000 UTC (counter 0), older than "
                      "build 2027-01-15 08:00:00.000000 UTC (counter 0)", "--allow-rollback")
    assert calls == []
    flag = tmp_path / "ran"
    res = run("launch", "--pull", f"s3://{bucket}/p", *PLAN, "--cache-dir", target, "--",
              sys.executable, "-c", f"open({str(flag)!r}, 'w')")
    assert res.exit_code == 2 and not flag.exists(), res.output
    assert_one_error(res, "older than build 2027-01-15", "--allow-rollback")
    res = run("pull", *PLAN, "--cache-dir", target, "--from", f"s3://{bucket}/p", "--allow-rollback", "--json")
    assert res.exit_code == 0, res.output
    assert "installing it (--allow-rollback)" in " ".join(json.loads(res.stdout)["warnings"])
