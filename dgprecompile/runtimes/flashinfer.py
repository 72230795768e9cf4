"""The FlashInfer JIT modules an SGLang server builds at its first forward: planned per module, built GPU-free by
`warm` with FlashInfer's own JitSpec and builder, loaded (never rebuilt) and, under strict, refused by name by the
startup hook.

Facts come from ``data/flashinfer_modules.yaml`` (checked against ``data/schemas/flashinfer-modules.json``): per
sglang release the flashinfer-python it pins and the architectures its all-reduce fusion auto-enables for, per
flashinfer-python the class that builds a module and what it ships prebuilt, per module FlashInfer's spec function,
the call site in sglang and when the server builds it.

* planning: ``plan_items(config, tp, sglang_version, options)`` -- one
  :class:`~dgprecompile.runtimes.items.FlashInferItem` per module the server's path builds, notes for the rest;
* compile: ``warm_argv(item, root, python)`` (``python -m dgprecompile.compile.flashinfer_modules``: the spec's
  ``build()`` with FLASHINFER_CUDA_ARCH_LIST set to the item's arch, no GPU needed);
* cache: area ``flashinfer`` (runtimes/captured.py: the module's directory <version>/<archs>/cached_ops/<name>,
  filed in the index's ``extra``); the index's ``flashinfer`` section holds one record per item
  (cache/item_records.py);
* staleness: ``installed()`` -- the flashinfer-python installed here (metadata only).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache
from typing import Any

from dgprecompile.data import load_yaml
from dgprecompile.errors import DGError
from dgprecompile.host.toolchain import probe_nvcc
from dgprecompile.runtimes.base import PackageKeyed, StrictBy
from dgprecompile.runtimes.captured import not_installed
from dgprecompile.runtimes.items import FlashInferItem

DATA = "flashinfer_modules.yaml"
SCHEMA = "flashinfer-modules"
SPLIT_COMPILE_ENV = "DGPRECOMPILE_FLASHINFER_SPLIT"  # the modules whose units nvcc splits (build_env)


@dataclass(frozen=True)
class FlashInferModules(PackageKeyed):
    id: str = FlashInferItem.RUNTIME
    label: str = "FlashInfer JIT modules"
    area: str = "flashinfer"
    kind: str = FlashInferItem.kind
    section: str = FlashInferItem.section  # the index section of its records
    # -- staleness: the flashinfer-python its modules' directory holds (runtimes/base.py PackageKeyed) --
    package: str = "flashinfer-python"
    record_key: str = "flashinfer"
    key_why: str = "its module directory holds the version"
    warm_module: str = "dgprecompile.compile.flashinfer_modules"
    areas: tuple[str, ...] = ("flashinfer",)  # where its builds land
    imports: tuple[str, ...] = ("flashinfer-python", "apache-tvm-ffi", "ninja")
    live: tuple[str, ...] = ()
    needs_gpu: str | None = None  # FlashInfer's build asks no GPU when the target arch is given
    parts: int = 1  # one subprocess an item: FlashInfer's own ninja runs its sources side by side (MAX_JOBS)

    @property
    def strict_by(self) -> StrictBy:
        """The startup hook loads a built module without building and refuses a missing one (runtimes/captured.py
        FlashInfer family: FLASHINFER_DISABLE_JIT would also refuse loading a built module)."""
        return StrictBy.HOOK

    def data(self) -> dict[str, Any]:
        return _document()

    # -- planning --
    def plan_items(self, config: dict, *, tp: int, sglang_version: str | None,
                   options: dict[str, Any] | None = None,
                   fused_shared_experts: int = 0) -> tuple[list[FlashInferItem], list[str]]:
        """The modules the server's path builds (its config.json, tensor-parallel size, release, options, the shared
        experts planning fused into the routed MoE), and notes saying what was left out and why."""
        doc = self.data()
        release = doc["releases"].get(sglang_version or "")
        if release is None:
            return [], ([f"{self.label}: not planned: sglang {sglang_version}'s source was not read for them "
                         f"(data/flashinfer_modules.yaml reads {release_span(doc)})"] if sglang_version else [])
        facts = path_facts(config, tp, doc["fusion_architectures"][release["fusion"]], options or {}, release,
                           fused_shared_experts)
        prebuilt = doc["flashinfer"][release["flashinfer"]].get("prebuilt", {})
        items, notes = [], []
        for name, m in doc["modules"].items():
            if sglang_version in m.get("absent", {}):
                notes.append(f"{self.label}: {name}: not used by sglang {sglang_version} ({m['absent'][sglang_version]})")
                continue
            why_not = facts.get(m["when"])
            if why_not:
                notes.append(f"{self.label}: {name}: not built by this server ({why_not})")
                continue
            if name in prebuilt:
                notes.append(f"{self.label}: {name}: nothing to build: flashinfer-python {release['flashinfer']} "
                             f"ships it prebuilt ({prebuilt[name]})")
                continue
            items.append(FlashInferItem(name, m["spec"], release["flashinfer"], doc["arch"],
                                        m["releases"].get(sglang_version, release["where"])))
        if items:
            notes.append(f"{self.label}: {len(items)} planned for flashinfer-python {release['flashinfer']} "
                         f"(sm_{doc['arch'].replace('.', '')}), built GPU-free with FlashInfer's own builder")
        return items, notes

    def entry_of(self, item: FlashInferItem) -> str:
        """The item's directory under the area, as FlashInfer names it (its warms run side by side: each files its
        own entry; compile/recorded_items.py)."""
        return item.entry

    def warm_argv(self, item: FlashInferItem, cache_dir: str, python: str) -> list[str]:
        return [python, "-m", self.warm_module, "--item", item.id, "--spec", item.spec, "--module", item.module,
                "--flashinfer", item.flashinfer, "--arch", item.arch, "--cache-dir", str(cache_dir)]

    def missing(self) -> str | None:
        """What to install so that the warm can run here."""
        return not_installed(self.imports)

    def release_problem(self, items: list[FlashInferItem]) -> str | None:
        """What to install where the flashinfer-python here is not the one the plan's sglang pins (its version is
        part of every module's directory: another release's modules are not the job's)."""
        wanted = sorted({it.flashinfer for it in items})
        here = (self.installed() or {}).get("flashinfer")
        if here not in wanted or len(wanted) > 1:
            return (f"install flashinfer-python=={wanted[0]} (the job's sglang pins it; here: "
                    f"{here or 'not installed'})")
        return None

    def build_env(self, items: list[FlashInferItem], jobs: int, cuda_home: str | None) -> dict[str, str]:
        """What FlashInfer's builder is told: the target archs (no GPU is asked), its ninja's parallelism, and the
        toolkit its nvcc and link come from."""
        env = {"FLASHINFER_CUDA_ARCH_LIST": " ".join(sorted({it.arch for it in items})), "MAX_JOBS": str(jobs)}
        if cuda_home:
            env["CUDA_HOME"] = cuda_home
        # the nvcc FlashInfer's ninja runs: the toolkit given, else the user's CUDA_HOME (warm passes none then)
        home = cuda_home or os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
        nvcc = os.path.join(home, "bin", "nvcc") if home else None
        try:
            release = probe_nvcc(nvcc).release if nvcc and os.path.isfile(nvcc) else None
        except DGError:  # an nvcc that does not say its release: nothing is split
            release = None
        split = self.split_compiled(items, release) if release else []
        if split:  # compile/flashinfer_modules.py adds nvcc's -split-compile=0 to these modules' units
            env[SPLIT_COMPILE_ENV] = " ".join(split)
        return env

    def split_compiled(self, items: list[FlashInferItem], nvcc_release: tuple[int, int]) -> list[str]:
        """The modules whose units nvcc splits (-split-compile=0: the unit's optimisation and ptxas on every core):
        those the data file lists for this flashinfer-python and nvcc release, where both builds gave the same
        SASS. It shortens the longest compile a server plan has without changing a kernel."""
        release = f"{nvcc_release[0]}.{nvcc_release[1]}"
        modules = self.data()["modules"]
        return sorted({it.module for it in items
                       if release in modules.get(it.module, {}).get("split_compile", {}).get(it.flashinfer, ())})

    def covered(self, record: dict[str, Any]) -> str:
        return f"{', '.join(record['entries'])} (flashinfer-python {record.get('flashinfer')}, {record.get('arch')})"


