"""The Triton fused-MoE item's m set (data/triton_moe.yaml m_set): every m up to a bound B, then one m per residue
class mod 16 above it, plus m_max, is proved against the real components: SGLang's own fused_experts_impl (0.5.14
and 0.5.23) and Triton 3.6.0's own JIT warmed once over every m 1..N and once over the plan's reduced set, each
into a cache of its own, use exactly the same fused_moe_kernel entries (Triton's cache keys: the entry directories'
names, never planner output). sgl-kernel and torchvision are stand-ins here (tests/standins, named as such)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from helpers import STANDINS, beside_venv, sglang_014_dir

from dgprecompile.planning.shapes import TritonMoeShape
from dgprecompile.runtimes.items import TritonMoeItem
from dgprecompile.runtimes.triton_moe import TRITON_MOE

REPO = Path(__file__).resolve().parent.parent
TRITON = REPO / ".venv" / "triton-3.6.0"
# Qwen3-Coder-480B-FP8 at tp 8 / ep 8: 20 of its 160 experts on a rank (no tuned config ships for it: SGLang's
# block-FP8 default, the same for every m)
SHAPE = TritonMoeShape("mlp.experts", 62, 20, 160, 6144, 2560, 8)
CONFIG = {"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}


def sglang_023_dir() -> str | None:
    return beside_venv("sglang-0.5.23", "sglang/srt/layers/moe/moe_runner/triton_utils/fused_moe.py",
                       "DGP_SGLANG_023")


RELEASES = {"0.5.14": sglang_014_dir, "0.5.23": sglang_023_dir}


def _planned(version: str, m_max: int) -> TritonMoeItem:
    items, _ = TRITON_MOE.plan_items([SHAPE], config=CONFIG, sglang_version=version, max_tokens=m_max, gpu=None)
    return items[0]


def _warm(version: str, m: str, cache: Path, *extra: str, shape: TritonMoeShape = SHAPE) -> subprocess.CompletedProcess:
    return _ended(_start(version, m, cache, *extra, shape=shape))


def _start(version: str, m: str, cache: Path, *extra: str, shape: TritonMoeShape = SHAPE) -> tuple:
    """The release's warm over ``m`` into ``cache``, started and not waited for (:func:`_ended` does): independent
    warms, each into a cache of its own, run side by side (each mostly one core's imports and compiles)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([RELEASES[version](), STANDINS, str(TRITON), str(REPO)]),
           "DGP_STANDINS": "sgl_kernel,torchvision", "DGP_TRANSFORMERS_EXIST_OK": "1", "CUDA_VISIBLE_DEVICES": ""}
    argv = [sys.executable, "-m", TRITON_MOE.warm_module, "--experts", str(shape.experts), "--global-experts",
            str(shape.global_experts), "--hidden", str(shape.hidden), "--intermediate", str(shape.intermediate),
            "--topk", str(shape.topk), "--m", m, "--cache-dir", str(cache), *extra]
    out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")  # noqa: SIM115 - read in _ended
    return subprocess.Popen(argv, stdout=out, stderr=err, text=True, env=env), out, err, argv


def _ended(started: tuple) -> subprocess.CompletedProcess:
    proc, out, err, argv = started
    try:
        proc.wait(timeout=900)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out.seek(0), err.seek(0)
    done = subprocess.CompletedProcess(argv, proc.returncode, out.read(), err.read())
    out.close(), err.close()
    return done


def _entries(version: str, *runs: tuple[str, Path]) -> list[set[str]]:
    """The fused_moe_kernel entries each warm (m, cache) used, found or compiled: all started at once."""
    started = [_start(version, m, cache) for m, cache in runs]
    used = []
    for r in map(_ended, started):
        assert r.returncode == 0, r.stderr[-3000:]
        used.append(set(json.loads(r.stdout.strip().splitlines()[-1])["entries"]))
    return used


def needs(version: str) -> list:
    return [pytest.mark.skipif(RELEASES[version]() is None, reason=f"sglang {version} not installed beside the venv"),
            pytest.mark.skipif(not (TRITON / "triton" / "__init__.py").is_file(), reason="no Triton 3.6.0"),
            pytest.mark.slow]


def test_the_bound_is_the_largest_of_the_tuned_config_the_constexpr_and_the_align_buffer():
    old, new = _planned("0.5.14", 8192), _planned("0.5.23", 8192)
    assert (old.m_bound, old.m_period, old.m_text) == (21, 16, "1-21,22-37,8192")  # ceil((160 + 1) / 8)
    assert (new.m_bound, new.m_text) == (512, "1-512,513-528,8192")  # 0.5.23's GDC_EARLY = m <= 512
    assert old.m_count == 38 and "align" in old.why and "residue mod 16" in old.why
    tuned = TritonMoeShape("mlp.experts", 48, 128, 128, 2048, 768, 8)  # E=128,N=768 on an H200: tuned up to 4096
    items, _ = TRITON_MOE.plan_items([tuned], config=CONFIG, sglang_version="0.5.23", max_tokens=1_048_576, gpu=None)
    assert items[0].m_bound == 4096 and items[0].m_text == "1-4096,4097-4112,1048576"
    small = _planned("0.5.14", 30)  # no more m than the bound and a period: every m
    assert (small.m_bound, small.m_text) == (0, "1-30") and TritonMoeItem.from_dict(small.to_dict()) == small


@pytest.mark.parametrize("version, n", [pytest.param("0.5.14", 300, marks=needs("0.5.14")),
                                        pytest.param("0.5.23", 800, marks=needs("0.5.23"))])
