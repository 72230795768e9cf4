"""STAND-INS for the CPU test machine and the device proof, named as such everywhere they are used.

Put this folder on PYTHONPATH and name the packages to stand in for in DGP_STANDINS (comma-separated; default
``sgl_kernel,triton,torchvision``): importing them then succeeds, using what they return at import time works
(decorators, annotations), and calling anything raises StandinCalled. They exist because sglang 0.5.14 imports
them at module level while the code dgprecompile drives (sglang's jit_kernel builders, its dense FP8 linear and
DeepGEMM MoE runner) calls none of their functions: sgl-kernel is too large to carry to the GPU machine, and
triton/torchvision cannot run on the CPU test machine. DGP_TRANSFORMERS_EXIST_OK=1 makes re-registering an
AutoConfig name a no-op (transformers >= 5.17 already registers `qwen3_asr`, which sglang 0.5.14 registers too).
"""

import os

import _dgp_standin

_names = [n.strip() for n in os.environ.get("DGP_STANDINS", "sgl_kernel,triton,torchvision").split(",") if n.strip()]
if _names:
    _dgp_standin.install(*_names)
if os.environ.get("DGP_TRANSFORMERS_EXIST_OK") == "1":
    _dgp_standin.transformers_exist_ok()
