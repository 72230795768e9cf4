"""Probe torch's experimental Dynamo caching precompile (TORCH_CACHING_PRECOMPILE=1) on inductor's CPU backend.

Question: with the inductor cache already warm, torch.compile still costs about a second per process on a
server's first forward, because Dynamo traces every compiled function again before it finds the cached graph.
Does the caching precompile switch let a second process skip that tracing, what does it write, what keys it,
and does TORCH_STRICT_PRECOMPILE refuse on a miss?

Two subcommands:

  child   one process: torch.compile two functions of this file, call them inside torch.no_grad(), print one
          JSON line (timings, torch's own counters, the files under <cache>/dynamo). The switches are read by
          torch at import from the environment, so the parent sets them; child only reports what it saw.
  suite   the parent: runs child in fresh processes for every scenario of the README (A, B, B', moved cache,
          script at another path, ...) with scratch cache folders under --scratch, one at a time, and prints
          every child's JSON line plus one summary line of medians.

Evidence only: no product code reads this.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

T0 = time.perf_counter()


# The two compiled functions. They must live at module level: the precompile path finds a function again in a
# new process by module name and qualified name, and keys its entry by qualname and first line number.
def small(x):
    # pointwise, compiled with dynamic=True: one trace expected
    return (x * 2.0 + 1.0).relu() - x.sin()


def multi(x):
    # compiled with the default (automatic dynamic): fed 1-d shapes 8 and 16 and a 2-d shape, so Dynamo
    # traces more than once (a static graph, then a dynamic one, then the 2-d one)
    return (x.cos() * x + 3.0).sum(-1, keepdim=True) * x


MULTI_SHAPES = [(8,), (16,), (4, 8)]


def functions(args):
    # (name, function, torch.compile kwargs, input shapes): this file's two, or f of a module file (--module)
    if args.module:
        import importlib

        sys.path.insert(0, os.path.dirname(os.path.abspath(args.module)))
        mod = importlib.import_module(os.path.basename(args.module).removesuffix(".py"))
        return [(mod.__name__ + ".f", mod.f, {"dynamic": True}, [(64,)])]
    return [("small", small, {"dynamic": True}, [(64,)]), ("multi", multi, {}, MULTI_SHAPES)]


# Two module files whose f has the same qualname and first line but another body: the entry's key (qualname,
# first line) is the same for both, so the second may find the first one's entry.
COLLIDE = {
    "mod_a": "import torch  # noqa: F401\n\n\ndef f(x):\n    return x * 2.0 + 1.0\n",
    "mod_b": "import torch  # noqa: F401\n\n\ndef f(x):\n    return x * 3.0 - 1.0\n",
}


def counters_snapshot():
    from torch._dynamo.utils import counters

    out = {}
    for group in ("stats", "frames", "dynamo_cache", "aot_autograd"):
        if counters.get(group):
            out[group] = dict(counters[group])
    ind = {k: v for k, v in counters.get("inductor", {}).items() if "cache" in k}
    if ind:
        out["inductor_cache"] = ind
    return out


def dynamo_files(cache_dir):
    # everything under <TORCHINDUCTOR_CACHE_DIR>/dynamo (where DiskDynamoCache keeps its entries)
    root = os.path.join(cache_dir, "dynamo")
    found = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            found[os.path.relpath(path, cache_dir)] = os.path.getsize(path)
    return found


def expected_key(fn):
    # what we believe the entry's folder name is: sha256 of qualname then first line number (checked against
    # the folder names the run finds, not taken from torch)
    h = hashlib.sha256()
    h.update(fn.__qualname__.encode())
    h.update(str(fn.__code__.co_firstlineno).encode())
    return h.hexdigest()


def child(args):
    import torch

    t_import = time.perf_counter() - T0
    cache_dir = os.environ.get("TORCHINDUCTOR_CACHE_DIR", "")
    rec = {
        "kind": "child",
        "label": args.label,
        "script": os.path.abspath(__file__),
        "cache_dir": cache_dir,
        "caching_precompile": torch._dynamo.config.caching_precompile,
        "strict_precompile": torch._dynamo.config.strict_precompile,
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "import_s": round(t_import, 3),
        "keys": {name: expected_key(fn) for name, fn, _kw, _shapes in functions(args)},
    }
    timings = {}
    per_fn = {}
    prof = None
    if args.profile:
        # where the time of the compile and first calls goes (cumulative, top functions)
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    results_ok = True
    try:
        with torch.no_grad():
            for name, fn, kw, shapes in functions(args):
                before = counters_snapshot()
                t = time.perf_counter()
                # with caching_precompile the Dynamo cache is read here, when the wrapper is made
                compiled = torch.compile(fn, **kw)
                timings[f"{name}_wrap_s"] = round(time.perf_counter() - t, 4)
                for i, shape in enumerate(shapes):
                    x = torch.arange(1, 1 + torch.Size(shape).numel(), dtype=torch.float32).reshape(shape) / 7
                    t = time.perf_counter()
                    y = compiled(x)
                    timings[f"{name}_call{i}_s"] = round(time.perf_counter() - t, 4)
                    # a stale entry would show here: compare with eager on the same input
                    results_ok = results_ok and bool(torch.allclose(y, fn(x)))
                per_fn[name] = diff_counters(before, counters_snapshot())
    except Exception as e:  # strict mode is expected to raise: report it, do not crash the suite
        rec["error"] = {"type": f"{type(e).__module__}.{type(e).__qualname__}", "message": str(e)[:600]}
    if prof is not None:
        prof.disable()
        rec["profile_top"] = profile_top(prof)
    rec["first_calls_total_s"] = round(sum(v for k, v in timings.items() if k.endswith(("_call0_s", "_wrap_s"))), 4)
    rec["all_calls_total_s"] = round(sum(timings.values()), 4)
    rec["timings"] = timings
    # null when a call raised before every result was compared
    rec["results_match_eager"] = None if "error" in rec else results_ok
    rec["counters"] = counters_snapshot()
    rec["counters_per_fn"] = per_fn
    rec["dynamo_files_before_save"] = dynamo_files(cache_dir)
    if args.save:
        # the only writer of the Dynamo cache in torch 2.13: save_cache_artifacts -> PrecompileContext
        # .save_to_dynamo_cache -> DynamoCache.write (no atexit hook)
        t = time.perf_counter()
        saved = torch.compiler.save_cache_artifacts()
        rec["save_s"] = round(time.perf_counter() - t, 4)
        if saved is not None:
            blob, info = saved
            rec["save_bytes"] = len(blob)
            rec["save_info"] = {k: len(v) for k, v in info.artifacts.items()}
    rec["dynamo_files_after_save"] = dynamo_files(cache_dir)
    rec["process_s"] = round(time.perf_counter() - T0, 3)
    print(json.dumps(rec, sort_keys=True), flush=True)


def profile_top(prof, n=25):
    import pstats

    st = pstats.Stats(prof)
    rows = sorted(st.stats.items(), key=lambda kv: kv[1][3], reverse=True)
    return [f"{v[3]:.3f}s {os.path.basename(k[0])}:{k[1]}:{k[2]}" for k, v in rows[:n]]


def diff_counters(before, after):
    out = {}
    for group, vals in after.items():
        for k, v in vals.items():
            d = v - before.get(group, {}).get(k, 0)
            if d:
                out[f"{group}.{k}"] = d
    return out


def run_child(script, label, cache_dir, precompile, strict=False, save=False, profile=False, module=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHINDUCTOR_", "TORCH_"))}
    env["TORCHINDUCTOR_CACHE_DIR"] = cache_dir
    if precompile:
        env["TORCH_CACHING_PRECOMPILE"] = "1"
    if strict:
        env["TORCH_STRICT_PRECOMPILE"] = "1"
    cmd = [sys.executable, script, "child", "--label", label]
    cmd += (["--save"] if save else []) + (["--profile"] if profile else [])
    cmd += ["--module", module] if module else []
    t = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    rec = json.loads(lines[-1]) if lines else {"label": label, "no_output": True}
    rec["rc"] = p.returncode
    rec["wall_s"] = round(time.perf_counter() - t, 3)
    rec["env"] = {k: env[k] for k in env if k.startswith(("TORCHINDUCTOR_", "TORCH_"))}
    # keep torch's warnings about the precompile path (dropped guards, bypasses, failed loads)
    rec["stderr_precompile"] = [ln[:300] for ln in p.stderr.splitlines()
                                if any(w in ln for w in ("precompile", "Package", "package", "dynamo cache",
                                                         "Traceback", "Error"))][:12]
    print(json.dumps(rec, sort_keys=True), flush=True)
    return rec


def suite(args):
    me = os.path.abspath(__file__)
    scratch = tempfile.mkdtemp(prefix="dynprobe-", dir=args.scratch)
    recs = []

    def fresh(name):
        path = os.path.join(scratch, name)
        os.makedirs(path)
        return path

    try:
        for r in range(args.reps):
            # A: switch on, fresh cache, save at the end; A0: switch off, fresh cache (today's warm-up process)
            a = fresh(f"A_{r}")
            recs.append(run_child(me, f"A#{r}", a, precompile=True, save=True))
            a0 = fresh(f"A0_{r}")
            recs.append(run_child(me, f"A0#{r}", a0, precompile=False))
            # B: new process, same cache as A, switch on; B': switch off on A0's warm inductor cache
            recs.append(run_child(me, f"B#{r}", a, precompile=True))
            recs.append(run_child(me, f"B'#{r}", a0, precompile=False))
            # B' on A's cache too (switch off, cache written with the switch on)
            recs.append(run_child(me, f"B'onA#{r}", a, precompile=False))
        a = os.path.join(scratch, "A_0")  # A of the first repetition
        # 1: is a save needed? switch on, fresh cache, no save call
        recs.append(run_child(me, "A-nosave", fresh("nosave"), precompile=True, save=False))
        # 3: the whole cache folder copied to another path
        moved = os.path.join(scratch, "moved", "elsewhere")
        shutil.copytree(a, moved)
        recs.append(run_child(me, "B-moved-cache", moved, precompile=True))
        # 3: the script (same content) at another absolute path, cache of A
        other = os.path.join(fresh("otherdir"), "probe_copy.py")
        shutil.copy(me, other)
        recs.append(run_child(other, "B-script-elsewhere", a, precompile=True))
        # 3: same path, one comment line added above the functions (first line numbers shift by one)
        src = open(me).read()
        shifted = os.path.join(fresh("shifted"), "probe_copy.py")
        with open(shifted, "w") as f:
            f.write(src.replace("\nT0 = ", "\n# shifted\nT0 = ", 1))
        recs.append(run_child(shifted, "B-lines-shifted", a, precompile=True))
        # 3: same line numbers, body of small() changed (2.0 -> 5.0): a stale hit would not match eager
        edited = os.path.join(fresh("edited"), "probe_copy.py")
        with open(edited, "w") as f:
            f.write(src.replace("(x * 2.0 + 1.0)", "(x * 5.0 + 1.0)", 1))
        recs.append(run_child(edited, "B-body-edited", a, precompile=True))
        # 3: two modules, same qualname and first line of f, other bodies: does mod_b load mod_a's entry?
        cdir = fresh("collide")
        for name, text in COLLIDE.items():
            with open(os.path.join(cdir, name + ".py"), "w") as f:
                f.write(text)
        ccache = fresh("collide-cache")
        recs.append(run_child(me, "A-collide-mod_a", ccache, precompile=True, save=True,
                              module=os.path.join(cdir, "mod_a.py")))
        recs.append(run_child(me, "B-collide-mod_b", ccache, precompile=True, module=os.path.join(cdir, "mod_b.py")))
        # what remains in B, and in B' for comparison: one profiled run each (profiling slows them: not timed)
        recs.append(run_child(me, "B-profiled", a, precompile=True, profile=True))
        recs.append(run_child(me, "B'-profiled", os.path.join(scratch, "A0_0"), precompile=False, profile=True))
        # 4: strict on a miss: empty cache, both switches
        recs.append(run_child(me, "B-strict-empty", fresh("strict"), precompile=True, strict=True))
        # 4: strict on a hit: A's cache
        recs.append(run_child(me, "B-strict-warm", a, precompile=True, strict=True))
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    summary = {"kind": "summary", "reps": args.reps, "scratch_removed": not args.keep}
    for label in ("A", "A0", "B", "B'", "B'onA"):
        group = [x for x in recs if x.get("label", "").split("#")[0] == label]
        for field in ("first_calls_total_s", "all_calls_total_s", "process_s", "import_s"):
            vals = [x[field] for x in group if field in x]
            if vals:
                summary[f"{label}.{field}.median"] = statistics.median(vals)
                summary[f"{label}.{field}.all"] = vals
    print(json.dumps(summary, sort_keys=True), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("child", help="one process: compile, call, report (switches come from the environment)")
    c.add_argument("--label", default="child")
    c.add_argument("--save", action="store_true", help="call torch.compiler.save_cache_artifacts() at the end")
    c.add_argument("--module", default=None, help="compile f of this module file instead of this file's two")
    c.add_argument("--profile", action="store_true", help="add the top cumulative cProfile rows to the JSON line")
    s = sub.add_parser("suite", help="run every scenario in fresh processes, one at a time")
    s.add_argument("--reps", type=int, default=3, help="repetitions of A, A0, B, B' (default 3)")
    s.add_argument("--scratch", default=None, help="parent of the scratch cache folders (default: $TMPDIR)")
    s.add_argument("--keep", action="store_true", help="keep the scratch folders")
    args = ap.parse_args()
    child(args) if args.cmd == "child" else suite(args)


if __name__ == "__main__":
    main()
