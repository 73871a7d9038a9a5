"""Terminal output shared by every command: rich tables or JSON (same data, two views), progress."""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from rich import box
from rich.cells import cell_len
from rich.console import Console, Group, RenderableType
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

# what a terminal would act on rather than show: control characters (an escape sequence that clears the screen or
# retitles the window) and the bidirectional overrides that reorder what is shown; newlines and tabs are text
_NOT_SHOWN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def shown(text: str) -> str:
    """`text` as a terminal should show it: a control character written as its escape (`\\x1b`), not sent."""
    return _NOT_SHOWN.sub(lambda found: ascii(found.group())[1:-1], text)


class _Terminal(Console):
    """A rich Console whose text is shown, never acted on: a file's name, a trace's field or a script's output
    that holds an escape sequence is printed escaped (rich passes ESC through as it is). Rich's own styling is
    added after, so colours stay."""

    def print(self, *objects: Any, **options: Any) -> None:
        super().print(*(shown(item) if isinstance(item, str) else item for item in objects), **options)


def _is_terminal(stream: Any) -> bool:
    """Whether `stream` is a terminal; a stream the shell closed (`>&-`: Python's is None) is not."""
    return stream is not None and stream.isatty()


def _width(stream: Any) -> int | None:
    """The width to draw at: the terminal's (rich reads COLUMNS, then the terminal), 80 where COLUMNS says 0 (rich
    drew nothing at all: `COLUMNS=0 xover report` printed no line, exit 0); 200 off a terminal."""
    if not _is_terminal(stream):
        return 200
    columns = os.environ.get("COLUMNS", "").strip()
    return 80 if columns.isdigit() and int(columns) == 0 else None


# Wide tables stay readable when piped into a file or a CI log instead of being cut to 80 columns.
# No emoji codes: "-H h1:x:2" is a host spec, not ":x:".
console = _Terminal(width=_width(sys.stdout), emoji=False)
errors = _Terminal(stderr=True, width=_width(sys.stderr), emoji=False)


def json_text(data: Any) -> str:
    """`data` as indented JSON, strict: what JSON cannot hold (times, paths) as text, and a number that is not finite
    (a diverged job's loss, an infinite difference of losses) as null - Python's bare NaN and Infinity are no JSON,
    and `jq` or a browser refuses the whole text for one; the fields beside it say what it was (`loss_not_finite`)."""
    return json.dumps(_finite_or_null(data), indent=2, default=str, allow_nan=False)


