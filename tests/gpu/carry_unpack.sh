#!/usr/bin/env bash
# The device's side of tests/gpu/carry_build.sh (issue 43 item 3), run by model_proof.sh's CARRIED mode and by
# tests/test_carry_build.py here (the same lines, so a slip shows on the CPU machine, not in a device call):
#
#   in HELD TRUSTED CACHE WORK   keep a piece this call carried itself (CARRY_PIECES/pNN, default .carry/pieces), join every
#                                held piece (sha256 of each piece and file: tests/gpu/carry_pieces.py) into WORK/carried,
#                                and `dgprecompile unpack --trusted-key` the artifact into CACHE as a node would: the
#                                signature, the fingerprint (deep_gemm must be installed at the carry build's SITE) and
#                                every member's bytes are checked before anything is installed. Summary lines on
#                                stdout ("carried: join rc=...", "carried: unpack rc=...; signed by trusted key <id>;
#                                ..."), the tools' own output on stderr. Exit: unpack's (1 where the join failed).
#   built WARM_JSON [ARTIFACT]   what a warm built (its --json item_seconds), and how many of the artifact's items it
#                                rebuilt (artifact.json's kernels and JIT modules, and the items index.json records):
#                                "carried: N items unpacked; warm (GPU hidden) rebuilt 0 of them", "warm (GPU hidden)
#                                built K items: ..."
# PYTHON (default python3) runs dgprecompile and the piece tool; NUM_SMS (default 132, the H200's) goes to unpack.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
py=${PYTHON:-python3}
case "${1:-}" in
in)
  [ $# -eq 5 ] || { echo "error: usage: carry_unpack.sh in HELD TRUSTED CACHE WORK" >&2; exit 2; }
  held=$2 trusted=$3 cache=$4 work=$5
  pieces=${CARRY_PIECES:-.carry/pieces}
  if [ -d "$pieces" ]; then
    # a refused keep (part of another split beside the held one, a corrupt piece) ends here: joining what is held
    # would unpack another carry's artifact (2026-12-07: the 480B's proof unpacked DeepSeek-V3's, kept by an earlier
    # call of the lease); the summary line says keep's own reason
    CARRY_DIR=$pieces HELD_DIR="$held" "$py" "$here/carry_pieces.py" keep > "$work/keep.out" 2>&1
    keep_rc=$?; cat "$work/keep.out" >&2
    if [ "$keep_rc" != 0 ]; then
      echo "carried: keep rc=$keep_rc ($(grep -m1 '^error: ' "$work/keep.out" | cut -c8-)): nothing unpacked"; exit 1
    fi
  fi
  HELD_DIR="$held" "$py" "$here/carry_pieces.py" join "$work/carried" >&2
  join_rc=$?
  art=$(ls "$work"/carried/carry-*.tar.gz 2>/dev/null | head -1)
  echo "carried: join rc=$join_rc ${art:+$(basename "$art") $(stat -c %s "$art") bytes}"
  [ "$join_rc" = 0 ] && [ -n "$art" ] || exit 1
  # a node's configured key: a copy only this user may change (the carried file's folders have the carry's modes)
  install -m 644 "$trusted" "$work/trusted.pub" || exit 1
  "$py" -m dgprecompile unpack "$art" --cache-dir "$cache" --trusted-key "$work/trusted.pub" \
    --num-sms "${NUM_SMS:-132}" > "$work/unpack.out" 2> "$work/unpack.err"
  rc=$?
  cat "$work/unpack.out" "$work/unpack.err" >&2
  signed=$(cat "$work/unpack.out" "$work/unpack.err" | grep -o 'signed by trusted key [0-9a-f]*' | head -1)
  echo "carried: unpack rc=$rc; ${signed:-no trusted signature}; $(head -1 "$work/unpack.out")"
  exit $rc ;;
built)
  [ $# -ge 2 ] || { echo "error: usage: carry_unpack.sh built WARM_JSON [ARTIFACT]" >&2; exit 2; }
  exec "$py" - "$2" "${3:-}" <<'PY'
import json, sys, tarfile
built = sorted(json.load(open(sys.argv[1])).get("item_seconds", {}))
carried = set()
if sys.argv[2]:
    with tarfile.open(sys.argv[2]) as t:  # the packed kernels and JIT modules, and the items recorded beside them
        carried = set(json.load(t.extractfile("dgprecompile/artifact.json"))["kernels"])
        index = json.load(t.extractfile("dgprecompile/index.json"))
    for section in ("flashinfer", "triton_moe", "inductor"):
        carried |= set(index.get(section) or {})
rebuilt = [k for k in built if k in carried]
if carried:
    print(f"carried: {len(carried)} items unpacked; warm (GPU hidden) rebuilt {len(rebuilt)} of them"
          + (": " + ", ".join(rebuilt) if rebuilt else ""))
print(f"warm (GPU hidden) built {len(built)} items: {', '.join(built) or 'none'}")
PY
  ;;
*)
  echo "error: unknown command: ${1:-(none)}" >&2
  echo "hint: carry_unpack.sh in HELD TRUSTED CACHE WORK | built WARM_JSON [ARTIFACT]" >&2
  exit 2 ;;
esac
