"""Files xover makes or opens where other users can plant names (issue 52, findings 3, 8, 9, 12)."""

from __future__ import annotations

import fcntl
import json
import os
import stat
import time

import pytest

from xover.errors import XoverError
from xover.run import leases
from xover.run.leases import DeviceLeases


def test_a_link_planted_as_the_stores_migration_lock_is_not_truncated(tmp_path):
    """Finding 9. Before: `open(DB.migrate.lock, "w")` followed a link there and emptied its target."""
    from xover.store.session import open_store

    victim = tmp_path / "victim.txt"
    victim.write_text("someone's precious file\n")
    (tmp_path / "x.db.migrate.lock").symlink_to(victim)
    store = open_store(f"sqlite:///{tmp_path / 'x.db'}")
    store.close()
    assert victim.read_text() == "someone's precious file\n"
    assert (tmp_path / "x.db.migrate.lock").is_symlink()


def test_the_migration_lock_is_created_without_truncating_an_existing_one(tmp_path):
    lock = tmp_path / "x.db.migrate.lock"
    lock.write_text("kept")
    from xover.store.session import open_store

    open_store(f"sqlite:///{tmp_path / 'x.db'}").close()
    assert lock.read_text() == "kept"
    open_store(f"sqlite:///{tmp_path / 'y.db'}").close()
    assert stat.S_ISREG(os.lstat(tmp_path / "y.db.migrate.lock").st_mode)


def test_a_file_refused_as_a_store_is_left_without_a_lock_beside_it(tmp_path):
    """A text file, or a folder, given as the store was refused and left a `.migrate.lock` beside it; a lock
    that was there before is kept."""
    from xover.store.session import StoreError, open_store

    (tmp_path / "notes.txt").write_text("not a database\n")
    (tmp_path / "folder").mkdir()
    (tmp_path / "kept.txt").write_text("not a database either\n")
    (tmp_path / "kept.txt.migrate.lock").write_text("")
    for name in ("notes.txt", "folder", "kept.txt"):
        with pytest.raises(StoreError):
            open_store(f"sqlite:///{tmp_path / name}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder", "kept.txt", "kept.txt.migrate.lock", "notes.txt"]
    assert (tmp_path / "notes.txt").read_text() == "not a database\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="root makes the shared lease folder 1777")
def test_a_new_lease_folder_swapped_for_a_link_is_not_chmodded_through_it(tmp_path, monkeypatch):
    """Finding 8. Before: root created XOVER_LEASE_DIR and then chmod()ed it by name, so that a name
    swapped for a link (under a parent others may write) made the link's target 1777."""
    victim = tmp_path / "victim"
    victim.mkdir(mode=0o700)
    folder = tmp_path / "shared" / "leases"
    real_makedirs = os.makedirs

    def makedirs_then_swapped(path, *args, **kwargs):  # the other user wins the race right after
        real_makedirs(path, *args, **kwargs)
        os.rename(path, str(path) + ".moved")
        os.symlink(victim, path)

    monkeypatch.setenv("XOVER_LEASE_DIR", str(folder))
    monkeypatch.setattr(leases.os, "makedirs", makedirs_then_swapped)
    with pytest.raises(XoverError) as refused:
        leases.lease_dir()
    assert "\n" not in str(refused.value) and str(folder) in str(refused.value)
    assert stat.S_IMODE(victim.stat().st_mode) == 0o700


@pytest.mark.skipif(os.geteuid() != 0, reason="root makes the shared lease folder 1777")
def test_roots_new_lease_folder_is_still_sticky_and_open_to_everyone(tmp_path, monkeypatch):
    monkeypatch.setenv("XOVER_LEASE_DIR", str(tmp_path / "made"))
    assert leases.lease_dir() == str(tmp_path / "made")
    assert stat.S_IMODE((tmp_path / "made").stat().st_mode) == 0o1777


def test_a_lease_folder_that_did_not_exist_is_said_once_made(tmp_path, monkeypatch, capsys):
    """A probe (2026-12-06): XOVER_LEASE_DIR=/nonexistent, a typo, was made without a word, and the run shared
    devices with runs leasing in /tmp unseen."""
    monkeypatch.setenv("XOVER_LEASE_DIR", str(tmp_path / "typo"))
    assert leases.lease_dir() == str(tmp_path / "typo")
    said = capsys.readouterr().err
    assert said.startswith(f"warning: XOVER_LEASE_DIR={tmp_path / 'typo'} did not exist and was created") and (
        "only runs with the same XOVER_LEASE_DIR see" in said
    ), said
    assert leases.lease_dir() == str(tmp_path / "typo") and capsys.readouterr().err == ""  # there now: nothing said


def test_a_deeply_nested_lease_file_is_not_a_traceback(tmp_path, monkeypatch):
    """Finding 12. Before: json.loads of "[" * 4096 raised RecursionError, a traceback."""
    monkeypatch.setenv("XOVER_LEASE_DIR", str(tmp_path))
    name = tmp_path / DeviceLeases._name(("localhost", 0))
    name.write_text("[" * 4096)
    name.chmod(0o666)
    held = DeviceLeases("first")
    assert held.try_acquire([("localhost", 0)]) == {}  # leased; the file is not a record of ours: kept as it is
    assert name.read_text() == "[" * 4096
    held.release()
    fd = os.open(name, os.O_RDONLY)  # someone holds it; its file says nothing readable
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert DeviceLeases("second").try_acquire([("localhost", 0)]) == {("localhost", 0): "another process"}
    finally:
        os.close(fd)


