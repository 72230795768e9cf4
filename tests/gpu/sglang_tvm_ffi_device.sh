#!/usr/bin/env bash
# The sglang 0.5.10-0.5.13 tvm-ffi JIT device check (tests/gpu/sglang_tvm_ffi_device.py), one call on the H200,
# about 3 minutes (A: the GPU-free warm of 10 modules; B, C: under a minute).
# Prepare on the CPU machine (from this worktree):  tests/gpu/sglang_tvm_ffi_device.sh prepare /work/main/.dev-tvm
#   -> .dev-tvm/{whl (cp312 wheels, fetched by hand: sglang==0.5.13 --no-deps, apache-tvm-ffi 0.1.9 (its pin) and
#      ninja; the jit_kernel import chain: orjson, pybase64, pyzmq, psutil, tqdm, msgspec, pydantic(+core,
#      annotated-types, typing-inspection), requests and its deps; pyyaml, packaging, filelock for dgprecompile),
#      src (this worktree's dgprecompile + tests/gpu + tests/standins)}
# Run there, carrying .dev-tvm:          bash .dev-tvm/src/tests/gpu/sglang_tvm_ffi_device.sh run .dev-tvm [0.5.13]
# (0.5.10-0.5.12 the same way with that sglang wheel; 0.5.10-0.5.11 pin tvm-ffi >=0.1.5,<0.2)
set -euo pipefail
mode=$1 dir=$2 version=${3:-0.5.13}
if [ "$mode" = prepare ]; then
  rm -rf "$dir/src" && mkdir -p "$dir/src/tests"
  cp -r dgprecompile "$dir/src/" && cp -r tests/gpu tests/standins "$dir/src/tests/"
  find "$dir/src" -name __pycache__ -prune -exec rm -rf {} +
  du -sh "$dir"
  exit 0
fi
T=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --target "$T" "$dir"/whl/*.whl
export PATH="$T/bin:$PATH" PYTHONPATH="$dir/src:$T:$dir/src/tests/standins" OPENBLAS_NUM_THREADS=1
export DGP_STANDINS="sgl_kernel"  # the JIT modules need none of sgl-kernel's AOT ops
python3 -c "import triton" 2>/dev/null || export DGP_STANDINS="$DGP_STANDINS,triton"
echo "stand-ins: $DGP_STANDINS" | tee "$OUT/standins.txt"
python3 "$dir/src/tests/gpu/sglang_tvm_ffi_device.py" "$OUT" "$version" > "$OUT/stdout.txt" 2>&1 || true
tail -c 9000 "$OUT/stdout.txt"
