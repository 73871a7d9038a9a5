"""A run whose ranks gave up crossover turns says so in its record and its report (issue 52, finding 2)."""

from __future__ import annotations

from conftest import recorded_runs

from xover.records import TurnsLostRecord, record_problem


def test_a_turns_lost_record_is_accepted_with_the_runs_token_only():
    record = {"kind": "turns-lost", "device": 0, "slot": 1, "why": "the turn server is gone", "wall_time": 1.0}
    assert record_problem({**record, "token": "t" * 32}, "t" * 32) is None
    assert record_problem({**record, "token": "u" * 32}, "t" * 32) is not None
    assert record_problem({"kind": "turns-lost", "why": "x", "token": "t" * 32}, "t" * 32) is not None  # no device


def test_the_record_and_the_report_of_a_run_whose_ranks_gave_up_turns_say_so(tmp_path, capsys):
    """Before: a worker that gave up its turns said so on stderr only; the run stayed recorded and
    reported as crossover, its figures taken for crossover's."""
    from xover.analysis import experiment_jobs
    from xover.report.data import gather_report
    from xover.report.html import report_html
    from xover.report.tables import print_failures
    from xover.store.models import Experiment, TurnEvent

    store, recorder, (run_a, run_b) = recorded_runs(tmp_path, [
        {"name": name, "mode": "crossover", "hosts": "localhost:2", "np": 2, "status": "running", "group_index": 0,
         "slot": slot} for slot, name in enumerate(("a", "b"))])
    recorder.apply([(run_a, TurnsLostRecord(device=1, slot=0, why="the turn server is gone", wall_time=5.0))])
    recorder.record_turns([run_a, run_b], 0, {"0": {"grants": 3}, "1": {"grants": 4}},
                          [{"kind": "unwritable", "device": 0, "slot": 1, "reason": "it read nothing for 5 s",
                            "wall_time": 6.0}])
    with store.session() as session:
        jobs = {job["name"]: job for job in experiment_jobs(session, "e1")}
        assert jobs["a"]["turns_lost"] == [{"device": 1, "why": "the turn server is gone", "wall_time": 5.0}]
        assert jobs["a"]["turn_stats"]["grants"] == 3  # the server's statistics kept beside it
        assert jobs["b"]["turns_lost"][0]["device"] == 0 and "dropped" in jobs["b"]["turns_lost"][0]["why"]
        kinds = sorted(event.kind for event in session.query(TurnEvent))
        assert kinds == ["turns-lost", "unwritable"]
        report = gather_report(session, session.get(Experiment, "e1"))
    print_failures(list(jobs.values()))
    shown = capsys.readouterr().out
    assert "a (crossover) gave up crossover turns on device 1" in shown and "b (crossover) gave up" in shown
    assert "gave up crossover turns" in report_html(report, {})


def test_the_html_heads_a_job_that_ended_with_an_error_by_how_it_ended(tmp_path):
    """Every job with an error was headed 'failed' on the HTML page, a timeout too."""
    from xover.report.data import gather_report
    from xover.report.html import report_html
    from xover.store.models import Experiment

    store, _, _ = recorded_runs(tmp_path, [
        {"name": "a", "mode": "crossover", "hosts": "localhost:2", "np": 2, "status": "timeout", "group_index": 0,
         "slot": 0, "error": "timed out after 60 s"},
        {"name": "b", "mode": "crossover", "hosts": "localhost:2", "np": 2, "status": "failed", "group_index": 0,
         "slot": 1, "error": "rank 0: ValueError: bad"}])
    with store.session() as session:
        page = report_html(gather_report(session, session.get(Experiment, "e1")), {})
    assert "<h2>a (crossover): timeout</h2><pre>timed out after 60 s</pre>" in page
    assert "<h2>b (crossover): failed</h2>" in page and ") failed</h2>" not in page
