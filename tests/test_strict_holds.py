"""Strict `launch` holds whatever the job's libraries do to their environment (issue 46, items 4 and 5).

Real strict launches of real jobs throughout:
* every family's cache points into the cache, whether or not it holds the family's entries: a torch.compile (the
  venv's CPU torch, inductor compiling C++) on a cache without inductor entries is refused by name, never built
  into /tmp/torchinductor_<user>;
* the cache's own records are guarded: a job that empties the index's records, removes the installed-build record,
  or moves an entry away, puts other code in its place and moves the original back fails the launch, naming it;
* a Python process that runs without the guard fails the launch, naming it, however it came to: a re-exec with a
  cleared PYTHONPATH (same pid, its old guard record still there), a child with its parent's exact command line and
  a cleared PYTHONPATH, `env -i`, `python -S`, `python -I`; multiprocessing's spawn and forkserver children are
  guarded, and a torch.compile in one of them is refused.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers import PLAN, beside_venv, sglang_014_dir, warm_once
from test_artifact import NEW_EPOCH, OLD_EPOCH, _pack_build, expect_refusal, packed, run  # noqa: F401 (fixture)

from dgprecompile.planning.manifest import write_manifest
from dgprecompile.planning.plan import PlanRequest
from dgprecompile.planning.trace import plan_from_calls
from dgprecompile.runtimes import CAPTURED

REPO = Path(__file__).resolve().parent.parent
FLASHINFER_0612 = beside_venv("flashinfer-0.6.12", "flashinfer/__init__.py")
torch_here = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                reason="no torch in the venv (make setup installs it)")

# a job's first forward in miniature (tests/test_inductor_capture.py's graph): inductor compiles it on the CPU
COMPILE = textwrap.dedent("""
    import torch

    def masked_input(ids, start: int, end: int):
        inside = (ids >= start) & (ids < end)
        return inside * (ids - start), ~inside

    def forward():
        idx, _ = torch.compile(masked_input, dynamic=True)(torch.arange(64), 8, 40)
        assert idx[9].item() == 1
        print("COMPILED", flush=True)
