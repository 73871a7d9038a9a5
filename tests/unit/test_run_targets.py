"""What `xover run` was asked to run (run/targets.py) and what it tells a user to do before --seconds
(run/traits.py): pure logic, no job started."""

import shlex

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
    assert shlex.split(command) == ["xover", "profile", "--script", SCRIPT, "--engine", "torch", "--np", "1",
                                    "--bandwidth", "1gbit", "--", "--steps", "9", "--token", "***"]
    [group] = _targets(["mlp-digits"], [], None).groups
    assert profile_command(group.jobs[0], HOST) == "xover profile recipes/mlp-digits.toml --engine horovod --np 1"
