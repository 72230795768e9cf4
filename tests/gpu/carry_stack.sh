#!/usr/bin/env bash
# Carry sglang 0.5.23's serving stack (issue 44 item 1: torch 2.14.1, triton 3.8.0, flashinfer-python 0.7.2,
# sgl-deep-gemm, sglang 0.5.23, transformers 5.19.0 and what the model path imports: tests/gpu/stack_0523.yaml, read
# by carry_stack.py) to the H200 in back-to-back device calls. The pieces are carry_pieces.py's (split/keep/join,
# each piece's and each file's sha256 in MANIFEST.json), cut at the data file's piece_bytes; the calls are
# tests/gpu/README-stack0523.md; tests/test_carry_stack.py rehearses them on the CPU machine.
#
#   fetch [DIR]         here: pip downloads exactly the pinned wheels (cp312, manylinux x86_64, --no-deps) into DIR
#                       (default .whl-0523, git-ignored) and checks each one's size and sha256 against the data file
#   split [DIR]         here: checks DIR's wheels, the working tree beside one piece (a call carries 64 MiB with the
#                       tree), cuts them into CARRY_DIR/pNN (default .carry/stack) and prints the calls
#   keep                there, each carry call: moves the carried piece into HELD_DIR (default .carry-held-stack)
#   install [BASE]      there, the proof's call: keeps its own piece, joins every piece into BASE/joined (default
#                       /tmp/stack0523) and checks each wheel against the data file too, installs torch (carry_torch.sh
#                       join: BASE/site/nvidia linked to the machine's nvidia-*-cu13 folder) and every other wheel
#                       marked for install with `pip install --no-deps --no-index --target BASE/site` (nothing
#                       system-wide), builds the NCCL STAND-IN (nccl_standin.c) into BASE/lib, writes BASE/stack.env
#                       (STACK_SITE, LD_PRELOAD) and BASE/stack_manifest.json (every carried file's sha256)
#   imports [BASE]      there: `import torch, triton, flashinfer, sglang` (and deep_gemm, transformers), then each of
#                       the data file's model_path_modules, under BASE/stack.env with tests/standins (sgl_kernel);
#                       the versions and modules into BASE/imports.txt
# Use the stack:  . BASE/stack.env; export PYTHONPATH=$STACK_SITE:$PWD/tests/standins:$PWD DGP_STANDINS=sgl_kernel
#                 (tests/gpu/model_proof.sh does that when STACK=BASE)
# Exit codes: 0 done, 1 a check or step failed (named on stderr), 2 bad usage. PYTHON (default python3) runs pip
# and the Python tools.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
py=${PYTHON:-python3}
export CARRY_DIR=${CARRY_DIR:-.carry/stack} HELD_DIR=${HELD_DIR:-.carry-held-stack}
fail() { echo "error: $1" >&2; echo "hint: $2" >&2; exit "${3:-1}"; }
cmd=${1:-}
case $cmd in
fetch)
  dest=${2:-.whl-0523}; mkdir -p "$dest"
  plat=(--only-binary=:all: --python-version 3.12 --implementation cp)
  for p in $("$py" -c "import sys; sys.path.insert(0, sys.argv[1]); import carry_stack; print(' '.join(carry_stack.load()['platforms']))" "$here"); do
    plat+=(--platform "$p")
  done
  "$py" "$here/carry_stack.py" specs > "$dest/.specs"
  while read -r spec; do
    "$py" -m pip download -q --no-deps "${plat[@]}" -d "$dest" "$spec" || fail "pip download $spec" "check the index"
  done < "$dest/.specs"
  rm -f "$dest/.specs"
  "$py" "$here/carry_stack.py" check "$dest" > /dev/null
  echo "fetched and checked: $(du -sb "$dest" | cut -f1) bytes in $dest"
  ;;
split)
  src=${2:-.whl-0523}
  checked=$("$py" "$here/carry_stack.py" check "$src") || exit $?
  mapfile -t files <<< "$checked"
  [ "${#files[@]}" -gt 0 ] || fail "no wheels checked in $src" "bash tests/gpu/carry_stack.sh fetch $src"
  "$py" "$here/carry_stack.py" tree || exit $?
  piece=$("$py" -c "import sys; sys.path.insert(0, sys.argv[1]); import carry_stack; print(carry_stack.load()['piece_bytes'])" "$here")
  PIECE_BYTES=$piece "$py" "$here/carry_pieces.py" split "${files[@]}" | sed 's/carry_torch\.sh keep/carry_stack.sh keep/; s/README-torch214/README-stack0523/'
  "$py" "$here/carry_stack.py" pieces
  ;;
