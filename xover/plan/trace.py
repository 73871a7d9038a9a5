"""Load job profiles measured elsewhere (another cluster, a paper's trace) from CSV.

Columns: ``name,devices,compute_ms,comm_ms,memory_gb`` and optionally
``data_ms`` (default 0), ``iterations`` (default 100), ``link_ms`` (how long the
all-reduce keeps the link busy, at least comm_ms; default: comm_ms), ``comm_cpu``
(fraction of a core its communication takes from a partner; default 0),
``checkpoint_ms`` (default 1), ``max_slowdown`` (empty: none), ``interference`` (how
much its device time grows next to a partner, as a fraction, at least -0.5; default 0),
``startup_ms`` (launch to first iteration; default 0) and ``interference_link_share``
(the link share l/T of the partner the interference was measured next to; empty: the
same interference next to any partner), ``corun_stretch`` and ``mps_stretch`` (a GPU job's
compute time while a partner computes the whole time, over alone, time-sliced and under CUDA MPS;
empty: processor sharing, and no MPS prediction), in any order. Names are
letters, digits, '.', '_', '-' or '#'. Fields are separated by ',' (a header line without one: ';' or tabs,
as a spreadsheet exports), column names in any case. Other columns are rejected, so a misspelt
optional column does not silently become its default. Errors name the file and the
line, counting the header as line 1.
"""

from __future__ import annotations

import csv
import itertools
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..console import counted
from ..errors import XoverError, csv_lines, decimal, named_path, not_utf8_text, refuse_unless_regular
from .model import InvalidJobProfile, JobProfile, job_name_problem

REQUIRED_COLUMNS = ("name", "devices", "compute_ms", "comm_ms", "memory_gb")
OPTIONAL_COLUMNS = (
    "data_ms",
    "iterations",
    "link_ms",
    "comm_cpu",
    "checkpoint_ms",
    "max_slowdown",
    "interference",
    "startup_ms",
    "interference_link_share",
    "corun_stretch",
    "mps_stretch",
)
_DEFAULTS = {
    "data_ms": 0.0,
    "iterations": 100,
    "link_ms": None,
    "comm_cpu": 0.0,
    "checkpoint_ms": 1.0,
    "max_slowdown": None,
    "interference": 0.0,
    "startup_ms": 0.0,
    "interference_link_share": None,
    "corun_stretch": None,
    "mps_stretch": None,
}


LARGEST = 1e9  # any field: beyond it (11 days per iteration, a billion devices) a value is a typo


class TraceError(XoverError):
    """A trace CSV that cannot be read as job profiles."""


def load_trace_csv(path: str | Path) -> list[JobProfile]:
    """Read job profiles from ``path``; raise TraceError on the first bad line."""
    path = named_path(path, "the CSV file of the jobs' profiles", TraceError)
    path = refuse_unless_regular(path, "a profiles file is a CSV file", TraceError)
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            return _read_jobs(delimited_reader(csv_lines(path, handle, TraceError)), path)  # no line read whole
    except OSError as error:
        raise TraceError(f"{path}: cannot read the profiles file: {error.strerror or error}") from error
    except UnicodeDecodeError as error:
        raise TraceError(not_utf8_text(path)) from error
    except csv.Error as error:
        raise TraceError(f"{path}: not valid CSV: {error}") from error


def _read_jobs(reader: Any, path: Path) -> list[JobProfile]:  # a csv.reader; its type is private
    header = next(reader, None)
    if header is None:
        raise TraceError(f"{path}: line 1: empty file, expected a header line: {','.join(REQUIRED_COLUMNS)}")
    columns = _check_header(without_empty_tail([column_name(cell) for cell in header]), path)
    jobs: list[JobProfile] = []
    seen: dict[str, int] = {}
    read_before = reader.line_num
    for row in reader:  # a row is told by its first line: a quoted value may hold line ends
        line, read_before = read_before + 1, reader.line_num
        if not any(cell.strip() for cell in row):
            continue  # blank lines are harmless
        job = _parse_row(without_empty_tail(row, len(columns)), columns, path, line)
        if job.name in seen:
            raise TraceError(f"{path}: line {line}: duplicate name {job.name!r} (first on line {seen[job.name]})")
        seen[job.name] = line
        jobs.append(job)
    if not jobs:
        raise TraceError(f"{path}: line {reader.line_num + 1}: no jobs after the header line")
    return jobs


