#!/usr/bin/env bash
# A release's Triton MoE keys on the H200 (issue 31): the server command planned with --sglang RELEASE (MODEL qwen:
# the 480B --tp 8 --ep 8; dsv3: DeepSeek-V3 --tp 8 from dgprecompile/data/models/DeepSeek-V3.json, 257 experts top-9 under
# shared-experts fusion), the item's own warm argv (TRITON_MOE.warm_argv) run with the GPU hidden, its m set cut into
# chunks as `warm` cuts it (compile/triton_chunks.py chunks_for, one process each, all cores), then that release's own
# fused_experts_impl on the GPU (tests/gpu/triton_moe_release_forward.py) over MS (default: every m of the item,
# 1..m_max) with TRITON_CACHE_DIR = the warm's cache: the new fused_moe_kernel entries are the warm's misses (expect
# 0), the new other entries Triton's host modules the warm did not build. Not strict, not SGLang's whole layer: this
# checks Triton's keys of the one planned kernel with the release's own launch (sgl-kernel's ops: named stand-ins).
#
#   prepare (a machine with PyPI): tests/gpu/triton_moe_release_proof.sh prepare RELEASE [TRITON]
#       cp312 wheels of sglang RELEASE and what its MoE path imports into .dev-tmoe/RELEASE/ (TRITON, e.g. 3.5.1 for
#       0.5.9-0.5.10 or 3.7.1 for 0.5.18-0.5.21: that triton's wheel too, put before the device's own 3.6.0)
#   run (the H200; carry .dev-tmoe and this branch): tests/gpu/triton_moe_release_proof.sh RELEASE [qwen|dsv3]
#       e.g. 0.5.17 qwen, 0.5.9 dsv3; OUT (default ./out) gets summary.txt, plan.txt, warm-*.json, forward.json
# Time on the H200 (16 cores): install about 1 min; qwen (E=20, m 1-21,22-37,8192: about 40 calls to warm, 8192 on
# the GPU) about 3 min; dsv3 (E=257, its tuned config: 4113 m to warm in 16 chunks, 8192 on the GPU) about 6 min.
set -uo pipefail
if [ "${1:-}" = prepare ]; then
  rel=${2:?release}; d=.dev-tmoe/$rel/whl; mkdir -p "$d"
  dl() { python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_26_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 -d "$@"; }
  # 0.5.23's list (tests/gpu/triton_moe_0523_proof.sh), and openai/xgrammar: 0.5.9-0.5.19's server_args import them
  dl "$d" sglang=="$rel" apache-tvm-ffi==0.1.11 msgspec==0.23.0 orjson==3.13.0 psutil==7.2.2 pybase64==1.5.1 \
    starlette==1.10.0 anyio==4.16.0 pyzmq==27.3.0 tqdm==4.70.1 ipython==9.18.1 traitlets==5.16.1 dill==0.4.1 \
    pydantic==2.11.10 pydantic-core==2.33.2 annotated-types==0.8.0 typing-inspection==0.4.5 sniffio==1.3.1 \
    jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1 attrs==26.1.0 \
    openai==2.6.1 xgrammar==0.2.1 httpx==0.28.1 httpcore==1.0.9 h11==0.16.0 distro==1.9.0 jiter==0.11.1 einops==0.8.1 \
    || exit 1
  if [ -n "${3:-}" ]; then mkdir -p ".dev-tmoe/$rel/triton"; dl ".dev-tmoe/$rel/triton" triton=="$3" || exit 1; fi
  du -sh ".dev-tmoe/$rel"; exit 0
fi
REL=${1:?usage: $0 RELEASE [qwen|dsv3] (or: $0 prepare RELEASE [TRITON])}; MODEL=${2:-qwen}
export PYTHONUNBUFFERED=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
root=$PWD; OUT=${OUT:-$root/out}; mkdir -p "$OUT"; w=$(mktemp -d); site=$w/site
t0=$(date +%s); stamp() { echo "=== $1 $(date -u +%FT%TZ) (+$(( $(date +%s) - t0 )) s)" | tee -a "$OUT/logs.txt"; }
stamp install
if [ -n "${SITE:-}" ]; then site=$SITE  # a dry run's own site path (e.g. this repo's side installs joined by ':')
else python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" ".dev-tmoe/$REL"/whl/*.whl \
  >> "$OUT/logs.txt" 2>&1 || { echo "install failed (prepare $REL first)" | tee -a "$OUT/summary.txt"; exit 1; }
