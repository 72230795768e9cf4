#!/usr/bin/env bash
# sglang 0.5.23's Triton MoE keys on the H200: the 480B tp8/ep8 server command planned with --sglang 0.5.23 (its
# Triton item: m 1..512 every m, one per residue mod 16 above, 8192), the item's own warm command (the argv `warm`
# runs, TRITON_MOE.warm_argv) and each model-path Triton item's (TRITON_PATH.warm_argv) with the GPU hidden, then
# SGLang 0.5.23's own fused_experts on the GPU over MS with TRITON_CACHE_DIR = that cache: count the new entries
# per kernel (expect none: fused_moe_kernel, and the combine's _moe_sum_reduce_kernel at m <= 32 on sm_90). Not strict: 0.5.23's activation
# and quantisation are its ninja JIT modules, built here at first use (this checks Triton's keys only).
# Carry .dev-0523 (prepare: tests/gpu/triton_moe_0523_proof.sh prepare: cp312 wheels of sglang 0.5.23 and what its
# MoE path imports; the device's own torch 2.11 / triton 3.6.0 / transformers). sgl-kernel is tests/standins' named
# stand-in; tests/gpu/triton_moe_forward.py names its two torch stand-ins.
set -uo pipefail
if [ "${1:-}" = prepare ]; then
  d=.dev-0523/whl; mkdir -p "$d"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_26_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$d" \
    sglang==0.5.23 apache-tvm-ffi==0.1.11 msgspec==0.23.0 orjson==3.13.0 psutil==7.2.2 pybase64==1.5.1 \
    starlette==1.10.0 anyio==4.16.0 pyzmq==27.3.0 tqdm==4.70.1 ipython==9.18.1 traitlets==5.16.1 dill==0.4.1 \
    pydantic==2.11.10 pydantic-core==2.33.2 annotated-types==0.8.0 typing-inspection==0.4.5 sniffio==1.3.1 \
    jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1 attrs==26.1.0
  du -sh .dev-0523; exit 0
fi
export PYTHONUNBUFFERED=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
root=$PWD; OUT=${OUT:-$root/out}; mkdir -p "$OUT"; MS=${MS:-1-512,513-8192:31,8192}
t0=$(date +%s); stamp() { echo "=== $1 $(date -u +%FT%TZ) (+$(( $(date +%s) - t0 )) s)" | tee -a "$OUT/logs.txt"; }
site=$(mktemp -d); w=$(mktemp -d)
stamp install
python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .dev-0523/whl/*.whl >> "$OUT/logs.txt" 2>&1
export PYTHONPATH="$site:$root/tests/standins:$root" DGP_STANDINS=sgl_kernel DGP_TRANSFORMERS_EXIST_OK=1
export TVM_FFI_CACHE_DIR=$w/tvm-ffi SGLANG_JIT_CACHE_DIR=$w/sgl-jit TORCHINDUCTOR_CACHE_DIR=$w/inductor
{ echo "tests/gpu/triton_moe_0523_proof.sh $(date -u +%FT%TZ) git ${DGP_GIT:-?} MS=$MS";
  python3 -c "import torch, sys, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__, 'python', sys.version.split()[0])";
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } >> "$OUT/summary.txt" 2>&1
SERVER="python -m sglang.launch_server --model-path Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8 --tp 8 --ep 8"
stamp plan
# the plan is made for the GPU that came (its tuned fused-MoE config is chosen by the device's name)
gpu=$(python3 -c "import sys, torch; from dgprecompile.planning.plan import gpu_named; print(gpu_named(torch.cuda.get_device_name()) or 'h200')" 2>/dev/null || echo h200)
python3 -m dgprecompile plan --sglang-cmd "$SERVER" --sglang 0.5.23 --no-sglang-precompile --gpu "$gpu" \
  -o "$w/plan.yaml" > "$OUT/plan.txt" 2>&1
echo "plan rc=$?" | tee -a "$OUT/summary.txt"
python3 - "$w/plan.yaml" "$w/root" > "$w/argv.txt" <<'PY'
import sys
from dgprecompile.runtimes.triton_moe import TRITON_MOE
from dgprecompile.planning.manifest import read_manifest
plan = read_manifest(sys.argv[1])
item = plan.triton_moe[0] if isinstance(plan.triton_moe, list) else next(iter(plan.triton_moe.values()))
print("\0".join(TRITON_MOE.warm_argv(item, sys.argv[2], sys.executable)))
PY
echo "item argv: $(tr '\0' ' ' < "$w/argv.txt")" | tee -a "$OUT/summary.txt"
stamp warm
mapfile -d '' -t ARGV < "$w/argv.txt"
env CUDA_VISIBLE_DEVICES= "${ARGV[@]}" > "$OUT/warm.json" 2> "$w/warm.err"
echo "warm (GPU hidden) rc=$?" | tee -a "$OUT/summary.txt"; tail -5 "$w/warm.err" >> "$OUT/logs.txt"
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print('warm: ms', r.get('ms'), 'warmed', len(r.get('warmed',[])), 'entries', len(r.get('entries',[])), 'seconds', r.get('seconds'))" "$OUT/warm.json" 2>&1 | tee -a "$OUT/summary.txt"
# the plan's model-path Triton items (compile/triton_path.py: the embedding, the router, the MoE combine's
# _moe_sum_reduce_kernel), each by its own warm argv with the GPU hidden, into the same cache
mkdir -p "$w/path"
python3 - "$w/plan.yaml" "$w/root" "$w/path" <<'PY'
import sys
from pathlib import Path
from dgprecompile.planning.manifest import read_manifest
from dgprecompile.runtimes.triton_moe import TRITON_PATH
plan = read_manifest(sys.argv[1])
items = plan.triton_path if isinstance(plan.triton_path, list) else list(plan.triton_path.values())
for i, item in enumerate(items):
    Path(sys.argv[3], f"argv-{i}").write_text("\0".join(TRITON_PATH.warm_argv(item, sys.argv[2], sys.executable)))
PY
for f in "$w"/path/argv-*; do
  [ -e "$f" ] || continue
  mapfile -d '' -t PARGV < "$f"
  env CUDA_VISIBLE_DEVICES= "${PARGV[@]}" >> "$OUT/warm_path.json" 2>> "$w/warm_path.err"
  echo "path warm (GPU hidden) rc=$? ${PARGV[*]:3:4}" | tee -a "$OUT/summary.txt"
done
tail -5 "$w/warm_path.err" >> "$OUT/logs.txt" 2>/dev/null
stamp forward
ls "$w/root/triton" > "$w/before.txt"
TRITON_CACHE_DIR=$w/root/triton python3 "$root/tests/gpu/triton_moe_forward.py" "$MS" > "$OUT/forward.json" 2> "$w/fwd.err"
rc=$?; ls "$w/root/triton" > "$w/after.txt"
echo "forward rc=$rc new: $(comm -13 "$w/before.txt" "$w/after.txt" | while read d; do ls "$w/root/triton/$d" | sed -n 's/^__grp__\(.*\)\.json$/\1/p'; done | sort | uniq -c | tr '\n' ';')" | tee -a "$OUT/summary.txt"
cat "$OUT/forward.json" >> "$OUT/summary.txt"; tail -c 3000 "$w/fwd.err" > "$OUT/forward_stderr.txt"
for d in "$w"/root/triton/*/; do ls "$d" | sed -n 's/^__grp__\(.*\)\.json$/\1/p'; done | sort | uniq -c > "$OUT/cache_kernels.txt"
stamp done
