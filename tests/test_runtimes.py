"""The runtime registry and the stage tables keyed by what a runtime names (issue 30 item 1): every runtime answers
the one protocol with the one strict vocabulary, and every heuristic, key scheme, naming, backend worker and
preload a runtime names is in its stage's table (a name missing there would fail only when that runtime is used)."""

from __future__ import annotations

from dgprecompile.compile.backends.workers import PRELOADS, WORKERS
from dgprecompile.keys.schemes import KEY_SCHEMES, NAMINGS
from dgprecompile.planning.heuristics.registry import HEURISTICS, heuristic_for
from dgprecompile.runtimes import (
    BACKENDS,
    CAPTURED,
    FLASHINFER_MODULES,
    GENERATIONS,
    JIT_FAMILIES,
    RUNTIMES,
    TRITON_MOE,
    Runtime,
    StrictBy,
)


def test_every_runtime_answers_the_protocol_once():
    ids = [r.id for r in RUNTIMES]
    assert len(ids) == len(set(ids)), ids
    for runtime in RUNTIMES:
        assert isinstance(runtime, Runtime), runtime.id
        assert isinstance(runtime.strict_by, StrictBy), runtime.id
    assert set(RUNTIMES) >= {*GENERATIONS.values(), *JIT_FAMILIES.values(), TRITON_MOE, *CAPTURED}


def test_the_strict_vocabulary_is_what_each_runtime_has():
    assert {g.id for g in GENERATIONS.values() if g.strict_by is StrictBy.HOOK} == {"legacy"}
    assert {f.id: f.strict_by for f in JIT_FAMILIES.values()} == {"tvm-ffi": StrictBy.HOOK,
                                                                  "sglang-ninja": StrictBy.SWITCH,
                                                                  "sglang-ninja-hook": StrictBy.HOOK}
    assert {f.id for f in CAPTURED if f.strict_by is StrictBy.COUNTED} == {"cute-dsl", "cuda-driver"}
    assert {f.id for f in CAPTURED if f.strict_by is StrictBy.HOOK} == {"triton", "inductor", "flashinfer"}
    assert StrictBy.STANDIN == "standin" and str(StrictBy.HOOK) == "hook"  # what manifests and messages show


def test_every_name_a_generation_gives_is_in_its_stages_table():
    for gen in GENERATIONS.values():
        if gen.heuristic is not None:
            assert gen.heuristic in HEURISTICS, gen.id
            assert heuristic_for(gen) is heuristic_for(gen)  # one instance per kernel choice
        if gen.key_scheme is not None:
            assert gen.key_scheme in KEY_SCHEMES, gen.id
        assert set(gen.backends) <= set(BACKENDS), gen.id
    assert set(HEURISTICS) == {g.heuristic for g in GENERATIONS.values()} - {None}
    assert set(KEY_SCHEMES) == {g.key_scheme for g in GENERATIONS.values()} - {None}


def test_every_backend_has_a_worker_and_a_preload_where_it_says_so():
    assert set(WORKERS) == set(BACKENDS)
    assert set(PRELOADS) == {name for name, b in BACKENDS.items() if b.preload}
    assert {f.backend for f in JIT_FAMILIES.values()} <= set(BACKENDS)
    assert set(NAMINGS) == set(JIT_FAMILIES)


def test_the_cxx_generations_are_the_data_files_entries():
    """The C++ DeepGEMM generations are read from data/deepgemm_cxx.yaml (issue 30 item 1): one Generation per
    entry, shared fields taken by `uses`, release lists by name."""
    from dgprecompile.data import load_yaml
    from dgprecompile.runtimes.deepgemm_cxx import CXX_GENERATIONS, SK_KEY_VERSIONS

    doc = load_yaml("deepgemm_cxx.yaml")
    assert [g.id for g in CXX_GENERATIONS] == [e["id"] for e in doc["generations"]]
    waves = GENERATIONS["sgl-kernel-waves"]
    assert waves.key_versions == SK_KEY_VERSIONS == tuple(doc["key_versions"]["sk"])
    assert waves.strict_by is StrictBy.STANDIN and waves.backends == ("nvcc", "cxx", "sweep")  # from `uses`
    assert dict(waves.gpu_checked_m) == {"GEMM_NT_F8F8BF16": 65473, "GROUPED_GEMM_NT_F8F8BF16_MASKED": 8200}
    assert GENERATIONS["sgl-deep-gemm-0.2"].root_separator == ":" and GENERATIONS["sgl-kernel-cxx"].key_versions is None


