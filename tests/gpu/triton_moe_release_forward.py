"""On a GPU: the installed sglang release's own fused-MoE path (``fused_experts_impl``, what its Triton runner's
``fused_experts`` calls, the same call the GPU-free warm makes) for one MoE shape at every m given, on real tensors,
so that Triton compiles (or finds) the ``fused_moe_kernel`` instances a server of that release launches; prints one
JSON line (ms, seconds, the STAND-INS called). tests/gpu/triton_moe_release_proof.sh runs it on the warm's cache.

STAND-INS, named as such in the output (sgl-kernel's ahead-of-time ops are not carried to the GPU machine and are
not JIT): ``moe_align_block_size`` (dgprecompile.compile.triton_moe.moe_align_standin, the same outputs in torch:
the kernel reads them as indices) and every other sgl-kernel function the path calls (0.5.9-0.5.10: the FP8
activation quantisation's fill, silu_and_mul, moe_sum_reduce; later releases fewer): a no-op. SGLang allocates
their outputs itself, so the kernel's arguments keep their shapes, dtypes and strides (what Triton's key holds);
their values are then not the server's, and the output's values mean nothing.
usage: python3 tests/gpu/triton_moe_release_forward.py --experts 20 --global-experts 160 --hidden 6144
       --intermediate 2560 --topk 8 --ms 1-8192
"""

from __future__ import annotations

import argparse
import json
import sys
import time

CALLED: dict[str, int] = {}


def noop_standin(name: str):
    def standin(*args, **kwargs):
        """STAND-IN for an sgl-kernel op (see the module docstring): records the call, fills nothing."""
        CALLED[name] = CALLED.get(name, 0) + 1
    return standin


def replace_sgl_kernel_standins() -> list[str]:
    """Every sglang module attribute that is a tests/standins sgl_kernel Thing becomes a named no-op."""
    import _dgp_standin

    replaced = []
    for mod_name, mod in list(sys.modules.items()):
        if not mod_name.startswith("sglang.") or mod is None:
            continue
        for attr, value in list(vars(mod).items()):
            if isinstance(value, _dgp_standin.Thing) and repr(value).startswith("<stand-in sgl_kernel"):
                setattr(mod, attr, noop_standin(f"{mod_name}.{attr}"))
                replaced.append(f"{mod_name}.{attr}")
    return sorted(replaced)


def main() -> int:
    p = argparse.ArgumentParser()
    for name in ("experts", "global-experts", "hidden", "intermediate", "topk"):
        p.add_argument(f"--{name}", type=int, required=True)
    p.add_argument("--ms", required=True)
    args = p.parse_args()
    import torch

    from dgprecompile.compile.triton_moe import load_sglang, make_weights, moe_inputs, parse_ms

    major, minor = torch.cuda.get_device_capability()
    # SGLang's own get_device_name and arch detection on the real GPU (no device name stated)
    fused, _config = load_sglang(None, major * 10 + minor)
    replaced = replace_sgl_kernel_standins()
    w1, w2, s1, s2 = make_weights(experts=args.experts, hidden=args.hidden, intermediate=args.intermediate,
                                  device="cuda")
    ms = parse_ms(args.ms)
    t0 = time.time()
    for m in ms:
        x, weights, ids = moe_inputs(m, experts=args.experts, hidden=args.hidden, topk=args.topk, device="cuda")
        fused.fused_experts_impl(x, w1, w2, weights, ids, use_fp8_w8a8=True, w1_scale=s1, w2_scale=s2,
                                 block_shape=[128, 128], filter_expert=args.global_experts != args.experts)
    torch.cuda.synchronize()
    import sglang
    import triton

    print(json.dumps({"sglang": getattr(sglang, "__version__", "?"), "triton": triton.__version__, "ms": len(ms),
                      "m_range": [ms[0], ms[-1]], "seconds": round(time.time() - t0, 1),
                      "standins_replaced": replaced, "standins_called": CALLED}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
