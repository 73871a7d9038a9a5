"""What `xover run` was asked to run (run/targets.py) and what it tells a user to do before --seconds
(run/traits.py): pure logic, no job started."""

import dataclasses
import re
import shlex

import pytest

from xover.errors import XoverError
from xover.links import HOST, Link
from xover.run.targets import run_targets
from xover.run.traits import profile_command

SCRIPT = "recipes/examples/ddp_digits.py"


def _targets(targets, scripts, iterations):
    return run_targets(targets, group=bool(targets), scripts=scripts, script_args=["--steps", "100"], np=1,
                       hosts=None, iterations=iterations, engine=None, allow_changed=False, link=None,
                       launcher="local", policy=None)


def test_iterations_cap_a_script_beside_recipes_in_a_group_as_they_cap_the_recipes():
    """`--group mlp-digits --script S --iterations 5`: the script ran its own 100 steps (its cap was dropped
    where scripts joined recipes)."""
    [group] = _targets(["mlp-digits"], [SCRIPT], 5).groups
    assert [(job.name, job.recipe.iterations) for job in group.jobs] == [("mlp-digits", 5), ("ddp_digits", 5)]
    [group] = _targets([], [SCRIPT, SCRIPT], 5).groups
    assert [job.recipe.iterations for job in group.jobs] == [5, 5]
    [group] = _targets(["mlp-digits"], [SCRIPT], None).groups
    assert group.jobs[1].recipe.iterations is None  # no cap asked: the script's own length


def test_the_profile_a_script_needs_is_asked_for_with_its_arguments_and_masked():
    """A --script job's profile is keyed by its arguments: `xover profile SCRIPT` read the script as a job
    file (a TOML syntax error)."""
    [group] = run_targets([], group=False, scripts=[SCRIPT], script_args=["--steps", "9", "--token", "s3cret"],
                          np=1, hosts=None, iterations=None, engine=None, allow_changed=False, link=None,
                          launcher="local", policy=None).groups
    command = profile_command(group.jobs[0], Link.parse("1gbit"))
    assert shlex.split(command) == ["xover", "profile", "--script", SCRIPT, "--np", "1", "--bandwidth", "1gbit",
                                    "--engine", "torch", "--", "--steps", "9", "--token", "***"]
    [group] = _targets(["mlp-digits"], [], None).groups
    assert profile_command(group.jobs[0], HOST) == "xover profile recipes/mlp-digits.toml --engine horovod --np 1"
    # `xover plan`'s hint is written by the same function: a script's arguments after the options
    from xover.recipes import profile_command as recipe_command
    assert recipe_command(group.jobs[0].recipe, "--force").startswith("xover profile recipes/mlp-digits.toml --force")


def test_a_plan_placed_past_this_machines_devices_is_told_to_plan_again_not_to_use_flags_a_plan_refuses():
    import pytest

    from xover.errors import XoverError
    from xover.run.ranks import check_devices

    [group] = _targets(["mlp-digits"], [], None).groups
    job = group.jobs[0]
    job.devices = {"localhost": [0, 63]}
    with pytest.raises(XoverError, match=r"plan again for it \(xover plan \.\.\. --devices \d+\) or across hosts"):
        check_devices([job], planned=True)
    with pytest.raises(XoverError, match=r"lower np \(--np\) or add hosts with -H"):
        check_devices([job])


def test_a_plan_run_at_other_lengths_does_not_set_the_plans_makespans_beside_its_own(capsys):
    """`xover run PLAN --iterations 6` printed 'makespan 9.9 s measured ... the plan predicted 29.4 s': the
    prediction was for the plan's lengths."""
    from xover.plan import Plan
    from xover.results import RunOutcome, RunResult
    from xover.run.commands import schedule_summary
    from xover.views import show_run

    plan = Plan(algo="none", hosts=[], groups=[], unplaced=[], predicted_aggregate_gain=1.0,
                predicted_makespan_ms=29_400, sequential_makespan_ms=33_600)
    jobs = [RunResult(name="a", group=0, status="finished", started_at="2026-12-07 00:00:00.100000",
                      ended_at="2026-12-07 00:00:10")]
    for as_planned, said in ((True, "the plan predicted 29.4 s, and 33.6 s for its jobs one after another"),
                             (False, "the plan's predicted makespans are for its jobs' planned lengths, and this "
                                     "run gave them others")):
        schedule = schedule_summary(jobs, plan, as_planned)
        assert schedule["lengths_as_planned"] is as_planned and schedule["measured_makespan_s"] == pytest.approx(9.9)
        show_run(RunOutcome(experiment="e", results_dir="/tmp/e", link=HOST, modes=["planned"], policies=[],
                            jobs=[], groups=[], schedule=schedule), as_json=False)
        shown = " ".join(capsys.readouterr().out.split())
        assert "makespan 9.9 s measured" in shown and said in shown, shown
        assert ("29.4" in shown) is as_planned


