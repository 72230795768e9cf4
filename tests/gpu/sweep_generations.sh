#!/usr/bin/env bash
# Device run for issue 12 (H200): for each sgl-deep-gemm release below, install its wheel into its own folder,
# then (tests/gpu/sweep_generations.py, one process per release, all in parallel) sweep the 480B tp8/ep8 keys
# on a cold cache with DG_PRINT_CONFIGS, probe calling conventions, warm with `dgprecompile warm` and sweep
# again (0 new entries expected). Everything lands under $OUT/<release>/; $OUT/SUMMARY.txt is printed at the end.
#
# Needs, carried in .whl-gen/: sgl_deep_gemm-<release>-*.whl for each release and apache_tvm_ffi-0.1.11-*.whl
# (tests/gpu/fetch_generation_wheels.sh on the CPU machine puts them there). The device returns at most 8 files, so
# everything is written under a scratch folder and packed into $OUT/results.tar.gz; SUMMARY.txt and machine.txt
# come back beside it.
# usage: bash tests/gpu/sweep_generations.sh [BUDGET_SECONDS]        (default 450; the run ends before it)
# SWEEP_COLD_PCT: the share of the budget the cold pass may take (default 50)
set -uo pipefail
budget=${1:-450}
export PYTHONUNBUFFERED=1 OPENBLAS_NUM_THREADS=1
root=$PWD
ret=${OUT:-$root/out/sweep-generations}
wheels=${WHEELS:-.whl-gen}
out=/tmp/dgsweep-out
rm -rf "$out" /tmp/dgsweep-scratch && mkdir -p "$out" "$ret"
t0=$(date +%s)
# release:sglang that pins it (METADATA of the sglang wheels)
# release:sglang that pins it:warm backend. sk-0.4.2: the deep_gemm bundled in sglang-kernel 0.4.2 (sglang 0.5.11;
# CUDA 13, torch 2.11), carried as a tarball. Warm backends: nvcc (GPU-free, names computed by dgprecompile: the
# sweep after it proves those names) for 0.1.7 and 0.2.0, cxx (the library builds its own entries: the sweep
# proves the plan's kernel choice) for 0.1.5.post3 and 0.2.2; 0.1.3's default is nvcc.
# RELEASES overrides the list. Run 1 (2026-12-01) showed 0.1.5.post3, 0.1.7, 0.2.0 and 0.2.2 reject every call
# with torch 2.11 (built for sglang's torch 2.13/2.14); sglang 0.5.15-0.5.17 pin torch 2.11.0 with sgl-deep-gemm
# 0.1.4 / 0.1.4.post1 / 0.1.5.post1, which share 0.1.7's generated-code format: run 2 uses
#   RELEASES="0.1.4.post1:0.5.16:cxx 0.1.5.post1:0.5.17:nvcc sk-0.4.2:0.5.11:auto"
# Run 3 (issue 10, the largest m a server command produces; see LARGE_M in sweep_generations.py):
#   RELEASES="0.1.3:0.5.14:auto" SWEEP_LARGE_M=1 SWEEP_PAR=8 SWEEP_JOBS=12 SWEEP_SGLANG_CMD="python -m
#   sglang.launch_server --model-path Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8 --tp 8 --ep 8
#   --chunked-prefill-size -1 --context-length 262144 --moe-runner-backend deep_gemm"
# sglang-kernel 0.4.2 alone (modelled since: heuristics/sm90_waves.py, keys/sglang_kernel.py), GPU-free warm:
#   WHEELS=<dir with sglang_kernel-0.4.2-deep_gemm.tgz> RELEASES="sk-0.4.2:0.5.11:nvcc" SWEEP_PAR=6 SWEEP_JOBS=12
#   bash tests/gpu/sweep_generations.sh 400
# Issue 32 (tests/gpu/deepgemm_torch214_proof.sh): the same sweep under a carried torch 2.14.1 (PYTHONPATH first,
# passed on to every process; NCCL stand-in and 0.2.0 shim preloaded), GPU-free nvcc warm for each release:
#   RELEASES="0.1.5.post3:0.5.18:nvcc 0.1.7:0.5.19:nvcc 0.2.0:0.5.20:nvcc 0.2.2:0.5.22:nvcc 0.2.3.post2:0.5.23:nvcc"
releases=${RELEASES:-"0.1.3:0.5.14:auto 0.1.5.post3:0.5.18:cxx 0.1.7:0.5.19:nvcc 0.2.0:0.5.20:nvcc 0.2.2:0.5.22:cxx sk-0.4.2:0.5.11:auto"}
# the dgprecompile that plans and warms: a snapshot carried in $wheels/dgprecompile.tgz if there, else this checkout
dgp=$root
if [ -f "$wheels/dgprecompile.tgz" ]; then
  dgp=/tmp/dgp-src; rm -rf "$dgp"; mkdir -p "$dgp" && tar xzf "$wheels/dgprecompile.tgz" -C "$dgp"
