"""Ctrl-C or SIGTERM raises Interrupted in the main thread wherever it is (run/supervise.py): inside a store
write or a metric sink as well. It must reach the run's clean-up as Interrupted, which then ends the runs
as interrupted (or, inside a Slurm job, as Slurm ended them); nothing on the way may take it for a failure
of its own. Before: SQLAlchemy wrapped it into a StatementError when it landed as a cursor was made, and
a scancel or a Slurm time limit was recorded as a failed run (seen twice in one `make test`)."""

import pytest
from sqlalchemy import text
from sqlalchemy.engine.default import DefaultExecutionContext

from xover.errors import Interrupted, TimedOut
from xover.run.sinks import MetricSink, deliver
from xover.store.session import open_store


def test_an_interrupt_that_lands_in_a_store_write_stays_an_interrupt(tmp_path, monkeypatch):
    store = open_store(str(tmp_path / "x.db"))

    def signal_arrives(self):
        raise Interrupted()

    monkeypatch.setattr(DefaultExecutionContext, "create_cursor", signal_arrives)
    with pytest.raises(Interrupted), store.session() as session:
        session.execute(text("SELECT 1"))


class _Sink(MetricSink):
    name = "watcher"

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def opened(self, experiment_id: str) -> None:
        raise self.error


def test_an_interrupt_that_lands_in_a_metric_sink_is_not_taken_for_the_sinks_failure(capsys):
    with pytest.raises(Interrupted):
        deliver([_Sink(Interrupted())], lambda sink: sink.opened("e1"))
    # a sink's own failure is still said and left out, and the run goes on
    assert deliver([_Sink(RuntimeError("broken"))], lambda sink: sink.opened("e1")) == []
    assert "the watcher metric sink failed" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# Issue 58: an interrupt while a unit starts (turn servers, launchers: tens of seconds over ssh) is an
# interrupt, and whatever the unit started is stopped (end to end: tests/integration/test_interrupted_start.py)
# ---------------------------------------------------------------------------------------------

def test_a_start_cut_short_ends_its_runs_as_the_run_ended_not_as_a_failure():
    from xover.errors import TimedOut, XoverError
    from xover.run.schedule import stopped_as

    assert stopped_as(Interrupted()) == ("interrupted", None)  # before: ("failed", "could not start: Interrupted()")
    assert stopped_as(KeyboardInterrupt()) == ("interrupted", None)
    assert stopped_as(TimedOut()) == ("timeout", None)
    assert stopped_as(XoverError("node9 said no")) == ("failed", "node9 said no")
    assert stopped_as(RuntimeError("boom")) == ("failed", "could not start: RuntimeError('boom')")


class _Recorder:
    """What the scheduler tells the store, kept."""

    def __init__(self) -> None:
        self.closed: list[tuple[list[int], str, str | None]] = []

    def close_runs(self, run_ids, status, error=None):
        self.closed.append((list(run_ids), status, error))

    def record_turns(self, *args):
        pass


class _Started:
    """Something a unit's start started (a launcher): stopped once its unit stops."""

    def __init__(self) -> None:
        self.stopped = 0

    def running(self) -> bool:
        return not self.stopped

    def stop(self) -> None:
        self.stopped += 1


@pytest.mark.parametrize("cut_by, status", [(Interrupted, "interrupted"), (KeyboardInterrupt, "interrupted")])
def test_a_unit_whose_start_is_interrupted_is_stopped_once_and_recorded_as_interrupted(monkeypatch, tmp_path,
                                                                                        cut_by, status):
    from xover.run.schedule import RunContext, Scheduler, Unit

    recorder = _Recorder()
    scheduler = Scheduler(RunContext(recorder=recorder, experiment_id="e58", results_dir=tmp_path))
    unit, started = Unit(jobs=[], mode="crossover"), _Started()
    seen_running: list[bool] = []

    def start_then_interrupted(self, each):
        each.runs = [(7, tmp_path), (8, tmp_path)]
        each.launched[7] = started  # what an interrupt may follow at once
        seen_running.append(each in running)
        raise cut_by()

    running: list = []
    monkeypatch.setattr(Scheduler, "_start", start_then_interrupted)
    monkeypatch.setattr("xover.run.schedule.sweep", lambda *args, **kwargs: None)
    with pytest.raises(cut_by):
        scheduler._start_ready([unit], running, exclusive=False)
    assert seen_running == [True]  # in `running` while it starts: stopped with the rest whatever comes
    assert recorder.closed == [([7, 8], status, None)]  # before: failed, "could not start: Interrupted()"
    assert started.stopped >= 1 and running == []