FUSION_OFF_BY = ("enforce_disable_flashinfer_allreduce_fusion", "enable_deterministic_inference")


def path_facts(config: dict, tp: int, fusion_architectures: list[str], options: dict[str, Any],
               release: dict[str, Any] | None = None, fused_shared_experts: int = 0) -> dict[str, str]:
    """Per ``when`` of the data file: why this server does not build such a module ('' where it does). ``release``:
    the data file's facts of the sglang release (which switches turn the fusion off, the routing's extra limits)."""
    release = release or {}
    arch = (config.get("architectures") or ["?"])[0]
    given = options.get("flashinfer_allreduce_fusion_backend")  # the command's own choice wins over the auto rule
    if given is None and options.get("enable_flashinfer_allreduce_fusion"):
        given = "auto"  # 0.5.9-0.5.13's switch; from 0.5.14 deprecated to auto (server_args.py:2731-2740)
    auto = (given is None and tp > 1 and arch in fusion_architectures and not options.get("enable_dp_attention")
            and int(options.get("nnodes") or 1) == 1 and options.get("moe_a2a_backend") in (None, "none")
            and not (release.get("fusion_off_with_attn_cp") and int(options.get("attn_cp_size") or 1) > 1))
    off = [s for s in release.get("fusion_off_by", FUSION_OFF_BY) if options.get(s)]  # wins over auto and given
    fusion = ("" if (given in ("auto", "trtllm") or auto) and not off
              else f"the all-reduce fusion is off: tp {tp}, {arch}"
              + (f", backend {given} (not trtllm on sm_90)" if given not in (None, "auto", "trtllm") else "")
              + "".join(f", --{s.replace('_', '-')}" for s in off))
    sampling = options.get("sampling_backend")
    sampling_off = ("" if sampling in (None, "flashinfer") else f"--sampling-backend {sampling}")
    if options.get("enable_deterministic_inference") and sampling != "ascend":
        sampling_off = "--enable-deterministic-inference: sampling backend pytorch"
    routing = grouped_topk_problem(config, release.get("routing_needs_renormalize", False))
    if not routing and release.get("routing_needs_no_fused_shared") and fused_shared_experts:
        routing = (f"{fused_shared_experts} shared expert(s) fused into the routed MoE: its fused routing asks "
                   "num_fused_shared_experts == 0")
    return {"always": sampling_off, "allreduce_fusion": fusion, "grouped_topk": routing}


