"""The metrics protocol: one JSON object per line on rank 0's stdout, after a fixed marker.

The marker survives whatever a launcher puts in front of a relayed line (horovodrun's
`[1,0]<stdout>:`, torchrun's `[rank0]:`), so metrics cross hosts through the launcher's own output.
"""

from __future__ import annotations

import json
import sys
from typing import Any

MARKER = "XOVER-METRIC "

# kinds: start (job facts), iter (one iteration), eval (one evaluation), end (totals)


def emit(kind: str, **fields: Any) -> None:
    sys.stdout.write(MARKER + json.dumps({"kind": kind, **fields}, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def parse_metric_line(line: str) -> dict[str, Any] | None:
    """The metric carried by a line of output, or None for any other line."""
    at = line.find(MARKER)
    if at < 0:
        return None
    try:
        record = json.loads(line[at + len(MARKER):])
    except json.JSONDecodeError:
        return None
    return record if isinstance(record, dict) and "kind" in record else None
