"""The model driver's record of the Triton MoE's and torch.compile's asks (dgprecompile/launch/model_asks.py), made
by sglang 0.5.14's own functions on this CPU machine and held against HEAD's plan by dgprecompile/launch/proof_asks.py.

The job below is what the driver does around SGLang's model, minus the GPU: torch.compile is wrapped before SGLang is
imported, so the decorators SGLang applies record each call (dynamo is off here: the calls run eagerly, the record is
the same); _fused_moe_kernel_sequence (what fused_experts_impl and the MoE runner's permute path call) is wrapped where
SGLang's modules hold it and called with meta tensors of the 480B's per-rank shapes (the record is taken before
SGLang's body runs, which fails without a GPU). The embedding mask is
called with rank 0's arguments as SGLang's VocabParallelEmbedding computes them for Qwen3-Coder's vocabulary at tp 8.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import STANDINS, beside_venv, sglang_014_dir

from dgprecompile.launch.model_asks import spans
from dgprecompile.launch.proof_asks import COVERED, MISSING, load_record

REPO = Path(__file__).resolve().parent.parent
QWEN_RECORD = REPO / "bench" / "results" / "2026-12-03-h200-model-480b" / "asks.json"

JOB = textwrap.dedent("""
    import json, sys
    from dgprecompile.launch import model_asks
    asks = model_asks.Asks()
    model_asks.watch_compile(asks)
    import torch
    from dgprecompile.compile.triton_moe import publish_standins
    publish_standins()
    from sglang.srt.layers.moe.moe_runner.triton_utils import fused_moe
    from sglang.srt.layers import vocab_parallel_embedding as vpe
    where = model_asks.watch_moe(asks)
    mode = {"no_grad": torch.no_grad, "inference": torch.inference_mode}[sys.argv[1]]
    vocab = 151936
    padded = vpe.pad_vocab_size(vocab, vpe.DEFAULT_VOCAB_PADDING_SIZE)
    s = vpe.VocabParallelEmbedding._get_indices(padded, padded, vocab, vocab, 0, 8)
    with mode():
        for m in (1, 2, 3, 32, 64, 8192):
            ids = torch.randint(0, vocab // 8, (m,))
            vpe.get_masked_input_and_mask(ids, s.org_vocab_start_index, s.org_vocab_end_index,
                                          s.num_org_vocab_padding, s.added_vocab_start_index, s.added_vocab_end_index)
            if m <= 32:
                fused_moe.moe_sum_reduce_torch_compile(torch.randn(m, 8, 6144, dtype=torch.bfloat16),
                                                       torch.empty(m, 6144, dtype=torch.bfloat16), 1.0)
            meta = dict(device="meta")
            try:  # as fused_experts_impl and the runner's permute path call it (SGLang's body fails on meta)
                fused_moe._fused_moe_kernel_sequence(
                    torch.empty(m, 6144, dtype=torch.bfloat16, **meta),
                    torch.empty(20, 5120, 6144, dtype=torch.float8_e4m3fn, **meta),
                    torch.empty(20, 6144, 2560, dtype=torch.float8_e4m3fn, **meta),
                    torch.empty(m, 8, **meta), torch.empty(m, 8, dtype=torch.int32, **meta), None, None, None, {},
                    None, False, use_fp8_w8a8=True, block_shape=[128, 128])
            except Exception:
                pass
    print(json.dumps({"where": where, "asks": asks.to_dict(), "notes": asks.notes}))
""")


def _env() -> dict[str, str]:
    folder, triton = sglang_014_dir(), beside_venv("triton-3.6.0", "triton/__init__.py")
    if folder is None or triton is None:
        pytest.skip("sglang 0.5.14's and triton 3.6.0's folders beside the venv (make setup)")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([folder, STANDINS, triton, str(REPO)]),
            "DGP_STANDINS": "sgl_kernel,torchvision", "DGP_TRANSFORMERS_EXIST_OK": "1"}


@pytest.fixture(scope="module")
def made():
    out = {}
    for mode in ("no_grad", "inference"):
        res = subprocess.run([sys.executable, "-c", JOB, mode], env={**_env(), "TORCHDYNAMO_DISABLE": "1"},
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr[-3000:]
        out[mode] = json.loads(res.stdout.strip().splitlines()[-1])
    return out


def _record(tmp_path, families: dict) -> dict:
    (tmp_path / "config.json").write_text((QWEN_RECORD.parent / "config.json").read_text())
    return {**json.loads(QWEN_RECORD.read_text()), "families": families}


def check(tmp_path, record: dict) -> list[tuple[str, str, str]]:
    """(family, status, detail) of each ask, by `python -m dgprecompile.launch.proof_asks` with sglang 0.5.14 importable
    (warm's embedding-mask calls take SGLang's own index arithmetic)."""
    (tmp_path / "asks.json").write_text(json.dumps(record))
    res = subprocess.run([sys.executable, "-m", "dgprecompile.launch.proof_asks", str(tmp_path / "asks.json"), "--json"],
                         env=_env(), capture_output=True, text=True, timeout=300)
    assert res.returncode in (0, 1), res.stderr[-3000:]
    return [(c["family"], c["status"], c["detail"]) for c in json.loads(res.stdout)["checks"]]


def test_spans_join_consecutive_m():
    assert spans([5, 1, 2, 3, 8192, 3]) == [[1, 3], [5, 5], [8192, 8192]]


def test_sglangs_own_calls_are_recorded_in_its_terms(made):
    got = made["no_grad"]
    assert got["where"] == "sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe._fused_moe_kernel_sequence"
    assert got["notes"] == []
    assert got["asks"]["triton-moe"] == {"calls": [{"experts": 20, "hidden": 6144, "intermediate": 2560, "topk": 8,
                                                    "ms": [[1, 3], [32, 32], [64, 64], [8192, 8192]]}]}
    calls = {c["function"].rsplit(".", 1)[-1]: c for c in got["asks"]["inductor"]["calls"]}
    assert set(calls) == {"moe_sum_reduce_torch_compile", "get_masked_input_and_mask"}
    assert calls["moe_sum_reduce_torch_compile"]["args"] == [{"shape": ["m", 8, 6144], "dtype": "bfloat16"},
                                                             {"shape": ["m", 6144], "dtype": "bfloat16"}, 1.0]
    assert calls["moe_sum_reduce_torch_compile"]["ms"] == [[1, 3], [32, 32]]
    mask = calls["get_masked_input_and_mask"]
    assert mask["args"][0] == {"shape": ["m"], "dtype": "int64"} and mask["args"][1:3] == [0, 151936 // 8]
    assert mask["ms"] == [[1, 3], [32, 32], [64, 64], [8192, 8192]] and mask["grad"] == "no_grad"


def _looked_up(asks: dict) -> dict:
    """The record as the device's strict run makes it: each planned graph's calls asked inductor's cache (hits there;
    dynamo is off in this CPU job, so none here)."""
    asks = json.loads(json.dumps(asks))
    for call in asks["inductor"]["calls"]:
        assert call["lookups"] == 0
        call["lookups"] = 1
    return asks


def test_heads_plan_covers_the_recorded_calls_and_misses_a_changed_one(made, tmp_path):
    asks = _looked_up(made["no_grad"]["asks"])
    record = _record(tmp_path, asks)
    got = check(tmp_path, record)
    assert [status for _, status, _ in got] == [COVERED] * 3, got
    # a plan for another tp passes the mask other arguments; one m beyond the sum's m_max; a GPU data/gpus.yaml
    # lacks (a record's GPU it holds is planned with its --gpu: tests/test_proof_asks.py)
    changed = json.loads(json.dumps(asks))
    mask = next(c for c in changed["inductor"]["calls"] if c["function"].endswith("get_masked_input_and_mask"))
    mask["args"][2] = 151936 // 4
    changed["inductor"]["calls"].append({**changed["inductor"]["calls"][-1], "ms": [[33, 33]]})
    record = _record(tmp_path, changed)
    record["environment"] = {**record["environment"], "gpu": "NVIDIA A100-SXM4-80GB"}
    details = check(tmp_path, record)
    assert all(status == MISSING for _, status, _ in details), details
    assert details[-1][2].startswith("planned for NVIDIA H200, the run's GPU is NVIDIA A100")


def test_a_job_under_inference_mode_is_held_to_a_plan_under_it(made, tmp_path):
    record = _record(tmp_path, _looked_up(made["inference"]["asks"]))
    assert {c["grad"] for c in record["families"]["inductor"]["calls"]} == {"inference"}
    assert [(status, detail) for family, status, detail in check(tmp_path, record) if family == "inductor"] == \
        [(MISSING, "planned under no_grad, the runtime ran inference")] * 2
    record["server_command"] = "env SGLANG_ENABLE_TORCH_INFERENCE_MODE=1 " + record["server_command"]
    assert {status for _, status, _ in check(tmp_path, record)} == {COVERED}


LOOKUP_JOB = textwrap.dedent("""
    import json, torch
    from dgprecompile.launch import model_asks
    asks = model_asks.Asks()
    model_asks.watch_compile(asks)

    @torch.compile(dynamic=True)
    def remap(ids, info, padded):  # SGLang's expert-location remap without EPLB: returns its input
        return ids

    @torch.compile(dynamic=True)
    def scaled(x, scale):
        return x * scale

    with torch.no_grad():
        for m in (2, 3):
            remap(torch.zeros(m, 8, dtype=torch.int32), None, None)
            scaled(torch.ones(m, 4), 2.0)
    print(json.dumps({c["function"].rsplit(".", 1)[-1]: c["lookups"] for c in asks.to_dict()["inductor"]["calls"]}))
