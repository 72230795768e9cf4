"""Entry point: a click group whose commands are imported only when run, so `plan` never pays for others.

The group makes the one Output object every command renders through (``ctx.obj``), and is the one path from
a command's outcome to the exit code: a command returns a report (its ``return_code`` is the exit code) or
raises a DGError (one ``error:`` line, a ``hint:``, its exit code); click's own usage errors are shown the
same way.
"""

from __future__ import annotations

import importlib
import importlib.util
import signal
import sys

import click

from dgprecompile import __version__
from dgprecompile.errors import EXIT_INTERRUPTED, EXIT_USAGE, DGError
from dgprecompile.output import Output

# command name -> module under dgprecompile.cli defining `command`
COMMANDS = {
    "plan": "plan",
    "warm": "warm",
    "verify": "verify",
    "pack": "pack",
    "unpack": "unpack",
    "pull": "pull",
    "push": "push",
    "keygen": "keygen",
    "launch": "launch",
    "doctor": "doctor",
    "repro": "repro",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return [name for name, mod in COMMANDS.items() if importlib.util.find_spec(f"dgprecompile.cli.{mod}")]

    def get_command(self, ctx, name):
        mod = COMMANDS.get(name)
        if mod is None or importlib.util.find_spec(f"dgprecompile.cli.{mod}") is None:
            return None
        return importlib.import_module(f"dgprecompile.cli.{mod}").command

    def invoke(self, ctx):
        try:
            report = super().invoke(ctx)
        except DGError as exc:
            # every error names a fix; where the raiser knew none, the command's help is the next step
            command = " ".join(p for p in (ctx.command_path, ctx.invoked_subcommand) if p)
            _output(ctx).error(exc.message, exc.hint or f"see `{command} --help`")
            ctx.exit(exc.exit_code)
        except OSError as exc:  # a file this user may not read or write (a shared or read-only cache)
            from dgprecompile.fsutil import os_error

            err = os_error(exc, option=_path_option(ctx.invoked_subcommand))
            _output(ctx).error(err.message, err.hint)
            ctx.exit(err.exit_code)
        except KeyboardInterrupt:
            _output(ctx).error(_interrupted(ctx.invoked_subcommand))
            ctx.exit(_interrupt_code())
        code = getattr(report, "return_code", 0)
        if code:
            ctx.exit(code)
        return report


def _path_option(name: str | None) -> str | None:
    """The option (or argument) by which the command ``name`` is told where to write (its module's
    PATH_OPTION), for the hint of a file error: a hint names only an option the command has."""
    mod = COMMANDS.get(name or "")
    return getattr(importlib.import_module(f"dgprecompile.cli.{mod}"), "PATH_OPTION", None) if mod else None


def _interrupted(name: str | None) -> str:
    """What an interrupted command left: its module's INTERRUPTED where it writes elsewhere than the cache."""
    mod = COMMANDS.get(name or "")
    said = getattr(importlib.import_module(f"dgprecompile.cli.{mod}"), "INTERRUPTED", None) if mod else None
    return said or "interrupted: nothing half-written was left in the cache"


def _output(ctx: click.Context) -> Output:
    obj = ctx.find_object(Output)
    return obj if obj is not None else Output()


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="dgprecompile")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Compile SGLang's DeepGEMM kernels ahead of time and run jobs with runtime JIT off.

    \b
    Typical flow:
      dgprecompile plan   --model Qwen3-Coder-480B --tp 8 --ep 8 --sglang 0.5.1 \\
          -o plan.yaml
      dgprecompile warm   --manifest plan.yaml
      dgprecompile verify --manifest plan.yaml
      dgprecompile launch --manifest plan.yaml -- \\
          torchrun --nproc_per_node 8 train.py ...
    """
    ctx.obj = Output()


def _usage_hint(exc: click.ClickException) -> str:
    ctx = getattr(exc, "ctx", None)
    path = ctx.command_path if ctx is not None else "dgprecompile"
    return f"see `{path} --help`"


def main(argv: list[str] | None = None) -> None:
    # SIGTERM (schedulers, `timeout`) and SIGHUP (a closed terminal) stop a command like Ctrl-C does
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _raise_interrupt)
    try:
        # not standalone: click hands back ctx.exit()'s code (or the command's report) instead of exiting
        outcome = cli.main(args=argv, prog_name="dgprecompile", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:  # usage errors: the one error format, exit 2
        Output().error(exc.format_message(), _usage_hint(exc))
        sys.exit(exc.exit_code if exc.exit_code else EXIT_USAGE)
    except (click.exceptions.Abort, KeyboardInterrupt):
        Output().error("interrupted")
        sys.exit(_interrupt_code())
    sys.exit(outcome if isinstance(outcome, int) else getattr(outcome, "return_code", 0))


_received: list[int] = []


def _raise_interrupt(signum, _frame) -> None:
    _received.append(signum)
    raise KeyboardInterrupt


def _interrupt_code() -> int:
    return 128 + _received[-1] if _received else EXIT_INTERRUPTED
