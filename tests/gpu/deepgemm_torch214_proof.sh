#!/usr/bin/env bash
# Issue 32's device call: SGLang 0.5.18-0.5.23's DeepGEMM (sgl-deep-gemm 0.1.5.post3, 0.1.7, 0.2.0, 0.2.2,
# 0.2.3.post2) on the H200 under the torch those releases were built for, 2.14.1, carried in pieces
# (tests/gpu/carry_torch.sh; the call sequence is tests/gpu/README-torch214.md). In one call (at most 600 s):
#   1. keep this call's piece, join every piece (each sha256 checked), install torch 2.14.1 into a private folder
#      (/tmp/t214/torch, pip --target; nothing system-wide), its nvidia/ linked to the machine's nvidia-*-cu13
#   2. build the NCCL STAND-IN (tests/gpu/nccl_standin.c: 11 functions torch 2.14.1 imports that the machine's NCCL
#      2.28.9 lacks, each returning ncclInternalError if called) and the sgl-deep-gemm 0.2.0 SHIM
#      (tests/gpu/dg020_check_shim.cpp: the 5-argument c10_cuda_check_implementation 0.2.0 imports, forwarded to
#      torch 2.14.1's 6-argument one); both preloaded into every process below, and named so in every record
#   3. check torch 2.14.1 is the torch every process gets (PYTHONPATH first); each release's `import deep_gemm`
#      with LD_BIND_NOW=1 (every symbol bound at load, so a missing one shows here); then a CUDA matmul
#   4. the sweep the older generations passed (tests/gpu/sweep_generations.sh / .py), all five releases in
#      parallel, GPU-free nvcc warm for each (dgprecompile computes the names: the sweep after it proves the names
#      and the kernel choice); for the 0.2.x releases also DeepJIT's read-only shared roots
# STACK=<base> (issue 44 item 2): sglang 0.5.23's stack, installed there by `tests/gpu/carry_stack.sh install <base>`
#   in an earlier call (tests/gpu/README-stack0523.md): step 1 takes its torch 2.14.1 (<base>/site) and its joined
#   wheels (<base>/joined: sgl-deep-gemm 0.2.0, 0.2.2, 0.2.3.post2) instead of carry_torch.sh's pieces, its stack.env's
#   NCCL stand-in, and sweeps the three 0.2.x releases (sglang 0.5.20, 0.5.22, 0.5.23); the rest is unchanged.
# Results under $OUT: SUMMARY.txt, machine.txt, proof.log, results.tar.gz (every log and record).
# usage: [DGP_GIT=<full sha>] bash tests/gpu/deepgemm_torch214_proof.sh [SWEEP_BUDGET_SECONDS]   (default 420, less if the steps before
#        the sweep took long: the call ends before 570 s)
set -uo pipefail
t0=$(date +%s)
root=$PWD
ret=${OUT:-$root/out/torch214}
mkdir -p "$ret"
exec > >(tee "$ret/proof.log") 2>&1
base=/tmp/t214
say() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
fail() { say "FAILED: $*"; echo "FAILED: $*" > "$ret/SUMMARY.txt"; sleep 1; exit 1; }  # sleep: let tee finish

VERSIONS="0.1.5.post3:0.5.18 0.1.7:0.5.19 0.2.0:0.5.20 0.2.2:0.5.22 0.2.3.post2:0.5.23"
if [ -n "${STACK:-}" ]; then
  say "1. sglang 0.5.23's stack at $STACK (installed by carry_stack.sh install)"
  [ -f "$STACK/stack.env" ] || fail "no $STACK/stack.env: run tests/gpu/carry_stack.sh install $STACK first"
  . "$STACK/stack.env"  # STACK_SITE (torch 2.14.1 and the rest), LD_PRELOAD (its NCCL stand-in)
  rm -rf "$base" && mkdir -p "$base/lib" && ln -s "$STACK/joined" "$base/joined" && ln -s "$STACK_SITE" "$base/torch"
  VERSIONS="${STACK_VERSIONS:-0.2.0:0.5.20 0.2.2:0.5.22 0.2.3.post2:0.5.23}"  # the stack carries only the 0.2.x wheels
else
  say "1. keep, join, install torch 2.14.1 into $base/torch"
  bash tests/gpu/carry_torch.sh keep || fail "keep (a piece arrived corrupt or none was carried: see above)"
  rm -rf "$base" && mkdir -p "$base/lib"
  bash tests/gpu/carry_torch.sh join "$base/joined" "$base/torch" || fail "join/install (see above)"
fi
ls "$base/joined"/sgl_deep_gemm-*.whl "$base/joined"/apache_tvm_ffi-*.whl || fail "sgl-deep-gemm wheels not among the joined files"

