"""Safe on a shared machine: what other local users and a same-user client of the turn server can and
cannot do to a run (docs/security.md); a script forging metric records: tests/e2e/test_forged_metrics.py."""

import os
import shutil
import tempfile

import pytest

from xover import hosts
from xover.errors import XoverError
from xover.run.leases import DeviceLeases

DEVICE = ("localhost", 0)
NOBODY = 65534


def _lease_path(folder, monkeypatch):
    monkeypatch.setenv("XOVER_LEASE_DIR", str(folder))
    return DeviceLeases("test")._path(DEVICE)


def _in_child_as(uid, action):
    """`action()` in a forked child running as `uid`; its result: 'ok', or the error's type and text."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.close(read)
            os.setgid(uid)
            os.setuid(uid)
            try:
                action()
                message = "ok"
            except BaseException as error:  # noqa: BLE001 - whatever it was, the parent reports it
                message = f"{type(error).__name__}: {error}"
            os.write(write, message.encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        message = pipe.read().decode()
    os.waitpid(pid, 0)
    return message


@pytest.fixture
def shared_folder():
    """A folder as /tmp is: root's, sticky, writable by everyone (not under pytest's 0700 tmp_path,
    which another user could not reach)."""
    if os.geteuid() != 0:
        pytest.skip("needs root: another user acts in a forked child")
    folder = tempfile.mkdtemp(prefix="xover-test-leases-", dir="/tmp")
    os.chmod(folder, 0o1777)
    yield folder
    shutil.rmtree(folder)


# ---------------------------------------------------------------------------------------------
# Device leases (finding 1)
# ---------------------------------------------------------------------------------------------

def test_a_lease_name_linked_to_a_victims_file_is_refused_not_written(tmp_path, monkeypatch):
    folder = tmp_path / "leases"
    folder.mkdir()
    path = _lease_path(folder, monkeypatch)
    for link in (os.symlink, os.link):
        victim = tmp_path / f"victim-{link.__name__}"
        victim.write_text("precious")
        link(victim, path)
        leases = DeviceLeases("test")
        with pytest.raises(XoverError, match="not a plain file") as refused:
            leases.try_acquire([DEVICE])
        assert str(path) in str(refused.value) and "\n" not in str(refused.value)
        assert victim.read_text() == "precious" and not leases.held
        os.unlink(path)


def test_a_special_file_under_a_lease_name_is_refused(tmp_path, monkeypatch):
    folder = tmp_path / "leases"
    folder.mkdir()
    os.mkfifo(_lease_path(folder, monkeypatch))  # opening it without O_NONBLOCK would hang
    with pytest.raises(XoverError, match="not a plain file"):
        DeviceLeases("test").try_acquire([DEVICE])


def test_a_lease_file_that_is_not_a_lease_is_locked_but_never_truncated(tmp_path, monkeypatch):
    folder = tmp_path / "leases"
    folder.mkdir()
    path = _lease_path(folder, monkeypatch)
    with open(path, "w") as handle:
        handle.write("someone's notes, not a lease")
    os.chmod(path, 0o666)
    leases = DeviceLeases("test")
    assert leases.try_acquire([DEVICE]) == {}
    assert open(path).read() == "someone's notes, not a lease"
    leases.release()


def test_a_lease_folder_of_another_user_is_refused(tmp_path, monkeypatch):
    folder = tmp_path / "leases"
    folder.mkdir()
    os.chmod(folder, 0o1777)  # made first by someone else, for everyone: its owner may still swap files
    if os.geteuid() == 0:
        os.chown(folder, 4242, 4242)
    else:
        monkeypatch.setattr(os, "geteuid", lambda: 4242)
    monkeypatch.setenv("XOVER_LEASE_DIR", str(folder))
    with pytest.raises(XoverError, match="XOVER_LEASE_DIR") as refused:
        DeviceLeases("test").try_acquire([DEVICE])
    assert str(folder) in str(refused.value) and "\n" not in str(refused.value)
    assert os.listdir(folder) == []


def test_an_unwritable_lease_folder_is_one_clear_error(tmp_path, monkeypatch):
    if os.geteuid() == 0:
        folder = tempfile.mkdtemp(prefix="xover-test-leases-", dir="/tmp")  # root's, 0700 -> 0755
        os.chmod(folder, 0o755)
        monkeypatch.setenv("XOVER_LEASE_DIR", folder)
        try:
            outcome = _in_child_as(NOBODY, lambda: DeviceLeases("test").try_acquire([DEVICE]))
        finally:
            shutil.rmtree(folder)
        assert outcome.startswith("XoverError: ") and folder in outcome and "XOVER_LEASE_DIR" in outcome, outcome
    else:
        folder = tmp_path / "leases"
        folder.mkdir()
        os.chmod(folder, 0o555)
        monkeypatch.setenv("XOVER_LEASE_DIR", str(folder))
        with pytest.raises(XoverError, match="XOVER_LEASE_DIR"):
            DeviceLeases("test").try_acquire([DEVICE])


def test_leases_are_shared_by_users_in_a_sticky_folder(shared_folder, monkeypatch):
    """What leases are for: another user's run sees this one's device as busy, and the other way round."""
    monkeypatch.setenv("XOVER_LEASE_DIR", shared_folder)
    mine = DeviceLeases("root's experiment")
    assert mine.try_acquire([DEVICE]) == {}
    assert _in_child_as(NOBODY, lambda: _assert_busy("root's experiment")) == "ok"
    mine.release()
    os.unlink(mine._path(DEVICE))  # the next lease file is made by the other user

    def take():
        theirs = DeviceLeases("nobody's experiment")
        assert theirs.try_acquire([DEVICE]) == {}
        theirs.release()

    assert _in_child_as(NOBODY, take) == "ok"
    assert os.stat(mine._path(DEVICE)).st_uid == NOBODY
    again = DeviceLeases("root's second experiment")
    assert again.try_acquire([DEVICE]) == {}  # a lease file another user made leases all the same
    assert _in_child_as(NOBODY, lambda: _assert_busy("root's second experiment")) == "ok"
    again.release()


def _assert_busy(holder):
    found = DeviceLeases("nobody's experiment").try_acquire([DEVICE])
    assert found == {DEVICE: f"pid {os.getppid()}: {holder}"}, found


def test_a_holder_name_cannot_put_control_characters_on_the_terminal(tmp_path, monkeypatch):
    folder = tmp_path / "leases"
    folder.mkdir()
    monkeypatch.setenv("XOVER_LEASE_DIR", str(folder))
    first = DeviceLeases("evil \x1b[2J\x1b]0;title\x07 experiment\nsecond line")
    assert first.try_acquire([DEVICE]) == {}
    try:  # flock is per open file: a second open, even in this process, finds the device busy
        holder = DeviceLeases("other").try_acquire([DEVICE])[DEVICE]
        assert not any(c in holder for c in "\x1b\x07\n") and "evil" in holder and "second line" in holder
    finally:
        first.release()


# ---------------------------------------------------------------------------------------------
# Metric records in a run's output (finding 3)
# ---------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------
# The store's URL and the run's settings off command lines (finding 2)
# ---------------------------------------------------------------------------------------------

FAKE_SSH = """#!/bin/sh
# ssh to a host that is this machine: options and the host name go, the command runs here
while [ $# -gt 0 ]; do case "$1" in -tt|-t) shift;; -o) shift 2;; *) break;; esac; done
shift
exec sh -c "$*"
"""
FAKE_TORCHRUN = """#!/bin/sh
echo "node XOVER_HOST=$XOVER_HOST TOKEN=$XOVER_METRIC_TOKEN DB=${XOVER_DB:-none} ARGS=$*"
"""


def test_a_torchrun_node_on_another_host_gets_its_settings_but_not_on_its_command_line(tmp_path, monkeypatch):
    import stat
    import subprocess

    from xover.run.external import torchrun

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("ssh", FAKE_SSH), ("torchrun", FAKE_TORCHRUN)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setattr(torchrun, "torchrun_path", lambda: str(bin_dir / "torchrun"))
    monkeypatch.setattr(torchrun, "reserve_rendezvous",
                        lambda *_, **__: torchrun.Rendezvous(29400, "127.0.0.1", "/nonexistent/socket"))
    secret_db = "postgresql://xover:s3cret-pw@db.example/xover"
    env = {**os.environ, "XOVER_DB": secret_db, "XOVER_REAPER_DB": secret_db, "XOVER_METRIC_TOKEN": "ab" * 16,
           "XOVER_RUN": "e:1"}
    commands = torchrun.torchrun_commands(2, "localhost:1,other-host.invalid:1", tmp_path / "logs",
                                          tmp_path / "run" / "spec.json", env=env, program=["train.py"])
    local, remote = commands
    options = list(hosts.SSH_OPTIONS)  # every ssh has them before the host (batch mode, bounded waits)
    assert remote[:3 + len(options)] == ["ssh", "-tt", *options, "other-host.invalid"]
    for command in commands:  # what every user of either host could read
        line = " ".join(command)
        assert "s3cret-pw" not in line and "ab" * 16 not in line and "XOVER_RUN" not in line, line
    assert local[:2] == ["env", "XOVER_HOST=localhost"]
    [kept] = [part for part in remote[-1].split() if "xover-env-" in part]
    assert stat.S_IMODE(os.stat(kept).st_mode) == 0o600
    there = {k: v for k, v in os.environ.items() if not k.startswith("XOVER_")}  # the other host's own
    ran = subprocess.run(remote, capture_output=True, text=True, timeout=60, env=there)  # as ssh would run it
    assert ran.returncode == 0, ran.stderr
    assert f"node XOVER_HOST=other-host.invalid TOKEN={'ab' * 16} DB=none ARGS=--nnodes=2 --node-rank=1" in ran.stdout
    assert not os.path.exists(kept)  # read once, then gone


def _node_settings(command: list[str]) -> dict:
    """What a torchrun node reads from its settings file (the file named on its command line)."""
    import json
    import shlex

    words = shlex.split(command[-1]) if command[0] == "ssh" else command
    [kept] = [word for word in words if os.path.basename(word).startswith("xover-env-")]
    with open(kept) as settings:
        return json.load(settings)


def test_torchrun_rendezvous_is_off_every_command_line_and_its_port_is_never_free(tmp_path, monkeypatch):
    """Issue 52, finding 1. Before: `--rdzv-endpoint=HOST:PORT` and `--rdzv-id=<the run's folder>` on
    every node's command line, and the port found free by a probe that closed it, so that a local user
    who bound it first became the store whose pickles the nodes loaded."""
    import errno
    import re
    import socket

    from xover.run.external import torchrun

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("ssh", FAKE_SSH), ("torchrun", FAKE_TORCHRUN)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setattr(torchrun, "torchrun_path", lambda: str(bin_dir / "torchrun"))
    commands = torchrun.torchrun_commands(2, "localhost:1,other-host.invalid:1", tmp_path / "logs",
                                          tmp_path / "run-e77" / "spec.json", env=dict(os.environ),
                                          program=["train.py"])
    endpoints = [word.split("=", 1)[1] for command in commands for word in command
                 if word.startswith("--rdzv-endpoint=")]
    for command in commands:  # what every user of either host can read
        line = " ".join(command)
        assert "rdzv-id" not in line and "rdzv-endpoint" not in line and "run-e77" not in line, line
    first, second = (_node_settings(command) for command in commands)
    assert re.fullmatch(r"[0-9a-f]{32}", first["PET_RDZV_ID"]) and first["PET_RDZV_ID"] == second["PET_RDZV_ID"]
    assert first["PET_RDZV_ENDPOINT"] == second["PET_RDZV_ENDPOINT"]
    assert (first["PET_RDZV_CONF"], second["PET_RDZV_CONF"]) == ("is_host=1", "is_host=0")  # node 0 hosts it
    host, port = (endpoints or [first["PET_RDZV_ENDPOINT"]])[0].rsplit(":", 1)
    address = socket.getaddrinfo(host, None, socket.AF_INET)[0][4][0]
    squatter = socket.socket()  # another user, binding the store's port before node 0
    try:
        with pytest.raises(OSError) as taken:
            squatter.bind((address, int(port)))
        assert taken.value.errno == errno.EADDRINUSE
    finally:
        squatter.close()
    # node 0 (only) takes that very listening socket from the holder
    door = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    door.connect(first[torchrun.HANDOFF_VARIABLE])
    _, fds, _, _ = socket.recv_fds(door, 1, 1)
    door.close()
    with socket.socket(fileno=fds[0]) as listener:
        assert listener.getsockname()[:2] == (address, int(port))
        assert listener.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 1
    assert torchrun.HANDOFF_VARIABLE not in second
    for command in commands:
        words = command[-1].split() if command[0] == "ssh" else command
        for word in words:
            if os.path.basename(word).startswith("xover-env-") and os.path.exists(word):
                os.unlink(word)


def test_another_hosts_devices_are_leased_on_that_host_whatever_it_is_called(tmp_path, monkeypatch):
    """Issue 52, finding 7. Before: a lease was named after the host as typed, in the launching
    machine's /tmp: `-H n1` and `-H n1.cluster` (or two login nodes) leased the same device twice. Now
    the lease is held on the host itself (over ssh; here an ssh that runs the command on this machine,
    as if both names were this one host), as that host's own device."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text(FAKE_SSH)
    (bin_dir / "ssh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("XOVER_LEASE_DIR", str(tmp_path / "leases"))
    first, second, there = DeviceLeases("first run"), DeviceLeases("second run"), DeviceLeases("a run on n1 itself")
    try:
        assert first.try_acquire([("n1.invalid", 0), ("n1.invalid", 1)]) == {}
        busy = second.try_acquire([("n1-alias.invalid", 1)])
        assert list(busy) == [("n1-alias.invalid", 1)] and busy[("n1-alias.invalid", 1)].endswith(": first run")
        assert list(there.try_acquire([("localhost", 0)])) == [("localhost", 0)]  # the host's own runs see it
        first.release()
        assert second.try_acquire([("n1-alias.invalid", 1)]) == {}
        assert there.try_acquire([("localhost", 0)]) == {}
    finally:
        for leases in (first, second, there):
            leases.release()
    assert not first.remote and not second.remote
