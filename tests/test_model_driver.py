"""The independent live proof's driver (dgprecompile/launch/model_driver.py) on the CPU machine: the parts that need
no GPU, against SGLang 0.5.14's own code where they touch it (its option parser and its attention-world rule); the
summariser of tests/gpu/model_proof.sh against the refusal messages the startup hook really prints. The driver's run
itself needs the H200 (tests/gpu/model_proof.sh)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers import STANDINS, beside_venv, needs_sgl014, sglang_014_dir

from dgprecompile.launch.model_driver import RUNTIME_INIT, layers_to_keep, server_argv
from dgprecompile.launch.model_report import Report, new_files

REPO = Path(__file__).resolve().parent.parent
MODELS = REPO / "dgprecompile" / "data" / "models"
DSV3 = REPO / "dgprecompile" / "data" / "models" / "DeepSeek-V3.json"


def test_the_server_command_is_kept_but_its_model_path_and_the_layer_override():
    argv = server_argv("python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 8 --ep 8", "/m", 4)
    assert argv == ["--model-path", "/m", "--tp", "8", "--ep", "8", "--json-model-override-args",
                    '{"num_hidden_layers": 4}']
    # the user's own override is kept and merged; --model-path=... and `sglang serve` are read too
    argv = server_argv('sglang serve --model-path=x --json-model-override-args \'{"rope_theta": 5}\' --tp 2', "/m", 1)
    assert argv[:4] == ["--model-path", "/m", "--tp", "2"]
    assert json.loads(argv[-1]) == {"rope_theta": 5, "num_hidden_layers": 1}
    assert server_argv("python -m sglang.launch_server --model-path q --tp 2", "/m", None) == \
        ["--model-path", "/m", "--tp", "2"]


def test_the_layers_kept_reach_the_first_moe_layer():
    assert layers_to_keep(json.loads(DSV3.read_text())) == 4  # three dense layers, then the first MoE layer
    assert layers_to_keep(json.loads((MODELS / "Qwen3-Coder-480B-A35B-Instruct-FP8.json").read_text())) == 1
    assert layers_to_keep({"num_hidden_layers": 48, "mlp_only_layers": [0, 1], "decoder_sparse_step": 1}) == 3
    assert layers_to_keep({"num_hidden_layers": 2, "first_k_dense_replace": 5}) == 2  # never past the model


def test_a_module_that_fails_is_reported_with_its_first_m_and_still_called_at_the_others():
    """A refusal at small m (inductor's kernel of moe_sum_reduce, say) must not hide what the larger m run."""
    report, calls = Report(), []

    def flaky(m):
        calls.append(m)
        if m in (3, 4):
            raise RuntimeError("dgprecompile strict mode: Triton tried to compile kernel fused_moe_kernel\nmore")
        return m

    for m in range(1, 6):
        report.call("layers.0.mlp", m, flaky, m)
    assert calls == [1, 2, 3, 4, 5] and report.calls == {"layers.0.mlp": 3}
    assert report.failed == {"layers.0.mlp": {"m": 3, "count": 2, "error": "RuntimeError: dgprecompile strict mode: "
                                              "Triton tried to compile kernel fused_moe_kernel"}}
    assert new_files({"A": {"a"}, "B": {"b"}}, {"A": {"a"}, "B": {"b", "c", "d"}, "C": {"e"}}) == {
        "B": {"count": 2, "files": ["c", "d"]}, "C": {"count": 1, "files": ["e"]}}




def test_each_modules_first_call_is_timed_once_between_two_syncs():
    """The first forward's split (issue 45): each module's first call, the GPU's work included (a sync before and
    after it), once; later calls and a module whose first call failed are not timed (a refusal is no load)."""
    events = []
    report = Report(sync=lambda: events.append("sync"))

    def work(m, seconds=0.0):
        events.append(f"call {m}")
        time.sleep(seconds)
        if m < 0:
            raise RuntimeError("refused")

    report.call("layers.0.mlp", 1, work, 1, 0.05)
    report.call("layers.0.mlp", 2, work, 2)
    report.call("norm", 1, work, 1)
    report.call("layers.3.mlp", 1, work, -1)
    report.call("layers.3.mlp", 2, work, 2)
    assert events == ["sync", "call 1", "sync", "call 2", "sync", "call 1", "sync", "sync", "call -1", "call 2"]
    assert set(report.first_call_s) == {"layers.0.mlp", "norm"}
    assert 0.05 <= report.first_call_s["layers.0.mlp"] < 1 and report.first_call_s["norm"] < 0.05
    assert Report().first_call_s == {} and Report().sync is None  # without a sync (no GPU): nothing timed

def test_what_torch_compile_did_in_a_first_call_is_charged_to_that_module(tmp_path):
    """A launched first forward compiles nothing yet is 1.57 s against a 4 ms second one (the 480B on the H100,
    2026-12-07): each module's first call also records the frames Dynamo traced and the graphs inductor compiled or
    loaded in it (torch's own counters, a real torch.compile on the CPU here), so the record says which module's
    seconds are a trace or a cached graph's load, not a guess, and how many of them torch's own timers saw (tracing,
    backend, the generated module's load); a module without torch.compile has no entry."""
    script = textwrap.dedent("""
        import json, torch
        from dgprecompile.launch.model_report import Report, dynamo_counts
        double = torch.compile(lambda x: x * 2 + 1)
        report = Report(sync=lambda: None, counts=dynamo_counts)
        report.call("compiled", 1, double, torch.ones(4))
        report.call("compiled", 2, double, torch.ones(4))
        report.call("plain", 1, torch.add, torch.ones(2), 1)
        print(json.dumps(report.first_call_torch_s))
        print(json.dumps(report.first_call_counts))
    """)
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"), "TRITON_CACHE_DIR": str(tmp_path / "t")}

    def one_process() -> tuple[dict, dict]:  # the script in a new process on the one cache: (seconds, counts)
        proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        seconds, counts = (json.loads(line) for line in proc.stdout.strip().splitlines()[-2:])
        return seconds, counts

    seconds, counts = one_process()
    assert set(counts) == {"compiled"}, counts
    assert counts["compiled"]["traced"] >= 1 and counts["compiled"]["inductor_compiled"] == 1, counts
    assert "inductor_loaded" not in counts["compiled"]  # a new cache: compiled, not loaded
    # torch's own timers, nested: the backend (here a compile) inside all of torch.compile's work, tracing beside it
    assert set(seconds) == {"compiled"}, seconds
    spent = seconds["compiled"]
    assert {"torch_compile_s", "tracing_s", "backend_s", "module_load_s"} <= spent.keys(), spent
    assert spent["backend_s"] + spent["tracing_s"] <= spent["torch_compile_s"] + 0.01, spent
    assert spent["module_load_s"] <= spent["backend_s"] + 0.01, spent
    # a second process on that cache (a launched first call): traced again, the graph loaded, its seconds charged
    seconds, counts = one_process()
    assert counts["compiled"]["inductor_loaded"] == 1 and "inductor_compiled" not in counts["compiled"], counts
    assert set(seconds) == {"compiled"} and seconds["compiled"]["module_load_s"] > 0, seconds


FLASHINFER_0612 = beside_venv("flashinfer-0.6.12", "flashinfer/__init__.py")


@pytest.mark.skipif(FLASHINFER_0612 is None or sglang_014_dir() is None,
                    reason="flashinfer-python 0.6.12 and sglang 0.5.14 (its tvm-ffi) beside the venv (make setup)")
def test_the_drivers_own_count_leaves_out_flashinfers_log_and_names_a_built_file(tmp_path):
    """The driver counts the files a run adds under every cache folder, independently of launch's snapshot; the real
    FlashInfer 0.6.12 writes its JIT log at import where it knows its arch (<version>/90a/): no compile (the DeepSeek-V3
    proof on the H200 at ffea8d6 exited 1 on it with every family 0 refused 0 new). A module file is named."""
    job = textwrap.dedent("""
        import json, os, sys
        from dgprecompile.launch.model_report import cache_files, new_files
        before = cache_files()
        import flashinfer.jit.core  # the real one: opens its log
        if sys.argv[1] == "compile":
            d = os.path.join(os.environ["FLASHINFER_WORKSPACE_BASE"], ".cache/flashinfer/0.6.12/90a/cached_ops/x")
            os.makedirs(d)
            open(os.path.join(d, "x.so"), "wb").write(b"built at run time")
        print(json.dumps(new_files(before, cache_files())))
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([FLASHINFER_0612, sglang_014_dir() or "", str(REPO)]), "FLASHINFER_CUDA_ARCH_LIST": "9.0a",
           "DG_JIT_CACHE_DIR": str(tmp_path / "cache"), "FLASHINFER_WORKSPACE_BASE": str(tmp_path / "cache" / "fi")}
    (tmp_path / "cache" / "fi").mkdir(parents=True)
    quiet = subprocess.run([sys.executable, "-c", job, "none"], env=env, capture_output=True, text=True, timeout=300)
    assert quiet.returncode == 0, quiet.stderr
    assert (tmp_path / "cache/fi/.cache/flashinfer/0.6.12/90a/flashinfer_jit.log").is_file()
    assert json.loads(quiet.stdout.splitlines()[-1]) == {}
    built = subprocess.run([sys.executable, "-c", job, "compile"], env=env, capture_output=True, text=True, timeout=300)
    new = json.loads(built.stdout.splitlines()[-1])
    assert new["DG_JIT_CACHE_DIR"] == {"count": 1, "files": ["fi/.cache/flashinfer/0.6.12/90a/cached_ops/x/x.so"]}
    assert new["FLASHINFER_WORKSPACE_BASE"]["count"] == 1

@needs_sgl014
def test_the_driver_argv_parses_with_sglangs_own_parser_and_the_stated_sizes_follow_its_rules():
    """SGLang 0.5.14's own parser reads what the driver passes, and the group sizes come from its own
    compute_dp_attention_world_info (run in a subprocess: the import needs the stand-ins on the path)."""
    code = """
import argparse, json, sys
from sglang.srt.server_args import ServerArgs
from dgprecompile.launch.model_driver import server_argv
from dgprecompile.launch.model_groups import sizes
p = argparse.ArgumentParser(); ServerArgs.add_cli_args(p)
out = {}
for cmd in sys.argv[1:]:
    ns = p.parse_args(server_argv(cmd, "/m", 4))
    out[cmd] = [sizes(ns), ns.json_model_override_args]
print(json.dumps(out))
"""
    cmds = ["python -m sglang.launch_server --model-path M --tp 8",
            "python -m sglang.launch_server --model-path M --tp 8 --ep 8",
            "python -m sglang.launch_server --model-path M --tp 8 --dp 4 --enable-dp-attention"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([sglang_014_dir(), STANDINS, str(REPO)]),
           "DGP_STANDINS": "sgl_kernel,triton,torchvision", "DGP_TRANSFORMERS_EXIST_OK": "1"}
    res = subprocess.run([sys.executable, "-c", code, *cmds], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got[cmds[0]][0] == {"_TP": 8, "_ATTN_TP": 8, "_MOE_EP": 1, "_MOE_TP": 8}
    assert got[cmds[1]][0] == {"_TP": 8, "_ATTN_TP": 8, "_MOE_EP": 8, "_MOE_TP": 1}
    assert got[cmds[2]][0]["_ATTN_TP"] == 2  # dp attention: 8 ranks / 4 attention groups
    assert json.loads(got[cmds[0]][1]) == {"num_hidden_layers": 4}


def _summary():
    sys.path.insert(0, str(REPO / "tests" / "gpu"))
    import model_proof_summary

    return model_proof_summary


def test_the_summary_names_each_family_from_the_hooks_own_refusal_messages(tmp_path):
    from dgprecompile.launch.hook import _dgprecompile_hook as hook
    from dgprecompile.launch.hook import _dgprecompile_inductor as inductor

    s = _summary()
    lines = [hook.triton_refusal_message("fused_moe_kernel").splitlines()[0],
             hook.triton_refusal_message("cuda_utils (Triton's host module, bd3a39e80ee847d0)").splitlines()[0],
             hook.triton_refusal_message("triton_per_fused_copy__mul_sum_0").splitlines()[0],
             "dgprecompile strict mode: refused a DeepGEMM runtime compile (nvcc -o x); warm the cache with: x",
             inductor.inductor_refusal_message("moe_sum_reduce_torch_compile (/x/fused_moe.py:320)").splitlines()[0]]
    assert [s.family_of_message(line) for line in lines] == ["triton-moe", "triton-host", "inductor", "deepgemm",
                                                             "inductor"]
    assert s.family_of_path("./cache/kernel.sm90_fp8_gemm_1d2d.00/kernel.cubin") == "deepgemm"
    assert s.family_of_path("./tvm-ffi/sgl_kernel_jit_x/x.so") == "sglang-jit"
    assert s.family_of_path("./triton/ABC/__grp__fused_moe_kernel.json") == "triton-moe"
    assert s.family_of_path("./triton/ABC/cuda_utils.cpython-312-x86_64-linux-gnu.so") == "triton-host"
    assert s.family_of_path("./dgprecompile/index.json") == ""
    # FlashInfer's own log (every import of flashinfer.jit opens it; the carried 480B run of 2026-12-05 made it new)
    assert s.family_of_path("./flashinfer/0.6.12/90a/flashinfer_jit.log") == ""
    assert s.family_of_path("./flashinfer/0.6.12/90a/cached_ops/sampling/sampling.so") == "flashinfer"
    stderr = tmp_path / "err"
    stderr.write_text("\n".join(["noise", *lines, "more noise"]) + "\n")
    driver = tmp_path / "driver.json"
    driver.write_text(json.dumps({"calls": {"a": 3}, "failed": {}, "ms": 3, "seconds": 1.0, "standins": [],
                                  "dynamo": {"compiled": 2}}))
    before, after = tmp_path / "before", tmp_path / "after"
    before.write_text("./cache/kernel.a/kernel.cubin\n")
    after.write_text("./cache/kernel.a/kernel.cubin\n./triton/ABC/__grp__fused_moe_kernel.json\n")
    victims = tmp_path / "victims"
    victims.write_text("triton-moe triton/ABC\nsglang-jit tvm-ffi/x\n")
    res = subprocess.run([sys.executable, str(REPO / "tests" / "gpu" / "model_proof_summary.py"), "--driver",
                          str(driver), "--stderr", str(stderr), "--before", str(before), "--after", str(after),
                          "--deleted", str(victims)], capture_output=True, text=True, timeout=60)
    out = res.stdout.splitlines()
    assert "family triton-moe: refused 1, new 1" in out and "family deepgemm: refused 1, new 0" in out
    assert "family inductor: refused 2, new 1" in out  # the torch.compile frames count as new inductor work
    assert "family sglang-jit: refused 0, new 0" in out
    assert "deleted triton-moe refused by name" in out and "deleted sglang-jit NOT refused" in out


def test_the_model_path_kernels_are_their_own_family_where_the_proof_names_them(tmp_path):
    """SGLang's model-path Triton kernels (data/triton_path.yaml, passed by model_proof.sh as --path-kernels) are
    family triton-path, refused or new; an unnamed Triton kernel stays "other" (nothing planned it)."""
    from dgprecompile.launch.hook import _dgprecompile_hook as hook
    from dgprecompile.runtimes.triton_moe import TRITON_PATH

    names = sorted(k["kernel"] for k in TRITON_PATH.data()["kernels"].values())
    driver, stderr = tmp_path / "driver.json", tmp_path / "err"
    driver.write_text(json.dumps({"calls": {"a": 3}, "failed": {}, "ms": 3, "seconds": 1.0, "standins": []}))
    stderr.write_text("\n".join(hook.triton_refusal_message(k).splitlines()[0]
                                for k in ("_moe_sum_reduce_kernel", "_some_unplanned_kernel")) + "\n")
    before, after = tmp_path / "before", tmp_path / "after"
    before.write_text("")
    after.write_text("./triton/XYZ/__grp___router_triton_kernel.json\n")
    argv = [sys.executable, str(REPO / "tests" / "gpu" / "model_proof_summary.py"), "--driver", str(driver),
            "--stderr", str(stderr), "--before", str(before), "--after", str(after)]
    named = subprocess.run([*argv, "--path-kernels", ",".join(names)], capture_output=True, text=True, timeout=60)
    assert "family triton-path: refused 1, new 1" in named.stdout.splitlines(), named.stdout + named.stderr
    assert "family other: refused 1, new 0" in named.stdout.splitlines()
    unnamed = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert "family triton-path: refused 0, new 0" in unnamed.stdout.splitlines()
    assert "family other: refused 2, new 1" in unnamed.stdout.splitlines()


@pytest.mark.parametrize("config,args", [(DSV3, "--tp 8"),
                                         (MODELS / "Qwen3-Coder-480B-A35B-Instruct-FP8.json", "--tp 8 --ep 8")])
def test_the_proof_configs_are_what_the_planner_reads(config, args, tmp_path):
    """The device proof's model folders: the planner reads each config (so plan and driver start from one file)."""
    from dgprecompile.planning.plan import PlanRequest
    from dgprecompile.planning.request import plan_from_request

    (tmp_path / "config.json").write_text(config.read_text())
    plan = plan_from_request(PlanRequest(sglang_cmd=f"python -m sglang.launch_server --model-path {tmp_path} {args}",
                                         sglang="0.5.14"))
    assert plan.triton_moe


def test_verify_live_server_reads_the_model_from_the_command_not_the_plan(tmp_path, runner):
    """--live-server resolves the command's own --model-path (here a bundled name) into a config folder; a command
    without one is bad input before anything runs."""
    from conftest import invoke

    from dgprecompile.launch.model_live import model_folder

    folder = model_folder("python -m sglang.launch_server --model-path Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8 "
                          "--tp 8 --ep 8", tmp_path / "m")
    bundled = json.loads((MODELS / "Qwen3-Coder-480B-A35B-Instruct-FP8.json").read_text())
    assert json.loads((folder / "config.json").read_text()) == bundled
    res = invoke(runner, "verify", "--model", "Qwen3-Coder-480B", "--tp", "8", "--ep", "8", "--sglang", "0.5.14",
                 "--cache-dir", tmp_path / "c", "--live", "--live-server", "python -m sglang.launch_server --tp 8")
    assert res.exit_code == 2 and "--live-server has no --model-path" in res.output
    assert sum(line.startswith("error:") for line in res.output.splitlines()) == 1 and "Traceback" not in res.output


def test_only_distinct_layers_are_driven_and_a_shape_or_module_change_makes_a_layer_distinct():
    torch = pytest.importorskip("torch")
    from dgprecompile.launch.model_driver import distinct_layers

    def dense(inter=64):
        return torch.nn.ModuleDict({"self_attn": torch.nn.Linear(32, 32), "mlp": torch.nn.Linear(32, inter)})

    moe = torch.nn.ModuleDict({"self_attn": torch.nn.Linear(32, 32), "mlp": torch.nn.Bilinear(32, 32, 64)})
    assert distinct_layers([dense(), dense(), dense(), moe]) == [0, 3]  # DeepSeek-V3's prefix: one dense, one MoE
    assert distinct_layers([dense(), dense(128), dense()]) == [0, 1]  # another intermediate size is another kernel
    half = dense()
    half.mlp.to(torch.float16)
    assert distinct_layers([dense(), half]) == [0, 1]  # another dtype too


def _sampler_reads(source: str) -> set[str]:
    """The SamplingBatchInfo fields SGLang's Sampler reads on the decode path the driver runs (forward, the logits'
    preprocessing, sampling from probabilities, the token-id sync), from the release's own sampler.py."""
    import ast

    tree = ast.parse(source)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Sampler")
    wanted = {"forward", "_preprocess_logits", "_sample_from_probs", "_sync_token_ids_across_tp"}
    reads = set()
    for fn in cls.body:
        if isinstance(fn, ast.FunctionDef) and fn.name in wanted:
            for node in ast.walk(fn):
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                        node.value.id == "sampling_info":
                    reads.add(node.attr)
    return reads


@pytest.mark.parametrize("release", ["0.5.9", "0.5.14", "0.5.17", "0.5.23"])
def test_the_decode_steps_sampling_standin_has_every_field_the_releases_sampler_reads(release):
    src = REPO / ".venv" / f"sglang-{release}" / "sglang" / "srt" / "layers" / "sampler.py"
    if not src.is_file():
        if os.environ.get("CI") == "true":
            pytest.fail(f"make setup installs sglang {release} beside the venv; {src} is missing")
        pytest.skip(f"no sglang {release} beside the venv (make setup)")
    from dgprecompile.launch.model_driver import sampling_standin

    reads = _sampler_reads(src.read_text())
    assert {"temperatures", "top_ks", "top_ps", "need_top_k_sampling"} <= reads, reads  # the parse found the path
    info = sampling_standin(3, device="cpu")
    assert sorted(reads - set(vars(info))) == [], f"sglang {release}'s Sampler reads fields the stand-in lacks"
    assert info.top_ks.shape == (3,) and info.temperatures.shape == (3, 1)


def test_the_flashinfer_victim_is_a_module_the_driver_runs(tmp_path, capsys):
    # the decode step's sampling (on no other victim's call path), else DeepSeek's fused routing; never the all-reduce
    # fusion, which one GPU does not run
    summary = _summary()
    (tmp_path / "dgprecompile").mkdir()
    entries = {m: {"entries": [f"flashinfer/0.6.12/90a/cached_ops/{m}"]} for m in ("trtllm_comm", "sampling")}
    index = {"flashinfer": {f"flashinfer:{m}@0.6.12.sm90a": rec for m, rec in entries.items()}}
    (tmp_path / "dgprecompile" / "index.json").write_text(json.dumps(index))
    summary.pick_victims(str(tmp_path))
    assert capsys.readouterr().out.splitlines() == ["flashinfer flashinfer/0.6.12/90a/cached_ops/sampling"]
    index["flashinfer"]["flashinfer:dsv3_fused_routing@0.6.12.sm90a"] = {
        "entries": ["flashinfer/0.6.12/90a/cached_ops/dsv3_fused_routing"]}
    (tmp_path / "dgprecompile" / "index.json").write_text(json.dumps(index))
    summary.pick_victims(str(tmp_path))
    assert capsys.readouterr().out.splitlines() == ["flashinfer flashinfer/0.6.12/90a/cached_ops/sampling"]
    del index["flashinfer"]["flashinfer:sampling@0.6.12.sm90a"]  # --sampling-backend pytorch: the routing module
    (tmp_path / "dgprecompile" / "index.json").write_text(json.dumps(index))
    summary.pick_victims(str(tmp_path))
    assert capsys.readouterr().out.splitlines() == ["flashinfer flashinfer/0.6.12/90a/cached_ops/dsv3_fused_routing"]


GROUPS = textwrap.dedent("""\
    import json, sys
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.server_args import prepare_server_args, set_global_server_args_for_scheduler
    from sglang.srt.distributed import parallel_state as ps
    from dgprecompile.launch import model_groups
    from dgprecompile.launch.model_driver import Report, scheduler_init, server_argv
    sa = prepare_server_args(server_argv(sys.argv[2], sys.argv[1], 1))
    set_global_server_args_for_scheduler(sa)
    report = Report()
    model_config = ModelConfig.from_server_args(sa)
    stated = model_groups.install(sa, model_config, report)
    scheduler_init(sa, report)
    groups = [ps.get_tp_group(), ps.get_attn_tp_group(), ps.get_moe_ep_group(), ps.get_moe_tp_group()]
    print(json.dumps({"stated": stated, "notes": report.notes, "sizes": [g.world_size for g in groups],
                      "ranks": [g.rank_in_group for g in groups]}))
""")
STACK_0523 = os.environ.get("DGP_STACK_0523", "/tmp/stack0523-cpu/stack")  # tests/gpu/stack0523_cpu_check.sh's


def _release_env(release: str) -> tuple[str, dict]:
    """The Python and environment that import the release: sglang 0.5.14 beside the venv (make setup), or sglang
    0.5.23's own stack (torch 2.14.1, ...) where tests/gpu/stack0523_cpu_check.sh installed it."""
    if release == "0.5.14":
        if sglang_014_dir() is None:
            pytest.skip("sglang 0.5.14 not installed beside the venv (make setup)")
        path = [sglang_014_dir(), beside_venv("triton-3.6.0", "triton/__init__.py"), STANDINS, str(REPO)]
        return sys.executable, {"PYTHONPATH": os.pathsep.join(p for p in path if p),
                                "DGP_STANDINS": "sgl_kernel,torchvision"}
    env_file = Path(STACK_0523) / "stack.env"
    if not env_file.is_file():
        pytest.skip(f"sglang 0.5.23's stack is not installed at {STACK_0523} (tests/gpu/stack0523_cpu_check.sh)")
    site = next(line.split("=", 1)[1].strip().strip("'\"") for line in env_file.read_text().splitlines()
                if line.startswith(("STACK_SITE=", "export STACK_SITE=")))
    python = Path(STACK_0523).parent / "venv" / "bin" / "python"
    return str(python), {"PYTHONPATH": os.pathsep.join([site, STANDINS, str(REPO)]), "DGP_STANDINS": "sgl_kernel"}


@pytest.mark.parametrize("release", ["0.5.14", "0.5.23"])
def test_sglangs_own_groups_are_built_for_one_rank_and_state_the_commands_sizes(release, tmp_path):
    """The driver's STAND-IN collectives on SGLang's own distributed set-up (gloo, world size 1, `--device cpu`
    so its groups need no GPU): 0.5.14 takes the sizes as arguments; 0.5.23 reads every width and group from its
    runtime context, published as the scheduler publishes it. Either way SGLang's group getters answer the
    command's sizes (tp 8, attention tp 8, MoE ep 8, MoE tp 1) at rank 0, nothing is left unset, and the
    scheduler's own MoE / FP8 / FP4 set-up runs as that release calls it (the expert location needs the model
    class, which SGLang registers only where CUDA is: not here)."""
    python, env = _release_env(release)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text((MODELS / "Qwen3-Coder-480B-A35B-Instruct-FP8.json").read_text())
    (tmp_path / "groups.py").write_text(GROUPS)
    command = "python -m sglang.launch_server --model-path q --tp 8 --ep 8 --device cpu"
    res = subprocess.run([python, str(tmp_path / "groups.py"), str(tmp_path / "model"), command], capture_output=True,
                         text=True, timeout=600, env={**os.environ, **env, "DGP_TRANSFORMERS_EXIST_OK": "1"})
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    takes = "server_args" if release == "0.5.14" else ""  # 0.5.23's read the published configuration
    assert got == {"stated": {"_TP": 8, "_ATTN_TP": 8, "_MOE_EP": 8, "_MOE_TP": 1}, "sizes": [8, 8, 8, 1],
                   "ranks": [0, 0, 0, 0], "notes": [f"SGLang's own {name}({takes})" for _, name in RUNTIME_INIT]}, got


def test_the_summary_counts_sglang_0523s_own_refusal_and_deepjits_refused_compile(tmp_path):
    """The deleted-entry run of sglang 0.5.23's 480B proof on the H100 (bench/results/2026-12-06-h100-model-480b-0523,
    its driver's report and launch's closing line as the run wrote them): SGLang's ninja loader refuses a missing
    module itself (SGLANG_CRASH_ON_JIT_COMPILE, which launch sets) and DeepJIT asserts on the refusing compiler's
    exit status 97; both are the deleted entries' refusals, not other failures (the run's own summary, older than
    this rule, said "deleted sglang-jit NOT refused" and 4 other failures)."""
    run = REPO / "bench" / "results" / "2026-12-06-h100-model-480b-0523"
    stderr = tmp_path / "err"
    stderr.write_text("".join(line + "\n" for line in (run / "logs.txt").read_text().splitlines()
                              if line.startswith("error: strict mode refused 389 ")))
    victims = tmp_path / "victims"
    victims.write_text("deepgemm cache/x\nsglang-jit sglang-jit/sm90a/x\nflashinfer flashinfer/x\n")
    res = subprocess.run([sys.executable, str(REPO / "tests" / "gpu" / "model_proof_summary.py"), "--driver",
                          str(run / "driver_deleted-run.json"), "--stderr", str(stderr), "--deleted", str(victims)],
                         capture_output=True, text=True, timeout=60)
    out = res.stdout.splitlines()
    assert stderr.read_text() and res.returncode == 0, res.stderr
    assert "driver failures other than refusals: 0" in out, out
    assert {"deleted deepgemm refused by name", "deleted sglang-jit refused by name",
            "deleted flashinfer refused by name"} <= set(out), out
    assert "family sglang-jit: refused 1, new 0" in out, out


DEEPGEMM_LIST = textwrap.dedent("""\
    import json, sys
    from sglang.srt.server_args import prepare_server_args, set_global_server_args_for_scheduler
    from sglang.srt.layers import deep_gemm_wrapper
    from sglang.srt.layers.deep_gemm_wrapper import compile_utils
    from dgprecompile.launch.model_driver import Report, deepgemm_init, server_argv
    sa = prepare_server_args(server_argv(sys.argv[2], sys.argv[1], 1))
    set_global_server_args_for_scheduler(sa)
    report = Report()
    deepgemm_init(sa, report)  # here SGLang's DeepGEMM JIT is off (no sm_90 GPU): not called
    off = list(report.notes)
    deep_gemm_wrapper.ENABLE_JIT_DEEPGEMM = True  # STAND-IN: SGLang's configurer turns it on only on an sm_90 GPU
    report = Report()
    deepgemm_init(sa, report)
    ms, first = compile_utils._BUILTIN_M_LIST, compile_utils._DO_COMPILE_ALL
    other = Report()
    deepgemm_init(sa, other, 3)  # the node's fourth rank (bench/first_forward.sh cold8's fourth process)
    print(json.dumps({"off": off, "notes": report.notes, "n": len(ms), "max": max(ms),
                      "all": ms == list(range(1, max(ms) + 1)), "compile_all": first,
                      "rank3": [compile_utils._DO_COMPILE_ALL, other.notes]}))
""")


@pytest.mark.parametrize("chunked", [16384, -1])
def test_sglangs_own_precompile_list_is_set_as_its_model_runner_sets_it_and_the_plan_covers_it(chunked, tmp_path):
    """The driver calls SGLang 0.5.14's own update_deep_gemm_config as its model runner does (gpu base_gpu_id, the
    server args), so the precompile of every m the proof's first forward enters asks for the server's m list, not
    the module's default 1..16384: with --chunked-prefill-size 16384 SGLang's list is 1..32768, chunked prefill
    off 1..65536, on the node's first rank (it compiles them all). The plan of the same command covers SGLang's
    own list (its sglang_precompile_m_max)."""
    python, env = _release_env("0.5.14")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text((MODELS / "Qwen3-Coder-480B-A35B-Instruct-FP8.json").read_text())
    (tmp_path / "list.py").write_text(DEEPGEMM_LIST)
    command = f"python -m sglang.launch_server --model-path q --tp 8 --ep 8 --chunked-prefill-size {chunked}"
    res = subprocess.run([python, str(tmp_path / "list.py"), str(tmp_path / "model"), command + " --device cpu"],
                         capture_output=True, text=True, timeout=600,
                         # PDL off: its set_pdl is deep_gemm's, which SGLang imports only on an sm_90 GPU
                         env={**os.environ, **env, "DGP_TRANSFORMERS_EXIST_OK": "1", "SGLANG_DEEPGEMM_PDL": "0"})
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got["off"] == ["SGLang's update_deep_gemm_config not called: its ENABLE_JIT_DEEPGEMM is off here"]
    assert got["notes"] == ["SGLang's own update_deep_gemm_config(gpu_id, server_args)"]
    assert (got["n"], got["max"], got["all"], got["compile_all"]) == ({16384: 32768, -1: 65536}[chunked],) * 2 + (
        True, True)
    # another rank of the node: SGLang's own rule leaves the precompile to the first (gpu base_gpu_id)
    assert got["rank3"] == [False, ["SGLang's own update_deep_gemm_config(gpu_id, server_args): gpu_id 3, the node's "
                                    "local rank 3"]]
    plan = subprocess.run([sys.executable, "-m", "dgprecompile", "plan", "--sglang", "0.5.14", "--sglang-cmd",
                           command.replace("--model-path q", "--model-path Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8"),
                           "--json"], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert plan.returncode == 0, plan.stderr[-2000:]
    assert json.loads(plan.stdout)["sglang_precompile_m_max"] == got["max"]


def test_a_stopped_run_writes_its_report_so_far_and_exits_without_waiting_for_compile_threads(tmp_path):
    """bench/first_forward.sh's PHASE_S: `timeout` sends SIGTERM to a cold run a device call cannot wait for. The
    report so far must land (the first forward's seconds, how far the pass got) while the main thread waits on a lock
    a runtime's compile thread holds (SGLang's DeepGEMM precompile pool), and the exit must not wait for that thread."""
    report = tmp_path / "driver.json"
    script = textwrap.dedent(f"""
        import threading, time
        from dgprecompile.launch.model_report import Report, stop_writes_report
        r = Report()
        r.times["first_forward_s"] = 12.5
        r.m_done = 96
        stop_writes_report({str(report)!r}, lambda stopped=None: {{"times": r.times, "m_done": r.m_done,
                                                                    "stopped": stopped}})
        busy = threading.Lock(); busy.acquire()
        threading.Thread(target=lambda: (busy.acquire(), time.sleep(600))).start()  # a compile thread, not daemon
        print("ready", flush=True)
        busy.acquire()  # the main thread waits on it, as on a future
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        assert not report.exists()
        proc.terminate()
        assert proc.wait(timeout=30) == 143
    finally:
        proc.kill()
    assert json.loads(report.read_text()) == {"times": {"first_forward_s": 12.5}, "m_done": 96, "stopped": "SIGTERM"}


def test_the_driver_counts_new_files_under_every_name_a_release_reads_deepgemms_cache_from():
    """The H100's cold 480B run (sglang 0.5.14) compiled DeepGEMM into SGLANG_DG_CACHE_DIR's default under HOME, a
    name the driver did not count: its check of new files, and the bench's per-family figures, missed that family."""
    from dgprecompile.launch.model_report import CACHE_VARS
    from dgprecompile.planning.profiles import all_profiles

    read = {name for profile in all_profiles() for name in profile.env_names("cache_dir")}
    assert read and read <= set(CACHE_VARS), read - set(CACHE_VARS)
