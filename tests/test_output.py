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

from dgprecompile.output import PLAIN_EVERY_SECONDS, KernelProgress, Output, styled

PLAN = ["plan", "--model", "Qwen3-Coder-480B", "--tp", "8", "--ep", "8", "--sglang", "0.5.1"]


def _cli(args, columns: int, cwd=None) -> subprocess.CompletedProcess:
    """The real command with its stdout piped (as into `cat` or `less`), at a given COLUMNS."""
    import os

    env = {**os.environ, "COLUMNS": str(columns)}
    env.pop("TERM", None)
    return subprocess.run([sys.executable, "-m", "dgprecompile", *args], capture_output=True, text=True, env=env,
                          timeout=120, cwd=cwd)


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


# ---- every token whole at 80 and 160 columns, piped (issue 19 item 12) ----------------------------------------


def _words(text: str) -> set[str]:
    """The whitespace-separated tokens of rendered output, with the table's rules and name= labels taken off."""
    return set(re.split(r"[\s│┃=,]+", text))


def _cell_tokens(columns, rows) -> set[str]:
    return {t for cell in [*columns, *(c for r in rows for c in r)] for t in re.split(r"[\s,]+", str(cell)) if t}


TOKEN_TABLES = {
    "verify problems": (["kernel", "status", "entry", "detail"], [
        ["gemm_fp8_fp8_bf16_nt:TNormal.N1792.K6144.G1.BM128.BN112.ST6.SW32.PAD0.MC2.At", "missing",
         "kernel.gemm_fp8_fp8_bf16_nt.e14bd16cb8e1", "no kernel.cubin under the runtime's entry name"],
        ["m_grouped_gemm_fp8_fp8_bf16_nt:GroupedMasked.N5120.K6144.G20.BM64.BN160.ST5.SW64.PAD0.MC1.Af", "changed",
         "kernel.m_grouped_gemm_fp8_fp8_bf16_nt.0621a545df62", "sha256 mismatch (kernel.cubin)"]]),
    "plan jit modules": (["module", "template args", "used by", "builder"], [
        ["per_token_group_quant_8bit_v2", "bf16_t, fp8_e4m3_t, true", "dense (2 keys)",
         "sglang.jit_kernel.per_token_group_quant_8bit_v2:_jit_module"]]),
    "launch environment": (["variable", "value", "why"], [
        ["PYTHONPATH", "/work/wt/checkouts/dgprecompile/dgprecompile/launch/hook:/opt/site-packages/extra:...",
         "startup hook: legacy strict, tvm-ffi builds refused"],
        ["SGL_DG_CACHE_DIR", "/shared/teams/inference/caches/deep_gemm-0.3.5-cuda13", "the warmed cache"]]),
    "warm summary": (["compiled", "already cached", "failed", "wall time", "compile time (sum)", "workers",
                      "cache size"], [[1, 48, 0, "1234.5 s", "12.3 s", 16, "123.5 MB"]]),
}


@pytest.mark.parametrize("columns", [80, 160])
@pytest.mark.parametrize("name", sorted(TOKEN_TABLES))
def test_no_table_breaks_an_id_a_path_or_a_number(monkeypatch, name, columns):
    monkeypatch.setenv("COLUMNS", str(columns))
    header, rows = TOKEN_TABLES[name]
    out = io.StringIO()
    Output(stdout=out).table(name, header, rows)
    text = out.getvalue()
    missing = _cell_tokens(header, rows) - _words(text)
    assert not missing, (missing, text)
    # a line is wider than the width only when it is a single token that alone is wider
    assert all(len(line) <= columns or len(line.split()) == 1 for line in text.splitlines()), text


@pytest.mark.parametrize("columns", [80, 160])
def test_warm_summary_headers_stay_whole(monkeypatch, columns):
    from dgprecompile.cli.warm import render
    from dgprecompile.compile.warm_result import WarmResult

    monkeypatch.setenv("COLUMNS", str(columns))
    out = io.StringIO()
    render(Output(stdout=out, stderr=out), WarmResult(compiled={"a": 12.3}, cached=["b"] * 48, wall_seconds=1234.5,
                                                      cache_bytes=123456789, workers=16, kernels=49))
    words = _words(out.getvalue())
    for token in ("compiled", "already", "cached", "wall", "time", "(sum)", "cache", "size", "1234.5", "123.5"):
        assert token in words, out.getvalue()


