#!/usr/bin/env bash
# Puts the sgl-deep-gemm wheels tests/gpu/sweep_generations.sh installs on the device into ./.whl-gen (ignored
# through .git/info/exclude), with the apache-tvm-ffi their _C.so loads (0.1.x and 0.2.0-0.2.2 are tvm-ffi
# builds). About 27 MB. Run from the repo root on the CPU machine, then carry ".whl-gen".
# usage: bash tests/gpu/fetch_generation_wheels.sh [torch214]
set -euo pipefail
plat=(--only-binary=:all: --python-version 3.12 --implementation cp
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
# `torch214` (issue 32): only what tests/gpu/deepgemm_torch214_proof.sh needs, into .whl-t214/ (git-ignored): the
# five releases sglang 0.5.18-0.5.23 pin, apache-tvm-ffi 0.1.11 and torch 2.14.1 (cp312, CUDA 13.0, 555 MB), about
# 583 MB, then cut into carry pieces: tests/gpu/carry_torch.sh split (tests/gpu/README-torch214.md)
if [ "${1:-}" = torch214 ]; then
  dest=.whl-t214
  mkdir -p "$dest"
  for spec in sgl-deep-gemm==0.1.5.post3 sgl-deep-gemm==0.1.7 sgl-deep-gemm==0.2.0 sgl-deep-gemm==0.2.2 \
              sgl-deep-gemm==0.2.3.post2 apache-tvm-ffi==0.1.11 torch==2.14.1; do
    python3 -m pip download -q --no-deps "${plat[@]}" -d "$dest" "$spec"
  done
  ls -la "$dest"
  exit 0
fi
dest=.whl-gen
mkdir -p "$dest"
exclude="$(git rev-parse --git-common-dir)/info/exclude"
mkdir -p "$(dirname "$exclude")"
grep -qx '/.whl-gen/' "$exclude" 2>/dev/null || echo '/.whl-gen/' >> "$exclude"
for v in 0.1.3 0.1.4.post1 0.1.5.post1 0.1.5.post3 0.1.7 0.2.0 0.2.2; do
  ls "$dest"/sgl_deep_gemm-"$v"-*.whl >/dev/null 2>&1 ||
    python3 -m pip download -q --no-deps "${plat[@]}" -d "$dest" "sgl-deep-gemm==$v"
done
ls "$dest"/apache_tvm_ffi-0.1.11-*.whl >/dev/null 2>&1 ||
  python3 -m pip download -q --no-deps "${plat[@]}" -d "$dest" apache-tvm-ffi==0.1.11
# sglang-kernel 0.4.2 (sglang 0.5.11) bundles the C++-JIT deep_gemm; the wheel is ~350 MB, keep only that package
if [ ! -f "$dest/sglang_kernel-0.4.2-deep_gemm.tgz" ]; then
  tmp=$(mktemp -d)
  python3 -m pip download -q --no-deps "${plat[@]}" -d "$tmp" sglang-kernel==0.4.2
  python3 tools/unpack_deep_gemm.py --tgz "$tmp"/sglang_kernel-*.whl "$dest/sglang_kernel-0.4.2-deep_gemm.tgz"
  rm -rf "$tmp"
fi
# sgl-kernel 0.3.21 / 0.3.16.post3 / 0.3.9.post2 (sglang 0.5.9 / 0.5.4 / 0.5.2): each one's deep_gemm/ without its
# CUDA-12 .so, and the csrc of the sgl-project/DeepGEMM commit its headers equal (54f99a8 / f4adba8 / b981e3e), for
# tests/gpu/build_deep_gemm_from_source.sh; DGSRC is a git clone (or bare mirror) of sgl-project/DeepGEMM
for pair in 0.3.21:54f99a8 0.3.16.post3:f4adba8 0.3.9.post2:b981e3e; do
  sk=${pair%%:*} sgf=${pair##*:}
  if [ ! -f "$dest/sgl_kernel-$sk-deep_gemm.tgz" ]; then
    tmp=$(mktemp -d)
    python3 -m pip download -q --no-deps "${plat[@]}" -d "$tmp" "sgl-kernel==$sk"
    python3 tools/unpack_deep_gemm.py --tgz --no-so "$tmp"/sgl_kernel-"$sk"-*.whl "$dest/sgl_kernel-$sk-deep_gemm.tgz"
    rm -rf "$tmp"
  fi
  if [ ! -f "$dest/sgf-$sgf-csrc.tgz" ] && [ -n "${DGSRC:-}" ]; then
    git --git-dir="$DGSRC" archive --format=tar.gz -o "$dest/sgf-$sgf-csrc.tgz" "$sgf" csrc
  fi
done
du -sh "$dest"
