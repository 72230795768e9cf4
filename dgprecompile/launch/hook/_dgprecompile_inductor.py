"""The startup hook's refusal of torch.compile (inductor) compiles under strict mode (stdlib only; torch is imported
only inside the job's own compile). Loaded by ``_dgprecompile_hook.install`` when DGPRECOMPILE_STRICT_FAMILIES names
inductor: the cache holds inductor entries a capture filed.
"""

from __future__ import annotations

import functools
import os
import sys
import time


def inductor_graph_name(kwargs):
    """The function whose graph inductor was asked to compile, as Dynamo traced it: its name, file and first line
    (the InstructionTranslator Dynamo keeps current while its graph compiles), with Dynamo's compile id."""
    where = "?"
    try:
        from torch._dynamo.symbolic_convert import InstructionTranslator

        code = InstructionTranslator.current_tx().f_code
        where = f"{code.co_name} ({code.co_filename}:{code.co_firstlineno})"
    except Exception:
        pass
    try:
        import torch._guards

        compile_id = torch._guards.CompileContext.current_compile_id()
    except Exception:
        compile_id = None
    parts = [f"compile id {compile_id}"] if compile_id is not None else []
    if kwargs.get("is_backward"):
        parts.append("backward")
    return where + (f" [{', '.join(parts)}]" if parts else "")


def inductor_refusal_message(graph):
    """For a refused inductor compile of ``graph`` (not in the FX graph cache under strict mode)."""
    where = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or "the inductor cache"
    return "\n".join([
        f"dgprecompile strict mode: torch.compile (inductor) tried to compile the graph of {graph} at run time, but "
        f"runtime JIT is off under `dgprecompile launch` and {where} holds no FX graph cache entry for it.",
        "  Let the job compile it once with `dgprecompile launch --capture ...`: the graph is filed in the cache and "
        "later strict launches load it (inductor's graphs are not planned)."])


def patch_inductor(module, log_event):
    """Make an inductor compile that the FX graph cache does not answer raise, naming the graph.

    torch._inductor.compile_fx._compile_fx_inner looks the graph up in the FX graph cache and calls the module
    global ``fx_codegen_and_compile`` only when no entry answers (a miss, a bypass, the cache off, or the bundled
    AOTAutograd cache missing); a hit, and an AOTAutograd cache hit, never reach it. We wrap that global."""
    real = getattr(module, "fx_codegen_and_compile", None)
    if not callable(real):  # not the inductor the guard knows: it would compile unguarded
        raise RuntimeError(f"{module.__name__} has no fx_codegen_and_compile")

    @functools.wraps(real)
    def fx_codegen_and_compile(gm, *args, **kwargs):
        graph = inductor_graph_name(kwargs)
        message = inductor_refusal_message(graph)
        log_event({"event": "refused", "generation": "inductor", "kernel": graph, "entry": None,
                   "pid": os.getpid(), "rank": os.environ.get("RANK"), "time": time.time()})
        sys.stderr.write(message + "\n")
        sys.stderr.flush()
        raise RuntimeError(message)

    fx_codegen_and_compile.__dgprecompile_refuses__ = "inductor"
    module.fx_codegen_and_compile = fx_codegen_and_compile


def guard(log_event):
    """The post-import callback that patches torch._inductor.compile_fx, refusals logged with ``log_event``; a
    strict-mode guard: if it cannot be applied, the import fails."""
    def callback(module):
        patch_inductor(module, log_event)

    callback.guard = True
    return callback
