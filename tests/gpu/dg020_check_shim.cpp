// sgl-deep-gemm 0.2.0 SHIM (issue 32): 0.2.0's deep_gemm/_C.so imports the 5-argument
//   c10::cuda::c10_cuda_check_implementation(int, char const*, char const*, unsigned int, bool)
//   (_ZN3c104cuda29c10_cuda_check_implementationEiPKcS2_jb)
// which torch 2.14.1 no longer exports; it exports the 6-argument one whose last parameter
// (c10::cuda::CUDAErrorLogCapture*, default nullptr in torch 2.14.1's c10/cuda/CUDAException.h) is new:
//   _ZN3c104cuda29c10_cuda_check_implementationEiPKcS2_jbPNS0_19CUDAErrorLogCaptureE
// Found with `nm -D --undefined-only deep_gemm/_C.so` against `nm -D --defined-only torch/lib/*.so` (torch
// 2.14.1 wheel): that is the only c10/at/torch symbol any of 0.1.5.post3, 0.1.7, 0.2.0, 0.2.2, 0.2.3.post2 misses.
// This one function forwards to the 6-argument one with nullptr. No torch header is included: the declarations
// below give the same mangled names (tests/gpu/deepgemm_torch214_proof.sh checks them with nm before use). The
// target is looked up when first called (dlsym in the already-loaded libc10_cuda.so), so the library can be
// preloaded into every process of the proof, including ones that never load torch.
// Build: g++ -shared -fPIC -O2 -o libdg020_check_shim.so tests/gpu/dg020_check_shim.cpp -ldl
#include <dlfcn.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace c10 {
namespace cuda {
class CUDAErrorLogCapture;
void c10_cuda_check_implementation(const int32_t err, const char* filename, const char* function_name,
                                   const uint32_t line_number, const bool include_device_assertions);
}  // namespace cuda
}  // namespace c10

namespace {
using Check6 = void (*)(int32_t, const char*, const char*, uint32_t, bool, c10::cuda::CUDAErrorLogCapture*);
const char kTarget[] = "_ZN3c104cuda29c10_cuda_check_implementationEiPKcS2_jbPNS0_19CUDAErrorLogCaptureE";

Check6 target() {
  static Check6 fn = nullptr;
  if (fn == nullptr) {
    void* sym = dlsym(RTLD_DEFAULT, kTarget);
    if (sym == nullptr) {  // torch loads libc10_cuda.so without RTLD_GLOBAL: ask for it by name, never load it
      void* lib = dlopen("libc10_cuda.so", RTLD_NOW | RTLD_NOLOAD);
      sym = lib != nullptr ? dlsym(lib, kTarget) : nullptr;
    }
    if (sym == nullptr) {
      std::fprintf(stderr, "dg020_check_shim: %s not found in this process (torch >= 2.13 not loaded?)\n", kTarget);
      std::abort();
    }
    fn = reinterpret_cast<Check6>(sym);
  }
  return fn;
}
}  // namespace

void c10::cuda::c10_cuda_check_implementation(const int32_t err, const char* filename, const char* function_name,
                                              const uint32_t line_number, const bool include_device_assertions) {
  target()(err, filename, function_name, line_number, include_device_assertions, nullptr);
}
