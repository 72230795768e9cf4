#!/usr/bin/env bash
# Every device proof the README's proof table rests on, in one command: each step runs one of the existing proof
# scripts of tests/gpu (or the independent model proof, tests/gpu/model_proof.sh) and leaves
#   $OUT/<date>-h200-<step>/record.json     (dgprecompile/data/schemas/proof-record.json: commit, date, versions,
#                                            each family's pass/fail with the lines that show it)
#   $OUT/<date>-h200-<step>/files.tar.gz    (everything the step's script wrote)
# and $OUT/prove.txt (what ran, what was left). Copy the step folders into bench/results/ and run
# `make proofs-table`: the README's table then says what is proven at that commit.
#
# The commit: the device's copy of the tree has no .git, so the caller passes the full sha of the clean tree it
# sends, taken before the copy:  DGP_GIT=$(git rev-parse HEAD)  (refused when it is not 40 hex digits; commit
# first: a record of a dirty tree would name a commit that did not run).
#
# Device limits (../.library/device/README.md): one command <= 10 minutes and at most 8 files back, 2 folders
# deep. So one call runs the steps that fit PROVE_BUDGET seconds (default 540) by their past durations, at most
# 3 steps (7 files), and prints the command for the rest; run it again with those steps.
#
# usage:  DGP_GIT=<sha> bash tests/gpu/prove.sh [all | STEP...]        bash tests/gpu/prove.sh list
# Exit: 0 every step that ran passed; 1 one failed (or left no record); 2 bad usage; 3 a step's carry was missing.
# Carry per step (prove.sh checks and says which is missing): .whl = ../shared/device/fetch-wheels.sh +
# fetch-sglang.sh + jsonschema's wheels; .dev-0523 = tests/gpu/triton_moe_0523_proof.sh prepare; .whl-gen =
# tests/gpu/fetch_generation_wheels.sh (+ sglang_kernel-0.4.2-deep_gemm.tgz). DSV3_CONFIG: a DeepSeek-V3
# config.json for the model-dsv3 steps (none is bundled).
set -uo pipefail
export PYTHONUNBUFFERED=1
root=$PWD
OUT=${OUT:-$root/out/prove}
budget=${PROVE_BUDGET:-540}
max_steps=${PROVE_MAX_STEPS:-3}
t0=$(date +%s)
SERVER_480B="python -m sglang.launch_server --model-path Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8 --tp 8 --ep 8"
SERVER_DSV3="python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 8"
QWEN480=dgprecompile/data/models/Qwen3-Coder-480B-A35B-Instruct-FP8.json
QWEN30=dgprecompile/data/models/Qwen3-30B-A3B-FP8.json  # the other bundled model
SERVER_QWEN30="python -m sglang.launch_server --model-path Qwen/Qwen3-30B-A3B-FP8 --tp 2"
STEPS="headline sglang-jit live triton-plan triton-moe-0523 gen-0.1.3 gen-sk-0.4.2 gen-0.1.4.post1 gen-0.1.5.post1
model-480b model-qwen30b-tp2 model-dsv3-tp8 model-dsv3-tp8-ep8"

