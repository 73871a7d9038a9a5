"""The GPU check's dry run on the CPU (scripts/gpu_check.sh --cpu) with the small built-in recipes.

Every phase is covered, in three parts: the probe and one comparison whose rows the check's summary is
read for (pair-gloo) run for real; the other phases (parity, which is the same comparison with one rank
per job, and those that on a CPU only run another pair under crossover: pair-nccl, paper, paper-bert,
paper-twins) run the script's own logic with a stand-in for `python -m xover`, which records what each
phase asks of xover; and the recipes those phases bring in (vgg-synthetic, transformer-tokens) run under
crossover for real, once, as the check runs them.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import gpu_check_stand_in

ROOT = Path(__file__).resolve().parents[2]
CROSSOVER_ONLY = {  # phase: its pair on a CPU (scripts/gpu_check.sh: R, M, R50, VGG, BERT under --cpu)
    "pair-nccl": ("resnet-synthetic", "mlp-synthetic"),
    "paper": ("resnet-synthetic", "vgg-synthetic"),
    "paper-bert": ("resnet-synthetic", "transformer-tokens"),
    "paper-twins": ("resnet-synthetic", "resnet-synthetic"),
}


def _gpu_check(tmp_path, *args, python=sys.executable, timeout=600):
    env = {k: v for k, v in os.environ.items() if k not in ("XOVER_DB", "XOVER_RESULTS")}
    result = subprocess.run(["bash", "scripts/gpu_check.sh", "--cpu", "--out", str(tmp_path / "out"), *args],
                            cwd=ROOT, env={**env, "PYTHON": str(python)}, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    steps = "\n".join(line for line in result.stdout.splitlines() if line.startswith("[gpu-check"))
    return result, steps


def test_gpu_check_dry_run_on_the_cpu_runs_every_phase(tmp_path):
    """scripts/gpu_check.sh --cpu, for real: the probe, and a comparison's losses identical to the jobs
    alone in the summary."""
    # the budget the script gives the dry run of every phase (420 s), for two: room for a loaded machine (73 s
    # here idle, 236 s in a loaded CI: three times that still fits)
    # one policy (--policy): the comparison's runs are what is read; round robin adds a run, not a path
    result, steps = _gpu_check(tmp_path, "--phases", "probe,pair-gloo", "--policy", "work-conserving",
                               "--budget", "720", timeout=840)
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "xover run (pair-gloo.run): exit 0" in steps, steps + "\n" + result.stderr[-2000:]
    rows = [line.split(" | ") for line in summary.splitlines() if line.startswith("| ") and "---" not in line][1:]
    # the comparison in full once (the other pairs run crossover alone on a CPU, to stay within minutes)
    modes = [row[5] for row in rows if row[0].strip("| ") == "pair-gloo"]
    assert modes[:3] == ["sequential", "concurrent", "crossover work-conserving"], summary
    assert len(modes) == 4 and modes[3].startswith("adaptive ("), summary  # its settled way and shares of time
    parity = [row[12].strip(" |") for row in rows
              if row[0].strip("| ") == "pair-gloo" and row[5].startswith("crossover")]
    assert parity and set(parity) == {"exact"}, summary
    probe = (tmp_path / "out" / "probe.json").read_text()
    assert '"handoff"' in probe and '"identical"' in probe
    assert (tmp_path / "out" / "data.tgz").stat().st_size > 0


def test_gpu_check_dry_run_runs_the_other_pairs_crossover_alone(tmp_path):
    """The rest of the dry run's phases, through the script, with a stand-in for `python -m xover` (it
    records each call and answers for it; everything else the script runs with Python is real)."""
    stand_in, calls = gpu_check_stand_in(tmp_path, "XOVER_TORCH_BACKEND=$XOVER_TORCH_BACKEND $*")
    result, steps = _gpu_check(tmp_path, "--phases", ",".join(["parity", *CROSSOVER_ONLY]), python=stand_in)
    for phase in ["parity", *CROSSOVER_ONLY]:
        assert f"xover run ({phase}.run): exit 0" in steps, steps + "\n" + result.stderr[-2000:]
    [parity, *runs] = [line.split() for line in calls.read_text().splitlines() if line.split()[1] == "run"]
    # parity: the first pair, one rank per job, every mode (its runs are pair-gloo's with --np 1)
    assert parity[parity.index("--group") + 1:parity.index("--group") + 3] == ["resnet-synthetic", "mlp-synthetic"]
    for option, value in (("--np", "1"), ("--engine", "torch"), ("--mode", "all"), ("--iterations", "4")):
        assert parity[parity.index(option) + 1] == value, (option, parity)
    assert len(runs) == len(CROSSOVER_ONLY), runs  # no profile: on a CPU these pairs run crossover alone
    for (phase, pair), run in zip(CROSSOVER_ONLY.items(), runs):
        assert run[0] == "XOVER_TORCH_BACKEND=gloo", (phase, run)  # pair-nccl too: no NCCL on a CPU
        assert run[run.index("--group") + 1:run.index("--group") + 3] == list(pair), (phase, run)
        for option, value in (("--engine", "torch"), ("--mode", "crossover"), ("--policy", "work-conserving"),
                              ("--iterations", "4")):
            assert run[run.index(option) + 1] == value, (phase, option, run)


def test_the_recipes_of_the_paper_pairs_take_turns_on_the_cpu(isolated_results):
    """What those phases run, for real: the recipes the paper pairs bring in under crossover, with the
    torch engine and Gloo over a shaped link, as the dry run runs them."""
    result = subprocess.run([sys.executable, "-m", "xover", "run", "--group", "vgg-synthetic", "transformer-tokens",
                             "--engine", "torch", "--bandwidth", "1gbit", "--iterations", "4", "--mode", "crossover",
                             "--policy", "work-conserving", "--json"], cwd=ROOT, capture_output=True, text=True,
                            timeout=600, env={**os.environ, "XOVER_CPU_ONLY": "1", "XOVER_TORCH_BACKEND": "gloo"})
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = json.loads(result.stdout)["jobs"]
    assert sorted(j["name"] for j in jobs) == ["transformer-tokens", "vgg-synthetic"]
    assert all(j["status"] == "finished" and j["iterations"] == 4 and j["engine"] == "torch" for j in jobs), jobs


def test_the_gpu_study_dry_run_profiles_plans_and_runs_every_way(tmp_path):
    """bench/gpu/study.sh cpu: the study's phases (bound, bound-nccl) through the script's own logic with the
    stand-in for `python -m xover`: two copies of the bound recipe (the second renamed), profiled, planned,
    compared in every mode, run as planned where the plan groups them, then NCCL with its CTAs bounded."""
    stand_in, calls = gpu_check_stand_in(tmp_path, "NCCL_MAX_CTAS=${NCCL_MAX_CTAS:-} $*")
    result = subprocess.run(["bash", "bench/gpu/study.sh", "cpu", "--out", str(tmp_path / "out")], cwd=ROOT,
                            env={**{k: v for k, v in os.environ.items() if k not in ("XOVER_DB", "XOVER_RESULTS")},
                                 "PYTHON": str(stand_in)}, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    made = [line.split() for line in calls.read_text().splitlines()]
    commands = [call[1] for call in made]
    assert commands[:3] == ["profile", "plan", "run"], made  # the stand-in's profile gives no rate: one profile
    profile = made[0]
    twin = profile[profile.index("profile") + 2]
    assert profile[profile.index("profile") + 1] == "resnet-digits" and twin.endswith("bound-twin.toml")
    assert 'name = "resnet-digits-twin"' in Path(twin).read_text()
    runs = [call for call in made if call[1] == "run"]
    # the stand-in writes no plan: compared as one group, in every mode, then NCCL's run with CTAs bounded
    assert runs[0][runs[0].index("--mode") + 1] == "all" and "--group" in runs[0], runs
    nccl = runs[-1]
    assert nccl[0] == "NCCL_MAX_CTAS=2" and nccl[nccl.index("--mode") + 1] == "concurrent,crossover,adaptive", nccl
    assert "no balanced rate" in result.stdout and "phase bound-nccl" in result.stdout
