"""The runtime's asks of the Triton MoE, Triton model-path, Triton host and torch.compile families, as the model
driver's job makes them (issue 43).

The cache-area families (DeepGEMM, SGLang JIT, FlashInfer) are recorded from outside the job, by the files it opens
(tests/gpu/cache_opens.py). These four are recorded here, inside the job, from the calls SGLang itself makes, in its
own terms and independent of any plan:

* triton-moe: every call of SGLang's Triton fused MoE (``_fused_moe_kernel_sequence``, where a release has none
  ``fused_experts_impl``; wherever a module holds it): its experts, hidden and intermediate sizes and top-k from the
  tensors it is handed (w1, w2, topk_ids) and m (tokens);
* triton-host: every host module the job's Triton looks up (HOST_BUILDERS: ``cuda_utils`` when its CUDA driver
  starts, under Triton 3.5-3.6 a ``__triton_launcher`` at each compiled kernel's first launch): its name, the cache
  key directory and file it was found in (or built into), Triton's ``platform_key()``, for a launcher what Triton
  generated its source from (the kernel's name, the signature its JIT bound, the tensor-descriptor metadata) and,
  where the key holds them (3.8), the build's folders and libraries;
* triton-path: every call of SGLang's model-path Triton wrappers (data/triton_path.yaml ``kernels``: each one's
  ``module`` and ``function``, e.g. ``moe_sum_reduce_triton``), wherever a loaded module holds it, under any name
  (0.5.23's srt/layers/vocab_parallel_embedding.py binds the embedding as ``fused_vocab_parallel_embedding``): the
  data file's kernel name, the wrapper's module and name, its arguments described as the inductor family's are, and m;
* inductor: every call of a function SGLang compiles with ``torch.compile`` (``torch.compile`` is wrapped before
  SGLang is imported, so every decorator SGLang applies goes through it): the function's module and qualified name,
  its arguments (tensors as shape and dtype, the first dimension of the first tensor shown as ``"m"``; scalars as
  they are), the autograd mode the call ran under (``no_grad``, ``inference`` or ``grad``) and how often its calls
  asked inductor's FX graph cache (``lookups``: 0 where dynamo never handed inductor a graph).

``Asks.to_dict()`` is the part of an asks record (data/schemas/proof-asks.json) these families take, each call with
the m it ran at as inclusive spans. dgprecompile/launch/proof_asks.py holds HEAD's plan to it.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import sys
from typing import Any

from dgprecompile.compile.inductor_graphs import current_grad_mode

# where releases define SGLang's Triton fused MoE (the first module that imports is used) and the function every
# path into its kernels passes through: from 0.5.14 on _fused_moe_kernel_sequence (both fused_experts_impl and the
# MoE runner's permute path call it), before that fused_experts_impl; the first one the module has is wrapped
MOE_MODULES = ("sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe",
               "sglang.srt.layers.moe.fused_moe_triton.fused_moe")
MOE_FUNCTIONS = ("_fused_moe_kernel_sequence", "fused_experts_impl")


def spans(ms) -> list[list[int]]:
    """Sorted m values as inclusive [first, last] spans."""
    out: list[list[int]] = []
    for m in sorted(set(ms)):
        if out and m == out[-1][1] + 1:
            out[-1][1] = m
        else:
            out.append([m, m])
    return out


def described(value: Any, m: int | None) -> Any:
    """An argument as a cache key sees it: a tensor's shape (its first dimension ``"m"`` where it is the call's m)
    and dtype; a scalar as it is; anything else by its type's name."""
    shape = getattr(value, "shape", None)
    if shape is not None and hasattr(value, "dtype"):
        dims: list[Any] = [int(d) for d in shape]
        if dims and m is not None and dims[0] == m:
            dims[0] = "m"
        return {"shape": dims, "dtype": str(value.dtype).removeprefix("torch.")}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return type(value).__name__


def call_m(args: tuple, kwargs: dict, at: int | None = None) -> int | None:
    """The call's m: the first dimension of its first tensor argument, or of the positional one ``at`` (a kernel's
    ``m_arg`` in data/triton_path.yaml: the deep_gemm runner's post-permute, its first tensor the compact rows)."""
    for value in (*args, *kwargs.values()) if at is None else args[at:at + 1]:
        shape = getattr(value, "shape", None)
        if shape is not None and len(shape):
            return int(shape[0])
    return None


