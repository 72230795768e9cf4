#!/usr/bin/env bash
# Device proof of `warm --backend sweep` (H200, < 6 min): a keys-only plan (no kernel model) warmed by letting the
# installed C++-JIT DeepGEMM choose for every sampled m, then verify, a second warm (everything "cached"), and a
# fresh process calling every m of every planned key against that cache (tests/gpu/sweep_generations.py keys,
# DG_PRINT_CONFIGS off): new entries must be 0. Then one entry is deleted: verify must name its key and m range.
#
# Library: the deep_gemm package of sglang-kernel 0.4.2 (sglang 0.5.11's), carried as
# .whl-gen/sglang_kernel-0.4.2-deep_gemm.tgz. The keys-only generations (sgl-kernel 0.3.7-0.3.9.post2,
# 0.3.20-0.3.21) are CUDA 12 / torch 2.8-2.9 builds that do not load on the device, so the proof takes the plan
# Qwen3-Coder-480B tp8/ep8 --sglang 0.5.11 --moe-runner-backend deep_gemm --max-tokens $MAX_TOKENS (4096: dense m
# 1..4096, masked expected_m 1..1639) and strips its kernel model (kernel_model: false, no buckets, no kernels):
# the same keys, keys only, which is what warm and verify see for a keys-only profile. Then, as a cross-check, the
# modelled plan is verified on the swept cache: every entry the model predicts must be among those the library
# built itself (verify1m).
# usage: bash tests/gpu/sweep_proof.sh [JOBS]      results in $OUT (default out/sweep-proof): SUMMARY.txt,
# machine.txt and results.tar.gz (every file; the device returns few files), or every file itself with KEEP_FILES=1
set -uo pipefail
jobs=${1:-16}
root=$PWD
ret=${OUT:-$root/out/sweep-proof}
out=/tmp/dgsweep-proof/out
site=/tmp/dgsweep-proof/site
cache=/tmp/dgsweep-proof/cache
rm -rf /tmp/dgsweep-proof && mkdir -p "$site" "$out" "$ret"
export PYTHONUNBUFFERED=1 OPENBLAS_NUM_THREADS=1 PYTHONPATH="$site:$root"
t0=$(date +%s)
tar xzf "${TGZ:-.whl-gen/sglang_kernel-0.4.2-deep_gemm.tgz}" -C "$site" || { echo "cannot unpack the tarball"; exit 3; }
plan=(--model Qwen3-Coder-480B --tp 8 --ep 8 --sglang 0.5.11 --moe-runner-backend deep_gemm
      --max-tokens "${MAX_TOKENS:-4096}")
{
  echo "date: $(date -u +%FT%TZ) git: ${DGP_GIT:-$(git rev-parse --short HEAD 2>/dev/null || echo '?') (the copied .git, may be stale: give DGP_GIT)}"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1
  python3 -c 'import torch; print("torch", torch.__version__, "sms", torch.cuda.get_device_properties(0).multi_processor_count)'
  python3 -c 'from dgprecompile.host.toolchain import find_deepgemm; print("deep_gemm:", find_deepgemm())'
  echo "nvcc: $(command -v nvcc) nproc: $(nproc) jobs: $jobs"
} > "$out/machine.txt" 2>&1
cat "$out/machine.txt"
python3 -m dgprecompile plan "${plan[@]}" -o "$out/plan-model.yaml" > "$out/plan.txt" 2>&1
python3 -m dgprecompile plan "${plan[@]}" --format json > /tmp/dgsweep-proof/plan.json 2>/dev/null
python3 - "$out/plan-model.yaml" "$out/plan.yaml" <<'PY'
import sys, yaml
plan = yaml.safe_load(open(sys.argv[1]))
plan.update(kernel_model=False, kernels=[], total_kernels=None)
for shape in plan["shapes"]:
    shape.update(buckets=[], aux_kernels=[], kernels=None)
yaml.safe_dump(plan, open(sys.argv[2], "w"), sort_keys=False)
PY
step() { local name=$1; shift; local s=$(date +%s); "$@" > "$out/$name.json" 2> "$out/$name.err"; local rc=$?
         echo "$name: rc=$rc $(( $(date +%s) - s )) s"; }
