"""What the runtimes plan: one small base type (:class:`PlanItem`) and each runtime's own item type.

A plan carries one list of items (``Plan.items``): DeepGEMM's kernels (:class:`KernelSpec`, reached from a GEMM
key: :class:`GemmKey`), SGLang's JIT modules (:class:`JitModule`) and Triton MoE shapes (:class:`TritonMoeItem`).
Each type holds its own runtime's fields, none borrowed from another's; every stage asks the runtime an item names
(``runtime_id``, resolved by ``Plan.runtime_of``) what to do with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import ClassVar


class PlanItem:
    """The base of every planned item: an ``id`` unique in the plan, the manifest ``section`` its type is written
    in, and the runtime that plans, builds and checks it (``runtime_id``: a runtimes.RUNTIMES id; None: the plan's
    DeepGEMM generation, which the plan's profile names, not the kernel)."""

    section: ClassVar[str]
    kind: ClassVar[str]  # the kind of runtime that handles it (runtimes/base.py Runtime.kind)

    @property
    def id(self) -> str:
        raise NotImplementedError

    @property
    def runtime_id(self) -> str | None:
        return None


class KernelType(str, Enum):
    """SGLang's own names for the three FP8 DeepGEMM entry points (deep_gemm_wrapper.DeepGemmKernelType)."""

    GEMM_NT_F8F8BF16 = "GEMM_NT_F8F8BF16"
    GROUPED_GEMM_NT_F8F8BF16_MASKED = "GROUPED_GEMM_NT_F8F8BF16_MASKED"
    GROUPED_GEMM_NT_F8F8BF16_CONTIG = "GROUPED_GEMM_NT_F8F8BF16_CONTIG"

    @property
    def short(self) -> str:
        return {"GEMM_NT_F8F8BF16": "dense", "GROUPED_GEMM_NT_F8F8BF16_MASKED": "masked",
                "GROUPED_GEMM_NT_F8F8BF16_CONTIG": "contig"}[self.value]

    @classmethod
    def parse(cls, text: str) -> KernelType:
        for member in cls:
            if text in (member.value, member.short):
                return member
        raise ValueError(f"unknown kernel type {text!r}")


@dataclass(frozen=True)
class GemmKey:
    """SGLang's precompile key (kernel_type, n, k, num_groups) plus where and how it is called."""

    kernel_type: KernelType
    n: int
    k: int
    num_groups: int
    layers: tuple[str, ...] = field(default=(), compare=False)
    m_min: int = field(default=1, compare=False)
    m_max: int = field(default=1, compare=False)  # largest m the runtime passes (expected_m for masked)

    @property
    def ident(self) -> tuple[str, int, int, int]:
        return (self.kernel_type.value, self.n, self.k, self.num_groups)


# DeepGEMM's C++ JITs' scale-layout kernel, transpose_fp32<TH, BMN, SFK>: launched beside the masked GEMMs, no
# GEMM of its own (heuristics plan it, keys render it, backends launch it, warm costs it at about a second)
TRANSPOSE_FAMILY = "transpose_fp32"


@dataclass(frozen=True)
class KernelSpec(PlanItem):
    """One compiled DeepGEMM kernel: the cache-entry family name plus the values that make it distinct."""

    section: ClassVar[str] = "kernels"
    kind: ClassVar[str] = "deepgemm"
    family: str
    params: tuple[tuple[str, object], ...]

    @property
    def id(self) -> str:
        return self.family + ":" + ".".join(f"{k}{_fmt(v)}" for k, v in self.params)


def _fmt(value: object) -> str:
    if isinstance(value, bool):
        return "t" if value else "f"
    return str(value)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class JitModule(PlanItem):
    """One of SGLang's own JIT modules a server's path builds at first use (dgprecompile/runtimes/jit_loader.py).

    ``marker + template`` are the strings sglang joins into the module's name; ``python:builder(*args, **kwargs)``
    is the installed sglang's own function that builds it; ``family`` the JitFamily id of its loader; ``keys``
    the planned GEMM keys whose layers use it (none for modules off the DeepGEMM paths).
    """

    section: ClassVar[str] = "sglang_jit_modules"
    kind: ClassVar[str] = "sglang-jit"
    name: str  # e.g. per_token_group_quant_8bit_v2 (data/sglang_jit.yaml id)
    path: str  # where on the server's path: dense | masked | model | attention | all_reduce | decode ...
    python: str
    builder: str
    args: tuple[object, ...]
    marker: tuple[str, ...]
    template: tuple[str, ...]
    cuda_files: tuple[str, ...]
    why: str = ""
    keys: tuple[tuple[str, int, int, int], ...] = field(default=(), compare=False)
    family: str = "tvm-ffi"  # manifests written before families existed held only this loader's modules
    kwargs: tuple[tuple[str, object], ...] = field(default=(), hash=False)  # builder keyword arguments

    @property
    def id(self) -> str:
        return f"sglang_jit:{self.name}<{','.join(self.template)}>"

    @property
    def runtime_id(self) -> str:
        return self.family

    def to_dict(self) -> dict[str, object]:
        return {"id": self.id, "name": self.name, "path": self.path, "python": self.python,
                "builder": self.builder, "args": list(self.args), "marker": list(self.marker),
                "template": list(self.template), "cuda_files": list(self.cuda_files), "why": self.why,
                "keys": [list(k) for k in self.keys], "family": self.family,
                **({"kwargs": dict(self.kwargs)} if self.kwargs else {})}

    @classmethod
    def from_dict(cls, d: dict) -> JitModule:
        return cls(str(d["name"]), str(d["path"]), str(d["python"]), str(d["builder"]), tuple(d["args"]),
                   tuple(map(str, d["marker"])), tuple(map(str, d["template"])), tuple(map(str, d["cuda_files"])),
                   str(d.get("why", "")), tuple(tuple(k) for k in d.get("keys", ())), str(d.get("family") or "tvm-ffi"),
                   tuple((d.get("kwargs") or {}).items()))


@dataclass(frozen=True)
class TritonMoeItem(PlanItem):
    """One MoE shape on a rank whose experts run on SGLang's Triton fused MoE (``fused_moe_kernel``): what the
    GPU-free Triton warm (dgprecompile/compile/triton_moe.py) calls SGLang's own fused_experts_impl with, for each
    m of ``m_text`` (decided once in the plan: ``why``): every m in ``m_min..m_max`` up to ``m_bound``, above it one
    m per residue class mod ``m_period`` and ``m_max`` (the kernels above the bound differ only by that residue,
    data/triton_moe.yaml ``m_set``; ``m_bound`` 0: every m). SGLang picks its tuned config by ``device_name`` and
    Triton compiles for ``capability``; all of them are part of the id."""

    section: ClassVar[str] = "triton_moe"
    kind: ClassVar[str] = "triton-moe"
    RUNTIME: ClassVar[str] = "triton-moe"  # runtimes/triton_moe.py TRITON_MOE.id
    experts: int  # local experts on a rank (E of w13/w2)
    global_experts: int  # the model's experts (ep > 1: SGLang filters the others' ids)
    hidden: int
    intermediate: int  # per-expert intermediate size on a rank (w13 is 2x that)
    topk: int
    m_min: int
    m_max: int
    device_name: str
    capability: int
    layers: tuple[str, ...] = field(default=(), compare=False)
    why: str = field(default="", compare=False)  # where the m range comes from (data/triton_moe.yaml)
    m_bound: int = 0  # every m up to it, then one per residue class mod m_period (0: every m up to m_max)
    m_period: int = 0

    @property
    def id(self) -> str:
        bound = f".B{self.m_bound}p{self.m_period}" if self.m_bound else ""
        return (f"triton_moe:E{self.experts}.G{self.global_experts}.H{self.hidden}.I{self.intermediate}."
                f"K{self.topk}.m{self.m_min}-{self.m_max}{bound}.{self.device_name.replace(' ', '_')}"
                f".sm{self.capability}")

    @property
    def runtime_id(self) -> str:
        return self.RUNTIME

    def m_spans(self) -> list[tuple[int, int]]:
        """The planned m as inclusive spans: m_min..B, B+1..B+period (one m per residue class), m_max."""
        top = self.m_bound + self.m_period
        if not self.m_bound or self.m_max <= top:
            return [(self.m_min, self.m_max)]
        spans = [(self.m_min, self.m_bound)] if self.m_min <= self.m_bound else []
        return spans + [(max(self.m_min, self.m_bound + 1), top), (self.m_max, self.m_max)]

    @property
    def m_count(self) -> int:
        return sum(hi - lo + 1 for lo, hi in self.m_spans())

    @property
    def m_text(self) -> str:
        """The planned m as the warm command takes it (``--m``: spans, e.g. ``1-4096,4097-4112,8192``)."""
        return ",".join(f"{lo}-{hi}" if hi > lo else str(lo) for lo, hi in self.m_spans())

    def to_dict(self) -> dict[str, object]:
        return {"id": self.id, "experts": self.experts, "global_experts": self.global_experts, "hidden": self.hidden,
                "intermediate": self.intermediate, "topk": self.topk, "m_min": self.m_min, "m_max": self.m_max,
                "device_name": self.device_name, "capability": self.capability,
                **({"m_bound": self.m_bound, "m_period": self.m_period} if self.m_bound else {}),
                "layers": list(self.layers), "why": self.why}

    @classmethod
    def from_dict(cls, d: dict) -> TritonMoeItem:
        return cls(int(d["experts"]), int(d["global_experts"]), int(d["hidden"]), int(d["intermediate"]),
                   int(d["topk"]), int(d["m_min"]), int(d["m_max"]), str(d["device_name"]), int(d["capability"]),
                   tuple(map(str, d.get("layers", ()))), str(d.get("why", "")), int(d.get("m_bound") or 0),
                   int(d.get("m_period") or 0))


class _ByParams:
    """An item whose facts are its ``params`` pairs and whose runtime is its class's ``RUNTIME``."""

    RUNTIME: ClassVar[str]
    params: tuple[tuple[str, object], ...]

    @property
    def runtime_id(self) -> str:
        return self.RUNTIME

    def param(self, name: str) -> object:
        return dict(self.params)[name]


@dataclass(frozen=True)
class TritonPathItem(_ByParams, PlanItem):
    """One instance family of a Triton kernel on SGLang's model path outside the MoE experts (data/triton_path.yaml
    ``kernels``: the vocab-parallel embedding, the router, the MoE top-k sum, the small-numel MoE align, the deep_gemm
    MoE runner's dispatch index, expert-count padding, ep_scatter's two kernels and post-permute): what the GPU-free
    warm (compile/triton_path.py) calls SGLang's own wrapper (``kernel``'s ``function``, the align through SGLang's
    fused MoE preparation) with, for each m of ``ms`` (decided once in the plan: one m per class of Triton's int
    specialisation, or the one m of a kernel whose key holds none; the align: every m up to its id limit; the dispatch
    index: one m per class of m * topk and block size). ``params`` are the call's shape facts (embedding: vocab, hidden,
    tp, ids dtypes; router: experts, topk, scoring, renormalize, scores dtype; MoE sum: topk, hidden, dtype, scale;
    align: local experts, hidden, intermediate, topk, dtype, device name; dispatch index: local experts, topk, the
    runner's layouts; padding: local experts, topk, the runner's row alignment; scatter: the padding's, and the hidden
    size for its second kernel; post-permute: topk, hidden size, the GPU's SMs and threads per SM, its block size's
    inputs); ``capability`` the target Triton compiles for. All of them are part of the id."""

    section: ClassVar[str] = "triton_path"
    kind: ClassVar[str] = "triton-path"
    RUNTIME: ClassVar[str] = "triton-path"  # runtimes/triton_moe.py TRITON_PATH.id
    kernel: str  # its key in data/triton_path.yaml ``kernels``
    params: tuple[tuple[str, object], ...]
    ms: tuple[int, ...]
    capability: int
    why: str = field(default="", compare=False)  # the file:line it was read from

    @property
    def id(self) -> str:
        shown = ".".join(f"{k}{_fmt(v)}" for k, v in self.params)
        return f"triton_path:{self.kernel}.{shown}.m{'_'.join(map(str, self.ms))}.sm{self.capability}"

    def to_dict(self) -> dict[str, object]:
        return {"id": self.id, "kernel": self.kernel, "params": dict(self.params), "ms": list(self.ms),
                "capability": self.capability, "why": self.why}

    @classmethod
    def from_dict(cls, d: dict) -> TritonPathItem:
        return cls(str(d["kernel"]), tuple((str(k), v) for k, v in dict(d["params"]).items()),
                   tuple(int(m) for m in d["ms"]), int(d["capability"]), str(d.get("why", "")))


@dataclass(frozen=True)
class InductorGraphItem(_ByParams, PlanItem):
    """One torch.compile'd function of SGLang's at one shape family: the graphs a job's first forwards compile
    with inductor (data/inductor_graphs.yaml ``graph``), which warm builds on the job's GPU kind by calling that
    function (compile/inductor_graphs.py) for every specialisation the function's compile mode allows.
    ``params`` are the function's shape facts (moe_sum_reduce: topk, hidden, dtype, scale, m_max; vocab_mask:
    vocab, tp, dtype), ``device_name`` the GPU the graphs' cache key holds, ``grad`` the autograd mode the job's
    forwards run under (``no_grad`` or ``inference``: SGLang's DynamicGradMode as the job's environment sets it; the
    entries differ between them); all of them are part of the id (``grad`` where it is not no_grad, so ids written
    before it are kept)."""

    section: ClassVar[str] = "inductor"
    kind: ClassVar[str] = "inductor-graph"
    RUNTIME: ClassVar[str] = "inductor-graph"  # runtimes/inductor.py INDUCTOR_GRAPHS.id
    GRAD_MODES: ClassVar[tuple[str, ...]] = ("no_grad", "inference")
    graph: str
    params: tuple[tuple[str, object], ...]
    device_name: str
    grad: str = "no_grad"
    why: str = field(default="", compare=False)  # the file:line the graph was read from

    @property
    def id(self) -> str:
        shown = ".".join(f"{k}{_fmt(v)}" for k, v in self.params)
        grad = "" if self.grad == "no_grad" else f".{self.grad}"
        return f"inductor:{self.graph}.{shown}.{self.device_name.replace(' ', '_')}{grad}"

    def to_dict(self) -> dict[str, object]:
        return {"id": self.id, "graph": self.graph, "params": dict(self.params), "device_name": self.device_name,
                "grad": self.grad, "why": self.why}

    @classmethod
    def from_dict(cls, d: dict) -> InductorGraphItem:  # manifests before ``grad`` planned no_grad
        return cls(str(d["graph"]), tuple((str(k), v) for k, v in dict(d["params"]).items()), str(d["device_name"]),
                   str(d.get("grad", "no_grad")), why=str(d.get("why", "")))


@dataclass(frozen=True)
class FlashInferItem(PlanItem):
    """One FlashInfer JIT module a server builds at its first forward (data/flashinfer_modules.yaml ``module``):
    FlashInfer's own spec function (``spec``, module:function returning its JitSpec), the flashinfer-python release
    the job's sglang pins and the target arch FlashInfer builds for (``arch``: 9.0a). Warm builds it GPU-free with
    FlashInfer's own builder (compile/flashinfer_modules.py)."""

    section: ClassVar[str] = "flashinfer"
    kind: ClassVar[str] = "flashinfer-module"
    RUNTIME: ClassVar[str] = "flashinfer-module"  # runtimes/flashinfer.py FLASHINFER_MODULES.id
    module: str
    spec: str
    flashinfer: str
    arch: str
    why: str = field(default="", compare=False)  # the file:line it was read from

    @property
    def id(self) -> str:
        return f"flashinfer:{self.module}@{self.flashinfer}.sm{self.arch_dir}"

    @property
    def runtime_id(self) -> str:
        return self.RUNTIME

    @property
    def arch_dir(self) -> str:
        """FlashInfer's directory name for the target archs (jit/env.py: major and minor run together, 90a)."""
        return self.arch.replace(".", "")

    @property
    def entry(self) -> str:
        """Its directory under the cache's flashinfer area: <version>/<archs>/cached_ops/<name>."""
        return f"{self.flashinfer}/{self.arch_dir}/cached_ops/{self.module}"

    def to_dict(self) -> dict[str, object]:
        return {"id": self.id, "module": self.module, "spec": self.spec, "flashinfer": self.flashinfer,
                "arch": self.arch, "why": self.why}

    @classmethod
    def from_dict(cls, d: dict) -> FlashInferItem:
        return cls(str(d["module"]), str(d["spec"]), str(d["flashinfer"]), str(d["arch"]), str(d.get("why", "")))
