"""A turn server's own figures (xover/turns/metrics.py): a real server asked to serve them, real clients
taking turns on its socket, its HTTP endpoint scraped and parsed with prometheus_client's own parser;
and the run's exporter listing the servers for Prometheus' HTTP service discovery (`/targets`)."""

import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest
from scraped import free_port, free_ports, get, scrape, value

from xover.runtime.turn_client import CrossoverToken
from xover.turns.credentials import metrics_credentials
from xover.turns.metrics import TurnMetrics
from xover.turns.service import ServedTurns, TurnServerEndpoint, TurnService

JOBS = {0: "mlp-a", 1: "mlp-b"}


def start_server(path, *extra, address="localhost"):
    """A turn server serving its figures as a run's do: over TLS, to the session's token (from its stdin)."""
    args = [sys.executable, "-m", "xover.turns.server", "--socket", path, "--control-stdin", "--join-timeout", "30",
            "--device=0=0,1", "--metrics-address", address, "--metrics-credentials-stdin",
            "--metrics-label=experiment=e1", "--metrics-label=group=0", "--metrics-label=host=localhost",
            *[f"--slot-name={s}={n}" for s, n in JOBS.items()], *extra]
    proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdin.write(metrics_credentials().to_line() + "\n")
    proc.stdin.flush()
    first = proc.stdout.readline().split()
    assert first[0] == "metrics", first
    assert proc.stdout.readline().strip() == "ready"
    return proc, int(first[1])


def take_turns(path, slot, iterations, hold_s, leave_with_bye=True):
    token = CrossoverToken(path, 0, slot)
    for _ in range(iterations):
        token.acquire()
        time.sleep(hold_s)
        token.release()
        time.sleep(hold_s)  # its "all-reduce": the partner's turn
    if leave_with_bye:
        token.close()
    return token


def test_a_turn_server_serves_its_devices_turns_as_they_happen(tmp_path):
    path = str(tmp_path / "g.sock")
    proc, port = start_server(path)
    try:
        samples = scrape(port)  # before any client: every job's series, at 0
        device = {"experiment": "e1", "group": "0", "host": "localhost", "device": "0"}
        assert value(samples, "xover_turn_server_up", experiment="e1", group="0", host="localhost") == 1
        assert value(samples, "xover_device_turn_handoffs_total", **device) == 0
        for job in JOBS.values():
            assert value(samples, "xover_device_turn_holder", job=job, **device) == 0
            assert value(samples, "xover_device_turn_wait_seconds_count", job=job, **device) == 0

        clients = [threading.Thread(target=take_turns, args=(path, slot, 10, 0.02)) for slot in JOBS]
        for client in clients:
            client.start()
        seen_holders = set()
        while any(client.is_alive() for client in clients):  # scraped while the turns go on
            live = scrape(port)
            holding = [job for job in JOBS.values() if value(live, "xover_device_turn_holder", job=job) == 1]
            assert len(holding) <= 1, holding  # one holder at a time
            seen_holders.update(holding)
            time.sleep(0.005)
        for client in clients:
            client.join()
        samples = scrape(port)
        assert seen_holders == set(JOBS.values())
        assert value(samples, "xover_device_turn_handoffs_total", **device) >= 10
        for job in JOBS.values():
            assert value(samples, "xover_device_turn_wait_seconds_count", job=job) == 10
            assert 10 * 0.02 <= value(samples, "xover_device_turn_held_seconds_total", job=job) < 10 * 0.02 + 2
            assert value(samples, "xover_device_turns_lost_total", job=job) == 0  # both said bye
            assert value(samples, "xover_device_turn_holder", job=job) == 0
    finally:
        proc.stdin.write("Q\n")
        proc.stdin.flush()
        proc.wait(timeout=10)


