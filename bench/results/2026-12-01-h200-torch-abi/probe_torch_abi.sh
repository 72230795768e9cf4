#!/usr/bin/env bash
# Which torch does each sgl-deep-gemm _C.so expect? (issue 12: 0.1.5.post3, 0.1.7 and 0.2.x reject every call on the
# device's torch 2.11 with `layout.hpp: dim == 2 or dim == 3`, while 0.1.5.post1 runs.) For each wheel: the c10/at/
# torch symbols its _C.so imports that the torch here does not export (lazy binding lets such a library load and
# fail only when called), and the torch headers that decide TensorImpl's inline accessors, for a diff on the CPU
# machine against another torch's. Runs anywhere with torch and binutils (nm, c++filt); writes under $OUT.
# usage: bash bench/results/2026-12-01-h200-torch-abi/probe_torch_abi.sh WHEEL...
set -uo pipefail
out=${OUT:-out/torch-abi}; mkdir -p "$out"
torch_dir=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')
python3 -c 'import torch; print(torch.__version__)' > "$out/torch_version.txt"
for lib in "$torch_dir"/lib/*.so*; do nm -D --defined-only "$lib" 2>/dev/null; done | awk '{print $NF}' | sort -u > /tmp/abi-defined.txt
cp "$torch_dir/include/c10/core/TensorImpl.h" "$out/TensorImpl.h" 2>/dev/null
cp "$torch_dir/include/c10/core/impl/SizesAndStrides.h" "$out/SizesAndStrides.h" 2>/dev/null
for whl in "$@"; do
  name=$(basename "$whl" | cut -d- -f2)
  tmp=$(mktemp -d)  # no unzip on the device: Python's zipfile
  python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract("deep_gemm/_C.so", sys.argv[2])' "$whl" "$tmp" || continue
  nm -D --undefined-only "$tmp/deep_gemm/_C.so" | awk '{print $NF}' | sort -u > "$tmp/undef.txt"
  grep -E '^_ZN?K?(St3__1)?[0-9]*(c10|at|torch)' "$tmp/undef.txt" > "$tmp/torch-undef.txt" || true
  comm -23 "$tmp/torch-undef.txt" /tmp/abi-defined.txt | c++filt > "$out/missing-$name.txt"
  echo "$name: imports $(wc -l < "$tmp/torch-undef.txt") c10/at/torch symbols, $(wc -l < "$out/missing-$name.txt") not exported by torch $(cat "$out/torch_version.txt")" | tee -a "$out/SUMMARY.txt"
  rm -rf "$tmp"
done
