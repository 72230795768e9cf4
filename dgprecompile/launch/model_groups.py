"""STAND-IN process groups for the independent live proof (dgprecompile/launch/model_driver.py): one GPU, one rank,
but the shard sizes of the server command's tp/ep/attention layout.

SGLang's own distributed set-up runs for one rank (its init_distributed_environment and initialize_model_parallel,
world size 1, so every group is real and every collective of it is the identity); each group SGLang's modules ask
for sizes (tp, attention tp, MoE ep and tp) is then wrapped so that it reports the size the command's ServerArgs
give that group and rank 0. Its all-reduce returns its input (one rank's partial sum; the numbers do not matter to
which kernels run), its all-gather repeats its input over the group (the gathered shape). Everything else is the
real 1-rank group's. The sizes follow SGLang's own rules: attention tp from its compute_dp_attention_world_info,
MoE tp = tp // ep // moe_dp (distributed/parallel_state.py initialize_model_parallel, sglang 0.5.14 :2034-2036).

Releases with a runtime context (sglang 0.5.23: ``sglang.srt.runtime_context``) read every width and group from it:
the driver publishes the server args as the scheduler's process does (``publish``, role scheduler, rank 0 of the
command's layout), so the widths are SGLang's own from the command; SGLang's groups are built at world size 1 under
a scoped override of the four widths, and the groups the context then holds are stated at the published widths.
"""

from __future__ import annotations

import socket
from typing import Any


class StatedGroup:
    """A real 1-rank GroupCoordinator that states another group size (STAND-IN: see the module docstring)."""

    def __init__(self, real: Any, size: int):
        self._real = real
        self.world_size = size
        self.rank_in_group = 0
        self.ranks = list(range(size))
        self.rank = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def all_reduce(self, input_, *args, **kwargs):
        return input_

    def all_gather(self, input_, dim: int = -1, *args, **kwargs):
        import torch

        return torch.cat([input_] * self.world_size, dim=dim)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sizes(sa) -> dict[str, int]:
    """Each group's size for rank 0 of the command's layout, by SGLang's own rules (module docstring)."""
    from sglang.srt.layers.dp_attention import compute_dp_attention_world_info

    tp, ep = int(sa.tp_size), int(getattr(sa, "ep_size", 1) or 1)
    moe_dp = int(getattr(sa, "moe_dp_size", 1) or 1)
    cp = int(getattr(sa, "attn_cp_size", 1) or 1)
    _, attn_tp, _, _ = compute_dp_attention_world_info(bool(sa.enable_dp_attention), 0, tp, int(sa.dp_size), cp)
    return {"_TP": tp, "_ATTN_TP": attn_tp, "_MOE_EP": ep, "_MOE_TP": tp // ep // moe_dp}


def sampler_flag(report) -> None:
    """initialize_model_parallel imports SGLang's sampler for one flag, and the sampler imports FlashInfer at load
    on CUDA; where FlashInfer is not installed (it is not carried to the GPU machine), STAND-IN: a module holding
    only that flag, read from the environment as the sampler reads it (sglang 0.5.14 layers/sampler.py:62)."""
    import importlib.util
    import os
    import sys
    import types

    if importlib.util.find_spec("flashinfer") is not None or "sglang.srt.layers.sampler" in sys.modules:
        return
    stub = types.ModuleType("sglang.srt.layers.sampler", "dgprecompile STAND-IN: the sampler's flag only")
    stub.SYNC_TOKEN_IDS_ACROSS_TP = os.environ.get("SYNC_TOKEN_IDS_ACROSS_TP", "false").lower() in ("1", "true")
    sys.modules[stub.__name__] = stub
    report.standins.append("sglang.srt.layers.sampler (imports FlashInfer, not carried): its "
                           "SYNC_TOKEN_IDS_ACROSS_TP flag only")


# the runtime context's group of each width, under the names sizes() gives them
CONTEXT_GROUPS = {"_TP": ("tp_size", "tp_group"), "_ATTN_TP": ("attn_tp_size", "attn_tp_group"),
                  "_MOE_EP": ("moe_ep_size", "moe_ep_group"), "_MOE_TP": ("moe_tp_size", "moe_tp_group")}


def _with_context(ps, sa, backend: str, init_method: str) -> dict[str, int]:
    """A runtime-context release (module docstring): published as the scheduler, groups built at world size 1,
    then stated at the published widths; returns those widths."""
    from sglang.srt.runtime_context import SpawnRanks, get_parallel, publish

    publish(sa, role="scheduler", ranks=SpawnRanks(world_rank=0, dp_rank=None, gpu_id=0))
    parallel = get_parallel()
    stated = {name: int(getattr(parallel, width)) for name, (width, _) in CONTEXT_GROUPS.items()}
    ps.init_distributed_environment(world_size=1, rank=0, local_rank=0, backend=backend,
                                    distributed_init_method=init_method)
    with parallel.override(**{width: 1 for width, _ in CONTEXT_GROUPS.values()}):
        ps.initialize_model_parallel(backend=backend)
    parallel.override_permanently(**{group: StatedGroup(getattr(parallel, group), stated[name])
                                     for name, (_, group) in CONTEXT_GROUPS.items() if stated[name] > 1})
    return stated


def _layer_runtime(model_config) -> None:
    """What bootstrap.py's init_layer_runtime does after the groups (the DP gathered buffer, layernorm SP), called
    where it is defined: bootstrap.py itself imports the HTTP server's modules (uvicorn), which the model needs not."""
    from sglang.srt.layers.dp_attention import init_dp_gathered_buffer
    from sglang.srt.layers.layernorm_sp import initialize_layernorm_sp

    init_dp_gathered_buffer(model_config)
    initialize_layernorm_sp(model_config=model_config)


def install(sa, model_config, report) -> dict[str, int]:
    """SGLang's own 1-rank distributed set-up, then its groups wrapped to the command's sizes."""
    import inspect

    from sglang.srt.distributed import parallel_state as ps

    sampler_flag(report)
    backend = "gloo" if str(getattr(sa, "device", "cuda")) == "cpu" else "nccl"
    init_method = f"tcp://127.0.0.1:{free_port()}"
    if "tensor_model_parallel_size" not in inspect.signature(ps.initialize_model_parallel).parameters:
        stated = _with_context(ps, sa, backend, init_method)
    else:
        ps.init_distributed_environment(world_size=1, rank=0, local_rank=0, backend=backend,
                                        distributed_init_method=init_method)
        ps.initialize_model_parallel(tensor_model_parallel_size=1, expert_model_parallel_size=1)
        stated = sizes(sa)
        for name, size in stated.items():
            real = getattr(ps, name, None)
            if real is not None and size > 1:
                setattr(ps, name, StatedGroup(real, size))
    try:
        from sglang.srt.layers.dp_attention import initialize_dp_attention

        if "model_config" in inspect.signature(initialize_dp_attention).parameters:
            initialize_dp_attention(sa, model_config)
        else:  # the runtime context's releases: as distributed/bootstrap.py sets the groups up, then its layers
            initialize_dp_attention(server_args=sa)
            _layer_runtime(model_config)
    except Exception as exc:  # noqa: BLE001 - reported: the proof says what it could not set up
        report.notes.append(f"initialize_dp_attention: {type(exc).__name__}: {exc}")
    report.standins.append("collectives: SGLang's 1-rank groups stating the command's sizes "
                           + ", ".join(f"{k.strip('_').lower()}={v}" for k, v in stated.items())
                           + " (all-reduce returns its input)")
    return stated