SECRET_URL = "postgresql://xover:s3cret-pw@db.example:5432/xover?sslmode=require"


def test_credentials_are_masked_in_urls_and_query_options():
    from xover.redact import mask_credentials

    assert mask_credentials(f"xover run --db {SECRET_URL}") == \
        "xover run --db postgresql://xover:***@db.example:5432/xover?sslmode=require"
    assert mask_credentials("--db 'postgresql+psycopg://u:p@ss/w@h/db' x") == "--db 'postgresql+psycopg://u:***@h/db' x"
    assert mask_credentials("postgresql://h/db?user=u&password=pw&x=1") == "postgresql://h/db?user=u&password=***&x=1"
    for kept in ("postgresql://xover@db/xover", "sqlite:///results/a:b@c.db", "xover run --group A B", "a:b@c"):
        assert mask_credentials(kept) == kept


def test_the_store_password_is_in_no_lease_file_command_or_report(tmp_path, monkeypatch):
    """Finding 3. Before: the command line, `--db URL` included, was the lease holder written into lease
    files every user can read, the command the store kept, and the report's "command"."""
    import sys

    from xover import cli
    from xover.report.data import experiment_row
    from xover.store.models import Experiment

    monkeypatch.setattr(sys, "argv", ["xover", "run", "--db", SECRET_URL, "--group", "A", "B"])
    command = cli._command_line()
    assert "s3cret-pw" not in command and "xover:***@db.example" in command
    monkeypatch.setenv("XOVER_LEASE_DIR", str(tmp_path))
    held = DeviceLeases(f"experiment e1 (xover run --db {SECRET_URL})")
    assert held.try_acquire([("localhost", 0)]) == {}
    text = (tmp_path / DeviceLeases._name(("localhost", 0))).read_text()
    held.release()
    assert "s3cret-pw" not in text and json.loads(text)["holder"].startswith("experiment e1 (xover run --db postgresql://xover:***@")
    # a row an older xover stored with the password: the report shows it masked
    row = experiment_row(Experiment(id="e1", kind="run", command=f"xover run --db {SECRET_URL}", status="finished",
                                    hosts="localhost"))
    assert "s3cret-pw" not in row.command


def test_a_journal_mode_that_did_not_switch_is_not_taken_for_one_that_did(tmp_path):
    """Finding 10. Before: PRAGMA journal_mode's answer was ignored, and SQLite keeps the old mode
    without an error where it cannot switch: a store in WAL stayed in WAL on a network filesystem
    where xover had chosen the rollback journal."""
    import sqlite3

    from xover.store.session import StoreError, _sqlite_pragmas

    connection = sqlite3.connect(tmp_path / "x.db", isolation_level=None)
    assert connection.execute("PRAGMA journal_mode=WAL").fetchone() == ("wal",)
    connection.execute("CREATE TABLE t (x)")
    connection.execute("BEGIN")
    connection.execute("INSERT INTO t VALUES (1)")  # a transaction: SQLite answers 'wal' and stays there
    with pytest.raises(StoreError) as refused:
        _sqlite_pragmas(connection, None, journal="DELETE")
    assert "wal" in str(refused.value) and "\n" not in str(refused.value)
    connection.execute("ROLLBACK")
    _sqlite_pragmas(connection, None, journal="DELETE")  # it can switch now: no error
    assert connection.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    _sqlite_pragmas(sqlite3.connect(":memory:"), None)  # WAL asked, 'memory' answered: as before


def test_a_lease_folder_given_as_a_url_is_refused_without_its_password(tmp_path, monkeypatch):
    """A probe, 2026-12-07: XOVER_LEASE_DIR='postgresql://u:PW@h/x' (a store's URL in the wrong variable) was made
    as folders postgresql:/u:PW@h/x under the working folder, and the warning printed it whole."""
    from xover.errors import XoverError

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XOVER_LEASE_DIR", "postgresql://u:s3cr3t-X54@h/x")
    with pytest.raises(XoverError) as refused:
        leases.lease_dir()
    assert "a URL, not a folder" in str(refused.value) and "s3cr3t" not in str(refused.value), str(refused.value)
    assert list(tmp_path.iterdir()) == []


def test_a_script_given_as_a_url_is_named_without_its_password(tmp_path):
    from xover.errors import XoverError
    from xover.scripts import detect_scripts_engine

    with pytest.raises(XoverError) as refused:
        detect_scripts_engine(["postgresql://u:s3cr3t-E8@h/x.py"])
    assert "file not found" in str(refused.value) and "s3cr3t" not in str(refused.value), str(refused.value)


def test_a_wait_for_devices_says_now_and_then_that_it_still_waits(tmp_path, monkeypatch):
    """A wait printed one line as it began, however long it lasted: hours of it read as a hung command."""
    from xover.errors import TimedOut

    monkeypatch.setenv("XOVER_LEASE_DIR", str(tmp_path))
    monkeypatch.setattr(leases, "WAIT_SAID_EVERY_S", 0.3)
    holder, waiter = DeviceLeases("holder"), DeviceLeases("waiter")
    assert holder.try_acquire([("localhost", 0)]) == {}
    said = []
    try:
        with pytest.raises(TimedOut):
            waiter.acquire([("localhost", 0)], wait=True, on_wait=lambda busy, waited: said.append(waited),
                           poll_s=0.05, deadline=time.monotonic() + 1.0)
    finally:
        holder.release()
    assert said[0] == 0.0 and len(said) >= 3 and all(0.25 < waited < 1.1 for waited in said[1:]), said
