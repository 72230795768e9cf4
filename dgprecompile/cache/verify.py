"""Verify: is every planned kernel in the cache, intact, and filed under the key this environment looks up?

No torch, no DeepGEMM import, no GPU. Per planned kernel it checks the entry the index records (sha256 of
every file) and, for the legacy Python JIT and sgl-deep-gemm 0.1.0-0.2.5, computes the exact entry name the
runtime will look for here (the generation's key module) and checks that ``<cache>/cache/<name>/`` holds the files
that runtime reads: coverage proved from the key, not taken from the index. It also compares the fingerprint the cache
was built for with this environment's (DeepGEMM generation, version, headers and location, nvcc, DG_JIT_*
flags, SM count).

When the installed DeepGEMM is missing or of another generation than the plan, or no nvcc is found, it says
so and falls back to checking the index alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from dgprecompile.cache.entrycheck import link_problem
from dgprecompile.cache.store import ADOPTED, CacheStore, Index, valid_entry_name
from dgprecompile.errors import EXIT_CHECK_FAILED, EXIT_OK, DGError
from dgprecompile.host.toolchain import DeepGemmInstall, Nvcc, find_deepgemm, find_nvcc
from dgprecompile.keys.fingerprint import differences, make_fingerprint, short_id
from dgprecompile.keys.schemes import current_fingerprint, key_context, naming_for
from dgprecompile.planning.plan import Plan

OK, MISSING, CHANGED, INVALID = "ok", "missing", "changed", "invalid"  # invalid: on disk but not loadable
ADOPTED_DETAIL = "indexed as found (adopted), never compared with a fresh build"
STALE = "stale"  # warmed for another installed library than this machine's (a Triton MoE item's Triton)
# loadable, but no build vouches for its bytes: not in the index, or filed as "adopted" (store.ADOPTED); a flipped
# byte in a kernel's code leaves a loadable cubin, so only a comparison with a fresh build (warm) settles it
UNCHECKED = "unchecked"


@dataclass
class KernelCheck:
    kernel: str
    status: str  # ok | missing | changed | invalid | unchecked | stale
    entry: str | None  # the entry name found or expected
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "status": self.status, "entry": self.entry, "detail": self.detail}


@dataclass
class Environment:
    """This machine as far as cache keys go; ``fingerprint`` is None when it could not be computed."""

    install: DeepGemmInstall | None
    nvcc: Nvcc | None
    fingerprint: dict[str, Any] | None
    warnings: list[str] = field(default_factory=list)


def current_environment(generation: str, recorded: dict[str, Any] | None, *, nvcc: str | None = None,
                        num_sms: int | None = None, gpu: str | None = None) -> Environment:
    """Find DeepGEMM and nvcc as the runtime would, and fingerprint them.

    For the legacy generation the nvcc path string is part of the key, so the nvcc recorded in ``recorded``
    is probed first (an explicit ``nvcc`` wins); if it is not there, the default one is used and the
    difference shows up as a stale ``nvcc.path``.
    """
    warnings: list[str] = []
    install = find_deepgemm()
    if install is None:
        warnings.append("DeepGEMM is not importable here: the fingerprint cannot be checked")
        return Environment(None, None, None, warnings)
    if install.generation != generation:
        warnings.append(f"the installed DeepGEMM is {install.generation} ({install.distribution} "
                        f"{install.version}) but the cache is for {generation}: the fingerprint cannot be checked")
        return Environment(install, None, None, warnings)
    recorded_nvcc = ((recorded or {}).get("nvcc") or {}).get("path")
    tried = [p for p in (nvcc, recorded_nvcc if nvcc is None else None) if p]
    found: Nvcc | None = None
    for path in tried:
        try:
            found = find_nvcc(path)
            break
        except DGError as exc:
            warnings.append(f"{exc.message}; trying the default nvcc")
    if found is None:
        try:
            found = find_nvcc(None)
        except DGError as exc:
            warnings.append(f"{exc.message}: the fingerprint cannot be checked")
            return Environment(install, None, None, warnings)
    if num_sms is None:
        num_sms = (recorded or {}).get("num_sms")
    return Environment(install, found, make_fingerprint(install, found, num_sms, gpu), warnings)


# a VerifyReport's coverage (in its JSON too): the keys' m ranges were covered by sweep records
COVERED_BY_SWEEP = "sweep"


@dataclass
class VerifyReport:
    plan: Plan
    cache_dir: str
    generation: str
    kernels: list[KernelCheck]
    recorded_fingerprint: dict[str, Any]
    current_fingerprint: dict[str, Any] | None
    stale: list[tuple[str, Any, Any]]
    coverage: str  # "proved" (keys computed here), "index" (the index's entry names), "sweep" (m ranges swept)
    warnings: list[str] = field(default_factory=list)
    jit_install: str | None = None  # what this machine lacks to name and build the plan's SGLang JIT modules
    shared_dirs: list[str] = field(default_factory=list)  # read-only roots searched after cache_dir, in order

    @property
    def missing(self) -> list[str]:
        return [k.kernel for k in self.kernels if k.status == MISSING]

    @property
    def changed(self) -> list[str]:
        return [k.kernel for k in self.kernels if k.status == CHANGED]

    @property
    def invalid(self) -> list[str]:
        return [k.kernel for k in self.kernels if k.status == INVALID]

    @property
    def unchecked(self) -> list[str]:
        return [k.kernel for k in self.kernels if k.status == UNCHECKED]

    @property
    def stale_items(self) -> list[str]:
        return [k.kernel for k in self.kernels if k.status == STALE]

    @property
    def fingerprint_checked(self) -> bool:
        return self.current_fingerprint is not None and bool(self.recorded_fingerprint)

    @property
    def complete(self) -> bool:
        return (not self.missing and not self.changed and not self.invalid and not self.stale and not self.stale_items
                and not self.unchecked)

    @property
    def problems(self) -> list[KernelCheck]:
        return [k for k in self.kernels if k.status != OK]

    @property
    def return_code(self) -> int:
        return EXIT_OK if self.complete else EXIT_CHECK_FAILED

    def hint(self) -> str | None:
        """What fixes an incomplete cache."""
        if self.complete:
            return None
        where = f"--cache-dir {self.cache_dir}"
        jit_ids = set(self.plan.jit_modules)
        if self.jit_install and any(k.kernel in jit_ids for k in self.problems):
            # warm cannot build them here either (it exits 3 saying the same): the fix is the install
            return (f"{self.jit_install}, then run `dgprecompile warm` with the same plan and {where}: SGLang's "
                    "JIT modules are built with the installed sglang")
        triton_ids = set(self.plan.triton_moe)
        if self.jit_install and any(k.kernel in triton_ids for k in self.problems):
            return (f"{self.jit_install}, then run `dgprecompile warm` with the same plan and {where}: the Triton "
                    "fused-MoE items are compiled with the installed sglang and Triton")
        if self.stale_items and not self.stale:
            return (f"warm again here (`dgprecompile warm ... {where}`): the Triton fused-MoE items are compiled by "
                    "the Triton installed here, under the keys it computes (its host modules: for this Python and platform)")
        if self.coverage == COVERED_BY_SWEEP and not self.stale:
            return (f"run `dgprecompile warm --backend sweep` on a GPU machine with the same plan and {where}: it "
                    "sweeps only the m ranges not covered")
        if self.stale and {f for f, _, _ in self.stale} == {"num_sms"}:
            built, here = self.stale[0][1], self.stale[0][2]
            return (f"the cache was warmed for {built} SMs: warm it for {here} (`dgprecompile warm ... --num-sms "
                    f"{here} {where}`), or check it for the GPU it was built for (--num-sms {built})")
        if self.stale:
            return (f"warm again here (`dgprecompile warm ... {where}`), or run where the recorded DeepGEMM/nvcc "
                    "sit at the recorded paths")
        if self.unchecked and not (self.missing or self.changed or self.invalid):
            return (f"run `dgprecompile warm` with the same plan and {where}: it builds the unchecked kernels afresh, "
                    "keeps those with the same bytes and replaces the others")
        return (f"run `dgprecompile warm` with the same plan and {where}: it compiles only what is missing and "
                "rebuilds what changed")

    def verdict(self) -> str:
        n = len(self.kernels)
        ok = n - len(self.problems)
        how = {"proved": "coverage proved from the runtime's keys", COVERED_BY_SWEEP: "every key's m range covered by "
               "sweep records"}.get(self.coverage, "checked against the index")
        unit = "keys / m ranges" if self.coverage == COVERED_BY_SWEEP else "kernels"
        fp = ("fingerprint matches" if self.fingerprint_checked else "fingerprint not checked")
        if self.complete:
            return f"complete: {ok}/{n} {unit} present and intact, {fp} ({how})"
        parts = []
        if self.missing:
            parts.append(f"{len(self.missing)} missing")
        if self.changed:
            parts.append(f"{len(self.changed)} changed")
        if self.invalid:
            parts.append(f"{len(self.invalid)} not loadable (empty, cut short, another architecture or not the "
                         "kernel its name says)")
        if self.unchecked:
            parts.append(f"{len(self.unchecked)} unchecked (not recorded by a build: warm compares them with one)")
        if self.stale_items:
            parts.append(f"{len(self.stale_items)} warmed with another Triton, Python or platform")
        if self.stale:
            parts.append("fingerprint differs in " + ", ".join(_difference(f, a, b) for f, a, b in self.stale))
        if ok == n:  # every kernel is there: what is wrong is where they were built, not that any is missing
            return f"stale: all {n} {unit} present, but " + "; ".join(parts) + f" ({how})"
        return f"incomplete: {ok}/{n} {unit} ok; " + "; ".join(parts) + f" ({how})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "complete": self.complete,
            "cache_dir": self.cache_dir,
            **({"shared_cache_dirs": self.shared_dirs} if self.shared_dirs else {}),
            "generation": self.generation,
            "coverage": self.coverage,
            "kernels_total": len(self.kernels),
            "kernels_ok": len(self.kernels) - len(self.problems),
            "missing": self.missing,
            "changed": self.changed,
            "invalid": self.invalid,
            "unchecked": self.unchecked,
            "stale_items": self.stale_items,
            "stale": [{"field": f, "recorded": a, "current": b} for f, a, b in self.stale],
            "fingerprint_checked": self.fingerprint_checked,
            "fingerprint_id": short_id(self.recorded_fingerprint) if self.recorded_fingerprint else None,
            # what `pack -o '...{fingerprint}...'` would name an artifact built here: a CI cache key before warming
            "current_fingerprint_id": short_id(self.current_fingerprint) if self.current_fingerprint else None,
            "recorded_fingerprint": self.recorded_fingerprint,
            "current_fingerprint": self.current_fingerprint,
            "warnings": self.warnings,
            "problems": [k.to_dict() for k in self.problems],
            "verdict": self.verdict(),
        }


def _difference(field_name: str, recorded: Any, current: Any) -> str:
    """``num_sms`` -> ``num_sms (built for 132, here 78)``: the values where they are short enough for one line."""
    if len(str(recorded)) + len(str(current)) > 24:
        return field_name
    return f"{field_name} (built for {recorded}, here {current})"


def _runtime_names(plan: Plan, env: Environment, warnings: list[str]):
    """(kernel id -> the entry name the runtime looks up here, the key context that computed them), where
    dgprecompile can compute them (the legacy JIT, sgl-deep-gemm 0.1.0-0.2.5), else None."""
    install, nvcc = env.install, env.nvcc
    if install is None or nvcc is None or install.generation != plan.profile.generation:
        return None
    generation = plan.profile.deepgemm
    if not generation.computes_keys(install.version):
        return None
    try:
        ctx = key_context(generation, install, nvcc)
        return {kid: ctx.entry_name(spec) for kid, spec in plan.kernels.items()}, ctx
    except (DGError, OSError) as exc:
        warnings.append(f"cannot compute the runtime's entry names ({exc}): checking the index only")
        return None


def verify_cache(plan: Plan, store: CacheStore, *, nvcc: str | None = None,
                 num_sms: int | None = None) -> VerifyReport:
    """Check every planned kernel against ``store`` and this environment; see the module docstring."""
    index: Index = store.read_index()
    generation = plan.profile.generation
    warnings: list[str] = []
    if not index.fingerprint and not index.kernels:
        warnings.append(f"no dgprecompile index in {store.root}: nothing was warmed or unpacked there")
    recorded_generation = (index.fingerprint.get("deepgemm") or {}).get("generation")
    if recorded_generation and recorded_generation != generation:
        warnings.append(f"the cache was built for a {recorded_generation} DeepGEMM but the plan is for {generation}")
    env = current_environment(generation, index.fingerprint, nvcc=nvcc,
                              num_sms=num_sms if num_sms is not None else plan.num_sms, gpu=plan.gpu)
    warnings += env.warnings
    stale = differences(index.fingerprint, env.fingerprint) if (env.fingerprint and index.fingerprint) else []

    jit_install: list[str] = []
    jit_names = _jit_names(plan, warnings, jit_install)
    if with_jit_fingerprint(index.fingerprint, env.fingerprint, jit_names.naming.fingerprint().get("arch")
                            if jit_names else None, jit_names.family if jit_names else None):
        stale = differences(index.fingerprint, env.fingerprint)
    ctx = Checking(plan, store, index, env, warnings, jit_install, jit_names)
    checks: list[KernelCheck] = []
    for runtime, items in plan.by_runtime():  # each runtime's items, checked as its kind says (CHECKS)
        checks += CHECKS[runtime.kind](ctx, runtime, items)
    coverage = COVERED_BY_SWEEP if ctx.by_sweep else "proved" if ctx.proved else "index"
    return VerifyReport(plan, str(store.root), generation, checks, index.fingerprint, env.fingerprint, stale,
                        coverage, warnings, jit_install[0] if jit_install else None)


@dataclass
class JitNames:
    """The plan's SGLang JIT modules as the sglang installed here names them."""

    naming: Any  # keys/schemes.py naming_for: the release's naming
    entries: dict[str, str]  # module id -> the entry the runtime looks up
    family: Any  # its runtimes.JitFamily


