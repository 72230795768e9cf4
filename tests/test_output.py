"""Tables never crop a number or split a name at any width, piped or not; progress without a terminal."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import time

import pytest
from rich.console import Console

from dgprecompile.output import PLAIN_EVERY_SECONDS, KernelProgress, Output

PLAN = ["plan", "--model", "Qwen3-Coder-480B", "--tp", "8", "--ep", "8", "--sglang", "0.5.1"]


def _cli(args, columns: int) -> subprocess.CompletedProcess:
    """The real command with its stdout piped (as into `cat` or `less`), at a given COLUMNS."""
    import os

    env = {**os.environ, "COLUMNS": str(columns)}
    env.pop("TERM", None)
    return subprocess.run([sys.executable, "-m", "dgprecompile", *args], capture_output=True, text=True, env=env,
                          timeout=120)


def _tokens(text: str) -> set[str]:
    return set(re.findall(r"[\w.]+", text))


@pytest.mark.parametrize("columns", [60, 80, 200])
def test_plan_table_keeps_every_number_whole(columns):
    truth = json.loads(_cli([*PLAN, "--format", "json"], 200).stdout)
    proc = _cli(PLAN, columns)
    assert proc.returncode == 0, proc.stderr
    words = _tokens(proc.stdout)
    for shape in truth["shapes"]:
        for value in (shape["n"], shape["k"], shape["num_groups"], len(shape["buckets"])):
            assert str(value) in words, (value, proc.stdout)
        assert f"{shape['m_min']}..{shape['m_max']}" in words, proc.stdout
    for header in ("kernel_type", "groups", "buckets", "kernels"):
        assert header in words, proc.stdout
    table = proc.stdout.split("distinct kernels")[0].splitlines()[:-1]  # the table, not the sentence after it
    assert max(len(line) for line in table) <= columns, proc.stdout


@pytest.mark.parametrize("columns", [60, 80, 200])
def test_plan_buckets_table_at_any_width(columns):
    proc = _cli([*PLAN, "--buckets"], columns)
    assert proc.returncode == 0, proc.stderr
    truth = json.loads(_cli([*PLAN, "--format", "json"], 200).stdout)
    words = _tokens(proc.stdout)
    for shape in truth["shapes"]:
        for b in shape["buckets"]:
            assert f"{b['m_min']}..{b['m_max']}" in words and str(b["m_rep"]) in words
            assert b["kernel"] in proc.stdout.replace("\n", "") or b["kernel"] in words


LAUNCH_ROWS = [
    ["SGL_JIT_DEEPGEMM_PRECOMPILE", "0", "sglang's runtime precompile of every m off"],
    ["SGL_DG_CACHE_DIR", "/shared/teams/inference/caches/deep_gemm-0.3.5-cuda13", "the warmed cache"],
    ["DG_JIT_NVCC_COMPILER", "/usr/local/cuda-13.0/bin/nvcc", "its path is part of the legacy JIT's key"],
    ["DGPRECOMPILE_STRICT", "1", "a runtime compile fails at once, naming the kernel (already set)"],
]


@pytest.mark.parametrize("columns", [40, 60, 80, 200])
def test_launch_table_never_splits_a_variable_name(monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", str(columns))
    err = io.StringIO()
    Output(stderr=err).table("environment for the job", ["variable", "value", "why"], LAUNCH_ROWS, to_stderr=True,
                             no_wrap=("variable",))
    text = err.getvalue()
    for name, *_ in LAUNCH_ROWS:
        assert name in text, text
    # a line is only ever longer than the width when it is one unbreakable word (the 50-character path at 40)
    assert all(len(line) <= columns or len(line.split()) == 1 for line in text.splitlines()), text


def test_a_table_too_wide_for_the_width_falls_back_to_name_value_lines(monkeypatch):
    monkeypatch.setenv("COLUMNS", "20")
    out = io.StringIO()
    Output(stdout=out).table("t", ["n", "k", "m"], [[1792, 6144, "1..16384"], [4096, 7168, "1..2048"]])
    text = out.getvalue()
    assert "n=1792" in text and "k=6144" in text and "m=1..16384" in text and "m=1..2048" in text, text


def _progress(total=48, workers=4, prior=3.3):
    stream = io.StringIO()
    console = Console(file=stream, force_terminal=False, width=80)
    return stream, KernelProgress(console, total, "warming", seconds_per_item=prior, workers=workers)


def test_without_a_terminal_progress_lines_come_every_few_kernels_and_on_ticks(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    stream, progress = _progress()
    with progress:
        progress.started("k0")
        clock[0] += PLAIN_EVERY_SECONDS + 0.5  # nothing finished for over 10 s: a tick still prints a line
        progress.tick()
        assert "warming: 0/48 kernels" in stream.getvalue()
        for _ in range(progress.step):
            clock[0] += 1
            progress.finished()
        assert f"warming: {progress.step}/48 kernels" in stream.getvalue()
    lines = stream.getvalue().splitlines()
    assert all(re.match(r"warming: \d+/48 kernels, \d+:\d\d:\d\d elapsed, eta ", ln) for ln in lines), lines


def test_the_first_eta_comes_from_the_profile_not_from_one_sample(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    _, progress = _progress(total=48, workers=4, prior=3.3)
    with progress:
        progress.started("k0")
        # nothing done yet: 12 rounds of 4 workers x 3.3 s
        assert progress.eta_seconds() == pytest.approx(12 * 3.3, rel=0.01)
        clock[0] += 0.2  # a cached kernel finishes at once: the ETA must not collapse to ~0
        progress.finished(compiled=False)
        assert progress.eta_seconds() > 30
        clock[0] += 3.3  # one compiled kernel: still close to the profile's estimate
        progress.finished()
        assert 25 < progress.eta_seconds() < 45
        for _ in range(20):  # the measured pace takes over: here 4x faster than the profile's
            clock[0] += 0.2
            progress.finished()
        assert progress.eta_seconds() < 20


def test_live_bar_at_80_columns_keeps_the_count_visible():
    stream = io.StringIO()
    console = Console(file=stream, force_terminal=True, width=80, color_system=None)
    progress = KernelProgress(console, 48, "warming", seconds_per_item=3.3, workers=2)
    with progress:
        progress.started("M_GROUPED_GEMM_FP8_MASKED_N6144_K2560_G20_BM64_BN160_ST8_MC1_A0_SW0_PAD16_VERY_LONG")
        for _ in range(3):
            progress.finished()
    frames = [re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", f) for f in stream.getvalue().split("\x1b[2K")]
    busy = [f for f in frames if "M_GROUPED" in f]  # while a long kernel name is shown
    assert busy and all(len(f.rstrip()) <= 80 for f in frames), frames
    assert "3/48" in busy[-1] and "eta 0:" in busy[-1], frames


@pytest.mark.parametrize("columns", [80, 120])
def test_warm_summary_gives_each_kinds_times_and_never_splits_an_item(monkeypatch, columns):
    from dgprecompile.cli.warm import render
    from dgprecompile.compile.warm import WarmResult

    monkeypatch.setenv("COLUMNS", str(columns))
    kernel = "sm90_fp8_gemm_1d2d:SFBK.N0.K0.G1.BM128.BN160.SWD64.ST5.MATH256.MC1.Af.SMS132.TNormal"
    module = "sglang_jit:per_token_group_quant_8bit_v2<bf16_t,fp8_e4m3_t,true>"
    result = WarmResult(compiled={kernel: 12.25, "transpose_fp32:TH512.BMN64.SFK48": 1.0, module: 47.5},
                        jit_ids=[module], workers=2, kernels=2, jit_modules=1)
    out = io.StringIO()
    render(Output(stdout=out), result)
    text = out.getvalue()
    assert kernel in text and module in text  # whole, on one line
    assert "13.2 s" in text and "47.5 s" in text and "12.2 s" in text  # the DeepGEMM sum, the module, longest
    assert all(len(line) <= columns or kernel in line for line in text.splitlines())
