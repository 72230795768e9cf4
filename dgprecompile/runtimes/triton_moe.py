"""SGLang's Triton kernels planned and warmed ahead of time (their entries live in the captured Triton family's area,
runtimes/captured.py): the fused MoE kernel (:data:`TRITON_MOE`) and the model path's others beside it, the
vocab-parallel embedding, the router, the MoE top-k sum, the small-numel MoE align and the deep_gemm MoE runner's
dispatch index (:data:`TRITON_PATH`)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from dgprecompile.data import load_yaml
from dgprecompile.runtimes.base import PackageKeyed, StrictBy
from dgprecompile.runtimes.captured import not_installed, versions
from dgprecompile.runtimes.items import TritonMoeItem, TritonPathItem

# (local experts, top-k, tokens per forward, hidden size, the grouped GEMMs' k) of a plan's MoE layers on the deep_gemm
# runner (planning/plan.py deep_gemm_moe): what its Triton path's items are planned from
DeepGemmMoe = tuple[int, int, int, int, tuple[int, ...]]


@dataclass(frozen=True)
class TritonMoeFamily:
    """SGLang's Triton fused MoE kernel (``fused_moe_kernel``), the one Triton kernel planned and warmed ahead of
    time: every fact the stages need, in one object (no stage names it).

    * planning: ``plan_items(shapes, ...)`` -- one :class:`~dgprecompile.runtimes.items.TritonMoeItem` per distinct MoE
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
    kind: str = "triton-moe"  # the key of each stage's table that handles its items (runtimes/base.py)
    # `verify --live` drives none of its own: its kernels run inside the masked MoE layers' calls only where the
    # plan's MoE runner is Triton, and a new Triton entry is counted there (launch/live.py)
    live: tuple[str, ...] = ()

    @property
    def strict_by(self) -> StrictBy:
        """Its entries are Triton's: the startup hook wraps Triton's compile (runtimes/captured.py) and refuses it."""
        return StrictBy.HOOK

    def data(self) -> dict:
        return _yaml_data(self.data_file)

    @property
    def libcuda_dir(self) -> str:
        """The folder of the job's libcuda.so.1 that Triton 3.8's ``cuda_utils`` key is built with and launch points
        TRITON_LIBCUDA_PATH at (data file ``host``)."""
        return str(self.data()["host"]["libcuda_dir"])

    def job_libcuda_dir(self, env: Mapping[str, str], folder: str | None = None) -> tuple[str, str]:
        """The libcuda folder a job's Triton 3.8 keys ``cuda_utils`` with under launch, and whose choice it is -- the
        one rule warm's key (compile/triton_host.py) and launch's environment (launch/environment.py) both follow:
        ``(value, "yours")``, the job's own TRITON_LIBCUDA_PATH (an empty one is Triton's "unset"); else
        ``(folder, "launch")``, the data file's folder (or ``folder``), which launch sets on every machine, whether
        its driver lies there or elsewhere (/usr/local/nvidia/lib64 in many containers): the key is then the same
        wherever the job runs, and the module loads the driver through the loader's own search, since the folder
        is no part of the built module (Triton passes it to the linker only: ``-L``)."""
        if env.get("TRITON_LIBCUDA_PATH"):
            return env["TRITON_LIBCUDA_PATH"], "yours"
        return folder or self.libcuda_dir, "launch"

    def release(self, version: str | None) -> dict | None:
        """The data file's entry for ``version`` (an exact sglang release), with ``version`` added, or None."""
        if not version:
            return None
        try:
            v = Version(version)
        except InvalidVersion:
            return None
        row = next((r for r in self.data()["releases"] if v in SpecifierSet(r["sglang"], prereleases=True)), None)
        return None if row is None else {**row, "version": str(v)}

    def read_ranges(self) -> str:
        """The releases whose fused MoE path was read, adjacent rows joined (">=0.5.9,<0.5.24")."""
        spans: list[list[str]] = []
        for r in self.data()["releases"]:
            lo, hi = (part.strip().lstrip("<>=") for part in r["sglang"].split(","))  # ">=A,<B", as each row is
            if spans and spans[-1][1] == lo:
                spans[-1][1] = hi
            else:
                spans.append([lo, hi])
        return ", ".join(f">={lo},<{hi}" for lo, hi in spans)

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
        if not shapes:
            return [], []
        where = ", ".join(f"{s.layer} (x{s.count})" for s in shapes)
        bad = self.quantization_problem(config)
        if bad is not None:
            return [], [f"{where}: {self.label} for {bad}: not planned (the warm models block-FP8 experts)"]
        rel = self.release(sglang_version)
        if rel is None:
            read = self.read_ranges()
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
        """The largest m the exact release's tuned configs name for the shape on the device (0: none ships, SGLang's
        default config runs for every m; data/triton_moe_tuned.yaml, one table per release read)."""
        tuned = _yaml_data("triton_moe_tuned.yaml")["releases"].get(str((rel or {}).get("version")), {})
        return int(tuned.get(f"E={shape.experts},N={shape.intermediate},device_name={device_name.replace(' ', '_')}",
                             0))

    def host_modules_note(self, planned: bool) -> str:
        """What `plan` says of Triton's host modules (compile/triton_host.py): built by warm for the planned
        kernels, or left to one `launch --capture` run, and why."""
        if planned:
            return (f"Triton's host modules (cuda_utils, one __triton_launcher per {self.kernel} signature): `warm` "
                    "builds them GPU-free with Triton's own build (the C compiler and Python headers here, a libcuda "
                    "stand-in to link; the driver's libcuda.so.1 at load). Their key holds the platform and their "
                    "file name the Python (EXT_SUFFIX): warm with the job's Python on its platform. Triton 3.7 and "
                    "3.8 build cuda_utils only, 3.8's keyed also by Triton's install path and the libcuda folder "
                    f"(TRITON_LIBCUDA_PATH, else {self.libcuda_dir}, where launch points it): warm in the job's "
                    "image. Other Triton kernels' launchers are left to one `launch --capture` run")
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
        """What to install so that the warm can run here (runtimes/captured.py not_installed)."""
        return not_installed(self.imports)

    # -- staleness --
    def installed(self) -> dict | None:
        """This machine's values of what the record holds (None: triton is not installed), from metadata only."""
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
    return load_yaml(name)


