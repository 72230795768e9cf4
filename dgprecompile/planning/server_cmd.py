"""An SGLang server command line -> what plan needs: model, tp, ep, MoE runner, and the largest m the server calls.

The command is read with the option table of the SGLang release it runs (:mod:`dgprecompile.planning.sglang_args`):
the installed sglang's own ``server_args.py`` when that is the release asked for, else the bundled table of that
release (or the nearest bundled one of its profile). Options are parsed by an ``argparse`` parser built from the
table, so aliases (``--tp-size``/``--tensor-parallel-size``), unique-prefix abbreviations (``--tp``) and unknown
options behave as in SGLang (``prepare_server_args``: a plain ArgumentParser, 0.5.1 server_args.py:2347-2350,
0.5.14 :7209-7221).

The largest forward on a rank (docs/shapes.md §4 has the evidence):

* chunked prefill on (``--chunked-prefill-size C > 0``; SGLang's default on 80-160 GB GPUs is 8192, 0.5.14
  server_args.py:3187-3191): prefill T <= C;
* chunked prefill off (``-1``): the scheduler always admits the first waiting request whole and adds others only
  while they fit the remaining ``--max-prefill-tokens`` (0.5.14 managers/schedule_policy.py:909-916), and a request
  holds at most ``context_len - 6`` tokens (tp_worker.py:448-458): T <= max(max_prefill_tokens - 1, context_len - 6);
* decode: T <= the largest CUDA-graph batch, or ``--max-running-requests`` when given;
* SGLang's own precompile, when it stays on, sweeps every key over m = 1..16384 (65536 with chunked prefill off,
  2C when C > 8192, at most 131072; compile_utils.py:83-88).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from packaging.version import InvalidVersion, Version

from dgprecompile.errors import InputError
from dgprecompile.planning.plan import sglang_precompile_m_max
from dgprecompile.planning.profiles import Profile
from dgprecompile.planning.sglang_args import (
    OptionTable,
    bundled_tables,
    extract_options,
    installed_sglang,
    read_table_file,
    sources_from_dir,
    spec_capture_overlay,
)

ENTRY_MODULES = ("sglang.launch_server", "sglang.compile_deep_gemm")
H200_CLASS_CHUNKED_PREFILL = 8192  # SGLang's default for 80-160 GB GPUs (H100, H200, H20, H800)
TRACE_HINT = ("or record what the server really calls: dgprecompile launch --no-strict --trace DIR -- <command>, "
              "then dgprecompile plan --from-trace DIR")
# what SGLang reads the context length from (0.5.14 utils/hf_transformers/common.py:369-397), in this order
CONTEXT_LENGTH_KEYS = ("max_sequence_length", "seq_length", "max_seq_len", "model_max_length",
                       "max_position_embeddings")


@dataclass
class ServerCommand:
    argv: list[str]  # the whole command
    entry: str  # sglang.launch_server | sglang serve | sglang.compile_deep_gemm
    server_args: list[str]  # what SGLang's parser sees

    def display(self) -> str:
        return shlex.join(self.argv)


def split_command(cmd: str | list[str], what: str = "--sglang-cmd") -> list[str]:
    if isinstance(cmd, list):
        return list(cmd)
    try:
        return shlex.split(cmd)
    except ValueError as exc:
        raise InputError(f"cannot parse {what}: {exc}") from None


def find_server_command(argv: list[str]) -> ServerCommand | None:
    """The SGLang server inside a command line (``python -m sglang.launch_server ...``, ``sglang serve ...``, also
    behind ``env``/``numactl``-style wrappers), or None."""
    for i, arg in enumerate(argv):
        if arg == "-m" and i + 1 < len(argv) and argv[i + 1] in ENTRY_MODULES:
            return ServerCommand(argv, argv[i + 1], argv[i + 2:])
        if arg.startswith("-m") and arg[2:] in ENTRY_MODULES:
            return ServerCommand(argv, arg[2:], argv[i + 1:])
        if (arg == "sglang" or arg.endswith("/sglang")) and i + 1 < len(argv) and argv[i + 1] == "serve":
            return ServerCommand(argv, "sglang serve", argv[i + 2:])
    return None


def parse_command(cmd: str | list[str], what: str = "--sglang-cmd") -> ServerCommand:
    argv = split_command(cmd, what)
    found = find_server_command(argv)
    if found is None:
        raise InputError(f"{what} is not an SGLang server command: {shlex.join(argv)[:120]}",
                         hint='pass e.g. --sglang-cmd "python -m sglang.launch_server --model-path ... --tp 8"')
    return found


# ---- which option table ------------------------------------------------------------------------------------------


def _version(v: str) -> Version | None:
    try:
        return Version(v)
    except InvalidVersion:
        return None


def choose_table(profile: Profile, requested: str | None) -> tuple[OptionTable, str]:
    """The option table for ``profile`` (``requested``: the version asked for, or None) and why it was chosen."""
    installed = installed_sglang()
    if installed is not None:
        version, pkg = installed
        v = _version(version)
        if v is not None and v in profile.sglang and (requested is None or requested in (version, profile.id)):
            table = OptionTable(version, f"installed:{pkg}", extract_options(sources_from_dir(pkg)))
            return table, f"the installed sglang {version}'s server_args.py ({pkg})"
    tables = bundled_tables()
    members = sorted((v for v in tables if _version(v) is not None and Version(v) in profile.sglang), key=Version)
    if not members:
        raise InputError(f"no SGLang option table is bundled for profile {profile.id}",
                         hint="install that sglang (pip install --no-deps sglang==VERSION) so its own server_args.py "
                              "is read")
    want = _version(requested) if requested else None
    if want is not None and str(want) in tables:
        pick = str(want)
    elif want is not None:
        below = [v for v in members if Version(v) <= want]
        pick = below[-1] if below else members[0]
    else:
        pick = members[-1]
    table = read_table_file(tables[pick])
    why = f"sglang {pick}'s options (bundled table, read from its wheel)"
    if requested and pick != requested and requested != profile.id:
        why += f"; nearest bundled release to {requested}"
    if profile.spec_capture_options:
        extra = spec_capture_overlay()
        table.options = table.options + extra.options
        table.extra_origin = extra.origin
        why += " + the --enable-spec-capture options of SpecForge 0.2.0's sglang patch"
    return table, why


# ---- parsing -----------------------------------------------------------------------------------------------------


def _human_int(value: str) -> int:
    """SGLang's human_readable_int (0.5.14 utils/common.py:2500-2530): 16384, 16k, 25.6k, 16Ki, 1M."""
    from decimal import Decimal, InvalidOperation

    value = value.strip()
    iec = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    si = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
    for suffix, mult in list(iec.items()) + list(si.items()):
        if value.endswith(suffix):
            number = value[: -len(suffix)]
            try:
                if suffix in iec:
                    return int(number) * mult
                return int(Decimal(number) * mult)
            except (ValueError, InvalidOperation):
                break
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer {value!r}") from None


