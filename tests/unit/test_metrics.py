"""The metrics protocol (xover/records.py): records found in a launcher's relayed output."""

import json
import os

import pytest

from xover.records import MARKER, RelayedLines, parse_metric_line

RECORD = {"kind": "iter", "step": 56, "wait_s": 0.0002517530001568957, "loss": None,
          "held": [[1795404409.75755, 1795404409.757988]]}


@pytest.mark.parametrize("prefix", ["", "[1,0]<stdout>:", "[0]<stdout>:", "[rank0]:", "[default0]:"])
def test_a_record_behind_any_launchers_prefix(prefix):
    assert parse_metric_line(prefix + MARKER + json.dumps(RECORD)) == RECORD


@pytest.mark.parametrize("prefix", ["[default0]:", "[rank1]:", "[1,0]<stdout>:", "[0]<stdout>:"])
def test_a_record_relayed_in_two_parts_is_mended_wherever_it_was_cut(prefix):
    """Seen in torchrun runs: the rank's line was read while being written, and the rest relayed behind a
    prefix of its own, inside the same line (an iteration was lost). Once cut inside a number; once right
    after `{"`, which left valid JSON with a key "[default0]:kind" and no "kind" (CI, 2026-11-30: a DDP
    job counted 29 of its 30 steps). Every cut, the marker's included."""
    line = MARKER + json.dumps(RECORD)
    for cut in range(1, len(line)):
        assert parse_metric_line(prefix + line[:cut] + prefix + line[cut:]) == RECORD, line[:cut]


def _records_of(relayed, *lines):
    ended = [part for line in lines for part in relayed.feed(line)] + relayed.rest()
    return ended, [record for _, text in ended if (record := parse_metric_line(text)) is not None]


@pytest.mark.parametrize("ours, theirs", [("[default0]:", "[default1]:"), ("[1,0]<stdout>:", "[1,1]<stdout>:"),
                                          ("[0]<stdout>:", "[1]<stdout>:"), ("[rank0]:", "[rank1]:")])
def test_a_record_relayed_in_two_parts_with_another_ranks_line_between_them_is_mended(ours, theirs):
    """The launcher read the rank's line while it was being written, and another rank's line came before
    the rest: the two parts are on two lines of the output. Every cut; the other rank's line is kept whole."""
    line = MARKER + json.dumps(RECORD)
    for cut in range(1, len(line)):
        ended, records = _records_of(RelayedLines(65536), ours + line[:cut] + theirs + "epoch 3 done",
                                     ours + line[cut:])
        assert records == [RECORD], line[:cut]
        assert (theirs, "epoch 3 done") in ended, ended


def test_a_launchers_own_lines_and_unfinished_ones_are_given_out_as_they_are():
    relayed = RelayedLines(16)
    assert relayed.feed("INFO starting 2 ranks") == [("", "INFO starting 2 ranks")]  # no prefix: the launcher's
    assert relayed.feed("[default0]:abc[default1]:x") == [("[default1]:", "x")]
    assert relayed.feed("[default0]:" + "d" * 20 + "[default1]:y") == [
        ("[default0]:", "abc" + "d" * 20), ("[default1]:", "y")]  # past max_chars: out as it is
    assert relayed.feed("[default1]:half") == [("[default1]:", "half")]
    assert relayed.feed("[default0]:never ended[default1]:z") == [("[default1]:", "z")]
    assert relayed.rest() == [("[default0]:", "never ended")] and relayed.rest() == []


def test_prefixes_a_script_prints_itself_cannot_grow_the_relay():
    """A script printing a hundred thousand different prefix-like words on one line: at most `max_unfinished` wait,
    the oldest given out first, and the record after them is read."""
    relayed = RelayedLines(65536, max_unfinished=8)
    line = "".join(f"[rank{n}]:x" for n in range(100_000)) + "[default0]:" + MARKER + json.dumps(RECORD)
    ended, records = _records_of(relayed, line)
    assert records == [RECORD] and len(relayed.unfinished) == 0  # rest() gave out the last 8
    assert ended[0] == ("[rank0]:", "x") and len(ended) == 100_001


