"""The part of dgprecompile that runs inside the trainer's processes (stdlib only, no eager DeepGEMM import).

Configured by `dgprecompile launch` through the environment:

  DGPRECOMPILE_TRACE_DIR    record every DeepGEMM GEMM call as JSON lines in DIR/trace-rank<RANK>-<pid>.jsonl
  DGPRECOMPILE_STRICT=1     with DGPRECOMPILE_GENERATION=legacy: the legacy Python JIT's compilers refuse to run;
                            any generation: tvm-ffi's builds (SGLang's own JIT modules, sglang/jit_kernel) refuse
  DGPRECOMPILE_PLAN_INFO    JSON file {"kernels": [...], "warm": "dgprecompile warm ..."} for refusal messages
  DGPRECOMPILE_EVENTS       JSON-lines file where refusals are appended (the launcher reports them at exit)
  DGPRECOMPILE_CACHE_DIR    the warmed cache, for messages
  DGPRECOMPILE_GUARD_DIR    strict: where each process (forked ones too) writes its "guard installed" record named by
                            its pid, held open (exec closes it); the launcher fails a job whose Python process held none
  DGPRECOMPILE_STRICT_FAMILIES  with STRICT=1, e.g. "triton,inductor": a Triton cache miss raises, naming the
                            kernel; an inductor FX graph cache miss, naming the graph (_dgprecompile_inductor.py);
                            a FlashInfer module not in the cache, naming it (_dgprecompile_flashinfer.py)
  DGPRECOMPILE_LOAD_FAMILIES  e.g. "flashinfer": the cache holds its modules; the hook loads a built one without
                            running its ninja file (strict or not)

Each hook acts when its module is imported (a ``sys.meta_path`` post-import hook), before the importer sees it.

Run as a script (``python _dgprecompile_hook.py nvcc-refuse ARGS``) it is the refusing half of ``bin/nvcc``.
"""

from __future__ import annotations

import atexit
import functools
import importlib.abc
import json
import os
import re
import sys
import time

ENV_TRACE = "DGPRECOMPILE_TRACE_DIR"
ENV_STRICT = "DGPRECOMPILE_STRICT"
ENV_GENERATION = "DGPRECOMPILE_GENERATION"
ENV_PLAN_INFO = "DGPRECOMPILE_PLAN_INFO"
ENV_EVENTS = "DGPRECOMPILE_EVENTS"
ENV_CACHE_DIR = "DGPRECOMPILE_CACHE_DIR"
ENV_WARM_HINT = "DGPRECOMPILE_WARM_HINT"
ENV_GUARD_DIR = "DGPRECOMPILE_GUARD_DIR"
ENV_STRICT_FAMILIES = "DGPRECOMPILE_STRICT_FAMILIES"  # JIT families beside DeepGEMM whose compiles strict refuses
ENV_LOAD_FAMILIES = "DGPRECOMPILE_LOAD_FAMILIES"  # families whose cached builds the hook loads without rebuilding
ENV_JIT_HOOKS = "DGPRECOMPILE_JIT_HOOKS"  # modules whose builds strict mode refuses (jit_families.hook_targets)
REFUSED_EXIT = 97

# SGLang's kernel-type names for each DeepGEMM entry point (legacy API, then the C++ API and its fp8_fp4 aliases)
DENSE, MASKED, CONTIG = "GEMM_NT_F8F8BF16", "GROUPED_GEMM_NT_F8F8BF16_MASKED", "GROUPED_GEMM_NT_F8F8BF16_CONTIG"
ENTRY_POINTS = {
    "gemm_fp8_fp8_bf16_nt": DENSE,
    "m_grouped_gemm_fp8_fp8_bf16_nt_masked": MASKED,
    "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous": CONTIG,
    "fp8_gemm_nt": DENSE,
    "fp8_fp4_gemm_nt": DENSE,
    "fp8_m_grouped_gemm_nt_masked": MASKED,
    "m_grouped_fp8_fp4_gemm_nt_masked": MASKED,
    "m_grouped_fp8_gemm_nt_contiguous": CONTIG,
    "m_grouped_fp8_fp4_gemm_nt_contiguous": CONTIG,
}


# ---- post-import hooks -----------------------------------------------------------------------------------


