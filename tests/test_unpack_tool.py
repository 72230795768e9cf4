"""tools/unpack_deep_gemm.py, the one way to take deep_gemm/ out of a wheel: installed into a site-packages (make
setup) or as the tarball the device scripts untar (tests/gpu/fetch_generation_wheels.sh), on a real wheel."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import tarfile
import zipfile

import pytest

TOOL = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools", "unpack_deep_gemm.py")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# a real wheel holding a deep_gemm/ package with its compiled extension (make setup downloads it beside the repo)
WHEEL = next(iter(sorted(glob.glob(os.path.join(REPO, ".cache", "wheels", "sgl_deep_gemm-0.1.3-*.whl")))), None)


@pytest.mark.skipif(WHEEL is None, reason="the sgl-deep-gemm 0.1.3 wheel is not in .cache/wheels (make setup)")
@pytest.mark.parametrize("no_so", [False, True])
def test_the_tarball_holds_exactly_the_wheels_deep_gemm_files(tmp_path, no_so):
    out = tmp_path / "dg.tgz"
    flags = ["--tgz"] + (["--no-so"] if no_so else [])
    r = subprocess.run([sys.executable, TOOL, *flags, WHEEL, str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    with zipfile.ZipFile(WHEEL) as zf:
        want = {n: zf.read(n) for n in zf.namelist() if n.startswith("deep_gemm/") and not n.endswith("/")
                and not (no_so and n.endswith(".so"))}
    with tarfile.open(out) as tar:
        got = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
    assert got == want
    assert any(n.endswith(".so") for n in got) != no_so


def test_no_so_without_tgz_is_refused(tmp_path):
    r = subprocess.run([sys.executable, TOOL, "--no-so", "x.whl", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 2 and "usage" not in r.stdout
