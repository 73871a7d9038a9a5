"""The metrics protocol: one JSON object per line on rank 0's stdout, after a fixed marker.

The marker survives whatever a launcher puts in front of a relayed line (horovodrun's
`[1,0]<stdout>:`, torchrun's `[rank0]:` / `[default0]:`), so metrics cross hosts through the
launcher's own output. A launcher can also put its prefix *inside* a line: torchrun tails each rank's
log file and relays what it has read, so a line read while the rank was still writing it (a write
that crosses a page of the file) arrives cut in two, the second part behind a prefix of its own.
Such a record is mended by taking the launchers' prefixes out of it (seen once in about fifty
torchrun runs, as a lost iteration).

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
import os
import re
import sys
from typing import Any

from ..settings import METRIC_TOKEN_VARIABLE

MARKER = "XOVER-METRIC "
# what horovodrun and torchrun put in front of each relayed line (never inside a JSON record of ours)
RELAY_PREFIX = re.compile(r"\[\d+,\d+\]<std(?:out|err)>:|\[(?:rank|default)\d+\]:")

MAX_TRIED = 8  # markers followed by `{` tried per line, from its end (parse_metric_line)
# kinds: start (job facts), iter (one iteration), eval (one evaluation), end (totals), turns-lost (a rank
# that gave up waiting for crossover turns: the rest of its run went without them; any rank writes it)


def emit(kind: str, **fields: Any) -> None:
    record = {"kind": kind, **fields}
    token = os.environ.get(METRIC_TOKEN_VARIABLE)  # the run's token, set by the launcher (run/schedule.py)
    if token:
        record["token"] = token
    sys.stdout.write(MARKER + json.dumps(record, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def parse_metric_line(line: str) -> dict[str, Any] | None:
    """The metric carried by a line of output, or None for any other line.

    The last marker is tried first: another writer to the same stream (a data loader's worker, a
    thread, anything that prints without a newline) can leave text that holds a marker in front of a
    record of ours, which then follows that text on the same line.

    Only a marker followed by `{` can start a record, and only the last MAX_TRIED of those are tried:
    each try parses the rest of the line, so trying every marker of a line made of markers (a 64 KiB
    line holds about 5000) cost time quadratic in the line and stalled the relay thread."""
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


def _record_at(payload: str) -> dict[str, Any] | None:
    try:
        record = json.loads(payload)
    except json.JSONDecodeError:
        try:
            record = json.loads(RELAY_PREFIX.sub("", payload))  # a line the launcher relayed in two parts
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


def _number(value: Any) -> bool:  # a loss or an accuracy may be NaN or infinite: a diverged job says so
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _text(size: int):
    return lambda value: isinstance(value, str) and len(value) <= size


def _flag(value: Any) -> bool:
    return isinstance(value, bool)


def _held(value: Any) -> bool:
    return isinstance(value, list) and len(value) <= 10000 and all(
        isinstance(pair, list) and len(pair) == 2 and all(_finite(t) for t in pair) for pair in value)


def _optional(check):
    return lambda value: value is None or check(value)


# kind -> field -> (required, check); other fields are ignored (later versions may add some)
SHAPES: dict[str, dict[str, tuple[bool, Any]]] = {
    "start": {"job": (False, _optional(_text(200))), "iterations": (False, _optional(_int)),
              "world_size": (False, _optional(_int)), "engine": (False, _optional(_text(20))),
              "device": (False, _optional(_text(40))), "backend": (False, _optional(_text(20))),
              "deterministic": (False, _optional(_flag)), "devices_per_gpu": (False, _optional(_int)),
              "gpu_sharing": (False, _optional(_text(20))), "parameters": (False, _optional(_whole)),
              "gradient_bytes": (False, _optional(_int)), "wall_time": (False, _optional(_finite)),
              "link_priority": (False, _optional(_int)), "link_sockets": (False, _optional(_whole)),
              "comm_threads": (False, _optional(_text(10))), "checkpoints": (False, _optional(_int))},
    "iter": {"step": (True, lambda v: _int(v) and v >= 0), **{name: (True, _finite) for name in (
                 "time_s", "wall_time", "iteration_s", "data_s", "compute_s", "communication_s", "wait_s")},
             "samples": (True, _int), "loss": (True, _optional(_number)), "yields": (False, _optional(_int)),
             "link_s": (False, _optional(_finite)), "comm_cpu_s": (False, _optional(_finite)),
             "held": (False, _optional(_held))},
    "eval": {"step": (True, _int), "metric": (True, _text(60)), "value": (True, _number)},
    "turns-lost": {"device": (True, _int), "why": (True, _text(200)), "slot": (False, _optional(_int)),
                   "wall_time": (False, _optional(_finite))},
    "end": {"iterations": (False, _optional(_whole)), "wall_s": (False, _optional(_finite)),
            "peak_memory_gb": (False, _optional(_finite)), "gradient_bytes": (False, _optional(_int)),
            "checkpoints": (False, _optional(_int))},
}


def record_problem(record: dict[str, Any], token: str | None) -> str | None:
    """Why a record from a run's output is not to be used (in words of our own, none of the line's),
    or None when it carries the run's `token` (None: a run without one) and has the runtime's shape."""
    if token is not None:
        given = record.get("token")
        if not isinstance(given, str) or not hmac.compare_digest(given.encode(), token.encode()):
            return "it does not carry its run's token"
    kind = record.get("kind")
    shape = SHAPES.get(kind) if isinstance(kind, str) else None
    if shape is None:
        return "not a kind of record xover writes"
    for name, (required, check) in shape.items():
        if name not in record:
            if required:
                return f"a record of kind {kind} without {name}"
        elif not check(record[name]):
            return f"a record of kind {kind} whose {name} is not what the runtime writes"
    return None
