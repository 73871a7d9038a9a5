"""Terminal output shared by every command: rich tables or JSON (same data, two views), progress."""

from __future__ import annotations

import contextlib
import json
import math
import re
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

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


# Wide tables stay readable when piped into a file or a CI log instead of being cut to 80 columns.
# No emoji codes: "-H h1:x:2" is a host spec, not ":x:".
console = _Terminal(width=None if sys.stdout.isatty() else 200, emoji=False)
errors = _Terminal(stderr=True, width=None if sys.stderr.isatty() else 200, emoji=False)


def print_json(data: Any) -> None:
    """`data` as indented JSON on stdout; what JSON cannot hold (times, paths) as text."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def print_error(message: str) -> None:
    """`error: MESSAGE` on stderr; the message is text (a file named "[x].toml" is not markup)."""
    errors.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)


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


def print_table(
    title: str, columns: Sequence[tuple[str, str]], rows: Iterable[dict[str, Any]], digits: dict[str, int] | None = None
) -> None:
    """columns: (header, key). Numbers right-aligned with `digits[key]` decimals (default 2)."""
    table = Table(title=shown(title), title_justify="left")
    rows = list(rows)
    for header, key in columns:
        numeric = any(isinstance(r.get(key), (int, float)) for r in rows)
        table.add_column(header, justify="right" if numeric else "left")
    for row in rows:
        # escape: a job named "[x]" is text, not rich markup
        table.add_row(*(escape(shown(fmt(row.get(key), (digits or {}).get(key, 2)))) for _, key in columns))
    console.print(table)


# Where stderr is not a terminal (a log file, a CI job, a Slurm job's output), rich draws its bars once, when they
# stop: a run or a replay of minutes said nothing until its end. There, the bars as they stand are written every
# this many seconds.
LOGGED_EVERY_S = 30.0


class LoggedProgress:
    """Writes `progress`'s bars as they stand every LOGGED_EVERY_S, where stderr is not a terminal."""

    def __init__(self, progress: Progress, every_s: float = LOGGED_EVERY_S) -> None:
        self.progress = progress
        self.every_s = every_s
        self.since: float | None = None
        self.writes: bool | None = None  # told at the first tick (a console's is_terminal asks its file each time)

    def tick(self) -> None:
        """Called at each update (no thread: bars that do not move are not written again until one does)."""
        if self.writes is None:
            self.writes = not (self.progress.disable or self.progress.console.is_terminal)
        if not self.writes:
            return
        now = time.monotonic()
        if self.since is None:
            self.since = now
        elif now - self.since >= self.every_s:
            self.since = now
            self.progress.console.print(self.progress.make_tasks_table(self.progress.tasks))


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
        self.logged = LoggedProgress(self.progress)

    def start(self) -> None:
        """Draw the bars from the first job's: a run refused before any started (a device in use) leaves
        its one line of error, not an empty display above it."""
        self.drawing = True

    def stop(self) -> None:
        """Stop drawing; the bars stay on screen as they last were."""
        self.drawing = False
        if self.tasks:
            self.progress.stop()

    def _task(self, run_id: int, label: str = "", total: int | None = None) -> TaskID:
        if run_id not in self.tasks:
            if not self.tasks and self.drawing:
                self.progress.start()
            self.tasks[run_id] = self.progress.add_task(label or str(run_id), total=total, loss="-", status="")
        return self.tasks[run_id]

    def job_started(self, run_id: int, label: str, total: int | None) -> None:
        """The run's bar, running, with its label and iterations planned."""
        self.progress.update(self._task(run_id, label, total), total=total, description=label, status="running")

    def job_progress(self, run_id: int, step: int, loss: float | None) -> None:
        """Move the run's bar to `step`, with its last loss."""
        self.progress.update(self._task(run_id), completed=step, loss="-" if loss is None else f"{loss:.4f}")
        if self.drawing:
            self.logged.tick()

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