def described_call(args: tuple, kwargs: dict, at: int | None = None) -> dict[str, Any]:
    """A call's arguments as a cache key sees them (:func:`described`, at the call's m, :func:`call_m`): the runtime's
    calls here, warm's calls in launch/proof_asks.py."""
    m = call_m(args, kwargs, at)
    return {"args": [described(v, m) for v in args], "kwargs": {k: described(v, m) for k, v in sorted(kwargs.items())}}


class Asks:
    def __init__(self) -> None:
        self.moe: dict[tuple[int, int, int, int], set[int]] = {}
        # (function, its arguments shown, grad mode) -> (the m it ran at, inductor's graph-cache lookups it made)
        self.compiled: dict[tuple[str, str, str], tuple[set[int], list[int]]] = {}
        self.path: dict[tuple[str, str, str], set[int]] = {}  # (kernel, function, its arguments shown) -> the m
        self.host: dict[tuple[str, str], dict[str, Any]] = {}  # (name, key) -> the module's ask
        self.platform_key: str | None = None
        self.notes: list[str] = []

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def moe_call(self, signature: inspect.Signature, args: tuple, kwargs: dict) -> None:
        try:
            a = signature.bind_partial(*args, **kwargs).arguments
            x, w1, w2, ids = a["hidden_states"], a["w1"], a["w2"], a["topk_ids"]
            shape = (int(w1.shape[0]), int(x.shape[-1]), int(w2.shape[-1]), int(ids.shape[-1]))
        except (TypeError, KeyError, AttributeError, IndexError) as exc:  # a release that names them otherwise: said
            self.note(f"a fused MoE call not recorded: {type(exc).__name__}: {exc}")
            return
        self.moe.setdefault(shape, set()).add(int(x.shape[0]))

    def compiled_call(self, function: str, args: tuple, kwargs: dict, lookups: int) -> None:
        shown = json.dumps(described_call(args, kwargs), sort_keys=True)
        ms, looked = self.compiled.setdefault((function, shown, current_grad_mode()), (set(), [0]))
        ms.add(call_m(args, kwargs) or 1)
        looked[0] += lookups

    def path_call(self, kernel: str, function: str, args: tuple, kwargs: dict) -> None:
        """A call of a model-path Triton wrapper (data/triton_path.yaml ``kernel``), described as a compiled call
        is; a call at m 0 (an idle forward: no ask a record's m can hold) is said in a note."""
        from dgprecompile.runtimes.triton_moe import TRITON_PATH

        at = TRITON_PATH.data()["kernels"].get(kernel, {}).get("m_arg")
        m = call_m(args, kwargs, at)
        if not m:
            self.note(f"a {function} call at m {m} not recorded")
            return
        shown = json.dumps(described_call(args, kwargs, at), sort_keys=True)
        self.path.setdefault((kernel, function, shown), set()).add(m)

    def host_module(self, name: str, path: str | None, launcher: dict[str, Any] | None,
                    built: dict[str, list[str]] | None = None) -> None:
        """A host module Triton looked up and loaded from ``path`` (``<key>/<file>`` in its cache); ``launcher``: what
        the launcher's source was generated from; ``built``: the build's folders and libraries where the key holds
        them (Triton 3.8's compile_module_from_file)."""
        if not path:
            self.note(f"a Triton host module {name} loaded from no file: not recorded")
            return
        key = os.path.basename(os.path.dirname(path))
        self.host.setdefault((name, key), {"name": name, "key": key, "file": os.path.basename(path),
                                           **({"launcher": launcher} if launcher is not None else {}),
                                           **({"build": built} if built is not None else {})})

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.host:
            out["triton-host"] = {"platform_key": self.platform_key or "",
                                  "modules": [self.host[k] for k in sorted(self.host)]}
        if self.moe:
            out["triton-moe"] = {"calls": [
                {"experts": e, "hidden": h, "intermediate": i, "topk": k, "ms": spans(ms)}
                for (e, h, i, k), ms in sorted(self.moe.items())]}
        if self.compiled:
            out["inductor"] = {"calls": [
                {"function": fn, **json.loads(shown), "grad": grad, "ms": spans(ms), "lookups": looked[0]}
                for (fn, shown, grad), (ms, looked) in sorted(self.compiled.items())]}
        if self.path:
            out["triton-path"] = {"calls": [
                {"kernel": kernel, "function": fn, **json.loads(shown), "ms": spans(ms)}
                for (kernel, fn, shown), ms in sorted(self.path.items())]}
        return out


LOOKUPS = ("fxgraph_cache_hit", "fxgraph_cache_miss", "fxgraph_cache_bypass")


