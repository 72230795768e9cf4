"""Build one planned torch.compile item's graphs by calling SGLang's own compiled function on the GPU.

``python -m dgprecompile.compile.inductor_graphs --item ID --graph G --params k=v,... --device-name N --cache-dir
ROOT [--part i/n]``, run by warm's parent (compile/recorded_items.py) with TORCHINDUCTOR_CACHE_DIR and
TRITON_CACHE_DIR pointing into ROOT, the way `launch` points the job. It imports SGLang's module, takes the function
as SGLang compiled it (its own ``torch.compile`` decorator, backend and options), and calls it under SGLang's own
grad mode (``DynamicGradMode``, with SGLANG_ENABLE_TORCH_INFERENCE_MODE set as the item's ``--grad`` says, the job's
mode the plan read: no_grad, or inference for torch.inference_mode) on inputs of the dtype, layout
and sizes SGLang passes, once per *sequence*: torch._dynamo.reset(), then each m of the sequence, which is how a
job's process meets them (data/inductor_graphs.yaml ``compile``):

* automatic (a bare ``@torch.compile``, moe_sum_reduce): a job's first call compiles its static shapes, for any
  first m in 1..m_max, and a second m recompiles with m dynamic. Sequences: [m] for every m, [1, 2] and [2, 3].
* dynamic (``dynamic=True``, vocab_mask): every size and int argument is symbolic except 0 and 1; per rank kind
  (rank 0, rank 1, the last rank: SGLang's own ``_get_indices`` gives their arguments): [1, 2] and [2, 3].

``--part i/n`` takes every n-th sequence from the i-th (the parent runs an item's parts side by side). The report
(the last stdout line, JSON) holds the torch version, the GPU, the grad mode the calls ran under, the sequences run
and inductor's own cache counters. Exit 3 where no GPU of the planned kind is visible, 4 where SGLang's grad mode is
not the item's. ``--device cpu`` runs the same calls on inductor's CPU
backend: the CPU tests' way to check the specialisations against real torch (those graphs are not the job's).
This module imports torch and sglang; nothing imports it.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from typing import Any

from dgprecompile.host import lifeline
from dgprecompile.runtimes.inductor import INDUCTOR_GRAPHS, sequences


def parse_params(text: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in filter(None, text.split(",")):
        key, _, value = pair.partition("=")
        try:
            out[key] = int(value)
        except ValueError:
            try:
                out[key] = float(value)
            except ValueError:
                out[key] = value
    return out


def set_grad_mode(grad: str) -> None:
    """The job's grad mode in the variable SGLang's DynamicGradMode reads once, at the import of its utils: set before
    SGLang is imported (this process imports it only in ``load_function``)."""
    from dgprecompile.runtimes.inductor import INDUCTOR_GRAPHS

    os.environ[INDUCTOR_GRAPHS.grad_variable] = "1" if grad == "inference" else "0"


def grad_mode(grad: str):
    """SGLang's own grad mode of its forward (DynamicGradMode), torch's own where a release has none."""
    try:
        from sglang.srt.utils import DynamicGradMode
    except ImportError:
        import torch

        return torch.inference_mode() if grad == "inference" else torch.no_grad()
    return DynamicGradMode()


def current_grad_mode() -> str:
    """The autograd mode calls run under now: inference, no_grad or grad (what a graph's entries depend on)."""
    import torch

    if torch.is_inference_mode_enabled():
        return "inference"
    return "grad" if torch.is_grad_enabled() else "no_grad"


def moe_sum_call(fn, params: dict[str, Any], device: str):
    import torch

    dtype = getattr(torch, params["dtype"])

    def call(m: int, rank: int) -> None:
        x = torch.randn(m, int(params["topk"]), int(params["hidden"]), dtype=dtype, device=device)
        out = torch.empty(m, int(params["hidden"]), dtype=dtype, device=device)
        fn(x, out, float(params["scale"]))

    return call


def vocab_mask_call(fn, params: dict[str, Any], device: str):
    """Each rank's arguments as SGLang's VocabParallelEmbedding computes them for an unpadded-LoRA embedding
    (num_embeddings == org_num_embeddings == vocab; its padding, DEFAULT_VOCAB_PADDING_SIZE)."""
    import torch

    vpe = importlib.import_module("sglang.srt.layers.vocab_parallel_embedding")
    vocab, tp = int(params["vocab"]), int(params["tp"])
    padded = vpe.pad_vocab_size(vocab, vpe.DEFAULT_VOCAB_PADDING_SIZE)
    dtype = getattr(torch, params["dtype"])

    def call(m: int, rank: int) -> None:
        s = vpe.VocabParallelEmbedding._get_indices(padded, padded, vocab, vocab, rank, tp)
        ids = torch.randint(0, vocab, (m,), dtype=dtype, device=device)
        fn(ids, s.org_vocab_start_index, s.org_vocab_end_index, s.num_org_vocab_padding,
           s.added_vocab_start_index, s.added_vocab_end_index)

    return call


CALLS = {"moe_sum_reduce": moe_sum_call, "vocab_mask": vocab_mask_call}


def load_function(graph: dict[str, Any]):
    """SGLang's compiled function, imported with warm's server-args stand-in published (compile/triton_moe.py)."""
    from dgprecompile.compile.triton_moe import publish_standins

    publish_standins()
    return getattr(importlib.import_module(graph["module"]), graph["function"])


def counters() -> dict[str, int]:
    from torch._dynamo.utils import counters as c

    return {k: int(v) for k, v in sorted(c["inductor"].items()) if k.startswith(("fxgraph_cache", "autograd"))}


def run(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    gpu = "cpu"
    if args.device == "cuda":
        if not torch.cuda.is_available():
            print("no GPU is visible: the graphs' key holds the job's GPU", file=sys.stderr)
            raise SystemExit(3)
        gpu = torch.cuda.get_device_name(0)
        if gpu != args.device_name:
            print(f"the visible GPU is {gpu}, the item is planned for {args.device_name}", file=sys.stderr)
            raise SystemExit(3)
    graph = INDUCTOR_GRAPHS.graph(args.graph)  # the data file as plan read it (schema-checked)
    params = parse_params(args.params)
    set_grad_mode(args.grad)
    call = CALLS[args.graph](load_function(graph), params, args.device)
    index, count = (int(x) for x in args.part.split("/"))
    mine = sequences(graph, params)[index::count]
    t0 = time.time()
    with grad_mode(args.grad):
        ran_under = current_grad_mode()
        if ran_under != args.grad:  # built under another mode, the job would miss every entry
            print(f"SGLang's grad mode here is {ran_under}, the item is planned for {args.grad}", file=sys.stderr)
            raise SystemExit(4)
        for rank, seq in mine:
            torch._dynamo.reset()
            for m in seq:
                call(m, rank)
    if args.device == "cuda":
        torch.cuda.synchronize()
    from importlib import metadata

    seen = counters()
    return {"item": args.item, "sequences": len(mine), "seconds": round(time.time() - t0, 1), "counters": seen,
            # what the item's record keeps (compile/recorded_items.py): what inductor's key holds, what it compiled
            "record": {"torch": metadata.version("torch"), "gpu": gpu, "grad": ran_under,
                       "graphs": int(seen.get("fxgraph_cache_miss", 0))}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dgprecompile.compile.inductor_graphs",
                                description=__doc__.split("\n")[0])
    p.add_argument("--item", required=True)
    p.add_argument("--graph", required=True, choices=sorted(CALLS))
    p.add_argument("--params", required=True)
    p.add_argument("--device-name", required=True)
    p.add_argument("--cache-dir", required=True)
    p.add_argument("--part", default="0/1")
    p.add_argument("--grad", default="no_grad", choices=("no_grad", "inference"))
    # the job's device; "cpu" runs the same calls through inductor's CPU backend (the CPU tests: no GPU there)
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    lifeline.end_with_warm()  # started by warm (compile/recorded_items.py): it and its compile workers end with warm
    report = run(args)
    json.dump(report, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
