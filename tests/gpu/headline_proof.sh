#!/usr/bin/env bash
# The README's headline on the H200: the SGLang 0.5.14 server command (Qwen3-Coder-480B FP8 --tp 8 --ep 8)
# planned, warmed GPU-free (DeepGEMM with nvcc + SGLang's own JIT modules with SGLang's builders), the one thing no
# plan can name (Triton's host module cuda_utils, built by Triton at its first import on a machine) filled by one
# `launch --capture` run, then SGLang's own code in strict mode: `verify --live` (its Fp8LinearMethod over the
# dense keys + every planned JIT module through its entry point) and a strict `launch` of a job that imports
# SGLang's JIT modules and Triton: expect 0 refused, 0 compiled of any kind. Then one module deleted: refused by
# name. Carry .whl (../shared/device/fetch-wheels.sh + fetch-sglang.sh); sgl-kernel is tests/standins' named
# stand-in (none of these paths calls it). Writes to $OUT: summary.txt, warm.json, verify.json, live.json,
# launch_strict.txt, launch_deleted.txt, capture.txt, logs.txt.   usage: tests/gpu/headline_proof.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
root=$PWD
OUT=${OUT:-$root/out}; mkdir -p "$OUT"
t0=$(date +%s)
stamp() { echo "=== $1 $(date -u +%FT%TZ) (+$(( $(date +%s) - t0 )) s)" | tee -a "$OUT/logs.txt"; }
site=$(mktemp -d)
stamp install
python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .whl/sgl_deep_gemm-0.1.3-*.whl \
  .whl/apache_tvm_ffi-*.whl .whl/sglang/*.whl >> "$OUT/logs.txt" 2>&1
export PYTHONPATH="$site:$root/tests/standins:$root${PYTHONPATH:+:$PYTHONPATH}"
export DGP_STANDINS=${DGP_STANDINS:-sgl_kernel} DGP_TRANSFORMERS_EXIST_OK=1
{ echo "tests/gpu/headline_proof.sh $(date -u +%FT%TZ) git ${DGP_GIT:-?}";
  python3 -c "import torch, sys, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'python', sys.version.split()[0])";
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nvcc --version | tail -1; } >> "$OUT/summary.txt" 2>&1
w=$(mktemp -d); cache=$w/cache
dg() { python3 -m dgprecompile "$@"; }
SERVER="python -m sglang.launch_server --model-path Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8 --tp 8 --ep 8"
stamp plan
dg plan --sglang-cmd "$SERVER" --sglang 0.5.14 --no-sglang-precompile -o "$w/plan.yaml" >> "$OUT/logs.txt" 2>&1
echo "plan rc=$?" | tee -a "$OUT/summary.txt"
stamp warm
CUDA_VISIBLE_DEVICES= dg warm --manifest "$w/plan.yaml" --cache-dir "$cache" --backend nvcc --sglang-jit on --json \
  > "$OUT/warm.json" 2> "$w/warm.err"
echo "warm (GPU hidden) rc=$?" | tee -a "$OUT/summary.txt"; tail -15 "$w/warm.err" >> "$OUT/logs.txt"
dg verify --manifest "$w/plan.yaml" --cache-dir "$cache" --json > "$OUT/verify.json" 2>> "$OUT/logs.txt"
echo "verify rc=$?" | tee -a "$OUT/summary.txt"
stamp capture
cat > "$w/triton_first_use.py" <<'PY'
import triton
from triton.runtime.driver import driver
print("triton host module:", type(driver.active.utils).__name__)
PY
dg launch --manifest "$w/plan.yaml" --cache-dir "$cache" --capture --no-strict -- python3 "$w/triton_first_use.py" \
  > "$OUT/capture.txt" 2>&1
echo "capture rc=$?" | tee -a "$OUT/summary.txt"
export TRITON_CACHE_DIR=$cache/triton  # the live check reads Triton where launch points it
stamp live
dg verify --manifest "$w/plan.yaml" --cache-dir "$cache" --live --live-m edges --live-sample 8 \
  --live-log "$w/live.log" --json > "$OUT/live.json" 2>> "$OUT/logs.txt"
echo "live (strict) rc=$?" | tee -a "$OUT/summary.txt"; tail -c 1500 "$w/live.log" >> "$OUT/logs.txt"
stamp launch
cat > "$w/job.py" <<'PY'
import torch, triton
from triton.runtime.driver import driver
from sglang.jit_kernel.clamp_position import clamp_position_cuda
driver.active.utils
print("clamp", clamp_position_cuda(torch.tensor([1, 5, 9], device="cuda", dtype=torch.int64)).tolist())
PY
dg launch --manifest "$w/plan.yaml" --cache-dir "$cache" -- python3 "$w/job.py" > "$OUT/launch_strict.txt" 2>&1
echo "launch strict rc=$?" | tee -a "$OUT/summary.txt"
victim=$(ls "$cache/tvm-ffi" | grep '^sgl_kernel_jit_clamp_position_int64_t_')
rm -rf "$cache/tvm-ffi/$victim"; echo "deleted tvm-ffi/$victim" >> "$OUT/summary.txt"
dg launch --manifest "$w/plan.yaml" --cache-dir "$cache" --allow-missing -- python3 "$w/job.py" \
  > "$OUT/launch_deleted.txt" 2>&1
echo "launch strict, module deleted rc=$?" | tee -a "$OUT/summary.txt"
python3 - "$OUT" >> "$OUT/summary.txt" 2>&1 <<'PY'
import json, sys
out = sys.argv[1]
w = json.load(open(f"{out}/warm.json"))
print("warm:", {k: w.get(k) for k in ("kernels", "sglang_jit_modules", "compiled", "failed", "wall_seconds")})
v = json.load(open(f"{out}/live.json"))
print("live:", v.get("verdict"))
for u in v.get("units", []):
    found = {k: len(u.get(k, [])) for k in ("refused", "new_deepgemm", "new_jit", "new_triton")}
    print(" ", u.get("module") or "+".join(map(str, u.get("keys", []))), "calls", u.get("calls"), found)
print("outside:", v.get("outside"))
PY
stamp done
