"""streams.summary_of_kept: a summary stdout cannot take, once the work is kept, is one warning and the command
goes on to its own exit (tests/integration/test_summary_not_shown.py runs the commands)."""

import errno
import io
import os
import sys

import pytest

from xover import streams
from xover.streams import OutputFailed, summary_of_kept


class _Full(io.StringIO):
    def write(self, text):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.fixture
def failing_stdout(monkeypatch):
    """A stdout whose every write fails (a full device), set by the test itself: pytest sets its own capture's
    streams again between a fixture and the test; stderr as a string."""
    monkeypatch.setattr(streams, "to_null", lambda descriptor: None)  # pytest's own descriptor 1 stays

    def install():
        monkeypatch.setattr(sys, "stdout", streams._Guarded(_Full(), "stdout"))
        monkeypatch.setattr(sys, "stderr", io.StringIO())
        return sys.stderr

    return install


def test_a_summary_that_cannot_be_shown_is_one_warning_and_the_rest_of_stdout_goes_nowhere(failing_stdout):
    stderr = failing_stdout()
    with summary_of_kept("the plan was written whole to p.json and stored"):
        print("the table")
        raise AssertionError("not reached: the print failed")
    print("what the command prints after it")  # dropped, not a second failure
    assert stderr.getvalue() == (
        "warning: the summary was not shown (cannot write to stdout: No space left on device); "
        "the plan was written whole to p.json and stored\n"
    )


def test_output_that_is_the_result_still_fails_the_command(failing_stdout):
    stderr = failing_stdout()
    with pytest.raises(OutputFailed), summary_of_kept("kept", is_result=True):
        print("the plan as JSON")
    assert stderr.getvalue() == ""


def test_a_reader_that_left_is_still_the_quiet_141(failing_stdout, monkeypatch):
    monkeypatch.setattr(_Full, "write", lambda self, text: (_ for _ in ()).throw(OSError(errno.EPIPE, "Broken pipe")))
    stderr = failing_stdout()
    with pytest.raises(OutputFailed), summary_of_kept("kept"):
        print("the table")
    assert stderr.getvalue() == ""
