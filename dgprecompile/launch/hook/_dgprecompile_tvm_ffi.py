"""Strict mode for tvm-ffi's C++/CUDA builds (SGLang's own JIT modules, sglang/jit_kernel): stdlib only, imported by
_dgprecompile_hook.patch_tvm_ffi inside the user's job when tvm_ffi.cpp.extension is imported.

SGLang's load_jit (0.5.14 on) looks for the finished ``<build dir>/<name>.so`` first and calls load_inline/load only
when it is missing; those call build_inline/build by module-global name, so warmed modules load untouched and a
miss fails here, before any file is written. sglang 0.5.9 calls load_inline on every load with no build directory:
there build_inline is answered with tvm-ffi's own directory for the build (``inline_dir``): an existing
``<name>.so`` is handed back without building (load_inline loads it), a missing one refused by that directory.
"""

from __future__ import annotations

import os


def _functions_map(functions):
    if functions is None:
        return {}
    if isinstance(functions, str):
        return {functions: ""}
    if hasattr(functions, "items"):
        return dict(functions)
    return {f: "" for f in functions}


def inline_dir(module, name, kwargs):
    """The directory tvm-ffi's build_inline builds ``name`` in when given none: ``$TVM_FFI_CACHE_DIR/<name>_<hash>``,
    computed as build_inline does (tvm-ffi 0.1.11 cpp/extension.py l.901-946) with ``module``'s (tvm-ffi's) own
    ``_decorate_with_tvm_ffi`` and ``_hash_sources``; None where that tvm-ffi has not those two."""
    def joined(x):
        return "\n".join([x] if isinstance(x, str) else list(x or []))

    try:
        fmap = _functions_map(kwargs.get("functions"))
        with_cpp = bool(kwargs.get("cpp_sources"))
        cpp = module._decorate_with_tvm_ffi(joined(kwargs.get("cpp_sources")), fmap if with_cpp else {})
        cuda = module._decorate_with_tvm_ffi(joined(kwargs.get("cuda_sources")), {} if with_cpp else fmap)
        digest = module._hash_sources(cpp, cuda, None, None, fmap, list(kwargs.get("extra_cflags") or []),
                                      list(kwargs.get("extra_cuda_cflags") or []),
                                      list(kwargs.get("extra_ldflags") or []),
                                      list(kwargs.get("extra_include_paths") or []), kwargs.get("embed_cubin"))
    except Exception:  # a tvm-ffi whose build_inline this does not know: the caller refuses, unnamed
        return None
    cache = os.environ.get("TVM_FFI_CACHE_DIR") or os.path.expanduser("~/.cache/tvm-ffi")
    return os.path.join(os.path.expanduser(cache), f"{name}_{digest}")


def refuse_builds(module, stop):
    """Replace ``module``'s (tvm_ffi.cpp.extension's) build_inline and build: ``stop(name, build_dir)`` raises."""
    def make(fname):
        def refused(*args, **kwargs):
            name, where = str(kwargs.get("name") or (args[0] if args else "?")), kwargs.get("build_directory")
            if fname == "build_inline" and where is None:  # build_inline(name, *, ...): tvm-ffi picks the directory
                where = inline_dir(module, name, kwargs)
                library = where and os.path.join(where, f"{name}.so")
                if library and os.path.isfile(library):
                    return library
            stop(name, where)

        refused.__dgprecompile_refuses__ = fname
        return refused

    patched = 0
    for fname in ("build_inline", "build"):
        if callable(getattr(module, fname, None)):
            setattr(module, fname, make(fname))
            patched += 1
    if not patched:
        raise RuntimeError(f"{module.__name__} has neither build_inline nor build")
