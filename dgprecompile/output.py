"""The one output object every command writes through.

Data (tables, JSON, YAML) goes to stdout; progress, notes, warnings and errors go to stderr, so
`dgprecompile plan --format json | jq` and CI logs both stay clean.

Every string handed to it is printed as given: a path `/tmp/[weird]`, a command `echo '[red]x'` or a kernel
`:x:` is text, never rich markup or an emoji code. The only styling is the Output's own (its `warning:`,
`error:`, `note:` prefixes) and what a caller builds explicitly with ``styled()`` (a rich Text), so a user's
value cannot become markup by construction.
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
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Column, Table
from rich.text import Text


def styled(text: str, style: str) -> Text:
    """Text in one of the Output's styles: the one way a caller asks for colour (never by markup in a string)."""
    return Text(text, style=style)


MARKS = {"ok": styled("ok", "green"), "warn": styled("warning", "yellow"), "fail": styled("problem", "red"),
         "info": styled("info", "blue")}

Part = str | Text  # a message's pieces: a str is plain text (printed as given), a Text keeps its style


def _message(*parts: Part) -> Text:
    return Text.assemble(*(p if isinstance(p, Text) else Text(str(p)) for p in parts))


class Output:
    def __init__(self, json_mode: bool = False, quiet: bool = False, stdout=None, stderr=None):
        self.json_mode = json_mode
        self.quiet = quiet
        self.silent = False
        # no markup, no emoji codes, no highlighting: what is printed is what was given
        self.out = Console(file=stdout or sys.stdout, soft_wrap=True, highlight=False, markup=False, emoji=False)
        self.err = Console(file=stderr or sys.stderr, soft_wrap=True, highlight=False, markup=False, emoji=False)

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

    def data_wrapped(self, text: str, hanging: int = 0) -> None:
        """Plain prose on stdout in lines of the console's width, broken at spaces only (see _fit), every line after
        the first indented by ``hanging`` columns: a verdict that a pipe's 80 columns show whole."""
        for line in _fit(Text(text), self.out.width, hanging):
            self.data_text(line.plain)

    def table(self, title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]],
              to_stderr: bool = False, no_wrap: Sequence[str] = ()) -> None:
        """A table that never breaks a token: a cell folds only at its spaces and line breaks, so an id, path or
        number stays whole (the ``no_wrap`` columns and all-number columns do not fold at all). When no boxed
        layout keeps every token whole at the console width (a narrow terminal, COLUMNS=60, a pipe's 80), it
        falls back to one group of ``name=value`` lines per row (see _plain_table).
        Cells are plain text (a str is printed as given); a ``styled()`` Text keeps its style."""
        console = self.err if to_stderr else self.out
        given = [list(row) for row in rows]
        plain = [[c.plain if isinstance(c, Text) else str(c) for c in row] for row in given]
        whole = _unbreakable(list(columns), plain, no_wrap)
        widths = fit_columns(list(columns), plain, console.width, no_wrap)
        # a text cell is folded here, at spaces outside short parentheses, so rich (which folds at any space)
        # never has to: "(ulimit -u)" and "(sgl-kernel 0.3.5" stay on one line
        cells = [[c if isinstance(c, Text) else Text(str(c) if widths is None or keep else _fold(str(c), width))
                  for c, width, keep in zip(row, widths or [0] * len(row), whole, strict=False)] for row in given]
        if title:  # its own lines, wrapped at spaces only: a model path or a URL in it stays whole
            for line in _wrap_words(title, console.width):
                console.print(Text(line), soft_wrap=True)
        if widths is None:
            self._plain_table(console, columns, plain, whole)
            return
        table = Table(show_lines=False)
        for col, width in zip(columns, widths, strict=True):
            # every width holds the column's longest token (and, for an unbreakable column, its longest cell),
            # so folding at spaces is all rich ever does: nothing is cut
            table.add_column(Text(col), width=width, no_wrap=False, overflow="fold")
        for row in cells:
            table.add_row(*row)
        console.print(table)

    @staticmethod
    def _plain_table(console: Console, columns: Sequence[str], cells: list[list[str]], whole: list[bool]) -> None:
        """One ``name=value`` group per row: its fields packed onto lines of the width, never split between
        lines unless one alone is wider, and then only at its spaces (numbers and unbreakable cells stay whole;
        a continuation line's indent of 4 shrinks for a word that would not fit beside it)."""
        width = max(console.width, 20)
        wrapper = textwrap.TextWrapper(width=width - 4, break_long_words=False, break_on_hyphens=False)
        for row in cells:
            lines: list[str] = []
            for col, cell, keep in zip(columns, row, whole, strict=False):
                value = _keep_parentheses(", ".join(cell.splitlines()))
                if keep:
                    value = value.replace(" ", _NBSP)
                field = f"{col.replace(' ', _NBSP)}={value}" if col else value
                indent = "    " if lines else ""
                if lines and len(lines[-1]) + 2 + len(field) <= width:
                    lines[-1] += "  " + field
                elif len(indent) + len(field) <= width:
                    lines.append(indent + field)
                else:
                    lines += [(_indent(part, width) if lines or i else "") + part
                              for i, part in enumerate(wrapper.wrap(field))]
            for ln in lines:
                console.print(Text(ln.replace(_NBSP, " ")), soft_wrap=True)

    # -- messages on stderr: every str part is plain text, printed as given --
    def info(self, *parts: Part, hanging: int | None = None) -> None:
        """A note of progress; ``hanging``: folded to the console's width (see _fit), later lines indented by it."""
        if not self.quiet:
            self._say(_message(*parts), hanging)

    def _say(self, message: Text, hanging: int | None) -> None:
        if hanging is None:  # one line, however long: what most commands' messages are
            self.err.print(message)
            return
        for line in _fit(message, self.err.width, hanging):
            self.err.print(line)

    def note(self, *parts: Part, wrap: bool = False) -> None:
        """``note:`` and the parts; ``wrap``: folded to the console's width under its own text (see _fit), else one
        line however long."""
        self.info(styled("note:", "dim"), " ", *parts, hanging=len("note: ") if wrap else None)

    def warn(self, *parts: Part) -> None:
        """``warning:`` and the parts on one line, as ``error`` writes its line (a line break inside is a space)."""
        if not self.silent:
            self.err.print(_message(styled("warning:", "yellow"), " ", *map(_unbroken_part, parts)))

    def failure(self, label: str, *parts: Part) -> None:
        """A failure that does not end the command (a kernel that did not compile): ``label:`` in red, one line."""
        self.err.print(_message(styled(f"{label}:", "red"), " ", *map(_unbroken_part, parts)))

    def error(self, message: str, hint: str | None = None, *, wrap: bool = False) -> None:
        """``error:`` and the message, then ``hint:`` and the hint; ``wrap``: each folded to the console's width
        under its own text (see _fit), else each on one line however long. A line break inside either (an
        exception's text, a ``python -c`` script in a command line) is a space: an error is one ``error:`` line,
        and a log reader or a test that takes the line finds all of it there."""
        # messages are plain text: `[s3]` in a hint is an extra's name, not markup
        self._say(_message(styled("error:", "red"), " ", _unbroken(message)), len("error: ") if wrap else None)
        if hint:
            self._say(_message(styled("hint:", "dim"), " ", _unbroken(hint)), len("hint: ") if wrap else None)

    def progress(self, total: int, description: str = "compiling", *, seconds_per_item: float | None = None,
                 workers: int = 1) -> KernelProgress:
        """Progress of ``total`` items on stderr: a live bar on a terminal, else a plain line every
        PLAIN_EVERY_SECONDS or every few items (CI logs, `make run`); nothing when quiet."""
        return KernelProgress(self.err, total, description, seconds_per_item=seconds_per_item, workers=workers,
                              enabled=not self.quiet)


