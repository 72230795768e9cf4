"""Triton 3.8.0 (torch 2.14.1's pin, so sglang 0.5.22-0.5.23's own stack) and its one host module, against the real
thing on this GPU-less machine: its CUDA driver's ``CudaUtils()`` builds ``cuda_utils`` from driver.c through
``compile_module_from_file`` (no per-kernel launcher module any more), under a key that also holds the build's
folders. A strict launch refuses that build by name (launch/hook's wrapper of Triton's ``_build``), `launch
--capture` files it, and a later strict launch finds it; the model driver's watcher records the lookup with the
folders its key holds. The libcuda.so.1 the module links and loads against is a STAND-IN here (no driver on this
machine): compile/triton_host.py ``link_libcuda``'s, on LD_LIBRARY_PATH and TRITON_LIBCUDA_PATH. Triton 3.7.1
(sglang 0.5.18-0.5.21's) builds no launcher module either, its cuda_utils keyed as 3.6's: the last test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import STANDINS, clear_job_env, host_asks_held, libcuda_standin, needs_sgl014, sglang_014_dir

from dgprecompile.cli.main import cli
from dgprecompile.planning.manifest import write_manifest
from dgprecompile.planning.plan import PlanRequest
from dgprecompile.planning.trace import plan_from_calls

REPO = Path(__file__).resolve().parent.parent
TRITON = Path(os.environ.get("DGP_TRITON38_DIR", REPO / ".venv" / "triton-3.8.0"))
needs_triton = pytest.mark.skipif(not (TRITON / "triton" / "__init__.py").is_file(),
                                  reason=f"no Triton 3.8.0 at {TRITON} (make setup installs it)")

# the job's first Triton use, in miniature: Triton's own CUDA driver starting (what any kernel launch does first)
CHILD = textwrap.dedent("""
    from triton.backends.nvidia.driver import CudaUtils
    utils = CudaUtils()
    print("cuda_utils loaded", callable(utils.launch))
""")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    clear_job_env(monkeypatch, "TRITON_")


@pytest.fixture(scope="module")
def stub(tmp_path_factory) -> Path:
    """A libcuda.so.1 STAND-IN (module docstring), made by the code warm links with."""
    where = tmp_path_factory.mktemp("libcuda")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TRITON), str(REPO)]), "CUDA_HOME": str(where / "none")}
    env.pop("TRITON_LIBCUDA_PATH", None)
    libcuda_standin(where, env)
    return where


@pytest.fixture
def job(tmp_path, monkeypatch, stub):
    (tmp_path / "child.py").write_text(CHILD)
    plan = plan_from_calls([{"kernel_type": "GEMM_NT_F8F8BF16", "m": 64, "n": 512, "k": 512, "num_groups": 1}],
                           PlanRequest(sglang="0.5.1"))
    write_manifest(plan, tmp_path / "plan.yaml")
    monkeypatch.setenv("PYTHONPATH", f"{REPO}{os.pathsep}{TRITON}")
    monkeypatch.setenv("TRITON_LIBCUDA_PATH", str(stub))
    monkeypatch.setenv("LD_LIBRARY_PATH", str(stub))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def launch(*args):
    return CliRunner().invoke(cli, ["launch", "--manifest", "plan.yaml", "--cache-dir", "cache", "--allow-missing",
                                    *args, "--", sys.executable, "child.py"], catch_exceptions=False)


def _tree(area: Path) -> dict[str, list[str]]:
    return {p.name: sorted(q.name for q in p.iterdir()) for p in area.iterdir()} if area.is_dir() else {}


@needs_triton
def test_strict_refuses_cuda_utils_by_name_capture_files_it_and_strict_then_finds_it(job, capfd):
    area = job / "cache" / "triton"
    r = launch()
    assert r.exit_code == 1, r.output
    child = capfd.readouterr().err
    assert "Triton tried to compile kernel cuda_utils (Triton's host module" in child, child[-3000:]
    assert "strict mode refused 1 runtime compile(s): cuda_utils" in r.output, r.output
    assert _tree(area) == {}  # refused before the C compiler ran; the lookup's empty entry directory removed

    r = launch("--capture")
    assert r.exit_code == 0, r.output + capfd.readouterr().err
    assert "cuda_utils loaded True" in capfd.readouterr().out
    (entry, files), = _tree(area).items()
    assert len(files) == 1 and files[0].startswith("cuda_utils.") and files[0].endswith(".so")
    index = json.loads((job / "cache" / "dgprecompile" / "index.json").read_text())["extra"]
    assert [v["entry"] for v in index.values() if v.get("area") == "triton"] == [entry]

    r = launch()  # strict: Triton's own lookup finds it; nothing is built or written
    assert r.exit_code == 0, r.output + capfd.readouterr().err
    assert "cuda_utils loaded True" in capfd.readouterr().out
    assert _tree(area) == {entry: files}


WATCH = textwrap.dedent("""
    import json, sys
    from triton.runtime import build
    from dgprecompile.launch.hook._dgprecompile_hook import patch_triton_build
    patch_triton_build(build)  # as in a strict launch: the hook patches triton.runtime.build when it loads
    from dgprecompile.launch import model_asks
    asks = model_asks.Asks()
    wrapped = model_asks.watch_host(asks)
    from triton.backends.nvidia.driver import CudaUtils
    try:
        CudaUtils()
        outcome = "loaded"
    except RuntimeError as exc:
        outcome = str(exc).splitlines()[0]
    print(json.dumps({"wrapped": wrapped, "outcome": outcome, "asks": asks.to_dict(), "notes": asks.notes}))
