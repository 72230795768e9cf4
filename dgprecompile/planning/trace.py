"""Traces of the DeepGEMM calls a job really made, and plans built from them.

Trace files are written by the startup hook (``dgprecompile/launch/hook/_dgprecompile_hook.py``) under
``launch --trace DIR`` as ``DIR/trace-rank<RANK>-<pid>.jsonl``, JSON lines of two kinds::

    {"dgprecompile_trace": 1, "rank": 0, "pid": 123, "api": "cxx", ...}            header (one per file)
    {"kernel_type": "GEMM_NT_F8F8BF16", "m": 17, "n": 1792, "k": 6144, "num_groups": 1, "count": 1}

A call line appears the first time a (kernel_type, m, n, k, num_groups) is seen and again at exit with the
remaining count, so the counts of one call add up over lines. m is SGLang's m: expected_m for masked calls.

A misses file (``launch --no-strict``) has the same call lines, with the kernel each would compile, after a
``{"dgprecompile_misses": 1, "sglang_profile": ..., "num_sms": ...}`` header.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dgprecompile.documents import MAX_DEPTH, deeper_than
from dgprecompile.errors import InputError
from dgprecompile.fsutil import read_input
from dgprecompile.planning.heuristics.registry import heuristic_for
from dgprecompile.planning.plan import MAX_M, Plan, PlanRequest, plan_key, resolve_num_sms
from dgprecompile.planning.profiles import (
    ProfileChoice,
    all_profiles,
    installed_sglang_version,
    resolve_profile,
)
from dgprecompile.runtimes.items import GemmKey, KernelSpec, KernelType
from dgprecompile.schemas import shown

TRACE_GLOB = "trace-*.jsonl"
TRACE_HINT = "pass the directory `launch --trace` wrote, or a misses file from `launch --no-strict`"
TRACE_MAX_BYTES = 64 << 20  # one distinct call per line: far more lines than any job's distinct calls


@dataclass(frozen=True)
class Call:
    kernel_type: KernelType
    m: int
    n: int
    k: int
    num_groups: int
    count: int = 1

    @property
    def ident(self) -> tuple[str, int, int, int, int]:
        return (self.kernel_type.value, self.m, self.n, self.k, self.num_groups)

    def to_dict(self) -> dict[str, Any]:
        return {"kernel_type": self.kernel_type.value, "m": self.m, "n": self.n, "k": self.k,
                "num_groups": self.num_groups, "count": self.count}


def parse_call(data: Any, where: str = "trace") -> Call:
    if not isinstance(data, dict):
        raise InputError(f"{where}: a call must be a JSON object, got {type(data).__name__}", hint="pass the directory `launch --trace` wrote, or a misses file from `launch --no-strict`")
    try:
        kind = KernelType.parse(str(data["kernel_type"]))
        values = [int(data[name]) for name in ("m", "n", "k", "num_groups")]
        count = int(data.get("count", 1))
    except KeyError as exc:
        raise InputError(f"{where}: a call lacks {exc.args[0]!r} (needs kernel_type, m, n, k, num_groups)",
                         hint="pass the directory `launch --trace` wrote, or a misses file from `launch --no-strict`") from None
    except (TypeError, ValueError) as exc:
        raise InputError(f"{where}: bad call {shown(data)} ({str(exc)[:80]})", hint="pass the directory `launch --trace` wrote, or a misses file from `launch --no-strict`") from None
    if min(values[1:]) < 1 or values[0] < 0 or count < 0 or max(values) > MAX_M:
        raise InputError(f"{where}: impossible call {shown(data)}", hint="pass the directory `launch --trace` wrote, or a misses file from `launch --no-strict`")
    return Call(kind, *values, count=count)


def _read_lines(path: Path) -> tuple[list[dict[str, Any]], list[Call]]:
    headers, calls = [], []
    text = read_input(path, "trace/misses file", TRACE_HINT, limit=TRACE_MAX_BYTES)
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            if number == len(text.splitlines()):  # a job killed mid-write leaves a torn last line
                continue
            raise InputError(f"{where} is not JSON", hint="pass the directory `launch --trace` wrote, or a misses file from `launch --no-strict`") from None
        except (RecursionError, ValueError):  # nested past the recursion limit, an int of 5,000 digits
            raise InputError(f"{where} is not a call (nested too deep, or a number too long)",
                             hint=TRACE_HINT) from None
        if deeper_than(data, MAX_DEPTH):
            raise InputError(f"{where} is not a call (nested deeper than {MAX_DEPTH} levels)", hint=TRACE_HINT)
        if isinstance(data, dict) and "kernel_type" not in data:
            headers.append(data)
            continue
        calls.append(parse_call(data, where))
    return headers, calls


def aggregate(calls: Iterable[Call]) -> list[Call]:
    """One Call per distinct (kernel_type, m, n, k, num_groups), counts summed, in a stable order."""
    counts: dict[tuple, int] = {}
    for c in calls:
        counts[c.ident] = counts.get(c.ident, 0) + c.count
    return [Call(KernelType(kt), m, n, k, g, count) for (kt, m, n, k, g), count in sorted(counts.items())]


def read_trace_dir(trace_dir: Path) -> tuple[list[dict[str, Any]], list[Call]]:
    """Headers and aggregated calls of every trace file in a directory (all ranks)."""
    trace_dir = Path(trace_dir)
    if not trace_dir.is_dir():
        there = "is not a directory" if os.path.lexists(trace_dir) else "not found"
        raise InputError(f"trace directory {trace_dir} {there}",
                         hint="record one with `dgprecompile launch --trace DIR -- COMMAND`")
    headers, calls = [], []
    for path in sorted(trace_dir.glob(TRACE_GLOB)):
        h, c = _read_lines(path)
        headers += h
        calls += c
    return headers, aggregate(calls)


def _profile_for(request: PlanRequest, headers: list[dict[str, Any]]):
    if request.sglang is None and installed_sglang_version() is None:
        apis = {h.get("api") for h in headers if "api" in h}
        speaking = [p for p in all_profiles() if p.deepgemm.trace_api in apis]
        if len(apis) == 1 and len({p.generation for p in speaking}) == 1:  # an API only one generation has
            return ProfileChoice(speaking[0], None, f"the trace was recorded with the {apis.pop()} DeepGEMM API "
                                                    "(pass --sglang to choose)")
    return resolve_profile(request.sglang)


def plan_from_calls(calls: Iterable[Call | dict[str, Any]], request: PlanRequest,
                    _headers: list[dict[str, Any]] | None = None, base: Plan | None = None) -> Plan:
    """A plan covering recorded calls: per key, m from the smallest to the largest seen, bucketed by the
    profile's heuristic (so warm compiles every kernel any m in that range selects). With ``base``, the
    profile, SM count, model and layout are that plan's (the request is not used)."""
    parsed = aggregate(c if isinstance(c, Call) else parse_call(c) for c in calls)
    if base is not None:
        choice = ProfileChoice(base.profile, base.sglang_version, f"the plan of {base.model}")
        request = PlanRequest(model=base.model, tp=base.tp, ep=base.ep, moe_runner_backend=base.moe_runner_backend,
                              gpu=base.gpu)
        num_sms = base.num_sms
    else:
        choice = _profile_for(request, _headers or [])
        num_sms = resolve_num_sms(request.gpu, request.num_sms)
    profile, reason = choice.profile, choice.reason
    if not profile.deepgemm.models_kernels:
        raise InputError(f"sglang profile {profile.id} ({profile.generation}) has no kernel model: "
                         "a plan from calls needs one", hint="pass --sglang with a version whose DeepGEMM is modelled")
    ranges: dict[tuple[KernelType, int, int, int], list[int]] = {}
    total = 0
    for c in parsed:
        total += c.count
        if c.m < 1:  # SGLang skips empty calls (no kernel is built for them)
            continue
        r = ranges.setdefault((c.kernel_type, c.n, c.k, c.num_groups), [c.m, c.m])
        r[0], r[1] = min(r[0], c.m), max(r[1], c.m)
    if not ranges:
        raise InputError("no DeepGEMM calls with m >= 1 were recorded",
                         hint="check that the job used DeepGEMM (SGLang's JIT DeepGEMM switch on, FP8 model)")
    kernels: dict[str, KernelSpec] = {}
    keys = [plan_key(GemmKey(kind, n, k, g, ("traced",), lo, hi), profile, num_sms, kernels)
            for (kind, n, k, g), (lo, hi) in sorted(ranges.items(), key=lambda kv: (kv[0][0].value, *kv[0][1:]))]
    max_tokens = max(hi for (kind, *_), (_, hi) in ranges.items())
    return Plan(model=request.model or "traced", model_source="trace", model_type="", tp=request.tp or 1,
                ep=request.ep or 1, moe_runner_backend=request.moe_runner_backend, max_tokens=max_tokens,
                profile=profile, profile_reason=reason, sglang_version=choice.sglang_version,
                num_sms=num_sms, gpu=request.gpu, keys=keys,
                kernels=kernels,
                notes=[f"from {len(parsed)} distinct recorded calls ({total} in all) on {len(keys)} keys; "
                       "m ranges are the observed min..max"])


