"""SGLang's own ninja JIT loader (sglang/kernels/jit, 0.5.18 on): two loader families (runtimes/jit_loader.py), with
(0.5.20 on) and without (0.5.18-0.5.19) its strict switch; their modules per release are data
(data/sglang_jit_ninja.yaml), their names computed by keys/sglang_jit_ninja.py."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dgprecompile.errors import DGError
from dgprecompile.fsutil import read_input_bytes
from dgprecompile.runtimes.items import JitModule
from dgprecompile.runtimes.jit_loader import JitFamily


@dataclass(frozen=True)
class LoadJitCall:
    """One ``load_jit(*args, **kwargs)`` call as the release makes it (only the keyword arguments the modelled
    modules use; header_only is always True for them)."""

    args: tuple[str, ...]
    cuda_files: tuple[str, ...]
    cuda_wrappers: tuple[tuple[str, str], ...]
    extra_cuda_cflags: tuple[str, ...] = ()
    extra_ldflags: tuple[str, ...] = ()

    def kwargs(self, stubs_dir: str) -> dict[str, Any]:
        """For calling the release's own load_jit (``{cuda_stubs}`` is toolchain.py's cuda_stubs_dir())."""
        return {"cuda_files": list(self.cuda_files), "cuda_wrappers": [tuple(w) for w in self.cuda_wrappers],
                "extra_cuda_cflags": list(self.extra_cuda_cflags),
                "extra_ldflags": [f.replace("{cuda_stubs}", stubs_dir) for f in self.extra_ldflags]}


def load_jit_call(module: JitModule) -> LoadJitCall:
    """The data file's load_jit arguments for a module: its args are marker + template (loader.py:217); wrapper
    kernel names may hold ``{t0}``, ``{t1}``... for the rendered template arguments (custom_all_reduce's world size)."""
    kw = dict(module.kwargs)
    template = {f"t{i}": t for i, t in enumerate(module.template)}
    wrappers = tuple((str(e), str(k).format(**template)) for e, k in kw.get("cuda_wrappers", []))
    return LoadJitCall(tuple(map(str, (*module.marker, *module.template))), tuple(module.cuda_files), wrappers,
                       tuple(map(str, kw.get("extra_cuda_cflags", []))), tuple(map(str, kw.get("extra_ldflags", []))))


@dataclass(frozen=True)
class NinjaJitFamily(JitFamily):
    """SGLang's own ninja loader (sglang/kernels/jit, 0.5.20 on): a module's build key covers the compilers'
    paths, so besides the cache variable launch keeps the CUDA_HOME the warm built with (keys/sglang_jit_ninja.py);
    a work item calls the release's own ``load_jit`` with the data file's arguments."""

    def build_params(self, naming, module) -> dict[str, Any]:
        call = load_jit_call(module)
        return {"python": module.python, "builder": module.builder, "args": list(call.args),
                "kwargs": {"cuda_files": list(call.cuda_files), "cuda_wrappers": [list(w) for w in call.cuda_wrappers],
                           "extra_cuda_cflags": list(call.extra_cuda_cflags),
                           "extra_ldflags": list(call.extra_ldflags)},
                "entry": naming.entry_name(module), "library": naming.library(module), "module": module.to_dict()}

    def installed_entry(self, naming, module, area_dir) -> str | None:
        """A warmed entry is one deps-<key> leaf inside the computed build-key directory (its deps key is known
        only after the build): the leaf the runtime's own hit test picks (keys/sglang_jit_ninja.py), or None."""
        scope = naming.entry_name(module)
        leaf = naming.hit(Path(area_dir) / scope, module)
        return f"{scope}/{leaf.name}" if leaf is not None else None

    def missing_detail(self, naming, module, area_dir) -> str | None:
        """The runtime's reason to pass over each leaf there is (a recorded header that changed, ...)."""
        scope = naming.entry_name(module)
        leaves = sorted(p for p in (Path(area_dir) / scope).glob("deps-*") if p.is_dir())
        if not leaves:
            others = sorted(p.name for p in (Path(area_dir) / scope).parent.glob("build-*"))
            return (f"no build under {self.area}/{scope}" + (f"; the cache has {', '.join(others)} for this module, "
                    "built where the compilers, packages or paths differ (verify's fingerprint names them)"
                    if others else ""))
        return f"{self.area}/{scope}/{leaves[0].name}: {naming.leaf_problem(leaves[0], module)}"

    def launch_env(self, cache_dir: str, recorded: dict[str, Any] | None = None,
                   environ: dict[str, str] | None = None) -> list[tuple[str, str]]:
        """The cache variable, and CUDA_HOME as the warm saw it when the job's environment names no toolkit
        (its spelling is in every build key: toolchain.py:300-314, cache.py:307-314). ``recorded``: the cache's
        fingerprint section (default: read from the cache's index)."""
        env = os.environ if environ is None else environ
        out = super().launch_env(cache_dir)
        if recorded is None:
            try:  # a FIFO or a device there is refused before any read (it would block)
                doc = json.loads(read_input_bytes(os.path.join(cache_dir, "dgprecompile", "index.json"),
                                                  "the cache index", hint=""))
                recorded = (doc.get("fingerprint") or {}).get(self.fingerprint_section)
            except (DGError, OSError, ValueError, AttributeError, RecursionError):
                recorded = None
        home = (recorded or {}).get("cuda_home")
        if home and not (env.get("CUDA_HOME") or env.get("CUDA_PATH")):
            out.append(("CUDA_HOME", str(home)))
        return out


SGLANG_NINJA = NinjaJitFamily(
    id="sglang-ninja", label="SGLang's own ninja JIT loader (sglang/kernels/jit, 0.5.20-0.5.23)",
    # 0.5.17 is still tvm-ffi load_inline under kernels/jit; 0.5.18-0.5.19 have this loader but no strict
    # switch (SGLANG_CRASH_ON_JIT_COMPILE arrives in 0.5.20): SGLANG_NINJA_HOOK below (docs/sglang-jit-ninja.md)
    releases=">=0.5.20,<0.5.24", data_file="sglang_jit_ninja.yaml",
    backend="kernels-jit", area="sglang-jit",
    cache_env=("SGLANG_JIT_CACHE_DIR",), cache_default="~/.cache/sglang/jit", fingerprint_section="sglang_ninja",
    fingerprint_fields=("sglang", "arch", "cuda_home", "nvcc", "nvcc_version", "cxx", "cxx_version",
                        "pkg_apache_tvm_ffi", "pkg_flashinfer_python", "pkg_deep_gemm", "pkg_nvidia_mathdx",
                        "pkg_torch", "log_resource_usage"),
    # loader.py:253-259 (0.5.23; 0.5.20 loader.py:131): a miss raises RuntimeError before the build lock
    strict_switch=(("SGLANG_CRASH_ON_JIT_COMPILE", "1"),),
    # a leaf keeps only what the runtime reads (cache.py:369-418): the build's objects, sources and logs go
    not_recorded=("build.ninja", "cuda.cu", "cuda_0.o", "cuda_0.o.d", ".ninja_log", ".ninja_deps"),
    entry_depth=4,  # <target>/<module>/build-<key>/deps-<key>
)


# 0.5.18-0.5.19: the same loader, build key and cache layout for CUDA (docs/sglang-jit-ninja.md), but no
# SGLANG_CRASH_ON_JIT_COMPILE: strict mode refuses through the startup hook, which wraps the loader's ninja.build
# (loader.py calls it by module attribute, only on a miss: after find_prebuilt, inside the scope's build lock)
SGLANG_NINJA_HOOK = replace(
    SGLANG_NINJA, id="sglang-ninja-hook",
    label="SGLang's own ninja JIT loader without a strict switch (sglang/kernels/jit, 0.5.18-0.5.19)",
    releases=">=0.5.18,<0.5.20", strict_switch=(), hook_target="sglang.kernels.jit.utils.compile.ninja",
)