def test_a_rank_that_dies_counts_as_turns_lost_on_its_device(tmp_path):
    path = str(tmp_path / "g.sock")
    proc, port = start_server(path)
    try:
        partner = threading.Thread(target=take_turns, args=(path, 1, 5, 0.01))
        partner.start()
        dying = subprocess.run([sys.executable, "-c", (
            "import os\nfrom xover.runtime.turn_client import CrossoverToken\n"
            f"t = CrossoverToken({path!r}, 0, 0)\nt.acquire()\nos._exit(0)")], timeout=60)
        assert dying.returncode == 0
        partner.join(timeout=60)
        samples = scrape(port)
        assert value(samples, "xover_device_turns_lost_total", job="mlp-a") == 1
        assert value(samples, "xover_device_turns_lost_total", job="mlp-b") == 0
        assert value(samples, "xover_device_turn_wait_seconds_count", job="mlp-b") == 5  # not held back by it
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("bad, said", [
    (["--metrics-label=colour=red"], "--metrics-label 'colour=red': expected KEY=VALUE with KEY one of"),
    (["--slot-name=zero"], "--slot-name 'zero': expected SLOT=JOB"),
    (["--metrics-ports=9479-9470"], "--metrics-ports '9479-9470': expected LOW-HIGH"),
])
def test_bad_metrics_options_are_one_line_and_exit_2(tmp_path, bad, said):
    args = [sys.executable, "-m", "xover.turns.server", "--socket", str(tmp_path / "g.sock"), "--device=0=0",
            "--metrics-address", "127.0.0.1", *bad]
    result = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stdout == ""
    assert said in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_held_time_and_handoffs_follow_the_holder_after_each_decision():
    metrics = TurnMetrics({"experiment": "e", "group": "1", "host": "h"}, JOBS, {0: [0, 1]})

    def sample(name, **labels):
        return metrics.registry.get_sample_value(name, {"experiment": "e", "group": "1", "host": "h", "device": "0",
                                                        **labels})

    metrics.decided(0, 0, now=10.0)
    metrics.decided(0, 0, now=10.5)  # the same holder: nothing ends
    metrics.decided(0, None, now=11.0)
    metrics.decided(0, 0, now=12.0)  # the same job again: no handoff
    metrics.decided(0, 1, now=12.25)  # straight to the partner
    assert sample("xover_device_turn_held_seconds_total", job="mlp-a") == 1.25
    assert sample("xover_device_turn_handoffs_total") == 1
    assert sample("xover_device_turn_holder", job="mlp-b") == 1 and sample("xover_device_turn_holder", job="mlp-a") == 0


def test_a_turn_service_hands_its_servers_ports_to_the_exporter_which_lists_them(tmp_path, monkeypatch):
    from xover.run.exporter import TARGETS_PATH, PrometheusSink

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    served = ServedTurns("e7", "3", ("mlp-a", "mlp-b"), metrics_credentials())
    service = TurnService("e7-r1", [{"localhost": [0]}, {"localhost": [0]}], "round-robin", {}, served=served)
    exporter = PrometheusSink(free_port())
    try:
        [endpoint] = service.endpoints()
        assert (endpoint.host, endpoint.experiment, endpoint.group) == ("localhost", "e7", "3")
        samples = scrape(endpoint.port)
        # labelled with this machine's name: `localhost` would name no host in a cluster's Prometheus
        assert value(samples, "xover_turn_server_up", experiment="e7", group="3", host=socket.gethostname()) == 1
        exporter.turn_servers("e7-r1", service.endpoints())
        exporter.turn_servers("e7-r2", [TurnServerEndpoint("xo-h2", 40001, "e7", "4")])

        def listed(host):
            status, headers, body = get(exporter.port, TARGETS_PATH, headers={"Host": host})
            assert status == 200 and headers["Content-Type"] == "application/json"
            return json.loads(body)

        # a server on the exporter's machine is listed under the name Prometheus reached the exporter by
        assert listed(f"node7.example:{exporter.port}") == [
            {"targets": [f"node7.example:{endpoint.port}"],
             "labels": {"__meta_xover_experiment": "e7", "__meta_xover_group": "3"}},
            {"targets": ["xo-h2:40001"], "labels": {"__meta_xover_experiment": "e7", "__meta_xover_group": "4"}},
        ]
        exporter.turn_servers("e7-r2", [])
        assert [group["targets"] for group in listed("127.0.0.1")] == [[f"127.0.0.1:{endpoint.port}"]]
    finally:
        exporter.stop()
        service.stop()
    assert not os.path.exists(service.socket_template.replace("{host}", "localhost"))


