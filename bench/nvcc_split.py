"""nvcc's split compilation against a FlashInfer module's own build, one translation unit at a time (issue 45 item 2).

FlashInfer's JIT modules are a server plan's longest builds (sampling and trtllm_comm: 186 s each on the H200 in the
480B warm, bench/results/2026-12-03-h200-model-480b), and each translation unit is one nvcc process: once the
warm's other work is done, the cores sit idle while they finish. nvcc's ``-split-compile=N`` runs a unit's
optimisation passes on N threads (0: as many as the machine has). It is adopted only where the module's kernels stay
the same: this bench compiles each unit of FlashInfer's own ninja file (its spec function, ``write_ninja``, then
ninja's own command for each .cu) with FlashInfer's flags and again with ``-split-compile=N`` appended, alternating,
``rounds`` times each, and compares the SASS of the two objects (cuobjdump's listing without its file headers).

    python bench/nvcc_split.py --spec flashinfer.jit.sampling:gen_sampling_module [--spec ...] [--split 0]
        [--rounds 2] [--out DIR]

Run it with the FlashInfer release on PYTHONPATH (and tvm-ffi: sglang 0.5.14's folder beside the venv has it),
nvcc on PATH and FlashInfer's own variables as warm gives them (FLASHINFER_EXTRA_CUDAFLAGS for cuRAND's headers).
Writes DIR/nvcc_split.json: per unit the wall and CPU seconds of each round, the median ratio, whether the SASS is
the same (null: a unit with no kernel); the table goes to stdout; exit 1 where split compilation changed a kernel.
Wall seconds are a side-by-side ratio on one machine, never a timed test.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HEADER = re.compile(r"^\s*(Fatbin|code for sm_|arch = |host = |compile_size|identifier = )")


def unit_commands(spec_name: str, workspace: Path) -> dict[str, str]:
    """{source file name: FlashInfer's nvcc command for it}, from the module's own ninja file."""
    os.environ["FLASHINFER_WORKSPACE_BASE"] = str(workspace)
    os.environ.setdefault("FLASHINFER_CUDA_ARCH_LIST", "9.0a")
    module, _, fn = spec_name.partition(":")
    spec = getattr(importlib.import_module(module), fn)()
    spec.write_ninja()
    ninja = Path(spec.ninja_path)
    listed = subprocess.run(["ninja", "-C", str(ninja.parent), "-t", "commands"], capture_output=True, text=True,
                            check=True, timeout=120).stdout
    out = {}
    for line in listed.splitlines():
        words = shlex.split(line)
        if words and words[0].endswith("nvcc") and "-c" in words:
            out[Path(words[words.index("-c") + 1]).name] = line.strip()
    return out


def compile_once(command: str, obj: Path, split: int | None) -> tuple[float, float]:
    """(wall, CPU seconds of nvcc and everything it ran) of one compile of the unit into ``obj``."""
    words = shlex.split(command)
    words[words.index("-o") + 1] = str(obj)
    if split is not None:
        words.append(f"-split-compile={split}")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(words, check=True, capture_output=True, timeout=3600)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def cuobjdump(nvcc: str) -> str:
    """cuobjdump beside the unit's nvcc, else on PATH, else the one Triton ships (this machine's toolkit has none)."""
    for candidate in (Path(nvcc).parent / "cuobjdump", shutil.which("cuobjdump")):
        if candidate and os.access(candidate, os.X_OK):
            return str(candidate)
    try:
        import triton

        bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    except ImportError:
        bundled = None
    if bundled is not None and os.access(bundled, os.X_OK):
        return str(bundled)
    raise SystemExit("no cuobjdump beside nvcc, on PATH or in a Triton on the path: the SASS cannot be compared")


def sass(obj: Path, tool: str) -> list[str]:
    """The object's SASS as cuobjdump lists it, less its file headers; an object without any is refused."""
    listing = subprocess.run([tool, "-sass", str(obj)], capture_output=True, text=True, check=True,
                             timeout=600).stdout
    lines = [line for line in listing.splitlines() if line.strip() and not HEADER.match(line)]
    return lines if any("Function :" in line for line in lines) else []


def bench_unit(name: str, command: str, scratch: Path, split: int, rounds: int) -> dict:
    runs: dict[str, list[list[float]]] = {"flashinfer": [], "split": []}
    for _ in range(rounds):
        for label, arg in (("flashinfer", None), ("split", split)):
            runs[label].append([round(x, 2) for x in compile_once(command, scratch / f"{name}.{label}.o", arg)])
    walls = {k: statistics.median(w for w, _ in v) for k, v in runs.items()}
    tool = cuobjdump(shlex.split(command)[0])
    base, other = sass(scratch / f"{name}.flashinfer.o", tool), sass(scratch / f"{name}.split.o", tool)
    differ = sum(a != b for a, b in zip(base, other, strict=False)) + abs(len(base) - len(other))
    return {"unit": name, "runs": runs, "wall_ratio": round(walls["flashinfer"] / walls["split"], 3),
            "kernels": sum("Function :" in line for line in base), "sass_lines": [len(base), len(other)],
            "sass_same": base == other if base or other else None, "sass_lines_differing": differ}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--spec", action="append", required=True, help="FlashInfer's spec function, module:function")
    p.add_argument("--split", type=int, default=0, help="-split-compile's N (0: every core)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", default="out/nvcc-split")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    with tempfile.TemporaryDirectory(prefix="dgp-nvcc-split-") as tmp:
        for spec in args.spec:
            for unit, command in sorted(unit_commands(spec, Path(tmp) / "ws").items()):
                results.append({"spec": spec, **bench_unit(unit, command, Path(tmp), args.split, args.rounds)})
                r = results[-1]
                print(f"{unit:40} {r['kernels']:3} kernels  flashinfer/split wall {r['wall_ratio']:5.2f}x  "
                      f"sass same: {r['sass_same']}", flush=True)
    report = {"split": args.split, "rounds": args.rounds, "cores": os.cpu_count(),
              "nvcc": subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout.splitlines()[-1],
              "flashinfer": importlib.import_module("flashinfer").__version__, "units": results}
    (out / "nvcc_split.json").write_text(json.dumps(report, indent=1))
    return 0 if all(r["sass_same"] is not False for r in results) else 1  # 1: split compilation changed a kernel


if __name__ == "__main__":
    sys.exit(main())
