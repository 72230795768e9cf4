#!/usr/bin/env bash
# The independent live proof (issue 33), for one SGLang server command on the H200:
#   plan (from the command and config.json) -> warm with the GPU hidden (no capture, nothing run on the GPU first)
#   -> warm with the GPU visible (only the torch.compile graphs are left: SGLang's own compiled functions at the plan's
#   shapes, runtimes/inductor.py) -> verify -> strict `dgprecompile launch` of python -m dgprecompile.launch.model_driver, which builds SGLang's OWN
#   model for one rank from the SAME command and config.json (its prepare_server_args, its dummy loader) and runs
#   every m of MS through the embedding, norms, attention linears, q/k norm + rope and the MLP / MoE block, then a
#   decode step at batches 1, 8, 64 (SGLang's position clamp, the layers, the LM head, SGLang's own Sampler);
#   nothing the driver runs is derived from the plan. Expect: launch rc 0, 0 refusals, 0 new cache files, 0
#   torch.compile graphs compiled. Then one planned entry of each family deleted (DeepGEMM kernel, SGLang JIT module,
#   Triton fused_moe_kernel, one FX graph of a torch.compile item; FlashInfer's routing module in a run of its own):
#   the same proof must exit 1 naming each.
# usage: SGLANG=0.5.14 SERVER="python -m sglang.launch_server --model-path M --tp 8 --ep 8" CONFIG=config.json \
#        [MS=1-8192] [MS_DELETED=...] [NAME=model-480b] DGP_GIT=<sha> bash tests/gpu/model_proof.sh
# writes $OUT/$NAME/{summary.txt,record.json,asks.json (.gz over 1 MiB),config.json,driver.json,
#   driver_deleted-run.json,logs.txt}
# Carry .whl: ../shared/device/fetch-wheels.sh + fetch-sglang.sh + .whl/extra (jsonschema and its 4 wheels, msgspec;
# cryptography with cffi and pycparser where CARRIED: unpack --trusted-key checks the signature with it;
# with flashinfer_python-0.6.12 and tabulate the real FlashInfer runs; .whl/legacy is not needed: leave it out of the 64 MiB).
# sgl-kernel and flashinfer (not carried) are tests/standins' named stand-ins; the driver names its own (dgprecompile/launch/model_driver.py).
# CARRIED=<dir of held pieces> TRUSTED=<public key> (issue 43 item 3): the families tests/gpu/carry_build.sh built on
# the CPU machine (DeepGEMM, SGLang JIT, FlashInfer) arrive as pieces (each earlier call: carry .carry/pieces/pNN and run
# `CARRY_DIR=.carry/pieces python3 tests/gpu/carry_pieces.py keep`, which moves it into .carry-held/; this call keeps a
# piece it carries itself first); they are joined and checked (sha256), unpacked into the fresh cache with
# `dgprecompile unpack --trusted-key TRUSTED` as a node would (signature, fingerprint and every member's bytes: part
# of the proof), with deep_gemm installed at the fixed path SITE (default /tmp/dgp-carry-site, the carry build's: the
# DeepGEMM entry names hold it). The GPU-free warm then finds them cached and builds the rest (Triton MoE and its host
# modules, with the job's Python), which summary.txt names. Nothing of the proof's families is run or captured here.
# summary.txt gets the device seconds of each step ("device seconds: STEP N").
# STACK=<base> (issue 44 item 1): another serving stack, installed there by `tests/gpu/carry_stack.sh install <base>`
# (sglang 0.5.23's: tests/gpu/stack_0523.yaml, README-stack0523.md): its <base>/stack.env names the site put first on
# PYTHONPATH (torch, triton, flashinfer, deep_gemm, sglang, transformers and dgprecompile's own dependencies) and
# preloads the NCCL stand-in; nothing is installed from .whl, and the carried files' sha256s (stack_manifest.json) go
# into this folder. With CARRIED too: the families carry_build.sh STACK=<base> built here at the device's path
# (CARRIED_FAMILIES="deepgemm flashinfer triton-moe", which summary.txt's expectations then hold as carried).
# Without STACK nothing changes.
set -uo pipefail
export PYTHONUNBUFFERED=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
root=$PWD; OUT=${OUT:-$root/out}; NAME=${NAME:-model-proof}; d=$OUT/$NAME; mkdir -p "$d"
MS=${MS:-1-8192}; SGLANG=${SGLANG:-0.5.14}
MS_DELETED=${MS_DELETED:-1-96,97-8192:97,8192}  # the deleted-entry run: small m (where each victim runs) and a stride
: "${SERVER:?SERVER= the sglang server command}" "${CONFIG:?CONFIG= the model config.json}"
t0=$(date +%s); step=; step_t=$t0
stamp() {  # a step begins: the one before it ends, its device seconds into summary.txt
  local now; now=$(date +%s)
  [ -n "$step" ] && echo "device seconds: $step $((now - step_t))" >> "$d/summary.txt"
  step=$1; step_t=$now; echo "=== $1 $(date -u +%FT%TZ) (+$((now - t0)) s)" >> "$d/logs.txt"; }
