#!/usr/bin/env bash
# Issue 20 device proof (H200): every SGLang 0.5.14 JIT module a modelled server path builds (the tvm-ffi
# family, data/sglang_jit.yaml) is warmed GPU-free and then reached through SGLang's own entry points with
# runtime JIT refused: 0 refusals, 0 compiles; a deleted module is refused by name; a non-strict launch reports
# the module it built. Carry .whl (../shared/device/fetch-wheels.sh + fetch-sglang.sh). sgl-kernel is NOT
# carried: tests/standins stands in for it (named as a stand-in; none of these paths calls it), and
# transformers' re-registration of `qwen3_asr` is made a no-op (DGP_TRANSFORMERS_EXIST_OK=1).
#   A  plan the README's server command (Qwen3-Coder-480B FP8 --tp 8 --ep 8, sglang 0.5.14), warm it
#      (--backend nvcc + --sglang-jit on, GPU-free), verify, verify --live (DeepGEMM's dense layers + every JIT
#      module through its entry point)
#   B  JIT-only plans of other modelled paths (DeepSeek-V3 tp8 and tp1; Qwen3-30B-A3B tp2 with an FP8 KV cache
#      and --enable-fused-qk-norm-rope), warmed into the same cache, verify --live --live-units jit
#   C  delete clamp_position's directory: verify --live --live-units jit must fail naming it
#   D  launch --no-strict of SGLang's clamp_position_cuda on that cache: reports the module built at run time
# Writes to $OUT (flat): summary.json, warm_*.json, verify_A.json, live_*.json, launch_D.txt, logs.txt,
# COMMAND.txt.  usage: tests/gpu/jit_live_proof.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
root=$PWD
OUT=${OUT:-$root/out}; mkdir -p "$OUT"
t0=$(date +%s)
stamp() { echo "=== $1 $(date -u +%FT%TZ) (+$(( $(date +%s) - t0 )) s)" | tee -a "$OUT/logs.txt"; }
echo "tests/gpu/jit_live_proof.sh on $(hostname) $(date -u +%FT%TZ); git ${DGP_GIT:-?}" > "$OUT/COMMAND.txt"
site=$(mktemp -d)
stamp install
python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .whl/sgl_deep_gemm-0.1.3-*.whl \
  .whl/apache_tvm_ffi-*.whl .whl/sglang/*.whl >> "$OUT/logs.txt" 2>&1
export PYTHONPATH="$site:$root/tests/standins:$root${PYTHONPATH:+:$PYTHONPATH}"
export DGP_STANDINS=${DGP_STANDINS:-sgl_kernel} DGP_TRANSFORMERS_EXIST_OK=1
{ python3 -c "import torch, sys; print('torch', torch.__version__, 'python', sys.version.split()[0])";
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nvcc --version | tail -2; command -v ninja;
  python3 -c "import importlib.metadata as m; print('sglang', m.version('sglang'), 'tvm-ffi', m.version('apache-tvm-ffi'), 'sgl-deep-gemm', m.version('sgl-deep-gemm'))"; } \
  >> "$OUT/COMMAND.txt" 2>&1
w=$(mktemp -d); cache=$w/cache
dg() { python3 -m dgprecompile "$@"; }
SERVER="python -m sglang.launch_server --model-path Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8 --tp 8 --ep 8"
stamp A-plan
dg plan --sglang-cmd "$SERVER" --sglang 0.5.14 --no-sglang-precompile -o "$w/A.yaml" >> "$OUT/logs.txt" 2>&1
echo "plan A rc=$?" | tee -a "$OUT/logs.txt"
stamp A-warm
dg warm --manifest "$w/A.yaml" --cache-dir "$cache" --backend nvcc --sglang-jit on --json > "$OUT/warm_A.json" 2> "$w/warm.err"
echo "warm A rc=$?" | tee -a "$OUT/logs.txt"; tail -20 "$w/warm.err" >> "$OUT/logs.txt"
dg verify --manifest "$w/A.yaml" --cache-dir "$cache" --json > "$OUT/verify_A.json" 2>> "$OUT/logs.txt"
echo "verify A rc=$?" | tee -a "$OUT/logs.txt"
stamp A-live
dg verify --manifest "$w/A.yaml" --cache-dir "$cache" --live --live-m edges --live-sample 8 --live-log "$w/live_A.log" \
  --json > "$OUT/live_A.json" 2>> "$OUT/logs.txt"
echo "live A rc=$?" | tee -a "$OUT/logs.txt"; tail -c 2000 "$w/live_A.log" >> "$OUT/logs.txt"
stamp B-plans
python3 - "$w" >> "$OUT/logs.txt" 2>&1 <<'PY'
import json, sys
from dgprecompile.planning.manifest import plan_from_dict, write_manifest
from dgprecompile.planning.plan import PlanRequest
from dgprecompile.planning.request import plan_from_request
w = sys.argv[1]
ds = {"model_type": "deepseek_v3", "hidden_size": 7168, "num_attention_heads": 128, "num_key_value_heads": 128,
      "num_hidden_layers": 61, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
      "qk_rope_head_dim": 64, "v_head_dim": 128, "intermediate_size": 18432, "moe_intermediate_size": 2048,
      "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3,
      "torch_dtype": "bfloat16", "rope_scaling": {"type": "yarn", "factor": 40},
      "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128], "fmt": "e4m3"}}
json.dump(ds, open(f"{w}/config.json", "w"))
plans = {"B_ds_tp8": PlanRequest(model=w, tp=8, ep=8, sglang="0.5.14"),
         "B_ds_tp1": PlanRequest(model=w, tp=1, ep=1, sglang="0.5.14"),
         "B_qwen_fused": PlanRequest(sglang="0.5.14", sglang_precompile=False, sglang_cmd=(
             "python -m sglang.launch_server --model-path Qwen/Qwen3-30B-A3B-FP8 --tp 2 --kv-cache-dtype fp8_e4m3 "
             "--enable-fused-qk-norm-rope"))}
for name, req in plans.items():
    data = plan_from_request(req).to_dict()
    for shape in data["shapes"]:  # JIT modules only: the DeepGEMM kernels of these paths are proven elsewhere
        shape["buckets"], shape["aux_kernels"] = [], []
    data["kernels"] = []
    write_manifest(plan_from_dict(data), f"{w}/{name}.yaml")
    print(name, sorted(m["id"] for m in data["sglang_jit_modules"]))
PY
for p in B_ds_tp8 B_ds_tp1 B_qwen_fused; do
  dg warm --manifest "$w/$p.yaml" --cache-dir "$cache" --backend nvcc --sglang-jit on --json > "$OUT/warm_$p.json" 2>> "$w/warm.err"
  echo "warm $p rc=$?" | tee -a "$OUT/logs.txt"
  dg verify --manifest "$w/$p.yaml" --cache-dir "$cache" --live --live-units jit --live-log "$w/live_$p.log" \
    --json > "$OUT/live_$p.json" 2>> "$OUT/logs.txt"
  echo "live $p rc=$?" | tee -a "$OUT/logs.txt"; tail -c 1500 "$w/live_$p.log" >> "$OUT/logs.txt"
done
stamp C-delete
victim=$(ls "$cache/tvm-ffi" | grep '^sgl_kernel_jit_clamp_position_int64_t_')
echo "deleted tvm-ffi/$victim" | tee "$OUT/deleted.txt" >> "$OUT/logs.txt"
rm -rf "$cache/tvm-ffi/$victim"
dg verify --manifest "$w/A.yaml" --cache-dir "$cache" --live --live-units jit --live-log "$w/live_C.log" \
  --json > "$OUT/live_C_deleted.json" 2>> "$OUT/logs.txt"
echo "live C (deleted) rc=$?" | tee -a "$OUT/logs.txt"; grep -m2 "dgprecompile strict mode" "$w/live_C.log" >> "$OUT/logs.txt"
stamp D-nonstrict
cat > "$w/clamp.py" <<'PY'
import torch
from sglang.jit_kernel.clamp_position import clamp_position_cuda
print("clamp", clamp_position_cuda(torch.tensor([1, 5, 9], device="cuda", dtype=torch.int64)).tolist())
PY
dg launch --manifest "$w/A.yaml" --cache-dir "$cache" --allow-missing --no-strict -- python3 "$w/clamp.py" \
  > "$OUT/launch_D.txt" 2>&1
echo "launch D rc=$?" | tee -a "$OUT/logs.txt"
dg verify --manifest "$w/A.yaml" --cache-dir "$cache" --json > "$OUT/verify_D_after.json" 2>> "$OUT/logs.txt"
echo "verify after D rc=$?" | tee -a "$OUT/logs.txt"
stamp summary
python3 - "$OUT" >> "$OUT/logs.txt" 2>&1 <<'PY'
import json, os, sys
out = sys.argv[1]
def load(name):
    try:
        return json.load(open(os.path.join(out, name)))
    except Exception as exc:
        return {"unreadable": str(exc)}
s = {}
for name in sorted(os.listdir(out)):
    if name.startswith("live_") and name.endswith(".json"):
        r = load(name)
        units = r.get("units", [])
        s[name] = {"ok": r.get("ok"), "verdict": r.get("verdict"), "device": r.get("device"),
                   "compiles": r.get("compiles"), "failed_calls": r.get("failed_calls"),
                   "jit_modules": {u.get("module"): {"through": u.get("through"), "calls": u.get("calls"),
                                                     "errors": u.get("errors"),
                                                     "refused": [e.get("kernel") for e in u.get("refused", [])],
                                                     "new_jit": u.get("new_jit"), "seconds": u.get("seconds")}
                                   for u in units if u.get("kind") == "jit"},
                   "deepgemm_units": sum(1 for u in units if u.get("kind") != "jit"),
                   "calls": sum(int(u.get("calls", 0)) for u in units)}
    if name.startswith("warm_"):
        r = load(name)
        s[name] = {k: r.get(k) for k in ("kernels", "sglang_jit_modules", "compiled", "already_cached", "failed",
                                          "wall_seconds")}
json.dump(s, open(os.path.join(out, "summary.json"), "w"), indent=1)
print(json.dumps(s, indent=1)[:4000])
PY
stamp done