def test_a_plan_run_one_after_another_says_its_makespan_beside_the_plans_prediction_for_it(capsys):
    """`xover run PLAN --mode sequential` printed no makespan and its JSON had no `schedule` (the probe's F6), though
    the planned run's own line sends users to it and `xover report` has one."""
    from xover.plan import Plan
    from xover.results import RunOutcome, RunResult
    from xover.run.commands import schedule_summary
    from xover.views import show_run

    plan = Plan(algo="none", hosts=[], groups=[], unplaced=[], predicted_aggregate_gain=1.0,
                predicted_makespan_ms=29_400, sequential_makespan_ms=33_600)
    jobs = [RunResult(name=name, group=0, status="finished", started_at=start, ended_at=end) for name, start, end in (
        ("a", "2026-12-07 00:00:00", "2026-12-07 00:00:15"), ("b", "2026-12-07 00:00:16", "2026-12-07 00:00:36.5"))]
    schedule = schedule_summary(jobs, plan, True, one_after_another=True)
    assert schedule["one_after_another"] is True and schedule["measured_makespan_s"] == pytest.approx(36.5)
    show_run(RunOutcome(experiment="e", results_dir="/tmp/e", link=HOST, modes=["sequential"], policies=[],
                        jobs=[], groups=[], schedule=schedule), as_json=False)
    shown = " ".join(capsys.readouterr().out.split())
    assert ("makespan 36.5 s measured (its jobs one after another; the plan predicted 33.6 s for them; `xover report "
            "e` sets it beside the same plan's run as planned") in shown, shown
    assert "ran at once" not in shown


def test_a_plan_run_in_one_way_is_set_beside_the_plans_prediction_for_that_way():
    """`xover run PLAN --mode concurrent` showed the plan's crossover prediction beside concurrent's measurement."""
    from xover.run.commands import predicted_for
    from xover.run.jobs import GroupToRun

    group = GroupToRun(0, [], predicted_gain=1.29, sharing="concurrent",
                       predicted_by_sharing={"crossover": 1.29, "concurrent": 1.43})
    assert predicted_for(group, "concurrent") == 1.43 and predicted_for(group, "crossover") == 1.29
    assert predicted_for(group, "adaptive") == 1.43  # it settles in the better
    assert predicted_for(group, "mps") is None  # not predicted
    assert predicted_for(GroupToRun(1, [], predicted_gain=1.0), "crossover") == 1.0  # a job alone


def test_the_profile_a_job_across_hosts_needs_names_its_hosts():
    [group] = _targets(["mlp-digits"], [], None).groups
    job = group.jobs[0]
    job.devices = {"xo-h1": [0], "xo-h2": [0]}
    assert shlex.split(profile_command(job, HOST))[-2:] == ["-H", job.hosts]


def test_a_plan_run_with_its_own_iterations_keeps_its_lengths():
    """`xover run PLAN --iterations 5` where the plan's jobs run 5 said the run gave them other lengths; a job file
    without `iterations` (its script run to its own end, the plan's 100 a default) was said to keep the plan's length,
    where `xover report` of the same run said otherwise (helper-92's probe, 2026-12-07)."""
    from types import SimpleNamespace

    from xover.run.commands import lengths_as_planned

    plan = SimpleNamespace(groups=[SimpleNamespace(jobs=[SimpleNamespace(name="a", iterations=5),
                                                         SimpleNamespace(name="b", iterations=5)])],
                           predicted_for_its_jobs=True)

    def ran(a, b):
        return [SimpleNamespace(name="a", iterations_planned=a), SimpleNamespace(name="b", iterations_planned=b)]

    kept = SimpleNamespace(seconds=None)
    assert lengths_as_planned(plan, kept, ran(5, 5))
    assert not lengths_as_planned(plan, kept, ran(6, 6))  # --iterations 6
    assert not lengths_as_planned(plan, kept, ran(5, None))  # a script to its own end
    assert not lengths_as_planned(plan, SimpleNamespace(seconds=15.0), ran(5, 5))
    # a plan file whose jobs were edited by hand after its predictions (Plan.predicted_for_its_jobs)
    edited = SimpleNamespace(**{**vars(plan), "predicted_for_its_jobs": False})
    assert not lengths_as_planned(edited, kept, ran(5, 5))


def _plan_file(tmp_path, device_kind=None, host="localhost"):
    """A plan of mlp-digits and resnet-digits in one group on two devices of `host`, as `xover plan` writes it."""
    import json

    from xover.plan import JobProfile, make_plan, plan_to_dict

    jobs = [JobProfile("mlp-digits", 1, 100.0, 10.0, 1.0), JobProfile("resnet-digits", 1, 10.0, 100.0, 1.0)]
    plan = make_plan(jobs, [(host, 1)])
    if device_kind is not None:
        plan = dataclasses.replace(plan, link="host", engine="horovod", device_kind=device_kind)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan_to_dict(plan), indent=1))
    return path


def _run_plan(path, launcher="local"):
    return run_targets([str(path)], group=False, scripts=[], script_args=[], np=None, hosts=None, iterations=None,
                       engine=None, allow_changed=False, link=None, launcher=launcher, policy=None)