def test_a_broken_generations_document_is_one_error_naming_the_field():
    import pytest

    from dgprecompile.data import load_yaml
    from dgprecompile.errors import InputError
    from dgprecompile.runtimes.deepgemm_cxx import generations_from

    doc = load_yaml("deepgemm_cxx.yaml")
    doc["generations"][1]["strict_by"] = "nvcc"
    with pytest.raises(InputError, match=r"generations\[1\]\.strict_by"):
        generations_from(doc, "g.yaml")
    doc = load_yaml("deepgemm_cxx.yaml")
    doc["generations"][2]["key_versions"] = "sk-9"
    with pytest.raises(InputError, match=r"g.yaml: generations\[2\]\.key_versions: no release list named 'sk-9'"):
        generations_from(doc, "g.yaml")
    doc = load_yaml("deepgemm_cxx.yaml")
    doc["generations"][0]["cubins"] = ["x"]
    with pytest.raises(InputError, match=r"generations\[0\]"):
        generations_from(doc, "g.yaml")


def test_each_stage_has_what_every_planning_runtime_kind_names():
    """warm's PREPARE, pack's FILED_IN, launch's RUNTIME_ENV and verify --live's LIVE_UNITS hold every kind and live unit a runtime names
    (the DeepGEMM generation's kernels are warm's own first stream, not a PREPARE entry)."""
    from dgprecompile.cache.pack import FILED_IN
    from dgprecompile.compile.warm_setup import CUT, PREPARE
    from dgprecompile.launch.environment import RUNTIME_ENV
    from dgprecompile.launch.live import LIVE_UNITS

    planning = {r.kind for r in RUNTIMES if r not in CAPTURED}
    assert set(PREPARE) == planning - {"deepgemm"} and set(CUT) <= set(PREPARE)
    assert set(FILED_IN) == planning
    assert set(RUNTIME_ENV) == {r.kind for r in (*GENERATIONS.values(), *JIT_FAMILIES.values(), FLASHINFER_MODULES)}
    assert {u for r in RUNTIMES for u in r.live} <= set(LIVE_UNITS)
    assert all(r.live == () for r in CAPTURED)


def test_verify_live_drives_what_the_generation_says(monkeypatch):
    """launch/live.py asks each runtime what it drives: a generation that drove dense layers only would leave
    its masked keys out, named in a note."""
    from dataclasses import replace
    from pathlib import Path

    from dgprecompile.launch.live import LiveOptions, live_units
    from dgprecompile.planning.manifest import read_manifest

    plan = read_manifest(Path(__file__).parent.parent / "shapes"
                         / "Qwen3-Coder-480B-A35B-Instruct-FP8.tp8.ep8.sglang-0.5.12-0.5.16.deep_gemm.yaml")
    units, notes = live_units(plan, LiveOptions(sample=2), topk=8)
    assert {u["kind"] for u in units} == {"dense", "masked", "jit"}
    gen = plan.profile.deepgemm
    monkeypatch.setitem(GENERATIONS, gen.id, replace(gen, live=("dense",)))
    units, notes = live_units(plan, LiveOptions(sample=2), topk=8)
    assert {u["kind"] for u in units} == {"dense", "jit"}
    assert any(n.startswith("masked key n=") and "not exercised" in n for n in notes), notes


def test_the_cuda_driver_cache_is_a_counted_family_launch_capture_points_into_the_cache(tmp_path):
    """The runtime added in its own module (runtimes/cuda_driver.py) reaches launch through the registry alone:
    `launch --capture` points CUDA_CACHE_PATH into its area, and what the driver leaves there is counted per file,
    its root `index` (the driver's bookkeeping) not."""
    from dgprecompile.cache.store import CacheStore
    from dgprecompile.launch.capture import compiled_during, family_env, snapshot
    from dgprecompile.runtimes.cuda_driver import CUDA_DRIVER

    assert CUDA_DRIVER in CAPTURED and CUDA_DRIVER in RUNTIMES and CUDA_DRIVER.strict_by is StrictBy.COUNTED
    store = CacheStore(tmp_path / "c")
    env = family_env(store.root, store.read_index(), capture=True, strict=False)
    area = store.root / "cuda-driver"
    assert ("CUDA_CACHE_PATH", str(area), "CUDA driver PTX JIT: capture what the job builds into cuda-driver/") in env
    before = snapshot(store.root)
    (area / "a" / "3f").mkdir(parents=True)
    (area / "index").write_bytes(b"\0" * 64)
    (area / "a" / "3f" / "9c2e41d0").write_bytes(b"\x7fELF module")
    report = next(r for r in compiled_during(store.root, before) if r.family == "cuda-driver")
    assert report.new == ["a/3f/9c2e41d0"] and report.note.startswith("not filed")
    later = family_env(store.root, store.read_index(), capture=False, strict=False)  # the area is there
    assert ("CUDA_CACHE_PATH", str(area), "CUDA driver PTX JIT: what an earlier capture or warm left in cuda-driver/") \
        in later
    empty = CacheStore(tmp_path / "empty")  # strict: into the cache whatever it holds (counted there)
    strict = dict((n, v) for n, v, _ in family_env(empty.root, empty.read_index(), capture=False, strict=True))
    assert strict["CUDA_CACHE_PATH"] == str(empty.root / "cuda-driver")


