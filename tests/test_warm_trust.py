"""warm repairs what it can and says in one line what it cannot (issue 19 items 6 and 10): real nvcc compiles of
real legacy DeepGEMM kernels."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from helpers import needs_legacy, needs_nvcc
from test_scratch import ENV, _warm_argv, small_manifest  # noqa: F401  (small_manifest: a 5-kernel plan)

pytestmark = [needs_legacy, needs_nvcc, pytest.mark.nvcc]


def _warm(manifest, cache, *extra, env=None):
    return subprocess.run(_warm_argv(manifest, cache, *extra), capture_output=True, text=True, env=env or ENV,
                          timeout=600)


def test_a_regular_file_in_an_entrys_place_is_repaired(tmp_path, small_manifest):  # noqa: F811
    cache = tmp_path / "dg"
    first = _warm(small_manifest, cache, "--json")
    assert first.returncode == 0, first.stderr
    entry = sorted((cache / "cache").iterdir())[0]
    subprocess.run(["rm", "-rf", str(entry)], check=True)
    entry.write_text("not an entry")
    again = _warm(small_manifest, cache, "--json")
    assert again.returncode == 0, again.stderr
    assert "Traceback" not in again.stderr and "NotADirectoryError" not in again.stderr
    assert json.loads(again.stdout)["failed"] == 0
    assert entry.is_dir() and (entry / "kernel.cubin").is_file()
    verify = subprocess.run(_warm_argv(small_manifest, cache)[:3] + ["verify", "--manifest", str(small_manifest),
                                                                      "--cache-dir", str(cache)],
                            capture_output=True, text=True, env=ENV, timeout=300)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    third = _warm(small_manifest, cache, "--json")
    assert third.returncode == 0 and json.loads(third.stdout)["compiled"] == 0, third.stderr


def _broken_sglang(tmp_path) -> str:
    """The real sglang 0.5.14 wheel's package, every file linked, with one of the JIT modules warm imports cut
    in half (a broken install: sglang imports, that module does not); the wheel's other packages stay where they
    are (put ``sglang_014_dir()`` after this on the path)."""
    from helpers import sglang_014_dir

    real = os.path.join(sglang_014_dir(), "sglang")
    root = tmp_path / "broken"
    (root / "sglang").mkdir(parents=True)
    for name in os.listdir(real):
        if name != "jit_kernel":
            os.symlink(os.path.join(real, name), root / "sglang" / name)
    (root / "sglang" / "jit_kernel").mkdir()
    for name in os.listdir(os.path.join(real, "jit_kernel")):
        os.symlink(os.path.join(real, "jit_kernel", name), root / "sglang" / "jit_kernel" / name)
    os.symlink(os.path.join(sglang_014_dir(), "sglang-0.5.14.dist-info"), root / "sglang-0.5.14.dist-info")
    victim = root / "sglang" / "jit_kernel" / "per_token_group_quant_8bit_v2.py"
    text = victim.read_text()
    victim.unlink()
    victim.write_text(text[: len(text) // 2] + "\n)(\n")
    return str(root)


@pytest.mark.slow
def test_a_broken_sglang_is_one_line_and_deepgemm_kernels_still_build(tmp_path):
    """sglang importable but broken: the sglang-jit workers cannot start. warm says so in one line (no
    traceback), still builds the DeepGEMM kernels, and exits 3 naming the modules it did not build."""
    from helpers import STANDINS, sgl_deep_gemm_013_dir, sglang_014_dir

    from dgprecompile.planning.manifest import plan_from_dict, write_manifest
    from dgprecompile.planning.plan import PlanRequest
    from dgprecompile.planning.request import plan_from_request

    if sglang_014_dir() is None or sgl_deep_gemm_013_dir() is None:
        pytest.skip("needs sglang 0.5.14 and sgl-deep-gemm 0.1.3 beside the venv (make setup)")
    data = plan_from_request(PlanRequest(model="Qwen3-Coder-480B", tp=8, ep=8, sglang="0.5.14",
                                         moe_runner_backend="deep_gemm")).to_dict()
    shape = next(s for s in data["shapes"] if s["kernel_type"] == "GEMM_NT_F8F8BF16")
    shape["buckets"] = shape["buckets"][:1]
    shape["m_max"] = shape["buckets"][0]["m_max"]
    keep = {shape["buckets"][0]["kernel"]} | set(shape["aux_kernels"])
    data["shapes"], data["kernels"] = [shape], [k for k in data["kernels"] if k["id"] in keep]
    data["total_kernels"] = len(data["kernels"])
    manifest = tmp_path / "plan.yaml"
    write_manifest(plan_from_dict(data), manifest)
    modules = sorted(plan_from_dict(data).jit_modules)
    env = {**ENV, "PYTHONPATH": os.pathsep.join([_broken_sglang(tmp_path), sglang_014_dir(), STANDINS,
                                                 sgl_deep_gemm_013_dir(), ENV["PYTHONPATH"]])}
    res = subprocess.run(_warm_argv(manifest, tmp_path / "dg", "--sglang-jit", "on"), capture_output=True,
                         text=True, env=env, timeout=900)
    assert res.returncode == 3, res.stderr
    assert "Traceback" not in res.stderr and "Traceback" not in res.stdout
    errors = [x for x in res.stderr.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and "sglang-jit workers could not set up" in errors[0], res.stderr
    assert "SyntaxError" in errors[0] and f"{len(modules)} not built" in errors[0], errors[0]
    assert any(x.startswith("hint:") for x in res.stderr.splitlines()), res.stderr
    again = subprocess.run(_warm_argv(manifest, tmp_path / "dg", "--sglang-jit", "on", "--json"),
                           capture_output=True, text=True, env=env, timeout=900)
    assert again.returncode == 3 and "Traceback" not in again.stderr, again.stderr
    report = json.loads(again.stdout)
    assert report["already_cached"] == len(data["kernels"]) > 0, report  # the first warm built DeepGEMM's
    assert sorted(report["failures"]) == modules, report["failures"]


@pytest.mark.slow
def test_a_disk_full_warm_counts_the_entry_it_installed(tmp_path, small_manifest):  # noqa: F811
    """The cache's filesystem (a real tmpfs) has room for the compiled entry but not for the index that records
    it: warm must count the entry it installed (not "compiled 0"), say it is not yet indexed, and the next warm
    records it. Free space is stepped a page at a time around the entry's size until that moment is hit."""
    import yaml

    data = yaml.safe_load(small_manifest.read_text())
    shape = data["shapes"][0]
    shape["buckets"] = shape["buckets"][:1]
    shape["m_max"] = shape["buckets"][0]["m_max"]
    data["kernels"] = [k for k in data["kernels"] if k["id"] == shape["buckets"][0]["kernel"]]
    data["total_kernels"] = 1
    one = tmp_path / "one.yaml"
    one.write_text(yaml.safe_dump(data, sort_keys=False))
    probe = tmp_path / "probe"
    assert _warm(one, probe).returncode == 0
    (entry,) = (probe / "cache").iterdir()
    pages = sum(-(-f.stat().st_size // 4096) for f in entry.iterdir())
    seen = None
    for extra in range(0, 8):
        mnt = tmp_path / f"fs{extra}"
        mnt.mkdir()
        try:
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)], check=True,
                           capture_output=True, timeout=30)
        except (OSError, subprocess.SubprocessError) as exc:
            pytest.skip(f"cannot mount a small tmpfs here (needs root): {exc}")
        try:
            cache = mnt / "dg"
            st = os.statvfs(mnt)
            with open(mnt / "filler", "wb") as f:
                f.write(b"\0" * (st.f_bavail * st.f_frsize - (pages + extra) * 4096))
            res = _warm(one, cache, "--json")
            assert "Traceback" not in res.stderr, res.stderr
            report = json.loads(res.stdout)
            installed = [p for p in (cache / "cache").iterdir()] if (cache / "cache").is_dir() else []
            assert report["compiled"] == len(installed), (extra, report, installed)  # what was installed counts
            indexed = json.loads((cache / "dgprecompile" / "index.json").read_text())["kernels"] \
                if (cache / "dgprecompile" / "index.json").is_file() else {}
            if installed and not indexed:
                assert res.returncode == 3 and report["installed_not_indexed"] == [data["kernels"][0]["id"]]
                (mnt / "filler").unlink()
                again = _warm(one, cache, "--json")
                assert again.returncode == 0 and json.loads(again.stdout)["failed"] == 0, again.stderr
                seen = extra
                break
        finally:
            subprocess.run(["umount", "-l", str(mnt)], check=False, capture_output=True, timeout=30)
    assert seen is not None, "never hit the moment the entry fits and its index record does not"