@dataclass
class Checking:
    """What every runtime's check (CHECKS) reads, and what it found about how the cache was checked."""

    plan: Plan
    store: CacheStore
    index: Index
    env: Environment
    warnings: list[str]
    install: list[str]  # what to install to check (or build) what could not be checked here
    jit: JitNames | None
    proved: bool = True  # False once a runtime's items were checked against the index only
    by_sweep: bool = False  # DeepGEMM's keys checked against sweep records


def _check_deepgemm(ctx: Checking, generation, kernels) -> list[KernelCheck]:
    """The plan's DeepGEMM kernels (or, keys only, its keys' m ranges against sweep records): each under the entry
    name the runtime computes here (proved) where dgprecompile computes it, else as the index records it."""
    plan, store, index = ctx.plan, ctx.store, ctx.index
    named = _runtime_names(plan, ctx.env, ctx.warnings)
    names, naming = named if named is not None else (None, None)
    ctx.proved = names is not None
    files, arch = generation.entry_files, plan.profile.sm_arch
    if names is None and generation.key_scheme is not None:
        ctx.warnings.append("falling back to index-only checks: coverage is as recorded, not proved")
    # keys only, or a plan swept with --backend sweep whose names cannot be computed here (its kernels are not in
    # the index, sweep records are): the library chose, so the sweep records must cover every key's m range
    ctx.by_sweep = not plan.heuristic or (names is None and bool(index.sweeps)
                                          and any(k.id not in index.kernels for k in kernels))
    if ctx.by_sweep:
        return _check_sweeps(plan, store, index, arch)
    checks: list[KernelCheck] = []
    for kid in sorted(k.id for k in kernels):
        record = index.kernels.get(kid)
        expected = names.get(kid) if names else None
        if expected is not None:
            checks.append(_check_proved(store, kid, record, expected, files, arch, naming))
        elif record is None:
            checks.append(KernelCheck(kid, MISSING, None, "not in the index"))
        else:
            checks.append(_check_recorded(store, kid, record, arch))
    return checks


