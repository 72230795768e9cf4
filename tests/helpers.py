"""Shared test helpers: what the machine offers (nvcc, the legacy DeepGEMM) and small utilities."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from importlib import util
from pathlib import Path

import pytest

NVCC = next((p for p in ("/usr/local/cuda/bin/nvcc", "/usr/local/cuda-13.0/bin/nvcc", shutil.which("nvcc") or "")
             if p and os.path.isfile(p)), None)


def legacy_deepgemm_dir() -> str | None:
    spec = importlib.util.find_spec("deep_gemm")
    if spec is None or not spec.submodule_search_locations:
        return None
    pkg = list(spec.submodule_search_locations)[0]
    return pkg if os.path.isfile(os.path.join(pkg, "jit", "compiler.py")) else None


needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not found")
needs_legacy = pytest.mark.skipif(legacy_deepgemm_dir() is None,
                                  reason="the legacy DeepGEMM (sgl-kernel 0.3.5's deep_gemm) is not installed (make setup)")


VENV = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".venv")


def beside_venv(folder: str, marker: str, override: str | None = None, base: str = VENV) -> str | None:
    """A package folder `make setup` installs beside the venv (or the path in $override), if it holds marker."""
    here = (os.environ.get(override) if override else None) or os.path.join(base, folder)
    return here if os.path.exists(os.path.join(here, marker)) else None


def sgl_deep_gemm_013_dir() -> str | None:
    """sgl-deep-gemm 0.1.3's deep_gemm (made by `make setup`), or $DGP_SGL_DEEP_GEMM_013."""
    return beside_venv("sgl-deep-gemm-0.1.3", "deep_gemm/include/deep_gemm", "DGP_SGL_DEEP_GEMM_013")


needs_dg013 = pytest.mark.skipif(sgl_deep_gemm_013_dir() is None,
                                 reason="sgl-deep-gemm 0.1.3 not installed beside the venv (make setup)")


# ---- a real legacy warm shared by the verify and artifact tests ------------------------------------------

PLAN = ["--model", "Qwen3-Coder-480B", "--tp", "8", "--ep", "8", "--sglang", "0.5.1", "--max-tokens", "32"]
LEGACY_NVCC = "/usr/local/cuda/bin/nvcc"  # the legacy JIT keys the nvcc path string: one path for every warm
_WARMED: dict[str, Path] = {}


def _legacy_toolchain_missing() -> str | None:
    from dgprecompile.host.toolchain import find_deepgemm

    if not (os.path.isfile(LEGACY_NVCC) and os.access(NVCC, os.X_OK)):
        return f"no nvcc at {LEGACY_NVCC}"
    install = find_deepgemm()
    if install is None or install.generation != "legacy":
        return "the legacy DeepGEMM (sgl-kernel 0.3.5) is not installed (make setup)"
    if util.find_spec("torch") is None:
        return "torch is not installed (the legacy JIT imports it to compile; make setup)"
    return None


def warm_once(tmp_path_factory) -> Path:
    """A cache warmed for PLAN, shared by every test module of the session; do not modify it, copy it."""
    if "root" not in _WARMED:
        why = _legacy_toolchain_missing()
        if why:
            pytest.skip(f"needs a real legacy warm: {why}")
        from click.testing import CliRunner

        from dgprecompile.cli.main import cli

        root = tmp_path_factory.mktemp("warmed") / "deep_gemm"
        res = CliRunner().invoke(cli, ["warm", *PLAN, "--cache-dir", str(root), "--nvcc", LEGACY_NVCC, "--json"],
                                 catch_exceptions=False)
        assert res.exit_code == 0, res.output
        assert json.loads(res.stdout)["failed"] == 0
        _WARMED["root"] = root
    return _WARMED["root"]


def read_index(cache_dir: Path) -> dict:
    return json.loads((cache_dir / "dgprecompile" / "index.json").read_text())


def write_index(cache_dir: Path, data: dict) -> None:
    (cache_dir / "dgprecompile" / "index.json").write_text(json.dumps(data, indent=1))