def _finite_or_null(data: Any) -> Any:
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {key: _finite_or_null(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [_finite_or_null(value) for value in data]
    return data


def print_json(data: Any) -> None:
    """`data` as indented JSON on stdout (json_text)."""
    sys.stdout.write(json_text(data) + "\n")


def print_error(message: str) -> None:
    """`error: MESSAGE` on stderr; the message is text (a file named "[x].toml" is not markup)."""
    errors.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)


def print_notice(text: str) -> None:
    """`text` on stderr as written: a warning, a note, what a run waits on. Not markup (a file named "[x].toml" is
    text), nothing highlighted, and never broken into lines at the terminal's width (a log is searched for it whole)."""
    errors.print(text, markup=False, highlight=False, soft_wrap=True)


@contextlib.contextmanager
def working(what: str) -> Iterator[None]:
    """A spinner and `what` on stderr while work that gives no figures of its own goes on (a plan of hundreds of
    jobs, doctor's checks, a write to MLflow: tens of seconds without a word), on a terminal only: a log gets
    the result, which follows."""
    if not errors.is_terminal:
        yield
        return
    with errors.status(escape(what), spinner="dots"):
        yield


def counted(count: int, singular: str, plural: str | None = None) -> str:
    """`count` and what it counts, singular for exactly one: "1 job", "3 jobs", "1 entry" / "2 entries"
    (`plural` where adding an s is wrong)."""
    return f"{count} {singular if count == 1 else plural or singular + 's'}"


def fmt(value: Any, digits: int = 2) -> str:
    """A cell's text: "-" for nothing, floats to `digits` decimals (never "-0.00")."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        text = f"{value:.{digits}f}"
        return text.lstrip("-") if float(text) == 0 else text  # "0.00", not "-0.00"
    return str(value)


# A table narrower than its terminal needs is drawn with each cell whole: a name or a number is never cut to
# "xove…" (rich's default), where "xover" and "xover-las" read alike. A text column may wrap its words onto more
# lines, and fold a word longer than this many characters (a path); a number, and a header's word, stay whole.
FOLDED_WORD = 24


def print_table(
    title: str, columns: Sequence[tuple[str, str]], rows: Iterable[dict[str, Any]], digits: dict[str, int] | None = None
) -> None:
    """columns: (header, key). Numbers right-aligned with `digits[key]` decimals (default 2). Drawn to the
    terminal's width (table_layout): nothing in it is cut."""
    console.print(table_layout(title, columns, rows, digits, console.width))


def table_layout(
    title: str,
    columns: Sequence[tuple[str, str]],
    rows: Iterable[dict[str, Any]],
    digits: dict[str, int] | None = None,
    width: int = 80,
) -> RenderableType:
    """The table of print_table, in `width` columns of terminal, each value whole: as a table with borders where
    it fits (its text columns wrapped if need be), else without borders and with one space between columns,
    else each row as lines of `header  value` (a terminal too narrow for its columns side by side)."""
    rows = list(rows)
    numeric = [any(isinstance(r.get(key), (int, float)) for r in rows) for _, key in columns]
    cells = [[shown(fmt(row.get(key), (digits or {}).get(key, 2))) for _, key in columns] for row in rows]
    headers = [shown(header) for header, _ in columns]
    natural, least = [], []
    for index, header in enumerate(headers):
        texts = [line[index] for line in cells]
        natural.append(max(map(_longest_line, [header, *texts])))
        whole = _longest_line if numeric[index] else _longest_word  # a number never wraps; text at its spaces
        least.append(max([_longest_word(header), *(whole(text) for text in texts)]))
    boxed, bare = 3 * len(columns) + 1, len(columns) - 1  # the width of the borders and padding around the cells
    if sum(natural) + boxed <= width:
        return _table(title, headers, cells, numeric, None, boxed=True)  # as rich draws it: it fits
    if sum(least) + boxed <= width:
        return _table(title, headers, cells, numeric, _share(width - boxed, natural, least), boxed=True)
    if sum(least) + bare <= width:
        return _table(title, headers, cells, numeric, _share(width - bare, natural, least), boxed=False)
    return _stacked(title, headers, cells)


def _longest_line(text: str) -> int:
    return max((cell_len(line) for line in text.splitlines()), default=0)


def _longest_word(text: str) -> int:
    """The widest word of `text` (a word wider than FOLDED_WORD is folded: that many)."""
    return min(max((cell_len(word) for word in text.split()), default=0), FOLDED_WORD)


def _share(room: int, natural: list[int], least: list[int]) -> list[int]:
    """Columns' widths within `room`: as rich shares them (the widest column narrowed first), none narrower
    than its least."""
    widths = list(natural)
    for _ in range(sum(natural) - room):
        widest = max((index for index, width in enumerate(widths) if width > least[index]), key=widths.__getitem__)
        widths[widest] -= 1
    return widths


def _table(
    title: str, headers: list[str], cells: list[list[str]], numeric: list[bool], widths: list[int] | None, boxed: bool
) -> Table:
    heading = Text(shown(title), style="table.title")  # Text: a trace named "[x].csv" is text, not rich markup
    if boxed:
        table = Table(title=heading, title_justify="left")
    else:  # no borders, one space between columns: what is left of the width is the cells'
        table = Table(title=heading, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, padding=0)
    for index, header in enumerate(headers):
        table.add_column(
            Text(header),
            justify="right" if numeric[index] else "left",
            overflow="fold",
            width=None if widths is None else widths[index],
        )
    for line in cells:
        table.add_row(*map(Text, line))  # Text: a job named "[x]" is text, not rich markup
    return table


def _stacked(title: str, headers: list[str], cells: list[list[str]]) -> Group:
    """Each row as a block of `header  value` lines, the rows apart by a blank line."""
    blocks: list[RenderableType] = [Text(shown(title), style="table.title")]
    for line in cells:
        block = Table.grid(padding=(0, 2))
        block.add_column(style="bold", overflow="fold")
        block.add_column(overflow="fold")
        for header, value in zip(headers, line):
            block.add_row(Text(header), Text(value))
        blocks += [Text(""), block]
    return Group(*blocks)


# Where stderr is not a terminal (a log file, a pipe, CI, a Slurm job's output), the bars are not drawn live: rich drew
# them only at their stop (a run of minutes said nothing until its end), or, under FORCE_COLOR, redrew them in place,
# the whole block again in the log at each refresh. There each bar is a line: at once when its milestone changes
# (it is full; a job started or ended), else where it moved since its last line, at most every this many seconds.
LOGGED_EVERY_S = 30.0


def _redrawn_in_place(terminal: Console) -> bool:
    """Whether live bars can be redrawn on `terminal`: rich's own test (a TERM=dumb terminal cannot), and its file a
    terminal indeed (FORCE_COLOR or TTY_COMPATIBLE make rich take a log for one: a redraw there is a new block)."""
    return terminal.is_terminal and not terminal.is_dumb_terminal and _is_terminal(terminal.file)


def _full(task: Task) -> str | None:
    return "full" if task.total is not None and task.completed >= task.total else None


class LoggedProgress:
    """Shows `progress`'s bars: live on a terminal; elsewhere as lines, never redrawn and none written twice. A bar
    has a line at once when `milestone(task)` changes (None: nothing to say yet; by default, the bar is full), and
    every LOGGED_EVERY_S where it moved since its last. `start` before the first bar, `tick` after each update,
    `stop` at the end."""

    def __init__(self, progress: Progress, milestone: Callable[[Task], str | None] = _full) -> None:
        self.progress = progress
        self.milestone = milestone
        self.as_lines: bool | None = None  # told at start (a console's is_terminal asks its file each time)
        self.since = 0.0
        self.written: dict[TaskID, tuple[Any, ...]] = {}  # each bar as its last line showed it

    def start(self) -> None:
        """Draw live on a terminal; elsewhere, start the clock of the lines."""
        if self.as_lines is not None:
            return
        self.as_lines = not self.progress.disable and not _redrawn_in_place(self.progress.console)
        if self.as_lines:
            self.since = time.monotonic()
        else:
            self.progress.start()

    def tick(self) -> None:
        """Called after each update (no thread: a bar that does not move has nothing new to say)."""
        if not self.as_lines:
            return
        now = time.monotonic()
        due = now - self.since >= LOGGED_EVERY_S
        if due:
            self.since = now
        self._write(lambda shown, last: shown[0] != (last[0] if last else None) or (due and shown != last))

    def stop(self) -> None:
        """Stop drawing (the live bars stay on the screen); as lines, each bar's end where its last line was not it."""
        if self.as_lines:
            self._write(lambda shown, last: shown != last)
        elif self.as_lines is False:
            self.progress.stop()

    def _write(self, due: Callable[[tuple[Any, ...], tuple[Any, ...] | None], bool]) -> None:
        lines = []
        for task in self.progress.tasks:
            shown = (self.milestone(task), task.description, task.completed, task.total)
            if due(shown, self.written.get(task.id)):
                self.written[task.id] = shown
                lines.append(task)
        if lines:  # one table: the bars written together are aligned
            self.progress.console.print(self.progress.make_tasks_table(lines))


class ProgressBars:
    """A live bar per job: iterations done, last loss, status (run/sinks.py's ProgressSink draws them)."""

    def __init__(self) -> None:
        self.progress = Progress(
            # not markup: a label's "[crossover/work-conserving]" was read as a style and dropped, and every bar
            # of `--mode all` read as the job's bare name
            TextColumn("{task.description}", markup=False),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]}"),
            TextColumn("{task.fields[status]}"),
            TimeElapsedColumn(),
            console=errors,
            transient=False,
        )
        self.tasks: dict[int, TaskID] = {}
        self.drawing = False
        # a job's line in a log when it starts and when it ends, not when its bar fills (it may end short of it)
        self.logged = LoggedProgress(self.progress, milestone=lambda task: task.fields.get("status") or None)

    def start(self) -> None:
        """Draw the bars from the first job's: a run refused before any started (a device in use) leaves
        its one line of error, not an empty display above it."""
        self.drawing = True

    def stop(self) -> None:
        """Stop drawing; the bars stay on screen as they last were."""
        self.drawing = False
        if self.tasks:
            self.logged.stop()

    def _task(self, run_id: int, label: str = "", total: int | None = None) -> TaskID:
        if run_id not in self.tasks:
            if not self.tasks and self.drawing:
                self.logged.start()
            self.tasks[run_id] = self.progress.add_task(label or str(run_id), total=total, loss="-", status="")
        return self.tasks[run_id]

    def job_started(self, run_id: int, label: str, total: int | None) -> None:
        """The run's bar, running, with its label and iterations planned."""
        self.progress.update(self._task(run_id, label, total), total=total, description=label, status="running")
        self._tick_if_drawing()

    def job_progress(self, run_id: int, step: int, loss: float | None) -> None:
        """Move the run's bar to `step`, with its last loss."""
        self.progress.update(self._task(run_id), completed=step, loss="-" if loss is None else f"{loss:.4f}")
        self._tick_if_drawing()

    def job_finished(self, run_id: int, status: str, label: str = "") -> None:
        """Show how the run ended, and stop its clock (a run that ended short of its bar's total, e.g. a
        script capped below its own count, kept counting until the whole display stopped). `label`: the
        bar's, where the run ended before it started (a script that failed before its first record). A run
        that finished short of its total (a script whose own step count ended it first) gets a full bar of
        what it made: "1000/4184 finished" read as a job cut short."""
        task = self._task(run_id, label)
        shown = self.progress.tasks[self.progress.task_ids.index(task)]
        if status == "finished" and shown.total is not None and 0 < shown.completed < shown.total:
            self.progress.update(task, total=shown.completed)
        self.progress.update(task, status=status)
        self.progress.stop_task(task)
        self._tick_if_drawing()

    def _tick_if_drawing(self) -> None:
        if self.drawing:
            self.logged.tick()
