"""A set of files replaced together (xover/writes.py, write_all_whole). Before: `xover report --format csv --out
DIR` wrote its CSV files one after another, each whole, so a write that failed at the second or third (a full
disk, a folder where a file goes) left the first already replaced: this run's jobs.csv beside another run's
iterations.csv. Now every new file is written beside its target first and renamed over only when all are
written; a failure removes them and leaves the whole set as it was, and says so."""

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import recorded_runs

from xover import writes
from xover.errors import NotWritten, write_problem
from xover.writes import write_all_whole

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "tests" / "assets" / "replay"


def _old_set(folder: Path, names: list[str]) -> dict[Path, str]:
    files = {folder / name: f"old {name}\n" for name in names}
    for path, text in files.items():
        path.write_text(text)
    return files


def _fsync_failing_at(monkeypatch, failing: int) -> None:
    calls, fsync = [], os.fsync

    def fsync_or_full(descriptor):
        calls.append(descriptor)
        if len(calls) == failing:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        fsync(descriptor)

    monkeypatch.setattr(writes.os, "fsync", fsync_or_full)


def test_a_set_whose_third_write_fails_is_left_whole_as_it_was(tmp_path, monkeypatch):
    old = _old_set(tmp_path, ["simulation.csv", "jobs.csv", "utilisation.csv"])
    _fsync_failing_at(monkeypatch, 3)
    with pytest.raises(NotWritten) as failed:
        write_all_whole({path: f"new {path.name}\n" for path in old})
    assert {path: path.read_text() for path in old} == old  # the first two are not replaced either
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(path.name for path in old)  # no temporary
    third = tmp_path / "utilisation.csv"
    assert failed.value.filename == str(third) and failed.value.kept and not failed.value.replaced
    assert write_problem(third, failed.value) == (
        "No space left on device (the file that was there is kept as it was); none of its set was replaced "
        f"({tmp_path / 'simulation.csv'}, {tmp_path / 'jobs.csv'} left as they were)"
    )


def test_a_folder_where_a_file_of_the_set_goes_leaves_the_others_as_they_were(tmp_path):
    old = _old_set(tmp_path, ["jobs.csv"])
    (tmp_path / "iterations.csv").mkdir()
    with pytest.raises(NotWritten) as failed:
        write_all_whole({tmp_path / "jobs.csv": "new\n", tmp_path / "iterations.csv": "new\n"})
    assert (tmp_path / "jobs.csv").read_text() == old[tmp_path / "jobs.csv"]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["iterations.csv", "jobs.csv"]
    assert "none of its set was replaced" in write_problem(tmp_path / "iterations.csv", failed.value)


def test_a_set_written_whole_replaces_every_file_and_keeps_their_modes(tmp_path):
    old = _old_set(tmp_path, ["a.csv", "b.csv"])
    (tmp_path / "b.csv").chmod(0o640)
    write_all_whole({**{path: f"new {path.name}" for path in old}, tmp_path / "c.csv": "new c.csv"})
    assert [path.read_text() for path in sorted(tmp_path.iterdir())] == ["new a.csv", "new b.csv", "new c.csv"]
    assert (tmp_path / "b.csv").stat().st_mode & 0o777 == 0o640


def test_a_rename_refused_part_way_names_what_was_replaced(tmp_path, monkeypatch):
    old = _old_set(tmp_path, ["a.csv", "b.csv", "c.csv"])
    renames, replace = [], os.replace

    def replace_twice(source, target):
        renames.append(target)
        if len(renames) == 2:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        replace(source, target)

    monkeypatch.setattr(writes.os, "replace", replace_twice)
    with pytest.raises(NotWritten) as failed:
        write_all_whole({path: "new" for path in old})
    assert [path.read_text() for path in sorted(old)] == ["new", "old b.csv\n", "old c.csv\n"]
    assert not [path for path in tmp_path.iterdir() if path.name.startswith(".xover-")]
    assert write_problem(tmp_path / "b.csv", failed.value) == (
        f"Input/output error (the file that was there is kept as it was); {tmp_path / 'a.csv'} replaced already, "
        "the others left as they were"
    )


# ------------------------------------------------------------------ the command: xover report --format csv --out


@pytest.fixture
def experiment_store(tmp_path):
    store, recorder, _ = recorded_runs(
        tmp_path, [{"name": "a", "mode": "solo", "hosts": "localhost:1", "np": 1, "status": "finished"}]
    )
    recorder.finish("finished")
    store.close()
    return tmp_path / "x.db"


@pytest.fixture
def simulation_store(tmp_path):
    made = _xover(
        "--db", tmp_path / "sim.db", "simulate", TRACE / "fifo_srtf.csv", "--profiles", TRACE / "profiles.csv",
        "--cluster", "1x2", "--policy", "fifo", results=tmp_path / "results",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    return tmp_path / "sim.db"


def _xover(*args, results: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "xover", *map(str, args)],
        cwd=ROOT,
        env={**os.environ, "XOVER_RESULTS": str(results)},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize(
    ("kind", "names", "folder_at"),
    [
        ("experiment", ["jobs.csv", "iterations.csv"], 1),
        ("simulation", ["simulation.csv", "jobs.csv", "utilisation.csv"], 2),
    ],
)
def test_a_csv_report_that_fails_at_a_later_file_keeps_the_earlier_set_whole(tmp_path, request, kind, names, folder_at):
    store = request.getfixturevalue(f"{kind}_store")
    out = tmp_path / "out"
    out.mkdir()
    old = _old_set(out, [name for index, name in enumerate(names) if index != folder_at])
    # the last file a link into a folder that is not there: a write that fails once the others are written (the
    # command refuses a folder or a device there before it writes; a full disk needs root to stage)
    (out / names[folder_at]).symlink_to(out / "gone" / "x.csv")
    done = _xover("--db", store, "report", "latest", "--format", "csv", "--out", out, results=tmp_path / "results")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert {path: path.read_text() for path in old} == old  # none replaced: the files written before it included
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert (
        f"cannot write {out / names[folder_at]}: No such file or directory; none of its set was replaced ("
        in done.stderr
    )
    assert sorted(path.name for path in out.iterdir()) == sorted(names)  # no temporary file left