""")


@needs_triton
def test_the_watcher_records_cuda_utils_with_the_folders_its_key_holds(job):
    """The model driver's watcher wraps Triton 3.8's compile_module_from_file (its driver's binding too) and records
    the cuda_utils lookup with the library and include folders the call gave, which Triton 3.8 hashes into the key;
    with the strict hook beside it a miss is still refused by name."""
    env = {**os.environ, "TRITON_CACHE_DIR": str(job / "t")}

    def run() -> dict:
        res = subprocess.run([sys.executable, "-c", WATCH], capture_output=True, text=True, timeout=300, env=env)
        assert res.returncode == 0, res.stderr[-3000:]
        return json.loads(res.stdout.strip().splitlines()[-1])

    refused = run()
    assert "compile_module_from_file" in refused["wrapped"] and refused["asks"] == {}
    assert refused["outcome"].startswith("dgprecompile strict mode: Triton tried to compile kernel cuda_utils")
    subprocess.run([sys.executable, "-c", "from triton.backends.nvidia.driver import CudaUtils; CudaUtils()"],
                   env=env, check=True, capture_output=True, timeout=300)  # Triton builds it itself, unwatched
    found = run()
    assert found["outcome"] == "loaded" and found["notes"] == [], found
    (module,) = found["asks"]["triton-host"]["modules"]
    (entry,) = os.listdir(job / "t")
    assert module["name"] == "cuda_utils" and module["key"] == entry and "launcher" not in module
    nvidia = TRITON.resolve() / "triton" / "backends" / "nvidia"  # Triton's own folders, where it is installed
    assert module["build"] == {"library_dirs": [str(nvidia / "lib"), os.environ["TRITON_LIBCUDA_PATH"]],
                               "include_dirs": [str(nvidia / "include")], "libraries": ["libcuda.so.1"],
                               "ccflags": None}, module


def _watched(tmp: Path, **env: str) -> dict:
    """The watcher's triton-host asks of a job whose Triton built cuda_utils itself under ``env`` (unwatched)."""
    full = {**os.environ, "TRITON_CACHE_DIR": str(tmp / "t"), **env}
    subprocess.run([sys.executable, "-c", "from triton.backends.nvidia.driver import CudaUtils; CudaUtils()"],
                   env=full, check=True, capture_output=True, timeout=300)
    res = subprocess.run([sys.executable, "-c", WATCH], capture_output=True, text=True, timeout=300, env=full)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])["asks"]["triton-host"]