def test_a_record_behind_another_writers_unfinished_look_alike_is_found():
    """Seen in the fault run of 2026-11-26: a long line that starts like ours, written into a rank's
    output by another process, was cut by the pipe, and the rank's own record landed inside it (one
    iteration lost). A data loader's worker printing without a newline does the same."""
    unfinished = MARKER + "x" * 5000
    assert parse_metric_line(unfinished + MARKER + json.dumps(RECORD)) == RECORD


@pytest.mark.parametrize("line", ["step 27 loss 0.08", MARKER + "{not json", MARKER + '{"no_kind": 1}', MARKER + "[1]"])
def test_other_lines_are_not_records(line):
    assert parse_metric_line(line) is None


# ---------------------------------------------------------------------------------------------
# Only the run's own records count: its token, the runtime's shape (a script's output is not trusted)
# ---------------------------------------------------------------------------------------------

TOKEN = "5f" * 16
ITER = {"kind": "iter", "step": 3, "time_s": 1.5, "wall_time": 1795404409.7, "iteration_s": 0.5, "data_s": 0.0,
        "compute_s": 0.4, "communication_s": 0.1, "wait_s": 0, "samples": 64, "loss": 2.25, "yields": 0,
        "link_s": None, "comm_cpu_s": 0.01, "held": [[1795404409.75755, 1795404409.757988]], "evaluation_s": None}


def _emitted(capsys, monkeypatch, token, kind, **fields):
    """What `emit` writes on the standard output it took at its start (here a pipe), parsed."""
    from xover.records import RECORD_TYPES
    from xover.runtime import metrics
    from xover.runtime.metrics import emit

    if token is None:
        monkeypatch.delenv("XOVER_METRIC_TOKEN", raising=False)
    else:
        monkeypatch.setenv("XOVER_METRIC_TOKEN", token)
    read_end, write_end = os.pipe()
    monkeypatch.setattr(metrics, "STANDARD_OUTPUT", write_end)
    try:
        emit(RECORD_TYPES[kind](**fields))
        written = os.read(read_end, 1 << 20).decode()
    finally:
        os.close(read_end)
        os.close(write_end)
    assert capsys.readouterr().out == ""  # nothing through sys.stdout, whatever it is
    return parse_metric_line(written.strip())


def test_the_runtime_signs_its_records_with_the_runs_token(capsys, monkeypatch):
    from xover.records import record_problem

    fields = {k: v for k, v in ITER.items() if k != "kind"}
    record = _emitted(capsys, monkeypatch, TOKEN, "iter", **fields)
    assert record == {**ITER, "token": TOKEN} and record_problem(record, TOKEN) is None
    diverged = _emitted(capsys, monkeypatch, TOKEN, "iter", **{**fields, "loss": float("nan")})
    assert record_problem(diverged, TOKEN) is None  # a diverged job's loss says what happened
    for kind, extra in (("start", {"job": "a", "iterations": None, "world_size": 2, "engine": "torch",
                                   "device": "cpu", "backend": "gloo", "deterministic": False, "gradient_bytes": 1024,
                                   "parameters": 5 * 10**9, "wall_time": 1.0, "link_priority": None,
                                   "link_sockets": 0, "comm_threads": "batch", "checkpoints": 7}),
                        ("eval", {"step": 10, "metric": "accuracy", "value": 0.5}),
                        ("end", {"iterations": 10, "wall_s": 3.5, "peak_memory_gb": 0.25})):
        assert record_problem(_emitted(capsys, monkeypatch, TOKEN, kind, **extra), TOKEN) is None, kind
    assert "token" not in _emitted(capsys, monkeypatch, None, "end", iterations=1)


