"""bench/first_forward.sh's arithmetic (issue 45): what a cold run compiled, per JIT family, and the summary.

    first_forward_files.py --env CACHE         -> the environment that puts every JIT cache (and HOME) in CACHE, new
    first_forward_files.py CACHE START         -> per family: files added under CACHE and when (seconds after START)
    first_forward_files.py --summary DIR ...   -> DIR/summary.json's object from the phases' files
    first_forward_files.py --alone PLAN OUT    -> OUT: one manifest per item of PLAN that builds without a GPU
                                                  and is no DeepGEMM kernel (each built alone: the longest compile)

A family's compile seconds are read from its cache: the time from the run's start to its first and last file, and
the span between them (its files land as its compiles end; families compile in turn or at once, so the spans are
when each family was busy, not a split of the wall). Each family's cache is the folder CACHE/<family>.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

from dgprecompile.launch.model_report import RUNTIME_LOGS

# the variable each runtime reads its JIT cache from -> the family it holds: every variable the driver counts
# (CACHE_VARS: tests/test_first_forward.py holds the two together) and the CUDA driver's own cache
FAMILIES = {"DG_JIT_CACHE_DIR": "deepgemm", "SGL_DG_CACHE_DIR": "deepgemm-sgl", "SGLANG_DG_CACHE_DIR": "deepgemm-sglang",
            "TVM_FFI_CACHE_DIR": "sglang-jit", "SGLANG_JIT_CACHE_DIR": "sglang-jit-ninja",
            "TRITON_CACHE_DIR": "triton", "TORCHINDUCTOR_CACHE_DIR": "inductor", "FLASHINFER_WORKSPACE_BASE": "flashinfer",
            "CUTE_DSL_CACHE_DIR": "cute-dsl", "CUDA_CACHE_PATH": "cuda-driver"}


def fresh_env(cache: Path) -> list[str]:
    """VAR=CACHE/<family> for every runtime's cache, and HOME=CACHE/home (the runtimes' defaults)."""
    return [f"HOME={cache / 'home'}"] + [f"{var}={cache / family}" for var, family in FAMILIES.items()]


def families(cache: Path, start: float) -> dict[str, dict]:
    out = {}
    # and HOME's: a runtime whose variable is not in FAMILIES writes under HOME (its default, e.g. ~/.deep_gemm)
    for family in (*FAMILIES.values(), "home"):
        times = [os.stat(os.path.join(dirpath, f)).st_mtime for dirpath, _, files in os.walk(cache / family)
                 for f in files if f not in RUNTIME_LOGS]
        if times:
            first, last = min(times) - start, max(times) - start
            out[family] = {"files": len(times), "first_s": round(first, 1), "last_s": round(last, 1),
                           "span_s": round(last - first, 1)}
    return out


def _json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _proof_seconds(summary: Path) -> dict[str, int]:
    """model_proof.sh's 'device seconds: STEP N' lines."""
    try:
        text = summary.read_text()
    except OSError:
        return {}
    return {m[1]: int(m[2]) for m in re.finditer(r"^device seconds: (\S+) (\d+)$", text, re.M)}


# the plan sections whose items `alone` cuts out one at a time: FlashInfer's modules, the Triton MoE items and SGLang's
# JIT modules, all built GPU-free (DeepGEMM's kernels take seconds each; the torch.compile graphs need the GPU)
ALONE_SECTIONS = ("flashinfer", "triton_moe", "sglang_jit_modules")


def alone(plan: Path, out: Path) -> list[str]:
    """Write OUT/alone-N.yaml, the manifest PLAN with every item but one removed, for each item of ALONE_SECTIONS;
    the ids in order."""
    from dgprecompile.planning.manifest import plan_from_dict, read_manifest, write_manifest

    data = read_manifest(plan).to_dict()
    for shape in data["shapes"]:
        shape["buckets"], shape["aux_kernels"] = [], []
    data["kernels"], data["total_kernels"] = [], 0
    data.pop("inductor", None)
    ids = []
    for section in ALONE_SECTIONS:
        for item in data.get(section) or []:
            one = {**data, **{s: [] for s in ALONE_SECTIONS if s in data}, section: [item]}
            write_manifest(plan_from_dict(one), out / f"alone-{len(ids)}.yaml")
            ids.append(item["id"])
    return ids


