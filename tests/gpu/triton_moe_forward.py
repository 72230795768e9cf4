"""On the H200: SGLang 0.5.14's own Triton MoE path (``fused_experts``, the Triton runner's call) for the 480B
tp8/ep8 rank's local experts (E=20 of 160, hidden 6144, intermediate 2560, top-8, FP8 W8A8, 128x128 blocks) at
every m given, with random FP8 weights; prints one JSON line (ms, seconds, a checksum of the last output).

STAND-INS, named as such in every record (sgl-kernel's ahead-of-time ops are not carried to the GPU machine and
are not JIT): ``moe_align_block_size`` (dgprecompile.compile.triton_moe.moe_align_standin, same outputs in torch)
and ``moe_sum_reduce`` (torch sum over top-k times the scaling factor). Everything else is SGLang's own code:
its config choice, its Triton ``fused_moe_kernel`` launches, its JIT activation and FP8 quantisation modules, and
(0.5.19+) its combine's choice of the Triton ``_moe_sum_reduce_kernel``, whose calls are counted (``calls``).
usage: python3 tests/gpu/triton_moe_forward.py 1-1024,2048,8192
"""

from __future__ import annotations

import json
import sys
import time


def moe_sum_reduce_standin(x, out, routed_scaling_factor):
    """STAND-IN for sgl-kernel's AOT moe_sum_reduce: out = x.sum(top-k) * routed_scaling_factor."""
    out.copy_((x.float().sum(dim=1) * routed_scaling_factor).to(out.dtype))


def main() -> int:
    import torch

    from dgprecompile.compile.triton_moe import load_sglang, make_weights, moe_inputs, parse_ms

    major, minor = torch.cuda.get_device_capability()
    # SGLang's own get_device_name on the real GPU; the arch stated is this GPU's own
    fused, _config = load_sglang(None, major * 10 + minor)
    fused.moe_sum_reduce = moe_sum_reduce_standin
    calls = {"moe_sum_reduce_triton": 0}  # how often SGLang's combine chose its Triton sum (0.5.19+, m <= 32, sm_90+)
    own_sum = getattr(fused, "moe_sum_reduce_triton", None)
    if own_sum is not None:
        def counted_sum(*args, **kwargs):  # a pass-through counter around SGLang's own function
            calls["moe_sum_reduce_triton"] += 1
            return own_sum(*args, **kwargs)

        fused.moe_sum_reduce_triton = counted_sum
    from sglang.srt.layers.moe.moe_runner import MoeRunnerConfig

    experts, hidden, inter, topk = 20, 6144, 2560, 8
    cfg = MoeRunnerConfig(num_experts=160, num_local_experts=experts, hidden_size=hidden,
                          intermediate_size_per_partition=inter, top_k=topk, params_dtype=torch.bfloat16,
                          inplace=False)
    w1, w2, s1, s2 = make_weights(experts=experts, hidden=hidden, intermediate=inter, device="cuda")
    ms = parse_ms(sys.argv[1])
    t0 = time.time()
    check = 0.0
    for m in ms:
        x, weights, ids = moe_inputs(m, experts=experts, hidden=hidden, topk=topk, device="cuda")
        out = fused.fused_experts(x, w1, w2, (weights, ids, None), cfg, use_fp8_w8a8=True, w1_scale=s1,
                                  w2_scale=s2, block_shape=[128, 128])
        check = float(out.float().abs().mean())
    torch.cuda.synchronize()
    print(json.dumps({"ms": len(ms), "m_range": [ms[0], ms[-1]], "seconds": round(time.time() - t0, 1),
                      "last_mean_abs": check, "finite": bool(torch.isfinite(out).all()), "calls": calls}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
