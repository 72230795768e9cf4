#!/usr/bin/env bash
# Issue 32's follow-up device call: which sgl-deep-gemm 0.2.x dense kernels carry n, on shapes beyond the 480B keys
# (tests/gpu/dg02_compiled_n.py SHAPES: block 64 x {144,160,192} with a cluster of 2, which the record lacks, and
# each observed configuration at other n and k). Same carry as the proof (tests/gpu/README-torch214.md: calls 1-9
# keep p01-p09); this is a last call of its own with p10 carried, or a call right after the proof call while the
# machine is still warm (then the torch 2.14.1 set-up under /tmp/t214 is reused when it still imports).
#   1. set-up: tests/gpu/deepgemm_torch214_proof.sh steps 1-3 (T214_SETUP_ONLY=1): torch 2.14.1 private, the NCCL
#      STAND-IN and the 0.2.0 SHIM preloaded, each release in /tmp/t214/import-<release>
#   2. per 0.2.x release, side by side: python3 tests/gpu/dg02_compiled_n.py $OUT/dg02-<release>.json
# Results under $OUT: dg02-<release>.json (printed configuration and each entry's template arguments per shape),
# setup/ (the set-up's proof.log, torch-check.txt), machine.txt. Here, tests/test_deepjit_02_records.py
# test_the_device_shapes_are_the_configurations_they_name says what the model expects for each shape.
# usage: bash tests/gpu/deepgemm_02_compiled_n.sh
set -uo pipefail
root=$PWD
ret=${OUT:-$root/out/dg02}
mkdir -p "$ret/setup"
base=/tmp/t214
preload="$base/lib/libnccl_standin.so:$base/lib/libdg020_check_shim.so"
check() { [ -f "$base/lib/libnccl_standin.so" ] && [ -f "$base/lib/libdg020_check_shim.so" ] && PYTHONPATH="$base/import-0.2.2:$base/torch" LD_PRELOAD="$preload" python3 -c 'import torch, deep_gemm' 2>/dev/null; }
if check; then
  echo "reusing the torch 2.14.1 set-up under $base"
else
  OUT="$ret/setup" T214_SETUP_ONLY=1 bash tests/gpu/deepgemm_torch214_proof.sh || { echo "set-up failed: $ret/setup/proof.log"; exit 1; }
fi
{ date -u +"date: %Y-%m-%dT%H:%M:%SZ"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  echo "torch: private torch 2.14.1 at $base/torch; preloaded: NCCL STAND-IN (tests/gpu/nccl_standin.c) and"
  echo "sgl-deep-gemm 0.2.0 SHIM (tests/gpu/dg020_check_shim.cpp)"; nvcc --version; } > "$ret/machine.txt" 2>&1
pids=()
for v in 0.2.0 0.2.2 0.2.3.post2; do
  PYTHONPATH="$base/import-$v:$base/torch" LD_PRELOAD="$preload" PYTHONUNBUFFERED=1 \
    timeout 480 python3 tests/gpu/dg02_compiled_n.py "$ret/dg02-$v.json" > "$ret/dg02-$v.log" 2>&1 &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
tail -n 12 "$ret"/dg02-*.log
exit $rc
