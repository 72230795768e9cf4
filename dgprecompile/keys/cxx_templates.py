"""The kernel.cu each C++-JIT sgl-deep-gemm release generates for one planned kernel.

The JIT fills a format string with the kernel's template arguments; the resulting text is part of the cache key
(both key schemes hash it), so it must be reproduced byte for byte. The format strings differ between releases;
each is the null-terminated string in that release's ``deep_gemm/_C.so`` (found by its ``&sm90_fp8_gemm_1d2d_impl<``
/ ``&transpose_fp32<`` text; the 0.1.x/0.2.x wheels ship no C++ sources). Grouped by identical text
(docs/heuristics.md, "Generated code per release"):

* ``0.1.0``: 19 slots, sgl-deep-gemm 0.1.0-0.1.3: ..., GemmType, epilogue.
* ``0.1.4``: 20 slots, 0.1.4-0.1.7: a C/D dtype slot before the epilogue (deepseek-ai/DeepGEMM@731e7c7, whose
  headers equal the 0.1.4 wheel's, ``csrc/jit_kernels/impls/sm90_fp8_gemm_1d2d.hpp`` L34-68).
* ``0.2.0``: the same 20-slot text, 0.2.0-0.2.1.post1 (header: ``cd_dtype_t, epilogue_op_t``); transpose_fp32
  gains a 4th slot, BLOCK_SF_K = 128 (DeepJIT-era ``smxx_layout.hpp``: 512 threads, block_mn 64, block_sf_k 128).
* ``0.2.2``: 21 slots, 0.2.2-0.2.3.post2 (header adds ``uint32_t SF_GRAN = 128``).
* ``0.2.5``: 20 slots, 0.2.5 (header: ``cd_dtype_t, uint32_t SF_GRAN = 128``, no epilogue).
* ``sk-0.4``: 18 slots in another order, the deep_gemm bundled in sgl-kernel 0.3.19 and sglang-kernel 0.4.0-0.4.2
  (SGF@5f8a71a ``csrc/jit_kernels/impls/sm90_fp8_gemm_1d2d.hpp`` L33-62: m, n, k as compiled, groups, the three
  blocks, the C/D swizzle, stages and last stages, the two thread counts, multicast, the (minimised) SM count,
  GemmType, ``EpilogueIdentity``, enable_overlap); its transpose_fp32 has 0.1.x's 3 slots.
* ``sk-0.3``: the same without enable_overlap (17 slots), sgl-kernel 0.3.14.post1-0.3.18.post2 (SGF@f4adba8).
* ``sk-0.3.7``: the same without the epilogue either (16 slots, the last GemmType), sgl-kernel 0.3.7-0.3.9.post2
  (SGF@b981e3e ``csrc/jit_kernels/impls/sm90_fp8_gemm_1d2d.hpp`` L30-56); its transpose_fp32 has 3 slots.
* ``sk-0.3.20``: 21 slots, sgl-kernel 0.3.20-0.3.21 (SGF@54f99a8 ``csrc/jit_kernels/impls/sm90_fp8_gemm_1d2d.hpp``
  L33-66): sk-0.4's values with the scale-factor-B major first and the A and B swizzles before the C/D one, as
  0.1.x has them, in a line grouping of its own; its transpose_fp32 has 3 slots.

Which of these the device confirmed (kernel.cu files of real entries) is in :data:`CONFIRMED`.
"""

from __future__ import annotations

from dataclasses import dataclass

from dgprecompile.errors import InputError
from dgprecompile.runtimes.items import TRANSPOSE_FAMILY, KernelSpec