_TYPES = {"int": int, "float": float, "str": str, "human_int": _human_int}


class _Refusal(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would print usage and exit 2
        raise _Refusal(message)


def build_parser(table: OptionTable) -> argparse.ArgumentParser:
    parser = _Parser(prog="sglang.launch_server", add_help=False, allow_abbrev=True, conflict_handler="resolve")
    for o in table.options:
        kw: dict[str, Any] = {"dest": o.dest, "default": argparse.SUPPRESS}
        if o.nargs == 0:
            kw.update(action="store_const", const=True if o.const is None else o.const)
        else:
            kw["type"] = _TYPES.get(o.type, str)
            if o.nargs is not None:
                kw["nargs"] = o.nargs
            if o.choices:
                kw["choices"] = o.choices
        if o.required:
            kw["required"] = True
        parser.add_argument(*o.names, **kw)
    return parser


# dest spellings: up to 0.5.9 argparse stores --tensor-parallel-size under its own name and from_cli_args copies
# it (0.5.1 server_args.py:2068-2071)
DEST_ALIASES = {"tp_size": ("tp_size", "tensor_parallel_size"), "ep_size": ("ep_size", "expert_parallel_size"),
                "dp_size": ("dp_size", "data_parallel_size"), "pp_size": ("pp_size", "pipeline_parallel_size"),
                "cuda_graph_max_bs": ("cuda_graph_max_bs", "cuda_graph_max_bs_decode"),
                "cuda_graph_bs": ("cuda_graph_bs", "cuda_graph_bs_decode")}


@dataclass
class ServerSettings:
    """A server command as that SGLang release reads it, reduced to what the kernels depend on."""

    command: ServerCommand
    sglang_version: str  # the release whose options were used
    table_reason: str
    given: dict[str, Any]  # dest -> value, only what the command sets
    defaults: dict[str, Any]  # dest -> the table's default
    notes: list[str] = field(default_factory=list)

    def get(self, name: str, default: Any = None) -> Any:
        for dest in DEST_ALIASES.get(name, (name,)):
            if dest in self.given:
                return self.given[dest]
        for dest in DEST_ALIASES.get(name, (name,)):
            if dest in self.defaults and self.defaults[dest] is not None:
                return self.defaults[dest]
        return default

    def option_name(self, dest: str) -> str:
        return self._names.get(dest, "--" + dest.replace("_", "-"))

    _names: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def model(self) -> str:
        return str(self.get("model_path"))

    @property
    def tp(self) -> int:
        return int(self.get("tp_size", 1))

    @property
    def ep(self) -> int:
        """--ep-size as given; the release's rules that set it to tp (--enable-ep-moe, all-to-all backends) are
        applied by planning.moe_rules (data/moe_rules.yaml)."""
        return int(self.get("ep_size", 1))

    def options(self) -> dict[str, Any]:
        """Every option's value as the server sees it: given, else the release's default."""
        return {**self.defaults, **self.given}

    @property
    def moe_runner_backend(self) -> str:
        return str(self.get("moe_runner_backend", "auto"))

    @property
    def nnodes(self) -> int:
        return int(self.get("nnodes", 1))

    @property
    def node_rank(self) -> int:
        return int(self.get("node_rank", 0))

    def chunked_prefill_size(self) -> tuple[int, str]:
        value = self.get("chunked_prefill_size")
        if value is None:
            return H200_CLASS_CHUNKED_PREFILL, (f"--chunked-prefill-size not given: SGLang's default "
                                                f"{H200_CLASS_CHUNKED_PREFILL} for 80-160 GB GPUs (H100/H200/H20)")
        return int(value), f"--chunked-prefill-size {value}"

    def to_dict(self) -> dict[str, Any]:
        return {"command": self.command.display(), "entry": self.command.entry, "sglang_options": self.sglang_version,
                "options_from": self.table_reason, "given": dict(self.given), "notes": list(self.notes)}


def parse_server_args(command: ServerCommand, table: OptionTable, table_reason: str) -> ServerSettings:
    parser = build_parser(table)
    args = list(command.server_args)
    if any(a == "--config" or a.startswith("--config=") for a in args):
        raise InputError("the server command uses --config FILE, which dgprecompile does not read",
                         hint="put those options on the command line itself")
    try:
        ns = parser.parse_args(args)
    except _Refusal as exc:
        _refuse_unpatched(table, args)
        raise InputError(f"the server command is not valid for sglang {table.sglang}: {exc}",
                         hint="fix the command (SGLang itself would refuse it), or pass the --sglang version it "
                              "is meant for") from None
    names = {}
    for o in table.options:
        names.setdefault(o.dest, o.names[0])
    s = ServerSettings(command=command, sglang_version=table.sglang, table_reason=table_reason, given=vars(ns),
                       defaults={o.dest: o.default for o in table.options})
    s._names = names
    return s


def _refuse_unpatched(table: OptionTable, args: list[str]) -> None:
    """A command with SpecForge's spec-capture options read with a stock sglang's own options (no patch): that
    server would refuse them too, so the fix is SpecForge's sglang patch, not the command."""
    capture = spec_capture_overlay()
    if table.sglang != capture.sglang.split("+")[0]:
        return  # the patch is for that release only: elsewhere these are plain unknown options
    wanted = {n for o in capture.options for n in o.names}
    have = {n for o in table.options for n in o.names}
    used = sorted({a.split("=", 1)[0] for a in args} & wanted - have)
    if used:
        patch = capture.origin.split(":", 1)[-1]
        raise InputError(f"the sglang {table.sglang} read here ({table.origin}) has no {', '.join(used)}: it is stock "
                         "sglang, without the spec-capture patch SpecForge's capture server needs (that server "
                         "would refuse these options too)",
                         hint=f"patch this sglang with SpecForge's patches/sglang/{patch} "
                              "(SpecForge's scripts/apply_sglang_spec_capture_patch.sh applies it), then run again")


# ---- what is not modelled ------------------------------------------------------------------------------------------


def _refuse(s: ServerSettings, dest: str, what: str, hint: str) -> None:
    value = s.given[dest]
    shown = s.option_name(dest) if value is True else f"{s.option_name(dest)} {value}"
    raise InputError(f"{shown}: {what}; the planner does not model it and would plan the wrong kernels",
                     hint=hint)


def check_modelled(s: ServerSettings, model_quant: str | None) -> None:
    """Refuse options that change which DeepGEMM kernels the server calls and that plan does not model."""
    g = s.given
    drop = "drop it from the server command to plan the default path, " + TRACE_HINT
    for dest in ("enable_dp_attention",):
        if g.get(dest):
            _refuse(s, dest, "DP attention changes the attention split and the tokens per rank", drop)
    for dest in ("attn_dp_size",):
        if dest in g and int(g[dest]) > 1:
            _refuse(s, dest, "DP attention changes the attention split and the tokens per rank", drop)
    from dgprecompile.planning.moe_rules import all_to_all_kernels

    where = all_to_all_kernels(s.sglang_version)
    if g.get("enable_deepep_moe"):
        _refuse(s, "enable_deepep_moe", "DeepEP all-to-all MoE runs other expert kernels and token counts" + where,
                drop)
    if "moe_a2a_backend" in g and g["moe_a2a_backend"] not in (None, "none"):
        _refuse(s, "moe_a2a_backend", "an all-to-all MoE backend runs other expert kernels and token counts" + where,
                drop)
    if g.get("enable_fused_moe_sum_all_reduce"):  # compile/triton_moe.py warms the server's default (False)
        _refuse(s, "enable_fused_moe_sum_all_reduce", "it fuses the MoE's sum and all-reduce into the Triton down "
                "projection (another fused_moe_kernel, srt/layers/moe/moe_runner/triton_utils/fused_moe.py:490)",
                drop)
    if "quantization" in g and g["quantization"] not in (None, model_quant):
        _refuse(s, "quantization", f"a quantization other than the checkpoint's own ({model_quant or 'none'})",
                "drop --quantization (SGLang then uses the checkpoint's block-FP8 weights)")
    if "speculative_algorithm" in g and g["speculative_algorithm"] is not None:
        _refuse(s, "speculative_algorithm", "speculative decoding adds a draft model and verify batches",
                "plan the server without speculative decoding, " + TRACE_HINT)
    if "moe_dense_tp_size" in g and g["moe_dense_tp_size"] is not None:
        _refuse(s, "moe_dense_tp_size", "a separate tensor-parallel size for dense MLPs", drop)
    if "fp8_gemm_runner_backend" in g and g["fp8_gemm_runner_backend"] not in ("auto", "deep_gemm"):
        _refuse(s, "fp8_gemm_runner_backend", "the dense FP8 GEMMs then run outside DeepGEMM",
                "drop the option (auto uses DeepGEMM on Hopper)")
    from dgprecompile.planning.shapes import MOE_BACKENDS

    if "moe_runner_backend" in g and g["moe_runner_backend"] not in MOE_BACKENDS:
        _refuse(s, "moe_runner_backend", "this MoE runner is not modelled (auto, deep_gemm and triton are)",
                "use --moe-runner-backend auto, deep_gemm or triton, " + TRACE_HINT)
    if s.nnodes < 1 or s.tp % s.nnodes:
        raise InputError(f"--tp-size {s.tp} is not a multiple of --nnodes {s.nnodes}: SGLang puts tp/nnodes GPUs "
                         "on every node", hint="pass a tp that is a multiple of the node count")
    if not 0 <= s.node_rank < s.nnodes:
        raise InputError(f"--node-rank {s.node_rank} is not below --nnodes {s.nnodes}",
                         hint="node ranks count from 0 to nnodes - 1")


# ---- the token bound ---------------------------------------------------------------------------------------------


def model_context_length(config: dict[str, Any]) -> int:
    """SGLang's derived context length: the first of CONTEXT_LENGTH_KEYS, times the rope scaling factor unless the
    scaling names original_max_position_embeddings or is llama3 (0.5.14 utils/hf_transformers/common.py:378-397)."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    rope = text.get("rope_scaling") or {}
    factor = rope.get("factor", 1) if isinstance(rope, dict) else 1
    if isinstance(rope, dict) and ("original_max_position_embeddings" in rope or rope.get("rope_type") == "llama3"):
        factor = 1
    for key in CONTEXT_LENGTH_KEYS:
        if text.get(key) is not None:
            return int(factor * text[key])
    return 2048


# SGLang refuses a --context-length above the model's own unless this is set (0.5.14 configs/model_config.py:667-696,
# environ.py:607)
LONGER_CONTEXT_ENV = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"
ENV_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def command_env(command: ServerCommand | None, name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """What the server will read for ``name``: an assignment before the command (``env VAR=1 python -m
    sglang.launch_server ...``), else ``environ`` (default: this process's; plan runs where the job will), else
    None."""
    prefix = command.argv[:len(command.argv) - len(command.server_args)] if command is not None else []
    assigned = dict(a.split("=", 1) for a in prefix if ENV_ASSIGNMENT.match(a))
    return assigned.get(name, (os.environ if environ is None else environ).get(name))


def grad_mode_from(command: ServerCommand | None, environ: Mapping[str, str] | None = None) -> str:
    """The autograd mode a job's forwards run under (SGLang's DynamicGradMode) as its command and environment set
    it: what plan decides once for every torch.compile item, and what launch holds the job's environment to."""
    from dgprecompile.runtimes.inductor import INDUCTOR_GRAPHS

    return INDUCTOR_GRAPHS.grad_mode(command_env(command, INDUCTOR_GRAPHS.grad_variable, environ))


def ctx_longer_than_model(s: ServerSettings, ctx: int, derived: int) -> None:
    """Refuse what the server itself refuses: a longer context without SGLang's opt-in, in this environment or as
    an assignment before the command (``env VAR=1 python -m sglang.launch_server ...``)."""
    value = command_env(s.command, LONGER_CONTEXT_ENV) or ""
    if value.strip().lower() not in ("1", "true", "yes", "y", "on"):
        raise InputError(f"--context-length {ctx} is above the model's context length {derived}: SGLang refuses "
                         f"that unless {LONGER_CONTEXT_ENV}=1",
                         hint=f"drop --context-length or keep it at most {derived} (or set {LONGER_CONTEXT_ENV}=1 "
                              "as the server will have it)")


@dataclass
class TokenBound:
    max_tokens: int  # the largest forward the server runs on a rank
    sweep_m_max: int  # SGLang's own precompile range (its m_max), whether or not it is planned
    lines: list[str]  # how each was derived


def token_bound(s: ServerSettings, model_config: dict[str, Any]) -> TokenBound:
    chunked, why = s.chunked_prefill_size()
    lines = [why]
    max_prefill = int(s.get("max_prefill_tokens", 16384))
    if chunked > 0:
        prefill = chunked
        lines.append(f"chunked prefill: a prefill forward holds at most {chunked} tokens")
        if s.get("enable_dynamic_chunking") and int(s.get("pp_size", 1)) > 1:
            prefill = max(prefill, max_prefill, -(-chunked * 5 // 4))
            lines.append(f"--enable-dynamic-chunking with pp > 1 grows chunks up to {prefill}")
    else:
        given_ctx, derived = s.get("context_length"), model_context_length(model_config)
        ctx = int(given_ctx) if given_ctx is not None else derived
        src = "--context-length" if given_ctx is not None else "the model's config"
        if ctx > derived:
            ctx_longer_than_model(s, ctx, derived)
            src += f", above the model's {derived} ({LONGER_CONTEXT_ENV}=1)"
        prefill = max(max_prefill - 1, ctx - 6)
        lines.append(f"chunked prefill off: one request of up to context {ctx} ({src}) - 6 = {ctx - 6} tokens, or "
                     f"several below --max-prefill-tokens {max_prefill}: at most {prefill} tokens")
    decode_parts = [int(v) for v in (s.get("cuda_graph_max_bs"),) if v is not None]
    decode_parts += [int(v) for v in (s.get("cuda_graph_bs") or [])]
    decode_parts += [int(v) for v in (s.get("cuda_graph_bs_prefill") or [])]
    decode_parts += [int(v) for v in (s.get("cuda_graph_max_bs_prefill"),) if v is not None]
    if s.get("max_running_requests") is not None:
        decode_parts.append(int(s.get("max_running_requests")))
    decode = max(decode_parts or [512 if s.tp >= 4 else 256])
    if decode > prefill:
        lines.append(f"decode/CUDA-graph batches reach {decode} tokens")
    sweep = sglang_precompile_m_max(chunked)
    return TokenBound(max(prefill, decode), sweep, lines)
