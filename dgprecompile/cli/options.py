"""Options shared by several commands, and turning them into a plan (pip-tools style: one place)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import click

from dgprecompile import schemas
from dgprecompile.documents import load_yaml_text
from dgprecompile.errors import InputError
from dgprecompile.fsutil import read_input
from dgprecompile.output import Output
from dgprecompile.planning.manifest import read_manifest
from dgprecompile.planning.plan import MAX_M, Plan, PlanRequest, gpu_sms
from dgprecompile.planning.request import plan_from_request
from dgprecompile.planning.shapes import MOE_BACKENDS

CONFIG_HINT = "fix it in the config file: its keys are the long options' names, with the values they take (see train.yaml)"


def load_config_file(path: str | None) -> dict[str, Any]:
    """A train.yaml: the same names as the long options (dashes or underscores), plus `command`; its form checked
    against the ``train-config`` schema (data/schemas/)."""
    if path is None:
        return {}
    text = read_input(path, "config file", hint="pass --config with an existing file (see train.yaml)")
    data = load_yaml_text(text, str(path), hint="fix the YAML (see train.yaml)")
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InputError(f"{path} must hold a mapping of option names to values", hint="see train.yaml")
    out = {str(k).replace("-", "_"): v for k, v in data.items()}
    known = sorted(schemas.schema("train-config")["properties"])
    unknown = sorted(set(out) - set(known))
    if unknown:
        raise InputError(f"{path}: unknown keys {', '.join(map(schemas.shown, unknown))}",
                         hint=f"the keys are the long options' names: {', '.join(known)}")
    return schemas.check(out, "train-config", path, hint=CONFIG_HINT)


def _through_option_types(config: dict[str, Any], path: str | None) -> dict[str, Any]:
    """Each config value converted by the command's own option of that name (click's type: ranges, choices,
    paths), so a file value is held to what the command line accepts; one error naming the key."""
    ctx = click.get_current_context()
    params = {p.name: p for p in ctx.command.params if isinstance(p, click.Option)}
    out = dict(config)
    for name, value in config.items():
        param = params.get(name)
        if param is None or value is None:
            continue
        try:
            out[name] = param.type.convert(value, param, ctx)
        except click.BadParameter as exc:
            raise InputError(f"{path}: {name}: {exc.message}", hint=CONFIG_HINT) from None
    return out


def _chunked_prefill_size(ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    """SGLang's values: a positive size, or -1 for chunked prefill off; another number is a typo, not "off"."""
    if value is not None and value < 1 and value != -1:
        raise InputError(f"--chunked-prefill-size {value}: SGLang takes a positive size, or -1 for chunked "
                         "prefill off", hint="pass --chunked-prefill-size -1 (off) or a size such as 8192")
    return value


CHUNKED_PREFILL_OPTION = click.option(
    "--chunked-prefill-size", type=click.IntRange(max=MAX_M), default=None, callback=_chunked_prefill_size,
    help="Serving: SGLang's --chunked-prefill-size (sets the largest m as SGLang's precompile does; -1: chunked "
         "prefill off).")


