#!/usr/bin/env bash
# Where warm's zygote spends its import on the H200 host (15-16 s at 8c45a8e, bench/results/2026-12-03-h200-model-*
# warm.json timeline.zygote_import_s; 1.3 s on the 2-core CPU machine): the same imports as the zygote's preload of
# sglang 0.5.14's JIT builders (compile/backends/sglang_jit.py preload), with the GPU hidden as warm hides it, under
# python -X importtime; writes $OUT/zygote-import/{importtime.txt,top.txt}. About 30 s. Carry .whl as model_proof.sh.
set -uo pipefail
root=$PWD; OUT=${OUT:-$root/out}; d=$OUT/zygote-import; mkdir -p "$d"
site=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .whl/sgl_deep_gemm-0.1.3-*.whl \
  .whl/apache_tvm_ffi-*.whl .whl/sglang/*.whl .whl/extra/*.whl > "$d/install.txt" 2>&1
export PYTHONPATH="$site:$root/tests/standins:$root" DGP_STANDINS=sgl_kernel CUDA_VISIBLE_DEVICES=
mods="${MODS:-sglang.jit_kernel.per_token_group_quant_8bit_v2 sglang.jit_kernel.activation sglang.jit_kernel.norm sglang.jit_kernel.rope sglang.jit_kernel.all_reduce sglang.jit_kernel.clamp_position}"  # 0.5.14's builders (data/sglang_jit.yaml)
python3 -X importtime -c "import importlib, sys, time
t = time.monotonic()
for m in sys.argv[1:]: importlib.import_module(m)
print(f'imports: {time.monotonic() - t:.2f} s')" $mods > "$d/seconds.txt" 2> "$d/importtime.txt"
sort -t'|' -k2 -n -r "$d/importtime.txt" | head -40 > "$d/top.txt"
cat "$d/seconds.txt" >> "$d/top.txt"
cat "$d/top.txt"