def gpu_device(gpu: str | None) -> dict:
    """The device name and compute capability of ``--gpu`` (its row of data/gpus.yaml; None: the default GPU)."""
    table = _yaml_data("gpus.yaml")
    return table["gpus"][(gpu or table["default"]).lower()]


TRITON_MOE = TritonMoeFamily(
    TritonMoeItem.RUNTIME, "Triton fused MoE", "triton", "triton-moe", "dgprecompile.compile.triton_moe",
    ("triton", "sglang"), ("torch", "triton", "sglang"), "triton_moe.yaml",
    # triton/runtime/cache.py triton_key: libtriton.so's bytes; the CUDA backend's hash: its ptxas's version
    ("triton/_C/libtriton.so", "triton/backends/nvidia/bin/ptxas"), ("TRITON_PTXAS_PATH",))


@dataclass(frozen=True)
class TritonPathKernels(PackageKeyed):
    """SGLang's model-path Triton kernels beside ``fused_moe_kernel`` (data/triton_path.yaml): the vocab-parallel
    embedding (``_vocab_parallel_embedding_kernel``) and the router (``_router_triton_kernel``), which releases from
    0.5.16 run as Triton where earlier ones ran sgl-kernel AOT ops, and the Triton MoE's top-k sum
    (``_moe_sum_reduce_kernel``, m <= 32 on sm_90 and up) and its align for at most 64 top-k ids over more than 63
    local experts (``_moe_align_small_numel_kernel``), and, under --moe-runner-backend deep_gemm, that runner's
    dispatch index (``fused_moe_dispatch_index_triton_kernel``), its compact layout's padding
    (``_pad_expert_counts_kernel``) and scatter (``_fwd_kernel_ep_scatter_1``, ``_fwd_kernel_ep_scatter_2``) and
    its post-permute (``post_reorder_deepgemm_triton_kernel``, per GPU: its block size follows the SMs). One
    :class:`~dgprecompile.runtimes.items.TritonPathItem` per kernel instance family of a rank, warmed GPU-free as the
    fused MoE items are (compile/triton_path.py: SGLang's own wrapper on meta tensors, Triton's own JIT with a
    compile-only driver), its entries in Triton's area, recorded per item (cache/item_records.py)."""

    id: str = TritonPathItem.RUNTIME
    label: str = "SGLang's model-path Triton kernels"
    area: str = "triton"
    kind: str = TritonPathItem.kind
    warm_module: str = "dgprecompile.compile.triton_path"
    areas: tuple[str, ...] = ("triton",)
    imports: tuple[str, ...] = ("torch", "triton", "sglang")
    live: tuple[str, ...] = ()
    needs_gpu: str = ""  # GPU-free: a compile-only driver names the target
    section: str = TritonPathItem.section
    parts: int = 1
    package: str = "triton"
    record_key: str = "triton"
    key_why: str = "Triton's cache key holds its own version"

    @property
    def strict_by(self) -> StrictBy:
        """Its entries are Triton's: the startup hook wraps Triton's compile and refuses a miss."""
        return StrictBy.HOOK

    def data(self) -> dict[str, Any]:
        return _path_document()

    def kernel(self, name: str) -> dict[str, Any]:
        return self.data()["kernels"][name]

    def ms(self, name: str) -> tuple[int, ...]:
        """The m a kernel's items are planned at (``ms: numel_max``: per item, from its top-k: _align_items)."""
        ms = self.kernel(name)["ms"]
        if ms == "numel_max":
            raise ValueError(f"{name}'s m follow each item's top-k (data/triton_path.yaml numel_max)")
        return tuple(self.data()["m_classes"] if ms == "m_classes" else ms)

    def plan_items(self, config: dict, *, tp: int, sglang_version: str | None, gpu: str | None,
                   triton_moe: Sequence[TritonMoeItem] = (), deep_gemm_moe: Sequence[DeepGemmMoe] = ()
                   ) -> tuple[list[TritonPathItem], list[str]]:
        """The items of a plan (the model's config, its tensor-parallel size, the exact release, the GPU, the plan's
        Triton fused MoE items, the :data:`DeepGemmMoe` of its MoE layers on the deep_gemm runner) and notes saying
        what was left out and why. Nothing is planned for a release whose model path was not read."""
        capability = int(gpu_device(gpu)["capability"])
        items: list[TritonPathItem] = []
        notes: list[str] = []
        for name, k in self.data()["kernels"].items():
            if (k["when"] in DEEP_GEMM_PLANNERS or k["when"] == "deep-gemm-post") and not deep_gemm_moe:
                continue  # no MoE layer on the deep_gemm runner: nothing of its path runs, no note
            where = k["releases"].get(sglang_version or "")
            if where is None:
                if _at_least(sglang_version, str(k["since"])):  # older releases ship no such kernel: no note
                    notes.append(f"{self.label}: {k['kernel']} not planned: sglang {sglang_version}'s model path "
                                 f"was not read for it (read: {', '.join(k['releases'])})")
                continue
            if k["when"] == "deep-gemm-post":  # its block size follows the GPU's SMs
                made, why = _post_reorder_items(name, k, deep_gemm_moe, gpu_device(gpu), where)
            elif k["when"] in DEEP_GEMM_PLANNERS:
                made, why = DEEP_GEMM_PLANNERS[k["when"]](name, k, deep_gemm_moe, capability, where)
            elif k["when"] in MOE_PLANNERS:
                made, why = MOE_PLANNERS[k["when"]](self, name, k, config, triton_moe, capability, where)
            else:
                make = _embedding_item if k["when"] == "tp" else _router_item
                item, why = make(self, name, k, config, tp, capability, where)
                made = [] if item is None else [item]
            items += made
            if why:
                notes.append(f"{self.label}: {k['kernel']}: {why}")
        if items:
            notes.append(f"{self.label}: {len(items)} item(s), warmed GPU-free for sm_{capability} with the installed "
                         "sglang and Triton")
        return items, notes

    def warm_argv(self, item: TritonPathItem, cache_dir: str, python: str) -> list[str]:
        return [python, "-m", self.warm_module, "--item", item.id, "--kernel", item.kernel, "--params",
                ",".join(f"{k}={v}" for k, v in item.params), "--m", ",".join(map(str, item.ms)),
                "--capability", str(item.capability), "--cache-dir", str(cache_dir)]

    def missing(self) -> str | None:
        """What to install so that the warm can run here (runtimes/captured.py not_installed)."""
        return not_installed(self.imports)

    def release_problem(self, items: list) -> str | None:
        """The kernels are built with whatever Triton is here; their records name it (``stale``)."""
        return None

    def build_env(self, items: list, jobs: int, cuda_home: str | None) -> dict[str, str]:
        return {"CUDA_VISIBLE_DEVICES": ""}

    def covered(self, record: dict[str, Any]) -> str:
        return f"{len(record['entries'])} entries, triton {record.get('triton')}, sm_{record.get('capability')}"


