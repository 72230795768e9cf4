"""tests/gpu/carry_build.sh (issue 43, item 3): the real script, run here on a small plan (the README's 480B server
plan cut, a test's trim, to one DeepGEMM kernel and SGLang's clamp_position JIT module, its Triton MoE and
torch.compile items left in for the script to leave out), then carried as the device would: the pieces kept and
joined and unpacked by tests/gpu/carry_unpack.sh (model_proof.sh's CARRIED step): refused under a key that did not
sign it, unpacked with the key that did into a fresh cache, verified there, a warm there building nothing, and its DeepGEMM entry filed under the name the runtime computes with
deep_gemm at the fixed path (and not under the name of deep_gemm where `make setup` put it)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import NVCC, STANDINS, beside_venv, sgl_deep_gemm_013_dir, sglang_014_dir

from dgprecompile.keys import cxx_templates
from dgprecompile.keys.sgl_deep_gemm_01 import CxxKeyContext
from dgprecompile.planning.manifest import plan_from_dict, read_manifest, write_manifest
from dgprecompile.planning.plan import PlanRequest
from dgprecompile.planning.server_plan import plan_from_server

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "tests" / "gpu" / "carry_build.sh"
UNPACK = REPO / "tests" / "gpu" / "carry_unpack.sh"
QWEN = "python -m sglang.launch_server --model-path Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8 --tp 8 --ep 8"
NEEDS = [sgl_deep_gemm_013_dir(), sglang_014_dir(), beside_venv("flashinfer-0.6.12", "flashinfer/__init__.py"),
         beside_venv("nvidia-curand-10.4.0.35", "nvidia/cu13/include/curand.h"), NVCC]
pytestmark = pytest.mark.skipif(None in NEEDS, reason="sgl-deep-gemm 0.1.3, sglang 0.5.14, flashinfer 0.6.12 and "
                                "nvidia-curand beside the venv, and nvcc (make setup)")


def _small_plan(path: Path) -> str:
    """The 480B 0.5.14 server plan with one DeepGEMM kernel and one SGLang JIT module; FlashInfer dropped (its
    modules take minutes here); triton_moe and inductor kept (the script must leave them to the device)."""
    data = plan_from_server(PlanRequest(sglang_cmd=QWEN, sglang="0.5.14", sglang_precompile=False)).to_dict()
    kernel = data["kernels"][0]
    data["kernels"], data["total_kernels"] = [kernel], 1
    for shape in data["shapes"]:
        shape["buckets"] = [b for b in shape["buckets"] if b["kernel"] == kernel["id"]]
        shape["aux_kernels"] = []
    data["sglang_jit_modules"] = [m for m in data["sglang_jit_modules"] if m["name"] == "clamp_position"]
    data.pop("flashinfer", None)
    data.pop("triton_path", None)  # the model path's other Triton kernels: tests/test_triton_path.py
    assert data["triton_moe"] and data["inductor"]
    write_manifest(plan_from_dict(data), path)
    return kernel["id"]


def _dgp(*args, env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dgprecompile", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=600)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("carry")
    kernel = _small_plan(tmp / "plan.yaml")
    # laid out as the tree is: .carry (the build's, pieces in .carry/pieces), .carry-key
    env = {**os.environ, "MANIFEST": str(tmp / "plan.yaml"), "OUTDIR": str(tmp / ".carry"),
           "KEYDIR": str(tmp / ".carry-key"),
           "WORK": str(tmp / "work"), "SITE": str(tmp / "site"), "PYTHON": sys.executable, "NVCC": NVCC,
           "PIECE_BYTES": "40000"}  # small pieces: the artifact (about 78 KB) travels in two
    res = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=env, timeout=900, cwd=tmp)
    assert res.returncode == 0, res.stdout + res.stderr
    return tmp, kernel, res.stdout


def _env_there(tmp: Path) -> dict[str, str]:
    """The device's PYTHONPATH: deep_gemm at the fixed path, sglang 0.5.14 (its JIT modules' fingerprint fields), and
    tests/standins' named stand-ins for what sglang imports and this machine cannot run (triton, sgl_kernel)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp / "site"), sglang_014_dir(), STANDINS, str(REPO)]),
            "DGP_TRANSFORMERS_EXIST_OK": "1",
            "PATH": os.path.dirname(NVCC) + os.pathsep + os.environ.get("PATH", ""), "CUDA_VISIBLE_DEVICES": "",
            "PYTHON": sys.executable}


