"""`launch --capture`: point every JIT family's cache into the dgprecompile cache, and file what the job built.

The family facts (variables, areas, what makes an entry whole) live in :mod:`dgprecompile.runtimes.captured`; this module
only walks them. At exit a whole new entry of a filed family goes into the index's ``extra`` records (``by:
capture``) with its files' sha256, so verify/pack/push/pull carry it; an entry that is not whole is reported and
never filed (pack takes only indexed entries). The installed versions of the families' packages and the GPU go
into the fingerprint under ``families`` (only where the cache has a fingerprint: a warm made it).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dgprecompile.cache import confine
from dgprecompile.cache.confine import Limits
from dgprecompile.cache.store import CacheStore, Index
from dgprecompile.runtimes import CAPTURED, CacheFamily
from dgprecompile.runtimes.captured import versions

STRICT_FAMILIES_ENV = "DGPRECOMPILE_STRICT_FAMILIES"
LOAD_FAMILIES_ENV = "DGPRECOMPILE_LOAD_FAMILIES"  # the families whose cached builds the hook loads without rebuilding


def indexed(index: Index, family: CacheFamily) -> list[str]:
    return sorted(r.entry for r in index.extra.values() if r.area == family.area)


def family_env(root: str | Path, index: Index, *, capture: bool, strict: bool) -> list[tuple[str, str, str]]:
    """(variable, value, why) for the child: with ``capture`` or ``strict`` every family's cache variable points
    into its area, whatever the cache holds (strict: a compile lands in the cache, where it is refused or counted,
    never in the library's default folder outside it); otherwise those of families whose area exists. Strict: the
    startup hook refuses the runtime compiles of every family it can refuse (a miss of what the cache holds, and
    every compile of a family it holds nothing of); the others' compiles are counted by the cache's snapshot."""
    out = []
    for fam in CAPTURED:
        area = fam.area_dir(root)
        if capture or strict or area.is_dir():
            fam.workspace(root)  # FlashInfer's hidden base, linked to its area (best effort: the cache may be read-only)
            why = (f"{fam.label}: capture what the job builds into {fam.area}/" if capture
                   else f"{fam.label}: strict: its cache is {fam.area}/ of the cache, whatever that holds (a runtime "
                   "compile is refused or counted there)" if strict
                   else f"{fam.label}: what an earlier capture or warm left in {fam.area}/")
            out += [(name, value, why) for name, value in fam.launch_env(root)]
    loaded = [f.id for f in CAPTURED if f.layout == "flashinfer-ops" and indexed(index, f)]
    if loaded:
        out.append((LOAD_FAMILIES_ENV, ",".join(loaded), "the startup hook loads the cache's builds of "
                    + ", ".join(loaded) + " without rebuilding them"))
    if strict and not capture:
        refused = [f.id for f in CAPTURED if f.strict_by == "hook"]
        out.append((STRICT_FAMILIES_ENV, ",".join(refused),
                    "strict: the startup hook refuses runtime compiles of " + ", ".join(refused)))
    return out


def snapshot(root: str | Path) -> dict[str, dict[str, tuple[str | None, tuple[str, ...]]]]:
    """Per family, every entry -> (why it is not whole or None, its files where entries grow: CacheFamily.state)."""
    return {fam.id: fam.state(fam.area_dir(root)) for fam in CAPTURED}


@dataclass
class FamilyReport:
    family: str
    label: str
    new: list[str] = field(default_factory=list)  # entries that appeared during the run
    kernels: list[str] = field(default_factory=list)  # the kernels in them, as the library names them
    filed: list[str] = field(default_factory=list)
    not_whole: dict[str, str] = field(default_factory=dict)  # entry -> why it was not filed
    note: str = ""
    hidden: dict[str, list[str]] = field(default_factory=dict)  # entry -> planned kernels in it (never filed)

    def to_dict(self) -> dict[str, Any]:
        return {"family": self.family, "new": self.new, "kernels": self.kernels, "filed": self.filed,
                "not_whole": self.not_whole, "note": self.note, "hidden_misses": self.hidden}


def compiled_during(root: str | Path, before: Mapping[str, Mapping[str, tuple]]) -> list[FamilyReport]:
    """Per family, what appeared in its area during the run (non-strict: everything compiled at run time); an
    entry that grew (inductor's buckets) counts as new, so that a capture files it again with every file."""
    after = snapshot(root)
    out = []
    for fam in CAPTURED:
        old = before.get(fam.id, {})
        rep = FamilyReport(fam.id, fam.label)
        for name, (problem, files) in sorted(after[fam.id].items()):
            was, had = old.get(name, ("missing", None))
            if name in old and had == files and (was is None or problem is not None):
                continue  # there before, the same files: whole, or still not whole (a left-over of an earlier run)
            rep.new.append(name)
            rep.kernels += fam.kernel_names(fam.area_dir(root) / name)
            if problem is not None:
                rep.not_whole[name] = problem
        if not fam.filed and rep.new:
            rep.note = f"not filed: {fam.label} entries are counted and named only (docs/families.md)"
        out.append(rep)
    return out


def gpu_name() -> str | None:
    nvidia_smi = shutil.which("nvidia-smi")
    if not nvidia_smi:
        return None
    try:
        res = subprocess.run([nvidia_smi, "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    names = sorted({line.strip() for line in res.stdout.splitlines() if line.strip()})
    return ", ".join(names) or None


def job_versions(env: Mapping[str, str]) -> dict[str, str | None]:
    """The families' package versions as the job's environment sees them (this Python, the job's PYTHONPATH and
    variables); the launcher's own ones where that cannot run."""
    import json
    import sys

    # runtimes/captured.py versions(), in the job's environment, read from the distributions' metadata alone
    code = ("import json, sys\nfrom importlib import metadata\nout = {}\nfor d in json.loads(sys.argv[1]):\n"
            "    try:\n        out[d] = metadata.version(d)\n    except metadata.PackageNotFoundError:\n"
            "        out[d] = None\nprint(json.dumps(out))")
    dists = json.dumps([d for fam in CAPTURED for d in fam.packages])
    try:
        res = subprocess.run([sys.executable, "-c", code, dists], env=dict(env), capture_output=True,
                             text=True, timeout=60, check=False)
        return json.loads(res.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return versions(CAPTURED)


def planned_kernels(plan: Any) -> set[str]:
    """The kernels the plan's warm compiles in a filed family's area (the Triton fused MoE items' kernel, the
    model-path Triton items' kernels): a capture that built one found a warm's miss, and filing it would hide that
    miss from every later check."""
    from dgprecompile.runtimes.triton_moe import TRITON_MOE, TRITON_PATH

    moe = {TRITON_MOE.kernel} if getattr(plan, "triton_moe", None) else set()
    return moe | {TRITON_PATH.kernel(it.kernel)["kernel"] for it in (getattr(plan, "triton_path", None) or {}).values()}


def file_captured(store: CacheStore, reports: list[FamilyReport], env: Mapping[str, str] | None = None,
                  planned: set[str] | frozenset[str] = frozenset(), entry_mib: int | None = None) -> None:
    """Put every whole new entry of a filed family into the index (``extra``, by capture), under its lock. Only an
    entry inside the real cache root (no link on the way: a job may have replaced the area with one), of regular
    files with one link each, within the entry cap (``entry_mib``, default data/limits.yaml; cache/confine.py). An
    entry holding a ``planned`` kernel (:func:`planned_kernels`) is never filed and is removed (it is new: this run
    built it): it goes to the report's ``hidden``, and the launch fails naming it."""
    todo = [(fam, rep) for fam, rep in zip(CAPTURED, reports, strict=True) if fam.filed]
    limits = Limits.of(entry_mib)
    records = []
    for fam, rep in todo:
        for name in rep.new:
            entry_dir = fam.area_dir(store.root) / name
            outside = confine.entry_problem(store.root, f"{fam.area}/{name}", limits)
            found = sorted(set(fam.kernel_names(entry_dir)) & set(planned))
            if found:  # removed too: left on disk it would be a hit to Triton, and a later strict run would pass
                rep.hidden[name] = found
                if outside is None:  # never removed through a link the job put in the cache
                    shutil.rmtree(entry_dir, ignore_errors=True)
                continue
            if name in rep.not_whole:
                continue
            if outside is not None:
                rep.not_whole[name] = outside
                continue
            if fam.entry_problem(entry_dir) is not None:  # changed since the snapshot
                rep.not_whole[name] = fam.entry_problem(entry_dir) or ""
                continue
            rec = store.record_entry(name, by="capture", area=fam.area)
            if set(rec.files) != set(fam.entry_files(entry_dir)):
                rep.not_whole[name] = "its files changed while being recorded"
                continue
            records.append(rec)
            rep.filed.append(name)
    if not records:
        return
    found = job_versions(env) if env is not None else versions()
    gpu = gpu_name()

    def mutate(index: Index) -> None:
        for rec in records:
            index.extra[rec.member_dir] = rec
        if index.fingerprint:
            index.fingerprint["families"] = {**found, "gpu": gpu}

    store.update_index(mutate)
