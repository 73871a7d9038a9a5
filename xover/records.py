"""The metrics protocol between the workers and the launcher: one JSON object per line on rank 0's
stdout, after a fixed marker (the workers write it with runtime/metrics.py's `emit`).

The marker survives whatever a launcher puts in front of a relayed line (horovodrun's
`[1,0]<stdout>:`, torchrun's `[rank0]:` / `[default0]:`), so metrics cross hosts through the
launcher's own output. A launcher can also put its prefix *inside* a line: torchrun tails each rank's
log file and relays what it has read, so a line read while the rank was still writing it (a write
that crosses a page of the file) arrives cut in two, the second part behind a prefix of its own.
Such a record is mended by taking the launchers' prefixes out of it (seen now and then as a lost
iteration: docs/measurements.md, *Figures behind the design*).

A training script's output is not trusted: it may print a line that looks like ours (a dataset, a
log it replays, a copy of our lines). xover gives each run a random token (XOVER_METRIC_TOKEN in its
workers' environment) that every record carries; `record_problem` accepts only a record with its run's
token and of the shape the runtime writes (kinds and field types as below, finite numbers but a
loss), so that a forged or malformed line is ignored, never stored, never an error.
"""

from __future__ import annotations

import hmac
import json
import math
import re
from collections.abc import Callable
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any, ClassVar

MARKER = "XOVER-METRIC "
# what horovodrun ('[0]<stdout>:', under mpirun '[1,0]<stdout>:') and torchrun ('[default0]:', '[rank0]:') put in
# front of each relayed line (never inside a JSON record of ours)
RELAY_PREFIX = re.compile(r"\[\d+(?:,\d+)?\]<std(?:out|err)>:|\[(?:rank|default)\d+\]:", re.ASCII)

MAX_TRIED = 8  # markers followed by `{` tried per line, from its end (parse_metric_line)
# One dataclass per kind of record (below) serves the emitter (runtime/metrics.py's `emit`), the reader
# (`checked_record`) and the recorder (run/record.py): its fields, their types and what each accepts are
# written once.


def parse_metric_line(line: str) -> dict[str, Any] | None:
    """The metric carried by a line of output, or None for any other line.

    The last marker is tried first: another writer to the same stream (a data loader's worker, a
    thread, anything that prints without a newline) can leave text that holds a marker in front of a
    record of ours, which then follows that text on the same line.

    A launcher that relays a rank's output (torchrun's --tee) can read a line while it is being written
    and relay the rest behind a prefix of its own, anywhere in the record (a key, a value, the marker
    itself): the relay puts such lines back together (`RelayedLines`), and any prefix still in a line
    is taken out before it is read.

    Only a marker followed by `{` can start a record, and only the last MAX_TRIED of those are tried:
    each try parses the rest of the line, so trying every marker of a line made of markers (a 64 KiB
    line holds about 5000) cost time quadratic in the line and stalled the relay thread."""
    line = RELAY_PREFIX.sub("", line)
    at = line.rfind(MARKER)
    tried = 0
    while at >= 0 and tried < MAX_TRIED:
        start = at + len(MARKER)
        if line.startswith("{", start):
            tried += 1
            record = _record_at(line[start:])
            if record is not None:
                return record
        at = line.rfind(MARKER, 0, at)
    return None


class RelayedLines:
    """A launcher's output put back into each rank's own lines.

    A launcher that relays its ranks' output (torchrun's --tee, mpirun's tags) can read a rank's line while
    it is being written: it relays the part it read, then the rest behind its prefix again, and another
    rank's line can come between the two (`[default0]:XOVER-METRIC {"ki[default1]:a line\n[default0]:nd"...`).
    So a line of the output is cut at each prefix, and each part goes to the line of the rank that prefix
    names: a part that a prefix follows on the same line is unfinished, the last part ends its rank's line.
    A part before any prefix is the launcher's own output, kept the same way. An unfinished part longer than
    `max_chars` is given out as it is (what the relay does to a line that never ends), and so is the oldest
    where more than `max_unfinished` wait (a script that prints prefixes of its own cannot grow the relay)."""

    def __init__(self, max_chars: int, max_unfinished: int = 1024) -> None:
        self.max_chars, self.max_unfinished = max_chars, max_unfinished
        self.unfinished: dict[str, str] = {}  # prefix ("" for the launcher's own): its rank's line so far

    def feed(self, line: str) -> list[tuple[str, str]]:
        """The lines (prefix, text without it) that this line of the launcher's output ends: its last part's,
        and any unfinished part grown past `max_chars`."""
        parts: list[tuple[str, str]] = []
        start, prefix = 0, ""
        for found in RELAY_PREFIX.finditer(line):
            if prefix or found.start() > 0:  # not an empty start of the line
                parts.append((prefix, line[start : found.start()]))
            start, prefix = found.end(), found.group()
        parts.append((prefix, line[start:]))
        ended = []
        for index, (source, text) in enumerate(parts):
            whole = self.unfinished.pop(source, "") + text
            if index == len(parts) - 1 or len(whole) > self.max_chars:
                ended.append((source, whole))
                continue
            if len(self.unfinished) >= self.max_unfinished:
                oldest = next(iter(self.unfinished))
                ended.append((oldest, self.unfinished.pop(oldest)))
            self.unfinished[source] = whole
        return ended

    def rest(self) -> list[tuple[str, str]]:
        """The unfinished lines, once the output has ended."""
        rest, self.unfinished = list(self.unfinished.items()), {}
        return [(source, text) for source, text in rest if text]