_HEAD = """
#include <deep_gemm/impls/sm90_fp8_gemm_1d2d.cuh>

using namespace deep_gemm;

static void __instantiate_kernel() {{
    auto ptr = reinterpret_cast<void*>(&sm90_fp8_gemm_1d2d_impl<
        {},
        {}, {}, {},
        {},
        {}, {}, {},
        {}, {}, {},
        {},
        {}, {},
        {}, {},
        {}, {},
"""
_FOOT = """    >);
}};
"""
GEMM_19 = _HEAD + "        {}\n" + _FOOT
GEMM_20 = _HEAD + "        {},\n        {}\n" + _FOOT
GEMM_21 = _HEAD + "        {},\n        {}, {}\n" + _FOOT
GEMM_20_SF = _HEAD + "        {}, {}\n" + _FOOT  # 0.2.5: cd dtype and SF_GRAN on one line
# sglang-kernel 0.4.x: 18 slots, in its own order and line grouping
GEMM_18 = """
#include <deep_gemm/impls/sm90_fp8_gemm_1d2d.cuh>

using namespace deep_gemm;

static void __instantiate_kernel() {{
    auto ptr = reinterpret_cast<void*>(&sm90_fp8_gemm_1d2d_impl<
        {}, {}, {},
        {},
        {}, {}, {},
        {},
        {}, {},
        {}, {},
        {}, {},
        {}, {}, {},
        {}
""" + _FOOT
# sgl-kernel 0.3.20-0.3.21: 21 slots
GEMM_21_SK = """
#include <deep_gemm/impls/sm90_fp8_gemm_1d2d.cuh>

using namespace deep_gemm;

static void __instantiate_kernel() {{
    auto ptr = reinterpret_cast<void*>(&sm90_fp8_gemm_1d2d_impl<
        {},
        {}, {}, {},
        {},
        {}, {}, {},
        {}, {}, {},
        {}, {},
        {}, {},
        {}, {},
        {}, {}, {},
        {}
""" + _FOOT
GEMM_17 = GEMM_18.replace("        {}, {}, {},\n        {}\n    >", "        {}, {}, {}\n    >")
GEMM_16 = GEMM_18.replace("        {}, {}, {},\n        {}\n    >", "        {}, {}\n    >")
TRANSPOSE_3 = """
#include <deep_gemm/impls/smxx_layout.cuh>

using namespace deep_gemm;

static void __instantiate_kernel() {{
    auto ptr = reinterpret_cast<void*>(&transpose_fp32<
        {}, {}, {}
    >);
}};
"""
TRANSPOSE_4 = TRANSPOSE_3.replace("{}, {}, {}\n", "{}, {}, {}, {}\n")

EPILOGUE = "epilogue::transform::EpilogueIdentity"
BF16 = "cutlass::bfloat16_t"


@dataclass(frozen=True)
class Template:
    id: str
    gemm: str
    gemm_tail: tuple[str, ...]  # the slots after GemmType
    transpose: str
    transpose_tail: tuple[object, ...]  # the slots after (threads, block_mn, sf_k)
    # which values fill the GEMM slots besides the ones every release has
    ab_slots: bool = True  # the scale-factor-B major first, the A and B swizzles before the C/D one
    last_stages: bool = False  # the number of last stages after the stages (sgl-kernel / sglang-kernel)


TEMPLATES = {t.id: t for t in (
    Template("0.1.0", GEMM_19, (EPILOGUE,), TRANSPOSE_3, ()),
    Template("0.1.4", GEMM_20, (BF16, EPILOGUE), TRANSPOSE_3, ()),
    Template("0.2.0", GEMM_20, (BF16, EPILOGUE), TRANSPOSE_4, (128,)),
    Template("0.2.2", GEMM_21, (BF16, EPILOGUE, 128), TRANSPOSE_4, (128,)),
    Template("0.2.5", GEMM_20_SF, (BF16, 128), TRANSPOSE_4, (128,)),
    Template("sk-0.3.20", GEMM_21_SK, ("EpilogueIdentity", "false"), TRANSPOSE_3, (), last_stages=True),
    Template("sk-0.4", GEMM_18, ("EpilogueIdentity", "false"), TRANSPOSE_3, (), ab_slots=False, last_stages=True),
    Template("sk-0.3", GEMM_17, ("EpilogueIdentity",), TRANSPOSE_3, (), ab_slots=False, last_stages=True),
    Template("sk-0.3.7", GEMM_16, (), TRANSPOSE_3, (), ab_slots=False, last_stages=True),
)}

