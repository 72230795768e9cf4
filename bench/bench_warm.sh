#!/usr/bin/env bash
# Device benchmark (one run, side by side) for the Qwen3-Coder-480B tp8/ep8 plan:
#   (a) SGLang's way: one process launching every m of every key in order on a cold cache
#       (sglang 0.5.12-0.5.16's _compile_deep_gemm_one_type_all, with its row-major warm-up scales);
#   (b) dgprecompile warm --jobs $JOBS on a cold cache;
#   (c) the limit: the sum of single-kernel compile times (from (b)'s index) / workers.
# Then a sweep of every m through the real call path on (b)'s cache, which must create no entry.
# usage: bench/bench_warm.sh MANIFEST OUTDIR [JOBS] [BACKEND]      (the C++-JIT DeepGEMM on PYTHONPATH)
# The bench measures DeepGEMM's warm: (b) runs with --sglang-jit off (SGLANG_JIT=on|auto to include the manifest's
# SGLang JIT modules and Triton MoE items, which need that sglang installed beside it; the bundled 0.5.12-0.5.16
# manifests hold them, and without sglang `warm --sglang-jit auto` warms the rest and exits 3). Without a GPU
# (the CPU machine; BENCH_GPU=0 forces it) (a) and the sweep cannot run: (b) and (c) are measured and the summary
# says what was not run (null), so the bench still reaches its summary.
set -euo pipefail
manifest=$1; out=$2; jobs=${3:-$(nproc)}; backend=${4:-auto}; sglang_jit=${SGLANG_JIT:-off}
gpu=${BENCH_GPU:-$(python3 -c 'import torch; print(int(torch.cuda.is_available()))' 2>/dev/null || echo 0)}
mkdir -p "$out"
a_cache=$(mktemp -d); b_cache=$(mktemp -d)
t0=$(date +%s.%N)
if [ "$gpu" = 1 ]; then
  python3 tests/gpu/sweep_runtime.py --manifest "$manifest" --cache-dir "$a_cache" --sglang-warmup --json "$out/a_sglang_way.json"
else
  echo "bench: no GPU here: (a) SGLang's way and the sweep after (b) need one; not run" >&2
fi
t1=$(date +%s.%N)
python3 -m dgprecompile warm --manifest "$manifest" --cache-dir "$b_cache" --jobs "$jobs" --backend "$backend" \
  --sglang-jit "$sglang_jit" --json > "$out/b_warm.json"
t2=$(date +%s.%N)
if [ "$gpu" = 1 ]; then
  python3 tests/gpu/sweep_runtime.py --manifest "$manifest" --cache-dir "$b_cache" --json "$out/b_then_sweep.json"
fi
cp "$b_cache/dgprecompile/index.json" "$out/b_index.json"
python3 - "$out" "$t0" "$t1" "$t2" "$jobs" "$gpu" "$sglang_jit" <<'PY'
import json, os, sys
out, t0, t1, t2, jobs, gpu, sglang_jit = sys.argv[1], *map(float, sys.argv[2:5]), int(sys.argv[5]), sys.argv[6] == "1", sys.argv[7]
def load(name):
    path = f"{out}/{name}"
    return json.load(open(path)) if os.path.exists(path) else None
index = load("b_index.json")
single = [r["seconds"] for r in index["kernels"].values() if r.get("seconds")]
a, b = (t1 - t0 if gpu else None), t2 - t1
c = sum(single) / jobs
sweep, a_run = load("b_then_sweep.json"), load("a_sglang_way.json")
res = {"a_sglang_way_s": a and round(a, 1), "b_dgprecompile_warm_s": round(b, 1), "c_limit_s": round(c, 1),
       "a_over_b": a and round(a / b, 2), "b_over_c": round(b / c, 2), "jobs": jobs, "kernels": len(single),
       "single_kernel_s_sum": round(sum(single), 1), "single_kernel_s_min_max": [round(min(single), 2), round(max(single), 2)],
       "a_entries_created": a_run and a_run["new_entries_total"],
       "sweep_after_warm_new_entries": sweep and sweep["new_entries_total"], "sweep_calls": sweep and sweep["calls"],
       "gpu": gpu, "sglang_jit": sglang_jit,
       "not_run": [] if gpu else ["(a) SGLang's way", "the sweep after (b)"],
       "b_timeline": load("b_warm.json").get("timeline")}
json.dump(res, open(f"{out}/bench_summary.json", "w"), indent=1)
print(json.dumps(res, indent=1))
PY
