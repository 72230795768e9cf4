"""The independent live proof's driver: SGLang's OWN model blocks for one rank, run on the GPU over every m.

Nothing here is derived from a dgprecompile plan: the plan is what this checks. From the server command alone
(parsed by that SGLang release's own ``prepare_server_args`` into its ``ServerArgs``) and the model's config.json,
it builds the model with SGLang's own loader (``get_model`` with the ``dummy`` load format: SGLang's own modules,
random weights, each quant method's ``process_weights_after_loading``), then runs, for every m of the range, the
embedding, each decoder layer's norms, its attention block's linears, q/k norm and rope, and its MLP or MoE block
(the model class's own module with its own gate, top-k and the MoE runner the arguments choose), and the final
norm; then a decode step at a few batch sizes (:func:`decode_step`: SGLang's own position clamp, the layers at the
batch's width, the LM head and SGLang's own Sampler with top-k / top-p). Run it as the job of a strict ``dgprecompile launch``: a refused compile is an error here (reported per
module, the first m it happened at) and the launch's own checks see every entry a compile would add. The report's
``asks`` are the Triton fused MoE's, the model-path Triton wrappers' and the torch.compile'd functions' calls SGLang
made and the host modules its Triton looked up (launch/model_asks.py): the part of a proof's asks record (issue 43)
that only the job itself can see.

STAND-INS, each named in the report (what one GPU cannot run, or what is not a JIT and is not carried):
* the layer count: SGLang's own ``--json-model-override-args`` keeps the layers up to the first MoE layer (the
  dense prefix and one MoE layer; later layers are the same modules with other weights), and of those only each
  distinct one is driven (DeepSeek-V3's second and third dense layers equal its first: same modules, same shapes);
* the collectives of tp/ep ranks: SGLang's own 1-rank process groups, wrapped so that they report the command's
  tp/ep/attention sizes and ranks 0 (their all-reduce returns its input; the shapes are one rank's of the command);
* the attention core (FA3 / FlashMLA, ahead-of-time kernels of sgl-kernel): not run; its inputs and the o_proj
  after it are;
* a decode step's requests: sequence lengths drawn at random, one sampling parameter set for all (temperature 0.7,
  top-k 20, top-p 0.8: Qwen3-Coder's generation_config.json), the LM head's logits of this rank's vocabulary shard
  (a server gathers the shards first);
* sgl-kernel's ahead-of-time ops where sgl-kernel itself is a stand-in (rmsnorm, fused_add_rmsnorm, topk_softmax,
  moe_fused_gate, moe_align_block_size, moe_sum_reduce, silu_and_mul): torch code with the same outputs' shapes.

usage: python -m dgprecompile.launch.model_driver --sglang-cmd "python -m sglang.launch_server --model-path M
--tp 8 --ep 8" --model-dir DIR_WITH_CONFIG_JSON --m 1-8192 [--report out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from typing import Any

from dgprecompile.launch.model_report import (
    Report,
    cache_files,
    dynamo_counts,
    new_files,
    stop_writes_report,
    write_report,
)


def server_argv(cmd: str, model_dir: str, layers: int | None) -> list[str]:
    """The server command's own arguments (after ``sglang.launch_server`` / ``sglang serve``), with the model path
    pointed at ``model_dir`` and, when ``layers`` is given, SGLang's own layer-count override added."""
    words = shlex.split(cmd)
    for i, w in enumerate(words):
        if w.endswith("launch_server") or w == "serve":
            words = words[i + 1:]
            break
    out, skip = [], False
    for w in words:
        if skip:
            skip = False
            continue
        if w in ("--model-path", "--model"):
            skip = True
            continue
        if w.startswith(("--model-path=", "--model=")):
            continue
        out.append(w)
    override = {}
    if "--json-model-override-args" in out:
        i = out.index("--json-model-override-args")
        override = json.loads(out[i + 1])
        del out[i:i + 2]
    if layers is not None:
        override["num_hidden_layers"] = layers
    return ["--model-path", model_dir, *out, *(["--json-model-override-args", json.dumps(override)] if override else [])]


