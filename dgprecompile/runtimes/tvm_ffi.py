"""SGLang's tvm-ffi load_inline JIT (sglang/jit_kernel, 0.5.9-0.5.16; sglang/kernels/jit, 0.5.17): one loader
family (runtimes/jit_loader.py); its modules per release are data (data/sglang_jit.yaml), its names computed by
keys/sglang_jit.py."""

from __future__ import annotations

from dgprecompile.runtimes.jit_loader import JitFamily

TVM_FFI = JitFamily(
    id="tvm-ffi", label="SGLang's tvm-ffi load_inline JIT (sglang/jit_kernel 0.5.9-0.5.16, sglang/kernels/jit 0.5.17)",
    # 0.5.9-0.5.13 build in tvm-ffi's own directory <name>_<hash> (0.5.13's name ends in an absolute-path source
    # hash); 0.5.14-0.5.17 name them with the relative source hash under _jit_build_dir_name (docs/sglang-jit.md):
    # the data file says which per release
    releases=">=0.5.9,<0.5.18", data_file="sglang_jit.yaml",
    backend="sglang-jit", area="tvm-ffi",
    cache_env=("TVM_FFI_CACHE_DIR",), cache_default="~/.cache/tvm-ffi", fingerprint_section="sglang_jit",
    # the directory name holds the sources' hash (sglang's files: its version), the tvm-ffi version, the arch
    fingerprint_fields=("sglang", "tvm_ffi", "arch"),
    hook_target="tvm_ffi.cpp.extension",  # load_inline/load call build_inline/build there, only on a miss
    not_recorded=("lock", ".ninja_log", ".ninja_deps"),
)
