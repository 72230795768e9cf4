"""GPU script (device only, not CI): ground truth for the kernel choice and the cache entries of several
sgl-deep-gemm releases, through the calls SGLang makes on Hopper, and a check that a cache warmed by
`dgprecompile warm` leaves nothing for the runtime to compile.

Driven by tests/gpu/sweep_generations.sh (one `version` process per release, all in parallel). For one release:

  cold  one process per key, each with its own empty DG_JIT_CACHE_DIR and DG_PRINT_CONFIGS=1: call the GEMM for
        every sampled m, record the configuration the library printed for each m, and which cache entries
        appeared at which m (and copy each entry's kernel.cu / meta.json, so entry names can be recomputed on a
        CPU machine). Keys: Qwen3-Coder-480B-A35B-FP8 at tp 8 / ep 8: dense n=1792,k=6144 and n=6144,k=1536 for
        m 1..65536 (every m up to 16384, then 64q+1, 64q+32, 64q+64); masked 20 groups n=5120,k=6144 and
        n=6144,k=2560 for expected_m 1..8200 (every one); contiguous (compact MoE layout of sglang 0.5.17+, not
        for 0.1.3) for the same two shapes, m = 128q up to 133632 (every q: SGLang's compact m is a multiple of
        128), then every 32nd q up to 263168.
  probe calling conventions, tried one by one on a fresh cache (SGLang's first): records which one each
        release accepts and the error text of the others.
  warm  `dgprecompile plan`/`warm` for the sglang that pins this release (--moe-runner-backend deep_gemm,
        --max-tokens 65536; --backend per release: the GPU one, where the library builds its own entries, or the
        GPU-free nvcc one, where dgprecompile computes the names and builds them), then one process sweeps every
        plan key over the same samples (inside each key's m range, plus both sides of every planned bucket
        edge) against that cache: new entries must be 0.

SGLang's calling convention on SM90 (sglang 0.5.14-0.5.20 read from the wheels, notes/R12-findings.md):
dense fp8_gemm_nt((a, sfa), (b, sfb), d) with sfa fp32 empty((k/128, align4(m))).t()[:m] (MN-major, TMA-aligned,
from sglang_per_token_group_quant_fp8(column_major_scales=True, scale_tma_aligned=True)); masked: row-major fp32
scales through deep_gemm.utils.layout.get_mn_major_tma_aligned_tensor, then fp8_m_grouped_gemm_nt_masked(...,
masked_m, expected_m); contiguous: scales in the dense layout (sglang's tma_align_input_scale), then
m_grouped_fp8_gemm_nt_contiguous(..., m_indices). Weight scales fp32 (ceil(n/128), k/128) per group. Dummy data:
torch.empty; masked_m = 0 and m_indices = -1 (the kernel choice depends on shapes only; -1 rows are skipped, so
large contiguous m launch fast).

Every stage writes what it has under OUT before it moves on, catches its own failures and stops at a deadline
(seconds since the epoch) rather than being killed, so one release failing never hides the others.

usage (internal; see the .sh): sweep_generations.py version --dg-version V --sglang S --site DIR --out DIR
                                     --cold-deadline T --deadline T [--jobs N] [--par N]
                                     [--backend auto|cxx|nvcc] [--repo DIR]   (DIR: the dgprecompile to warm with)
                               sweep_generations.py keys SPEC.json       (one process: cold or warm sweep)
                               sweep_generations.py summary OUT
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DENSE = [(1792, 6144), (6144, 1536)]
GROUPED = [(5120, 6144, 20), (6144, 2560, 20)]


def dense_ms(m_max: int = 65536) -> list[int]:
    ms = list(range(1, min(m_max, 16384) + 1))
    for q in range(256, (m_max + 63) // 64):
        ms.extend(m for m in (64 * q + 1, 64 * q + 32, 64 * q + 64) if m <= m_max)
    return ms


def contig_ms(m_max: int = 263168) -> list[int]:
    qs = list(range(1, min(m_max, 133632) // 128 + 1))
    qs += list(range(qs[-1] + 32, m_max // 128 + 1, 32))
    return [128 * q for q in qs]


# Cold keys are split into m ranges, each in its own process and cache, so the serial JIT compiles of one key run
# side by side (the split points only balance the work; a kernel used in two ranges is compiled in both).
SPLITS = {(1792, 6144): (512, 1408), (6144, 1536): (384,), (5120, 6144): (640,), (6144, 2560): (640,)}
# sglang-kernel's masked keys: every expected_m to 8200 in m ranges of about equal compile counts (the kernels of
# heuristics/sm90_waves.py change at 64, 128, 256, ... 3072), so they finish inside the cold window
SPLITS_MASKED_SK = {(5120, 6144): (256, 1024), (6144, 2560): (511,)}


def _split(spec: dict, bundled: bool = False) -> list[dict]:
    if spec["kind"].endswith("MASKED"):
        inner = SPLITS_MASKED_SK.get((spec["n"], spec["k"]), ()) if bundled else ()
    else:
        inner = SPLITS.get((spec["n"], spec["k"]), ())
    edges = (0, *inner, 1 << 30)
    out = []
    for lo, hi in zip(edges, edges[1:], strict=False):
        ms = [m for m in spec["ms"] if lo < m <= hi]
        if ms:
            out.append(dict(spec, ms=ms))
    return out


# The largest-m run (issue 10): SWEEP_LARGE_M=1 sweeps only what runs 1 and 2 did not reach, up to the largest m
# a supported server command produces for the 480B at tp 8 / ep 8 (`plan --sglang-cmd` with --chunked-prefill-size
# -1 and --context-length 262144: dense 262,138, masked expected_m 104,856), a little beyond each, and plans the
# warm from that server command (SWEEP_SGLANG_CMD) instead of --max-tokens 65536.
LARGE_M = bool(os.environ.get("SWEEP_LARGE_M"))
LARGE_DENSE = (65536, 262144 + 64)  # (already swept below, top)
LARGE_MASKED = (8200, 104856 + 64)


def _chunks(spec: dict, parts: int) -> list[dict]:
    ms, size = spec["ms"], -(-len(spec["ms"]) // parts)
    return [dict(spec, ms=ms[i:i + size]) for i in range(0, len(ms), size)]


def cold_specs(dg_version: str) -> list[dict]:
    bundled = dg_version.startswith("sk-")  # sglang-kernel's bundled deep_gemm: a smaller dense sample
    ms = [m for m in dense_ms() if m <= 4096 or m % 64 == 1] if bundled else dense_ms()
    masked = list(range(1, 8201))
    if LARGE_M:
        ms = [m for m in dense_ms(LARGE_DENSE[1]) if m > LARGE_DENSE[0]]
        masked = list(range(LARGE_MASKED[0] + 1, LARGE_MASKED[1] + 1))
    specs = [{"kind": "GEMM_NT_F8F8BF16", "n": n, "k": k, "g": 1, "ms": ms} for n, k in DENSE]
    masked_specs = [{"kind": "GROUPED_GEMM_NT_F8F8BF16_MASKED", "n": n, "k": k, "g": g, "ms": masked}
                    for n, k, g in GROUPED]
    # sglang-kernel's masked keys go first: started last (runs 1 and 2), they were cut off at the cold deadline
    specs = masked_specs + specs if bundled else specs + masked_specs
    if LARGE_M:  # split the long dense ranges so their GEMM time runs side by side
        return [part for spec in specs for part in _chunks(spec, 3 if spec["kind"] == "GEMM_NT_F8F8BF16" else 1)]
    if dg_version != "0.1.3" and not bundled:  # sglang <= 0.5.16 has no compact layout
        specs += [{"kind": "GROUPED_GEMM_NT_F8F8BF16_CONTIG", "n": n, "k": k, "g": g, "ms": contig_ms()}
                  for n, k, g in GROUPED]
    return [part for spec in specs for part in _split(spec, bundled)]


# ---------------------------------------------------------------- one process: sweep keys on one cache
PAIR = re.compile(r"\b([a-z_]+)=([^,()\s]+)")
FIELDS = ("block_m", "block_n", "cluster_m", "cluster_n", "num_stages", "swizzle_cd_mode", "smem_size", "num_sms")


def parse_configs(log_path: str) -> dict[int, dict[int, list]]:
    """{key index: {m: [config tuple values]}} from a DG_PRINT_CONFIGS log with our markers."""
    out: dict[int, dict[int, list]] = {}
    key, m = None, None
    with open(log_path, errors="replace") as f:
        for line in f:
            if line.startswith("#### KEY "):
                key, m = int(line.split()[2]), None
                out.setdefault(key, {})
            elif line.startswith("## m="):
                m = int(line[5:])
            elif "-> block M:" in line and key is not None and m is not None:
                # sgl-kernel / sglang-kernel C++ JIT (Aug-Dec 2025 sources): "GEMM type: 0, ..., SM limit: 132 ->
                # block M: 64, block N: 16, block K: 128, stages: 8, last stages: 4, SMs: 120, multicast: 1,
                # multicast on A: 0, shared memory: N bytes, swizzle A: 128, swizzle B: 128, swizzle CD: 32, ..."
                tail = line.split("->", 1)[1]
                nums = dict((label.strip(), int(v)) for label, v in re.findall(r"([A-Za-z ]+): (-?\d+)", tail)
                            if label.strip() not in ("SMs",))
                sms = [int(v) for v in re.findall(r"SMs: (\d+)", tail)]
                try:
                    out[key].setdefault(m, [nums["block M"], nums["block N"], nums["multicast"],
                                            nums["multicast on A"], nums["stages"], nums["swizzle CD"],
                                            nums["shared memory"], *sms])
                except KeyError:
                    out[key].setdefault(m, ["unparsed"])
            elif "GemmDesc(" in line and key is not None and m is not None:
                seen: dict[str, str] = {}
                for name, value in PAIR.findall(line):
                    seen.setdefault(name, value)
                try:
                    out[key].setdefault(m, [int(seen[f]) for f in FIELDS])
                except (KeyError, ValueError):
                    out[key].setdefault(m, ["unparsed"])
    return out


def runs_of(per_m: dict[int, list]) -> list[list]:
    runs: list[list] = []
    for m in sorted(per_m):
        cfg = per_m[m]
        if runs and runs[-1][2:] == cfg:
            runs[-1][1] = m
        else:
            runs.append([m, m, *cfg])
    return runs


def sweep_keys(spec_path: str) -> int:
    job = json.load(open(spec_path))
    cache, out_path, log_path, deadline = job["cache"], job["out"], job["log"], job["deadline"]
    # cache_roots: DeepJIT's several roots ("writable:shared..."); entries are counted in the first, `cache`
    os.environ["DG_JIT_CACHE_DIR"] = job.get("cache_roots", cache)
    if job.get("print_configs", True):
        os.environ["DG_PRINT_CONFIGS"] = "1"
    else:
        os.environ.pop("DG_PRINT_CONFIGS", None)
    os.makedirs(cache, exist_ok=True)
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    saved = os.dup(1)
    os.dup2(log_fd, 1)  # the library prints its choices on C stdout
    libc = ctypes.CDLL(None)
    result: dict = {"job": {k: v for k, v in job.items() if k != "specs"}, "keys": []}

    def mark(text: str) -> None:
        libc.fflush(None)
        os.write(1, text.encode())

    def save() -> None:
        with open(out_path + ".tmp", "w") as f:
            json.dump(result, f)
        os.replace(out_path + ".tmp", out_path)

    try:
        import deep_gemm
        import torch
        from deep_gemm.utils.layout import get_mn_major_tma_aligned_tensor
    except Exception as exc:  # noqa: BLE001  (record anything: this is a probe)
        result["import_error"] = repr(exc)[:2000]
        os.dup2(saved, 1)
        save()
        return 1
    dry = bool(os.environ.get("SWEEP_DRY_RUN"))  # CPU rehearsal with a stand-in deep_gemm (tests/gpu only)
    result["info"] = {"deep_gemm_file": deep_gemm.__file__, "num_sms": deep_gemm.get_num_sms(),
                      "torch": torch.__version__, "dry_run": dry,
                      "gpu": "none (dry run)" if dry else torch.cuda.get_device_name(),
                      "sms_device": 0 if dry else torch.cuda.get_device_properties(0).multi_processor_count}
    entries_dir = os.path.join(cache, "cache")
    seen = set(os.listdir(entries_dir)) if os.path.isdir(entries_dir) else set()
    result["entries_before"] = len(seen)
    dev, f8, f32, bf16 = "cpu" if dry else "cuda", torch.float8_e4m3fn, torch.float32, torch.bfloat16
    sync = (lambda: None) if dry else torch.cuda.synchronize

    def fresh() -> list[str]:
        if not os.path.isdir(entries_dir):
            return []
        now = os.listdir(entries_dir)
        if len(now) == len(seen):
            return []
        new = sorted(set(now) - seen)
        seen.update(new)
        return new

    def dense_sfa(m: int, sfk: int):
        return torch.empty((sfk, (m + 3) // 4 * 4), device=dev, dtype=f32).t()[:m]

    for index, spec in enumerate(job["specs"]):
        kind, n, k, g, ms = spec["kind"], spec["n"], spec["k"], spec["g"], spec["ms"]
        sfk, sfn, m_top = (k + 127) // 128, (n + 127) // 128, max(ms)
        rec = {"kind": kind, "n": n, "k": k, "num_groups": g, "m_first": ms[0], "m_last": ms[-1],
               "calls": 0, "new_entries": [], "errors": [], "truncated_at": None}
        result["keys"].append(rec)
        mark(f"#### KEY {index} {kind} {n} {k} {g}\n")
        t0 = time.time()
        try:
            if kind == "GEMM_NT_F8F8BF16":
                a, b = torch.empty((m_top, k), device=dev, dtype=f8), torch.empty((n, k), device=dev, dtype=f8)
                sfb = torch.ones((sfn, sfk), device=dev, dtype=f32)
                d = torch.empty((m_top, n), device=dev, dtype=bf16)
            elif kind == "GROUPED_GEMM_NT_F8F8BF16_MASKED":
                rows = 256
                a, b = torch.empty((g, rows, k), device=dev, dtype=f8), torch.empty((g, n, k), device=dev, dtype=f8)
                sfb = torch.ones((g, sfn, sfk), device=dev, dtype=f32)
                d = torch.empty((g, rows, n), device=dev, dtype=bf16)
                masked_m = torch.zeros((g,), device=dev, dtype=torch.int32)
                mark("## m=0\n")
                sfa = get_mn_major_tma_aligned_tensor(torch.ones((g, rows, sfk), device=dev, dtype=f32))
                new = fresh()
                if new:
                    rec["new_entries"].append([0, new])
            else:
                a, b = torch.empty((m_top, k), device=dev, dtype=f8), torch.empty((g, n, k), device=dev, dtype=f8)
                sfb = torch.ones((g, sfn, sfk), device=dev, dtype=f32)
                d = torch.empty((m_top, n), device=dev, dtype=bf16)
                m_indices = torch.full((m_top,), -1, device=dev, dtype=torch.int32)
        except Exception as exc:  # noqa: BLE001
            rec["errors"].append([0, repr(exc)[:2000]])
            save()
            continue
        for m in ms:
            if time.time() > deadline:
                rec["truncated_at"] = m
                break
            mark(f"## m={m}\n")
            try:
                if kind == "GEMM_NT_F8F8BF16":
                    deep_gemm.fp8_gemm_nt((a[:m], dense_sfa(m, sfk)), (b, sfb), d[:m])
                elif kind == "GROUPED_GEMM_NT_F8F8BF16_MASKED":
                    deep_gemm.fp8_m_grouped_gemm_nt_masked((a, sfa), (b, sfb), d, masked_m, m)
                else:
                    deep_gemm.m_grouped_fp8_gemm_nt_contiguous((a[:m], dense_sfa(m, sfk)), (b, sfb), d[:m],
                                                               m_indices[:m])
            except Exception as exc:  # noqa: BLE001
                rec["errors"].append([m, repr(exc)[:2000]])
                if len(rec["errors"]) >= 3:
                    break
                continue
            rec["calls"] += 1
            new = fresh()
            if new:
                rec["new_entries"].append([m, new, round(time.time() - t0, 2)])
        try:
            sync()
        except Exception as exc:  # noqa: BLE001
            rec["errors"].append(["sync", repr(exc)[:2000]])
        rec["seconds"] = round(time.time() - t0, 2)
        save()
        a = b = d = sfb = sfa = None  # noqa: F841  (free this key's buffers before the next one)
        if not dry:
            torch.cuda.empty_cache()
    libc.fflush(None)
    os.dup2(saved, 1)
    os.close(log_fd)
    configs = parse_configs(log_path)
    for index, rec in enumerate(result["keys"]):
        per_m = configs.get(index, {})
        rec["configs_printed"] = len(per_m)
        rec["runs"] = runs_of(per_m)
    result["entries"] = sorted(seen)
    save()
    # the device returns few, small files: keep the head of the raw log (format evidence), drop the rest
    lines = 0
    with open(log_path, errors="replace") as src, open(log_path + ".head", "w") as dst:
        for line in src:
            if lines < 60:
                dst.write(line[:3000])
            lines += 1
        dst.write(f"... {lines} lines in all\n")
    os.remove(log_path)
    return 0


# ---------------------------------------------------------------- calling-convention probe
PROBE = r'''
import json, os, sys, torch, deep_gemm
from deep_gemm.utils.layout import get_mn_major_tma_aligned_tensor
out = {}
dev, f8, f32, bf16 = "cuda", torch.float8_e4m3fn, torch.float32, torch.bfloat16
m, n, k = 100, 1792, 6144
a, b, d = torch.empty((m, k), device=dev, dtype=f8), torch.empty((n, k), device=dev, dtype=f8), torch.empty((m, n), device=dev, dtype=bf16)
sfb = torch.ones((n // 128, k // 128), device=dev, dtype=f32)
tries = {
  "dense_sglang_mn_major_tma_aligned": lambda: deep_gemm.fp8_gemm_nt((a, torch.ones((k // 128, 100), device=dev, dtype=f32).t()[:m]), (b, sfb), d),
  "dense_row_major_m_by_sfk": lambda: deep_gemm.fp8_gemm_nt((a, torch.ones((m, k // 128), device=dev, dtype=f32)), (b, sfb), d),
  "dense_sglang_with_recipe_1_128_128": lambda: deep_gemm.fp8_gemm_nt((a, torch.ones((k // 128, 100), device=dev, dtype=f32).t()[:m]), (b, sfb), d, recipe=(1, 128, 128)),
  "dense_plain_tensor_no_scales": lambda: deep_gemm.fp8_gemm_nt(a, b, d),
}
g, rows = 20, 256
ga, gb = torch.empty((g, rows, k), device=dev, dtype=f8), torch.empty((g, n, k), device=dev, dtype=f8)
gsfb, gd = torch.ones((g, n // 128, k // 128), device=dev, dtype=f32), torch.empty((g, rows, n), device=dev, dtype=bf16)
tries["masked_sglang_get_mn_major_tma_aligned_tensor"] = lambda: deep_gemm.fp8_m_grouped_gemm_nt_masked(
    (ga, get_mn_major_tma_aligned_tensor(torch.ones((g, rows, k // 128), device=dev, dtype=f32))), (gb, gsfb), gd,
    torch.zeros((g,), device=dev, dtype=torch.int32), 100)
cm = 512
ca, cd = torch.empty((cm, k), device=dev, dtype=f8), torch.empty((cm, n), device=dev, dtype=bf16)
tries["contig_sglang_tma_aligned"] = lambda: deep_gemm.m_grouped_fp8_gemm_nt_contiguous(
    (ca, torch.ones((k // 128, cm), device=dev, dtype=f32).t()[:cm]), (gb, gsfb), cd,
    torch.full((cm,), -1, device=dev, dtype=torch.int32))
align = {}
for name in ("get_mk_alignment_for_contiguous_layout", "get_theoretical_mk_alignment_for_contiguous_layout"):
    align[name + ":exists"] = hasattr(deep_gemm, name)
try:
    align["get_mk_alignment_for_contiguous_layout"] = deep_gemm.get_mk_alignment_for_contiguous_layout()
except Exception as exc:
    align["get_mk_alignment_for_contiguous_layout"] = repr(exc)[:300]
theo = getattr(deep_gemm, "get_theoretical_mk_alignment_for_contiguous_layout", None)
if theo is not None:
    for pg in (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 512, 1024, 4096, 8192):
        for call in (lambda: theo(pg), lambda: theo(expected_m=pg * 20, num_groups=20)):
            try:
                align[f"theoretical({pg})"] = call()
                break
            except Exception as exc:
                align[f"theoretical({pg})"] = repr(exc)[:300]
out["contiguous_alignment"] = align
for name, fn in tries.items():
    try:
        fn(); torch.cuda.synchronize(); out[name] = "ok"
    except Exception as exc:
        out[name] = repr(exc)[:1500]
    out[name + ":entries"] = sorted(os.listdir(os.path.join(os.environ["DG_JIT_CACHE_DIR"], "cache"))) if os.path.isdir(os.path.join(os.environ["DG_JIT_CACHE_DIR"], "cache")) else []
json.dump(out, open(sys.argv[1], "w"), indent=1)
'''


# ---------------------------------------------------------------- one release
def run(cmd: list[str], env: dict, out_file: str, timeout: float, cwd: str | None = None) -> dict:
    """Run one command in its own process group, stdout to out_file and stderr to out_file + '.err'; at the
    timeout the whole group (workers included) is killed. Never raises."""
    t0 = time.time()
    try:
        with open(out_file, "w") as f, open(out_file + ".err", "w") as err:
            proc = subprocess.Popen(cmd, env=env, stdout=f, stderr=err, cwd=cwd, start_new_session=True)
            try:
                rc = proc.wait(timeout=max(timeout, 5))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                rc = "timeout"
    except Exception as exc:  # noqa: BLE001
        rc = repr(exc)
    return {"cmd": cmd, "cwd": cwd, "rc": rc, "seconds": round(time.time() - t0, 1)}


def copy_entries(cache: str, dest: str) -> int:
    """kernel.cu and meta.json of every entry (small text; the cubins stay behind)."""
    entries_dir, count = os.path.join(cache, "cache"), 0
    if not os.path.isdir(entries_dir):
        return 0
    for name in sorted(os.listdir(entries_dir)):
        target = os.path.join(dest, name)
        if os.path.isdir(target):
            continue
        os.makedirs(target)
        files = sorted(os.listdir(os.path.join(entries_dir, name)))
        for fname in ("kernel.cu", "meta.json"):
            src = os.path.join(entries_dir, name, fname)
            if os.path.isfile(src):
                shutil.copy(src, target)
        with open(os.path.join(target, "files.txt"), "w") as f:
            f.write("\n".join(files) + "\n")
        count += 1
    return count


def plan_samples(shape: dict) -> list[int]:
    kind, lo, hi = shape["kernel_type"], int(shape["m_min"]), int(shape["m_max"])
    base = dense_ms(hi) if kind == "GEMM_NT_F8F8BF16" else contig_ms(hi) if kind.endswith("CONTIG") \
        else list(range(1, hi + 1))
    edges = set()
    for bucket in shape["buckets"]:
        edges.update((bucket["m_min"], bucket["m_max"], bucket["m_max"] + 1, bucket["m_rep"]))
    return sorted({m for m in base if lo <= m <= hi} | {m for m in edges if lo <= m <= hi})


def version(args: dict) -> int:
    out, site, dg_version, sglang = args["out"], args["site"], args["dg_version"], args["sglang"]
    os.makedirs(out, exist_ok=True)
    scratch = os.path.join(args["scratch"], dg_version)
    os.makedirs(scratch, exist_ok=True)
    # the caller's PYTHONPATH stays last: issue 32's proof puts a private torch 2.14.1 there for every process
    # (the sweeps, plan, warm and its workers), ahead of the machine's own torch in site-packages
    paths = [site, args["repo"], *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths), PYTHONUNBUFFERED="1", OPENBLAS_NUM_THREADS="1")
    env.pop("DG_PRINT_CONFIGS", None)
    summary: dict = {"dg_version": dg_version, "sglang": sglang, "site": site, "started": time.time(),
                     "steps": {}}

    def save() -> None:
        with open(os.path.join(out, "version.json"), "w") as f:
            json.dump(summary, f, indent=1)

    # cold: one process per key, own cache each, a few at a time; the probe alongside
    specs = cold_specs(dg_version)
    pending = [(i, s) for i, s in enumerate(specs)]
    running: list[tuple[int, subprocess.Popen, str]] = []
    probe_cache = os.path.join(scratch, "probe-cache")
    probe = subprocess.Popen([sys.executable, "-c", PROBE, os.path.join(out, "probe.json")],
                             env=dict(env, DG_JIT_CACHE_DIR=probe_cache),
                             stdout=open(os.path.join(out, "probe.log"), "w"), stderr=subprocess.STDOUT)
    os.makedirs(os.path.join(out, "cold"), exist_ok=True)
    while pending or running:
        while pending and len(running) < args["par"]:
            i, spec = pending.pop(0)
            job = {"specs": [spec], "cache": os.path.join(scratch, f"cold-{i}"),
                   "out": os.path.join(out, "cold", f"key{i}.json"), "log": os.path.join(out, "cold", f"key{i}.configs.txt"),
                   "deadline": args["cold_deadline"]}
            path = os.path.join(scratch, f"cold-{i}.job.json")
            json.dump(job, open(path, "w"))
            proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "keys", path], env=env,
                                    stdout=open(os.path.join(out, "cold", f"key{i}.stdout"), "w"),
                                    stderr=subprocess.STDOUT)
            running.append((i, proc, job["cache"]))
        time.sleep(0.5)
        for item in list(running):
            i, proc, cache = item
            if proc.poll() is not None:
                running.remove(item)
                summary["steps"][f"cold-key{i}"] = {"rc": proc.returncode}
                copy_entries(cache, os.path.join(out, "entries"))
                save()
            elif time.time() > args["cold_deadline"] + 60:
                proc.kill()
    try:
        probe.wait(timeout=max(1, args["cold_deadline"] - time.time()))
    except subprocess.TimeoutExpired:
        probe.kill()
    copy_entries(probe_cache, os.path.join(out, "probe-entries"))
    summary["cold_done"] = time.time()
    save()

    # warm: dgprecompile plan + warm, then sweep every plan key against that cache
    warm_cache = os.path.join(scratch, "warm-cache")
    # SWEEP_MOE_RUNNER=auto for sglang < 0.5.3.post1, whose EPMoE runs masked DeepGEMM without a runner option
    plan_args = ["--model", "Qwen3-Coder-480B", "--tp", "8", "--ep", "8", "--sglang", sglang,
                 "--moe-runner-backend", os.environ.get("SWEEP_MOE_RUNNER", "deep_gemm"), "--max-tokens", "65536"]
    if os.environ.get("SWEEP_SGLANG_CMD"):
        plan_args = ["--sglang-cmd", os.environ["SWEEP_SGLANG_CMD"], "--sglang", sglang]
    left = args["deadline"] - time.time()
    # from the dgprecompile folder itself: `python -m` puts the working directory first on sys.path
    summary["steps"]["plan"] = run([sys.executable, "-m", "dgprecompile", "plan", *plan_args, "--format", "json"],
                                   env, os.path.join(out, "plan.json"), 120, cwd=args["repo"])
    # DeepGEMM's kernels only: where the plan's sglang is installed (sglang 0.5.23's stack) warm would otherwise build
    # its JIT modules, FlashInfer's modules and the Triton MoE too (on 2026-12-06 that took the whole budget)
    summary["steps"]["warm"] = run([sys.executable, "-m", "dgprecompile", "warm", *plan_args, "--cache-dir", warm_cache,
                                    "--jobs", str(args["jobs"]), "--backend", args["backend"], "--sglang-jit", "off",
                                    "--json"], env,
                                   os.path.join(out, "warm.json"), left * 0.65, cwd=args["repo"])
    save()
    try:
        plan = json.load(open(os.path.join(out, "plan.json")))
    except Exception as exc:  # noqa: BLE001
        summary["plan_error"] = repr(exc)[:1000]
        save()
        return 1
    if summary["steps"]["warm"]["rc"] != 0 and not os.path.isdir(os.path.join(warm_cache, "cache")):
        summary["warm_sweep_skipped"] = "warm made no cache (see warm.json.err); a sweep would only compile"
        summary["finished"] = time.time()
        save()
        return 0
    if os.path.isfile(os.path.join(warm_cache, "dgprecompile", "index.json")):
        shutil.copy(os.path.join(warm_cache, "dgprecompile", "index.json"), os.path.join(out, "warm-index.json"))
    summary["warm_entries"] = sorted(os.listdir(os.path.join(warm_cache, "cache"))) \
        if os.path.isdir(os.path.join(warm_cache, "cache")) else []
    copy_entries(warm_cache, os.path.join(out, "entries"))
    specs = [{"kind": s["kernel_type"], "n": int(s["n"]), "k": int(s["k"]), "g": int(s["num_groups"]),
              "ms": plan_samples(s)} for s in plan["shapes"]]
    deepjit = dg_version.startswith("0.2.")  # DeepJIT: then the shared-roots pass below gets the last 30 s
    job = {"specs": specs, "cache": warm_cache, "out": os.path.join(out, "warm-sweep.json"),
           "log": os.path.join(out, "warm-sweep.configs.txt"), "deadline": args["deadline"] - (40 if deepjit else 10),
           "print_configs": False}  # the cold pass recorded the configurations; this pass counts entries
    path = os.path.join(scratch, "warm.job.json")
    json.dump(job, open(path, "w"))
    summary["steps"]["warm-sweep"] = run([sys.executable, os.path.abspath(__file__), "keys", path], env,
                                         os.path.join(out, "warm-sweep.stdout"),
                                         args["deadline"] - (30 if deepjit else 0) - time.time())
    if deepjit:
        save()
        summary["shared_roots"] = shared_roots_sweep(specs, warm_cache, scratch, out, env, args["deadline"])
    summary["dgprecompile_file"] = subprocess.run(
        [sys.executable, "-c", "import dgprecompile; print(dgprecompile.__file__)"], env=env, cwd=args["repo"],
        capture_output=True, text=True).stdout.strip()
    summary["finished"] = time.time()
    save()
    return 0


def _tree(root: str) -> list[list]:
    """(relative path, size, mode) of every file under root: the shared root must come out of a sweep unchanged."""
    return sorted([os.path.relpath(os.path.join(d, f), root), os.path.getsize(os.path.join(d, f)),
                   os.stat(os.path.join(d, f)).st_mode] for d, _, files in os.walk(root) for f in files)


def shared_roots_sweep(specs: list[dict], warm_cache: str, scratch: str, out: str, env: dict, deadline: float) -> dict:
    """DeepJIT's read-only shared roots as the runtime reads them (issue 32 item 2): DG_JIT_CACHE_DIR set to
    "<empty writable root>:<the warmed cache, made read-only>", the same samples swept again in a fresh process.
    Every kernel must be found in the shared root: no entry may appear in the writable root, and the shared root
    must be byte-for-byte what it was (mode bits off for writing; the device runs as root, so the tree is compared
    too). The layout read from DeepJIT's headers is in tests/test_deepjit_roots.py."""
    writable = os.path.join(scratch, "shared-writable")
    shutil.rmtree(writable, ignore_errors=True)
    os.makedirs(writable)
    subprocess.run(["chmod", "-R", "a-w", warm_cache], check=False)
    before = _tree(warm_cache)
    job = {"specs": specs, "cache": writable, "cache_roots": f"{writable}:{warm_cache}",
           "out": os.path.join(out, "shared-roots-sweep.json"), "log": os.path.join(out, "shared-roots.configs.txt"),
           "deadline": deadline - 5, "print_configs": False}
    path = os.path.join(scratch, "shared.job.json")
    json.dump(job, open(path, "w"))
    step = run([sys.executable, os.path.abspath(__file__), "keys", path], env,
               os.path.join(out, "shared-roots-sweep.stdout"), deadline - time.time())
    unchanged = _tree(warm_cache) == before  # before write permission comes back (the tree holds the modes)
    subprocess.run(["chmod", "-R", "u+w", warm_cache], check=False)
    written = [os.path.relpath(os.path.join(d, f), writable) for d, _, files in os.walk(writable) for f in files]
    return {"step": step, "roots": job["cache_roots"], "shared_unchanged": unchanged,
            "shared_files": len(before), "files_in_writable_root": written[:50], "writable_count": len(written)}


