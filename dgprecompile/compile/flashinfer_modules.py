"""Build one planned FlashInfer JIT module GPU-free with FlashInfer's own JitSpec and builder (runtimes/flashinfer.py).

    python -m dgprecompile.compile.flashinfer_modules --item ID --spec flashinfer.jit.X:gen_Y --module NAME
        --flashinfer VERSION --arch 9.0a --cache-dir ROOT

Run by warm's parent (compile/recorded_items.py) with FLASHINFER_WORKSPACE_BASE as launch sets it (the cache's
flashinfer area: runtimes/captured.py), FLASHINFER_CUDA_ARCH_LIST (the item's arch: FlashInfer then asks no GPU
for its target or its directory name), MAX_JOBS and CUDA_HOME. It calls the spec function FlashInfer's own loader
calls, checks that the module's directory is the one dgprecompile computed, and runs the spec's ``build``
(FlashInfer's ninja file, nvcc for the target). The same calls in flashinfer-python 0.6.3-0.7.2: the spec is a
``JitSpec`` up to 0.6.15, a ``JitSpecNvcc`` from 0.6.17, with the same ``name``, ``jit_library_path``, ``is_aot``
and ``build(verbose)`` (data/flashinfer_modules.yaml ``flashinfer``: file:line per version). What the runtime loads is ``<name>.so``: the build's objects and
ninja files are removed (the launch hook loads the module without building: launch/hook/_dgprecompile_flashinfer.py).

Where the toolkit has no ``libcuda.so`` to link against (a machine without a driver and a toolkit without its
stubs), the link gets a STAND-IN: an empty ``libcuda.so`` with the driver's soname, built here, so that the module
records ``libcuda.so.1`` as needed and binds the real driver's functions where it is loaded.
The last stdout line is JSON: the item, the seconds, and what its record keeps (``record``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

from dgprecompile.host import lifeline
from dgprecompile.host.toolchain import toolkit_libcuda_stub
from dgprecompile.runtimes.flashinfer import SPLIT_COMPILE_ENV


def link_standin(home: str | None, scratch: Path) -> str | None:
    """A directory to put on LIBRARY_PATH when nothing here provides libcuda.so to link against (None: something
    does: the toolkit's stubs, or the driver's library in the linker's path)."""
    if toolkit_libcuda_stub([home, os.environ.get("CUDA_HOME"), "/usr/local/cuda"]) is not None:
        return None
    try:
        found = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        found = ""
    if any(line.strip().startswith("libcuda.so ") for line in found.splitlines()):
        return None
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        return None
    src = scratch / "libcuda_standin.c"
    src.write_text("/* link-time STAND-IN for the CUDA driver (dgprecompile flashinfer_modules): empty */\n")
    subprocess.run([cc, "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(scratch / "libcuda.so"), str(src)],
                   check=True, capture_output=True, timeout=300)
    return str(scratch)


def build(args) -> dict:
    here = metadata.version("flashinfer-python")
    if here != args.flashinfer:
        raise SystemExit(f"flashinfer-python {here} is installed, the plan's item is for {args.flashinfer}")
    split = args.module in os.environ.get(SPLIT_COMPILE_ENV, "").split()
    if split:  # FlashInfer adds its extra CUDA flags to every nvcc unit of the module (its own ninja file)
        os.environ["FLASHINFER_EXTRA_CUDAFLAGS"] = " ".join(filter(None, (os.environ.get("FLASHINFER_EXTRA_CUDAFLAGS"),
                                                                          "-split-compile=0")))
    module_name, _, fn_name = args.spec.partition(":")
    spec = getattr(importlib.import_module(module_name), fn_name)()
    base = Path(os.environ["FLASHINFER_WORKSPACE_BASE"])
    expected = base / ".cache" / "flashinfer" / args.flashinfer / args.arch.replace(".", "") / "cached_ops" / \
        args.module / f"{args.module}.so"
    if spec.name != args.module or Path(spec.jit_library_path) != expected:
        raise SystemExit(f"{args.spec}() names module {spec.name} at {spec.jit_library_path}; dgprecompile computed "
                         f"{args.module} at {expected} (data/flashinfer_modules.yaml or this FlashInfer changed)")
    if spec.is_aot:
        raise SystemExit(f"{args.module} ships prebuilt here ({spec.aot_path}, flashinfer-jit-cache or the wheel's "
                         "data/aot): FlashInfer loads it from there and never builds it; nothing to warm")
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="dgprecompile-libcuda-") as scratch:
        standin = link_standin(os.environ.get("CUDA_HOME"), Path(scratch))
        if standin:
            os.environ["LIBRARY_PATH"] = standin + (os.pathsep + os.environ["LIBRARY_PATH"]
                                                   if os.environ.get("LIBRARY_PATH") else "")
        spec.build(verbose=False)
    built = Path(spec.jit_library_path)
    if not built.is_file():
        raise SystemExit(f"FlashInfer's build of {args.module} left no {built}")
    ninja = built.parent / "build.ninja"  # what its units were compiled with, before the build's files go
    split_used = ninja.is_file() and "-split-compile=0" in ninja.read_text(errors="replace")
    if split and not split_used:
        raise SystemExit(f"{args.module}: nvcc's -split-compile=0 was asked for, but FlashInfer's ninja file lacks it")
    for p in built.parent.iterdir():  # the runtime reads <name>.so; objects, ninja files and depfiles go
        if p != built:
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    return {"item": args.item, "seconds": round(time.time() - t0, 1), "linked_with_standin": bool(standin),
            "record": {"flashinfer": here, "arch": args.arch, **({"split_compile": True} if split else {})}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dgprecompile.compile.flashinfer_modules",
                                description=__doc__.split("\n")[0])
    p.add_argument("--item", required=True)
    p.add_argument("--spec", required=True)
    p.add_argument("--module", required=True)
    p.add_argument("--flashinfer", required=True)
    p.add_argument("--arch", required=True)
    p.add_argument("--cache-dir", required=True)
    args = p.parse_args(argv)
    lifeline.end_with_warm()  # started by warm (compile/recorded_items.py): it and its ninja tree end with warm
    report = build(args)
    json.dump(report, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
