"""What every runtime answers: the one protocol of the runtimes package.

A *runtime* is one thing in the job that compiles at run time and keeps what it built in a cache: a DeepGEMM
generation, one of SGLang's own JIT loaders, Triton's fused MoE kernel, or a family whose entries are only
captured from a real run. No stage branches on a runtime's name: it asks the object. Each runtime answers

* planning: what it plans (its items from a resolved request; ``None`` where nothing is planned ahead);
* cache: where its entries live (``area``), how they are named and checked (``entry_files``/``entry_problem``,
  ``fingerprint_fields``);
* compile: how it is built (``backend``: the worker it needs, compile/backends);
* launch: what ``launch`` sets (``launch_env``) and how a runtime compile is refused (``strict_by``);
* verify --live: what drives it (``live``).

Each runtime's planned items are one type of runtimes/items.py (a :class:`~dgprecompile.runtimes.items.PlanItem`
naming its runtime); the plan carries them in one list (``Plan.items``, ``Plan.by_runtime``) and each stage looks
up what to do with a runtime's items in its own table under the runtime's ``kind``.

The runtimes package is the floor of the stages: it imports only the foundation (errors, fsutil, documents,
schemas, data). Code that computes from a runtime's facts with a stage's own means (the key calculators in keys/,
the kernel choices in planning/heuristics, the workers in compile/backends) stays in that stage, in a table keyed
by the scheme the runtime names; tests/test_import_graph.py keeps every arrow pointing down.
"""

from __future__ import annotations

from enum import Enum
from typing import Protocol, runtime_checkable


class StrictBy(str, Enum):
    """How ``launch --strict`` makes a runtime compile fail instead of happen (the one vocabulary)."""

    HOOK = "hook"  # the startup hook (launch/hook) wraps the runtime's build functions and refuses them
    SWITCH = "switch"  # the runtime's own variable refuses builds (strict_env)
    STANDIN = "standin"  # a C++ JIT: its nvcc is replaced by a stand-in that refuses to compile
    COUNTED = "counted"  # not refused: a runtime compile is counted and named afterwards

    def __str__(self) -> str:
        return self.value


@runtime_checkable
class Runtime(Protocol):
    """The facts every runtime object carries (the module docstring says which stage asks which)."""

    id: str
    label: str
    area: str  # its directory under a dgprecompile cache root
    # the key of every stage's table that handles the runtime's planned items (verify's CHECKS, warm's PREPARE,
    # launch/live.py's LIVE_UNITS): a stage asks the item's runtime for it, never branches on the item's type
    kind: str
    # what `verify --live` drives for the runtime's items: unit kinds of launch/live.py's LIVE_UNITS (() none)
    live: tuple[str, ...]

    @property
    def strict_by(self) -> StrictBy:
        """How a strict launch refuses this runtime's compiles."""


class PackageKeyed:
    """A runtime whose items are built outside the pool and recorded (cache/item_records.py) with the version of the
    one package their cache keys hold: ``package`` (the distribution), ``record_key`` (its field in a record) and
    ``key_why`` (what a version change does to the entries)."""

    package: str
    record_key: str
    key_why: str

    def installed(self) -> dict | None:
        """The package's version here, read from its metadata (None: not installed)."""
        from importlib import metadata

        try:
            return {self.record_key: metadata.version(self.package)}
        except metadata.PackageNotFoundError:
            return None

    def stale(self, record: dict, installed: dict) -> str | None:
        """Why a record made with another version does not serve this one (None: it does)."""
        if record.get(self.record_key) != installed.get(self.record_key):
            return (f"built with {self.package} {record.get(self.record_key)}, here "
                    f"{installed.get(self.record_key)}: {self.key_why}")
        return None

