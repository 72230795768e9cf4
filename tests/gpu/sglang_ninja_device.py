"""Device check for SGLang's own ninja JIT loader (sglang 0.5.23, sglang/kernels/jit) under the GPU machine's torch.

Run on the H200 (one call, see tests/gpu/sglang_ninja_device.sh):
  A. GPU-free warm there: dgprecompile's sglang-ninja worker, in a process that sees no GPU
     (CUDA_VISIBLE_DEVICES=""), builds three planned modules with the release's own load_jit under its arch
     override into a fresh dgprecompile cache.
  B. The runtime there, GPU visible, with what `launch` sets (SGLANG_JIT_CACHE_DIR=<cache>/sglang-jit and the
     release's own SGLANG_CRASH_ON_JIT_COMPILE=1) and no arch override: SGLang's own entry points
     (clamp_position_cuda, per_token_group_quant with column-major scales, silu_and_mul) load those modules and
     run on the GPU; results are compared with torch; the cache tree must be unchanged (0 builds).
  C. A cache warmed on the CPU machine and carried: the same entry point under the same switch; whether it is a
     hit, and the fingerprint fields that differ between the two machines.
Everything is written to $OUT/record.json.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORKER = """
import json, sys, time
from dgprecompile.compile.backends import WorkItem
from dgprecompile.compile.backends.workers import load_worker_backend, preload
from dgprecompile.keys.schemes import naming_for
from dgprecompile.runtimes import family_for
from dgprecompile.runtimes.jit_loader import ServerPath
version = sys.argv[2]
family = family_for(version)
naming = naming_for(family, version)
mods = {m.id: m for m in family.plan_modules(version, ServerPath("qwen3_moe", quant="fp8", tp=8, ep=8))[0]}
want = json.loads(sys.argv[3])
job = {"cache_dir": sys.argv[1], "arch": "sm_90a", **family.worker_job(naming, [mods[w] for w in want])}
preload(family.backend, job)
worker = load_worker_backend(family.backend, job)
out = {"fingerprint": naming.fingerprint(), "built": {}}
for w in want:
    m = mods[w]
    item = WorkItem(m.id, family.backend, family.build_params(naming, m), "SGLANG_JIT", 0, 0, 0, 0)
    t = time.perf_counter()
    status, entries, seconds = worker.compile(item)
    out["built"][w] = {"status": status, "entries": entries, "seconds": round(seconds, 2),
                       "scope": naming.entry_name(m)}
worker.close()
print(json.dumps(out))
"""

RUNTIME = """
import json, os, time, torch
out = {"torch": torch.__version__}
try:
    out.update(gpu=torch.cuda.get_device_name(0), cap=list(torch.cuda.get_device_capability(0)))
except Exception as exc:
    out["gpu"] = f"none: {type(exc).__name__}: {exc}"
from sglang.kernels.ops.attention.clamp_position import clamp_position_cuda
from sglang.kernels.ops.quantization.per_token_group_quant import per_token_group_quant
from sglang.kernels.ops.activation.activation import silu_and_mul
def attempt(name, fn):
    t = time.perf_counter()
    try:
        ok = fn()
        out[name] = {"ok": bool(ok), "seconds": round(time.perf_counter() - t, 3)}
    except Exception as exc:
        out[name] = {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:600]}"}
def clamp():
    s = torch.tensor([0, 1, 5, 100], dtype=torch.int64, device="cuda")
    return torch.equal(clamp_position_cuda(s).cpu(), torch.tensor([0, 0, 4, 99]))
def quant():
    x = torch.randn(64, 1024, dtype=torch.bfloat16, device="cuda")
    q, s = per_token_group_quant(x, group_size=128, column_major_scales=True)
    deq = q.float().view(64, 8, 128) * s[:64, :8].float().unsqueeze(-1)
    err = ((deq.view(64, 1024) - x.float()).abs().max() / x.float().abs().max()).item()
    out["quant_rel_err"] = err
    return err < 0.07 and s.stride(0) == 1
def act():
    x = torch.randn(32, 512, dtype=torch.bfloat16, device="cuda")
    ref = torch.nn.functional.silu(x[:, :256].float()) * x[:, 256:].float()
    y = silu_and_mul(x)
    err = (y.float() - ref).abs().max().item()
    out["act_max_err"] = err
    return err < 0.1
if os.environ.get("ONLY") == "clamp":
    attempt("clamp_position", clamp)
else:
    attempt("clamp_position", clamp)
    attempt("per_token_group_quant", quant)
    attempt("silu_and_mul", act)
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
    # cwd: not the project root the device copies (its own dgprecompile/ would shadow the carried one: sys.path[0])
    r = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=240,
                       cwd=tempfile.gettempdir())
    last = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
    try:
        return {"rc": r.returncode, **json.loads(last)}
    except ValueError:
        return {"rc": r.returncode, "stdout": r.stdout[-2000:], "stderr": r.stderr[-4000:]}


def main() -> None:
    out_dir, carried, version = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    cache = Path(tempfile.mkdtemp(prefix="dgp-ninja-")) / "cache"  # not under $OUT: few files come back
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_", "DGPRECOMPILE_"))}
    base.setdefault("CUDA_HOME", "/usr/local/cuda")
    record: dict = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "sglang": version,
                    "python": sys.version.split()[0]}
    for cmd in (["nvcc", "--version"], ["c++", "--version"], ["nvidia-smi", "--query-gpu=name,driver_version",
                                                               "--format=csv,noheader"]):
        try:
            record[cmd[0]] = subprocess.check_output(cmd, text=True).strip().splitlines()[-1 if cmd[0] == "nvcc" else 0]
        except (OSError, subprocess.SubprocessError) as exc:
            record[cmd[0]] = f"unavailable: {exc}"
    want = ["sglang_jit:clamp_position<int64_t>",
            "sglang_jit:per_token_group_quant<bf16_t,fp8_e4m3_t,128,false,false,true,false,true,flat>",
            "sglang_jit:activation<bf16_t,true>"]
    t = time.perf_counter()
    record["A_gpu_free_warm"] = run(WORKER, {**base, "CUDA_VISIBLE_DEVICES": ""}, str(cache), version, json.dumps(want))
    record["A_gpu_free_warm"]["wall_seconds"] = round(time.perf_counter() - t, 1)
    area = cache / "sglang-jit"
    launch = {"SGLANG_JIT_CACHE_DIR": str(area), "SGLANG_CRASH_ON_JIT_COMPILE": "1"}
    before = tree(area) if area.is_dir() else None
    record["B_runtime_strict"] = run(RUNTIME, {**base, **launch})
    record["B_cache_unchanged"] = before is not None and tree(area) == before
    record["B_cache_files"] = sorted(str(p.relative_to(area)) for p in area.rglob("*") if p.is_file()) if area.is_dir() else []
    if carried.is_dir():
        cbefore = tree(carried / "sglang-jit")
        record["C_carried_cpu_cache"] = run(RUNTIME, {**base, "SGLANG_JIT_CACHE_DIR": str(carried / "sglang-jit"),
                                                      "SGLANG_CRASH_ON_JIT_COMPILE": "1", "ONLY": "clamp"})
        record["C_cache_unchanged"] = tree(carried / "sglang-jit") == cbefore
        here = record["A_gpu_free_warm"].get("fingerprint") or {}
        there = json.loads((carried / "fingerprint.json").read_text())
        record["C_fingerprint_differences"] = {k: [there.get(k), here.get(k)] for k in sorted(set(here) | set(there))
                                               if here.get(k) != there.get(k)}
    (out_dir / "record.json").write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