CARRIED=${CARRIED:-}; art=; STACK=${STACK:-}; STACK_SITE=
if [ -n "$STACK" ]; then
  [ -z "$CARRIED" ] || [ -n "${CARRIED_FAMILIES:-}" ] || { echo "error: STACK= with CARRIED= needs CARRIED_FAMILIES= (what carry_build.sh STACK= built: deepgemm flashinfer triton-moe)" >&2; exit 2; }
  [ -f "$STACK/stack.env" ] || { echo "error: no $STACK/stack.env: run tests/gpu/carry_stack.sh install $STACK first" >&2; exit 2; }
  . "$STACK/stack.env"  # STACK_SITE, and LD_PRELOAD with the NCCL stand-in
  cp "$STACK/stack_manifest.json" "$d/stack_manifest.json"
fi
if [ -n "$CARRIED" ]; then
  : "${TRUSTED:?TRUSTED= the public key of the carry build (.carry/trusted/dgprecompile-signing.pub, carried)}"
  site=${SITE:-/tmp/dgp-carry-site}
  if [ -e "$site" ] && [ -n "$(ls -A "$site" 2>/dev/null)" ] && [ ! -f "$site/.dgp-carry-site" ]; then
    echo "error: SITE=$site holds files neither carry_build.sh nor this script put there" >&2; exit 2
  fi
  rm -rf "$site"; mkdir -p "$site"; touch "$site/.dgp-carry-site"
else
  site=$(mktemp -d)
