"""The child of `dgprecompile verify --live`: SGLang's own layers, called over the plan's m values on a GPU.

Run as ``python live_driver.py JOB.json`` by dgprecompile/launch/live.py, in `launch --strict`'s environment.
Standard library, torch and the installed sglang only (it may run in an interpreter without dgprecompile).
Built for sglang 0.5.14's constructors: Fp8Config/Fp8LinearMethod (srt/layers/quantization/fp8.py) and
MoeRunnerConfig/DeepGemmRunnerCore/DeepGemmMoeQuantInfo/DeepGemmRunnerInput (srt/layers/moe/moe_runner/).

For each unit of the job it snapshots the cache directories (DeepGEMM entries, tvm-ffi build directories,
Triton's cache) and the refusal events file, builds the layer with random FP8 weights, calls it for every m of
the unit, and records what appeared: refused compiles, new entries of each kind, and failed calls. The result is
one JSON file (the job's "result").
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import traceback

MAX_ERROR_SAMPLES = 5


def _listing(dirs):
    out = set()
    for d in dirs:
        try:
            out |= {os.path.join(d, name) for name in os.listdir(d)}
        except OSError:
            pass
    return out


class Watch:
    def __init__(self, job):
        self.dirs = job["dirs"]
        self.events = job["events"]

    def _offset(self):
        try:
            return os.path.getsize(self.events)
        except OSError:
            return 0

    def snap(self):
        return {kind: _listing(dirs) for kind, dirs in self.dirs.items()}, self._offset()

    def diff(self, before):
        (lists, offset) = before
        now, _ = self.snap()
        new = {kind: sorted(os.path.basename(p) for p in now[kind] - lists[kind]) for kind in now}
        refused = []
        try:
            with open(self.events, "rb") as f:
                f.seek(offset)
                for line in f.read().decode(errors="replace").splitlines():
                    if line.strip():
                        try:
                            refused.append(json.loads(line))
                        except ValueError:
                            pass
        except OSError:
            pass
        return new, [e for e in refused if e.get("event") == "refused"]


def _fp8(torch, shape, gen):
    return (torch.randn(shape, device="cuda", generator=gen) * 0.5).clamp(-448, 448).to(torch.float8_e4m3fn)


def _scale(torch, shape, gen):
    return torch.rand(shape, device="cuda", generator=gen) * 1e-2 + 1e-3


class Dense:
    """SGLang's Fp8LinearMethod (block FP8 128x128) for one dense key."""

    def __init__(self, torch, unit, seed):
        from sglang.srt.layers.quantization.fp8 import Fp8Config, Fp8LinearMethod
        from sglang.srt.runtime_context import get_parallel

        self.torch = torch
        n, k = unit["n"], unit["k"]
        gen = torch.Generator(device="cuda").manual_seed(seed)
        self.method = Fp8LinearMethod(Fp8Config(is_checkpoint_fp8_serialized=True, activation_scheme="dynamic",
                                                weight_block_size=[128, 128]))
        self.layer = torch.nn.Module()
        with get_parallel().override(tp_size=1), torch.device("cuda"):
            self.method.create_weights(self.layer, input_size_per_partition=k, output_partition_sizes=[n],
                                       input_size=k, output_size=n, params_dtype=torch.bfloat16,
                                       weight_loader=lambda *a, **kw: None)
        self.layer.weight.data.copy_(_fp8(torch, (n, k), gen))
        self.layer.weight_scale_inv.data.copy_(_scale(torch, tuple(self.layer.weight_scale_inv.shape), gen))
        self.weight = self.layer.weight.data.float() * self.layer.weight_scale_inv.data.repeat_interleave(
            128, 0).repeat_interleave(128, 1)[:n, :k]
        self.method.process_weights_after_loading(self.layer)
        self.x = torch.randn((max(unit["ms"]), k), device="cuda", dtype=torch.bfloat16, generator=gen)

    def call(self, m):
        return self.method.apply(self.layer, self.x[:m])

    def check(self, m):
        """Cosine similarity of SGLang's output with a float32 reference (activations quantised at run time)."""
        torch = self.torch
        y = self.call(m).float()
        ref = self.x[:m].float() @ self.weight.t()
        return float(torch.nn.functional.cosine_similarity(y.flatten(), ref.flatten(), dim=0))


