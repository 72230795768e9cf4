"""Which sgl-deep-gemm 0.2.x dense kernels carry n (SHAPE_N = n in kernel.cu), on shapes beyond the 480B keys.

The H200 record of issue 32 (tests/data/torch214_generations_h200.json) shows n compiled into the block
128 x {144, 160, 192} single-cluster dense kernels and not into block 64 x 144 (cluster 1) nor block 128 x >128 with a
cluster of 2 (planning/heuristics/sm90_cxx.py COMPILED_N_02). It holds no block 64 x {144, 160, 192} kernel with a
cluster of 2, and each observed configuration at two n only. SHAPES below are calls where the model picks each such
configuration, on other n and k; the model's expectation for each is checked on the CPU
(tests/test_deepjit_02_records.py test_the_device_shapes_are_the_configurations_they_name).

One process per release, each shape on an empty DeepJIT cache of its own with DG_PRINT_CONFIGS=1 and SGLang's dense
calling convention (MN-major TMA-aligned activation scales, as tests/gpu/sweep_generations.py); the JSON holds per
shape the printed configuration line and every entry made with the template arguments of its kernel.cu.

usage (on the device, torch 2.14.1 set up by tests/gpu/deepgemm_02_compiled_n.sh):
    python3 tests/gpu/dg02_compiled_n.py OUT.json          (deep_gemm of one release importable)
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import sys
import tempfile

# (name, m, n, k, expected (block_m, block_n, cluster_m, cluster_n) of the model, expected SHAPE_N of the model)
SHAPES = (
    ("bm64_bn144_c2", 1088, 2048, 512, (64, 144, 2, 1), 0),
    ("bm64_bn160_c2", 832, 3072, 512, (64, 160, 2, 1), 0),
    ("bm64_bn192_c2", 704, 4608, 512, (64, 192, 2, 1), 0),
    ("bm64_bn144_c1", 768, 1536, 1536, (64, 144, 1, 1), 0),
    ("bm128_bn144_c1", 1472, 1536, 512, (128, 144, 1, 1), 1536),
    ("bm128_bn160_c1", 2176, 1024, 512, (128, 160, 1, 1), 1024),
    ("bm128_bn192_c1", 4800, 512, 512, (128, 192, 1, 1), 512),
    ("bm128_bn144_c2", 2880, 1536, 512, (128, 144, 2, 1), 0),
    ("bm128_bn112_c1", 200, 7168, 2048, (128, 112, 1, 1), 0),
)
IMPL = re.compile(r"sm90_fp8_gemm_1d2d_impl<(.*?)>\);", re.S)


def kernel_args(text: str) -> list[str]:
    """The template arguments of a generated 1d2d kernel.cu, in order (empty for another kernel)."""
    found = IMPL.search(text)
    return [a.strip() for a in found.group(1).split(",")] if found else []


def main(out_path: str) -> int:
    import deep_gemm
    import torch

    result: dict = {"deep_gemm": deep_gemm.__file__, "torch": torch.__version__,
                    "gpu": torch.cuda.get_device_name(), "num_sms": deep_gemm.get_num_sms(), "shapes": {}}
    os.environ["DG_PRINT_CONFIGS"] = "1"
    libc = ctypes.CDLL(None)
    f8, f32, bf16 = torch.float8_e4m3fn, torch.float32, torch.bfloat16
    for name, m, n, k, _cfg, _n_const in SHAPES:
        cache = tempfile.mkdtemp(prefix=f"dg02-{name}-")
        os.environ["DG_JIT_CACHE_DIR"] = cache
        log = os.path.join(cache, "configs.txt")
        fd, saved = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), os.dup(1)
        os.dup2(fd, 1)  # the library prints its choice on C stdout
        rec: dict = {"m": m, "n": n, "k": k}
        try:
            sfk = (k + 127) // 128
            a, b = torch.empty((m, k), device="cuda", dtype=f8), torch.empty((n, k), device="cuda", dtype=f8)
            sfa = torch.empty((sfk, (m + 3) // 4 * 4), device="cuda", dtype=f32).t()[:m]
            sfb = torch.ones(((n + 127) // 128, sfk), device="cuda", dtype=f32)
            d = torch.empty((m, n), device="cuda", dtype=bf16)
            deep_gemm.fp8_gemm_nt((a, sfa), (b, sfb), d)
            torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001  (record anything: this is a probe)
            rec["error"] = repr(exc)[:1000]
        libc.fflush(None)
        os.dup2(saved, 1)
        os.close(fd)
        rec["printed"] = [line.strip()[:3000] for line in open(log, errors="replace") if "GemmConfig(" in line]
        entries = os.path.join(cache, "cache")
        rec["entries"] = {}
        for entry in sorted(os.listdir(entries)) if os.path.isdir(entries) else []:
            cu = os.path.join(entries, entry, "kernel.cu")
            rec["entries"][entry] = kernel_args(open(cu).read()) if os.path.isfile(cu) else None
        result["shapes"][name] = rec
        print(name, rec.get("error") or rec["entries"], flush=True)
    with open(out_path, "w") as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
