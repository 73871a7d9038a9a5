"""Files a user names, written whole or not at all (xover/writes.py): a write that fails part-way (a full disk)
left the plan file cut to its first 4,096 bytes, and a report's file empty, whatever was there before."""

import errno
import os
import stat

import pytest

from xover import writes
from xover.errors import NotWritten, write_problem
from xover.writes import write_whole


def _no_space(descriptor):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_write_that_fails_leaves_the_file_there_as_it_was(tmp_path, monkeypatch):
    plan = tmp_path / "plan.json"
    plan.write_text('{"old": true}\n')
    monkeypatch.setattr(writes.os, "fsync", _no_space)
    with pytest.raises(NotWritten) as failed:
        write_whole(plan, '{"new": true}\n' * 1000)
    assert plan.read_text() == '{"old": true}\n'
    assert sorted(path.name for path in tmp_path.iterdir()) == ["plan.json"]  # no temporary file left
    assert failed.value.filename == str(plan) and failed.value.kept
    assert write_problem(plan, failed.value) == "No space left on device (the file that was there is kept as it was)"


def test_a_new_file_that_fails_is_not_left_behind(tmp_path, monkeypatch):
    monkeypatch.setattr(writes.os, "fsync", _no_space)
    with pytest.raises(NotWritten) as failed:
        write_whole(tmp_path / "r.csv", "a,b\n")
    assert list(tmp_path.iterdir()) == [] and not failed.value.kept
    assert write_problem(tmp_path / "r.csv", failed.value) == "No space left on device"


def test_a_replaced_file_keeps_its_mode_and_a_new_one_gets_the_umask(tmp_path):
    kept = tmp_path / "kept.html"
    kept.write_text("old")
    kept.chmod(0o640)
    write_whole(kept, "new")
    assert kept.read_text() == "new" and stat.S_IMODE(kept.stat().st_mode) == 0o640
    umask = os.umask(0o022)
    try:
        write_whole(tmp_path / "new.html", "new")
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "new.html").stat().st_mode) == 0o644


def test_a_private_file_is_0600_whatever_was_there_and_never_wider_meanwhile(tmp_path, monkeypatch):
    plan = tmp_path / "plan.json"
    plan.write_text("old")
    plan.chmod(0o644)
    modes = []
    fsync = os.fsync
    monkeypatch.setattr(writes.os, "fsync", lambda descriptor: (modes.append(os.fstat(descriptor).st_mode), fsync(descriptor)))
    write_whole(plan, "secret", private=True)
    assert stat.S_IMODE(plan.stat().st_mode) == 0o600 and plan.read_text() == "secret"
    assert [stat.S_IMODE(mode) for mode in modes] == [0o600]  # the temporary file, holding the secret


def test_a_link_is_followed_and_stays_a_link(tmp_path):
    target = tmp_path / "real.json"
    target.write_text("old")
    link = tmp_path / "plan.json"
    link.symlink_to(target)
    write_whole(link, "new")
    assert link.is_symlink() and target.read_text() == "new"


def test_a_device_is_written_into_not_replaced(tmp_path):
    write_whole("/dev/null", "text")  # as root, a rename would have replaced /dev/null itself
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_file_to_write_that_is_a_folder_is_called_one():
    """A probe, 2026-12-07: `plan --out DIR/` said 'cannot write the plan file: Is a directory'."""
    assert write_problem("/tmp", IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))) == (
        "it is a folder: name a file (in it, or beside it)")