def run_in_fresh_python(argv: list[str]) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run `dgprecompile ARGV` in a new interpreter; returns the process and which heavy modules (torch,
    deep_gemm, sglang) it imported."""
    code = ("import json, sys; from dgprecompile.cli.main import main\n"
            f"try:\n main({argv!r})\n"
            "except SystemExit: pass\n"
            "print('HEAVY', json.dumps([m for m in ('torch', 'deep_gemm', 'sglang') if m in sys.modules]), "
            "file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    heavy = next((line[len("HEAVY "):] for line in proc.stderr.splitlines() if line.startswith("HEAVY ")), '["?"]')
    return proc, json.loads(heavy)


def sgl_deep_gemm_dir(version: str) -> str | None:
    """A folder holding that sgl-deep-gemm release's deep_gemm (`make setup` puts 0.1.3, 0.1.4.post1, 0.1.5.post1, 0.1.7, 0.2.0, 0.2.2 and 0.2.3.post2 in
    .venv/sgl-deep-gemm-<version>), or $DGP_SGL_DEEP_GEMM_DIRS/sgl-deep-gemm-<version>."""
    if version == "0.1.3" and sgl_deep_gemm_013_dir():
        return sgl_deep_gemm_013_dir()
    return beside_venv(f"sgl-deep-gemm-{version}", "deep_gemm/include/deep_gemm",
                       base=os.environ.get("DGP_SGL_DEEP_GEMM_DIRS") or VENV)


def bundled_deep_gemm_dir(version: str) -> str | None:
    """A folder holding only the deep_gemm package of sgl-kernel <version> (0.3.x) or sglang-kernel <version> (0.4.x):
    `make setup` unpacks sgl-kernel 0.3.16.post3's and sglang-kernel 0.4.2's beside the venv with
    tools/unpack_deep_gemm.py (or $DGP_SGL_DEEP_GEMM_DIRS/<distribution>-<version>)."""
    dist = "sglang-kernel" if version.startswith("0.4.") else "sgl-kernel"
    return beside_venv(f"{dist}-{version}", "deep_gemm/include/deep_gemm",
                       base=os.environ.get("DGP_SGL_DEEP_GEMM_DIRS") or VENV)


def assert_buckets_hold_their_kernel(plan, heuristic, num_sms: int = 132) -> None:
    """Every m of every bucket of plan selects that bucket's kernel under heuristic (the breakpoints are complete)."""
    for pk in plan.keys:
        key = pk.key
        for b in pk.buckets:
            for m in range(b.m_min, b.m_max + 1):
                got = heuristic.kernel(key.kernel_type, m, key.n, key.k, key.num_groups, num_sms).id
                assert got == b.kernel, (key.ident, m)


def cold_entries_explained(release: str, rel: dict, ctx, planned) -> set[str]:
    """Check a device record's cold entries: at each m where the runtime made entries, ``planned(kind, n, k, g, m)``
    (the planned kernel there) has a computed name among them and its kernel.cu has the recorded sha256; every
    entry made is such a name. Returns the entries made."""
    from dgprecompile.runtimes.items import KernelType

    kinds = {"dense": KernelType.GEMM_NT_F8F8BF16, "masked": KernelType.GROUPED_GEMM_NT_F8F8BF16_MASKED,
             "contig": KernelType.GROUPED_GEMM_NT_F8F8BF16_CONTIG}
    made, matched = set(), set()
    for name, slot in rel["keys"].items():
        kind, n, k, g = name.split("/")
        for m, entries in slot["new_entries"]:
            spec = planned(kinds[kind], int(n), int(k), int(g), m)
            expected = ctx.entry_name(spec)
            assert expected in entries, (release, name, m, entries, expected)
            assert hashlib.sha256(ctx.source(spec).encode()).hexdigest() == \
                rel["entries"][expected]["kernel_cu_sha256"], (release, expected)
            made.update(entries)
            matched.add(expected)
    assert made == matched, (release, sorted(made - matched))  # no entry the runtime made is unexplained
    return made


def bare_deep_gemm_identity(deep_gemm_dir: str, tmp_path: Path) -> list:
    """[distribution, version, generation] a fresh process reports for a deep_gemm/ put on PYTHONPATH without any
    distribution metadata (as the tests/gpu tarballs are): what its headers name."""
    os.symlink(deep_gemm_dir, tmp_path / "deep_gemm")
    code = ("import json; from dgprecompile.host.toolchain import find_deepgemm; d = find_deepgemm(); "
            "print(json.dumps([d.distribution, d.version, d.generation]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"})
    return json.loads(out.stdout)