def csv_delimiter(header: str) -> str:
    """What separates a CSV's fields, told from its header line: ',' (a header without one: ';' or a tab, as a
    spreadsheet exports where ',' is the decimal point)."""
    if "," in header:
        return ","
    return next((mark for mark in (";", "\t") if mark in header), ",")


def delimited_reader(lines: Iterator[str]) -> Any:  # a csv.reader; its type is private
    """A csv.reader over `lines`, its delimiter told from the first of them (csv_delimiter)."""
    first = next(lines, "")
    return csv.reader(itertools.chain([first] if first else [], lines), delimiter=csv_delimiter(first))


def without_empty_tail(cells: list[str], keep: int = 0) -> list[str]:
    """`cells` without the empty ones at their end (a spreadsheet's export: `a,b,,`), down to `keep` cells."""
    end = len(cells)
    while end > keep and not cells[end - 1].strip():
        end -= 1
    return cells[:end]


def column_name(cell: str) -> str:
    """A column's name as the readers know it: `Compute_ms ` is compute_ms."""
    return cell.strip().lower()


def _check_header(header: list[str], path: Path) -> list[str]:
    known = REQUIRED_COLUMNS + OPTIONAL_COLUMNS
    for column in header:
        if column not in known:
            raise TraceError(f"{path}: line 1: unknown column {column!r}; columns are {', '.join(known)}")
        if header.count(column) > 1:
            raise TraceError(f"{path}: line 1: column {column!r} appears twice")
    missing = [column for column in REQUIRED_COLUMNS if column not in header]
    if missing:
        raise TraceError(f"{path}: line 1: missing column {', '.join(missing)}")
    return header


def _parse_row(row: list[str], columns: list[str], path: Path, line: int) -> JobProfile:
    def fail(problem: str) -> TraceError:
        return TraceError(f"{path}: line {line}: {problem}")

    if len(row) != len(columns):
        raise fail(f"{counted(len(row), 'field')}, the header has {len(columns)}")
    cells = {column: cell.strip() for column, cell in zip(columns, row, strict=True)}
    name = cells["name"]
    if not name:
        raise fail("empty name")
    if (problem := job_name_problem(name)) is not None:
        raise fail(problem)
    values: dict[str, float | int | None] = {}
    for column in REQUIRED_COLUMNS[1:] + OPTIONAL_COLUMNS:
        text = cells.get(column, "")
        if column in OPTIONAL_COLUMNS and not text:
            values[column] = _DEFAULTS[column]
            continue
        whole = column in ("devices", "iterations")
        value = _parse_whole(text) if whole else _parse_number(text)
        if value is None and whole and (number := _parse_number(text)) is not None and float(number).is_integer():
            value = int(number) if abs(number) <= LARGEST else number  # 2e3: a whole number as a spreadsheet writes it
        if value is None:
            kind = "a whole number" if whole else "a number"
            hint = ": write it without thousands separators, with '.' for a decimal point" if "," in text else ""
            raise fail(f"{column} must be {kind}, got {text!r}{hint}")
        if abs(value) > LARGEST:
            raise fail(f"{column} {text} is out of range: at most {LARGEST:g}")
        values[column] = value
    devices, link, comm = values["devices"], values["link_ms"], values["comm_ms"]
    if devices is not None and devices <= 0:
        raise fail(f"devices must be >= 1, got {devices}")
    if link is not None and comm is not None and link < comm:
        # the link is busy at least while the job waits on it; a smaller value is a swapped column
        raise fail(
            f"link_ms {cells['link_ms']} is below comm_ms {cells['comm_ms']}: the all-reduce keeps "
            f"the link busy at least as long as the job waits for it (leave link_ms empty for comm_ms)"
        )
    try:
        return JobProfile(name=name, **values)  # type: ignore[arg-type]
    except InvalidJobProfile as error:
        raise fail(error.problem) from None


def _parse_number(text: str) -> float | None:
    value = decimal(text)
    return value if value is not None and math.isfinite(value) else None


def _parse_whole(text: str) -> int | None:
    return int(text) if re.fullmatch(r"\s*[-+]?[0-9]{1,18}\s*", text, re.ASCII) else None
