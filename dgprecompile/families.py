"""The JIT families beside DeepGEMM whose caches a job fills at its first forward: one object each.

Stages never branch on a family's name; they ask its :class:`CacheFamily`:

* launch: ``env`` (the variable the library reads for its cache root) and ``env_value(root)``, where
  `launch --capture` points it inside the dgprecompile cache; ``refused_by`` (how strict mode refuses a runtime
  compile of this family: ``"hook"``, the startup hook; ``None``, not refused);
* cache: ``area`` (its directory under the cache root), ``entries(area_dir)`` (what the library built, each with
  the reason it is not whole, or None), ``entry_files(entry_dir)`` (the files filed in the index);
* artifact: ``filed`` (True: whole entries are filed in the index and travel with pack/push/pull; the artifact's
  members are ``<area>/<entry>/<file>``, so a family whose entries nest deeper is counted and named only);
* fingerprint: ``packages`` (the distributions whose versions the capture records).

Whole, per family, is defined from the library's own writer (cited on each):

* Triton 3.x (``triton/runtime/cache.py`` FileCacheManager.put: each file via a tmp dir and os.replace;
  ``triton/compiler/compiler.py`` compile(): ``put_group(f"{name}.json", ...)`` last, after every stage's file;
  ``get_group`` counts a child only where its absolute path exists): an entry ``<hash>/`` is whole when it holds
  a ``__grp__<kernel>.json`` whose ``child_paths`` all exist in that directory, and no ``tmp.pid_*`` write is in
  flight. The group file names absolute paths, so the cache must sit at the same path where it is used.
* FlashInfer 0.6 (``flashinfer/jit/core.py`` JitSpec: ``jit_library_path`` =
  ``FLASHINFER_JIT_DIR/<name>/<name>.so``, ``is_compiled`` = that file exists; ``jit/env.py``:
  ``FLASHINFER_JIT_DIR = $FLASHINFER_WORKSPACE_BASE/.cache/flashinfer/<version>/<archs>/cached_ops``): a module
  is built when ``<name>.so`` is there. Not filed: its entries lie four directories below the area.
* torch inductor (``TORCHINDUCTOR_CACHE_DIR``; files written with ``write_atomic``): counted per file. Not filed:
  its FX-graph and Triton entries nest two and three levels deep.
* CuTe-DSL (``cutlass/base_dsl/cache_helpers.py``: ``CUTE_DSL_CACHE_DIR``, else ``$TMPDIR/<user>/
  cutlass_python_cache``): counted per file. Not filed.

Importing this module imports nothing but the standard library.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

IN_FLIGHT = "tmp."  # Triton's FileCacheManager.put writes into <entry>/tmp.pid_<pid>_<uuid>/ first


@dataclass(frozen=True)
class CacheFamily:
    id: str
    label: str
    area: str  # directory under the cache root
    env: str  # the variable the library reads for its cache root
    packages: tuple[str, ...]  # distributions whose versions a capture records
    layout: str  # "triton-groups" | "flashinfer-ops" | "files"
    filed: bool  # whole entries go into the index (artifact members <area>/<entry>/<file>)
    refused_by: str | None  # "hook": the startup hook refuses a runtime compile in strict mode; None: not refused
    env_subdir: str = ""  # the library adds this below the variable's value

    def area_dir(self, root: str | Path) -> Path:
        return Path(root) / self.area

    def env_value(self, root: str | Path) -> str:
        """What launch sets ``env`` to so the library writes into this family's area of the cache root."""
        return str(self.area_dir(root))

    def entries_root(self, area_dir: Path) -> Path:
        return area_dir / self.env_subdir if self.env_subdir else area_dir

    # -- what the library built --
    def entries(self, area_dir: str | Path) -> dict[str, str | None]:
        """Every entry under ``area_dir`` -> None when whole, else why not. Names are relative to the area."""
        area_dir = Path(area_dir)
        out: dict[str, str | None] = {}
        if self.layout == "triton-groups":
            for d in _subdirs(area_dir):
                out[d.name] = triton_entry_problem(d)
        elif self.layout == "flashinfer-ops":
            for ops in sorted(area_dir.glob(".cache/flashinfer/*/*/cached_ops")):
                for d in _subdirs(ops):
                    if d.name == "tmp":  # FlashInfer's lock directory (core.py get_tmpdir)
                        continue
                    so = d / f"{d.name}.so"
                    out[str(d.relative_to(area_dir))] = (None if so.is_file() and so.stat().st_size > 0
                                                         else f"{so.name} not built")
        else:
            for f in sorted(p for p in area_dir.rglob("*") if p.is_file()):
                out[str(f.relative_to(area_dir))] = None if f.stat().st_size > 0 else "empty file"
        return out

    def entry_files(self, entry_dir: Path) -> list[str]:
        """The files of a whole entry that the index records (only for ``filed`` families)."""
        return sorted(p.name for p in entry_dir.iterdir() if p.is_file())

    def entry_problem(self, entry_dir: Path) -> str | None:
        """None when the entry on disk is whole and usable where it lies, else what is wrong."""
        if self.layout == "triton-groups":
            return triton_entry_problem(entry_dir, here=True)
        return None if entry_dir.exists() else "missing"

    def kernel_names(self, entry_dir: Path) -> list[str]:
        """The kernels an entry holds, as the library names them (Triton: its group files' kernel names)."""
        if self.layout == "triton-groups":
            return sorted(p.name[len("__grp__"):-len(".json")] for p in entry_dir.glob("__grp__*.json"))
        return [entry_dir.name]


