"""The C++-JIT DeepGEMM runtimes: sgl-kernel / sglang-kernel's bundled DeepGEMM and sgl-deep-gemm 0.1.x/0.2.x.

Their generations are data: one :class:`~dgprecompile.runtimes.deepgemm.Generation` per release line below (what
differs between them is fields, never code: the heuristic and key scheme each names live in planning/heuristics
and keys/). A new release line is one more entry here, plus its key scheme and heuristic where they are new.
"""

from __future__ import annotations

from dgprecompile.runtimes.base import StrictBy
from dgprecompile.runtimes.deepgemm import Generation

# sgl-deep-gemm releases whose generated code (the _C.so format strings) was read; keys/cxx_templates.py maps each
# to its template and tests/test_cxx_keys.py checks both lists agree. Release candidates were not read.
SDG_01_KEY_VERSIONS = ("0.1.0", "0.1.1", "0.1.2", "0.1.3", "0.1.4", "0.1.4.post1", "0.1.5", "0.1.5.post1",
                       "0.1.5.post2", "0.1.5.post3", "0.1.6", "0.1.7")
# sgl-kernel / sglang-kernel releases whose bundled deep_gemm was read (headers, .so format, flag and key strings):
# sgl-kernel 0.3.14.post1-0.3.18.post2 share one header set and the 17-slot format; sgl-kernel 0.3.19 and
# sglang-kernel 0.4.0-0.4.2 another header set and the 18-slot format (keys/cxx_templates.py SK_RELEASE_TEMPLATE)
SK_KEY_VERSIONS = ("0.3.14.post1", "0.3.15", "0.3.16.post3", "0.3.16.post4", "0.3.16.post5", "0.3.17",
                   "0.3.17.post1", "0.3.18.post2", "0.3.19", "0.4.0", "0.4.1", "0.4.2")
# sgl-kernel 0.3.7-0.3.9.post2 (the releases sglang 0.5.1.post3-0.5.3rc0 pin): one header set, the 16-slot format,
# 0.3.14.post1's flag and key strings (keys/cxx_templates.py SK_RELEASE_TEMPLATE; docs/heuristics.md)
SK_037_KEY_VERSIONS = ("0.3.7", "0.3.7.post1", "0.3.8", "0.3.9.post2")
# sgl-kernel 0.3.20-0.3.21 (sglang 0.5.7-0.5.9): one header set (SGF@54f99a8's), the 21-slot format
SK_0320_KEY_VERSIONS = ("0.3.20", "0.3.21")
SDG_02_KEY_VERSIONS = ("0.2.0", "0.2.1", "0.2.1.post1", "0.2.2", "0.2.3", "0.2.3.post1", "0.2.3.post2", "0.2.5")


# what the sgl-kernel / sglang-kernel wave generations share: backends, and the include path (-I<install>/include)
# and the header bytes in the key (the version is not); the largest m each one's device runs checked (the
# sweeps of tests/gpu/sweep_generations.sh: dense to 65,473, masked expected_m to 8,200; the tests tie them to the
# record)
_SK_WAVES = dict(backends=("nvcc", "cxx", "sweep"),
                 fingerprint_fields=("deepgemm.generation", "deepgemm.headers_sha256", "deepgemm.package_dir",
                                     "nvcc.release", "env", "num_sms"),
                 entry_files=("kernel.cu", "kernel.cubin"), strict_by=StrictBy.STANDIN)
_SK_CHECKED_M = (("GEMM_NT_F8F8BF16", 65473), ("GROUPED_GEMM_NT_F8F8BF16_MASKED", 8200))

_KEYS_01 = ("deepgemm.generation", "deepgemm.version", "deepgemm.headers_sha256", "nvcc.release", "env", "num_sms")

