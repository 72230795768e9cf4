"""Triton's host modules, built without a GPU: the CUDA driver's ``cuda_utils`` (built once when Triton's CUDA
driver initialises) and, up to Triton 3.6, one ``__triton_launcher`` per kernel signature (built at a compiled
kernel's first launch; 3.7 and 3.8 build none: their launcher calls ``cuda_utils``' generic ``launch``).

Triton 3.8 builds ``cuda_utils`` from driver.c with
``compile_module_from_file``, under a key that also holds the build's folders: Triton's own install folders and the
job's libcuda folder (:func:`key_libcuda_dir`, as launch sets it up: TRITON_LIBCUDA_PATH, else data/triton_moe.yaml's
``host`` folder on every machine). warm builds it so and, where the folder holds no libcuda.so.1 here, links against
the driver's found elsewhere or a stand-in (below); the key is the job's only where Triton is installed at the same
path (the job's image). The rest of this docstring is 3.6's build.

Both are C extensions Triton builds at run time with ``triton/runtime/build.py`` ``compile_module_from_src``
(the C compiler, the Python headers and the ``cuda.h`` Triton ships, linked against ``libcuda.so.1``) and stores in
``TRITON_CACHE_DIR`` as ``<key>/<name><EXT_SUFFIX>``. Here they are built by Triton's OWN code, as at run time:

* ``cuda_utils``: Triton's own ``CudaUtils()`` (``triton/backends/nvidia/driver.py``: its source, name, include
  and library arguments);
* each launcher: Triton's own ``CudaLauncher(kernel.src, kernel.metadata)``, what ``CompiledKernel._init_handles``
  calls at a kernel's first launch, with ``kernel`` Triton's own ``CompiledKernel`` loaded from the entry's group
  file (its metadata JSON: ``tensordesc_meta``, scratch sizes, ``launch_pdl``, ...) and ``kernel.src`` carrying the
  signature Triton's JIT bound for that entry. Triton records no signature in the entry, so the warm records it
  as the JIT hands it to ``compile()``: :func:`watch_kernels` is Triton's own compilation listener knob.

So the cache key (``sha256(source + platform_key())``, then base32) and the file name are computed by Triton's
own functions, never by a copy of the formula here. Two STAND-INS, named: ``_load_module_from_path`` (the build
puts the ``.so`` into the cache with Triton's own writer, then Triton would ``dlopen`` it, which needs the
driver's ``libcuda.so.1``: here it is not loaded) and, where the machine has no driver, the ``libcuda.so.1`` the
module is linked against (Triton's own ``TRITON_LIBCUDA_PATH`` knob): the toolkit's ``lib64/stubs/libcuda.so``
where there is one, else a library exporting every ``cu*`` function Triton's ``cuda.h`` declares (soname
``libcuda.so.1``). Either way the module records ``NEEDED libcuda.so.1`` with its ``cu*`` symbols undefined, and
the GPU machine's driver satisfies them at load.

What the key and the file name depend on, besides the Triton release (its ``driver.c`` and launcher generator):
``platform_key()`` (machine, system, the interpreter's bits and linkage) in the key, and the interpreter's
``EXT_SUFFIX`` (Python version and platform) in the file name: a job whose Python differs looks for another file
and builds it. Not in the key but in the bytes: the C compiler, the Python headers and the libcuda linked against.
:func:`machine` records all of them; verify compares the key's facts (cache/triton_moe.py).
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import shutil
import subprocess
import sysconfig
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from dgprecompile.host.environ import environ

HOST_MODULES = ("cuda_utils", "__triton_launcher")  # the names compile_module_from_src builds for the CUDA driver
STUB_SONAME = "libcuda.so.1"  # the driver's soname; Triton links ``-l:libcuda.so.1`` (driver.py ``libraries``)


def watch_kernels() -> dict[str, dict[str, Any]]:
    """Record, for every kernel Triton's ``compile()`` returns in this process (compiled, or found in the cache),
    its entry (the cache directory) -> ``{"kernel": name, "signature": {arg: type}}``: the signature its JIT bound,
    which the launcher's source is generated from. Triton's own ``knobs.compilation.listener``; a listener already
    set keeps being called."""
    from triton import knobs

    seen: dict[str, dict[str, Any]] = {}
    previous = knobs.compilation.listener

    def listener(*, src, metadata, metadata_group, times, cache_hit):
        if previous is not None:
            previous(src=src, metadata=metadata, metadata_group=metadata_group, times=times, cache_hit=cache_hit)
        signature = getattr(src, "signature", None)
        path = next((p for name, p in metadata_group.items() if name.endswith(".json")), None)
        if isinstance(signature, dict) and path:
            seen[os.path.basename(os.path.dirname(path))] = {"kernel": src.name, "signature": dict(signature)}

    knobs.compilation.listener = listener
    return seen


class RecordedSource:
    """What Triton's CudaLauncher reads of a kernel's source (``signature``, ``constants``, ``fn.arg_names``),
    from the record :func:`watch_kernels` made (an ``{arg: type}`` mapping) or a proof's asks (``[arg, type]``
    pairs), in the kernel's argument order: the launcher's source follows it. ``constants`` is empty: make_launcher
    does not read them."""

    def __init__(self, name: str, signature: Mapping[str, Any] | list):
        self.name = name
        self.signature = {str(k): _tuples(v) for k, v in dict(signature).items()}  # JSON made the tuple types lists
        self.constants: dict = {}
        self.fn = type("RecordedFn", (), {"arg_names": list(self.signature)})()


def _tuples(value: Any) -> Any:
    """A recorded signature type as Triton holds it: JSON's lists back to (nested) tuples."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


