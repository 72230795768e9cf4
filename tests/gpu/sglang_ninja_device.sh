#!/usr/bin/env bash
# The sglang 0.5.23 ninja-JIT device check (tests/gpu/sglang_ninja_device.py), one call on the H200.
# Prepare on the CPU machine (from this worktree):  tests/gpu/sglang_ninja_device.sh prepare /work/main/.dev-ninja
#   -> .dev-ninja/{whl (cp312 wheels, fetched by hand: sglang 0.5.23 and its kernels/jit import chain -- tvm-ffi,
#      msgspec, orjson, pybase64, pyzmq, starlette, anyio, ipython, traitlets, psutil, tqdm, ninja, pydantic(+core,
#      annotated-types, typing-inspection), aiohttp and its deps, requests and its deps, pygments; pyyaml, packaging,
#      filelock for dgprecompile -- 52 MB),
#      src (this worktree's dgprecompile + tests/gpu + tests/standins), carried (a cache warmed here)}
# Run there, carrying .dev-ninja:          bash .dev-ninja/src/tests/gpu/sglang_ninja_device.sh run .dev-ninja
set -euo pipefail
mode=$1 dir=$2
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
export DGP_STANDINS=""  # none, unless the machine lacks triton (sglang imports it at module level)
python3 -c "import triton" 2>/dev/null || export DGP_STANDINS=triton
echo "stand-ins: ${DGP_STANDINS:-none}" | tee "$OUT/standins.txt"
python3 "$dir/src/tests/gpu/sglang_ninja_device.py" "$OUT" "$dir/carried" 0.5.23 > "$OUT/stdout.txt" 2>&1 || true
tail -c 9000 "$OUT/stdout.txt"
