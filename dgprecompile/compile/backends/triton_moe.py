"""GPU-free warm of SGLang's Triton fused-MoE kernels, one planned MoE shape (families.TRITON_MOE item) at a time.

Each item runs ``python -m dgprecompile.compile.triton_moe ...`` (the installed sglang's own fused_experts_impl on
meta tensors, Triton's own JIT and compiler, its own cache writer) in a subprocess of this worker, with the job's
own interpreter and no GPU visible (the compile-only driver names the planned target), so that torch, triton and
sglang are imported there and never in the zygote or the other backends' workers. Triton writes into the cache's
Triton area itself (its entries are content-keyed, so two items sharing a kernel share its entry); the worker
then files the entries the item's calls used and the item's record (cache/triton_moe.py) in the index.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

from dgprecompile.cache.store import CacheStore
from dgprecompile.cache.triton_moe import COVERED, item_coverage, make_record
from dgprecompile.compile.backends import WorkItem
from dgprecompile.errors import CompileFailed
from dgprecompile.families import TRITON_MOE
from dgprecompile.kernels import TritonMoeItem


class TritonMoeWorker:
    area = TRITON_MOE.area
    skip_files: tuple[str, ...] = ()

    def __init__(self, job: dict[str, Any]):
        self.store = CacheStore(job["cache_dir"])
        self.store.ensure()
        self.installed: dict[str, Any] = job["installed"]  # what the records hold (the parent read it: metadata)
        self.python = job.get("python") or sys.executable
        self.timeout = job.get("timeout_seconds")
        self._pending: dict[str, dict[str, Any]] = {}

    def compile(self, item: WorkItem) -> tuple[str, list[str], float]:
        """Run the item's warm (Triton finds what its cache has and compiles the rest); its entries."""
        index = self.store.read_index()
        if item_coverage(self.store, index, item.kernel, self.installed).status == COVERED:
            record = index.triton_moe[item.kernel]
            self._pending[item.kernel] = record
            return "cached", [e.split("/", 1)[1] for e in record["entries"]], 0.0
        moe = TritonMoeItem.from_dict({**item.params, "id": item.kernel})
        argv = TRITON_MOE.warm_argv(moe, str(self.store.root), self.python)
        start = time.perf_counter()
        # SGLang points the caches it does not own (inductor, CUDA's, TileLang's) at $SGLANG_CACHE_DIR, by default
        # ~/.cache/sglang: a warm writes only into its cache, so they go to a scratch folder removed after
        with tempfile.TemporaryDirectory(prefix="dgprecompile-sglang-cache-") as scratch:
            env = {**os.environ, **TRITON_MOE.warm_env, "SGLANG_CACHE_DIR": scratch,
                   "TORCHINDUCTOR_CACHE_DIR": os.path.join(scratch, "inductor")}
            try:
                res = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                     timeout=self.timeout)
            except subprocess.TimeoutExpired:
                raise CompileFailed(f"{TRITON_MOE.label} warm of {item.kernel} ran past {self.timeout} s") from None
        seconds = time.perf_counter() - start
        sys.stderr.write(res.stderr[-20000:])  # the worker's log
        if res.returncode != 0:
            tail = [line for line in res.stderr.strip().splitlines() if line.strip()][-1:] or ["no output"]
            raise CompileFailed(f"python -m {TRITON_MOE.warm_module} exited with code {res.returncode} for "
                                f"{item.kernel}: {tail[0][:600]}")
        try:
            report = json.loads(res.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            raise CompileFailed(f"python -m {TRITON_MOE.warm_module} printed no report for {item.kernel}") from None
        if report.get("not_whole"):
            raise CompileFailed(f"{item.kernel}: Triton left entries that are not whole: "
                                f"{', '.join(report['not_whole'][:5])}")
        host = report.get("host_modules") or {}
        if "left_to_capture" in host:
            sys.stderr.write(f"{item.kernel}: Triton's host modules left to `launch --capture`: "
                             f"{host['left_to_capture']}\n")
        entries = list(report.get("entries") or [])
        if not entries:
            raise CompileFailed(f"{item.kernel}: the warm's calls used no {report.get('kernel', 'fused_moe_kernel')} "
                                "entry (nothing was compiled or found)")
        self._pending[item.kernel] = make_record(item.kernel, self.installed,
                                                 [f"{self.area}/{e}" for e in entries], round(seconds, 2),
                                                 int(report.get("ms") or 0), report.get("host_modules"))
        return ("compiled" if report.get("warmed") else "cached"), entries, seconds

    def index_mutation(self, item: WorkItem, records):
        """The entries' checksums into ``extra`` (by their directory under the root), the item's record into
        ``triton_moe``; an entry recorded with the same files keeps its record."""
        record = self._pending.pop(item.kernel)

        def mutate(index):
            for rec in records:
                old = index.extra.get(rec.member_dir)
                if old is None or (old.entry, old.files, old.area) != (rec.entry, rec.files, rec.area):
                    index.extra[rec.member_dir] = rec
            index.triton_moe[item.kernel] = record

        return mutate
