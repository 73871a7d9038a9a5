"""plan and run through the real CLI where nothing is launched: a plan needs profiles, a trace's bad rows, and
plans refused before anything starts."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import signalled_xover

from xover.errors import Interrupted
from xover.plan import plan_from_dict
from xover.plan import step as plan_step

XOVER = [sys.executable, "-m", "xover"]


def _xover(*args, timeout=600):
    return subprocess.run([*XOVER, *args], capture_output=True, text=True, timeout=timeout)


def _pair_plan(tmp_path):
    """A plan of mlp-digits and resnet-digits sharing one device, from a profiles CSV."""
    trace = tmp_path / "jobs.csv"
    trace.write_text("name,devices,compute_ms,comm_ms,memory_gb\nmlp-digits,1,2,8,0.1\nresnet-digits,1,30,5,0.1\n")
    plan_path = tmp_path / "p.json"
    assert _xover("plan", "--profiles", str(trace), "--devices", "1", "--out", str(plan_path)).returncode == 0
    return plan_path


def test_plan_needs_profiles(isolated_results):
    result = _xover("plan", "mlp-digits", "--devices", "2")
    assert result.returncode == 2
    assert "no horovod profile of 'mlp-digits'" in result.stderr and "xover profile" in result.stderr
    # the refusal made the store it looked in, and left it and its lock behind: bad input writes nothing
    assert sorted(path.name for path in isolated_results.iterdir()) == [], list(isolated_results.iterdir())
    deeper = isolated_results / "new" / "folder" / "x.db"
    assert _xover("--db", str(deeper), "plan", "mlp-digits", "--devices", "2").returncode == 2
    assert not (isolated_results / "new").exists()


def test_the_profile_a_plan_asks_for_is_at_the_np_it_plans(isolated_results):
    # `--np 1`: the suggested command profiled at the recipes' own np (2), and the plan failed again after it
    both = _xover("plan", "mlp-digits", "resnet-digits", "--devices", "2", "--np", "1")
    assert both.returncode == 2
    assert both.stderr.strip().endswith(" --np 1` first"), both.stderr
    one = _xover("plan", "mlp-digits", "--devices", "2", "--np", "1", "--bandwidth", "1gbit")
    assert one.returncode == 2 and "--bandwidth 1gbit --np 1` first" in one.stderr, one.stderr
    own = _xover("plan", "mlp-digits", "resnet-digits", "--devices", "2")  # their own np: nothing more said
    assert own.returncode == 2 and "--np" not in own.stderr and own.stderr.strip().endswith(".toml` first"), own.stderr


def test_plan_from_csv_trace_and_bad_rows(isolated_results, tmp_path):
    trace = tmp_path / "jobs.csv"
    trace.write_text("name,devices,compute_ms,comm_ms,memory_gb\nA,2,100,10,1\nB,2,10,100,1\nC,2,50,50,1\n")
    result = _xover("plan", "--profiles", str(trace), "--devices", "4", "--json", "--out", str(tmp_path / "p.json"))
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert ["A", "B"] in [sorted(g["jobs"]) for g in plan["groups"]]
    bad = tmp_path / "bad.csv"
    bad.write_text("name,devices,compute_ms,comm_ms,memory_gb\nA,2,100,10,1\nB,two,10,100,1\n")
    result = _xover("plan", "--profiles", str(bad), "--devices", "4")
    assert result.returncode == 2
    assert str(bad) in result.stderr and "line 3" in result.stderr


def test_run_refuses_bad_plans_before_starting(isolated_results, tmp_path):
    trace = tmp_path / "jobs.csv"
    trace.write_text("name,devices,compute_ms,comm_ms,memory_gb\nno-such-recipe,2,100,10,1\nB,2,10,100,1\n")
    plan_path = tmp_path / "p.json"
    assert _xover("plan", "--profiles", str(trace), "--devices", "2", "--out", str(plan_path)).returncode == 0
    result = _xover("run", str(plan_path))
    assert result.returncode == 2
    assert "no-such-recipe" in result.stderr and "no recipe file or built-in recipe" in result.stderr

    big = tmp_path / "big.json"
    body = json.loads(plan_path.read_text())
    body["hosts"] = [["localhost", 64]]
    body["groups"] = [{**body["groups"][0], "jobs": ["mlp-digits"], "devices": [f"localhost:{i}" for i in range(64)]}]
    body["jobs"] = {"mlp-digits": {"devices": 64, "compute_ms": 1.0, "comm_ms": 1.0, "memory_gb": 0.1,
                                   "recipe": "mlp-digits"}}
    body["groups"][0]["predicted_slowdown"] = {"mlp-digits": 1.0}
    big.write_text(json.dumps(body))
    result = _xover("run", str(big))
    assert result.returncode == 2, result.stderr
    assert "devices" in result.stderr

    missing = _xover("run", str(tmp_path / "nope.json"))
    assert missing.returncode == 2 and "plan file not found" in missing.stderr
    assert not (isolated_results / "results" / "runs").exists() or not any((isolated_results / "results" / "runs").iterdir())


def test_a_plan_that_picked_mps_where_mps_cannot_run_names_the_group_not_a_flag_never_given(isolated_results, tmp_path):
    """'--mps: nvidia-cuda-mps-control was not found ...; run without --mps', to a user who gave no --mps."""
    plan_path = _pair_plan(tmp_path)
    body = json.loads(plan_path.read_text())
    [group] = [g for g in body["groups"] if len(g["jobs"]) == 2]
    group["sharing"] = "mps"
    plan_path.write_text(json.dumps(body))
    result = _xover("run", str(plan_path))
    assert result.returncode == 2, result.stderr
    assert "the plan runs group 0 under MPS" in result.stderr and "--mode crossover" in result.stderr, result.stderr
    assert "run without --mps" not in result.stderr


def test_a_hand_edited_plans_negative_prediction_is_refused_by_its_field(isolated_results, tmp_path):
    """A makespan of -5 ms ran and was reported as the plan's prediction (-0.005 s)."""
    plan_path = _pair_plan(tmp_path)
    good = json.loads(plan_path.read_text())
    for edit, field in ((lambda b: b.update(predicted_makespan_ms=-5), "'predicted_makespan_ms'"),
                        (lambda b: b["groups"][0].update(predicted_gain=-1.0), "predicted_gain")):
        body = json.loads(json.dumps(good))
        edit(body)
        plan_path.write_text(json.dumps(body))
        result = _xover("run", str(plan_path))
        assert result.returncode == 2 and field in result.stderr and "must not be negative" in result.stderr, \
            result.stderr


