"""`dgprecompile launch`: check the cache, then run the unchanged trainer with runtime JIT off."""

from __future__ import annotations

import dataclasses
import shlex

import click

from dgprecompile.cli.options import cache_dir_option, plan_options, resolve_plan
from dgprecompile.errors import InputError
from dgprecompile.output import Output


def _looks_like_specforge(argv: list[str]) -> bool:
    return any("train_eagle3" in a for a in argv) or "--tp-size" in argv


@click.command("launch", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@plan_options
@cache_dir_option
@click.option("--strict/--no-strict", default=True, show_default=True,
              help="Strict: any DeepGEMM compile at run time fails at once, naming the kernel. Non-strict: allowed, "
                   "traced, and reported at exit with a misses file.")
@click.option("--allow-missing", is_flag=True, help="Start even when the cache lacks planned kernels.")
@click.option("--trace", "trace_dir", type=click.Path(file_okay=False), default=None,
              help="Record every DeepGEMM call of every rank as JSON lines in DIR (for `plan --from-trace`).")
@click.option("--misses", "misses_path", type=click.Path(dir_okay=False), default=None,
              help="Non-strict: where to write the misses file (default ./dgprecompile-misses.jsonl).")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def command(plan_request, manifest, config, cache_dir, strict, allow_missing, trace_dir, misses_path,
            command) -> None:
    """Run COMMAND (e.g. torchrun ...) with SGLang's runtime DeepGEMM precompile off and the warmed cache.

    Checks the cache against the plan first and refuses to start when kernels are missing. The command's
    output, exit code and signals pass through; Ctrl-C and SIGTERM reach every process of the job.

    \b
    Examples:
      dgprecompile launch --manifest plan.yaml -- torchrun --nproc_per_node 8 train.py ...
      dgprecompile launch --config train.yaml
      dgprecompile launch --manifest plan.yaml --no-strict -- python train.py   # records misses
      dgprecompile launch --manifest plan.yaml --trace traces/ -- python train.py
    """
    from dgprecompile.launch.launcher import DEFAULT_TRAIN_COMMAND, LaunchOptions, command_from_config, launch

    out = Output()
    argv = list(command)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        argv = command_from_config(config) or []
        if not argv and config:
            argv = shlex.split(DEFAULT_TRAIN_COMMAND)
            out.info("no `command:` in the config: using the default SpecForge command")
    if not argv:
        raise InputError("no command to launch", hint="dgprecompile launch --manifest plan.yaml -- torchrun ...")
    if (manifest is None and plan_request.specforge_cmd is None and plan_request.max_tokens is None
            and _looks_like_specforge(argv)):
        plan_request = dataclasses.replace(plan_request, specforge_cmd=shlex.join(argv))
    plan = resolve_plan(plan_request, manifest)
    out.info(f"plan: {plan.model} tp={plan.tp} ep={plan.ep} sglang {plan.profile.id} "
             f"({plan.profile_reason}): {len(plan.kernels)} kernels")
    result = launch(LaunchOptions(plan=plan, command=argv, cache_dir=cache_dir,
                                  strict=strict, allow_missing=allow_missing, trace_dir=trace_dir,
                                  misses_path=misses_path, manifest=manifest, model_arg=plan_request.model), out)
    raise click.exceptions.Exit(result.exit_code)
