"""docs/extending.md's examples, as the page shows them: each registered, then offered and used."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from xover import engines
from xover.recipes import load_recipe
from xover.run.jobs import job_for
from xover.run.ranks import ENGINE_RANKS, ranks_of

PAGE = Path(__file__).resolve().parents[2] / "docs" / "extending.md"


def example(section: str) -> str:
    """The first Python block under the page's `## {section}`."""
    text = PAGE.read_text().split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", text, re.DOTALL).group(1)


def xover_with(section: str, *args: str) -> subprocess.CompletedProcess:
    """`xover ARGS` with the section's example registered before the command line is built."""
    program = example(section) + "\nfrom xover.cli import app\napp()\n"
    return subprocess.run([sys.executable, "-c", program, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "250"})


@pytest.fixture
def registries():
    """The registries as they were, after the test (the examples register into them)."""
    from xover.run.launchers import LAUNCHERS

    saved = dict(engines.ENGINES), dict(LAUNCHERS), dict(ENGINE_RANKS)
    yield
    for registry, before in zip((engines.ENGINES, LAUNCHERS, ENGINE_RANKS), saved):
        registry.clear()
        registry.update(before)


def test_an_engine_added_as_the_page_shows_is_offered_and_launches_its_jobs(registries, tmp_path):
    shown = xover_with("Adding an engine", "run", "--help")
    assert shown.returncode == 0, shown.stderr
    assert "or torch-module (python -m torch.distributed.run" in shown.stdout
    exec(example("Adding an engine"), {})
    job_file = tmp_path / "ddp.toml"
    script = PAGE.parents[1] / "recipes" / "examples" / "ddp_digits.py"
    job_file.write_text(f'name = "ddp"\nscript = "{script}"\nargs = ["--steps", "3"]\nnp = 2\n'
                        'engine = "torch-module"\n')
    job = job_for(load_recipe(str(job_file)))
    assert job.engine == "torch-module"
    [command] = ranks_of(job.engine).launch_commands(job, tmp_path, tmp_path / "spec.json", {}, [])
    # the workers run torch's worker side (its shim), which the engine names as its runtime
    assert command == [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                       "-m", "xover.runtime.script_shim", "torch", str(script), "--steps", "3"]


def test_a_launcher_added_as_the_page_shows_is_offered_and_used(tmp_path):
    shown = xover_with("Adding a launcher", "run", "--help")
    assert shown.returncode == 0, shown.stderr
    assert "print: write the command lines" in shown.stdout and "--print-to" in shown.stdout
    refused = xover_with("Adding a launcher", "run", "--group", "mlp-synthetic", "--launcher", "print")
    assert refused.returncode == 2 and "--launcher print: give --print-to FILE" in refused.stderr
    stray = xover_with("Adding a launcher", "run", "--group", "mlp-synthetic", "--print-to", "x.txt")
    assert stray.returncode == 2 and "--print-to: for --launcher print" in stray.stderr
    written = tmp_path / "commands.txt"
    used = xover_with("Adding a launcher", "run", "--group", "mlp-synthetic", "--mode", "crossover",
                      "--launcher", "print", "--print-to", str(written))
    assert used.returncode == 0, used.stderr
    [line] = written.read_text().splitlines()
    assert line.startswith("crossover mlp-synthetic: ") and "horovodrun" in line and "-np 2" in line


def test_the_kubernetes_launcher_as_the_page_sketches_it_is_its_own_module_and_offered(tmp_path):
    """The worked example needs its own module only: registered when loaded, offered with its options, and
    held to what a scheduler's launcher runs (a plan file, no shaped link), before kubectl is ever asked."""
    section = "Adding a scheduler's launcher: Kubernetes, a worked example"
    shown = xover_with(section, "run", "--help")
    assert shown.returncode == 0, shown.stderr
    assert "kubernetes: each group of the plan one Kubernetes Indexed Job" in shown.stdout
    assert "--namespace" in shown.stdout and "--image" in shown.stdout
    refused = xover_with(section, "run", "--group", "mlp-synthetic", "--launcher", "kubernetes")
    assert refused.returncode == 2 and "--launcher kubernetes runs a plan file (each group one Kubernetes job)" in \
        refused.stderr
    stray = xover_with(section, "run", "--group", "mlp-synthetic", "--image", "x")
    assert stray.returncode == 2 and "--image: for --launcher kubernetes" in stray.stderr


def test_a_turn_policy_added_as_the_page_shows_predicts_and_decides_turns():
    from xover.plan import JobProfile, make_plan
    from xover.turns.policies import POLICIES, DeviceTurns, make_policy

    saved = dict(POLICIES)
    try:
        exec(example("Adding a turn policy"), {})
        policy = make_policy("lowest-slot-first")
        turns = DeviceTurns(order=[0, 1])
        turns.request(1, 0.0, new_iteration=True)
        turns.request(0, 0.1, new_iteration=True)
        assert policy.choose(turns, 0.2) == (0, False)  # slot 0 first, though slot 1 asked first
        jobs = [JobProfile("compute", devices=1, compute_ms=80.0, comm_ms=20.0, memory_gb=0.1),
                JobProfile("comm", devices=1, compute_ms=20.0, comm_ms=80.0, memory_gb=0.1)]
        plan = make_plan(jobs, [("localhost", 1)], policy="lowest-slot-first", min_gain_margin=0.0)
        assert plan.policy == "lowest-slot-first" and plan.groups
        assert plan.groups[0].predicted_by_sharing.get("crossover", 0.0) > 1.0  # the simulation ran it
    finally:
        POLICIES.clear()
        POLICIES.update(saved)
