"""SGLang's own JIT modules as data (one data file per loader family, dgprecompile/jit_families.py): which
modules each modelled sglang release builds on a server's path, with which template arguments, under which
naming scheme. The family's naming class (keys/) computes the runtime's directory names from these facts and the
installed files.

A module of the data file is built when every ``when:`` condition holds on the path's facts
(:meth:`dgprecompile.jit_families.ServerPath.facts`): ``fact: value`` (equal), ``fact: [a, b]`` (one of them),
``fact: {not: value}`` or ``{not: [a, b]}``. In ``args`` and ``template`` a string ``$fact`` is replaced by the
fact's value (template strings render booleans as sglang's make_cpp_args does: true/false).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from dgprecompile.data import load_yaml
from dgprecompile.kernels import JitModule


@dataclass(frozen=True)
class JitVersionSpec:
    """One entry of a family's data file: how one sglang release names, places and builds its modules."""

    sglang: SpecifierSet
    source_root: str
    include_dir: str
    name_prefix: str
    build_dir: str
    cache_dir_env: str
    cache_dir_default: str
    arch_override: str
    arch: tuple[int, int]
    modules: tuple[dict[str, Any], ...]
    source_hash: bool = True  # the module name ends in the sources' hash (0.5.14 on; 0.5.9 has none)
    raw: tuple[tuple[str, Any], ...] = ()
    build_requires: tuple[str, ...] = ()  # what its JIT builds with beside sglang (the wheel's own pins)
    build_seconds: float = 45.0  # one module's build (MAX_JOBS=1), measured: warm hands the costliest work out first

    @property
    def arch_name(self) -> str:
        return f"{self.arch[0]}.{self.arch[1]}"

    def install_command(self, sglang_version: str) -> str:
        """What to install so that this sglang can build its JIT modules here."""
        return " ".join(["pip install", f"sglang=={sglang_version}", *self.build_requires])


ReleaseSpec = JitVersionSpec

_FIELDS = ("source_root", "include_dir", "name_prefix", "build_dir", "cache_dir_env", "cache_dir_default",
           "arch_override")


@lru_cache(maxsize=4)
def _load(data_file: str = "sglang_jit.yaml") -> tuple[JitVersionSpec, ...]:
    data = load_yaml(data_file)
    return tuple(JitVersionSpec(SpecifierSet(v["sglang"]), *(v[f] for f in _FIELDS), tuple(v["arch"]),
                                tuple(v["modules"]), bool(v.get("source_hash", True)),
                                tuple((k, x) for k, x in v.items() if k != "modules"),
                                tuple(v.get("build_requires", ())), float(v.get("build_seconds", 45.0)))
                 for v in data["versions"])


def _default_family():
    from dgprecompile.jit_families import FAMILIES

    return next(iter(FAMILIES.values()))


def release_spec(family, sglang_version: str | None) -> JitVersionSpec | None:
    """The modelled naming/build scheme for an exact sglang version, or None (not modelled)."""
    if not sglang_version:
        return None
    try:
        parsed = Version(sglang_version)
    except InvalidVersion:
        return None
    return next((s for s in _load(family.data_file) if parsed in s.sglang), None)


def spec_for(sglang_version: str | None) -> JitVersionSpec | None:
    """release_spec for the family of ``sglang_version`` (None when it has none or is not modelled)."""
    from dgprecompile.jit_families import family_for

    family = family_for(sglang_version)
    return release_spec(family, sglang_version) if family else None


def modelled_versions(family=None) -> list[str]:
    """The exact sglang releases a family's data file models (its '==X' entries)."""
    family = family or _default_family()
    return [str(spec).lstrip("=") for s in _load(family.data_file) for spec in s.sglang if spec.operator == "=="]


modeled_versions = modelled_versions


def _holds(condition: Any, value: Any) -> bool:
    if isinstance(condition, dict) and set(condition) == {"not"}:
        return not _holds(condition["not"], value)
    if isinstance(condition, list):
        return value in condition
    return value == condition


def _subst(value: Any, facts: dict[str, Any]) -> Any:
    if isinstance(value, str) and value.startswith("$"):
        name = value[1:]
        if name not in facts:
            raise KeyError(name)
        return facts[name]
    if isinstance(value, list):
        return [_subst(v, facts) for v in value]
    if isinstance(value, dict):
        return {k: _subst(v, facts) for k, v in value.items()}
    return value