class _Loader(importlib.abc.Loader):
    def __init__(self, inner, callback):
        self._inner, self._callback = inner, callback

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        self._inner.exec_module(module)
        try:
            self._callback(module)
        except Exception as exc:
            if getattr(self._callback, "guard", False):  # strict's guard: the import fails rather than run unguarded
                raise ImportError(f"dgprecompile strict mode: could not guard {module.__name__} against runtime "
                                  f"compiles ({type(exc).__name__}: {exc})") from exc
            sys.stderr.write(f"dgprecompile hook: patching {module.__name__} failed ({type(exc).__name__}: {exc})\n")

    def __getattr__(self, name):
        return getattr(self._inner, name)


class PostImportFinder(importlib.abc.MetaPathFinder):
    """Runs callback(module) right after the named modules execute, before their importer gets them."""

    def __init__(self, callbacks):
        self.callbacks = dict(callbacks)

    def find_spec(self, fullname, path, target=None):
        callback = self.callbacks.get(fullname)
        if callback is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader, callback)
                return spec
        return None


# ---- tracing ---------------------------------------------------------------------------------------------


class TraceRecorder:
    """Appends one JSON line per distinct call the first time it is seen (so a crash keeps every shape), and
    the remaining counts at exit. Repeated calls cost a tuple and a dict update."""

    def __init__(self, trace_dir, api="unknown"):
        self.dir = trace_dir
        self.api = api
        self._reset()
        atexit.register(self.close)
        if hasattr(os, "register_at_fork"):  # a forked child (dataloader worker) gets its own file and counts
            os.register_at_fork(after_in_child=self._reset)

    def _reset(self):
        self.pid = os.getpid()
        self.fd = None
        if hasattr(self, "counts"):
            self.counts.clear()  # the wrappers hold this dict
        else:
            self.counts = {}
        self.written = {}
        self.errors = 0

    def _open(self):
        os.makedirs(self.dir, exist_ok=True)
        rank = os.environ.get("RANK", "0")
        path = os.path.join(self.dir, f"trace-rank{rank}-{self.pid}.jsonl")
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        header = {"dgprecompile_trace": 1, "rank": int(rank) if rank.isdigit() else rank,
                  "local_rank": os.environ.get("LOCAL_RANK"), "pid": self.pid, "api": self.api,
                  "argv": sys.argv[:4], "time": time.time()}
        os.write(self.fd, (json.dumps(header) + "\n").encode())

    def _line(self, key, count):
        kt, m, n, k, g = key
        return json.dumps({"kernel_type": kt, "m": m, "n": n, "k": k, "num_groups": g, "count": count}) + "\n"

    def record(self, kernel_type, m, n, k, num_groups):
        key = (kernel_type, m, n, k, num_groups)
        count = self.counts.get(key)
        if count is not None and self.pid == os.getpid():
            self.counts[key] = count + 1
            return
        if self.pid != os.getpid():  # a forked child: its own file, its own counts
            self._reset()
        if self.fd is None:
            self._open()
        self.counts[key] = 1
        self.written[key] = 1
        os.write(self.fd, self._line(key, 1).encode())

    def close(self):
        if self.fd is None or self.pid != os.getpid():
            return
        lines = [self._line(key, c - self.written.get(key, 0)) for key, c in self.counts.items()
                 if c > self.written.get(key, 0)]
        if lines:
            os.write(self.fd, "".join(lines).encode())
        for key, c in self.counts.items():
            self.written[key] = c
        if self.errors:
            os.write(self.fd, (json.dumps({"dgprecompile_trace_errors": self.errors}) + "\n").encode())
            self.errors = 0


def _first(x):
    return x[0] if isinstance(x, (tuple, list)) else x


def _arg(args, kwargs, index, names):
    if len(args) > index:
        return args[index]
    for name in names:
        if name in kwargs:
            return kwargs[name]
    raise KeyError(names[0])


def shape_of(kind, args, kwargs):
    """(m, n, k, num_groups) of one call, as SGLang's deep_gemm_execution_hook computes them."""
    a = _first(_arg(args, kwargs, 0, ("a", "lhs")))
    b = _first(_arg(args, kwargs, 1, ("b", "rhs")))
    if kind == DENSE:
        return int(a.shape[0]), int(b.shape[0]), int(a.shape[1]), 1
    if kind == MASKED:
        expected_m = _arg(args, kwargs, 4, ("expected_m",))
        return int(expected_m), int(b.shape[1]), int(a.shape[2]), int(a.shape[0])
    return int(a.shape[0]), int(b.shape[1]), int(a.shape[1]), int(b.shape[0])