def _record_at(payload: str) -> dict[str, Any] | None:
    try:
        record = json.loads(payload)
    except json.JSONDecodeError:
        return None
    return record if isinstance(record, dict) and "kind" in record else None


# ------------------------------------------------------------------------------------ what is accepted

INT32 = 2**31 - 1  # the store's integer columns (PostgreSQL's integer)


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -INT32 - 1 <= value <= INT32


def _whole(value: Any) -> bool:  # any size (not stored)
    return isinstance(value, int) and not isinstance(value, bool)


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _seconds(value: Any) -> bool:  # a duration: finite, not negative
    return _finite(value) and value >= 0


def _number(value: Any) -> bool:  # a loss or an accuracy may be NaN or infinite: a diverged job says so
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _text(size: int) -> Callable[[Any], bool]:
    return lambda value: isinstance(value, str) and len(value) <= size


def _flag(value: Any) -> bool:
    return isinstance(value, bool)


def _held(value: Any) -> bool:
    return (
        isinstance(value, list)
        and len(value) <= 10000
        and all(isinstance(pair, list) and len(pair) == 2 and all(_finite(t) for t in pair) for pair in value)
    )


def _optional(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda value: value is None or check(value)


# ------------------------------------------------------------------------------------ the records


def _check(check: Callable[[Any], bool]) -> dict[str, Any]:
    return {"check": check}


@dataclass(frozen=True)
class StartRecord:
    """A job's facts, once, when it starts (rank 0)."""

    KIND: ClassVar[str] = "start"
    job: str | None = field(default=None, metadata=_check(_optional(_text(200))))
    iterations: int | None = field(default=None, metadata=_check(_optional(_int)))
    world_size: int | None = field(default=None, metadata=_check(_optional(_int)))
    engine: str | None = field(default=None, metadata=_check(_optional(_text(20))))
    device: str | None = field(default=None, metadata=_check(_optional(_text(40))))
    backend: str | None = field(default=None, metadata=_check(_optional(_text(20))))
    deterministic: bool | None = field(default=None, metadata=_check(_optional(_flag)))
    devices_per_gpu: int | None = field(default=None, metadata=_check(_optional(_int)))
    gpu_sharing: str | None = field(default=None, metadata=_check(_optional(_text(20))))
    parameters: int | None = field(default=None, metadata=_check(_optional(_whole)))
    gradient_bytes: int | None = field(default=None, metadata=_check(_optional(_int)))
    wall_time: float | None = field(default=None, metadata=_check(_optional(_finite)))
    link_priority: int | None = field(default=None, metadata=_check(_optional(_int)))
    link_sockets: int | None = field(default=None, metadata=_check(_optional(_whole)))
    comm_threads: str | None = field(default=None, metadata=_check(_optional(_text(10))))
    checkpoints: int | None = field(default=None, metadata=_check(_optional(_int)))


@dataclass(frozen=True)
class IterationRecord:
    """One training iteration (rank 0): its times in seconds, the samples it took, its loss."""

    KIND: ClassVar[str] = "iter"
    step: int = field(metadata=_check(lambda v: _int(v) and v >= 0))
    time_s: float = field(metadata=_check(_finite))  # since the job's first iteration began
    wall_time: float = field(metadata=_check(_finite))
    iteration_s: float = field(metadata=_check(_finite))
    data_s: float = field(metadata=_check(_finite))
    compute_s: float = field(metadata=_check(_finite))
    communication_s: float = field(metadata=_check(_finite))  # exposed: the wait for the all-reduce
    wait_s: float = field(metadata=_check(_finite))  # for the turn
    samples: int = field(metadata=_check(_int))
    loss: float | None = field(metadata=_check(_optional(_number)))
    yields: int | None = field(default=None, metadata=_check(_optional(_int)))
    link_s: float | None = field(default=None, metadata=_check(_optional(_finite)))
    comm_cpu_s: float | None = field(default=None, metadata=_check(_optional(_finite)))
    held: list[list[float]] | None = field(default=None, metadata=_check(_optional(_held)))
    # seconds of it the model spent evaluating (a recipe's evaluation; a script's forwards without gradients)
    evaluation_s: float | None = field(default=None, metadata=_check(_optional(_seconds)))


@dataclass(frozen=True)
class EvaluationRecord:
    """One evaluation of the model (rank 0)."""

    KIND: ClassVar[str] = "eval"
    step: int = field(metadata=_check(_int))
    metric: str = field(metadata=_check(_text(60)))
    value: float = field(metadata=_check(_number))


@dataclass(frozen=True)
class TurnsLostRecord:
    """A rank gave up waiting for crossover turns: the rest of its run went without them (any rank)."""

    KIND: ClassVar[str] = "turns-lost"
    device: int = field(metadata=_check(_int))
    why: str = field(metadata=_check(_text(200)))
    slot: int | None = field(default=None, metadata=_check(_optional(_int)))
    wall_time: float | None = field(default=None, metadata=_check(_optional(_finite)))


@dataclass(frozen=True)
class EndRecord:
    """A job's totals, once, when it ends (rank 0)."""

    KIND: ClassVar[str] = "end"
    iterations: int | None = field(default=None, metadata=_check(_optional(_whole)))
    wall_s: float | None = field(default=None, metadata=_check(_optional(_finite)))
    peak_memory_gb: float | None = field(default=None, metadata=_check(_optional(_finite)))
    gradient_bytes: int | None = field(default=None, metadata=_check(_optional(_int)))  # a script's, measured
    checkpoints: int | None = field(default=None, metadata=_check(_optional(_int)))  # a script's, counted


MetricRecord = StartRecord | IterationRecord | EvaluationRecord | TurnsLostRecord | EndRecord
RECORD_TYPES: dict[str, type[MetricRecord]] = {
    kind.KIND: kind for kind in (StartRecord, IterationRecord, EvaluationRecord, TurnsLostRecord, EndRecord)
}


def _required(spec: Field[Any]) -> bool:
    return spec.default is MISSING and spec.default_factory is MISSING


def record_problem(record: dict[str, Any], token: str | None) -> str | None:
    """Why a record from a run's output is not to be used (in words of our own, none of the line's),
    or None when it carries the run's `token` (None: a run without one) and has the runtime's shape."""
    if token is not None:
        given = record.get("token")
        if not isinstance(given, str) or not hmac.compare_digest(given.encode(), token.encode()):
            return "it does not carry its run's token"
    kind = record.get("kind")
    shape = RECORD_TYPES.get(kind) if isinstance(kind, str) else None
    if shape is None:
        return "not a kind of record xover writes"
    for spec in fields(shape):
        if spec.name not in record:
            if _required(spec):
                return f"a record of kind {kind} without {spec.name}"
        elif not spec.metadata["check"](record[spec.name]):
            return f"a record of kind {kind} whose {spec.name} is not what the runtime writes"
    return None


def checked_record(record: dict[str, Any], token: str | None) -> MetricRecord | str:
    """The typed record a line of a run's output carries, or why it is not to be used (`record_problem`).
    Fields a later version may add are left out."""
    problem = record_problem(record, token)
    if problem is not None:
        return problem
    shape = RECORD_TYPES[record["kind"]]
    return shape(**{spec.name: record[spec.name] for spec in fields(shape) if spec.name in record})


# A rank whose script ended by itself (its end, or sys.exit(0)) says so on its stderr, with its iteration count:
# a peer that still expected it fails with a knock-on error ('Connection closed by peer'), and the failure's
# summary names the rank that left first (run/record.py), which has no error of its own to show.
RANK_LEFT = re.compile(r"^xover rank (\d+) ended by itself: exit 0 after (\d+) iterations$")


def rank_left_line(rank: int, iterations: int) -> str:
    """The line RANK_LEFT reads."""
    return f"xover rank {rank} ended by itself: exit 0 after {iterations} iterations"