fi
{
  echo "date: $(date -u +%FT%TZ)"
  echo "host: $(hostname)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  python3 -c 'import torch,sys; print("torch", torch.__version__, "python", sys.version.split()[0], "sms", torch.cuda.get_device_properties(0).multi_processor_count)' 2>&1
  echo "which nvcc: $(command -v nvcc || echo none); CUDA_HOME=${CUDA_HOME:-unset}; nproc: $(nproc)"
  echo "command: bash tests/gpu/sweep_generations.sh $budget (git ${DGP_GIT:-$(git rev-parse --short HEAD 2>/dev/null || echo '?') (the copied .git, may be stale: give DGP_GIT)})"
  echo "dgprecompile used to plan/warm: $( [ -f "$wheels/dgprecompile.tgz" ] && cat /tmp/dgp-src/DGP_COMMIT 2>/dev/null || echo "this checkout")"
} > "$out/machine.txt"
/usr/local/cuda/bin/nvcc --version > "$out/nvcc_version.txt" 2>&1   # hashed into the DeepJIT (0.2.x) key
cat "$out/machine.txt"
pids=()
for item in $releases; do
  IFS=: read -r v s backend <<< "$item"
  site=/tmp/dgsweep/$v            # fixed: the 0.1.x key holds this absolute path
  mkdir -p "$out/$v"
  rm -rf "$site"; par=3
  if [ "${v#sk-}" != "$v" ]; then
    par=2; tgz="$wheels/sglang_kernel-${v#sk-}-deep_gemm.tgz"
    if ! { mkdir -p "$site" && tar xzf "$tgz" -C "$site"; } > "$out/$v/install.log" 2>&1; then
      echo "install of $v failed (see $v/install.log)"; continue
    fi
  else
    whl=$(ls "$wheels"/sgl_deep_gemm-"$v"-*.whl 2>/dev/null | head -1)
    if [ -z "$whl" ]; then echo "no wheel for $v in $wheels/" | tee "$out/$v/install.log"; continue; fi
    if ! python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" "$whl" "$wheels"/apache_tvm_ffi-*.whl \
         > "$out/$v/install.log" 2>&1; then
      echo "install of $v failed (see $v/install.log)"; continue
    fi
  fi
  timeout $((budget + 15)) python3 tests/gpu/sweep_generations.py version --dg-version "$v" --sglang "$s" \
    --site "$site" --out "$out/$v" --scratch /tmp/dgsweep-scratch \
    --cold-deadline $((t0 + budget * ${SWEEP_COLD_PCT:-50} / 100)) --deadline $((t0 + budget)) --jobs "${SWEEP_JOBS:-3}" --par "${SWEEP_PAR:-$par}" \
    --backend "$backend" --repo "$dgp" \
    > "$out/$v/version.log" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
echo "elapsed $(( $(date +%s) - t0 )) s"
python3 tests/gpu/sweep_generations.py summary "$out"
cp "$out/SUMMARY.txt" "$out/machine.txt" "$ret/"
tar czf "$ret/results.tar.gz" -C "$out" .
ls -la "$ret"
