"""Run every planned GEMM once on dummy tensors with the legacy DeepGEMM, and fail if any kernel was compiled.

Proof for a shipped cache (GPU node, after `dgprecompile unpack` and `verify`): for each planned key and each
m-bucket it calls the legacy API (sglang 0.5.0-0.5.1's DeepGEMM, inside sgl-kernel <= 0.3.5) at the bucket's
smallest and largest m, then compares the entries under ``<cache>/cache`` before and after. The legacy JIT
writes a new entry for every kernel it compiles, so "no new entry" means "compiled nothing".

usage: python examples/ci/gemm_smoke_legacy.py --manifest plan.yaml --cache-dir DIR [--dry-run]
Needs a Hopper GPU, torch with CUDA and the legacy deep_gemm at the absolute path the cache was warmed with.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--cache-dir", required=True)
    ap.add_argument("--dry-run", action="store_true", help="list the calls, run nothing")
    args = ap.parse_args()

    from dgprecompile.cache.store import CacheStore
    from dgprecompile.planning.manifest import read_manifest

    plan = read_manifest(args.manifest)
    store = CacheStore(args.cache_dir)
    calls = []
    for pk in plan.keys:
        for b in pk.buckets:
            for m in sorted({b.m_min, b.m_max}):
                calls.append((pk.key.kernel_type.value, pk.key.n, pk.key.k, pk.key.num_groups, m))
    if args.dry_run:
        print(json.dumps({"calls": len(calls), "first": calls[:3]}))
        return 0
    recorded_nvcc = (store.read_index().fingerprint.get("nvcc") or {}).get("path")
    # both are read once, when deep_gemm is first used; the nvcc path string is part of the legacy key
    os.environ["DG_JIT_CACHE_DIR"] = str(store.root)
    if recorded_nvcc and "DG_JIT_NVCC_COMPILER" not in os.environ:
        os.environ["DG_JIT_NVCC_COMPILER"] = recorded_nvcc
    import deep_gemm
    import torch

    deep_gemm.set_num_sms(plan.num_sms)
    dev, f8 = torch.device("cuda"), torch.float8_e4m3fn

    def cdiv(a, b):
        return -(-a // b)

    before = set(store.list_entries())
    start = time.perf_counter()
    for kind, n, k, g, m in calls:
        if kind == "GEMM_NT_F8F8BF16":
            a, sa = torch.zeros((m, k), device=dev, dtype=f8), torch.ones((m, cdiv(k, 128)), device=dev)
            b, sb = torch.zeros((n, k), device=dev, dtype=f8), torch.ones((cdiv(n, 128), cdiv(k, 128)), device=dev)
            out = torch.empty((m, n), device=dev, dtype=torch.bfloat16)
            deep_gemm.gemm_fp8_fp8_bf16_nt((a, sa), (b, sb), out)
        elif kind == "GROUPED_GEMM_NT_F8F8BF16_MASKED":
            rows = 256  # buffer rows per group; expected_m (= m here) is what selects the kernel
            a, sa = torch.zeros((g, rows, k), device=dev, dtype=f8), torch.ones((g, rows, cdiv(k, 128)), device=dev)
            b = torch.zeros((g, n, k), device=dev, dtype=f8)
            sb = torch.ones((g, cdiv(n, 128), cdiv(k, 128)), device=dev)
            out = torch.empty((g, rows, n), device=dev, dtype=torch.bfloat16)
            masked_m = torch.zeros((g,), device=dev, dtype=torch.int32)
            deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_masked((a, sa), (b, sb), out, masked_m, m)
        else:  # contiguous: m rounded up to the layout's alignment, as SGLang's dispatch pads it
            align = deep_gemm.get_m_alignment_for_contiguous_layout()
            mm = cdiv(m, align) * align
            a, sa = torch.zeros((mm, k), device=dev, dtype=f8), torch.ones((mm, cdiv(k, 128)), device=dev)
            b = torch.zeros((g, n, k), device=dev, dtype=f8)
            sb = torch.ones((g, cdiv(n, 128), cdiv(k, 128)), device=dev)
            out = torch.empty((mm, n), device=dev, dtype=torch.bfloat16)
            idx = torch.zeros((mm,), device=dev, dtype=torch.int32)
            deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous((a, sa), (b, sb), out, idx)
    torch.cuda.synchronize()
    new = sorted(set(store.list_entries()) - before)
    print(json.dumps({"calls": len(calls), "seconds": round(time.perf_counter() - start, 2),
                      "entries_before": len(before), "new_entries": new}))
    if new:
        print(f"FAIL: {len(new)} kernels were compiled at run time", file=sys.stderr)
        return 1
    print(f"ok: {len(calls)} GEMM calls, nothing compiled", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