def grouped_topk_problem(config: dict, needs_renormalize: bool = False) -> str:
    """Why FlashInfer's fused DeepSeek routing is not used for this config ('' where it is: layers/moe/topk.py's
    limits on the routed experts; from 0.5.23 also renormalize, the model's norm_topk_prob)."""
    experts, groups = config.get("n_routed_experts"), config.get("n_group")
    topk, topk_group = config.get("num_experts_per_tok"), config.get("topk_group")
    if not all(isinstance(v, int) and v > 0 for v in (experts, groups, topk, topk_group)):
        return "no grouped top-k in config.json"
    per_group = experts // groups
    fits = (experts & (experts - 1) == 0 and topk <= 8 and topk_group <= groups and topk_group * groups >= topk
            and ((per_group <= 32 and per_group * topk_group <= 128) if groups > 1 else experts <= 384))
    if not fits:
        return f"{experts} experts in {groups} groups, top-{topk}: outside its limits"
    if needs_renormalize and not config.get("norm_topk_prob"):
        return "norm_topk_prob is not set: its fused routing always renormalizes"
    return ""


def release_span(doc: dict[str, Any]) -> str:
    """The sglang releases the data file reads, as ranges of consecutive patch releases ('0.5.14-0.5.23')."""
    def key(v: str) -> tuple[int, ...]:
        return tuple(int(p) for p in v.split("."))

    runs: list[list[str]] = []
    for v in sorted(doc["releases"], key=key):
        if runs and key(runs[-1][-1])[:2] == key(v)[:2] and key(runs[-1][-1])[2] + 1 == key(v)[2]:
            runs[-1].append(v)
        else:
            runs.append([v])
    return ", ".join(r[0] if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


@cache
def _document() -> dict[str, Any]:
    """data/flashinfer_modules.yaml, checked against its schema once per process."""
    from dgprecompile import schemas

    doc = load_yaml(DATA)
    schemas.check(doc, SCHEMA, DATA, hint=f"fix {DATA} (data/schemas/{SCHEMA}.json says what each field holds)")
    return doc


FLASHINFER_MODULES = FlashInferModules()
