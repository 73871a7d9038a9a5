"""The link's bands for real: socket priorities set on a process's open TCP sockets, and a shaped link
(emulation/network.py: tbf with pfifo_fast under it) that serves the higher priority first."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from xover.emulation.network import ShapedNetwork, missing_tools
from xover.errors import XoverError
from xover.runtime.link_priority import link_priority_from_env, prioritise_sockets
from xover.settings import LINK_PRIORITY_VARIABLE as PRIORITY_ENV

# A bulk sender (a process of its own): connects, says who it is, marks its sockets, says it is ready, then
# sends for 2 s from the start time it is told; says how late it started.
SENDER = """
import socket, sys, time
from xover.runtime.link_priority import prioritise_sockets
sock = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
sock.sendall(sys.argv[2].encode())
if sys.argv[3] != "-":
    prioritise_sockets(int(sys.argv[3]))
print("ready", flush=True)
start = float(sys.stdin.readline())
time.sleep(max(0.0, start - time.time()))
late = time.time() - start
block = b"x" * 65536
while time.time() < start + 2.0:
    sock.sendall(block)
sock.close()
print(late, flush=True)
"""

# One receiver and two senders on one link, the second marked. The start is set once both senders are up
# and ready (a Python start-up on a loaded machine can take seconds), and the bytes counted are those that
# arrived from the later sender's actual start to the common end (what a sender had buffered still arrives
# after it stops): prints them, the window's length and how late each sender started.
TWO_SENDERS = """
import json, socket, subprocess, sys, threading, time
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen(2)
arrivals = {}
def receive():
    connection, _ = server.accept()
    tag = connection.recv(1).decode()
    arrivals[tag] = []
    while chunk := connection.recv(65536):
        arrivals[tag].append((time.time(), len(chunk)))
port = str(server.getsockname()[1])
receivers = [threading.Thread(target=receive) for _ in range(2)]
for thread in receivers:
    thread.start()
senders = {tag: subprocess.Popen([sys.executable, "-c", sys.argv[1], port, tag, priority], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True) for tag, priority in (("p", "-"), ("m", "6"))}
for process in senders.values():
    assert process.stdout.readline().strip() == "ready"
start = time.time() + 0.5
for process in senders.values():
    process.stdin.write(f"{start!r}\\n")
    process.stdin.flush()
late = {tag: float(process.stdout.readline()) for tag, process in senders.items()}
for process in senders.values():
    assert process.wait() == 0
for thread in receivers:
    thread.join()
begin, end = start + max(late.values()), start + 2.0
received = {tag: sum(n for t, n in chunks if begin <= t < end) for tag, chunks in arrivals.items()}
print(json.dumps({"received": received, "seconds": end - begin, "late": late}))
"""


def test_priorities_are_set_on_tcp_sockets_only():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    client = socket.create_connection(listener.getsockname())
    accepted, _ = listener.accept()
    datagram = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        assert prioritise_sockets(6) >= 3  # the listener, both ends of the connection
        for sock in (listener, client, accepted):
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_PRIORITY) == 6
        assert datagram.getsockopt(socket.SOL_SOCKET, socket.SO_PRIORITY) == 0
        prioritise_sockets(0)
        assert client.getsockopt(socket.SOL_SOCKET, socket.SO_PRIORITY) == 0
    finally:
        for sock in (listener, client, accepted, datagram):
            sock.close()


def test_a_bad_priority_in_the_environment_is_refused(monkeypatch):
    monkeypatch.setenv(PRIORITY_ENV, "high")
    with pytest.raises(XoverError, match="XOVER_LINK_PRIORITY='high': not an integer"):
        link_priority_from_env()
    monkeypatch.setenv(PRIORITY_ENV, "7")
    with pytest.raises(XoverError, match="0 to 6"):
        link_priority_from_env()
    monkeypatch.delenv(PRIORITY_ENV)
    assert link_priority_from_env() is None


def test_the_shaped_link_serves_the_marked_socket_first():
    if missing_tools() and os.environ.get("CI") != "true":
        pytest.skip(f"no {', '.join(missing_tools())} here")
    with ShapedNetwork("50mbit") as network:
        result = subprocess.run(network.wrap([sys.executable, "-c", TWO_SENDERS, SENDER]), capture_output=True,
                                text=True, timeout=60, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert result.returncode == 0, result.stderr
    measured = json.loads(result.stdout)
    received = measured["received"]
    # counted from the later sender's start (each reports how late it began), so a slow start cannot skew either
    assert measured["seconds"] > 1.0, measured
    total_mbit = (received["p"] + received["m"]) * 8 / measured["seconds"] / 1e6
    assert 35 < total_mbit < 65, measured  # the link's rate, shared by both
    assert received["m"] > 3 * received["p"], measured