def _alone_longest(d: Path) -> tuple[float | None, str | None, int]:
    """The longest of the items warmed one at a time (``alone-N.json``: warm --json of alone-N.yaml), its id, and
    how many alone warms were left out: one that ran on one job, or does not say (a warm before its report had
    ``jobs``), built its module's units one after another (MAX_JOBS=1: until this commit the script's ``nproc``
    answered 1, as OMP_NUM_THREADS=1 tells GNU nproc), so its wall is their sum, not the module's alone time."""
    reports = [r for r in map(_json, sorted(d.glob("alone-*.json"))) if r.get("wall_seconds") is not None]
    runs = [(float(r["wall_seconds"]), next(iter(r.get("item_seconds", {})), None))
            for r in reports if int(r.get("jobs") or 1) > 1]
    return (*max(runs, default=(None, None)), len(reports) - len(runs))


def _split_check(d: Path) -> dict | None:
    """tests/gpu/flashinfer_split_check.py's line (its last line of JSON) and the launch's exit code, where it ran."""
    rc = d / "split_check.rc"
    if not rc.is_file():
        return None
    lines = [ln for ln in (d / "split_check.txt").read_text().splitlines() if ln.startswith("{")] \
        if (d / "split_check.txt").is_file() else []
    try:
        job = json.loads(lines[-1]) if lines else None
    except ValueError:
        job = None
    code = rc.read_text().strip().rsplit("=", 1)[-1]
    return {"launch_rc": int(code) if code.isdigit() else None, "job": job}


def _item_walls(warm: dict) -> dict[str, float]:
    """Each item's seconds in a warm's report, a Triton MoE item's as the wall of its chunks (their first start to
    their last end: they run side by side), not warm's item_seconds for it, which is the chunks' sum (the 2026-12-07
    DeepSeek-V3 warm: 185.5 s summed over 5 chunks of 34-40 s)."""
    walls = dict(warm.get("item_seconds") or {})
    started = (warm.get("timeline") or {}).get("unit_started_s") or {}
    chunks: dict[str, list[tuple[float, float]]] = {}
    for chunk, seconds in (warm.get("triton_moe_chunk_seconds") or {}).items():
        if chunk in started:
            chunks.setdefault(chunk.split("#", 1)[0], []).append((float(started[chunk]), float(seconds)))
    for item, runs in chunks.items():
        if item in walls:
            walls[item] = round(max(s + t for s, t in runs) - min(s for s, _ in runs), 2)
    return walls


def _costliest(first_calls: dict[str, float], n: int = 8) -> dict[str, float]:
    """The ``n`` modules whose first call took longest, longest first."""
    return dict(sorted(first_calls.items(), key=lambda kv: -kv[1])[:n])


