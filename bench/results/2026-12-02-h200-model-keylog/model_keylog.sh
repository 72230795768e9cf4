#!/usr/bin/env bash
# Why SGLang's own MoE layer misses the GPU-free Triton warm (issue 33): the parts of every Triton cache key
# (tests/gpu/triton_keylog.py, loaded at start-up of every Python through a .pth line in the site's packages) in
# (a) the real `dgprecompile warm` of the server plan (GPU hidden; its chunk processes log too), (b) the model driver
# (SGLang's own model, dgprecompile/launch/model_driver.py) under strict launch on that cache (refused keys are
# logged before the refusal), and (c) the same driver unwarmed on an empty Triton cache (every key it compiles).
# Carry .whl (../shared/device/fetch-wheels.sh + fetch-sglang.sh + .whl/extra).
#   usage: SGLANG=0.5.14 SERVER="..." CONFIG=config.json [MS=1,2,3,8,16,64,1000,8192] DGP_GIT=<sha> \
#          bash bench/results/2026-12-02-h200-model-keylog/model_keylog.sh        writes $OUT/keylog/{summary.txt,warm.jsonl,strict.jsonl,free.jsonl,...}
set -uo pipefail
export PYTHONUNBUFFERED=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
root=$PWD; OUT=${OUT:-$root/out}; d=$OUT/${NAME:-keylog}; mkdir -p "$d"
MS=${MS:-1,2,3,8,16,64,1000,8192}; SGLANG=${SGLANG:-0.5.14}
: "${SERVER:?SERVER= the sglang server command}" "${CONFIG:?CONFIG= the model config.json}"
site=$(mktemp -d); w=$(mktemp -d); cache=$w/cache; model=$w/model; mkdir -p "$model"; cp "$CONFIG" "$model/config.json"
python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .whl/sgl_deep_gemm-0.1.3-*.whl \
  .whl/apache_tvm_ffi-*.whl .whl/sglang/*.whl .whl/extra/*.whl > "$d/install.txt" 2>&1
export PYTHONPATH="$site:$root/tests/standins:$root/tests/gpu:$root" DGP_STANDINS=sgl_kernel,flashinfer DGP_TRANSFORMERS_EXIST_OK=1
pth=$(python3 -c "import site; print(site.getsitepackages()[0])")/dgp_triton_keylog.pth
echo 'import os; os.environ.get("DGP_TRITON_KEYLOG") and __import__("triton_keylog").install()' > "$pth"
LOCAL=$(python3 -c "import shlex,sys; w=shlex.split(sys.argv[1]); i=w.index('--model-path'); w[i+1]=sys.argv[2]; print(shlex.join(w))" "$SERVER" "$model")
{ echo "bench/results/2026-12-02-h200-model-keylog/model_keylog.sh $(date -u +%FT%TZ) git ${DGP_GIT:-?} sglang $SGLANG MS=$MS"; echo "server: $SERVER";
  python3 -c "import torch, sys, triton; print('torch', torch.__version__, 'triton', triton.__version__)";
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } >> "$d/summary.txt" 2>&1
dg() { python3 -m dgprecompile "$@"; }
dg plan --sglang "$SGLANG" --sglang-cmd "$LOCAL" -o "$d/plan.yaml" > "$d/plan.txt" 2>&1; echo "plan rc=$?" >> "$d/summary.txt"
CUDA_VISIBLE_DEVICES= DGP_TRITON_KEYLOG=$d/warm.jsonl dg warm --manifest "$d/plan.yaml" --cache-dir "$cache" \
  --backend nvcc --sglang-jit on > "$d/warm.txt" 2>&1; echo "warm rc=$?" >> "$d/summary.txt"
DRIVER=(python3 -m dgprecompile.launch.model_driver --sglang-cmd "$LOCAL" --model-dir "$model" --m "$MS")
DGP_TRITON_KEYLOG=$d/strict.jsonl dg launch --manifest "$d/plan.yaml" --cache-dir "$cache" -- "${DRIVER[@]}" \
  --report "$d/strict_driver.json" > "$d/strict.out" 2> "$d/strict.err"; echo "strict rc=$?" >> "$d/summary.txt"
TRITON_CACHE_DIR=$w/free DGP_TRITON_KEYLOG=$d/free.jsonl "${DRIVER[@]}" --report "$d/free_driver.json" \
  > "$d/free.out" 2> "$d/free.err"; echo "free rc=$? entries=$(ls "$w/free" | wc -l)" >> "$d/summary.txt"
rm -f "$pth"
for pair in "warm strict" "warm free"; do set -- $pair
  python3 tests/gpu/triton_keylog.py "$d/$1.jsonl" "$d/$2.jsonl" >> "$d/compare.txt" 2>&1; done
tail -c 1500 "$d/strict.err" "$d/free.err" >> "$d/summary.txt"
cat "$d/summary.txt" "$d/compare.txt" | cut -c1-700
