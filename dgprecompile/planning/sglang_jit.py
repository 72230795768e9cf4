"""The server's path that decides which of SGLang's own JIT modules it builds, read from the user's command and the
model's config.json (``server_path``). The modules of each release are data of its loader family
(dgprecompile/runtimes/jit_loader.py), which plans them from this path.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from dgprecompile.data import load_yaml
from dgprecompile.runtimes.jit_loader import ServerPath

_DTYPES = {"bfloat16": ("torch.bfloat16", "bf16_t", 2), "float16": ("torch.float16", "fp16_t", 2)}
_KV_DTYPES = {"fp8_e4m3": 1, "fp8_e5m2": 1}  # --kv-cache-dtype: bytes per element (auto/bf16: the model's)
# server options the data's when: conditions name, read from the command (dest: default when not given)
PATH_OPTIONS = {"enable_fused_qk_norm_rope": False, "enable_deterministic_inference": False,
                "cuda_graph_tc_compiler": "eager", "piecewise_cuda_graph_compiler": "eager",
                "disable_overlap_schedule": False}


@lru_cache(maxsize=4)
def _model_facts(data_file: str) -> dict[str, dict[str, Any]]:
    data = load_yaml(data_file)
    return dict(data.get("model_facts") or {})


def server_path(model, by_path: dict[str, list], par, options: dict[str, Any], data_file: str = "sglang_jit.yaml"):
    """The ServerPath of a plan: the server's options (``options``: dest -> value as SGLang reads them; absent:
    the release's default) and the model's config.json facts the modules' template arguments use."""
    cfg = model.config
    model_type = str(cfg.get("model_type") or "")
    dtype_name = str(options.get("dtype") or "auto")
    if dtype_name == "auto":
        dtype_name = str(cfg.get("torch_dtype") or "bfloat16")
    dtype_name = {"bf16": "bfloat16", "half": "float16", "fp16": "float16"}.get(dtype_name, dtype_name)
    torch_dtype, cpp_dtype, itemsize = _DTYPES.get(dtype_name, (None, None, 2))
    tp = par.tp
    heads = int(cfg.get("num_attention_heads") or 0)
    kv_heads = int(cfg.get("num_key_value_heads") or heads or 0)
    head_dim = int(cfg.get("head_dim") or (int(cfg.get("hidden_size") or 0) // heads if heads else 0))
    kv_dtype = str(options.get("kv_cache_dtype") or "auto")
    facts: dict[str, Any] = dict(_model_facts(data_file).get(model_type) or {})
    facts.update({"torch_dtype": torch_dtype, "cpp_dtype": cpp_dtype, "head_dim": head_dim,
                  "attn_heads_per_rank": heads // tp if heads else 0,
                  "kv_row_bytes": max(1, kv_heads // tp) * head_dim * _KV_DTYPES.get(kv_dtype, itemsize)})
    if "qk_rope_head_dim" in cfg:  # MLA: the rope part of the latent cache
        facts["rope_dim"] = int(cfg["qk_rope_head_dim"])
        facts["mla_nope_bytes"] = int(cfg.get("kv_lora_rank") or 0) * itemsize
        facts["mla_rope_bytes"] = int(cfg["qk_rope_head_dim"]) * itemsize
        if "rope_interleave" in cfg:
            facts["rope_neox"] = not bool(cfg["rope_interleave"])
    else:
        facts["rope_dim"] = int(head_dim * float(cfg.get("partial_rotary_factor") or 1.0))
    # the head size SGLang's RotaryEmbedding is made with (MLA: the rope part; else the head): 0.5.9 takes its JIT
    # rope for 64/128/256/512 only
    facts["rope_head_size"] = facts["rope_dim"] if "qk_rope_head_dim" in cfg else head_dim
    hidden = int(cfg.get("hidden_size") or 0)  # DeepSeek's router GEMM (0.5.15 on) is templated on both
    facts.update({"hidden_size": hidden, "hidden_1024_aligned": hidden > 0 and hidden % 1024 == 0,
                  "router_experts": int(cfg.get("n_routed_experts") or cfg.get("num_experts") or 0)})
    # SGLang's SiluAndMul takes its JIT kernel where the per-rank width is a multiple of the 16-byte vector (sm90),
    # else sgl-kernel's: DeepSeek's dense MLPs (its first_k_dense_replace layers) whatever the MoE runner
    dense_width = int(cfg.get("intermediate_size") or 0) // tp if int(cfg.get("first_k_dense_replace") or 0) else 0
    facts["dense_act_jit"] = dense_width > 0 and dense_width % (16 // itemsize) == 0
    scaling = cfg.get("rope_scaling") or {}
    facts["rope_yarn"] = str(scaling.get("rope_type") or scaling.get("type") or "") == "yarn"
    facts["rope_neox_int"] = int(bool(facts.get("rope_neox")))
    facts["rope_yarn_int"] = int(facts["rope_yarn"])
    if "mla_nope_bytes" in facts:
        facts["set_mla_marker"] = f"set_mla_kv_buffer_{facts['mla_nope_bytes']}_{facts['mla_rope_bytes']}"
    # models/utils.py enable_fused_set_kv_buffer: rope stores K/V itself when the pool is bf16; the fused
    # q/k-norm+rope kernel does not (must_save_kv), so the attention backend stores them
    facts["kv_store_fused"] = (kv_dtype in ("auto", "bf16", "bfloat16") and dtype_name == "bfloat16"
                               and not options.get("enable_fused_qk_norm_rope", False))
    quant = (cfg.get("quantization_config") or {}).get("quant_method")
    graphs = not options.get("disable_cuda_graph", False)
    extra = {k: options.get(k, default) for k, default in PATH_OPTIONS.items()}
    chunked = options.get("chunked_prefill_size")
    return ServerPath(model_type=model_type, dtype=dtype_name, quant=quant, tp=tp, ep=par.ep,
                      moe_runner=str(par.moe_runner_backend or "auto"),
                      attention_backend=str(options.get("attention_backend") or "auto"),
                      chunked_prefill=8192 if chunked is None else int(chunked), cuda_graph=graphs,
                      custom_all_reduce=not options.get("disable_custom_all_reduce", False),
                      kv_cache_dtype=kv_dtype, nnodes=int(options.get("nnodes") or 1),
                      gemm_paths=frozenset(by_path), model=tuple(sorted(facts.items())), extra=tuple(extra.items()))