def test_a_manifest_naming_a_runtime_of_another_kind_for_an_item_is_refused():
    """A JIT module whose `family` names no JIT loader (here the Triton MoE runtime, or nothing known) is one
    error naming the module, not a check of the wrong kind."""
    from dataclasses import replace
    from pathlib import Path

    import pytest

    from dgprecompile.errors import InputError
    from dgprecompile.planning.manifest import read_manifest

    plan = read_manifest(Path(__file__).parent.parent / "shapes"
                         / "Qwen3-Coder-480B-A35B-Instruct-FP8.tp8.ep8.sglang-0.5.12-0.5.16.deep_gemm.yaml")
    module = next(iter(plan.jit_modules.values()))
    with pytest.raises(InputError, match=r"'triton-moe' is a triton-moe runtime, not a sglang-jit one"):
        plan.runtime_of(replace(module, family="triton-moe"))
    with pytest.raises(InputError, match=r"unknown runtime 'nosuch'"):
        plan.runtime_of(replace(module, family="nosuch"))


def test_the_plan_carries_one_list_of_typed_items_each_naming_its_runtime():
    """Plan.items is the one list every stage loops over (issue 30 item 2): each item's runtime answers through
    Plan.runtime_of, no item borrows another runtime's fields, and verify has a check for every kind of runtime
    that plans items (a runtime whose kind no stage table holds would fail only when one of its items is planned)."""
    from pathlib import Path

    from dgprecompile.cache.verify import CHECKS
    from dgprecompile.planning.manifest import read_manifest
    from dgprecompile.runtimes.items import GemmKey, JitModule, KernelSpec, PlanItem, TritonMoeItem

    plan = read_manifest(Path(__file__).parent.parent / "shapes"
                         / "Qwen3-Coder-480B-A35B-Instruct-FP8.tp8.ep8.sglang-0.5.20-0.5.23.auto.yaml")
    groups = {runtime.id: items for runtime, items in plan.by_runtime()}
    # 0.5.23 on sm_90 compiles no graph (a Triton kernel sums the MoE: data/inductor_graphs.yaml); 0.5.14 does
    assert list(groups) == ["sgl-deep-gemm-0.2", "sglang-ninja", "triton-moe", "flashinfer-module", "triton-path"]
    older = read_manifest(Path(__file__).parent.parent / "shapes"
                          / "Qwen3-Coder-480B-A35B-Instruct-FP8.tp8.ep8.sglang-0.5.12-0.5.16.auto.yaml")
    assert "inductor-graph" in {runtime.id for runtime, _ in older.by_runtime()}
    assert [it.id for it in plan.items] == [*plan.kernels, *plan.jit_modules, *plan.triton_moe, *plan.flashinfer,
                                            *plan.inductor, *plan.triton_path]
    for item in plan.items:
        assert isinstance(item, PlanItem) and plan.runtime_of(item).kind == item.kind
    assert {type(it) for it in groups["triton-moe"]} == {TritonMoeItem}
    assert not {"n", "k", "num_groups", "kernel_type"} & set(TritonMoeItem.__dataclass_fields__)
    assert {KernelSpec.section, JitModule.section, TritonMoeItem.section} == {"kernels", "sglang_jit_modules",
                                                                              "triton_moe"}
    assert not issubclass(GemmKey, PlanItem)  # a key is what a kernel is reached from, not a work item
    assert TritonMoeItem.RUNTIME == TRITON_MOE.id
    assert {r.kind for r in RUNTIMES if r not in CAPTURED} == set(CHECKS)
