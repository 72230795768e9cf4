"""warm --backend sweep (keys-only plans: `plan --keys-only`): which m it calls, how the work is split, the
sweep records in the index and verify's coverage check, warm's refusal without a GPU, and the claim behind the
sampling checked against the H200 device record (tests/data/sweep_generations_h200.json).

Real nvcc cubins for the entries, the real CLI; the stand-ins, named as such: a deep_gemm package folder (sgl-kernel
0.3.21's real headers, no library) for the refusal test, where warm must refuse before it would import it, and a
stand-in GPU library for the end-to-end sweep on a CPU.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import NVCC, assert_one_error, bundled_deep_gemm_dir, needs_nvcc, run_in_fresh_python

from dgprecompile.cache.store import CacheStore
from dgprecompile.cache.sweeps import SweepRecord, coverage, subtract
from dgprecompile.cli.main import cli
from dgprecompile.compile.sweep import EVERY_M_UP_TO, plan_chunks, sampled_ms
from dgprecompile.keys.fingerprint import short_id
from dgprecompile.planning.manifest import read_manifest

DENSE, MASKED = "GEMM_NT_F8F8BF16", "GROUPED_GEMM_NT_F8F8BF16_MASKED"
RECORD = json.loads((Path(__file__).resolve().parent / "data" / "sweep_generations_h200.json").read_text())
PLAN = ["--model", "Qwen3-Coder-480B", "--tp", "8", "--ep", "8", "--sglang", "0.5.8",
        "--moe-runner-backend", "deep_gemm", "--max-tokens", "4096", "--keys-only"]
ROOT = Path(__file__).resolve().parent.parent


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


# ---- sampling and work split -----------------------------------------------------------------------------

def test_sampling_every_m_then_three_per_64():
    ms = sampled_ms(DENSE, 1, 20000)
    assert ms[:EVERY_M_UP_TO] == list(range(1, EVERY_M_UP_TO + 1))
    above = ms[EVERY_M_UP_TO:]
    assert above[:6] == [16385, 16416, 16448, 16449, 16480, 16512]
    assert all(m % 64 in (1, 32, 0) for m in above) and above[-1] <= 20000
    assert sampled_ms(MASKED, 1, 30000) == list(range(1, 30001))  # masked: every expected_m
    # a range that starts inside an interval keeps its first m (it stands for 64q+1..64q+63 there)
    assert sampled_ms(DENSE, 20010, 20040) == [20010, 20032, 20033]
    # the same rule the device sweeps used: 0.1.3 made 18,688 dense calls for m 1..65536
    assert len(sampled_ms(DENSE, 1, 65536)) == RECORD["releases"]["0.1.3"]["keys"]["dense/1792/6144/1"]["calls"]


def test_work_split_covers_each_range_once_and_balances():
    todo = {(DENSE, 1792, 6144, 1): [(1, 4096)], (DENSE, 6144, 1536, 1): [(1, 30000)],
            (MASKED, 5120, 6144, 20): [(1, 1639)], (MASKED, 6144, 2560, 20): [(5, 9), (100, 1639)]}
    jobs = 6
    chunks = plan_chunks(todo, jobs)
    total = sum(len(sampled_ms(k[0], lo, hi)) for k, rs in todo.items() for lo, hi in rs)
    assert sum(c.calls for c in chunks) == total
    for key, ranges in todo.items():
        mine = sorted((c.m_lo, c.m_hi) for c in chunks if c.key == key)
        assert subtract(min(lo for lo, _ in ranges), max(hi for _, hi in ranges), mine) == \
            subtract(min(lo for lo, _ in ranges), max(hi for _, hi in ranges), ranges)  # exactly the ranges
        assert all(a[1] < b[0] for a, b in zip(mine, mine[1:], strict=False))  # no overlap
        calls = sorted(m for c in chunks if c.key == key for m in sampled_ms(key[0], c.m_lo, c.m_hi))
        assert calls == sorted(m for lo, hi in ranges for m in sampled_ms(key[0], lo, hi))  # each m once
    assert max(c.calls for c in chunks) <= 1.5 * total / jobs
    assert [c.calls for c in chunks] == sorted((c.calls for c in chunks), reverse=True)  # largest first


# ---- the claim behind the sampling, against the device record ---------------------------------------------

def _every_m_top(release: str, kind: str) -> int:
    """The largest m below which the device sweep called every m (tests/gpu/sweep_generations.py cold_specs)."""
    if kind.startswith("masked"):
        return 1 << 30
    return 4096 if release.startswith("sk-") else EVERY_M_UP_TO


def _config_at(runs: list[list]) -> dict[int, tuple]:
    return {m: tuple(r[2:]) for r in runs for m in range(r[0], r[1] + 1)}


def test_choice_constant_inside_each_64_interval_in_the_device_record():
    """Where the H200 sweeps called every m, DeepGEMM's choice (block sizes, multicast, stages, swizzle, smem,
    SMs) never changed between 64q+1 and 64q+63 above the small-m blocks (m > 64), in any release; it did change
    at 64q+64 itself (sglang-kernel 0.4.2 turns multicast on at m = 512), which is why 64q+64 is sampled too."""
    intervals, at_top = 0, []
    for release, rel in RECORD["releases"].items():
        for name, key in rel["keys"].items():
            if name.startswith("contig") or not key["runs"]:
                continue  # contiguous: SGLang's m is a multiple of 128, the record sampled only those
            config = _config_at(key["runs"])
            top = min(_every_m_top(release, name), max(config))
            start = max(min(config), 65)
            for q in range((start - 1) // 64 + (1 if (start - 1) % 64 else 0), top // 64):
                inside = {config[m] for m in range(64 * q + 1, 64 * q + 64) if m in config}
                if len(range(64 * q + 1, 64 * q + 64)) != sum(m in config for m in range(64 * q + 1, 64 * q + 64)):
                    continue  # not every m of this interval was called (truncated run)
                intervals += 1
                assert len(inside) == 1, (release, name, q, inside)
                if config.get(64 * q + 64) not in (None, *inside):
                    at_top.append((release, name, 64 * q + 64))
    assert intervals > 1000
    assert ("sk-0.4.2", "dense/1792/6144/1", 512) in at_top


def test_sampled_points_see_every_choice_the_device_record_saw():
    """Every configuration the device record shows inside a swept m range is seen at one of the sweep's m."""
    for release, rel in RECORD["releases"].items():
        for name, key in rel["keys"].items():
            if name.startswith("contig") or not key["runs"]:
                continue
            kind = MASKED if name.startswith("masked") else DENSE
            config = _config_at(key["runs"])
            lo, hi = min(config), max(config)
            seen = {config[m] for m in sampled_ms(kind, lo, hi) if m in config}
            assert seen == set(config.values()), (release, name)


