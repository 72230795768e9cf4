"""GPU probe (run on the device, not in CI): ground truth for the C++-JIT DeepGEMM's kernel choice.

For each key it launches the GEMM for EVERY m in 1..m_max through the calls SGLang's real path makes
(dense: fp8_gemm_nt with MN-major TMA-aligned activation scales, as sglang's per-token-group quant makes
them; masked: row-major scales through get_mn_major_tma_aligned_tensor, then fp8_m_grouped_gemm_nt_masked with
expected_m = m), with DG_PRINT_CONFIGS=1 so the library prints the configuration it picks for each m, and
records which cache entries appear at which m. The summary (runs of m with one configuration, entries per
first m) is what tests/test_heuristics.py checks the pure-Python heuristic against.

usage: python tests/gpu/probe_cxx_sweep.py OUT.json [--keys dense,masked]
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import tempfile
import time

KEYS = [  # Qwen3-Coder-480B-A35B-FP8 at tp 8 / ep 8 (dgprecompile plan)
    ("GEMM_NT_F8F8BF16", 1792, 6144, 1, 16384),
    ("GEMM_NT_F8F8BF16", 6144, 1536, 1, 16384),
    # deep_gemm MoE runner in sglang 0.5.12-0.5.16: expected_m = ceil(T*topk/local experts) <= ceil(16384*8/20)
    ("GROUPED_GEMM_NT_F8F8BF16_MASKED", 5120, 6144, 20, 6554),
    ("GROUPED_GEMM_NT_F8F8BF16_MASKED", 6144, 2560, 20, 6554),
]


def main() -> None:
    out_path = sys.argv[1]
    cache = tempfile.mkdtemp(prefix="dgprobe-")
    os.environ["DG_JIT_CACHE_DIR"] = cache
    os.environ["DG_PRINT_CONFIGS"] = "1"
    cfg_log = out_path + ".configs.txt"
    log_fd = os.open(cfg_log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    saved = os.dup(1)
    os.dup2(log_fd, 1)  # the library prints its choices on stdout (C stdio)
    libc = ctypes.CDLL(None)
    import deep_gemm
    import torch
    from deep_gemm.utils.layout import get_mn_major_tma_aligned_tensor

    entries_dir = os.path.join(cache, "cache")
    seen: set[str] = set()

    def new_entries() -> list[str]:
        try:
            now = set(os.listdir(entries_dir))
        except FileNotFoundError:
            return []
        fresh = sorted(now - seen)
        seen.update(fresh)
        return fresh

    result = {"deep_gemm_file": deep_gemm.__file__, "num_sms": deep_gemm.get_num_sms(),
              "torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "keys": []}
    dev = "cuda"
    for kind, n, k, g, m_max in KEYS:
        t0 = time.time()
        events = []
        marker = f"#### KEY {kind} {n} {k} {g}\n"
        libc.fflush(None)
        os.write(1, marker.encode())
        if kind == "GEMM_NT_F8F8BF16":
            a = torch.empty((m_max, k), device=dev, dtype=torch.float8_e4m3fn)
            b = torch.empty((n, k), device=dev, dtype=torch.float8_e4m3fn)
            sfb = torch.ones((n // 128, k // 128), device=dev, dtype=torch.float32)
            d = torch.empty((m_max, n), device=dev, dtype=torch.bfloat16)
            for m in range(1, m_max + 1):
                aligned = (m + 3) // 4 * 4
                sfa = torch.ones((k // 128, aligned), device=dev, dtype=torch.float32).t()[:m]
                libc.fflush(None)
                os.write(1, f"## m={m}\n".encode())
                deep_gemm.fp8_gemm_nt((a[:m], sfa), (b, sfb), d[:m])
                fresh = new_entries()
                if fresh:
                    events.append([m, fresh, round(time.time() - t0, 2)])
        else:
            rows = 256
            a = torch.empty((g, rows, k), device=dev, dtype=torch.float8_e4m3fn)
            sfa_row = torch.ones((g, rows, k // 128), device=dev, dtype=torch.float32)
            b = torch.empty((g, n, k), device=dev, dtype=torch.float8_e4m3fn)
            sfb = torch.ones((g, n // 128, k // 128), device=dev, dtype=torch.float32)
            d = torch.empty((g, rows, n), device=dev, dtype=torch.bfloat16)
            masked_m = torch.zeros((g,), device=dev, dtype=torch.int32)
            sfa = get_mn_major_tma_aligned_tensor(sfa_row)
            fresh = new_entries()
            if fresh:
                events.append([0, fresh, round(time.time() - t0, 2)])
            for m in range(1, m_max + 1):
                libc.fflush(None)
                os.write(1, f"## m={m}\n".encode())
                deep_gemm.fp8_m_grouped_gemm_nt_masked((a, sfa), (b, sfb), d, masked_m, m)
                fresh = new_entries()
                if fresh:
                    events.append([m, fresh, round(time.time() - t0, 2)])
        torch.cuda.synchronize()
        result["keys"].append({"kernel_type": kind, "n": n, "k": k, "num_groups": g, "m_max": m_max,
                               "seconds": round(time.time() - t0, 2), "new_entries": events})
    libc.fflush(None)
    os.dup2(saved, 1)
    result["entries"] = sorted(seen)
    result["entry_files"] = {e: sorted(os.listdir(os.path.join(entries_dir, e))) for e in sorted(seen)}
    result["cache_dir"] = cache
    with open(out_path, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({k: v for k, v in result.items() if k not in ("keys", "entry_files")})[:2000])
    for key in result["keys"]:
        print(key["kernel_type"], key["n"], key["k"], key["num_groups"], key["seconds"], "s",
              sum(len(e[1]) for e in key["new_entries"]), "new entries")


if __name__ == "__main__":
    main()
