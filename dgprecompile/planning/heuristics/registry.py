"""Which pure-Python kernel choice each DeepGEMM generation uses: the generation names it
(runtimes/deepgemm.py ``Generation.heuristic``), this table holds it."""

from __future__ import annotations

from functools import cache

from dgprecompile.planning.heuristics import Heuristic
from dgprecompile.planning.heuristics.legacy import LegacyHeuristic
from dgprecompile.planning.heuristics.sm90_cxx import Sm90Cxx02Heuristic, Sm90CxxHeuristic
from dgprecompile.planning.heuristics.sm90_waves import (
    Sm90WaveHeuristic,
    Sm90WaveHeuristic0320,
    Sm90WaveHeuristic037,
)
from dgprecompile.runtimes import Generation

HEURISTICS: dict[str, type] = {
    "legacy": LegacyHeuristic,
    "sm90-waves-0320": Sm90WaveHeuristic0320,  # the wave rule's later revision (SGF@54f99a8)
    "sm90-waves-037": Sm90WaveHeuristic037,  # its earlier revision (SGF@b981e3e)
    "sm90-waves": Sm90WaveHeuristic,  # with a minimised SM count (SGF@5f8a71a)
    "sm90-cxx": Sm90CxxHeuristic,  # sgl-deep-gemm 0.1.x
    "sm90-cxx-02": Sm90Cxx02Heuristic,  # sgl-deep-gemm 0.2.x: 0.1.x's choice, n compiled into some dense kernels
}


def heuristic_for(generation: Generation) -> Heuristic:
    """The generation's kernel choice (InputError where it is not modelled: keys only)."""
    if generation.heuristic is None:
        raise generation.not_modelled()
    return _instance(generation.heuristic)


@cache
def _instance(name: str) -> Heuristic:
    return HEURISTICS[name]()