# ------------------------------------------------------------------------------ SIGTERM



@pytest.mark.parametrize(("where", "written"), [
    ("xover.plan.step.make_plan", False),  # while it plans
    ("xover.plan.step.store_plan", True),  # as it is stored and written: that finishes first
    ("xover.cli.show_plan", "shown"),  # as its table is printed (a review's trial: killed by the signal, silent)
], ids=["planning", "writing", "showing"])
def test_sigterm_during_a_plan_is_said_and_leaves_a_whole_plan_or_none(isolated_results, tmp_path, where, written):
    """SIGTERM ended `xover plan` with exit 143 and not a word (and could cut its plan file short); now it is
    Ctrl-C's: one line saying whether the plan was written, exit 130, and the file whole or absent."""
    trace = tmp_path / "profiles.csv"
    trace.write_text("name,devices,compute_ms,comm_ms,memory_gb\nA,1,100,10,1\nB,1,10,100,1\n")
    plan_path = tmp_path / "plan.json"
    result = signalled_xover(where, "plan", "--profiles", str(trace), "--devices", "1", "--out", str(plan_path))
    assert result.returncode == 130, (result.returncode, result.stdout, result.stderr)
    [line] = result.stderr.strip().splitlines()
    if written:
        cut = "; its table was cut short" if written == "shown" else ""
        assert line == f"interrupted: the plan was written whole to {plan_path} and stored{cut}"
        assert plan_from_dict(json.loads(plan_path.read_text())).groups  # whole: it reads as a plan
    else:
        assert line == "interrupted: no plan was written"
        assert not plan_path.exists()