def _held(tmp: Path, host: dict) -> dict:
    """proof_asks over the 480B record with ``host`` as its triton-host family, as a run under Triton 3.8.0 made
    it: {ask: (status, detail)}."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(sglang_014_dir()), STANDINS, str(TRITON), str(REPO)]),
           "DGP_STANDINS": "sgl_kernel,torchvision", "DGP_TRANSFORMERS_EXIST_OK": "1", "CUDA_VISIBLE_DEVICES": ""}
    return host_asks_held(tmp, host, env, triton="3.8.0")


@needs_triton
@needs_sgl014
def test_heads_plan_holds_a_jobs_cuda_utils_ask_keyed_with_the_folder_warm_keys_with(job, stub):
    """A job's cuda_utils lookup under Triton 3.8 (the watcher's ask, with its build folders) against HEAD, the key
    computed by Triton's own compile_module_from_file as a warm on the job's machine builds it: keyed with the
    libcuda folder launch points TRITON_LIBCUDA_PATH at (data/triton_moe.yaml; the linker finding a stand-in
    through LIBRARY_PATH) it is covered; keyed with a folder of the user's own TRITON_LIBCUDA_PATH it is covered too
    (a warm under the same value keys with it); keyed with the folders Triton's own search found (the H100 of
    2026-12-06: /usr/local/nvidia/lib64 and /lib, before launch set the folder everywhere) it is MISSING, naming
    them; an ask whose key no warm files it under is MISSING, naming both."""
    from dgprecompile.runtimes import TRITON_MOE

    there = _watched(job / "a", TRITON_LIBCUDA_PATH=TRITON_MOE.libcuda_dir, LIBRARY_PATH=str(stub))
    (covered,) = _held(job / "a", there).values()
    assert covered[0] == "covered", covered
    elsewhere = _watched(job / "b")  # the job fixture's TRITON_LIBCUDA_PATH: the stand-in's folder
    (covered,) = _held(job / "b", elsewhere).values()
    assert covered[0] == "covered", covered
    elsewhere["modules"][0]["key"] = "A" * 52  # a key no warm computes
    (job / "c").mkdir()
    ((ask, (status, detail)),) = _held(job / "c", elsewhere).items()
    assert ask.startswith("cuda_utils ") and status == "missing", (ask, status, detail)
    assert f"the job's libcuda folder: {stub}; warm keys with {stub}" in detail, detail
    twin = job / "twin"  # a second driver folder: Triton's own search finds both (LD_LIBRARY_PATH, no ldconfig's)
    twin.mkdir()
    (twin / "libcuda.so.1").symlink_to(stub / "libcuda.so.1")
    searched = _watched(job / "d", TRITON_LIBCUDA_PATH="", LD_LIBRARY_PATH=f"{stub}:{twin}")
    assert searched["modules"][0]["build"]["library_dirs"][1:] == [str(stub), str(twin)], searched
    ((ask, (status, detail)),) = _held(job / "d", searched).items()
    assert status == "missing" and f"{stub}, {twin}, Triton's own search" in detail, detail
    assert f"warm keys with {TRITON_MOE.libcuda_dir}" in detail, detail


WARM = ("import json, sys; from dgprecompile.compile.triton_host import warm_host_modules; "
        "print(json.dumps(warm_host_modules(sys.argv[1], sys.argv[2:], {})))")


def _warm(root: Path, *entries: str, triton: Path = TRITON, **env: str | None) -> dict:
    full = {**os.environ, "PYTHONPATH": os.pathsep.join([str(triton), str(REPO)]), "CUDA_VISIBLE_DEVICES": ""}
    full.update({k: v for k, v in env.items() if v is not None})
    for k in [k for k, v in env.items() if v is None]:
        full.pop(k, None)
    res = subprocess.run([sys.executable, "-c", WARM, str(root), *entries], capture_output=True, text=True,
                         timeout=600, env=full)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


@needs_triton
def test_a_gpu_free_warm_builds_cuda_utils_under_the_key_the_jobs_strict_launch_looks_up(job, capfd, stub,
                                                                                        monkeypatch):
    """warm (no GPU, no driver) builds Triton 3.8's cuda_utils with Triton's own CudaUtils() under the job's libcuda
    folder (here the user's TRITON_LIBCUDA_PATH, kept by launch), linked against it where it holds the library;
    a strict launch of the job then finds it and builds nothing. A kernel entry needs no launcher module (3.8 has
    none). Without the variable warm keys as launch sets every job up: data/triton_moe.yaml's folder (another key),
    linked against the driver found elsewhere or a stand-in; a strict launch of a job whose driver lies elsewhere
    (the container case) finds that module and loads it."""
    root = job / "cache"
    report = _warm(root, "SOMEKERNELENTRY")  # an entry without a recorded signature: 3.8 needs none
    assert "left_to_capture" not in report, report
    assert report["launchers"] == {} and report["entries"] == [report["cuda_utils"]] and len(report["built"]) == 1
    nvidia = TRITON.resolve() / "triton" / "backends" / "nvidia"
    assert report["machine"]["key"]["folders"] == {"library_dirs": [str(nvidia / "lib"), str(stub)],
                                                   "include_dirs": [str(nvidia / "include")]}
    assert report["not_whole"] == []
    before = _tree(root / "triton")

    r = launch()  # strict
    assert r.exit_code == 0, r.output + capfd.readouterr().err
    assert "cuda_utils loaded True" in capfd.readouterr().out
    assert _tree(root / "triton") == before  # found under warm's key: nothing built, nothing written

    from dgprecompile.runtimes import TRITON_MOE

    # no variable, a driver Triton's own search finds elsewhere (this job's LD_LIBRARY_PATH, as
    # /usr/local/nvidia/lib64 in a container): keyed with the data file's folder, where launch points every job that
    # sets none, and linked against the driver found
    here = _warm(job / "here", TRITON_LIBCUDA_PATH=None)
    assert here["machine"]["key"]["folders"]["library_dirs"] == [str(nvidia / "lib"), TRITON_MOE.libcuda_dir]
    assert here["cuda_utils"] != report["cuda_utils"] and here["machine"]["libcuda"] == f"the driver's libcuda.so.1 " \
        f"in {stub}", here["machine"]
    # the container case end to end: launch points the job at the data file's folder (no driver there here) while its
    # driver lies elsewhere (LD_LIBRARY_PATH's stand-in); the job's Triton finds warm's module and loads the driver
    monkeypatch.delenv("TRITON_LIBCUDA_PATH")
    before = _tree(job / "here" / "triton")
    r = launch("--cache-dir", "here")
    assert r.exit_code == 0, r.output + capfd.readouterr().err
    assert "cuda_utils loaded True" in capfd.readouterr().out
    assert _tree(job / "here" / "triton") == before
    # no driver at all (a GPU-free warm): keyed with the data file's folder, where launch points a job whose driver
    # is there; linked against a stand-in or the toolkit's stub
    free = _warm(job / "free", TRITON_LIBCUDA_PATH=None, LD_LIBRARY_PATH=None)
    assert free["machine"]["key"]["folders"]["library_dirs"] == [str(nvidia / "lib"), TRITON_MOE.libcuda_dir]
    assert free["cuda_utils"] == here["cuda_utils"] != report["cuda_utils"]  # the folder is in Triton 3.8's key
    assert not free["machine"]["libcuda"].startswith("the driver's"), free["machine"]


def test_launch_points_tritons_libcuda_folder_where_warm_keyed_it_and_keeps_the_users(tmp_path):
    """compose_env's Triton concern: the folder warm keyed cuda_utils with, set on every machine; the user's own
    TRITON_LIBCUDA_PATH kept, not a conflict, an empty one a conflict; where this machine's driver lies elsewhere
    (the loader's folders), LIBRARY_PATH gets them first, so a module linked at run time finds the driver."""
    from dgprecompile.launch.environment import _EnvComposer, _triton_libcuda_env

    driver = tmp_path / "driver"
    driver.mkdir()
    (driver / "libcuda.so.1").write_bytes(b"\x7fELF")

    def composed(base: dict[str, str], folder: Path, found: list[str] | None = None):
        c = _EnvComposer(base, dict(base))
        _triton_libcuda_env(c, str(folder), lambda: [] if found is None else found)
        return ({k: c.env.get(k) for k in ("TRITON_LIBCUDA_PATH", "LIBRARY_PATH")}, [s.kept for s in c.settings],
                c.conflicts, c.notes)

    assert composed({}, driver, [str(driver)]) == ({"TRITON_LIBCUDA_PATH": str(driver), "LIBRARY_PATH": None},
                                                   [False], [], [])
    assert composed({"TRITON_LIBCUDA_PATH": "/mine"}, driver) == ({"TRITON_LIBCUDA_PATH": "/mine",
                                                                   "LIBRARY_PATH": None}, [True], [], [])
    # an empty value is Triton's "unset" (its own search), as warm's key reads it: launch needs the folder, and
    # says so rather than override what the user set
    env, settings, conflicts, notes = composed({"TRITON_LIBCUDA_PATH": ""}, tmp_path / "elsewhere", [str(driver)])
    assert (env["LIBRARY_PATH"], settings, notes) == (None, [], []) and "elsewhere" in conflicts[0], conflicts
    # the driver elsewhere (/usr/local/nvidia/lib64 in a container): the folder set all the same, the driver's
    # folders before the user's own LIBRARY_PATH
    env, settings, conflicts, notes = composed({"LIBRARY_PATH": "/opt/mine"}, tmp_path / "elsewhere",
                                               [str(driver), "/lib"])
    assert env == {"TRITON_LIBCUDA_PATH": str(tmp_path / "elsewhere"), "LIBRARY_PATH": f"{driver}:/lib:/opt/mine"}
    assert (settings, conflicts, notes) == ([False, False], [], []), (settings, conflicts, notes)
    # no driver at all: the folder only
    assert composed({}, tmp_path / "elsewhere")[:2] == ({"TRITON_LIBCUDA_PATH": str(tmp_path / "elsewhere"),
                                                          "LIBRARY_PATH": None}, [False])


def test_the_loaders_libcuda_folders_are_read_as_tritons_search_reads_them(tmp_path):
    """host/toolchain.py driver_libcuda_dirs against this machine's real ldconfig: no driver here, so
    LD_LIBRARY_PATH's folders that hold a libcuda.so.1, in order, once each; [] with none."""
    from dgprecompile.host.toolchain import driver_libcuda_dirs

    if "libcuda.so.1 " in subprocess.run(["/sbin/ldconfig", "-p"], capture_output=True, text=True).stdout:
        pytest.skip("this machine's loader has a driver: its folders come first")
    a, b, empty = tmp_path / "a", tmp_path / "b", tmp_path / "empty"
    for d in (a, b, empty):
        d.mkdir()
    for d in (a, b):
        (d / "libcuda.so.1").write_bytes(b"")
    assert driver_libcuda_dirs({"LD_LIBRARY_PATH": f"{empty}:{b}::{a}:{b}"}) == [str(b), str(a)]
    assert driver_libcuda_dirs({}) == []


TRITON_37 = Path(os.environ.get("DGP_TRITON37_DIR", REPO / ".venv" / "triton-3.7.1"))


@pytest.mark.skipif(not (TRITON_37 / "triton" / "__init__.py").is_file(),
                    reason=f"no Triton 3.7.1 at {TRITON_37} (make setup installs it)")
def test_triton_371_gets_cuda_utils_from_a_gpu_free_warm_and_no_launcher_module(job, capfd, monkeypatch):
    """Triton 3.7.1's launcher calls cuda_utils' generic launch (no module per kernel signature) and its cuda_utils
    key is the source and platform only: warm builds cuda_utils alone GPU-free, a kernel entry without a recorded
    signature needs none, and a strict launch of Triton 3.7.1's own CudaUtils() finds it, building nothing."""
    root = job / "cache"
    report = _warm(root, "SOMEKERNELENTRY", triton=TRITON_37)
    assert "left_to_capture" not in report, report
    assert report["launchers"] == {} and report["entries"] == [report["cuda_utils"]] and len(report["built"]) == 1
    assert report["machine"]["key"]["triton"] == "3.7.1" and "folders" not in report["machine"]["key"]
    before = _tree(root / "triton")
    monkeypatch.setenv("PYTHONPATH", f"{REPO}{os.pathsep}{TRITON_37}")
    r = launch()  # strict
    assert r.exit_code == 0, r.output + capfd.readouterr().err
    assert "cuda_utils loaded True" in capfd.readouterr().out
    assert _tree(root / "triton") == before