step warm1 python3 -m dgprecompile warm --manifest "$out/plan.yaml" --cache-dir "$cache" --jobs "$jobs" --backend sweep --json
step verify1 python3 -m dgprecompile verify --manifest "$out/plan.yaml" --cache-dir "$cache" --json
step verify1m python3 -m dgprecompile verify --manifest "$out/plan-model.yaml" --cache-dir "$cache" --json
step warm2 python3 -m dgprecompile warm --manifest "$out/plan.yaml" --cache-dir "$cache" --jobs "$jobs" --backend sweep --json
cp "$cache/dgprecompile/index.json" "$out/index.json" 2>/dev/null
# a fresh process: every m of every planned key (plan_samples: every m to 16,384 / every expected_m) on that cache
python3 - "$cache" "$out" <<'PY'
import json, sys
sys.path.insert(0, "tests/gpu")
from sweep_generations import plan_samples
cache, out = sys.argv[1:]
plan = json.load(open("/tmp/dgsweep-proof/plan.json"))
specs = [{"kind": s["kernel_type"], "n": int(s["n"]), "k": int(s["k"]), "g": int(s["num_groups"]),
          "ms": plan_samples(s)} for s in plan["shapes"]]
import time
json.dump({"specs": specs, "cache": cache, "out": f"{out}/recall.json", "log": "/tmp/dgsweep-proof/recall.log",
           "deadline": time.time() + 150, "print_configs": False}, open("/tmp/dgsweep-proof/recall.job.json", "w"))
PY
s=$(date +%s)
python3 tests/gpu/sweep_generations.py keys /tmp/dgsweep-proof/recall.job.json > "$out/recall.stdout" 2>&1
echo "recall: rc=$? $(( $(date +%s) - s )) s"
# one entry deleted: verify names the key and the m range
victim=$(ls "$cache/cache" | head -1)
rm -rf "${cache:?}/cache/$victim"
step verify2 python3 -m dgprecompile verify --manifest "$out/plan.yaml" --cache-dir "$cache" --json
python3 - "$out" "$victim" <<'PY' | tee "$out/SUMMARY.txt"
import json, sys
out, victim = sys.argv[1:]
def load(name):
    try:
        return json.load(open(f"{out}/{name}.json"))
    except Exception as exc:
        return {"error": repr(exc)}
w1, w2, v1, v2, rc, vm = (load(n) for n in ("warm1", "warm2", "verify1", "verify2", "recall", "verify1m"))
idx = json.load(open(f"{out}/index.json")) if __import__("os").path.exists(f"{out}/index.json") else {}
calls = sum(k.get("calls", 0) for k in rc.get("keys", []))
new = sum(len(e[1]) for k in rc.get("keys", []) for e in k.get("new_entries", []))
errors = [k["errors"][:1] for k in rc.get("keys", []) if k.get("errors")] + [k["truncated_at"] for k in rc.get("keys", []) if k.get("truncated_at")]
print(f"warm1: {w1.get('compiled')} chunks swept, {w1.get('failed')} failed, {w1.get('wall_seconds')} s, "
      f"{len(idx.get('extra', {}))} entries, {len(idx.get('sweeps', []))} sweep records")
print(f"verify1: complete={v1.get('complete')} coverage={v1.get('coverage')} {v1.get('verdict')}")
print(f"verify1m (the modelled plan on the swept cache): complete={vm.get('complete')} {vm.get('verdict')} "
      f"missing={vm.get('missing', [])[:5]}")
print(f"warm2: {w2.get('compiled')} swept, {w2.get('already_cached')} cached, {w2.get('wall_seconds')} s")
print(f"recall (fresh process, every planned m): {calls} calls, {new} new entries, problems {errors[:3]}"
      + (f", {rc['error']}" if "error" in rc else "") + (f", import: {rc['import_error'][:300]}" if "import_error" in rc else ""))
print(f"verify2 after deleting {victim}: complete={v2.get('complete')} problems="
      f"{[(p['kernel'], p['detail']) for p in v2.get('problems', [])]}")
print("failures:", json.dumps(w1.get("failures", {}))[:1500])
PY
echo "elapsed $(( $(date +%s) - t0 )) s" | tee -a "$out/SUMMARY.txt"
if [ "${KEEP_FILES:-0}" = 1 ]; then
  cp "$out"/* "$ret/"
else
  tar czf "$ret/results.tar.gz" -C "$out" . && cp "$out/SUMMARY.txt" "$out/machine.txt" "$ret/"
fi