PLAIN_EVERY_SECONDS = 10.0
_NBSP = "\u00a0"
_NUMBER = re.compile(r"^[-+]?\d[\d.,:]*(\.\.\d[\d.,]*)?( ?(s|ms|min|B|KB|MB|GB|KiB|MiB|GiB|%|x))?$")


_SHORT_PARENTHESIS = re.compile(r"\([^()\n]{1,30}\)")
_LINE_BREAK = re.compile(r"[ \t]*[\r\n]+\s*")


def _unbroken(text: str) -> str:
    """``text`` with each line break, and the blanks around it, as one space (other spacing is kept as given)."""
    return _LINE_BREAK.sub(" ", text).strip()


def _unbroken_part(part: Part) -> Part:
    """A str part with each line break as one space, its ends kept (the parts join as given); a styled part is one of
    the Output's own short labels: kept."""
    return _LINE_BREAK.sub(" ", part) if isinstance(part, str) else part


def _keep_parentheses(text: str) -> str:
    """``text`` with the spaces inside short parentheses made unbreakable (``_NBSP``): "(ulimit -u)" is one word."""
    return _SHORT_PARENTHESIS.sub(lambda m: m.group(0).replace(" ", _NBSP), text)


def _wrap_words(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width``, broken at spaces only, never inside a short parenthesis (a longer
    word stays whole on its line)."""
    lines = textwrap.wrap(_keep_parentheses(text), width=max(width, 20), break_long_words=False,
                          break_on_hyphens=False)
    return [line.replace(_NBSP, " ") for line in lines] or [""]


def _indent(part: str, width: int) -> str:
    """A plain table's continuation indent of 4 for ``part``, less where that lets a word of 77 to 80 columns (a path)
    fit the width; a wider word keeps the 4 (it overflows whatever its indent)."""
    return " " * (width - len(part) if width - 4 < len(part) <= width else 4)


def _fit(message: Text, width: int, hanging: int) -> list[Text]:
    """``message`` in lines of at most ``width``, broken at spaces only and never inside a short parenthesis (a word
    longer than a line stays whole on its own line, so nothing is cut), every line after the first indented by
    ``hanging`` columns; its styles kept. A line break in it starts a new line."""
    pad = " " * hanging
    out: list[Text] = []
    for part in message.split("\n"):
        # the spaces kept whole are NBSP, one column like a space: offsets in ``flat`` are offsets in ``part``
        flat = _keep_parentheses(part.plain).translate({ord(c): " " for c in "\t\x0b\x0c\r"})
        lines = textwrap.wrap(flat, width=max(width, hanging + 20), initial_indent=pad if out else "",
                              subsequent_indent=pad, break_long_words=False, break_on_hyphens=False,
                              expand_tabs=False) or [""]
        at = 0
        for line in lines:
            prefix = pad if out else ""
            start = flat.index(line[len(prefix):], at)
            at = start + len(line) - len(prefix)
            out.append(Text(prefix) + part[start:at])
    return out


def _fold(cell: str, width: int) -> str:
    """A table cell's text folded to ``width`` as _wrap_words folds, each of its own lines on its own."""
    out = []
    for line in cell.splitlines() or [""]:
        lines = textwrap.wrap(_keep_parentheses(line), width=max(width, 1), break_long_words=False,
                              break_on_hyphens=False)
        out += [x.replace(_NBSP, " ") for x in lines] or [""]
    return "\n".join(out)


def _words(line: str) -> list[str]:
    """The pieces a cell may fold between: split at spaces, a short parenthesis whole."""
    return [w for w in re.split(r"[ \t]+", _keep_parentheses(line)) if w]


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
        words = [w for ln in lines for w in _words(ln)] or [""]
        header_words = max((len(w) for w in col.split()), default=0)
        natural.append(nat)
        cell_lines = [ln for r in rows for ln in r[i].splitlines()]
        longest_cell = max((len(ln) for ln in cell_lines), default=0)
        # headers wrap at their spaces; an unbreakable cell is kept whole, a text cell folds at its spaces only:
        # its longest word (a kernel id, a path, a module name) always fits
        minimum.append(max(header_words, longest_cell if whole[i] else max(len(w) for w in words), 1))
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
                TextColumn("{task.description}", markup=False, table_column=Column(no_wrap=True)),
                BarColumn(bar_width=20), MofNCompleteColumn(table_column=Column(no_wrap=True)),
                TimeElapsedColumn(), TextColumn("eta {task.fields[eta]}", table_column=Column(no_wrap=True)),
                TextColumn("{task.fields[current]}", markup=False, table_column=Column(no_wrap=True, overflow="crop")),
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
