#!/usr/bin/env bash
# Device benchmark (one run, side by side) for the Qwen3-Coder-480B tp8/ep8 plan:
#   (a) SGLang's way: one process launching every m of every key in order on a cold cache
#       (sglang 0.5.12-0.5.16's _compile_deep_gemm_one_type_all, with its row-major warm-up scales);
#   (b) dgprecompile warm --jobs $JOBS on a cold cache;
#   (c) the limit: the sum of single-kernel compile times (from (b)'s index) / workers.
# Then a sweep of every m through the real call path on (b)'s cache, which must create no entry.
# usage: bench/bench_warm.sh MANIFEST OUTDIR [JOBS] [BACKEND]      (needs a GPU and the C++-JIT DeepGEMM on PYTHONPATH)
set -euo pipefail
manifest=$1; out=$2; jobs=${3:-$(nproc)}; backend=${4:-auto}
mkdir -p "$out"
a_cache=$(mktemp -d); b_cache=$(mktemp -d)
t0=$(date +%s.%N)
python3 tests/gpu/sweep_runtime.py --manifest "$manifest" --cache-dir "$a_cache" --sglang-warmup --json "$out/a_sglang_way.json"
t1=$(date +%s.%N)
python3 -m dgprecompile warm --manifest "$manifest" --cache-dir "$b_cache" --jobs "$jobs" --backend "$backend" --json > "$out/b_warm.json"
t2=$(date +%s.%N)
python3 tests/gpu/sweep_runtime.py --manifest "$manifest" --cache-dir "$b_cache" --json "$out/b_then_sweep.json"
cp "$b_cache/dgprecompile/index.json" "$out/b_index.json"
python3 - "$out" "$t0" "$t1" "$t2" "$jobs" <<'PY'
import json, sys
out, t0, t1, t2, jobs = sys.argv[1], *map(float, sys.argv[2:5]), int(sys.argv[5])
index = json.load(open(f"{out}/b_index.json"))
single = [r["seconds"] for r in index["kernels"].values() if r.get("seconds")]
a, b = t1 - t0, t2 - t1
c = sum(single) / jobs
sweep = json.load(open(f"{out}/b_then_sweep.json"))
res = {"a_sglang_way_s": round(a, 1), "b_dgprecompile_warm_s": round(b, 1), "c_limit_s": round(c, 1),
       "a_over_b": round(a / b, 2), "b_over_c": round(b / c, 2), "jobs": jobs, "kernels": len(single),
       "single_kernel_s_sum": round(sum(single), 1), "single_kernel_s_min_max": [round(min(single), 2), round(max(single), 2)],
       "a_entries_created": json.load(open(f"{out}/a_sglang_way.json"))["new_entries_total"],
       "sweep_after_warm_new_entries": sweep["new_entries_total"], "sweep_calls": sweep["calls"],
       "b_timeline": json.load(open(f"{out}/b_warm.json")).get("timeline")}
json.dump(res, open(f"{out}/bench_summary.json", "w"), indent=1)
print(json.dumps(res, indent=1))
PY