def _embedding_item(runtime: TritonPathKernels, name: str, k: dict, config: dict, tp: int, capability: int,
                    where: str) -> tuple[TritonPathItem | None, str]:
    """The embedding's item: one per model (every rank's shard window is warmed by it), where tp > 1."""
    if tp <= 1:
        return None, "not planned: tp 1 embeds without it (_use_triton_embedding)"
    vocab, hidden = config.get("vocab_size"), config.get("hidden_size")
    if not isinstance(vocab, int) or not isinstance(hidden, int):
        return None, "not planned: config.json has no vocab_size or hidden_size"
    dtype = str(config.get("torch_dtype") or "bfloat16")
    params = (("vocab", vocab), ("hidden", hidden), ("tp", tp), ("dtype", dtype), ("ids", "+".join(k["ids_dtypes"])))
    return TritonPathItem(name, params, runtime.ms(name), capability, where), ""


def _router_item(runtime: TritonPathKernels, name: str, k: dict, config: dict, tp: int, capability: int,
                 where: str) -> tuple[TritonPathItem | None, str]:
    """The router's item: one per model whose architecture's TopK branch to the kernel was read."""
    archs = [a for a in config.get("architectures") or [] if a in k["architectures"]]
    if not archs:
        shown = ", ".join(config.get("architectures") or []) or "no architecture"
        return None, f"not planned for {shown}: its TopK branch to the kernel was not read"
    call = k["architectures"][archs[0]]
    try:
        params = (("experts", int(config[call["experts"]])), ("topk", int(config[call["topk"]])),
                  ("scoring", call["scoring_func"]), ("renormalize", bool(config[call["renormalize"]])),
                  ("scores", call["scores_dtype"]))
    except KeyError as exc:
        return None, f"not planned: config.json has no {exc.args[0]}"
    return TritonPathItem(name, params, runtime.ms(name), capability, where), ""


