#!/usr/bin/env bash
# Device proofs (H200). Run from the repo root on the device with .whl (../shared/device/fetch-wheels.sh) and
# .devcarry (the CPU-warmed legacy artifact from `dgprecompile pack`) carried. Results go to $OUT/<phase>/.
#   cxx-bench  : bench/bench_warm.sh on the 480B tp8/ep8 sglang-0.5.14 --moe-runner-backend deep_gemm plan
#   legacy     : warm the 480B tp8/ep8 sglang-0.5.1 plan on the GPU machine, then sweep every m: no new entry
#   artifact   : unpack the CPU-built artifact, verify, sweep every m: no new entry
#   launch-cxx / launch-legacy : warm, then the stand-in trainer for 1000 steps under `launch --strict`; then the
#                same with one planned kernel deleted from the cache (must fail on its first call, clearly)
#   repro-legacy / repro-cxx   : `dgprecompile repro` on 8 ranks inside a pids.max budget
# usage: bench/results/2026-11-30-h200-run3/device_proofs.sh PHASE...
# It made runs 2-5 (bench/results/2026-11-30-h200-run2 .. -run5; their record.json name it where it was then,
# tests/gpu/); it lives beside run 3, the newest of them that proves a family (docs/proof.md's 0.5.1 deepgemm row).
set -uo pipefail
export PYTHONUNBUFFERED=1 OPENBLAS_NUM_THREADS=1
root=$PWD
SHAPES=$root/shapes/Qwen3-Coder-480B-A35B-Instruct-FP8.tp8.ep8
DG013=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --target "$DG013" .whl/sgl_deep_gemm-0.1.3-*.whl .whl/apache_tvm_ffi-*.whl
# The legacy key holds the absolute include path: put the legacy deep_gemm where the CPU machine's venv has it.
LEGACY_SITE=$root/.venv/lib/python3.11/site-packages
mkdir -p "$LEGACY_SITE" && rm -rf "$LEGACY_SITE/deep_gemm" && cp -r .whl/legacy/deep_gemm "$LEGACY_SITE/"
NVCC=/usr/local/cuda/bin/nvcc
for phase in "$@"; do
  dir=$OUT/$phase; mkdir -p "$dir"
  echo "=== $phase $(date -u +%FT%TZ)"
  case $phase in
    cxx-bench)
      PYTHONPATH=$DG013:$root bench/bench_warm.sh "$SHAPES.sglang-0.5.12-0.5.16.deep_gemm.yaml" "$dir" "$(nproc)" ;;
    legacy)
      c=$(mktemp -d)
      PYTHONPATH=$LEGACY_SITE:$root python3 -m dgprecompile warm --manifest "$SHAPES.sglang-0.5.0-0.5.1.auto.yaml" \
        --cache-dir "$c" --nvcc $NVCC --json > "$dir/warm.json"; echo "warm rc=$?"
      PYTHONPATH=$LEGACY_SITE:$root python3 tests/gpu/sweep_runtime.py --manifest "$SHAPES.sglang-0.5.0-0.5.1.auto.yaml" \
        --cache-dir "$c" --nvcc $NVCC --json "$dir/sweep.json"; echo "sweep rc=$?"
      ls "$c/cache" > "$dir/entries.txt" ;;
    artifact)
      c=$(mktemp -d)
      PYTHONPATH=$LEGACY_SITE:$root python3 -m dgprecompile unpack .devcarry/legacy480-*.tar.gz --cache-dir "$c" > "$dir/unpack.txt" 2>&1; echo "unpack rc=$?"
      PYTHONPATH=$LEGACY_SITE:$root python3 -m dgprecompile verify --manifest "$SHAPES.sglang-0.5.0-0.5.1.auto.yaml" \
        --cache-dir "$c" --json > "$dir/verify.json" 2> "$dir/verify.err"; echo "verify rc=$?"
      PYTHONPATH=$LEGACY_SITE:$root python3 tests/gpu/sweep_runtime.py --manifest "$SHAPES.sglang-0.5.0-0.5.1.auto.yaml" \
        --cache-dir "$c" --nvcc $NVCC --json "$dir/sweep.json"; echo "sweep rc=$?"
      ls "$c/cache" > "$dir/entries.txt" ;;
    launch-cxx|launch-legacy)
      if [ $phase = launch-cxx ]; then pp=$DG013:$root; m="$SHAPES.sglang-0.5.12-0.5.16.deep_gemm.yaml"
      else pp=$LEGACY_SITE:$root; m="$SHAPES.sglang-0.5.0-0.5.1.auto.yaml"; fi
      c=$(mktemp -d)
      PYTHONPATH=$pp python3 -m dgprecompile warm --manifest "$m" --cache-dir "$c" --nvcc $NVCC --json > "$dir/warm.json"; echo "warm rc=$?"
      PYTHONPATH=$pp python3 -m dgprecompile launch --manifest "$m" --cache-dir "$c" --strict -- \
        python3 tests/gpu/standin_trainer.py --manifest "$m" --steps 1000 --json "$dir/strict.json" > "$dir/strict.log" 2>&1
      echo "strict rc=$?"; tail -3 "$dir/strict.log"
      d=$(mktemp -d); cp -r "$c/." "$d/"
      victim=$(python3 -c "import json,sys;i=json.load(open(sys.argv[1]));print(sorted(r['entry'] for r in i['kernels'].values())[0])" "$d/dgprecompile/index.json")
      rm -rf "$d/cache/$victim"; echo "deleted $victim" > "$dir/deleted.txt"
      PYTHONPATH=$pp python3 -m dgprecompile launch --manifest "$m" --cache-dir "$d" --strict --allow-missing -- \
        python3 tests/gpu/standin_trainer.py --manifest "$m" --steps 1000 --json "$dir/deleted.json" > "$dir/deleted.log" 2>&1
      echo "deleted-kernel rc=$?"; grep -m3 -i "strict" "$dir/deleted.log" ;;
    repro-legacy)
      PYTHONPATH=$LEGACY_SITE:$root python3 -m dgprecompile repro --backend legacy --ranks 8 --kernels 5 --timeout 300 \
        --json > "$dir/repro.json" 2> "$dir/repro.err"; echo "repro legacy rc=$?"; tail -5 "$dir/repro.err" ;;
    repro-cxx)
      PYTHONPATH=$DG013:$root python3 -m dgprecompile repro --backend cxx --ranks 8 --keys 2 --kernels 6 --timeout 400 \
        --json > "$dir/repro.json" 2> "$dir/repro.err"; echo "repro cxx rc=$?"; tail -5 "$dir/repro.err" ;;
    *) echo "unknown phase $phase" ;;
  esac
done
cd "$OUT" && tar czf results.tar.gz --exclude=results.tar.gz . && echo "results in $OUT/results.tar.gz"