def _check_recorded(store: CacheStore, kid: str, record, arch: str) -> KernelCheck:
    problem = store.check_entry(record, arch)
    if problem is None and record.by == ADOPTED:
        return KernelCheck(kid, UNCHECKED, record.entry, ADOPTED_DETAIL)
    if problem is None:
        return KernelCheck(kid, OK, record.entry)
    if problem == "missing":
        return KernelCheck(kid, MISSING, record.entry, "indexed entry is not in the cache")
    return KernelCheck(kid, _status(problem), record.entry, problem)


def verify_roots(plan: Plan, store: CacheStore, shared: list[CacheStore] | tuple[CacheStore, ...] = (), *,
                 nvcc: str | None = None, num_sms: int | None = None) -> VerifyReport:
    """The cache as a runtime with several roots sees it (DeepJIT: ``DG_JIT_CACHE_DIR=<store>:<shared>...``).

    DeepJIT looks a kernel up in every root in order and uses the first committed entry it finds (its
    ``DiskCache::entry``), so a planned kernel is judged by the first root that holds it: a changed or invalid entry
    in the writable root hides a good one in a shared root. SGLang's own JIT modules and sweep records are read from
    ``store`` alone (their runtimes take one directory). A shared root's fingerprint counts where it serves a kernel.
    """
    primary = verify_cache(plan, store, nvcc=nvcc, num_sms=num_sms)
    if not shared:
        return primary
    plan.profile.deepgemm.cache_dir_value(str(store.root), [str(s.root) for s in shared])  # refuses one-root JITs
    others = [(s, verify_cache(plan, s, nvcc=nvcc, num_sms=num_sms)) for s in shared]
    found = [(s, r, {k.kernel: k for k in r.kernels}) for s, r in others]
    checks, stale, warnings, served = [], list(primary.stale), list(primary.warnings), set()
    for check in primary.kernels:
        if check.status == MISSING and check.kernel in plan.kernels:
            for root, _, by_id in found:
                there = by_id.get(check.kernel)
                if there is not None and there.status != MISSING:
                    check = replace(there, detail=f"shared cache {root.root}" + (f": {there.detail}"
                                                                               if there.detail else ""))
                    served.add(str(root.root))
                    break
        checks.append(check)
    for root, report, _ in found:
        if str(root.root) in served:
            stale += [(f"{root.root}: {f}", a, b) for f, a, b in report.stale]
            warnings += [f"{root.root}: {w}" for w in report.warnings if w not in primary.warnings]
    return replace(primary, kernels=checks, stale=stale, warnings=warnings,
                   shared_dirs=[str(s.root) for s in shared])