def _sum_reduce_items(runtime: TritonPathKernels, name: str, k: dict, config: dict, triton_moe: Sequence[TritonMoeItem],
                      capability: int, where: str) -> tuple[list[TritonPathItem], str]:
    """The MoE top-k sum's items: one per top-k, hidden and scale of the plan's Triton fused MoE items, on a GPU whose
    path runs it (data/triton_path.yaml ``moe_sum_reduce``: where it runs instead of the other sums)."""
    if not triton_moe:
        return [], ""  # no MoE layer on Triton fused MoE: its combine never runs
    if capability < int(k["min_capability"]):
        return [], (f"not planned for sm_{capability}: below sm_{k['min_capability']} SGLang sums m <= {k['m_max']} "
                    "with its torch.compile'd moe_sum_reduce (an inductor item)")
    scale = float(config.get("routed_scaling_factor") or 1.0)
    dtype = str(config.get("torch_dtype") or "bfloat16")
    ms = tuple(m for m in runtime.ms(name) if m <= int(k["m_max"]))
    out: dict[str, TritonPathItem] = {}
    for moe in triton_moe:
        if moe.topk in k.get("skip_topk_at_unit_scale", ()) and scale == 1.0:
            continue
        params = (("topk", moe.topk), ("hidden", moe.hidden), ("dtype", dtype), ("scale", scale))
        item = TritonPathItem(name, params, ms, capability, where)
        out.setdefault(item.id, item)
    why = "" if out else f"not planned: top-k {sorted({m.topk for m in triton_moe})} at scale 1.0 takes its own sum"
    return list(out.values()), why