def test_a_server_that_cannot_serve_its_figures_says_so_and_serves_turns(tmp_path):
    path = str(tmp_path / "g.sock")
    args = [sys.executable, "-m", "xover.turns.server", "--socket", path, "--control-stdin", "--device=0=0",
            "--metrics-address", "192.0.2.1"]  # TEST-NET-1: no interface of this machine has it
    proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"  # no `metrics PORT` line
        take_turns(path, 0, 3, 0.001)
    finally:
        proc.stdin.write("Q\n")
        proc.stdin.flush()
        proc.wait(timeout=10)
    error = proc.stderr.read()
    assert proc.returncode == 0 and "--metrics-address 192.0.2.1: cannot serve its figures there" in error, error


def test_a_flood_of_idle_connections_to_the_figures_costs_a_few_threads_and_no_turn(tmp_path):
    """Anyone who reaches the port may connect: 200 connections that send nothing are held to
    MAX_CONNECTIONS threads, the turns go on meanwhile, and once they go a scrape is answered again."""
    import socket as sockets

    from xover.turns.metrics import MAX_CONNECTIONS

    path = str(tmp_path / "g.sock")
    proc, port = start_server(path)
    idle = []
    try:
        for _ in range(200):
            connection = sockets.create_connection(("127.0.0.1", port), timeout=10)
            idle.append(connection)
        time.sleep(0.5)
        threads = int(next(line.split()[1] for line in open(f"/proc/{proc.pid}/status") if line.startswith("Threads:")))
        # its loop and the HTTP server's accept thread, besides one per connection served (not 200)
        assert MAX_CONNECTIONS <= 64 and threads <= 64 + 2, threads
        clients = [threading.Thread(target=take_turns, args=(path, slot, 20, 0.002)) for slot in JOBS]
        started = time.monotonic()
        for client in clients:
            client.start()
        for client in clients:
            client.join(timeout=30)
        assert not any(client.is_alive() for client in clients) and time.monotonic() - started < 10
    finally:
        for connection in idle:
            connection.close()
    try:
        deadline = time.monotonic() + 10
        while True:  # the idle connections' threads see them closed and free their slots
            try:
                samples = scrape(port)
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        assert value(samples, "xover_device_turn_wait_seconds_count", job="mlp-a") == 20
    finally:
        proc.kill()
        proc.wait()


def test_a_connection_that_times_out_or_breaks_prints_no_traceback(capsys):
    """socketserver prints a traceback for every connection whose request timed out: a flood of idle
    connections would fill the run's terminal with them."""
    from xover.turns.metrics import _BoundedServer

    for error in (TimeoutError("timed out"), ConnectionResetError(104, "reset")):
        try:
            raise error
        except OSError:
            _BoundedServer.handle_error(None, None, ("203.0.113.9", 40000))
    try:
        raise ValueError("a bug")
    except ValueError:
        _BoundedServer.handle_error(None, None, ("203.0.113.9", 40000))
    said = capsys.readouterr().err
    assert "Traceback" not in said and said == "xover: serving metrics to 203.0.113.9 failed: ValueError('a bug')\n"


