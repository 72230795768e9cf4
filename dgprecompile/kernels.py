"""What a DeepGEMM call is (a GEMM key) and what it compiles to (a kernel spec)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


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


@dataclass(frozen=True)
class KernelSpec:
    """One compiled kernel: the cache-entry family name plus the values that make it distinct."""

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
class JitModule:
    """One of SGLang's own JIT modules a server's path builds at first use (dgprecompile/jit_families.py).

    ``marker + template`` are the strings sglang joins into the module's name; ``python:builder(*args, **kwargs)``
    is the installed sglang's own function that builds it; ``family`` the JitFamily id of its loader; ``keys``
    the planned GEMM keys whose layers use it (none for modules off the DeepGEMM paths).
    """

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
