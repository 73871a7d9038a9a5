"""The Prometheus fixture (tests/fixtures_services.py) with the real parts: Debian's `prometheus` scrapes a
`prometheus_client` HTTP server started here, and the series are read back through Prometheus' HTTP API."""

import subprocess

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from fixtures_services import prometheus  # noqa: F401  (a fixture)


@pytest.fixture
def exporter():
    """A prometheus_client HTTP server on a free loopback port, with a registry of its own."""
    registry = CollectorRegistry()
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        yield registry, f"127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_prometheus_scrapes_a_real_exporter_and_answers_queries(prometheus, exporter):  # noqa: F811
    registry, target = exporter
    handoffs = Counter("xover_fixture_handoffs", "turn handoffs", ["host", "device"], registry=registry)
    holder = Gauge("xover_fixture_turn_holder", "the job holding the turn (1)", ["device", "job"], registry=registry)
    waits = Histogram("xover_fixture_turn_wait_seconds", "turn waits", ["job"], buckets=(0.001, 0.01, 0.1),
                      registry=registry)
    handoffs.labels(host="localhost", device="0").inc(3)
    holder.labels(device="0", job="mlp-balanced").set(1)
    for seconds in (0.0005, 0.005, 0.05):
        waits.labels(job="mlp-balanced").observe(seconds)

    server = prometheus([target], job="fixture")
    [up] = server.wait_for('up{job="fixture"} == 1')
    assert up["metric"]["instance"] == target

    [series] = server.wait_for("xover_fixture_handoffs_total")
    assert series["metric"] == {"__name__": "xover_fixture_handoffs_total", "job": "fixture", "instance": target,
                                "host": "localhost", "device": "0"}
    assert float(series["value"][1]) == 3.0
    [held] = server.query("xover_fixture_turn_holder == 1")
    assert held["metric"]["job"] == "fixture" and held["metric"]["exported_job"] == "mlp-balanced"
    [count] = server.query('xover_fixture_turn_wait_seconds_bucket{le="0.01"}')
    assert float(count["value"][1]) == 2.0

    # a later change is scraped too: Prometheus reads the exporter as it is now
    handoffs.labels(host="localhost", device="0").inc(4)
    server.wait_for("xover_fixture_handoffs_total", until=lambda result: float(result[0]["value"][1]) == 7.0)
    [rate] = server.wait_for("increase(xover_fixture_handoffs_total[1m])")
    assert float(rate["value"][1]) > 0


def test_each_server_has_its_own_port_storage_and_targets(prometheus, exporter):  # noqa: F811
    _, target = exporter
    first, second = prometheus([target]), prometheus(["127.0.0.1:1"])  # the second's target is down
    assert first.url != second.url and first.directory != second.directory
    first.wait_for('up{job="xover"} == 1')
    second.wait_for('up{job="xover"} == 0')
    assert (first.directory / "data").is_dir()
    pids = [str(server.process.pid) for server in (first, second)]
    assert all(subprocess.run(["kill", "-0", pid]).returncode == 0 for pid in pids)