def test_servers_given_a_range_take_its_first_free_port_and_without_one_serve_turns_alone(tmp_path):
    """XOVER_TURN_METRICS_PORTS (a firewall opened on those only): a port taken is passed over; a server
    that finds every one taken says so in one line and serves turns without figures."""
    low = free_ports(2)
    taken = socket.socket()
    taken.bind(("127.0.0.1", low))
    taken.listen()
    first_path, second_path = str(tmp_path / "a.sock"), str(tmp_path / "b.sock")
    first, port = start_server(first_path, f"--metrics-ports={low}-{low + 1}")
    second = subprocess.Popen([sys.executable, "-m", "xover.turns.server", "--socket", second_path, "--control-stdin",
                               "--device=0=0", "--metrics-address", "127.0.0.1", f"--metrics-ports={low}-{low + 1}"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert port == low + 1
        assert value(scrape(port), "xover_turn_server_up", experiment="e1") == 1
        assert second.stdout.readline().strip() == "ready"  # no `metrics PORT` line
        take_turns(second_path, 0, 3, 0.001)
    finally:
        for proc in (first, second):
            proc.stdin.write("Q\n")
            proc.stdin.flush()
            proc.wait(timeout=10)
        taken.close()
    error = second.stderr.read()
    assert second.returncode == 0, error
    assert f"cannot serve its figures there ([Errno 98] every port from {low} to {low + 1} is in use); serving turns " \
           "without them" in error and len(error.strip().splitlines()) == 1, error


def test_the_launcher_passes_the_range_to_every_server(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    low = free_ports(3)
    served = ServedTurns("e8", "0", ("mlp-a", "mlp-b"), metrics_credentials(), ports=(low, low + 2))
    assert f"--metrics-ports={low}-{low + 2}" in served.arguments("localhost")
    service = TurnService("e8-r1", [{"localhost": [0]}, {"localhost": [0]}], "round-robin", {}, served=served)
    try:
        [endpoint] = service.endpoints()
        assert endpoint.port == low
    finally:
        service.stop()


# ---------------------------------------------------------------------------------------------
# Issue 58: the limit is a deadline per request, and a request is bounded in size. Before, 10 s was the
# limit of each read: a client sending a byte every 9 s held its thread (and with 32 of them, every slot)
# for as long as it liked, and http.server took up to 100 header lines of 64 KiB each (about 6.5 MB a
# connection, 200 MB with every slot taken) before answering.
# ---------------------------------------------------------------------------------------------

@pytest.fixture
def short_deadline(monkeypatch):
    """An endpoint of xover's (serve_http, TLS and the token) whose requests have 1.5 s, in this process."""
    from xover.turns import metrics
    from xover.turns.credentials import metrics_credentials

    monkeypatch.setattr(metrics, "REQUEST_TIMEOUT_S", 1.5)
    http = metrics.serve_http("localhost", 0, lambda environ, start: start("200 OK", []) or [b"ok"],
                              metrics_credentials())
    yield http.port
    http.stop()


def _tls_connection(port):
    import ssl

    from xover.turns.credentials import CERTIFICATE_NAME

    context = ssl.create_default_context(cadata=metrics_credentials().certificate)
    return context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                               server_hostname=CERTIFICATE_NAME)


def _closed_after(connection, trickle, every_s, limit_s):
    """Send `trickle` a byte every `every_s` until the server closes the connection; seconds that took."""
    started = time.monotonic()
    for byte in trickle:
        try:
            connection.sendall(bytes([byte]))
            connection.settimeout(every_s)
            if connection.recv(1) == b"":
                return time.monotonic() - started
        except TimeoutError:
            pass  # nothing came back: send the next byte
        except OSError:
            return time.monotonic() - started
        assert time.monotonic() - started < limit_s, "the server kept a trickling request open"
    return time.monotonic() - started


def test_a_request_trickled_a_byte_at_a_time_ends_at_its_deadline(short_deadline):
    with _tls_connection(short_deadline) as connection:
        took = _closed_after(connection, b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200, 0.3, 6)
    assert took < 4, took  # 1.5 s and scheduling; each read came within 0.3 s, far inside a per-read limit


def _client_hello():
    """The first bytes of a real TLS handshake (a ClientHello, as Python's ssl writes it)."""
    import ssl

    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    handshake = ssl.create_default_context().wrap_bio(incoming, outgoing, server_hostname="xover-metrics")
    try:
        handshake.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


def test_a_tls_handshake_trickled_a_byte_at_a_time_ends_at_the_deadline(short_deadline):
    hello = _client_hello()
    assert len(hello) > 100
    with socket.create_connection(("127.0.0.1", short_deadline), timeout=10) as connection:
        took = _closed_after(connection, hello, 0.3, 6)
    assert took < 4, took


def test_a_request_longer_than_the_bound_is_dropped_unanswered(short_deadline):
    with _tls_connection(short_deadline) as connection:
        connection.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        sent, answer = 0, b""
        line = b"X-Pad: " + b"a" * 60000 + b"\r\n"  # each line within http.server's 64 KiB, 90 of them in all
        try:
            for _ in range(90):
                connection.sendall(line)
                sent += len(line)
            connection.sendall(b"\r\n")
            connection.settimeout(5)
            answer = connection.recv(100)
        except OSError:
            pass
    assert not answer.startswith(b"HTTP/"), answer  # before: read whole (5.4 MB held), then answered
    assert sent < 90 * len(line) or answer == b"", sent
