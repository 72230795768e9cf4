"""Shape plan: every (kernel_type, n, k, num_groups) key, its m-buckets and the distinct kernels they compile.

A plan is computed from config.json alone (no torch, no DeepGEMM) and saved as a YAML manifest that
``warm``, ``verify``, ``pack`` and ``launch`` read back.
"""

from __future__ import annotations

import argparse
import shlex
from dataclasses import dataclass, field
from typing import Any

from dgprecompile import __version__, schemas
from dgprecompile.data import load_yaml
from dgprecompile.errors import InputError
from dgprecompile.planning.heuristics.registry import heuristic_for
from dgprecompile.planning.models import ModelConfig
from dgprecompile.planning.profiles import Profile
from dgprecompile.planning.shapes import Parallel, model_shapes
from dgprecompile.runtimes import Runtime, get_runtime
from dgprecompile.runtimes.captured import coverage
from dgprecompile.runtimes.items import (
    FlashInferItem,
    GemmKey,
    InductorGraphItem,
    JitModule,
    KernelSpec,
    PlanItem,
    TritonMoeItem,
    TritonPathItem,
)
from dgprecompile.runtimes.triton_moe import DeepGemmMoe

MANIFEST_SCHEMA = 1
DEFAULT_NUM_SMS = 132
# The largest m (tokens of one forward, an expected_m, a padded contiguous m): SGLang indexes a forward's tokens
# in 32-bit ints (req_to_token is torch.int32, 0.5.14 mem_cache/memory_pool.py:253) and DeepGEMM takes m as an
# int; the manifest schema holds the number (its $defs.m), the command line and the planner refuse above it.
MAX_M: int = schemas.schema("manifest")["$defs"]["m"]["maximum"]
# The largest m the kernel model is evaluated for: a plan evaluates it once per 64 m (where the choice can change),
# so this bounds plan's time (about 20 s for the slowest generation at this m, one core) and stays above what a
# server command gives (context 1M with chunked prefill off: 1,048,570) and 4x the largest m checked on a GPU.
MODELLED_M_MAX = 1 << 20


@dataclass(frozen=True)
class Bucket:
    m_min: int
    m_max: int
    m_rep: int
    kernel: str  # a KernelSpec id


@dataclass
class PlannedKey:
    key: GemmKey
    buckets: list[Bucket]
    aux: list[str] = field(default_factory=list)  # layout kernels the runtime compiles beside this GEMM

    @property
    def kernel_ids(self) -> list[str]:
        return sorted({b.kernel for b in self.buckets} | set(self.aux))


