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


def test_a_turn_taken_back_at_its_lease_is_told_under_the_table_and_in_the_html(tmp_path, capsys):
    """Before: a lease revocation went to turn_events and a count in turn_stats, and nothing a user reads said
    that a job had held its turn for a minute, nor that a ring of holders (a collective inside the turn) did."""
    from xover.analysis import experiment_jobs
    from xover.report.data import gather_report
    from xover.report.html import report_html
    from xover.report.tables import print_failures
    from xover.store.models import Experiment

    store, recorder, (run_a, run_b, run_c) = recorded_runs(tmp_path, [
        {"name": name, "mode": "crossover", "hosts": "localhost:2", "np": 2, "status": "finished", "group_index": 0,
         "slot": slot} for slot, name in enumerate(("a", "b", "c"))])
    recorder.record_turns([run_a, run_b, run_c], 0, {"0": {"revoked": 1}, "1": {"revoked": 2}, "2": {}}, [
        {"kind": "lease-revoked", "device": 0, "slot": 0, "held_s": 30.004, "in_a_ring": True, "wall_time": 5.0,
         "host": "localhost"},
        {"kind": "lease-revoked", "device": 1, "slot": 1, "held_s": 600.2, "in_a_ring": False, "wall_time": 6.0},
        {"kind": "lease-revoked", "device": 0, "slot": 1, "held_s": 612.0, "wall_time": 7.0}])
    with store.session() as session:
        jobs = {job["name"]: job for job in experiment_jobs(session, "e1")}
        assert jobs["a"]["turn_stats"]["revoked"] == 1  # the server's count kept beside the notes
        assert [note["device"] for note in jobs["b"]["turn_stats"]["taken_back"]] == [1, 0]
        report = gather_report(session, session.get(Experiment, "e1"))
    print_failures(list(jobs.values()))
    shown = " ".join(capsys.readouterr().out.split())
    assert ("a (crossover) held its turn past its lease on device 0 (once, the longest 30.0 s), and the turn was "
            "taken back so that its partners could go on: its ranks held one device while waiting for another that a "
            "partner held, and it did not give the turn up when asked") in shown
    assert "b (crossover) held its turn past its lease on device 0, 1 (2 times, the longest 612.0 s)" in shown
    assert "waiting for another" not in shown.split("b (crossover)")[1]  # no ring there: a hang
    assert "c (crossover)" not in shown
    page = report_html(report, {})
    assert "<h2>a (crossover): a turn taken back</h2>" in page and "b (crossover): a turn taken back" in page