# ---------------------------------------------------------------- summary over all releases
def summary(out: str) -> int:
    lines = []
    for name in sorted(os.listdir(out)):
        vdir = os.path.join(out, name)
        if not os.path.isfile(os.path.join(vdir, "version.json")):
            if os.path.isdir(vdir):
                lines.append(f"{name}: no version.json (install failed? see {name}/install.log)")
            continue
        v = json.load(open(os.path.join(vdir, "version.json")))
        cold_calls, cold_entries = 0, set()
        problems = []
        for fname in sorted(os.listdir(os.path.join(vdir, "cold"))) if os.path.isdir(os.path.join(vdir, "cold")) else []:
            if not fname.endswith(".json"):
                continue
            rec = json.load(open(os.path.join(vdir, "cold", fname)))
            if "import_error" in rec:
                problems.append(f"import: {rec['import_error'][:160]}")
            cold_entries.update(rec.get("entries", []))
            for key in rec.get("keys", []):
                cold_calls += key["calls"]
                if key["errors"]:
                    problems.append(f"{key['kind']} {key['n']}x{key['k']}: {str(key['errors'][0])[:160]}")
                if key["truncated_at"]:
                    problems.append(f"{key['kind']} {key['n']}x{key['k']} truncated at m={key['truncated_at']}")
        warm_new = warm_calls = "-"
        if os.path.isfile(os.path.join(vdir, "warm-sweep.json")):
            ws = json.load(open(os.path.join(vdir, "warm-sweep.json")))
            warm_calls = sum(k["calls"] for k in ws.get("keys", []))
            warm_new = sum(len(e[1]) for k in ws.get("keys", []) for e in k["new_entries"])
            for key in ws.get("keys", []):
                if key["errors"] or key["truncated_at"]:
                    problems.append(f"warm-sweep {key['kind']} {key['n']}x{key['k']}: "
                                    f"{str(key['errors'][:1])[:120]} trunc={key['truncated_at']}")
        shared = "-"
        if os.path.isfile(os.path.join(vdir, "shared-roots-sweep.json")):
            sr = json.load(open(os.path.join(vdir, "shared-roots-sweep.json")))
            sr_new = sum(len(e[1]) for k in sr.get("keys", []) for e in k["new_entries"])
            sr_info = v.get("shared_roots", {})
            shared = (f"{sum(k['calls'] for k in sr.get('keys', []))} calls, {sr_new} new entries, "
                      f"shared root unchanged: {sr_info.get('shared_unchanged')}")
            for key in sr.get("keys", []):
                if key["errors"] or key["truncated_at"]:
                    problems.append(f"shared-roots {key['kind']} {key['n']}x{key['k']}: "
                                    f"{str(key['errors'][:1])[:120]} trunc={key['truncated_at']}")
        probe = json.load(open(os.path.join(vdir, "probe.json"))) if os.path.isfile(os.path.join(vdir, "probe.json")) else {}
        ok = [k for k, val in probe.items() if val == "ok"]
        lines.append(f"{name} (sglang {v['sglang']}): cold {cold_calls} calls, {len(cold_entries)} distinct entries; warm rc="
                     f"{v['steps'].get('warm', {}).get('rc')} entries={len(v.get('warm_entries', []))}; "
                     f"sweep after warm {warm_calls} calls, {warm_new} new entries; probe ok: {ok}"
                     + (f"; DeepJIT shared-roots sweep {shared}" if shared != "-" else ""))
        lines += [f"    ! {p}" for p in problems[:8]]
    text = "\n".join(lines)
    with open(os.path.join(out, "SUMMARY.txt"), "w") as f:
        f.write(text + "\n")
    print(text)
    return 0


def main() -> int:
    mode = sys.argv[1]
    if mode == "keys":
        return sweep_keys(sys.argv[2])
    if mode == "summary":
        return summary(sys.argv[2])
    if mode == "version":
        opts = dict(zip(sys.argv[2::2], sys.argv[3::2], strict=True))
        args = {"dg_version": opts["--dg-version"], "sglang": opts["--sglang"], "site": opts["--site"],
                "out": opts["--out"], "scratch": opts.get("--scratch", "/tmp/dgsweep-scratch"),
                "cold_deadline": float(opts["--cold-deadline"]), "deadline": float(opts["--deadline"]),
                "jobs": int(opts.get("--jobs", 4)), "par": int(opts.get("--par", 3)),
                "backend": opts.get("--backend", "auto"), "repo": opts.get("--repo", REPO)}
        return version(args)
    raise SystemExit(__doc__)


if __name__ == "__main__":
    sys.exit(main())
