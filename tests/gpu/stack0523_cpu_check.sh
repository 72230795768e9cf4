#!/usr/bin/env bash
# The CPU machine's rehearsal of README-stack0523.md's calls 1-17 (issue 44 item 1), as far as no GPU goes: the real
# pieces (bash tests/gpu/carry_stack.sh split, run first) kept one per simulated call in a device-like folder, then
# call 17's install and imports, then `dgprecompile plan --sglang 0.5.23` of the 480B command under the stack, then
# the model-path imports as on a GPU machine (below).
# The device is imitated by a Python 3.12 venv holding the packages of the device image (KINDS.md's list) the path
# uses, and by torch 2.14.1's own nvidia-*-cu13 pins from this machine's local index linked as site/nvidia (the device
# links its torch 2.11's: cuDNN 9.19, NCCL 2.28.9, which README-torch214.md checked torch 2.14.1 against).
# Everything goes under WORK; nothing into .venv or the system. The venv's packages come from the index (about 60 MB).
# usage (repo root): PY=/root/.pyenv/versions/3.12.1/bin/python3.12 NVWHEELS="/opt/pypi-more/files /opt/pypi/files" \
#        [WORK=/tmp/stack0523-cpu] bash tests/gpu/stack0523_cpu_check.sh
# Measured 2026-12-05 (2 shared cores): 16 keeps 1-2 s, install 22-41 s (2.7 GB installed), imports 19 s, plan 1 s.
set -euo pipefail
root=$PWD
py=${PY:?PY= a python3.12}; nvw=${NVWHEELS:?NVWHEELS= folders holding torch 2.14.1 nvidia-*-cu13 wheels}
work=${WORK:-/tmp/stack0523-cpu}
mapfile -t pieces < <(ls -d .carry/stack/p[0-9]* 2>/dev/null)
[ "${#pieces[@]}" -gt 1 ] || { echo "error: no pieces in .carry/stack; run bash tests/gpu/carry_stack.sh split" >&2; exit 2; }
mkdir -p "$work"
if [ ! -x "$work/venv/bin/python" ]; then  # the device image's packages the path uses (tests/gpu/stack_0523.yaml: device)
  "$py" -m venv "$work/venv"
  "$work/venv/bin/python" -m pip install -q pyyaml huggingface-hub==1.33.0 tokenizers==0.23.2 safetensors==0.8.0 numpy \
    pillow psutil tqdm regex packaging requests anyio httpx typer click rich filelock fsspec jinja2 sympy networkx \
    typing_extensions setuptools aiohttp pygments einops tabulate nvidia-ml-py "cuda-bindings>=13.0.3,<14" xxhash \
    prometheus-client ninja
fi
# what the device gets from .whl/extra for `unpack --trusted-key` and `pack --signing-key` (carry_build.sh STACK=)
"$work/venv/bin/python" -c "import cryptography" 2>/dev/null || "$work/venv/bin/python" -m pip install -q cryptography
if [ ! -d "$work/nv/nvidia" ]; then
  nv=(); for d in $nvw; do nv+=("$d"/nvidia_*.whl); done
  "$work/venv/bin/python" -m pip install -q --no-deps --no-index --no-compile --target "$work/nv" "${nv[@]}"
fi
dev=$work/device; rm -rf "$dev"; mkdir -p "$dev"
export PYTHON=$work/venv/bin/python
t0=$(date +%s)
for p in "${pieces[@]::${#pieces[@]}-1}"; do  # calls 1..N-1: only this call's piece beside what was kept
  rm -rf "$dev/.carry"; mkdir -p "$dev/.carry/stack"; cp -al "$p" "$dev/.carry/stack/"
  (cd "$dev" && bash "$root/tests/gpu/carry_stack.sh" keep | tail -1)
done
rm -rf "$dev/.carry"; mkdir -p "$dev/.carry/stack"; cp -al "${pieces[-1]}" "$dev/.carry/stack/"
t1=$(date +%s); echo "keeps: $((t1 - t0)) s"
(cd "$dev" && bash "$root/tests/gpu/carry_stack.sh" install "$work/stack")
t2=$(date +%s); echo "install: $((t2 - t1)) s"
ln -sfn "$work/nv/nvidia" "$work/stack/site/nvidia"  # the device's link is made by install (its torch's folder)
bash tests/gpu/carry_stack.sh imports "$work/stack"
t3=$(date +%s); echo "imports: $((t3 - t2)) s"
# shellcheck disable=SC1091
. "$work/stack/stack.env"
mkdir -p "$work/model"; cp dgprecompile/data/models/Qwen3-Coder-480B-A35B-Instruct-FP8.json "$work/model/config.json"
PYTHONPATH="$STACK_SITE:$root/tests/standins:$root" DGP_STANDINS=sgl_kernel DGP_TRANSFORMERS_EXIST_OK=1 \
  CUDA_VISIBLE_DEVICES= "$PYTHON" -m dgprecompile plan --sglang 0.5.23 \
  --sglang-cmd "python -m sglang.launch_server --model-path $work/model --tp 8 --ep 8" -o "$work/plan.yaml" 2>&1 | tail -4
echo "plan: $(( $(date +%s) - t3 )) s"
# the same modules with SGLang's CUDA-only imports taken: torch.cuda's queries answer as one H200 (a STAND-IN for the
# GPU, here only): what a module imports at load on the device (sgl_kernel's stand-in, deep_gemm, flashinfer, cuda)
PYTHONPATH="$STACK_SITE:$root/tests/standins:$root" DGP_STANDINS=sgl_kernel DGP_TRANSFORMERS_EXIST_OK=1 \
  "$PYTHON" - $("$PYTHON" tests/gpu/carry_stack.py modules) <<'PY'
import importlib, sys, types
import torch
props = types.SimpleNamespace(major=9, minor=0, multi_processor_count=132, total_memory=140 << 30, name="NVIDIA H200",
                              L2_cache_size=50 << 20, gcnArchName="")
torch.cuda.is_available, torch.cuda.device_count, torch.cuda.current_device = (lambda: True), (lambda: 1), (lambda: 0)
torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
torch.cuda.get_device_name = lambda *a, **k: "NVIDIA H200"
torch.cuda.get_device_properties = lambda *a, **k: props
for name in sys.argv[1:]:
    importlib.import_module(name)
from sglang.srt.utils import is_cuda
loaded = sorted({m.split(".")[0] for m in sys.modules} & {"sgl_kernel", "deep_gemm", "flashinfer", "cuda", "triton"})
print(f"as an H200 (is_cuda {is_cuda()}): {len(sys.argv) - 1} modules imported; loaded {' '.join(loaded)}")
PY
