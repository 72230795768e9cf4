#!/usr/bin/env bash
# Build HERE (the CPU machine, no GPU) what a model proof's warm would otherwise build on the H200, pack it signed
# and cut it into pieces a device call can carry (issue 43, "What to build" 3). model_proof.sh's CARRIED mode joins
# the pieces there, unpacks them with --trusted-key as a node would, and lets its own warm build only the rest.
#
# What is built here: the families whose cache entries do not depend on the job's Python, torch or GPU:
#   deepgemm    sgl-deep-gemm 0.1.3's kernels (nvcc backend). Their entry names hold the absolute include path of the
#               installed deep_gemm (keys/sgl_deep_gemm_01.py), so deep_gemm is installed at one fixed path, SITE
#               (default /tmp/dgp-carry-site), here (copied from .venv/sgl-deep-gemm-0.1.3) and there (the wheel,
#               `pip install --target` the same path): the same names, and unpack's fingerprint check (DeepGEMM's
#               version, header hash and location, nvcc release) passes there without --force.
#   sglang-jit  SGLang 0.5.14's tvm-ffi JIT modules, built by the installed sglang (.venv/sglang-0.5.14, with its
#               tvm-ffi 0.1.11, the wheel carried there): `<name>__arch_9.0__tvmffi_0.1.11/`, no Python in the name.
#               sglang's module-level imports of triton and sgl_kernel are tests/standins' named STAND-INS here
#               (none of their functions is called by a JIT module's build), as in the CPU tests.
#   flashinfer  FlashInfer 0.6.12's modules (sampling, trtllm_comm...), FlashInfer's own builder, arch 9.0a given;
#               the sampling module's cuRAND headers from the nvidia-curand wheel beside the venv
#               (FLASHINFER_EXTRA_CUDAFLAGS). Their record holds the flashinfer-python version and the arch only.
# Left to the device, and why:
#   triton-moe  the item's record holds the Triton wheel's libtriton.so sha256 (the cp311 wheel here is not the
#               H200's cp312 one: `verify` there calls it stale and warm rebuilds it), its host modules' file names
#               hold the job's Python (EXT_SUFFIX) and their key its platform: warm there, with the job's Python.
#   inductor    torch.compile graphs: the key holds the torch build and the live GPU's name.
#
# STACK=<base> (issue 44): sglang 0.5.23's serving stack, installed HERE at the same path as on the device
#   (tests/gpu/carry_stack.sh install <base>, default /tmp/stack0523; PYTHON= a Python 3.12 holding the device's
#   packages, e.g. tests/gpu/stack0523_cpu_check.sh's venv). Its own deep_gemm (0.2.3.post2), flashinfer 0.7.2 and
#   Triton 3.8.0 (the same cp312 wheel as there, so the Triton MoE item's record and its host modules' names and
#   keys hold there too) build here: FAMILIES defaults to deepgemm,flashinfer,triton-moe. Not sglang-jit: 0.5.23's
#   ninja modules' keys hold `c++ --version`, which differs between this machine and the device.
#
# Measured here (2 cores shared with other sessions' tests, nvcc 13.0.88, JOBS=2; 2026-12-04, the README's 480B
# `--tp 8 --ep 8` server on 0.5.14, 464 s in all): plan 1 s; warm 460 s: 33 DeepGEMM kernels 0.6-6.5 s each (about
# 60 s of wall), 8 SGLang JIT modules 6.3-12.4 s each (about 30 s), FlashInfer's sampling and trtllm_comm 368 s (side by
# side, after the rest: they set the wall); pack 3 s; split 0 s. Cache 17.4 MB; the signed artifact 6.55 MB: one
# piece, which travels in the same call as .whl and the tree (tests/gpu/README.md).
#
# usage (repo root):
#   SERVER="python -m sglang.launch_server --model-path M --tp 8 --ep 8" [CONFIG=config.json] [SGLANG=0.5.14] \
#     bash tests/gpu/carry_build.sh
#   MANIFEST=plan.yaml bash tests/gpu/carry_build.sh          # a plan written before (e.g. a test's trimmed one)
# options (environment): FAMILIES (default deepgemm,sglang-jit,flashinfer), SITE (/tmp/dgp-carry-site),
#   OUTDIR (.carry: git-ignored; the artifact under OUTDIR/artifact, the pieces under OUTDIR/pieces), KEYDIR
#   (.carry-key, git-ignored: `dgprecompile keygen` there once, the private key never leaves this machine), WORK
#   (scratch, default a new temporary folder), JOBS (warm --jobs), PIECE_BYTES (carry_pieces.py's, 52 MiB).
# writes OUTDIR/{plan.yaml (the whole plan), carry.yaml (its carried part), warm.json, artifact/carry-<id>.tar.gz
#   (+ .sig), pieces/pNN/{piece,MANIFEST.json}, trusted/dgprecompile-signing.pub (a copy of the public key, to carry
#   with the pieces), build.txt (what was built, seconds per part, sizes, sha256s)}
# exit 0 done; 1 a step failed (named on stderr); 2 bad usage.
set -uo pipefail
export PYTHONUNBUFFERED=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
py=${PYTHON:-$root/.venv/bin/python}
venv=${VENV_DIR:-$root/.venv}
STACK=${STACK:-}
if [ -n "$STACK" ]; then
  SGLANG=${SGLANG:-0.5.23}; FAMILIES=${FAMILIES:-deepgemm,flashinfer,triton-moe}