# ---- sweep records and verify ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cubin(tmp_path_factory) -> bytes:
    if NVCC is None:
        pytest.skip("nvcc not found")
    d = tmp_path_factory.mktemp("sweep-cubin")
    (d / "k.cu").write_text("__global__ void k(float *x) { x[threadIdx.x] = 1.0f; }\n")
    subprocess.run([NVCC, "k.cu", "-cubin", "-o", "k.cubin", "--gpu-architecture=sm_90a"], cwd=d, check=True,
                   capture_output=True, timeout=300)
    return (d / "k.cubin").read_bytes()


@pytest.fixture
def swept(tmp_path, cubin):
    """A keys-only plan and a cache whose index records every key's m range in two chunks, each with its own
    entry (real cubin + kernel.cu), as the sweep worker writes them."""
    manifest = tmp_path / "plan.yaml"
    assert run("plan", *PLAN, "-o", manifest).exit_code == 0
    plan = read_manifest(manifest)
    assert not plan.heuristic
    store = CacheStore(tmp_path / "cache")
    store.ensure()
    fingerprint = {"deepgemm": {"generation": "sgl-kernel-waves-0.3.20", "version": "0.3.21"}, "num_sms": 132}
    sweeps, extra = [], {}
    for i, pk in enumerate(plan.keys):
        mid = (pk.key.m_min + pk.key.m_max) // 2
        for j, (lo, hi) in enumerate(((pk.key.m_min, mid), (mid + 1, pk.key.m_max))):
            name = f"kernel.sm90_fp8_gemm_1d2d.{i:02d}{j:02d}" + "0" * 28
            entry = store.entries_dir / name
            entry.mkdir()
            (entry / "kernel.cubin").write_bytes(cubin)
            (entry / "kernel.cu").write_text(f"// key {i} chunk {j}\n")
            extra[name] = store.record_entry(name)
            sweeps.append(SweepRecord(pk.key.ident, lo, hi, [name], short_id(fingerprint), hi - lo + 1).to_dict())

    def mutate(index):
        index.fingerprint = fingerprint
        index.extra.update(extra)
        index.sweeps.extend(sweeps)

    store.update_index(mutate)
    return manifest, plan, store