def layers_to_keep(config: dict) -> int:
    """The dense prefix and the first MoE layer (DeepSeek: first_k_dense_replace; Qwen3-MoE: mlp_only_layers and
    decoder_sparse_step), at most the model's own count."""
    total = int(config.get("num_hidden_layers", 1))
    dense = int(config.get("first_k_dense_replace", 0) or 0)
    only = set(config.get("mlp_only_layers") or [])
    step = int(config.get("decoder_sparse_step", 1) or 1)
    first_moe = next((i for i in range(dense, total) if i not in only and (i + 1) % step == 0), total - 1)
    return min(total, first_moe + 1)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dgprecompile.launch.model_driver", description=__doc__.split("\n")[0])
    p.add_argument("--sglang-cmd", required=True)
    p.add_argument("--model-dir", required=True, help="a folder with the model's config.json (no weights)")
    p.add_argument("--m", default="1-8192")
    p.add_argument("--decode", default="1,8,64", help="a decode step's batch sizes, comma-separated ('': none)")
    p.add_argument("--report", default=None)
    p.add_argument("--local-rank", type=int, default=0,
                   help="the node-local rank this process stands for (SGLang's DeepGEMM precompile: rank 0 only)")
    args = p.parse_args(argv)
    import torch

    from dgprecompile.compile.triton_moe import parse_ms

    report = Report(sync=torch.cuda.synchronize, counts=dynamo_counts)
    before = cache_files()
    t0 = time.time()
    ms, sa, asks = parse_ms(args.m), None, None  # sa and asks are set below; a SIGTERM before then reports neither

    def document(stopped: str | None = None) -> dict:
        out = {"sglang_cmd": args.sglang_cmd, "m": [ms[0], ms[-1]], "ms": len(ms),
               "seconds": round(time.time() - t0, 1),
               "server_args": {k: str(getattr(sa, k, None)) for k in SERVER_ARGS_KEPT} if sa is not None else {},
               "calls": report.calls, "failed": report.failed, "standins": report.standins, "notes": report.notes,
               "times": report.times, "first_call_s": report.first_call_s, "m_done": report.m_done,
               "first_call_counts": report.first_call_counts, "first_call_torch_s": report.first_call_torch_s,
               "new_cache_files": new_files(before, cache_files()), "dynamo": dynamo_counts(),
               "asks": asks.to_dict() if asks is not None else {}, "asks_notes": asks.notes if asks is not None else []}
        if stopped:
            out["stopped"] = stopped
        return out

    if args.report:
        stop_writes_report(args.report, document)
    from dgprecompile.launch import model_asks, model_standins

    asks = model_asks.Asks()
    model_asks.watch_compile(asks)  # before SGLang is imported: its torch.compile decorators record their calls
    model_asks.watch_host(asks)  # before Triton's CUDA driver starts: its cuda_utils, then each kernel's launcher
    model_standins.install(report)
    model, sa = build(args, report)
    model_asks.watch_moe(asks)
    model_asks.watch_path(asks)  # the embedding, router and MoE sum's Triton wrappers (data/triton_path.yaml)
    report.times["build_s"] = round(time.time() - t0, 3)
    with grad_mode(report):
        timed(report, "pass_s", drive, model, ms, report)
        timed(report, "decode_s", decode_step, model, [int(b) for b in args.decode.split(",") if b], report)
        timed(report, "second_forward_s", drive, model, ms[:1], report)  # the first m again: nothing left to load
    out = document()
    print(write_report(args.report, out))
    return 1 if (report.failed or out["new_cache_files"] or out["dynamo"].get("inductor_compiled", 0)) else 0


# the server arguments the report repeats (what the driver made of the command)
SERVER_ARGS_KEPT = ("tp_size", "ep_size", "moe_runner_backend", "moe_a2a_backend", "attention_backend",
                    "disable_shared_experts_fusion")


def timed(report: Report, key: str, fn, *args) -> None:
    """Run fn, its seconds into report.times[key] (the GPU's work included: drive and decode_step synchronize)."""
    t = time.time()
    fn(*args)
    report.times[key] = round(time.time() - t, 3)


def grad_mode(report: Report):
    """SGLang's own grad mode of its scheduler's forward (DynamicGradMode: no_grad unless
    SGLANG_ENABLE_TORCH_INFERENCE_MODE), as a server runs the model."""
    import torch

    try:
        from sglang.srt.utils import DynamicGradMode
    except ImportError:
        report.notes.append("no DynamicGradMode in this release: torch.no_grad")
        return torch.no_grad()
    report.notes.append("SGLang's own DynamicGradMode around the forward")
    return DynamicGradMode()