def plan_options(func):
    """--manifest / --config and the plan inputs; passes `plan_request`, `manifest`, `config` to the command."""

    @click.option("--manifest", "manifest", type=click.Path(dir_okay=False), default=None,
                  help="A manifest written by `plan -o` (instead of the options below).")
    @click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None,
                  help="A train.yaml holding these options (command-line options win).")
    @click.option("--model", "-m", default=None,
                  help="Bundled name or alias, config.json path, model directory, or HF repo id in the local cache.")
    @click.option("--tp", type=click.IntRange(min=1), default=None, help="Tensor-parallel size (default: --ep when only that is given, else 1).")
    @click.option("--ep", type=click.IntRange(min=1), default=None, help="Expert-parallel size (default 1).")
    @click.option("--sglang", "sglang", default=None, metavar="VERSION",
                  help="SGLang version or profile id (default: the installed sglang, else the newest profile).")
    @click.option("--moe-runner-backend", type=click.Choice(MOE_BACKENDS), default=None,
                  help="SGLang's --moe-runner-backend (default auto).")
    @click.option("--max-tokens", type=click.IntRange(min=1, max=MAX_M), default=None, help="Largest tokens in one forward on a rank.")
    @click.option("--specforge-cmd", default=None, metavar="CMD",
                  help="The trainer's command line; tp, ep and the largest tokens per forward are read from it.")
    @click.option("--sglang-cmd", default=None, metavar="CMD",
                  help='The SGLang server command ("python -m sglang.launch_server --model-path ... --tp 8 ..."): '
                       "model, tp, ep, MoE runner and the largest m are read from it as that sglang reads them.")
    @click.option("--specforge-config", default=None, metavar="RUN.YAML", type=click.Path(dir_okay=False),
                  help="A SpecForge 0.2.0 run config: plans the capture server `specforge train` starts.")
    @click.option("--sglang-precompile/--no-sglang-precompile", "sglang_precompile", default=None,
                  help="Also plan what SGLang's own DeepGEMM precompile compiles when it stays on (every key swept "
                       "over its m range; the transpose kernels of its row-major warm-up scales). Default: on with "
                       "--sglang-cmd/--specforge-config, off otherwise.")
    @click.option("--keys-only", "keys_only", is_flag=True, default=None,
                  help="Plan each key and the m range SGLang calls it with, without the kernel model: `warm` then "
                       "lets the installed DeepGEMM choose for every m, on a GPU (--backend sweep).")
    @CHUNKED_PREFILL_OPTION
    @click.option("--gpu", default=None, type=click.Choice(list(gpu_sms()), case_sensitive=False),
                  help="GPU model (sets the SM count).")
    @click.option("--num-sms", type=click.IntRange(min=2), default=None, help="SM count the kernels are chosen for (default 132).")
    @functools.wraps(func)
    def wrapper(*args, manifest, config_file, model, tp, ep, sglang, moe_runner_backend, max_tokens,
                specforge_cmd, sglang_cmd, specforge_config, sglang_precompile, keys_only, chunked_prefill_size, gpu,
                num_sms, **kwargs):
        config = _through_option_types(load_config_file(config_file), config_file)

        def pick(value, name, default=None):
            return value if value is not None else config.get(name, default)

        req = PlanRequest(
            model=pick(model, "model"), tp=pick(tp, "tp"), ep=pick(ep, "ep"), sglang=_str(pick(sglang, "sglang")),
            moe_runner_backend=pick(moe_runner_backend, "moe_runner_backend", "auto"),
            max_tokens=pick(max_tokens, "max_tokens"), specforge_cmd=pick(specforge_cmd, "specforge_cmd"),
            chunked_prefill_size=pick(chunked_prefill_size, "chunked_prefill_size"), gpu=pick(gpu, "gpu"),
            num_sms=pick(num_sms, "num_sms"), sglang_cmd=pick(sglang_cmd, "sglang_cmd"),
            specforge_config=pick(specforge_config, "specforge_config"),
            sglang_precompile=pick(sglang_precompile, "sglang_precompile"),
            keys_only=bool(pick(keys_only, "keys_only", False)),
        )
        if "cache_dir" in kwargs:  # --cache-dir, else the config file's cache_dir (resolve_cache_dir decides the rest)
            kwargs["cache_dir"] = pick(kwargs["cache_dir"], "cache_dir")
        return func(*args, plan_request=req, manifest=pick(manifest, "manifest"), config=config, **kwargs)

    return wrapper


def _str(value):
    return None if value is None else str(value)


def resolve_plan(plan_request: PlanRequest, manifest: str | None, trace: str | None = None) -> Plan:
    """The plan a command works on: the calls a traced run recorded (--trace/--from-trace DIR), a manifest, or
    the plan options."""
    if trace is not None:
        if manifest is not None:
            raise InputError("pass a trace directory or --manifest, not both", hint="a trace is a plan of its own")
        from dgprecompile.planning.trace import plan_from_trace

        return plan_from_trace(Path(trace), plan_request)
    if manifest is not None:
        if plan_request.model is not None:
            raise InputError("pass --manifest or --model, not both", hint="a manifest already names the model")
        if plan_request.sglang_cmd is not None or plan_request.specforge_config is not None:
            raise InputError("pass --manifest or a server command/config, not both",
                             hint="a manifest already records the server it was planned from")
        return read_manifest(Path(manifest))
    plan = plan_from_request(plan_request)
    out = click.get_current_context(silent=True)
    out = out.find_object(Output) if out is not None else None
    for assumption in plan.assumed if out is not None else ():
        out.note(assumption, wrap=True)  # `--ep 8` alone: tp 8, said by every command that plans
    return plan


def output_options(func):
    """--json and --quiet; passes the group's Output object, configured by them, as ``out``."""

    @click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
    @click.option("--quiet", "-q", is_flag=True, help="Only the result and errors: no progress, notes or warnings.")
    @functools.wraps(func)
    def wrapper(*args, as_json, quiet, **kwargs):
        ctx = click.get_current_context()
        out = ctx.find_object(Output)
        if out is None:
            out = ctx.ensure_object(Output)
        return func(*args, out=out.configure(json_mode=as_json, quiet=quiet), **kwargs)

    return wrapper