def _fast(kind):
    """Shape extraction for the usual positional call ((a, sfa), (b, sfb), d, ...); None when it does not apply."""
    if kind == DENSE:
        def get(args):
            sa, sb = args[0][0].shape, args[1][0].shape
            return sa[0], sb[0], sa[1], 1
    elif kind == MASKED:
        def get(args):
            sa, sb = args[0][0].shape, args[1][0].shape
            return args[4], sb[1], sa[2], sa[0]
    else:
        def get(args):
            sa, sb = args[0][0].shape, args[1][0].shape
            return sa[0], sb[1], sa[1], sb[0]
    return get


def make_wrapper(fn, kind, recorder):
    counts = recorder.counts
    fast = _fast(kind)
    need = 5 if kind == MASKED else 2

    def wrapper(*args, **kwargs):
        try:
            if len(args) >= need and type(args[0]) is tuple and type(args[1]) is tuple:
                m, n, k, g = fast(args)
                key = (kind, m, n, k, g)
                c = counts.get(key)
                if c is not None:
                    counts[key] = c + 1
                else:
                    recorder.record(kind, int(m), int(n), int(k), int(g))
            else:
                m, n, k, g = shape_of(kind, args, kwargs)
                recorder.record(kind, m, n, k, g)
        except Exception:
            recorder.errors += 1
        return fn(*args, **kwargs)

    try:
        functools.update_wrapper(wrapper, fn)
    except Exception:
        pass
    wrapper.__dgprecompile_wrapped__ = fn
    return wrapper


def wrap_entry_points(module, recorder):
    wrapped = []
    for name, kind in ENTRY_POINTS.items():
        fn = getattr(module, name, None)
        if fn is None or not callable(fn) or hasattr(fn, "__dgprecompile_wrapped__"):
            continue
        setattr(module, name, make_wrapper(fn, kind, recorder))
        wrapped.append(name)
    return wrapped


# ---- strict mode -----------------------------------------------------------------------------------------


def _plan_info():
    path = os.environ.get(ENV_PLAN_INFO)
    if not path:
        return {}
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def log_event(event):
    path = os.environ.get(ENV_EVENTS)
    if not path:
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, (json.dumps(event) + "\n").encode())
        finally:
            os.close(fd)
    except OSError:
        pass


def stop_build(message, generation, kernel, entry):
    """Log a strict-mode refusal, print its message and raise (where every guard below ends)."""
    log_event({"event": "refused", "generation": generation, "kernel": kernel, "entry": entry, "pid": os.getpid(),
               "rank": os.environ.get("RANK"), "time": time.time()})
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
    raise RuntimeError(message)


def refusal_message(kernel, entry=None, kernel_id=None):
    info = _plan_info()
    warm = info.get("warm") or os.environ.get(ENV_WARM_HINT) or "dgprecompile warm --manifest PLAN --cache-dir DIR"
    cache = os.environ.get(ENV_CACHE_DIR) or os.environ.get("DG_JIT_CACHE_DIR") or "the cache"
    lines = [f"dgprecompile strict mode: DeepGEMM tried to compile kernel {kernel} at run time"
             + (f" (cache entry {entry})" if entry else "")
             + f", but runtime JIT is off under `dgprecompile launch` and {cache} does not hold it."]
    planned = info.get("kernels")
    if kernel_id is not None and planned is not None and kernel_id not in planned:
        lines.append(f"  This kernel ({kernel_id}) is not in the plan: the trainer ran a shape the plan does not "
                     "cover. Record what runs with `dgprecompile launch --no-strict` (writes a misses file), then "
                     "`dgprecompile warm --from-misses FILE`.")
    else:
        lines.append(f"  Warm it with: {warm}")
        lines.append("  (or record what runs with `dgprecompile launch --no-strict` and warm the misses with "
                     "`dgprecompile warm --from-misses FILE`)")
    return "\n".join(lines)


_LEGACY_TEMPLATE = re.compile(r"fp8_gemm_kernel<(.*?)>\s*\)", re.S)


def legacy_kernel_id(entry, code):
    """The dgprecompile kernel id of a legacy build (entry 'kernel.<family>.<hash>' + generated source)."""
    parts = entry.split(".")
    family = parts[1] if len(parts) >= 3 and parts[0] == "kernel" else entry
    match = _LEGACY_TEMPLATE.search(code or "")
    if not match:
        return None
    v = [x.strip() for x in match.group(1).split(",")]
    if len(v) != 14:
        return None
    n, k, bm, bn, _bk, pad, sw, g, st, _tma, _math, mc, a, gemm_type = v
    gemm_type = gemm_type.split("::")[-1]
    return (f"{family}:T{gemm_type}.N{n}.K{k}.G{g}.BM{bm}.BN{bn}.ST{st}.SW{sw}.PAD{pad}.MC{mc}"
            f".A{'t' if a == 'true' else 'f'}")


