"""A device proof's record of what the runtime asked for, held against HEAD's plan on a machine without a GPU.

A proof run on the GPU logs, per JIT family, what the job's runtimes looked up, in their own terms (a record,
``data/schemas/proof-asks.json``): DeepGEMM's entry names, SGLang's JIT modules (their module names, or the
directories the loader opened), FlashInfer's module directories, the Triton fused MoE's calls (experts, hidden,
intermediate, top-k, m), the calls of SGLang's model-path Triton wrappers (kernel, function, arguments, m), the host
modules Triton looked up (name, key directory, a launcher's kernel and signature) and the torch.compile'd functions'
calls (function, arguments as a cache key sees them, m, grad mode). Nothing in it comes from the plan under test:
it is what the runtime did.

``check_asks`` makes HEAD's plan for the record's server command and config (the same planning ``plan`` and ``warm``
use) and asks of each ask whether the plan covers it: the entry or module name among the names the runtime here
gives the plan's items (keys/schemes.py: DeepGEMM's from the installed headers and nvcc, SGLang's from the installed
sglang, FlashInfer's from the item), a MoE call inside a planned item's shape and m range for the run's GPU, a
compiled call with the arguments warm passes for a planned item of that function (compile/inductor_graphs.py's own
calls, on torch's meta device), in its grad mode and m range, a model-path Triton call with the arguments warm
passes SGLang's wrapper for a planned item of that kernel (compile/triton_path.py's own calls, on meta) and a
planned m of each class of Triton's int specialisation the runtime's m fall in, a host module under the key warm's
build gives it (compile/triton_host.py, Triton's own code, for a planned Triton MoE item's kernel). A plan that drops or changes one
ask fails, naming it; where this machine cannot compute a family's names (another release installed, no nvcc) the
family is "unchecked", which fails too: a record is held only where its environment is reproduced.

``python -m dgprecompile.launch.proof_asks RECORD.json [--nvcc PATH] [--json]`` runs it with whatever sglang, DeepGEMM and
nvcc this process finds (the release's own folders on PYTHONPATH), exit 0 when every ask is covered, 1 when one is
not, 2 for a record that is not valid.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import shlex
import sys
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dgprecompile import schemas
from dgprecompile.errors import DGError, InputError
from dgprecompile.fsutil import MAX_INPUT_BYTES, read_input, read_input_bytes

SCHEMA = "proof-asks"
# a proof folder's asks record: asks.json, or gzipped where the run's calls are many (the deep_gemm MoE runner's
# post-permute is a distinct ask at each m: thousands of calls, megabytes of JSON that compress 50-fold)
RECORD_NAMES = ("asks.json", "asks.json.gz")
MAX_RECORD_TEXT = 32 << 20  # a gzipped record's text at most (the largest, 2026-12-07's, is 6.9 MB)
COVERED, MISSING, UNCHECKED = "covered", "missing", "unchecked"


@dataclass
class AskCheck:
    family: str
    ask: str  # the ask, shown
    status: str  # covered | missing | unchecked
    detail: str = ""


@dataclass
class AsksReport:
    record: str
    checks: list[AskCheck] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def return_code(self) -> int:
        return 0 if self.checks and all(c.status == COVERED for c in self.checks) else 1

    def to_dict(self) -> dict[str, Any]:
        return {"record": self.record, "return_code": self.return_code, "notes": self.notes,
                "checks": [c.__dict__ for c in self.checks]}


def record_in(folder: Path) -> Path | None:
    """The asks record of a proof's folder (RECORD_NAMES, the first there), or None."""
    return next((folder / name for name in RECORD_NAMES if (folder / name).is_file()), None)


def record_text(path: Path) -> str:
    """An asks record's text: the file's, or a .gz file's decompressed (at most MAX_RECORD_TEXT bytes, read in
    bounded steps: a small file that inflates without end is refused, not held in memory); one InputError else."""
    hint = "pass a proof's asks.json (or asks.json.gz)"
    if path.suffix != ".gz":
        return read_input(path, "asks record", hint=hint)
    raw = read_input_bytes(path, "asks record", hint, MAX_INPUT_BYTES)
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(raw)) as f:
            data = f.read(MAX_RECORD_TEXT + 1)
    except (OSError, EOFError) as exc:
        raise InputError(f"{path}: not a gzip file ({exc})", hint=hint) from None
    if len(data) > MAX_RECORD_TEXT:
        raise InputError(f"{path}: more than {MAX_RECORD_TEXT >> 20} MiB once decompressed, more than any real "
                         "record holds", hint=hint)
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise InputError(f"{path}: not UTF-8 text once decompressed", hint=hint) from None


