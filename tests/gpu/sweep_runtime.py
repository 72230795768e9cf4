"""GPU script (device only): call every m of every key of a manifest through the runtime's own call path and
report which cache entries appear. Used to prove that a warmed cache leaves nothing to compile, and (with
--sglang-warmup on a cold cache) to time SGLang's own way of precompiling: every m, one process, in order.

  python tests/gpu/sweep_runtime.py --manifest M --cache-dir D [--sglang-warmup] --json OUT

C++ JIT (sgl-deep-gemm): dense fp8_gemm_nt, masked fp8_m_grouped_gemm_nt_masked (expected_m = m), contiguous
m_grouped_fp8_gemm_nt_contiguous. Real-path scales by default (dense: MN-major TMA-aligned; masked: row-major
through get_mn_major_tma_aligned_tensor); --sglang-warmup uses SGLang's warm-up executors' row-major scales.
Legacy JIT: gemm_fp8_fp8_bf16_nt / m_grouped_gemm_fp8_fp8_bf16_nt_masked with row-major scales (that library
transposes them with torch ops, no JIT kernel).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--cache-dir", required=True)
    ap.add_argument("--json", required=True)
    ap.add_argument("--sglang-warmup", action="store_true")
    ap.add_argument("--nvcc", default=None)
    args = ap.parse_args()
    os.environ["DG_JIT_CACHE_DIR"] = args.cache_dir
    if args.nvcc:
        os.environ["DG_JIT_NVCC_COMPILER"] = args.nvcc
    from dgprecompile.planning.manifest import read_manifest

    plan = read_manifest(args.manifest)
    import torch

    legacy = plan.profile.generation == "legacy"
    if legacy:
        import torch.utils.cpp_extension as ce

        if ce.CUDA_HOME is None:
            ce.CUDA_HOME = "/usr/local/cuda"
    import deep_gemm

    entries_dir = os.path.join(args.cache_dir, "cache")
    os.makedirs(entries_dir, exist_ok=True)
    seen = set(os.listdir(entries_dir))
    start_entries = len(seen)
    dev = "cuda"
    f8, f32, bf16 = torch.float8_e4m3fn, torch.float32, torch.bfloat16
    report = {"manifest": args.manifest, "generation": plan.profile.generation, "sglang_warmup": args.sglang_warmup,
              "keys": [], "calls": 0}
    t_all = time.time()
    for pk in plan.keys:
        key = pk.key
        n, k, g, m_max = key.n, key.k, key.num_groups, key.m_max
        sfk = (k + 127) // 128
        t0, new = time.time(), []
        kind = key.kernel_type.value
        if kind == "GEMM_NT_F8F8BF16":
            a, b = torch.empty((m_max, k), device=dev, dtype=f8), torch.empty((n, k), device=dev, dtype=f8)
            sfb = torch.ones(((n + 127) // 128, sfk), device=dev, dtype=f32)
            d = torch.empty((m_max, n), device=dev, dtype=bf16)
            sfa_rows = torch.ones((m_max, sfk), device=dev, dtype=f32)
        else:
            rows = 256
            a, b = torch.empty((g, rows, k), device=dev, dtype=f8), torch.empty((g, n, k), device=dev, dtype=f8)
            sfb = torch.ones((g, (n + 127) // 128, sfk), device=dev, dtype=f32)
            d = torch.empty((g, rows, n), device=dev, dtype=bf16)
            sfa_rows = torch.ones((g, rows, sfk), device=dev, dtype=f32)
            masked_m = torch.zeros((g,), device=dev, dtype=torch.int32)
        for m in range(key.m_min, m_max + 1):
            if kind == "GEMM_NT_F8F8BF16":
                if legacy or args.sglang_warmup:
                    sfa = sfa_rows[:m]
                else:
                    sfa = torch.ones((sfk, (m + 3) // 4 * 4), device=dev, dtype=f32).t()[:m]
                if legacy:
                    deep_gemm.gemm_fp8_fp8_bf16_nt((a[:m], sfa), (b, sfb), d[:m])
                else:
                    deep_gemm.fp8_gemm_nt((a[:m], sfa), (b, sfb), d[:m])
            elif kind == "GROUPED_GEMM_NT_F8F8BF16_MASKED":
                if legacy:
                    deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_masked((a, sfa_rows), (b, sfb), d, masked_m, m)
                else:
                    if args.sglang_warmup:
                        sfa = sfa_rows
                    else:
                        from deep_gemm.utils.layout import get_mn_major_tma_aligned_tensor

                        sfa = get_mn_major_tma_aligned_tensor(sfa_rows)
                    deep_gemm.fp8_m_grouped_gemm_nt_masked((a, sfa), (b, sfb), d, masked_m, m)
            else:
                raise SystemExit(f"sweep of {kind} is not implemented")
            report["calls"] += 1
            now = os.listdir(entries_dir)
            if len(now) != len(seen):
                fresh = sorted(set(now) - seen)
                seen.update(fresh)
                new.append([m, fresh, round(time.time() - t0, 3)])
        torch.cuda.synchronize()
        report["keys"].append({"kernel_type": kind, "n": n, "k": k, "num_groups": g, "m_max": m_max,
                               "seconds": round(time.time() - t0, 2), "new_entries": new})
    report["seconds"] = round(time.time() - t_all, 2)
    report["entries_before"] = start_entries
    report["new_entries_total"] = sum(len(e[1]) for key in report["keys"] for e in key["new_entries"])
    report["entries_after"] = sorted(seen)
    with open(args.json, "w") as f:
        json.dump(report, f, indent=1)
    print(f"sweep: {report['calls']} calls in {report['seconds']} s; new cache entries: "
          f"{report['new_entries_total']} (cache had {start_entries})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