def patch_legacy_compiler(module):
    """Make NVCCCompiler/NVRTCCompiler.compile of the legacy Python JIT raise instead of compiling.

    Compiler.build computes the cache key and looks the entry up before it calls compile(), so hits are
    untouched; only a miss reaches compile(). build() has already made the empty entry directory by then: we
    remove it again (only if empty) so the cache is left as it was.
    """
    def refuse(cls, name, code, target_path):
        entry_dir = None
        try:
            entry_dir = os.path.join(module.get_cache_dir(), name)
            os.rmdir(entry_dir)
        except Exception:
            pass
        kid = legacy_kernel_id(name, code)
        stop_build(refusal_message(kid or name, entry=name, kernel_id=kid), "legacy", kid, name)

    patched = 0
    for cls_name in ("NVCCCompiler", "NVRTCCompiler"):
        cls = getattr(module, cls_name, None)
        if cls is not None:
            cls.compile = classmethod(refuse)
            patched += 1
    if not patched:  # not the JIT the guard knows: it would compile unguarded
        raise RuntimeError(f"{module.__name__} has neither NVCCCompiler nor NVRTCCompiler")


def jit_refusal_message(name, build_dir, how="tvm-ffi, nvcc through ninja"):
    """For a refused build of SGLang's own JIT module ``name`` (into ``build_dir``, by ``how``)."""
    info = _plan_info()
    warm = info.get("warm") or os.environ.get(ENV_WARM_HINT) or "dgprecompile warm --manifest PLAN --cache-dir DIR"
    where = os.path.dirname(build_dir) if build_dir else (os.environ.get("TVM_FFI_CACHE_DIR") or "~/.cache/tvm-ffi")
    entry = os.path.basename(build_dir) if build_dir else None
    lines = [f"dgprecompile strict mode: SGLang tried to build its JIT module {name} at run time ({how}), "
             f"but runtime JIT is off under `dgprecompile launch` and {where} does not hold "
             + (f"{entry}/{name}.so." if entry else "it.")]
    planned = info.get("jit_modules")
    if planned is not None and not any(name.startswith(p) for p in planned):
        lines.append("  This module is not in the plan (the job's path differs from the one planned, or its "
                     "release's inventory is not modelled). Let sglang build it once with `dgprecompile launch "
                     "--no-strict ...` (it lands in that directory and later strict launches find it).")
    else:
        lines.append(f"  Warm it with: {warm}")
    return "\n".join(lines)


def patch_tvm_ffi(module):
    """Make tvm-ffi's C++/CUDA builds (build_inline, build) raise instead of writing sources and running ninja,
    naming the module (_dgprecompile_tvm_ffi.py: where a warmed module is handed back instead)."""
    from _dgprecompile_tvm_ffi import refuse_builds

    def stop(name, where):
        stop_build(jit_refusal_message(name, where and str(where), "tvm-ffi, nvcc through ninja"), "sglang-jit",
                   name, where and os.path.basename(str(where)))

    refuse_builds(module, stop)


def patch_sglang_ninja(module):
    """SGLang's ninja loader without a switch (0.5.18-0.5.19) calls ``ninja.build`` only on a miss: refuse there."""
    if not callable(getattr(module, "build", None)):  # not the loader the guard knows: it would compile unguarded
        raise RuntimeError(f"{module.__name__} has no build")

    def build(*args, spec=None, build_dir=None, **kwargs):
        name, scope = str(getattr(spec, "module_name", None) or "?"), build_dir and os.path.dirname(str(build_dir))
        stop_build(jit_refusal_message(name, scope, "SGLang's ninja loader, nvcc"), "sglang-jit", name,
                   scope and os.path.basename(scope))

    build.__dgprecompile_refuses__ = "build"
    module.build = build


JIT_PATCHES = {"tvm_ffi.cpp.extension": patch_tvm_ffi, "sglang.kernels.jit.utils.compile.ninja": patch_sglang_ninja}