def _without(name):
    return {k: v for k, v in ITER.items() if k != name}


@pytest.mark.parametrize("record, problem", [
    ({**ITER}, "token"),  # a script's own print of a record: no token
    ({**ITER, "token": "0" * 32}, "token"),
    ({**ITER, "token": "é" * 32}, "token"),
    ({**ITER, "token": 5}, "token"),
    ({"kind": "_exit", "code": 0, "token": TOKEN}, "not a kind"),  # the launcher's own record of an exit
    ({"kind": "reboot", "token": TOKEN}, "not a kind"),
    ({"kind": ["iter"], "token": TOKEN}, "not a kind"),
    ({**_without("time_s"), "token": TOKEN}, "without time_s"),
    ({**_without("loss"), "token": TOKEN}, "without loss"),
    ({**ITER, "step": "3", "token": TOKEN}, "step"),
    ({**ITER, "step": -1, "token": TOKEN}, "step"),
    ({**ITER, "step": True, "token": TOKEN}, "step"),
    ({**ITER, "step": 2**40, "token": TOKEN}, "step"),  # past the store's integer column
    ({**ITER, "time_s": float("inf"), "token": TOKEN}, "time_s"),
    ({**ITER, "wait_s": float("nan"), "token": TOKEN}, "wait_s"),
    ({**ITER, "samples": 1.5, "token": TOKEN}, "samples"),
    ({**ITER, "loss": "low", "token": TOKEN}, "loss"),
    ({**ITER, "held": [[1, 2, 3]], "token": TOKEN}, "held"),
    ({**ITER, "held": [["a", 2]], "token": TOKEN}, "held"),
    ({**ITER, "evaluation_s": -0.5, "token": TOKEN}, "evaluation_s"),  # a duration
    ({**ITER, "evaluation_s": float("inf"), "token": TOKEN}, "evaluation_s"),
    ({"kind": "eval", "step": 1, "metric": "accuracy", "token": TOKEN}, "without value"),
    ({"kind": "eval", "step": 1, "metric": "x" * 61, "value": 0.5, "token": TOKEN}, "metric"),
    ({"kind": "start", "device": "cpu" * 20, "token": TOKEN}, "device"),
    ({"kind": "start", "deterministic": "yes", "token": TOKEN}, "deterministic"),
    ({"kind": "end", "peak_memory_gb": float("nan"), "token": TOKEN}, "peak_memory_gb"),
    ({"kind": "end", "iterations": "all", "token": TOKEN}, "iterations"),
])
def test_a_record_not_of_the_run_or_not_of_the_runtimes_shape_is_refused(record, problem):
    from xover.records import record_problem

    found = record_problem(record, TOKEN)
    assert found is not None and problem in found, found
    if problem != "token":
        assert record_problem({k: v for k, v in record.items() if k != "token"}, None) == found


def test_a_line_made_of_markers_costs_a_bounded_number_of_parses(monkeypatch):
    """Issue 52, finding 13. Before: every marker of a line was tried, each try parsing the rest of the
    line: a 64 KiB line of markers (about 5000) took time quadratic in its length in the relay thread."""
    from xover import records as metrics

    tries = []
    real = metrics._record_at
    monkeypatch.setattr(metrics, "_record_at", lambda payload: tries.append(len(payload)) or real(payload))
    for filler in (metrics.MARKER, metrics.MARKER + "{", metrics.MARKER + '{"kind":[1,'):
        tries.clear()
        line = filler * (65536 // len(filler))
        assert metrics.parse_metric_line(line) is None
        assert len(tries) <= 8, (filler, len(tries))  # metrics.MAX_TRIED
    # a record of ours behind such text is still read, as before
    record = metrics.parse_metric_line(metrics.MARKER * 5000 + metrics.MARKER + '{"kind":"iter","step":1}')
    assert record == {"kind": "iter", "step": 1}
