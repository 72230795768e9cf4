"""STAND-IN process groups for the independent live proof (dgprecompile/launch/model_driver.py): one GPU, one rank,
but the shard sizes of the server command's tp/ep/attention layout.

SGLang's own distributed set-up runs for one rank (its init_distributed_environment and initialize_model_parallel,
world size 1, so every group is real and every collective of it is the identity); each group SGLang's modules ask
for sizes (tp, attention tp, MoE ep and tp) is then wrapped so that it reports the size the command's ServerArgs
give that group and rank 0. Its all-reduce returns its input (one rank's partial sum; the numbers do not matter to
which kernels run), its all-gather repeats its input over the group (the gathered shape). Everything else is the
real 1-rank group's. The sizes follow SGLang's own rules: attention tp from its compute_dp_attention_world_info,
MoE tp = tp // ep // moe_dp (distributed/parallel_state.py initialize_model_parallel, sglang 0.5.14 :2034-2036).
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


def install(sa, model_config, report) -> dict[str, int]:
    """SGLang's own 1-rank distributed set-up, then its groups wrapped to the command's sizes."""
    from sglang.srt.distributed import parallel_state as ps

    sampler_flag(report)

    ps.init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="nccl",
                                    distributed_init_method=f"tcp://127.0.0.1:{free_port()}")
    ps.initialize_model_parallel(tensor_model_parallel_size=1, expert_model_parallel_size=1)
    stated = sizes(sa)
    for name, size in stated.items():
        real = getattr(ps, name, None)
        if real is not None and size > 1:
            setattr(ps, name, StatedGroup(real, size))
    try:
        from sglang.srt.layers.dp_attention import initialize_dp_attention

        initialize_dp_attention(sa, model_config)
    except Exception as exc:  # noqa: BLE001 - reported: the proof says what it could not set up
        report.notes.append(f"initialize_dp_attention: {type(exc).__name__}: {exc}")
    report.standins.append("collectives: SGLang's 1-rank groups stating the command's sizes "
                           + ", ".join(f"{k.strip('_').lower()}={v}" for k, v in stated.items())
                           + " (all-reduce returns its input)")
    return stated
