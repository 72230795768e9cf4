"""Run a kernel of FlashInfer's trtllm_comm module as the cache holds it, inside the job of a strict launch (issue 45:
a module warm built with `-split-compile=0` is adopted only where it loads and runs as FlashInfer's own build does).

The single-rank model driver never loads trtllm_comm (its collectives are SGLang's 1-rank groups), so this job asks
FlashInfer for it itself: the module's ``trtllm_lamport_initialize``, its one kernel that needs
no peers (trtllm_allreduce.cu's lamportInitialize: it fills a buffer with negative zero, the Lamport protocol's
"not yet written"). FlashInfer's own ``gen_trtllm_comm_module().build_and_load()`` (what its get_trtllm_comm_module
calls) loads the module through the launch hook: from the cache, or refused under strict (the job fails, the launch
says why).

Checks, for float32, float16 and bfloat16 buffers first filled with ones: every element is zero with its sign bit
set. Prints one line of JSON: the module file FlashInfer loaded, whether the cache's index records the item as split
(``split_compile``), and each dtype's result. Exit 0 when every dtype passed and the module came from CACHE.

usage (inside `dgprecompile launch --manifest PLAN --cache-dir CACHE -- ...`):
    python tests/gpu/flashinfer_split_check.py CACHE
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    cache = Path(argv[0]).resolve()
    import torch
    from flashinfer.jit.comm import gen_trtllm_comm_module

    # what flashinfer.comm.trtllm_ar.get_trtllm_comm_module does; flashinfer.comm itself is not imported: 0.6.12's
    # package __init__ imports cuda.tile (all_gather_matmul), which SGLang's stack does not install (SGLang's own
    # import of flashinfer.comm fails there and it runs without FlashInfer's fusion; 2026-12-07 H100 run)
    module = gen_trtllm_comm_module().build_and_load()

    index = json.loads((cache / "dgprecompile" / "index.json").read_text())
    record = next((r for k, r in (index.get("flashinfer") or {}).items() if k.startswith("flashinfer:trtllm_comm@")),
                  {})
    results = {}
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        buf = torch.ones(1 << 16, dtype=dtype, device="cuda")
        module.trtllm_lamport_initialize(buf.data_ptr(), buf.numel(), dtype)
        torch.cuda.synchronize()
        zero = bool((buf == 0).all())
        negative = bool(torch.signbit(buf.float()).all())
        results[str(dtype).removeprefix("torch.")] = {"zero": zero, "sign_bit": negative}
    # the module file FlashInfer's load mapped into this process: the cache's, or one a build let through
    maps = Path("/proc/self/maps").read_text().splitlines()
    loaded = sorted({line.split()[-1] for line in maps if "trtllm_comm" in line and line.split()[-1].endswith(".so")})
    from_cache = bool(loaded) and all(Path(p).resolve().is_relative_to(cache) for p in loaded)
    ok = from_cache and all(r["zero"] and r["sign_bit"] for r in results.values())
    print(json.dumps({"ok": ok, "loaded": loaded, "from_cache": from_cache,
                      "split_compile": record.get("split_compile"), "record_seconds": record.get("seconds"),
                      "dtypes": results}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
