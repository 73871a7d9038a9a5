"""The workers' side of the metrics protocol (xover/records.py): `emit` writes one record, signed with the
run's token, on the rank's standard output as the launcher gave it."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import fields

from ..records import MARKER, MetricRecord
from ..settings import METRIC_TOKEN_VARIABLE


def _standard_output() -> int | None:
    """A descriptor of this process's standard output as it is now, before a training script runs; None
    where there is none (fd 1 closed)."""
    try:
        return os.dup(1)  # not inherited by what the process executes (os.dup's descriptors never are)
    except OSError:
        return None


# Records go to the rank's standard output as the launcher gave it, not to whatever `sys.stdout` is when
# they are written: a script that silences or redirects its output (`contextlib.redirect_stdout`, rich's
# live display, which folds each line it takes, or `os.dup2` over fd 1) lost every record before. Taken
# when the runtime is imported, which is before the script runs.
STANDARD_OUTPUT = _standard_output()


def emit(record: MetricRecord) -> None:
    """Write one record, signed with the run's token (set by the launcher), on this rank's standard output
    as the launcher gave it (STANDARD_OUTPUT), whatever the script did to `sys.stdout` or fd 1 since."""
    written = {"kind": record.KIND, **{spec.name: getattr(record, spec.name) for spec in fields(record)}}
    token = os.environ.get(METRIC_TOKEN_VARIABLE)  # the run's token, set by the launcher (run/schedule.py)
    if token:
        written["token"] = token
    line = MARKER + json.dumps(written, separators=(",", ":")) + "\n"
    if STANDARD_OUTPUT is None:
        sys.stdout.write(line)
        sys.stdout.flush()
        return
    data = memoryview(line.encode())
    while data:  # one write in all but rare cases (a signal part way through a long record)
        data = data[os.write(STANDARD_OUTPUT, data) :]