def build(args, report: Report):
    """SGLang's ServerArgs from the command, its process groups (1 rank, stated sizes), its model (dummy load)."""
    import torch
    from sglang.srt.configs.device_config import DeviceConfig
    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.model_loader import get_model
    from sglang.srt.server_args import prepare_server_args, set_global_server_args_for_scheduler

    with open(os.path.join(args.model_dir, "config.json")) as f:
        config = json.load(f)
    layers = layers_to_keep(config)
    report.standins.append(f"layers: {layers} of {config.get('num_hidden_layers')} (SGLang's "
                           "--json-model-override-args num_hidden_layers: the dense prefix and the first MoE layer)")
    sa = prepare_server_args(server_argv(args.sglang_cmd, args.model_dir, layers))
    set_global_server_args_for_scheduler(sa)
    torch.cuda.set_device(0)
    model_config = ModelConfig.from_server_args(sa)
    from dgprecompile.launch import model_groups

    model_groups.install(sa, model_config, report)
    runtime_init(sa, model_config, report, getattr(args, "local_rank", 0))
    report.standins.append("weights: SGLang's dummy load format (random values, its own post-load processing)")
    model = get_model(model_config=model_config, load_config=LoadConfig(load_format="dummy"),
                      device_config=DeviceConfig("cuda"))
    return model, sa


# What SGLang's scheduler and model runner set up before they load a model (sglang 0.5.14
# managers/scheduler.py:737-759 init_moe_gemm_config; model_executor/model_runner.py:653-660), by module and name:
# a release without one of them is noted, not failed.
RUNTIME_INIT = (("sglang.srt.layers.moe", "initialize_moe_config"),
                ("sglang.srt.layers.quantization.fp8_utils", "initialize_fp8_gemm_config"),
                ("sglang.srt.layers.quantization.fp4_utils", "initialize_fp4_gemm_config"))


def _sglang_own(module: str, name: str, report: Report):
    """SGLang's ``module`` and its function ``name``, or None where this release lacks either (said in a note)."""
    import importlib

    try:
        found = importlib.import_module(module)
        return found, getattr(found, name)
    except (ImportError, AttributeError) as exc:
        report.notes.append(f"{module}.{name}: not in this release ({exc})")
        return None


def scheduler_init(sa, report: Report) -> None:
    """RUNTIME_INIT's functions, each given the server args where it takes them (0.5.14); the runtime-context
    releases (0.5.23) read the published configuration instead and take none."""
    import inspect

    for module, name in RUNTIME_INIT:
        own = _sglang_own(module, name, report)
        if own is None:
            continue
        fn = own[1]
        takes = bool(inspect.signature(fn).parameters)
        fn(*([sa] if takes else []))
        report.notes.append(f"SGLang's own {name}({'server_args' if takes else ''})")


# What SGLang's model runner sets up for DeepGEMM before it loads the model, where its DeepGEMM JIT is on (sglang
# 0.5.14 model_executor/model_runner.py:563-564; 0.5.23 :487-488): the m list its precompile of every m then asks
# for, from the server's own --chunked-prefill-size (0.5.14: the server args; 0.5.23: the published schedule), and
# whether this rank is the node's first (gpu base_gpu_id: the one that compiles them all). Without it the driver's
# precompile ran SGLang's module defaults (1..16384 on every rank), which a --chunked-prefill-size above 8192
# outgrows (2 x its size).
DEEPGEMM_INIT = ("sglang.srt.layers.deep_gemm_wrapper", "update_deep_gemm_config")


def deepgemm_init(sa, report: Report, local_rank: int = 0) -> None:
    """DEEPGEMM_INIT's function, called as the model runner of the node's ``local_rank`` calls it: with its gpu id,
    ``base_gpu_id + local_rank * gpu_id_step`` (SGLang's first rank on a node, gpu ``base_gpu_id``, precompiles every
    m; the others compile what they meet). Only that id is passed: the process still runs on its one GPU."""
    import inspect

    name = DEEPGEMM_INIT[1]
    own = _sglang_own(*DEEPGEMM_INIT, report)
    if own is None:
        return
    wrapper, fn = own
    if not getattr(wrapper, "ENABLE_JIT_DEEPGEMM", False):
        report.notes.append(f"SGLang's {name} not called: its ENABLE_JIT_DEEPGEMM is off here")
        return
    takes = "server_args" in inspect.signature(fn).parameters
    gpu_id = int(getattr(sa, "base_gpu_id", 0) or 0) + local_rank * int(getattr(sa, "gpu_id_step", 1) or 1)
    fn(gpu_id, *([sa] if takes else []))
    report.notes.append(f"SGLang's own {name}(gpu_id{', server_args' if takes else ''})"
                        + (f": gpu_id {gpu_id}, the node's local rank {local_rank}" if local_rank else ""))