class NotLoaded:
    """STAND-IN for the loaded extension module (see the module docstring): every attribute is None."""

    def __init__(self, name: str, path: str):
        self.__name__, self.__file__ = name, path

    def __getattr__(self, attr: str) -> Any:
        return None


@contextlib.contextmanager
def _swapped(env: Mapping[str, str], **functions) -> Iterator[None]:
    """Triton's ``triton.runtime.build`` with ``functions`` in place of its own, under ``env``; its CUDA driver's
    cached library folders cleared on the way in and out (they follow TRITON_LIBCUDA_PATH). Restores everything."""
    from triton.backends.nvidia import driver
    from triton.runtime import build

    real = {name: getattr(build, name) for name in functions}
    for name, function in functions.items():
        setattr(build, name, function)
    driver.libcuda_dirs.cache_clear()
    driver.library_dirs.cache_clear()
    try:
        with environ(env):
            yield
    finally:
        for name, function in real.items():
            setattr(build, name, function)
        driver.libcuda_dirs.cache_clear()
        driver.library_dirs.cache_clear()


@contextlib.contextmanager
def _building(env: Mapping[str, str], link_dir: str | None) -> Iterator[list[dict[str, Any]]]:
    """Around Triton's own builds: the loader stand-in, ``env`` (TRITON_CACHE_DIR, TRITON_LIBCUDA_PATH: the job's
    libcuda folder), ``link_dir`` (where a libcuda.so.1 to link against is, where that folder has none here: added
    to the C compiler's library folders after Triton computed the key), and an observer of each module Triton looks
    up (its cache manager's key and directory, the name, and whether it ran the C compiler). Restores everything."""
    from triton.runtime import build

    modules: list[dict[str, Any]] = []
    real_build, real_manager = build._build, build.get_cache_manager

    def get_cache_manager(key):
        manager = real_manager(key)
        modules.append({"key": manager.key, "dir": manager.cache_dir, "built": False})
        return manager

    def compile_c(name, src, srcdir, library_dirs, *args, **kwargs):
        modules[-1]["built"] = True
        return real_build(name, src, srcdir, [*library_dirs, *([link_dir] if link_dir else [])], *args, **kwargs)

    def load(name, path):
        modules[-1].update(name=name, path=path)
        return NotLoaded(name, path)

    with _swapped(env, _load_module_from_path=load, _build=compile_c, get_cache_manager=get_cache_manager):
        yield modules


class _Named(Exception):
    """Stops Triton's own lookup once its key is computed (:func:`lookup_keys`)."""


