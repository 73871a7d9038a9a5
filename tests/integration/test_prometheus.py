"""The Prometheus fixture (tests/fixtures_services.py) with the real parts: Debian's `prometheus` scrapes a
`prometheus_client` HTTP server started here, and the series are read back through Prometheus' HTTP API."""

import subprocess
import time

import pytest
from fixtures_services import prometheus  # noqa: F401  (a fixture)
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server


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


# ---------------------------------------------------------------------------------------------
# Issue 58: what docs/reference.md tells Prometheus for xover's endpoints (HTTPS, the user's certificate
# pinned, the bearer token) scrapes xover, and nobody who took the port when no run held it
# ---------------------------------------------------------------------------------------------

FORGED = 'xover_job_iterations_total{experiment="forged",job="forged"} 1e9\n'


class _Squatter:
    """Another user's server on a metrics port between two runs: forged series and a forged /targets, over
    plain HTTP or over TLS with a certificate of its own for xover's name; it keeps the headers it was sent."""

    def __init__(self, port: int, tls: bool) -> None:
        import json
        import ssl
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        from xover.turns.credentials import _new_certificate, _private_scratch

        self.authorizations: list[str] = []
        squatter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                squatter.authorizations.append(self.headers.get("Authorization", ""))
                body = (json.dumps([{"targets": [f"127.0.0.1:{port}"], "labels": {"forged": "yes"}}])
                        if self.path == "/targets" else FORGED).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        if tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            with _private_scratch() as folder:
                for name, text in _new_certificate().items():
                    (folder / name).write_text(text)
                context.load_cert_chain(folder / "tls.crt", folder / "tls.key")
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("tls", [False, True], ids=["plain-http", "tls-of-its-own"])
def test_the_documented_set_up_scrapes_xover_and_not_a_squatter_on_its_port(prometheus, tls):  # noqa: F811
    """Before: the set-up polled a fixed /targets port over plain HTTP and trusted honor_labels, so whoever
    bound the port while no run held it steered the scrapes and forged series (and, given a token, was sent
    it). Now a squatter's certificate is refused before any request: no series of its, no token sent."""
    from scraped import free_port

    from xover.records import StartRecord
    from xover.run.exporter import TARGETS_PATH, PrometheusSink
    from xover.run.sinks import JobLabels
    from xover.turns.credentials import credentials_folder

    xover_port, squatted = free_port(), free_port()
    exporter = PrometheusSink(xover_port)
    squatter = _Squatter(squatted, tls)
    try:
        exporter.opened("e58")
        exporter.received([(JobLabels(1, "e58", "mlp-a", "crossover", 0, "work-conserving", "localhost:2"),
                            StartRecord(job="mlp-a"))])
        server = prometheus([f"127.0.0.1:{xover_port}", f"127.0.0.1:{squatted}"], honor_labels=True,
                            http_sd=f"https://127.0.0.1:{squatted}{TARGETS_PATH}", xover=credentials_folder())
        [running] = server.wait_for('xover_job_running{experiment="e58"} == 1')
        assert running["metric"]["job"] == "mlp-a"
        server.wait_for(f'up{{instance="127.0.0.1:{squatted}"}} == 0')
        server.wait_for(f'up{{instance="127.0.0.1:{xover_port}"}} == 1')
        time.sleep(3)  # three more scrapes and discoveries of the squatter's port
        assert server.query('xover_job_iterations_total{experiment="forged"}') == []
        assert not [t for t in server.api("targets")["activeTargets"] if t["labels"].get("forged")]
        assert squatter.authorizations == []  # no request reached it: the token never left Prometheus
    finally:
        squatter.stop()
        exporter.stop()