def _align_items(runtime: TritonPathKernels, name: str, k: dict, config: dict, triton_moe: Sequence[TritonMoeItem],
                 capability: int, where: str) -> tuple[list[TritonPathItem], str]:
    """The small-numel MoE align's items: one per Triton fused MoE item whose local expert count passes the gate
    (data/triton_path.yaml ``moe_align_small_numel``: experts + 1 > ``buckets_above``), every m whose top-k ids fit
    ``numel_max`` (m * topk <= numel_max; each m its own NP and numel), for the item's device: SGLang picks the
    config's BLOCK_SIZE_M (the align's block_size and buffer sizes) from the device's tuned file, so warm asks its
    config for that device as the fused MoE warm does."""
    if not triton_moe:
        return [], ""
    dtype = str(config.get("torch_dtype") or "bfloat16")
    out: dict[str, TritonPathItem] = {}
    for moe in triton_moe:
        ms = tuple(range(1, min(int(k["numel_max"]) // moe.topk, moe.m_max) + 1))
        if moe.experts + 1 <= int(k["buckets_above"]) or not ms:
            continue
        params = (("experts", moe.experts), ("hidden", moe.hidden), ("intermediate", moe.intermediate),
                  ("topk", moe.topk), ("dtype", dtype), ("device", moe.device_name.replace(" ", "_")))
        item = TritonPathItem(name, params, ms, capability, where)
        out.setdefault(item.id, item)
    why = "" if out else (f"not planned: {sorted({m.experts for m in triton_moe})} local experts (top-k "
                          f"{sorted({m.topk for m in triton_moe})}) take sgl-kernel's align: its gate needs local "
                          f"experts + 1 above {k['buckets_above']} and m * top-k <= {k['numel_max']}")
    return list(out.values()), why


MOE_PLANNERS = {"triton-moe": _sum_reduce_items, "triton-moe-align": _align_items}


def dispatch_key(m: int, experts: int, topk: int, single_block_max: int) -> tuple[int, int]:
    """What of m the deep_gemm runner's dispatch index's cache key holds (data/triton_path.yaml
    ``moe_dispatch_index``): Triton 3.8.0's int class of m * topk (1, 16: % 16 == 0, 17: other) and SGLang's
    BLOCK_SIZE (ep_moe_kernels.py fused_moe_dispatch_index: next_power_of_2(max(m * topk, experts)) up to
    ``single_block_max``; 0 for the one size past it, where ZERO_INIT is False too)."""
    n = m * topk
    widest = max(n, experts)
    return (1 if n == 1 else 16 if n % 16 == 0 else 17,
            1 << (widest - 1).bit_length() if widest <= single_block_max else 0)


def dispatch_ms(experts: int, topk: int, m_max: int, single_block_max: int) -> tuple[int, ...]:
    """The m the deep_gemm runner's dispatch index is planned at: the first m of each :func:`dispatch_key`, over m
    up to 16 past the last one-block m (the class then repeats with m mod 16), at most ``m_max``."""
    first: dict[tuple[int, int], int] = {}
    for m in range(1, min(m_max, -(-(single_block_max + 1) // topk) + 16) + 1):
        first.setdefault(dispatch_key(m, experts, topk, single_block_max), m)
    return tuple(sorted(first.values()))


def _dispatch_items(name: str, k: dict, deep_gemm_moe: Sequence[DeepGemmMoe], capability: int,
                    where: str) -> tuple[list[TritonPathItem], str]:
    """The deep_gemm runner's dispatch index: one item per (local experts, top-k) of the plan's MoE layers on that
    runner, both layouts at every m of :func:`dispatch_ms` (the device picks the layout: data/triton_path.yaml)."""
    out: dict[str, TritonPathItem] = {}
    for experts, topk, m_max, *_ in deep_gemm_moe:
        params = (("experts", experts), ("topk", topk), ("layouts", "+".join(k["layouts"])))
        item = TritonPathItem(name, params, dispatch_ms(experts, topk, m_max, int(k["single_block_max"])),
                              capability, where)
        out.setdefault(item.id, item)
    return list(out.values()), ""


def _compact_items(name: str, k: dict, deep_gemm_moe: Sequence[DeepGemmMoe], capability: int,
                   where: str) -> tuple[list[TritonPathItem], str]:
    """The deep_gemm runner's compact-layout kernels (its expert-count padding and ep_scatter's two kernels): one item
    per (local experts, top-k) of the plan's MoE layers on that runner (and the hidden size where the kernel's key
    holds it, ``by_hidden``), with the row alignment the runner pads to on the plan's GPU (data/triton_path.yaml
    ``block_e`` by capability, the same at every m there); its m the data's (``m_classes``: one per Triton int class,
    at most the plan's tokens per forward)."""
    block_e = (k.get("block_e") or {}).get(str(capability))
    if block_e is None:
        return [], (f"not planned for sm_{capability}: the runner's row alignment there follows the per-expert m "
                    f"(DeepGEMM's contiguous-layout alignment), read for sm_{', sm_'.join(k.get('block_e') or {})}")
    listed = _path_document()["m_classes"] if k["ms"] == "m_classes" else k["ms"]
    out: dict[str, TritonPathItem] = {}
    for experts, topk, m_max, hidden, ks in deep_gemm_moe:
        if k.get("by_scale_widths"):  # the key holds the scales' widths, not the experts or the top-k
            params = (("widths", "+".join(str(w // 128) for w in ks)), ("block_e", int(block_e)))
        else:
            shape = (("hidden", hidden),) if k.get("by_hidden") else ()
            params = (("experts", experts), ("topk", topk), *shape, ("block_e", int(block_e)))
        item = TritonPathItem(name, params, tuple(m for m in listed if m <= m_max), capability, where)
        out.setdefault(item.id, item)
    return list(out.values()), ""


def post_reorder_key(m: int, hidden: int, sms: int, threads_per_sm: int) -> tuple[int, int]:
    """What of m the deep_gemm runner's post-permute kernel's cache key holds (data/triton_path.yaml
    ``post_reorder``): Triton 3.8.0's int class of m (num_tokens: 1, 16: % 16 == 0, 17: other) and SGLang's
    BLOCK_SIZE (0.5.23 ep_moe_kernels.py _get_launch_config_2d(device, m, hidden): halved from 1024 to 512 where
    m * cdiv(hidden, 512) blocks fit sms * threads_per_sm // 1024, the device's properties; SGLang's arithmetic done
    here, held to its own launch under the strict hook by tests/test_triton_path_deep_gemm.py)."""
    fits = m * -(-hidden // 512) <= sms * threads_per_sm // 1024
    return 1 if m == 1 else 16 if m % 16 == 0 else 17, 512 if fits else 1024


def post_reorder_ms(hidden: int, m_max: int, sms: int, threads_per_sm: int) -> tuple[int, ...]:
    """The m the post-permute kernel is planned at: the first m of each :func:`post_reorder_key`, at most ``m_max``
    (BLOCK_SIZE only grows with m: past the last 512-wide m every class shows within 16 more m)."""
    last = sms * threads_per_sm // 1024 // -(-hidden // 512)  # the last m of the 512-wide block (0: none)
    first: dict[tuple[int, int], int] = {}
    for m in range(1, min(m_max, last + 17) + 1):
        first.setdefault(post_reorder_key(m, hidden, sms, threads_per_sm), m)
    return tuple(sorted(first.values()))


def _post_reorder_items(name: str, k: dict, deep_gemm_moe: Sequence[DeepGemmMoe], device: dict,
                        where: str) -> tuple[list[TritonPathItem], str]:
    """The deep_gemm runner's post-permute: one item per (top-k, hidden size) of the plan's MoE layers on that runner
    (the local experts are in no key of it), for the plan's GPU's SMs and threads per SM (data/gpus.yaml: its block
    size), at every m of :func:`post_reorder_ms`."""
    sms, threads = int(device["sms"]), int(device["threads_per_sm"])
    out: dict[str, TritonPathItem] = {}
    for _experts, topk, m_max, hidden, _ks in deep_gemm_moe:
        params = (("topk", topk), ("hidden", hidden), ("sms", sms), ("threads_per_sm", threads))
        item = TritonPathItem(name, params, post_reorder_ms(hidden, m_max, sms, threads),
                              int(device["capability"]), where)
        out.setdefault(item.id, item)
    return list(out.values()), ""


def _masked_items(name: str, k: dict, deep_gemm_moe: Sequence[DeepGemmMoe], capability: int,
                  where: str) -> tuple[list[TritonPathItem], str]:
    """The deep_gemm runner's masked-layout kernels (its input fill, ``fill_gateup_input_triton_kernel``): one item per
    (local experts, top-k, hidden size) of the plan's MoE layers on that runner, on a GPU whose path was read
    (data/triton_path.yaml ``capabilities``: DeepGEMM's UE8M0 scales off there, which picks the kernel's FP8 branch);
    the data's m."""
    if capability not in k["capabilities"]:
        return [], (f"not planned for sm_{capability}: the masked layout's path was read for sm_"
                    f"{', sm_'.join(map(str, k['capabilities']))} (DeepGEMM's UE8M0 scales off)")
    out: dict[str, TritonPathItem] = {}
    for experts, topk, m_max, hidden, _ks in deep_gemm_moe:
        params = (("experts", experts), ("topk", topk), ("hidden", hidden))
        item = TritonPathItem(name, params, tuple(m for m in k["ms"] if m <= m_max), capability, where)
        out.setdefault(item.id, item)
    return list(out.values()), ""


# how the deep_gemm runner's kernels are planned, by their ``when``: from the plan's DeepGemmMoe of its MoE layers on
# that runner
DEEP_GEMM_PLANNERS = {"deep-gemm-moe": _dispatch_items, "deep-gemm-compact": _compact_items,
                      "deep-gemm-masked": _masked_items}


def _at_least(version: str | None, since: str) -> bool:
    try:
        return version is not None and Version(version) >= Version(since)
    except InvalidVersion:
        return False


@cache
def _path_document() -> dict[str, Any]:
    """data/triton_path.yaml, checked against its schema once per process."""
    from dgprecompile import schemas

    doc = load_yaml("triton_path.yaml")
    schemas.check(doc, "triton-path", "triton_path.yaml",
                  hint="fix triton_path.yaml (data/schemas/triton-path.json says what each field holds)")
    return doc


TRITON_PATH = TritonPathKernels()
