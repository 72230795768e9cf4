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


def dsv3_router_gemm(hidden_states, router_weights, out_dtype=None, *rest, **kwargs):
    import torch

    return torch.nn.functional.linear(hidden_states, router_weights).to(out_dtype or hidden_states.dtype)


def fused_topk_deepseek(gating_output, correction_bias, num_expert_group, topk_group, topk, scaling_factor,
                        topk_weights, topk_ids, renormalize=True, *rest, **kwargs):
    """FlashInfer's DeepSeek routing (a FlashInfer JIT module; FlashInfer is not carried), in place."""
    w, i = moe_fused_gate(gating_output, correction_bias, num_expert_group, topk_group, topk)
    topk_weights.copy_(w * scaling_factor)
    topk_ids.copy_(i)


def mm_m1_16_k7168_n256(hidden_states, weight_t, out, *rest, **kwargs):
    """FlashInfer's DeepSeek router GEMM (sm_100 only in SGLang 0.5.14; a FlashInfer JIT module), into ``out``."""
    out.copy_((hidden_states.float() @ weight_t.float()).to(out.dtype))


OPS = ("rmsnorm", "fused_add_rmsnorm", "topk_softmax", "moe_fused_gate", "moe_sum_reduce", "silu_and_mul", "dsv3_router_gemm")


_LIBS: list = []  # the torch library that defines the ops below (held for the process)


def define_ops() -> None:
    """The sgl_kernel torch ops SGLang registers fake (meta) kernels for at import (sglang 0.5.14 moe/topk.py:1888
    on CUDA: register_fake needs the op defined), defined with the torch code above."""
    import torch

    lib = torch.library.Library("sgl_kernel", "FRAGMENT")
    lib.define("moe_fused_gate(Tensor input_tensor, Tensor bias, int num_expert_group, int topk_group, int topk, "
               "int num_fused_shared_experts=0, float routed_scaling_factor=0, "
               "bool apply_routed_scaling_factor_on_output=False) -> (Tensor, Tensor)")
    lib.impl("moe_fused_gate", moe_fused_gate, "CompositeExplicitAutograd")
    _LIBS.append(lib)


def install(report) -> list[str]:
    """Put the torch ops on the stand-in sgl_kernel (before SGLang imports from it); nothing when it is real."""
    try:
        import sgl_kernel
    except ImportError:
        return []
    if not getattr(sgl_kernel, "DGPRECOMPILE_STANDIN", False):
        return flashinfer_ops(report)
    from dgprecompile.compile.triton_moe import moe_align_standin

    here = sys.modules[__name__]
    for name in OPS:
        setattr(sgl_kernel, name, getattr(here, name))
    sgl_kernel.moe_align_block_size = moe_align_standin
    define_ops()
    names = [*OPS, "moe_align_block_size", "torch.ops.sgl_kernel.moe_fused_gate"]
    report.standins.append("sgl-kernel ahead-of-time ops in torch: " + ", ".join(names))
    return names + flashinfer_ops(report)


def flashinfer_ops(report) -> list[str]:
    """Where flashinfer is a stand-in package too (not carried to the GPU machine): SGLang told so by its own
    switch (SGLANG_IS_FLASHINFER_AVAILABLE=false, utils/common.py is_flashinfer_available), and the FlashInfer ops
    its DeepSeek model imports unconditionally on CUDA (models/deepseek_v2.py:192, moe/topk.py:137) in torch."""
    import importlib
    import os

    try:
        import flashinfer
    except ImportError:
        return []
    if not getattr(flashinfer, "DGPRECOMPILE_STANDIN", False):
        return []
    os.environ["SGLANG_IS_FLASHINFER_AVAILABLE"] = "false"
    importlib.import_module("flashinfer.fused_moe").fused_topk_deepseek = fused_topk_deepseek
    importlib.import_module("flashinfer.gemm").mm_M1_16_K7168_N256 = mm_m1_16_k7168_n256
    report.standins.append("flashinfer (not carried; SGLANG_IS_FLASHINFER_AVAILABLE=false): fused_topk_deepseek, "
                           "mm_M1_16_K7168_N256 in torch")
    return ["flashinfer.fused_moe.fused_topk_deepseek", "flashinfer.gemm.mm_M1_16_K7168_N256"]
