#!/usr/bin/env bash
# Where warm's zygote spends its import on the H200 host (15-16 s at 8c45a8e, bench/results/2026-12-03-h200-model-*
# warm.json timeline.zygote_import_s; 1.3 s on the 2-core CPU machine): the same imports as the zygote's preload of
# sglang 0.5.14's JIT builders (compile/backends/sglang_jit.py preload), with the GPU hidden as warm hides it, under
# python -X importtime; writes $OUT/zygote-import/{importtime.txt,top.txt}. About 30 s. Carry .whl as model_proof.sh,
# or STACK=/tmp/stack0523 (README-stack0523.md, after its install call): that stack's torch and builders, nothing carried.
set -uo pipefail
root=$PWD; OUT=${OUT:-$root/out}; d=$OUT/zygote-import; mkdir -p "$d"
if [ -n "${STACK:-}" ]; then  # sglang 0.5.23's stack (carry_stack.sh install): its ninja builders' module
  . "$STACK/stack.env"; site=$STACK_SITE; mods="${MODS:-sglang.kernels.jit.utils}"
else
  site=$(mktemp -d)
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .whl/sgl_deep_gemm-0.1.3-*.whl \
    .whl/apache_tvm_ffi-*.whl .whl/sglang/*.whl .whl/extra/*.whl > "$d/install.txt" 2>&1
  mods="${MODS:-sglang.jit_kernel.per_token_group_quant_8bit_v2 sglang.jit_kernel.activation sglang.jit_kernel.norm sglang.jit_kernel.rope sglang.jit_kernel.all_reduce sglang.jit_kernel.clamp_position}"  # 0.5.14's builders (data/sglang_jit.yaml)
fi
export PYTHONPATH="$site:$root/tests/standins:$root" DGP_STANDINS=sgl_kernel CUDA_VISIBLE_DEVICES=
# torch alone first, twice (a cold page cache against a warm one), then the builders
for i in 1 2; do python3 -c "import time; t = time.monotonic(); import torch; print(f'import torch ($i): {time.monotonic() - t:.2f} s')"; done > "$d/torch.txt" 2>&1
python3 -X importtime -c "import importlib, sys, time
t = time.monotonic()
for m in sys.argv[1:]: importlib.import_module(m)
print(f'imports: {time.monotonic() - t:.2f} s')" $mods > "$d/seconds.txt" 2> "$d/importtime.txt"
sort -t'|' -k2 -n -r "$d/importtime.txt" | head -40 > "$d/top.txt"
cat "$d/torch.txt" "$d/seconds.txt" >> "$d/top.txt"
cat "$d/top.txt"
