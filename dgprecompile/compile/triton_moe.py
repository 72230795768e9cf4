"""GPU-free Triton warm of SGLang's own fused-MoE path: its ``fused_moe_kernel`` instances, compiled by Triton's
own compiler for an sm_90 target on a machine without a GPU, under the cache keys Triton's own JIT computes.

How (one worker process; no threads): SGLang's ``fused_experts_impl`` (what its Triton MoE runner calls) runs for
every planned m on ``meta`` tensors (shapes, dtypes and strides of the real call, no storage, no compute), with

* Triton's active driver set to :class:`CompileOnlyDriver` (device 0, the planned GPUTarget) and every launch
  ``kernel[grid](...)`` turned into Triton's own ``run(..., warmup=True)``: Triton binds the arguments, computes
  its specialisation and cache key, looks in ``TRITON_CACHE_DIR`` and compiles on a miss, exactly as at run time,
  and launches nothing;
* SGLang's config choice (``try_get_optimal_moe_config``: its ``configs/triton_<ver>/`` JSON for the device name,
  else its built-in default) asked with the planned device name;
* named STAND-INS for what is not JIT and cannot run here: sgl-kernel's AOT ``moe_align_block_size`` (it only fills
  SGLang's buffers, whose sizes SGLang computes from shapes) and the server-wide flags object (SGLang's own
  ServerArgs with its field defaults, unresolved; no TP group where fused_moe asks for one, 0.5.16-0.5.23); the
  planned arch is stated to SGLang's JIT utils with its own override (0.5.19-0.5.23's PDL constexprs).

Which release: the installed sglang's, its package from data/triton_moe.yaml (:func:`moe_package`; 0.5.9-0.5.10
keep the path in srt/layers/moe/fused_moe_triton), its kernel module from SGLang's own import (:func:`kernels_module`).

On a CPU-only machine SGLang takes its non-CUDA branches around the kernel (activation quantisation through its
Triton ``per_token_group_quant_fp8``, Triton ``moe_sum_reduce``); those kernels are not what a GPU runs, so they are
not compiled (:func:`only_kernel`) and only ``fused_moe_kernel`` entries are warmed. The keys are proved by a
GPU run (tests/gpu/triton_moe_proof.sh), never by this module's own output.

Run: ``python -m dgprecompile.compile.triton_moe --experts 20 --global-experts 160 --hidden 6144
--intermediate 2560 --topk 8 --m 1-8192 --cache-dir ROOT`` (prints one JSON report on stdout). Triton writes into
``ROOT/triton`` (the area `launch` points TRITON_CACHE_DIR at) and every whole ``fused_moe_kernel`` entry there is
filed in the cache index, so verify/pack/push/pull carry it and a strict launch refuses any other Triton compile.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from typing import Any

from dgprecompile.host import lifeline

MOE = "sglang.srt.layers.moe.moe_runner.triton_utils"  # 0.5.14 on; per release: moe_package()
KERNEL = "fused_moe_kernel"
_HELD: list = []  # context managers entered for the whole process


class CompileOnlyDriver:
    """A Triton driver for a machine with no GPU: it names the target and device 0, and nothing else."""

    def __init__(self, capability: int = 90, warp_size: int = 32):  # 32: what Triton's CUDA driver reports
        from triton.backends.compiler import GPUTarget

        self.target = GPUTarget("cuda", capability, warp_size)

    def is_active(self) -> bool:
        return True

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def get_current_target(self):
        return self.target

    def get_active_torch_device(self):
        import torch

        return torch.device("meta")


def compile_only(capability: int = 90) -> None:
    """Make every Triton launch in this process a compile (Triton's own warmup path) for ``capability``."""
    from triton.runtime import driver, jit

    driver.set_active(CompileOnlyDriver(capability))

    def getitem(self, grid):
        return lambda *args, **kwargs: self.run(*args, grid=grid, warmup=True, **kwargs)

    jit.KernelInterface.__getitem__ = getitem


def only_kernel(name: str = KERNEL) -> bool:
    """Compile no Triton kernel but ``name`` in this process (``fused_moe_kernel`` for the MoE warm: the others on
    its path are SGLang's non-CUDA branches, its Triton per_token_group_quant_fp8 and moe_sum_reduce, which a GPU
    server does not run, compiled for nothing and filed nowhere). Triton's own ``knobs.runtime.jit_cache_hook`` is
    asked before every compile; answering True skips it (the launch is a warm-up: nothing runs). False where this
    Triton has no hook (they are compiled then, as before)."""
    from triton import knobs

    runtime = getattr(knobs, "runtime", None)
    if runtime is None or not hasattr(runtime, "jit_cache_hook"):
        return False

    def skip_others(*, fn, **_) -> bool:
        return getattr(fn, "name", name) != name

    runtime.jit_cache_hook = skip_others
    return True


def watch_lookups() -> set[str]:
    """The cache entries Triton's compile() looks up in this process (each its cache manager's key, the entry's
    directory name), found or compiled: the entries these calls use. Only observes; Triton's own lookup runs."""
    from triton.compiler import compiler

    seen: set[str] = set()
    real = compiler.get_cache_manager

    def get_cache_manager(key):
        manager = real(key)
        seen.add(manager.key)
        return manager

    compiler.get_cache_manager = get_cache_manager
    return seen


def moe_align_standin(topk_ids, num_experts, block_size, sorted_ids, expert_ids, num_tokens_post_pad, *rest):
    """STAND-IN for sgl-kernel's AOT ``moe_align_block_size`` (not JIT): fills SGLang's buffers in torch.

    On meta tensors (the GPU-free warm) there is nothing to fill; on a GPU (the proof) it computes the op's
    outputs: token indices grouped by expert, each group padded to ``block_size`` with the index ``numel``."""
    import torch

    if topk_ids.device.type == "meta":
        return
    flat = topk_ids.flatten().to(torch.int64)
    numel, experts = flat.numel(), num_experts - 1
    valid = flat >= 0
    keyed = torch.where(valid, flat, torch.full_like(flat, experts))  # filtered (-1) tokens go last, unused
    counts = torch.bincount(keyed, minlength=experts + 1)[:experts]
    padded = (counts + block_size - 1) // block_size * block_size
    starts = torch.cumsum(padded, 0) - padded
    order = torch.argsort(keyed, stable=True)
    ordered = keyed[order]
    keep = ordered < experts
    order, ordered = order[keep], ordered[keep]
    first = torch.cumsum(counts, 0) - counts
    pos = starts[ordered] + (torch.arange(order.numel(), device=flat.device) - first[ordered])
    sorted_ids.fill_(numel)
    sorted_ids[pos] = order.to(sorted_ids.dtype)
    blocks = padded // block_size
    expert_ids.fill_(-1)
    expert_ids[: int(blocks.sum())] = torch.repeat_interleave(
        torch.arange(experts, device=flat.device, dtype=expert_ids.dtype), blocks)
    num_tokens_post_pad.fill_(int(padded.sum()))


def defaults_standin():
    """STAND-IN for a resolved ServerArgs where SGLang publishes its config as a runtime context (0.5.23:
    srt/runtime_context.py publish -> ``server_args.resolve_once()`` at :1552, then its namespaces projected from
    the object's fields, :1031-1044): SGLang's own ServerArgs class with its field defaults and its resolution
    skipped (it loads the model's HF config; a warm has no model). The leaves this path reads are plain defaults,
    all off: exec.moe.enable_fused_moe_sum_all_reduce (fused_moe.py:635), exec.deterministic
    .enable_deterministic_inference (fused_moe_triton_config.py:72, :190)."""
    from sglang.srt.server_args import ServerArgs

    class DefaultsUnresolved(ServerArgs):
        def resolve_once(self) -> None:
            """STAND-IN: no resolution (see defaults_standin)."""

    return DefaultsUnresolved(model_path="unresolved")


def field_defaults_standin():
    """STAND-IN for 0.5.14's global ServerArgs (it stores the object and reads its flags): SGLang's own ServerArgs
    with every field at its declared default and ``__post_init__`` not run (it loads the model's HF config; a warm
    has no model). The flags this path reads are plain booleans, False by default: enable_fused_moe_sum_all_reduce
    (fused_moe.py:490-496, the down projection's FUSE_SUM_ALL_REDUCE constexpr: a None here is another Triton key
    than the server's False, the miss the independent proof found) and enable_deterministic_inference
    (fused_moe_triton_config.py:72, :173). A server command that sets the first is refused by plan."""
    import dataclasses

    from sglang.srt.server_args import ServerArgs

    args = object.__new__(ServerArgs)
    for f in dataclasses.fields(ServerArgs):
        if f.default is not dataclasses.MISSING:
            value = f.default
        elif f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
        else:  # model_path, the one field without a default
            value = "unresolved"
        object.__setattr__(args, f.name, value)
    return args


def publish_standins() -> None:
    """The release's server-args stand-in, published: a defaults ServerArgs where publishing resolves it and
    projects its fields into a runtime context (its ServerArgs has ``resolve_once``), else
    :func:`field_defaults_standin` (0.5.9-0.5.18 store the object, or project it unresolved, and read its flags)."""
    from sglang.srt import server_args

    if not hasattr(server_args.ServerArgs, "resolve_once"):
        server_args.set_global_server_args_for_scheduler(field_defaults_standin())
        return
    server_args.set_global_server_args_for_scheduler(defaults_standin())


def state_arch(capability: int) -> None:
    """Where SGLang asks its JIT utils for the GPU's arch (0.5.23: is_arch_support_pdl, cached once, picks the
    kernel's PDL constexprs USE_GDC/GDC_EARLY, kernels/ops/moe/fused_moe_triton_kernels.py:1051-1053), state the
    planned one with SGLang's own override_jit_cuda_arch (kernels/jit/utils/arch.py:163, "to compile for an arch
    the local GPU is not"), for the whole process: detection finds no GPU here and would answer arch 0."""
    try:
        from sglang.kernels.jit.utils import override_jit_cuda_arch
    except ImportError:  # 0.5.14: no such utils, and its fused_moe_kernel has no PDL constexprs
        return
    stated = override_jit_cuda_arch(capability // 10, capability % 10)
    stated.__enter__()  # never left: the process is the warm
    _HELD.append(stated)  # held: a collected generator would run its restore


def moe_package() -> str:
    """The package of the installed sglang's fused-MoE path (fused_moe, fused_moe_triton_config,
    moe_align_block_size): its release's ``package`` in data/triton_moe.yaml (0.5.9:
    sglang.srt.layers.moe.fused_moe_triton), else the file's ``module`` (0.5.14 on: moe_runner/triton_utils)."""
    from importlib import metadata

    from dgprecompile.runtimes.triton_moe import TRITON_MOE

    try:
        rel = TRITON_MOE.release(metadata.version("sglang"))
    except metadata.PackageNotFoundError:
        rel = None
    return (rel or {}).get("package") or TRITON_MOE.data()["module"]


def kernels_module(fused):
    """The module SGLang's fused_moe imports its launch (invoke_fused_moe_kernel) from, where fused_moe_kernel and
    should_enable_swap_ab live: the MoE package's fused_moe_triton_kernels up to 0.5.15, sglang/kernels/ops/moe/ from
    0.5.16 (data/triton_moe.yaml ``kernels``). Taken from SGLang's own import, so the one its launch reads."""
    return sys.modules[fused.invoke_fused_moe_kernel.__module__]


def no_tp_group(fused) -> None:
    """STAND-IN tp_group=None (a warm has no ranks, so no process groups) where the release's fused_moe asks for the
    TP group around the output's allocation, ``use_symmetric_memory(<tp group>, disabled=...)``: through
    sglang.srt.distributed.get_tp_group() (0.5.16-0.5.20, e.g. 0.5.17 fused_moe.py:528-531; it asserts an initialised
    group, parallel_state.py:1892), else through the runtime context's get_parallel().tp_group (0.5.21-0.5.23,
    0.5.23 fused_moe.py:630). use_symmetric_memory returns a null context without touching the group while
    exec.comm.enable_symm_mem is off (its default; 0.5.17 pynccl_allocator.py:325-331, :160-164; 0.5.23
    pynccl_allocator.py:426-431, :236). Releases that ask for neither (0.5.9-0.5.15) are left as they are."""
    if hasattr(fused, "get_tp_group"):
        fused.get_tp_group = lambda: None
    elif hasattr(fused, "get_parallel"):
        fused.get_parallel().override_permanently(tp_group=None)


def load_sglang(device_name: str | None, capability: int):
    """SGLang's MoE modules with the stand-ins above in place; returns (fused_moe module, config module)."""
    publish_standins()
    state_arch(capability)
    package = moe_package()
    align = importlib.import_module(f"{package}.moe_align_block_size")  # the package's name is the function
    align.sgl_moe_align_block_size = moe_align_standin
    config = importlib.import_module(f"{package}.fused_moe_triton_config")
    if device_name is not None:  # SGLang's own get_device_name needs a GPU; the plan names the one it runs on
        config.get_device_name = lambda device_id=0: device_name
    fused = importlib.import_module(f"{package}.fused_moe")
    no_tp_group(fused)
    return fused, config


def swap_ab_as_on_gpu(capability: int, fused=None) -> None:
    """STAND-IN for one decision SGLang takes from the GPU it runs on: its ``should_enable_swap_ab`` (0.5.9 and 0.5.14
    fused_moe_triton_kernels.py:61-68, 0.5.17 sglang/kernels/ops/moe/fused_moe_triton_kernels.py:61-68, 0.5.23 :62-69;
    the launch asks it for FP8 weights, 0.5.17 :753, 0.5.23 :888) swaps the FP8 GEMM's operands on a CUDA sm_90+ GPU
    when the config's BLOCK_SIZE_M < 64 and BLOCK_SIZE_N >= 64 (a tuned config's small-m blocks), and never without
    CUDA, so a GPU-free warm would compile the unswapped kernel the GPU never runs. Here it answers for the planned
    ``capability`` (batch-invariant mode off, as the planned server runs), in the module the launch reads it from
    (:func:`kernels_module`)."""
    if fused is None:
        fused = importlib.import_module(f"{moe_package()}.fused_moe")
    kernels = kernels_module(fused)
    if hasattr(kernels, "should_enable_swap_ab"):
        kernels.should_enable_swap_ab = lambda block_m, block_n: capability >= 90 and block_m < 64 and block_n >= 64


def make_weights(*, experts: int, hidden: int, intermediate: int, device: str, block: tuple[int, int] = (128, 128)):
    """The layer's FP8 expert weights (w13, w2) and their per-block scales, as SGLang's Fp8MoEMethod holds them."""
    import torch

    fp8 = torch.float8_e4m3fn
    w1 = torch.empty(experts, 2 * intermediate, hidden, dtype=fp8, device=device)
    w2 = torch.empty(experts, hidden, intermediate, dtype=fp8, device=device)
    if device != "meta":
        for w in (w1, w2):
            for e in range(experts):
                w[e].copy_((torch.randn(w.shape[1:], device=device) * 0.1).to(fp8))
    s1 = torch.ones(experts, -(-2 * intermediate // block[0]), -(-hidden // block[1]), device=device) * 0.01
    s2 = torch.ones(experts, -(-hidden // block[0]), -(-intermediate // block[1]), device=device) * 0.01
    return w1, w2, s1, s2


def moe_inputs(m: int, *, experts: int, hidden: int, topk: int, device: str):
    """``m`` tokens' activations and their top-k routing (weights, expert ids) for one MoE layer."""
    import torch

    x = (torch.empty if device == "meta" else torch.randn)(m, hidden, dtype=torch.bfloat16, device=device)
    if device == "meta":
        ids = torch.empty(m, topk, dtype=torch.int32, device=device)
    else:
        ids = torch.rand(m, experts, device=device).argsort(dim=1)[:, :topk].to(torch.int32).contiguous()
    weights = torch.ones(m, topk, dtype=torch.float32, device=device) / topk
    return x, weights, ids


def parse_ms(text: str) -> list[int]:
    """``1-64,100-8192:7,8192``: single values and inclusive ranges, with an optional step."""
    out: set[int] = set()
    for part in text.split(","):
        span, _, step = part.partition(":")
        lo, _, hi = span.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1, int(step or 1)))
    return sorted(out)


def triton_entries(cache_dir: str) -> dict[str, list[str]]:
    """Each Triton cache entry's kernels, by its group files' names (runtimes/captured.py group_kernels: not imported
    here, in the job's Python, where the runtimes' registry and its yaml and jsonschema are not needed)."""
    from pathlib import Path

    out = {}
    for d in sorted(p for p in Path(cache_dir).iterdir() if p.is_dir()) if os.path.isdir(cache_dir) else []:
        out[d.name] = sorted(p.name[len("__grp__"):-len(".json")] for p in d.glob("__grp__*.json"))
    return out


def check_bound(config, args: argparse.Namespace) -> None:
    """Refuse a plan whose m bound is below the largest m of the tuned configs SGLang finds here for the shape (its
    own get_moe_configs, up and down: e.g. a config dir of the job's own, SGLANG_MOE_CONFIG_DIR): above the bound
    the plan warms one m per residue class only, which holds only where the config no longer changes with m."""
    found = [config.get_moe_configs(args.experts, args.intermediate, "fp8_w8a8", 128, 128, down_moe=down)
             for down in (False, True)]
    largest = max((max(c) for c in found if c), default=0)
    if largest > args.m_bound:
        raise SystemExit(f"SGLang's tuned config for E={args.experts},N={args.intermediate} on {args.device_name} "
                         f"names m up to {largest}, above the plan's bound {args.m_bound}: plan again here "
                         "(dgprecompile read the configs the release ships)")


def warm(args: argparse.Namespace) -> dict[str, Any]:
    from dgprecompile.cache.triton_moe import file_warmed
    from dgprecompile.runtimes import family_for_area

    triton_dir = str(family_for_area("triton").area_dir(args.cache_dir))
    os.environ["TRITON_CACHE_DIR"] = triton_dir
    # imported first: some SGLang modules probe the driver at import
    fused, config = load_sglang(args.device_name, args.capability)
    swap_ab_as_on_gpu(args.capability, fused)
    if args.m_bound:
        check_bound(config, args)
    compile_only(args.capability)
    only_kernel()
    used = watch_lookups()
    before = triton_entries(triton_dir)
    t0 = time.time()
    configs = {}
    w1, w2, s1, s2 = make_weights(experts=args.experts, hidden=args.hidden, intermediate=args.intermediate,
                                  device="meta")
    for m in parse_ms(args.m):
        x, weights, ids = moe_inputs(m, experts=args.experts, hidden=args.hidden, topk=args.topk, device="meta")
        # what SGLang's fused_experts calls (its torch custom-op wrapper has no meta kernel)
        fused.fused_experts_impl(x, w1, w2, weights, ids, use_fp8_w8a8=True, w1_scale=s1, w2_scale=s2,
                                 block_shape=[128, 128], filter_expert=args.global_experts != args.experts)
        cfg, (down, _) = config.try_get_optimal_moe_config(
            (args.experts, 2 * args.intermediate, args.hidden), (args.experts, args.hidden, args.intermediate),
            args.topk, "fp8_w8a8", m, block_shape=[128, 128], return_down_config=True)
        configs.setdefault(json.dumps(cfg, sort_keys=True), []).append(m)
    after = triton_entries(triton_dir)
    new = {k: v for k, v in after.items() if k not in before}
    # this process's own entries only: the item's other chunks write into the same area at the same time, and an
    # entry another chunk is still writing is not whole yet (the DeepSeek-V3 item's 15 chunks met one on the H200)
    mine = sorted(k for k in used if KERNEL in after.get(k, []))
    warmed = [k for k in mine if k in new]
    not_whole = file_warmed(args.cache_dir, mine)
    import triton

    return {"triton": triton.__version__, "capability": args.capability, "device_name": args.device_name,
            "seconds": round(time.time() - t0, 1), "ms": len(parse_ms(args.m)),
            "configs": [{"config": json.loads(c), "m": [ms[0], ms[-1]], "count": len(ms)} for c, ms in configs.items()],
            "warmed": warmed, "not_whole": not_whole, "cache_dir": args.cache_dir,
            "entries": mine,  # this item's, found or compiled
            "other_new": {k: names for k, names in new.items() if KERNEL not in names},
            "already": sorted(k for k, names in before.items() if KERNEL in names)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dgprecompile.compile.triton_moe", description=__doc__.split("\n")[0])
    p.add_argument("--experts", type=int, required=True, help="local experts per rank (E)")
    p.add_argument("--global-experts", type=int, required=True)
    p.add_argument("--hidden", type=int, required=True)
    p.add_argument("--intermediate", type=int, required=True, help="per-expert intermediate size on a rank")
    p.add_argument("--topk", type=int, required=True)
    p.add_argument("--m", default="1-8192", help="token counts, e.g. 1-4096,4097-4112,8192")
    p.add_argument("--m-bound", type=int, default=0, help="the plan's bound B (checked against SGLang's configs)")
    p.add_argument("--capability", type=int, default=90)
    p.add_argument("--device-name", default="NVIDIA H200")
    p.add_argument("--cache-dir", required=True, help="the dgprecompile cache root (Triton writes into <root>/triton)")
    args = p.parse_args(argv)
    lifeline.end_with_warm()  # a chunk warm started (compile/triton_chunks.py): it and its compilers end with warm
    os.makedirs(args.cache_dir, exist_ok=True)
    from dgprecompile.compile import triton_host

    # Triton's host modules (cuda_utils, each kernel's launcher), built GPU-free: compile/triton_host.py
    signatures = triton_host.watch_kernels()
    report = warm(args)
    report["host_modules"] = triton_host.warm_host_modules(args.cache_dir, report["entries"], signatures)
    json.dump(report, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
