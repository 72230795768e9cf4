"""A FIFO, a socket, a device or a directory where the tool reads a file is refused before any read: one `error:`
line naming what it is, exit 2, never a hang (issue 29 item 8). Each run has a timeout, so a read that blocks on
the FIFO fails the test instead of hanging it."""

from __future__ import annotations

import os
import socket

import pytest
from conftest import REPO
from test_input_schemas import cli, refused

MODEL = ["--model", "Qwen3-Coder-480B", "--tp", "8", "--ep", "8"]


@pytest.fixture
def fifo(tmp_path) -> str:
    path = tmp_path / "input.yaml"
    os.mkfifo(path)
    return str(path)


@pytest.mark.parametrize("args", [
    ["verify", "--manifest", "{}"],
    ["plan", "--manifest", "{}"],
    ["plan", "--config", "{}"],
    ["plan", "--model", "{}"],
    ["plan", "--specforge-config", "{}"],
    ["warm", "--from-misses", "{}", *MODEL],
    ["unpack", "{}"],
], ids=lambda a: " ".join(x for x in a if x != "{}" and x not in MODEL) or "-")
def test_a_fifo_is_refused_before_it_is_read(fifo, args):
    refused(cli(*[fifo if a == "{}" else a for a in args], timeout=20), fifo, "is a FIFO (named pipe)")


def test_a_fifo_as_config_json_in_a_model_directory_is_refused(tmp_path):
    os.mkfifo(tmp_path / "config.json")
    refused(cli("plan", "--model", str(tmp_path), timeout=20), "config.json is a FIFO")


def test_a_fifo_as_or_in_a_trace_directory_is_refused(tmp_path, fifo):
    refused(cli("plan", "--from-trace", fifo, *MODEL, timeout=20), fifo, "is not a directory")
    traces = tmp_path / "traces"
    traces.mkdir()
    os.mkfifo(traces / "trace-rank0.jsonl")
    refused(cli("plan", "--from-trace", str(traces), *MODEL, timeout=20), "rank0.jsonl is a FIFO")


def test_a_fifo_as_the_signature_beside_an_artifact_is_refused(tmp_path):
    """The .sig is read before the artifact itself: any file will do as the artifact."""
    artifact = tmp_path / "deepgemm.tar.gz"
    artifact.write_bytes(b"\x1f\x8b" + b"\0" * 64)
    os.mkfifo(f"{artifact}.sig")
    cache = tmp_path / "cache"
    refused(cli("unpack", str(artifact), "--cache-dir", str(cache), timeout=20), f"{artifact}.sig", "FIFO")
    assert not cache.exists()


@pytest.mark.parametrize("option", ["--trusted-key", "--signing-key"])
def test_a_fifo_as_a_key_file_is_refused(tmp_path, fifo, option):
    if option == "--trusted-key":
        args = ["unpack", str(tmp_path / "x.tar.gz"), "--trusted-key", fifo]
    else:
        args = ["pack", *MODEL, "--sglang", "0.5.1", "--cache-dir", str(tmp_path), "-o", str(tmp_path / "x.tar.gz"),
                "--signing-key", fifo]
    refused(cli(*args, timeout=20), fifo, "not a regular file")


def test_a_fifo_as_the_cache_index_is_refused(tmp_path):
    """<cache>/dgprecompile/index.json as a FIFO: the index is damaged (exit 1), it does not block verify."""
    (tmp_path / "cache" / "dgprecompile").mkdir(parents=True)
    os.mkfifo(tmp_path / "cache" / "dgprecompile" / "index.json")
    manifest = REPO / "shapes" / "Qwen3-Coder-480B-A35B-Instruct-FP8.tp8.ep8.sglang-0.5.0-0.5.1.auto.yaml"
    refused(cli("verify", "--manifest", str(manifest), "--cache-dir", str(tmp_path / "cache"), timeout=20),
            "index.json is a FIFO", "hint: move it away", code=1)


def test_devices_sockets_and_directories_are_named(tmp_path):
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp_path / "sock"))
    try:
        for path, kind in (("/dev/zero", "a character device"), (str(tmp_path / "sock"), "a socket")):
            refused(cli("verify", "--manifest", path, timeout=20), path, f"is {kind}, not a regular file")
        refused(cli("plan", "--model", str(tmp_path / "sock"), timeout=20), "sock is a socket")
    finally:
        server.close()


def test_a_regular_file_behind_a_symlink_is_still_read(tmp_path):
    manifest = REPO / "shapes" / "Qwen3-Coder-480B-A35B-Instruct-FP8.tp8.ep8.sglang-0.5.0-0.5.1.auto.yaml"
    link = tmp_path / "plan.yaml"
    link.symlink_to(manifest)
    proc = cli("plan", "--manifest", str(link), "--json", timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_a_fifo_behind_a_file_url_is_refused(tmp_path):
    """unpack file://...: the artifact, and the .sig beside it, go through the fsspec store (remote.py)."""
    os.mkfifo(tmp_path / "a.tar.gz")
    (tmp_path / "b.tar.gz").write_bytes(b"\x1f\x8b" + b"\0" * 64)
    os.mkfifo(tmp_path / "b.tar.gz.sig")
    for name in ("a.tar.gz", "b.tar.gz"):
        refused(cli("unpack", f"file://{tmp_path}/{name}", "--cache-dir", str(tmp_path / "cache"), timeout=20),
                "is a FIFO")
    assert not [p for p in (tmp_path / "cache").rglob("*") if not p.is_dir()]  # its staging folders, no file


def test_a_fifo_index_does_not_block_the_launch_environment(tmp_path):
    """The JIT family's launch_env reads the index for the toolkit warm used: a FIFO there is skipped, not read."""
    import subprocess
    import sys

    (tmp_path / "dgprecompile").mkdir()
    os.mkfifo(tmp_path / "dgprecompile" / "index.json")
    code = ("import sys; from dgprecompile.runtimes import family_for\n"
            "print(family_for('0.5.23').launch_env(sys.argv[1], environ={}))")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=20,
                          cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert "sglang-jit" in proc.stdout and "CUDA_HOME" not in proc.stdout