def test_the_carried_part_leaves_triton_and_inductor_to_the_device(built):
    tmp, kernel, out = built
    carried = read_manifest(tmp / ".carry" / "carry.yaml")
    assert list(carried.kernels) == [kernel]
    sections = carried.to_dict()
    assert [m["name"] for m in sections["sglang_jit_modules"]] == ["clamp_position"]
    assert not sections.get("triton_moe") and not sections.get("inductor") and not sections.get("flashinfer")
    assert "left to the device: triton_moe, inductor" in out and "warm: compiled 2 cached 0 failed 0" in out
    warm = json.loads((tmp / ".carry" / "warm.json").read_text())
    assert sorted(warm["item_seconds"]) == sorted([kernel, "sglang_jit:clamp_position<int64_t>"])
    assert "part warm:" in out and "part pack:" in out


def test_the_pieces_are_under_60_mib_with_their_sha256(built):
    tmp, _, _ = built
    manifests = sorted((tmp / ".carry" / "pieces").glob("p*/MANIFEST.json"))
    assert len(manifests) >= 2  # PIECE_BYTES cut it in two or more
    listed = json.loads(manifests[0].read_text())
    for piece in listed["pieces"]:
        data = (tmp / ".carry" / "pieces" / piece["name"] / "piece").read_bytes()
        assert len(data) == piece["size"] < 60 * 1024 * 1024
        assert hashlib.sha256(data).hexdigest() == piece["sha256"]
    assert sorted(f["name"].rsplit(".", 1)[-1] for f in listed["files"]) == ["gz", "sig"]


def _unpack_there(tmp: Path, key: Path, cache: Path, work: Path) -> subprocess.CompletedProcess:
    """model_proof.sh's CARRIED step: tests/gpu/carry_unpack.sh from the tree's root, pieces held in .carry-held."""
    work.mkdir()
    return subprocess.run(["bash", str(UNPACK), "in", ".carry-held", str(key), str(cache), str(work)],
                          capture_output=True, text=True, env=_env_there(tmp), cwd=tmp, timeout=600)


def test_the_artifact_unpacks_only_under_its_key_and_verifies_with_the_fixed_path_names(built):
    tmp, kernel, _ = built
    env = _env_there(tmp)
    other = _dgp("keygen", tmp / "other-key", env=env)
    assert other.returncode == 0, other.stderr
    # first call: the pieces still in .carry/pieces are kept (moved to .carry-held), joined; a key that did not sign
    refused = _unpack_there(tmp, tmp / "other-key" / "dgprecompile-signing.pub", tmp / "refused", tmp / "w1")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert refused.stdout.splitlines()[0].startswith("carried: join rc=0 carry-")
    assert "carried: unpack rc=2; no trusted signature" in refused.stdout and not (tmp / "refused" / "cache").exists()
    assert not list((tmp / ".carry" / "pieces").glob("p*")) and (tmp / ".carry-held" / "p01.piece").is_file()
    # the next: the held pieces joined again, unpacked under the key that signed
    fresh = tmp / "fresh"
    trusted = tmp / ".carry" / "trusted" / "dgprecompile-signing.pub"  # what travels with the pieces
    assert trusted.read_bytes() == (tmp / ".carry-key" / "dgprecompile-signing.pub").read_bytes()
    assert not list((tmp / ".carry").rglob("*.key"))  # the private key stays in .carry-key
    res = _unpack_there(tmp, trusted, fresh, tmp / "w2")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "carried: unpack rc=0; signed by trusted key " in res.stdout and "2 entries added" in res.stdout
    res = _dgp("verify", "--manifest", tmp / ".carry" / "carry.yaml", "--cache-dir", fresh, env=env)
    assert res.returncode == 0 and "coverage proved from the runtime's keys" in res.stdout, res.stdout + res.stderr
    # the runtime's own name for the kernel, deep_gemm at the fixed path; another install path names another entry
    spec = read_manifest(tmp / ".carry" / "carry.yaml").kernels[kernel]
    template = cxx_templates.require_template("0.1.3").id

    def name(install: str) -> str:
        return CxxKeyContext.from_env(os.path.join(install, "deep_gemm", "include"), (13, 0), {},
                                      template=template).entry_name(spec)

    fixed = name(str(tmp / "site"))
    assert [p.name for p in (fresh / "cache").iterdir()] == [fixed]
    assert name(sgl_deep_gemm_013_dir()) != fixed
    assert [p.name for p in (fresh / "tvm-ffi").iterdir()][0].startswith("sgl_kernel_jit_clamp_position_int64_t_")
    # a warm over the unpacked cache builds nothing; the line model_proof.sh records says so, and says otherwise for
    # the carry build's own warm (which built both)
    warm = _dgp("warm", "--manifest", tmp / ".carry" / "carry.yaml", "--cache-dir", fresh, "--backend", "nvcc",
                "--sglang-jit", "on", "--json", env=env)
    assert warm.returncode == 0, warm.stderr
    (tmp / "warm_there.json").write_text(warm.stdout)
    (art,) = (tmp / "w2" / "carried").glob("carry-*.tar.gz")
    lines = {}
    for which in ("warm_there.json", ".carry/warm.json"):
        res = subprocess.run(["bash", str(UNPACK), "built", str(tmp / which), str(art)], capture_output=True,
                             text=True, env=env)
        assert res.returncode == 0, res.stderr
        lines[which] = res.stdout.splitlines()
    assert lines["warm_there.json"] == ["carried: 2 items unpacked; warm (GPU hidden) rebuilt 0 of them",
                                        "warm (GPU hidden) built 0 items: none"]
    assert lines[".carry/warm.json"][0].startswith("carried: 2 items unpacked; warm (GPU hidden) rebuilt 2 of them: ")