def load_record(path: Path) -> dict[str, Any]:
    """The record at ``path`` (record_text), checked against its schema (one InputError naming the field)."""
    try:
        doc = json.loads(record_text(path))
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not JSON ({exc})", hint="pass a proof's asks.json") from None
    return schemas.check(doc, SCHEMA, str(path), hint=f"fix the record (data/schemas/{SCHEMA}.json)")


def record_plan(record: dict[str, Any], base: Path):
    """HEAD's plan of the record's server command (or, for a run that called the runtime itself, of its
    ``plan_request``: the `plan` options its warm was given), its model path at a folder holding the record's
    config.json (``config``: a path relative to ``base``, the repository or the record's folder), for the record's
    GPU (its row of data/gpus.yaml as planning's gpu_named and doctor find it; one the table lacks: the default
    GPU), as the proof ran it. A near name's row plans that row's device name, so asks of another name stay MISSING."""
    from dgprecompile.planning.plan import PlanRequest, gpu_named
    from dgprecompile.planning.request import plan_from_request

    gpu = gpu_named(record["environment"]["gpu"])
    config = (base / record["config"]).read_text()
    with tempfile.TemporaryDirectory(prefix="dgp-asks-") as model:
        (Path(model) / "config.json").write_text(config)
        if "plan_request" in record:
            return plan_from_request(PlanRequest(model=model, sglang=record["sglang"], gpu=gpu,
                                                 **record["plan_request"]))
        return plan_from_request(PlanRequest(sglang_cmd=_command_at(record, model), sglang=record["sglang"],
                                             gpu=gpu))


def _command_at(record: dict[str, Any], model: str) -> str:
    """The record's server command with its --model-path at ``model``."""
    argv = shlex.split(record["server_command"])
    if "--model-path" not in argv[:-1]:
        raise InputError(f"{record['name']}: the server command has no --model-path", hint="fix the record")
    argv[argv.index("--model-path") + 1] = model
    return shlex.join(argv)


def check_asks(record: dict[str, Any], plan, *, nvcc: str | None = None) -> AsksReport:
    """Each ask of ``record`` against ``plan`` (module docstring)."""
    report = AsksReport(record["name"])
    for family, asks in sorted(record["families"].items()):
        if family not in FAMILY_CHECKS:
            report.checks += _names(family, [a for v in asks.values() for a in v], None,
                                    "no check here knows this family's asks")
            continue
        report.checks += FAMILY_CHECKS[family](plan, asks, record, report.notes, nvcc)
    return report


def _names(family: str, asks: list[str], known: set[str] | None, why: str) -> list[AskCheck]:
    if known is None:
        return [AskCheck(family, a, UNCHECKED, why) for a in asks]
    return [AskCheck(family, a, COVERED) if a in known else
            AskCheck(family, a, MISSING, "HEAD's plan names no item the runtime looks up by this name")
            for a in asks]


def _deepgemm(plan, asks: dict[str, Any], record: dict[str, Any], notes: list[str], nvcc: str | None):
    """Entry names, from the DeepGEMM installed here (its headers and nvcc are part of the name)."""
    from dgprecompile.host.toolchain import find_deepgemm, find_nvcc
    from dgprecompile.keys.schemes import key_context

    wanted = record["environment"]["versions"].get("sgl-deep-gemm")
    install, known, why = find_deepgemm(), None, ""
    try:
        if install is None or install.version != wanted:
            raise InputError(f"DeepGEMM {wanted} is not the one importable here "
                             f"({install.version if install else 'none'})")
        ctx = key_context(plan.profile.deepgemm, install, find_nvcc(nvcc))
        ran_at = record["environment"].get("deepgemm_include")
        if ran_at:  # the names hold the include path the runtime passed: the run's, the headers read from here
            ctx = replace(ctx, include_dir=ran_at, header_root=ctx.include_dir)
        known = {ctx.entry_name(spec) for spec in plan.kernels.values()}
        notes.append(f"deepgemm: {len(known)} entry names of HEAD's plan from {install.distribution} "
                     f"{install.version}'s headers and this nvcc")
    except (DGError, OSError) as exc:
        why = f"cannot compute DeepGEMM's names here: {getattr(exc, 'message', exc)}"
    return _names("deepgemm", list(asks.get("entries", [])), known, why)


