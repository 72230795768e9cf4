#!/usr/bin/env bash
# Issue 21 device proof (H200): SGLang 0.5.14's own Triton MoE path finds every fused_moe_kernel warm after a
# GPU-free warm, and `launch --capture` / strict mode work on it. Carry .whl (../shared/device/fetch-wheels.sh +
# fetch-sglang.sh) and DEV (a copy of this branch's dgprecompile/ and tests/, default .dev-triton; it may hold
# cpu-warm/triton: the cache warmed on the CPU machine). sgl-kernel is NOT carried: tests/standins stands in for
# it, and tests/gpu/triton_moe_forward.py names its two torch stand-ins (moe_align_block_size, moe_sum_reduce).
#   1. warm     python -m dgprecompile.compile.triton_moe with the GPU hidden (CUDA_VISIBLE_DEVICES=''), m 1-8192
#   2. forward  SGLang's fused_experts on the GPU over MS with TRITON_CACHE_DIR = that cache: count new dirs
#   3. carried  the same forward (m 1-64) on the cache warmed on the CPU machine (another Python build of Triton)
#   4. capture  dgprecompile launch --capture (cold cache) -- forward; then strict: expect 0 new; then one
#               fused_moe_kernel entry deleted: expect a refusal naming it
set -uo pipefail
export PYTHONUNBUFFERED=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
root=$PWD; DEV=${DEV:-$root/.dev-triton}; OUT=${OUT:-$root/out}; mkdir -p "$OUT"
MS=${MS:-1-512,513-8192:31,8192}
t0=$(date +%s); stamp() { echo "=== $1 $(date -u +%FT%TZ) (+$(( $(date +%s) - t0 )) s)" | tee -a "$OUT/logs.txt"; }
echo "tests/gpu/triton_moe_proof.sh on $(hostname) $(date -u +%FT%TZ); DEV $(cat "$DEV/DGP_COMMIT" 2>/dev/null)" > "$OUT/COMMAND.txt"
site=$(mktemp -d); W=$(mktemp -d)
stamp install
python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .whl/apache_tvm_ffi-*.whl .whl/sglang/*.whl >> "$OUT/logs.txt" 2>&1
export PYTHONPATH="$site:$DEV/tests/standins:$DEV" DGP_STANDINS=sgl_kernel DGP_TRANSFORMERS_EXIST_OK=1
export TVM_FFI_CACHE_DIR=$W/tvm-ffi TORCHINDUCTOR_CACHE_DIR=$W/inductor
python3 - > "$OUT/versions.json" <<'PY'
import hashlib, json, platform, subprocess, torch, triton
from triton.runtime.cache import triton_key
print(json.dumps({"python": platform.python_version(), "torch": torch.__version__, "triton": triton.__version__,
                  "triton_key_sha256": hashlib.sha256(triton_key().encode()).hexdigest(),
                  "gpu": torch.cuda.get_device_name(0)}))
PY
count() { find "$1" -mindepth 1 -maxdepth 1 -type d 2>/dev/null | wc -l; }
names() { for d in "$1"/*/; do ls "$d" | sed -n 's/^__grp__\(.*\)\.json$/\1/p'; done 2>/dev/null | sort | uniq -c | tr '\n' ';'; }
stamp warm
# run from DEV: `python -m` puts the working directory first on sys.path, and the device's checkout is another one
(cd "$DEV" && CUDA_VISIBLE_DEVICES= python3 -m dgprecompile.compile.triton_moe --experts 20 --global-experts 160 --hidden 6144 \
  --intermediate 2560 --topk 8 --m 1-8192 --cache-dir "$W/wroot" > "$OUT/warm.json" 2>> "$W/warm.err")
