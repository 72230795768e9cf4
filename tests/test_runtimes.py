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
    assert {f.id for f in CAPTURED if f.strict_by is StrictBy.COUNTED} == {"flashinfer", "cute-dsl"}
    assert {f.id for f in CAPTURED if f.strict_by is StrictBy.HOOK} == {"triton", "inductor"}
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
