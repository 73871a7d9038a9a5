"""The launcher registry: what `xover run --launcher` offers, and the one-line refusals of options a
launcher does not take or inputs it cannot run (the launches themselves are tested end to end)."""

import pytest

from xover.errors import XoverError
from xover.links import HOST, Link
from xover.run.launchers import LAUNCHERS, LaunchRequest, check_launcher_options, launcher_named, launchers_help


def _request(**fields):
    from xover.run.commands import RunOptions

    return LaunchRequest(store=None, groups=[], units=[], options=RunOptions(**fields), link=HOST)


def test_the_registry_names_each_launcher_once_with_its_help():
    assert list(LAUNCHERS) == ["local", "slurm"]
    assert all(launcher_named(name).name == name for name in LAUNCHERS)
    assert launchers_help().startswith("local: ") and "slurm: " in launchers_help()


def test_a_checkout_run_without_installed_metadata_has_its_launchers(tmp_path):
    """The GPU check runs xover from a checkout on PYTHONPATH: no package metadata names xover's own
    launchers there (on 2026-12-04 every `xover run` on the GPU machine answered '--launcher local: choose ')."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    code = (
        "import importlib.metadata as m; m.entry_points = lambda **kw: []\n"
        "from xover.run.launchers import LAUNCHERS; print(' '.join(LAUNCHERS))"
    )
    found = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
                           capture_output=True, text=True, timeout=120)
    assert found.returncode == 0 and found.stdout.split() == ["local", "slurm"], found.stderr[-2000:]


def test_an_unknown_launcher_is_one_line_naming_the_choices():
    with pytest.raises(XoverError, match=r"^--launcher kubernetes: choose local or slurm$"):
        launcher_named("kubernetes")


def test_options_of_another_launcher_are_refused_by_name():
    check_launcher_options("slurm", {"partition": "gpu", "account": None, "time_limit": "10"})
    check_launcher_options("local", {"partition": None, "account": None, "time_limit": None})
    with pytest.raises(XoverError, match=r"^--partition, --time-limit: for --launcher slurm$"):
        check_launcher_options("local", {"partition": "gpu", "account": None, "time_limit": "10"})


def test_slurm_runs_plan_files_only_without_a_shaped_link_or_mps():
    launcher_named("slurm").check(_request(plan_path="plan.json"))
    launcher_named("local").check(_request())
    for fields in ({}, {"plan_path": "plan.json", "link": Link.parse("1gbit")}, {"plan_path": "plan.json", "mps": True}):
        with pytest.raises(XoverError, match="--launcher slurm runs a plan file"):
            launcher_named("slurm").check(_request(**fields))


def test_horovodrun_gets_an_allow_list_of_the_environment_not_all_of_it():
    """Issue 52, finding 4: horovodrun copies every variable of its environment onto its ranks' command
    lines (ssh's for another host); passwords, cloud keys and tokens must not be among them."""
    from xover.run.external.horovodrun import horovodrun_env

    env = {"PGPASSWORD": "pw", "AWS_SECRET_ACCESS_KEY": "k", "GITHUB_TOKEN": "t", "WANDB_API_KEY": "w",
           "XOVER_DB": "postgresql://u:pw@h/db", "PATH": "/usr/bin", "HOME": "/root", "XOVER_JOB": "j",
           "HOROVOD_CYCLE_TIME": "5", "PYTHONPATH": "/x", "OMP_NUM_THREADS": "1", "MY_SETTING": "v"}
    # the metric token and a job file's own variables (MY_SETTING) reach the ranks through a private file (issue 58)
    assert horovodrun_env({**env, "XOVER_METRIC_TOKEN": "tk"}, ("XOVER_DB", "MY_SETTING")) == {
        "PATH": "/usr/bin", "HOME": "/root", "XOVER_JOB": "j", "HOROVOD_CYCLE_TIME": "5", "PYTHONPATH": "/x",
        "OMP_NUM_THREADS": "1"}
