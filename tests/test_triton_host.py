"""Triton's host modules built GPU-free (dgprecompile/compile/triton_host.py), against the real thing: SGLang
0.5.14's fused MoE warmed by Triton 3.6.0 on this GPU-less machine, then ``cuda_utils`` and each kernel's
``__triton_launcher`` built with Triton's own code and C compiler. The keys are proved by Triton's own runtime in
a separate process: its JIT compiles the same kernels again (cache hits), and its own CudaUtils()/CudaLauncher()
find every module in the cache and load it (dlopen, the stand-in libcuda.so.1 on LD_LIBRARY_PATH) with the C
compiler refused. sgl-kernel and torchvision are stand-ins here (tests/standins, named as such)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import STANDINS, host_asks_held, libcuda_standin, needs_sgl014, sglang_014_dir

from dgprecompile.cache.store import CacheStore
from dgprecompile.cache.triton_moe import host_key_here

REPO = Path(__file__).resolve().parent.parent
TRITON = Path(os.environ.get("DGP_TRITON_DIR", REPO / ".venv" / "triton-3.6.0"))
needs_triton = pytest.mark.skipif(not (TRITON / "triton" / "__init__.py").is_file(),
                                  reason=f"no Triton at {TRITON} (make setup installs it)")
WARM = ["-m", "dgprecompile.compile.triton_moe", "--experts", "20", "--global-experts", "160", "--hidden", "6144",
        "--intermediate", "2560", "--topk", "8", "--m", "1-2"]


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(sglang_014_dir()), STANDINS, str(TRITON), str(REPO)]),
            "DGP_STANDINS": "sgl_kernel,torchvision", "DGP_TRANSFORMERS_EXIST_OK": "1", "CUDA_VISIBLE_DEVICES": "",
            **extra}


def _warm(root: Path) -> dict:
    res = subprocess.run([sys.executable, *WARM, "--cache-dir", str(root)], env=_env(), capture_output=True,
                         text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout)


def _files(area: Path) -> dict[str, tuple[str, int]]:
    return {str(p.relative_to(area)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in sorted(area.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def warmed(tmp_path_factory):
    root = tmp_path_factory.mktemp("host") / "cache"
    return root, _warm(root)


def _elf(path: Path) -> tuple[list[str], list[str]]:
    """(NEEDED libraries, undefined dynamic symbols) of a shared object, read by binutils."""
    data = path.read_bytes()
    assert data[:4] == b"\x7fELF" and int.from_bytes(data[16:18], "little") == 3, path  # ET_DYN: a shared object
    dyn = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True, check=True).stdout
    needed = [line.split("[", 1)[1].rstrip("]") for line in dyn.splitlines() if "(NEEDED)" in line]
    assert "(RPATH)" not in dyn and "(RUNPATH)" not in dyn, dyn  # the loader's own search finds the GPU's driver
    nm = subprocess.run(["nm", "-D", "--undefined-only", str(path)], capture_output=True, text=True, check=True)
    return needed, [line.split()[-1] for line in nm.stdout.splitlines() if line.strip()]


@needs_triton
@needs_sgl014
@pytest.mark.slow
def test_warm_builds_cuda_utils_and_each_kernels_launcher_as_shared_objects_that_need_the_driver(warmed):
    root, report = warmed
    host = report["host_modules"]
    assert "left_to_capture" not in host, host
    assert sorted(host["launchers"]) == sorted(report["entries"]) and len(report["entries"]) == 4
    suffix = host["machine"]["key"]["ext_suffix"]
    area = root / "triton"
    modules = [area / host["cuda_utils"] / f"cuda_utils{suffix}"]
    modules += [area / key / f"__triton_launcher{suffix}" for key in sorted(set(host["launchers"].values()))]
    assert sorted(str(p.relative_to(area)) for p in modules) == sorted(host["built"])  # a fresh cache: all built
    for so in modules:
        assert [p.name for p in so.parent.iterdir()] == [so.name]  # Triton's own put: one file per key
        needed, undefined = _elf(so)
        assert "libcuda.so.1" in needed, (so, needed)  # the driver's soname: a GPU machine's libcuda satisfies it
        driver = {s for s in undefined if s.startswith("cu")}
        assert {"cuCtxGetCurrent", "cuDeviceGet"} <= driver, (so, sorted(driver))
    store = CacheStore(root)
    filed = {r.entry: r for r in store.read_index().extra.values() if r.area == "triton"}
    for key in host["entries"]:
        assert filed[key].by == "warm" and store.check_entry(filed[key]) is None


# Triton's own runtime, in a fresh process: its JIT compiles SGLang's kernels again (the warm's calls, cache hits),
# then its CUDA driver's CudaUtils() and, for each compiled kernel, CudaLauncher(kernel.src, kernel.metadata) (what
# CompiledKernel._init_handles calls at a first launch) look their modules up with Triton's own key and load them;
# its C build is refused, so a module not under the key Triton computes fails the run.
PROOF = textwrap.dedent("""
    import importlib, json, sys
    from argparse import Namespace
    from triton.runtime import build

    def refused(name, *args, **kwargs):
        raise SystemExit(f"Triton would build {name}: not in the cache under the key it computes")

    loaded, real_load = [], build._load_module_from_path

    def load(name, path):
        module = real_load(name, path)  # dlopen: NEEDED libcuda.so.1 resolved, every undefined symbol bound
        loaded.append([name, path, module.__name__])
        return module

    build._build, build._load_module_from_path = refused, load
    from dgprecompile.launch.hook._dgprecompile_hook import patch_triton_build
    from triton.backends.nvidia import driver
    patch_triton_build(build)  # strict launch's own refusal of a host-module miss (its _build), as in a launched job
    from dgprecompile.launch import model_asks  # the model proof driver's record of the job's own lookups
    asks = model_asks.Asks()
    model_asks.watch_host(asks)
    from dgprecompile.compile import triton_moe as t
    from triton.backends.nvidia.driver import CudaLauncher, CudaUtils

    t.warm(Namespace(experts=20, global_experts=160, hidden=6144, intermediate=2560, topk=8, m="1-2", m_bound=0,
                     capability=90, device_name="NVIDIA H200", cache_dir=sys.argv[1]))
    CudaUtils()
    jit = importlib.import_module(t.moe_package() + ".fused_moe_triton_kernels").fused_moe_kernel
    kernels = list(jit.device_caches[0][0].values())
    for kernel in kernels:
        CudaLauncher(kernel.src, kernel.metadata)
    print(json.dumps({"loaded": loaded, "kernels": len(kernels), "asks": asks.to_dict(), "notes": asks.notes}))