""")


def test_a_compiled_function_that_hands_inductor_no_graph_asks_the_cache_nothing(tmp_path):
    """The 480B run on the H200 (2026-12-05) recorded SGLang's _biased_grouped_topk_postprocess: torch.compile'd, but
    with no EPLB it returns its input and dynamo hands inductor no graph; real torch on the CPU counts the lookups."""
    res = subprocess.run([sys.executable, "-c", LOOKUP_JOB], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": str(REPO), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "ind")})
    assert res.returncode == 0, res.stderr[-3000:]
    lookups = json.loads(res.stdout.strip().splitlines()[-1])
    assert lookups["remap"] == 0 and lookups["scaled"] >= 1, lookups


def test_a_call_with_no_lookup_is_covered_whatever_the_plan_and_one_with_lookups_is_not(tmp_path):
    asks = {"inductor": {"calls": [
        {"function": "sglang.srt.layers.moe.topk._biased_grouped_topk_postprocess",
         "args": [{"shape": ["m", 8], "dtype": "int32"}, None, None], "grad": "no_grad", "ms": [[1, 8192]],
         "lookups": lookups} for lookups in (0, 2)]}}
    got = check(tmp_path, _record(tmp_path, asks))
    assert got == [("inductor", COVERED, "no inductor lookup: nothing to build"),
                   ("inductor", MISSING, "no planned graph is this function (data/inductor_graphs.yaml)")], got


PATH_RECORD_JOB = textwrap.dedent("""
    import json, sys, types
    import torch
    from dgprecompile.compile.triton_moe import publish_standins
    publish_standins()
    from dgprecompile.launch import model_asks
    from sglang.kernels.ops.embeddings import vocab_parallel_embedding as vpe
    from sglang.kernels.ops.moe import fused_moe_triton_kernels as kernels
    from sglang.srt.layers.moe.moe_runner.triton_utils import fused_moe  # binds moe_sum_reduce_triton at its top
    # STAND-IN for srt/layers/vocab_parallel_embedding.py (it needs compressed_tensors, not installed here): a module
    # that binds the embedding under another name, as that one does (fused_vocab_parallel_embedding)
    layer = types.ModuleType("dgp_standin_embedding_layer")
    layer.fused_vocab_parallel_embedding = vpe.vocab_parallel_embedding
    sys.modules[layer.__name__] = layer
    asks = model_asks.Asks()
    wrapped = model_asks.watch_path(asks)
    again = model_asks.watch_path(asks)  # a second watcher finds the first and wraps nothing
    meta = dict(device="meta")

    def called(fn, *args):
        try:  # SGLang's body launches the Triton kernel (or asserts a CUDA tensor): no GPU here, the record is made
            fn(*args)
        except Exception:
            pass

    for m in (1, 2, 3, 16, 32, 0):
        called(fused_moe.moe_sum_reduce_triton, torch.empty(m, 8, 6144, dtype=torch.bfloat16, **meta),
               torch.empty(m, 6144, dtype=torch.bfloat16, **meta), 1.0)
    called(kernels.moe_sum_reduce_triton, torch.empty(5, 9, 6144, dtype=torch.bfloat16, **meta),
           torch.empty(5, 6144, dtype=torch.bfloat16, **meta), 1.0)
    for m in (1, 7, 8):
        called(layer.fused_vocab_parallel_embedding, torch.empty(m, dtype=torch.int64, **meta),
               torch.empty(18992, 6144, dtype=torch.bfloat16, **meta), 0, 18992, 0, 151936, 151936)
    from sglang.kernels.ops.moe import ep_moe_kernels as ep
    i32, fp8 = torch.int32, torch.float8_e4m3fn
    counts = [torch.empty(257, dtype=i32, **meta) for _ in range(3)]
    called(ep.ep_scatter, torch.empty(3, 7168, dtype=fp8, **meta), torch.empty(3, 56, **meta),
           torch.empty(3, 9, dtype=i32, **meta), *counts, torch.empty(3456, 7168, dtype=fp8, **meta),
           torch.empty(3456, 56, **meta), torch.empty(3456, dtype=i32, **meta), torch.empty(3, 9, dtype=i32, **meta))
    bf16, ids = torch.bfloat16, torch.empty(3, 9, dtype=i32, **meta)
    called(ep.post_reorder_deepgemm, torch.empty(3456, 7168, dtype=bf16, **meta),
           torch.empty(3, 7168, dtype=bf16, **meta), ids, ids, torch.empty(3, 9, **meta), 9, 3, 7168, 2.5)
    same = {"fused_moe": fused_moe.moe_sum_reduce_triton is kernels.moe_sum_reduce_triton,
            "layer": layer.fused_vocab_parallel_embedding is vpe.vocab_parallel_embedding}
    print(json.dumps({"wrapped": wrapped, "again": again, "same": same, "asks": asks.to_dict(), "notes": asks.notes}))
