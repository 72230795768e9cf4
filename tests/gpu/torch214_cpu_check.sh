#!/usr/bin/env bash
# Issue 32, on the CPU machine (no GPU): does torch 2.14.1 load against the H200's NCCL 2.28.9, and does each of
# sgl-deep-gemm 0.1.5.post3, 0.1.7, 0.2.0, 0.2.2, 0.2.3.post2 load under it with every symbol bound? The checks
# behind tests/gpu/nccl_standin.c and tests/gpu/dg020_check_shim.cpp (tests/gpu/README-torch214.md lists what
# they showed). Everything goes under WORK; nothing into .venv or the system.
#   WHEELS: torch-2.14.1-cp312 wheel, nvidia_nccl_cu13-2.28.9, apache_tvm_ffi-0.1.11, the five sgl_deep_gemm wheels
#   NVWHEELS: folder(s), space-separated, holding the other nvidia-*-cu13 wheels torch 2.14.1 pins (cublas, cuda_cupti, cuda_nvrtc, cuda_runtime,
#             cudnn_cu13, cufft, cufile, curand, cusolver, cusparse, cusparselt_cu13, nvjitlink, nvshmem_cu13, nvtx)
#   NV211 (optional): folder of the nvidia wheels torch 2.11.0 pins where they differ from 2.14.1's (nvidia-cublas
#             13.1.0.3, nvidia-nvjitlink 13.0.88, nvidia-cudnn-cu13 9.19.0.56, nvidia-cusparselt-cu13 0.8.0; read with
#             `pip install --dry-run --report` of torch==2.11.0 and of its cuda-toolkit[...]==13.0.2): then the imports
#             run again against exactly the libraries the H200 has beside its torch 2.11
# usage: PY=python3.12 WHEELS=/tmp/t1-wheels NVWHEELS="/opt/pypi-more/files /opt/pypi/files" WORK=/tmp/t214-cpu \
#        bash tests/gpu/torch214_cpu_check.sh
set -uo pipefail
py=${PY:-python3.12} whl=${WHEELS:?} nvw=${NVWHEELS:?} work=${WORK:-/tmp/t214-cpu}
src=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$work" && cd "$work" || exit 2
pipt() { "$py" -m pip install -q --no-deps --no-index --no-compile --target "$@" 2>&1 | grep -v WARNING; }
[ -d torch/torch ] || pipt torch "$whl"/torch-2.14.1-cp312-*.whl
if [ ! -d sys/nvidia ]; then
  nv=()
  for n in cublas cuda_cupti cuda_nvrtc cuda_runtime cudnn_cu13 cufft cufile curand cusolver cusparse \
           cusparselt_cu13 nvjitlink nvshmem_cu13 nvtx; do
    nv+=("$(for d in $nvw; do ls "$d"/nvidia_"$n"-*.whl 2>/dev/null; done | tail -1)")
  done
  pipt sys "${nv[@]}" "$whl"/nvidia_nccl_cu13-2.28.9-*.whl   # the H200's NCCL, not the 2.30.7 torch pins
fi
[ -d deps/sympy ] || "$py" -m pip install -q --no-compile --target deps sympy typing_extensions filelock networkx \
  jinja2 fsspec numpy 2>&1 | grep -v WARNING
