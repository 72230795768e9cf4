"""The first hour (issue 29 item 9): each mistake a new user makes is one `error:` line, a `hint:` naming an option
the command really has, and the right exit code; the real CLI in a real subprocess."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import LEGACY_NVCC, PLAN, _legacy_toolchain_missing, tree_hash, warm_once

UNSHARE = shutil.which("unshare")


def _env(env=None) -> dict:
    return {**os.environ, "COLUMNS": "80", **(env or {})}


def cli(*args, env=None, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dgprecompile", *args], capture_output=True, text=True,
                          timeout=120, env=_env(env), cwd=cwd)


def one_error(proc, code: int, *words: str, option: str | None = None) -> str:
    """The refusal shape: exit ``code``, exactly one error line (the first of stderr) and a hint naming
    ``option``, no traceback; returns the hint."""
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    lines = proc.stderr.strip().splitlines()
    errors = [x for x in lines if x.startswith("error: ")]
    assert len(errors) == 1, proc.stderr
    hints = [x for x in lines if x.startswith("hint: ")]
    assert len(hints) == 1, proc.stderr
    for word in words:
        assert word in errors[0], proc.stderr
    if option is not None:
        assert option in hints[0], proc.stderr
    return hints[0]


# ---- a read-only filesystem: exit 3, "Read-only file system", the command's own option ------------------------


def _read_only(folder: Path, *args) -> subprocess.CompletedProcess:
    """`dgprecompile ARGS` in a mount namespace where ``folder`` is a read-only bind mount of itself."""
    script = ('mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"')
    return subprocess.run([UNSHARE, "-rm", "sh", "-c", script, str(folder), sys.executable, "-m", "dgprecompile",
                           *args], capture_output=True, text=True, timeout=120, env=_env())


@pytest.fixture
def ro_folder(tmp_path) -> Path:
    if UNSHARE is None or subprocess.run([UNSHARE, "-rm", "true"], capture_output=True).returncode != 0:
        pytest.skip("needs unshare with user and mount namespaces")
    folder = tmp_path / "ro"
    folder.mkdir()
    return folder


@pytest.fixture(scope="module")
def artifact(tmp_path_factory) -> Path:
    cache = warm_once(tmp_path_factory)
    path = tmp_path_factory.mktemp("artifact") / "a.tar.gz"
    proc = cli("pack", *PLAN, "--cache-dir", str(cache), "-o", str(path), "-q")
    assert proc.returncode == 0, proc.stderr
    return path


@pytest.mark.skipif(_legacy_toolchain_missing() is not None, reason="needs the legacy DeepGEMM and nvcc")
@pytest.mark.parametrize("target", ["ro", "ro/new-cache"])
def test_warm_into_a_read_only_mount_says_so_exit_3(ro_folder, target):
    proc = _read_only(ro_folder, "warm", *PLAN, "--nvcc", LEGACY_NVCC,
                      "--cache-dir", str(ro_folder.parent / target))
    hint = one_error(proc, 3, "Read-only file system", option="--cache-dir")
    assert "chmod" not in hint and "permission denied" not in proc.stderr


def test_unpack_into_a_read_only_mount_says_so_exit_3(ro_folder, artifact):
    before = tree_hash(ro_folder)
    proc = _read_only(ro_folder, "unpack", str(artifact), "--allow-unsigned", "--cache-dir", str(ro_folder / "c"))
    hint = one_error(proc, 3, "Read-only file system", option="--cache-dir")
    assert "chmod" not in hint
    assert tree_hash(ro_folder) == before


@pytest.mark.parametrize("command, option", [
    (["keygen", "RO/keys"], "DIRECTORY"),
    (["plan", *PLAN, "-o", "RO/plan.yaml"], "(-o)"),
    (["pack", *PLAN, "--cache-dir", "CACHE", "-o", "RO/a.tar.gz"], "(-o)"),
])
def test_writing_into_a_read_only_folder_names_the_commands_own_option(ro_folder, tmp_path_factory, command,
                                                                        option):
    cache = str(warm_once(tmp_path_factory)) if "CACHE" in command else ""
    argv = [a.replace("RO", str(ro_folder)).replace("CACHE", cache) for a in command]
    proc = _read_only(ro_folder, *argv)
    hint = one_error(proc, 3, "Read-only file system", str(ro_folder), option=option)
    assert "--cache-dir" not in hint, hint
    assert ".tmp" not in proc.stderr, proc.stderr  # the file asked for, not the temporary one beside it


# ---- -o into a folder that is not there ---------------------------------------------------------------------


@pytest.mark.parametrize("command", [["plan", *PLAN], ["pack", *PLAN, "--cache-dir", "TMP/none"]])
def test_output_into_a_missing_folder_is_refused_and_not_created(tmp_path, command):
    argv = [a.replace("TMP", str(tmp_path)) for a in command]
    proc = cli(*argv, "-o", str(tmp_path / "nonexistent" / "dir" / "out.yaml"))
    one_error(proc, 2, "does not exist", option="-o")
    assert not (tmp_path / "nonexistent").exists()


def test_output_into_one_new_folder_is_made_as_mkdir_would(tmp_path):
    proc = cli("plan", *PLAN, "-o", "out/plan.yaml", "-q", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out" / "plan.yaml").is_file()


# ---- launch --json: the report is the only thing on stdout ---------------------------------------------------


def test_launch_json_keeps_the_jobs_stdout_off_stdout(tmp_path):
    proc = cli("launch", *PLAN, "--cache-dir", str(tmp_path / "c"), "--allow-missing", "--json", "--",
               "sh", "-c", "echo said-by-the-job; echo and-its-child >&1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)  # nothing before or after it
    assert report["exit_code"] == 0
    assert "said-by-the-job" in proc.stderr and "and-its-child" in proc.stderr
    help_text = cli("launch", "--help").stdout
    assert "the job's stdout goes to stderr" in " ".join(help_text.split())


# ---- a URL that cannot be what the user meant ----------------------------------------------------------------


@pytest.mark.parametrize("url, words", [
    ("file://tmp/x", ("'file://tmp/x' names the host 'tmp'",)),
    ("ftp://example.org/x", ("ftp://example.org/x", "unknown URL scheme ftp://")),
])
def test_pull_from_a_url_that_cannot_work_is_bad_input_naming_the_url(tmp_path, url, words):
    proc = cli("pull", *PLAN, "--from", url, "--cache-dir", str(tmp_path / "c"), "--allow-unsigned")
    hint = one_error(proc, 2, *words)
    assert "fingerprint" not in proc.stderr and "Name or service" not in proc.stderr, proc.stderr
    if url.startswith("file:"):
        assert "file:///tmp/x" in hint
    assert not (tmp_path / "c").exists()


# ---- nvcc that is not nvcc, CUDA_HOME that is not there ------------------------------------------------------

needs_legacy_warm = pytest.mark.skipif(_legacy_toolchain_missing() is not None,
                                       reason="needs the legacy DeepGEMM and nvcc")


@needs_legacy_warm
def test_an_nvcc_that_is_not_nvcc_is_one_line_exit_3(tmp_path):
    proc = cli("warm", *PLAN, "--cache-dir", str(tmp_path / "c"), "--nvcc", "/usr/bin/true")
    one_error(proc, 3, "/usr/bin/true is not nvcc", option="--nvcc")
    assert "GPL" not in proc.stderr and "WARRANTY" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) <= 3, proc.stderr  # the profile line, error, hint


@needs_legacy_warm
def test_cuda_home_naming_no_directory_is_refused(tmp_path):
    proc = cli("warm", *PLAN, "--cache-dir", str(tmp_path / "c"), env={"CUDA_HOME": str(tmp_path / "nonexistent")})
    one_error(proc, 2, "CUDA_HOME=", "is not a directory", option="--nvcc")
    assert not (tmp_path / "c").exists()


# ---- numbers and flags accepted silently before -------------------------------------------------------------


@needs_legacy_warm
def test_warm_jobs_0_is_refused(tmp_path):
    proc = cli("warm", *PLAN, "--cache-dir", str(tmp_path / "c"), "--jobs", "0")
    one_error(proc, 2, "--jobs must be at least 1", option="--jobs")


@needs_legacy_warm
def test_warm_gpus_on_the_gpu_free_backend_is_one_warning(tmp_path_factory, tmp_path):
    cache = shutil.copytree(warm_once(tmp_path_factory), tmp_path / "c", symlinks=True)
    proc = cli("warm", *PLAN, "--cache-dir", str(cache), "--nvcc", LEGACY_NVCC, "--gpus", "9")
    assert proc.returncode == 0, proc.stderr
    said = [x for x in proc.stderr.splitlines() if "--gpus" in x]
    assert said == ["warning: --gpus is ignored: the legacy backend compiles without a GPU"], proc.stderr


@pytest.mark.parametrize("args, words, option", [
    (["--chunked-prefill-size", "-5"], ("--chunked-prefill-size -5",), "--chunked-prefill-size"),
    (["--chunked-prefill-size", "0"], ("--chunked-prefill-size 0",), "--chunked-prefill-size"),
    (["--format", "yaml", "--json"], ("--format yaml and --json",), "--format"),
])
def test_plan_refuses_what_it_took_silently(args, words, option):
    proc = cli("plan", *PLAN, *args)
    one_error(proc, 2, *words, option=option)
    assert proc.stdout == ""


def test_plan_takes_chunked_prefill_off():
    assert cli("plan", *PLAN, "--chunked-prefill-size", "-1", "-q").returncode == 0


# ---- verify's verdict says what is wrong ----------------------------------------------------------------------


@needs_legacy_warm
def test_verify_for_another_sm_count_says_what_differs(tmp_path_factory):
    cache = str(warm_once(tmp_path_factory))
    # 131 SMs choose the same 4 kernels as the 132 the cache was warmed for: all there, built for another GPU
    proc = cli("verify", *PLAN, "--cache-dir", cache, "--num-sms", "131")
    hint = one_error(proc, 1, "stale: all 4 kernels present, but fingerprint differs in num_sms (built for 132, "
                              "here 131)", option="--num-sms")
    assert " ok" not in proc.stderr.splitlines()[-2]
    assert "--num-sms 132" in hint
    proc = cli("verify", *PLAN, "--cache-dir", cache, "--num-sms", "78")
    one_error(proc, 1, "incomplete: 2/4 kernels ok; 2 missing; fingerprint differs in num_sms (built for 132, here 78)")


# ---- plan's family table is the profile's own -------------------------------------------------------------------


def test_plan_for_any_release_names_every_family_and_what_covers_it():
    # 0.5.1 (read for the rows' paths: 0.5.14): every family is named, the planned ones' rows in their unplanned
    # form (capture, a note says why), and a note says the release may build other kernels, refused under strict
    proc = cli("plan", "--model", "Qwen3-Coder-480B", "--tp", "8", "--ep", "8", "--sglang", "0.5.1", "--json")
    assert proc.returncode == 0, proc.stderr
    fams = json.loads(proc.stdout)["families"]
    assert not fams["read_here"]
    assert {r["family"] for r in fams["rows"]} == {"triton", "flashinfer", "inductor", "cute-dsl", "cuda-driver"}
    moe = next(r for r in fams["rows"] if r["what"].startswith("fused_moe_kernel"))
    assert moe["cover"] == "capture" and "none planned for this command" in moe["how"], moe
    cute = next(r for r in fams["rows"] if r["family"] == "cute-dsl")
    assert cute["cover"] == "none" and "ExecutionEngine" in cute["how"]  # the reason it is not refused, stated
    proc = cli("plan", "--model", "Qwen3-Coder-480B", "--tp", "8", "--ep", "8", "--sglang", "0.5.1")
    assert "may build other kernels of these families" in " ".join(proc.stderr.split())
    # 0.5.14 with the DeepGEMM MoE runner plans no Triton MoE item: its row says none was planned
    proc = cli("plan", "--model", "Qwen3-Coder-480B", "--tp", "8", "--ep", "8", "--sglang", "0.5.14",
               "--moe-runner-backend", "deep_gemm", "--json")
    moe = next(r for r in json.loads(proc.stdout)["families"]["rows"] if r["what"].startswith("fused_moe_kernel"))
    assert moe["cover"] == "capture", moe
    proc = cli("plan", "--model", "Qwen3-Coder-480B", "--tp", "8", "--ep", "8", "--sglang", "0.5.14", "--json")
    fams = json.loads(proc.stdout)["families"]
    assert fams["read_here"]
    moe = next(r for r in fams["rows"] if r["what"].startswith("fused_moe_kernel"))
    assert moe["cover"] == "warm" and "dgprecompile.compile.triton_moe" in moe["how"], moe


# ---- tables at 80 columns, piped: no word split inside a parenthesis; doctor's fix column filled --------------


def _piped(*args) -> subprocess.CompletedProcess:
    env = _env()
    env.pop("TERM", None)
    return subprocess.run([sys.executable, "-m", "dgprecompile", *args], capture_output=True, text=True, env=env,
                          timeout=120)


def test_plan_title_at_80_columns_keeps_its_parenthesis_whole():
    proc = _piped("plan", "--model", "Qwen3-Coder-480B", "--tp", "8", "--ep", "8", "--sglang", "0.5.1")
    assert proc.returncode == 0, proc.stderr
    assert "(sgl-kernel 0.3.5, 132 SMs)" in proc.stdout.splitlines()[1], proc.stdout
    assert all(len(line) <= 80 for line in proc.stdout.splitlines()[:2])


def test_doctor_at_80_columns_keeps_ulimit_u_whole_and_has_no_empty_fix_column():
    proc = _piped("doctor", "--sglang", "0.5.1", "--ranks", "8", "--rlimit-nproc", "100000")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert any("(ulimit -u)" in line for line in lines), proc.stdout
    assert not any("(ulimit" in line and "-u)" not in line for line in lines), proc.stdout
    assert " fix " not in lines[1], proc.stdout  # nothing to fix: no empty column
    assert max(len(line) for line in lines if "│" in line or "┃" in line) <= 80


def test_doctor_names_a_fix_for_every_problem_row(tmp_path):
    empty = str(tmp_path)  # nothing readable under the proc and sys roots: every limit unknown; 40 tasks: a failure
    proc = _piped("doctor", "--sglang", "0.5.1", "--ranks", "8", "--proc-root", empty, "--sys-root", empty,
                  "--rlimit-nproc", "40", "--json")
    checks = json.loads(proc.stdout)["checks"]
    problems = [c for c in checks if c["mark"] in ("warn", "fail")]
    assert len(problems) >= 4, checks
    assert all(c["fix"] for c in problems), [c for c in problems if not c["fix"]]
    shown = _piped("doctor", "--sglang", "0.5.1", "--ranks", "8", "--proc-root", empty, "--sys-root", empty,
                   "--rlimit-nproc", "40")
    assert "check kernel.pid_max by hand" in " ".join(shown.stdout.split()), shown.stdout


# ---- make train outside a SpecForge checkout --------------------------------------------------------------------

REPO = Path(__file__).resolve().parent.parent


def test_launch_config_outside_a_specforge_checkout_names_it_before_starting(tmp_path):
    """`make train` = `launch --config train.yaml`: its command runs scripts/train_eagle3_sgl_online.py, which only
    a SpecForge checkout has; eight ranks each failing to open it (and a torchrun traceback) became one line."""
    proc = cli("launch", "--config", str(REPO / "train.yaml"), "--cache-dir", str(tmp_path / "c"), cwd=tmp_path)
    hint = one_error(proc, 3, "scripts/train_eagle3_sgl_online.py", "SpecForge checkout", option="--config")
    assert "SpecForge" in hint and "CONFIG=" in hint
    assert "can't open file" not in proc.stderr and "torchrun" not in proc.stderr.split("error:")[0]
    assert not (tmp_path / "c").exists()


def test_launch_of_a_python_script_that_is_not_there_is_refused(tmp_path):
    proc = cli("launch", *PLAN, "--allow-missing", "--cache-dir", str(tmp_path / "c"), "--",
               sys.executable, "nothere.py", cwd=tmp_path)
    one_error(proc, 2, "nothere.py does not exist", option="--")
    (tmp_path / "here.py").write_text("print('ran')\n")
    proc = cli("launch", *PLAN, "--allow-missing", "--cache-dir", str(tmp_path / "c"), "--",
               sys.executable, "here.py", cwd=tmp_path)
    assert proc.returncode == 0 and "ran" in proc.stdout, proc.stderr


# ---- the README's featured server command in the venv `make setup` builds (sgl-kernel 0.3.5's DeepGEMM) -----------


@needs_legacy_warm
def test_warm_for_another_sglangs_deepgemm_names_the_package_and_version(tmp_path):
    proc = cli("warm", "--sglang", "0.5.14", "--sglang-cmd", "python -m sglang.launch_server --model-path "
               "Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8 --tp 8 --ep 8", "--cache-dir", str(tmp_path / "c"))
    hint = one_error(proc, 3, "the plan is for a sgl-deep-gemm-0.1 DeepGEMM", option="--sglang")
    assert "pip install --no-deps sgl-deep-gemm==0.1.3" in hint, hint
    assert "sgl-kernel 0.3.5" in hint


# ---- the measurements' kernel counts (docs/measurements.md, once in the README) are what `plan` prints today ----

SERVER = "python -m sglang.launch_server --model-path Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8 --tp 8 --ep 8"


def _counts(*args) -> tuple[int, int, int]:
    proc = cli("plan", "--sglang", "0.5.14", *args, "--json", "-q")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    return plan["total_kernels"], len(plan.get("sglang_jit_modules") or ()), len(plan.get("triton_moe") or ())


def test_the_documented_kernel_counts_are_what_plan_prints():
    readme = " ".join((REPO / "docs" / "measurements.md").read_text().split())
    k, j, t = _counts("--sglang-cmd", SERVER, "--no-sglang-precompile")
    k2, j2, t2 = _counts("--sglang-cmd", SERVER)
    assert (f"with `--no-sglang-precompile` ({k} DeepGEMM kernels + {j} SGLang JIT modules; `plan` adds {t} Triton "
            f"MoE item today, and without that option prints {k2} + {j2} + {t2})") in readme
    k, j, _ = _counts("--sglang-cmd", f"{SERVER} --chunked-prefill-size -1 --context-length 262144 "
                                      "--moe-runner-backend deep_gemm")
    assert f'--moe-runner-backend deep_gemm"` makes ({k} DeepGEMM kernels + {j} SGLang JIT modules)' in readme
    k, j, _ = _counts("--model", "Qwen3-Coder-480B", "--tp", "8", "--ep", "8", "--moe-runner-backend", "deep_gemm")
    assert f"({k} DeepGEMM kernels + 2 SGLang JIT modules then, 52 s; `plan` lists {k} + {j} today" in readme


# ---- nothing written outside the folders a command is given ----------------------------------------------------


def test_a_non_strict_launch_that_missed_nothing_leaves_no_misses_file_in_the_working_directory(tmp_path):
    proc = cli("launch", *PLAN, "--cache-dir", str(tmp_path / "c"), "--allow-missing", "--no-strict", "--",
               "true", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "dgprecompile-misses.jsonl").exists()
    asked = tmp_path / "m.jsonl"  # asked for by name, it is written (empty of calls)
    proc = cli("launch", *PLAN, "--cache-dir", str(tmp_path / "c"), "--allow-missing", "--no-strict",
               "--misses", str(asked), "--", "true", cwd=tmp_path)
    assert proc.returncode == 0 and asked.is_file(), proc.stderr