@dataclass
class Plan:
    model: str
    model_source: str
    model_type: str
    tp: int
    ep: int
    moe_runner_backend: str
    max_tokens: int
    profile: Profile
    profile_reason: str
    num_sms: int
    gpu: str | None
    keys: list[PlannedKey]
    kernels: dict[str, KernelSpec]
    notes: list[str] = field(default_factory=list)
    sglang_version: str | None = None  # the exact sglang release, when the user named one (or it is installed)
    heuristic: bool = True  # False: keys only (the kernel choice is not modelled, or --keys-only)
    sweep_m_max: int = 0  # > 0: the plan also covers SGLang's own precompile (its m sweep and warm-up layouts)
    server: dict[str, Any] | None = None  # the SGLang server command (or SpecForge config) the plan was read from
    jit_modules: dict[str, JitModule] = field(default_factory=dict)  # SGLang's own JIT modules on these paths
    # what the request left out and the plan chose (`--ep 8` alone: tp 8): every command shows it (resolve_plan)
    assumed: list[str] = field(default_factory=list)
    # MoE shapes on SGLang's Triton fused MoE: warmed GPU-free per item (families.TRITON_MOE)
    triton_moe: dict[str, TritonMoeItem] = field(default_factory=dict)
    # SGLang's torch.compile'd functions on these paths: warmed on the job's GPU kind per item (runtimes/inductor.py)
    inductor: dict[str, InductorGraphItem] = field(default_factory=dict)
    # the FlashInfer JIT modules on these paths: warmed GPU-free per module (runtimes/flashinfer.py)
    flashinfer: dict[str, FlashInferItem] = field(default_factory=dict)
    # SGLang's model-path Triton kernels beside the fused MoE (embedding, router, MoE sum): warmed GPU-free per item
    triton_path: dict[str, TritonPathItem] = field(default_factory=dict)

    @property
    def items(self) -> list[PlanItem]:
        """The plan's one list of typed work items: DeepGEMM's kernels, SGLang's JIT modules, Triton MoE shapes
        and SGLang's torch.compile graphs (each type its runtime's own fields; runtimes/items.py). Stages loop over
        it and ask ``runtime_of``."""
        return [*self.kernels.values(), *self.jit_modules.values(), *self.triton_moe.values(),
                *self.flashinfer.values(), *self.inductor.values(), *self.triton_path.values()]

    def runtime_of(self, item: PlanItem) -> Runtime:
        """The runtime that builds and checks ``item`` (a DeepGEMM kernel: the plan's generation); one error where
        a manifest names a runtime of another kind for it."""
        runtime = self.profile.deepgemm if item.runtime_id is None else get_runtime(item.runtime_id)
        if runtime.kind != item.kind:
            raise InputError(f"{item.id}: {item.runtime_id!r} is a {runtime.kind} runtime, not a {item.kind} one",
                             hint="regenerate the manifest with `dgprecompile plan -o`")
        return runtime

    def by_runtime(self) -> list[tuple[Runtime, list[PlanItem]]]:
        """The plan's items grouped by their runtime, in the order of ``items`` (the DeepGEMM generation always)."""
        generation = self.profile.deepgemm  # always first: a keys-only plan's keys are its work (no kernels)
        groups: dict[str, tuple[Runtime, list[PlanItem]]] = {generation.id: (generation, [])}
        for item in self.items:
            runtime = self.runtime_of(item)
            groups.setdefault(runtime.id, (runtime, []))[1].append(item)
        return list(groups.values())

    @property
    def total_kernels(self) -> int | None:
        return len(self.kernels) if self.heuristic else None

    def estimate_seconds(self) -> float | None:
        return None if self.total_kernels is None else self.total_kernels * self.profile.seconds_per_kernel

    def estimate_bytes(self) -> int | None:
        return None if self.total_kernels is None else self.total_kernels * self.profile.bytes_per_entry

    def representatives(self) -> dict[str, tuple[GemmKey, int]]:
        """For each kernel, one (key, m) call that compiles it: the smallest m of its first bucket."""
        out: dict[str, tuple[GemmKey, int]] = {}
        for pk in self.keys:
            for b in pk.buckets:
                out.setdefault(b.kernel, (pk.key, b.m_rep))
            for aux in pk.aux:
                out.setdefault(aux, (pk.key, 1))
        return out

    def families(self) -> dict[str, Any]:
        """Every JIT family a server's first forward meets, each row saying how this plan covers it: its planned
        items, or what covers them where none is planned (the plan's notes say why)."""
        return coverage(self.profile, {s for s in ("triton_moe", "inductor", "flashinfer") if getattr(self, s)})

    def summary(self) -> dict[str, Any]:
        """The short record of this plan that the cache index (`plans`) and artifacts keep."""
        return {"model": self.model, "tp": self.tp, "ep": self.ep, "sglang_profile": self.profile.id,
                "sglang_version": self.sglang_version, "moe_runner_backend": self.moe_runner_backend,
                "num_sms": self.num_sms, "max_tokens": self.max_tokens, "kernels": len(self.kernels)}

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": MANIFEST_SCHEMA,
            "generated_by": f"dgprecompile {__version__}",
            "model": self.model,
            "model_source": self.model_source,
            "model_type": self.model_type,
            "tp": self.tp,
            "ep": self.ep,
            "moe_runner_backend": self.moe_runner_backend,
            "max_tokens": self.max_tokens,
            "sglang_profile": self.profile.id,
            "sglang_version": self.sglang_version,
            "deepgemm": {"generation": self.profile.generation,
                         "distribution": self.profile.deepgemm_distribution,
                         "version": self.profile.deepgemm_version},
            "gpu": self.gpu,
            "num_sms": self.num_sms,
            "total_kernels": self.total_kernels,
            "kernel_model": self.heuristic,
            "estimate": {"compile_seconds_serial": None if self.estimate_seconds() is None
                         else round(self.estimate_seconds(), 1), "cache_bytes": self.estimate_bytes()},
            "shapes": [
                {
                    "kernel_type": pk.key.kernel_type.value,
                    "n": pk.key.n,
                    "k": pk.key.k,
                    "num_groups": pk.key.num_groups,
                    "layers": list(pk.key.layers),
                    "m_min": pk.key.m_min,
                    "m_max": pk.key.m_max,
                    "kernels": len(pk.kernel_ids) if self.heuristic else None,
                    "buckets": [{"m_min": b.m_min, "m_max": b.m_max, "m_rep": b.m_rep, "kernel": b.kernel}
                                for b in pk.buckets],
                    "aux_kernels": list(pk.aux),
                }
                for pk in self.keys
            ],
            "kernels": [{"id": s.id, "family": s.family, "params": {k: v for k, v in s.params}}
                        for s in self.kernels.values()],
            "notes": list(self.notes),
            **({"sglang_precompile_m_max": self.sweep_m_max} if self.sweep_m_max else {}),
            **({"server": self.server} if self.server else {}),
            # SGLang's own JIT modules (a second kernel family), only where the release models them
            **({"sglang_jit_modules": [m.to_dict() for m in self.jit_modules.values()]} if self.jit_modules else {}),
            # SGLang's Triton fused-MoE kernels per MoE shape (a third kind of work), where the plan has them
            **({"triton_moe": [t.to_dict() for t in self.triton_moe.values()]} if self.triton_moe else {}),
            # SGLang's torch.compile (inductor) graphs, built by warm on the job's GPU kind
            **({"inductor": [g.to_dict() for g in self.inductor.values()]} if self.inductor else {}),
            # FlashInfer's JIT modules, built GPU-free by warm with FlashInfer's own builder
            **({"flashinfer": [m.to_dict() for m in self.flashinfer.values()]} if self.flashinfer else {}),
            # SGLang's model-path Triton kernels (embedding, router, MoE sum), warmed GPU-free as the fused MoE items
            **({"triton_path": [t.to_dict() for t in self.triton_path.values()]} if self.triton_path else {}),
        }