def inductor_lookups() -> int:
    """How often inductor's FX graph cache was asked so far in this process (a hit, a miss or a bypass: a graph
    dynamo handed to inductor); a compiled function whose calls never reach it has nothing for a cache to hold (dynamo
    found no operation to compile, e.g. SGLang's expert-location remap with no EPLB: an identity)."""
    from torch._dynamo.utils import counters

    return sum(int(counters["inductor"].get(k, 0)) for k in LOOKUPS)


def watch_compile(asks: Asks) -> None:
    """Wrap ``torch.compile`` so each function compiled from now on records its calls (before SGLang imports)."""
    import torch

    original = torch.compile
    if getattr(original, "_dgp_asks", False):
        return
    early = sorted(n for n in sys.modules if n.startswith("sglang."))
    if early:  # their decorators ran before this: their compiled functions would go unrecorded
        asks.notes.append(f"torch.compile wrapped after {len(early)} sglang modules were imported, e.g. {early[0]}")

    def compile(model=None, **kwargs):
        if model is None:  # the decorator-factory form: @torch.compile(dynamic=True, ...)
            return lambda fn: compile(fn, **kwargs)
        compiled = original(model, **kwargs)
        if not inspect.isfunction(model):
            return compiled
        name = f"{model.__module__}.{model.__qualname__}"

        @functools.wraps(model)
        def call(*args, **kw):
            before = inductor_lookups()
            try:
                return compiled(*args, **kw)
            finally:
                asks.compiled_call(name, args, kw, inductor_lookups() - before)

        return call

    compile._dgp_asks = True
    torch.compile = compile


def _rebind(name: str | None, targets: list, wrap) -> None:
    """In every loaded module whose ``name`` (None: any of its names) is one of ``targets``, put ``wrap(that
    function)`` in its place, one wrapper per distinct function (modules that imported it by name hold their own
    binding, under another name where they did ``from x import f as g``)."""
    wrapped: dict[int, Any] = {}
    for mod in list(sys.modules.values()):
        space = getattr(mod, "__dict__", {})
        for bound_name in ([name] if name else list(space)):
            bound = space.get(bound_name)
            if any(bound is t for t in targets):
                if id(bound) not in wrapped:
                    wrapped[id(bound)] = wrap(bound)
                setattr(mod, bound_name, wrapped[id(bound)])


def _recording(asks: Asks, target):
    signature = inspect.signature(target)

    @functools.wraps(target)
    def call(*args, **kwargs):
        asks.moe_call(signature, args, kwargs)
        return target(*args, **kwargs)

    return call


def watch_moe(asks: Asks) -> str | None:
    """Wrap SGLang's Triton fused MoE (MOE_FUNCTIONS) in every loaded module that holds it (after the model is
    built); ``module.function`` wrapped, or None (a note says so) where no release path has one."""
    import importlib

    for where in MOE_MODULES:
        try:
            module = importlib.import_module(where)
        except ImportError:
            continue
        name = next((n for n in MOE_FUNCTIONS if callable(getattr(module, n, None))), None)
        if name is None:
            continue
        _rebind(name, [getattr(module, name)], lambda target: _recording(asks, target))
        return f"{where}.{name}"
    asks.notes.append(f"none of {', '.join(MOE_FUNCTIONS)} in {', '.join(MOE_MODULES)}: Triton MoE calls not recorded")
    return None


def _path_recording(asks: Asks, kernels: tuple[str, ...], function: str, target):
    @functools.wraps(target)
    def call(*args, **kwargs):
        for kernel in kernels:  # a wrapper launching several planned kernels (ep_scatter): one record for each
            asks.path_call(kernel, function, args, kwargs)
        return target(*args, **kwargs)

    call._dgp_asks = True
    return call


def watch_path(asks: Asks) -> list[str]:
    """Wrap SGLang's model-path Triton wrappers (data/triton_path.yaml: each kernel's ``module``.``function``) in
    every loaded module that binds them, under whatever name (after the model is built, as :func:`watch_moe`: the
    modules that import one at their top are loaded then, and one imported inside a function is looked up in its
    defining module, wrapped too, at each call). A wrapper that launches several of the data file's kernels (each its
    own entry naming the same ``module.function``: ep_scatter's two) is wrapped once and records each call once per
    kernel, so each kernel's calls are held to its own items. The ``module.function`` names wrapped; a release
    without one is said in a note."""
    import importlib

    from dgprecompile.runtimes.triton_moe import TRITON_PATH

    by_function: dict[tuple[str, str], list[str]] = {}
    for kernel, k in TRITON_PATH.data()["kernels"].items():
        by_function.setdefault((k["module"], k["function"]), []).append(kernel)
    wrapped = []
    for (module, name), kernels in by_function.items():
        function = f"{module}.{name}"
        try:
            target = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as exc:
            asks.note(f"{function} not recorded: {type(exc).__name__}: {exc}")
            continue
        if getattr(target, "_dgp_asks", False):  # a second watcher finds the first
            continue
        _rebind(None, [target], lambda bound, kernels=tuple(kernels), function=function:
                _path_recording(asks, kernels, function, bound))
        wrapped.append(function)
    return wrapped


