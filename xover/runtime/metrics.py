"""The metrics protocol: one JSON object per line on rank 0's stdout, after a fixed marker.

The marker survives whatever a launcher puts in front of a relayed line (horovodrun's
`[1,0]<stdout>:`, torchrun's `[rank0]:` / `[default0]:`), so metrics cross hosts through the
launcher's own output. A launcher can also put its prefix *inside* a line: torchrun tails each rank's
log file and relays what it has read, so a line read while the rank was still writing it (a write
that crosses a page of the file) arrives cut in two, the second part behind a prefix of its own.
Such a record is mended by taking the launchers' prefixes out of it (seen once in about fifty
torchrun runs, as a lost iteration).
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

MARKER = "XOVER-METRIC "
# what horovodrun and torchrun put in front of each relayed line (never inside a JSON record of ours)
RELAY_PREFIX = re.compile(r"\[\d+,\d+\]<std(?:out|err)>:|\[(?:rank|default)\d+\]:")

# kinds: start (job facts), iter (one iteration), eval (one evaluation), end (totals)


def emit(kind: str, **fields: Any) -> None:
    sys.stdout.write(MARKER + json.dumps({"kind": kind, **fields}, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def parse_metric_line(line: str) -> dict[str, Any] | None:
    """The metric carried by a line of output, or None for any other line."""
    at = line.find(MARKER)
    if at < 0:
        return None
    payload = line[at + len(MARKER):]
    try:
        record = json.loads(payload)
    except json.JSONDecodeError:
        try:
            record = json.loads(RELAY_PREFIX.sub("", payload))  # a line the launcher relayed in two parts
        except json.JSONDecodeError:
            return None
    return record if isinstance(record, dict) and "kind" in record else None