def _verify(manifest, store):
    return run("verify", "--manifest", manifest, "--cache-dir", store.root, "--json")


def test_verify_complete_when_every_range_is_swept(swept):
    manifest, plan, store = swept
    res = _verify(manifest, store)
    assert res.exit_code == 0, res.output
    report = json.loads(res.stdout)
    assert report["complete"] and report["coverage"] == "sweep"
    assert report["kernels_total"] == len(plan.keys) == 4
    proc, heavy = run_in_fresh_python(["verify", "--manifest", str(manifest), "--cache-dir", str(store.root)])
    assert proc.returncode == 0 and heavy == [], proc.stderr  # no torch, no deep_gemm


def test_verify_names_a_range_not_swept(swept):
    manifest, plan, store = swept
    dropped = store.read_index().sweeps[1]
    store.update_index(lambda index: index.sweeps.remove(dropped))
    res = _verify(manifest, store)
    assert res.exit_code == 1
    problems = json.loads(res.stdout)["problems"]
    lo, hi = dropped["m"]
    assert [(p["kernel"], p["status"], p["detail"]) for p in problems] == \
        [(f"dense n=1792 k=6144 m {lo}..{hi}", "missing", "not swept")]
    text = run("verify", "--manifest", manifest, "--cache-dir", store.root)
    assert_one_error(text, "incomplete", "warm --backend sweep")


def test_verify_names_a_deleted_entry_and_warm_sweeps_that_range_again(swept):
    manifest, plan, store = swept
    record = store.read_index().sweeps[5]
    shutil.rmtree(store.entries_dir / record["entries"][0])
    res = _verify(manifest, store)
    assert res.exit_code == 1
    problems = json.loads(res.stdout)["problems"]
    assert len(problems) == 1 and problems[0]["entry"] == record["entries"][0]
    assert problems[0]["kernel"].endswith(f"m {record['m'][0]}..{record['m'][1]}")
    assert "missing" in problems[0]["detail"]
    # warm's parent: only that range is left to sweep; the rest is "cached"
    from dgprecompile.compile.warm_setup import _sweep_items

    fingerprint = store.read_index().fingerprint
    items, cached = _sweep_items(plan, store, fingerprint, 4, 0, 1)
    assert {(i.kernel_type, i.n, i.k, i.num_groups) for i in items} == {tuple(record["key"])}
    assert min(i.params["m_lo"] for i in items) == record["m"][0]
    assert max(i.params["m_hi"] for i in items) == record["m"][1]
    assert len(cached) == len(plan.keys)  # one label per key: its covered ranges, merged
    assert f"masked n=5120 k=6144 g=20: m 1..{record['m'][0] - 1} swept" in cached


def test_second_warm_finds_everything_swept_and_other_fingerprints_do_not_count(swept):
    manifest, plan, store = swept
    from dgprecompile.compile.warm_setup import _sweep_items

    fingerprint = store.read_index().fingerprint
    items, cached = _sweep_items(plan, store, fingerprint, 4, 0, 1)
    assert items == [] and cached == [f"{label}: m 1..{pk.key.m_max} swept" for label, pk in zip(
        ("dense n=1792 k=6144", "dense n=6144 k=1536", "masked n=5120 k=6144 g=20", "masked n=6144 k=2560 g=20"),
        plan.keys, strict=True)]
    other = dict(fingerprint, num_sms=114)
    items, cached = _sweep_items(plan, store, other, 4, 0, 1)
    assert cached == [] and sum(i.params["m_hi"] - i.params["m_lo"] + 1 for i in items) == \
        sum(pk.key.m_max - pk.key.m_min + 1 for pk in plan.keys)
    index = store.read_index()
    covs = coverage(store, index, [(pk.key.ident, pk.key.m_min, pk.key.m_max) for pk in plan.keys],
                    short_id(other), None)
    assert all(c.missing == [(c.m_min, c.m_max)] for c in covs)


