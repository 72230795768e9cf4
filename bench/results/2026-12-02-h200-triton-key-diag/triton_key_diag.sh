#!/usr/bin/env bash
# Why a GPU-free Triton MoE warm misses on the GPU: the parts of every Triton cache key, recorded (tests/gpu/
# triton_keylog.py) in (a) the GPU-free warm (python -m dgprecompile.compile.triton_moe, GPU hidden) and (b) SGLang
# 0.5.14's own fused_experts on the H200 (tests/gpu/triton_moe_forward.py) into an EMPTY Triton cache, then
# (c) the same GPU run on the warm's cache (which entries it had to add). Nothing here is captured into a proof cache.
# Carry .whl (../shared/device/fetch-wheels.sh + fetch-sglang.sh + .whl/extra: jsonschema and its 4 wheels).
#   usage: MS=2,8,64,1000,8192 bench/results/2026-12-02-h200-triton-key-diag/triton_key_diag.sh      writes $OUT/diag/{summary.txt,*.jsonl,compare.txt}
set -uo pipefail
export PYTHONUNBUFFERED=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
root=$PWD; OUT=${OUT:-$root/out}; d=$OUT/diag; mkdir -p "$d"
MS=${MS:-2,8,64,1000,8192}
site=$(mktemp -d); w=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .whl/sgl_deep_gemm-0.1.3-*.whl \
  .whl/apache_tvm_ffi-*.whl .whl/sglang/*.whl .whl/extra/*.whl > "$d/install.txt" 2>&1
export PYTHONPATH="$site:$root/tests/standins:$root/tests/gpu:$root" DGP_STANDINS=sgl_kernel DGP_TRANSFORMERS_EXIST_OK=1
{ echo "bench/results/2026-12-02-h200-triton-key-diag/triton_key_diag.sh $(date -u +%FT%TZ) git ${DGP_GIT:-?} MS=$MS";
  python3 -c "import torch, sys, triton; print('torch', torch.__version__, 'triton', triton.__version__, triton.__file__)";
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } >> "$d/summary.txt" 2>&1
python3 bench/results/2026-12-02-h200-triton-key-diag/triton_keyparts.py >> "$d/summary.txt" 2>&1
SHAPE=(--experts 20 --global-experts 160 --hidden 6144 --intermediate 2560 --topk 8)
run_logged() { local log=$1; shift; DGP_TRITON_KEYLOG=$log python3 -c "import sys, runpy, triton_keylog; triton_keylog.install(); sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')" "$@"; }
echo "== (a) GPU-free warm" >> "$d/summary.txt"
CUDA_VISIBLE_DEVICES= DGP_TRITON_KEYLOG=$d/warm.jsonl python3 -c "import sys, triton_keylog; triton_keylog.install(); from dgprecompile.compile.triton_moe import main; sys.exit(main(sys.argv[1:]))" \
  "${SHAPE[@]}" --m "$MS" --cache-dir "$w/warm" > "$d/warm.json" 2> "$d/warm.err"; echo "warm rc=$?" >> "$d/summary.txt"
echo "== (b) GPU, empty cache" >> "$d/summary.txt"
TRITON_CACHE_DIR=$w/empty run_logged "$d/gpu_empty.jsonl" tests/gpu/triton_moe_forward.py "$MS" >> "$d/summary.txt" 2> "$d/gpu_empty.err"
echo "gpu rc=$? entries=$(ls $w/empty | wc -l)" >> "$d/summary.txt"
echo "== (c) GPU on the warm's cache" >> "$d/summary.txt"
ls "$w/warm/triton" > "$w/before"
TRITON_CACHE_DIR=$w/warm/triton run_logged "$d/gpu_warm.jsonl" tests/gpu/triton_moe_forward.py "$MS" >> "$d/summary.txt" 2> "$d/gpu_warm.err"
echo "gpu-on-warm rc=$? new: $(ls $w/warm/triton | comm -13 $w/before - | while read e; do ls $w/warm/triton/$e | grep -o '__grp__.*json'; done | sort | uniq -c | tr '\n' ' ')" >> "$d/summary.txt"
echo "== (d) GPU-visible warm" >> "$d/summary.txt"
DGP_TRITON_KEYLOG=$d/warm_gpuvis.jsonl python3 -c "import sys, triton_keylog; triton_keylog.install(); from dgprecompile.compile.triton_moe import main; sys.exit(main(sys.argv[1:]))" \
  "${SHAPE[@]}" --m "$MS" --cache-dir "$w/warm2" > "$d/warm_gpuvis.json" 2> "$d/warm_gpuvis.err"; echo "warm-gpu-visible rc=$?" >> "$d/summary.txt"
python3 tests/gpu/triton_keylog.py "$d/warm.jsonl" "$d/gpu_empty.jsonl" > "$d/compare.txt" 2>&1
python3 tests/gpu/triton_keylog.py "$d/warm_gpuvis.jsonl" "$d/gpu_empty.jsonl" >> "$d/compare.txt" 2>&1
tail -5 "$d/gpu_empty.err" "$d/warm.err" >> "$d/summary.txt"
