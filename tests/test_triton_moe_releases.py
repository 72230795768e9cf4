"""SGLang's Triton fused MoE beyond 0.5.14 and 0.5.23 (data/triton_moe.yaml: 0.5.9-0.5.10 chunked in
fused_moe_triton, 0.5.11-0.5.18 one call, 0.5.19-0.5.23 with PDL's m-dependent GDC_EARLY): the 0.5.9 and 0.5.17
server commands plan their items (the shape from the model's config, the bound from the release's own tuned JSONs
read here from its wheel), and the GPU-free warm runs each release's own fused_moe path with Triton 3.6.0 (0.5.17's
torch pin brings it): through `warm` and `verify` for 0.5.17, and, for 0.5.9, 0.5.17 and 0.5.23, the constexprs
of every fused_moe_kernel key it computes (tests/gpu/triton_keylog.py) are those an sm_90 GPU's launch passes.
sgl-kernel and torchvision are stand-ins here (tests/standins, named as such)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from helpers import NVCC, STANDINS, beside_venv, needs_nvcc, sgl_deep_gemm_dir

from dgprecompile.planning.plan import PlanRequest
from dgprecompile.planning.request import plan_from_request
from dgprecompile.runtimes.triton_moe import TRITON_MOE

REPO = Path(__file__).resolve().parent.parent
VENV = REPO / ".venv"
TRITON = VENV / "triton-3.6.0"
QWEN = json.loads((REPO / "dgprecompile" / "data" / "models" / "Qwen3-Coder-480B-A35B-Instruct-FP8.json").read_text())
DSV3 = json.loads((REPO / "dgprecompile" / "data" / "models" / "DeepSeek-V3.json").read_text())
QWEN_CMD = "python -m sglang.launch_server --model-path Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8 --tp 8 --ep 8"
TUNED_DIRS = ("sglang/srt/layers/moe/moe_runner/triton_utils/configs", "sglang/srt/layers/moe/fused_moe_triton/configs")


def sglang_dir(version: str) -> str | None:
    """sglang <version>'s wheel beside the venv (Makefile: 0.5.9, 0.5.14-0.5.19, 0.5.23)."""
    return beside_venv(f"sglang-{version}", f"sglang-{version}.dist-info/METADATA")


def needs_release(*versions: str):
    def mark(test):
        for v in versions:
            test = pytest.mark.skipif(sglang_dir(v) is None, reason=f"sglang {v} not beside the venv (make setup)")(test)
        return test
    return mark


def _dsv3_cmd(tmp_path: Path) -> str:
    (tmp_path / "config.json").write_text(json.dumps(DSV3))
    return f"python -m sglang.launch_server --model-path {tmp_path} --tp 8"


def _plan(cmd: str, sglang: str):
    return plan_from_request(PlanRequest(sglang_cmd=cmd, sglang=sglang))


def _wheel_tuned(version: str, experts: int, intermediate: int, device: str = "NVIDIA_H200") -> int:
    """The largest m of the release's own block-FP8 tuned JSONs for the shape (any Triton folder, up or down), read
    from its wheel; 0 where it ships none."""
    site = Path(sglang_dir(version))
    name = f"E={experts},N={intermediate},device_name={device},dtype=fp8_w8a8,block_shape=[128, 128]"
    files = [f for d in TUNED_DIRS for f in (site / d).glob("triton_*/*.json")
             if f.name in (f"{name}.json", f"{name}_down.json")]  # ([128, 128] would be a glob's character class)
    keys = [int(k) for f in files for k in json.loads(f.read_text())]
    return max(keys, default=0)


# ---- plan -----------------------------------------------------------------------------------------------------


