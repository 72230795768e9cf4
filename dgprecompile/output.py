"""The one output object every command writes through.

Data (tables, JSON, YAML) goes to stdout; progress, notes, warnings and errors go to stderr, so
`dgprecompile plan --format json | jq` and CI logs both stay clean.
"""

from __future__ import annotations

import json
import re
import sys
import textwrap
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Column, Table
from rich.text import Text

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
        """A table that never crops a value: numbers (and the ``no_wrap`` columns) are never cut or split, text
        columns fold at spaces; when even that does not fit the console width (a narrow terminal, COLUMNS=60,
        a pipe's 80), it falls back to one ``name=value`` line group per row."""
        console = self.err if to_stderr else self.out
        cells = [[str(c) for c in row] for row in rows]
        plain = [[_plain(c) for c in row] for row in cells]
        widths = fit_columns(list(columns), plain, console.width, no_wrap)
        if widths is None:
            self._plain_table(console, title, columns, cells, _unbreakable(list(columns), plain, no_wrap))
            return
        table = Table(title=title, title_justify="left", show_lines=False)
        for col, width, whole in zip(columns, widths, _unbreakable(list(columns), plain, no_wrap), strict=True):
            table.add_column(col, width=width, no_wrap=whole, overflow="fold")
        for row in cells:
            table.add_row(*row)
        console.print(table)

    @staticmethod
    def _plain_table(console: Console, title: str | None, columns: Sequence[str], cells: list[list[str]],
                     whole: list[bool]) -> None:
        """One ``name=value`` group per row, wrapped at spaces only: numbers and unbreakable cells stay whole."""
        wrapper = textwrap.TextWrapper(width=max(console.width, 20), subsequent_indent="    ",
                                       break_long_words=False, break_on_hyphens=False)
        if title:
            console.print(title, soft_wrap=False, overflow="fold")
        for row in cells:
            fields = []
            for col, cell, keep in zip(columns, row, whole, strict=False):
                value = ", ".join(_plain(cell).splitlines())
                if keep:
                    value = value.replace(" ", _NBSP)
                fields.append(f"{col.replace(' ', _NBSP)}={value}" if col else value)
            for line in wrapper.wrap("  ".join(fields)):
                console.print(line.replace(_NBSP, " "), soft_wrap=True, markup=False, highlight=False)

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

    def progress(self, total: int, description: str = "compiling", *, seconds_per_item: float | None = None,
                 workers: int = 1) -> KernelProgress:
        """Progress of ``total`` items on stderr: a live bar on a terminal, else a plain line every
        PLAIN_EVERY_SECONDS or every few items (CI logs, `make run`); nothing when quiet."""
        return KernelProgress(self.err, total, description, seconds_per_item=seconds_per_item, workers=workers,
                              enabled=not self.quiet)


PLAIN_EVERY_SECONDS = 10.0
_NBSP = "\u00a0"
_NUMBER = re.compile(r"^[-+]?\d[\d.,:]*(\.\.\d[\d.,]*)?( ?(s|ms|min|B|KB|MB|GB|KiB|MiB|GiB|%|x))?$")
TEXT_WORD_CAP = 24  # a word in a text column longer than this (a path) may fold; shorter ones are never split


def _plain(cell: str) -> str:
    return Text.from_markup(cell).plain if "[" in cell else cell


def _unbreakable(columns: list[str], rows: list[list[str]], no_wrap: Sequence[str]) -> list[bool]:
    return [col in no_wrap or (bool(rows) and all(_NUMBER.match(r[i]) or r[i] in ("", "-", "?") for r in rows))
            for i, col in enumerate(columns)]


def fit_columns(columns: list[str], rows: list[list[str]], width: int, no_wrap: Sequence[str] = ()
                ) -> list[int] | None:
    """Column widths for a boxed table that fits ``width`` without cutting a number or an unbreakable cell,
    or None when none exists (the caller then prints a plain layout). ``rows`` hold plain text."""
    whole = _unbreakable(columns, rows, no_wrap)
    natural, minimum = [], []
    for i, col in enumerate(columns):
        lines = [ln for r in rows for ln in r[i].splitlines()] + col.split("\n")
        nat = max((len(ln) for ln in lines), default=1) or 1
        words = [w for ln in lines for w in ln.split()] or [""]
        header_words = max((len(w) for w in col.split()), default=0)
        natural.append(nat)
        cell_lines = [ln for r in rows for ln in r[i].splitlines()]
        longest_cell = max((len(ln) for ln in cell_lines), default=0)
        # headers wrap at their spaces; an unbreakable cell is kept whole, a text cell folds at its spaces
        minimum.append(max(header_words, longest_cell if whole[i]
                           else min(TEXT_WORD_CAP, max(len(w) for w in words)), 1))
    overhead = 3 * len(columns) + 1  # one space of padding each side, and the rules between and around
    room = width - overhead
    if sum(natural) <= room:
        return natural
    if sum(minimum) > room:
        return None
    widths = list(minimum)
    spare = room - sum(widths)
    while spare > 0:  # hand the spare columns to the text columns that want them, one at a time, widest want first
        wants = [(natural[i] - widths[i], i) for i in range(len(columns)) if widths[i] < natural[i]]
        if not wants:
            break
        _, i = max(wants)
        widths[i] += 1
        spare -= 1
    return widths