def with_jit_fingerprint(recorded: dict[str, Any], current: dict[str, Any] | None, arch: str | None = None,
                         family=None) -> bool:
    """Add this machine's values of each JIT family's fingerprint section to ``current`` when the cache recorded
    that section or the plan has the family's modules (``family`` and ``arch`` given), so the current
    fingerprint id is what a warm here records."""
    from dgprecompile.runtimes import JIT_FAMILIES

    if current is None:
        return False
    added = False
    for fam in JIT_FAMILIES.values():
        jit = (recorded or {}).get(fam.fingerprint_section)
        planned = family is not None and fam.id == family.id and arch
        if not (jit or planned):
            continue
        current[fam.fingerprint_section] = current_fingerprint(fam, str((arch if planned else None)
                                                                       or (jit or {}).get("arch")))
        added = True
    return added


def _plan_family(plan: Plan):
    """The runtime of the plan's SGLang JIT modules (their JitFamily), or None."""
    modules = sorted(plan.jit_modules.values(), key=lambda m: m.runtime_id)
    return plan.runtime_of(modules[0]) if modules else None


def _jit_names(plan: Plan, warnings: list[str], install: list[str]):
    """(naming, {module id: entry}, family) for the plan's SGLang JIT modules from the sglang installed here,
    or None (with what to install appended to ``install``)."""
    family = _plan_family(plan)
    if family is None:
        return None
    try:
        naming = naming_for(family, plan.sglang_version or "")
        return JitNames(naming, {mid: naming.entry_name(m) for mid, m in plan.jit_modules.items()}, family)
    except (DGError, OSError) as exc:
        warnings.append(f"cannot name SGLang's JIT modules here ({getattr(exc, 'message', exc)}): checking them "
                        "against the index only")
        if getattr(exc, "hint", None):
            install.append(exc.hint)
        return None


