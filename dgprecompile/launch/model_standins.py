"""STAND-INS for sgl-kernel's ahead-of-time ops on the paths the independent live proof drives, in torch.

sgl-kernel (1.1 GB, prebuilt, no JIT) is not carried to the GPU machine; where the job's ``sgl_kernel`` is the
test stand-in package (tests/standins: every attribute raises when called), these ops get torch code that fills the
same outputs (shapes, dtypes, valid expert ids), so SGLang's own modules around them run and every JIT family they
reach is exercised for real. With the real sgl-kernel installed nothing is replaced. Each op used is named in the
proof's report.
"""

from __future__ import annotations

import sys


def rmsnorm(input, weight, eps=1e-6, out=None, enable_pdl=None):
    import torch

    x = input.float()
    y = (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(input.dtype)
    if out is None:
        return y
    out.copy_(y)
    return out


def fused_add_rmsnorm(input, residual, weight, eps=1e-6, enable_pdl=None):
    residual.add_(input)
    input.copy_(rmsnorm(residual, weight, eps))


def topk_softmax(topk_weights, topk_ids, gating_output, renormalize=False, *rest, **kwargs):
    import torch

    probs = torch.softmax(gating_output.float(), dim=-1)
    w, i = probs.topk(topk_weights.shape[-1], dim=-1)
    if renormalize:
        w = w / w.sum(-1, keepdim=True)
    topk_weights.copy_(w)
    topk_ids.copy_(i.to(topk_ids.dtype))


def moe_fused_gate(input_tensor, bias, num_expert_group, topk_group, topk, num_fused_shared_experts=0,
                   routed_scaling_factor=1.0, apply_routed_scaling_factor_on_output=False, *rest, **kwargs):
    """DeepSeek's grouped top-k with a correction bias; with fused shared experts the last column(s) name the
    shared expert slot(s) after the routed experts, as SGLang's fused MoE expects."""
    import torch

    scores = torch.sigmoid(input_tensor.float()) + bias.float()
    routed = topk - num_fused_shared_experts
    w, i = scores.topk(routed, dim=-1)
    w = w / w.sum(-1, keepdim=True)
    if num_fused_shared_experts:
        experts = input_tensor.shape[-1]
        shared = torch.arange(experts, experts + num_fused_shared_experts, device=i.device).expand(i.shape[0], -1)
        i = torch.cat([i, shared], dim=-1)
        w = torch.cat([w, torch.full_like(w[:, :num_fused_shared_experts], 1.0 / routed_scaling_factor)], dim=-1)
    return w.to(torch.float32), i.to(torch.int32)


def moe_sum_reduce(input, output, routed_scaling_factor=1.0, *rest):
    output.copy_((input.float().sum(dim=1) * routed_scaling_factor).to(output.dtype))


def silu_and_mul(input, out=None, *rest, **kwargs):
    import torch

    d = input.shape[-1] // 2
    y = torch.nn.functional.silu(input[..., :d].float()) * input[..., d:].float()
    if out is None:
        return y.to(input.dtype)
    out.copy_(y.to(out.dtype))
    return out


OPS = ("rmsnorm", "fused_add_rmsnorm", "topk_softmax", "moe_fused_gate", "moe_sum_reduce", "silu_and_mul")


def install(report) -> list[str]:
    """Put the torch ops on the stand-in sgl_kernel (before SGLang imports from it); nothing when it is real."""
    try:
        import sgl_kernel
    except ImportError:
        return []
    if not getattr(sgl_kernel, "DGPRECOMPILE_STANDIN", False):
        return []
    from dgprecompile.compile.triton_moe import moe_align_standin

    here = sys.modules[__name__]
    for name in OPS:
        setattr(sgl_kernel, name, getattr(here, name))
    sgl_kernel.moe_align_block_size = moe_align_standin
    names = [*OPS, "moe_align_block_size"]
    report.standins.append("sgl-kernel ahead-of-time ops in torch: " + ", ".join(names))
    return names