def _subdirs(path: Path) -> list[Path]:
    try:
        return sorted(p for p in path.iterdir() if p.is_dir())
    except OSError:
        return []


def triton_entry_problem(entry_dir: Path, here: bool = False) -> str | None:
    """None when the Triton cache entry ``entry_dir`` is whole (see the module docstring), else why not.

    ``here``: also require the group file's absolute paths to point into ``entry_dir`` itself, as Triton's
    get_group does (a moved entry is a miss to Triton, which then compiles the kernel again)."""
    if not entry_dir.is_dir():
        return "missing"
    if any(p.name.startswith(IN_FLIGHT) for p in entry_dir.iterdir()):
        return "a write is in flight (tmp.pid_* directory)"
    groups = sorted(entry_dir.glob("__grp__*.json"))
    if not groups:
        return "no __grp__*.json (Triton writes the group file last: the compile did not finish)"
    for grp in groups:
        try:
            children = json.loads(grp.read_text()).get("child_paths")
        except (OSError, ValueError, AttributeError) as exc:
            return f"{grp.name} unreadable ({exc})"
        if not isinstance(children, dict) or not children:
            return f"{grp.name} lists no files"
        for name, path in sorted(children.items()):
            base = os.path.basename(str(path))
            f = entry_dir / base
            if not f.is_file() or f.stat().st_size == 0:
                return f"{grp.name} lists {base}, which is missing or empty"
            if here and os.path.realpath(str(path)) != os.path.realpath(f):
                return (f"{grp.name} names {path}, not this directory: Triton would compile {name} again "
                        "(its group files hold absolute paths: use the cache at the path it was filled at)")
    return None


FAMILIES: tuple[CacheFamily, ...] = (
    CacheFamily("triton", "Triton", "triton", "TRITON_CACHE_DIR", ("triton",), "triton-groups", filed=True,
                refused_by="hook"),
    CacheFamily("flashinfer", "FlashInfer JIT", "flashinfer", "FLASHINFER_WORKSPACE_BASE", ("flashinfer-python",),
                "flashinfer-ops", filed=False, refused_by=None),
    CacheFamily("inductor", "torch.compile (inductor)", "inductor", "TORCHINDUCTOR_CACHE_DIR", ("torch",), "files",
                filed=False, refused_by=None),
    CacheFamily("cute-dsl", "CuTe-DSL", "cute-dsl", "CUTE_DSL_CACHE_DIR", ("nvidia-cutlass-dsl",), "files",
                filed=False, refused_by=None),
)
FILED_AREAS: tuple[str, ...] = tuple(f.area for f in FAMILIES if f.filed)


def family_for_area(area: str) -> CacheFamily | None:
    return next((f for f in FAMILIES if f.area == area), None)


def versions(families: tuple[CacheFamily, ...] = FAMILIES) -> dict[str, str | None]:
    """The installed version of each family's packages (None: not installed), read from their metadata."""
    from importlib import metadata

    out: dict[str, str | None] = {}
    for fam in families:
        for dist in fam.packages:
            try:
                out[dist] = metadata.version(dist)
            except metadata.PackageNotFoundError:
                out[dist] = None
    return out


def coverage() -> dict:
    """The per-family coverage table `plan` prints (data/families.yaml)."""
    from importlib import resources

    import yaml

    return yaml.safe_load(resources.files("dgprecompile.data").joinpath("families.yaml").read_text())