def assert_probe_made_the_models_kernels(probe: dict, ctx, heuristic) -> None:
    """A device record's probe (tests/gpu/sweep_generations.py PROBE), each call on a cache of its own: dense m=100
    (SGLang's MN-major scales: no layout kernel), masked expected_m=100 and contiguous m=512 (20 groups) made the
    model's kernels, named as ctx computes; row-major dense scales added the layout kernel for sf_k = 48."""
    from dgprecompile.planning.heuristics.sm90_cxx import transpose_kernel
    from dgprecompile.runtimes.items import KernelType

    calls = {"dense_sglang_mn_major_tma_aligned": (KernelType.GEMM_NT_F8F8BF16, 100, 1),
             "masked_sglang_get_mn_major_tma_aligned_tensor": (KernelType.GROUPED_GEMM_NT_F8F8BF16_MASKED, 100, 20),
             "contig_sglang_tma_aligned": (KernelType.GROUPED_GEMM_NT_F8F8BF16_CONTIG, 512, 20)}
    for name, (kind, m, g) in calls.items():
        assert probe[name] == "ok", (name, probe[name])
        assert ctx.entry_name(heuristic.kernel(kind, m, 1792, 6144, g, 132)) in probe[name + ":entries"], name
    assert probe["dense_sglang_mn_major_tma_aligned:entries"] == [
        ctx.entry_name(heuristic.kernel(KernelType.GEMM_NT_F8F8BF16, 100, 1792, 6144, 1, 132))]
    assert ctx.entry_name(transpose_kernel(6144)) in probe["dense_row_major_m_by_sfk:entries"]


def needs_sgl_deep_gemm(version: str):
    return pytest.mark.skipif(sgl_deep_gemm_dir(version) is None,
                              reason=f"sgl-deep-gemm {version} not installed beside the venv (make setup)")


def tree_hash(root: Path, skip=lambda rel: False) -> str:
    """Every directory, file name, mode and byte under root (``skip(relative path)`` leaves a file out)."""
    h = hashlib.sha256()
    for dirpath, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        rel = os.path.relpath(dirpath, root)
        h.update(f"d {rel} {oct(os.stat(dirpath).st_mode)}\n".encode())
        for name in sorted(files):
            if skip(os.path.join(rel, name)):
                continue
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            h.update(f"f {rel}/{name} {oct(st.st_mode)} {st.st_size}\n".encode())
            if os.path.isfile(p) and not os.path.islink(p):
                h.update(Path(p).read_bytes())
    return h.hexdigest()


def assert_one_error(res, *words: str) -> None:
    """A refused command: non-zero, no traceback, exactly one `error:` line and a `hint:`, naming ``words``."""
    assert res.exit_code != 0, res.output
    assert "Traceback" not in res.output
    lines = res.stderr.strip().splitlines()
    assert len([x for x in lines if x.startswith("error:")]) == 1, res.stderr
    assert any(x.startswith("hint: ") for x in lines), res.stderr
    for w in words:
        assert w in res.stderr, res.stderr


STANDINS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "standins")


def sglang_014_dir() -> str | None:
    """sglang 0.5.14 and its jit_kernel import chain (made by `make setup`), or $DGP_SGLANG_014."""
    return beside_venv("sglang-0.5.14", "sglang/jit_kernel/utils.py", "DGP_SGLANG_014")


needs_sgl014 = pytest.mark.skipif(sglang_014_dir() is None,
                                  reason="sglang 0.5.14 not installed beside the venv (make setup)")


# ---- waiting on real processes (the launch lifetime tests) -------------------------------------------------------


def wait_for(pred, timeout: float = 20.0) -> bool:
    """Poll ``pred`` every 50 ms until it is true (True) or ``timeout`` seconds pass (False)."""
    import time

    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(0.05)
    return False


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not: it has ended and waits for its parent)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class Background:
    """A command started now and not waited for, its output in files (no pipe fills while the test does other
    work): independent builds started side by side take the machine's cores together. ``result()`` waits for it
    and gives what ``subprocess.run(argv, capture_output=True, text=True, ...)`` would have; ``stop()`` ends it if
    it still runs (nothing a test started outlives it)."""

    def __init__(self, argv: list[str], timeout: float = 900, **kw):
        self.argv, self.timeout, self.done = argv, timeout, None
        self.out, self.err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen(argv, stdout=self.out, stderr=self.err, text=True, **kw)

    def result(self) -> subprocess.CompletedProcess:
        if self.done is None:
            try:
                self.proc.wait(timeout=self.timeout)
            finally:
                self.stop()
            self.out.seek(0), self.err.seek(0)
            self.done = subprocess.CompletedProcess(self.argv, self.proc.returncode, self.out.read(), self.err.read())
            self.out.close(), self.err.close()
        return self.done

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@contextlib.contextmanager
def no_user_sglang_env():
    """conftest's _no_user_sglang_env for what a module-scoped fixture starts (it is set up before that
    function-scoped one): the developer's own SGLang/DeepGEMM settings unset meanwhile."""
    with pytest.MonkeyPatch.context() as mp:
        for name in list(os.environ):
            if name.startswith(("SGL_", "SGLANG_", "DG_JIT_", "DG_PRINT")):
                mp.delenv(name)
        yield