ln -sfn "$work/sys/nvidia" torch/nvidia   # as carry_torch.sh join links it to the machine's own
lib=torch/torch/lib
for l in "$lib"/*.so*; do nm -D --defined-only "$l" 2>/dev/null; done | awk '{print $NF}' | sort -u > torch.def
nm -D --defined-only sys/nvidia/nccl/lib/libnccl.so.2 | awk '{print $NF}' | sort -u > nccl.def
nm -D --undefined-only "$lib"/libtorch_cuda.so | awk '{print $NF}' | grep -E '^nccl' | sort -u | comm -23 - nccl.def \
  > nccl-missing.txt
echo "NCCL functions libtorch_cuda.so imports that NCCL 2.28.9 lacks ($(wc -l < nccl-missing.txt)):" $(cat nccl-missing.txt)
sites=()
for v in 0.1.5.post3 0.1.7 0.2.0 0.2.2 0.2.3.post2; do
  [ -d "site-$v/deep_gemm" ] || pipt "site-$v" "$whl"/sgl_deep_gemm-"$v"-*.whl "$whl"/apache_tvm_ffi-0.1.11-*.whl
  nm -D --undefined-only "site-$v/deep_gemm/_C.so" | awk '{print $NF}' | grep -E '^_ZN?K?[0-9]*(c10|at|torch)' \
    | sort -u | comm -23 - torch.def > "missing-$v.txt"
  echo "sgl-deep-gemm $v: c10/at/torch symbols torch 2.14.1 does not export: $(wc -l < "missing-$v.txt") $(cat "missing-$v.txt")"
  sites+=("$v")
done
# a CPU-check-only stand-in for the CUDA driver: the cu* functions the libraries import, returning NO_DEVICE (100)
{ for l in "$lib"/*.so site-*/deep_gemm/_C.so; do nm -D --undefined-only "$l" | awk '{print $NF}'; done; } \
  | grep -E '^cu[A-Z]' | sort -u > cu.undef
{ for l in sys/nvidia/*/lib/*.so* "$lib"/*.so*; do nm -D --defined-only "$l" 2>/dev/null | awk '{print $NF}'; done; } \
  | sort -u | comm -13 - cu.undef | sed 's/.*/int &() { return 100; }/' > libcuda_standin.c
mkdir -p cudastub && cc -shared -fPIC -Wl,-soname,libcuda.so.1 -o cudastub/libcuda.so.1 libcuda_standin.c
cc -shared -fPIC -O2 -o libnccl_standin.so "$src/nccl_standin.c"
g++ -shared -fPIC -O2 -Wl,--as-needed -o libdg020_check_shim.so "$src/dg020_check_shim.cpp" -ldl
export LD_LIBRARY_PATH=$work/cudastub
base=$work/torch:$work/deps
echo "import torch without the NCCL stand-in:"
PYTHONPATH=$base "$py" -c 'import torch; print(torch.__version__)' 2>&1 | tail -1
echo "import torch with it:"
PYTHONPATH=$base LD_PRELOAD=$work/libnccl_standin.so "$py" -c 'import torch; print(torch.__version__)' 2>&1 | tail -1
for v in "${sites[@]}"; do
  for pre in libnccl_standin.so libnccl_standin.so:libdg020_check_shim.so; do
    printf '%s LD_BIND_NOW=1 preload %s: ' "$v" "$pre"
    PYTHONPATH=$work/site-$v:$base LD_BIND_NOW=1 LD_PRELOAD=$(echo "$pre" | sed "s|[^:]*|$work/&|g") "$py" -c \
      'import torch, deep_gemm; print("import ok", deep_gemm.__version__)' 2>&1 | tail -1 | cut -c1-220
  done
done
echo "tvm-ffi torch add-on under torch 2.14.1:"
PYTHONPATH=$work/site-0.2.2:$base LD_PRELOAD=$work/libnccl_standin.so TVM_FFI_CACHE_DIR=$work/tvm-ffi-cache "$py" -c '
import torch, tvm_ffi, tvm_ffi._optional_torch_c_dlpack as o
print("torch sets __dlpack_c_exchange_api__:", hasattr(torch.Tensor, "__dlpack_c_exchange_api__"), "add-on loaded:", o._LIB)'
# include_device_assertions=false: with true, torch 2.14.1 first sets up its device-assertion registry, which needs a
# driver (here it throws "CUDA driver version is insufficient", from inside the 6-argument function: that trace
# shows the forwarding too)
echo "the shim forwards (err=0, cudaSuccess) to the 6-argument function:"
PYTHONPATH=$work/site-0.2.0:$base LD_PRELOAD=$work/libnccl_standin.so:$work/libdg020_check_shim.so "$py" -c '
import ctypes, torch, deep_gemm
f = ctypes.CDLL(None)["_ZN3c104cuda29c10_cuda_check_implementationEiPKcS2_jb"]
f.argtypes, f.restype = [ctypes.c_int32, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint32, ctypes.c_bool], None
f(0, b"check.cpp", b"fn", 1, False)
print("returned normally")'
# an error thrown by the 6-argument function reaches the caller through the shim (a C++ harness; no torch needed)
mkdir -p shimexc && cat > shimexc/fake6.cpp <<'CPP'
#include <cstdint>
#include <stdexcept>
namespace c10 { namespace cuda { class CUDAErrorLogCapture;
void c10_cuda_check_implementation(int32_t err, const char*, const char*, uint32_t, bool, CUDAErrorLogCapture* c) {
  if (err != 0) throw std::runtime_error(c == nullptr ? "thrown by the 6-argument function (capture nullptr)" : "?");
}}}
CPP
cat > shimexc/main.cpp <<'CPP'
#include <cstdint>
#include <cstdio>
#include <stdexcept>
namespace c10 { namespace cuda { void c10_cuda_check_implementation(int32_t, const char*, const char*, uint32_t, bool); }}
int main() {
  c10::cuda::c10_cuda_check_implementation(0, "f", "fn", 1, true);
  try { c10::cuda::c10_cuda_check_implementation(2, "f", "fn", 1, true); std::puts("err=2: no exception"); return 1; }
  catch (const std::exception& e) { std::printf("err=2: caught through the shim: %s\n", e.what()); }
  return 0;
}
CPP
(cd shimexc && g++ -shared -fPIC -o libfake6.so fake6.cpp && cp ../libdg020_check_shim.so . &&
 g++ -o main main.cpp -Wl,--no-as-needed -L. -lfake6 -ldg020_check_shim -Wl,-rpath,"$PWD" && ./main)
if [ -n "${NV211:-}" ]; then
  if [ ! -d sys211/nvidia ]; then
    nv=("$NV211"/*.whl)
    for n in cuda_cupti cuda_nvrtc cuda_runtime cufft cufile curand cusolver cusparse nvshmem_cu13 nvtx; do
      nv+=("$(for d in $nvw; do ls "$d"/nvidia_"$n"-*.whl 2>/dev/null; done | tail -1)")
    done
    pipt sys211 "${nv[@]}" "$whl"/nvidia_nccl_cu13-2.28.9-*.whl
  fi
  ln -sfn "$work/sys211/nvidia" torch/nvidia
  for v in "${sites[@]}"; do
    printf '%s against the nvidia libraries torch 2.11.0 pins, LD_BIND_NOW=1, both preloaded: ' "$v"
    PYTHONPATH=$work/site-$v:$base LD_BIND_NOW=1 LD_PRELOAD=$work/libnccl_standin.so:$work/libdg020_check_shim.so \
      "$py" -c 'import torch, deep_gemm; print("import ok", torch.__version__, deep_gemm.__version__)' 2>&1 | tail -1
  done
  ln -sfn "$work/sys/nvidia" torch/nvidia
fi