else
  SGLANG=${SGLANG:-0.5.14}; FAMILIES=${FAMILIES:-deepgemm,sglang-jit,flashinfer}
fi
SITE=${SITE:-/tmp/dgp-carry-site}
OUTDIR=${OUTDIR:-$root/.carry}; KEYDIR=${KEYDIR:-$root/.carry-key}
case $OUTDIR in /*) ;; *) OUTDIR=$PWD/$OUTDIR ;; esac  # the split runs in OUTDIR: the paths must hold there
case $KEYDIR in /*) ;; *) KEYDIR=$PWD/$KEYDIR ;; esac
fail() { echo "error: $1" >&2; echo "hint: $2" >&2; exit "${3:-1}"; }
[ -n "${SERVER:-}${MANIFEST:-}" ] || fail "no plan: give SERVER= (the sglang server command) or MANIFEST= (a plan)" \
  "SERVER=\"python -m sglang.launch_server --model-path M --tp 8 --ep 8\" bash tests/gpu/carry_build.sh" 2
needed=(nvidia-curand-10.4.0.35/nvidia/cu13/include)
[ -n "$STACK" ] || needed+=(sgl-deep-gemm-0.1.3/deep_gemm "sglang-$SGLANG/sglang" flashinfer-0.6.12/flashinfer)
for d in "${needed[@]}"; do
  [ -e "$venv/$d" ] || fail "$venv/$d is missing" "run make setup (it installs these beside the venv)"
done
if [ -n "$STACK" ]; then
  [ -f "$STACK/stack.env" ] || fail "no $STACK/stack.env" "bash tests/gpu/carry_stack.sh install $STACK (the device's path)" 2
  [ -n "${PYTHON:-}" ] || fail "STACK= needs PYTHON=" "a Python 3.12 with the device's packages (stack0523_cpu_check.sh's venv)" 2
fi
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda-13.0/bin/nvcc)}
[ -x "$NVCC" ] || fail "no nvcc" "export PATH=/usr/local/cuda-13.0/bin:\$PATH"
export PATH=$(dirname "$NVCC"):$PATH
WORK=${WORK:-$(mktemp -d)}; cache=$WORK/cache; mkdir -p "$OUTDIR" "$WORK"; rm -rf "$cache" "$OUTDIR/artifact"
log=$OUTDIR/build.txt; : > "$log"
t0=$(date +%s); last=$t0
part() { local now; now=$(date +%s); echo "part $1: $((now - last)) s" >> "$log"; last=$now; }
echo "tests/gpu/carry_build.sh $(date -u +%FT%TZ) git $(git -C "$root" rev-parse --short HEAD 2>/dev/null) families $FAMILIES site $SITE" >> "$log"

# deep_gemm at the fixed path: the same bytes the wheel installs (sgl-deep-gemm 0.1.3 as `make setup` put it)
# SITE is emptied first: only where it is new, empty or one this script (or model_proof.sh) made
if [ -e "$SITE" ] && [ -n "$(ls -A "$SITE" 2>/dev/null)" ] && [ ! -f "$SITE/.dgp-carry-site" ]; then
  fail "SITE=$SITE holds files this script did not put there" "set SITE= to a new folder (the same path on the device)" 2
fi
if [ -n "$STACK" ]; then  # the stack's own packages, at the device's path
  . "$STACK/stack.env"
  export PYTHONPATH="$STACK_SITE:$root/tests/standins:$root" DGP_STANDINS=sgl_kernel
else
  rm -rf "$SITE"; mkdir -p "$SITE"; touch "$SITE/.dgp-carry-site"
  cp -a "$venv/sgl-deep-gemm-0.1.3/." "$SITE/" || fail "could not copy deep_gemm to $SITE" "set SITE= to a writable path"
  export PYTHONPATH="$SITE:$venv/sglang-$SGLANG:$venv/flashinfer-0.6.12:$root/tests/standins:$root"
fi
export DGP_TRANSFORMERS_EXIST_OK=1 CUDA_VISIBLE_DEVICES=
unset CUDA_HOME CUDA_PATH CPATH CPLUS_INCLUDE_PATH
export FLASHINFER_EXTRA_CUDAFLAGS="-I$venv/nvidia-curand-10.4.0.35/nvidia/cu13/include${FLASHINFER_EXTRA_CUDAFLAGS:+ $FLASHINFER_EXTRA_CUDAFLAGS}"
dg() { "$py" -m dgprecompile "$@"; }

if [ -n "${MANIFEST:-}" ]; then
  cp "$MANIFEST" "$OUTDIR/plan.yaml" || fail "cannot read MANIFEST=$MANIFEST" "give a plan written by dgprecompile plan -o" 2
else  # the command as model_proof.sh plans it there: its model path at a folder that holds config.json
  cmd=$SERVER
  if [ -n "${CONFIG:-}" ]; then
    mkdir -p "$WORK/model"; cp "$CONFIG" "$WORK/model/config.json" || fail "cannot read CONFIG=$CONFIG" "a config.json" 2
    cmd=$("$py" -c "import shlex,sys; w=shlex.split(sys.argv[1]); i=w.index('--model-path'); w[i+1]=sys.argv[2]; print(shlex.join(w))" "$SERVER" "$WORK/model")
  fi
  dg plan --sglang "$SGLANG" --sglang-cmd "$cmd" -o "$OUTDIR/plan.yaml" > "$WORK/plan.txt" 2>&1 \
    || { cat "$WORK/plan.txt" >&2; fail "plan failed" "check SERVER and CONFIG"; }
fi
# the carried part of the plan: the families above, nothing else (the device's warm builds the rest)
"$py" - "$OUTDIR/plan.yaml" "$OUTDIR/carry.yaml" "$FAMILIES" >> "$log" <<'PY' || fail "cannot cut the plan" "FAMILIES= lists deepgemm, sglang-jit, flashinfer, triton-moe" 2
import sys
import yaml
from dgprecompile.planning.manifest import plan_from_dict, write_manifest
data = yaml.safe_load(open(sys.argv[1]))
keep = set(sys.argv[3].split(","))
bad = keep - {"deepgemm", "sglang-jit", "flashinfer", "triton-moe"}
if bad:
    sys.exit(f"not a carried family: {', '.join(sorted(bad))}")
if "deepgemm" not in keep:
    for shape in data.get("shapes", []):
        shape["buckets"], shape["aux_kernels"] = [], []
    data["kernels"], data["total_kernels"] = [], 0
for family, section in (("sglang-jit", "sglang_jit_modules"), ("flashinfer", "flashinfer")):
    if family not in keep:
        data.pop(section, None)
left = [s for s in ("triton_moe", "inductor") if s.replace("_", "-") not in keep and data.pop(s, None)]
write_manifest(plan_from_dict(data), sys.argv[2])
print(f"carried: {len(data.get('kernels', []))} DeepGEMM kernels, {len(data.get('sglang_jit_modules', []))} SGLang JIT "
      f"modules, {len(data.get('flashinfer', []))} FlashInfer modules, {len(data.get('triton_moe', []))} Triton MoE "
      f"items; left to the device: {', '.join(left) or 'none'}")
PY
part plan
jobs=(); [ -n "${JOBS:-}" ] && jobs=(--jobs "$JOBS")
dg warm --manifest "$OUTDIR/carry.yaml" --cache-dir "$cache" --backend nvcc --sglang-jit on --nvcc "$NVCC" \
  "${jobs[@]}" --json > "$OUTDIR/warm.json" 2> "$WORK/warm.err"
rc=$?
"$py" -c "import json,sys; r=json.load(open(sys.argv[1])); print('warm: compiled', r['compiled'], 'cached', r['already_cached'], 'failed', r['failed'], 'wall', r['wall_seconds'], 's'); [print(f'  {k}: {v} s') for k, v in r['item_seconds'].items()]" \
  "$OUTDIR/warm.json" >> "$log" 2>/dev/null
part warm
[ "$rc" = 0 ] || { tail -20 "$WORK/warm.err" >&2; fail "warm exited $rc" "its log: $WORK/warm.err; $OUTDIR/warm.json"; }
dg verify --manifest "$OUTDIR/carry.yaml" --cache-dir "$cache" > "$WORK/verify.txt" 2>&1 \
  || { cat "$WORK/verify.txt" >&2; fail "verify of the carried cache failed" "see $WORK/verify.txt"; }
if [ ! -f "$KEYDIR/dgprecompile-signing.key" ]; then
  (umask 077; mkdir -p "$KEYDIR"; dg keygen "$KEYDIR" > /dev/null 2>> "$log") || fail "keygen failed" "KEYDIR=$KEYDIR must be writable"
fi
art=$(dg pack --manifest "$OUTDIR/carry.yaml" --cache-dir "$cache" -o "$OUTDIR/artifact/carry-{fingerprint}.tar.gz" \
      --signing-key "$KEYDIR/dgprecompile-signing.key" 2> "$WORK/pack.err") \
  || { cat "$WORK/pack.err" >&2; fail "pack failed" "see $WORK/pack.err"; }
part pack
(cd "$OUTDIR" && CARRY_DIR=pieces "$py" "$root/tests/gpu/carry_pieces.py" split "$art" "$art.sig") >> "$log" \
  || fail "split failed" "see $log"
part split
mkdir -p "$OUTDIR/trusted" && cp "$KEYDIR/dgprecompile-signing.pub" "$OUTDIR/trusted/" || fail "cannot copy the public key" "see $KEYDIR"
{ echo "artifact: $art ($(stat -c %s "$art") bytes, sha256 $(sha256sum "$art" | cut -d' ' -f1))"
  echo "trusted key: $OUTDIR/trusted/dgprecompile-signing.pub (sha256 $(sha256sum "$KEYDIR/dgprecompile-signing.pub" | cut -d' ' -f1))"
  echo "cache: $(du -sb "$cache" | cut -f1) bytes; total $(( $(date +%s) - t0 )) s"; } >> "$log"
cat "$log"