def test_sigterm_during_doctor_is_said(isolated_results):
    result = signalled_xover("xover.doctor.diagnose", "doctor")
    assert result.returncode == 130, (result.returncode, result.stdout, result.stderr)
    assert result.stderr.strip().splitlines() == ["interrupted: nothing was checked to the end; doctor changes nothing"]


@pytest.mark.parametrize(("where", "args", "said"), [
    ("xover.emulation.cluster.cluster_status", ["status"], "the cluster was left as it was"),
    ("xover.emulation.cluster.missing_requirements", ["up"],
     "what was built of the cluster was removed (`xover cluster status` to see)"),
], ids=["status", "up"])
def test_sigterm_during_a_cluster_command_is_said(isolated_results, where, args, said):
    result = signalled_xover(where, "cluster", *args)
    assert result.returncode == 130, (result.returncode, result.stdout, result.stderr)
    assert result.stderr.strip().splitlines() == [f"interrupted: {said}"]


def test_a_plan_of_jobs_a_trillion_times_apart_in_speed_ends(isolated_results, tmp_path):
    """Every value within the limits, but 1e9 ms next to 0.001 ms: the group's simulation never stopped (`xover
    plan` ran for over ten minutes). It ends, and the slow jobs run alone."""
    trace = tmp_path / "profiles.csv"
    trace.write_text("name,devices,compute_ms,comm_ms,memory_gb,iterations\na,1,1e9,1e9,1,1000000000\n"
                     "b,1,0.001,0,1,1\nc,2,1e9,0,1,1000000000\nd,1,0.001,0.001,1,1\ne,2,0.001,0,1,1\n")
    result = _xover("plan", "--profiles", str(trace), "-H", "h1:1,h2:2", "--out", str(tmp_path / "p.json"),
                    "--json", timeout=120)
    assert result.returncode == 0, result.stderr
    groups = json.loads((tmp_path / "p.json").read_text())["groups"]
    assert all(len(group["jobs"]) == 1 for group in groups if {"a", "c"} & set(group["jobs"]))


def test_a_plan_key_this_version_does_not_know_is_read_past_and_warned_of(isolated_results, tmp_path):
    """A misspelt 'sharing' ran the group's default way without a word; keys are still read past (a later
    version's plan runs), and `xover run` names each with the key it is closest to."""
    plan_path = _pair_plan(tmp_path)
    body = json.loads(plan_path.read_text())
    body["groups"][0]["sharng"] = "concurrent"
    body["jobs"]["mlp-digits"]["\x1b[2Jnew"] = 1
    body["added_later"] = True
    plan_path.write_text(json.dumps(body))
    assert plan_from_dict(body).unknown_keys == (
        "added_later", "groups[0].sharng (did you mean 'sharing'?)", "jobs.mlp-digits.'\\x1b[2Jnew'")
    # --seconds 0 is refused after the plan is read and warned of, before anything is launched
    result = _xover("run", str(plan_path), "--seconds", "0")
    assert result.returncode == 2, result.stderr
    assert (f"warning: {plan_path}: plan fields this xover does not know, ignored: added_later, groups[0].sharng "
            "(did you mean 'sharing'?), jobs.mlp-digits.'\\x1b[2Jnew'") in result.stderr, result.stderr
    assert "\x1b" not in result.stderr
    del body["added_later"], body["groups"][0]["sharng"], body["jobs"]["mlp-digits"]["\x1b[2Jnew"]
    plan_path.write_text(json.dumps(body))
    assert "warning" not in _xover("run", str(plan_path), "--seconds", "0").stderr