""")



def _env() -> dict[str, str]:
    cleared = {e for f in CAPTURED for e in f.cache_env}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DG_JIT_", "DGPRECOMPILE_", "SGL_", "SGLANG_",
                                                                    "TORCHINDUCTOR_")) and k not in cleared}
    return {**env, "PYTHONPATH": str(REPO)}


def strict_launch(folder: Path, job: str, *args: str, cache: str = "cache", plan: tuple[str, ...] | None = None,
                  timeout: int = 240, pythonpath: tuple[str, ...] = (),
                  extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    (folder / "job.py").write_text(job)
    (folder / "compiled.py").write_text(COMPILE)
    if plan is None:
        manifest = plan_from_calls([{"kernel_type": "GEMM_NT_F8F8BF16", "m": 64, "n": 512, "k": 512,
                                     "num_groups": 1}], PlanRequest(sglang="0.5.1"))
        write_manifest(manifest, folder / "plan.yaml")
        plan = ("--manifest", str(folder / "plan.yaml"))
    cmd = [sys.executable, "-m", "dgprecompile", "launch", *plan, "--cache-dir", str(folder / cache),
           "--allow-missing", "--", sys.executable, str(folder / "job.py"), *args]
    env = _env()
    env["PYTHONPATH"] = os.pathsep.join([*pythonpath, env["PYTHONPATH"]])
    env.update(extra_env or {})
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=folder)


# ---- item 5: every family, whether or not the cache holds its entries -----------------------------------------

@torch_here
def test_torch_compile_on_a_cache_without_inductor_entries_is_refused_by_name(tmp_path):
    job = "import os\nprint('DIR', os.environ.get('TORCHINDUCTOR_CACHE_DIR'), flush=True)\n"
    r = strict_launch(tmp_path, job + "from compiled import forward\nforward()\n")
    assert r.returncode == 1, r.stderr
    assert "COMPILED" not in r.stdout
    assert "strict mode refused 1 runtime compile(s): masked_input" in r.stderr, r.stderr
    assert f"DIR {tmp_path / 'cache' / 'inductor'}\n" in r.stdout  # not /tmp/torchinductor_<user>
    assert "hint: torch.compile (inductor): the cache holds no entry for them" in r.stderr, r.stderr
    assert not (tmp_path / "cache" / "inductor" / "fxgraph").exists()  # refused before inductor wrote anything


def test_strict_points_every_family_into_the_cache_and_arms_every_refusal(tmp_path):
    r = strict_launch(tmp_path, "import json, os, sys\njson.dump(dict(os.environ), open('env.json', 'w'))\n")
    assert r.returncode == 0, r.stderr
    env = json.loads((tmp_path / "env.json").read_text())
    for fam in CAPTURED:  # the cache holds no entry of any of them
        for name, value in fam.launch_env(tmp_path / "cache"):
            assert env[name] == value, (name, env.get(name))
            assert value.startswith(str(tmp_path / "cache"))
    refused = env["DGPRECOMPILE_STRICT_FAMILIES"].split(",")
    assert sorted(refused) == sorted(f.id for f in CAPTURED if f.hook_target), refused


@pytest.mark.skipif(FLASHINFER_0612 is None or sglang_014_dir() is None or importlib.util.find_spec("torch") is None,
                    reason="flashinfer-python 0.6.12, sglang 0.5.14 (its tvm-ffi) and torch beside the venv (make setup)")
def test_flashinfers_own_log_is_its_bookkeeping_not_a_compile(tmp_path):
    """FlashInfer's JIT logger opens <workspace>/<version>/flashinfer_jit.log when flashinfer.jit is imported, a
    build or not; with the workspace always in the cache under strict, that file must not fail the launch (it did
    for sglang 0.5.9's rope module, whose import chain imports flashinfer 0.6.3). A module file there still does."""
    job = textwrap.dedent("""
        import os, sys
        import flashinfer.jit.core  # the real 0.6.12, patched by the strict hook on import
        if sys.argv[1] == "compile":
            d = os.path.join(os.environ["FLASHINFER_WORKSPACE_BASE"], ".cache/flashinfer/0.6.12/90a/cached_ops/x")
            os.makedirs(d, exist_ok=True)
            open(os.path.join(d, "x.so"), "wb").write(b"built at run time")
    """)
    quiet = strict_launch(tmp_path, job, "none", pythonpath=(FLASHINFER_0612, sglang_014_dir()))
    assert quiet.returncode == 0, quiet.stderr
    assert (tmp_path / "cache" / "flashinfer" / "0.6.12" / "flashinfer_jit.log").is_file()
    # where FlashInfer knows its arch (a GPU; here the variable) the log is one folder down, <version>/<arch>/: the
    # carried 480B proof on the H200 (2026-12-05, b5925ae) exited 1 on it with nothing built
    arch = strict_launch(tmp_path, job, "none", cache="cache-arch", pythonpath=(FLASHINFER_0612, sglang_014_dir()),
                         extra_env={"FLASHINFER_CUDA_ARCH_LIST": "9.0a"})
    assert arch.returncode == 0, arch.stderr
    assert (tmp_path / "cache-arch" / "flashinfer" / "0.6.12" / "90a" / "flashinfer_jit.log").is_file()
    r = strict_launch(tmp_path, job, "compile", pythonpath=(FLASHINFER_0612, sglang_014_dir()))
    assert r.returncode == 1 and "compiled during it: flashinfer/0.6.12/90a/cached_ops/x" in r.stderr, r.stderr


def test_a_compile_of_a_counted_family_fails_the_launch_naming_it(tmp_path):
    """CuTe-DSL and the CUDA driver have no refusal: what they write into their area (now always the cache's) is
    counted and fails the launch; the driver's own index file is its bookkeeping, not a compile."""
    job = textwrap.dedent("""
        import os
        os.makedirs(os.environ["CUDA_CACHE_PATH"], exist_ok=True)
        open(os.path.join(os.environ["CUDA_CACHE_PATH"], "index"), "wb").write(b"driver bookkeeping")
        if os.sys.argv[1] == "compile":
            d = os.environ["CUTE_DSL_CACHE_DIR"]
            os.makedirs(d, exist_ok=True)
            open(os.path.join(d, "kernel_abc.mlir"), "wb").write(b"compiled at run time")
    """)
    quiet = strict_launch(tmp_path, job, "none")
    assert quiet.returncode == 0, quiet.stderr
    r = strict_launch(tmp_path, job, "compile")
    assert r.returncode == 1, r.stderr
    assert "cache entries were compiled during it: cute-dsl/kernel_abc.mlir" in r.stderr, r.stderr


# ---- item 4: the cache's own records ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def warmed(tmp_path_factory) -> Path:
    return warm_once(tmp_path_factory)


@pytest.fixture
def cache(warmed, tmp_path) -> Path:
    shutil.copytree(warmed, tmp_path / "cache", symlinks=True)
    return tmp_path / "cache"


EDIT_INDEX = textwrap.dedent("""
    import json, os
    path = os.path.join(os.environ["DGPRECOMPILE_CACHE_DIR"], "dgprecompile", "index.json")
    doc = json.load(open(path))
    doc["kernels"], doc["extra"] = {}, {}
    with open(path + ".new", "w") as f:
        json.dump(doc, f)
    os.replace(path + ".new", path)
""")

REMOVE_RECORD = textwrap.dedent("""
    import os
    os.remove(os.path.join(os.environ["DGPRECOMPILE_CACHE_DIR"], "dgprecompile", "installed-builds.json"))
""")

# an entry moved out of the cache, other code put in its place (and read), the original moved back: each of the
# entry's files keeps its inode, size, times and bytes
SWAP_ENTRY = textwrap.dedent("""
    import os, sys
    root = os.path.join(os.environ["DGPRECOMPILE_CACHE_DIR"], "cache")
    name = sorted(n for n in os.listdir(root) if n.startswith("kernel."))[0]
    aside = os.path.join(os.path.dirname(os.environ["DGPRECOMPILE_CACHE_DIR"]), "aside")
    os.rename(os.path.join(root, name), aside)
    os.mkdir(os.path.join(root, name))
    for f in os.listdir(aside):
        open(os.path.join(root, name, f), "wb").write(b"other code")
    for f in os.listdir(aside):
        os.remove(os.path.join(root, name, f))
    os.rmdir(os.path.join(root, name))
    os.rename(aside, os.path.join(root, name))
    print("SWAPPED", name)
""")


def test_a_job_that_empties_the_index_fails_the_launch_naming_it(cache):
    r = strict_launch(cache.parent, EDIT_INDEX, plan=tuple(PLAN))
    assert r.returncode == 1, r.stderr
    assert "the cache's own records were changed during it: dgprecompile/index.json" in r.stderr, r.stderr


def test_a_job_that_removes_the_build_record_fails_the_launch_naming_it(cache):
    from dgprecompile.cache import rollback
    from dgprecompile.cache.store import CacheStore

    fid = "0123456789abcdef"
    rollback.record(CacheStore(cache), fid, {"counter": 3, "time_ns": 1}, "new.tar.gz")
    r = strict_launch(cache.parent, REMOVE_RECORD, plan=tuple(PLAN))
    assert r.returncode == 1, r.stderr
    assert "the cache's own records were removed during it: dgprecompile/installed-builds.json" in r.stderr
    # and rollback protection survives: the copy outside the cache still says build 3 was installed
    with pytest.raises(rollback.RollbackRefused, match="older than build"):
        rollback.check(CacheStore(cache), fid, {"counter": 2, "time_ns": 1}, "old.tar.gz", allow=False)


def test_rollback_protection_survives_a_deleted_record(packed, tmp_path, monkeypatch):  # noqa: F811
    """A record removed from the cache (a job that wrote into it) no longer lets an older build in: the copy kept
    in the user's state folder still says which build was installed; the next install writes both again."""
    monkeypatch.delenv("DGPRECOMPILE_TRUSTED_KEYS", raising=False)
    old = _pack_build(packed, tmp_path, monkeypatch, "old", OLD_EPOCH)
    new = _pack_build(packed, tmp_path, monkeypatch, "new", NEW_EPOCH)
    pub = str(tmp_path / "k" / "dgprecompile-signing.pub")
    node = tmp_path / "node"
    assert run("unpack", str(new), "--cache-dir", str(node), "--trusted-key", pub).exit_code == 0
    record = node / "dgprecompile" / "installed-builds.json"
    record.unlink()
    expect_refusal(old, node, "older than build 2027-01-15", "--allow-rollback", code=2, extra=("--trusted-key", pub))
    res = run("unpack", str(old), "--cache-dir", str(node), "--trusted-key", pub, "--allow-rollback")
    assert res.exit_code == 0 and "installing it (--allow-rollback)" in res.stderr, res.output
    assert NEW_EPOCH * 10**9 in [b["time_ns"] for b in json.loads(record.read_text())["fingerprints"].values()]


def test_a_job_that_swaps_an_entry_and_puts_it_back_fails_the_launch_naming_it(cache):
    r = strict_launch(cache.parent, SWAP_ENTRY, plan=tuple(PLAN))
    assert "SWAPPED" in r.stdout, r.stderr
    name = r.stdout.split("SWAPPED ", 1)[1].strip()
    assert r.returncode == 1, r.stderr
    assert f"cache entries were changed during it: {name}" in r.stderr, r.stderr


def test_a_job_that_reads_the_cache_only_passes(cache):
    job = "import os\nfor d, _, fs in os.walk(os.environ['DGPRECOMPILE_CACHE_DIR']):\n    [open(os.path.join(d, f), 'rb').read() for f in fs]\n"
    r = strict_launch(cache.parent, job, plan=tuple(PLAN))
    assert r.returncode == 0, r.stderr


# ---- item 4: whatever the job does to its environment ----------------------------------------------------------

REEXEC = textwrap.dedent("""
    import os, sys
    if not os.environ.get("AGAIN"):  # re-exec this very process (same pid) with PYTHONPATH cleared
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "PYTHONPATH": "", "AGAIN": "1"})
    import time
    time.sleep(1.5)
""")

SAME_COMMAND_LINE = textwrap.dedent("""
    import os, subprocess, sys
    if not os.environ.get("AGAIN"):  # a child with this process's exact command line, PYTHONPATH cleared
        env = {**os.environ, "PYTHONPATH": "", "AGAIN": "1"}
        sys.exit(subprocess.run([sys.executable, *sys.argv], env=env).returncode)
    import time
    time.sleep(1.5)
""")

# a child that lives through several of launch's looks, started without the guard
CHILD_WITH = textwrap.dedent("""
    import subprocess, sys
    how = sys.argv[1]
    hold = "import time; time.sleep(1.5)"
    argv = {"env-i": ["env", "-i", sys.executable, "-c", hold], "-S": [sys.executable, "-S", "-c", hold],
            "-I": [sys.executable, "-I", "-c", hold], "-E": [sys.executable, "-E", "-c", hold]}[how]
    sys.exit(subprocess.run(argv).returncode)
""")


@pytest.mark.parametrize("job, args, named", [
    (REEXEC, (), "job.py"),
    (SAME_COMMAND_LINE, (), "job.py"),
    (CHILD_WITH, ("env-i",), "-c 'import time"),
    (CHILD_WITH, ("-S",), "-S -c 'import time"),
    (CHILD_WITH, ("-I",), "-I -c 'import time"),
    (CHILD_WITH, ("-E",), "-E -c 'import time"),
], ids=["reexec-cleared-pythonpath", "same-command-line", "env-i", "dash-S", "dash-I", "dash-E"])
def test_a_python_process_without_the_guard_fails_the_launch_naming_it(tmp_path, job, args, named):
    r = strict_launch(tmp_path, job, *args)
    assert r.returncode == 1, r.stderr
    assert "strict mode was not active in 1 Python process(es) of the job" in r.stderr, r.stderr
    assert named in r.stderr.split("strict mode was not active", 1)[1], r.stderr


def test_a_reexec_that_keeps_the_hook_passes(tmp_path):
    """The same re-exec with the launch's PYTHONPATH kept: the new image writes its own record and passes."""
    job = REEXEC.replace('"PYTHONPATH": "", ', "")
    r = strict_launch(tmp_path, job)
    assert r.returncode == 0, r.stderr


MP = textwrap.dedent("""
    import multiprocessing, sys

    def work():
        from compiled import forward
        forward()

    if __name__ == "__main__":
        ctx = multiprocessing.get_context(sys.argv[1])
        p = ctx.Process(target=work)
        p.start()
        p.join()
        print("child exit", p.exitcode, flush=True)
""")


@torch_here
@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_multiprocessing_child_is_guarded_and_its_torch_compile_refused(tmp_path, method):
    r = strict_launch(tmp_path, MP, method)
    assert "child exit 1" in r.stdout and "COMPILED" not in r.stdout, (r.stdout, r.stderr)
    assert r.returncode == 1, r.stderr
    assert "strict mode refused 1 runtime compile(s): masked_input" in r.stderr, r.stderr
    assert "strict mode was not active" not in r.stderr, r.stderr


@torch_here
def test_a_reexec_that_compiles_without_the_guard_fails_naming_both(tmp_path):
    """The re-exec'd process compiles for real: its graph lands in the cache's inductor area (the variable is
    still set), counted, and the process is named."""
    job = REEXEC.replace("import time\ntime.sleep(1.5)\n", "from compiled import forward\nforward()\n")
    r = strict_launch(tmp_path, job)
    assert "COMPILED" in r.stdout, r.stderr
    assert r.returncode == 1, r.stderr
    errors = "\n".join(line for line in r.stderr.splitlines() if line.startswith("error:"))
    # the re-exec'd process, by its command line (and inductor's compile workers it started, as unguarded as it)
    assert "strict mode was not active in" in errors and "job.py" in errors, errors
    assert "cache entries were compiled during it: inductor/" in errors, errors


def test_a_hit_that_touches_an_entrys_times_is_no_change_a_swap_is(tmp_path):
    """SGLang's ninja loader sets its leaf's mtime on every hit (its eviction order): no change. The same entry
    moved out, replaced and moved back: changed, by name (its folder's mtime and its own ctime changed)."""
    from dgprecompile.cache import snapshot

    entry = tmp_path / "cache" / "kernel.abc"
    entry.mkdir(parents=True)
    (entry / "kernel.cubin").write_bytes(b"cubin")
    before = snapshot.take(tmp_path)
    os.utime(entry, None)
    assert not snapshot.diff(before, snapshot.take(tmp_path))
    os.rename(entry, tmp_path / "aside")
    os.rename(tmp_path / "aside", entry)
    assert snapshot.diff(before, snapshot.take(tmp_path)).changed == ["kernel.abc"]


def test_deepjits_commit_marker_touched_on_a_hit_is_no_change_new_bytes_are(tmp_path):
    """sgl-deep-gemm 0.2.x's DeepJIT sets the mtime of its entry's empty ``.committed`` on every cache hit
    (deep_jit/cache/disk.hpp: try_update_mtime(path / kCommitFileName), utimensat underneath, as os.utime): every
    strict launch of a 0.2.x job on the H100 (bench/results/2026-12-06-h100-model-480b-0523-at-dad9add) ended 1
    with each DeepGEMM entry it used "changed". Times alone are no change; other bytes in the marker, or a kernel
    file rewritten in place, are."""
    from dgprecompile.cache import snapshot

    entry = tmp_path / "cache" / "sm90_fp8_gemm_1d2d.0123456789abcdef"
    entry.mkdir(parents=True)
    (entry / ".committed").write_bytes(b"")
    (entry / "kernel.cubin").write_bytes(b"cubin")
    before = snapshot.take(tmp_path)
    future = time.time() + 5
    os.utime(entry / ".committed", (future, future))
    after = snapshot.take(tmp_path)
    assert after["cache/sm90_fp8_gemm_1d2d.0123456789abcdef/.committed"][2] != \
        before["cache/sm90_fp8_gemm_1d2d.0123456789abcdef/.committed"][2]
    assert not snapshot.diff(before, after)
    (entry / "kernel.cubin").write_bytes(b"other")
    assert snapshot.diff(before, snapshot.take(tmp_path)).changed == ["sm90_fp8_gemm_1d2d.0123456789abcdef"]
    (entry / "kernel.cubin").write_bytes(b"cubin")
    (entry / ".committed").write_bytes(b"x")
    assert snapshot.diff(before, snapshot.take(tmp_path)).changed == ["sm90_fp8_gemm_1d2d.0123456789abcdef"]