echo "warm rc=$? dirs=$(count "$W/wroot/triton") kernels: $(names "$W/wroot/triton")" | tee -a "$OUT/logs.txt"; tail -3 "$W/warm.err" >> "$OUT/logs.txt"
stamp forward
b=$(count "$W/wroot/triton"); ls "$W/wroot/triton" > "$W/before.txt"
TRITON_CACHE_DIR=$W/wroot/triton python3 "$DEV/tests/gpu/triton_moe_forward.py" "$MS" > "$OUT/forward.json" 2>> "$W/fwd.err"
rc=$?; ls "$W/wroot/triton" > "$W/after.txt"
echo "forward rc=$rc before=$b after=$(count "$W/wroot/triton") new: $(comm -13 "$W/before.txt" "$W/after.txt" | while read d; do ls "$W/wroot/triton/$d" | sed -n 's/^__grp__\(.*\)\.json$/\1/p'; done | sort | uniq -c | tr '\n' ';')" | tee -a "$OUT/logs.txt"
tail -5 "$W/fwd.err" >> "$OUT/logs.txt"; echo "inductor files: $(find "$W/inductor" -type f 2>/dev/null | wc -l)" | tee -a "$OUT/logs.txt"
stamp carried
if [ -d "$DEV/cpu-warm/triton" ]; then
  cp -r "$DEV/cpu-warm/triton" "$W/cpu"; b=$(count "$W/cpu")
  TRITON_CACHE_DIR=$W/cpu python3 "$DEV/tests/gpu/triton_moe_forward.py" 1-64 > "$OUT/carried.json" 2>> "$W/car.err"
  echo "carried rc=$? before=$b after=$(count "$W/cpu")" | tee -a "$OUT/logs.txt"; cp "$DEV/cpu-warm/versions.json" "$OUT/cpu_versions.json" 2>/dev/null
fi
dg() { (cd "$DEV" && python3 -m dgprecompile "$@"); }
L=(launch --model Qwen3-Coder-480B --tp 8 --ep 8 --sglang 0.5.14 --allow-missing --cache-dir "$W/cap")
stamp capture
unset TVM_FFI_CACHE_DIR TORCHINDUCTOR_CACHE_DIR
dg "${L[@]}" --capture -- python3 "$DEV/tests/gpu/triton_moe_forward.py" "$MS" > "$W/cap.out" 2> "$W/cap.err"
echo "capture rc=$? triton dirs=$(count "$W/cap/triton") filed=$(python3 -c "import json,sys; i=json.load(open(sys.argv[1])); print(sum(1 for v in i['extra'].values() if v.get('area')=='triton'))" "$W/cap/dgprecompile/index.json" 2>&1)" | tee -a "$OUT/logs.txt"
grep -A12 "per JIT family" "$W/cap.err" >> "$OUT/logs.txt"
stamp strict
b=$(count "$W/cap/triton")
dg "${L[@]}" -- python3 "$DEV/tests/gpu/triton_moe_forward.py" "$MS" > "$W/strict.out" 2> "$W/strict.err"
echo "strict rc=$? before=$b after=$(count "$W/cap/triton")" | tee -a "$OUT/logs.txt"; grep -i "refused\|error" "$W/strict.err" | head -5 >> "$OUT/logs.txt"
stamp strict-deleted
victim=$(grep -l fused_moe_kernel "$W"/cap/triton/*/__grp__*.json | head -1 | xargs dirname)
echo "deleted $(basename "$victim")" | tee -a "$OUT/logs.txt"; rm -rf "$victim"
dg "${L[@]}" -- python3 "$DEV/tests/gpu/triton_moe_forward.py" "$MS" > "$W/del.out" 2> "$W/del.err"
echo "strict-deleted rc=$?" | tee -a "$OUT/logs.txt"; grep -m3 "dgprecompile strict mode\|strict mode refused" "$W/del.err" | tee -a "$OUT/logs.txt"
cp "$W/cap/dgprecompile/index.json" "$OUT/capture_index.json" 2>/dev/null
tail -c 4000 "$W/cap.err" > "$OUT/capture_stderr.txt"; tail -c 3000 "$W/del.err" > "$OUT/deleted_stderr.txt"
stamp done
