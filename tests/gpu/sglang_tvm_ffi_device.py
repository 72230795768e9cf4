"""Device check for sglang 0.5.10-0.5.13's tvm-ffi JIT modules (tvm-ffi's own directory names), one call on the H200.

Run on the GPU machine with the release importable (tests/gpu/sglang_tvm_ffi_device.sh):
  A. GPU-free warm there: dgprecompile's sglang-jit worker, in a process that sees no GPU (CUDA_VISIBLE_DEVICES=""),
     builds every module the Qwen3-MoE FP8 tp8/ep8 and DeepSeek-V3 FP8 tp8 servers plan (data/sglang_jit.yaml) with
     the release's own builders under its own arch override, into a fresh cache (TVM_FFI_CACHE_DIR=<cache>/tvm-ffi).
  B. The runtime there, GPU visible, no arch override (the release detects the H200 itself), TVM_FFI_CACHE_DIR as
     `launch` sets it and strict mode's tvm-ffi hook installed as `launch` installs it: every module's own builder
     is called (each must load, none be refused), SGLang's own clamp_position_cuda and silu_and_mul run on the GPU
     and are compared with torch, and the cache tree must be unchanged (0 builds).
  C. One module deleted: its builder must be refused by name before tvm-ffi writes a file.
Everything is written to $OUT/record.json. Expected time: A about 2 minutes (10 modules, 10-20 s each, 2 jobs of
work done one at a time here), B and C under a minute.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SERVERS = """
from dgprecompile.runtimes import family_for
from dgprecompile.runtimes.jit_loader import ServerPath
def planned(version):
    family = family_for(version)
    qwen = {"head_dim": 128, "rope_dim": 128, "rope_head_size": 128, "rope_neox": True, "qk_norm": True, "mla": False,
            "kv_row_bytes": 256, "kv_store_fused": True, "torch_dtype": "torch.bfloat16", "cpp_dtype": "bf16_t",
            "router_experts": 160, "hidden_size": 6144, "hidden_1024_aligned": True}
    ds = {"rope_dim": 64, "rope_head_size": 64, "rope_neox": False, "qk_norm": False, "mla": True, "head_dim": 192,
          "kv_row_bytes": 0, "kv_store_fused": True, "torch_dtype": "torch.bfloat16", "cpp_dtype": "bf16_t",
          "mla_nope_bytes": 1024, "mla_rope_bytes": 128, "set_mla_marker": "set_mla_kv_buffer_1024_128",
          "router_experts": 256, "hidden_size": 7168, "hidden_1024_aligned": True}
    extra = (("enable_fused_qk_norm_rope", False), ("enable_deterministic_inference", False),
             ("cuda_graph_tc_compiler", "eager"), ("piecewise_cuda_graph_compiler", "eager"),
             ("disable_overlap_schedule", False))
    mods = {}
    for mt, tp, ep, facts in (("qwen3_moe", 8, 8, qwen), ("deepseek_v3", 8, 1, ds)):
        path = ServerPath(mt, quant="fp8", tp=tp, ep=ep, gemm_paths=frozenset({"dense"}),
                          model=tuple(sorted(facts.items())), extra=extra)
        for m in family.plan_modules(version, path)[0]:
            mods.setdefault(m.id, m)
    return family, mods
"""

WORKER = SERVERS + """
import json, sys
from dgprecompile.compile.backends import WorkItem
from dgprecompile.compile.backends.workers import load_worker_backend, preload
from dgprecompile.keys.schemes import naming_for
version = sys.argv[2]
family, mods = planned(version)
naming = naming_for(family, version)
job = {"cache_dir": sys.argv[1], "arch": "sm_90a", **family.worker_job(naming, list(mods.values()))}
preload(family.backend, job)
worker = load_worker_backend(family.backend, job)
out = {"fingerprint": naming.fingerprint(), "built": {}}
for mid, m in mods.items():
    item = WorkItem(m.id, family.backend, family.build_params(naming, m), "SGLANG_JIT", 0, 0, 0, 0)
    try:
        status, entries, seconds = worker.compile(item)
        out["built"][mid] = {"status": status, "entries": entries, "seconds": round(seconds, 2)}
    except Exception as exc:
        out["built"][mid] = {"status": "failed", "error": f"{type(exc).__name__}: {str(exc)[-800:]}"}
