"""A proof that outlives the commit (issue 43): what the runtime asked for in a device proof run, recorded as data
(bench/results/<run>/asks.json, data/schemas/proof-asks.json), held against HEAD's plan here, without a GPU
(dgprecompile/launch/proof_asks.py).

The committed records come from the H200 runs at 8c45a8e: in each deleted-entry run SGLang's own model, under strict
launch, refused exactly the entry that had been moved aside, so the runtime looks those names up. HEAD's plan for the
same server command and config must still name each of them as the runtime would here: DeepGEMM's from sgl-deep-gemm
0.1.3's headers, nvcc and the include path the run passed, SGLang's from its 0.5.14 wheel, FlashInfer's by module.
A changed name, a dropped item, a MoE call outside the planned m range or a graph under another grad mode fails,
naming the ask."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import NVCC, STANDINS, beside_venv, sgl_deep_gemm_dir, sglang_014_dir

from dgprecompile.errors import InputError
from dgprecompile.launch.proof_asks import (
    COVERED,
    MAX_RECORD_TEXT,
    MISSING,
    RECORD_NAMES,
    UNCHECKED,
    check_asks,
    load_record,
    record_plan,
)

REPO = Path(__file__).resolve().parent.parent
RECORDS = sorted(p for name in RECORD_NAMES for p in (REPO / "bench" / "results").glob(f"*/{name}"))
QWEN_RECORD = REPO / "bench" / "results" / "2026-12-03-h200-model-480b" / "asks.json"
MOE_SUM = "sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe.moe_sum_reduce_torch_compile"


def _release_path(record: dict) -> list[str] | None:
    """The release's own folders (make setup) for the record's sglang and sgl-deep-gemm, or None. A sweep's record
    names no sglang among its versions (the run called DeepGEMM alone): its DeepGEMM's folder is enough."""
    versions = record["environment"]["versions"]
    wanted = versions.get("sglang")
    sglang = (None if wanted is None else sglang_014_dir() if wanted == "0.5.14"
              else beside_venv(f"sglang-{wanted}", "sglang/__init__.py"))  # 0.5.9-0.5.23 (make setup)
    deep_gemm = sgl_deep_gemm_dir(versions["sgl-deep-gemm"]) if "sgl-deep-gemm" in versions else None
    triton = beside_venv(f"triton-{versions['triton']}", "triton/__init__.py") if "triton" in versions else None
    if (wanted and sglang is None) or ("sgl-deep-gemm" in versions and deep_gemm is None):
        return None
    # sglang's modules import triton at their top (warm's compiled-function calls import them): the run's release
    return [*([sglang] if sglang else []), *([deep_gemm] if deep_gemm else []), *([triton] if triton else [])]


def _check(path: Path) -> subprocess.CompletedProcess:
    record = load_record(path)
    folders = _release_path(record)
    if folders is None:
        pytest.skip(f"sglang {record['sglang']}'s and its DeepGEMM's folders beside the venv (make setup)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*folders, STANDINS, str(REPO)]),
           "DGP_STANDINS": "sgl_kernel,torchvision"}
    return subprocess.run([sys.executable, "-m", "dgprecompile.launch.proof_asks", str(path), "--nvcc", NVCC, "--json"],
                          capture_output=True, text=True, timeout=300, env=env)


def test_records_are_committed_with_their_config():
    assert len(RECORDS) >= 2
    for path in RECORDS:
        record = load_record(path)
        assert (path.parent / record["config"]).is_file() and record["name"] == path.parent.name


def _changed(name: str) -> set[str]:
    """The families of record ``name`` whose asks HEAD no longer makes on purpose (bench/proof_families.yaml)."""
    listed = yaml.safe_load((REPO / "bench" / "proof_families.yaml").read_text()).get("changed_asks", [])
    return {c["family"] for c in listed if c["record"] == name}


@pytest.mark.parametrize("path", RECORDS, ids=[p.parent.name for p in RECORDS])
def test_heads_plan_covers_every_ask_the_runtime_made(path):
    """Every ask is COVERED, but those of a family listed as changed: at least one of those is MISSING (an entry
    whose asks hold again is stale)."""
    res = _check(path)
    changed = _changed(path.parent.name)
    assert res.returncode == (1 if changed else 0), res.stdout[-3000:] + res.stderr[-2000:]
    report = json.loads(res.stdout)
    families = {c["family"] for c in report["checks"]}
    assert families == set(load_record(path)["families"]) and changed <= families, (families, changed)
    assert all(c["status"] == COVERED for c in report["checks"] if c["family"] not in changed)
    for family in changed:
        assert any(c["status"] == MISSING for c in report["checks"] if c["family"] == family), (family, "stale")


