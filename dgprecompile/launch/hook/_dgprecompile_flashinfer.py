"""The startup hook's handling of FlashInfer's JIT modules (stdlib only; flashinfer is imported by the job). Loaded by
``_dgprecompile_hook.install`` when the cache holds FlashInfer modules (DGPRECOMPILE_LOAD_FAMILIES names flashinfer)
or, under strict mode, when DGPRECOMPILE_STRICT_FAMILIES does.

The class that builds an nvcc module: FlashInfer 0.6.3-0.6.15 ``JitSpec`` (flashinfer/jit/core.py:218), whose
``build_and_load`` runs the module's ninja file before every load of a module that is not prebuilt; from 0.6.17
(0.7.x too) ``JitSpecNvcc`` (core.py:325 in 0.6.17, :445 in 0.7.2), under an abstract ``JitSpec`` whose
``build_and_load`` asks ``try_load`` first, which returns only a prebuilt (AOT) module, so a built one still goes
through the lock, FLASHINFER_DISABLE_JIT and ``build`` (ninja). In every one of them FLASHINFER_DISABLE_JIT makes
``build`` raise even when ``<name>.so`` is built. So, for a module whose ``<name>.so`` is in the cache, the class's
``build_and_load`` and ``build`` are wrapped to load it as FlashInfer's own ``load`` does, without ninja; a missing
module is built as FlashInfer would, or, under strict mode, refused by name before anything is written. A prebuilt
module (``is_aot``) is FlashInfer's business, untouched.
"""

from __future__ import annotations

import functools
import os


def flashinfer_refusal_message(name, where):
    base = os.environ.get("FLASHINFER_WORKSPACE_BASE") or "FlashInfer's workspace"
    return "\n".join([
        f"dgprecompile strict mode: FlashInfer tried to build its JIT module {name} at run time, but runtime JIT is "
        f"off under `dgprecompile launch` and {base} does not hold {where}.",
        "  Plan it (`dgprecompile plan` lists the FlashInfer modules of the server's path) and warm it, or let the job "
        "build it once with `dgprecompile launch --capture ...`."])


def nvcc_spec_class(module):
    """FlashInfer's class of nvcc-built modules: JitSpecNvcc from 0.6.17, JitSpec before (the base class there is
    abstract and its CuTe-DSL subclass builds no nvcc module)."""
    return getattr(module, "JitSpecNvcc", None) or getattr(module, "JitSpec", None)


def patch_flashinfer(module, stop_build=None):
    """Load a built module without building; with ``stop_build`` (strict), refuse a missing one by name."""
    cls = nvcc_spec_class(module)
    if cls is None or not callable(getattr(cls, "build_and_load", None)) or not callable(getattr(cls, "build", None)):
        raise RuntimeError(f"{module.__name__} has no JitSpecNvcc or JitSpec with build_and_load/build")
    real_build_and_load, real_build = cls.build_and_load, cls.build

    def built(spec):
        try:
            return not spec.is_aot and spec.jit_library_path.is_file()
        except Exception:
            return False

    def refuse(spec):
        stop_build(flashinfer_refusal_message(spec.name, spec.jit_library_path), "flashinfer", spec.name,
                   str(spec.jit_library_path))

    @functools.wraps(real_build_and_load)
    def build_and_load(self):
        if built(self):
            return self.load(self.jit_library_path)
        if stop_build is not None and not self.is_aot:
            refuse(self)
        return real_build_and_load(self)

    @functools.wraps(real_build)
    def build(self, *args, **kwargs):
        if built(self):
            return None
        if stop_build is not None:
            refuse(self)
        return real_build(self, *args, **kwargs)

    build_and_load.__dgprecompile_refuses__ = build.__dgprecompile_refuses__ = "flashinfer"
    cls.build_and_load, cls.build = build_and_load, build


def guard(stop_build=None):
    """The post-import callback for flashinfer.jit.core; strict (``stop_build`` given): a guard, if it cannot be
    applied the import fails."""
    def callback(module):
        patch_flashinfer(module, stop_build)

    callback.guard = stop_build is not None
    return callback
