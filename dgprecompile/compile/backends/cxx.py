"""C++-JIT backend (GPU): sgl-deep-gemm 0.1.x and 0.2.x, for plans dgprecompile can model.

These JITs compile inside the GEMM call and offer no compile-only entry point, so the worker launches the
real op on dummy CUDA tensors, once per planned kernel, with the calling conventions of SGLang's real path:
fp8_gemm_nt with MN-major TMA-aligned activation scales (what sglang's per-token-group quantisation hands it),
fp8_m_grouped_gemm_nt_masked with expected_m, m_grouped_fp8_gemm_nt_contiguous, and, for the masked MoE runner's
scale transform, get_mn_major_tma_aligned_tensor on row-major scales.

The worker's JIT root is a private staging directory, so every entry a launch creates is known to belong to that
launch; the worker then moves it into the real cache with one rename (keeping an identical entry that is
already there). Kernels the index already records are skipped without a launch.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from dgprecompile.cache.store import ADOPTED
from dgprecompile.compile.backends import WorkItem
from dgprecompile.compile.backends.base import StagingWorker
from dgprecompile.errors import CompileFailed, EnvironmentProblem
from dgprecompile.runtimes.items import TRANSPOSE_FAMILY, ceil_div


def preload(job: dict[str, Any]) -> None:
    """The zygote's import of torch (this backend and the sweep's), before it forks; no CUDA."""
    import torch  # noqa: F401


class SglangCalls:
    """The installed C++-JIT DeepGEMM on this worker's GPU, called the way SGLang's Hopper path calls it.

    Shared by the cxx backend (one call per planned kernel) and the sweep backend (every sampled m of a key):
    ``open`` points the JIT at a private root, imports torch and deep_gemm and checks the SM count; ``caller``
    allocates one key's dummy buffers for the largest m and returns a function that makes the call for one m.
    """

    def __init__(self, torch, dg, device):
        self.torch, self.dg, self.device = torch, dg, device

    @classmethod
    def open(cls, job: dict[str, Any], jit_root) -> SglangCalls:
        os.environ["DG_JIT_CACHE_DIR"] = str(jit_root)
        if job.get("nvcc"):
            os.environ["DG_JIT_NVCC_COMPILER"] = job["nvcc"]
        try:
            import deep_gemm
            import torch
        except ImportError as exc:
            raise EnvironmentProblem(f"cannot import the C++-JIT DeepGEMM: {exc}") from None
        if not torch.cuda.is_available():
            raise EnvironmentProblem("no CUDA device is visible to this worker")
        device_sms = torch.cuda.get_device_properties(0).multi_processor_count
        want = int(job.get("num_sms") or device_sms)
        if want > device_sms:
            raise EnvironmentProblem(f"the plan is for {want} SMs but this GPU has {device_sms}",
                                     hint="plan with --num-sms matching the training GPUs, and warm on such a GPU")
        if want != device_sms:
            deep_gemm.set_num_sms(want)
        device = torch.device("cuda")
        torch.empty(1, device=device)  # create the CUDA context now, not inside the first kernel's timing
        return cls(torch, deep_gemm, device)

    def _fp8(self, *shape):
        return self.torch.empty(shape, device=self.device, dtype=self.torch.float8_e4m3fn)

    def _mn_major_scales(self, groups: int | None, rows: int, k: int):
        torch = self.torch
        sf_k, aligned = ceil_div(k, 128), ceil_div(rows, 4) * 4
        if groups is None:
            return torch.ones((sf_k, aligned), device=self.device, dtype=torch.float32).t()[:rows]
        return torch.ones((groups, sf_k, aligned), device=self.device, dtype=torch.float32).transpose(1, 2)[:, :rows]

    def _weight_scales(self, groups: int | None, n: int, k: int):
        shape = (ceil_div(n, 128), ceil_div(k, 128))
        return self.torch.ones(shape if groups is None else (groups, *shape), device=self.device,
                               dtype=self.torch.float32)

    def transpose_scales(self, groups: int, rows: int, k: int) -> None:
        """The masked MoE runner's scale transform: row-major fp32 scales through get_mn_major_tma_aligned_tensor
        (it compiles DeepGEMM's transpose_fp32 layout kernel)."""
        from deep_gemm.utils.layout import get_mn_major_tma_aligned_tensor

        get_mn_major_tma_aligned_tensor(self.torch.ones((groups, rows, ceil_div(k, 128)), device=self.device,
                                                        dtype=self.torch.float32))

    def caller(self, kernel_type: str, n: int, k: int, g: int, m_top: int) -> Callable[[int], None]:
        """Buffers for m up to ``m_top`` (expected_m for masked) and the call for one m. Dummy data: the kernel
        choice depends on shapes only; masked_m = 0 and m_indices = 0."""
        torch, dg = self.torch, self.dg
        if kernel_type == "GEMM_NT_F8F8BF16":
            a, b, sfb = self._fp8(m_top, k), self._fp8(n, k), self._weight_scales(None, n, k)
            d = torch.empty((m_top, n), device=self.device, dtype=torch.bfloat16)
            return lambda m: dg.fp8_gemm_nt((a[:m], self._mn_major_scales(None, m, k)), (b, sfb), d[:m])
        if kernel_type == "GROUPED_GEMM_NT_F8F8BF16_MASKED":
            rows = 256  # buffer rows per group; expected_m alone steers the choice
            a, sfa = self._fp8(g, rows, k), self._mn_major_scales(g, rows, k)
            b, sfb = self._fp8(g, n, k), self._weight_scales(g, n, k)
            d = torch.empty((g, rows, n), device=self.device, dtype=torch.bfloat16)
            masked_m = torch.zeros((g,), device=self.device, dtype=torch.int32)
            return lambda m: dg.fp8_m_grouped_gemm_nt_masked((a, sfa), (b, sfb), d, masked_m, m)
        if kernel_type == "GROUPED_GEMM_NT_F8F8BF16_CONTIG":
            a, b, sfb = self._fp8(m_top, k), self._fp8(g, n, k), self._weight_scales(g, n, k)
            d = torch.empty((m_top, n), device=self.device, dtype=torch.bfloat16)
            m_indices = torch.zeros((m_top,), device=self.device, dtype=torch.int32)
            return lambda m: dg.m_grouped_fp8_gemm_nt_contiguous((a[:m], self._mn_major_scales(None, m, k)),
                                                                 (b, sfb), d[:m], m_indices[:m])
        raise CompileFailed(f"unknown kernel type {kernel_type}")

    def synchronize(self) -> None:
        self.torch.cuda.synchronize()


class CxxWorker(StagingWorker):
    def __init__(self, job: dict[str, Any]):
        super().__init__(job)
        self.stage_cache = self.staging / "cache"
        self.stage_cache.mkdir()
        self.calls = SglangCalls.open(job, self.staging)

    def _launch(self, item: WorkItem) -> None:
        if item.family == TRANSPOSE_FAMILY:
            self.calls.transpose_scales(item.num_groups, 4, item.k)
        else:
            self.calls.caller(item.kernel_type, item.n, item.k, item.num_groups, item.m)(item.m)
        self.calls.synchronize()

    def _cached(self, kernel: str) -> str | None:
        """The entry the index recorded for ``kernel`` by a build (not ``adopted``: never compared with one), when
        it is there with those bytes and loadable."""
        recorded = self.store.read_index().kernels.get(kernel)
        if recorded is None or recorded.by == ADOPTED or self.store.check_entry(recorded, self.arch) is not None:
            return None
        return recorded.entry

    def compile(self, item: WorkItem) -> tuple[str, list[str], float]:
        if (entry := self._cached(item.kernel)) is not None:
            return "cached", [entry], 0.0
        with self.store.kernel_lock(item.kernel):
            if (entry := self._cached(item.kernel)) is not None:  # another warm may have finished it
                return "cached", [entry], 0.0
            start = time.perf_counter()
            self._launch(item)
            seconds = time.perf_counter() - start
            fresh = sorted(p for p in self.stage_cache.iterdir() if p.is_dir())
            if not fresh:
                raise CompileFailed(f"launching {item.kernel} created no cache entry (it was already loaded in this "
                                    "worker): the plan holds two ids for one kernel")
            installed = self.install_staged(fresh, kernel=item.kernel)
            # an entry already in the cache (made by the runtime or another tool) is kept only where its bytes are
            # this build's (install_staged compares them); one that differs is replaced
            return ("compiled" if installed[0] else "adopted"), [p.name for p in fresh], seconds
