"""The captured-only runtimes: JIT families beside DeepGEMM whose caches a job fills at its first forward, one object
each (their entries are filed from a `launch --capture` run, not planned).

Stages never branch on a family's name; they ask its :class:`CacheFamily`:

* launch: ``cache_env`` (the variable(s) the library reads for its cache root) and ``launch_env(root)``, where
  `launch --capture` points them inside the dgprecompile cache; ``hook_target`` (the module whose compile entry the
  startup hook wraps so that strict mode refuses a runtime compile; None: not refused) and ``strict_by``;
* cache: ``area`` (its directory under the cache root), ``entries(area_dir)`` (what the library built, each with
  the reason it is not whole, or None), ``entry_files(entry_dir)`` (the files filed in the index);
* artifact: ``filed`` (True: whole entries are filed in the index and travel with pack/push/pull; the artifact's
  members are ``<area>/<entry>/<file>``, ``<entry>`` as many components deep as ``nesting`` says for its first one;
  a family not filed is counted and named only);
* fingerprint: ``packages`` (the distributions whose versions the capture records).

Whole, per family, is defined from the library's own writer (cited on each):

* Triton 3.x (``triton/runtime/cache.py`` FileCacheManager.put: each file via a tmp dir and os.replace;
  ``triton/compiler/compiler.py`` compile(): ``put_group(f"{name}.json", ...)`` last, after every stage's file;
  ``get_group`` counts a child only where its absolute path exists): an entry ``<hash>/`` is whole when it holds
  a ``__grp__<kernel>.json`` whose ``child_paths`` all exist in that directory, and no ``tmp.pid_*`` write is in
  flight. The group file names absolute paths, so the cache must sit at the same path where it is used.
  Triton's host modules (``triton/runtime/build.py`` compile_module_from_src: the driver's ``cuda_utils`` once per
  machine, a ``__triton_launcher`` per kernel signature at its first launch (3.5-3.7); 3.8's compile_module_from_file:
  ``cuda_utils`` only; one ``put`` of ``<name><EXT_SUFFIX>`` under a sha256 of the source and ``platform_key()``,
  in 3.8 also of the build's folders; no group file) are whole when the entry holds only such non-empty ``.so``
  files: each was written in one atomic ``put``.
* FlashInfer 0.6 (``flashinfer/jit/core.py`` JitSpec: ``jit_library_path`` =
  ``FLASHINFER_JIT_DIR/<name>/<name>.so``, ``is_compiled`` = that file exists; ``jit/env.py``:
  ``FLASHINFER_JIT_DIR = $FLASHINFER_WORKSPACE_BASE/.cache/flashinfer/<version>/<archs>/cached_ops``): a module
  is built when ``<name>.so`` is there. Not filed: its entries lie four directories below the area.
* torch inductor 2.x (``TORCHINDUCTOR_CACHE_DIR``; ``torch/_inductor/codecache.py``): the FX graph cache's entries
  ``fxgraph/<key[1:3]>/<key>/<file>``, AOTAutograd's ``aotautograd/<key>/<file>``, and the code caches' buckets
  ``<hash[1:3]>/<file>`` (the generated module, and on the CPU its C++ kernels' sources and ``.so``); ``locks/``
  holds only FileLock's files. Every file but a C++ ``.so`` is written with ``write_atomic`` (a hidden
  ``.<pid>.<tid>.tmp`` renamed into place); the ``.so`` is linked in place under its lock, so an ELF whose section
  table ends past the file is a link cut short. An entry is the leaf directory at its sub-area's depth, whole when it
  holds only such files and no directory. A bucket grows (every compile whose hash starts with its two characters
  adds files): a capture re-files a bucket whose files changed. Filed: the artifact's inductor area nests by its
  first component (``nesting``).
* CuTe-DSL (``cutlass/base_dsl/cache_helpers.py``: ``CUTE_DSL_CACHE_DIR``, else ``$TMPDIR/<user>/
  cutlass_python_cache``): counted per file. Not filed.

A family may also live in a module of its own (runtimes/cuda_driver.py: the CUDA driver's PTX JIT cache); the
registry (runtimes/__init__.py ``CAPTURED``) holds them all, with ``FILED_AREAS`` and ``family_for_area``.

The field names follow runtimes/jit_loader.py's JitFamily (SGLang's own JIT loaders):
``area``, ``cache_env``, ``launch_env``, ``hook_target``, ``strict_switch``, ``strict_by``. These families are
smaller objects, not JitFamily instances: their entries are not planned module by module or named ahead of time
(Triton's names are hashes of the compile), except Triton's fused MoE kernel (runtimes/triton_moe.py).

Importing this module imports nothing of the package but the foundation.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from dgprecompile.data import load_yaml
from dgprecompile.fsutil import atomic_write_text
from dgprecompile.runtimes.base import StrictBy

IN_FLIGHT = "tmp."  # Triton's FileCacheManager.put writes into <entry>/tmp.pid_<pid>_<uuid>/ first


@dataclass(frozen=True)
class CacheFamily:
    id: str
    label: str
    area: str  # directory under the cache root
    cache_env: tuple[str, ...]  # the variable(s) the library reads for its cache root
    packages: tuple[str, ...]  # distributions whose versions a capture records
    layout: str  # "triton-groups" | "flashinfer-ops" | "files"
    filed: bool  # whole entries go into the index (artifact members <area>/<entry>/<file>)
    hook_target: str | None  # module whose compile entry the startup hook wraps in strict mode; None: not refused
    strict_switch: tuple[tuple[str, str], ...] = ()  # the library's own "refuse to compile" variable (none usable)
    kind: str = "captured"  # plans no items: its entries are filed from a capture (runtimes/base.py)
    # files the library keeps beside its entries (its bookkeeping), by their path under the area (``*``: any one
    # folder name): not counted
    not_entries: tuple[str, ...] = ()
    live: tuple[str, ...] = ()  # `verify --live` drives none: their new entries are counted, not driven
    # path components of an entry's name by its first one (default 1), and first components that hold no entries
    nesting: tuple[tuple[str, int], ...] = ()
    ignore: tuple[str, ...] = ()
    depth: int = 1  # path components of every entry's name where ``nesting`` does not say
    # the library's fixed sub-path under the directory its variable names, in front of every entry (FlashInfer's
    # .cache/flashinfer): the variable names a hidden base beside the area (.<area>-base) whose sub-path is a link
    # to the area, so that entries lie at <area>/<entry> with no hidden component (``workspace``; outside the area:
    # a copy that follows links meets no cycle)
    base_prefix: str = ""

    def depth_of(self, first: str | None) -> int:
        """Path components of the name of an entry whose first component is ``first``."""
        return dict(self.nesting).get(first or "", self.depth)

    def area_dir(self, root: str | Path) -> Path:
        return Path(root) / self.area

    def base_dir(self, root: str | Path) -> Path:
        """What the library's variable names: the area, or the hidden base beside it (``base_prefix``)."""
        return Path(root) / f".{self.area}-base" if self.base_prefix else self.area_dir(root)

    def launch_env(self, root: str | Path) -> list[tuple[str, str]]:
        """(variable, value): where launch points the library so it writes into this family's area of the root."""
        return [(name, str(self.base_dir(root))) for name in self.cache_env]

    def workspace(self, root: str | Path) -> None:
        """Make the area (and, with a ``base_prefix``, the hidden base whose prefix is a relative link to the area),
        so that what the library writes under its variable lands at <area>/<entry>. Best effort: a cache that may
        not be written is left as it is (the library then makes its own directories)."""
        area = self.area_dir(root)
        try:
            area.mkdir(parents=True, exist_ok=True)
            if not self.base_prefix:
                return
            link = self.base_dir(root) / self.base_prefix
            if not link.is_symlink():
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(os.path.relpath(area, link.parent))
        except OSError:
            pass

    @property
    def strict_by(self) -> StrictBy:
        """SWITCH (the library's own variable refuses compiles), HOOK (the startup hook wraps its compile entry)
        or COUNTED (a runtime compile is counted and named, not refused)."""
        return StrictBy.SWITCH if self.strict_switch else StrictBy.HOOK if self.hook_target else StrictBy.COUNTED

    # -- what the library built --
    def entries(self, area_dir: str | Path) -> dict[str, str | None]:
        """Every entry under ``area_dir`` -> None when whole, else why not. Names are relative to the area."""
        area_dir = Path(area_dir)
        out: dict[str, str | None] = {}
        if self.layout == "triton-groups":
            for d in _subdirs(area_dir):
                out[d.name] = triton_entry_problem(d)
        elif self.layout == "flashinfer-ops":
            for ops in sorted(area_dir.glob("*/*/cached_ops")):
                for d in _subdirs(ops):
                    if d.name == "tmp":  # FlashInfer's lock directory (core.py get_tmpdir)
                        continue
                    out[str(d.relative_to(area_dir))] = flashinfer_entry_problem(d)
        elif self.layout == "inductor":
            out = {name: tree_entry_problem(d) for name, d in self._leaves(area_dir)}
        else:
            for f in sorted(p for p in area_dir.rglob("*") if p.is_file()):  # written atomically (locks: empty)
                if str(f.relative_to(area_dir)) not in self.not_entries:
                    out[str(f.relative_to(area_dir))] = None
        return out

    def _leaves(self, area_dir: Path) -> list[tuple[str, Path]]:
        """(name, directory) of every entry of a nesting layout: each first-level directory not ignored, walked
        down to its depth."""
        if self.layout == "flashinfer-ops":  # <version>/<archs>/cached_ops/<name> (not its locks or generated/)
            return [(name, area_dir / name) for name in self.entries(area_dir)]
        out = []
        for top in _subdirs(area_dir):
            if top.name in self.ignore or top.name.startswith("."):
                continue
            level = [top]
            for _ in range(self.depth_of(top.name) - 1):
                level = [d for parent in level for d in _subdirs(parent) if not d.name.startswith(".")]
            out += [(str(d.relative_to(area_dir)), d) for d in level]
        return out

    def state(self, area_dir: str | Path) -> dict[str, tuple[str | None, tuple[str, ...]]]:
        """Every entry -> (why it is not whole or None, its file names where entries grow (inductor's buckets),
        else ()): what a capture compares before and after the job."""
        grows = self.layout == "inductor"
        return {name: (problem, tuple(self.entry_files(Path(area_dir) / name)) if grows and problem is None else ())
                for name, problem in self.entries(area_dir).items()}

    def entry_files(self, entry_dir: Path) -> list[str]:
        """The files of a whole entry that the index records (only for ``filed`` families): FlashInfer's module
        is its <name>.so (what JitSpec.load reads; the build's objects and ninja files stay behind)."""
        if self.layout == "flashinfer-ops":
            return [f"{entry_dir.name}{ELF_SO}"]
        return sorted(p.name for p in entry_dir.iterdir() if p.is_file())

    def entry_problem(self, entry_dir: Path, here: bool = True) -> str | None:
        """None when the entry on disk is whole and usable where it lies (``here``; False: wherever it is moved
        to, e.g. an entry staged for unpack), else what is wrong."""
        if self.layout == "triton-groups":
            return triton_entry_problem(entry_dir, here=here)
        if self.layout == "inductor":
            return tree_entry_problem(entry_dir)
        if self.layout == "flashinfer-ops":
            return flashinfer_entry_problem(entry_dir)
        return None if entry_dir.exists() else "missing"

    def relocate(self, entry_dir: Path) -> bool:
        """Point a whole entry's own references at where it lies now (Triton: rewrite each group file's absolute
        child paths into ``entry_dir``, in Triton's own format, atomically); True when something was rewritten."""
        if self.layout != "triton-groups" or triton_entry_problem(entry_dir) is not None:
            return False
        changed = False
        for grp in group_files(entry_dir):
            children = json.loads(grp.read_text())["child_paths"]
            here = {name: str(entry_dir / os.path.basename(str(path))) for name, path in children.items()}
            if here != children:
                atomic_write_text(grp, json.dumps({"child_paths": here}))  # FileCacheManager.put_group's format
                changed = True
        return changed

    def kernel_names(self, entry_dir: Path) -> list[str]:
        """The kernels an entry holds, as the library names them (Triton: its group files' kernel names)."""
        if self.layout == "triton-groups":
            return group_kernels(entry_dir)
        if self.layout == "inductor":  # one compiled graph per FX graph cache entry; the rest is its code
            return [f"FX graph {entry_dir.name}"] if entry_dir.parent.parent.name == "fxgraph" else []
        return [entry_dir.name]