def gpu_sms() -> dict[str, int]:
    return {name: int(row["sms"]) for name, row in load_yaml("gpus.yaml")["gpus"].items()}


def _squeezed(text: str) -> str:
    """A GPU name or key compared loosely: lower case, without spaces, dashes, underscores or "nvidia"."""
    return "".join(text.lower().split()).replace("-", "").replace("_", "").replace("nvidia", "")


def gpu_named(device_name: str) -> str | None:
    """The ``--gpu`` whose row of data/gpus.yaml is this device (a name torch.cuda.get_device_name() or nvidia-smi
    prints: a record's GPU, doctor's), or None for a GPU the table does not hold.

    A row whose name is exactly ``device_name`` wins; then one whose name differs only in case, spaces, dashes or
    "NVIDIA"; then the longest key found inside the name ("NVIDIA H200 141GB HBM3e": h200, not h20), a PCIe part
    only for a PCIe key and the other way round."""
    rows = load_yaml("gpus.yaml")["gpus"]
    name = device_name.strip()
    exact = next((key for key, row in rows.items() if row["name"] == name), None)
    if exact is not None:
        return exact
    loose = _squeezed(name)
    same = next((key for key, row in rows.items() if _squeezed(row["name"]) == loose), None)
    if same is not None or not loose:
        return same
    pcie = "pcie" in loose
    return next((key for key in sorted(rows, key=len, reverse=True)
                 if _squeezed(key) in loose and ("pcie" in key) == pcie), None)


def resolve_num_sms(gpu: str | None, num_sms: int | None) -> int:
    if gpu and num_sms:
        table = gpu_sms()
        if gpu.lower() in table and table[gpu.lower()] != num_sms:
            raise InputError(f"--gpu {gpu} has {table[gpu.lower()]} SMs but --num-sms says {num_sms}",
                             hint="pass one of --gpu and --num-sms")
    if num_sms is not None:
        if num_sms < 1:
            raise InputError("--num-sms must be a positive integer", hint="e.g. --num-sms 132 (H100/H200)")
        return num_sms
    if gpu:
        table = gpu_sms()
        if gpu.lower() not in table:
            raise InputError(f"unknown --gpu {gpu!r}; known: {', '.join(table)}", hint="or pass --num-sms N")
        return table[gpu.lower()]
    return DEFAULT_NUM_SMS


def sglang_precompile_m_max(chunked_prefill_size: int | None) -> int:
    """The largest m SGLang's own precompile covers (update_deep_gemm_config, same rule 0.5.1 to 0.5.23)."""
    m_max = 16384
    if chunked_prefill_size is not None:
        if chunked_prefill_size < 1:
            m_max = 65536
        elif chunked_prefill_size > 8192:
            m_max = chunked_prefill_size * 2
    return min(131072, m_max)


