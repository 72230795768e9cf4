"""Summarise one run of the independent model proof (tests/gpu/model_proof.sh) per JIT family, or pick the
entries to delete for its second run. Standard library only.

  --driver D.json --stderr E [--before A --after B] [--deleted VICTIMS] [--path-kernels K1,K2,...]
      prints `family <id>: refused N, new N` for every family (triton-path: the Triton kernels named by
      --path-kernels, SGLang's model-path kernels of dgprecompile's data/triton_path.yaml; unnamed ones are "other") (refusals from the strict launch's stderr and the
      driver's failed modules; new = files the run added to the cache, by area), the driver's module failures, and
      with --deleted, `deleted <family> refused by name` for each deleted entry whose family refused (else `... NOT
      refused`)
  --pick-victims CACHE_ROOT
      prints `<family> <path under the cache>` for one planned entry of each family: a DeepGEMM kernel, an SGLang
      JIT module, a Triton fused_moe_kernel entry (from the cache's own index)
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

FAMILIES = ("deepgemm", "sglang-jit", "triton-moe", "triton-path", "triton-host", "inductor", "flashinfer", "other")
PATH_KERNELS: set[str] = set()  # --path-kernels: SGLang's model-path Triton kernels (family triton-path)


def family_of_message(line: str) -> str:
    if "DeepGEMM" in line:
        return "deepgemm"
    if "SGLang tried to build its JIT module" in line or "tvm_ffi" in line or "SGLANG_CRASH_ON_JIT" in line:
        return "sglang-jit"
    if "torch.compile (inductor) tried to compile" in line:  # an FX graph cache miss (the hook's inductor refusal)
        return "inductor"
    kernel = re.search(r"compile kernel (\S+)", line)
    name = kernel.group(1) if kernel else line
    if "fused_moe_kernel" in name:
        return "triton-moe"
    if name.rstrip(".:,") in PATH_KERNELS:
        return "triton-path"
    if "host module" in line or "__triton_launcher" in name or "cuda_utils" in name:
        return "triton-host"
    if re.match(r"triton_(per|poi|red|tem)_", name):
        return "inductor"
    if "flashinfer" in line.lower():
        return "flashinfer"
    return "other"


def family_of_path(path: str) -> str:
    parts = path.lstrip("./").split("/")
    if parts[0] == "cache":
        return "deepgemm"
    if parts[0] in ("tvm-ffi", "sglang-jit"):
        return "sglang-jit"
    if parts[0] == "triton":
        name = parts[-1]
        if name.endswith(".so"):
            return "triton-host"
        if "fused_moe_kernel" in name:
            return "triton-moe"
        if name.startswith("__grp__") and name.removeprefix("__grp__").removesuffix(".json") in PATH_KERNELS:
            return "triton-path"
        if name.startswith("triton_") or "__grp__triton_" in name:
            return "inductor"
        return "other"
    if parts[0] == "inductor":
        return "inductor"
    if parts[0] == "flashinfer":
        # <version>[/<arch>]/flashinfer_jit.log: FlashInfer's own log, opened by every import of flashinfer.jit (a
        # carried cache has none until the job imports it); a compile adds <version>/<arch>/cached_ops/<module>/
        return "" if parts[-1] == "flashinfer_jit.log" and len(parts) in (3, 4) else "flashinfer"
    if parts[0] == "dgprecompile":
        return ""  # the index and the launch's own records
    return "other"


# C++ DeepGEMM's refused compile: its runtime runs the nvcc stand-in launch names (DG_JIT_NVCC_COMPILER) and keeps
# its output, so the job's stderr has only DeepGEMM's own assertion; launch's closing line names the kernel
DEEPGEMM_KERNEL = re.compile(r"\bsm\d+\w*_impl<")
# C++ DeepGEMM 0.1.x says the first; DeepJIT (sgl-deep-gemm 0.2.x) asserts on the refusing stand-in's exit status,
# launch's REFUSED_EXIT (launch/hook/_dgprecompile_hook.py)
DEEPGEMM_REFUSED = ("NVCC compilation failed", "command failed with exit code 97")
# SGLang's own strict switch (0.5.20 on), which launch sets: its loader raises naming the module it lacks
SGLANG_REFUSED = "SGLANG_CRASH_ON_JIT_COMPILE forbids compiling"


def refusals(stderr: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    text = Path(stderr).read_text(errors="replace") if Path(stderr).is_file() else ""
    for line in text.splitlines():
        if line.startswith("dgprecompile strict mode:"):
            out.setdefault(family_of_message(line), []).append(line[:240])
        elif line.startswith("error: strict mode refused") and DEEPGEMM_KERNEL.search(line):
            at = DEEPGEMM_KERNEL.search(line).start()
            out.setdefault("deepgemm", []).append(f"launch: refused DeepGEMM kernel {line[at:at + 160]}")
    return out


def summarise(args) -> int:
    def say(line: str) -> None:  # every line of this run's summary starts with --label (the deleted-entry run's)
        print(f"{args.label} {line}" if args.label else line)

    driver = json.loads(Path(args.driver).read_text()) if Path(args.driver).is_file() else {}
    refused = refusals(args.stderr)
    others = 0
    for name, fail in sorted(driver.get("failed", {}).items()):
        fam = family_of_message(fail["error"])
        say(f"driver: {name} failed at {fail.get('count', 1)} m, first m={fail['m']}: {fail['error'][:200]}")
        if any(m in fail["error"] for m in DEEPGEMM_REFUSED) and refused.get("deepgemm"):
            continue  # DeepGEMM's own reaction to the refusing nvcc stand-in that launch named above
        if "strict mode" in fail["error"] or SGLANG_REFUSED in fail["error"]:
            if not refused.get(fam):
                refused.setdefault(fam, []).append(fail["error"])
        else:
            others += 1
    say(f"driver failures other than refusals: {others}")
    new: dict[str, list[str]] = {}
    if args.before and args.after:
        before = set(Path(args.before).read_text().splitlines())
        for path in sorted(set(Path(args.after).read_text().splitlines()) - before):
            fam = family_of_path(path)
            if fam:
                new.setdefault(fam, []).append(path)
    compiled = driver.get("dynamo", {}).get("inductor_compiled") or driver.get("dynamo", {}).get("compiled")
    if compiled:  # inductor's own FX graph cache misses (older drivers: Dynamo's frames)
        new.setdefault("inductor", []).append(f"{compiled} torch.compile graph(s) compiled")
    say(f"driver: {len(driver.get('calls', {}))} modules, {sum(driver.get('calls', {}).values())} calls, "
          f"{driver.get('ms')} m in {driver.get('seconds')} s; stand-ins: {'; '.join(driver.get('standins', []))}")
    calls = driver.get("calls", {})
    decode = {k: v for k, v in calls.items() if k.startswith("decode.")}
    say(f"decode step: {sum(decode.values())} calls; sampler {calls.get('decode.sampler', 0)}, clamp_position "
        f"{calls.get('decode.clamp_position', 0)}, layers' modules {sum(v for k, v in decode.items() if '.layers.' in k)}")
    for fam in FAMILIES:
        say(f"family {fam}: refused {len(refused.get(fam, []))}, new {len(new.get(fam, []))}")
        for line in (refused.get(fam, []) + new.get(fam, []))[:3]:
            say(f"  {line}")
    if args.deleted:
        for line in Path(args.deleted).read_text().splitlines():
            fam, path = line.split(" ", 1)
            ok = bool(refused.get(fam))
            say(f"deleted {fam} {'refused by name' if ok else 'NOT refused'}")
    return 0


def pick_victims(root: str) -> int:
    index = json.loads((Path(root) / "dgprecompile" / "index.json").read_text())
    # a DeepGEMM kernel with 16-row blocks (what SGLang's dense GEMMs run for the smallest m), else the first one
    kernels = sorted(index.get("kernels", {}).items(), key=lambda kv: (".BM16." not in kv[0], kv[1]["entry"]))
    if kernels:
        rec = kernels[0][1]
        print(f"deepgemm {rec.get('area', 'cache')}/{rec['entry']}")
    # an SGLang JIT module that no other family's path needs first: the activation quantisation runs before every
    # FP8 GEMM (DeepGEMM's and the Triton MoE's), so deleting it would hide the other two victims' refusals; the
    # rope module runs only in the attention's q/k norm + rope
    modules = sorted(Path(root).glob("tvm-ffi/*")) + sorted(Path(root).glob("sglang-jit/*/*"))
    jit = next((p for p in modules if "rope" in p.name), None) or \
        next((p for p in modules if "quant" not in p.name and "all_reduce" not in p.name), None)
    if jit is not None:
        print(f"sglang-jit {jit.relative_to(root)}")
    moe = next((p.parent for p in sorted(Path(root).glob("triton/*/__grp__fused_moe_kernel.json"))), None)
    if moe is not None:
        print(f"triton-moe {moe.relative_to(root)}")
    # one FX graph of a planned torch.compile item (the vocab-parallel mask's where planned: every forward runs it)
    records = sorted(index.get("inductor", {}).items(), key=lambda kv: "vocab_mask" not in kv[0])
    graph = next((e for _, rec in records for e in sorted(rec.get("entries", [])) if e.startswith("inductor/fxgraph/")),
                 None)
    if graph is not None:
        print(f"inductor {graph}")
    # a FlashInfer module the driver runs: the decode step's sampling, which shares no call with another victim,
    # else DeepSeek's fused routing (model_proof.sh deletes that one in a run of its own: it runs before the Triton
    # MoE victim in the same MoE call); never the all-reduce fusion, which one GPU does not run
    modules = sorted(index.get("flashinfer", {}).items(), key=lambda kv: "sampling" not in kv[0])
    fused = next((e for item, rec in modules if "dsv3_fused_routing" in item or "sampling" in item
                  for e in rec.get("entries", [])), None)
    if fused is not None:
        print(f"flashinfer {fused}")
    return 0


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--driver")
    p.add_argument("--stderr")
    p.add_argument("--before")
    p.add_argument("--after")
    p.add_argument("--deleted")
    p.add_argument("--pick-victims")
    p.add_argument("--label", default="", help="a word put before every summary line")
    p.add_argument("--path-kernels", default="", help="SGLang's model-path Triton kernels, comma-separated")
    args = p.parse_args(argv)
    PATH_KERNELS.update(k for k in args.path_kernels.split(",") if k)
    if args.pick_victims:
        return pick_victims(args.pick_victims)
    return summarise(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