""")


def test_the_model_path_triton_wrappers_record_their_calls_wherever_they_are_bound(tmp_path):
    """sglang 0.5.23's own moe_sum_reduce_triton, called through the module of SGLang's that imported it at its top
    (fused_moe.py) and through its defining module, and its own vocab_parallel_embedding through a stand-in module
    that binds it under another name: each call recorded once in the runtime's terms, identical calls joined as m
    spans, a call at m 0 said in a note; ep_scatter, one wrapper of two planned kernels, wrapped once and each call
    recorded once per kernel; the post-permute's call at the m of its output."""
    sglang, triton = beside_venv("sglang-0.5.23", "sglang/__init__.py"), beside_venv("triton-3.8.0", "triton/__init__.py")
    if sglang is None or triton is None:
        pytest.skip("sglang 0.5.23's and Triton 3.8.0's folders beside the venv (make setup)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([sglang, STANDINS, triton, str(REPO)]),
           "DGP_STANDINS": "sgl_kernel,torchvision", "DGP_TRANSFORMERS_EXIST_OK": "1"}
    res = subprocess.run([sys.executable, "-c", PATH_RECORD_JOB], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    summed = "sglang.kernels.ops.moe.fused_moe_triton_kernels.moe_sum_reduce_triton"
    embedding = "sglang.kernels.ops.embeddings.vocab_parallel_embedding.vocab_parallel_embedding"
    scatter = "sglang.kernels.ops.moe.ep_moe_kernels.ep_scatter"  # one wrapper, two kernels: wrapped once
    post = "sglang.kernels.ops.moe.ep_moe_kernels.post_reorder_deepgemm"
    assert got["wrapped"] == [embedding, "sglang.kernels.ops.moe.moe_fused_gate.moe_fused_gate", summed,
                              "sglang.kernels.ops.moe.moe_align_small_numel.moe_align_small_numel",
                              "sglang.kernels.ops.moe.ep_moe_kernels.fused_moe_dispatch_index",
                              "sglang.kernels.ops.moe.triton_pad_expert_counts.pad_expert_counts", scatter,
                              post, "sglang.kernels.ops.moe.ep_moe_kernels.tma_align_input_scale",
                              "sglang.kernels.ops.moe.ep_moe_kernels.moe_ep_deepgemm_preprocess"], got
    assert got["again"] == [] and got["same"] == {"fused_moe": True, "layer": True}
    assert got["notes"] == [f"a {summed} call at m 0 not recorded"], got["notes"]
    out = {"shape": ["m", 6144], "dtype": "bfloat16"}
    calls = got["asks"]["triton-path"]["calls"]
    scattered = [c for c in calls if c["function"] == scatter]  # each call recorded once for each of its kernels
    assert [c["kernel"] for c in scattered] == ["ep_scatter_1", "ep_scatter_2"], scattered
    assert scattered[0]["args"] == scattered[1]["args"] and all(c["ms"] == [[3, 3]] for c in scattered)
    assert scattered[0]["args"][6] == {"shape": [3456, 7168], "dtype": "float8_e4m3fn"}
    # the post-permute's m is its output's rows (m_arg), not the down output's compact rows (its first tensor)
    (reordered,) = [c for c in calls if c["function"] == post]
    assert reordered["ms"] == [[3, 3]] and reordered["args"][:2] == [{"shape": [3456, 7168], "dtype": "bfloat16"},
                                                                     {"shape": ["m", 7168], "dtype": "bfloat16"}]
    assert reordered["args"][4:] == [{"shape": ["m", 9], "dtype": "float32"}, 9, 3, 7168, 2.5], reordered
    assert [c for c in calls if c["function"] not in (scatter, post)] == [
        {"kernel": "moe_sum_reduce", "function": summed, "kwargs": {}, "ms": [[1, 3], [16, 16], [32, 32]],
         "args": [{"shape": ["m", 8, 6144], "dtype": "bfloat16"}, out, 1.0]},
        {"kernel": "moe_sum_reduce", "function": summed, "kwargs": {}, "ms": [[5, 5]],
         "args": [{"shape": ["m", 9, 6144], "dtype": "bfloat16"}, out, 1.0]},
        {"kernel": "vocab_parallel_embedding", "function": embedding, "kwargs": {}, "ms": [[1, 1], [7, 8]],
         "args": [{"shape": ["m"], "dtype": "int64"}, {"shape": [18992, 6144], "dtype": "bfloat16"},
                  0, 18992, 0, 151936, 151936]}], got["asks"]
    (tmp_path / "asks.json").write_text(json.dumps(_record(tmp_path, got["asks"])))
    assert load_record(tmp_path / "asks.json")["families"] == got["asks"]  # a record's schema holds what it makes