GROUP_LIMIT = 1 << 20  # bytes: a Triton group file lists one kernel's few files; larger is not one


GROUP_PREFIX, GROUP_SUFFIX = "__grp__", ".json"  # Triton's group file: __grp__<kernel>.json


def is_group_file(name: str) -> bool:
    """Whether ``name`` is a Triton group file's name (``__grp__<kernel>.json``)."""
    return name.startswith(GROUP_PREFIX) and name.endswith(GROUP_SUFFIX)


def group_files(entry_dir: Path) -> list[Path]:
    """A Triton cache entry's group files, in name order."""
    return sorted(entry_dir.glob(f"{GROUP_PREFIX}*{GROUP_SUFFIX}"))


def group_kernels(entry_dir: Path) -> list[str]:
    """The kernels a Triton cache entry's group files name, in order."""
    return [p.name[len(GROUP_PREFIX):-len(GROUP_SUFFIX)] for p in group_files(entry_dir)]


def group_form(data: bytes) -> str | None:
    """What a Triton group file says wherever its entry lies: the sha256 of its child names, each with the file name
    its absolute path ends in (relocate rewrites only the folders before them). None when ``data`` is not a group
    file in Triton's format."""
    try:
        children = json.loads(data)["child_paths"]
        pairs = sorted((str(name), os.path.basename(path)) for name, path in children.items()
                       if isinstance(path, str))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if len(pairs) != len(children):
        return None
    return hashlib.sha256(json.dumps(pairs).encode()).hexdigest()


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
    groups = group_files(entry_dir)
    if not groups:
        files = [p for p in entry_dir.iterdir()]
        if files and all(p.is_file() and p.name.endswith(".so") and p.stat().st_size > 0 for p in files):
            # a host module compile_module_from_src put in one atomic write (module docstring), which Python
            # dlopens: a shared object, checked as FlashInfer's are
            bad = next(((p.name, elf_problem(p)) for p in sorted(files) if elf_problem(p)), None)
            return None if bad is None else f"{bad[0]}: {bad[1]}"
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


