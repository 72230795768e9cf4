"""Entry point: a click group whose commands are imported only when run, so `plan` never pays for others."""

from __future__ import annotations

import importlib
import sys

import click

from dgprecompile import __version__
from dgprecompile.errors import DGError

# command name -> module under dgprecompile.cli defining `command`
COMMANDS = {
    "plan": "plan",
    "warm": "warm",
    "verify": "verify",
    "pack": "pack",
    "unpack": "unpack",
    "launch": "launch",
    "doctor": "doctor",
    "repro": "repro",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return [name for name, mod in COMMANDS.items() if importlib.util.find_spec(f"dgprecompile.cli.{mod}")]

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except DGError as exc:
            from dgprecompile.output import Output

            Output().error(exc.message, exc.hint)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("interrupted: nothing half-written was left in the cache", err=True)
            ctx.exit(130)

    def get_command(self, ctx, name):
        mod = COMMANDS.get(name)
        if mod is None or importlib.util.find_spec(f"dgprecompile.cli.{mod}") is None:
            return None
        return importlib.import_module(f"dgprecompile.cli.{mod}").command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="dgprecompile")
def cli() -> None:
    """Compile SGLang's DeepGEMM kernels ahead of time and run jobs with runtime JIT off.

    \b
    Typical flow:
      dgprecompile plan   --model Qwen3-Coder-480B --tp 8 --ep 8 --sglang 0.5.1 -o plan.yaml
      dgprecompile warm   --manifest plan.yaml
      dgprecompile verify --manifest plan.yaml
      dgprecompile launch --manifest plan.yaml -- torchrun --nproc_per_node 8 train.py ...
    """


def main(argv: list[str] | None = None) -> None:
    try:
        cli.main(args=argv, prog_name="dgprecompile")
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