def test_a_gzipped_record_reads_as_its_text_and_one_that_inflates_without_end_is_refused(tmp_path):
    """asks.json.gz (a run with thousands of distinct calls) loads as the same record; a file that is not gzip, or
    whose text would pass MAX_RECORD_TEXT (a small file that inflates to more), is one InputError, read in bounded
    steps."""
    import gzip

    text = QWEN_RECORD.read_text()
    (tmp_path / "asks.json.gz").write_bytes(gzip.compress(text.encode()))
    assert load_record(tmp_path / "asks.json.gz") == load_record(QWEN_RECORD)
    (tmp_path / "bad.json.gz").write_bytes(text.encode())
    with pytest.raises(InputError, match="not a gzip file"):
        load_record(tmp_path / "bad.json.gz")
    with open(tmp_path / "bomb.json.gz", "wb") as f:  # 33 MiB of spaces: about 33 kB on disk
        with gzip.GzipFile(fileobj=f, mode="wb") as z:
            for _ in range((MAX_RECORD_TEXT >> 20) + 1):
                z.write(b" " * (1 << 20))
    assert (tmp_path / "bomb.json.gz").stat().st_size < 1 << 20
    with pytest.raises(InputError, match="once decompressed"):
        load_record(tmp_path / "bomb.json.gz")


def test_a_changed_ask_fails_naming_it(tmp_path):
    record = json.loads(QWEN_RECORD.read_text())
    record["families"]["sglang-jit"]["modules"] = ["sgl_kernel_jit_fused_rope_true_64_true_bf16_t_57b2f3a46420e695"]
    entry = record["families"]["deepgemm"]["entries"][0]
    record["families"]["deepgemm"]["entries"] = [entry[:-1] + ("0" if entry[-1] != "0" else "1")]
    path = tmp_path / "asks.json"
    path.write_text(json.dumps(record))
    (tmp_path / "config.json").write_text((QWEN_RECORD.parent / "config.json").read_text())
    res = _check(path)
    assert res.returncode == 1, res.stdout + res.stderr
    missing = {(c["family"], c["ask"]) for c in json.loads(res.stdout)["checks"] if c["status"] == MISSING}
    assert missing == {("sglang-jit", record["families"]["sglang-jit"]["modules"][0]),
                       ("deepgemm", record["families"]["deepgemm"]["entries"][0])}


def test_the_runs_include_path_is_part_of_deepgemms_names(tmp_path):
    """The entry names hold the include path the runtime passed to nvcc: without the run's, they differ."""
    record = json.loads(QWEN_RECORD.read_text())
    del record["environment"]["deepgemm_include"]
    record["families"] = {"deepgemm": record["families"]["deepgemm"]}
    (tmp_path / "asks.json").write_text(json.dumps(record))
    (tmp_path / "config.json").write_text((QWEN_RECORD.parent / "config.json").read_text())
    res = _check(tmp_path / "asks.json")
    assert res.returncode == 1 and json.loads(res.stdout)["checks"][0]["status"] == MISSING


SWEEP_RECORD = REPO / "bench" / "results" / "2026-12-02-h200-torch214-generations-sglang-0.5.23" / "asks.json"


def test_a_sweeps_record_is_held_to_the_plan_of_the_options_its_warm_was_given(tmp_path):
    """A DeepGEMM sweep called the runtime itself over m 1..65536 (no server): its record names the `plan` options
    of its warm (--max-tokens 65536). Planned to 4096 tokens instead, the names of the larger m are MISSING;
    a record with neither a server command nor a plan request is refused."""
    record = json.loads(SWEEP_RECORD.read_text())
    record["plan_request"]["max_tokens"] = 4096
    (tmp_path / "asks.json").write_text(json.dumps(record))
    (tmp_path / "config.json").write_text((SWEEP_RECORD.parent / "config.json").read_text())
    res = _check(tmp_path / "asks.json")
    statuses = [c["status"] for c in json.loads(res.stdout)["checks"]]
    assert res.returncode == 1 and COVERED in statuses and MISSING in statuses, res.stdout[-2000:] + res.stderr[-2000:]
    del record["plan_request"]
    (tmp_path / "asks.json").write_text(json.dumps(record))
    with pytest.raises(InputError, match="server_command|plan_request"):
        load_record(tmp_path / "asks.json")


def _asks(tmp_path, families: dict) -> dict:
    record = {**json.loads(QWEN_RECORD.read_text()), "families": families}
    (tmp_path / "config.json").write_text((QWEN_RECORD.parent / "config.json").read_text())
    return record


