"""Job instances from a cluster's trace.

Four formats (`FORMATS`; `detect_format` tells them apart by their first line):

* `muri` - the CSV of Muri's simulator (`Rivendile/Muri`, `simulator/trace-data/`): `job_id, num_gpu,
  submit_time` (ms), `iterations, model_name, batch_size, duration` (ms), `interval, iteration_time` (ms),
  `resource_time_0..2` (ms per iteration on data loading / CPU, GPU, network), `priority`. Each line is a
  job of its own profile: data, compute and communication from the resource times, its iteration alone
  from `iteration_time` (the resource times do not add up to it), and the restart cost Muri's simulator
  charges its model at its GPU count (`MURI_RESTART_S`).
* `plain` - a CSV of `arrival_s, gpus, duration_s, model` (and optionally `name`, `restart_s`,
  `max_slowdown`): `model` names a profile (of a profiles CSV, or a recipe's stored profile), `duration_s`
  is its run alone, from which its iterations follow.
* `philly` - Philly's job log (`cluster_job_log` of `msr-fiddle/philly-traces`, JSON): arrival from
  `submitted_time`, devices and run time from its last attempt; it names no model, so each job gets one of
  the profiles given, drawn with a seed (as Gavel and Muri attach profiled models to trace jobs).
* `helios` - Helios' `cluster_log.csv` (`S-Lab-System-Group/HeliosData`, one per cluster): `job_id, user, vc,
  gpu_num, cpu_num, node_num, state, submit_time, start_time, end_time, duration` (s), `queue` (s); arrival
  from `submit_time`, devices from `gpu_num`, run time from `duration`; jobs on no GPU (CPU jobs) are left out
  and counted; it names no model either, so each job's is drawn as for Philly's.

A CSV is comma-separated, or separated by ';' or tabs (a spreadsheet's export) where its header line has no
comma; its column names are read in any case; empty columns at the end of its lines (a spreadsheet's) are
left out.

Times are from the trace's first arrival (`load_trace`), and every job has a name of its own (the replay
tells jobs apart by name: a name a reader makes up avoids every name the trace gives).

Errors name the file, the line (the header is line 1) and the field, and say what to do.
"""

from __future__ import annotations

import csv
import itertools
import math
import random
from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, TypeVar

from ..console import counted
from ..errors import (
    MAX_CSV_LINE,
    DuplicateKeyError,
    LongInteger,
    XoverError,
    csv_lines,
    decimal,
    escaped_bytes,
    json_path,
    json_without_duplicate_keys,
    named_path,
    not_utf8_text,
    printable,
    quoted,
    refuse_unless_regular,
)
from ..plan.instances import JobInstance
from ..plan.model import MIN_COMPUTE_MS, InvalidJobProfile, JobProfile, job_name_problem
from ..plan.trace import column_name, csv_delimiter, delimited_reader, without_empty_tail
from ..store.session import StoreError

FORMATS = ("muri", "plain", "philly", "helios")
MURI_COLUMNS = ("job_id", "num_gpu", "submit_time", "iterations", "model_name", "iteration_time")
MURI_RESOURCES = ("resource_time_0", "resource_time_1", "resource_time_2")
MURI_OPTIONAL = ("batch_size", "duration", "interval", "priority")
PLAIN_COLUMNS = ("arrival_s", "gpus", "duration_s", "model")
PLAIN_OPTIONAL = ("name", "restart_s", "max_slowdown")
# Helios' cluster_log.csv, as HeliosData's README publishes it (times "2020-06-09 18:41:01", durations in seconds)
HELIOS_COLUMNS = ("job_id", "gpu_num", "submit_time", "duration")
# `cluster`: HeliosArtifact's all_cluster_log.csv, the four clusters' logs in one, adds it (not read: one cluster)
HELIOS_OPTIONAL = ("user", "vc", "cpu_num", "node_num", "state", "start_time", "end_time", "queue", "cluster")
# what a drawn model stands for, said with the trace (Philly's log and Helios' name none)
DRAWN_MODEL = "models drawn from {models} with seed {seed} ({source} names none)"

