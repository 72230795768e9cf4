#!/usr/bin/env bash
# The number a user feels (issue 45), for one SGLang server command on the H200: SGLang's own model for one rank
# (dgprecompile/launch/model_driver.py, built from the command by SGLang's own ServerArgs, as the model proof does)
#   launched  tests/gpu/model_proof.sh without its deleted-entry runs: plan, warm (GPU hidden, then visible), verify,
#             the driver under strict `dgprecompile launch`; its driver.json times the first forward (the first m
#             through every module), the pass over MS, a decode step and a second forward at the first m
#   cold      the same driver, every JIT cache a new empty folder, no launch: runtime JIT on as SGLang ships it (its
#             own DeepGEMM precompile of every m included); what each family compiled: its files and when they landed
#   cold8     PROCS such drivers at once on the one GPU, sharing one new cache (the ranks of a node: driver i is local
#             rank i-1, so SGLang's DeepGEMM precompile of every m runs in the first only, as on a node), the first m
#             only, no decode: the CPU contention of a node's ranks compiling at once
#   warm1     the whole warm as a user runs it: one `warm` of the plan with the GPU visible into a new cache (the
#             launched phase's two warms are split for the proof: GPU-hidden first, then the graphs; one warm starts
#             FlashInfer's modules beside the pool and builds the graphs while they compile): its wall is the
#             summary's warm_one_run_s
#   alone     (not by default: its own call) each GPU-free item of the plan that is no DeepGEMM kernel (FlashInfer's
#             modules, the Triton MoE item, SGLang's JIT modules) warmed by itself into a new cache, GPU hidden, with
#             every core: the longest of these walls is the summary's longest_compile_s, the bound the whole warm is
#             held to (issue 45: within 1.2x of it)
# Phases run in that order (the cold ones reuse the launched phase's installed packages; the page cache then favours
# them, so cold/launched is if anything understated). Nothing here is derived from the plan but the launched phase.
# usage: SGLANG=0.5.14 SERVER="python -m sglang.launch_server --model-path M --tp 8 --ep 8" CONFIG=config.json \
#        [MS=1-8192] [PROCS=8] [MS8=1] [PHASES=launched,cold,cold8,warm1|alone] [NAME=first-forward] DGP_GIT=<sha> \
#        [CARRIED=... TRUSTED=... CARRY_PIECES=... STACK=...: model_proof.sh's] [PROOF=<dir>] [PHASE_S=<s>] \
#        bash bench/first_forward.sh
# STACK=<base>: another serving stack (tests/gpu/carry_stack.sh install <base>), for every phase, as model_proof.sh
#   takes it; PROOF=<dir>: a model_proof.sh folder of the same server, stack and commit run before in this lease (the
#   launched phase, then left out of PHASES: its driver.json and summary.txt are the launched figures)
# PHASE_S=<s>: the cold and cold8 drivers stopped (timeout) after that many seconds, so a call's limit ends a phase,
#   not the script: the phase's line says rc=143 (the driver's report so far written, `stopped` set: the first
#   forward's seconds and how far the pass over m got, m_done), and what each family had compiled by then (its files
#   and when they landed) is still counted into cold_files.json / cold8_files.json and the summary (a cold first
#   forward longer than the lease allows still shows where its time went)
# WORK=<dir>: the phases' folder kept there instead of a new one, so the phases of one server can run in separate
#   device calls of one lease (the machine keeps /tmp while held): each call adds its phases' files, its device
#   seconds to WORK/device_s, and writes the summary of every phase so far; a replaced machine starts WORK anew
# ALONE=<regex>: phase alone warms only the items whose id matches (the longest, where a lease cannot time them all)
# COLD_FROM=<record folder>: with neither cold phase in PHASES, an earlier record's cold and cold8 files (its
#   files.tar.gz): those phases run SGLang alone, so a record at a later commit may keep them; summary.json names the
#   record and its commit (cold_from)
# after the launched phase, where the plan has FlashInfer's trtllm_comm (which the 1-rank driver never loads): one
#   kernel of it, from the proof's cache, under strict launch (tests/gpu/flashinfer_split_check.py): split_check.txt
# SAMPLE=<s>: beside the warm1 and alone phases, every <s> seconds one line of what compiles (cicc, ptxas and nvcc
#   counts, ninja's -j, the .cu units cicc is on, the load) into warm1-ps.txt / alone-ps.txt (the 2026-12-07 samples
#   showed the alone phase's ninja on one job, and which unit bounds the warm)
# writes $OUT/$NAME/{summary.json, logs.txt, files.tar.gz}: the tarball holds cold.json, cold_files.json,
#   cold8/driver-N.json, cold8_files.json, plan.yaml, warm1.json, alone/ with alone-N.json (each alone warm's --json)
#   and proof/ (model_proof.sh's folder), with SAMPLE= warm1-ps.txt / alone-ps.txt; all three written again as each
#   phase ends (a call cut short returns its finished phases)
set -uo pipefail
export PYTHONUNBUFFERED=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
root=$PWD; OUT=${OUT:-$root/out}; NAME=${NAME:-first-forward}; final=$OUT/$NAME; d=${WORK:-$(mktemp -d)}
mkdir -p "$final" "$d"
MS=${MS:-1-8192}; MS8=${MS8:-1}; PROCS=${PROCS:-8}; PHASES=${PHASES:-launched,cold,cold8,warm1}; SGLANG=${SGLANG:-0.5.14}
# the cold phases' drivers, each stopped (SIGTERM, SIGKILL 30 s on) after PHASE_S with the compilers they started
cap=(); [ -n "${PHASE_S:-}" ] && cap=(timeout -k 30 "$PHASE_S")
: "${SERVER:?SERVER= the sglang server command}" "${CONFIG:?CONFIG= the model config.json}"
t0=$(date +%s)
has() { case ",$PHASES," in *",$1,"*) return 0 ;; esac; return 1; }
if has launched; then  # the proof's own steps; its device seconds per step land in proof/summary.txt
  OUT=$d NAME=proof DELETED=0 bash tests/gpu/model_proof.sh >> "$d/logs.txt" 2>&1
  echo "launched phase: model_proof.sh rc=$?" >> "$d/logs.txt"