def triton_refusal_message(kernel):
    """For a refused Triton compile of ``kernel`` (a cache miss under strict mode)."""
    info = _plan_info()
    warm = info.get("warm") or os.environ.get(ENV_WARM_HINT) or "dgprecompile warm --manifest PLAN --cache-dir DIR"
    where = os.environ.get("TRITON_CACHE_DIR") or "~/.triton/cache"
    return "\n".join([
        f"dgprecompile strict mode: Triton tried to compile kernel {kernel} at run time, but runtime JIT is off "
        f"under `dgprecompile launch` and {where} does not hold it.",
        f"  Warm it with: {warm}",
        "  (or let the job build it once with `dgprecompile launch --capture ...`: it is filed in the cache and "
        "later strict launches find it)"])


def patch_triton_compiler(module):
    """Make a Triton cache miss raise, naming the kernel, instead of compiling.

    triton.compiler.compiler.compile computes the cache key, returns the cached kernel when its group file is
    there, and only on a miss asks the backend for its stages (``backend.add_stages``). We wrap the module's
    ``make_backend`` (looked up by compile() as a module global) so the backend it returns refuses in
    ``add_stages``, ``compile`` itself to know the kernel's name, and ``get_cache_manager`` to remove the empty
    entry directory Triton made before its lookup. Cache hits are untouched.
    """
    real_compile, real_make_backend = module.compile, module.make_backend
    real_cache_manager = module.get_cache_manager
    current, entry_dirs = [], []

    def get_cache_manager(key):
        manager = real_cache_manager(key)
        entry_dirs.append(getattr(manager, "cache_dir", None))
        return manager

    def make_backend(target):
        backend = real_make_backend(target)
        if current:
            def refuse(*args, **kwargs):
                kernel = current[-1]
                try:  # Triton made the entry directory before looking in it: leave the cache as it was
                    os.rmdir(entry_dirs[-1])
                except (OSError, TypeError, IndexError):
                    pass
                stop_build(triton_refusal_message(kernel), "triton", kernel, None)

            backend.add_stages = refuse
        return backend

    @functools.wraps(real_compile)
    def compile(src, *args, **kwargs):
        current.append(str(getattr(src, "name", None) or src))
        try:
            return real_compile(src, *args, **kwargs)
        finally:
            current.pop()

    compile.__dgprecompile_refuses__ = "triton"
    module.make_backend = make_backend
    module.get_cache_manager = get_cache_manager
    module.compile = compile


# ---- install ---------------------------------------------------------------------------------------------

_state = {}


def patch_triton_build(module):
    """Make a miss of one of Triton's host modules raise, naming it, instead of running the C compiler.

    triton/runtime/build.py runs its ``_build`` (the C compiler) only where the cache manager it has just asked
    (``get_cache_manager(key)``) holds no ``<name><EXT_SUFFIX>``, or one that does not load: Triton 3.5-3.7's
    compile_module_from_src (the driver's ``cuda_utils``, up to 3.6 one ``__triton_launcher`` per signature) and
    3.8's _compile_so (``cuda_utils`` from driver.c by compile_module_from_file, under a key that also holds the
    build's folders). Both are module globals build.py calls by name: whichever function a driver imported, and
    when, its miss is refused, naming the module and the key Triton asked for, and the empty entry directory the
    manager made is removed. A Triton without them is left alone (the strict run's new-file check fails it)."""
    real_build, real_manager = getattr(module, "_build", None), getattr(module, "get_cache_manager", None)
    if real_build is None or real_manager is None:
        return
    asked: list = []  # the last lookup: (key, manager); build.py asks, then builds on a miss, in one thread

    @functools.wraps(real_manager)
    def get_cache_manager(key, *args, **kwargs):
        manager = real_manager(key, *args, **kwargs)
        asked[:] = [(key, manager)]
        return manager

    @functools.wraps(real_build)
    def _build(name, *args, **kwargs):
        key, manager = asked.pop() if asked else ("(no lookup seen)", None)
        try:  # the manager made its entry directory before the lookup: leave the cache as it was
            os.rmdir(getattr(manager, "cache_dir", None))
        except (OSError, TypeError):
            pass
        stop_build(triton_refusal_message(f"{name} (Triton's host module, {str(key)[:16]})"), "triton", name, key)

    _build.__dgprecompile_refuses__ = "triton"
    module.get_cache_manager, module._build = get_cache_manager, _build


patch_legacy_compiler.guard = True  # a strict-mode guard: if it cannot be applied, the import fails
patch_tvm_ffi.guard = patch_sglang_ninja.guard = True