def test_an_interruption_before_the_plan_is_committed_is_not_said_to_have_written_it(isolated_results, tmp_path,
                                                                                   monkeypatch):
    """Only a signal deferred until the plan is stored and written is said to have come after both; an
    Interrupted that ends the write itself (raised where nothing defers it) is passed on as it was."""
    trace = tmp_path / "profiles.csv"
    trace.write_text("name,devices,compute_ms,comm_ms,memory_gb\nA,1,100,10,1\nB,1,10,100,1\n")

    def interrupted(*args, **kwargs):
        raise Interrupted("stopped while storing")

    monkeypatch.setattr(plan_step, "store_plan", interrupted)
    with pytest.raises(Interrupted, match="^stopped while storing$"):
        plan_step.plan_jobs(str(isolated_results / "xover.db"), recipe_paths=[], trace_csv=str(trace), devices=1,
                            hosts=None, device_memory_gb=None, max_group=2, algo="matching",
                            out=str(tmp_path / "plan.json"))
    assert not (tmp_path / "plan.json").exists()


@pytest.mark.parametrize("options, reason, fix", [
    (["--devices", "1"], "'big' needs 2 devices, 1 exist; 'bigger' needs 4 devices, 1 exist",
     "give more devices (--devices N or -H host:N,...); nothing"),
    (["--devices", "4", "--device-memory", "0.5"], "'big' needs 1 GB per device, devices have 0.5 GB",
     "or a larger --device-memory; nothing"),
])
def test_a_plan_that_places_no_job_is_refused_and_keeps_the_plan_there(isolated_results, tmp_path, options, reason,
                                                                       fix):
    # it exited 0 and overwrote --out (default results/plan.json) with a plan of no groups: a good plan was lost and
    # `xover plan && xover run` failed only at run
    good = _pair_plan(tmp_path)
    before = good.read_text()
    trace = tmp_path / "big.csv"
    trace.write_text("name,devices,compute_ms,comm_ms,memory_gb\nbig,2,10,10,1\nbigger,4,10,10,1\n")
    result = _xover("plan", "--profiles", str(trace), *options, "--out", str(good))
    assert result.returncode == 2, result.stderr
    line = result.stderr.strip()
    assert line.startswith("error: no job can be placed on these devices (") and reason in line, line
    assert fix in line and line.endswith(f"nothing was written to --out {good}") and "\n" not in line, line
    assert good.read_text() == before
    default = _xover("plan", "--profiles", str(trace), "--devices", "1")  # no --out: results/plan.json untouched
    assert default.returncode == 2 and default.stderr.strip().endswith("nothing was written to the plan file")
    assert not (isolated_results / "results" / "plan.json").exists()


def test_a_plan_file_given_as_a_job_file_says_how_to_run_it(isolated_results, tmp_path):
    # it read "TOML syntax error: Invalid statement (at line 1, column 1)"
    plan_path = _pair_plan(tmp_path)
    for command in (["run", "--group", str(plan_path)], ["profile", str(plan_path)]):
        result = _xover(*command)
        assert result.returncode == 2, result.stderr
        line = result.stderr.strip()
        assert line.endswith(f"{plan_path}: a plan file (written by `xover plan`), not a recipe or job file: run it "
                             f"with `xover run {plan_path}`"), line


def test_a_file_where_a_folder_of_out_should_be_is_named(isolated_results, tmp_path):
    # "cannot write the plan file: File exists" (mkdir's words), and the report's "File exists" likewise
    afile = tmp_path / "afile"
    afile.write_text("")
    trace = tmp_path / "jobs.csv"
    trace.write_text("name,devices,compute_ms,comm_ms,memory_gb\nmlp-digits,1,2,8,0.1\nresnet-digits,1,30,5,0.1\n")
    planned = _xover("plan", "--profiles", str(trace), "--devices", "1", "--out", str(afile / "p.json"))
    assert planned.returncode == 2
    assert planned.stderr.strip().endswith(f"cannot write the plan file: {afile} is a file, not a folder")
    assets = Path(__file__).resolve().parents[1] / "assets" / "replay"  # something to report: a replay, no launch
    assert _xover("simulate", str(assets / "fifo_srtf.csv"), "--profiles", str(assets / "profiles.csv"),
                  "--cluster", "1x2").returncode == 0
    reported = _xover("report", "latest", "--format", "html", "--out", str(afile / "x.html"))
    assert reported.returncode == 2
    assert reported.stderr.strip() == f"error: cannot write {afile / 'x.html'}: {afile} is a file, not a folder"


