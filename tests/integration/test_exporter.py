"""The Prometheus exporter (xover/run/exporter.py) fed records as a run's scheduler feeds its sinks, read
back over its real HTTP server (prometheus_client's) and parsed with prometheus_client's own parser."""

import socket

import pytest
from scraped import free_port, get, scrape, value

from xover.errors import XoverError
from xover.records import EndRecord, IterationRecord, StartRecord, TurnsLostRecord
from xover.run.exporter import GroupFacts, JobFacts, PrometheusSink, RunFacts
from xover.run.sinks import GroupLabels, JobLabels, deliver


def iteration(step, held=None, wait_s=0.0, wall_time=100.0):
    return IterationRecord(step=step, time_s=step * 0.1, wall_time=wall_time + step * 0.1, iteration_s=0.1,
                           data_s=0.01, compute_s=0.05, communication_s=0.02, wait_s=wait_s, samples=32,
                           loss=1.0 / (step + 1), held=held)


A = JobLabels(1, "e1", "mlp-a", "crossover", 0, "work-conserving", "localhost:2")
B = JobLabels(2, "e1", "mlp-b", "crossover", 0, "work-conserving", "localhost:2")
FACTS = RunFacts(jobs={"mlp-a": JobFacts(solo_iteration_s=0.05), "mlp-b": JobFacts()},
                 groups=(GroupFacts(0, "crossover", 1.3),))


@pytest.fixture
def sink():
    exporter = PrometheusSink(free_port(), FACTS)
    yield exporter
    exporter.stop()


def test_job_and_group_series_from_the_records(sink):
    sink.opened("e1")
    sink.received([(A, StartRecord(job="mlp-a", iterations=3)), (B, StartRecord(job="mlp-b", iterations=3))])
    sink.received([(A, iteration(0, held=[[0.0, 1.0]], wait_s=0.002)), (A, iteration(1, held=[[2.0, 3.0]]))])
    sink.received([(B, iteration(0, held=[[1.0, 2.0], [3.0, 4.0]], wait_s=0.3))])
    samples = scrape(sink.port)
    job_a = {"experiment": "e1", "group": "0", "job": "mlp-a", "mode": "crossover", "policy": "work-conserving",
             "host": "localhost:2"}
    assert value(samples, "xover_job_iterations_total", **job_a) == 2
    assert value(samples, "xover_job_samples_total", **job_a) == 64
    assert value(samples, "xover_job_iteration_seconds_count", **job_a) == 2
    assert value(samples, "xover_job_compute_seconds_total", **job_a) == pytest.approx(0.1)
    assert value(samples, "xover_job_exposed_communication_seconds_total", **job_a) == pytest.approx(0.04)
    assert value(samples, "xover_job_turn_wait_seconds_bucket", le="0.0025", **job_a) == 2
    assert value(samples, "xover_job_turn_wait_seconds_bucket", le="0.25", job="mlp-b") == 0
    assert value(samples, "xover_job_samples_per_second", **job_a) == pytest.approx(320)  # 32 samples in 0.1 s
    assert value(samples, "xover_job_alone_iteration_seconds", **job_a) == 0.05
    assert value(samples, "xover_job_slowdown", **job_a) == pytest.approx(2.0)  # 0.1 s against 0.05 s alone
    assert not [name for name, labels in samples if name == "xover_job_slowdown" and ("job", "mlp-b") in labels]
    assert value(samples, "xover_job_running", **job_a) == 1
    assert value(samples, "xover_job_loss", **job_a) == 0.5
    # the devices' turns are the turn servers' own (tests/integration/test_turn_metrics.py)
    assert not [name for name, _ in samples if name.startswith("xover_device_")]
    assert value(samples, "xover_group_planned_sharing", experiment="e1", group="0", sharing="crossover") == 1
    assert value(samples, "xover_group_predicted_gain", experiment="e1", group="0") == 1.3

    sink.received([(A, EndRecord(iterations=2))])
    sink.job_ended(A, "finished")
    samples = scrape(sink.port)
    assert value(samples, "xover_job_running", **job_a) == 0