def plan_from_trace(trace_dir: Path, request: PlanRequest) -> Plan:
    headers, calls = read_trace_dir(trace_dir)
    if not calls:
        raise InputError(f"{trace_dir} holds no recorded DeepGEMM calls",
                         hint="did the job import deep_gemm? traces are written as trace-rank<R>-<pid>.jsonl")
    return plan_from_calls(calls, request, headers)


# ---- misses ----------------------------------------------------------------------------------------------


def kernels_of_call(plan: Plan, call: Call) -> list[str]:
    """The kernel ids a call compiles under the plan's profile and SM count (GEMM plus layout kernels)."""
    heuristic = heuristic_for(plan.profile.deepgemm)
    ids = [heuristic.kernel(call.kernel_type, call.m, call.n, call.k, call.num_groups, plan.num_sms).id]
    for spec in getattr(heuristic, "aux_kernels", lambda *a: [])(call.kernel_type, call.n, call.k, call.num_groups):
        ids.append(spec.id)
    return ids


def find_misses(plan: Plan, calls: Iterable[Call]) -> list[tuple[Call, list[str]]]:
    """Calls whose kernels (any of them) are not in the plan, with those kernel ids."""
    out = []
    for call in aggregate(calls):
        if call.m < 1:
            continue
        missing = [k for k in kernels_of_call(plan, call) if k not in plan.kernels]
        if missing:
            out.append((call, missing))
    return out