def _check_jit(ctx: Checking, family, modules) -> list[KernelCheck]:
    """Each planned SGLang JIT module: the files its family needs under the directory the runtime looks in (when
    sglang is installed here), with the bytes the index recorded."""
    store, index, jit_names = ctx.store, ctx.index, ctx.jit
    if jit_names is None:
        ctx.proved = False
    out = []
    for module in sorted(modules, key=lambda m: m.id):
        mid = module.id
        record = index.kernels.get(mid)
        expected = jit_names.entries[mid] if jit_names else None
        name = expected or (record.entry if record else None)
        # a family whose name is a prefix of the entry (the ninja loader's build key before its deps key) asks its
        # own installed_entry below; a whole name is never followed through a link
        linked = (link_problem(store.entry_path(name, family.area))
                  if name and valid_entry_name(name, family.area) else None)
        if linked:  # never followed: a link makes another module's bytes answer for this name
            out.append(KernelCheck(mid, CHANGED, expected or record.entry, f"changed: {linked}"))
            continue
        if expected is not None:
            files = family.entry_files(jit_names.naming, module)
            found = family.installed_entry(jit_names.naming, module, store.area_dir(family.area))
            if found is None:
                why = family.missing_detail(jit_names.naming, module, store.area_dir(family.area))
                detail = (f"the index records {record.entry}, but sglang here looks for {expected}"
                          + (f" ({why})" if why else "") if record is not None and not record.entry.startswith(expected)
                          else why or f"no {' + '.join(files)} under the runtime's directory {family.area}/{expected}")
                out.append(KernelCheck(mid, MISSING, expected, detail))
                continue
            expected = found
            if record is None or record.entry != expected:
                out.append(KernelCheck(mid, OK, expected, "present, not in the index (no checksum)"))
                continue
        elif record is None:
            out.append(KernelCheck(mid, MISSING, None, "not in the index"))
            continue
        problem = store.check_entry(record)
        if problem is None:
            out.append(KernelCheck(mid, OK, record.entry))
        else:
            out.append(KernelCheck(mid, MISSING if problem == "missing" else CHANGED, record.entry,
                                   "indexed entry is not in the cache" if problem == "missing" else problem))
    return out


