"""The one output object every command writes through.

Data (tables, JSON, YAML) goes to stdout; progress, notes, warnings and errors go to stderr, so
`dgprecompile plan --format json | jq` and CI logs both stay clean.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

MARKS = {"ok": "[green]ok[/]", "warn": "[yellow]warning[/]", "fail": "[red]problem[/]", "info": "[blue]info[/]"}


class Output:
    def __init__(self, json_mode: bool = False, quiet: bool = False, stdout=None, stderr=None):
        self.json_mode = json_mode
        self.quiet = quiet
        self.silent = False
        self.out = Console(file=stdout or sys.stdout, soft_wrap=True, highlight=False)
        self.err = Console(file=stderr or sys.stderr, soft_wrap=True, highlight=False)

    def configure(self, *, json_mode: bool = False, quiet: bool = False) -> Output:
        self.json_mode = json_mode
        self.quiet = quiet or json_mode  # progress and notes; with JSON on stdout they would only be noise
        self.silent = quiet  # warnings too: --quiet
        return self

    def report(self, report: Any, render_text: Callable[[Output, Any], None]) -> Any:
        """Show a command's report: its to_dict() as JSON in --json mode, else ``render_text(self, report)``."""
        if self.json_mode:
            self.data_json(report.to_dict())
        else:
            render_text(self, report)
        return report

    # -- data on stdout --
    def data_json(self, data: Any) -> None:
        self.out.file.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
        self.out.file.flush()

    def data_text(self, text: str) -> None:
        self.out.file.write(text if text.endswith("\n") else text + "\n")
        self.out.file.flush()

    def table(self, title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]],
              to_stderr: bool = False, no_wrap: Sequence[str] = ()) -> None:
        table = Table(title=title, title_justify="left", show_lines=False)
        for col in columns:
            table.add_column(col, overflow="fold", no_wrap=col in no_wrap)
        for row in rows:
            table.add_row(*(str(c) for c in row))
        (self.err if to_stderr else self.out).print(table)

    # -- messages on stderr --
    def info(self, message: str) -> None:
        if not self.quiet:
            self.err.print(message)

    def warn(self, message: str) -> None:
        if not self.silent:
            self.err.print(f"[yellow]warning:[/] {escape(message)}")

    def error(self, message: str, hint: str | None = None) -> None:
        # messages are plain text: `[s3]` in a hint is an extra's name, not markup
        self.err.print(f"[red]error:[/] {escape(message)}", markup=True, highlight=False)
        if hint:
            self.err.print(f"[dim]hint:[/] {escape(hint)}")

    def progress(self, total: int, description: str = "compiling") -> Progress:
        progress = Progress(
            SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(), TextColumn("{task.fields[current]}"),
            console=self.err, transient=False, disable=self.quiet,
        )
        progress.add_task(description, total=total, current="")
        return progress