def _render(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _module(family, m: dict[str, Any], facts: dict[str, Any]) -> JitModule:
    return JitModule(m["id"], m["path"], m["python"], m["builder"], tuple(_subst(m.get("args", []), facts)),
                     tuple(_render(t) for t in _subst(m["marker"], facts)),
                     tuple(_render(t) for t in _subst(m["template"], facts)),
                     tuple(m["cuda_files"]), m.get("why", ""), family=family.id,
                     kwargs=tuple(_subst(m.get("kwargs") or {}, facts).items()))


def plan_modules(family, sglang_version: str, path) -> tuple[list[JitModule], list[str]]:
    """The modules the release builds on ``path`` (a ServerPath), in the data file's order, and notes on the
    modules left out for a fact the path lacks."""
    spec = release_spec(family, sglang_version)
    if spec is None:
        return [], []
    facts = path.facts()
    out: list[JitModule] = []
    notes: list[str] = []
    seen: set[str] = set()
    for m in spec.modules:
        when = m.get("when") or {}
        if not all(_holds(cond, facts.get(name)) for name, cond in when.items()):
            continue
        try:
            module = _module(family, m, facts)
        except KeyError as missing:
            notes.append(f"{m['id']}: not planned, the model's config does not give {missing.args[0]}")
            continue
        if module.id not in seen:
            seen.add(module.id)
            out.append(module)
    return out, notes


def modules_for(sglang_version: str | None) -> list[JitModule]:
    """Every module the data file lists for a release, whatever the path (their unsubstituted form is only valid
    for modules without $facts); kept for the GEMM-path planner and tests."""
    from dgprecompile.jit_families import family_for

    family = family_for(sglang_version)
    spec = release_spec(family, sglang_version) if family else None
    if spec is None:
        return []
    return [_module(family, m, {}) for m in spec.modules if "$" not in str(m.get("args")) + str(m["template"])]


def module_requirements(sglang_version: str | None) -> dict[str, dict[str, int]]:
    spec = spec_for(sglang_version)
    return {m["id"]: dict(m.get("requires") or {}) for m in spec.modules} if spec else {}


def _requirements(self) -> dict[str, dict[str, int]]:
    return {m["id"]: dict(m.get("requires") or {}) for m in self.modules}


JitVersionSpec.requirements = _requirements  # type: ignore[attr-defined]

_DTYPES = {"bfloat16": ("torch.bfloat16", "bf16_t", 2), "float16": ("torch.float16", "fp16_t", 2)}
_KV_DTYPES = {"fp8_e4m3": 1, "fp8_e5m2": 1}  # --kv-cache-dtype: bytes per element (auto/bf16: the model's)
# server options the data's when: conditions name, read from the command (dest: default when not given)
PATH_OPTIONS = {"enable_fused_qk_norm_rope": False, "enable_deterministic_inference": False,
                "cuda_graph_tc_compiler": "eager"}


@lru_cache(maxsize=4)
def _model_facts(data_file: str) -> dict[str, dict[str, Any]]:
    data = load_yaml(data_file)
    return dict(data.get("model_facts") or {})


def server_path(model, by_path: dict[str, list], par, options: dict[str, Any], data_file: str = "sglang_jit.yaml"):
    """The ServerPath of a plan: the server's options (``options``: dest -> value as SGLang reads them; absent:
    the release's default) and the model's config.json facts the modules' template arguments use."""
    from dgprecompile.jit_families import ServerPath

    cfg = model.config
    model_type = str(cfg.get("model_type") or "")
    dtype_name = str(options.get("dtype") or "auto")
    if dtype_name == "auto":
        dtype_name = str(cfg.get("torch_dtype") or "bfloat16")
    dtype_name = {"bf16": "bfloat16", "half": "float16", "fp16": "float16"}.get(dtype_name, dtype_name)
    torch_dtype, cpp_dtype, itemsize = _DTYPES.get(dtype_name, (None, None, 2))
    tp = par.tp
    heads = int(cfg.get("num_attention_heads") or 0)
    kv_heads = int(cfg.get("num_key_value_heads") or heads or 0)
    head_dim = int(cfg.get("head_dim") or (int(cfg.get("hidden_size") or 0) // heads if heads else 0))
    kv_dtype = str(options.get("kv_cache_dtype") or "auto")
    facts: dict[str, Any] = dict(_model_facts(data_file).get(model_type) or {})
    facts.update({"torch_dtype": torch_dtype, "cpp_dtype": cpp_dtype, "head_dim": head_dim,
                  "attn_heads_per_rank": heads // tp if heads else 0,
                  "kv_row_bytes": max(1, kv_heads // tp) * head_dim * _KV_DTYPES.get(kv_dtype, itemsize)})
    if "qk_rope_head_dim" in cfg:  # MLA: the rope part of the latent cache
        facts["rope_dim"] = int(cfg["qk_rope_head_dim"])
        facts["mla_nope_bytes"] = int(cfg.get("kv_lora_rank") or 0) * itemsize
        facts["mla_rope_bytes"] = int(cfg["qk_rope_head_dim"]) * itemsize
        if "rope_interleave" in cfg:
            facts["rope_neox"] = not bool(cfg["rope_interleave"])
    else:
        facts["rope_dim"] = int(head_dim * float(cfg.get("partial_rotary_factor") or 1.0))
    scaling = cfg.get("rope_scaling") or {}
    facts["rope_yarn"] = str(scaling.get("rope_type") or scaling.get("type") or "") == "yarn"
    facts["rope_neox_int"] = int(bool(facts.get("rope_neox")))
    facts["rope_yarn_int"] = int(facts["rope_yarn"])
    if "mla_nope_bytes" in facts:
        facts["set_mla_marker"] = f"set_mla_kv_buffer_{facts['mla_nope_bytes']}_{facts['mla_rope_bytes']}"
    # models/utils.py enable_fused_set_kv_buffer: rope stores K/V itself when the pool is bf16; the fused
    # q/k-norm+rope kernel does not (must_save_kv), so the attention backend stores them
    facts["kv_store_fused"] = (kv_dtype in ("auto", "bf16", "bfloat16") and dtype_name == "bfloat16"
                               and not options.get("enable_fused_qk_norm_rope", False))
    quant = (cfg.get("quantization_config") or {}).get("quant_method")
    graphs = not options.get("disable_cuda_graph", False)
    extra = {k: options.get(k, default) for k, default in PATH_OPTIONS.items()}
    chunked = options.get("chunked_prefill_size")
    return ServerPath(model_type=model_type, dtype=dtype_name, quant=quant, tp=tp, ep=par.ep,
                      moe_runner=str(par.moe_runner_backend or "auto"),
                      attention_backend=str(options.get("attention_backend") or "auto"),
                      chunked_prefill=8192 if chunked is None else int(chunked), cuda_graph=graphs,
                      custom_all_reduce=not options.get("disable_custom_all_reduce", False),
                      kv_cache_dtype=kv_dtype, nnodes=int(options.get("nnodes") or 1),
                      gemm_paths=frozenset(by_path), model=tuple(sorted(facts.items())), extra=tuple(extra.items()))