def _sglang_jit(plan, asks: dict[str, Any], record: dict[str, Any], notes: list[str], nvcc: str | None):
    """Module names (what a refusal names) or entry directories (what the loader opened), from the sglang here."""
    from dgprecompile.cache.verify import _jit_names

    warnings: list[str] = []
    named = _jit_names(plan, warnings, [])
    asked = [*asks.get("modules", []), *asks.get("entries", [])]
    if named is None:
        return _names("sglang-jit", asked, None, "; ".join(warnings) or "HEAD's plan has no SGLang JIT module")
    module_name = getattr(named.naming, "module_name", None)
    modules = {module_name(m) for m in plan.jit_modules.values()} if module_name else set()
    known = set(named.entries.values()) | modules
    notes.append(f"sglang-jit: {len(named.entries)} modules of HEAD's plan named by the sglang here")
    return _names("sglang-jit", asked, known, "")


def _flashinfer(plan, asks: dict[str, Any], record: dict[str, Any], notes: list[str], nvcc: str | None):
    """Module directories under FlashInfer's workspace (<version>/<arch>/cached_ops/<name>), or module names (what
    a refusal names)."""
    known = {item.entry for item in plan.flashinfer.values()} | {item.module for item in plan.flashinfer.values()}
    return _names("flashinfer", [*asks.get("modules", []), *asks.get("entries", [])], known, "")


def _ms(call: dict[str, Any]) -> list[tuple[int, int]]:
    """The m a call ran at, as inclusive spans (``m`` or ``ms``)."""
    return [(call["m"], call["m"])] if "m" in call else [(int(a), int(b)) for a, b in call["ms"]]