def test_an_adaptive_groups_way_now_its_measurements_and_decisions(sink):
    """The scheduler hands the sink each segment of an adaptive group's timeline as it opens and closes
    (run/adaptive.py): the way it runs in now is 1, the other 0; each way's last measured aggregate; decisions."""
    sink.opened("e1")
    group = GroupLabels("e1", 0, ("mlp-a", "mlp-b"), "adaptive")

    def segment(seq, kind, way, ended=None, aggregate=None, decision=None):
        return {"seq": seq, "kind": kind, "way": way, "ended": ended, "aggregate": aggregate, "decision": decision}

    sink.adaptive_segment(group, segment(0, "probe", "concurrent"))
    sink.adaptive_segment(group, segment(0, "probe", "concurrent", ended=2.0, aggregate=1.31))
    sink.adaptive_segment(group, segment(1, "probe", "crossover"))
    samples = scrape(sink.port)
    assert value(samples, "xover_group_sharing_way", experiment="e1", group="0", way="crossover") == 1
    assert value(samples, "xover_group_sharing_way", experiment="e1", group="0", way="concurrent") == 0
    assert value(samples, "xover_group_adaptive_aggregate", experiment="e1", group="0", way="concurrent") == 1.31
    sink.adaptive_segment(group, segment(1, "probe", "crossover", ended=4.0, aggregate=1.18))
    decision = {"ways": {"crossover": 1.18, "concurrent": 1.31}}
    sink.adaptive_segment(group, segment(2, "settled", "concurrent", decision=decision))
    sink.adaptive_segment(group, segment(2, "settled", "concurrent", decision=decision))  # decided, written again
    samples = scrape(sink.port)
    assert value(samples, "xover_group_sharing_way", experiment="e1", group="0", way="concurrent") == 1
    assert value(samples, "xover_group_sharing_way", experiment="e1", group="0", way="crossover") == 0
    assert value(samples, "xover_group_adaptive_aggregate", experiment="e1", group="0", way="crossover") == 1.18
    assert value(samples, "xover_group_adaptive_decisions_total", experiment="e1", group="0") == 1


def test_a_job_that_lost_its_turns_is_counted(sink):
    sink.opened("e1")
    sink.received([(A, StartRecord()), (B, StartRecord())])
    sink.received([(B, TurnsLostRecord(device=0, why="timed out"))])
    samples = scrape(sink.port)
    assert value(samples, "xover_job_turns_lost_total", job="mlp-b") == 1


def test_a_port_in_use_is_one_line_before_anything_starts():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(XoverError) as refused:
            PrometheusSink(port)
    assert str(refused.value) == (f"--metrics-port {port}: the port is in use on localhost (IPv4 or IPv6; choose "
                                  "another, or stop what listens on it)")


def test_an_exporter_that_fails_is_left_out_and_stops_serving(sink, capsys):
    sink.opened("e1")
    sink.metrics = None  # whatever goes wrong inside it
    kept = deliver([sink], lambda each: each.received([(A, iteration(0))]))
    assert kept == []
    assert "the prometheus metric sink failed" in capsys.readouterr().err
    with pytest.raises(OSError):
        get(sink.port)


def test_xover_run_with_a_port_in_use_exits_2_with_one_line_and_records_nothing(isolated_results):
    from sqlalchemy import create_engine, inspect, text
    from typer.testing import CliRunner

    from xover.cli import app

    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(app, ["run", "--group", "mlp-digits", "resnet-digits", "--mode", "crossover",
                                          "--iterations", "5", "--metrics-port", str(port)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and f"--metrics-port {port}: the port is in use" in lines[0], result.output
    store = isolated_results / "xover.db"
    if store.exists():  # nothing was recorded: no experiment, no run
        engine = create_engine(f"sqlite:///{store}")
        with engine.connect() as connection:
            if inspect(connection).has_table("experiments"):
                assert connection.execute(text("select count(*) from experiments")).scalar() == 0
        engine.dispose()


def test_xover_metrics_port_setting_out_of_range_exits_2(isolated_results, monkeypatch):
    from typer.testing import CliRunner

    from xover.cli import app

    monkeypatch.setenv("XOVER_METRICS_PORT", "70000")
    result = CliRunner().invoke(app, ["run", "--group", "mlp-digits", "resnet-digits", "--mode", "crossover"])
    assert result.exit_code == 2 and "XOVER_METRICS_PORT='70000'" in result.output, result.output