def write_misses(path: Path, plan: Plan, misses: list[tuple[Call, list[str]]], extra: dict[str, Any]) -> None:
    from dgprecompile.fsutil import atomic_write_text

    header = {"dgprecompile_misses": 1, "sglang_profile": plan.profile.id, "num_sms": plan.num_sms,
              "model": plan.model, "tp": plan.tp, "ep": plan.ep, "moe_runner_backend": plan.moe_runner_backend,
              **extra}
    lines = [json.dumps(header)]
    lines += [json.dumps({**call.to_dict(), "kernels": kernels}) for call, kernels in misses]
    atomic_write_text(Path(path), "\n".join(lines) + "\n")


def read_misses(path: Path) -> tuple[dict[str, Any], list[Call]]:
    headers, calls = _read_lines(Path(path))
    header = next((h for h in headers if "dgprecompile_misses" in h), headers[0] if headers else {})
    return header, aggregate(calls)


def _recorded_kernels(path: Path) -> set[str]:
    """The kernel ids `launch --no-strict` recorded beside each missed call."""
    ids: set[str] = set()
    for line in read_input(path, "misses file", TRACE_HINT, limit=TRACE_MAX_BYTES).splitlines():
        try:
            data = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(data, dict) and isinstance(data.get("kernels"), list):
            ids.update(str(k) for k in data["kernels"])
    return ids


def plan_from_misses(path: Path, request: PlanRequest, base: Plan | None = None) -> Plan:
    """The calls of a misses file (`launch --no-strict`) as a plan of their own: under ``base``'s profile and SM
    count when given, else those of the misses file's header. The kernels the launch recorded must be the ones
    this plan compiles: otherwise they were recorded under another kernel model and warming would miss."""
    try:
        header, calls = read_misses(Path(path))
    except InputError as exc:
        raise InputError(f"{path} is not a misses file written by `launch --no-strict`: {exc.message}",
                         hint="pass the file `launch --no-strict` named at its exit") from None
    if not calls:
        raise InputError(f"{path} lists no missed calls: nothing to warm",
                         hint="the launch that wrote it compiled nothing outside the plan")
    if base is None:
        request = dataclasses.replace(
            request, model=header.get("model"), tp=header.get("tp"), ep=header.get("ep"),
            sglang=request.sglang or header.get("sglang_profile"),
            num_sms=request.num_sms or (None if request.gpu else header.get("num_sms")),
            moe_runner_backend=header.get("moe_runner_backend") or request.moe_runner_backend)
    plan = plan_from_calls(calls, request, base=base)
    recorded = _recorded_kernels(Path(path)) - set(plan.kernels)
    if recorded:
        raise InputError(f"{path} records {len(recorded)} kernels this plan would not compile (e.g. "
                         f"{sorted(recorded)[0]}): they were recorded under another sglang profile or SM count",
                         hint="pass the --manifest (or --sglang/--num-sms) the launch ran with")
    return plan