def _check_sweeps(plan: Plan, store: CacheStore, index: Index, arch: str) -> list[KernelCheck]:
    """Each planned key: OK when sweep records of the cache's fingerprint cover its whole m range with every
    entry they name present, whole and valid; else one check per m range not covered, naming the first bad
    entry of a record over it (or "not swept")."""
    from dgprecompile.cache.sweeps import coverage, key_label

    fingerprint = short_id(index.fingerprint) if index.fingerprint else ""
    keys = [(pk.key.ident, pk.key.m_min, pk.key.m_max) for pk in plan.keys]
    out = []
    for cov in coverage(store, index, keys, fingerprint, arch):
        label = key_label(cov.key)
        if not cov.missing:
            out.append(KernelCheck(label, OK, None, f"m {cov.m_min}..{cov.m_max} swept, {len(cov.entries)} entries"))
        for lo, hi in cov.missing:
            bad = next(((e, p) for (r_lo, r_hi), e, p in cov.broken if r_lo <= hi and r_hi >= lo), None)
            if bad is None:
                out.append(KernelCheck(f"{label} m {lo}..{hi}", MISSING, None, "not swept"))
            else:
                status = MISSING if bad[1] in ("missing", "not in the index") else _status(bad[1])
                out.append(KernelCheck(f"{label} m {lo}..{hi}", status, bad[0], f"entry {bad[0]}: {bad[1]}"))
    return out