@pytest.mark.parametrize("written", ["train.py", "helpers.py"])
def test_a_plan_never_replaces_a_jobs_script_nor_a_module_it_imports(isolated_results, tmp_path, written):
    # a job file's script (and what it imports) was not among the files --out must keep: the plan replaced it
    (tmp_path / "helpers.py").write_text("SCALE = 2\n")
    (tmp_path / "train.py").write_text("import helpers\nimport torch.distributed as dist\n"
                                       "dist.init_process_group('gloo')\n")
    (tmp_path / "job.toml").write_text('script = "train.py"\nnp = 1\niterations = 5\n')
    before = {name: (tmp_path / name).read_text() for name in ("train.py", "helpers.py")}
    result = _xover("plan", str(tmp_path / "job.toml"), "--devices", "1", "--out", str(tmp_path / written))
    assert result.returncode == 2, result.stderr
    said = "the script of job 'job'" if written == "train.py" else "a module the script of job 'job' imports"
    assert result.stderr.strip() == (f"error: --out {tmp_path / written}: that is {said}; writing there would "
                                     "destroy it: choose another path")
    assert {name: (tmp_path / name).read_text() for name in before} == before


def test_the_run_command_it_prints_is_quoted_and_names_the_db(isolated_results, tmp_path):
    """`--out 'my plan;rm -rf x.json'` printed `run it: xover run my plan;rm -rf x.json`: pasted, it ran rm -rf; and
    without the --db the plan was made with."""
    import re
    import shlex

    trace = tmp_path / "jobs.csv"
    trace.write_text("name,devices,compute_ms,comm_ms,memory_gb\nmlp-digits,1,2,8,0.1\nresnet-digits,1,30,5,0.1\n")
    out, db = str(tmp_path / "my plan;rm -rf x.json"), str(tmp_path / "a.db")
    result = _xover("--db", db, "plan", "--profiles", str(trace), "--devices", "1", "--out", out)
    assert result.returncode == 0, result.stderr
    printed = re.search(r"\(run it: (.*)\)$", result.stdout.strip())
    assert shlex.split(printed[1]) == ["xover", "--db", db, "run", out], result.stdout


def test_groups_said_to_run_side_by_side_only_where_they_have_devices_apart(tmp_path):
    """Six jobs of two devices each planned on two: every group on localhost:0,1, one after another; the summary
    said "groups on other devices also run side by side" whenever a plan had more than one group."""
    from typer.testing import CliRunner

    from xover.cli import app

    trace = tmp_path / "t.csv"
    rows = "".join(f"j{index},2,{10 + index},{100 - index},1\n" for index in range(6))
    trace.write_text("name,devices,compute_ms,comm_ms,memory_gb\n" + rows)
    said = {}
    for devices in ("2", "4"):
        result = CliRunner().invoke(app, ["--db", str(tmp_path / "plan.db"), "plan", "--profiles", str(trace),
                                          "--devices", devices])
        assert result.exit_code == 0, result.output
        said[devices] = " ".join(result.output.split())
    assert "one after another" in said["2"] and "side by side" not in said["2"], said["2"]
    assert "groups on other devices also run side by side" in said["4"], said["4"]