# ---- warm refuses without a GPU ---------------------------------------------------------------------------

def _standin_package(site: Path, why: str) -> None:
    """Stand-in: a deep_gemm package folder as sgl-kernel 0.3.21 ships it (its real headers, so the plan's
    generation is the installed one), whose import fails."""
    real = bundled_deep_gemm_dir("0.3.21")
    if real is None:
        pytest.skip("sgl-kernel 0.3.21's deep_gemm not installed beside the venv (make setup)")
    pkg = site / "deep_gemm"
    pkg.mkdir(parents=True)
    (pkg / "include").symlink_to(Path(real) / "deep_gemm" / "include")
    (pkg / "__init__.py").write_text(f"raise ImportError('stand-in: {why}')\n")


@needs_nvcc
def test_warm_keys_only_plan_refuses_without_a_gpu(tmp_path):
    _standin_package(tmp_path / "site", "warm must not import deep_gemm")
    env = dict(os.environ, PYTHONPATH=f"{tmp_path / 'site'}{os.pathsep}{ROOT}", CUDA_VISIBLE_DEVICES="")
    for backend, words in (("sweep", ("needs a GPU", "Hopper")), ("nvcc", ("keys only", "--backend sweep"))):
        proc = subprocess.run([sys.executable, "-m", "dgprecompile", "warm", *PLAN, "--backend", backend,
                               "--cache-dir", str(tmp_path / "cache"), "--nvcc", NVCC], capture_output=True,
                              text=True, env=env, timeout=120)
        res = type("R", (), {"exit_code": proc.returncode, "output": proc.stdout + proc.stderr,
                             "stderr": proc.stderr})
        assert_one_error(res, *words)
        assert not (tmp_path / "cache" / "cache").exists()


# ---- the whole warm path on a CPU, with a stand-in for the GPU library ------------------------------------

STANDIN_SITE = '''
"""Stand-in (tests/test_sweep.py): the GPU and the C++-JIT DeepGEMM, for the sweep worker only. Each call
"compiles" one entry per (key, block) the first time this process sees it, into the JIT root, as the real JIT
does (its own root and memory): block = ceil(m / 64) above m = 64, else ceil(m / 16)."""
import hashlib, os
from pathlib import Path
from dgprecompile.compile.backends import cxx

class StandinCalls:
    def __init__(self, root):
        self.root, self.seen = Path(root) / "cache", set()
        self.log = open(os.environ["SWEEP_STANDIN_LOG"], "a")

    def _build(self, *config):
        if config in self.seen:
            return
        self.seen.add(config)
        name = "kernel.standin." + hashlib.md5(repr(config).encode()).hexdigest()
        d = self.root / name
        d.mkdir(parents=True)
        (d / "kernel.cubin").write_bytes(Path(os.environ["SWEEP_STANDIN_CUBIN"]).read_bytes())
        (d / "kernel.cu").write_text(repr(config) + "\\n")

    def transpose_scales(self, groups, rows, k):
        self._build("transpose", groups, k)

    def caller(self, kind, n, k, g, m_top):
        def call(m):
            self.log.write(f"{kind} {n} {k} {g} {m}\\n")
            self._build(kind, n, k, g, -(-m // 64) if m > 64 else -(-m // 16) - 10)
        return call

    def synchronize(self):
        self.log.flush()

cxx.SglangCalls.open = classmethod(lambda cls, job, root: StandinCalls(root))
'''


@pytest.fixture
def standin_env(tmp_path, cubin):
    site = tmp_path / "site"
    _standin_package(site, "the sweep stand-in never imports deep_gemm")
    (site / "sitecustomize.py").write_text(STANDIN_SITE)
    (tmp_path / "k.cubin").write_bytes(cubin)
    return dict(os.environ, PYTHONPATH=f"{site}{os.pathsep}{ROOT}", CUDA_VISIBLE_DEVICES="0",
                SWEEP_STANDIN_CUBIN=str(tmp_path / "k.cubin"), SWEEP_STANDIN_LOG=str(tmp_path / "calls.log"))