# step NAME: sets est (seconds, from the past runs in bench/results), sglang, need (a path that must exist),
# server, cmd (the script and its environment), expect (FAMILY=FILE:REGEX, the lines the script prints on success),
# wheels (the carried folder whose wheels the step installs: their versions go into the record)
step() {
  server=""; expect=(); need=.whl; cmd=(); wheels=.whl
  case $1 in
    headline) est=200; sglang=0.5.14; server=$SERVER_480B; cmd=(bash tests/gpu/headline_proof.sh)
      expect=("deepgemm=summary.txt:^warm \(GPU hidden\) rc=0$" "deepgemm=summary.txt:^verify rc=0$"
              "deepgemm=summary.txt:^live \(strict\) rc=0$"
              "sglang-jit=summary.txt:^live \(strict\) rc=0$" "sglang-jit=summary.txt:^launch strict rc=0$"
              "sglang-jit=summary.txt:^launch strict, module deleted rc=1$"
              "triton-host=summary.txt:^capture rc=0$" "triton-host=summary.txt:^launch strict rc=0$") ;;
    sglang-jit) est=400; sglang=0.5.14; server=$SERVER_480B; cmd=(bash tests/gpu/jit_live_proof.sh)
      expect=("sglang-jit=logs.txt:^warm A rc=0$" "sglang-jit=logs.txt:^live A rc=0$"
              "sglang-jit=logs.txt:^live B_ds_tp8 rc=0$" "sglang-jit=logs.txt:^live B_ds_tp1 rc=0$"
              "sglang-jit=logs.txt:^live B_qwen_fused rc=0$" "sglang-jit=logs.txt:^live C \(deleted\) rc=1$") ;;
    live) est=450; sglang=0.5.14; server="$SERVER_480B --moe-runner-backend deep_gemm"; cmd=(bash tests/gpu/live_proof.sh)
      expect=("deepgemm=logs.txt:^warm rc=0$" "deepgemm=logs.txt:^verify rc=0$" "deepgemm=logs.txt:^live_all rc=0$"
              "deepgemm=logs.txt:^live_deleted rc=1$"
              "sglang-jit=logs.txt:^live_all rc=0$" "sglang-jit=logs.txt:^live_deleted rc=1$") ;;
    triton-plan) est=260; sglang=0.5.14; server=$SERVER_480B; cmd=(bash tests/gpu/triton_plan_proof.sh)
      expect=("triton-moe=summary.txt:^warm \(GPU hidden\) rc=0 " "triton-moe=summary.txt:^verify rc=0$"
              "triton-moe=summary.txt:^strict rc=0 new triton entries: $"
              "triton-moe=summary.txt:^strict-deleted rc=1$") ;;
    triton-moe-0523) est=130; sglang=0.5.23; server=$SERVER_480B; need=.dev-0523; wheels=.dev-0523
      cmd=(bash tests/gpu/triton_moe_0523_proof.sh)
      expect=("triton-moe=summary.txt:^warm \(GPU hidden\) rc=0$" "triton-moe=summary.txt:^forward rc=0 new: $") ;;
    gen-*) est=420; need=.whl-gen; wheels=.whl-gen; local v=${1#gen-}
      case $v in 0.1.3) sglang=0.5.14 ;; sk-0.4.2) sglang=0.5.11 ;; 0.1.4.post1) sglang=0.5.16 ;;
                 0.1.5.post1) sglang=0.5.17 ;; *) sglang=unknown ;; esac
      cmd=(env "RELEASES=$v:$sglang:auto" bash tests/gpu/sweep_generations.sh 380)
      expect=("deepgemm=SUMMARY.txt:^$v .*warm rc=0 entries=[0-9]+; sweep after warm [0-9]+ calls, 0 new entries") ;;
    model-480b) est=420; sglang=0.5.14; server=$SERVER_480B; need=tests/gpu/model_proof.sh
      cmd=(env SGLANG=0.5.14 "SERVER=$server" "CONFIG=$QWEN480" bash tests/gpu/model_proof.sh) ;;
    model-qwen30b-tp2) est=300; sglang=0.5.14; server=$SERVER_QWEN30; need=tests/gpu/model_proof.sh
      cmd=(env SGLANG=0.5.14 "SERVER=$server" "CONFIG=$QWEN30" bash tests/gpu/model_proof.sh) ;;
    model-dsv3-tp8|model-dsv3-tp8-ep8) est=420; sglang=0.5.14; need=${DSV3_CONFIG:-DSV3_CONFIG}
      server=$SERVER_DSV3; [ "$1" = model-dsv3-tp8-ep8 ] && server="$SERVER_DSV3 --ep 8"
      cmd=(env SGLANG=0.5.14 "SERVER=$server" "CONFIG=${DSV3_CONFIG:-}" bash tests/gpu/model_proof.sh) ;;
    *) return 1 ;;
  esac
}

if [ "${1:-}" = list ]; then
  for s in $STEPS; do step "$s"; printf '%-20s sglang %-7s ~%4s s  needs %s\n' "$s" "$sglang" "$est" "$need"; done
  exit 0
