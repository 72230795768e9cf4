"""A STAND-IN for the SpecForge trainer (scripts/train_eagle3_sgl_online.py), for proving `dgprecompile launch`.

It is not SpecForge and loads no model. For N steps it draws a token count T (1..the plan's max_tokens) and makes,
for every key of a manifest, the DeepGEMM call SGLang's entry points make for a forward of T tokens:

* C++ API (sgl-deep-gemm 0.1.x / sgl-kernel >= 0.3.7): dense ``fp8_gemm_nt`` with MN-major, TMA-aligned activation
  scales (what sglang's per-token-group quantisation hands it: fp32 [k/128, align4(T)] transposed); masked:
  ``get_mn_major_tma_aligned_tensor`` on row-major scales, then ``fp8_m_grouped_gemm_nt_masked`` with expected_m;
  contiguous: ``m_grouped_fp8_gemm_nt_contiguous`` on ceil128(T) rows;
* legacy API (sgl-kernel <= 0.3.6): ``gemm_fp8_fp8_bf16_nt`` / ``m_grouped_gemm_fp8_fp8_bf16_nt_masked`` /
  ``m_grouped_gemm_fp8_fp8_bf16_nt_contiguous`` with the same tensors.

m per key: dense and contiguous m = T; masked expected_m = ceil(T * key.m_max / plan.max_tokens), which is the
profile's expected_m rule (linear in T: ceil(T*topk/experts)) rescaled from the plan's own range. Masked buffers have
256 rows per group: the kernel choice depends on expected_m only, and masked_m = min(expected_m, 256).

Step 1 ("prime", on by default) first calls every m-bucket representative of every key, so every kernel of the plan
is loaded once; steps 2..N are random. What it records (JSON, --json): cache entries before / after step 1 / at the
end, the thread count of this process (/proc/self/task) after every step, Python threads started, child processes
(live ones seen via /proc/*/stat ppid at every step, and reaped ones via RUSAGE_CHILDREN deltas), steps done, and
the error when a call failed. Exit 0 when every step ran, 3 when a call failed with dgprecompile's strict-mode
refusal, 1 on another error, 2 when it cannot run here (no GPU, no DeepGEMM).

usage (on the GPU machine, with dgprecompile and DeepGEMM importable):
  python3 -m dgprecompile launch --manifest M --cache-dir D --strict -- \\
      python3 tests/gpu/standin_trainer.py --manifest M --steps 1000 --json $OUT/x.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import sys
import threading
import time
import traceback

EXIT_OK, EXIT_ERROR, EXIT_CANNOT_RUN, EXIT_REFUSED = 0, 1, 2, 3
STRICT_MARK = "dgprecompile strict mode"
MASKED_ROWS = 256


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Stand-in for the SpecForge trainer: DeepGEMM calls only (see docstring).")
    p.add_argument("--manifest", required=True, help="manifest written by `dgprecompile plan -o`")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--json", dest="json_path", default=None, help="write the measurements here")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-prime", dest="prime", action="store_false",
                   help="step 1 is random like the others (kernels load whenever T first selects them)")
    args = p.parse_args(argv)
    if args.steps < 1:
        p.error("--steps must be at least 1")
    return args


def fail(code, message):
    sys.stderr.write(f"standin_trainer: {message}\n")
    sys.exit(code)


# ---- cheap process observations -------------------------------------------------------------------------


def cache_entries():
    root = os.environ.get("DG_JIT_CACHE_DIR")
    if not root:
        return []
    try:
        return sorted(os.listdir(os.path.join(root, "cache")))
    except OSError:
        return []


def thread_count():
    return len(os.listdir("/proc/self/task"))


def thread_names():
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                out[tid] = f.read().strip()
        except OSError:
            pass
    return out


def live_children():
    from dgprecompile.host.procfs import proc_stats

    me = os.getpid()
    return {st.pid: st.comm for st in proc_stats() if st.ppid == me}


def reaped_children_marker():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (ru.ru_minflt, ru.ru_majflt, ru.ru_utime, ru.ru_stime)


_py_threads = [0]
_orig_start = threading.Thread.start


def _counting_start(self, *a, **k):
    _py_threads[0] += 1
    return _orig_start(self, *a, **k)


# ---- the calls ------------------------------------------------------------------------------------------


def ceil_div(a, b):
    return -(-a // b)


class Caller:
    def __init__(self, plan, torch, dg, legacy):
        self.plan, self.torch, self.dg, self.legacy = plan, torch, dg, legacy
        self.dev = torch.device("cuda")
        self.bufs = {}
        self.calls = 0
        if not legacy:
            transform = getattr(dg, "get_mn_major_tma_aligned_tensor", None)
            if transform is None:
                from deep_gemm.utils.layout import get_mn_major_tma_aligned_tensor as transform
            self.transform = transform

    def _fp8(self, *shape):
        return self.torch.empty(shape, device=self.dev, dtype=self.torch.float8_e4m3fn)

    def _buffers(self, pk):
        key = pk.key
        b = self.bufs.get(key.ident)
        if b is not None:
            return b
        torch, n, k, g = self.torch, key.n, key.k, key.num_groups
        kind = key.kernel_type.short
        if kind == "dense":
            rows = self.plan.max_tokens
            b = {"a": self._fp8(rows, k), "b": self._fp8(n, k),
                 "sfb": torch.ones((ceil_div(n, 128), ceil_div(k, 128)), device=self.dev, dtype=torch.float32),
                 "d": torch.empty((rows, n), device=self.dev, dtype=torch.bfloat16)}
        elif kind == "masked":
            b = {"a": self._fp8(g, MASKED_ROWS, k), "b": self._fp8(g, n, k),
                 "sfa": torch.ones((g, MASKED_ROWS, ceil_div(k, 128)), device=self.dev, dtype=torch.float32),
                 "sfb": torch.ones((g, ceil_div(n, 128), ceil_div(k, 128)), device=self.dev, dtype=torch.float32),
                 "d": torch.empty((g, MASKED_ROWS, n), device=self.dev, dtype=torch.bfloat16),
                 "masked_m": torch.zeros((g,), device=self.dev, dtype=torch.int32)}
        else:
            rows = ceil_div(self.plan.max_tokens, 128) * 128
            b = {"a": self._fp8(rows, k), "b": self._fp8(g, n, k),
                 "sfb": torch.ones((g, ceil_div(n, 128), ceil_div(k, 128)), device=self.dev, dtype=torch.float32),
                 "d": torch.empty((rows, n), device=self.dev, dtype=torch.bfloat16),
                 "m_indices": torch.zeros((rows,), device=self.dev, dtype=torch.int32)}
        self.bufs[key.ident] = b
        return b

    def _mn_major_scales(self, rows, k):
        # sglang_per_token_group_quant_fp8(column_major_scales=True, scale_tma_aligned=True)
        sf = self.torch.ones((ceil_div(k, 128), ceil_div(rows, 4) * 4), device=self.dev, dtype=self.torch.float32)
        return sf.t()[:rows]

    def m_for(self, pk, tokens):
        if pk.key.kernel_type.short == "masked":
            return max(1, min(pk.key.m_max, ceil_div(tokens * pk.key.m_max, self.plan.max_tokens)))
        return max(1, min(pk.key.m_max, tokens))

    def call(self, pk, m):
        b, key, dg = self._buffers(pk), pk.key, self.dg
        kind, k = key.kernel_type.short, key.k
        if kind == "dense":
            lhs, rhs, out = (b["a"][:m], self._mn_major_scales(m, k)), (b["b"], b["sfb"]), b["d"][:m]
            (dg.gemm_fp8_fp8_bf16_nt if self.legacy else dg.fp8_gemm_nt)(lhs, rhs, out)
        elif kind == "masked":
            b["masked_m"].fill_(min(m, MASKED_ROWS))
            if self.legacy:
                dg.m_grouped_gemm_fp8_fp8_bf16_nt_masked((b["a"], b["sfa"]), (b["b"], b["sfb"]), b["d"],
                                                         b["masked_m"], m)
            else:
                sfa = self.transform(b["sfa"])
                dg.fp8_m_grouped_gemm_nt_masked((b["a"], sfa), (b["b"], b["sfb"]), b["d"], b["masked_m"], m)
        else:
            rows = ceil_div(m, 128) * 128
            lhs, rhs = (b["a"][:rows], self._mn_major_scales(rows, k)), (b["b"], b["sfb"])
            fn = dg.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous if self.legacy else dg.m_grouped_fp8_gemm_nt_contiguous
            fn(lhs, rhs, b["d"][:rows], b["m_indices"][:rows])
        self.calls += 1


# ---- main -----------------------------------------------------------------------------------------------


def main(argv=None):
    args = parse_args(argv)
    try:
        from dgprecompile.planning.manifest import read_manifest
    except ImportError as exc:
        fail(EXIT_CANNOT_RUN, f"dgprecompile is not importable ({exc}); put the repository on PYTHONPATH")
    from dgprecompile.errors import DGError

    try:
        plan = read_manifest(args.manifest)
    except DGError as exc:
        fail(EXIT_CANNOT_RUN, exc.message)
    try:
        import torch
    except ImportError:
        fail(EXIT_CANNOT_RUN, "torch is not installed: this stand-in needs torch with CUDA and a Hopper GPU")
    if not torch.cuda.is_available():
        fail(EXIT_CANNOT_RUN, "needs a CUDA GPU (torch.cuda.is_available() is False); it runs on the GPU machine "
                              "under `dgprecompile launch`")
    try:
        import deep_gemm as dg
    except ImportError as exc:
        fail(EXIT_CANNOT_RUN, f"deep_gemm is not importable ({exc})")
    legacy = plan.profile.generation == "legacy"
    if legacy != hasattr(dg, "gemm_fp8_fp8_bf16_nt"):
        fail(EXIT_CANNOT_RUN, f"the manifest is for a {plan.profile.generation} DeepGEMM but {dg.__file__} has the "
                              f"{'legacy' if hasattr(dg, 'gemm_fp8_fp8_bf16_nt') else 'C++'} API")
    threading.Thread.start = _counting_start

    device_sms = torch.cuda.get_device_properties(0).multi_processor_count
    if plan.num_sms != device_sms and hasattr(dg, "set_num_sms"):
        dg.set_num_sms(plan.num_sms)
    caller = Caller(plan, torch, dg, legacy)
    rng = random.Random(args.seed)
    report = {
        "stand_in": "tests/gpu/standin_trainer.py (not SpecForge: DeepGEMM calls only)",
        "manifest": os.path.abspath(args.manifest), "generation": plan.profile.generation,
        "sglang_profile": plan.profile.id, "deepgemm_file": getattr(dg, "__file__", None),
        "device": torch.cuda.get_device_name(0), "device_sms": device_sms, "plan_num_sms": plan.num_sms,
        "keys": [[pk.key.kernel_type.short, pk.key.n, pk.key.k, pk.key.num_groups, pk.key.m_min, pk.key.m_max]
                 for pk in plan.keys],
        "plan_kernels": len(plan.kernels), "max_tokens": plan.max_tokens, "steps_requested": args.steps,
        "prime": args.prime, "seed": args.seed, "cache_dir": os.environ.get("DG_JIT_CACHE_DIR"),
        "env": {k: v for k, v in os.environ.items() if k.startswith(("SGL", "DG_JIT", "DGPRECOMPILE_"))},
        "steps_done": 0, "calls": 0, "error": None,
    }
    entries_before = cache_entries()
    report["entries_before"] = len(entries_before)
    after1 = {}
    threads_series = []
    children_after1 = {}
    start = time.perf_counter()
    code = EXIT_OK
    step = 0
    try:
        for step in range(1, args.steps + 1):
            tokens = rng.randint(1, plan.max_tokens)
            if step == 1 and args.prime:
                for pk in plan.keys:
                    for bucket in pk.buckets:
                        caller.call(pk, bucket.m_rep)
                        caller.call(pk, bucket.m_max)
            for pk in plan.keys:
                caller.call(pk, caller.m_for(pk, tokens))
            torch.cuda.synchronize()
            report["steps_done"] = step
            if step == 1:
                after1 = {"entries": cache_entries(), "threads": thread_count(), "thread_names": thread_names(),
                          "children": live_children(), "reaped": reaped_children_marker(),
                          "py_threads": _py_threads[0]}
                continue
            threads_series.append(thread_count())
            for pid, comm in live_children().items():
                if pid not in after1["children"]:
                    children_after1.setdefault(pid, comm)
    except BaseException as exc:  # noqa: BLE001 - we report whatever stops the run, then exit non-zero
        text = f"{type(exc).__module__}.{type(exc).__name__}: {exc}"
        refused = STRICT_MARK in text
        code = EXIT_REFUSED if refused else EXIT_ERROR
        report["error"] = {"step": step, "type": f"{type(exc).__module__}.{type(exc).__name__}",
                           "message": str(exc)[:4000], "strict_refusal": refused,
                           "traceback": traceback.format_exc(limit=6)[-4000:]}
        sys.stderr.write(f"standin_trainer: step {step} failed: {text}\n")
    finally:
        report["wall_seconds"] = round(time.perf_counter() - start, 2)
        report["calls"] = caller.calls
        entries_after = cache_entries()
        report["entries_after"] = len(entries_after)
        report["new_entries"] = sorted(set(entries_after) - set(entries_before))
        if after1:
            report["entries_after_step1"] = len(after1["entries"])
            report["new_entries_after_step1"] = sorted(set(entries_after) - set(after1["entries"]))
            report["threads_after_step1"] = after1["threads"]
            report["threads_max_after_step1"] = max(threads_series, default=after1["threads"])
            report["threads_min_after_step1"] = min(threads_series, default=after1["threads"])
            now = thread_names()
            report["new_threads_after_step1"] = {t: n for t, n in now.items() if t not in after1["thread_names"]}
            report["python_threads_started_after_step1"] = _py_threads[0] - after1["py_threads"]
            report["children_seen_after_step1"] = {str(p): c for p, c in children_after1.items()}
            reaped_now = reaped_children_marker()
            report["children_reaped_after_step1"] = reaped_now != after1["reaped"]
            report["zero_compiles_threads_processes_after_step1"] = (
                not report["new_entries_after_step1"] and not children_after1
                and not report["children_reaped_after_step1"] and report["python_threads_started_after_step1"] == 0
                and report["threads_max_after_step1"] <= after1["threads"])
        report["ok"] = code == EXIT_OK
        text = json.dumps(report, indent=1, default=str)
        if args.json_path:
            os.makedirs(os.path.dirname(os.path.abspath(args.json_path)), exist_ok=True)
            with open(args.json_path, "w") as f:
                f.write(text + "\n")
        summary = {k: report.get(k) for k in ("ok", "steps_done", "calls", "new_entries", "new_entries_after_step1",
                                              "threads_after_step1", "threads_max_after_step1",
                                              "children_seen_after_step1", "children_reaped_after_step1",
                                              "python_threads_started_after_step1", "wall_seconds")}
        print("standin_trainer: " + json.dumps(summary, default=str), flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