def test_slurms_account_corrects_a_unit_interrupted_while_it_started_but_not_a_failed_one(tmp_path):
    """Why the status matters: the submitter records how the Slurm job ended over the rows its own xover
    left `interrupted` (scancel, a time limit), and leaves `failed` ones as they are: a start that an
    scancel cut short was recorded as a failure of its own, for good."""

    from conftest import recorded_runs

    from xover.run.external.slurm import JobState
    from xover.run.on_slurm import SlurmLauncher
    from xover.run.record import Recorder
    from xover.run.schedule import Unit, stopped_as
    from xover.store.models import Run

    status, error = stopped_as(Interrupted())
    store, _, [cut, failed] = recorded_runs(tmp_path, [
        {"name": "a", "mode": "crossover", "group_index": 0, "launcher_job_id": "41", "status": status, "error": error,
         "hosts": "localhost:2", "np": 2, "devices": "0,1"},
        {"name": "b", "mode": "crossover", "group_index": 0, "launcher_job_id": "41", "status": "failed",
         "error": "could not start: Interrupted()", "hosts": "localhost:2", "np": 2, "devices": "0,1"}])
    ended = JobState("41", "CANCELLED")
    Recorder(store, "e1").launcher_job_ended([Unit(jobs=[], mode="crossover", group=0)], "41",
                                             SlurmLauncher().ended_as(ended), "Slurm job 41 CANCELLED", "", False)
    with store.session() as session:
        assert session.get_one(Run, cut).status == "cancelled"
        assert session.get_one(Run, failed).status == "failed"


def test_the_units_a_failure_alone_leaves_unstarted_are_recorded_with_why(tmp_path, capsys):
    """A job that failed alone before any run of it trained: the scheduler starts none of its later units, and
    records each (its group, mode, policy, jobs and why) for the report to say; before, nothing was kept and the
    report showed fewer rows with no reason."""
    from types import SimpleNamespace

    from xover.run.schedule import RunContext, Scheduler, Unit

    class Recorder(_Recorder):
        def __init__(self) -> None:
            super().__init__()
            self.not_started: list[tuple] = []

        def record_not_started(self, *args):
            self.not_started.append(args)

    def job(name):
        return SimpleNamespace(name=name, device_set=set())

    recorder = Recorder()
    scheduler = Scheduler(RunContext(recorder=recorder, experiment_id="e1", results_dir=tmp_path))
    scheduler.doomed["bad"] = "failed alone (rank 0: FileNotFoundError: data.csv)"
    good, bad, copy = job("good"), job("bad"), job("bad#2")
    pending = [Unit([good], "sequential", 0), Unit([copy], "sequential", 0),
               Unit([good, bad], "concurrent", 0), Unit([good, bad], "crossover", 0, "work-conserving")]
    scheduler._skip_doomed(pending)
    assert [unit.jobs for unit in pending] == [[good]]
    why = "bad: failed alone (rank 0: FileNotFoundError: data.csv)"
    assert recorder.not_started == [(0, "sequential", None, ["bad#2"], why),
                                    (0, "concurrent", None, ["good", "bad"], why),
                                    (0, "crossover", "work-conserving", ["good", "bad"], why)]
    # the partner that ran fine alone and lost its shared runs is named (it was said of the refused job only)
    assert f"{why}; 3 later runs with it not started (among them good's runs beside it)" in capsys.readouterr().err


@pytest.mark.parametrize("cut_by, why", [(TimedOut, "the run's --timeout came first"),
                                         (Interrupted, "the run was stopped first")])