ELF_SO = ".so"


def tree_entry_problem(entry_dir: Path) -> str | None:
    """None when a leaf of inductor's cache (see the module docstring) is whole, else why not."""
    try:
        children = sorted(entry_dir.iterdir())
    except OSError:
        return "missing"
    if not children:
        return "empty"
    for p in children:
        if p.name.startswith("."):
            return f"a write is in flight ({p.name})"
        if p.is_symlink() or not p.is_file():
            return f"{p.name} is not a regular file (deeper than inductor's layout)"
        if p.stat().st_size == 0:
            return f"{p.name} is empty"
        if p.name.endswith(ELF_SO):
            problem = elf_problem(p)
            if problem:
                return f"{p.name}: {problem}"
    return None


def flashinfer_entry_problem(entry_dir: Path) -> str | None:
    """None when a FlashInfer module directory holds its <name>.so, linked whole (JitSpec.is_compiled tests only
    that the file exists), else why not."""
    so = entry_dir / f"{entry_dir.name}{ELF_SO}"
    if so.is_symlink() or not so.is_file() or so.stat().st_size == 0:
        return f"{so.name} not built"
    problem = elf_problem(so)
    return f"{so.name}: {problem}" if problem else None


def elf_problem(path: Path) -> str | None:
    """None when ``path`` is a 64-bit little-endian ELF whose section table lies inside it (the linker writes it
    last), else what is wrong."""
    import struct

    with open(path, "rb") as f:
        head = f.read(64)
        size = os.fstat(f.fileno()).st_size
    if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
        return "not a 64-bit little-endian ELF file"
    shoff = struct.unpack_from("<Q", head, 0x28)[0]
    shentsize, shnum = struct.unpack_from("<HH", head, 0x3A)
    if shnum == 0 or shoff + shnum * shentsize > size:
        return f"cut short ({size} bytes; its section table ends past the end)"
    return None


