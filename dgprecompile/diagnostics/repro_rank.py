"""One rank of `dgprecompile repro` (internal): ``python -m dgprecompile.diagnostics.repro_rank SPEC_JSON``.

It imports what a training rank imports, waits for the driver's go (all ranks start together), runs its phase
(``pool``: a ThreadPoolExecutor per key, sglang 0.5.1's pattern; ``warm``: serially; ``jit-off``: only looks up
the warmed cache) and prints its result as the last JSON line on stdout, a failure included.

Backends: ``nvcc`` compiles small generated .cu files (no DeepGEMM); ``legacy`` builds real kernels with the
Python-JIT DeepGEMM of sgl-kernel <= 0.3.6 (no GPU needed); ``cxx`` launches sgl-deep-gemm's fp8_gemm_nt on
dummy CUDA tensors (needs an SM90 GPU).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from dgprecompile.diagnostics.limits import read_text
from dgprecompile.errors import EnvironmentProblem

# the key of the reported failure (sglang 0.5.1, layer.py L301: masked w2 of Qwen3-Coder-480B at TP8/EP8)
LEGACY_KEY = ("GROUPED_GEMM_NT_F8F8BF16_MASKED", 6144, 2560, 20)
CXX_KEYS = ((1792, 6144), (6144, 1536))  # the two dense keys of Qwen3-Coder-480B at TP8
CXX_MS = (1, 17, 33, 128, 256, 512, 1024, 2048, 4096, 8192)


def _threads() -> int:
    text = read_text(Path("/proc/self/status")) or ""
    for line in text.splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return 0


class NvccBackend:
    """Small generated kernels compiled with nvcc: the same process pattern as the legacy JIT, no DeepGEMM."""

    resolves_nvcc = True  # its keys name the nvcc it runs: the real path, not a symlink
    jit_off_by_refusing_nvcc = False  # with the JIT off, a lookup only reads the cache

    def __init__(self, spec: dict[str, Any]):
        self.nvcc = spec["nvcc"]
        self.cache = Path(spec["cache_dir"]) / "cache"

    def keys(self, spec: dict[str, Any]) -> list[list[Any]]:
        return [[(k, i) for i in range(spec["kernels"])] for k in range(spec["keys"])]

    def _entry(self, item) -> Path:
        return self.cache / f"kernel.k{item[0]}_{item[1]}"

    def compile(self, item) -> str:
        entry = self._entry(item)
        if (entry / "kernel.cubin").exists():
            return entry.name
        entry.mkdir(parents=True, exist_ok=True)
        k, i = item
        src = entry / f"kernel.{os.getpid()}.{time.monotonic_ns()}.cu"
        src.write_text(
            "template <int A, int B> __global__ void kern(float* x, const float* y, int n) {\n"
            "  int t = blockIdx.x * blockDim.x + threadIdx.x;\n"
            "  float acc = 0.f;\n"
            "  #pragma unroll\n"
            "  for (int j = 0; j < 16; ++j) acc += y[(t + j * A) % n] * (B + j);\n"
            "  if (t < n) x[t] = acc;\n}\n"
            f"template __global__ void kern<{k + 1}, {i + 1}>(float*, const float*, int);\n")
        tmp = entry / f"kernel.{os.getpid()}.{time.monotonic_ns()}.cubin"
        res = subprocess.run([self.nvcc, str(src), "-cubin", "-o", str(tmp), "-gencode=arch=compute_90a,code=sm_90a",
                              "-O3"], capture_output=True, text=True)
        src.unlink(missing_ok=True)
        if res.returncode != 0:
            raise RuntimeError(f"nvcc failed: {res.stderr.strip()[-400:]}")
        os.replace(tmp, entry / "kernel.cubin")
        return entry.name

    def lookup(self, item) -> str:
        cubin = self._entry(item) / "kernel.cubin"
        if not cubin.is_file():
            raise RuntimeError(f"JIT is off and {cubin} is not in the cache")
        cubin.read_bytes()
        return cubin.parent.name


class LegacyBackend:
    """Real kernels of the masked key that failed in the report, built by the Python-JIT DeepGEMM (sgl-kernel 0.3.5)."""

    resolves_nvcc = False
    jit_off_by_refusing_nvcc = False

    def __init__(self, spec: dict[str, Any]):
        import deep_gemm  # noqa: F401  (imports torch, as a rank has)
        import deep_gemm.jit.compiler as compiler
        import deep_gemm.jit.runtime as runtime

        # CPU-only torch has no CUDA_HOME; the JIT needs it for nvcc (and cuobjdump at launch)
        home = os.path.dirname(os.path.dirname(os.path.realpath(spec["nvcc"])))
        if compiler.CUDA_HOME is None:
            compiler.CUDA_HOME = home
        if runtime.CUDA_HOME is None:
            runtime.CUDA_HOME = home
        from deep_gemm.jit import build
        from deep_gemm.jit_kernels.runtime import FP8GemmRuntime

        self.compiler, self.build, self.runtime_cls = compiler, build, FP8GemmRuntime

    def keys(self, spec: dict[str, Any]) -> list[list[Any]]:
        return [legacy_kernels(spec["kernels"])]

    def compile(self, item) -> str:
        from dgprecompile.planning.heuristics.legacy import template_kwargs

        family, spec = item
        kwargs = template_kwargs(spec)
        rt = self.build(family, self.runtime_cls.generate(kwargs), self.runtime_cls, kwargs)
        return os.path.basename(rt.path)

    def lookup(self, item) -> str:
        def refuse(cls, name, code, target_path):
            raise RuntimeError(f"JIT is off and {name} is not in the cache")

        self.compiler.NVCCCompiler.compile = classmethod(refuse)
        return self.compile(item)


def legacy_kernels(count: int):
    """The first ``count`` distinct kernels of the failing masked key, over m = 1..16384 (H200: 132 SMs)."""
    from dgprecompile.planning.heuristics.legacy import BUILD_NAME, LegacyHeuristic
    from dgprecompile.runtimes.items import KernelType

    kt = KernelType(LEGACY_KEY[0])
    h = LegacyHeuristic()
    seen: dict[str, Any] = {}
    for m in h.breakpoints(kt, 16384):
        spec = h.kernel(kt, m, LEGACY_KEY[1], LEGACY_KEY[2], LEGACY_KEY[3], 132)
        seen.setdefault(spec.id, (BUILD_NAME[kt][0], spec))
        if len(seen) >= count:
            break
    return list(seen.values())


class CxxBackend:
    """sgl-deep-gemm (C++ JIT): each pool thread launches fp8_gemm_nt for one m, compiling on a miss. GPU only."""

    resolves_nvcc = False
    jit_off_by_refusing_nvcc = True  # the library itself compiles on a miss: DG_JIT_NVCC_COMPILER refuses

    def __init__(self, spec: dict[str, Any]):
        import deep_gemm
        import torch

        if not torch.cuda.is_available():
            raise EnvironmentProblem("--backend cxx needs a CUDA GPU and sgl-deep-gemm")
        self.torch, self.dg = torch, deep_gemm
        torch.cuda.init()
        torch.empty(1, device="cuda")

    def keys(self, spec: dict[str, Any]) -> list[list[Any]]:
        ms = CXX_MS[: spec["kernels"]] if spec["kernels"] else CXX_MS
        return [[(n, k, m) for m in ms] for n, k in CXX_KEYS[: spec["keys"]]]

    def compile(self, item) -> str:
        torch = self.torch
        n, k, m = item
        torch.cuda.set_device(0)
        a = torch.empty((m, k), device="cuda", dtype=torch.float8_e4m3fn)
        sfa = torch.ones((m, (k + 127) // 128), device="cuda", dtype=torch.float32)
        b = torch.empty((n, k), device="cuda", dtype=torch.float8_e4m3fn)
        sfb = torch.ones(((n + 127) // 128, (k + 127) // 128), device="cuda", dtype=torch.float32)
        d = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
        self.dg.fp8_gemm_nt((a, sfa), (b, sfb), d)
        torch.cuda.synchronize()
        return f"n{n}.k{k}.m{m}"

    lookup = compile  # with JIT off the parent points DG_JIT_NVCC_COMPILER at a wrapper that refuses to compile


# repro's own backends (the process patterns it reproduces), by the name --backend takes
REPRO_BACKENDS: dict[str, type] = {"nvcc": NvccBackend, "legacy": LegacyBackend, "cxx": CxxBackend}
BACKENDS = tuple(REPRO_BACKENDS)


def _backend(spec: dict[str, Any]):
    return REPRO_BACKENDS[spec["backend"]](spec)


def rank_main(spec: dict[str, Any]) -> int:
    """One rank: imports, waits for the go signal, then runs its phase; the last stdout line is a JSON result."""
    from concurrent.futures import ThreadPoolExecutor

    rank, phase, sync = spec["rank"], spec["phase"], spec.get("sync_dir")
    backend = _backend(spec)
    keys = backend.keys(spec)
    base = _threads()
    if sync:
        Path(sync, f"ready.{rank}").touch()
        deadline = time.monotonic() + 600
        go = Path(sync, "go")
        while not go.exists() and time.monotonic() < deadline:
            time.sleep(0.001)
    t0 = time.monotonic()
    done = []
    if phase == "probe":
        pass
    elif phase == "pool":
        for items in keys:  # sglang 0.5.1 compile_utils: thread_map(compile_func, configs, max_workers=4) per key
            with ThreadPoolExecutor(max_workers=spec["workers"], thread_name_prefix=f"rank{rank}") as pool:
                done.extend(pool.map(backend.compile, items))
    elif phase == "warm":
        for items in keys:
            done.extend(backend.compile(item) for item in items)
    elif phase == "jit-off":
        for items in keys:
            done.extend(backend.lookup(item) for item in items)
    print(json.dumps({"rank": rank, "phase": phase, "ok": True, "base_threads": base, "kernels": len(done),
                      "seconds": round(time.monotonic() - t0, 2)}), flush=True)
    return 0


def _rank_entry(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    try:
        return rank_main(spec)
    except BaseException as exc:  # report every failure the same way, including the one we are here to cause
        traceback.print_exc()
        print(json.dumps({"rank": spec.get("rank"), "phase": spec.get("phase"), "ok": False,
                          "error": f"{type(exc).__name__}: {exc}"}), flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(_rank_entry(sys.argv[1:]))