def summary(d: Path, server: str, commit: str, device_s: int) -> dict:
    cold, proof = _json(d / "cold.json"), d / "proof"
    launched = _json(proof / "driver.json")
    steps = _proof_seconds(proof / "summary.txt")
    warm, warm1 = _json(proof / "warm.json"), _json(d / "warm1.json")
    carried = "carried" in steps  # the launched phase unpacked an artifact: its warms built only what was not in it
    cold8 = [_json(p) for p in sorted((d / "cold8").glob("driver-*.json"))]
    row = {"server": server,
           "cold_first_forward_s": cold.get("times", {}).get("first_forward_s"),
           "cold_pass_s": cold.get("times", {}).get("pass_s"),
           "cold_decode_s": cold.get("times", {}).get("decode_s"),
           "cold_families": _json(d / "cold_files.json"),
           # a cold run PHASE_S stopped: the signal, and the last m its pass over m finished (None: still in the first)
           "cold_stopped": cold.get("stopped"), "cold_m_done": cold.get("m_done"),
           "launched_first_forward_s": launched.get("times", {}).get("first_forward_s"),
           "launched_pass_s": launched.get("times", {}).get("pass_s"),
           "launched_decode_s": launched.get("times", {}).get("decode_s"),
           "second_forward_s": launched.get("times", {}).get("second_forward_s"),
           "cold_8proc_first_forward_s": max((t for c in cold8 if (t := c.get("times", {}).get("first_forward_s"))
                                              is not None), default=None),
           "cold_8proc_drivers": len(cold8),
           "cold_8proc_stopped": sum(1 for c in cold8 if c.get("stopped")),
           # the proof's two warms; not a whole warm where it unpacked a carried artifact (then they built the rest)
           "warm_wall_s": (steps["warm"] + steps["warm-gpu"]) if {"warm", "warm-gpu"} <= steps.keys()
           and not carried else None,
           "warm_steps_s": {k: steps[k] for k in ("install", "carried", "plan", "warm", "warm-gpu") if k in steps},
           "warm_one_run_s": warm1.get("wall_seconds"),
           # a carried proof's warm built only what was not carried: its items are no compile of the plan's longest
           "longest_compile_s": None if carried else max(warm.get("item_seconds", {}).values(), default=None),
           "longest_compile_note": "a carried proof's warm: no item of it is the plan's longest" if carried
           else "the longest item of the GPU-hidden warm, timed in the pool (not alone)"}
    # what the one-run warm's processes used of the CPU (warm --json children_cpu_seconds, since 2026-12-07): over
    # its wall, the cores it kept busy on average; the least wall that work allows on the host's cores is cpu/cores
    cpu = warm1.get("children_cpu_seconds")
    if cpu and warm1.get("wall_seconds"):
        row["warm_one_run_cpu_s"] = cpu
        row["warm_one_run_cores_busy"] = round(cpu / float(warm1["wall_seconds"]), 1)
    # the longest item of the one-run warm, timed inside it (beside the others: FlashInfer's modules share --jobs)
    warm1_items = _item_walls(warm1)
    if warm1_items:
        row["warm_one_run_longest_item"], row["warm_one_run_longest_item_s"] = max(warm1_items.items(),
                                                                                   key=lambda kv: kv[1])
    longest, which, serial = _alone_longest(d)
    if longest is not None:
        row.update(longest_compile_s=longest, longest_compile_item=which,
                   longest_compile_note="the longest item warmed alone (phase alone: warm's whole wall, GPU hidden)")
    if serial:
        row["alone_left_out"] = f"{serial} alone warm(s) on one job (its units one after another): not used"
    cold_from = _json(d / "cold_from.json")  # COLD_FROM: the cold phases are an earlier record's
    if cold_from:
        row["cold_from"] = cold_from
    check = _split_check(d)
    if check is not None:
        row["split_check"] = check
    # where each first forward went: its costliest modules' first calls (the driver's first_call_s)
    row["cold_first_calls_s"] = _costliest(cold.get("first_call_s") or {})
    row["launched_first_calls_s"] = _costliest(launched.get("first_call_s") or {})
    # and what torch.compile did in those first calls, where anything: frames traced, graphs compiled or loaded, and
    # the seconds of its own timers (Dynamo's tracing, the backend, the generated module's load), with their sum over
    # every first call: how much of a launched first forward torch.compile's own work is
    for run, key in ((cold, "cold"), (launched, "launched")):
        counts = run.get("first_call_counts") or {}
        row[f"{key}_first_calls_counts"] = {k: counts[k] for k in row[f"{key}_first_calls_s"] if k in counts}
        torch_s = run.get("first_call_torch_s") or {}
        row[f"{key}_first_calls_torch_s"] = {k: torch_s[k] for k in row[f"{key}_first_calls_s"] if k in torch_s}
        if torch_s:
            row[f"{key}_torch_compile_s"] = round(sum(v.get("torch_compile_s", 0.0) for v in torch_s.values()), 4)
    lf, sf = row["launched_first_forward_s"], row["second_forward_s"]
    cf = row["cold_first_forward_s"]
    row["launched_over_second"] = round(lf / sf, 2) if lf and sf else None
    row["cold_over_launched"] = round(cf / lf, 2) if cf and lf else None
    w1, longest = row["warm_one_run_s"], row["longest_compile_s"]
    row["warm_one_run_over_longest"] = round(w1 / longest, 2) if w1 and longest else None
    inside = row.get("warm_one_run_longest_item_s")  # the warm against its own longest item, timed inside it
    row["warm_one_run_over_longest_item"] = round(w1 / inside, 2) if w1 and inside else None
    return {"commit": commit, "device_s": device_s, "servers": [row]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("paths", nargs="*", help="CACHE START")
    p.add_argument("--env", type=Path, help="print the environment of a new cache in this folder")
    p.add_argument("--summary", type=Path)
    p.add_argument("--alone", type=Path, nargs=2, metavar=("PLAN", "OUT"))
    p.add_argument("--server", default="")
    p.add_argument("--commit", default="")
    p.add_argument("--device-s", type=int, default=0)
    args = p.parse_args(argv)
    if args.env:
        print("\n".join(fresh_env(args.env)))
        return 0
    if args.alone:
        print("\n".join(alone(*args.alone)))
        return 0
    if args.summary:
        doc = summary(args.summary, args.server, args.commit, args.device_s)
    elif len(args.paths) == 2:
        doc = families(Path(args.paths[0]), float(args.paths[1]))
    else:
        p.error("give CACHE START, or --summary DIR")
    json.dump(doc, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
