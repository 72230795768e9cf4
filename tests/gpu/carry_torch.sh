#!/usr/bin/env bash
# Carry torch 2.14.1 (a 555 MB wheel) and the sgl-deep-gemm wheels to the GPU machine in back-to-back device calls
# (issue 32; a call carries at most 64 MiB of git-ignored paths, and files a call leaves in a git-ignored folder stay
# for the next call while the machine is held). The pieces are cut from all the files as one byte stream, so the
# small wheels fill the last piece; tests/test_carry_torch.py rehearses the whole sequence on the CPU machine.
#
#   split FILE...       here (repo root): .carry/p01 ... .carry/pNN (git-ignored), each a piece under 60 MiB with
#                       MANIFEST.json (every file's name, size and sha256, every piece's sha256); prints which path
#                       each call names in `carry`, in order
#   keep                there, as (the start of) each carry call: moves the carried piece into .carry-held/ (not
#                       named in any carry, so later calls leave it in place), checks its sha256, prints what is
#                       held and what is still to carry. A piece that arrived corrupt fails here (exit 1): carry it
#                       again.
#   join DEST [TARGET]  there: checks every piece (a missing or corrupt one: exit 1, named), rebuilds each file into
#                       DEST and checks its sha256; with TARGET, installs DEST's torch-*.whl with
#                       `python3 -m pip install --no-deps --no-index --target TARGET` (nothing system-wide) and links
#                       TARGET/nvidia to the machine's own nvidia-*-cu13 folder, which torch's RPATH
#                       ($ORIGIN/../../nvidia/*) then finds, as it does for the machine's torch 2.11
#
# Exit codes: 0 done, 1 a check failed, 2 bad usage. PYTHON (default python3) runs pip and the piece tool.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
py=${PYTHON:-python3}
cmd=${1:-}
if [ "$cmd" != join ] || [ $# -ne 3 ]; then
  exec "$py" "$here/carry_pieces.py" "$@"
fi
dest=$2 target=$3
"$py" "$here/carry_pieces.py" join "$dest"
whl=$(ls "$dest"/torch-*.whl 2>/dev/null | head -1)
if [ -z "$whl" ]; then
  echo "error: no torch-*.whl among the joined files in $dest" >&2
  echo "hint: split the torch wheel with the others: carry_torch.sh split torch-*.whl ..." >&2
  exit 1
fi
rm -rf "$target"
"$py" -m pip install -q --no-deps --no-index --no-compile --target "$target" "$whl"
# the nvidia-*-cu13 folder the machine's own torch finds through the same RPATH: <its site-packages>/nvidia (found
# without importing it, PYTHONPATH cleared); else the first nvidia/ on the path that holds cu13/lib
nv=$(PYTHONPATH= "$py" - <<'PY' 2>/dev/null || true
import importlib.util, os
spec = importlib.util.find_spec("torch")
found = [os.path.join(os.path.dirname(os.path.dirname(spec.origin)), "nvidia")] if spec and spec.origin else []
try:
    import nvidia
    found += list(nvidia.__path__)
except ImportError:
    pass
print(next((p for p in found if os.path.isdir(os.path.join(p, "cu13", "lib"))), ""))
PY
)
if [ -n "$nv" ] && [ ! -e "$target/nvidia" ]; then
  ln -s "$nv" "$target/nvidia"
  echo "linked $target/nvidia -> $nv"
else
  echo "warning: no nvidia-*-cu13 folder found beside the system python; torch in $target uses LD_LIBRARY_PATH" >&2
fi
echo "installed $(basename "$whl") into $target"