def test_the_reduced_set_uses_the_same_fused_moe_kernel_entries_as_every_m(version, n, tmp_path):
    item = _planned(version, n)
    assert item.m_bound and item.m_count < n
    every, reduced = _entries(version, (f"1-{n}", tmp_path / "every"), (item.m_text, tmp_path / "reduced"))
    assert reduced == every and len(every) > 4, (sorted(every), sorted(reduced))  # > 4: more than m 1..2 give


@pytest.mark.skipif(sglang_023_dir() is None, reason="sglang 0.5.23 not installed beside the venv")
@pytest.mark.skipif(not (TRITON / "triton" / "__init__.py").is_file(), reason="no Triton 3.6.0")
@pytest.mark.slow
def test_the_warm_refuses_a_bound_below_the_tuned_configs_largest_m(tmp_path):
    tuned = TritonMoeShape("mlp.experts", 48, 128, 128, 2048, 768, 8)  # E=128,N=768 on an H200: tuned up to 4096
    below = _start("0.5.23", "1-2", tmp_path / "d", "--m-bound", "100", shape=tuned)  # side by side
    r = _warm("0.5.23", "1-2", tmp_path / "c", "--m-bound", "100")  # SHAPE has no tuned file: nothing above 100
    assert r.returncode == 0, r.stderr[-2000:]
    r = _ended(below)
    assert r.returncode != 0 and "names m up to 4096, above the plan's bound 100" in r.stderr, r.stderr[-2000:]
    assert not (tmp_path / "d" / "triton").exists() or not any((tmp_path / "d" / "triton").iterdir())


@pytest.mark.skipif(None in (sglang_014_dir(), sglang_023_dir()), reason="sglang 0.5.14 and 0.5.23 not beside the venv")
def test_the_tuned_table_is_what_the_releases_ship():
    """Every release beside the venv (0.5.9's JSONs under fused_moe_triton/, the others' under triton_utils/);
    0.5.10-0.5.13 and 0.5.20-0.5.22 were checked from their downloaded wheels the same way."""
    here = {v: beside_venv(f"sglang-{v}", f"sglang-{v}.dist-info/METADATA")
            for v in ("0.5.9", "0.5.15", "0.5.16", "0.5.17", "0.5.18", "0.5.19")}
    sites = {"0.5.14": sglang_014_dir(), "0.5.23": sglang_023_dir(), **{v: d for v, d in here.items() if d}}
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "update_triton_moe_tuned.py"),
                        *(f"{v}={d}" for v, d in sites.items()), "--check"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "up to date" in r.stdout, r.stdout + r.stderr
    assert all(v in r.stdout for v in sites), r.stdout


# ---- the m set cut into chunks (compile/triton_chunks.py) ----------------------------------------------------


def test_chunks_cover_every_planned_m_once_within_the_budget_and_keep_a_specialisation_together():
    from dgprecompile.compile.triton_chunks import chunks_for, group_key, item_ms, parse_ms_text

    item = _planned("0.5.14", 8192)  # no tuned config for E=20,N=2560: one config for every m
    ms = item_ms(item)
    for budget in (1, 2, 3, 16):
        chunks = chunks_for(item, budget, 0, 1.0)
        got = [m for c in chunks for m in parse_ms_text(c.m_text)]
        assert sorted(got) == ms and len(got) == len(set(got)) and len(chunks) <= budget
        assert [c.cost for c in chunks] == sorted((c.cost for c in chunks), reverse=True)  # costliest first
        keys = [{group_key(m, item, 0) for m in parse_ms_text(c.m_text)} for c in chunks]
        assert budget < 4 or all(len(k) == 1 for k in keys)  # one estimated specialisation per chunk
    assert len(chunks_for(item, 16, 0, 1.0)) == 4  # m == 1, m == 2, odd m >= 3, even m >= 4: no more work to split
    tuned = TritonMoeShape("mlp.experts", 58, 257, 257, 7168, 256, 9)  # DeepSeek-V3 + shared: tuned up to 4096
    (big,), _ = TRITON_MOE.plan_items([tuned], config=CONFIG, sglang_version="0.5.14", max_tokens=8192, gpu=None)
    up_to = TRITON_MOE.tuned_up_to(TRITON_MOE.release("0.5.14"), big, big.device_name)
    chunks = chunks_for(big, 16, up_to, 1.0)
    assert up_to == 4096 and len(chunks) == 16 and sum(c.m_count for c in chunks) == big.m_count == 4113
    assert max(c.cost for c in chunks) < 1.5 * sum(c.cost for c in chunks) / 16  # balanced by the estimate


@pytest.mark.parametrize("version", [pytest.param("0.5.14", marks=needs("0.5.14"))])
def test_the_chunks_calls_use_disjoint_entries_whose_union_is_the_one_process_warms(version, tmp_path):
    """Real SGLang + Triton: the item's chunks, each warmed on its own, use pairwise disjoint fused_moe_kernel
    entries (no specialisation is compiled by two chunks), and together exactly those of one warm of every m."""
    from dgprecompile.compile.triton_chunks import chunks_for

    item = _planned(version, 6)
    chunks = chunks_for(item, 4, 0, 1.0)
    assert [c.m_text for c in chunks] == ["3,5", "4,6", "1", "2"]
    # each warm into a cache of its own, all side by side: a chunk's entries are the ones it used, found or
    # compiled, so an entry two chunks share is in both chunks' sets
    every, *used = _entries(version, (item.m_text, tmp_path / "every"),
                            *((c.m_text, tmp_path / f"chunk-{i}") for i, c in enumerate(chunks)))
    assert set().union(*used) == every and sum(map(len, used)) == len(every) == 8, (sorted(every), used)
