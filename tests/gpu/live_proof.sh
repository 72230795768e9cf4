#!/usr/bin/env bash
# R11 device proof (H200): SGLang 0.5.14's own code finds every kernel warm after `dgprecompile warm`.
# Carry .whl (../shared/device/fetch-wheels.sh + fetch-sglang.sh, from the repo root; .whl/extra holds a ninja
# wheel, used only if the machine has no ninja). sgl-kernel is NOT carried: tests/standins stands in for it
# (named as a stand-in; nothing on these paths calls it), and transformers' re-registration of `qwen3_asr` is
# made a no-op (DGP_TRANSFORMERS_EXIST_OK=1) as the device README says.
#   1. plan   Qwen3-Coder-480B tp8/ep8, --sglang 0.5.14 --moe-runner-backend deep_gemm (dense + masked keys)
#   2. warm   --backend nvcc (DeepGEMM, GPU-free) + SGLang's JIT modules (--sglang-jit on), then static verify
#   3. live   verify --live --live-m all: SGLang's Fp8LinearMethod / DeepGemmRunnerCore over every planned m,
#             every JIT refused: expect 0 compiles of any kind (exit 0)
#   4. delete one masked DeepGEMM entry and SGLang's per_token_group_quant_8bit_v2 module, live again
#             (edges + sample): expect exit 1 and both named
# Writes at most 8 files to $OUT (flat): summary.json, warm.json, verify.json, live_all.json, live_deleted.json,
# deleted.txt, logs.txt, COMMAND.txt.  usage: tests/gpu/live_proof.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
root=$PWD
OUT=${OUT:-$root/out}; mkdir -p "$OUT"
t0=$(date +%s)
stamp() { echo "=== $1 $(date -u +%FT%TZ) (+$(( $(date +%s) - t0 )) s)" | tee -a "$OUT/logs.txt"; }
echo "tests/gpu/live_proof.sh on $(hostname) $(date -u +%FT%TZ); git ${DGP_GIT:-?}" > "$OUT/COMMAND.txt"
site=$(mktemp -d)
stamp install
python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .whl/sgl_deep_gemm-0.1.3-*.whl \
  .whl/apache_tvm_ffi-*.whl .whl/sglang/*.whl >> "$OUT/logs.txt" 2>&1
if ! command -v ninja >/dev/null 2>&1 && ls .whl/extra/ninja-*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --target "$site/_ninja" .whl/extra/ninja-*.whl >> "$OUT/logs.txt" 2>&1
  export PATH="$site/_ninja/bin:$PATH"
fi
export PYTHONPATH="$site:$root/tests/standins:$root${PYTHONPATH:+:$PYTHONPATH}"
export DGP_STANDINS=${DGP_STANDINS:-sgl_kernel} DGP_TRANSFORMERS_EXIST_OK=1
w=$(mktemp -d); cache=$w/cache; plan=$w/plan.yaml
dg() { python3 -m dgprecompile "$@"; }
stamp plan
dg plan --model Qwen3-Coder-480B --tp 8 --ep 8 --sglang 0.5.14 --moe-runner-backend deep_gemm -o "$plan" >> "$OUT/logs.txt" 2>&1
echo "plan rc=$?" | tee -a "$OUT/logs.txt"
stamp warm
dg warm --manifest "$plan" --cache-dir "$cache" --backend nvcc --sglang-jit on --json > "$OUT/warm.json" 2> "$w/warm.err"
echo "warm rc=$?" | tee -a "$OUT/logs.txt"; tail -20 "$w/warm.err" >> "$OUT/logs.txt"
dg verify --manifest "$plan" --cache-dir "$cache" --json > "$OUT/verify.json" 2>> "$OUT/logs.txt"
echo "verify rc=$?" | tee -a "$OUT/logs.txt"
stamp live-all
dg verify --manifest "$plan" --cache-dir "$cache" --live --live-m all --live-log "$w/live_all.log" --json \
  > "$OUT/live_all.json" 2>> "$OUT/logs.txt"
echo "live_all rc=$?" | tee -a "$OUT/logs.txt"; tail -c 3000 "$w/live_all.log" >> "$OUT/logs.txt"
stamp delete
python3 - "$cache" "$OUT/deleted.txt" <<'PY'
import json, shutil, sys
cache, out = sys.argv[1], sys.argv[2]
index = json.load(open(f"{cache}/dgprecompile/index.json"))
masked = sorted(k for k in index["kernels"] if k.startswith("sm90_fp8_m_grouped_gemm_masked_1d2d"))
victim_dg = masked[0]
victim_jit = next(k for k in index["kernels"] if k.startswith("sglang_jit:per_token_group_quant_8bit_v2"))
lines = []
for kid in (victim_dg, victim_jit):
    rec = index["kernels"][kid]
    shutil.rmtree(f"{cache}/{rec.get('area', 'cache')}/{rec['entry']}")
    lines.append(f"{kid}\t{rec.get('area', 'cache')}/{rec['entry']}")
open(out, "w").write("\n".join(lines) + "\n")
PY
cat "$OUT/deleted.txt" | tee -a "$OUT/logs.txt"
stamp live-deleted
dg verify --manifest "$plan" --cache-dir "$cache" --live --live-m edges --live-sample 32 --live-log "$w/live_del.log" \
  --json > "$OUT/live_deleted.json" 2>> "$OUT/logs.txt"
echo "live_deleted rc=$?" | tee -a "$OUT/logs.txt"; grep -m4 "dgprecompile strict mode" "$w/live_del.log" >> "$OUT/logs.txt"
stamp summary
python3 tests/gpu/live_proof_summary.py "$OUT" >> "$OUT/logs.txt" 2>&1; echo "summary rc=$?" | tee -a "$OUT/logs.txt"
stamp done
