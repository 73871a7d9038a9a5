"""Issue 58, the metrics ports: where the run's exporter and the turn servers listen (XOVER_METRICS_ADDRESS,
loopback unless told), a port held by anyone on either address family refused, and nothing answered
without the user's bearer token, over TLS with the user's certificate (xover/turns/credentials.py).

Before: both listened on every IPv4 address, without a way to choose; a process holding the same port on
IPv6 alone was not refused (it then answered every client that reached the port by `localhost` on ::1);
and anyone who reached a port read every figure over plain HTTP."""

import os
import socket
import stat
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest
from scraped import free_port, free_ports, get, scrape

from xover.errors import XoverError
from xover.run.exporter import TARGETS_PATH, PrometheusSink
from xover.turns.credentials import MetricsCredentials, credentials_folder, metrics_credentials

# (family, address, IPv6 alone): how a squatter may hold a port
SQUATS = [(socket.AF_INET6, "::1", True), (socket.AF_INET6, "::", True), (socket.AF_INET, "127.0.0.1", False),
          (socket.AF_INET, "0.0.0.0", False)]


def _squat(family, address, v6only, port):
    held = socket.socket(family)
    if v6only:
        held.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    held.bind((address, port))
    held.listen()
    return held


def _outside_address():
    """An address of this machine that is not loopback (IPv4), or None."""
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family == socket.AF_INET and not address.address.startswith("127."):
                return address.address
    return None


def _reaches(address, port):
    try:
        with socket.create_connection((address, port), timeout=3):
            return True
    except OSError:
        return False


@pytest.mark.parametrize("family, address, v6only", SQUATS, ids=[squat[1] for squat in SQUATS])
def test_the_exporter_refuses_a_port_held_on_either_family(family, address, v6only):
    port = free_port()
    with _squat(family, address, v6only, port):
        with pytest.raises(XoverError) as refused:
            PrometheusSink(port)
    message = str(refused.value)
    assert message.startswith(f"--metrics-port {port}: the port is in use") and "\n" not in message, message


@pytest.mark.parametrize("setting", ["localhost", "0.0.0.0", "::"])
def test_while_it_serves_nobody_can_take_its_port_on_either_family(monkeypatch, setting):
    monkeypatch.setenv("XOVER_METRICS_ADDRESS", setting)
    port = free_port()
    exporter = PrometheusSink(port)
    try:
        for family, address, v6only in SQUATS:
            with pytest.raises(OSError) as taken:
                _squat(family, address, v6only, port).close()
            assert taken.value.errno == 98, (address, taken.value)  # EADDRINUSE
        assert scrape(port, host="::1") is not None and scrape(port) is not None  # `localhost`, either way: xover
    finally:
        exporter.stop()


def test_the_figures_listen_on_loopback_unless_told_otherwise(monkeypatch):
    outside = _outside_address()
    if outside is None:
        pytest.skip("this machine has no address besides loopback")
    port = free_port()
    exporter = PrometheusSink(port)
    try:
        assert _reaches("127.0.0.1", port) and _reaches("::1", port)
        assert not _reaches(outside, port), f"the exporter answers on {outside}, not only on loopback"
    finally:
        exporter.stop()
    monkeypatch.setenv("XOVER_METRICS_ADDRESS", "0.0.0.0")  # a Prometheus elsewhere: said so
    # a port of its own: the one just freed can be taken meanwhile by another test's connection (make test, once)
    exporter = PrometheusSink(free_port())
    try:
        assert _reaches(outside, exporter.port)
    finally:
        exporter.stop()