keep)
  [ $# -eq 1 ] || fail "keep takes no arguments" "bash tests/gpu/carry_stack.sh keep" 2
  exec "$py" "$here/carry_pieces.py" keep
  ;;
install)
  base=${2:-/tmp/stack0523}
  if [ -d "$CARRY_DIR" ] && [ -n "$(ls -A "$CARRY_DIR" 2>/dev/null)" ]; then "$py" "$here/carry_pieces.py" keep; fi
  rm -rf "$base"; mkdir -p "$base/lib"
  HELD_DIR=$HELD_DIR bash "$here/carry_torch.sh" join "$base/joined" "$base/site" || exit 1
  "$py" "$here/carry_stack.py" check "$base/joined" > /dev/null || exit 1
  listed=$("$py" "$here/carry_stack.py" installs "$base/joined") || exit 1
  mapfile -t rest < <(grep -v '/torch-[0-9]' <<< "$listed")
  "$py" -m pip install -q --no-deps --no-index --no-compile --target "$base/site" "${rest[@]}" \
    || fail "pip install --target $base/site" "see pip's message above"
  cc=$(command -v cc || command -v gcc) || fail "no C compiler (cc, gcc)" "the NCCL stand-in is built with cc"
  "$cc" -shared -fPIC -O2 -o "$base/lib/libnccl_standin.so" "$here/nccl_standin.c" || fail "cc nccl_standin.c" "see above"
  [ "$(nm -D --defined-only "$base/lib/libnccl_standin.so" | grep -c ' T nccl')" = 11 ] \
    || fail "the NCCL stand-in does not define 11 functions" "see tests/gpu/nccl_standin.c"
  cp "$HELD_DIR/MANIFEST.json" "$base/stack_manifest.json"
  { echo "# sglang 0.5.23's stack (tests/gpu/carry_stack.sh install): put STACK_SITE first on PYTHONPATH"
    echo "STACK_SITE=$base/site"
    echo "# NCCL STAND-IN (tests/gpu/nccl_standin.c): torch 2.14.1's NCCL 2.30 functions the machine's NCCL lacks"
    echo "export LD_PRELOAD=$base/lib/libnccl_standin.so\${LD_PRELOAD:+:\$LD_PRELOAD}"; } > "$base/stack.env"
  echo "installed ${#rest[@]} wheels and torch into $base/site; stand-in $base/lib/libnccl_standin.so; $base/stack.env"
  ;;
imports)
  base=${2:-/tmp/stack0523}
  [ -f "$base/stack.env" ] || fail "no $base/stack.env" "bash tests/gpu/carry_stack.sh install $base" 2
  # shellcheck disable=SC1091
  . "$base/stack.env"
  modules=$("$py" "$here/carry_stack.py" modules) || exit $?
  PYTHONPATH="$STACK_SITE:$PWD/tests/standins:$PWD" DGP_STANDINS=sgl_kernel DGP_TRANSFORMERS_EXIST_OK=1 "$py" - $modules \
    > "$base/imports.txt" 2>&1 <<'PY' || { cat "$base/imports.txt"; fail "an import failed under the stack" "see above"; }
import importlib, sys
import torch, triton, flashinfer, sglang, transformers, deep_gemm  # noqa: E401,F401
from importlib import metadata
print("python", sys.version.split()[0], "torch", torch.__version__, torch.__file__, "cuda", torch.version.cuda)
for dist in ("triton", "flashinfer-python", "sglang", "sgl-deep-gemm", "transformers", "torchvision", "apache-tvm-ffi"):
    print(dist, metadata.version(dist))
for name in sys.argv[1:]:
    importlib.import_module(name)
print(f"model path: {len(sys.argv) - 1} modules imported: {' '.join(sys.argv[1:])}")
print("stand-ins: sgl_kernel (tests/standins), NCCL (LD_PRELOAD)")
PY
  cat "$base/imports.txt"
  ;;
*)
  fail "unknown command: ${cmd:-(none)}" "usage: carry_stack.sh fetch [DIR] | split [DIR] | keep | install [BASE] | imports [BASE]" 2
  ;;
esac
