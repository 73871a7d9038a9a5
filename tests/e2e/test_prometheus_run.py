"""A real crossover run watched by a real Prometheus: `xover run --group mlp-digits resnet-digits --mode
crossover --metrics-port PORT` through horovodrun, scraped every second by Debian's `prometheus`
(tests/fixtures_services.py), the run's exporter as a static target and the turn server it lists
(`/targets`) through Prometheus' HTTP service discovery, both over HTTPS with the user's metrics credentials
as docs/reference.md tells Prometheus; the series read back through Prometheus' HTTP API."""

import json
import os
import socket
import subprocess
import sys
import tempfile

from conftest import ROOT
from fixtures_services import prometheus  # noqa: F401  (a fixture)
from scraped import free_port, free_ports

from xover.turns.credentials import credentials_folder

JOBS = {"mlp-digits", "resnet-digits"}
WINDOW = "[10m]"  # once the run has ended its series are stale: read their last values over a range


def test_prometheus_scrapes_a_crossover_run(prometheus, isolated_results):  # noqa: F811
    port, low = free_port(), free_ports(3)
    # the scrape's target is down until the run serves; xover's series carry their own `job` (honor_labels)
    # as docs/reference.md says: HTTPS with the user's certificate pinned, and the bearer token
    # scraped every second, also each scrape's timeout: a TLS handshake and the text from a busy Python process,
    # which a loaded machine can keep past 500 ms; the run is long enough for several scrapes at that pace
    server = prometheus([f"127.0.0.1:{port}"], job="xover", interval="1s", honor_labels=True,
                        http_sd=f"https://127.0.0.1:{port}/targets", xover=credentials_folder())
    run = subprocess.run([sys.executable, "-m", "xover", "run", "--group", "mlp-digits", "resnet-digits",
                          "--mode", "crossover", "--iterations", "250", "--metrics-port", str(port), "--json"],
                         env={**os.environ, "XOVER_LEASE_DIR": tempfile.mkdtemp(prefix="xover-test-leases-"),
                              "XOVER_TURN_METRICS_PORTS": f"{low}-{low + 2}"},  # its turn server's ports
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    experiment = json.loads(run.stdout)["experiment"]
    # where to scrape and with what, said once (a scrape without the token was a 401 that told nothing)
    folder = credentials_folder()
    assert f"metrics: https://localhost:{port}/metrics while the run lasts, to the bearer token in {folder}/token" \
        in " ".join(run.stderr.split()), run.stderr[-3000:]

    iterations = server.wait_for(f"last_over_time(xover_job_iterations_total{WINDOW})",
                                 until=lambda result: {s["metric"].get("job") for s in result} == JOBS)
    for series in iterations:
        labels = series["metric"]
        assert labels["experiment"] == experiment and labels["mode"] == "crossover", labels
        assert labels["policy"] == "work-conserving" and labels["group"] == "0" and labels["host"], labels
        assert float(series["value"][1]) > 0, series

    waits = server.query(f"last_over_time(xover_job_turn_wait_seconds_count{WINDOW})")
    assert {s["metric"]["job"] for s in waits} == JOBS and all(float(s["value"][1]) > 0 for s in waits)
    buckets = server.query(f'last_over_time(xover_job_turn_wait_seconds_bucket{{le="+Inf"}}{WINDOW})')
    assert len(buckets) == 2

    # the devices' turns, from the turn server itself (its port found through the exporter's /targets)
    holders = server.query(f"max_over_time(xover_device_turn_holder{WINDOW})")
    assert {s["metric"]["job"] for s in holders} == JOBS, holders
    # every device of the group (each job has a rank on both), not only rank 0's
    assert {(s["metric"]["host"], s["metric"]["device"], s["metric"]["experiment"], s["metric"]["group"])
            for s in holders} == {(socket.gethostname(), device, experiment, "0") for device in ("0", "1")}
    assert any(float(s["value"][1]) == 1 for s in holders)  # a job held the turn when it was scraped
    assert {int(s["metric"]["instance"].rsplit(":", 1)[1]) for s in holders} <= set(range(low, low + 3)), holders
    handoffs = server.query(f"max_over_time(xover_device_turn_handoffs_total{WINDOW})")
    assert len(handoffs) == 2 and all(float(s["value"][1]) > 0 for s in handoffs), handoffs
    held = server.query(f"max_over_time(xover_device_turn_held_seconds_total{WINDOW})")
    assert {s["metric"]["job"] for s in held} == JOBS and all(float(s["value"][1]) > 0 for s in held)
    device_waits = server.query(f"max_over_time(xover_device_turn_wait_seconds_count{WINDOW})")
    assert {s["metric"]["job"] for s in device_waits} == JOBS and all(float(s["value"][1]) > 0 for s in device_waits)
    # scraped while the jobs ran, not only at the end: more than one scrape saw iterations
    [samples] = server.query(f'count_over_time(xover_job_iterations_total{{job="resnet-digits"}}{WINDOW})')
    assert float(samples["value"][1]) >= 2