def install():
    callbacks = {}
    trace_dir = os.environ.get(ENV_TRACE)
    if trace_dir:
        def on_deep_gemm(module):
            api = "legacy" if hasattr(module, "gemm_fp8_fp8_bf16_nt") else "cxx"
            recorder = TraceRecorder(trace_dir, api)
            _state["recorder"] = recorder
            _state["wrapped"] = wrap_entry_points(module, recorder)

        callbacks["deep_gemm"] = on_deep_gemm
    strict = os.environ.get(ENV_STRICT) == "1"
    families = os.environ.get(ENV_STRICT_FAMILIES, "").split(",") if strict else []
    if strict and os.environ.get(ENV_GENERATION) == "legacy":
        callbacks["deep_gemm.jit.compiler"] = patch_legacy_compiler
    if strict:  # the JIT families without a strict switch of their own
        for target in (os.environ.get(ENV_JIT_HOOKS, "tvm_ffi.cpp.extension") or "").split(","):
            if target.strip() in JIT_PATCHES:
                callbacks[target.strip()] = JIT_PATCHES[target.strip()]
    if "triton" in families:
        callbacks.update({"triton.compiler.compiler": patch_triton_compiler, "triton.runtime.build": patch_triton_build})
    if "inductor" in families:  # its refusal lives beside this file, on the PYTHONPATH launch sets
        from _dgprecompile_inductor import guard

        callbacks["torch._inductor.compile_fx"] = guard(log_event)
    if "flashinfer" in families or "flashinfer" in os.environ.get(ENV_LOAD_FAMILIES, "").split(","):
        from _dgprecompile_flashinfer import guard as flashinfer_guard

        callbacks["flashinfer.jit.core"] = flashinfer_guard(stop_build if "flashinfer" in families else None)
    if callbacks:
        for name in [n for n in callbacks if n in sys.modules]:  # already imported (not at startup, but be safe)
            callbacks.pop(name)(sys.modules[name])
        if callbacks:
            sys.meta_path.insert(0, PostImportFinder(callbacks))
    if os.environ.get(ENV_GUARD_DIR):
        record_guard()
        if hasattr(os, "register_at_fork"):  # a forked child (dataloader worker) holds the same guard
            os.register_at_fork(after_in_child=record_guard)


def record_guard():
    """This process's "guard installed" record for the launcher (strict mode), held open close-on-exec for the life
    of this image (exec closes it: launch/supervise.py JobWatch); a fork closes its parent's and writes its own."""
    if "guard_fd" in _state:  # closerange: no error where the job closed it
        os.closerange(_state["guard_fd"], _state["guard_fd"] + 1)
    path = os.path.join(os.environ[ENV_GUARD_DIR], str(os.getpid()))
    _state["guard_fd"] = fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    os.write(fd, json.dumps({"pid": os.getpid(), "strict": os.environ.get(ENV_STRICT) == "1",
                             "generation": os.environ.get(ENV_GENERATION), "argv": sys.argv[:4],
                             "nonce": os.urandom(8).hex()}).encode())


# ---- the refusing half of bin/nvcc ------------------------------------------------------------------------

_INSTANTIATION = re.compile(r"&\s*([A-Za-z_][\w:]*)\s*<(.*?)>\s*\)", re.S)


def describe_cu(path):
    """'name<args>' of the kernel a generated kernel.cu instantiates (best effort)."""
    try:
        with open(path, errors="replace") as f:
            return describe_source(f.read())
    except OSError:
        return None


def describe_source(code):
    match = _INSTANTIATION.search(code)
    return f"{match.group(1)}<{' '.join(match.group(2).split())}>" if match else None


def nvcc_refuse(argv):
    sources = [a for a in argv if a.endswith(".cu")]
    outputs = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "-o"]
    source = sources[0] if sources else None
    kernel = (describe_cu(source) if source else None) or (source or "(unknown kernel)")
    entry = os.path.basename(os.path.dirname(os.path.abspath(source))) if source else None
    message = refusal_message(kernel, entry=entry)
    log_event({"event": "refused", "generation": "cxx", "kernel": kernel, "entry": entry, "source": source,
               "output": outputs[0] if outputs else None, "pid": os.getppid(), "rank": os.environ.get("RANK"),
               "time": time.time()})
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
    return REFUSED_EXIT


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "nvcc-refuse":
        sys.exit(nvcc_refuse(sys.argv[2:]))
    sys.stderr.write("usage: _dgprecompile_hook.py nvcc-refuse NVCC-ARGS...\n")
    sys.exit(2)