def _profile_in_experiment(db, name: str, status: str, command: str, interference: float | None, minute: int):
    """A profile of the built-in `name` (horovod, np 2, the host link, this hardware) whose job ran in a profile
    experiment that ended `status`, as `xover profile` stores it: its run alone first, its interference after."""
    from datetime import datetime

    from xover.devices import hardware_fingerprint
    from xover.recipes import load_recipe
    from xover.store.models import Experiment, Profile, Run
    from xover.store.queries import snapshot_recipe
    from xover.store.session import open_store

    store = open_store(str(db))
    with store.session() as session, session.begin():
        recipe = load_recipe(name)
        snapshot = snapshot_recipe(session, recipe)
        experiment = f"20260101-00{minute:02d}00-{name[:4]}"
        session.add(Experiment(id=experiment, kind="profile", command=command, status=status))
        session.flush()
        run = Run(experiment_id=experiment, recipe_id=snapshot.id, name=name, mode="profile", hosts="localhost:2",
                  np=2, status="finished", exit_code=0)
        session.add(run)
        session.flush()
        session.add(Profile(recipe_id=snapshot.id, recipe_hash=recipe.profile_key, run_id=run.id, name=name, np=2,
                            engine="horovod", bandwidth="host", hardware=hardware_fingerprint(), iterations=20,
                            data_ms=0.0, compute_ms=20.0, comm_ms=20.0, iteration_ms=40.0, samples_per_s=100.0,
                            memory_gb=0.1, gradient_bytes=1000, link_ms=20.0, comm_cpu_ms=None, checkpoints=10,
                            spread={}, tuning=None, interference=interference,
                            corun_partner_link_share=None if interference is None else 0.3,
                            created_at=datetime(2026, 1, 1, 0, minute)))
    store.close()


def test_a_profile_cut_short_before_its_interference_is_not_planned_as_no_interference(isolated_results, tmp_path):
    """Ctrl-C while `xover profile` measured a job next to its partner kept its run alone without interference, the
    newest profile; `plan` read it as 0 without a word (every pair of it looked better). A profile cut short is
    passed over for an older whole one, refused where there is none, and one taken with --no-corun is planned."""
    db = isolated_results / "xover.db"
    _profile_in_experiment(db, "resnet-digits", "finished", "xover profile resnet-digits", 0.2, 1)
    _profile_in_experiment(db, "mlp-digits", "finished", "xover profile mlp-digits", 0.4, 2)
    _profile_in_experiment(db, "mlp-digits", "interrupted", "xover profile mlp-digits --force", None, 3)
    out = tmp_path / "p.json"
    planned = _xover("plan", "mlp-digits", "resnet-digits", "--devices", "2", "--out", str(out))
    assert planned.returncode == 0, planned.stderr
    assert json.loads(out.read_text())["jobs"]["mlp-digits"]["interference"] == pytest.approx(0.4)  # the whole one
    _profile_in_experiment(db, "resnet-digits", "lost", "xover profile resnet-digits --force", None, 4)
    _profile_in_experiment(db, "resnet-digits", "interrupted", "xover profile resnet-digits --force", None, 5)
    planned = _xover("plan", "mlp-digits", "resnet-digits", "--devices", "2", "--out", str(out))
    assert json.loads(out.read_text())["jobs"]["resnet-digits"]["interference"] == pytest.approx(0.2)
    fresh = isolated_results / "fresh.db"
    _profile_in_experiment(fresh, "resnet-digits", "finished", "xover profile resnet-digits", 0.2, 1)
    _profile_in_experiment(fresh, "mlp-digits", "interrupted", "xover profile mlp-digits", None, 2)
    refused = _xover("--db", str(fresh), "plan", "mlp-digits", "resnet-digits", "--devices", "2", "--out", str(out))
    assert refused.returncode == 2, refused.stderr
    said = " ".join(refused.stderr.split())
    assert "the profile of 'mlp-digits' (np 2) at link host was cut short before its interference next to a partner " \
           "was measured (experiment 20260101-000200-mlp- interrupted): run `xover --db" in said, said
    assert "profile recipes/mlp-digits.toml` to measure what is missing" in said, said
    _profile_in_experiment(fresh, "mlp-digits", "interrupted", "xover profile mlp-digits --no-corun", None, 3)
    chosen = _xover("--db", str(fresh), "plan", "mlp-digits", "resnet-digits", "--devices", "2", "--out", str(out))
    assert chosen.returncode == 0, chosen.stderr  # without interference by choice
    assert json.loads(out.read_text())["jobs"]["mlp-digits"]["interference"] == 0.0