# The same for the deep_gemm bundled in sgl-kernel / sglang-kernel (their .so strings, docs/heuristics.md).
SK_RELEASE_TEMPLATE = {
    **dict.fromkeys(("0.3.7", "0.3.7.post1", "0.3.8", "0.3.9.post2"), "sk-0.3.7"),
    **dict.fromkeys(("0.3.14.post1", "0.3.15", "0.3.16.post3", "0.3.16.post4", "0.3.16.post5", "0.3.17",
                     "0.3.17.post1", "0.3.18.post2"), "sk-0.3"),
    **dict.fromkeys(("0.3.19", "0.4.0", "0.4.1", "0.4.2"), "sk-0.4"),
    **dict.fromkeys(("0.3.20", "0.3.21"), "sk-0.3.20"),
}

# Every release on PyPI whose _C.so format strings were read (release candidates were not), by template.
RELEASE_TEMPLATE = {
    **dict.fromkeys(("0.1.0", "0.1.1", "0.1.2", "0.1.3"), "0.1.0"),
    **dict.fromkeys(("0.1.4", "0.1.4.post1", "0.1.5", "0.1.5.post1", "0.1.5.post2", "0.1.5.post3", "0.1.6",
                     "0.1.7"), "0.1.4"),
    **dict.fromkeys(("0.2.0", "0.2.1", "0.2.1.post1"), "0.2.0"),
    **dict.fromkeys(("0.2.2", "0.2.3", "0.2.3.post1", "0.2.3.post2"), "0.2.2"),
    "0.2.5": "0.2.5",
}

# Templates whose generated kernel.cu was compared with the kernel.cu of entries a real runtime made on a GPU,
# and the record that holds them (tests/test_cxx_keys.py reruns the comparison).
CONFIRMED = {"0.1.0": "bench/results/2026-11-30-h200-run* (sgl-deep-gemm 0.1.3)",
             "sk-0.4": "tests/data/sweep_generations_h200.json sk-0.4.2 (sglang-kernel 0.4.2)"}


def template_for(version: str | None) -> Template | None:
    tid = RELEASE_TEMPLATE.get(version or "")
    return TEMPLATES[tid] if tid else None


def require_template(version: str | None) -> Template:
    """The generated-code format of an installed release, or the error a key context raises without it."""
    template = template_for(version)
    if template is None:
        raise InputError(f"the generated code of sgl-deep-gemm {version} was not read",
                         hint="use --backend cxx (the library builds its own entries on a GPU)")
    return template


def _fill(template: str, values: list[object]) -> str:
    text = template.replace("{{", "\0").replace("}}", "\1")
    parts = text.split("{}")
    assert len(parts) == len(values) + 1, f"template has {len(parts) - 1} slots, got {len(values)} values"
    out = parts[0] + "".join(str(v) + p for v, p in zip(values, parts[1:], strict=True))
    return out.replace("\0", "{").replace("\1", "}")


def instantiation(spec: KernelSpec, template: Template) -> str:
    """The generated code (before any include-hash line) for one planned kernel."""
    p = dict(spec.params)
    if spec.family == TRANSPOSE_FAMILY:
        return _fill(template.transpose, [p["TH"], p["BMN"], p["SFK"], *template.transpose_tail])
    head = [f"cute::UMMA::Major::{p['SFB']}"] if template.ab_slots else []
    swizzles = [128, 128, p["SWD"]] if template.ab_slots else [p["SWD"]]  # A and B: block_k bytes of FP8
    stages = [p["ST"], p["LST"]] if template.last_stages else [p["ST"]]
    return _fill(template.gemm, [
        *head, 0, p["N"], p["K"], p["G"], p["BM"], p["BN"], 128, *swizzles, *stages, 128, p["MATH"], p["MC"],
        "true" if p["A"] else "false", p["SMS"], f"GemmType::{p['T']}", *template.gemm_tail])