# Muri's simulator's start overhead (s) of each model by GPU count, charged at every event to every job
# running (`simulator/run_sim.py`, `overhead_dict`); 10 s for a model it does not list.
MURI_RESTART_S: dict[int, dict[str, float]] = {
    1: {"vgg16": 7, "vgg19": 7, "resnet18": 4, "shufflenet_v2_x1_0": 4, "bert": 10, "gpt2": 10, "a2c": 38, "dqn": 5},
    2: {"vgg16": 7, "vgg19": 7, "resnet18": 5, "shufflenet_v2_x1_0": 4, "bert": 10, "gpt2": 10, "a2c": 39, "dqn": 5},
    4: {"vgg16": 8, "vgg19": 8, "resnet18": 5, "shufflenet_v2_x1_0": 5, "bert": 10, "gpt2": 10, "a2c": 39, "dqn": 6},
    8: {"vgg16": 9, "vgg19": 9, "resnet18": 7, "shufflenet_v2_x1_0": 5, "bert": 10, "gpt2": 10, "a2c": 46, "dqn": 6},
    16: {"vgg16": 9, "vgg19": 10, "resnet18": 7, "shufflenet_v2_x1_0": 7, "bert": 10, "gpt2": 10, "a2c": 46, "dqn": 8},
    32: {"vgg16": 10, "vgg19": 10, "resnet18": 7, "shufflenet_v2_x1_0": 8, "bert": 10, "gpt2": 10, "a2c": 46, "dqn": 8},
}
MURI_DEFAULT_RESTART_S = 10.0
LARGEST = 1e12  # any number beyond this (31,700 years in seconds) is a typo
# A trace this large takes a second or more to read (a 117,000-job Philly log of 30 MB: 6 s): its reading is
# told to `load_trace`'s progress; a smaller one's would only flash by.
LONG_TRACE_BYTES = 4 * 2**20
READ_REPORT_EVERY = 2048  # entries read between two reports of reading's progress


class TraceError(XoverError):
    """A trace that cannot be read: which file, which line and field, and what to do."""


@dataclass
class Trace:
    """A trace's jobs, its format, and what was left out (lines skipped and why, counted)."""

    path: str
    format: str
    instances: list[JobInstance]
    skipped: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


ProfileLookup = Callable[[str], JobProfile | None]
ReadProgress = Callable[[int, int | None], None]  # (entries read, entries in all; None: not known yet)
_Entry = TypeVar("_Entry")


def detect_format(path: str | Path) -> str:
    """`muri`, `plain`, `philly` or `helios`, from the file's first line (or character)."""
    first = _first_line(named_path(path, "the trace's CSV or JSON file", TraceError))
    if not first.strip() and _json_after_blank_lines(Path(path)):
        return "philly"  # JSON may begin with blank lines (a log written pretty); a CSV's header is its line 1
    if not first.strip():  # an empty file was "not a trace this reads", as if its header were another's
        raise TraceError(f"{path}: line 1: empty: a CSV trace starts with its header line, Philly's job log with '['")
    if first.lstrip().startswith(("[", "{")):
        return "philly"
    # csv, not a split on commas: a header of quoted names ("arrival_s","gpus",...) is a header too
    try:
        header = [column_name(cell) for cell in next(csv.reader([first], delimiter=csv_delimiter(first)), [])]
    except csv.Error:  # a field over csv's limit: no header (it was a traceback)
        header = []
    columns = set(header)
    kinds = (
        ("muri", "a Muri CSV", MURI_COLUMNS),
        ("plain", "a plain CSV", PLAIN_COLUMNS),
        ("helios", "Helios' cluster_log.csv", HELIOS_COLUMNS),
    )
    for kind, _, wanted in kinds:
        if set(wanted) <= columns:
            return kind
    # most of one kind's columns: the header of that kind with some missing, said as --format would say it
    share, label, missing = max(
        (len(set(wanted) & columns) / len(wanted), label, [c for c in wanted if c not in columns])
        for _, label, wanted in kinds
    )
    if share >= 0.5 and len(columns & {c for _, _, wanted in kinds for c in wanted}) >= 2:
        raise TraceError(
            f"{path}: line 1: {label} without its column{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
            f"(columns: {', '.join(c for c in header if c)}): add {'them' if len(missing) > 1 else 'it'}, or give "
            "--format if it is another kind of trace"
        )
    raise TraceError(
        f"{path}: line 1: not a trace this reads: a Muri CSV has {', '.join((*MURI_COLUMNS, *MURI_RESOURCES))}; "
        f"a plain CSV has "
        f"{', '.join(PLAIN_COLUMNS)}; Helios' cluster_log.csv has {', '.join(HELIOS_COLUMNS)}; Philly's job log "
        "is JSON (give --format to say which; another cluster's trace, Alibaba PAI's say: write it as the plain "
        "CSV, a line a job)"
    )


def _regular(path: Path) -> Path:
    return refuse_unless_regular(path, "a trace is a CSV or JSON file", TraceError)