def runtime_init(sa, model_config, report: Report, local_rank: int = 0) -> None:
    """What the scheduler sets up (scheduler_init), then the expert location (its server_args where it takes them)
    and the model runner's DeepGEMM configuration (deepgemm_init)."""
    import inspect

    scheduler_init(sa, report)
    deepgemm_init(sa, report, local_rank)
    try:
        from sglang.srt.eplb import expert_location as loc
    except ImportError:
        return
    if loc.get_global_expert_location_metadata() is None:
        compute = loc.compute_initial_expert_location_metadata
        given = {"server_args": sa} if "server_args" in inspect.signature(compute).parameters else {}
        loc.set_global_expert_location_metadata(compute(**given, model_config=model_config, moe_ep_rank=0))
        report.notes.append("SGLang's own compute_initial_expert_location_metadata (moe_ep_rank 0)")


def drive(model, ms: list[int], report: Report) -> None:
    """Every m: the embedding, each layer's blocks, the final norm (SGLang's own modules)."""
    import torch

    inner = getattr(model, "model", model)
    hidden = model.config.hidden_size if hasattr(model, "config") else inner.config.hidden_size
    report.note("attention core (FA3 / FlashMLA, sgl-kernel ahead-of-time kernels): not run")
    driven = distinct_layers(inner.layers)
    if len(driven) < len(inner.layers):
        report.note(f"layers driven: {', '.join(map(str, driven))} of the {len(inner.layers)} built (a layer "
                            "whose modules and parameter shapes equal an earlier one's runs the same kernels)")
    t0 = time.time()
    for m in ms:
        positions = torch.arange(m, device="cuda", dtype=torch.int64)
        embed = getattr(inner, "embed_tokens", None)
        if embed is not None:
            ids = torch.randint(0, embed.org_vocab_size if hasattr(embed, "org_vocab_size") else 1000, (m,),
                                device="cuda")
            report.call("embed_tokens", m, embed, ids)
        x = (torch.randn(m, hidden, device="cuda") * 0.1).to(torch.bfloat16)
        for i in driven:
            drive_layer(f"layers.{i}", inner.layers[i], x, positions, m, report)
        if getattr(inner, "norm", None) is not None:
            report.call("norm", m, inner.norm, x.clone())
        torch.cuda.synchronize()
        if m == ms[0]:  # the first forward: every module once, with what it compiles or loads the first time
            report.times.setdefault("first_forward_s", round(time.time() - t0, 3))
        if "pass_s" not in report.times:  # the pass over m (not the second forward after it)
            report.m_done = m


def decode_step(model, batches: list[int], report: Report) -> None:
    """One decode step for each batch size, as SGLang's scheduler runs it for that many running requests: the
    positions from their sequence lengths (forward_batch_info.clamp_position: on CUDA SGLang's own JIT module), each
    distinct layer at m = batch size with those positions, the LM head's logits and SGLang's own Sampler for
    requests with top-k / top-p (its sampling backend's kernels: FlashInfer's sampling module by default)."""
    import torch

    inner = getattr(model, "model", model)
    hidden = model.config.hidden_size if hasattr(model, "config") else inner.config.hidden_size
    try:
        from sglang.srt.model_executor.forward_batch_info import clamp_position
    except ImportError as exc:
        clamp_position = None
        report.notes.append(f"decode: no clamp_position in this release ({exc}): positions by torch")
    sampler = report.call("decode.Sampler()", 0, _sampler)
    for bs in batches:
        seq_lens = torch.randint(2, 4096, (bs,), device="cuda", dtype=torch.int64)  # ScheduleBatch's dtype
        positions = report.call("decode.clamp_position", bs, clamp_position, seq_lens) if clamp_position else None
        if positions is None:
            positions = torch.clamp(seq_lens - 1, min=0)
        x = (torch.randn(bs, hidden, device="cuda") * 0.1).to(torch.bfloat16)
        for i in distinct_layers(inner.layers):
            drive_layer(f"decode.layers.{i}", inner.layers[i], x, positions, bs, report)
        head = getattr(model, "lm_head", None)
        if head is None or sampler is None:
            continue
        logits = report.call("decode.lm_head", bs, _logits, x, head)
        if logits is not None:
            report.call("decode.sampler", bs, _sample, sampler, logits, positions)
        torch.cuda.synchronize()
    report.standins.append(f"decode: batches {','.join(map(str, batches))}, random sequence lengths, temperature "
                           "0.7 / top-k 20 / top-p 0.8 for every request, this rank's vocabulary shard of logits")