def lookup_keys(launchers: Mapping[str, Mapping[str, Any]], built: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The cache keys this Triton looks its host modules up by: ``cuda_utils``'s, and each launcher's from what its
    source is generated from (``launchers``: id -> ``{"kernel", "signature", "tensordesc_meta"}``, a signature as
    :class:`RecordedSource` takes it), computed by Triton's own CudaUtils() and CudaLauncher() as :func:`build` calls
    them, each stopped at its cache lookup: nothing is compiled or written. With ``platform_key`` and the file
    suffix, the rest of what the key and the file name hold. ``built``: what a job's Triton 3.8 built cuda_utils
    with (its key holds it): the key warm files it under in that job's image, Triton's own folders as the job had
    them and the libcuda folder warm keys with (:func:`key_libcuda_dir`'s default, where launch points the job)."""
    import tempfile
    from types import SimpleNamespace

    from triton.backends.nvidia.driver import CudaLauncher, CudaUtils
    from triton.runtime import build as triton_build

    keys: list[str] = []
    real = triton_build.get_cache_manager

    def get_cache_manager(key):
        keys.append(real(key).key)  # Triton's own manager names the directory (in a scratch cache: nothing stays)
        raise _Named

    def named(make) -> str:
        try:
            make()
        except _Named:
            return keys[-1]
        raise RuntimeError("Triton looked no host module up")

    out: dict[str, Any] = {"launchers": {}}
    with tempfile.TemporaryDirectory(prefix="dgprecompile-triton-keys-") as scratch:
        # the library folders are no part of 3.6's keys (3.8's: given by ``built``); the scratch cache gets the
        # manager's empty directories
        env = {"TRITON_LIBCUDA_PATH": scratch, "TRITON_CACHE_DIR": scratch}
        with _swapped(env, get_cache_manager=get_cache_manager):
            out["cuda_utils"] = named(CudaUtils if built is None else lambda: _utils_as_warm(built))
            for ident, spec in sorted(launchers.items()):
                src = RecordedSource(str(spec["kernel"]), spec["signature"])
                meta = SimpleNamespace(tensordesc_meta=spec.get("tensordesc_meta"))
                out["launchers"][ident] = named(lambda s=src, m=meta: CudaLauncher(s, m))
    out.update(platform_key=triton_build.platform_key(), ext_suffix=sysconfig.get_config_var("EXT_SUFFIX"))
    return out


def _utils_as_warm(built: Mapping[str, Any]) -> None:
    """Triton 3.8's own build of cuda_utils (driver.py CudaUtils' call: its driver.c, name and libraries) with the
    job's Triton folders and the libcuda folders a warm on the job's machine keys with (:func:`warm_libcuda_dirs`)."""
    from triton.backends.nvidia import driver
    from triton.runtime import build as triton_build

    triton_build.compile_module_from_file(
        src_path=os.path.join(driver.dirname, "driver.c"), name="cuda_utils",
        library_dirs=[*built["library_dirs"][:1], *warm_libcuda_dirs(built["library_dirs"][1:])],
        include_dirs=built["include_dirs"], libraries=built["libraries"], ccflags=built["ccflags"])


def warm_libcuda_dirs(job_dirs: list[str]) -> list[str]:
    """The libcuda folders a warm keys cuda_utils with for a job whose Triton 3.8 keyed it with ``job_dirs``, by
    :func:`key_libcuda_dir`'s rule: one folder is a TRITON_LIBCUDA_PATH (launch's, or the user's, which a warm under
    the same value keys with); several, or none, came from Triton's own search, which launch no longer leaves a
    job: warm keys with the data file's folder, where launch now points that job."""
    from dgprecompile.runtimes import TRITON_MOE

    return list(job_dirs) if len(job_dirs) == 1 else [TRITON_MOE.libcuda_dir]


def compiled_kernel(triton_dir: Path, entry: str, spec: Mapping[str, Any]):
    """Triton's own CompiledKernel for a cache entry, as its runtime loads one (the group file found by its own
    FileCacheManager), with the recorded signature as its source."""
    from triton.compiler.compiler import CompiledKernel
    from triton.runtime.cache import FileCacheManager

    if not (triton_dir / entry).is_dir():  # Triton's manager would make an empty directory for it
        raise FileNotFoundError(f"no Triton entry {entry} in {triton_dir}")
    group = FileCacheManager(entry).get_group(f"{spec['kernel']}.json")
    if not group:
        raise FileNotFoundError(f"Triton entry {entry} has no whole group file for {spec['kernel']} in {triton_dir}")
    return CompiledKernel(RecordedSource(spec["kernel"], spec["signature"]), group, entry)


def cuda_functions(cuda_h: Path, cc: str) -> list[str]:
    """Every ``cu*`` function the header declares, after the preprocessor (its macros map names to ``_v2`` ones)."""
    res = subprocess.run([cc, "-E", "-P", "-x", "c", str(cuda_h)], capture_output=True, text=True, check=True,
                         timeout=120)
    return sorted(set(re.findall(r"\b(cu[A-Z]\w*)\s*\(", res.stdout)))


def link_libcuda(scratch: Path, found: list[str] | None = None) -> tuple[str, str]:
    """(a folder with a libcuda to link against, what is linked), for a key folder that has none here: ``scratch``,
    holding the driver's libcuda.so.1 the loader finds (``found``: host/toolchain.py ``driver_libcuda_dirs``, the
    search Triton's own makes, computed where not given), else the toolkit's stub, else a stand-in built here (module
    docstring), under both names Triton's releases link by (:func:`link_file`): 3.6-3.8's ``-l:libcuda.so.1`` and
    3.5's ``-lcuda`` (libcuda.so, which a driver's folder may lack)."""
    from triton.backends.nvidia import driver

    from dgprecompile.host.toolchain import driver_libcuda_dirs, toolkit_libcuda_stub

    found = driver_libcuda_dirs() if found is None else found
    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    if found:
        target, linked = Path(found[0]) / STUB_SONAME, "the driver's libcuda.so.1 in " + ", ".join(found)
    elif (stub := toolkit_libcuda_stub(homes)) is not None:
        target, linked = stub, f"the toolkit's stub {stub}"
    else:
        cc = compiler()
        names = cuda_functions(Path(driver.include_dirs[0]) / "cuda.h", cc)
        (scratch / "stub.c").write_text("/* link-time STAND-IN for the CUDA driver (dgprecompile triton_host) */\n" +
                                        "".join(f"void {n}(void) {{}}\n" for n in names))
        target = scratch / "stand-in" / STUB_SONAME
        linked = f"a stand-in exporting the {len(names)} cu* functions of Triton's cuda.h"
        target.parent.mkdir()
        subprocess.run([cc, "-shared", "-fPIC", f"-Wl,-soname,{STUB_SONAME}", "-o", str(target),
                        str(scratch / "stub.c")], check=True, capture_output=True, timeout=300)
    for name in (STUB_SONAME, "libcuda.so"):
        (scratch / name).symlink_to(target)
    return str(scratch), linked


def link_file() -> str:
    """The file the linker looks for by Triton's own ``libraries`` (driver.py): libcuda.so.1 for 3.6-3.8's
    ``-l:libcuda.so.1``, libcuda.so for 3.5's ``-lcuda``."""
    from triton.backends.nvidia import driver

    (lib,) = [name for name in driver.libraries if "cuda" in name]
    return lib if ".so" in lib else f"lib{lib}.so"


def compiler() -> str:
    """The C compiler Triton's _build runs: $CC, else gcc, else clang (runtime/build.py)."""
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        raise RuntimeError("no C compiler (Triton's build runs $CC, else gcc, else clang)")
    return cc


def machine(linked: str, folders: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """What the host modules' key, file name and bytes depend on here (module docstring): ``key`` holds what
    Triton's lookup compares (with Triton 3.8 the build's ``folders`` too), the rest is what the bytes were built
    with."""
    import triton
    from triton.runtime.build import platform_key

    cc = compiler()
    try:
        version = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=60).stdout
    except OSError:
        version = ""
    return {"key": {"platform_key": platform_key(), "ext_suffix": sysconfig.get_config_var("EXT_SUFFIX"),
                    "triton": triton.__version__, **({"folders": folders} if folders else {})},
            "python": platform.python_version(), "cc": f"{cc}: {(version.splitlines() or ['?'])[0]}",
            "python_include": sysconfig.get_paths()["include"], "libcuda": linked}


def launcher_modules() -> bool:
    """Whether this Triton builds a host module per kernel signature: 3.5-3.6's CUDA driver generates each
    launcher's C source (``make_launcher``) and builds it; 3.7 and 3.8 have no such build (their CudaLauncher calls
    the generic ``launch`` of ``cuda_utils``)."""
    from triton.backends.nvidia import driver

    return hasattr(driver, "make_launcher")


def folders_in_key() -> bool:
    """Whether this Triton's ``cuda_utils`` key holds its build's folders: 3.8's driver builds it with
    compile_module_from_file (whose key hashes them), 3.5-3.7's with compile_module_from_src (source and platform)."""
    from triton.backends.nvidia import driver

    return hasattr(driver, "compile_module_from_file")


def key_libcuda_dir() -> str:
    """The libcuda folder Triton 3.8 puts in ``cuda_utils``' key (driver.py library_dirs(): TRITON_LIBCUDA_PATH, else
    the folders it finds the driver in), as launch sets the job up (runtimes/triton_moe.py ``job_libcuda_dir``: the
    environment's TRITON_LIBCUDA_PATH, else data/triton_moe.yaml's ``host`` folder, on every machine)."""
    from dgprecompile.runtimes import TRITON_MOE

    return TRITON_MOE.job_libcuda_dir(os.environ)[0]


def build(root: str | Path, kernels: Mapping[str, Mapping[str, Any]], scratch: Path) -> dict[str, Any]:
    """Build ``cuda_utils`` and, where this Triton builds them (:func:`launcher_modules`), each kernel entry's
    launcher (``kernels``: entry -> :func:`watch_kernels`' record) into ``<root>/triton`` with Triton's own code,
    the job's libcuda folder in Triton's environment (:func:`key_libcuda_dir`); a module already there is
    Triton's own cache hit (not rebuilt). Returns ``{"cuda_utils": entry, "launchers": {kernel entry: entry},
    "entries", "built", "machine"}``."""
    from triton.backends.nvidia.driver import CudaLauncher, CudaUtils

    from dgprecompile.runtimes import family_for_area

    triton_dir = family_for_area("triton").area_dir(root).resolve()
    key_dir = key_libcuda_dir()
    link_dir: str | None = None
    lib = link_file()
    if (Path(key_dir) / lib).exists():
        linked = f"the job's {lib} in {key_dir}"
    else:
        link_dir, linked = link_libcuda(scratch)
    env = {"TRITON_CACHE_DIR": str(triton_dir), "TRITON_LIBCUDA_PATH": key_dir}
    launchers: dict[str, str] = {}
    with _building(env, link_dir) as modules:
        CudaUtils()  # the driver's initialisation
        utils = modules[-1]
        folders = _folders()
        for entry, spec in sorted(kernels.items()) if launcher_modules() else ():
            kernel = compiled_kernel(triton_dir, entry, spec)
            CudaLauncher(kernel.src, kernel.metadata)  # CompiledKernel._init_handles' call
            launchers[entry] = modules[-1]["key"]
    for m in modules:
        if Path(m["dir"]).resolve().parent != triton_dir or not os.path.isfile(m.get("path", "")):
            raise RuntimeError(f"Triton put {m.get('name')} at {m.get('path')}, not under {triton_dir}")
    return {"cuda_utils": utils["key"], "launchers": launchers, "entries": sorted({m["key"] for m in modules}),
            "built": sorted({f"{m['key']}/{os.path.basename(m['path'])}" for m in modules if m["built"]}),
            "machine": machine(linked, folders)}


def _folders() -> dict[str, list[str]] | None:
    """Where Triton 3.8 builds ``cuda_utils`` from (its key holds them: :func:`folders_in_key`): Triton's own folders
    and the libcuda folder under the environment in force; None for a Triton whose key holds none (3.5-3.7)."""
    from triton.backends.nvidia import driver

    if not folders_in_key():
        return None
    return {"library_dirs": list(driver.library_dirs()), "include_dirs": list(driver.include_dirs)}


def warm_host_modules(root: str | Path, entries: list[str], seen: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """What the Triton MoE warm calls after its kernels are compiled: build the host modules for ``entries`` (the
    warm's kernel entries; ``seen``: :func:`watch_kernels`' records) and file them in the index (by warm, area
    triton). A machine that cannot build them (no C compiler, no Python headers) gets
    ``{"left_to_capture": why}``: a strict launch then refuses each by name and ``launch --capture`` fills them."""
    from dgprecompile.cache.triton_moe import file_warmed
    from dgprecompile.host import scratch as scratch_dirs

    missing = [e for e in entries if e not in seen]
    if missing and launcher_modules():
        return {"left_to_capture": f"no signature recorded for {', '.join(missing[:3])}"}
    where = scratch_dirs.run_dir("dgprecompile-triton-host-")
    try:
        report = build(root, {e: seen[e] for e in entries if e in seen}, where)
    except (RuntimeError, OSError, subprocess.SubprocessError, AttributeError, ImportError) as exc:
        # AttributeError: a Triton whose launcher asks the active driver for more than the compile-only driver
        # states (a CudaLauncher that reads driver.active.utils.launch but builds its own module); ImportError: a
        # Triton without a function this build calls
        return {"left_to_capture": f"Triton's host-module build failed here: {exc}"[:600]}
    finally:
        scratch_dirs.release(where)
    report["not_whole"] = file_warmed(str(root), report["entries"])
    return report
