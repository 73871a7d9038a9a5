"""config.xover_pythonpath: the processes xover starts import this xover, and nothing else of its checkout stands in
for a user's own package (before: the checkout's root went first on every rank's PYTHONPATH, and a user's `bench`
on theirs was the checkout's bench/: `module 'bench' has no attribute 'LR'`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from xover import config
from xover.engines import HOROVOD, TORCH
from xover.recipes import Recipe
from xover.run.jobs import JobSpec
from xover.run.schedule import RunContext, worker_env

ROOT = Path(__file__).resolve().parents[2]


def test_the_checkouts_pythonpath_folder_holds_only_this_xover():
    folder = ROOT / "pythonpath"
    assert config.XOVER_PATH_FIRST == str(folder)
    assert sorted(entry.name for entry in folder.iterdir()) == ["xover"]
    assert (folder / "xover").resolve() == ROOT / "xover"


def test_the_users_entries_follow_in_their_order():
    assert config.xover_pythonpath(None) == str(ROOT / "pythonpath")
    assert config.xover_pythonpath(f"/a{os.pathsep}/b").split(os.pathsep) == [str(ROOT / "pythonpath"), "/a", "/b"]


def test_without_the_folder_the_root_goes_after_the_users_entries(monkeypatch):
    """xover installed (the root is site-packages) or a copy that lost the link: nothing of the root goes first."""
    monkeypatch.setattr(config, "XOVER_PATH_FIRST", None)
    assert config.xover_pythonpath(None) == config.XOVER_ROOT
    assert config.xover_pythonpath("/a").split(os.pathsep) == ["/a", config.XOVER_ROOT]
    assert config.xover_pythonpath(config.XOVER_ROOT) == config.XOVER_ROOT


def test_a_folder_with_more_than_xover_or_a_broken_link_is_not_taken(tmp_path):
    (tmp_path / "xover").symlink_to(ROOT / "xover")
    assert config._only_xover(tmp_path)
    (tmp_path / "bench").mkdir()
    assert not config._only_xover(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    (other / "xover").symlink_to(tmp_path / "missing")
    assert not config._only_xover(other)


def test_a_user_package_named_like_a_folder_of_the_checkout_is_the_users(tmp_path):
    """A process started with xover's PYTHONPATH imports xover from this checkout, and the user's `bench`."""
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "__init__.py").write_text("LR = 0.5\n")
    code = "import bench, xover; print(bench.LR, xover.__file__)"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": config.xover_pythonpath(str(tmp_path))}
    found = subprocess.run([sys.executable, "-c", code], cwd="/", env=env, capture_output=True, text=True, timeout=60)
    assert found.returncode == 0, found.stderr
    lr, where = found.stdout.split()
    assert lr == "0.5" and Path(where).resolve() == ROOT / "xover" / "__init__.py"


RECIPE = Recipe(name="j", model="mlp", dataset="synthetic", batch_size=1, optimizer="sgd", lr=0.1, np=1, seed=0)


def _worker_env(engine: str, tmp_path) -> dict[str, str]:
    job = JobSpec(name="j", recipe=RECIPE, devices={"localhost": [0]}, engine=engine)
    context = RunContext(recorder=None, experiment_id="e1", results_dir=tmp_path)  # type: ignore[arg-type]
    return worker_env(context, job, 1, None, None)


def _env(engine: str, monkeypatch, tmp_path) -> dict[str, str]:
    monkeypatch.setenv("PYTHONPATH", "/user/lib")
    monkeypatch.delenv("HOROVOD_CYCLE_TIME", raising=False)
    return _worker_env(engine, tmp_path)


def test_a_ranks_pythonpath_is_the_users_behind_the_xover_folder(monkeypatch, tmp_path):
    env = _env(TORCH, monkeypatch, tmp_path)
    assert env["PYTHONPATH"].split(os.pathsep) == [str(ROOT / "pythonpath"), "/user/lib"]


def test_horovods_cycle_time_only_for_horovod_ranks(monkeypatch, tmp_path):
    """Before: HOROVOD_CYCLE_TIME=5 in a torch script's environment too, where nothing reads it."""
    assert "HOROVOD_CYCLE_TIME" not in _env(TORCH, monkeypatch, tmp_path)
    assert _env(HOROVOD, monkeypatch, tmp_path)["HOROVOD_CYCLE_TIME"] == "5"
    monkeypatch.setenv("HOROVOD_CYCLE_TIME", "2")
    assert _worker_env(TORCH, tmp_path)["HOROVOD_CYCLE_TIME"] == "2"  # the user's own, as torchrun would pass it