def _first_line(path: Path) -> str:
    _regular(path)
    try:
        with path.open(encoding="utf-8-sig") as handle:
            return handle.readline(MAX_CSV_LINE)  # the header: a line without end is not read whole
    except OSError as error:
        raise TraceError(f"{path}: cannot read the trace: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise TraceError(_not_utf8(path)) from None


def _json_after_blank_lines(path: Path) -> bool:
    """Whether the first character that is not white space, within the file's first MAX_CSV_LINE characters,
    opens JSON ('[' or '{')."""
    try:
        with path.open(encoding="utf-8-sig") as handle:
            head = handle.read(MAX_CSV_LINE).lstrip()
    except (OSError, UnicodeDecodeError):
        return False  # _first_line read the same file: what it could not read it has said
    return head.startswith(("[", "{"))


def load_trace(
    path: str | Path,
    fmt: str | None = None,
    profiles: ProfileLookup | None = None,
    assign: Sequence[str] = (),
    seed: int = 0,
    restart_s: float = 0.0,
    limit: int | None = None,
    progress: ReadProgress | None = None,
) -> Trace:
    """The trace at `path` as job instances. `profiles` finds a model's profile by name (plain and Philly
    traces); `assign`: the models Philly's jobs are drawn from; `restart_s`: a job's restart cost where
    the trace does not give one; `limit`: only the first jobs (by arrival; a note says so where the trace has
    fewer); `progress`: told the entries (lines, or a log's jobs) read so far, for a trace of LONG_TRACE_BYTES or
    more."""
    path = named_path(path, "the trace's CSV or JSON file", TraceError)
    fmt = fmt or detect_format(path)
    if fmt not in FORMATS:
        raise TraceError(f"--format {printable(fmt)}: choose {', '.join(FORMATS)}")
    report = progress if progress is not None and _size(path) >= LONG_TRACE_BYTES else None
    if report is not None:
        report(0, None)  # the file parsed before its entries are counted
    if fmt == "muri":
        trace = _load_muri(path, report)
    elif fmt == "plain":
        if profiles is None:
            raise TraceError(f"{path}: a plain trace names models: give --profiles FILE.csv or stored profiles")
        trace = _load_plain(path, profiles, restart_s, report)
    else:
        if profiles is None or not assign:
            source = "Philly's job log" if fmt == "philly" else "Helios' cluster_log.csv"
            raise TraceError(f"{path}: {source} names no model: give --assign MODEL,... and their profiles")
        load = _load_philly if fmt == "philly" else _load_helios
        trace = load(path, profiles, assign, seed, restart_s, report)
    if not trace.instances:
        why = _skipped_text(trace.skipped)
        if not why and fmt != "philly":  # a CSV of its header alone (a spreadsheet's empty sheet)
            why = " (only its header line: give a line a job after it)"
        raise TraceError(f"{path}: no jobs in the trace{why}")
    if limit is not None:
        if limit > len(trace.instances):  # said: `--jobs 99999999999999999999` replayed 2 jobs as if it had that many
            asked = str(limit) if len(str(limit)) <= 40 else f"{str(limit)[:40]}..."  # as --seed shows one
            trace.notes.append(f"--jobs {asked}: the trace has {counted(len(trace.instances), 'job')}, all replayed")
        trace.instances = sorted(trace.instances, key=lambda job: job.arrival_s)[:limit]
    trace.path = escaped_bytes(trace.path)  # as stored and shown (it failed only after the whole replay)
    return trace


# Times are from the trace's first arrival, subtracted as written (1507338005.435 is no float): a trace shifted
# in time (Unix timestamps) replays exactly as the same trace from 0, and the replay's clock holds small
# numbers, whose float sums tell events apart.


def _first_arrival(rows: Sequence[tuple[int, dict[str, str]]], column: str) -> Decimal:
    """The smallest number of `column`, as written (a cell that is none, or out of range, is refused later, with
    its line)."""
    first: Decimal | None = None
    for _, cells in rows:
        try:
            value = Decimal(cells[column])
        except InvalidOperation:
            continue
        # only what the row's check takes: -1e500 made another row's arrival inf, -1e999999999 a decimal.Overflow
        # (copy_abs, not abs(): no rounding to the context, which overflows)
        if value.is_finite() and value.copy_abs() <= LARGEST and (first is None or value < first):
            first = value
    return first if first is not None else Decimal(0)


def _origin_notes(first_s: Decimal | float, when: str = "") -> list[str]:
    """What the outcome says of a first arrival not at 0."""
    return [f"times are from the first arrival, at {float(first_s):.15g} s of the trace{when}"] if first_s else []


# Why a job of Philly's log or Helios' was skipped (the key it is counted under, stored with a simulation), and the same
# for one job: "1 job never started", not "1 jobs never started".
SKIPPED_ONE = {
    "entries that are not jobs": "entry that is not a job",
    "jobs never started": "job never started",
    "jobs whose GPUs are not lists": "job whose GPUs are not a list",
    "jobs without times": "job without times",
    "jobs on no GPU": "job on no GPU",
    "jobs that ran no time": "job that ran no time",
    "jobs that end before they start": "job that ends before it starts",
    "jobs still running at the log's end": "job still running at the log's end",
    "CPU jobs (on no GPU)": "CPU job (on no GPU)",
}


def skipped_words(why: str, count: int) -> str:
    """How many were skipped for one reason, in words: "1 job never started", "3 jobs never started"."""
    return counted(count, SKIPPED_ONE.get(why, why), why)


def skipped_text(skipped: Mapping[str, int]) -> str:
    """Every reason a trace's entries were skipped, counted: "1 job never started, 2 jobs without times"."""
    return ", ".join(skipped_words(why, count) for why, count in skipped.items())


def _skipped_text(skipped: Mapping[str, int]) -> str:
    return f" ({skipped_text(skipped)})" if skipped else ""


def _size(path: Path) -> int:
    """The file's size in bytes (0 where it cannot be told: the reader says why)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _reported(entries: Iterable[_Entry], report: ReadProgress | None, total: int | None) -> Iterator[_Entry]:
    """`entries`, `report` told how many were read every READ_REPORT_EVERY and at the end (`total`: how many
    there are, None where not known before they are read)."""
    if report is None:
        yield from entries
        return
    done = 0
    for done, entry in enumerate(entries, 1):
        if done % READ_REPORT_EVERY == 0:
            report(done, total)
        yield entry
    report(done, done)


# ---------------------------------------------------------------- CSV helpers


def _rows(path: Path, required: Sequence[str], optional: Sequence[str]) -> Iterator[tuple[int, dict[str, str]]]:
    """(line, cells) for every non-blank line; the header checked (required columns, no unknown ones). Empty
    columns at the end (a spreadsheet's export: `a,b,,`) are left out, header and lines alike."""
    _regular(path)
    try:
        handle = path.open(newline="", encoding="utf-8-sig")
    except OSError as error:
        raise TraceError(f"{path}: cannot read the trace: {error.strerror or error}") from None
    with handle:
        try:
            reader = delimited_reader(csv_lines(path, handle, TraceError))
            written = without_empty_tail([cell.strip() for cell in next(reader, [])])
            header = [column_name(cell) for cell in written]
            if not any(header):  # it said "missing column ... (columns: )"
                raise TraceError(f"{path}: line 1: empty, expected the header line: {','.join(required)}")
            missing = [column for column in required if column not in header]
            if missing:
                # the header as written, but a column that is not plain text (a terminal's escape) escaped, and cut
                shown = ", ".join(cell if cell.isprintable() else repr(cell) for cell in written[:20])
                raise TraceError(
                    f"{path}: line 1: missing column {', '.join(missing)} "
                    f"(columns: {shown[:400]}{', ...' if len(header) > 20 or len(shown) > 400 else ''})"
                )
            twice = [cell for cell, column in zip(written, header) if header.count(column) > 1]
            if twice:  # the last would win, silently
                raise TraceError(f"{path}: line 1: column {twice[0]!r} appears twice")
            known = set(required) | set(optional)
            unknown = [cell for cell, column in zip(written, header) if column not in known]
            if unknown:
                raise TraceError(
                    f"{path}: line 1: unknown column {unknown[0]!r}; columns are {', '.join([*required, *optional])}"
                )
            read_before = reader.line_num
            for row in reader:  # a row is told by its first line: a quoted value may hold line ends
                line, read_before = read_before + 1, reader.line_num
                if not any(cell.strip() for cell in row):
                    continue
                row = without_empty_tail(row, len(header))
                if len(row) != len(header):
                    fields = f"{path}: line {line}: {counted(len(row), 'field')}, the header has {len(header)}"
                    if reader.line_num > line and len(row) < len(header):  # a quoted value ran on past its line
                        fields += f": a quoted value runs on to line {reader.line_num} (a quote not closed?)"
                    raise TraceError(fields)
                yield line, {column: cell.strip() for column, cell in zip(header, row)}
        except UnicodeDecodeError:
            raise TraceError(_not_utf8(path)) from None
        except csv.Error as error:
            raise TraceError(f"{path}: line {reader.line_num}: not valid CSV: {error}") from None


def _not_utf8(path: Path) -> str:
    """What to say of a trace that is not UTF-8: compressed or UTF-16 as `not_utf8_text` says it, else the line
    of its first byte that is not UTF-8 (a spreadsheet's Latin-1 or Windows-1252 export) and how to convert it."""
    said = not_utf8_text(path)
    if said.endswith(")"):  # compressed, or UTF-16: how to convert it is said
        return said
    try:
        with path.open("rb") as handle:
            for number in itertools.count(1):
                raw = handle.readline(4 * MAX_CSV_LINE + 4)
                if not raw:
                    break
                try:
                    raw.decode("utf-8")
                except UnicodeDecodeError as error:
                    return (
                        f"{path}: line {number}: byte 0x{raw[error.start]:02x} is not UTF-8: save the trace as UTF-8 "
                        "(e.g. iconv -f WINDOWS-1252 -t UTF-8, or the spreadsheet's 'CSV UTF-8')"
                    )
    except OSError:
        pass
    return said


def _number(path: Path, line: int, column: str, text: str, lowest: float = 0.0, above: bool = False) -> float:
    value = decimal(text)
    if value is None:
        how = ""
        if any(mark in text for mark in ",_ '\u00a0\u202f") and any(c.isdigit() for c in text):
            how = ": write it without thousands separators, with '.' for a decimal point"
        raise TraceError(f"{path}: line {line}: {column} must be a number, got {text!r}{how}")
    if not math.isfinite(value):
        raise TraceError(f"{path}: line {line}: {column} must be a finite number, got {text}")
    if abs(value) > LARGEST:
        raise TraceError(f"{path}: line {line}: {column} {text} is out of range: at most {LARGEST:g} (a typo?)")
    if value < lowest or (above and value <= lowest):
        raise TraceError(f"{path}: line {line}: {column} must be {'>' if above else '>='} {lowest:g}, got {text}")
    return value


def _whole(path: Path, line: int, column: str, text: str, lowest: float = 1.0) -> int:
    value = _number(path, line, column, text, lowest)
    if value != int(value):
        raise TraceError(f"{path}: line {line}: {column} must be a whole number, got {text!r}")
    return int(value)


def _unique_name(path: Path, line: int, name: str, seen: dict[str, int], written: str = "") -> str:
    """`name`, checked and taken; `written`: what the trace wrote that it comes from, where not the name."""
    if (problem := job_name_problem(name)) is not None:
        raise TraceError(f"{path}: line {line}: {problem}")
    if name in seen:
        raise TraceError(
            f"{path}: line {line}: {written or 'job name ' + repr(name)} is used twice (first on line {seen[name]})"
        )
    seen[name] = line
    return name


def _generated_name(preferred: str, *taken: Container[str]) -> str:
    """A name for a job the trace names not (or not usably): `preferred`, else the first of `preferred-2`,
    `preferred-3`, ... that is not `taken` (the names already given, and those the trace gives later: the
    replay tells jobs apart by name)."""
    name, suffix = preferred, 1
    while any(name in names for names in taken):
        suffix += 1
        name = f"{preferred}-{suffix}"
    return name


# ---------------------------------------------------------------- Muri's CSV


def _load_muri(path: Path, report: ReadProgress | None = None) -> Trace:
    instances: list[JobInstance] = []
    kinds: dict[tuple[Any, ...], JobProfile] = {}
    seen: dict[str, int] = {}
    rows = list(_rows(path, (*MURI_COLUMNS, *MURI_RESOURCES), MURI_OPTIONAL))
    first_ms = _first_arrival(rows, "submit_time")
    for line, cells in _reported(rows, report, len(rows)):
        gpus = _whole(path, line, "num_gpu", cells["num_gpu"])
        _number(path, line, "submit_time", cells["submit_time"])
        arrival = float((Decimal(cells["submit_time"]) - first_ms) / 1000)
        iterations = _whole(path, line, "iterations", cells["iterations"])
        iteration_ms = _number(path, line, "iteration_time", cells["iteration_time"])
        data, gpu, network = (_number(path, line, column, cells[column]) for column in MURI_RESOURCES)
        # resource_time_1 is the job's compute, and iteration_time holds it: neither under model.MIN_COMPUTE_MS
        for column, ms in (("iteration_time", iteration_ms), ("resource_time_1", gpu)):
            if ms < MIN_COMPUTE_MS:
                raise TraceError(
                    f"{path}: line {line}: {column} must be at least {MIN_COMPUTE_MS:g} ms "
                    f"(a microsecond), got {cells[column]}"
                )
        if iterations * iteration_ms / 1000 > LARGEST:  # each in range, their product a run of 10^21 s
            raise TraceError(
                f"{path}: line {line}: iterations x iteration_time is {iterations * iteration_ms / 1000:.3g} s, "
                f"more than {LARGEST:.0e} s (31,700 years): a typo?"
            )
        model = cells["model_name"] or "unknown"
        if (problem := job_name_problem(model)) is not None:
            raise TraceError(f"{path}: line {line}: model_name: {problem}")
        name = _unique_name(path, line, f"job{cells['job_id']}", seen, f"job_id {cells['job_id']!r}")
        key = (model, gpus, data, gpu, network)
        kind = kinds.get(key)
        if kind is None:
            kind = kinds[key] = JobProfile(
                name=model, devices=gpus, compute_ms=gpu, comm_ms=network, memory_gb=0.0, data_ms=data
            )
        restart = MURI_RESTART_S.get(gpus, {}).get(model, MURI_DEFAULT_RESTART_S)
        instances.append(
            JobInstance(name, kind, iterations, arrival, iteration_ms=iteration_ms, restart_s=float(restart))
        )
    return Trace(str(path), "muri", instances, notes=_origin_notes(first_ms / 1000))


# ---------------------------------------------------------------- the plain CSV


def _load_plain(
    path: Path, profiles: ProfileLookup, restart_default: float, report: ReadProgress | None = None
) -> Trace:
    instances: list[JobInstance] = []
    seen: dict[str, int] = {}
    rows = list(_rows(path, PLAIN_COLUMNS, PLAIN_OPTIONAL))
    written = {cells["name"] for _, cells in rows if cells.get("name")}
    first = _first_arrival(rows, "arrival_s")
    for line, cells in _reported(rows, report, len(rows)):
        _number(path, line, "arrival_s", cells["arrival_s"])
        arrival = float(Decimal(cells["arrival_s"]) - first)
        gpus = _whole(path, line, "gpus", cells["gpus"])
        duration = _number(path, line, "duration_s", cells["duration_s"], above=True)
        model = cells["model"]
        if not model:
            raise TraceError(f"{path}: line {line}: empty model: name a profile")
        kind = _profile(path, line, profiles, model)
        if cells.get("name"):
            name = _unique_name(path, line, cells["name"], seen)
        else:  # job<its index>, unless the trace names a job so, here or further down
            name = _unique_name(path, line, _generated_name(f"job{len(instances)}", written, seen), seen)
        restart = _number(path, line, "restart_s", cells["restart_s"]) if cells.get("restart_s") else restart_default
        slowdown = (
            _number(path, line, "max_slowdown", cells["max_slowdown"], 1.0) if cells.get("max_slowdown") else None
        )
        iterations = max(1, round(duration * 1000 / kind.solo_ms))
        instances.append(
            JobInstance(name, kind, iterations, arrival, devices=gpus, max_slowdown=slowdown, restart_s=restart)
        )
    return Trace(str(path), "plain", instances, notes=_origin_notes(first))


def _profile(path: Path, line: int, profiles: ProfileLookup, model: str) -> JobProfile:
    if not model.isprintable():  # a recipe's error repeats the name as it is: a terminal would run its escapes
        raise TraceError(f"{path}: line {line}: model {model!r}: no model's name holds a control character")
    try:
        kind = profiles(model)
    except StoreError:  # the store that holds the profiles (read-only, full): its own line, not the trace's
        raise
    except (XoverError, InvalidJobProfile) as error:
        raise TraceError(f"{path}: line {line}: model {model!r}: {error}") from None
    if kind is None:
        raise TraceError(
            f"{path}: line {line}: no profile of model {model!r}: add it to --profiles, or profile it (`xover profile`)"
        )
    return kind


# ---------------------------------------------------------------- traces that name no model (Philly's, Helios')

_TIME = "%Y-%m-%d %H:%M:%S"  # as Philly's log and Helios' cluster_log.csv write times
# what stands for no time: Philly's log writes a missing one as null or "None" (its notebook reads both, and '')
_NO_TIME = (None, "", "None")


class _NoTime(Exception):
    """A time the log does not give (a job skipped, not refused)."""


def _seconds(text: Any, where: str) -> float:
    """Seconds since 1970 of a trace's time, as `2017-10-07 01:12:09` (taken as UTC: only differences count),
    or any ISO 8601 form (`T`, fractions of a second, an offset such as +08:00 or Z). `where` names the field
    in the error of one that is not a time (it was a job skipped as without times: a whole log of another form
    was "no jobs")."""
    if text in _NO_TIME:
        raise _NoTime
    if isinstance(text, str):
        try:
            moment = datetime.fromisoformat(text.strip())
        except ValueError:
            pass
        else:
            return (moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).timestamp()
    zone = " (a time zone's name is not read: give an offset, e.g. -07:00)" if _zone_name(text) else ""
    raise TraceError(f"{where}: not a time: {quoted(str(text))}: write it as 2017-10-07 01:12:09{zone}")


def _zone_name(text: Any) -> bool:
    """Whether `text` is a time with a zone's name after it (`2017-10-03 00:08:00 PDT`)."""
    if not isinstance(text, str) or " " not in text.strip():
        return False
    moment, _, zone = text.strip().rpartition(" ")
    try:
        datetime.fromisoformat(moment)
    except ValueError:
        return False
    return zone.isalpha()


def _assigned_kinds(profiles: ProfileLookup, assign: Sequence[str]) -> dict[str, JobProfile]:
    """The profiles of --assign's models (a trace that names none draws each job's from them)."""
    kinds = {}
    for model in assign:
        try:
            kind = profiles(model)
        except StoreError:  # the store's own line, not the flag's
            raise
        except (XoverError, InvalidJobProfile) as error:  # a stored profile's recipe: named by the flag, as a trace's
            raise TraceError(f"--assign {model}: {error}") from None
        if kind is None:
            raise TraceError(f"--assign {model}: no profile of it: add it to --profiles, or `xover profile` it")
        kinds[model] = kind
    return kinds


def _drawn(
    path: Path,
    fmt: str,
    source: str,
    jobs: Sequence[tuple[float, str, int, float]],
    skipped: dict[str, int],
    kinds: Mapping[str, JobProfile],
    assign: Sequence[str],
    seed: int,
    restart: float,
) -> Trace:
    """The trace of `jobs` (submitted s, id, devices, run time s) that name no model: each job's drawn from
    `assign` (its profile in `kinds`) with `seed`, in order of arrival; named by its id (one that is not a
    usable name, or that an earlier job has, gets `job<N>`, N its place by arrival, or `job<N>-2`, ... where
    another id is `job<N>`)."""
    rng = random.Random(seed)
    instances: list[JobInstance] = []
    first = min((submitted for submitted, _, _, _ in jobs), default=0.0)  # whole seconds: exact differences
    usable = {jobid for _, jobid, _, _ in jobs if job_name_problem(jobid) is None}
    taken: set[str] = set()
    for submitted, jobid, gpus, duration in sorted(jobs):
        kind = kinds[rng.choice(assign)]
        if jobid in usable and jobid not in taken:
            name = jobid
        else:  # no usable jobid, or one an earlier job has: a name no other job has or will have
            name = _generated_name(f"job{len(instances)}", usable, taken)
        taken.add(name)
        iterations = max(1, round(duration * 1000 / kind.solo_ms))
        instances.append(JobInstance(name, kind, iterations, submitted - first, devices=gpus, restart_s=restart))
    notes = [DRAWN_MODEL.format(models=", ".join(assign), seed=seed, source=source)]
    if jobs:
        when = datetime.fromtimestamp(first, timezone.utc).strftime(_TIME)
        notes += _origin_notes(first, f" ({when} UTC)")
    return Trace(str(path), fmt, instances, skipped, notes)


# ---------------------------------------------------------------- Philly's job log


def _load_philly(
    path: Path,
    profiles: ProfileLookup,
    assign: Sequence[str],
    seed: int,
    restart: float,
    report: ReadProgress | None = None,
) -> Trace:
    try:
        # a BOM read past, as a CSV trace's is; a key given twice refused (json.loads keeps the last silently)
        entries = json_without_duplicate_keys(_regular(path).read_text(encoding="utf-8-sig"), str(path))
    except OSError as error:
        raise TraceError(f"{path}: cannot read the trace: {error.strerror or error}") from None
    except DuplicateKeyError as error:
        raise TraceError(str(error)) from None
    except UnicodeDecodeError:
        raise TraceError(_not_utf8(path)) from None
    except ValueError as error:
        raise TraceError(f"{path}: not Philly's job log (a JSON list of jobs): {error}") from None
    except RecursionError:  # thousands of "[": too deep for the parser
        raise TraceError(f"{path}: not Philly's job log: nested too deeply") from None
    if isinstance(entries, dict):
        entries = [entries]
    if not isinstance(entries, list):
        raise TraceError(f"{path}: not Philly's job log: expected a JSON list of jobs")
    kinds = _assigned_kinds(profiles, assign)
    skipped: dict[str, int] = {}
    jobs: list[tuple[float, str, int, float]] = []
    for index, entry in enumerate(_reported(entries, report, len(entries))):
        if (found := _long_integer(entry, index)) is not None:  # kept as text by the JSON reader
            where, number = found
            raise TraceError(
                f"{path}: {where}: {number!r}, which no field of Philly's log holds: correct or remove that job"
            )
        reason, job = _philly_job(entry, f"{path}: [{index}]")
        if job is None:
            skipped[reason] = skipped.get(reason, 0) + 1
            continue
        jobs.append(job)
    return _drawn(path, "philly", "Philly", jobs, skipped, kinds, assign, seed, restart)


def _long_integer(entry: Any, index: int) -> tuple[str, LongInteger] | None:
    """The first integer of the log's entry `index` too long to convert (no id, time or GPU count is), and where
    it is, as `[3].attempts[0].end_time`. A loop, not a recursion: the parser takes nesting deeper than it could."""
    pending: list[tuple[str, Any]] = [(f"[{index}]", entry)]
    while pending:
        where, value = pending.pop()
        if isinstance(value, LongInteger):
            return where, value
        if isinstance(value, dict):
            children = [(json_path(where, key), item) for key, item in value.items()]
        elif isinstance(value, list):
            children = [(f"{where}[{number}]", item) for number, item in enumerate(value)]
        else:
            continue
        pending.extend(reversed([child for child in children if isinstance(child[1], (dict, list, LongInteger))]))
    return None


# what every job of Philly's cluster_job_log has (its README): an entry with none of them is no job
PHILLY_JOB_KEYS = frozenset({"jobid", "attempts", "submitted_time", "status", "user", "vc"})


def _philly_job(entry: Any, where: str) -> tuple[str, tuple[float, str, int, float] | None]:
    """(why it is skipped, or "") and (submitted s, job id, devices, run time s) of one job of the log; `where`
    names it (`FILE: [3]`) in the error of a time that is not one."""
    if not isinstance(entry, dict) or not PHILLY_JOB_KEYS & entry.keys():  # `{}` read as a job never started
        return "entries that are not jobs", None
    attempts = entry.get("attempts") or []
    if not attempts or not isinstance(attempts, list):
        return "jobs never started", None
    last = attempts[-1]
    if not isinstance(last, dict) or not all(key in last for key in ("start_time", "end_time")):
        return "jobs without times", None
    at = f"{where}.attempts[{len(attempts) - 1}]"
    try:
        submitted = _seconds(entry.get("submitted_time"), f"{where}.submitted_time")
        start = _seconds(last["start_time"], f"{at}.start_time")
    except _NoTime:
        return "jobs without times", None
    try:
        # the log's README: a last attempt without an end was still running when the log was taken
        end = _seconds(last["end_time"], f"{at}.end_time")
    except _NoTime:
        return "jobs still running at the log's end", None
    details = last.get("detail") or []
    if not isinstance(details, list) or not all(
        isinstance(d, dict) and isinstance(d.get("gpus") or [], list) for d in details
    ):
        return "jobs whose GPUs are not lists", None  # a string's length is not a count of GPUs
    # over every machine the attempt ran on; a GPU listed twice on one machine is one GPU
    gpus = sum(len({str(gpu) for gpu in detail.get("gpus") or []}) for detail in details)
    if gpus < 1:
        return "jobs on no GPU", None
    if end < start:  # a clock put back, or an edited log: said apart from a job of no time
        return "jobs that end before they start", None
    if end == start:
        return "jobs that ran no time", None
    jobid = entry.get("jobid")
    # null or true is no id (str() made a job "None"): such a job gets a made-up name, as one without an id
    usable = isinstance(jobid, (str, int)) and not isinstance(jobid, bool)
    return "", (submitted, str(jobid) if usable else "", gpus, end - start)


# ---------------------------------------------------------------- Helios' cluster_log.csv


def _load_helios(
    path: Path,
    profiles: ProfileLookup,
    assign: Sequence[str],
    seed: int,
    restart: float,
    report: ReadProgress | None = None,
) -> Trace:
    kinds = _assigned_kinds(profiles, assign)
    skipped: dict[str, int] = {}
    jobs: list[tuple[float, str, int, float]] = []
    # read as it goes (an error is said at its line, before a later line is read): how many in all is not known
    for line, cells in _reported(_rows(path, HELIOS_COLUMNS, HELIOS_OPTIONAL), report, None):
        gpus = _whole(path, line, "gpu_num", cells["gpu_num"], lowest=0.0)
        try:
            submitted = _seconds(cells["submit_time"], f"{path}: line {line}: submit_time")
        except _NoTime:
            raise TraceError(f"{path}: line {line}: submit_time is empty: give when the job was submitted") from None
        reason, duration = "", 0.0
        if not gpus:
            reason = "CPU jobs (on no GPU)"  # Helios logs every Slurm job; its GPU jobs are about half
        elif not cells["duration"]:
            reason = "jobs without times"
        elif (duration := _number(path, line, "duration", cells["duration"])) == 0:
            reason = "jobs that ran no time"
        if reason:
            skipped[reason] = skipped.get(reason, 0) + 1
            continue
        jobs.append((submitted, cells["job_id"], gpus, duration))
    return _drawn(path, "helios", "Helios", jobs, skipped, kinds, assign, seed, restart)
