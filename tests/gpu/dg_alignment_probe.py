"""The deep_gemm MoE runner's contiguous-layout alignment as the installed DeepGEMM answers it on this GPU (issue 44).

sglang 0.5.23's deep_gemm runner pads each expert's token count to ``block_e`` (srt/layers/moe/moe_runner/
deep_gemm.py :1082-1093): deep_gemm_wrapper.get_contiguous_layout_alignment(m * topk, local experts), which is
DeepGEMM's get_theoretical_mk_alignment_for_contiguous_layout at the per-expert m, capped at
get_mk_alignment_for_contiguous_layout (deep_gemm_wrapper/entrypoint.py :173-194). ``block_e`` is the BLOCK_E
constexpr of pad_expert_counts' Triton kernel, so a part of its key. The C++ op asks the GPU (on the CPU machine it
fails in cudaGetDevice), so dgprecompile cannot read it there: this probe records the runtime's own answers, DeepGEMM's
at every per-expert m up to MAX and SGLang's wrapper at every m of the given servers' (topk, local experts), with the
versions and the device. Nothing here comes from dgprecompile's plan.

usage (device, the 0.5.23 stack first on PYTHONPATH):
  python tests/gpu/dg_alignment_probe.py OUT.json [MAX_PER_EXPERT_M=65536] [M_MAX=8192] [TOPK:EXPERTS ...]
  e.g. ... 8:20 9:257 (the README's 480B --tp 8 --ep 8; DeepSeek-V3 --tp 8 with its fused shared expert)
"""

from __future__ import annotations

import json
import sys
import time
from importlib import metadata


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def main(argv: list[str]) -> int:
    out, rest = argv[0], argv[1:]
    top = int(rest[0]) if rest else 65536
    m_max = int(rest[1]) if len(rest) > 1 else 8192
    servers = [tuple(int(x) for x in s.split(":")) for s in rest[2:]] or [(8, 20), (9, 257)]
    import deep_gemm
    import torch
    from sglang.srt.layers.deep_gemm_wrapper import entrypoint

    start = time.time()
    theoretical = deep_gemm.get_theoretical_mk_alignment_for_contiguous_layout
    answers = [int(theoretical(m)) for m in range(1, top + 1)]
    runs = []  # per-expert m ranges of one answer: [first, last, value]
    for m, value in enumerate(answers, 1):
        if runs and runs[-1][2] == value:
            runs[-1][1] = m
        else:
            runs.append([m, m, value])
    wrapper = {f"{topk}:{experts}": sorted({entrypoint.get_contiguous_layout_alignment(m * topk, experts)
                                            for m in range(1, m_max + 1)}) for topk, experts in servers}
    record = {
        "what": "DeepGEMM's contiguous-layout alignment per per-expert m, and SGLang's block_e per server",
        "device": torch.cuda.get_device_name(0),
        "capability": list(torch.cuda.get_device_capability(0)),
        "versions": {p: _version(p) for p in ("sglang", "sgl-deep-gemm", "torch")},
        "mk_alignment": int(deep_gemm.get_mk_alignment_for_contiguous_layout()),
        "theoretical_runs": runs,
        "block_e_values": wrapper,
        "m_max": m_max,
        "seconds": round(time.time() - start, 2),
    }
    with open(out, "w") as f:
        json.dump(record, f, indent=1)
    print(json.dumps({k: record[k] for k in ("device", "versions", "mk_alignment", "block_e_values")}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