@dataclass(frozen=True)
class TrainerShape:
    tp: int
    ep: int | None
    batch_size: int
    max_length: int

    @property
    def max_tokens(self) -> int:
        # SpecForge online training builds one extend batch of tp*batch_size sequences padded to the longest
        return self.tp * self.batch_size * self.max_length


class _TrainerArgs(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would print usage and exit 2
        raise InputError(f"--specforge-cmd: {message}", hint="pass the trainer's command line exactly as it runs")


def _trainer_options() -> dict[str, Any]:
    return load_yaml("specforge_trainer.yaml")["options"]


def _positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be positive, got {number}")
    return number


def parse_specforge_cmd(cmd: str) -> TrainerShape:
    """Read the target's tp/ep, batch size and max length from a SpecForge training command line, with an
    argparse parser built from data/specforge_trainer.yaml (the trainer's own option names); everything else on
    the line (torchrun's options, the script, the trainer's other options) is left to them."""
    try:
        argv = shlex.split(cmd)
    except ValueError as exc:
        raise InputError(f"cannot parse --specforge-cmd: {exc}", hint="quote the whole command once") from None
    options = _trainer_options()
    parser = _TrainerArgs(prog="trainer", add_help=False, allow_abbrev=False)
    for dest, option in options.items():
        parser.add_argument(*option["names"], dest=dest, type=_positive_int, default=option["default"])
    args, _rest = parser.parse_known_args(argv)
    return TrainerShape(tp=args.tp, ep=args.ep, batch_size=args.batch_size, max_length=args.max_length)


def plan_key(key: GemmKey, profile: Profile, num_sms: int, kernels: dict[str, KernelSpec],
             sglang_warmup: bool = False) -> PlannedKey:
    """A key with its m-buckets and the layout kernels the runtime compiles beside it (with ``sglang_warmup``
    also those SGLang's own precompile builds); adds its kernels."""
    pk = PlannedKey(key, _buckets(key, profile, num_sms, kernels))
    heuristic = heuristic_for(profile.deepgemm)
    aux = getattr(heuristic, "aux_kernels", lambda *a, **kw: [])
    for spec in aux(key.kernel_type, key.n, key.k, key.num_groups, sglang_warmup=sglang_warmup):
        kernels.setdefault(spec.id, spec)
        pk.aux.append(spec.id)
    return pk


def _plan_key_of(model: ModelConfig, key: GemmKey, profile: Profile, num_sms: int, kernels: dict[str, KernelSpec],
                 par: Parallel) -> PlannedKey:
    """plan_key, where a GEMM no kernel fits (a k so large that not one pipeline stage fits shared memory: the
    kernel model raises ValueError) is bad input naming the config.json field it comes from and the model."""
    try:
        return plan_key(key, profile, num_sms, kernels, sglang_warmup=par.sweep_m_max > 0)
    except ValueError:
        fields = [f"{name} {value}" for name, value in sorted(model.config.items())
                  if type(value) is int and value >= key.k and value % key.k == 0 and value // key.k <= par.tp]
        source = ", ".join(fields) or f"its sizes (k={key.k})"
        raise InputError(f"{model.name} ({model.source}): {source} makes a {key.kernel_type.short} GEMM "
                         f"(n={key.n}, k={key.k}, {', '.join(key.layers) or 'a layer'}) that no DeepGEMM kernel "
                         "fits in shared memory: not a real model's size",
                         hint="pass the model's config.json as downloaded (--model PATH)") from None


def _buckets(key: GemmKey, profile: Profile, num_sms: int, kernels: dict[str, KernelSpec]) -> list[Bucket]:
    if key.m_max > MAX_M:
        raise InputError(f"{key.kernel_type.short} GEMM n={key.n} k={key.k}: its largest m would be {key.m_max:,}, "
                         f"beyond the {MAX_M:,} tokens SGLang can index in one forward (32-bit token indices)",
                         hint=f"pass a largest forward (--max-tokens, --chunked-prefill-size) of at most {MAX_M:,}")
    if key.m_max > MODELLED_M_MAX:
        raise InputError(f"{key.kernel_type.short} GEMM n={key.n} k={key.k}: m up to {key.m_max:,} is beyond the "
                         f"{MODELLED_M_MAX:,} the kernel model is evaluated for (one DeepGEMM choice per 64 m)",
                         hint=f"plan a largest forward of at most {MODELLED_M_MAX:,} tokens, or plan with --keys-only "
                              "(warm --backend sweep then lets DeepGEMM choose on a GPU)")
    heuristic = heuristic_for(profile.deepgemm)
    out: list[Bucket] = []
    start = key.m_min
    for end in heuristic.breakpoints(key.kernel_type, key.m_max):
        if end < start:
            continue
        spec = heuristic.kernel(key.kernel_type, end, key.n, key.k, key.num_groups, num_sms)
        kernels.setdefault(spec.id, spec)
        if out and out[-1].kernel == spec.id and out[-1].m_max == start - 1:
            prev = out[-1]
            out[-1] = Bucket(prev.m_min, end, prev.m_rep, spec.id)
        else:
            out.append(Bucket(start, end, start, spec.id))
        start = end + 1
    return out


def plan_jit_modules(model: ModelConfig, keys: list[GemmKey], sglang_version: str | None,
                     profile: Profile, par: Parallel | None = None,
                     options: dict[str, Any] | None = None) -> tuple[dict[str, JitModule], list[str]]:
    """SGLang's own JIT modules the server builds from process start to its first decode step: asked of the
    release's loader family (dgprecompile/runtimes/jit_loader.py) for this path; modules on the DeepGEMM paths carry
    the keys whose layers use them."""
    from dgprecompile.planning.sglang_jit import server_path
    from dgprecompile.runtimes import JIT_FAMILIES, family_for

    notes: list[str] = []
    if sglang_version is None:
        covered = [v for f in JIT_FAMILIES.values() for v in f.modelled_versions() if profile.contains(v)]
        if covered:
            notes.append(f"SGLang's own JIT modules depend on the exact release: plan with --sglang {covered[0]} "
                         "(not a profile id) to plan and warm them too")
        return {}, notes
    family = family_for(sglang_version)
    if family is None:
        return {}, notes
    if not family.modelled(sglang_version):
        notes.append(f"sglang {sglang_version} builds its own JIT modules ({family.label}), but dgprecompile does not "
                     "model that release's inventory: none planned, and a strict launch refuses them")
        return {}, notes
    by_path: dict[str, list[GemmKey]] = {}
    for k in keys:
        by_path.setdefault(k.kernel_type.short, []).append(k)
    path = server_path(model, by_path, par or Parallel(), options or {})
    modules, more = family.plan_modules(sglang_version, path)
    notes += more
    requires = family.release(sglang_version).requirements()
    out: dict[str, JitModule] = {}
    for mod in modules:
        users = by_path.get(mod.path, [])
        need = requires.get(mod.name) or {}
        if users and need:
            widths = {k.n // 2 for k in users} & {k.k for k in users}  # w13: n = 2*width; w2: k = width
            bad = [w for w in widths for g in {k.num_groups for k in users}
                   if (w // 128) % need.get("group_multiple_of", 1) or w // need.get("width_per_expert_min", 1) < g]
            if bad:
                notes.append(f"{mod.name}: not planned, expert width {bad[0]} makes SGLang run its Triton "
                             "activation instead")
                continue
        planned = JitModule(**{**mod.__dict__, "keys": tuple(k.ident for k in users)})
        out[planned.id] = planned
    if out:
        notes.append(f"sglang {sglang_version}: {len(out)} of SGLang's own JIT modules planned beside DeepGEMM's "
                     f"kernels (loader family {family.id}; each is built at its first use without a warm)")
    return out, notes


def build_plan(model: ModelConfig, profile: Profile, par: Parallel, num_sms: int = DEFAULT_NUM_SMS,
               gpu: str | None = None, profile_reason: str = "", sglang_version: str | None = None,
               keys_only: bool = False, server_options: dict[str, Any] | None = None,
               moe_options: dict[str, Any] | None = None, moe_version: str | None = None,
               grad: str = "no_grad") -> Plan:
    """``server_options``: the server command's options that change SGLang's JIT path (attention backend,
    CUDA graphs, custom all-reduce, dtype, ...; planning.sglang_jit.server_path reads them). ``moe_options``: all
    of the server's options (given or default) for the MoE rules of release ``moe_version`` (default
    ``sglang_version``; planning.moe_rules). ``grad``: the autograd mode the job's forwards run under (the torch.compile
    graphs' entries depend on it; runtimes/inductor.py ``grad_mode``)."""
    from dgprecompile.planning import moe_rules

    par, moe_notes = moe_rules.apply(par, model.config, profile.sglang, gpu, moe_version or sglang_version,
                                     moe_options or {})
    plan = _build_plan(model, profile, par, num_sms, gpu, profile_reason, sglang_version, keys_only)
    plan.notes = moe_notes + plan.notes
    plan.jit_modules, notes = plan_jit_modules(model, [pk.key for pk in plan.keys], sglang_version, profile, par,
                                               server_options)
    plan.notes += notes
    plan.inductor, notes = plan_inductor(model, par, sglang_version, plan, grad)
    plan.notes += notes
    plan.flashinfer, notes = plan_flashinfer(model, par, sglang_version, moe_options or server_options or {})
    plan.notes += notes
    plan.triton_path, notes = plan_triton_path(model, par, sglang_version, gpu, list(plan.triton_moe.values()),
                                               plan.keys)
    plan.notes += notes
    return plan


def plan_triton_path(model: ModelConfig, par: Parallel, sglang_version: str | None, gpu: str | None,
                     triton_moe: list[TritonMoeItem], keys: list[PlannedKey] = ()):
    """SGLang's model-path Triton kernels beside the fused MoE (runtimes/triton_moe.py TRITON_PATH), by id, and the
    notes; ``triton_moe``: the plan's Triton fused MoE items (the MoE combine's kernel follows their shapes);
    ``keys``: its DeepGEMM keys (the deep_gemm runner's Triton path follows its grouped GEMMs: :func:`deep_gemm_moe`)."""
    from dgprecompile.runtimes.triton_moe import TRITON_PATH

    items, notes = TRITON_PATH.plan_items(model.config, tp=par.tp, sglang_version=sglang_version, gpu=gpu,
                                          triton_moe=triton_moe, deep_gemm_moe=deep_gemm_moe(model, par, keys))
    return {it.id: it for it in items}, notes


def deep_gemm_moe(model: ModelConfig, par: Parallel, keys: list[PlannedKey]) -> list[DeepGemmMoe]:
    """(local experts, top-k, tokens per forward, hidden size, the grouped GEMMs' k) of the MoE layers whose experts the
    deep_gemm runner runs (--moe-runner-backend deep_gemm: the plan's grouped DeepGEMM keys, their groups the rank's
    local experts, their k the up GEMM's hidden and the down GEMM's intermediate per partition; the top-k the router's
    plus the fused shared experts), for its Triton path (data/triton_path.yaml ``moe_dispatch_index`` and after);
    none under another runner."""
    if par.moe_runner_backend != "deep_gemm":
        return []
    topk = int(model.config.get("num_experts_per_tok") or 0) + par.fused_shared_experts
    grouped = [pk.key for pk in keys if pk.key.kernel_type.value.startswith("GROUPED_GEMM")]
    hidden = int(model.config.get("hidden_size") or 0)
    out = []
    for experts in sorted({key.num_groups for key in grouped}):
        ks = tuple(sorted({int(key.k) for key in grouped if key.num_groups == experts}))
        out.append((experts, topk, par.max_tokens, hidden, ks))
    return out if topk else []


def plan_flashinfer(model: ModelConfig, par: Parallel, sglang_version: str | None, options: dict[str, Any]):
    """The FlashInfer JIT modules this server builds (runtimes/flashinfer.py), by id, and the notes."""
    from dgprecompile.runtimes.flashinfer import FLASHINFER_MODULES

    items, notes = FLASHINFER_MODULES.plan_items(model.config, tp=par.tp, sglang_version=sglang_version,
                                                 options=options, fused_shared_experts=par.fused_shared_experts)
    return {it.id: it for it in items}, notes


def plan_inductor(model: ModelConfig, par: Parallel, sglang_version: str | None, plan: Plan, grad: str):
    """SGLang's torch.compile graphs on this plan's paths (runtimes/inductor.py), by id, and the notes."""
    from dgprecompile.runtimes.inductor import INDUCTOR_GRAPHS
    from dgprecompile.runtimes.triton_moe import gpu_device

    items, notes = INDUCTOR_GRAPHS.plan_items(model.config, tp=par.tp, sglang_version=sglang_version,
                                              triton_moe=list(plan.triton_moe.values()),
                                              device_name=str(gpu_device(plan.gpu)["name"]), grad=grad)
    return {it.id: it for it in items}, notes


def _build_plan(model: ModelConfig, profile: Profile, par: Parallel, num_sms: int, gpu: str | None,
                profile_reason: str, sglang_version: str | None, keys_only: bool) -> Plan:
    from dgprecompile.runtimes.triton_moe import TRITON_MOE

    shapes = model_shapes(model, profile, par)
    triton, triton_notes = TRITON_MOE.plan_items(shapes.triton_moe, config=model.config,
                                                 sglang_version=sglang_version, max_tokens=par.max_tokens, gpu=gpu)
    shapes.notes += triton_notes
    if shapes.triton_moe:  # Triton's host modules: built by warm, or left to capture, and why
        shapes.notes.append(TRITON_MOE.host_modules_note(bool(triton)))
    triton_moe = {t.id: t for t in triton}
    kernels: dict[str, KernelSpec] = {}
    # what was and was not proven for this profile's DeepGEMM, as profiles.yaml records it
    proof = [f"{label}: {profile.raw[field]}" for field, label in (("proven", "proven"),
                                                                   ("not_proven", "not proven"))
             if profile.raw.get(field)]
    if keys_only and profile.deepgemm.sweep_backend is None:
        raise InputError(f"--keys-only: the {profile.deepgemm.label} of sglang {profile.id} has no sweep warm "
                         "(its Python JIT is warmed from the modelled kernels)", hint="plan without --keys-only")
    if keys_only or not profile.deepgemm.models_kernels:
        why = "planned keys only (--keys-only)" if profile.deepgemm.models_kernels else "not modelled: keys only"
        notes = shapes.notes + [f"the kernel choice of the {profile.generation} DeepGEMM "
                                f"({profile.deepgemm_distribution} {profile.deepgemm_version}) is {why}, no "
                                "m-buckets; `warm --backend sweep` on a GPU lets it choose for every m"] + proof
        return Plan(model=model.name, model_source=model.source, model_type=model.config.get("model_type", ""),
                    tp=par.tp, ep=par.ep, moe_runner_backend=par.moe_runner_backend, max_tokens=par.max_tokens,
                    profile=profile, profile_reason=profile_reason, num_sms=num_sms, gpu=gpu,
                    keys=[PlannedKey(k, []) for k in shapes.keys], kernels={}, notes=notes, heuristic=False,
                    sglang_version=sglang_version, sweep_m_max=par.sweep_m_max, triton_moe=triton_moe)
    if not profile.raw.get("heuristic_validated"):
        shapes.notes.append(f"the {profile.generation} kernel model is read from source but was not checked "
                            "against that DeepGEMM on a GPU")
    shapes.notes.extend(proof)
    for key in shapes.keys:
        checked = profile.deepgemm.unchecked_m(key.kernel_type.value, key.m_max)
        if checked is not None:
            shapes.notes.append(f"{key.kernel_type.value} n={key.n} k={key.k}: m up to {key.m_max}, beyond the "
                                f"largest m checked on a GPU ({checked}): not observed there")
    keys = [_plan_key_of(model, k, profile, num_sms, kernels, par) for k in shapes.keys]
    return Plan(model=model.name, model_source=model.source, model_type=model.config.get("model_type", ""),
                tp=par.tp, ep=par.ep, moe_runner_backend=par.moe_runner_backend, max_tokens=par.max_tokens,
                profile=profile, profile_reason=profile_reason, num_sms=num_sms, gpu=gpu, keys=keys,
                kernels=kernels, notes=shapes.notes, sglang_version=sglang_version, sweep_m_max=par.sweep_m_max,
                triton_moe=triton_moe)


@dataclass
class PlanRequest:
    """Everything `plan` (and `warm`/`launch` without a manifest) accepts, before resolution."""

    model: str | None = None
    tp: int | None = None
    ep: int | None = None
    sglang: str | None = None
    moe_runner_backend: str = "auto"
    max_tokens: int | None = None
    specforge_cmd: str | None = None
    chunked_prefill_size: int | None = None
    gpu: str | None = None
    num_sms: int | None = None
    sglang_cmd: str | list[str] | None = None  # an SGLang server command line
    specforge_config: str | None = None  # a SpecForge 0.2.0 run.yaml
    sglang_precompile: bool | None = None  # also plan SGLang's own precompile (default: on for server inputs)
    keys_only: bool = False  # plan the keys and their m ranges without the kernel model (warm then sweeps)