def _ms_shown(spans: list[tuple[int, int]]) -> str:
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def _uncovered(spans: list[tuple[int, int]], ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of ``spans`` no range of ``ranges`` holds."""
    from dgprecompile.cache.sweeps import subtract

    return [part for lo, hi in spans for part in subtract(lo, hi, ranges)]


def _triton_moe(plan, asks: dict[str, Any], record: dict[str, Any], notes: list[str], nvcc: str | None):
    """Each fused-MoE call (experts, hidden, intermediate, top-k; its m) inside a planned item of that shape, for the
    record's GPU, whose m range holds every m it ran at."""
    gpu = record["environment"]["gpu"]
    out = []
    for call in asks.get("calls", []):
        shape = {k: call[k] for k in ("experts", "hidden", "intermediate", "topk")}
        spans = _ms(call)
        shown = ", ".join(f"{k} {v}" for k, v in shape.items()) + f", m {_ms_shown(spans)}"
        fits = [it for it in plan.triton_moe.values() if all(getattr(it, k) == v for k, v in shape.items())]
        here = [it for it in fits if it.device_name == gpu]
        left = _uncovered(spans, [(it.m_min, it.m_max) for it in here])
        why = ("" if here and not left else f"m {_ms_shown(left)} outside the planned m range of {here[0].id}" if here
               else f"planned for {fits[0].device_name}, the run's GPU is {gpu}" if fits
               else "HEAD's plan has no Triton MoE item of this shape")
        out.append(AskCheck("triton-moe", shown, MISSING if why else COVERED, why))
    return out


def _warm_calls(graph: dict[str, Any], item, m: int) -> list[dict[str, Any]]:
    """How warm calls the item's function at ``m`` (compile/inductor_graphs.py, the same code), one call per rank
    its sequences use, each described as the driver describes the runtime's calls (launch/model_asks.py)."""
    from dgprecompile.compile import inductor_graphs
    from dgprecompile.launch.model_asks import described_call

    params = dict(item.params)
    seen: list[dict[str, Any]] = []
    call = inductor_graphs.CALLS[item.graph](lambda *args, **kwargs: seen.append(described_call(args, kwargs)),
                                             params, "meta")
    for rank in sorted({rank for rank, _ in inductor_graphs.sequences(graph, params)}):
        call(m, rank)
    return seen


def _inductor(plan, asks: dict[str, Any], record: dict[str, Any], notes: list[str], nvcc: str | None):
    """Each call of a torch.compile'd function (its module and name, its arguments as a cache key sees them, the
    grad mode; its m) against the planned items of that function: the same arguments as warm passes for one of the
    ranks it builds, the same grad mode, and (a function compiled with static shapes first) every m within m_max."""
    from dgprecompile.runtimes.inductor import INDUCTOR_GRAPHS

    graphs = {f"{g['module']}.{g['function']}": name for name, g in INDUCTOR_GRAPHS.data()["graphs"].items()}
    gpu = record["environment"]["gpu"]
    out = []
    for call in asks.get("calls", []):
        spans = _ms(call)
        asked = {"args": call["args"], "kwargs": call.get("kwargs", {})}
        shown = f"{call['function'].rsplit('.', 1)[-1]} {json.dumps(asked, sort_keys=True)} m {_ms_shown(spans)} " \
                f"{call['grad']}"
        name = graphs.get(call["function"])
        if call.get("lookups") == 0:  # dynamo handed inductor no graph: nothing a cache holds, whatever the plan
            out.append(AskCheck("inductor", shown, COVERED, "no inductor lookup: nothing to build"))
            continue
        items = [it for it in plan.inductor.values() if it.graph == name and it.device_name == gpu]
        try:
            same = [it for it in items if asked in _warm_calls(INDUCTOR_GRAPHS.graph(name), it, spans[0][0])]
        except ImportError as exc:  # warm's calls take the release's own code (sglang, its triton import) and torch
            out.append(AskCheck("inductor", shown, UNCHECKED, f"cannot make warm's calls here: {exc}"))
            continue
        moded = [it for it in same if it.grad == call["grad"]]
        static = INDUCTOR_GRAPHS.graph(name)["compile"] == "automatic" if name else False
        bound = [it for it in moded if not static or spans[-1][1] <= int(dict(it.params)["m_max"])]
        why = ("" if bound else f"m {_ms_shown(spans)} above the planned m_max of {moded[0].id}" if moded
               else f"planned under {same[0].grad}, the runtime ran {call['grad']}" if same
               else "HEAD's plan has no item of this function for these arguments" if items
               else "HEAD's plan has no item of this function" if name
               else "no planned graph is this function (data/inductor_graphs.yaml)")
        out.append(AskCheck("inductor", shown, COVERED if bound else MISSING, why))
    return out


def _path_warm_calls(item) -> list[dict[str, Any]]:
    """How warm calls SGLang's wrapper for a model-path item (compile/triton_path.py WARMS, the same code, on torch's
    meta device), the wrapper being replaced in its defining module (where warm looks it up at each call) by a
    stand-in that only records each call as the driver describes the runtime's (launch/model_asks.py)."""
    import importlib

    from dgprecompile.compile import triton_path
    from dgprecompile.launch.model_asks import described_call
    from dgprecompile.runtimes import TRITON_PATH

    kernel = TRITON_PATH.kernel(item.kernel)
    module = importlib.import_module(kernel["module"])
    seen: list[dict[str, Any]] = []
    original = getattr(module, kernel["function"])
    setattr(module, kernel["function"],
            lambda *args, **kwargs: seen.append(described_call(args, kwargs, kernel.get("m_arg"))))
    try:  # the item's params as warm's command line hands them over (TRITON_PATH.warm_argv)
        triton_path.WARMS[item.kernel]({k: str(v) for k, v in item.params}, list(item.ms))
    finally:
        setattr(module, kernel["function"], original)
    return seen


def m_class(m: int) -> str:
    """Triton's specialisation class of an int argument below 2**31 (data/triton_path.yaml ``m_classes``)."""
    return "1" if m == 1 else "16" if m % 16 == 0 else "other"


def _classes_in(spans: list[tuple[int, int]]) -> dict[str, int]:
    """Each specialisation class the m of ``spans`` fall in, with its first m."""
    out: dict[str, int] = {}
    for lo, hi in spans:
        firsts = [m for m in (lo, lo + 1, -(-lo // 16) * 16) if lo <= m <= hi]  # each class's first m is among them
        for m in sorted(firsts):
            out.setdefault(m_class(m), m)
    return out


def _path_why(call: dict[str, Any], items: list, same: list, specialised: bool, function: str | None) -> str:
    """Why no planned item covers a model-path call ("" where one does)."""
    if function is None:
        return "no planned kernel is this one (data/triton_path.yaml)"
    if call["function"] != function:
        return f"the runtime called {call['function']}, HEAD's warm calls {function}"
    if not items:
        return "HEAD's plan has no item of this kernel"
    if not same:
        return f"the arguments differ from every call HEAD's warm makes for {', '.join(it.id for it in items)}"
    asked = _classes_in(_ms(call))
    for it in same:
        left = {c: m for c, m in asked.items() if c not in {m_class(p) for p in it.ms}}
        if not specialised or not left:
            return ""
    return (f"m {', '.join(str(m) for m in left.values())}: a class of Triton's int specialisation (== 1, % 16 == 0, "
            f"other) none of the planned m of {same[-1].id} is in")


def _by_class(call: dict[str, Any], k: dict[str, Any] | None) -> dict[str, Any]:
    """A call's arguments, those at the kernel's ``class_args`` positions (data/triton_path.yaml: the dispatch index's
    m_max) by their Triton int class (:func:`m_class`), and the tensors at its ``free_rows`` positions (ep_scatter's
    compact output rows) without their first dimension, those at its ``free_shapes`` positions (the post-permute's
    down output and src2dst, pointers only) by their dtype alone, and a float at a ``class_args`` position (the
    post-permute's scale, an annotated float) as a float only: what its cache key holds of them."""
    k = k or {}
    at, free, shapeless = (set(k.get(f, ())) for f in ("class_args", "free_rows", "free_shapes"))

    def seen(i: int, v: Any) -> Any:
        if i in at and isinstance(v, float):
            return "float"
        if i in at and isinstance(v, int):
            return f"int class {m_class(v)}"
        if i in shapeless and isinstance(v, dict) and "shape" in v:
            return {**v, "shape": "any"}
        if i in free and isinstance(v, dict) and v.get("shape"):
            return {**v, "shape": ["rows", *v["shape"][1:]]}
        return v

    return {"args": [seen(i, v) for i, v in enumerate(call["args"])], "kwargs": call["kwargs"]}


def _dispatch_left(call: dict[str, Any], same: list, k: dict[str, Any] | None) -> str:
    """For the deep_gemm runner's dispatch index (``ms: dispatch_blocks``): the runtime's m whose key (the class of
    m * topk and SGLang's block size: runtimes/triton_moe.py dispatch_key) no planned m of a matching item has ("" where
    every one is planned, or for another kernel)."""
    from dgprecompile.runtimes.triton_moe import dispatch_key

    if not same or not k or k["ms"] != "dispatch_blocks":
        return ""
    single = int(k["single_block_max"])
    left = _first_unplanned(call, same, dispatch_key,
                            lambda it: (int(it.param("experts")), int(it.param("topk")), single))
    return "" if left is None else (f"m {left}: its class of m * topk and block size (SGLang's "
                                    f"fused_moe_dispatch_index) is none of the planned m of {same[-1].id}")


def _first_unplanned(call: dict[str, Any], same: list, key, shape_of) -> int | None:
    """The first of the runtime's m whose ``key(m, *shape_of(item))`` is no planned m's key, for the last of ``same``
    (None where every m's key is planned for one of them)."""
    left: list[int] = []
    for it in same:
        shape = shape_of(it)
        planned = {key(m, *shape) for m in it.ms}
        left = [m for lo, hi in _ms(call) for m in range(lo, hi + 1) if key(m, *shape) not in planned]
        if not left:
            return None
    return left[0] if left else None


def _blocks_left(call: dict[str, Any], same: list, k: dict[str, Any] | None) -> str:
    """For the deep_gemm runner's post-permute (``ms: launch_blocks``): the runtime's m whose key (the class of m and
    SGLang's block size on the item's GPU: runtimes/triton_moe.py post_reorder_key) no planned m of a matching item has
    ("" where every one is planned, or for another kernel)."""
    from dgprecompile.runtimes.triton_moe import post_reorder_key

    if not same or not k or k["ms"] != "launch_blocks":
        return ""
    left = _first_unplanned(call, same, post_reorder_key,
                            lambda it: (int(it.param("hidden")), int(it.param("sms")), int(it.param("threads_per_sm"))))
    return "" if left is None else (f"m {left}: its class of m and block size (SGLang's _get_launch_config_2d on "
                                    f"{same[-1].param('sms')} SMs) is none of the planned m of {same[-1].id}")


def _triton_path(plan, asks: dict[str, Any], record: dict[str, Any], notes: list[str], nvcc: str | None):
    """Each call of a model-path Triton wrapper (its kernel, module and name, its arguments as a cache key sees them;
    its m) against HEAD's planned items of that kernel: the same arguments as warm passes SGLang's wrapper for one of
    them, and, where m is one of the kernel's specialised int arguments (``ms: m_classes`` in data/triton_path.yaml;
    the embedding's m is in no key, only in its grid), a planned m of each specialisation class the runtime's m fall
    in."""
    from dgprecompile.runtimes import TRITON_PATH

    kernels = TRITON_PATH.data()["kernels"]
    replays: dict[str, list[dict[str, Any]]] = {}
    out = []
    for call in asks.get("calls", []):
        asked = {"args": call["args"], "kwargs": call.get("kwargs", {})}
        shown = f"{call['kernel']} {json.dumps(asked, sort_keys=True)} m {_ms_shown(_ms(call))}"
        k = kernels.get(call["kernel"])
        items = [it for it in plan.triton_path.values() if it.kernel == call["kernel"]]
        try:
            for it in items:
                if it.id not in replays:
                    replays[it.id] = _path_warm_calls(it)
        except (ImportError, SystemExit) as exc:  # warm's calls take the release's own wrappers (sglang) and torch
            out.append(AskCheck("triton-path", shown, UNCHECKED, f"cannot make warm's calls here: {exc}"))
            continue
        same = [it for it in items if _by_class(asked, k) in [_by_class(c, k) for c in replays[it.id]]]
        why = _path_why(call, items, same, bool(k) and k["ms"] == "m_classes",
                        k and f"{k['module']}.{k['function']}") or _dispatch_left(call, same, k) \
            or _blocks_left(call, same, k)
        out.append(AskCheck("triton-path", shown, MISSING if why else COVERED, why))
    return out


def _host_shown(module: dict[str, Any]) -> str:
    kernel = module.get("launcher", {}).get("kernel")
    return f"{module['name']} {module['key']}" + (f" ({kernel})" if kernel else "")


def _host_keys(asks: dict[str, Any], record: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """The keys HEAD's warm files the recorded host modules under (compile/triton_host.py lookup_keys, Triton's own
    code), or None and why this machine cannot compute them (another Triton, another platform)."""
    want = record["environment"]["versions"].get("triton")
    try:
        import triton

        from dgprecompile.compile.triton_host import lookup_keys
    except ImportError as exc:
        return None, f"no Triton here ({exc}); the run had {want}"
    if triton.__version__ != want:
        return None, f"Triton {triton.__version__} here, the run had {want} (its driver's source is in the keys)"
    built = next((m["build"] for m in asks.get("modules", []) if "build" in m), None)  # Triton 3.8: its folders
    launchers = {str(i): m["launcher"] for i, m in enumerate(asks.get("modules", [])) if "launcher" in m}
    try:
        keys = lookup_keys(launchers, built)
    except (RuntimeError, AttributeError, TypeError, KeyError, OSError) as exc:
        return None, f"Triton {want}'s own lookup failed here: {type(exc).__name__}: {exc}"[:300]
    if asks.get("platform_key") and keys["platform_key"] != asks["platform_key"]:
        return None, f"platform {keys['platform_key']} here, the run's {asks['platform_key']} (in every key)"
    return keys, ""


def _folders_said(module: dict[str, Any]) -> str:
    """For a Triton 3.8 module: the libcuda folder the job keyed it with, against the one warm keys with."""
    from dgprecompile.compile.triton_host import warm_libcuda_dirs

    if "build" not in module:
        return ""
    job = module["build"]["library_dirs"][1:]
    how = "" if len(job) == 1 else ", Triton's own search, which launch no longer leaves a job"
    return (f" (the job's libcuda folder: {', '.join(job) or 'none'}{how}; warm keys with "
            f"{', '.join(warm_libcuda_dirs(job))})")


def _triton_host(plan, asks: dict[str, Any], record: dict[str, Any], notes: list[str], nvcc: str | None):
    """Each host module the job's Triton looked up, against the key HEAD's warm builds it under: ``cuda_utils``'s
    from this Triton's own driver source, each launcher's from the kernel and signature the runtime bound, through
    the code warm builds them with; warm builds them for the kernel of a planned Triton MoE item on the run's GPU and
    for each planned model-path kernel (the embedding, the router, the MoE sum: compile/triton_path.py).
    Not checked here: that warm's own calls bind the same signatures (the triton-moe asks hold the calls' shapes
    and m to the plan), and the file's name, which holds the job's Python (EXT_SUFFIX)."""
    from dgprecompile.runtimes import TRITON_MOE, TRITON_PATH

    modules = asks.get("modules", [])
    keys, why = _host_keys(asks, record)
    if keys is None:
        return [AskCheck("triton-host", _host_shown(m), UNCHECKED, why) for m in modules]
    # the warms that build host modules: the fused MoE items for the run's GPU and the model-path items
    moe = [it for it in plan.triton_moe.values() if it.device_name == record["environment"]["gpu"]]
    kernels = {TRITON_MOE.kernel} if moe else set()
    kernels |= {TRITON_PATH.kernel(it.kernel)["kernel"] for it in plan.triton_path.values()}
    out = []
    for i, module in enumerate(modules):
        launcher = module.get("launcher")
        named = keys["cuda_utils"] if module["name"] == "cuda_utils" else keys["launchers"].get(str(i))
        why = ("HEAD's plan has no Triton item for this GPU: warm builds no host module" if not kernels
               else f"a launcher of {launcher['kernel']}: HEAD's plan warms only {', '.join(sorted(kernels))}"
               if launcher and launcher.get("kernel") not in kernels
               else f"{module['name']}: a module warm does not build" if named is None
               else f"HEAD's warm files it under {named}{_folders_said(module)}" if named != module["key"] else "")
        out.append(AskCheck("triton-host", _host_shown(module), MISSING if why else COVERED, why))
    return out


# each family of a record (bench/proof_families.yaml ids), checked in its own terms
FAMILY_CHECKS = {"deepgemm": _deepgemm, "sglang-jit": _sglang_jit, "flashinfer": _flashinfer,
                 "triton-moe": _triton_moe, "triton-path": _triton_path, "triton-host": _triton_host,
                 "inductor": _inductor}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dgprecompile.launch.proof_asks", description=__doc__.split("\n")[0])
    p.add_argument("record", type=Path)
    p.add_argument("--base", type=Path, help="where the record's config path starts (default: the record's folder)")
    p.add_argument("--nvcc", help="the nvcc DeepGEMM's names are computed with (default: as warm finds it)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    try:
        record = load_record(args.record)
        report = check_asks(record, record_plan(record, args.base or args.record.parent), nvcc=args.nvcc)
    except DGError as exc:
        print(f"error: {exc.message}" + (f"\nhint: {exc.hint}" if exc.hint else ""), file=sys.stderr)
        return 2
    if args.json:
        json.dump(report.to_dict(), sys.stdout)
        sys.stdout.write("\n")
    else:
        for c in report.checks:
            print(f"{c.status:9} {c.family}: {c.ask}" + (f" ({c.detail})" if c.detail else ""))
        held = sum(c.status == COVERED for c in report.checks)
        print(f"{record['name']}: {held} of {len(report.checks)} asks covered by HEAD's plan")
    return report.return_code


if __name__ == "__main__":
    sys.exit(main())