def _logits(x, head):
    """The LM head's logits (float32, as SGLang's LogitsProcessor hands the sampler) of this rank's shard."""
    import torch

    return torch.matmul(x, head.weight.t()).float()


def _sampler():
    from sglang.srt.layers.sampler import Sampler

    return Sampler()


def _sample(sampler, logits, positions):
    """SGLang's own Sampler.forward on the logits of requests that sample with top-k and top-p (the sampling
    parameters as a SamplingBatchInfo carries them: STAND-IN for the scheduler's batch, the fields it reads)."""
    from sglang.srt.layers.logits_processor import LogitsProcessorOutput

    info = sampling_standin(logits.shape[0], logits.device)
    return sampler(LogitsProcessorOutput(next_token_logits=logits), info, False, [], [], positions)


def sampling_standin(bs: int, device="cuda"):
    """STAND-IN for the scheduler's SamplingBatchInfo of ``bs`` requests that all sample with temperature 0.7,
    top-k 20 and top-p 0.8: the fields SGLang's Sampler reads (tests/test_model_driver.py checks them against each
    installed release's sampler.py)."""
    import types

    import torch

    return types.SimpleNamespace(
        has_custom_logit_processor=False, is_all_greedy=False, need_top_p_sampling=True, need_top_k_sampling=True,
        need_min_p_sampling=False, temperatures=torch.full((bs, 1), 0.7, device=device),
        top_ks=torch.full((bs,), 20, dtype=torch.int32, device=device),
        top_ps=torch.full((bs,), 0.8, device=device), min_ps=torch.zeros(bs, device=device), sampling_seed=None,
        grammars=None, vocab_mask=None, logit_bias=None, max_top_k=20,
        # no request asks for its sampling mask or logprobs (0.5.17's and 0.5.23's capture of them)
        return_sampling_masks=False, sampling_mask_batch_indices=None, sampling_support_logprobs_capture_indices=None)


def layer_signature(layer) -> tuple:
    """What decides the kernels a layer runs: its modules' classes and its parameters' names, shapes and dtypes."""
    return (tuple((name, type(mod).__qualname__) for name, mod in layer.named_modules()),
            tuple((name, tuple(p.shape), str(p.dtype)) for name, p in layer.named_parameters()))


def distinct_layers(layers) -> list[int]:
    """The index of each layer whose signature no earlier layer has (DeepSeek-V3's three dense layers: the first)."""
    seen: set[tuple] = set()
    out = []
    for i, layer in enumerate(layers):
        sig = layer_signature(layer)
        if sig not in seen:
            seen.add(sig)
            out.append(i)
    return out


def drive_layer(name: str, layer, x, positions, m: int, report: Report) -> None:
    residual = x.clone()
    for norm in ("input_layernorm", "post_attention_layernorm"):
        if hasattr(layer, norm):
            report.call(f"{name}.{norm}", m, getattr(layer, norm), x.clone())
            report.call(f"{name}.{norm}(+residual)", m, getattr(layer, norm), x.clone(), residual.clone())
    attn = getattr(layer, "self_attn", None)
    if attn is not None:
        drive_attention(f"{name}.self_attn", attn, x, positions, m, report)
    mlp = getattr(layer, "mlp", None)
    if mlp is not None:
        report.call(f"{name}.mlp", m, mlp, x.clone())