worker.close()
print(json.dumps(out))
"""

RUNTIME = SERVERS + """
import importlib, json, os, sys, time, torch
import tvm_ffi.cpp.extension as ext
from dgprecompile.launch.hook import HOOK_DIR
sys.path.insert(0, HOOK_DIR)  # as launch puts it first on the job's PYTHONPATH
import _dgprecompile_hook as hook
hook.patch_tvm_ffi(ext)  # what the startup hook does when tvm_ffi.cpp.extension is imported under strict launch
from dgprecompile.compile.backends.sglang_jit import resolve_args
version = sys.argv[1]
only = set(json.loads(sys.argv[2])) if len(sys.argv) > 2 else None
out = {"torch": torch.__version__}
try:
    out.update(gpu=torch.cuda.get_device_name(0), cap=list(torch.cuda.get_device_capability(0)))
except Exception as exc:
    out["gpu"] = f"none: {type(exc).__name__}: {exc}"
family, mods = planned(version)
out["modules"] = {}
for mid, m in mods.items():
    if only is not None and mid not in only:
        continue
    kwargs = {k: resolve_args(v) if isinstance(v, list) else v for k, v in dict(m.kwargs).items()}
    try:
        getattr(importlib.import_module(m.python), m.builder)(*resolve_args(list(m.args)), **kwargs)
        out["modules"][mid] = "loaded"
    except Exception as exc:
        out["modules"][mid] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:600]}"
def entry_points():
    from sglang.jit_kernel.clamp_position import clamp_position_cuda
    s = torch.tensor([0, 1, 5, 100], dtype=torch.int64, device="cuda")
    out["clamp_position_ok"] = torch.equal(clamp_position_cuda(s).cpu(), torch.tensor([0, 0, 4, 99]))
    try:
        from sglang.jit_kernel.activation import silu_and_mul
        x = torch.randn(32, 512, dtype=torch.bfloat16, device="cuda")
        y = torch.empty(32, 256, dtype=torch.bfloat16, device="cuda")
        silu_and_mul(x, y)
        ref = torch.nn.functional.silu(x[:, :256].float()) * x[:, 256:].float()
        out["silu_and_mul_max_err"] = (y.float() - ref).abs().max().item()
    except ImportError:
        out["silu_and_mul_max_err"] = "no JIT activation in this release"
if only is None:
    try:
        entry_points()
    except Exception as exc:
        out["entry_points_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:600]}"
print(json.dumps(out))
"""


def tree(root: Path) -> str:
    h = hashlib.sha256()
    for dirpath, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        for name in sorted(files):
            p = os.path.join(dirpath, name)
            h.update(os.path.relpath(p, root).encode() + b"\0" + Path(p).read_bytes())
    return h.hexdigest()


def run(code: str, env: dict[str, str], *args: str) -> dict:
    r = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=540,
                       cwd=tempfile.gettempdir())
    last = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
    try:
        return {"rc": r.returncode, **json.loads(last)}
    except ValueError:
        return {"rc": r.returncode, "stdout": r.stdout[-2000:], "stderr": r.stderr[-4000:]}


def main() -> None:
    out_dir, version = Path(sys.argv[1]), sys.argv[2]
    cache = Path(tempfile.mkdtemp(prefix="dgp-tvm-")) / "cache"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_", "DGPRECOMPILE_", "TVM_FFI_"))}
    base.setdefault("CUDA_HOME", "/usr/local/cuda")
    record: dict = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "sglang": version,
                    "python": sys.version.split()[0]}
    t = time.perf_counter()
    record["A_gpu_free_warm"] = run(WORKER, {**base, "CUDA_VISIBLE_DEVICES": ""}, str(cache), version)
    record["A_gpu_free_warm"]["wall_seconds"] = round(time.perf_counter() - t, 1)
    area = cache / "tvm-ffi"
    env = {**base, "TVM_FFI_CACHE_DIR": str(area), "DGPRECOMPILE_STRICT": "1"}
    before = tree(area) if area.is_dir() else None
    record["B_runtime_strict"] = run(RUNTIME, env, version)
    record["B_cache_unchanged"] = before is not None and tree(area) == before
    built = record["A_gpu_free_warm"].get("built") or {}
    victim = next((mid for mid, b in built.items() if "clamp_position" in mid and b.get("entries")), None)
    if victim:
        shutil.rmtree(area / built[victim]["entries"][0])
        left = sorted(os.listdir(area))
        record["C_deleted"] = victim
        record["C_runtime_strict"] = run(RUNTIME, env, version, json.dumps([victim]))
        record["C_nothing_written"] = sorted(os.listdir(area)) == left
    (out_dir / "record.json").write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