CXX_GENERATIONS: tuple[Generation, ...] = (
    Generation(
        # an sgl-kernel / sglang-kernel whose headers data/deepgemm_headers.yaml does not list (sgl-kernel 0.3.9,
        # 0.3.9.post1, 0.3.10-0.3.13: no sglang release pins them; a newer release): no profile names it
        id="sgl-kernel-cxx", label="C++-JIT DeepGEMM of an sgl-kernel release whose headers were not read",
        heuristic=None, key_scheme=None, key_versions=None, backends=("cxx", "sweep"),
        fingerprint_fields=_KEYS_01, entry_files=("kernel.cu", "kernel.cubin"), strict_by=StrictBy.STANDIN,
    ),
    Generation(
        id="sgl-kernel-waves-0.3.20", label="C++-JIT DeepGEMM bundled in sgl-kernel 0.3.20-0.3.21",
        # the wave rule's later revision (SGF@54f99a8, whose headers and .so strings equal these wheels')
        heuristic="sm90-waves-0320",
        # sgl-kernel-waves' key scheme with 0.1.x's verbose-ptxas flags, 21-slot code
        key_scheme="sk-0320", key_versions=SK_0320_KEY_VERSIONS,
        # names and kernel.cu equal every entry 0.3.21's JIT made on an H200, its host code rebuilt from its source
        # (the wheel's own .so is a CUDA 12 / torch 2.9 build); 0.3.20 ships the same headers and strings
        keys_proven_versions=("0.3.21",),
        **_SK_WAVES,
        gpu_validated="sgl-kernel 0.3.21's headers and Python with its host code rebuilt on an H200 from SGF@54f99a8 "
                      "(the wheel's .so links CUDA 12 / torch 2.9): every sampled m of the 480B tp8/ep8 dense keys and "
                      "masked expected_m 1-8,200 against DG_PRINT_CONFIGS; after a GPU-free nvcc warm 89,806 calls "
                      "compiled nothing (tests/data/sweep_generations_h200.json, run 5)",
        gpu_checked_m=_SK_CHECKED_M,
    ),
    Generation(
        id="sgl-kernel-waves-0.3.7", label="C++-JIT DeepGEMM bundled in sgl-kernel 0.3.7-0.3.9.post2",
        # the wave rule's earlier revision (SGF@b981e3e, whose headers and .so strings equal these wheels')
        heuristic="sm90-waves-037",
        # sgl-kernel-waves' key scheme (the same compiler.hpp, hash.hpp, kernel_runtime.hpp blobs), 16-slot code
        key_scheme="sk", key_versions=SK_037_KEY_VERSIONS,
        # names and kernel.cu equal every entry 0.3.9.post2's JIT made on an H200, its host code rebuilt from its
        # source (the wheel's own .so is a CUDA 12 / torch 2.8 build); 0.3.7-0.3.8 ship the same headers and strings
        keys_proven_versions=("0.3.9.post2",),
        **_SK_WAVES,
        gpu_validated="sgl-kernel 0.3.9.post2's headers and Python with its host code rebuilt on an H200 from "
                      "SGF@b981e3e (the wheel's .so links CUDA 12 / torch 2.8): every sampled m of the 480B tp8/ep8 "
                      "keys against DG_PRINT_CONFIGS; after a GPU-free nvcc warm of the sglang 0.5.2 plan 43,930 "
                      "calls compiled nothing (tests/data/sweep_generations_h200.json, run 7)",
        gpu_checked_m=_SK_CHECKED_M,
    ),
    Generation(
        id="sgl-kernel-waves",
        label="C++-JIT DeepGEMM bundled in sgl-kernel 0.3.14.post1-0.3.19 / sglang-kernel 0.4.0-0.4.2",
        # the wave rule with a minimised SM count (another rule than 0.1.x's), read from SGF@5f8a71a (= SGF@f4adba8's)
        heuristic="sm90-waves",
        key_scheme="sk", key_versions=SK_KEY_VERSIONS,
        # names and kernel.cu equal every entry its runtime made on an H200 (tests/test_sk_generation.py), and every
        # entry 0.3.16.post3's JIT made there with its host code rebuilt from source (tests/test_sk_source_records.py)
        keys_proven_versions=("0.4.2", "0.3.16.post3"),
        **_SK_WAVES,
        gpu_validated="sglang-kernel 0.4.2: every sampled m of the 480B tp8/ep8 dense keys (to 65,536) and masked "
                      "expected_m 1-8,200 against DG_PRINT_CONFIGS on an H200; after a GPU-free nvcc warm 89,806 calls compiled "
                      "nothing (tests/data/sweep_generations_h200.json, run 4); sgl-kernel 0.3.16.post3's headers and "
                      "Python with its host code rebuilt there from SGF@f4adba8: the same checks (run 6)",
        gpu_checked_m=_SK_CHECKED_M,
    ),
    Generation(
        id="sgl-deep-gemm-0.1", label="sgl-deep-gemm 0.1.x (C++ JIT, tvm-ffi)",
        heuristic="sm90-cxx",
        # one key scheme for 0.1.0-0.1.7; the generated code differs at 0.1.4 (keys/cxx_templates.py)
        key_scheme="sdg-01",
        key_versions=SDG_01_KEY_VERSIONS,
        # names and kernel.cu equal entries the runtime made on an H200 (tests/test_generation_records.py)
        keys_proven_versions=("0.1.3", "0.1.4.post1", "0.1.5.post1"),
        backends=("nvcc", "cxx", "sweep"),
        # the include path (-I<install>/include) is part of the 0.1.x key: the install location must match
        fingerprint_fields=_KEYS_01[:3] + ("deepgemm.package_dir",) + _KEYS_01[3:],
        entry_files=("kernel.cu", "kernel.cubin"), strict_by=StrictBy.STANDIN,
        gpu_validated="sgl-deep-gemm 0.1.3, 0.1.4.post1, 0.1.5.post1: every sampled m of the 480B tp8/ep8 keys "
                      "against DG_PRINT_CONFIGS on an H200 (tests/data/sweep_generations_h200.json)",
        # runs 1-3 of that record (0.1.3 dense and masked to these m; contiguous by 0.1.4.post1/0.1.5.post1)
        gpu_checked_m=(("GEMM_NT_F8F8BF16", 262208), ("GROUPED_GEMM_NT_F8F8BF16_MASKED", 104920),
                       ("GROUPED_GEMM_NT_F8F8BF16_CONTIG", 263168)),
    ),
    Generation(
        id="sgl-deep-gemm-0.2", label="sgl-deep-gemm 0.2.x (DeepJIT)",
        # 0.2.x keeps 0.1.x's SM90 heuristic source (docs/heuristics.md); not run on a GPU
        heuristic="sm90-cxx",
        # DeepJIT's key is computable (keys/deepjit.py): source + headers, nvcc --version text, flags, CUTLASS
        key_scheme="deepjit", key_versions=SDG_02_KEY_VERSIONS,
        keys_proven_versions=(),  # no 0.2.x call could run on the device (torch 2.11): names read, not observed
        backends=("nvcc", "cxx", "sweep"),
        fingerprint_fields=("deepgemm.generation", "deepgemm.version", "deepgemm.headers_sha256",
                            "nvcc.version_sha256", "env", "num_sms"),
        entry_files=("kernel.cu", "kernel.cubin", ".committed"), strict_by=StrictBy.STANDIN,
        # DeepJIT's DiskCache::from_env (deep_jit/cache/disk.hpp): DG_JIT_CACHE_DIR (else DJ_JIT_CACHE_DIR) is
        # PATH_1:PATH_2:...; entries are looked up in every root in order, built and committed only in the first
        root_separator=":",
        nvrtc_switch=None,  # DeepJIT has no NVRTC path (its wheels do not hold the switch's name)
    ),
)
