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

# A bulk sender (a process of its own): connects, says who it is, marks its sockets, then sends from
# the common start time for 2 s.
SENDER = """
import socket, sys, time
from xover.runtime.link_priority import prioritise_sockets
sock = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
sock.sendall(sys.argv[2].encode())
if sys.argv[3] != "-":
    prioritise_sockets(int(sys.argv[3]))
start = float(sys.argv[4])
time.sleep(max(0.0, start - time.time()))
block = b"x" * 65536
while time.time() < start + 2.0:
    sock.sendall(block)
sock.close()
"""

# One receiver and two senders on one link, the second marked; prints the bytes each got through
# while both were sending (what a sender had buffered still arrives after it stops).
TWO_SENDERS = """
import json, socket, subprocess, sys, threading, time
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen(2)
received = {}
def receive():
    connection, _ = server.accept()
    tag = connection.recv(1).decode()
    received[tag] = 0
    while chunk := connection.recv(65536):
        if time.time() < float(start) + 2.0:  # what crossed the link while both were sending
            received[tag] += len(chunk)
port, start = str(server.getsockname()[1]), str(time.time() + 1.5)
receivers = [threading.Thread(target=receive) for _ in range(2)]
for thread in receivers:
    thread.start()
senders = [subprocess.Popen([sys.executable, "-c", sys.argv[1], port, tag, priority, start])
           for tag, priority in (("p", "-"), ("m", "6"))]
for process in senders:
    process.wait()
for thread in receivers:
    thread.join()
print(json.dumps(received))
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
    received = json.loads(result.stdout)
    total_mbit = (received["p"] + received["m"]) * 8 / 2.0 / 1e6
    assert 35 < total_mbit < 65, received  # the link's rate, shared by both
    assert received["m"] > 3 * received["p"], received