def _cli(env, *args):
    proc = subprocess.run([sys.executable, "-m", "dgprecompile", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=600)
    return proc.returncode, proc.stdout, proc.stderr


def test_sweep_warm_end_to_end_with_a_standin_library(tmp_path, standin_env):
    small = [a if a != "4096" else "200" for a in PLAN]  # dense m 1..200, masked expected_m 1..80
    cache = tmp_path / "cache"
    rc, out, err = _cli(standin_env, "warm", *small, "--cache-dir", cache, "--jobs", "2", "--nvcc", NVCC, "--json")
    assert rc == 0, err
    warm = json.loads(out)
    assert warm["backend"] == "sweep" and warm["failed"] == 0 and warm["compiled"] >= 4
    calls = (tmp_path / "calls.log").read_text().split("\n")
    plan = json.loads(_cli(standin_env, "plan", *small, "--format", "json")[1])
    for s in plan["shapes"]:  # every m of every key was called, each once
        mine = sorted(int(line.split()[4]) for line in calls
                      if line.startswith(f"{s['kernel_type']} {s['n']} {s['k']} {s['num_groups']} "))
        assert mine == list(range(s["m_min"], s["m_max"] + 1)), s["kernel_type"]
    index = json.loads((cache / "dgprecompile" / "index.json").read_text())
    assert {e for r in index["sweeps"] for e in r["entries"]} == set(index["extra"]) == \
        set(os.listdir(cache / "cache"))
    assert not os.listdir(cache / "dgprecompile" / "staging")  # nothing half-written left behind
    rc, out, err = _cli(standin_env, "verify", *small, "--cache-dir", cache, "--json")
    assert rc == 0 and json.loads(out)["coverage"] == "sweep", out + err
    # idempotent: a second warm calls nothing and says so
    (tmp_path / "calls.log").write_text("")
    rc, out, err = _cli(standin_env, "warm", *small, "--cache-dir", cache, "--jobs", "2", "--nvcc", NVCC)
    assert rc == 0 and (tmp_path / "calls.log").read_text() == "", err
    assert "cached: dense n=1792 k=6144: m 1..200 swept" in err
    # a deleted entry: verify names its key and range; warm sweeps that range again and only that
    rec = next(r for r in index["sweeps"] if r["key"][0] == MASKED)
    shutil.rmtree(cache / "cache" / rec["entries"][0])
    rc, out, err = _cli(standin_env, "verify", *small, "--cache-dir", cache)
    assert rc == 1 and "warm --backend sweep" in err
    problems = json.loads(_cli(standin_env, "verify", *small, "--cache-dir", cache, "--json")[1])["problems"]
    assert [p["entry"] for p in problems] == [rec["entries"][0]]
    assert problems[0]["kernel"].startswith("masked n=") and " m " in problems[0]["kernel"]
    rc, out, err = _cli(standin_env, "warm", *small, "--cache-dir", cache, "--jobs", "2", "--nvcc", NVCC)
    assert rc == 0, err
    again = {int(line.split()[4]) for line in (tmp_path / "calls.log").read_text().splitlines()}
    assert again and min(again) >= rec["m"][0] and max(again) <= rec["m"][1]
    assert _cli(standin_env, "verify", *small, "--cache-dir", cache)[0] == 0


def test_pack_and_unpack_carry_the_sweep_records(swept, tmp_path):
    manifest, plan, store = swept
    archive = tmp_path / "swept.tar.gz"
    res = run("pack", "--manifest", manifest, "--cache-dir", store.root, "-o", archive)
    assert res.exit_code == 0, res.output
    other = tmp_path / "other"
    # --force: this machine's DeepGEMM is another generation, so the artifact's fingerprint cannot be checked here
    res = run("unpack", archive, "--cache-dir", other, "--force")
    assert res.exit_code == 0, res.output
    assert json.loads((other / "dgprecompile" / "index.json").read_text())["sweeps"] == store.read_index().sweeps
    res = _verify(manifest, CacheStore(other))
    assert res.exit_code == 0 and json.loads(res.stdout)["coverage"] == "sweep", res.output