def drive_attention(name: str, attn, x, positions, m: int, report: Report) -> None:
    """Each linear of the attention block with an input of its own width, then q/k norm and rope through the
    block's own methods (Qwen3: apply_qk_norm_rope; others: rotary_emb on q/k of the block's head sizes)."""
    import torch
    from sglang.srt.layers.layernorm import RMSNorm
    from sglang.srt.layers.linear import LinearBase

    for sub, mod in attn.named_modules():
        if isinstance(mod, LinearBase):
            width = getattr(mod, "input_size_per_partition", None) or mod.input_size
            report.call(f"{name}.{sub}", m, mod, (torch.randn(m, width, device="cuda") * 0.1).to(torch.bfloat16))
        elif isinstance(mod, RMSNorm) and sub:
            width = mod.weight.shape[0]
            report.call(f"{name}.{sub}", m, mod, (torch.randn(m, width, device="cuda") * 0.1).to(torch.bfloat16))
    if hasattr(attn, "apply_qk_norm_rope") and hasattr(attn, "qkv_proj"):
        qkv = report.call(f"{name}.qkv_proj", m, lambda: attn.qkv_proj(x)[0])
        batch = kv_standin(attn, m, report)
        if qkv is not None:
            report.call(f"{name}.apply_qk_norm_rope", m, attn.apply_qk_norm_rope, qkv, positions, batch)
    elif hasattr(attn, "rotary_emb") and hasattr(attn, "qk_rope_head_dim"):
        heads = getattr(attn, "num_local_heads", None) or attn.num_heads
        rope = attn.qk_rope_head_dim
        q = (torch.randn(m, heads, rope, device="cuda")).to(torch.bfloat16)
        k = (torch.randn(m, 1, rope, device="cuda")).to(torch.bfloat16)
        report.call(f"{name}.rotary_emb", m, attn.rotary_emb, positions, q, k)


class KVPoolStandin:
    """STAND-IN for SGLang's token-to-KV pool of a server (bf16 KV cache, page size 1): per layer, key and value
    buffers of the layer's per-rank heads, for as many tokens as the largest m. On a server the rope kernel writes
    k and v into the pool (SGLang's fused set-KV-buffer path, models/utils.py enable_fused_set_kv_buffer): these
    buffers let that same kernel run."""

    dtype = None  # set at first use: torch.bfloat16
    page_size = 1

    def __init__(self) -> None:
        import torch

        self.dtype = torch.bfloat16
        self.buffers: dict[int, tuple] = {}

    def ensure(self, layer, tokens: int) -> None:
        import torch

        have = self.buffers.get(layer.layer_id)
        if have is None or have[0].shape[0] < tokens:
            shape_k = (tokens, layer.tp_k_head_num, layer.qk_head_dim)
            shape_v = (tokens, layer.tp_v_head_num, layer.v_head_dim)
            self.buffers[layer.layer_id] = (torch.zeros(shape_k, dtype=self.dtype, device="cuda"),
                                            torch.zeros(shape_v, dtype=self.dtype, device="cuda"))

    def get_key_buffer(self, layer_id: int):
        return self.buffers[layer_id][0]

    def get_value_buffer(self, layer_id: int):
        return self.buffers[layer_id][1]


_KV: dict[str, Any] = {}


def kv_standin(attn, m: int, report: Report):
    """A forward batch of m new tokens (cache locations 0..m-1) whose attention backend holds the KV pool stand-in,
    published as SGLang's forward context (model_executor/forward_context.py, where the release has one); None
    where the release has no such context or the block has no RadixAttention."""
    import torch

    layer = getattr(attn, "attn", None)
    try:
        from sglang.srt.model_executor import forward_context as fc
    except ImportError:
        return None
    if layer is None or not hasattr(layer, "tp_k_head_num"):
        return None
    if "pool" not in _KV:
        _KV["pool"] = KVPoolStandin()
        fc.set_forward_context(fc.ForwardContext(attn_backend=type("AttnBackendStandin", (), {
            "token_to_kv_pool": _KV["pool"]})()))
        report.standins.append("KV cache: bf16 buffers of each layer's per-rank heads in a stand-in attention "
                               "backend published as SGLang's forward context (the attention kernels are not run)")
    _KV["pool"].ensure(layer, m)
    return type("ForwardBatchStandin", (), {"out_cache_loc": torch.arange(m, device="cuda", dtype=torch.int64)})()


if __name__ == "__main__":
    sys.exit(main())