fi
tsite=""
if ls ".dev-tmoe/$REL"/triton/*.whl > /dev/null 2>&1; then
  tsite=$w/triton; python3 -m pip install -q --no-index --no-deps --no-compile --target "$tsite" \
    ".dev-tmoe/$REL"/triton/*.whl >> "$OUT/logs.txt" 2>&1
fi
export PYTHONPATH="${tsite:+$tsite:}$site:$root/tests/standins:$root" DGP_STANDINS=${DGP_STANDINS:-sgl_kernel} DGP_TRANSFORMERS_EXIST_OK=1
export TVM_FFI_CACHE_DIR=$w/tvm-ffi SGLANG_JIT_CACHE_DIR=$w/sgl-jit TORCHINDUCTOR_CACHE_DIR=$w/inductor HOME=$w/home
mkdir -p "$HOME"
{ echo "tests/gpu/triton_moe_release_proof.sh $REL $MODEL $(date -u +%FT%TZ) git ${DGP_GIT:-$(git rev-parse --short HEAD 2>/dev/null)}";
  python3 -c "import torch, sys, triton, sglang; print('torch', torch.__version__, 'triton', triton.__version__, 'sglang', getattr(sglang, '__version__', '?'), 'python', sys.version.split()[0])";
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } >> "$OUT/summary.txt" 2>&1
if [ "$MODEL" = dsv3 ]; then
  mkdir -p "$w/dsv3"; cp "$root/dgprecompile/data/models/DeepSeek-V3.json" "$w/dsv3/config.json"
  SERVER="python -m sglang.launch_server --model-path $w/dsv3 --tp 8"
else
  SERVER="python -m sglang.launch_server --model-path Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8 --tp 8 --ep 8"
fi
stamp plan
python3 -m dgprecompile plan --sglang-cmd "$SERVER" --sglang "$REL" --no-sglang-precompile -o "$w/plan.yaml" \
  > "$OUT/plan.txt" 2>&1
echo "plan rc=$?; $(grep -m1 'Triton fused MoE' "$OUT/plan.txt" | cut -c1-200)" | tee -a "$OUT/summary.txt"
# the item's argv per chunk (what `warm` runs), and the forward's shape arguments
python3 - "$w/plan.yaml" "$w/root" "$(env -u OMP_NUM_THREADS nproc)" "$w" <<'PY' >> "$OUT/summary.txt" 2>&1 || exit 1
import json, sys
from dgprecompile.compile.triton_chunks import chunks_for
from dgprecompile.planning.manifest import read_manifest
from dgprecompile.runtimes.triton_moe import TRITON_MOE
plan = read_manifest(sys.argv[1])
items = list(plan.triton_moe.values()) if isinstance(plan.triton_moe, dict) else list(plan.triton_moe)
if len(items) != 1:
    sys.exit(f"expected one Triton MoE item, the plan has {len(items)} (see plan.txt)")
item = items[0]
up_to = TRITON_MOE.tuned_up_to(TRITON_MOE.release(plan.sglang_version), item, item.device_name)
argv = TRITON_MOE.warm_argv(item, sys.argv[2], sys.executable)
with open(f"{sys.argv[4]}/chunks.txt", "w") as f:
    for c in chunks_for(item, int(sys.argv[3]), up_to, 1.0):
        a = list(argv)
        a[a.index("--m") + 1] = c.m_text
        f.write(json.dumps(a) + "\n")
with open(f"{sys.argv[4]}/shape.txt", "w") as f:
    f.write(f"--experts {item.experts} --global-experts {item.global_experts} --hidden {item.hidden} "
            f"--intermediate {item.intermediate} --topk {item.topk}\n1-{item.m_max}\n")
print("item", item.id, "m set", item.m_text, "chunks", sum(1 for _ in open(f"{sys.argv[4]}/chunks.txt")))
PY
stamp warm
n=0
while IFS= read -r line; do  # one chunk per line (a JSON argv), all at once, the GPU hidden (TRITON_MOE.warm_env)
  n=$((n + 1))
  CUDA_VISIBLE_DEVICES= python3 -c "import json, os, sys; a = json.loads(sys.argv[1]); os.execvp(a[0], a)" "$line" \
    > "$OUT/warm-$n.json" 2> "$w/warm-$n.err" &
done < "$w/chunks.txt"
wait
python3 - "$OUT" "$w/root/triton" <<'PY' | tee -a "$OUT/summary.txt"
import glob, json, os, sys
entries, seconds, bad = set(), [], []
for f in sorted(glob.glob(f"{sys.argv[1]}/warm-*.json")):
    try:
        r = json.loads(open(f).read().strip().splitlines()[-1])
    except Exception:
        bad.append(os.path.basename(f)); continue
    entries |= set(r["entries"]); seconds.append(r["seconds"])
    host = r.get("host_modules", {})
    if "left_to_capture" in host:
        print("host modules left to capture:", host["left_to_capture"][:200])
print(f"warm (GPU hidden): {len(entries)} fused_moe_kernel entries, chunks {len(seconds)} (longest {max(seconds or [0])} s),"
      f" failed chunks {bad}; dirs {len(os.listdir(sys.argv[2])) if os.path.isdir(sys.argv[2]) else 0}")
PY
for f in "$w"/warm-*.err; do tail -3 "$f"; done >> "$OUT/logs.txt" 2>/dev/null
stamp forward
MS=${MS:-$(sed -n 2p "$w/shape.txt")}
ls "$w/root/triton" > "$w/before.txt"
TRITON_CACHE_DIR=$w/root/triton python3 "$root/tests/gpu/triton_moe_release_forward.py" $(sed -n 1p "$w/shape.txt") \
  --ms "$MS" > "$OUT/forward.json" 2> "$w/fwd.err"
rc=$?; ls "$w/root/triton" > "$w/after.txt"
kinds() { while read -r d; do ls "$w/root/triton/$d" | sed -n 's/^__grp__\(.*\)\.json$/\1/p; s/^\(cuda_utils\|__triton_launcher\)\..*/\1/p'; done | sort | uniq -c | tr '\n' ';'; }
echo "forward over MS=$MS rc=$rc new entries (expect none of fused_moe_kernel): $(comm -13 "$w/before.txt" "$w/after.txt" | kinds)" \
  | tee -a "$OUT/summary.txt"
cat "$OUT/forward.json" >> "$OUT/summary.txt"; tail -c 3000 "$w/fwd.err" > "$OUT/forward_stderr.txt"
stamp done