class KernelProgress:
    """Kernels done of a total, on stderr. On a terminal: a live bar whose count and ETA stay visible at 80
    columns (the kernel name gives way first), refreshed by the caller's events (no refresh thread). Elsewhere:
    one plain line at least every PLAIN_EVERY_SECONDS (the caller ticks about once a second) and every few
    kernels. The ETA starts from ``seconds_per_item`` (the profile's estimate) spread over ``workers`` and moves
    to the measured pace as kernels finish."""

    def __init__(self, console: Console, total: int, description: str, *, seconds_per_item: float | None,
                 workers: int, enabled: bool = True):
        self.console, self.total, self.description = console, total, description
        self.prior = seconds_per_item
        self.workers = max(1, workers)
        self.enabled = enabled and total > 0
        self.live = self.enabled and console.is_terminal
        self.done = self.compiled = 0
        self.current = ""
        self.start = self.first_start = None
        self.last_line_at = 0.0
        self.last_line_done = -1
        self.step = max(1, min(10, total // 20))
        self._progress: Progress | None = None

    def __enter__(self) -> KernelProgress:
        self.start = time.monotonic()
        if self.live:
            self._progress = Progress(
                TextColumn("{task.description}", table_column=Column(no_wrap=True)),
                BarColumn(bar_width=20), MofNCompleteColumn(table_column=Column(no_wrap=True)),
                TimeElapsedColumn(), TextColumn("eta {task.fields[eta]}", table_column=Column(no_wrap=True)),
                TextColumn("{task.fields[current]}", table_column=Column(no_wrap=True, overflow="crop")),
                console=self.console, transient=False, auto_refresh=False,
            )
            self._progress.add_task(self.description, total=self.total, current="", eta=self.eta_text())
            self._progress.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self.current = ""
            self._refresh()
            self._progress.stop()
        elif self.enabled and exc[0] is None and self.last_line_done != self.done:
            self._line()

    # -- events --
    def started(self, kernel: str) -> None:
        if self.first_start is None:
            self.first_start = time.monotonic()
        self.current = kernel
        self._refresh()

    def finished(self, compiled: bool = True) -> None:
        self.done += 1
        self.compiled += 1 if compiled else 0
        self._refresh()
        if not self.live and self.enabled and (self.done - max(self.last_line_done, 0) >= self.step
                                               or self.done == self.total):
            self._line()

    def tick(self) -> None:
        self._refresh()
        if not self.live and self.enabled and time.monotonic() - self.last_line_at >= PLAIN_EVERY_SECONDS:
            self._line()

    # -- what is shown --
    def eta_seconds(self) -> float | None:
        remaining = self.total - self.done
        if remaining <= 0:
            return 0.0
        now = time.monotonic()
        since = now - (self.first_start or self.start or now)
        prior = None if self.prior is None else self.prior / self.workers  # wall seconds per kernel, all workers
        if self.compiled == 0:
            if prior is None:
                return None
            # nothing measured yet: the estimate for what is left, less the time the running round has had
            rounds = -(-remaining // self.workers)
            # the running round is assumed at most 90% done, however long it has taken
            return max(rounds * self.prior - since, (rounds - 0.9) * self.prior)
        measured = since / self.compiled
        if prior is None:
            return remaining * measured
        trust = min(1.0, self.compiled / (2 * self.workers))  # one or two rounds in, the pace is known
        return remaining * ((1 - trust) * prior + trust * measured)

    def eta_text(self) -> str:
        eta = self.eta_seconds()
        return "?" if eta is None else _clock(eta)

    def _refresh(self) -> None:
        if self._progress is not None:
            task = self._progress.task_ids[0]
            self._progress.update(task, completed=self.done, current=self._cropped(self.current),
                                  eta=self.eta_text())
            self._progress.refresh()

    def _cropped(self, name: str) -> str:
        """The kernel name in what the bar leaves of the width: the count and ETA never give way to it."""
        fixed = len(self.description) + 20 + 2 * len(str(self.total)) + 1 + 7 + 12 + 6  # text, bar, n/N, clock, eta
        room = self.console.width - fixed
        if len(name) <= room:
            return name
        return name[:room - 1] + "…" if room > 8 else ""

    def _line(self) -> None:
        elapsed = time.monotonic() - (self.start or time.monotonic())
        self.console.print(f"{self.description}: {self.done}/{self.total} kernels, {_clock(elapsed)} elapsed, "
                           f"eta {self.eta_text()}", soft_wrap=True, highlight=False, markup=False)
        self.console.file.flush()
        self.last_line_at = time.monotonic()
        self.last_line_done = self.done


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