CACHE_FAMILIES: tuple[CacheFamily, ...] = (
    # compile() looks the key up and calls backend.add_stages only on a miss (triton/compiler/compiler.py)
    CacheFamily("triton", "Triton", "triton", ("TRITON_CACHE_DIR",), ("triton",), "triton-groups", filed=True,
                hook_target="triton.compiler.compiler"),
    # FLASHINFER_DISABLE_JIT is no strict switch: JitSpec.build raises on it even when <name>.so is built, and
    # build_and_load calls build for every non-AOT module (flashinfer/jit/core.py, 0.6.12): the hook loads a built
    # module without building and refuses a missing one. FlashInfer puts its modules under
    # $FLASHINFER_WORKSPACE_BASE/.cache/flashinfer/<version>/<archs>/cached_ops/<name>/ (jit/env.py); its JIT logger
    # opens <version>/<archs>/flashinfer_jit.log when flashinfer.jit is imported, a build or not (jit/core.py:47 in
    # 0.6.3 and 0.6.12, :59 in 0.7.2; <archs> is empty where no GPU or arch list says it, as on a CPU machine): its
    # bookkeeping (on the H200 a carried cache, which had none, failed a strict run that built nothing)
    CacheFamily("flashinfer", "FlashInfer JIT", "flashinfer", ("FLASHINFER_WORKSPACE_BASE",), ("flashinfer-python",),
                "flashinfer-ops", filed=True, hook_target="flashinfer.jit.core", depth=4,
                base_prefix=".cache/flashinfer", not_entries=("*/flashinfer_jit.log", "*/*/flashinfer_jit.log")),
    # _compile_fx_inner calls the module global fx_codegen_and_compile only when the FX graph cache has no entry
    # (miss, bypass, or AOTAutograd's bundled cache missed); an AOTAutograd cache hit never gets there
    # (torch/_inductor/compile_fx.py, torch 2.13 and pytorch main 001077c)
    CacheFamily("inductor", "torch.compile (inductor)", "inductor", ("TORCHINDUCTOR_CACHE_DIR",), ("torch",),
                "inductor", filed=True, hook_target="torch._inductor.compile_fx",
                nesting=(("fxgraph", 3), ("aotautograd", 2)), ignore=("locks",)),
    CacheFamily("cute-dsl", "CuTe-DSL", "cute-dsl", ("CUTE_DSL_CACHE_DIR",), ("nvidia-cutlass-dsl",), "files",
                filed=False, hook_target=None),
)