fi
w=$(mktemp -d); cache=$w/cache; model=$w/model; mkdir -p "$model"; cp "$CONFIG" "$model/config.json"
echo "$w" > "$d/workdir.txt"  # its plan.yaml and cache/, for a check after the proof (bench/first_forward.sh)
stamp install
[ -n "$STACK" ] || python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .whl/sgl_deep_gemm-0.1.3-*.whl \
  .whl/apache_tvm_ffi-*.whl .whl/sglang/*.whl .whl/extra/*.whl >> "$d/logs.txt" 2>&1
# a stack's carried artifact: `unpack --trusted-key` checks its signature with cryptography, which the stack lacks
# (carry .whl/extra's cryptography, cffi and pycparser wheels in this call)
if [ -n "$STACK" ] && [ -n "$CARRIED" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .whl/extra/cryptography-*.whl \
    .whl/extra/cffi-*.whl .whl/extra/pycparser-*.whl >> "$d/logs.txt" 2>&1 || { echo "error: no cryptography wheels in .whl/extra" >&2; exit 2; }
fi
# FlashInfer: the real flashinfer-python where .whl/extra carries its wheel (its modules are planned, warmed GPU-free,
# and the driver's DeepSeek routing runs its JIT module), else tests/standins' named stand-in
if PYTHONPATH="${STACK_SITE:+$STACK_SITE:}$site" python3 -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('flashinfer') is None)"; then
  FLASHINFER=real; STANDINS=sgl_kernel
else
  FLASHINFER=standin; STANDINS=sgl_kernel,flashinfer
fi
export PYTHONPATH="${STACK_SITE:+$STACK_SITE:}$site:$root/tests/standins:$root" DGP_STANDINS=$STANDINS DGP_TRANSFORMERS_EXIST_OK=1
# the command as the user gives it, with its model path at the folder that holds config.json
LOCAL=$(python3 -c "import shlex,sys; w=shlex.split(sys.argv[1]); i=w.index('--model-path'); w[i+1]=sys.argv[2]; print(shlex.join(w))" "$SERVER" "$model")
{ echo "tests/gpu/model_proof.sh $(date -u +%FT%TZ) git ${DGP_GIT:-?} sglang $SGLANG MS=$MS"; echo "server: $SERVER";
  python3 -c "import torch, sys, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'python', sys.version.split()[0])";
  echo "flashinfer: $FLASHINFER";
  [ -z "$STACK" ] || echo "stack: $STACK_SITE first on PYTHONPATH, LD_PRELOAD=$LD_PRELOAD (NCCL STAND-IN); carried files' sha256: stack_manifest.json";
  python3 -c "import torch._inductor.compile_fx as c; print('inductor hook point fx_codegen_and_compile:', hasattr(c, 'fx_codegen_and_compile'))";
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } >> "$d/summary.txt" 2>&1
dg() { python3 -m dgprecompile "$@"; }
if [ -n "$CARRIED" ]; then
  stamp carried
  bash tests/gpu/carry_unpack.sh in "$CARRIED" "$TRUSTED" "$cache" "$w" >> "$d/summary.txt" 2>> "$d/logs.txt"
  unpack_rc=$?; art=$(ls "$w"/carried/carry-*.tar.gz 2>/dev/null | head -1)
  if [ "$unpack_rc" != 0 ]; then stamp stopped; cat "$d/summary.txt"; exit 1; fi
fi
stamp plan
# the GPU the user names with --gpu: this machine's (an H100 or an H200 may come; SGLang picks its tuned Triton MoE
# configs and inductor keys the graphs by the device's name), from nvidia-smi, not from anything the plan says
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
GPU=${GPU:-$(python3 -c "import sys; from dgprecompile.planning.plan import gpu_named; print(gpu_named(sys.argv[1]) or '')" "$GPU_NAME")}
echo "plan --gpu ${GPU:-(default: $GPU_NAME is not in data/gpus.yaml)}" >> "$d/summary.txt"
dg plan --sglang "$SGLANG" --sglang-cmd "$LOCAL" ${GPU:+--gpu "$GPU"} -o "$w/plan.yaml" > "$d/plan.txt" 2>&1
plan_rc=$?
# SGLang's model-path Triton kernels (data/triton_path.yaml), named to the summary as family triton-path; how many of
# them the plan holds (0 before sglang 0.5.23's path: the family then has no verdict)
path_kernels=$(python3 -c "from dgprecompile.runtimes.triton_moe import TRITON_PATH; print(','.join(sorted(k['kernel'] for k in TRITON_PATH.data()['kernels'].values())))" 2>> "$d/logs.txt")
# the plan's model-path Triton items, and its Triton fused MoE items: none where the command's MoE runner is another
# (--moe-runner-backend deep_gemm): that family is then not judged (no entry to delete; a run that never called the
# kernel proves nothing of it); a plan that cannot be read counts as none of the first, an unknown number of these
read -r path_items moe_items <<< "$(python3 -c "import sys; from dgprecompile.planning.manifest import read_manifest; p = read_manifest(sys.argv[1]); print(len(p.triton_path), len(p.triton_moe))" "$w/plan.yaml" 2>> "$d/logs.txt" || echo 0 unknown)"
echo "plan rc=$plan_rc" >> "$d/summary.txt"
stamp warm
tw=$(date +%s.%N)
# (PROFILE=1: warm's parent under cProfile, which slows it: the speed line below then overstates its wall)
prof=(); [ "${PROFILE:-0}" = 1 ] && prof=(-m cProfile -o "$w/warm.prof")
CUDA_VISIBLE_DEVICES= python3 "${prof[@]}" -m dgprecompile warm --manifest "$w/plan.yaml" \
  --cache-dir "$cache" --backend nvcc --sglang-jit on --json > "$d/warm.json" 2> "$w/warm.err"
echo "warm (GPU hidden) rc=$?" >> "$d/summary.txt"; tail -25 "$w/warm.err" >> "$d/logs.txt"
# what the GPU-free warm built: with CARRIED, none of the carried items (they were unpacked), only the rest
bash tests/gpu/carry_unpack.sh built "$d/warm.json" "${art:-}" >> "$d/summary.txt" 2>> "$d/logs.txt"
# issue 33's speed bound, from warm's own report (bench/bench_triton_warm.py limits): wall / max(sum/workers, longest)
python3 -c "import json, sys, time; sys.path.insert(0, 'bench'); from bench_triton_warm import limits
wall = time.time() - float(sys.argv[2]); lim = limits(json.load(open(sys.argv[1])))
print(f'warm speed: wall {wall:.1f} s, limit {lim[\"limit_s\"]} s (sum/workers {lim[\"sum_over_workers_s\"]} s, longest {lim[\"longest_unit_s\"]} s {lim[\"longest_unit\"]}), ratio {wall / max(lim[\"limit_s\"], 1e-9):.2f}')" \
  "$d/warm.json" "$tw" >> "$d/summary.txt" 2>> "$d/logs.txt"
# where warm's parent spent its time (cumulative, the 20 costliest calls): the bound above counts all of it
[ -f "$w/warm.prof" ] && python3 -c "import pstats, sys; pstats.Stats(sys.argv[1], stream=sys.stdout).sort_stats('cumulative').print_stats(20)" \
  "$w/warm.prof" 2>&1 | tail -32 > "$d/warm_profile.txt"
# the torch.compile graphs: inductor's key holds the live GPU's name, so warm builds them where the GPU is visible
# (by SGLang's own compiled functions at the plan's shapes; the other families are cached from the run above)
stamp warm-gpu
tg=$(date +%s.%N)
python3 -m dgprecompile warm --manifest "$w/plan.yaml" --cache-dir "$cache" --backend nvcc --sglang-jit on --json \
  > "$d/warm_gpu.json" 2> "$w/warm_gpu.err"
echo "warm (GPU visible: torch.compile graphs) rc=$? in $(python3 -c "import time,sys; print(round(time.time()-float(sys.argv[1]),1))" "$tg") s" >> "$d/summary.txt"
tail -8 "$w/warm_gpu.err" >> "$d/logs.txt"
stamp verify
dg verify --manifest "$w/plan.yaml" --cache-dir "$cache" > "$w/verify.txt" 2>&1
echo "verify rc=$?" >> "$d/summary.txt"; tail -5 "$w/verify.txt" >> "$d/logs.txt"
DRIVER=(python3 -m dgprecompile.launch.model_driver --sglang-cmd "$LOCAL" --model-dir "$model" --m "$MS")
stamp strict
(cd "$cache" && find . -type f | sort) > "$w/files.before"
# the runtime's asks (issue 43): every file the job itself opens under DeepGEMM's, SGLang's and FlashInfer's areas,
# by inotify (tests/gpu/cache_opens.py), between the marks the job's own wrapper makes at its start and end (the
# launcher reads the cache before and after the job; those reads are not the runtime's)
mkdir -p "$w/marks"
python3 tests/gpu/cache_opens.py watch "$cache" cache tvm-ffi sglang-jit flashinfer --marks "$w/marks" --out "$w/opens.json" \
  > "$w/watch.out" 2>&1 & watcher=$!
for _ in $(seq 300); do grep -q '^watching' "$w/watch.out" && break; sleep 0.1; done
dg launch --manifest "$w/plan.yaml" --cache-dir "$cache" -- sh -c 'touch "$0/started"; "$@"; rc=$?; touch "$0/ended"; exit $rc' \
  "$w/marks" "${DRIVER[@]}" --report "$d/driver.json" > "$w/strict.out" 2> "$w/strict.err"
strict_rc=$?; echo "strict proof rc=$strict_rc" >> "$d/summary.txt"
kill -TERM "$watcher"; wait "$watcher"; cat "$w/watch.out" >> "$d/logs.txt"
(cd "$cache" && find . -type f | sort) > "$w/files.after"
python3 tests/gpu/model_proof_summary.py --driver "$d/driver.json" --stderr "$w/strict.err" \
  --before "$w/files.before" --after "$w/files.after" --path-kernels "$path_kernels" >> "$d/summary.txt" 2>&1
tail -c 3000 "$w/strict.err" >> "$d/logs.txt"
# the asks record: complete where the job ran through (its report written, no failure but refusals) with nothing
# refused or new in the families it records: then its opens and calls are every lookup it made (the launch's own exit
# code is in summary.txt; on 2026-12-05 it was 1 for FlashInfer's log alone, which the proof counts as bookkeeping)
complete=true
[ -f "$d/driver.json" ] && grep -q "^driver failures other than refusals: 0$" "$d/summary.txt" || complete=false
asked=(deepgemm sglang-jit flashinfer triton-moe inductor)
[ "${path_items:-0}" -gt 0 ] 2>/dev/null && asked+=(triton-path)  # its calls are recorded where it is planned
for f in "${asked[@]}"; do
  grep -q "^family $f: refused 0, new 0$" "$d/summary.txt" || complete=false
done
cp "$CONFIG" "$d/config.json"
python3 - "$d/asks.template.json" "$complete" "${STACK_SITE:-$site}" <<PYEOF
import json, subprocess, sys, time
from importlib import metadata
def version(dist):
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None
versions = {k: version(k) for k in ("sglang", "sgl-deep-gemm", "apache-tvm-ffi", "flashinfer-python", "torch", "triton")}
versions["python"] = sys.version.split()[0]
versions["nvcc"] = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True).stdout.split("\n")[0].strip()
json.dump({"format": "dgprecompile-proof-asks", "schema": 1, "name": "$NAME", "commit": "${DGP_GIT:-}",
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime($t0)),
           "command": "${STACK:+STACK=$STACK }SGLANG=$SGLANG SERVER=\"$SERVER\" CONFIG=$CONFIG MS=$MS bash tests/gpu/model_proof.sh",
           "device_s": round(time.time() - $t0), "complete": sys.argv[2] == "true",
           "how": "tests/gpu/cache_opens.py: every file SGLang's own model opened under the cache's DeepGEMM, SGLang JIT and "
                  "FlashInfer areas during the strict run (inotify, between the job's own start and end marks), every "
                  "module a refusal named, and every call of SGLang's Triton fused MoE and of its torch.compile'd "
                  "functions the driver recorded inside the job (dgprecompile/launch/model_asks.py)",
           "server_command": "$SERVER", "config": "config.json", "sglang": "$SGLANG",
           "environment": {"gpu": gpu, "deepgemm_include": sys.argv[3] + "/deep_gemm/include",
                           "versions": {k: v for k, v in versions.items() if v}},
           "families": {}}, open(sys.argv[1], "w"), indent=1)
PYEOF
python3 tests/gpu/cache_opens.py asks --opens "$w/opens.json" --refusals "$w/strict.err" \
  --template "$d/asks.template.json" --driver "$d/driver.json" --out "$d/asks.json" >> "$d/summary.txt" 2>&1
echo "asks record rc=$? complete=$complete" >> "$d/summary.txt"; rm -f "$d/asks.template.json"
# a record of thousands of distinct calls (the deep_gemm runner's post-permute at each m: megabytes) is kept gzipped,
# as it is committed (dgprecompile/launch/proof_asks.py reads asks.json or asks.json.gz)
zip_asks() { [ -f "$d/asks.json" ] && [ "$(stat -c %s "$d/asks.json")" -gt 1048576 ] && gzip -9nf "$d/asks.json"; }
if [ "${DELETED:-1}" = 0 ]; then  # bench/first_forward.sh: the launched run's figures, not a proof of refusals
  zip_asks; stamp done; echo "deleted-entry runs: not run (DELETED=0): this folder is no proof" >> "$d/summary.txt"
  echo "device seconds: total $(( $(date +%s) - t0 ))" >> "$d/summary.txt"; cat "$d/summary.txt"; exit 0
fi
stamp deleted
python3 tests/gpu/model_proof_summary.py --pick-victims "$cache" > "$w/victims.txt" 2>> "$d/logs.txt"
# FlashInfer's victim is the decode step's sampling module; where it is DeepSeek's routing instead (no sampling module
# planned), that one runs before the Triton MoE victim in the same MoE call and would hide its refusal: it is then
# deleted alone in a second run, the others put back first
# no graph planned (sglang 0.5.19+ on sm_90 sums the MoE with a Triton kernel: data/inductor_graphs.yaml): nothing to
# delete; the proof is then that the strict run compiled and loaded no graph (the driver's dynamo counters)
if ! grep -q '^inductor ' "$w/victims.txt"; then
  python3 -c "import json, sys; d = json.load(open(sys.argv[1])).get('dynamo', {}); print('inductor: none planned; the'
    ' strict run compiled %s and loaded %s graphs' % (d.get('inductor_compiled'), d.get('inductor_loaded')))" \
    "$d/driver.json" >> "$d/summary.txt" 2>> "$d/logs.txt"
fi
grep -v '^flashinfer .*dsv3_fused_routing' "$w/victims.txt" > "$w/victims.a"
grep '^flashinfer .*dsv3_fused_routing' "$w/victims.txt" > "$w/victims.b"
deleted_run() {  # $1 victims file, $2 label, $3 m range: move the victims aside, run, put them back
  local aside=$w/aside.$2; mkdir -p "$aside"
  while read -r fam path; do echo "deleted $fam $path" >> "$d/summary.txt"; mkdir -p "$aside/$(dirname "$path")"
    mv "$cache/$path" "$aside/$path"; done < "$1"
  dg launch --manifest "$w/plan.yaml" --cache-dir "$cache" --allow-missing -- "${DRIVER[@]}" --m "$3" \
    --report "$d/driver_$2.json" > "$w/$2.out" 2> "$w/$2.err"
  echo "$2 proof rc=$?" >> "$d/summary.txt"
  python3 tests/gpu/model_proof_summary.py --driver "$d/driver_$2.json" --stderr "$w/$2.err" \
    --deleted "$1" --label "$2:" --path-kernels "$path_kernels" >> "$d/summary.txt" 2>&1
  tail -c 2000 "$w/$2.err" >> "$d/logs.txt"
  while read -r fam path; do rm -rf "${cache:?}/$path"; mv "$aside/$path" "$cache/$path"; done < "$1"
}
deleted_run "$w/victims.a" deleted-run "$MS_DELETED"
if [ -s "$w/victims.b" ]; then deleted_run "$w/victims.b" deleted-flashinfer-run "${MS_DELETED_FI:-1-8,8192}"; fi
stamp done
expects=()
moe=(triton-moe)
if [ "$moe_items" = 0 ]; then
  moe=(); echo "triton-moe: none planned (the command's MoE runner is not SGLang's Triton fused MoE): not judged" >> "$d/summary.txt"
fi
judged=(deepgemm sglang-jit "${moe[@]}" triton-host inductor)
[ "${path_items:-0}" -gt 0 ] 2>/dev/null && judged+=(triton-path)  # the plan holds model-path Triton items
for f in "${judged[@]}"; do  # each family: the driver ran, failed only by refusals
  expects+=(--expect "$f=summary.txt:^driver: [1-9][0-9]* modules" \
            --expect "$f=summary.txt:^driver failures other than refusals: 0$" \
            --expect "$f=summary.txt:^family $f: refused 0, new 0$"
            --expect "$f=summary.txt:^decode step: [1-9][0-9]* calls; sampler [1-9]")
done
for f in deepgemm sglang-jit "${moe[@]}"; do expects+=(--expect "$f=summary.txt:^deleted-run: deleted $f refused by name$"); done
if grep -q '^inductor ' "$w/victims.txt"; then expects+=(--expect "inductor=summary.txt:^deleted-run: deleted inductor refused by name$")
else expects+=(--expect "inductor=summary.txt:^inductor: none planned; the strict run compiled 0 and loaded 0 graphs$"); fi
if [ -n "$CARRIED" ]; then  # the carried families were unpacked under the trusted key and not rebuilt here
  # carry_build.sh's families: CARRIED_FAMILIES (a stack's build), else 0.5.14's (with FlashInfer where it is real)
  read -r -a carried_families <<< "${CARRIED_FAMILIES:-deepgemm sglang-jit}"
  [ -z "${CARRIED_FAMILIES:-}" ] && [ "$FLASHINFER" = real ] && carried_families+=(flashinfer)
  for f in "${carried_families[@]}"; do
    [ "$f" = triton-moe ] && [ "${#moe[@]}" = 0 ] && continue
    expects+=(--expect "$f=summary.txt:^carried: unpack rc=0; signed by trusted key"
              --expect "$f=summary.txt:^carried: [1-9][0-9]* items unpacked; warm \(GPU hidden\) rebuilt 0 of them$")
  done
fi
if [ "$FLASHINFER" = real ]; then  # its planned modules warmed GPU-free; the one the driver runs deleted and refused
  expects+=(--expect "flashinfer=summary.txt:^family flashinfer: refused 0, new 0$"
            --expect "flashinfer=summary.txt:^driver failures other than refusals: 0$"
            --expect "flashinfer=summary.txt:^deleted(-flashinfer)?-run: deleted flashinfer refused by name$")
fi
python3 tests/gpu/proof_record.py --name "$NAME" --dir "$d" --out "$d/record.json" --sglang "$SGLANG" --server "$SERVER" \
  --command "${STACK:+STACK=$STACK }SGLANG=$SGLANG SERVER=\"$SERVER\" CONFIG=$CONFIG MS=$MS bash tests/gpu/model_proof.sh" \
  --wheels $([ -n "$STACK" ] || echo .whl) --ran "summary.txt:^driver: [1-9][0-9]* modules" \
  --whole "summary.txt:^family other: refused 0, new 0$" --whole "summary.txt:^strict proof rc=0$" \
  "${expects[@]}" >> "$d/summary.txt" 2>&1
[ -f "$d/asks.json" ] && python3 -c "import json, sys, time; p = sys.argv[1]; r = json.load(open(p)); r['device_s'] = round(time.time() - int(sys.argv[2])); json.dump(r, open(p, 'w'), indent=1)" "$d/asks.json" "$t0"
zip_asks
echo "device seconds: total $(( $(date +%s) - t0 ))" >> "$d/summary.txt"
cat "$d/summary.txt"
