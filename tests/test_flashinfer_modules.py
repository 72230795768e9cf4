"""FlashInfer's JIT modules as a planned runtime (runtimes/flashinfer.py, data/flashinfer_modules.yaml): `plan` lists
the modules a server's path builds; `warm` builds one GPU-free with flashinfer-python 0.6.12's own JitSpec and
builder (sglang 0.5.14's pin) and with 0.7.2's JitSpecNvcc (sglang 0.5.23's pin: the restructured JitSpec), real
nvcc for sm_90a, into the cache's flashinfer area; verify, a second warm and a strict launch (the startup hook: a
built module is loaded without FlashInfer's ninja, a missing one refused by name) against it, per version.

This machine has no GPU and no driver: where a module links libcuda, it links against a named STAND-IN libcuda.so
(compile/flashinfer_modules.py). The module built is FlashInfer's dsv3 router GEMM (one source file, ~15 s
here with 0.6.12, ~25 s with 0.7.2), not one the H200 plans (SGLang calls it on sm 100/103 only): the planned ones need cuRAND's
headers, which this machine's nvcc-only toolkit lacks (`sampling`: built with the nvidia-curand wheel's headers in
tests/test_build_failures.py, several minutes here), or minutes of compiling (trtllm_comm)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import (
    NVCC,
    Background,
    beside_venv,
    nice_while_running,
    no_user_sglang_env,
    sgl_deep_gemm_013_dir,
    sglang_014_dir,
)

from dgprecompile.errors import InputError
from dgprecompile.host.procfs import command_line, proc_stats
from dgprecompile.host.toolchain import probe_nvcc
from dgprecompile.planning.manifest import plan_from_dict, write_manifest
from dgprecompile.planning.plan import PlanRequest
from dgprecompile.planning.server_plan import plan_from_server
from dgprecompile.runtimes import FLASHINFER_MODULES
from dgprecompile.runtimes.flashinfer import SPLIT_COMPILE_ENV, grouped_topk_problem

REPO = Path(__file__).resolve().parent.parent
QWEN = "python -m sglang.launch_server --model-path Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8 --tp 8 --ep 8"
DSV3 = json.loads((REPO / "dgprecompile" / "data" / "models" / "DeepSeek-V3.json").read_text())
# each flashinfer-python the tests build with, the sglang release that pins it, and its folder beside the venv
PINS = {"0.6.12": "0.5.14", "0.7.2": "0.5.23"}
FLASHINFER = {v: beside_venv(f"flashinfer-{v}", "flashinfer/__init__.py") for v in PINS}
# the sgl-deep-gemm that release runs (warm checks the installed DeepGEMM against the plan's; never imported here)
DEEP_GEMM = {"0.6.12": sgl_deep_gemm_013_dir(),
             "0.7.2": beside_venv("sgl-deep-gemm-0.2.3.post2", "deep_gemm/include/deep_gemm")}


def _missing(version: str) -> str | None:
    if FLASHINFER[version] is None or sglang_014_dir() is None or DEEP_GEMM[version] is None:
        return (f"flashinfer-python {version}, sglang 0.5.14 and sglang {PINS[version]}'s sgl-deep-gemm beside the "
                "venv (make setup)")
    return None if os.path.exists(NVCC) else "nvcc (make setup)"


def _plan(cmd: str, sglang: str = "0.5.14"):
    return plan_from_server(PlanRequest(sglang_cmd=cmd, sglang=sglang, sglang_precompile=False))


def _modules(plan) -> list[str]:
    return [it.module for it in plan.flashinfer.values()]


def test_each_server_plans_the_modules_its_path_builds(tmp_path):
    qwen = _plan(QWEN)
    assert _modules(qwen) == ["sampling", "trtllm_comm"]  # sampling backend; all-reduce fusion at tp 8
    assert all(it.flashinfer == "0.6.12" and it.arch == "9.0a" and it.id.endswith("@0.6.12.sm90a")
               for it in qwen.flashinfer.values())
    assert any("dsv3_fused_routing: not built by this server (no grouped top-k" in n for n in qwen.notes)
    (tmp_path / "config.json").write_text(json.dumps(DSV3))
    dsv3 = _plan(f"python -m sglang.launch_server --model-path {tmp_path} --tp 8")
    assert _modules(dsv3) == ["sampling", "trtllm_comm", "dsv3_fused_routing"]
    one = _plan(f"python -m sglang.launch_server --model-path {tmp_path} --tp 1")
    assert _modules(one) == ["sampling", "dsv3_fused_routing"]  # no all-reduce on one GPU
    assert any("all-reduce fusion is off: tp 1" in n for n in one.notes)
    off = _plan(QWEN + " --sampling-backend pytorch --enforce-disable-flashinfer-allreduce-fusion")
    assert off.flashinfer == {}  # the command's own switches
    assert any("--sampling-backend pytorch" in n for n in off.notes)
    assert any("--enforce-disable-flashinfer-allreduce-fusion" in n for n in off.notes)
    old = _plan(QWEN, "0.5.8")
    assert old.flashinfer == {} and any("0.5.8's source was not read" in n and "reads 0.5.9-0.5.23" in n
                                        for n in old.notes)


def test_the_longest_module_is_split_only_where_both_builds_gave_the_same_kernels(monkeypatch):
    """nvcc's -split-compile=0 for trtllm_comm's units (a server plan's longest build) with flashinfer-python 0.6.12
    and nvcc 13.0, the pair whose SASS bench/results/2026-12-05-cpu-nvcc-split compared both ways; never for
    sampling (renorm.cu's kernels changed), another flashinfer-python or another nvcc release."""
    items = {it.module: it for it in _plan(QWEN).flashinfer.values()}
    assert FLASHINFER_MODULES.split_compiled(list(items.values()), (13, 0)) == ["trtllm_comm"]
    assert FLASHINFER_MODULES.split_compiled(list(items.values()), (12, 9)) == []
    newer = _plan(QWEN, "0.5.23").flashinfer.values()  # flashinfer-python 0.7.2: not compared
    assert FLASHINFER_MODULES.split_compiled(list(newer), (13, 0)) == []
    if not os.path.exists(NVCC):
        pytest.skip("nvcc (make setup)")
    home = os.path.dirname(os.path.dirname(NVCC))  # the real toolkit's nvcc says its release
    env = FLASHINFER_MODULES.build_env(list(items.values()), 4, home)
    compared = probe_nvcc(NVCC).release == (13, 0)  # CI's and this machine's toolkit
    assert env.get(SPLIT_COMPILE_ENV) == ("trtllm_comm" if compared else None) and env["MAX_JOBS"] == "4"
    assert SPLIT_COMPILE_ENV not in FLASHINFER_MODULES.build_env([items["sampling"]], 4, home)
    # the user's own CUDA_HOME (warm then passes no toolkit): its nvcc is the one FlashInfer's ninja runs
    monkeypatch.setenv("CUDA_HOME", home)
    env = FLASHINFER_MODULES.build_env(list(items.values()), 4, None)
    assert env.get(SPLIT_COMPILE_ENV) == ("trtllm_comm" if compared else None) and "CUDA_HOME" not in env


def test_fused_routing_follows_sglangs_limits():
    assert grouped_topk_problem(DSV3) == ""
    assert "outside its limits" in grouped_topk_problem({**DSV3, "n_routed_experts": 384})  # not a power of two
    assert "outside its limits" in grouped_topk_problem({**DSV3, "num_experts_per_tok": 9})
    assert "no grouped top-k" in grouped_topk_problem({"num_experts": 128})


def test_the_manifest_carries_the_items_and_refuses_a_changed_one():
    data = json.loads(json.dumps(_plan(QWEN).to_dict()))
    assert list(plan_from_dict(json.loads(json.dumps(data))).flashinfer) == list(_plan(QWEN).flashinfer)
    data["flashinfer"][0]["module"] = "other"
    with pytest.raises(InputError, match="does not match its fields"):
        plan_from_dict(json.loads(json.dumps(data)))
    data["flashinfer"][0].update(module="sampling", spec="os:system")  # only FlashInfer's own spec functions
    with pytest.raises(InputError, match="spec"):
        plan_from_dict(data)


# ---- the build, with each flashinfer-python's own builder and real nvcc --------------------------------------


def _env(version: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLASHINFER_", "DGPRECOMPILE_"))}
    env.update({"PYTHONPATH": os.pathsep.join([FLASHINFER[version], sglang_014_dir(), DEEP_GEMM[version],
                                               str(REPO)]),
                "CUDA_VISIBLE_DEVICES": "",
                "PATH": os.path.dirname(NVCC) + os.pathsep + os.environ.get("PATH", "")})
    env.pop("CUDA_HOME", None)
    return env


def _dgp(*args, env, timeout=900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dgprecompile", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=timeout)


def _router(version: str) -> dict[str, str]:
    return {"id": f"flashinfer:dsv3_router_gemm@{version}.sm90a", "module": "dsv3_router_gemm",
            "spec": "flashinfer.jit.dsv3_optimizations:gen_dsv3_router_gemm_module", "flashinfer": version,
            "arch": "9.0a", "why": "a test's item (flashinfer/gemm/routergemm.py)"}


@pytest.fixture(scope="module")
def warms(tmp_path_factory):
    """Each version's warm of the 480B server plan of the sglang release that pins this flashinfer-python, its
    other items dropped (a test's trim) and one FlashInfer module kept, all started at once (each one nvcc: side by
    side they take the machine's cores together): {version: (folder, manifest, cache, the warm)}."""
    with no_user_sglang_env():  # conftest unsets them per test, after this module-scoped fixture
        started = {}
        for version in PINS:
            if _missing(version):
                continue
            tmp = tmp_path_factory.mktemp(f"fi-{version}")
            data = _plan(QWEN, PINS[version]).to_dict()
            for shape in data["shapes"]:
                shape["buckets"], shape["aux_kernels"] = [], []
            data["kernels"], data["total_kernels"] = [], 0
            for section in ("sglang_jit_modules", "triton_moe", "inductor", "triton_path"):
                data.pop(section, None)
            data["flashinfer"] = [_router(version)]
            manifest = tmp / "plan.yaml"
            write_manifest(plan_from_dict(data), manifest)
            cache = tmp / "cache"
            # 0.6.12's router built with nvcc's -split-compile=0 (the mechanism data/flashinfer_modules.yaml turns
            # on for trtllm_comm, whose build takes minutes here), so what follows also runs on a split-built module
            split = {SPLIT_COMPILE_ENV: "dsv3_router_gemm"} if version == "0.6.12" else {}
            started[version] = (tmp, manifest, cache, Background(
                [sys.executable, "-m", "dgprecompile", "warm", "--manifest", str(manifest), "--cache-dir", str(cache),
                 "--nvcc", NVCC, "--sglang-jit", "on", "--json"], env={**_env(version), **split}))
        yield started
        for *_, warm in started.values():
            warm.stop()


@pytest.fixture(scope="module", params=list(PINS))
def warmed(request, warms):
    """One version's warm (:func:`warms`), ended."""
    version = request.param
    if _missing(version):
        pytest.skip(_missing(version))
    tmp, manifest, cache, warm = warms[version]
    return version, tmp, manifest, cache, warm.result()


def test_warm_builds_the_module_gpu_free_and_files_it_where_flashinfer_looks(warmed):
    version, _, manifest, cache, w = warmed
    router = _router(version)
    assert w.returncode == 0, w.stdout + w.stderr
    report = json.loads(w.stdout)
    assert report["compiled"] == 1 and router["id"] in report["item_seconds"], report
    entry = f"flashinfer/{version}/90a/cached_ops/dsv3_router_gemm"
    so = cache / entry / "dsv3_router_gemm.so"
    assert so.read_bytes()[:4] == b"\x7fELF" and sorted(p.name for p in so.parent.iterdir()) == [so.name]
    # FlashInfer's own path for it, under the variable launch sets, is this file (through the hidden base's link)
    index = json.loads((cache / "dgprecompile" / "index.json").read_text())
    record = index["flashinfer"][router["id"]]
    assert record["flashinfer"] == version and record["entries"] == [entry]
    # FlashInfer's own ninja file compiled the unit with -split-compile=0 where asked (flashinfer_modules.py reads it)
    assert record.get("split_compile", False) is (version == "0.6.12"), record
    assert set(index["extra"][entry]["files"]) == {so.name}
    probe = subprocess.run([sys.executable, "-c", "from flashinfer.jit.dsv3_optimizations import "
                            "gen_dsv3_router_gemm_module as g; print(g().jit_library_path)"],
                           env={**_env(version), "FLASHINFER_WORKSPACE_BASE": str(cache / ".flashinfer-base"),
                                "FLASHINFER_CUDA_ARCH_LIST": "9.0a"},
                           capture_output=True, text=True, timeout=300)
    assert Path(probe.stdout.strip().splitlines()[-1]).resolve() == so.resolve(), probe.stdout + probe.stderr
    v = _dgp("verify", "--manifest", manifest, "--cache-dir", cache, "--json", env=_env(version))
    assert v.returncode == 0, v.stdout + v.stderr
    again = _dgp("warm", "--manifest", manifest, "--cache-dir", cache, "--nvcc", NVCC, "--sglang-jit", "on", "--json",
                 env=_env(version))
    assert again.returncode == 0 and json.loads(again.stdout)["already_cached"] == 1, again.stdout
    assert json.loads(again.stdout)["compiled"] == 0


# build_and_load and a direct build (FlashInfer's own callers make both) of the warmed module, then the unwarmed one
JOB = ("from flashinfer.jit.dsv3_optimizations import gen_dsv3_router_gemm_module as g\n"
       "from flashinfer.jit.sampling import gen_sampling_module as s\n"
       "print('spec:', type(g()).__name__, flush=True)\n"
       "print('router:', type(g().build_and_load()).__name__, flush=True)\n"
       "g().build()\n"
       "s().build_and_load()\n")


def test_a_strict_launch_loads_the_warmed_module_without_building_and_refuses_an_unwarmed_one(warmed):
    version, _, manifest, cache, w = warmed
    assert w.returncode == 0, w.stderr
    ops = cache / "flashinfer" / version / "90a" / "cached_ops"
    res = _dgp("launch", "--manifest", manifest, "--cache-dir", cache, "--", sys.executable, "-c", JOB,
               env=_env(version))
    # the class that builds it is the one the data file names for this version (JitSpec / JitSpecNvcc)
    spec_class = FLASHINFER_MODULES.data()["flashinfer"][version]["spec_class"]
    assert f"spec: {spec_class}\n" in res.stdout, res.stdout + res.stderr
    # the warmed module: loaded as FlashInfer loads it (tvm-ffi; it needs no driver to load), not built: its
    # directory still holds only the .so (FlashInfer's ninja would have written its build file and objects there)
    assert "router: Module" in res.stdout, res.stdout + res.stderr
    assert sorted(p.name for p in (ops / "dsv3_router_gemm").iterdir()) == ["dsv3_router_gemm.so"]
    # the unplanned sampling module: refused by name before FlashInfer wrote anything
    assert res.returncode == 1, res.stdout + res.stderr
    assert "dgprecompile strict mode: FlashInfer tried to build its JIT module sampling" in res.stderr
    assert not (ops / "sampling").exists() or not any((ops / "sampling").iterdir())


def test_a_lost_module_is_named_by_verify_and_a_strict_launch_will_not_start(warmed, tmp_path):
    version, tmp, manifest, cache, w = warmed
    assert w.returncode == 0, w.stderr
    copy = tmp_path / "cache"
    shutil.copytree(cache, copy, symlinks=True)
    (copy / "flashinfer" / version / "90a" / "cached_ops" / "dsv3_router_gemm" / "dsv3_router_gemm.so").unlink()
    v = _dgp("verify", "--manifest", manifest, "--cache-dir", copy, "--json", env=_env(version))
    assert v.returncode == 1 and _router(version)["id"] in json.dumps(json.loads(v.stdout)), v.stdout
    launch = _dgp("launch", "--manifest", manifest, "--cache-dir", copy, "--", sys.executable, "-c", "pass",
                  env=_env(version))
    assert launch.returncode == 1 and "flashinfer:dsv3_router_gemm" in launch.stderr, launch.stderr
    assert "Traceback" not in launch.stderr


def test_the_runtime_is_planned_and_refused_by_the_hook():
    assert FLASHINFER_MODULES.strict_by == "hook" and FLASHINFER_MODULES.needs_gpu is None


def _router_and_kernels(version: str) -> dict:
    """The 480B server plan of the release pinning ``version`` with its DeepGEMM kernels and one FlashInfer module
    (the router GEMM) only; skips where that release or FlashInfer is not installed."""
    if _missing(version):
        pytest.skip(_missing(version))
    data = _plan(QWEN, PINS[version]).to_dict()
    for section in ("sglang_jit_modules", "triton_moe", "inductor", "triton_path"):
        data.pop(section, None)
    data["flashinfer"] = [_router(version)]
    return data


def test_warm_starts_flashinfers_build_beside_the_pool_not_after_it(tmp_path):
    """FlashInfer's modules are a server plan's longest builds and need no worker: warm starts them with the pool
    (compile/warm.py BESIDE_POOL), so a module shorter than the pool's kernels is done before the last kernel is
    (after the pool, as before, its .so would be the newest file of the cache). While it builds, the pool's
    processes (the zygote, its workers and their nvcc) run BACKGROUND_NICE steps below it, FlashInfer's own at
    warm's priority (each process's nice read from /proc while the warm runs)."""
    from dgprecompile.compile.warm import BACKGROUND_NICE

    version = "0.6.12"
    data = _router_and_kernels(version)
    refs = [json.dumps(shape) for shape in data["shapes"]]
    counts = [sum(k["id"] in text for k in data["kernels"]) for text in refs]
    pick = min((c, i) for i, c in enumerate(counts) if c >= 12)[1]  # a shape with enough kernels to outlast it
    data["shapes"] = [data["shapes"][pick]]
    data["kernels"] = [k for k in data["kernels"] if k["id"] in refs[pick]]
    data["total_kernels"] = len(data["kernels"])
    manifest = tmp_path / "plan.yaml"
    write_manifest(plan_from_dict(data), manifest)
    cache = tmp_path / "cache"
    run = Background([sys.executable, "-m", "dgprecompile", "warm", "--manifest", str(manifest), "--cache-dir",
                      str(cache), "--nvcc", NVCC, "--sglang-jit", "on", "--jobs", "2", "--json"], env=_env(version))
    # the pool: the zygote, its workers and their compilers; not warm's own probes (nvcc --version at its start)
    seen = nice_while_running(run, lambda line: "flashinfer" if "dsv3_router" in line
                              or "compile.flashinfer_modules" in line else "pool"
                              if "dgprecompile.compile.worker" in line else "other")
    w = run.result()
    assert w.returncode == 0, w.stdout + w.stderr
    assert seen["pool"] == {BACKGROUND_NICE} and seen["flashinfer"] == {0}, seen
    report = json.loads(w.stdout)
    assert report["compiled"] == data["total_kernels"] + 1, report
    assert report["jobs"] == 2 and report["workers"] <= 2  # the budget the pool and FlashInfer's ninja shared
    module = cache / f"flashinfer/{version}/90a/cached_ops/dsv3_router_gemm/dsv3_router_gemm.so"
    kernels = [p.stat().st_mtime for p in (cache / "cache").rglob("*") if p.is_file()]
    assert len(kernels) >= data["total_kernels"]
    assert module.stat().st_mtime < max(kernels), (report["item_seconds"], report.get("wall_seconds"))


def test_a_sigkilled_warms_flashinfer_build_ends_with_it(tmp_path):
    """A FlashInfer module's build runs in a session of its own (compile/recorded_items.py Started), so nothing of
    warm's group reaches it: a `kill -9` of warm alone ends the build's whole group (FlashInfer's ninja and nvcc)
    through its parent-death signal instead of leaving it to run for minutes, and the build's scratch (its output
    files) stays locked while any of it runs, then a later run's sweep removes it."""
    import signal
    import time

    from dgprecompile.host import scratch

    version = "0.6.12"
    data = _router_and_kernels(version)
    manifest = tmp_path / "plan.yaml"
    write_manifest(plan_from_dict(data), manifest)
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "dgprecompile", "warm", "--manifest", str(manifest), "--cache-dir",
                             str(tmp_path / "cache"), "--nvcc", NVCC, "--jobs", "2"],
                            env={**_env(version), "TMPDIR": str(tmpdir)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    def building(p) -> bool:  # the FlashInfer item's process (not the zygote, whose session compiles kernels)
        return p.ppid == proc.pid and p.sid == p.pid and "dgprecompile.compile.flashinfer_modules" in \
            command_line(p.pid, 3) and any(q.comm in ("nvcc", "cicc") for q in proc_stats() if q.sid == p.pid)

    build, deadline = None, time.time() + 300
    while build is None and time.time() < deadline and proc.poll() is None:
        build = next((p for p in proc_stats() if building(p)), None)
        time.sleep(0.1)
    assert build is not None, "no FlashInfer build started under the warm"
    proc.send_signal(signal.SIGKILL)  # warm alone: its handlers never run
    proc.communicate(timeout=60)
    (items,) = [p for p in tmpdir.iterdir() if p.name.startswith("dgprecompile-items-")]
    deadline = time.time() + 8
    # ninja runs each command in a process group of its own: the build's whole session
    while time.time() < deadline and (alive := [p for p in proc_stats() if p.sid == build.pid and p.state != "Z"]):
        assert scratch.held(items), [p.comm for p in alive]
        time.sleep(0.05)
    assert not [p.comm for p in proc_stats() if p.sid == build.pid and p.state != "Z"], "outlived warm by 8 s"
    deadline = time.time() + 10  # the kernel drops a dead process's flock a moment after its exit (test_scratch)
    while scratch.held(items) and time.time() < deadline:
        time.sleep(0.05)
    assert scratch.clean_stale(tmpdir, "dgprecompile-items-") == 1 and not items.exists()