say "2. build the NCCL stand-in and the 0.2.0 shim"
cc=$(command -v cc || command -v gcc) || fail "no C compiler (cc, gcc)"
"$cc" -shared -fPIC -O2 -o "$base/lib/libnccl_standin.so" tests/gpu/nccl_standin.c || fail "cc nccl_standin.c"
g++ -shared -fPIC -O2 -Wl,--as-needed -o "$base/lib/libdg020_check_shim.so" tests/gpu/dg020_check_shim.cpp -ldl \
  || fail "g++ dg020_check_shim.cpp"
nm -D --defined-only "$base/lib/libdg020_check_shim.so" | grep -q ' _ZN3c104cuda29c10_cuda_check_implementationEiPKcS2_jb$' \
  || fail "the shim does not define the 5-argument symbol"
[ "$(nm -D --defined-only "$base/lib/libnccl_standin.so" | grep -c ' T nccl')" = 11 ] || fail "stand-in: not 11 functions"
export PYTHONPATH="$base/torch" PYTHONUNBUFFERED=1 OPENBLAS_NUM_THREADS=1
# dgprecompile's own dependencies the device lacks (jsonschema and the wheels it needs: .whl/extra, carried beside the last piece)
if [ -d .whl/extra ]; then python3 -m pip install -q --no-index --no-deps --no-compile --target "$base/extra" .whl/extra/*.whl && export PYTHONPATH="$PYTHONPATH:$base/extra"; fi
export LD_PRELOAD="$base/lib/libnccl_standin.so:$base/lib/libdg020_check_shim.so"
echo "stand-ins preloaded in every process of this proof: LD_PRELOAD=$LD_PRELOAD (NCCL STAND-IN, 0.2.0 SHIM)"

say "3. torch 2.14.1 on the GPU, and each release's deep_gemm with every symbol bound"
python3 -c 'import torch; assert torch.__version__.startswith("2.14.1"), torch.__version__; print("torch", torch.__version__, torch.__file__, "cuda", torch.version.cuda)' \
  > "$base/torch-check.txt" 2>&1 || { cat "$base/torch-check.txt"; fail "torch 2.14.1 does not import here"; }
for item in $VERSIONS; do
  v=${item%%:*}; site=$base/import-$v
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" "$base/joined"/sgl_deep_gemm-"$v"-*.whl \
    "$base/joined"/apache_tvm_ffi-*.whl > /dev/null 2>&1
  PYTHONPATH="$site:$PYTHONPATH" LD_BIND_NOW=1 python3 -c 'import torch, deep_gemm, sys; print(sys.argv[1], "import ok (LD_BIND_NOW=1):", deep_gemm.__file__, "torch", torch.__version__)' "$v" 2>&1 | tail -1
done >> "$base/torch-check.txt"
python3 - >> "$base/torch-check.txt" 2>&1 <<'PY' || { cat "$base/torch-check.txt"; fail "torch 2.14.1 does not run on the GPU"; }
import torch
x = torch.randn(256, 256, device="cuda")
y = (x @ x).sum()
torch.cuda.synchronize()
print("cuda matmul ok on", torch.cuda.get_device_name(), float(y) == float((x @ x).sum()))
PY
cat "$base/torch-check.txt"
# T214_SETUP_ONLY=1: stop here, torch 2.14.1 and the five releases installed under $base (tests/gpu/deepgemm_02_compiled_n.sh)
if [ -n "${T214_SETUP_ONLY:-}" ]; then say "setup only (T214_SETUP_ONLY)"; sleep 1; exit 0; fi

left=$(( 545 - ($(date +%s) - t0) ))
budget=${1:-420}; [ "$budget" -gt "$left" ] && budget=$left
say "4. the sweep: budget $budget s"
# release:sglang that pins it (METADATA):warm backend; nvcc everywhere: issue 32 asks for a GPU-free warm per release.
# The cold pass gets 58 % of the budget (five releases' library compiles side by side, 15 processes on 16 cores);
# the GPU-free warms after it are 54 kernels each, 3 workers per release
RELEASES="$(for item in $VERSIONS; do printf '%s:nvcc ' "$item"; done)" \
  WHEELS="$base/joined" OUT="$ret" SWEEP_COLD_PCT=${SWEEP_COLD_PCT:-58} bash tests/gpu/sweep_generations.sh "$budget"
{ echo "torch: private torch 2.14.1 at $base/torch (carried, sha256 checked), PYTHONPATH first in every process"
  echo "preloaded: NCCL STAND-IN (tests/gpu/nccl_standin.c) and sgl-deep-gemm 0.2.0 SHIM (tests/gpu/dg020_check_shim.cpp)"
  cat "$base/torch-check.txt"; } >> "$ret/machine.txt"
cp "$base/torch-check.txt" "$ret/" 2>/dev/null
say "done"