def test_moe_calls_graph_calls_and_modules_are_held_to_the_plans_shapes_ranges_and_grad_mode(tmp_path):
    """Hand-written asks in the runtime's terms for the README's 480B command (E20 of 160 per rank, hidden 6144,
    intermediate 2560, top-8; the MoE sum's graph at top-8, hidden 6144, bfloat16, scale 1.0)."""
    moe = {"experts": 20, "hidden": 6144, "intermediate": 2560, "topk": 8}
    graph = {"function": MOE_SUM, "args": [{"shape": ["m", 8, 6144], "dtype": "bfloat16"},
                                           {"shape": ["m", 6144], "dtype": "bfloat16"}, 1.0]}
    record = _asks(tmp_path, {
        "triton-moe": {"calls": [{**moe, "m": 3}, {**moe, "ms": [[1, 96], [8192, 8192]]}, {**moe, "ms": [[8000, 8193]]},
                                 {**moe, "experts": 40, "m": 3}]},
        "inductor": {"calls": [{**graph, "m": 5, "grad": "no_grad"},
                               {**graph, "ms": [[5, 5]], "grad": "inference"},
                               {**graph, "ms": [[1, 33]], "grad": "no_grad"}]},
        "flashinfer": {"entries": ["0.6.12/90a/cached_ops/sampling", "0.6.12/90a/cached_ops/dsv3_fused_routing"]}})
    report = check_asks(record, record_plan(record, tmp_path))
    got = [(c.family, c.status, c.detail.split(" of ")[0]) for c in report.checks]
    assert got == [
        ("flashinfer", COVERED, ""),
        ("flashinfer", MISSING, "HEAD's plan names no item the runtime looks up by this name"),
        ("inductor", COVERED, ""),
        ("inductor", MISSING, "planned under no_grad, the runtime ran inference"),
        ("inductor", MISSING, "m 1-33 above the planned m_max"),
        ("triton-moe", COVERED, ""), ("triton-moe", COVERED, ""),
        ("triton-moe", MISSING, "m 8193 outside the planned m range"),
        ("triton-moe", MISSING, "HEAD's plan has no Triton MoE item")], got
    assert report.return_code == 1 and report.to_dict()["return_code"] == 1
    # the same server run with inductor's inference mode on: HEAD's plan carries it, and the no_grad ask now misses
    record["server_command"] = "env SGLANG_ENABLE_TORCH_INFERENCE_MODE=1 " + record["server_command"]
    again = check_asks(record, record_plan(record, tmp_path))
    assert [c.status for c in again.checks if c.family == "inductor"] == [MISSING, COVERED, MISSING]


def test_a_record_made_on_an_h100_is_held_to_heads_plan_for_that_gpu(tmp_path):
    """SGLang picks its tuned Triton MoE config and inductor keys its graphs by the device's name: a record made on
    an H100 is planned with --gpu h100 (its row of data/gpus.yaml), so its asks meet items of that name; a GPU the
    table lacks is planned for the default GPU and its asks are named MISSING, never passed."""
    moe = {"experts": 20, "hidden": 6144, "intermediate": 2560, "topk": 8, "m": 3}
    record = _asks(tmp_path, {"triton-moe": {"calls": [moe]}})
    for gpu, status in (("NVIDIA H100 80GB HBM3", COVERED), ("NVIDIA H200", COVERED), ("Tesla T4", MISSING)):
        record["environment"] = {**record["environment"], "gpu": gpu}
        plan = record_plan(record, tmp_path)
        assert {it.device_name for it in plan.triton_moe.values()} == {gpu if status == COVERED else "NVIDIA H200"}
        assert [c.status for c in check_asks(record, plan).checks] == [status], gpu


