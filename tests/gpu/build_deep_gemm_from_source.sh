#!/usr/bin/env bash
# Device helper (H200) for the sgl-kernel releases whose deep_gemm_cpp.abi3.so links CUDA 12 and torch 2.8-2.9,
# which the device (CUDA 13, torch 2.11) cannot load. The JIT's choice and keys live in that .so's host code, which is
# the csrc of the sgl-project/DeepGEMM commit whose headers and strings equal the wheel's (docs/heuristics.md):
#   sgl-kernel 0.3.21 (sglang 0.5.9):   SGF=54f99a8     sgl-kernel 0.3.16.post3 (0.5.4): SGF=f4adba8
#   sgl-kernel 0.3.9.post2 (0.5.2):     SGF=b981e3e
# This rebuilds that host code on the device against its torch and CUDA, and puts the result beside the wheel's own
# Python package and headers, so the JIT that runs is the wheel's headers plus the wheel's source, only compiled for
# this machine.
#
# Needs, carried (git-ignored, made on the CPU machine by tests/gpu/fetch_generation_wheels.sh):
#   $WHEELS/sgf-$SGF-csrc.tgz              `git archive $SGF csrc` of sgl-project/DeepGEMM (not committed here)
#   $WHEELS/sgl_kernel-$SK-deep_gemm.tgz   the wheel's deep_gemm/ package without its .so
# Writes $DEST/sglang_kernel-$SK-src-deep_gemm.tgz (the name tests/gpu/sweep_generations.sh looks for, release
# sk-$SK-src) and $DEST/build-$SK.log; prints a one-call smoke test with DG_PRINT_CONFIGS.
# usage: SK=0.3.21 SGF=54f99a8 WHEELS=.whl-gen DEST=/tmp/sksrc bash tests/gpu/build_deep_gemm_from_source.sh
set -uo pipefail
sk=${SK:-0.3.21}
sgf=${SGF:-54f99a8}
wheels=${WHEELS:-.whl-gen}
dest=${DEST:-/tmp/sksrc}
work=/tmp/sk-build-$sk
rm -rf "$work" && mkdir -p "$work/src" "$work/site" "$dest"
log=$dest/build-$sk.log
tar xzf "$wheels/sgf-$sgf-csrc.tgz" -C "$work/src" || exit 1
tar xzf "$wheels/sgl_kernel-$sk-deep_gemm.tgz" -C "$work/site" || exit 1
# include and library folders of this machine's torch, its CUDA wheels (nvidia/*) and the toolkit, and Python's
flags=$(python3 - <<'EOF'
import glob, os, sysconfig, torch
t = os.path.dirname(torch.__file__)
site = os.path.dirname(t)
inc = [f"{t}/include", f"{t}/include/torch/csrc/api/include", sysconfig.get_paths()["include"],
       "/usr/local/cuda/include", "/usr/local/cuda/include/cccl", *sorted(glob.glob(f"{site}/nvidia/*/include")),
       *sorted(glob.glob(f"{site}/nvidia/cu*/include"))]
lib = [f"{t}/lib", "/usr/local/cuda/lib64", *sorted(glob.glob(f"{site}/nvidia/*/lib"))]
abi = int(torch.compiled_with_cxx11_abi())
print(" ".join([f"-I{p}" for p in inc if os.path.isdir(p)] + [f"-L{p}" for p in lib if os.path.isdir(p)]
               + [f"-Wl,-rpath,{p}" for p in lib if os.path.isdir(p)] + [f"-D_GLIBCXX_USE_CXX11_ABI={abi}"]))
EOF
)
{
  echo "date: $(date -u +%FT%TZ); sgl-kernel $sk deep_gemm package, host code from SGF@$sgf"
  python3 -c 'import torch, sys, sysconfig, os; p = sysconfig.get_paths()["include"]; print("torch", torch.__version__, "python", sys.version.split()[0], "Python.h:", os.path.isfile(p + "/Python.h"))'
  echo "g++: $(g++ --version | head -1)"
  echo "flags: $flags"
} > "$log" 2>&1
cat "$log"
# DeepGEMM's own setup.py flags (C++17, -fPIC, -Wno-psabi); -O1: the host code's choice is integer arithmetic
start=$(date +%s)
if ! g++ -std=c++17 -O1 -fPIC -shared -Wno-psabi -Wno-deprecated-declarations -DTORCH_EXTENSION_NAME=deep_gemm_cpp \
     -I"$work/site/deep_gemm/include" $flags "$work/src/csrc/python_api.cpp" -o "$work/site/deep_gemm/deep_gemm_cpp.abi3.so" \
     -ltorch -ltorch_cpu -ltorch_cuda -lc10 -lc10_cuda -lcudart -lnvrtc -lcuda -ldl >> "$log" 2>&1; then
  echo "build failed after $(( $(date +%s) - start )) s:"; tail -40 "$log"; exit 1
fi
echo "built in $(( $(date +%s) - start )) s" | tee -a "$log"
tar czf "$dest/sglang_kernel-$sk-src-deep_gemm.tgz" -C "$work/site" deep_gemm
# smoke: one dense call (m 8 chooses block_m 16 in 0.3.20+) with the configuration printed
PYTHONPATH="$work/site" DG_PRINT_CONFIGS=1 DG_JIT_CACHE_DIR="$work/smoke-cache" timeout 300 python3 - <<'EOF' 2>&1 | tee -a "$log"
import os, torch, deep_gemm
m, n, k = 8, 1792, 6144
a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn)
sfa = torch.ones(k // 128, m, device="cuda").t()  # MN-major, as SGLang passes them
sfb = torch.ones(n // 128, k // 128, device="cuda")
d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
deep_gemm.fp8_gemm_nt((a, sfa), (b, sfb), d)
torch.cuda.synchronize()
print("entries:", sorted(os.listdir(os.path.join(os.environ["DG_JIT_CACHE_DIR"], "cache"))))
EOF