def test_the_units_a_stopped_run_never_started_are_recorded(monkeypatch, tmp_path, cut_by, why):
    """Ctrl-C or --timeout during a comparison's first unit: its later units (the crossover runs, the other job
    alone) were recorded nowhere, and the report and `report all` read as if only what ran had been asked (the
    probe's F4). Each is recorded as not started, the run stopped first; the report's line blames no job."""
    from types import SimpleNamespace

    from xover.results import NotStarted, not_started_lines
    from xover.run.schedule import RunContext, Scheduler, Unit

    class Recorder(_Recorder):
        def __init__(self) -> None:
            super().__init__()
            self.not_started: list[tuple] = []

        def record_not_started(self, *args, **kwargs):
            self.not_started.append((*args, kwargs))

    a, b = (SimpleNamespace(name=name, device_set={0}) for name in "ab")
    first, *later = [Unit([a], "sequential", 0), Unit([b], "sequential", 0),
                     Unit([a, b], "crossover", 0, "work-conserving")]
    recorder = Recorder()
    scheduler = Scheduler(RunContext(recorder=recorder, experiment_id="e1", results_dir=tmp_path))

    def started_then_cut(self, pending, running, exclusive):
        if first in pending:
            pending.remove(first)
            running.append(first)
            return
        raise cut_by()

    monkeypatch.setattr(Scheduler, "_start_ready", started_then_cut)
    monkeypatch.setattr(Scheduler, "_stop_all", lambda self, running, status, why=None: None)
    with pytest.raises(cut_by):
        scheduler.run([first, *later], exclusive=True)
    assert recorder.not_started == [(0, "sequential", None, ["b"], why, {"stopped_first": True}),
                                    (0, "crossover", "work-conserving", ["a", "b"], why, {"stopped_first": True})]
    said = not_started_lines([NotStarted(0, "crossover", "work-conserving", ["a", "b"], why, stopped_first=True)])
    assert said == [f"group 0: not started: crossover (work-conserving) - {why}"]


def test_an_interrupt_a_finalizer_swallowed_is_raised_again(capsys):
    """SIGTERM's Interrupted raised while the main thread ran a finalizer (SQLAlchemy's weakref callback, just after
    `xover simulate` opened its store): Python printed it and dropped it, and the command ran to its end, exit 0.
    Now the signal is sent again, and the second lands where the command sees it."""
    import signal
    import time

    from xover.run.supervise import interruptible

    class Finalized:
        def __del__(self):
            signal.raise_signal(signal.SIGTERM)  # its handler runs here, inside the finalizer

    began = time.monotonic()
    with pytest.raises(Interrupted), interruptible():
        Finalized()  # dropped at once
        time.sleep(5)  # the signal sent again lands here
    assert time.monotonic() - began < 2
    assert "Interrupted" not in capsys.readouterr().err  # no finalizer's traceback for a user to read
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL or callable(signal.getsignal(signal.SIGTERM))

    # the signal sent again lands in clean-up that must not be cut short: raised where the clean-up ends (a
    # replay's store writes; the first version of this let it go, 1 SIGTERM in 20 ended in exit 0)
    from xover.run.supervise import uninterrupted

    began = time.monotonic()
    with pytest.raises(Interrupted), interruptible():
        Finalized()
        with uninterrupted():
            time.sleep(0.5)
        time.sleep(5)
    assert time.monotonic() - began < 2


def test_a_hang_up_interrupts_as_sigterm_does_unless_xover_was_started_ignoring_it():
    """A probe (2026-12-06): a closed terminal or a dropped ssh session (SIGHUP) ended `xover run` with 129 and no
    word, its runs recorded as lost '(killed?)' rather than interrupted. Now it is Ctrl-C; under `nohup`, which
    starts xover with SIGHUP ignored, a hang-up is still nobody's wish to stop."""
    import signal

    from xover.run.supervise import interruptible

    before = signal.getsignal(signal.SIGHUP)
    try:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        with pytest.raises(Interrupted), interruptible():
            signal.raise_signal(signal.SIGHUP)
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_DFL  # given back
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as nohup starts it
        with interruptible():
            signal.raise_signal(signal.SIGHUP)
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, before)