""")


def run_proof(root: Path, tmp_path: Path, env) -> tuple[dict, dict]:
    """PROOF in a fresh process over the warmed cache at ``root`` (``env(**extra)``: the job's environment, a
    libcuda.so.1 stand-in on its paths): (the Triton area's files before it, what it printed)."""
    stub = tmp_path / "stub"
    stub.mkdir()
    libcuda_standin(stub, env())
    (tmp_path / "proof.py").write_text(PROOF)
    before = _files(root / "triton")
    res = subprocess.run([sys.executable, str(tmp_path / "proof.py"), str(root)], capture_output=True, text=True,
                         timeout=900, env=env(LD_LIBRARY_PATH=str(stub), TRITON_LIBCUDA_PATH=str(stub),
                                          TRITON_CACHE_DIR=str(root / "triton")))
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    return before, json.loads(res.stdout.strip().splitlines()[-1])


def loaded_as_warmed(root: Path, host: dict, proof: dict) -> None:
    """PROOF loaded cuda_utils and each launcher from where warm filed them, and wrote nothing."""
    suffix = host["machine"]["key"]["ext_suffix"]
    expected = {("cuda_utils", str(root / "triton" / host["cuda_utils"] / f"cuda_utils{suffix}"))}
    expected |= {("__triton_launcher", str(root / "triton" / key / f"__triton_launcher{suffix}"))
                 for key in host["launchers"].values()}
    assert {(name, path) for name, path, _ in proof["loaded"]} == expected
    assert all(name == module for name, _, module in proof["loaded"])  # the real extension modules, imported


@pytest.fixture(scope="module")
def proved(warmed, tmp_path_factory):
    """Triton's own runtime over the warmed cache (PROOF), the model driver's watcher recording its lookups."""
    root, report = warmed
    before, proof = run_proof(root, tmp_path_factory.mktemp("proof"), _env)
    return root, report, before, proof


@needs_triton
@needs_sgl014
@pytest.mark.slow
def test_tritons_own_runtime_finds_and_loads_every_module_under_its_key(proved):
    root, report, before, proof = proved
    assert proof["kernels"] == 4
    loaded_as_warmed(root, report["host_modules"], proof)
    assert _files(root / "triton") == before  # nothing compiled, nothing written


def _held(tmp_path: Path, host: dict) -> dict:
    """proof_asks over the 480B record with ``host`` as its triton-host family, Triton 3.6.0 (the record's) on the
    path: {ask: (status, detail)}."""
    return host_asks_held(tmp_path, host, _env())


@needs_triton
@needs_sgl014
@pytest.mark.slow
def test_the_drivers_record_of_the_runtimes_lookups_is_held_to_heads_warm(proved, tmp_path):
    """The model driver's watcher (launch/model_asks.py watch_host) inside Triton's own runtime records each host
    module it looked up: cuda_utils and the 4 kernels' launcher (one signature), under the keys warm filed them by,
    with what the launcher's source came from. HEAD's plan for the README's 480B command holds that record
    (proof_asks, Triton's own code computing the keys); a signature the runtime bound otherwise, or a kernel the plan
    does not warm, is named."""
    root, report, _, proof = proved
    host = report["host_modules"]
    asks = proof["asks"]["triton-host"]
    assert proof["notes"] == [] and asks["platform_key"] == host["machine"]["key"]["platform_key"]
    assert sorted((m["name"], m["key"]) for m in asks["modules"]) == sorted(
        [("cuda_utils", host["cuda_utils"]), *(("__triton_launcher", k) for k in set(host["launchers"].values()))])
    launchers = [m for m in asks["modules"] if "launcher" in m]
    assert {m["launcher"]["kernel"] for m in launchers} == {"fused_moe_kernel"}
    held = _held(tmp_path, asks)
    assert len(held) == len(asks["modules"]) and {s for s, _ in held.values()} == {"covered"}, held

    changed = json.loads(json.dumps(asks))
    first = next(m for m in changed["modules"] if "launcher" in m)
    other = json.loads(json.dumps(first))  # the same launcher, asked for a kernel the plan does not warm
    other["launcher"]["kernel"] = "other_kernel"
    pair = next(p for p in first["launcher"]["signature"] if p[1] == "i32")
    pair[1] = "i64"  # the JIT bound another type: another launcher source, another key
    changed["modules"].append(other)
    held = _held(tmp_path, changed)
    missing = {ask: detail for ask, (status, detail) in held.items() if status == "missing"}
    assert set(missing) == {f"__triton_launcher {first['key']} (fused_moe_kernel)",
                            f"__triton_launcher {other['key']} (other_kernel)"}, held
    assert missing[f"__triton_launcher {first['key']} (fused_moe_kernel)"].startswith("HEAD's warm files it under ")
    assert "HEAD's plan warms only fused_moe_kernel" in missing[f"__triton_launcher {other['key']} (other_kernel)"]


@needs_triton
@needs_sgl014
@pytest.mark.slow
def test_a_second_build_is_a_no_op(warmed):
    root, report = warmed
    before = _files(root / "triton")
    again = _warm(root)
    assert again["host_modules"]["built"] == [] and again["warmed"] == []
    for key in ("cuda_utils", "launchers", "entries", "machine"):
        assert again["host_modules"][key] == report["host_modules"][key], key
    assert _files(root / "triton") == before  # same bytes, same mtimes: nothing rewritten


@needs_triton
def test_the_key_facts_verify_compares_are_tritons_own():
    """verify reads platform_key() and EXT_SUFFIX without importing triton: the same values Triton's build uses."""
    code = ("import json, sysconfig; from triton.runtime.build import platform_key; "
            "print(json.dumps({'platform_key': platform_key(), 'ext_suffix': sysconfig.get_config_var('EXT_SUFFIX')}))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(TRITON)})
    assert res.returncode == 0, res.stderr[-2000:]
    assert json.loads(res.stdout) == host_key_here()


@needs_triton
@pytest.mark.slow
def test_the_key_holds_no_path_and_a_machine_that_cannot_build_leaves_them_to_capture(tmp_path):
    """cuda_utils alone (no kernel): built at two cache roots it lands under the same key (no path is in Triton's
    key); with a C compiler that does not exist the warm records why they are left to `launch --capture`."""
    code = ("import json, sys; from dgprecompile.compile.triton_host import warm_host_modules; "
            "print(json.dumps(warm_host_modules(sys.argv[1], [], {})))")

    def build(root: Path, **env: str) -> dict:
        res = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True, timeout=600,
                             env={**os.environ, "PYTHONPATH": os.pathsep.join([str(TRITON), str(REPO)]), **env})
        assert res.returncode == 0, res.stderr[-3000:]
        return json.loads(res.stdout.strip().splitlines()[-1])

    a, b = build(tmp_path / "a" / "cache"), build(tmp_path / "elsewhere" / "b")
    assert a["cuda_utils"] == b["cuda_utils"] and a["entries"] == b["entries"] == [a["cuda_utils"]]
    assert len(a["built"]) == len(b["built"]) == 1 and a["launchers"] == {}
    suffix = a["machine"]["key"]["ext_suffix"]
    assert (tmp_path / "elsewhere" / "b" / "triton" / a["cuda_utils"] / f"cuda_utils{suffix}").is_file()

    none = build(tmp_path / "c", CC=str(tmp_path / "no-such-cc"))
    assert set(none) == {"left_to_capture"} and "no-such-cc" in none["left_to_capture"], none
    assert not list((tmp_path / "c").rglob("*.so"))  # nothing half-built left behind


@needs_triton
def test_the_watcher_takes_each_binding_whether_the_driver_bound_before_or_after_launchs_wrapper():
    """A tool may wrap Triton's compile_module_from_src where triton.runtime.build loads (launch's hook did until it
    wrapped _build); a driver that bound the name before (or a wrapper of the wrapper) keeps another function. The watcher wraps each binding of the function
    or of what it wraps, so the driver's own lookups are recorded either way, and wraps it once."""
    code = textwrap.dedent("""
        import functools, json
        from triton.backends.nvidia import driver
        from triton.runtime import build
        from dgprecompile.launch import model_asks
        real = build.compile_module_from_src
        assert driver.compile_module_from_src is real  # bound at import, before any wrapper

        @functools.wraps(real)
        def strict(src, name, *args, **kwargs):  # STAND-IN for another tool's wrapper of the function
            return real(src, name, *args, **kwargs)

        build.compile_module_from_src = strict
        asks = model_asks.Asks()
        first = model_asks.watch_host(asks)
        again = model_asks.watch_host(asks)  # a second watcher finds the first and adds nothing
        b, d = build.compile_module_from_src, driver.compile_module_from_src
        print(json.dumps({"first": first, "again": again, "build": [b._dgp_asks, b.__wrapped__ is strict],
                          "driver": [d._dgp_asks, d.__wrapped__ is real], "notes": asks.notes}))
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join([str(TRITON), str(REPO)]),
                              "CUDA_VISIBLE_DEVICES": ""})
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out == {"first": "triton.runtime.build.compile_module_from_src", "again": None,
                   "build": [True, True], "driver": [True, True], "notes": []}, out
