"""The JIT families beside DeepGEMM whose caches a job fills at its first forward: one object each.

Stages never branch on a family's name; they ask its :class:`CacheFamily`:

* launch: ``cache_env`` (the variable(s) the library reads for its cache root) and ``launch_env(root)``, where
  `launch --capture` points them inside the dgprecompile cache; ``hook_target`` (the module whose compile entry the
  startup hook wraps so that strict mode refuses a runtime compile; None: not refused) and ``strict_by``;
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
  Triton's host modules (``triton/runtime/build.py`` compile_module_from_src: the driver's ``cuda_utils`` once per
  machine, a ``__triton_launcher`` per kernel signature at its first launch; one ``put`` of
  ``<name><EXT_SUFFIX>`` under ``sha256(source + platform_key())``, no group file) are whole when the entry holds
  only such non-empty ``.so`` files: each was written in one atomic ``put``.
* FlashInfer 0.6 (``flashinfer/jit/core.py`` JitSpec: ``jit_library_path`` =
  ``FLASHINFER_JIT_DIR/<name>/<name>.so``, ``is_compiled`` = that file exists; ``jit/env.py``:
  ``FLASHINFER_JIT_DIR = $FLASHINFER_WORKSPACE_BASE/.cache/flashinfer/<version>/<archs>/cached_ops``): a module
  is built when ``<name>.so`` is there. Not filed: its entries lie four directories below the area.
* torch inductor (``TORCHINDUCTOR_CACHE_DIR``; files written with ``write_atomic``): counted per file. Not filed:
  its FX-graph and Triton entries nest two and three levels deep.
* CuTe-DSL (``cutlass/base_dsl/cache_helpers.py``: ``CUTE_DSL_CACHE_DIR``, else ``$TMPDIR/<user>/
  cutlass_python_cache``): counted per file. Not filed.

The field names follow dgprecompile/jit_families.py's JitFamily (SGLang's own JIT loaders, branch sglang-jit):
``area``, ``cache_env``, ``launch_env``, ``hook_target``, ``strict_switch``, ``strict_by``. These families are
smaller objects, not JitFamily instances: their entries are not planned module by module or named ahead of time
(Triton's names are hashes of the compile), except Triton's fused MoE kernel, which compile/triton_moe.py warms.

Importing this module imports nothing but the standard library (``coverage`` reads a YAML data file).
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
    cache_env: tuple[str, ...]  # the variable(s) the library reads for its cache root
    packages: tuple[str, ...]  # distributions whose versions a capture records
    layout: str  # "triton-groups" | "flashinfer-ops" | "files"
    filed: bool  # whole entries go into the index (artifact members <area>/<entry>/<file>)
    hook_target: str | None  # module whose compile entry the startup hook wraps in strict mode; None: not refused
    strict_switch: tuple[tuple[str, str], ...] = ()  # the library's own "refuse to compile" variable (none usable)

    def area_dir(self, root: str | Path) -> Path:
        return Path(root) / self.area

    def launch_env(self, root: str | Path) -> list[tuple[str, str]]:
        """(variable, value): where launch points the library so it writes into this family's area of the root."""
        return [(name, str(self.area_dir(root))) for name in self.cache_env]

    @property
    def strict_by(self) -> str | None:
        """'switch' (the library's own variable refuses compiles), 'hook' (the startup hook wraps its compile
        entry) or None (a runtime compile is counted and named, not refused)."""
        return "switch" if self.strict_switch else "hook" if self.hook_target else None

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
            for f in sorted(p for p in area_dir.rglob("*") if p.is_file()):  # written atomically (locks: empty)
                out[str(f.relative_to(area_dir))] = None
        return out

    def entry_files(self, entry_dir: Path) -> list[str]:
        """The files of a whole entry that the index records (only for ``filed`` families)."""
        return sorted(p.name for p in entry_dir.iterdir() if p.is_file())

    def entry_problem(self, entry_dir: Path) -> str | None:
        """None when the entry on disk is whole and usable where it lies, else what is wrong."""
        if self.layout == "triton-groups":
            return triton_entry_problem(entry_dir, here=True)
        return None if entry_dir.exists() else "missing"

    def relocate(self, entry_dir: Path) -> bool:
        """Point a whole entry's own references at where it lies now (Triton: rewrite each group file's absolute
        child paths into ``entry_dir``, in Triton's own format, atomically); True when something was rewritten."""
        if self.layout != "triton-groups" or triton_entry_problem(entry_dir) is not None:
            return False
        from dgprecompile.fsutil import atomic_write_text

        changed = False
        for grp in sorted(entry_dir.glob("__grp__*.json")):
            children = json.loads(grp.read_text())["child_paths"]
            here = {name: str(entry_dir / os.path.basename(str(path))) for name, path in children.items()}
            if here != children:
                atomic_write_text(grp, json.dumps({"child_paths": here}))  # FileCacheManager.put_group's format
                changed = True
        return changed

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
        files = [p for p in entry_dir.iterdir()]
        if files and all(p.is_file() and p.name.endswith(".so") and p.stat().st_size > 0 for p in files):
            return None  # a host module compile_module_from_src put in one atomic write (module docstring)
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
    # compile() looks the key up and calls backend.add_stages only on a miss (triton/compiler/compiler.py)
    CacheFamily("triton", "Triton", "triton", ("TRITON_CACHE_DIR",), ("triton",), "triton-groups", filed=True,
                hook_target="triton.compiler.compiler"),
    # FLASHINFER_DISABLE_JIT is no strict switch: JitSpec.build raises on it even when <name>.so is built, and
    # build_and_load calls build for every non-AOT module (flashinfer/jit/core.py, 0.6.12)
    CacheFamily("flashinfer", "FlashInfer JIT", "flashinfer", ("FLASHINFER_WORKSPACE_BASE",), ("flashinfer-python",),
                "flashinfer-ops", filed=False, hook_target=None),
    CacheFamily("inductor", "torch.compile (inductor)", "inductor", ("TORCHINDUCTOR_CACHE_DIR",), ("torch",),
                "files", filed=False, hook_target=None),
    CacheFamily("cute-dsl", "CuTe-DSL", "cute-dsl", ("CUTE_DSL_CACHE_DIR",), ("nvidia-cutlass-dsl",), "files",
                filed=False, hook_target=None),
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