def test_a_turn_server_listens_on_loopback_and_passes_over_a_port_held_on_ipv6(tmp_path):
    low = free_ports(2)
    with _squat(socket.AF_INET6, "::", True, low):
        proc = subprocess.Popen([sys.executable, "-m", "xover.turns.server", "--socket", str(tmp_path / "g.sock"),
                                 "--control-stdin", "--device=0=0", "--metrics-address", "localhost",
                                 "--metrics-credentials-stdin", f"--metrics-ports={low}-{low + 1}"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            proc.stdin.write(metrics_credentials().to_line() + "\n")
            proc.stdin.flush()
            assert proc.stdout.readline().split() == ["metrics", str(low + 1)]
            assert proc.stdout.readline().strip() == "ready"
            assert scrape(low + 1, host="::1") and scrape(low + 1)
            outside = _outside_address()
            assert outside is None or not _reaches(outside, low + 1)
        finally:
            proc.stdin.write("Q\n")
            proc.stdin.flush()
            proc.wait(timeout=10)


def test_only_a_scrape_with_the_token_is_answered_and_only_over_tls():
    port = free_port()
    exporter = PrometheusSink(port)
    try:
        for path in ("/metrics", TARGETS_PATH):
            assert get(port, path)[0] == 200
            assert get(port, path, token=None)[0] == 401
            assert get(port, path, token="x" * 43)[0] == 401
            status, headers, body = get(port, path, token=None)
            assert body == b"" and headers.get("WWW-Authenticate", "").startswith("Bearer")
        with pytest.raises(OSError):  # plain HTTP: the TLS handshake fails, nothing is answered
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)
        # a client that trusts another certificate (a squatter's view of it, reversed) refuses xover's
        other = MetricsCredentials(metrics_credentials().token, _other_certificate(), "")
        with pytest.raises(OSError):
            get(port, credentials=other)
    finally:
        exporter.stop()


def _other_certificate():
    from xover.turns.credentials import _new_certificate

    return _new_certificate()["tls.crt"]


def test_the_credentials_are_made_private_on_first_use(tmp_path, monkeypatch):
    folder = tmp_path / "config" / "metrics"
    monkeypatch.setenv("XOVER_METRICS_CREDENTIALS", str(folder))
    made = metrics_credentials()
    assert credentials_folder() == folder and stat.S_IMODE(folder.stat().st_mode) == 0o700
    for name in ("token", "tls.crt", "tls.key"):
        assert stat.S_IMODE((folder / name).stat().st_mode) == 0o600, name
    assert len(made.token) >= 40 and "BEGIN CERTIFICATE" in made.certificate and "PRIVATE KEY" in made.key
    assert metrics_credentials() == made  # read again, not made anew
    made.tls_context()  # a pair that serves


def test_first_runs_at_once_each_read_the_same_whole_pair(tmp_path, monkeypatch):
    """Several runs that make the credentials at the same moment (a fresh user's groups, pytest's workers):
    each reads the one token, certificate and key, a pair that serves. Each link is made slow to widen the
    window: before, a run that linked its certificate while another, whose key was linked, slept, left a
    key and a certificate that do not belong together."""
    folder = tmp_path / "metrics"
    monkeypatch.setenv("XOVER_METRICS_CREDENTIALS", str(folder))
    link = os.link

    def slow_link(*args, **kwargs):
        link(*args, **kwargs)
        time.sleep(0.2)

    monkeypatch.setattr(os, "link", slow_link)
    together = threading.Barrier(4)

    def first_run(_):
        together.wait()
        return metrics_credentials()

    with ThreadPoolExecutor(4) as pool:
        made = list(pool.map(first_run, range(4)))
    assert all(credentials == made[0] for credentials in made)
    made[0].tls_context()  # a pair that serves


@pytest.mark.parametrize("breaks, said", [
    (lambda folder: os.chmod(folder, 0o755), "is open to others (mode 755): chmod 700 it"),
    (lambda folder: os.chmod(folder / "token", 0o644), "is open to others (mode 644): chmod 600 it"),
    (lambda folder: os.chmod(folder / "tls.key", 0o640), "is open to others (mode 640): chmod 600 it"),
    (lambda folder: (os.unlink(folder / "token"), os.symlink("/etc/hostname", folder / "token")),
     "cannot be opened (Too many levels of symbolic links; a link is not followed)"),
    (lambda folder: (folder / "token").write_text("two words"), "holds no token"),
    (lambda folder: os.unlink(folder / "tls.crt"), "is missing"),
])
def test_credentials_that_are_not_safe_to_use_are_one_line_naming_the_file(tmp_path, monkeypatch, breaks, said):
    folder = tmp_path / "metrics"
    monkeypatch.setenv("XOVER_METRICS_CREDENTIALS", str(folder))
    metrics_credentials()
    breaks(folder)
    with pytest.raises(XoverError) as refused:
        metrics_credentials()
    message = str(refused.value)
    assert said in message and str(folder) in message and "XOVER_METRICS_CREDENTIALS" in message, message


def test_a_link_in_place_of_the_folder_is_not_followed(tmp_path, monkeypatch):
    real = tmp_path / "real"
    monkeypatch.setenv("XOVER_METRICS_CREDENTIALS", str(real))
    metrics_credentials()
    os.symlink(real, tmp_path / "link")
    monkeypatch.setenv("XOVER_METRICS_CREDENTIALS", str(tmp_path / "link"))
    with pytest.raises(XoverError, match="a link is not followed"):
        metrics_credentials()


def test_another_users_folder_is_refused(tmp_path, monkeypatch):
    if os.geteuid() != 0:
        pytest.skip("needs root: the folder belongs to another user")
    folder = tmp_path / "theirs"
    folder.mkdir(mode=0o700)
    os.chown(folder, 65534, 65534)
    monkeypatch.setenv("XOVER_METRICS_CREDENTIALS", str(folder))
    with pytest.raises(XoverError, match="belongs to uid 65534, not to you"):
        metrics_credentials()


def test_the_credentials_reach_a_turn_server_on_its_stdin_never_its_command_line(tmp_path, monkeypatch):
    from xover.turns.service import ServedTurns, TurnService

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    credentials = metrics_credentials()
    served = ServedTurns("e9", "0", ("a", "b"), credentials)
    assert not [arg for arg in served.arguments("localhost") if credentials.token in arg]
    service = TurnService("e9-r1", [{"localhost": [0]}, {"localhost": [0]}], "round-robin", {}, served=served)
    try:
        [server] = service.servers
        command = " ".join(psutil.Process(server.process.pid).cmdline())
        assert credentials.token not in command and "PRIVATE KEY" not in command
        assert credentials.token not in open(f"/proc/{server.process.pid}/environ").read()
        [endpoint] = service.endpoints()
        assert get(endpoint.port, token=None)[0] == 401 and scrape(endpoint.port)
    finally:
        service.stop()


def test_one_address_of_an_interface_holds_its_port_on_the_other_family_too(monkeypatch):
    """XOVER_METRICS_ADDRESS set to one address: served there alone, and the port is still refused when
    held on the other family, and held there while it serves (a name of the host may lead a client to
    either family)."""
    outside = _outside_address()
    if outside is None:
        pytest.skip("this machine has no address besides loopback")
    monkeypatch.setenv("XOVER_METRICS_ADDRESS", outside)
    port = free_port()
    with _squat(socket.AF_INET6, "::", True, port):
        with pytest.raises(XoverError, match="the port is in use"):
            PrometheusSink(port)
    exporter = PrometheusSink(port)
    try:
        assert _reaches(outside, port) and not _reaches("127.0.0.1", port)
        with pytest.raises(OSError):
            _squat(socket.AF_INET6, "::", True, port).close()
        assert get(port, host=outside)[0] == 200
    finally:
        exporter.stop()