fi
if [ "${1:-}" = expect ]; then  # expect STEP: the step's expectations, one a line (tests/test_proofs_table.py)
  step "${2:-}" || exit 2
  for e in "${expect[@]}"; do echo "$e"; done
  exit 0
fi
if ! [[ ${DGP_GIT:-} =~ ^[0-9a-f]{40}$ ]]; then
  echo "error: DGP_GIT must be the full sha of the committed tree this copy holds (got '${DGP_GIT:-}')" >&2
  echo "hint: commit, then call with DGP_GIT=\$(git rev-parse HEAD) bash tests/gpu/prove.sh STEP..." >&2
  exit 2
fi
export DGP_GIT
want=${*:-all}; [ "$want" = all ] && want=$STEPS
for s in $want; do step "$s" || { echo "error: no step '$s' (bash tests/gpu/prove.sh list)" >&2; exit 2; }; done
mkdir -p "$OUT"; scratch=$(mktemp -d); ran=0; left=(); status=0
day=$(date -u +%F); machine_tag=${PROVE_MACHINE:-h200}
for s in $want; do
  step "$s"
  elapsed=$(( $(date +%s) - t0 )); remaining=$(( budget - elapsed ))
  if [ "$ran" -ge "$max_steps" ] || [ "$est" -gt "$remaining" ]; then left+=("$s"); continue; fi
  if [ ! -e "$need" ]; then
    echo "$s: skipped: $need is missing (carry it; see the header)" | tee -a "$OUT/prove.txt"; status=3; continue
  fi
  name=$day-$machine_tag-$s; dir=$scratch/$name; mkdir -p "$dir" "$OUT/$name"
  export PROVE_STEP_START; PROVE_STEP_START=$(date -u +%FT%TZ)
  echo "=== $s ($name) start $PROVE_STEP_START, ~$est s of $remaining s left" | tee -a "$OUT/prove.txt"
  OUT=$dir timeout --kill-after=10 "$(( remaining - 15 ))" "${cmd[@]}" > "$dir/prove_step.log" 2>&1
  rc=$?; ran=$((ran + 1))
  made=$(find "$dir" -mindepth 2 -maxdepth 2 -name record.json | head -1)   # model_proof.sh writes its own
  if [ -n "$made" ]; then  # its folder's name is this step's: the record must say so (bench/results/<name>/)
    python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); r["name"] = sys.argv[3]
json.dump(r, open(sys.argv[2], "w"), indent=1)' "$made" "$OUT/$name/record.json" "$name"
  elif [ "${#expect[@]}" -gt 0 ]; then
    args=(); for e in "${expect[@]}"; do args+=(--expect "$e"); done
    python3 tests/gpu/proof_record.py --name "$name" --dir "$dir" --out "$OUT/$name/record.json" \
      --command "DGP_GIT=$DGP_GIT bash tests/gpu/prove.sh $s  # ${cmd[*]}" --sglang "$sglang" \
      ${server:+--server "$server"} --wheels "$wheels" --rc "$rc" "${args[@]}"
  else
    echo "$s: the script wrote no record.json (exit $rc)" | tee -a "$OUT/prove.txt"; status=1
  fi
  tar czf "$OUT/$name/files.tar.gz" -C "$dir" . 2>/dev/null
  verdict=$(python3 -c 'import json, sys; r = json.load(open(sys.argv[1]))
print(r["result"], *[f + "=" + v["result"] for f, v in r["families"].items()])' "$OUT/$name/record.json" 2>&1)
  echo "$s: exit $rc after $(( $(date +%s) - t0 )) s: $verdict" | tee -a "$OUT/prove.txt"
  case $verdict in pass*) ;; *) status=1 ;; esac
done
if [ "${#left[@]}" -gt 0 ]; then
  echo "left for the next call: DGP_GIT=$DGP_GIT bash tests/gpu/prove.sh ${left[*]}" | tee -a "$OUT/prove.txt"
fi
rm -rf "$scratch"
exit "$status"  # 0: every step that ran passed; 1: one failed or left no record; 3: a step lacked what it needs