def coverage(profile=None, planned: frozenset[str] | set[str] = frozenset()) -> dict | None:
    """The per-family coverage table `plan` prints (data/families.yaml): for ``profile`` (a planning Profile), None
    where the table was not read for its sglang releases; rows of a planned family (``planned: triton_moe``) only
    where the plan holds such items (``planned`` names the plan's non-empty sections)."""
    from dgprecompile.data import load_yaml

    table = load_yaml("families.yaml")
    if profile is not None and not profile.contains(table["read_for"]):
        return None
    return {**table, "rows": [r for r in table["rows"] if r.get("planned") in (None, *planned)]}


@dataclass(frozen=True)
class TritonMoeFamily:
    """SGLang's Triton fused MoE kernel (``fused_moe_kernel``), the one Triton kernel planned and warmed ahead of
    time: every fact the stages need, in one object (no stage names it).

    * planning: ``plan_items(shapes, ...)`` -- one :class:`~dgprecompile.kernels.TritonMoeItem` per distinct MoE
      shape on a rank, for a block-FP8 model (``quantization``) of a release whose fused MoE path was read
      (``data_file``: per release, how many tokens one kernel call sees, with the file:line it was read from);
    * compile: ``backend`` (the kind of warm's jobs for it) -- warm's parent runs ``warm_argv(item, root)``
      (``python -m <warm_module> ...``, SGLang's own fused_experts_impl on meta tensors, Triton's own JIT with a
      compile-only driver), once per chunk of the item's m set (compile/triton_chunks.py), in subprocesses with
      ``warm_env`` (no GPU), which needs ``imports`` importable (``missing()``);
    * cache: ``area`` -- Triton's own cache area (the entries are whole Triton entries, filed in the index's
      ``extra``); the index's ``triton_moe`` section holds one record per item (cache/triton_moe.py);
    * staleness: ``installed()`` -- what Triton's own cache key holds that is readable without importing it: the
      wheel's version and the RECORD hashes of ``fingerprint_files`` (libtriton.so's bytes are in the key, so is
      the bundled ptxas's version), TRITON_PTXAS_PATH, and the sglang release (its tuned configs).
    """

    id: str
    label: str
    area: str
    backend: str
    warm_module: str
    packages: tuple[str, ...]  # distributions whose versions a record holds
    imports: tuple[str, ...]  # the distributions the warm subprocess imports (each its top-level module)
    data_file: str  # under dgprecompile/data
    fingerprint_files: tuple[str, ...]  # files of the triton wheel whose RECORD sha256 the record holds
    fingerprint_env: tuple[str, ...] = ()  # variables Triton's key or compiler reads
    kernel: str = "fused_moe_kernel"  # the kernel its items warm (a capture must never file one: launch/capture.py)

    def data(self) -> dict:
        return _yaml_data(self.data_file)

    def release(self, version: str | None) -> dict | None:
        """The data file's entry for ``version`` (an exact sglang release), or None."""
        from packaging.specifiers import SpecifierSet
        from packaging.version import InvalidVersion, Version

        if not version:
            return None
        try:
            v = Version(version)
        except InvalidVersion:
            return None
        return next((r for r in self.data()["releases"] if v in SpecifierSet(r["sglang"], prereleases=True)), None)

    def quantization_problem(self, config: dict) -> str | None:
        """None when the model's quantization is the one the warm's call models, else what it is."""
        q = config.get("quantization_config") or {}
        want = self.data()["quantization"]
        got = {"quant_method": q.get("quant_method"), "weight_block_size": list(q.get("weight_block_size") or [])}
        if got == {k: (list(v) if isinstance(v, list) else v) for k, v in want.items()}:
            return None
        return f"quant_method={got['quant_method']!r}, weight_block_size={q.get('weight_block_size')!r}"

    def plan_items(self, shapes, *, config: dict, sglang_version: str | None, max_tokens: int,
                   gpu: str | None) -> tuple[list, list[str]]:
        """(items, notes) for the MoE layers that run on Triton fused MoE (``shapes``: planning.shapes'
        TritonMoeShape); one item per distinct shape, its layers merged."""
        from dgprecompile.kernels import TritonMoeItem

        if not shapes:
            return [], []
        where = ", ".join(f"{s.layer} (x{s.count})" for s in shapes)
        bad = self.quantization_problem(config)
        if bad is not None:
            return [], [f"{where}: {self.label} for {bad}: not planned (the warm models block-FP8 experts)"]
        rel = self.release(sglang_version)
        if rel is None:
            read = ", ".join(r["sglang"] for r in self.data()["releases"])
            return [], [f"{where}: {self.label} not planned: " + (
                f"dgprecompile read the fused MoE path of sglang {read}, not {sglang_version}" if sglang_version
                else "its kernels depend on the exact release: plan with --sglang X.Y.Z")]
        if not rel.get("warm"):
            return [], [f"{where}: {self.label} not planned for sglang {sglang_version}: {rel['not_warmed']}"]
        chunk = rel.get("chunk_size")
        m_max = max_tokens if chunk is None else min(max_tokens, int(chunk))
        how = ("one call per forward, no chunks" if chunk is None
               else f"chunks of {chunk} tokens ({rel.get('env') or 'fixed'})")
        why = f"m 1..{m_max}: every forward of 1..{max_tokens} tokens on a rank; {how} ({rel['evidence']})"
        device = gpu_device(gpu)
        period = int(self.data()["m_set"]["period"])
        items: dict[str, TritonMoeItem] = {}
        for s in shapes:
            bound, bound_why = self.m_bound(rel, s, device["name"])
            shown = (f"; warmed: every m up to {bound} ({bound_why}), then one m per residue mod {period} above it "
                     f"and {m_max} (data/triton_moe.yaml m_set)") if m_max > bound + period else ""
            item = TritonMoeItem(s.experts, s.global_experts, s.hidden, s.intermediate, s.topk, 1, m_max,
                                 device["name"], int(device["capability"]), (f"{s.layer} x{s.count}",),
                                 why + shown, bound if shown else 0, period if shown else 0)
            prev = items.get(item.id)
            if prev is not None:
                item = TritonMoeItem(**{**item.__dict__, "layers": prev.layers + item.layers})
            items[item.id] = item
        notes = [f"{where}: {len(items)} {self.label} warm item(s), m 1..{m_max} on {device['name']} "
                 f"(sm_{device['capability']}; {how}): `warm` compiles them GPU-free with the installed sglang and "
                 "Triton"]
        if gpu is None:
            notes.append(f"{self.label}: no --gpu, so SGLang's tuned config is looked up for {device['name']}; "
                         "pass the job's --gpu")
        return list(items.values()), notes

    def m_bound(self, rel: dict, shape, device_name: str) -> tuple[int, str]:
        """(B, why): the m above which no fused_moe_kernel argument but two integers' residues mod the period
        changes (data/triton_moe.yaml ``m_set``): the shape's largest tuned-config key for the device, the release's
        m-dependent constexpr's bound, and the m from which moe_align_block_size sizes its buffer linearly."""
        parts = {"tuned config's largest m": self.tuned_up_to(rel, shape, device_name),
                 "m-dependent constexpr": int(rel.get("m_constexpr") or 0),
                 "linear align buffer": -(-(max(shape.experts, shape.global_experts) + 1) // shape.topk)}
        return max(1, *parts.values()), "the largest of: " + ", ".join(f"{k} {v}" for k, v in parts.items() if v)

    def tuned_up_to(self, rel: dict | None, shape, device_name: str) -> int:
        """The largest m the release's tuned configs name for the shape on the device (0: none ships, SGLang's
        default config runs for every m; data/triton_moe_tuned.yaml)."""
        tuned = _yaml_data("triton_moe_tuned.yaml")["releases"].get(str((rel or {}).get("tuned")), {})
        return int(tuned.get(f"E={shape.experts},N={shape.intermediate},device_name={device_name.replace(' ', '_')}",
                             0))

    def host_modules_note(self, planned: bool) -> str:
        """What `plan` says of Triton's host modules (compile/triton_host.py): built by warm for the planned
        kernels, or left to one `launch --capture` run, and why."""
        if planned:
            return (f"Triton's host modules (cuda_utils, one __triton_launcher per {self.kernel} signature): `warm` "
                    "builds them GPU-free with Triton's own build (the C compiler and Python headers here, a libcuda "
                    "stand-in to link; the driver's libcuda.so.1 at load). Their key holds the platform and their "
                    "file name the Python (EXT_SUFFIX): warm with the job's Python on its platform. Other Triton "
                    "kernels' launchers are left to one `launch --capture` run")
        return ("Triton's host modules (cuda_utils, a __triton_launcher per kernel signature) are left to one "
                "`launch --capture` run: no Triton kernel is planned here, so no launcher signature is known "
                "ahead of time")

    # -- compile --
    def warm_argv(self, item, cache_dir: str, python: str) -> list[str]:
        return [python, "-m", self.warm_module, "--experts", str(item.experts), "--global-experts",
                str(item.global_experts), "--hidden", str(item.hidden), "--intermediate", str(item.intermediate),
                "--topk", str(item.topk), "--m", item.m_text, "--capability", str(item.capability),
                "--device-name", item.device_name, "--cache-dir", str(cache_dir),
                *(["--m-bound", str(item.m_bound)] if item.m_bound else [])]

    @property
    def warm_env(self) -> dict[str, str]:
        """Set for the warm subprocess: no GPU (it compiles for the planned target through a compile-only driver)."""
        return {"CUDA_VISIBLE_DEVICES": ""}

    def missing(self) -> str | None:
        """What to install so that the warm can run here (None: each distribution it imports is installed, read
        from its metadata, nothing imported: a stand-in module without a distribution counts as absent)."""
        from importlib import metadata

        absent = []
        for name in self.imports:
            try:
                metadata.distribution(name)
            except metadata.PackageNotFoundError:
                absent.append(name)
        return None if not absent else f"install {', '.join(absent)} (the job's own releases)"

    # -- staleness --
    def installed(self) -> dict | None:
        """This machine's values of what the record holds (None: triton is not installed), from metadata only."""
        from importlib import metadata

        try:
            dist = metadata.distribution("triton")
        except metadata.PackageNotFoundError:
            return None
        hashes = {str(f): (f.hash.value if f.hash else None) for f in (dist.files or [])
                  if str(f) in self.fingerprint_files}
        others = {name: v for name, v in versions((self,)).items() if name != "triton"}  # type: ignore[arg-type]
        return {"triton": dist.version, "files": {f: hashes.get(f) for f in self.fingerprint_files},
                "env": {name: os.environ.get(name) for name in self.fingerprint_env}, **others}

    def stale_fields(self, recorded: dict, current: dict | None) -> list[str]:
        """The fields of an item's record whose values differ here ([] when none); every field when triton is
        not installed here."""
        if current is None:
            return ["triton"]
        return [k for k in current if recorded.get(k) != current[k]]


def _yaml_data(name: str) -> dict:
    from dgprecompile.data import load_yaml

    return load_yaml(name)


def gpu_device(gpu: str | None) -> dict:
    """The device name and compute capability of ``--gpu`` (its row of data/gpus.yaml; None: the default GPU)."""
    table = _yaml_data("gpus.yaml")
    return table["gpus"][(gpu or table["default"]).lower()]


TRITON_MOE = TritonMoeFamily(
    "triton-moe", "Triton fused MoE", "triton", "triton-moe", "dgprecompile.compile.triton_moe",
    ("triton", "sglang"), ("torch", "triton", "sglang"), "triton_moe.yaml",
    # triton/runtime/cache.py triton_key: libtriton.so's bytes; the CUDA backend's hash: its ptxas's version
    ("triton/_C/libtriton.so", "triton/backends/nvidia/bin/ptxas"), ("TRITON_PTXAS_PATH",))