def shared_cache_option(func):
    return click.option("--shared-cache", "shared_cache", multiple=True, type=click.Path(file_okay=False),
                        metavar="DIR",
                        help="A read-only cache searched after --cache-dir, in the order given (an image layer, a "
                             "network mount); repeatable. Only for runtimes that read several roots (DeepJIT, "
                             "sgl-deep-gemm 0.2.x).")(func)


def cache_dir_option(func):
    return click.option("--cache-dir", type=click.Path(file_okay=False), default=None,
                        help="DeepGEMM cache directory (default: the one the SGLang profile's runtime uses).")(func)


def trust_options(func):
    """--trusted-key FILE (repeatable), --allow-unsigned and --allow-rollback; passes ``trust`` (cache.signing.Trust)
    to the command.
    The keys are loaded (and `cryptography` imported) only when some are given."""

    @click.option("--trusted-key", "trusted_keys", multiple=True, type=click.Path(dir_okay=False), metavar="FILE",
                  help="Public key (.pub) whose signature an artifact must carry; repeat it to trust several (key "
                       "rotation). Default: $DGPRECOMPILE_TRUSTED_KEYS (paths separated by ':').")
    @click.option("--allow-unsigned", is_flag=True,
                  help="Install an artifact without checking who built it (only for artifacts you built yourself).")
    @click.option("--allow-rollback", is_flag=True,
                  help="Install an artifact older than the newest this cache installed for its fingerprint "
                       "(refused by default: a replayed old build).")
    @functools.wraps(func)
    def wrapper(*args, trusted_keys, allow_unsigned, allow_rollback, **kwargs):
        from dgprecompile.cache.signing import trust_from

        return func(*args, trust=trust_from(trusted_keys, allow_unsigned, allow_rollback=allow_rollback), **kwargs)

    return wrapper


def signing_key_option(func):
    """--signing-key FILE; passes ``signing_key`` (cache.signing.SigningKey or None) to the command."""

    @click.option("--signing-key", "signing_key", type=click.Path(dir_okay=False), default=None, metavar="FILE",
                  help="Ed25519 private key file to sign the artifact with (its .sig goes beside it). Default: "
                       "$DGPRECOMPILE_SIGNING_KEY (a path; never the key itself). Must be readable only by you.")
    @functools.wraps(func)
    def wrapper(*args, signing_key, **kwargs):
        from dgprecompile.cache.signing import signing_key_from

        return func(*args, signing_key=signing_key_from(signing_key), **kwargs)

    return wrapper


def output_in_a_folder(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Click callback for ``-o FILE``: the file's folder must exist, or be one new folder in an existing one (as
    `mkdir` makes it: `-o out/x` in a fresh checkout); a deeper missing path is a typo, refused before any work
    rather than created (a whole tree at the filesystem root, as root)."""
    from dgprecompile.cache.remote import is_url

    if value is None or is_url(value):
        return value
    parent = Path(value.replace("{fingerprint}", "x")).expanduser().parent
    option = param.opts[0] if param.opts else "-o"
    if parent.exists() and not parent.is_dir():
        raise InputError(f"cannot write {value}: {parent} is not a folder",
                         hint=f"pass {option} a path in an existing folder")
    if not parent.exists() and not parent.parent.is_dir():
        raise InputError(f"cannot write {value}: its folder {parent} does not exist, nor {parent.parent}",
                         hint=f"create it first (mkdir -p {parent}), or pass {option} a path in an existing folder")
    return value


def size_cap_options(func):
    """--max-entry-mib / --max-artifact-mib; passes ``limits`` (cache.confine.Limits: data/limits.yaml's caps, each
    replaced by the option given) to the command."""

    @click.option("--max-entry-mib", type=click.IntRange(min=1, max=1 << 20), default=None, metavar="MIB",
                  help="Refuse to pack an entry larger than this (default: 64, data/limits.yaml).")
    @click.option("--max-artifact-mib", type=click.IntRange(min=1, max=1 << 30), default=None, metavar="MIB",
                  help="Refuse to pack more than this in all (default: 4096, data/limits.yaml).")
    @functools.wraps(func)
    def wrapper(*args, max_entry_mib, max_artifact_mib, **kwargs):
        from dgprecompile.cache.confine import Limits

        return func(*args, limits=Limits.of(max_entry_mib, max_artifact_mib), **kwargs)

    return wrapper
