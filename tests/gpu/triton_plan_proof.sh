#!/usr/bin/env bash
# The default 0.5.14 server's MoE path on the H200, planned: the README's server command (Qwen3-Coder-480B FP8
# --tp 8 --ep 8; --moe-runner-backend auto = SGLang's Triton fused_moe_kernel) planned from the command alone,
# warmed by `dgprecompile warm` with the GPU hidden (DeepGEMM with nvcc, SGLang's JIT modules with its builders,
# the Triton MoE items with SGLang's fused_experts on meta tensors and Triton's own JIT), verified, one
# `launch --capture --no-strict` for what no plan can name (Triton's per-machine cuda_utils host module, inductor's
# torch.compile of moe_sum_reduce), then a strict `launch` of SGLang's own fused_experts on the GPU over MS:
# expect exit 0 and no new Triton entry; then one planned fused_moe_kernel entry deleted: refused by name.
# Carry .whl (../shared/device/fetch-wheels.sh + fetch-sglang.sh + jsonschema's wheels); sgl-kernel is
# tests/standins' named stand-in, and tests/gpu/triton_moe_forward.py names its two torch stand-ins.
#   usage: tests/gpu/triton_plan_proof.sh     writes $OUT/summary.txt, plan.txt, warm.json, verify.json, logs.txt
set -uo pipefail
export PYTHONUNBUFFERED=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
root=$PWD; OUT=${OUT:-$root/out}; mkdir -p "$OUT"
MS=${MS:-1-512,513-8192:31,8192}
t0=$(date +%s); stamp() { echo "=== $1 $(date -u +%FT%TZ) (+$(( $(date +%s) - t0 )) s)" | tee -a "$OUT/logs.txt"; }
site=$(mktemp -d); w=$(mktemp -d); cache=$w/cache
stamp install
python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .whl/sgl_deep_gemm-0.1.3-*.whl \
  .whl/apache_tvm_ffi-*.whl .whl/sglang/*.whl >> "$OUT/logs.txt" 2>&1
export PYTHONPATH="$site:$root/tests/standins:$root" DGP_STANDINS=sgl_kernel DGP_TRANSFORMERS_EXIST_OK=1
{ echo "tests/gpu/triton_plan_proof.sh $(date -u +%FT%TZ) git ${DGP_GIT:-?} MS=$MS";
  python3 -c "import torch, sys, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'python', sys.version.split()[0])";
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nvcc --version | tail -1; } >> "$OUT/summary.txt" 2>&1
dg() { python3 -m dgprecompile "$@"; }
count() { find "$1" -mindepth 1 -maxdepth 1 -type d 2>/dev/null | wc -l; }
SERVER="python -m sglang.launch_server --model-path Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8 --tp 8 --ep 8"
stamp plan
dg plan --sglang-cmd "$SERVER" --sglang 0.5.14 --no-sglang-precompile -o "$w/plan.yaml" > "$OUT/plan.txt" 2>&1
echo "plan rc=$?" | tee -a "$OUT/summary.txt"; cp "$w/plan.yaml" "$OUT/plan.yaml"
stamp warm
CUDA_VISIBLE_DEVICES= dg warm --manifest "$w/plan.yaml" --cache-dir "$cache" --backend nvcc --sglang-jit on --json \
  > "$OUT/warm.json" 2> "$w/warm.err"
echo "warm (GPU hidden) rc=$? triton dirs=$(count "$cache/triton")" | tee -a "$OUT/summary.txt"; tail -15 "$w/warm.err" >> "$OUT/logs.txt"
dg verify --manifest "$w/plan.yaml" --cache-dir "$cache" --json > "$OUT/verify.json" 2>> "$OUT/logs.txt"
echo "verify rc=$?" | tee -a "$OUT/summary.txt"
FWD=(python3 "$root/tests/gpu/triton_moe_forward.py")
stamp capture
dg launch --manifest "$w/plan.yaml" --cache-dir "$cache" --capture --no-strict -- "${FWD[@]}" 1-64 \
  > "$w/cap.out" 2> "$w/cap.err"
echo "capture (m 1-64) rc=$? triton dirs=$(count "$cache/triton")" | tee -a "$OUT/summary.txt"
grep -A12 "per JIT family" "$w/cap.err" >> "$OUT/logs.txt"; tail -5 "$w/cap.err" >> "$OUT/logs.txt"
stamp strict
ls "$cache/triton" > "$w/before.txt"
dg launch --manifest "$w/plan.yaml" --cache-dir "$cache" -- "${FWD[@]}" "$MS" > "$OUT/strict.out" 2> "$w/strict.err"
rc=$?; ls "$cache/triton" > "$w/after.txt"
echo "strict rc=$rc new triton entries: $(comm -13 "$w/before.txt" "$w/after.txt" | while read d; do ls "$cache/triton/$d" | sed -n 's/^__grp__\(.*\)\.json$/\1/p'; done | sort | uniq -c | tr '\n' ';')" | tee -a "$OUT/summary.txt"
grep -i "refused\|error" "$w/strict.err" | head -5 | tee -a "$OUT/summary.txt"; tail -c 2500 "$w/strict.err" > "$OUT/strict_stderr.txt"
stamp strict-deleted
victim=$(grep -l fused_moe_kernel "$cache"/triton/*/__grp__*.json | head -1 | xargs dirname)
echo "deleted $(basename "$victim")" | tee -a "$OUT/summary.txt"; rm -rf "$victim"
dg verify --manifest "$w/plan.yaml" --cache-dir "$cache" > "$w/verify_deleted.txt" 2>&1
echo "verify after delete rc=$?" | tee -a "$OUT/summary.txt"; grep -i "triton" "$w/verify_deleted.txt" | head -5 >> "$OUT/summary.txt"
dg launch --manifest "$w/plan.yaml" --cache-dir "$cache" --allow-missing -- "${FWD[@]}" "$MS" > "$w/del.out" 2> "$w/del.err"
echo "strict-deleted rc=$?" | tee -a "$OUT/summary.txt"
grep -m3 "dgprecompile strict mode\|strict mode refused" "$w/del.err" | tee -a "$OUT/summary.txt"
cp "$cache/dgprecompile/index.json" "$OUT/index.json" 2>/dev/null
stamp done