def versions(families: tuple[CacheFamily, ...] = CACHE_FAMILIES) -> dict[str, str | None]:
    """The installed version of each family's packages (None: not installed), read from their metadata."""
    out: dict[str, str | None] = {}
    for fam in families:
        for dist in fam.packages:
            try:
                out[dist] = metadata.version(dist)
            except metadata.PackageNotFoundError:
                out[dist] = None
    return out


def not_installed(imports: tuple[str, ...]) -> str | None:
    """What to install so that a warm importing ``imports`` can run here (None: each distribution is installed,
    read from its metadata, nothing imported: a stand-in module without a distribution counts as absent)."""
    absent = []
    for name in imports:
        try:
            metadata.distribution(name)
        except metadata.PackageNotFoundError:
            absent.append(name)
    return None if not absent else f"install {', '.join(absent)} (the job's own releases)"


def coverage(profile=None, planned: frozenset[str] | set[str] = frozenset()) -> dict:
    """The per-family coverage table `plan` prints and carries (data/families.yaml), one row per kind of kernel:
    a planned family's row (``planned: triton_moe``) where the plan holds such items (``planned`` names the plan's
    non-empty sections), else its ``unplanned`` form (what covers them then; the plan's notes say why none was
    planned). ``read_here`` says whether the rows' paths were read from ``profile``'s releases: another release
    may build other kernels of these families (a strict launch refuses any the cache lacks)."""
    table = load_yaml("families.yaml")
    rows = [r if r.get("planned") in (None, *planned) else {**r, **r["unplanned"]}
            for r in table["rows"] if r.get("planned") in (None, *planned) or "unplanned" in r]
    return {**table, "rows": rows, "read_here": profile is None or profile.contains(table["read_for"])}