elif [ -n "${PROOF:-}" ]; then
  cp -a "$PROOF" "$d/proof" && echo "launched phase: taken from $PROOF" >> "$d/logs.txt"
fi
site=${SITE:-/tmp/dgp-carry-site}; STACK=${STACK:-}; STACK_SITE=
if [ -n "$STACK" ]; then
  [ -f "$STACK/stack.env" ] || { echo "error: no $STACK/stack.env: run tests/gpu/carry_stack.sh install $STACK first" >&2; exit 2; }
  . "$STACK/stack.env"  # STACK_SITE, and LD_PRELOAD with the NCCL stand-in
fi
if [ -z "$STACK" ] && ! PYTHONPATH=$site python3 -c "import sglang" 2> /dev/null; then  # no launched phase: install
  if [ -e "$site" ] && [ -n "$(ls -A "$site" 2>/dev/null)" ] && [ ! -f "$site/.dgp-carry-site" ]; then
    echo "error: SITE=$site holds files neither model_proof.sh nor this script put there" >&2; exit 2
  fi
  rm -rf "$site"; mkdir -p "$site"; touch "$site/.dgp-carry-site"
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .whl/sgl_deep_gemm-0.1.3-*.whl \
    .whl/apache_tvm_ffi-*.whl .whl/sglang/*.whl .whl/extra/*.whl >> "$d/logs.txt" 2>&1
fi
standins=sgl_kernel
PYTHONPATH="${STACK_SITE:+$STACK_SITE:}$site" python3 -c "import flashinfer" 2> /dev/null || standins=sgl_kernel,flashinfer
export PYTHONPATH="${STACK_SITE:+$STACK_SITE:}$site:$root/tests/standins:$root" DGP_STANDINS=$standins DGP_TRANSFORMERS_EXIST_OK=1
model=$(mktemp -d); cp "$CONFIG" "$model/config.json"
LOCAL=$(python3 -c "import shlex,sys; w=shlex.split(sys.argv[1]); i=w.index('--model-path'); w[i+1]=sys.argv[2]; print(shlex.join(w))" "$SERVER" "$model")
sampler=
sample() {  # sample NAME: start the SAMPLE= line writer into $d/NAME-ps.txt; sample: stop it
  [ -n "$sampler" ] && { kill "$sampler" 2> /dev/null; wait "$sampler" 2> /dev/null; sampler=; }
  [ -n "${SAMPLE:-}" ] && [ -n "${1:-}" ] || return 0
  ( s=$(date +%s); while :; do
      echo "t=$(( $(date +%s) - s )) cicc=$(pgrep -c -x cicc) ptxas=$(pgrep -c -x ptxas) nvcc=$(pgrep -c -x nvcc)" \
        "load=$(cut -d' ' -f1 /proc/loadavg) ninja=$(pgrep -a -x ninja | grep -o -- '-j [0-9]*' | tr '\n' ' ')" \
        "units=$(pgrep -a -x cicc | grep -o '[A-Za-z_0-9]*\.cu' | sort -u | tr '\n' ' ')"
      sleep "$SAMPLE"; done > "$d/$1-ps.txt" ) & sampler=$!
}
fresh_env() { python3 bench/first_forward_files.py --env "$1"; }  # every JIT cache and HOME in the new folder $1
# keep [END]: after each phase, the summary so far, logs.txt and files.tar.gz (the phases' folder) into $final, so a
# call the lease or its limit cuts short (SIGKILL: no trap runs) still returns what its finished phases measured (3
# files: the device returns 8, and left out the summary.json of 2026-12-07h's call); END also adds this call's
# seconds to WORK/device_s, once a call
keep() {
  local spent=$(( $(date +%s) - t0 + $(cat "$d/device_s" 2>/dev/null || echo 0) ))
  [ -n "${1:-}" ] && echo "$spent" > "$d/device_s"
  python3 bench/first_forward_files.py --summary "$d" --server "$SERVER" --commit "${DGP_GIT:-}" \
    --device-s "$spent" > "$d/summary.json" 2>> "$d/logs.txt"
  cp "$d/summary.json" "$d/logs.txt" "$final/"; tar czf "$final/files.tar.gz" -C "$d" .
  return 0
}
if has launched && [ -f "$d/proof/workdir.txt" ]; then  # the carried trtllm_comm run on the GPU, from the proof's cache
  pw=$(cat "$d/proof/workdir.txt")
  if grep -q 'flashinfer:trtllm_comm@' "$pw/plan.yaml" 2> /dev/null; then
    python3 -m dgprecompile launch --manifest "$pw/plan.yaml" --cache-dir "$pw/cache" -- \
      python3 tests/gpu/flashinfer_split_check.py "$pw/cache" > "$d/split_check.txt" 2> "$d/split_check.err"
    echo "split check: launch rc=$?" | tee -a "$d/logs.txt" > "$d/split_check.rc"
  fi
fi
has launched && keep
if [ -n "${COLD_FROM:-}" ] && ! has cold && ! has cold8; then  # an earlier record's cold phases (no dgprecompile in them)
  tar -xzf "$COLD_FROM/files.tar.gz" -C "$d" ./cold.json ./cold_files.json ./cold8 ./cold8_files.json 2>> "$d/logs.txt"
  python3 -c "import json,sys; print(json.dumps({'record': sys.argv[1], 'commit': json.load(open(sys.argv[1] + '/summary.json'))['commit']}))" \
    "$COLD_FROM" > "$d/cold_from.json"
  echo "cold phases: taken from $COLD_FROM" >> "$d/logs.txt"
fi
if has cold; then
  c=$(mktemp -d); mkdir -p "$c/home"; start=$(date +%s.%N)
  env $(fresh_env "$c") "${cap[@]}" python3 -m dgprecompile.launch.model_driver --sglang-cmd "$LOCAL" \
    --model-dir "$model" --m "$MS" --report "$d/cold.json" > /dev/null 2>> "$d/logs.txt"
  echo "cold phase: driver rc=$? in $(python3 -c "import time,sys; print(round(time.time()-float(sys.argv[1]),1))" "$start") s" >> "$d/logs.txt"
  python3 bench/first_forward_files.py "$c" "$start" > "$d/cold_files.json" 2>> "$d/logs.txt"; keep
fi
if has cold8; then
  c=$(mktemp -d); mkdir -p "$c/home" "$d/cold8"; start=$(date +%s.%N); pids=()
  for i in $(seq "$PROCS"); do
    env $(fresh_env "$c") "${cap[@]}" python3 -m dgprecompile.launch.model_driver --sglang-cmd "$LOCAL" \
      --model-dir "$model" --m "$MS8" --decode "" --local-rank $((i - 1)) --report "$d/cold8/driver-$i.json" > /dev/null \
      2>> "$d/cold8/logs-$i.txt" & pids+=($!)
  done
  rcs=(); for p in "${pids[@]}"; do wait "$p"; rcs+=($?); done
  echo "cold8 phase: $PROCS drivers rc ${rcs[*]} in $(python3 -c "import time,sys; print(round(time.time()-float(sys.argv[1]),1))" "$start") s" >> "$d/logs.txt"
  python3 bench/first_forward_files.py "$c" "$start" > "$d/cold8_files.json" 2>> "$d/logs.txt"; keep
fi
if has warm1 || has alone; then
  # the GPU the user names with --gpu, from nvidia-smi as model_proof.sh does: without it the plan is the H200's, and
  # on another card warm skips the torch.compile graphs (their key holds the live GPU's name) and tunes the Triton
  # MoE for the H200 (the 2026-12-07 H100 run's first warm1: 154 s without its two graphs)
  gpu=$(python3 -c "import sys; from dgprecompile.planning.plan import gpu_named; print(gpu_named(sys.argv[1]) or '')" \
    "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)")
  python3 -m dgprecompile plan --sglang "$SGLANG" --sglang-cmd "$LOCAL" ${gpu:+--gpu "$gpu"} -o "$d/plan.yaml" \
    > /dev/null 2>> "$d/logs.txt"
fi
if has warm1; then  # the whole warm as a user runs it: one `warm`, the GPU visible, into a new cache
  # the host's cores as the kernel counts them (whether the 16 are 8 cores' hyperthreads bounds a busy warm)
  lscpu 2>/dev/null | grep -E '^(CPU\(s\)|Thread|Core|Socket|Model name)' | sed 's/^/lscpu: /' >> "$d/logs.txt"
  c=$(mktemp -d); start=$(date +%s.%N); sample warm1
  python3 -m dgprecompile warm --manifest "$d/plan.yaml" --cache-dir "$c" --backend nvcc --sglang-jit on --json \
    > "$d/warm1.json" 2>> "$d/logs.txt"
  rc=$?; sample
  echo "warm1 phase: rc=$rc in $(python3 -c "import time,sys; print(round(time.time()-float(sys.argv[1]),1))" "$start") s" >> "$d/logs.txt"
  rm -rf "$c"; keep
fi
if has alone; then
  # every core: GNU nproc answers OMP_NUM_THREADS, which this script sets to 1 (the 2026-12-07 alone phases ran with
  # --jobs 1 so: FlashInfer's ninja built a module's units one after another, its wall their sum)
  mkdir -p "$d/alone"; n=0; cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc); sample alone
  for id in $(python3 bench/first_forward_files.py --alone "$d/plan.yaml" "$d/alone" 2>> "$d/logs.txt"); do
    if [ -n "${ALONE:-}" ] && ! [[ $id =~ $ALONE ]]; then n=$((n + 1)); continue; fi
    c=$(mktemp -d); start=$(date +%s.%N)
    CUDA_VISIBLE_DEVICES= python3 -m dgprecompile warm --manifest "$d/alone/alone-$n.yaml" --cache-dir "$c" \
      --backend nvcc --sglang-jit on --jobs "$cores" --json > "$d/alone-$n.json" 2>> "$d/logs.txt"
    echo "alone phase: $id rc=$? in $(python3 -c "import time,sys; print(round(time.time()-float(sys.argv[1]),1))" "$start") s" >> "$d/logs.txt"
    rm -rf "$c"; n=$((n + 1)); keep
  done
  sample
fi
keep end
grep -E "phase" "$d/logs.txt"; cat "$d/summary.json"