def test_a_record_that_is_not_valid_is_refused_naming_the_field(tmp_path):
    record = json.loads(QWEN_RECORD.read_text())
    del record["environment"]["versions"]
    (tmp_path / "asks.json").write_text(json.dumps(record))
    with pytest.raises(InputError, match="environment"):
        load_record(tmp_path / "asks.json")
    res = subprocess.run([sys.executable, "-m", "dgprecompile.launch.proof_asks", str(tmp_path / "asks.json")],
                         capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert res.returncode == 2 and res.stderr.startswith("error: ") and "\nhint: " in res.stderr
    assert "Traceback" not in res.stderr


def test_sglang_0523s_ninja_module_names_are_the_ones_its_runtime_asked_for(tmp_path):
    """SGLang 0.5.23's ninja loader named the module it refused in the deleted-entry run of
    bench/results/2026-12-06-h100-model-480b-0523 (driver_deleted-run.json: "JIT module '<name>' has no usable cached
    build"); HEAD's plan of that run's command names the same module, and not a changed one."""
    run = REPO / "bench" / "results" / "2026-12-06-h100-model-480b-0523"
    record = json.loads((run / "asks.json").read_text())
    errors = [f["error"] for f in json.loads((run / "driver_deleted-run.json").read_text())["failed"].values()]
    asked = sorted({e.split("JIT module '", 1)[1].split("'", 1)[0] for e in errors if "JIT module '" in e})
    assert asked, errors
    record["families"] = {"sglang-jit": {"modules": [*asked, asked[0].replace("_128_", "_64_")]}}
    path = tmp_path / "asks.json"
    path.write_text(json.dumps(record))
    (tmp_path / "config.json").write_text((run / "config.json").read_text())
    res = _check(path)
    checks = {c["ask"]: c["status"] for c in json.loads(res.stdout)["checks"]}
    assert checks == {**{a: COVERED for a in asked}, asked[0].replace("_128_", "_64_"): MISSING}, res.stdout


RECORD_0523 = REPO / "bench" / "results" / "2026-12-06-h100-model-480b-0523-at-87a6116" / "asks.json"


def test_a_launcher_of_a_planned_model_path_kernel_is_one_warm_builds(tmp_path):
    """Under Triton 3.5-3.6 each kernel has a launcher module of its own: HEAD's plan for sglang 0.5.23's 480B command
    warms the embedding and the router beside fused_moe_kernel (compile/triton_path.py builds their launchers), so a
    launcher ask of the router is held to the key warm computes (Triton 3.6.0's own CudaLauncher), not called
    unplanned; a kernel no item warms is named with the ones that are."""
    triton = beside_venv("triton-3.6.0", "triton/__init__.py")
    sglang = beside_venv("sglang-0.5.23", "sglang/__init__.py")
    if triton is None or sglang is None:
        pytest.skip("Triton 3.6.0's and sglang 0.5.23's folders beside the venv (make setup)")
    record = json.loads(RECORD_0523.read_text())
    record["environment"]["versions"]["triton"] = "3.6.0"
    signature = [["scores_ptr", "*bf16"], ["bias_ptr", "constexpr"], ["out_w_ptr", "*fp32"], ["out_ids_ptr", "*i32"],
                 ["M", "i32"], ["E", "constexpr"], ["TOPK", "constexpr"]]
    asked = [{"name": "__triton_launcher", "key": "A" * 52, "file": "__triton_launcher.cpython-312-x86_64-linux-gnu.so",
              "launcher": {"kernel": kernel, "signature": signature}}
             for kernel in ("_router_triton_kernel", "other_kernel")]
    record["families"] = {"triton-host": {"modules": asked, "platform_key": "x86_64,Linux,64bit,ELF"}}
    (tmp_path / "config.json").write_text((RECORD_0523.parent / "config.json").read_text())
    (tmp_path / "asks.json").write_text(json.dumps(record))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([sglang, triton, STANDINS, str(REPO)]),
           "DGP_STANDINS": "sgl_kernel,torchvision"}
    res = subprocess.run([sys.executable, "-m", "dgprecompile.launch.proof_asks", str(tmp_path / "asks.json"),
                          "--json"], capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 1, res.stdout[-2000:] + res.stderr[-2000:]
    router, other = (c["detail"] for c in json.loads(res.stdout)["checks"])
    assert router.startswith("HEAD's warm files it under "), router  # a key computed, another than the asked one
    assert other == ("a launcher of other_kernel: HEAD's plan warms only _moe_sum_reduce_kernel, "
                     "_router_triton_kernel, _vocab_parallel_embedding_kernel, fused_moe_kernel"), other


SUM_REDUCE = "sglang.kernels.ops.moe.fused_moe_triton_kernels.moe_sum_reduce_triton"
PATH_JOB = """
import dataclasses, json, sys
from pathlib import Path
from dgprecompile.launch.proof_asks import check_asks, load_record, record_plan
record = load_record(Path(sys.argv[1]))
plan = record_plan(record, Path(sys.argv[1]).parent)
keep = {int(m) for m in sys.argv[2].split(",")} if len(sys.argv) > 2 else None
for key, it in list(plan.triton_path.items()):  # the MoE sum's items planned at the given m only
    if keep is not None and it.kernel == "moe_sum_reduce":
        plan.triton_path[key] = dataclasses.replace(it, ms=tuple(m for m in it.ms if m in keep))
print(json.dumps([[c.status, c.detail] for c in check_asks(record, plan).checks]))
"""


def _path_checks(tmp_path, calls: list[dict], *keep: str, model: tuple[str, str] | None = None
                 ) -> list[tuple[str, str]]:
    """(status, detail) of each triton-path ask of sglang 0.5.23's 480B record (the README's command, --tp 8 --ep 8,
    Triton 3.8.0) against HEAD's plan, by check_asks in a process with that release's folders on PYTHONPATH (warm's
    own calls of SGLang's wrappers need them); ``keep``: the MoE sum's planned m cut to these (a plan edited here);
    ``model``: (server command, config.json text) in place of the record's."""
    record = json.loads(RECORD_0523.read_text())
    folders = [beside_venv("sglang-0.5.23", "sglang/__init__.py"), beside_venv("triton-3.8.0", "triton/__init__.py")]
    if None in folders:
        pytest.skip("sglang 0.5.23's and Triton 3.8.0's folders beside the venv (make setup)")
    record["families"] = {"triton-path": {"calls": calls}}
    if model is not None:
        record["server_command"] = model[0]
    (tmp_path / "config.json").write_text(model[1] if model else (RECORD_0523.parent / "config.json").read_text())
    (tmp_path / "asks.json").write_text(json.dumps(record))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*folders, STANDINS, str(REPO)]),
           "DGP_STANDINS": "sgl_kernel,torchvision"}
    res = subprocess.run([sys.executable, "-c", PATH_JOB, str(tmp_path / "asks.json"), *keep],
                         capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    return [tuple(c) for c in json.loads(res.stdout.strip().splitlines()[-1])]


def _sum_call(topk: int, ms: list[list[int]]) -> dict:
    return {"kernel": "moe_sum_reduce", "function": SUM_REDUCE, "ms": ms,
            "args": [{"shape": ["m", topk, 6144], "dtype": "bfloat16"}, {"shape": ["m", 6144], "dtype": "bfloat16"}, 1.0]}


def test_model_path_triton_calls_are_held_to_warms_own_calls_and_the_planned_m_classes(tmp_path):
    """Hand-written asks in the runtime's terms for the README's 480B command on sglang 0.5.23: the MoE combine's sum
    over m 1..32 at top-k 8 (what moe_combine_topk passes moe_sum_reduce_triton), the router over m 1..8192 and rank
    0's embedding window over m 1..8192 (m is in no key of the embedding's: one planned m holds them all) are
    COVERED; the sum at top-k 9 is not a call HEAD's warm makes; a call of a function the data file does not name
    for its kernel, and a kernel it does not know, are MISSING."""
    router = {"kernel": "router", "function": "sglang.kernels.ops.moe.moe_fused_gate.moe_fused_gate",
              "args": [{"shape": ["m", 160], "dtype": "bfloat16"}, None, 8],
              "kwargs": {"renormalize": True, "scoring_func": "softmax"}, "ms": [[1, 8192]]}
    embedding = {"kernel": "vocab_parallel_embedding",
                 "function": "sglang.kernels.ops.embeddings.vocab_parallel_embedding.vocab_parallel_embedding",
                 "args": [{"shape": ["m"], "dtype": "int64"}, {"shape": [18992, 6144], "dtype": "bfloat16"},
                          0, 18992, 0, 151936, 151936], "ms": [[1, 8192]]}
    got = _path_checks(tmp_path, [_sum_call(8, [[1, 32]]), router, embedding, _sum_call(9, [[1, 32]]),
                                  {**_sum_call(8, [[1, 1]]), "function": "sglang.elsewhere.moe_sum_reduce_triton"},
                                  {**_sum_call(8, [[1, 1]]), "kernel": "another_kernel"}])
    assert [status for status, _ in got] == [COVERED, COVERED, COVERED, MISSING, MISSING, MISSING], got
    assert got[3][1].startswith("the arguments differ from every call HEAD's warm makes for "
                                "triton_path:moe_sum_reduce."), got[3]
    assert got[4][1] == f"the runtime called sglang.elsewhere.moe_sum_reduce_triton, HEAD's warm calls {SUM_REDUCE}"
    assert got[5][1] == "no planned kernel is this one (data/triton_path.yaml)"


def test_an_m_class_the_plan_lacks_is_missing(tmp_path):
    """Triton specialises the sum's token_num by class (== 1, % 16 == 0, other): a plan whose MoE sum item lacks
    the % 16 class (its m edited to 1 and 17 here) misses the runtime's m 1..32 (16 and 32 are of that class) but
    still holds m 1..15; with no m of the sum planned, nothing of it is covered."""
    asked = [_sum_call(8, [[1, 32]]), _sum_call(8, [[1, 15]])]
    got = _path_checks(tmp_path, asked, "1,17")
    assert [status for status, _ in got] == [MISSING, COVERED], got
    assert got[0][1].startswith("m 16: a class of Triton's int specialisation"), got[0]
    assert [status for status, _ in _path_checks(tmp_path, asked[1:], "16")] == [MISSING]


def test_a_model_path_call_this_machine_cannot_replay_is_unchecked(tmp_path):
    """Warm's calls take the release's own wrappers: in this test's process no sglang is importable, so the ask is
    UNCHECKED with the reason, which fails the record (never COVERED without the replay)."""
    try:
        import sglang  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("an sglang is importable in the test's process")
    record = {**json.loads(RECORD_0523.read_text()), "families": {"triton-path": {"calls": [_sum_call(8, [[1, 32]])]}}}
    (tmp_path / "config.json").write_text((RECORD_0523.parent / "config.json").read_text())
    report = check_asks(record, record_plan(record, tmp_path))
    assert [(c.status, c.detail.split(":")[0]) for c in report.checks] == [(UNCHECKED, "cannot make warm's calls here")]
    assert report.return_code == 1


ALIGN = "sglang.kernels.ops.moe.moe_align_small_numel.moe_align_small_numel"
DSV3 = ("python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 8",
        (REPO / "dgprecompile" / "data" / "models" / "DeepSeek-V3.json").read_text())


def _align_call(m: int, block: int) -> dict:
    """The call moe_align_block_size makes at m tokens of DeepSeek-V3's top 9 over its 257 local experts, as the
    driver records it (launch/model_asks.py described_call: a first dimension equal to m shown as "m"): the int32
    ids, E + 1 buckets, the config's BLOCK_SIZE_M, its buffers (9 m * block ids, 9 m blocks, one count)."""
    count = {"shape": ["m" if m == 1 else 1], "dtype": "int32"}
    return {"kernel": "moe_align_small_numel", "function": ALIGN, "ms": [[m, m]],
            "args": [{"shape": ["m", 9], "dtype": "int32"}, 258, block,
                     {"shape": [9 * m * block], "dtype": "int32"}, {"shape": [9 * m], "dtype": "int32"}, count], "kwargs": {"write_inactive_prefix_count": False}}


def test_the_small_numel_aligns_calls_are_held_to_warms_own_calls_for_the_records_gpu(tmp_path):
    """DeepSeek-V3 --tp 8 on the record's H100: moe_align_block_size's calls of the small-numel align at m 1..7 with
    SGLang's default BLOCK_SIZE_M 64 (no H100 file for E=257,N=256) are calls HEAD's warm makes (its replay runs
    SGLang's own _prepare_fused_moe_run); the H200 file's block 16 on this H100 is not, nor m 8 (72 ids: no such
    call)."""
    got = _path_checks(tmp_path, [*(_align_call(m, 64) for m in range(1, 8)), _align_call(2, 16), _align_call(8, 64)],
                       model=DSV3)
    assert [status for status, _ in got] == [COVERED] * 7 + [MISSING] * 2, got
    assert got[7][1].startswith("the arguments differ from every call HEAD's warm makes for "
                                "triton_path:moe_align_small_numel."), got[7]


DISPATCH = "sglang.kernels.ops.moe.ep_moe_kernels.fused_moe_dispatch_index"
DSV3_DEEP_GEMM = (DSV3[0] + " --moe-runner-backend deep_gemm", DSV3[1])


def _dispatch_call(experts: int, topk: int, m_max: int, ms: list[list[int]]) -> dict:
    """A call of the deep_gemm runner's dispatch index as the driver records it: the [m, topk] int32 ids, the local
    experts, the layout's m_max (compact 1, masked (m // 256 + 1) * 256), expert_start 0."""
    return {"kernel": "moe_dispatch_index", "function": DISPATCH, "ms": ms,
            "args": [{"shape": ["m", topk], "dtype": "int32"}, experts, m_max], "kwargs": {"expert_start": 0}}


def test_the_deep_gemm_runners_dispatch_calls_are_held_to_warms_calls_with_m_max_by_its_class(tmp_path):
    """DeepSeek-V3 --tp 8 --moe-runner-backend deep_gemm: the compact layout's calls over m 1..8192 and the masked
    layout's at each m_max its m give (256 below m 256, 512 and 8448 above: warm calls it with 256 only, the same
    class in the key) are COVERED; 256 local experts or top 8 are not calls HEAD's warm makes."""
    got = _path_checks(tmp_path, [_dispatch_call(257, 9, 1, [[1, 8192]]), _dispatch_call(257, 9, 256, [[1, 255]]),
                                  _dispatch_call(257, 9, 512, [[256, 511]]), _dispatch_call(257, 9, 8448, [[8192, 8192]]),
                                  _dispatch_call(256, 9, 1, [[1, 1]]), _dispatch_call(257, 8, 1, [[1, 1]])],
                       model=DSV3_DEEP_GEMM)
    assert [status for status, _ in got] == [COVERED] * 4 + [MISSING] * 2, got


def test_a_dispatch_m_whose_key_no_planned_m_has_is_missing():
    """The runtime's m are held to the planned m by the dispatch key (the class of m * topk, the block size): an item
    planned at m 1 and 16 holds m 1..56 of top 9 over 257 experts (block 512), not m 57 (block 1024)."""
    from dgprecompile.launch.proof_asks import _dispatch_left
    from dgprecompile.runtimes.items import TritonPathItem
    from dgprecompile.runtimes.triton_moe import TRITON_PATH

    k = TRITON_PATH.kernel("moe_dispatch_index")
    item = TritonPathItem("moe_dispatch_index", (("experts", 257), ("topk", 9), ("layouts", "compact")), (1, 16), 90,
                          "")
    assert _dispatch_left({"ms": [[1, 56]]}, [item], k) == ""
    assert _dispatch_left({"ms": [[1, 60]]}, [item], k).startswith("m 57: its class of m * topk and block size")


SCATTER = "sglang.kernels.ops.moe.ep_moe_kernels.ep_scatter"


def _scatter_call(kernel: str, m: int, experts: int = 257, hidden: int = 7168) -> dict:
    """A call of ep_scatter as the driver records it for one of its two kernels (launch/model_asks.py watch_path: one
    record per kernel) at m tokens of top 9 on the compact layout: the FP8 [m, hidden] input and its fp32 scales, the
    ids, the three per-expert counts, the output rows (SGLang's _get_compact_all_tokens at row alignment 128), the
    src2dst."""
    assignments = 9 * m
    rows = 128 * (min(assignments, experts) + (assignments - min(assignments, experts)) // 128)
    counts, ids = {"shape": [experts], "dtype": "int32"}, {"shape": ["m", 9], "dtype": "int32"}

    def rows_of(first, dtype: str, *rest) -> dict:
        return {"shape": [first, *rest], "dtype": dtype}

    return {"kernel": kernel, "function": SCATTER, "ms": [[m, m]],
            "args": [rows_of("m", "float8_e4m3fn", hidden), rows_of("m", "float32", hidden // 128), ids, counts, counts,
                     counts, rows_of(rows, "float8_e4m3fn", hidden), rows_of(rows, "float32", hidden // 128),
                     rows_of(rows, "int32"), ids],
            "kwargs": {"expert_alignment": 128, "expert_start": 0, "quant_block_size": 128, "scale_ue8m0": False}}


def test_the_deep_gemm_runners_scatter_calls_are_held_to_each_of_its_kernels_items(tmp_path):
    """DeepSeek-V3 --tp 8 --moe-runner-backend deep_gemm: ep_scatter's calls recorded for each of its two kernels at
    m 1, 37, 256 and 8192 are COVERED (their output rows, in no key, differ from warm's: compared without them; the
    second kernel's m by class); 256 local experts or hidden 4096 are not calls HEAD's warm makes."""
    calls = [_scatter_call(kernel, m) for kernel in ("ep_scatter_1", "ep_scatter_2") for m in (1, 37, 256, 8192)]
    got = _path_checks(tmp_path, [*calls, _scatter_call("ep_scatter_1", 5, experts=256),
                                  _scatter_call("ep_scatter_2", 5, hidden=4096)], model=DSV3_DEEP_GEMM)
    assert [status for status, _ in got] == [COVERED] * 8 + [MISSING] * 2, got


TMA = "sglang.kernels.ops.moe.ep_moe_kernels.tma_align_input_scale"


def _tma_call(m: int, width: int) -> dict:
    """A call of the compact layout's scale copy as the driver records it: the [all_tokens, width] fp32 scales (its
    m the rows, block_e 128 times a count, in no key of it but by their class: free_rows)."""
    rows = 128 * (min(9 * m, 257) + (9 * m - min(9 * m, 257)) // 128)
    return {"kernel": "tma_align", "function": TMA, "ms": [[rows, rows]], "kwargs": {},
            "args": [{"shape": [rows, width], "dtype": "float32"}]}


def test_the_deep_gemm_runners_scale_copies_are_held_to_its_grouped_gemms_widths(tmp_path):
    """DeepSeek-V3 --tp 8 --moe-runner-backend deep_gemm: the scale copies before the up GEMM (56 wide) and the down
    GEMM (2 wide) at m 1, 37 and 8192 are COVERED; a 4-wide copy (a 512-wide down GEMM) is not a call HEAD's warm
    makes."""
    calls = [_tma_call(m, width) for m in (1, 37, 8192) for width in (56, 2)]
    got = _path_checks(tmp_path, [*calls, _tma_call(5, 4)], model=DSV3_DEEP_GEMM)
    assert [status for status, _ in got] == [COVERED] * 6 + [MISSING], got


POST = "sglang.kernels.ops.moe.ep_moe_kernels.post_reorder_deepgemm"


def _post_call(m: int, topk: int = 9, scale: float = 2.5) -> dict:
    """A call of the deep_gemm runner's post-permute as the driver records it (its m the output's rows: m_arg) at m
    tokens on the compact layout: the down GEMM's bf16 output (its compact rows), the bf16 [m, 7168] output, the int32
    src2dst and ids, the fp32 weights, topk, m, hidden, DeepSeek-V3's routed scale."""
    pairs = {"shape": ["m", topk], "dtype": "int32"}
    return {"kernel": "post_reorder", "function": POST, "ms": [[m, m]], "kwargs": {},
            "args": [{"shape": [128 * (min(topk * m, 257) + (topk * m - min(topk * m, 257)) // 128), 7168],
                      "dtype": "bfloat16"}, {"shape": ["m", 7168], "dtype": "bfloat16"}, pairs, pairs,
                     {"shape": ["m", topk], "dtype": "float32"}, topk, m, 7168, scale]}


def test_the_deep_gemm_runners_post_permute_calls_are_held_to_its_planned_m_by_class_and_block(tmp_path):
    """DeepSeek-V3 --tp 8 --moe-runner-backend deep_gemm: the post-permute's calls at m 1, 2, 16, 18 (512-wide
    blocks on 132 SMs), 19, 32, 37, 256 and 8192 (1024-wide), at the model's scale 2.5 (warm's 1.0: a float, its
    value in no key), are COVERED; top 16 is not a call HEAD's warm makes."""
    ms = (1, 2, 16, 18, 19, 32, 37, 256, 8192)
    got = _path_checks(tmp_path, [*(_post_call(m) for m in ms), _post_call(5, topk=16)], model=DSV3_DEEP_GEMM)
    assert [status for status, _ in got] == [COVERED] * len(ms) + [MISSING], got


def _masked_post_call(m: int, m_max: int, dtype: str = "bfloat16") -> dict:
    """The same post-permute on the masked layout, as the 2026-12-07 H100 proof recorded it: a [local experts, m_max,
    hidden] down output and a flat [m * topk] src2dst (pointers to the kernel: in no key)."""
    call = _post_call(m)
    call["args"][0] = {"shape": [257, m_max, 7168], "dtype": dtype}
    call["args"][2] = {"shape": [9 * m], "dtype": "int32"}
    return call


def test_the_masked_layouts_post_permute_calls_are_held_to_the_same_item(tmp_path):
    """The masked layout hands the post-permute other tensors (3-D down output, flat src2dst) to the same kernel: its
    calls at m 1, 37, 767 and 8192 are COVERED by the one planned item; a float16 down output (another key) is not a
    call HEAD's warm makes."""
    ms = ((1, 128), (37, 128), (767, 768), (8192, 8192))
    got = _path_checks(tmp_path, [*(_masked_post_call(m, top) for m, top in ms),
                                  _masked_post_call(5, 128, dtype="float16")], model=DSV3_DEEP_GEMM)
    assert [status for status, _ in got] == [COVERED] * len(ms) + [MISSING], got


def test_a_post_permute_m_whose_block_no_planned_m_has_is_missing():
    """The runtime's m are held to the planned m by the post-permute's key (the class of m, SGLang's block size on the
    item's SMs): an item planned at m 1, 2 and 16 on 132 SMs holds m 1..18 (512-wide), not m 19 (1024-wide)."""
    from dgprecompile.launch.proof_asks import _blocks_left
    from dgprecompile.runtimes.items import TritonPathItem
    from dgprecompile.runtimes.triton_moe import TRITON_PATH

    k = TRITON_PATH.kernel("post_reorder")
    item = TritonPathItem("post_reorder", (("topk", 9), ("hidden", 7168), ("sms", 132), ("threads_per_sm", 2048)),
                          (1, 2, 16), 90, "")
    assert _blocks_left({"ms": [[1, 18]]}, [item], k) == ""
    assert _blocks_left({"ms": [[1, 20]]}, [item], k).startswith("m 19: its class of m and block size")