def _plain(value: Any) -> Any:
    """A launcher input as JSON holds it (tuples as lists; anything else by its text)."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)


# the functions Triton builds its host modules with (triton/runtime/build.py): from a source string (3.5-3.7:
# cuda_utils, and up to 3.6 each launcher; its key: the source and platform_key()) and from a file (3.8: cuda_utils from
# driver.c; its key also holds the build's folders and libraries, recorded here as the call gave them)
HOST_BUILDERS = ("compile_module_from_src", "compile_module_from_file")
BUILD_ARGS = ("library_dirs", "include_dirs", "libraries", "ccflags")


def _host_recording(asks: Asks, making: list[dict[str, Any]], by_file: bool):
    def recording(inner):
        signature = inspect.signature(inner)  # Triton's drivers call it with keywords (3.8) or positionally

        @functools.wraps(inner)
        def compile_module(*args, **kwargs):
            module = inner(*args, **kwargs)
            given = signature.bind(*args, **kwargs).arguments
            name = str(given.get("name"))
            # None stays None: Triton 3.8's key skips a None argument but hashes the name of an empty one
            built = {k: None if given.get(k) is None else [str(v) for v in given[k]] for k in BUILD_ARGS} \
                if by_file else None
            asks.host_module(name, getattr(module, "__file__", None),
                             making[-1] if making and name != "cuda_utils" else None, built)
            return module

        compile_module._dgp_asks = True
        return compile_module

    return recording


def watch_host(asks: Asks) -> str | None:
    """Wrap Triton's host-module builders (HOST_BUILDERS, triton/runtime/build.py) in every loaded module that holds
    them (its CUDA driver imports one by name) and its CUDA launcher's ``__init__``, so each host module the job's
    Triton looks up is recorded with what a launcher's source came from; before the job's first Triton launch. The
    wrapped names, or None (a note says why) where this Triton has none of them."""
    try:
        from triton.backends.nvidia import driver
        from triton.runtime import build
    except ImportError as exc:
        asks.notes.append(f"Triton host modules not recorded: {exc}")
        return None
    targets = {name: getattr(build, name) for name in HOST_BUILDERS if getattr(build, name, None) is not None}
    launcher_cls = getattr(driver, "CudaLauncher", None)
    if not targets or launcher_cls is None:
        asks.notes.append("Triton has no compile_module_from_src, compile_module_from_file or CudaLauncher: host "
                          "modules not recorded")
        return None
    if any(getattr(t, "_dgp_asks", False) for t in targets.values()):
        return None
    asks.platform_key = build.platform_key() if hasattr(build, "platform_key") else None
    utils = getattr(driver, "CudaUtils", None)
    if utils is not None and hasattr(utils, "instance"):  # Triton's driver started before this: its lookup is gone
        asks.notes.append("Triton's CUDA driver started before the watcher: its cuda_utils lookup is not recorded")
    making: list[dict[str, Any]] = []  # the launcher being made (CudaLauncher.__init__ builds it)
    for name, target in targets.items():
        # the function and what wraps of it (a wrapper's __wrapped__): a module that bound either is recorded
        chain, inner = [], target
        while callable(inner) and inner not in chain:
            chain.append(inner)
            inner = getattr(inner, "__wrapped__", None)
        _rebind(name, chain, _host_recording(asks, making, name == "compile_module_from_file"))
    init = launcher_cls.__init__

    @functools.wraps(init)
    def launcher_init(self, src, metadata, *args, **kwargs):
        fn = getattr(src, "fn", None)
        making.append({"kernel": getattr(src, "name", None) or getattr(fn, "__name__", None),
                       # in the JIT's argument order: the launcher's source follows it, and a JSON object's keys
                       # do not keep an order (the driver's report is written with sorted keys)
                       "signature": [[str(k), _plain(v)] for k, v in dict(getattr(src, "signature", {}) or {}).items()],
                       "tensordesc_meta": _plain(getattr(metadata, "tensordesc_meta", None))})
        try:
            return init(self, src, metadata, *args, **kwargs)
        finally:
            making.pop()

    launcher_cls.__init__ = launcher_init
    return ", ".join(f"triton.runtime.build.{name}" for name in targets)