@pytest.mark.parametrize(("before", "after", "key", "where"), [
    ('"sharing": ', '"sharing": "concurrent", "sharing": ', "sharing", "in groups[0]"),  # the edit above the old
    ('"groups": ', '"groups": [], "groups": ', "groups", "at the top level"),
    ('"compute_ms": ', '"compute_ms": 1, "compute_ms": ', "compute_ms", "in jobs.mlp-digits"),
])
def test_a_plan_file_giving_a_key_twice_is_refused_naming_the_file_the_key_and_where(tmp_path, before, after, key,
                                                                                     where):
    """json.load kept the last of two "sharing" keys of a group: the run did what one of them said, silently."""
    path = _plan_file(tmp_path)
    _run_plan(path)  # as written, it runs
    path.write_text(path.read_text().replace(before, after, 1))
    with pytest.raises(XoverError, match=rf"^{re.escape(str(path))}: the key '{key}' is given twice {re.escape(where)} "
                                         r"\(a JSON reader keeps only the last.*\): remove one of them$"):
        _run_plan(path)


def test_a_plan_made_for_gpus_is_refused_on_a_machine_without_one(tmp_path, monkeypatch):
    """A plan whose profiles were taken on GPUs ran on this machine's CPU cores without a word."""
    import xover.run.targets as targets

    monkeypatch.delenv("XOVER_CPU_ONLY", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(targets, "gpu_count", lambda: 0)
    gpu_plan = _plan_file(tmp_path, "gpu")
    with pytest.raises(XoverError, match=rf"^{re.escape(str(gpu_plan))}: the plan was made for GPUs \(plan field "
                                         r"'device_kind' is 'gpu'.*\), and this machine has no NVIDIA GPU visible: "
                                         r"profile the jobs and plan them again on this machine .* or run this plan "
                                         r"on CPU cores anyway with XOVER_CPU_ONLY=1"):
        _run_plan(gpu_plan)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(XoverError, match=r"no NVIDIA GPU visible \(CUDA_VISIBLE_DEVICES=''\)"):
        _run_plan(gpu_plan)
    monkeypatch.setenv("XOVER_CPU_ONLY", "1")  # on CPU cores, as asked: said by the run
    assert _run_plan(gpu_plan).gpu_plan_on_cpus
    monkeypatch.delenv("XOVER_CPU_ONLY")
    assert not _run_plan(gpu_plan, launcher="slurm").gpu_plan_on_cpus  # Slurm's nodes have what the plan asks
    monkeypatch.setattr(targets, "gpu_count", lambda: 2)
    assert not _run_plan(gpu_plan).gpu_plan_on_cpus
    monkeypatch.setattr(targets, "gpu_count", lambda: 0)
    for kind in ("cpu", None):  # made for CPUs, or from a trace or an older xover: it runs on what is here
        assert not _run_plan(_plan_file(tmp_path, kind)).gpu_plan_on_cpus
    assert not _run_plan(_plan_file(tmp_path, "gpu", host="xo-h1")).gpu_plan_on_cpus  # another host's GPUs


def test_two_copies_of_a_script_whose_name_leaves_no_room_for_the_copys_mark_are_refused(tmp_path):
    """A 200-character script given twice: its copy was named name#2 (202 characters), over the store's
    column and the rank's start record, which was then thrown away as not this run's."""
    for length, refused in ((199, True), (198, False)):
        script = tmp_path / f"{'L' * length}.py"
        script.write_text(open(SCRIPT).read())
        if refused:
            with pytest.raises(XoverError, match=r"copy's name \(201 characters, name#2\).*at most 198 characters"):
                _targets([], [str(script), str(script)], 5)
        else:
            [group] = _targets([], [str(script), str(script)], 5).groups
            assert [len(job.name) for job in group.jobs] == [198, 200]


@pytest.mark.parametrize("policy, modes, picks, said", [
    # helper-90's probe, 2026-12-07: `xover run PLAN --policy all` of a plan that picked concurrent said nothing
    ("all", ["planned"], ["concurrent"], "--policy all: no group of the plan takes turns (it picked concurrent), so "
     "it changes nothing; `--mode crossover` runs the plan's groups taking turns under it"),
    ("round-robin", ["planned"], ["concurrent", "mps"], "it picked concurrent, mps"),
    ("all", ["planned"], ["concurrent", "adaptive"], "--policy all: a plan's run takes turns under one policy "
     "(work-conserving); `--mode crossover --policy all` compares every policy on the plan's groups"),
    ("round-robin", ["sequential", "concurrent"], [], "--policy round-robin: --mode sequential,concurrent takes no "
     "turns, so it changes nothing"),
    ("round-robin", ["planned"], ["crossover"], None),
    ("all", ["sequential", "crossover"], [], None),
    ("all", ["adaptive"], [], None),
    (None, ["concurrent"], [], None),
])
def test_a_policy_the_run_has_no_use_for_is_said(policy, modes, picks, said):
    from xover.run.commands import policy_unused
    from xover.run.jobs import GroupToRun

    groups = [GroupToRun(index, [], sharing=pick) for index, pick in enumerate(picks)] or [GroupToRun(0, [])]
    if said is None:
        assert policy_unused(policy, modes, groups) is None
    else:
        assert said in policy_unused(policy, modes, groups)