def test_a_site_it_did_not_make_is_left_alone(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "mine.txt").write_text("a user's file\n")
    env = {**os.environ, "MANIFEST": str(tmp_path / "none.yaml"), "SITE": str(site), "OUTDIR": str(tmp_path / "o"),
           "PYTHON": sys.executable, "NVCC": NVCC}
    res = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert res.returncode == 2 and "holds files this script did not put there" in res.stderr
    assert (site / "mine.txt").read_text() == "a user's file\n"


def test_no_plan_is_bad_usage(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("SERVER", "MANIFEST")}
    res = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.startswith("error: no plan") and "hint: SERVER=" in res.stderr



def _split_here(tmp: Path, name: str, text: bytes, piece_bytes: int = 52 << 20) -> None:
    (tmp / f"carry-{name}.tar.gz").write_bytes(text)
    res = subprocess.run([sys.executable, str(REPO / "tests" / "gpu" / "carry_pieces.py"), "split",
                          str(tmp / f"carry-{name}.tar.gz")], cwd=tmp, capture_output=True, text=True,
                         env={**os.environ, "CARRY_DIR": f"{name}/pieces", "PIECE_BYTES": str(piece_bytes)})
    assert res.returncode == 0, res.stderr


def _unpack_with(tmp: Path, pieces: str, work: Path) -> subprocess.CompletedProcess:
    work.mkdir()
    return subprocess.run(["bash", str(UNPACK), "in", ".carry-held", str(tmp / "none.pub"), str(tmp / "cache"),
                           str(work)], cwd=tmp, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHON": sys.executable, "CARRY_PIECES": pieces})


def test_a_lease_s_next_artifact_replaces_the_held_one_and_a_part_of_one_is_refused(tmp_path):
    """2026-12-07 on the device: a lease's first call held DeepSeek-V3's piece; the 480B's call carried its own p01,
    keep refused it (another split) and the join went on with the held piece: the 480B's proof unpacked DeepSeek-V3's
    artifact. A call carrying a whole other split now replaces what is held (the join is the new artifact's); one
    carrying part of another split is refused, and the refusal ends the step: no join, no unpack, exit 1."""
    held = tmp_path / ".carry-held"
    _split_here(tmp_path, "first", b"one carry's artifact\n")
    _split_here(tmp_path, "second", b"another carry's artifact\n")
    _split_here(tmp_path, "third", b"a third carry, in two pieces\n", piece_bytes=16)
    first = _unpack_with(tmp_path, "first/pieces", tmp_path / "w1")
    assert first.stdout.startswith("carried: join rc=0 carry-first.tar.gz"), first.stdout + first.stderr
    second = _unpack_with(tmp_path, "second/pieces", tmp_path / "w2")
    assert second.stdout.startswith("carried: join rc=0 carry-second.tar.gz"), second.stdout + second.stderr
    assert "replaced the pieces held in .carry-held/ (another split's)" in second.stderr
    assert (tmp_path / "w2" / "carried" / "carry-second.tar.gz").read_bytes() == b"another carry's artifact\n"
    assert sorted(p.name for p in held.iterdir()) == ["MANIFEST.json", "p01.piece"]
    # part of a third split (p01 of its two pieces) beside the second's held piece: refused, nothing joined
    shutil.rmtree(tmp_path / "third" / "pieces" / "p02")
    part = _unpack_with(tmp_path, "third/pieces", tmp_path / "w3")
    assert part.returncode == 1, part.stdout + part.stderr
    assert part.stdout.startswith("carried: keep rc=1 (third/pieces/p01 belongs to another split than the pieces "
                                  "held in .carry-held/): nothing unpacked"), part.stdout
    assert "belongs to another split" in part.stderr
    assert not (tmp_path / "w3" / "carried").exists() and not (tmp_path / "cache").exists()
    assert (held / "p01.piece").read_bytes() == b"another carry's artifact\n"  # what was held is left as it was