def _readme_line(command: str) -> list[str]:
    """The argv of the README's example line for ``dgprecompile COMMAND`` (its comment dropped)."""
    import shlex
    from pathlib import Path

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    line = next(ln for ln in readme.splitlines() if ln.startswith(f"dgprecompile {command} "))
    return shlex.split(line, comments=True)[1:]


def test_plan_text_of_the_readme_example_fits_80_columns_piped(tmp_path):
    """The README's `plan` line at COLUMNS=80, piped: every line of stdout and stderr fits 80 columns (the profile
    line and the notes fold at their spaces), and nothing is cut: each note reads whole once lines are joined. Run
    where the user would be, so the file names are the README's own (a path as long as the line cannot fold)."""
    argv = _readme_line("plan")
    proc = _cli(argv, 80, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    wide = [line for line in (proc.stdout + proc.stderr).splitlines() if len(line) > 80]
    assert not wide, "\n".join(wide)
    truth = json.loads(_cli([*argv, "--json"], 80, cwd=tmp_path).stdout)
    joined = " ".join(proc.stderr.split())
    assert truth["notes"] and "…" not in proc.stderr
    for note in [*truth["notes"], truth["sglang_profile"]]:
        assert " ".join(str(note).split()) in joined, note


@pytest.mark.parametrize("columns", [80, 160])
def test_plan_jit_module_names_whole_piped(columns):
    proc = _cli(["plan", "--model", "Qwen3-Coder-480B", "--sglang", "0.5.14"], columns)
    assert proc.returncode == 0, proc.stderr
    truth = json.loads(_cli(["plan", "--model", "Qwen3-Coder-480B", "--sglang", "0.5.14", "--json"], 200).stdout)
    words = _words(proc.stdout)
    assert truth["sglang_jit_modules"], truth
    for module in truth["sglang_jit_modules"]:
        assert module["name"] in words and f"{module['python']}:{module['builder']}" in words, proc.stdout


@pytest.mark.parametrize("columns", [80, 160])
def test_verify_problem_table_keeps_kernel_ids_and_entries_whole_piped(tmp_path, columns):
    args = ["verify", *PLAN[1:], "--cache-dir", str(tmp_path), "--json"]
    truth = json.loads(_cli(args, 200).stdout)
    proc = _cli(args[:-1], columns)
    assert proc.returncode == 1, proc.stderr
    words = _words(proc.stdout + proc.stderr)
    problems = truth["problems"]
    assert problems, truth
    for k in problems:
        assert k["kernel"] in words, (k["kernel"], proc.stdout)
        if k.get("entry"):
            assert k["entry"] in words, (k["entry"], proc.stdout)


# ---- user text printed as given: never rich markup, never an emoji code (issue 19 item 11) --------------------

ODD = ["[red]x", "[abc]", "[/]", ":thumbs_up:", "[bold]y[/bold]"]


def test_every_message_kind_prints_user_text_as_given():
    err, out = io.StringIO(), io.StringIO()
    o = Output(stdout=out, stderr=err)
    for text in ODD:
        o.info("cache: ", text)
        o.info(f"cache: {text}")
        o.note(text)
        o.warn(text)
        o.failure("failed", text)
        o.error(text, hint=text)
    o.table(f"title {ODD[0]}", ["a [b]", "c"], [[t, t] for t in ODD])
    with o.progress(2, "warming") as progress:
        progress.started("[red]kernel")
        progress.finished()
        progress.finished()
    text = err.getvalue() + out.getvalue()
    for t in ODD:
        assert f"cache: {t}" in text and f"note: {t}" in text and f"warning: {t}" in text, text
        assert f"failed: {t}" in text and f"error: {t}" in text and f"hint: {t}" in text, text
    assert "title [red]x" in text and "a [b]" in text, text
    assert "\N{THUMBS UP SIGN}" not in text and "\U0001f44d" not in text, text


def test_an_error_with_line_breaks_in_it_is_still_one_error_line_and_one_hint_line(monkeypatch):
    """An exception's text or a `python -c` script inside a command line: its line breaks become spaces, so the
    error is the one `error:` line a log reader takes (the rest of it is not left on lines of its own)."""
    monkeypatch.setenv("COLUMNS", "80")
    err = io.StringIO()
    script = "python3 -c 'import os\n  os.fork()\r\n\n  print(1)  '"
    Output(stderr=err).error(f"pid 7: {script}; pid 8: sleep  60", hint="a hint\nover two lines")
    assert err.getvalue().splitlines() == [
        "error: pid 7: python3 -c 'import os os.fork() print(1)  '; pid 8: sleep  60", "hint: a hint over two lines"]


def test_the_plain_fallback_table_prints_cells_as_given(monkeypatch):
    monkeypatch.setenv("COLUMNS", "30")
    out = io.StringIO()
    Output(stdout=out).table(None, ["path", "n"], [["/tmp/[weird]/a-long-cache-directory-name", 1]])
    assert "path=/tmp/[weird]/a-long-cache-directory-name" in out.getvalue(), out.getvalue()


@pytest.mark.parametrize("length", [76, 78, 80, 84])
def test_a_path_of_the_width_fits_the_plain_fallback_whole(monkeypatch, length):
    monkeypatch.setenv("COLUMNS", "80")
    out = io.StringIO()
    path = "(/" + "p" * (length - 3) + ")"  # one word, as doctor's "(<cgroup path>)" after a limit's numbers
    Output(stdout=out).table(None, ["", "detail"], [["ok", f"20 of 100000 in use, headroom 99980 {path}"]] * 2)
    lines = out.getvalue().splitlines()
    assert sum(line.strip() == path for line in lines) == 2, lines
    # the indent gives way up to the width; a word wider than that is the only line over it, indented as ever
    assert all(len(line) <= 80 or line == "    " + path for line in lines), lines


def test_folded_messages_keep_their_words_and_styles(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    err, out = io.StringIO(), io.StringIO()
    o = Output(stdout=out, stderr=err)
    long = "/" + "q" * 90  # one word wider than the line: alone on its line, whole
    words = f"a verdict of many words (ulimit -u) with a path {long} and an end"
    o.data_wrapped(f"verdict: {words}", hanging=9)
    o.error(words, hint=words, wrap=True)
    o.info("header ", styled("0.5.1", "bold"), f" {words}", hanging=2)
    err_lines = err.getvalue().splitlines()
    hint = next(i for i, ln in enumerate(err_lines) if ln.startswith("hint: "))
    header = next(i for i, ln in enumerate(err_lines) if ln.startswith("header "))
    for lines, prefix in ((out.getvalue().splitlines(), "verdict: "), (err_lines[:hint], "error: "),
                          (err_lines[hint:header], "hint: "), (err_lines[header:], "header ")):
        assert lines[0].startswith(prefix) and len(lines) > 1, lines
        indent = " " * (2 if prefix == "header " else len(prefix))
        assert all(ln.startswith(indent) and not ln[len(indent)].isspace() for ln in lines[1:]), lines
        assert all(len(ln) <= 80 or ln.strip() == long for ln in lines), lines
        assert " ".join(" ".join(lines).split()) == f"{prefix.replace('header ', 'header 0.5.1 ')}{words}"
        assert any("(ulimit -u)" in ln for ln in lines)  # a short parenthesis is never split


def test_a_folded_line_keeps_the_style_of_its_part():
    from dgprecompile.output import _fit, _message

    lines = _fit(_message("x" * 76, " ", styled("bold", "bold"), " tail"), 80, 2)
    assert [ln.plain for ln in lines] == ["x" * 76, "  bold tail"]
    assert [(sp.start, sp.end, sp.style) for sp in lines[1].spans] == [(2, 6, "bold")]


LEGACY = ["--model", "Qwen3-Coder-480B", "--tp", "8", "--ep", "8", "--sglang", "0.5.1"]


def test_launch_prints_the_command_and_cache_dir_as_given(tmp_path):
    cache = tmp_path / "[weird]"
    cache.mkdir()
    proc = _cli(["launch", *LEGACY, "--cache-dir", str(cache), "--allow-missing", "--",
                 "echo", "[red]x", "[abc]", ":thumbs_up:"], 200)
    assert proc.returncode == 0, proc.stderr
    assert "starting: echo '[red]x' '[abc]' :thumbs_up:" in proc.stderr, proc.stderr
    assert f"SGL_DG_CACHE_DIR  value={cache}" in proc.stderr or f"│ {cache}" in proc.stderr, proc.stderr
    assert f"in {cache} (" in proc.stderr, proc.stderr
    assert proc.stdout == "[red]x [abc] :thumbs_up:\n"


@pytest.mark.parametrize("command", [["verify", *LEGACY], ["doctor", *LEGACY], ["plan", *LEGACY, "-o", "PLAN"]])
def test_paths_with_brackets_print_as_given(tmp_path, command):
    weird = tmp_path / "[weird]"
    weird.mkdir()
    argv = [str(weird / "[p].yaml") if a == "PLAN" else a for a in command]
    if command[0] != "plan":
        argv += ["--cache-dir", str(weird)]
    proc = _cli(argv, 200)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert str(weird) in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    if command[0] == "verify":
        assert f"cache: {weird}   plan:" in proc.stderr, proc.stderr
    if command[0] == "plan":
        assert f"manifest written to {weird / '[p].yaml'}" in proc.stderr, proc.stderr


def test_a_missing_artifact_path_with_brackets_is_named_as_given(tmp_path):
    proc = _cli(["unpack", str(tmp_path / "[a].tar.gz"), "--cache-dir", str(tmp_path / "c")], 200)
    assert proc.returncode == 2 and f"{tmp_path / '[a].tar.gz'}" in proc.stderr, proc.stderr


def test_no_command_styles_text_by_markup():
    """By construction: a command colours text only through Output's styled(), never by markup in a string it
    prints (where a user's value would be parsed too), and never prints to the consoles behind Output's back."""
    import ast
    from pathlib import Path

    import dgprecompile

    root = Path(dgprecompile.__file__).parent
    found = []
    for path in root.rglob("*.py"):
        if path.name == "output.py":
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and re.search(r"\[/\]|\[/?(red|green|"
                                                                                        r"yellow|blue|dim|bold)\]",
                                                                                        node.value):
                found.append(f"{path.relative_to(root)}:{node.lineno}: {node.value[:40]!r}")
            if (isinstance(node, ast.Attribute) and node.attr == "print" and isinstance(node.value, ast.Attribute)
                    and node.value.attr in ("err", "out")):
                found.append(f"{path.relative_to(root)}:{node.lineno}: .{node.value.attr}.print")
    assert not found, found


@pytest.mark.parametrize("columns", [80, 160])
def test_launch_environment_table_keeps_the_pythonpath_value_whole_piped(tmp_path, columns):
    from dgprecompile.launch.hook import HOOK_DIR

    proc = _cli(["launch", *LEGACY, "--cache-dir", str(tmp_path), "--allow-missing", "--", "true"], columns)
    assert proc.returncode == 0, proc.stderr
    words = _words(proc.stderr)
    assert any(w.startswith(str(HOOK_DIR)) for w in words), proc.stderr
    assert str(tmp_path) in words and "SGL_JIT_DEEPGEMM_PRECOMPILE" in words, proc.stderr


@pytest.mark.parametrize("columns", [80, 120])
def test_warm_summary_gives_each_kinds_times_and_never_splits_an_item(monkeypatch, columns):
    from dgprecompile.cli.warm import render
    from dgprecompile.compile.warm_result import WarmResult

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


def test_a_warning_or_failure_with_line_breaks_in_it_is_one_line(monkeypatch):
    """A library's warning text or a compiler's message: its line breaks become spaces, as in an error (the second
    line would otherwise read as a line of its own, without its `warning:` mark)."""
    monkeypatch.setenv("COLUMNS", "80")
    err = io.StringIO()
    out = Output(stderr=err)
    out.warn("not built: sampling: nvcc said\n  error: no such file", " (", styled("see", "dim"), " above)")
    out.failure("failed", "kernel a:\r\n  ptxas fatal")
    assert err.getvalue().splitlines() == [
        "warning: not built: sampling: nvcc said error: no such file (see above)", "failed: kernel a: ptxas fatal"]
