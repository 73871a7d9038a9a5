"""The metrics protocol (runtime/metrics.py): records found in a launcher's relayed output."""

import json

import pytest

from xover.runtime.metrics import MARKER, parse_metric_line

RECORD = {"kind": "iter", "step": 56, "wait_s": 0.0002517530001568957, "loss": None,
          "held": [[1795404409.75755, 1795404409.757988]]}


@pytest.mark.parametrize("prefix", ["", "[1,0]<stdout>:", "[rank0]:", "[default0]:"])
def test_a_record_behind_any_launchers_prefix(prefix):
    assert parse_metric_line(prefix + MARKER + json.dumps(RECORD)) == RECORD


def test_a_record_torchrun_relayed_in_two_parts_is_mended():
    """Seen in a torchrun run: the rank's line was read while being written, and the rest relayed
    behind a prefix of its own, inside the same line (the iteration was lost)."""
    text = json.dumps(RECORD)
    cut = text.index("1568957")
    assert parse_metric_line("[default0]:" + MARKER + text[:cut] + "[default0]:" + text[cut:]) == RECORD


@pytest.mark.parametrize("line", ["step 27 loss 0.08", MARKER + "{not json", MARKER + '{"no_kind": 1}', MARKER + "[1]"])
def test_other_lines_are_not_records(line):
    assert parse_metric_line(line) is None