class Masked:
    """SGLang's DeepGemmRunnerCore masked path (gate_up GEMM, SGLang's JIT activation, down GEMM) for one MoE
    layer: experts x (2*width, hidden) and experts x (hidden, width) FP8 weights."""

    def __init__(self, torch, unit, seed):
        from sglang.srt.layers.moe.moe_runner.base import MoeRunnerConfig
        from sglang.srt.layers.moe.moe_runner.deep_gemm import DeepGemmMoeQuantInfo, DeepGemmRunnerCore

        self.torch = torch
        e, h, w = unit["experts"], unit["hidden"], unit["width"]
        self.e, self.h, self.topk = e, h, unit["topk"]
        gen = torch.Generator(device="cuda").manual_seed(seed)
        config = MoeRunnerConfig(num_experts=e, num_local_experts=e, hidden_size=h, intermediate_size_per_partition=w,
                                 top_k=self.topk, params_dtype=torch.bfloat16, activation="silu", is_gated=True)
        self.core = DeepGemmRunnerCore(config)
        self.quant = DeepGemmMoeQuantInfo(
            w13_weight=_fp8(torch, (e, 2 * w, h), gen), w2_weight=_fp8(torch, (e, h, w), gen), use_fp8=True,
            w13_scale=_scale(torch, (e, math.ceil(2 * w / 128), math.ceil(h / 128)), gen),
            w2_scale=_scale(torch, (e, math.ceil(h / 128), math.ceil(w / 128)), gen), block_shape=[128, 128])

    def call(self, expected_m):
        from sglang.srt.layers.moe.moe_runner.deep_gemm import DeepGemmRunnerInput

        torch = self.torch
        # as moe_ep_deepgemm_preprocess pads: tokens T with expected_m = ceil(T*topk/E), rows padded to 256
        tokens = max(1, math.ceil(expected_m * self.e / self.topk))
        rows = (tokens // 256 + 1) * 256
        hidden = torch.empty((self.e, rows, self.h), device="cuda", dtype=torch.float8_e4m3fn)
        scale = torch.ones((self.e, rows, self.h // 128), device="cuda", dtype=torch.float32)
        masked_m = torch.full((self.e,), min(expected_m, rows), device="cuda", dtype=torch.int32)
        runner_input = DeepGemmRunnerInput(hidden_states=hidden, hidden_states_scale=scale, use_masked_gemm=True,
                                           masked_m=masked_m, expected_m=expected_m)
        return self.core.run(runner_input, self.quant, {"hidden_states_device": hidden.device}).hidden_states

    def check(self, m):
        return None


def _dtype(torch, name):
    return getattr(torch, str(name).split(".", 1)[1]) if str(name).startswith("torch.") else name


class Jit:
    """One of SGLang's own JIT modules, reached through SGLang's own entry point with small tensors shaped by the
    module's planned arguments (so the runtime derives the template arguments itself: dtype, head_dim, rope_dim,
    row bytes, pdl). Where the entry point needs several GPUs (custom all-reduce push/pull) or has no small
    standalone form, SGLang's own builder for that module is called instead: it loads the module from the cache
    or builds it, so a refusal counts exactly the same."""

    def __init__(self, torch, unit, seed):
        self.torch = torch
        self.module = unit["module"]
        self.args = [_dtype(torch, a) for a in self.module.get("args", [])]
        self.gen = torch.Generator(device="cuda").manual_seed(seed)
        self.how = "entry point" if hasattr(self, "_" + self.module["name"]) else "builder"

    def _randn(self, *shape, dtype=None):
        return torch_randn(self.torch, shape, dtype or self.torch.bfloat16, self.gen)

    def call(self, m):
        entry = getattr(self, "_" + self.module["name"], None)
        if entry is not None:
            return entry(m)
        import importlib

        builder = getattr(importlib.import_module(self.module["python"]), self.module["builder"])
        kwargs = {k: ([tuple(x) if isinstance(x, list) else x for x in v] if isinstance(v, list) else v)
                  for k, v in (self.module.get("kwargs") or {}).items()}
        return builder(*self.args, **kwargs)

    def check(self, m):
        return None

    # SGLang 0.5.14's entry points (sglang/jit_kernel/*.py), one per module
    def _clamp_position(self, m):
        from sglang.jit_kernel.clamp_position import clamp_position_cuda

        seq_lens = self.torch.randint(1, 4096, (m,), device="cuda", dtype=self.args[0], generator=self.gen)
        out = clamp_position_cuda(seq_lens)
        assert bool((out == (seq_lens - 1).clamp(min=0)).all()), "clamp_position: wrong result"

    def _activation(self, m):
        from sglang.jit_kernel.activation import silu_and_mul

        x = self._randn(m, 2 * 512, dtype=self.args[0])
        silu_and_mul(x)
        experts = self.torch.zeros((m,), device="cuda", dtype=self.torch.int32)
        silu_and_mul(x, expert_ids=experts, expert_step=1)  # the Triton MoE runner's filtered form

    def _qknorm(self, m):
        from sglang.jit_kernel.norm import fused_inplace_qknorm

        head_dim, dtype = self.args[0], self.args[1]
        q, k = self._randn(m, 4, head_dim, dtype=dtype), self._randn(m, 1, head_dim, dtype=dtype)
        w = self.torch.ones((head_dim,), device="cuda", dtype=dtype)
        fused_inplace_qknorm(q, k, w, w, 1e-6, head_dim=head_dim)

    def _fused_rope(self, m):
        from sglang.jit_kernel.rope import apply_rope_with_cos_sin_cache_inplace

        is_neox, rope_dim, dtype = self.args
        q, k = self._randn(m, 4, rope_dim, dtype=dtype), self._randn(m, 1, rope_dim, dtype=dtype)
        cache = self._randn(4096, rope_dim, dtype=self.torch.float32)
        positions = self.torch.arange(m, device="cuda", dtype=self.torch.int64)
        apply_rope_with_cos_sin_cache_inplace(q, k, cache, positions, is_neox=is_neox)

    def _kvcache(self, m):
        from sglang.jit_kernel.kvcache import store_cache

        row_bytes = self.args[0]
        row = row_bytes // 2
        k, v = self._randn(m, row), self._randn(m, row)
        kc, vc = self._randn(m + 8, row), self._randn(m + 8, row)
        store_cache(k, v, kc, vc, self.torch.arange(m, device="cuda", dtype=self.torch.int64), row_bytes=row_bytes)

    def _set_mla_kv_buffer(self, m):
        from sglang.jit_kernel.set_mla_kv_buffer import set_mla_kv_buffer

        nope, rope = self.args[0] // 2, self.args[1] // 2
        kv = self._randn(m + 8, 1, nope + rope)
        loc = self.torch.arange(m, device="cuda", dtype=self.torch.int64)
        set_mla_kv_buffer(kv, loc, self._randn(m, 1, nope), self._randn(m, 1, rope))

    def _concat_mla_k(self, m):
        from sglang.jit_kernel.concat_mla import concat_mla_k

        k = self.torch.empty((m, 128, 192), device="cuda", dtype=self.torch.bfloat16)
        concat_mla_k(k, self._randn(m, 128, 128), self._randn(m, 1, 64))

    def _custom_all_reduce_base(self, m):
        from sglang.jit_kernel.all_reduce import get_custom_all_reduce_cls

        get_custom_all_reduce_cls()  # builds/loads the base module, registers it, reads the GPU's properties


def torch_randn(torch, shape, dtype, gen):
    return torch.randn(shape, device="cuda", generator=gen, dtype=torch.float32).to(dtype)


def run_unit(torch, unit, watch, seed):
    result = {"kind": unit["kind"], "keys": unit["keys"], "layers": unit.get("layers", []), "calls": 0,
              "m_min": min(unit["ms"]), "m_max": max(unit["ms"]), "m_values": len(unit["ms"]), "errors": 0,
              "error_samples": [], "failed_m": []}
    before = watch.snap()
    start = time.perf_counter()
    try:
        if unit["kind"] == "jit":
            result["module"] = unit["module"]["id"]
        layer = {"dense": Dense, "masked": Masked, "jit": Jit}[unit["kind"]](torch, unit, seed)
        if unit["kind"] == "jit":
            result["through"] = layer.how
    except Exception as exc:
        result["errors"] += 1
        result["error_samples"].append(f"building the layer: {type(exc).__name__}: {exc}\n"
                                       + traceback.format_exc(limit=6))
        layer = None
    if layer is not None:
        for i, m in enumerate(unit["ms"]):
            try:
                layer.call(m)
                result["calls"] += 1
                if i % 64 == 63:
                    torch.cuda.synchronize()
            except Exception as exc:
                result["errors"] += 1
                if len(result["failed_m"]) < 50:
                    result["failed_m"].append(m)
                if len(result["error_samples"]) < MAX_ERROR_SAMPLES:
                    result["error_samples"].append(f"m={m}: {type(exc).__name__}: {str(exc).strip()[:1500]}")
        try:
            torch.cuda.synchronize()
            probe = min(unit["ms"][-1], 512)
            cos = layer.check(probe)
            if cos is not None:
                result["check"] = {"m": probe, "cosine_vs_fp32_reference": round(cos, 5)}
        except Exception as exc:
            result["check"] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    result["seconds"] = round(time.perf_counter() - start, 2)
    new, refused = watch.diff(before)
    result["new_deepgemm"], result["new_jit"], result["new_triton"] = new["deepgemm"], new["jit"], new["triton"]
    result["refused"] = refused
    return result


def main(argv):
    with open(argv[0]) as f:
        job = json.load(f)
    out = {"units": [], "outside": {}}

    def finish(code=0):
        tmp = job["result"] + ".tmp"
        with open(tmp, "w") as f:
            json.dump(out, f, indent=1)
        os.replace(tmp, job["result"])
        return code

    watch = Watch(job)
    start = watch.snap()
    try:
        import torch
    except ImportError as exc:
        out.update(error=f"torch is not importable: {exc}", environment_error=True)
        return finish(3)
    if not torch.cuda.is_available():
        out.update(error="no CUDA GPU is visible: verify --live runs SGLang's kernels", environment_error=True)
        return finish(3)
    major, minor = torch.cuda.get_device_capability()
    out["device"] = f"{torch.cuda.get_device_name()} (sm{major}{minor})"
    if major != 9:
        out.update(error=f"{out['device']}: the planned DeepGEMM kernels are for Hopper (sm90)",
                   environment_error=True)
        return finish(3)
    try:
        import sglang.srt.layers.moe.moe_runner.deep_gemm  # noqa: F401
        import sglang.srt.layers.quantization.fp8  # noqa: F401
    except Exception as exc:
        out.update(error=f"cannot import SGLang's layers: {type(exc).__name__}: {exc}\n"
                         + traceback.format_exc(limit=8), environment_error=True)
        return finish(3)
    new, refused = watch.diff(start)
    out["outside"] = {f"import_new_{k}": v for k, v in new.items() if v}
    if refused:
        out["outside"]["import_refused"] = [str(e.get("kernel")) for e in refused]
    for i, unit in enumerate(job["units"]):
        out["units"].append(run_unit(torch, unit, watch, job.get("seed", 0) + i))
        finish()  # keep what is done if a later unit crashes the process
        torch.cuda.empty_cache()
    return finish(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