@needs_release("0.5.9", "0.5.17")
@pytest.mark.parametrize("version", ["0.5.9", "0.5.17"])
@pytest.mark.parametrize("model", ["qwen", "dsv3"])
def test_the_0_5_9_and_0_5_17_servers_plan_one_item_with_the_releases_own_path_and_bound(version, model, tmp_path):
    if model == "qwen":  # --tp 8 --ep 8: the rank holds num_experts / 8 experts, whole
        cfg, cmd = QWEN, QWEN_CMD
        experts = glob = cfg["num_experts"]
        experts //= 8
        topk, intermediate, layers = cfg["num_experts_per_tok"], cfg["moe_intermediate_size"], cfg["num_hidden_layers"]
    else:  # --tp 8, shared-experts fusion: the shared expert joins every rank's routed ones, top-k + 1
        cfg, cmd = DSV3, _dsv3_cmd(tmp_path)
        experts = glob = cfg["n_routed_experts"] + cfg["n_shared_experts"]
        topk, intermediate = cfg["num_experts_per_tok"] + cfg["n_shared_experts"], cfg["moe_intermediate_size"] // 8
        layers = cfg["num_hidden_layers"] - cfg["first_k_dense_replace"]
    plan = _plan(cmd, version)
    (item,) = plan.triton_moe.values()
    assert (item.experts, item.global_experts, item.topk) == (experts, glob, topk)
    assert (item.hidden, item.intermediate, item.layers) == (cfg["hidden_size"], intermediate, (f"mlp.experts x{layers}",))
    # the bound: the release's tuned JSON's largest m (read from the wheel here) or the align buffer's linear start
    bound = max(_wheel_tuned(version, experts, intermediate), -(-(glob + 1) // topk))
    assert (item.m_min, item.m_max, item.m_bound) == (1, 8192, bound), item
    assert item.m_text == f"1-{bound},{bound + 1}-{bound + 16},8192"
    rel = TRITON_MOE.release(version)
    if version == "0.5.9":  # its own package and its chunk loop, not 0.5.14's path
        assert rel["package"] == "sglang.srt.layers.moe.fused_moe_triton" and rel["chunk_size"] == 64 * 1024
        assert "fused_moe_triton/fused_moe.py:321" in item.why and "CHUNK_SIZE = 64 * 1024 (:372" in item.why
        assert any("1 Triton fused MoE warm item(s)" in n and "chunks of 65536 tokens (fixed)" in n for n in plan.notes)
    else:
        assert "package" not in rel and "0.5.17 (:874, :473)" in item.why and "single shot" in item.why
        assert any("1 Triton fused MoE warm item(s)" in n and "one call per forward" in n for n in plan.notes)
    assert not any("Triton fused MoE not planned" in n for n in plan.notes), plan.notes


def test_the_pdl_releases_bound_holds_gdc_early_and_an_unread_release_says_so():
    for version, constexpr in (("0.5.18", 0), ("0.5.19", 512), ("0.5.22", 512)):
        (item,) = _plan(QWEN_CMD, version).triton_moe.values()
        assert item.m_bound == max(constexpr, -(-(QWEN["num_experts"] + 1) // QWEN["num_experts_per_tok"])), version
    for version in ("0.5.7", "0.5.8"):  # the profile 0.5.7-0.5.9 reaches no further
        plan = _plan(QWEN_CMD, version)
        assert not plan.triton_moe
        assert any("Triton fused MoE not planned" in n and f"not {version}" in n and ">=0.5.9,<0.5.24" in n
                   for n in plan.notes), plan.notes


# ---- the GPU-free warm with each release's own fused MoE ---------------------------------------------------------


def _chain(version: str) -> list[str]:
    """The release's wheel, then the import chain its fused MoE path needs (its --no-deps wheel has none): xgrammar
    (0.5.17's server_args), 0.5.14's and 0.5.23's side installs (transformers, msgspec, ...), sglang-kernel 0.4.2's
    deep_gemm where a release imports deep_gemm.utils."""
    xgrammar = beside_venv("xgrammar-0.2.1", "xgrammar/__init__.py")
    return [p for p in (sglang_dir(version), xgrammar, sglang_dir("0.5.14"), sglang_dir("0.5.23")) if p]


def _env(version: str, *more: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([*_chain(version), STANDINS, str(TRITON), *more, str(REPO)]),
            "DGP_STANDINS": "sgl_kernel,torchvision", "DGP_TRANSFORMERS_EXIST_OK": "1"}


needs_triton = pytest.mark.skipif(not (TRITON / "triton" / "__init__.py").is_file(), reason="no Triton 3.6.0")
needs_chain = pytest.mark.skipif(None in (sglang_dir("0.5.14"), sglang_dir("0.5.23"),
                                          beside_venv("xgrammar-0.2.1", "xgrammar/__init__.py")),
                                 reason="sglang 0.5.14, 0.5.23 or xgrammar 0.2.1 not beside the venv (make setup)")


@needs_release("0.5.17")
@needs_triton
@needs_chain
@needs_nvcc
@pytest.mark.skipif(sgl_deep_gemm_dir("0.1.7") is None, reason="sgl-deep-gemm 0.1.7 not beside the venv")
@pytest.mark.slow
def test_the_0_5_17_servers_item_is_warmed_with_its_own_fused_moe_recorded_and_verified(tmp_path):
    """One small item (the Qwen server's, trimmed to m 1..2) through `warm` and `verify` with sglang 0.5.17's own
    fused_experts_impl (its kernel in sglang/kernels/ops/moe, its tp-group call stood in) and Triton 3.6.0."""
    from dgprecompile.planning.manifest import plan_from_dict, write_manifest
    from dgprecompile.runtimes.items import TritonMoeItem

    data = _plan(QWEN_CMD, "0.5.17").to_dict()
    data = {k: v for k, v in data.items() if k not in ("sglang_jit_modules", "inductor", "flashinfer")}
    for shape in data["shapes"]:
        shape["buckets"], shape["aux_kernels"] = [], []
    data["kernels"], data["total_kernels"] = [], 0
    item = TritonMoeItem.from_dict(data["triton_moe"][0])
    data["triton_moe"] = [TritonMoeItem(**{**item.__dict__, "m_max": 2}).to_dict()]  # a test's trim
    manifest = tmp_path / "triton.yaml"
    write_manifest(plan_from_dict(data), manifest)
    item_id = TritonMoeItem.from_dict(data["triton_moe"][0]).id
    env = _env("0.5.17", sgl_deep_gemm_dir("0.1.7"))
    home = tmp_path / "home"
    home.mkdir()
    cache = tmp_path / "cache"
    run = [sys.executable, "-m", "dgprecompile"]
    r = subprocess.run([*run, "warm", "--manifest", str(manifest), "--cache-dir", str(cache), "--nvcc", NVCC,
                        "--sglang-jit", "on", "--json"], capture_output=True, text=True,
                       env={**env, "HOME": str(home)}, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    summary = json.loads(r.stdout)
    assert (summary["compiled"], summary["failed"], summary["triton_moe_item_ids"]) == (1, 0, [item_id])
    record = json.loads((cache / "dgprecompile" / "index.json").read_text())["triton_moe"][item_id]
    assert record["sglang"] == "0.5.17" and record["triton"] == "3.6.0" and record["ms"] == 2
    assert len(record["entries"]) == 4  # up and down at m=1 and m=2 (Triton specialises on ints == 1)
    for entry in record["entries"]:  # no PDL before 0.5.19: an sm_90 launch of 0.5.17 passes none
        meta = json.loads((cache / entry / "fused_moe_kernel.json").read_text())
        assert meta["target"]["arch"] == 90 and not meta.get("launch_pdl"), meta
    v = subprocess.run([*run, "verify", "--manifest", str(manifest), "--cache-dir", str(cache), "--nvcc", NVCC,
                        "--json"], capture_output=True, text=True, env=env, timeout=600)
    assert v.returncode == 0 and json.loads(v.stdout)["complete"], v.stdout + v.stderr[-2000:]


def _start_keys(version: str, tmp_path: Path, m: str = "1") -> tuple:
    """The warm of DeepSeek-V3's tp8 shape (its tuned H200 config: BLOCK_SIZE_M 16 at small m) with sglang
    <version>, Triton's key parts logged, and the probe of the kernel's module and arg names: both started, neither
    waited for (:func:`_keys_of` does), so that the releases' ones run side by side (each mostly one core's
    imports), each release with its own log, cache and HOME."""
    log, home = tmp_path / f"keys-{version}.jsonl", tmp_path / f"home-{version}"
    home.mkdir()
    env = {**_env(version, str(REPO / "tests" / "gpu")), "DGP_TRITON_KEYLOG": str(log), "CUDA_VISIBLE_DEVICES": "",
           "HOME": str(home)}
    code = ("import sys, triton_keylog; triton_keylog.install(); from dgprecompile.compile.triton_moe import main; "
            "sys.exit(main(sys.argv[1:]))")
    experts, topk = DSV3["n_routed_experts"] + 1, DSV3["num_experts_per_tok"] + 1
    probe = ("import sys, importlib; from dgprecompile.compile import triton_moe as t; "
             "f = importlib.import_module(t.moe_package() + '.fused_moe'); k = t.kernels_module(f); "
             "print(k.__name__); print(' '.join(k.fused_moe_kernel.arg_names))")
    argvs = [[sys.executable, "-c", code, "--experts", str(experts), "--global-experts", str(experts),
              "--hidden", str(DSV3["hidden_size"]), "--intermediate", str(DSV3["moe_intermediate_size"] // 8),
              "--topk", str(topk), "--m", m, "--cache-dir", str(tmp_path / f"c-{version}")],
             [sys.executable, "-c", probe]]
    started = []
    for argv in argvs:
        out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")  # noqa: SIM115 - read in _keys_of
        started.append((subprocess.Popen(argv, stdout=out, stderr=err, text=True, env=env, cwd=tmp_path), out, err))
    return log, started


def _keys_of(started: tuple) -> tuple[list[dict], dict, list[str]]:
    """(fused_moe_kernel keys, the warm's report, the kernel's module and arg names) of :func:`_start_keys`'s."""
    log, procs = started
    results = []
    try:
        for proc, out, err in procs:
            proc.wait(timeout=600)
            out.seek(0), err.seek(0)
            results.append((proc.returncode, out.read(), err.read()))
    finally:
        for proc, out, err in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            out.close(), err.close()
    (code, stdout, stderr), (pcode, pout, perr) = results
    assert code == 0, stderr[-3000:]
    report = json.loads(stdout.strip().splitlines()[-1])
    assert pcode == 0, perr[-2000:]
    module, names = pout.strip().splitlines()[-2:]
    keys = [json.loads(line) for line in log.read_text().splitlines()]
    return [k for k in keys if k["kernel"] == "fused_moe_kernel"], report, [module, *names.split()]


@needs_release("0.5.9", "0.5.17", "0.5.23")
@needs_triton
@needs_chain
@pytest.mark.slow
def test_each_releases_warm_passes_the_constexprs_an_sm90_launch_passes(tmp_path):
    """SGLang swaps the FP8 GEMM's operands (swap_ab) on an sm_90+ GPU where the config's BLOCK_SIZE_M < 64 and
    BLOCK_SIZE_N >= 64, asked in the module its launch reads it from: 0.5.9's fused_moe_triton, 0.5.16 on
    sglang/kernels/ops/moe (the stand-in once looked only in moe_runner/triton_utils, so 0.5.23's tuned small-m
    configs were warmed unswapped). PDL's USE_GDC/GDC_EARLY are passed from 0.5.19 only."""
    where = {"0.5.9": "sglang.srt.layers.moe.fused_moe_triton.fused_moe_triton_kernels",
             "0.5.17": "sglang.kernels.ops.moe.fused_moe_triton_kernels",
             "0.5.23": "sglang.kernels.ops.moe.fused_moe_triton_kernels"}
    started = {version: _start_keys(version, tmp_path) for version in where}
    for version, module in where.items():
        keys, report, (found, *names) = _keys_of(started[version])
        assert found == module, found
        assert len({k["entry"] for k in keys}) == 2 == len(report["entries"]), (version, keys)  # up and down
        for k in keys:
            value = {n: k["constants"].get(f"({names.index(n)},)") for n in
                     ("swap_ab", "USE_GDC", "GDC_EARLY", "BLOCK_SIZE_M", "BLOCK_SIZE_N") if n in names}
            swap = int(value["BLOCK_SIZE_M"]) < 64 and int(value["BLOCK_SIZE_N"]) >= 64  # the key's own config
            assert value["swap_ab"] == str(swap), (version, value)
            if version == "0.5.23":  # m=1 <= 512 on an sm_90 target
                assert (value["USE_GDC"], value["GDC_EARLY"]) == ("True", "True"), value
            else:
                assert "USE_GDC" not in names, version
    assert swap  # the tuned DeepSeek-V3 config at m=1 is a swapped one: the test would see an unswapped warm