def _check_triton_moe(ctx: Checking, runtime, items) -> list[KernelCheck]:
    """Each Triton fused-MoE item: covered only while its record exists, was made with the Triton installed here
    (read from its metadata, never imported) and names entries that are all whole (cache/triton_moe.py)."""
    from dgprecompile.cache import triton_moe as records

    current = runtime.installed()
    if current is None:
        ctx.warnings.append(f"triton is not installed here: the plan's {runtime.label} items cannot be checked "
                            "against it")
        ctx.install.append("install triton (the job's own release)")
    return _record_checks(ctx, records.item_coverage, items, current)


def _check_item_records(ctx: Checking, runtime, items) -> list[KernelCheck]:
    """Each torch.compile item or FlashInfer module: covered only while its record exists, was made with what is
    installed here (the torch, the flashinfer-python: read from metadata, never imported) and names entries that
    are all whole (cache/item_records.py)."""
    from dgprecompile.cache import item_records

    def coverage(store, index, item_id, installed):
        return item_records.item_coverage(store, index, runtime, item_id, installed)

    return _record_checks(ctx, coverage, items, runtime.installed())


def _record_checks(ctx: Checking, coverage, items, installed) -> list[KernelCheck]:
    """One check per item whose record (the index's triton_moe / inductor / flashinfer section) says whether it is
    covered (cache/triton_moe.py's statuses, which cache/item_records.py shares)."""
    from dgprecompile.cache import triton_moe as records

    status = {records.COVERED: OK, records.MISSING: MISSING, records.STALE: STALE, records.BROKEN: CHANGED}
    out = []
    for item_id in sorted(it.id for it in items):
        cov = coverage(ctx.store, ctx.index, item_id, installed)
        out.append(KernelCheck(item_id, status[cov.status], cov.entry, cov.detail))
    return out


# each runtime's items are checked by the check its kind names (runtimes/base.py Runtime.kind; tests/test_runtimes.py
# keeps this table in step with the runtimes that plan items)
CHECKS = {"deepgemm": _check_deepgemm, "sglang-jit": _check_jit, "triton-moe": _check_triton_moe,
          "inductor-graph": _check_item_records, "flashinfer-module": _check_item_records,
          "triton-path": _check_item_records}


def _status(problem: str) -> str:
    return INVALID if problem.startswith("invalid") else CHANGED


def _check_proved(store: CacheStore, kid: str, record, expected: str, files: tuple[str, ...],
                  arch: str, naming=None) -> KernelCheck:
    entry = store.entry_path(expected)
    linked = link_problem(entry)
    if linked:  # never followed: a link makes another entry's bytes answer for this name
        return KernelCheck(kid, CHANGED, expected, f"changed: {linked}")
    if not all((entry / name).is_file() for name in files):
        if record is not None and record.entry != expected:
            return KernelCheck(kid, MISSING, expected,
                               f"the index records {record.entry}, but the runtime here looks for {expected}")
        return KernelCheck(kid, MISSING, expected, f"no {' + '.join(files)} under the runtime's entry name")
    if record is not None and record.entry == expected:  # the bytes the index recorded: changed since?
        problem = store.check_entry(record, arch, naming)
        if problem is not None and not problem.startswith("invalid"):
            return KernelCheck(kid, MISSING if problem == "missing" else CHANGED, expected, problem)
    # then the bytes on disk: a checksum recorded for an empty, cut-short or swapped cubin would match it
    bad = store.entry_problem(expected, arch, files, naming)
    if bad is not None:
        return KernelCheck(kid, INVALID, expected, f"invalid: {bad}")
    if record is None:
        return KernelCheck(kid, UNCHECKED, expected, "present, not in the index (no build vouches for its bytes)")
    if record.entry != expected:
        return KernelCheck(kid, UNCHECKED, expected, f"present; the index records {record.entry} (no build vouches "
                           "for its bytes)")
    if record.by == ADOPTED:
        return KernelCheck(kid, UNCHECKED, expected, ADOPTED_DETAIL)
    return KernelCheck(kid, OK, expected)