def make_wheel(path: Path, name: str, version: str, blob: int = 0) -> None:
    """A minimal installable wheel of package ``name`` (a module of the same name, ``blob`` random bytes in it, as
    hex): what the carry tests split, join and install with pip."""
    import zipfile

    info = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": f"__version__ = '{version}'\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
             f"{name}/blob.bin": os.urandom(blob).hex()}
    record = "".join(f"{n},,\n" for n in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as z:
        for n, text in {**files, f"{info}/RECORD": record}.items():
            z.writestr(n, text)


JOB_PREFIXES = ("SGL_", "SGLANG_", "DG_JIT_", "DGPRECOMPILE_")


def clear_job_env(monkeypatch, *prefixes: str, caches: bool = True) -> None:
    """Unset what a launched job's environment would inherit from this one and change its outcome: SGLang's,
    DeepGEMM's and dgprecompile's variables, ``prefixes`` besides, and (``caches``) every captured family's cache
    variable."""
    from dgprecompile.runtimes import CAPTURED

    cache_vars = {e for f in CAPTURED for e in f.cache_env} if caches else set()
    for name in list(os.environ):
        if name.startswith(JOB_PREFIXES + prefixes) or name in cache_vars:
            monkeypatch.delenv(name, raising=False)


# the README's 480B server command and config, as the device's 480B model proof recorded them
HOST_RECORD = os.path.join(os.path.dirname(VENV), "bench", "results", "2026-12-03-h200-model-480b", "asks.json")


def host_asks_held(folder, host: dict, env: dict[str, str], triton: str | None = None) -> dict:
    """proof_asks (HEAD's plan for HOST_RECORD's command) over that record with ``host`` as its only family
    (triton-host), as a run under ``triton`` (default: the record's Triton) made it, run with ``env`` in ``folder``:
    {ask: (status, detail)}."""
    with open(HOST_RECORD) as f:
        record = json.load(f)
    if triton:
        record["environment"]["versions"]["triton"] = triton
    record["families"] = {"triton-host": host}
    with open(os.path.join(os.path.dirname(HOST_RECORD), "config.json")) as src, \
            open(os.path.join(folder, "config.json"), "w") as dst:
        dst.write(src.read())
    # keys sorted, as the driver writes its report (model_driver.py) and cache_opens.py takes the asks from it
    with open(os.path.join(folder, "asks.json"), "w") as f:
        json.dump(record, f, sort_keys=True)
    res = subprocess.run([sys.executable, "-m", "dgprecompile.launch.proof_asks", os.path.join(folder, "asks.json"),
                          "--json"], capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode in (0, 1), res.stdout[-2000:] + res.stderr[-3000:]
    return {c["ask"]: (c["status"], c["detail"]) for c in json.loads(res.stdout)["checks"]}


def libcuda_standin(where, env: dict[str, str]) -> None:
    """A libcuda.so.1 STAND-IN in ``where`` (an existing folder), made by the code Triton's host-module warm links
    with (compile/triton_host.py link_libcuda), run with ``env`` (a Triton on its PYTHONPATH)."""
    code = ("import sys; from pathlib import Path; from dgprecompile.compile.triton_host import link_libcuda; "
            "print(link_libcuda(Path(sys.argv[1]))[1])")
    made = subprocess.run([sys.executable, "-c", code, str(where)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert made.returncode == 0 and os.path.exists(os.path.join(where, "libcuda.so.1")), made.stderr[-2000:]



def nice_of(pid: int) -> int | None:
    """A process's nice value (field 19 of /proc/PID/stat), None once it has gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rfind(")") + 2:].split()[16])


def nice_while_running(run: Background, kind_of, every: float = 0.1) -> dict[str, set[int]]:
    """Until ``run`` ends: the nice values of its Python and compiler descendants (python, nvcc, cicc, ptxas), by the
    kind ``kind_of`` gives the command lines of the process and its ancestors below ``run``, joined (an nvcc that
    FlashInfer's ninja started is FlashInfer's)."""
    import time

    from dgprecompile.host.procfs import command_line, descendants

    seen: dict[str, set[int]] = {}
    lines: dict[int, str] = {}
    while run.proc.poll() is None:
        procs = descendants(run.proc.pid)
        parent = {st.pid: st.ppid for st in procs}
        for st in procs:
            if not st.comm.startswith(("python", "nvcc", "cicc", "ptxas")):
                continue
            chain, pid = [], st.pid
            while pid in parent:
                lines.setdefault(pid, command_line(pid, words=12))
                chain.append(lines[pid])
                pid = parent[pid]
            nice = nice_of(st.pid)
            if nice is not None:
                seen.setdefault(kind_of(" ".join(chain)), set()).add(nice)
        time.sleep(every)
    return seen
