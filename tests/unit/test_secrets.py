"""Secrets that reached what other people read (issue 58): passwords of any character in a command
line, credentials in a store URL's query, a job file's variables, the MLflow tracking URI."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from xover.run.leases import DeviceLeases

START, END = "KX7SEC", "QZ9END"  # every password below starts and ends with these: neither may show
# passwords as people type them: spaces, both quotes, '@', '/', '%' escapes, shell characters, newlines
PASSWORDS = [
    f"{START}p w\"x{END}",
    f"{START}it's{END}",
    f"{START}a\"b'c d{END}",
    f"{START}x/y:z{END}",
    f"{START}p%40ss%20w{END}",
    f"{START}$(id) `id` ${{HOME}}{END}",
    f"{START}back\\slash\\{END}",
    f"{START}tab\tand\nnewline{END}",
    f"{START}#frag?q=1&x=y{END}",
    f"{START}''\"\"{END}",
]


def _leaks(text: str) -> bool:
    return START in text or END in text


@pytest.mark.parametrize("password", PASSWORDS)
def test_a_password_of_any_character_is_masked_in_the_command_lease_file_and_report(tmp_path, monkeypatch, password):
    """Finding 2. Before: redact.py's pattern stopped at a quote or a space, so `--db
    'postgresql://u:p w"x@h/db'` kept the password in the stored command, the lease files (every user
    can read them) and `xover report`."""
    from xover import cli
    from xover.report.data import experiment_row
    from xover.store.models import Experiment

    url = f"postgresql://xover:{password}@db.example:5432/xover?sslmode=require"
    # in a query an '&' starts the next option: a password there holds it escaped
    query = url.replace("?sslmode=require", f"?sslmode=require&password={password.replace('&', '%26')}")
    for argv in (["--db", url], [f"--db={url}"], ["--db", query]):
        monkeypatch.setattr(sys, "argv", ["xover", "run", *argv, "--group", "A", "B"])
        command = cli._command_line()
        assert not _leaks(command), command
        assert shlex.split(command)[:2] == ["xover", "run"]  # still a command line a shell reads
        monkeypatch.setenv("XOVER_LEASE_DIR", str(tmp_path))
        held = DeviceLeases(f"experiment e1 ({command})")
        assert held.try_acquire([("localhost", 0)]) == {}
        text = (tmp_path / DeviceLeases._name(("localhost", 0))).read_text()
        held.release()
        assert not _leaks(text) and "xover:***@db.example" in json.loads(text)["holder"] + command.replace("=***", "")
        # a row an older xover stored as typed: the report shows it masked
        stored = shlex.join(["xover", "run", *argv])
        row = experiment_row(Experiment(id="e1", kind="run", command=stored, status="finished", hosts="localhost"))
        assert not _leaks(row.command), row.command


def test_passwords_are_masked_in_argv_and_in_joined_and_quoted_command_lines():
    """Finding 2: the same URL as one argument, in a `shlex.join`ed line, single- or double-quoted, with
    the password percent-encoded or a credential option whose name is percent-encoded."""
    from xover.redact import mask_argv, mask_command, mask_credentials

    url = 'postgresql://u:p w"x@h/db'
    assert mask_argv(["--store", url]) == ["--store", "postgresql://u:***@h/db"]
    assert mask_command(["xover", "run", "--store", url]) == "xover run --store 'postgresql://u:***@h/db'"
    assert mask_credentials(shlex.join(["--store", url])) == "--store 'postgresql://u:***@h/db'"
    assert mask_credentials("--store \"postgresql://u:p w\\\"x@h/db\" x") == "--store 'postgresql://u:***@h/db' x"
    assert mask_credentials("postgresql://u:p%40ss%2Fw@h/db") == "postgresql://u:***@h/db"
    assert mask_credentials("postgresql://me@corp.example:pw@h/db") == "postgresql://me@corp.example:***@h/db"
    # SQLAlchemy's user is all but ':' and '/'
    assert mask_credentials("postgresql://u?x#y:pw@h/db") == "postgresql://u?x#y:***@h/db"
    assert mask_credentials("postgresql://h/db?pass%77ord=pw&sslpassword=pw2") == (
        "postgresql://h/db?pass%77ord=***&sslpassword=***"
    )
    assert mask_credentials("https://mlflow.example/x?token=t0k&run=1") == "https://mlflow.example/x?token=***&run=1"
    assert mask_credentials("PGPASSWORD=pw HF_TOKEN=tk xover run") == "PGPASSWORD=*** HF_TOKEN=*** xover run"
    for kept in (
        "postgresql://xover@db/xover",
        "postgresql://xover@db:5432/xover",
        "sqlite:///results/a:b@c.db",
        "xover run --group A B",
        "a:b@c",
        "it's a message: postgresql://u:***@h/db is down",
        "--tokenizer=bert TOKENIZERS_PARALLELISM=false",
    ):
        assert mask_credentials(kept) == kept


# a PostgreSQL that refuses at once (port 1), with its credentials in every form a URL may carry them
UNREACHABLE = "postgresql+psycopg://xover:{pw}@127.0.0.1:1/xover"
CREDENTIAL_QUERIES = [
    "?password={pw}",
    "?sslmode=prefer&sslpassword={pw}",
    "?PassWord={pw}",
    "?pass%77ord={pw}",
    "?sslpassword={pw}&bogus_option=1",  # the driver refuses an unknown option in its own words
]


@pytest.mark.parametrize("query", CREDENTIAL_QUERIES)
def test_credential_query_options_are_masked_wherever_the_store_url_is_shown(tmp_path, monkeypatch, query):
    """Finding 3. Before: shown_url masked the userinfo only, so `?password=` / `?sslpassword=` showed in
    every "cannot open the database" line: `xover report`, `xover doctor`, and a Slurm group's output."""
    from typer.testing import CliRunner

    from xover.cli import app
    from xover.doctor import _database
    from xover.store.session import StoreError, open_store, shown_url

    password = f"{START}p w'x{END}"
    url = UNREACHABLE.format(pw=f"{START}user-pw{END}") + query.format(pw=password.replace(" ", "%20"))
    assert not _leaks(shown_url(url)), shown_url(url)
    with pytest.raises(StoreError) as refused:
        open_store(url)
    assert "cannot open the database" in str(refused.value) and not _leaks(str(refused.value)), refused.value
    monkeypatch.setenv("XOVER_RESULTS", str(tmp_path))
    report = CliRunner().invoke(app, ["--db", url, "report", "all"])
    assert report.exit_code != 0 and "cannot open the database" in report.output, report.output
    assert not _leaks(report.output), report.output
    check = _database(url)
    assert not check.ok and not _leaks(check.detail), check.detail


# ------------------------------------------------------------------ a job file's variables, passed by name

HOROVOD_EXAMPLE = Path(__file__).resolve().parents[2] / "recipes" / "examples" / "horovod_digits.py"


def _job_file(tmp_path, body: str):
    (tmp_path / "train.py").write_bytes(HOROVOD_EXAMPLE.read_bytes())
    path = tmp_path / "job.toml"
    path.write_text(f'script = "train.py"\nnp = 1\n{body}\n')
    return path


def test_pass_env_names_variables_of_xovers_environment_whose_values_are_recorded_nowhere(tmp_path, monkeypatch):
    """Finding 4: a job file passes a variable by name (`pass_env`); the recipe, what is stored and hashed
    and the plan's entry hold its name, never its value."""
    from xover.plan.planfile import plan_from_dict, plan_to_dict
    from xover.plan.step import script_entries
    from xover.recipes import load_recipe

    monkeypatch.setenv("HF_TOKEN", f"{START}hf-token{END}")
    monkeypatch.setenv("WANDB_API_KEY", f"{START}wandb{END}")
    recipe = load_recipe(_job_file(tmp_path, 'pass_env = ["HF_TOKEN", "WANDB_API_KEY"]'))
    assert recipe.pass_env == ("HF_TOKEN", "WANDB_API_KEY")
    assert recipe.variable_names == ("HF_TOKEN", "WANDB_API_KEY")
    assert recipe.to_dict()["pass_env"] == ["HF_TOKEN", "WANDB_API_KEY"] and not _leaks(json.dumps(recipe.to_dict()))
    monkeypatch.setenv("HF_TOKEN", "another value")
    assert load_recipe(tmp_path / "job.toml").hash == recipe.hash  # the job is the same whatever the value
    [entry] = script_entries([recipe]).values()
    assert entry.pass_env == ["HF_TOKEN", "WANDB_API_KEY"]
    # the plan's entry: names, read back as names
    plan = {"format": "xover-plan/1", "algo": "none", "hosts": [["localhost", 1]],
            "groups": [{"jobs": ["j"], "devices": ["localhost:0"], "wave": 0, "predicted_period_ms": 1.0,
                        "predicted_gain": 1.0, "predicted_duration_ms": 1.0, "predicted_slowdown": {"j": 1.0}}],
            "jobs": {"j": {"devices": 1, "compute_ms": 1.0, "comm_ms": 1.0, "memory_gb": 0.1,
                           "script": {"path": "/x/train.py", "args": [], "engine": "horovod", "sha256": "abc",
                                      "env": {}, "pass_env": ["HF_TOKEN"]}}},
            "unplaced": [], "predicted_aggregate_gain": 1.0, "predicted_makespan_ms": 1.0,
            "sequential_makespan_ms": 1.0}
    read = plan_from_dict(plan)
    assert read.scripts["j"].pass_env == ["HF_TOKEN"]
    assert plan_to_dict(read)["jobs"]["j"]["script"]["pass_env"] == ["HF_TOKEN"]


def test_a_plans_job_whose_passed_variable_is_unset_is_refused_before_it_runs(tmp_path, monkeypatch):
    from xover.errors import XoverError
    from xover.plan.make import JobProfile, PlannedScript
    from xover.run.targets import _planned_script

    script = tmp_path / "train.py"
    script.write_bytes(HOROVOD_EXAMPLE.read_bytes())
    from xover.scripts import content_hash

    planned = PlannedScript(path=str(script), args=[], engine="horovod", sha256=content_hash(script),
                            pass_env=["NOT_SET_ANYWHERE_58"])
    profile = JobProfile(name="j", devices=1, compute_ms=1.0, comm_ms=1.0, memory_gb=0.1)
    monkeypatch.delenv("NOT_SET_ANYWHERE_58", raising=False)
    with pytest.raises(XoverError, match=r"the plan's job j .*pass_env: NOT_SET_ANYWHERE_58 is not set"):
        _planned_script(planned, profile, "jobs/j.toml", None, False)
    monkeypatch.setenv("NOT_SET_ANYWHERE_58", "v")
    assert _planned_script(planned, profile, "jobs/j.toml", None, False).pass_env == ("NOT_SET_ANYWHERE_58",)


def test_a_plans_script_that_is_now_a_folder_is_called_a_folder_not_gone(tmp_path):
    from xover.errors import XoverError
    from xover.plan.make import JobProfile, PlannedScript
    from xover.run.targets import _planned_script

    planned = PlannedScript(path=str(tmp_path), args=[], engine="horovod", sha256="0" * 16)
    profile = JobProfile(name="j", devices=1, compute_ms=1.0, comm_ms=1.0, memory_gb=0.1)
    with pytest.raises(XoverError, match=r"its script .* is a folder, not a script \(plan field 'jobs.j.script.path'\)"):
        _planned_script(planned, profile, "", None, False)


@pytest.mark.parametrize("body, field, problem", [
    ('pass_env = "HF_TOKEN"', "pass_env", "list of strings"),
    ('pass_env = [1]', "pass_env[0]", "name of an environment variable"),
    ('pass_env = ["HF-TOKEN"]', "pass_env[0]", "name of an environment variable"),
    ('pass_env = ["XOVER_DB"]', "pass_env[0]", "XOVER_"),
    ('pass_env = ["PRESENT", "NOT_SET_ANYWHERE_58"]', "pass_env[1]", "not set in xover's environment; export it"),
    ('pass_env = ["PRESENT"]\nenv = { PRESENT = "x" }', "pass_env[0]", "in 'env' too"),
])
def test_bad_pass_env_names_the_file_and_field(tmp_path, monkeypatch, body, field, problem):
    """Finding 4: `pass_env` is checked as the rest of a job file is: one line naming the file and field."""
    from xover.recipes import RecipeError, load_recipe

    monkeypatch.setenv("PRESENT", "value")
    monkeypatch.delenv("NOT_SET_ANYWHERE_58", raising=False)
    path = _job_file(tmp_path, body)
    with pytest.raises(RecipeError) as refused:
        load_recipe(path)
    assert str(refused.value).startswith(f"{path}: field '{field}': ") and problem in str(refused.value), refused.value


def test_an_unset_pass_env_variable_exits_2_with_one_line(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from xover.cli import app

    monkeypatch.delenv("NOT_SET_ANYWHERE_58", raising=False)
    path = _job_file(tmp_path, 'pass_env = ["NOT_SET_ANYWHERE_58"]')
    result = CliRunner().invoke(app, ["train", str(path)])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and "field 'pass_env[0]'" in lines[0], result.output


def test_a_slurm_groups_batch_script_exports_the_variables_its_job_files_pass(tmp_path, monkeypatch):
    """Finding 4 under Slurm: a group's passed variables go into its batch script (as the store's URL does:
    the script is for its owner and Slurm's administrators), so that they reach the job under
    --export=NONE too; no command line holds them."""
    from xover.recipes import load_recipe
    from xover.run import batch
    from xover.run.external import slurm
    from xover.run.jobs import GroupToRun, JobSpec

    monkeypatch.setenv("HF_TOKEN", f"{START}hf token's{END}")
    recipe = load_recipe(_job_file(tmp_path, 'pass_env = ["HF_TOKEN"]'))
    group = GroupToRun(0, [JobSpec("job", recipe, {"localhost": [0]})])
    passed = batch.passed_variables(group)
    assert passed == {"HF_TOKEN": f"{START}hf token's{END}"}
    script = slurm.batch_script(["xover", "slurm-group"], environment=passed)
    assert f"export HF_TOKEN={shlex.quote(passed['HF_TOKEN'])}" in script.splitlines()


def test_a_job_files_env_values_are_recorded_as_stars_but_still_make_its_hash(tmp_path):
    """Finding 4: what is stored and written where others read it (the store's recipe, spec.json, MLflow's
    params, the store's copy of a plan) holds `env`'s names, not its values; the hash still counts them."""
    from xover.plan.make import Plan
    from xover.plan.step import script_entries, store_plan
    from xover.recipes import load_recipe
    from xover.store.models import Plan as PlanRow
    from xover.store.session import open_store

    value = f"{START}token in env{END}"
    recipe = load_recipe(_job_file(tmp_path, f'env = {{ OMP_NUM_THREADS = "2", MY_TOKEN = "{value}" }}'))
    assert recipe.env["MY_TOKEN"] == value  # the ranks get it
    assert recipe.to_dict()["env"] == {"OMP_NUM_THREADS": "***", "MY_TOKEN": "***"}
    other = load_recipe(_job_file(tmp_path, 'env = { OMP_NUM_THREADS = "2", MY_TOKEN = "another" }'))
    assert other.hash != recipe.hash  # a value changes the job
    plan = Plan(algo="none", hosts=[("localhost", 1)], groups=[], unplaced=[], predicted_aggregate_gain=1.0,
                predicted_makespan_ms=0.0, sequential_makespan_ms=0.0, scripts=script_entries([recipe]))
    assert plan.scripts[recipe.name].env["MY_TOKEN"] == value  # the plan file runs it as profiled
    store = open_store(str(tmp_path / "x.db"))
    with store.session() as session, session.begin():
        plan_id = store_plan(session, plan)
    with store.session() as session:
        assert not _leaks(json.dumps(session.get(PlanRow, plan_id).body))
    store.close()


def test_mlflow_params_show_no_env_value_even_of_a_recipe_an_older_xover_stored(tmp_path):
    """Finding 4: MLflow's `recipe.env.NAME` params were the values as given; a row stored before this
    version still holds them, and they are written as *** all the same."""
    from conftest import recorded_runs
    from sqlalchemy import select

    from xover.report.mlflow import recipe_params
    from xover.store.models import RecipeSnapshot

    store, _recorder, [run_id] = recorded_runs(tmp_path, [{"name": "a", "mode": "solo", "hosts": "localhost",
                                                           "np": 1}])
    with store.session() as session, session.begin():
        snapshot = session.scalars(select(RecipeSnapshot)).one()
        snapshot.body = {"name": "a", "env": {"HF_TOKEN": f"{START}old row{END}"}, "pass_env": ["WANDB_API_KEY"]}
    with store.session() as session:
        params = recipe_params(session, "e1")[run_id]
    store.close()
    assert params["recipe.env.HF_TOKEN"] == "***" and params["recipe.pass_env"] == '["WANDB_API_KEY"]'
    assert not _leaks(json.dumps(params))



def test_a_scripts_credential_arguments_are_recorded_as_stars_but_still_make_its_hash(tmp_path):
    """A script's own options that carry a credential (`--api-key KEY`, `--hf-token=T`) reach its ranks on
    their command line, as the user typed them; the store's recipe, spec.json, MLflow's params and the
    store's copy of a plan hold *** instead, and the plan file is its owner's only. Before: all of them held
    the values as given (only a job file's `env` values were masked)."""
    from dataclasses import replace

    from xover.plan import JobProfile, local_hosts, make_plan, plan_to_dict
    from xover.plan.step import script_entries, store_plan
    from xover.recipes import load_recipe
    from xover.redact import holds_credentials
    from xover.run.jobs import JobSpec
    from xover.store.models import Plan as PlanRow
    from xover.store.session import open_store

    key, token = f"{START}api key{END}", f"{START}hf{END}"
    args = ["--lr", "0.1", "--api-key", key, f"--hf-token={token}", "--epochs", "3"]
    recipe = load_recipe(_job_file(tmp_path, f"args = {json.dumps(args)}"))
    assert JobSpec("job", recipe, {"localhost": [0]}).script == [recipe.script, *args]  # the ranks get them
    assert recipe.to_dict()["args"] == ["--lr", "0.1", "--api-key", "***", "--hf-token=***", "--epochs", "3"]
    other = load_recipe(_job_file(tmp_path, f"args = {json.dumps([*args[:3], 'another', *args[4:]])}"))
    assert other.hash != recipe.hash  # a value changes the job
    assert holds_credentials(args) and not holds_credentials(["--lr", "0.1", "--keys", "3"])
    plan = replace(make_plan([JobProfile(recipe.name, 1, 100.0, 50.0, 1.0)], local_hosts(1)),
                   scripts=script_entries([recipe]))
    assert plan.scripts[recipe.name].args == args  # the plan file runs it as profiled
    assert plan_to_dict(plan)["jobs"][recipe.name]["script"]["args"] == args
    store = open_store(str(tmp_path / "x.db"))
    with store.session() as session, session.begin():
        plan_id = store_plan(session, plan)
    with store.session() as session:
        body = session.get(PlanRow, plan_id).body
    store.close()
    assert body["jobs"][recipe.name]["script"]["args"] == recipe.to_dict()["args"]


def test_mlflow_params_show_no_credential_argument_of_a_recipe_an_older_xover_stored(tmp_path):
    """A stored recipe whose script arguments an older xover kept as given: MLflow's params show ***."""
    from conftest import recorded_runs
    from sqlalchemy import select

    from xover.report.mlflow import recipe_params
    from xover.store.models import RecipeSnapshot

    store, _recorder, [run_id] = recorded_runs(tmp_path, [{"name": "a", "mode": "solo", "hosts": "localhost",
                                                           "np": 1}])
    with store.session() as session, session.begin():
        snapshot = session.scalars(select(RecipeSnapshot)).one()
        snapshot.body = {"name": "a", "args": ["--wandb-key", f"{START}old{END}", "--seed", "1"]}
    with store.session() as session:
        params = recipe_params(session, "e1")[run_id]
    store.close()
    assert json.loads(params["recipe.args"]) == ["--wandb-key", "***", "--seed", "1"]


# ------------------------------------------------------------------ the results folder

OTHER_UID = 54321  # a user other than the one the tests run as (root can give files to it)


def test_a_results_folder_another_user_could_plant_names_in_is_refused(tmp_path, monkeypatch):
    """Issue 58 (low): writes under a shared results folder followed links: another user who could write
    there put `runs` (or plan.json, report.html) as a link, and xover wrote where it pointed. Now a results
    folder, and its runs/, must be this user's (the root may be this user's link to one, or root's and
    sticky), and no one else may write in it without the sticky bit."""
    import os

    from xover.config import results_root
    from xover.errors import XoverError

    def refused(root, problem):
        monkeypatch.setenv("XOVER_RESULTS", str(root))
        with pytest.raises(XoverError) as error:
            results_root()
        assert problem in str(error.value) and "XOVER_RESULTS" in str(error.value), error.value

    def accepted(root):
        monkeypatch.setenv("XOVER_RESULTS", str(root))
        assert results_root() == root

    accepted(tmp_path / "not-yet")  # made later, by this user
    mine = tmp_path / "mine"
    (mine / "runs").mkdir(parents=True)
    accepted(mine)
    (tmp_path / "link").symlink_to(mine)  # this user's link to a folder of theirs
    accepted(tmp_path / "link")
    everyone = tmp_path / "everyone"
    everyone.mkdir()
    everyone.chmod(0o777)
    refused(everyone, "writable by every user")
    everyone.chmod(0o1777)  # sticky: others cannot take over a name of this user's
    accepted(everyone)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, OTHER_UID, -1)
    refused(theirs, "belongs to uid 54321")
    planted = tmp_path / "planted"
    planted.mkdir()
    (planted / "runs").symlink_to(tmp_path / "victim")
    refused(planted, "runs is a symbolic link")
    their_runs = tmp_path / "their-runs"
    (their_runs / "runs").mkdir(parents=True)
    os.chown(their_runs / "runs", OTHER_UID, -1)
    refused(their_runs, "belongs to uid 54321")
    (tmp_path / "file").write_text("x")
    refused(tmp_path / "file", "is not a folder")


def test_a_run_into_a_results_folder_others_can_write_is_refused_before_anything_is_recorded(tmp_path, monkeypatch):
    import sqlite3

    from typer.testing import CliRunner

    from xover.cli import app

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv("XOVER_RESULTS", str(shared))
    monkeypatch.setenv("XOVER_DB", str(tmp_path / "x.db"))
    result = CliRunner().invoke(app, ["train", "mlp-digits", "--iterations", "2"])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and "writable by every user" in lines[0], result.output
    with sqlite3.connect(tmp_path / "x.db") as db:
        assert db.execute("SELECT count(*) FROM experiments").fetchone() == (0,)
    assert not (shared / "runs").exists()


def test_each_rank_reads_its_hosts_private_file_and_the_last_one_removes_it(tmp_path):
    """The private files that carry the metric token and a job file's variables to horovodrun's ranks: a file
    only on hosts that get ranks; each rank reads its host's into its environment and becomes the program;
    the host's last rank (HOROVOD_LOCAL_SIZE) removes it; a file that is not private is refused."""
    import os
    import subprocess

    from xover.run.external.horovodrun import private_files, with_private_variables

    value = f"{START}it's a \"token\"{END}"
    # np 2 fills localhost's two slots: the host after it gets no rank, so no file (and no ssh to it)
    files = private_files(2, "localhost:2,unreachable.invalid:2", {"HF_TOKEN": value}, [])
    assert list(files) == ["localhost"]
    path = files["localhost"]
    assert os.stat(path).st_mode & 0o777 == 0o600
    program = with_private_variables([sys.executable, "-c", "import os; print(os.environ['HF_TOKEN'])"], files)
    assert not _leaks(" ".join(program))
    rank_env = {**os.environ, "HOROVOD_HOSTNAME": "localhost", "HOROVOD_LOCAL_SIZE": "2"}
    for left in (True, False):
        ran = subprocess.run(program, env=rank_env, capture_output=True, text=True, timeout=60)
        assert ran.returncode == 0 and ran.stdout.strip() == value, ran.stderr
        assert os.path.exists(path) == left
    files = private_files(1, "localhost:1", {"HF_TOKEN": value}, [])
    os.chmod(files["localhost"], 0o644)  # readable by others: not what xover made
    ran = subprocess.run(with_private_variables([sys.executable, "-c", "pass"], files),
                         env={**rank_env, "HOROVOD_LOCAL_SIZE": "1"}, capture_output=True, text=True, timeout=60)
    assert ran.returncode != 0 and "not a private file" in ran.stderr, ran.stderr
    os.unlink(files["localhost"])


def test_a_plan_file_that_holds_env_values_is_readable_by_its_owner_only(tmp_path):
    """Finding 4: the plan file keeps a job file's `env` values (`xover run PLAN` needs them); it is made
    mode 0600 then, an existing file's mode included. Before: the umask's 0644, readable by every user."""
    import os

    from xover.plan.step import write_plan_file

    path = tmp_path / "plan.json"
    path.write_text("{}")
    path.chmod(0o644)
    write_plan_file(path, '{"env": "values"}\n', holds_secrets=True)
    assert os.stat(path).st_mode & 0o777 == 0o600 and path.read_text() == '{"env": "values"}\n'
    plain = tmp_path / "plain.json"
    write_plan_file(plain, "{}\n", holds_secrets=False)
    assert os.stat(plain).st_mode & 0o777 == 0o666 & ~_umask()


def _umask() -> int:
    import os

    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_password_with_an_unescaped_at_is_not_repeated_where_a_driver_names_the_rest_as_a_host():
    """'postgresql://user:s3c@retPW@host/x': a driver that reads the first '@' as the host's start says
    "failed to resolve host 'retPW@host'"; the piece between the two '@' is a secret too."""
    from xover.redact import without_secrets_of

    url = "postgresql://user:s3cr@retPW@127.0.0.1:1/x"
    message = f"{url}: failed to resolve host 'retPW@127.0.0.1'"
    shown = without_secrets_of(url, message)
    assert "retPW" not in shown and "s3cr" not in shown, shown


def test_a_short_piece_of_a_password_between_two_ats_is_not_shown_where_a_driver_names_the_rest_as_a_host():
    """A probe (2026-12-06): 'p@ss@w0rd' showed 'ss' ("failed to resolve host 'ss@***@host'"): a piece under
    four characters is not masked alone, but what follows the password's first '@' is."""
    from xover.redact import without_secrets_of

    url = "postgresql://u:p@ss@w0rd@nonexistent.invalid/db"
    shown = without_secrets_of(url, f"{url}: failed to resolve host 'ss@w0rd@nonexistent.invalid'")
    assert shown.endswith("failed to resolve host '***@nonexistent.invalid'"), shown


def test_a_key_value_store_string_taken_as_a_file_name_is_shown_without_its_password(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from xover.cli import app

    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["--db", "host=127.0.0.1 port=1 password=s3cretPW", "report"])
    assert result.exit_code == 2, result.output
    assert "no database at" in result.output and "s3cretPW" not in result.output, result.output


def test_the_value_after_an_option_named_for_a_credential_is_masked():
    """`--password pw` as two words kept `pw` in the recorded command and the lease files every user reads."""
    from xover.redact import mask_argv, mask_credentials

    argv = ["train.py", "--steps", "3", "--password", "argsecret11", "--hf-token", "tokvalue9", "--lr", "0.1", "--key=zz"]
    assert mask_argv(argv) == ["train.py", "--steps", "3", "--password", "***", "--hf-token", "***", "--lr", "0.1",
                               "--key=***"]
    line = mask_credentials(shlex.join(["xover", "run", "--", *argv]))
    assert "argsecret11" not in line and "tokvalue9" not in line and "--lr 0.1" in line


@pytest.mark.parametrize("body, field, kind", [
    (f'env = {{ HF_TOKEN = ["{START}hf{END}"] }}', "env.HF_TOKEN", "got a list"),
    (f'env = {{ API = {{ key = "{START}k{END}" }} }}', "env.API", "got a table"),
    ("env = { PIN = 7357 }", "env.PIN", "got a number"),
    (f'args = ["--token", ["{START}t{END}"]]', "args[1]", "got a list"),
])
def test_a_value_of_the_wrong_type_that_may_be_a_token_is_named_by_its_kind(tmp_path, body, field, kind):
    """A job file's variable or argument of the wrong type was echoed in the refusal ('got ['hf_...']'): its
    kind is enough to fix it. An argument's bare number is still shown, where its quotes go."""
    from xover.recipes import RecipeError, load_recipe

    with pytest.raises(RecipeError) as refused:
        load_recipe(_job_file(tmp_path, body))
    message = str(refused.value)
    assert f"field '{field}': must be a string" in message and message.endswith(kind), message
    assert not _leaks(message) and "7357" not in message, message


def test_a_plan_files_variable_of_the_wrong_type_is_named_by_its_kind():
    from xover.plan.planfile import PlanFormatError, _text

    with pytest.raises(PlanFormatError) as refused:
        _text({"key": f"{START}k{END}"}, "jobs.a.script.env.API")
    assert str(refused.value) == "plan field 'jobs.a.script.env.API': must be a string, got an object"


@pytest.mark.parametrize("url", [f"u:{START}pw{END}@dbhost/xover", f"postgresql:/u:{START}pw{END}@127.0.0.1:1/x",
                                 f"postgresql:/u:{START}Pa/SLASH{END}@127.0.0.1:1/x", f"u:{START}a/b{END}@dbhost/x",
                                 # its ':' lost (a probe, 2026-12-06: a SQLite file in folders postgresql/user:...)
                                 f"postgresql//u:{START}pw{END}@127.0.0.1:1/x",
                                 f"postgresql+psycopg//u:{START}pw{END}@h/x"])
def test_a_store_url_that_lost_its_scheme_is_refused_without_its_password(tmp_path, monkeypatch, url):
    """A URL whose `scheme://` went missing was a SQLite file named after the password, which the store's
    recorded command and later messages then showed."""
    from typer.testing import CliRunner

    from xover.cli import app

    replay = Path(__file__).resolve().parents[1] / "assets" / "replay"
    monkeypatch.chdir(tmp_path)
    for command in (["report"], ["simulate", str(replay / "pair.csv"), "--profiles", str(replay / "profiles.csv"),
                                 "--cluster", "1x2"]):
        result = CliRunner().invoke(app, ["--db", url, *command])
        assert result.exit_code == 2 and "without its scheme://" in result.output, result.output
        assert not _leaks(result.output), result.output
    assert list(tmp_path.iterdir()) == []  # no store, no folder named after it


def test_a_store_url_with_a_third_slash_is_shown_without_its_password(tmp_path, monkeypatch):
    """postgresql:///user:pw@host/db (a slash too many) reaches the driver, whose error named the URL whole."""
    from xover.redact import mask_credentials

    url = f"postgresql:///u:{START}pw{END}@127.0.0.1/db"
    assert mask_credentials(f"cannot open the database {url}: connection is bad") == (
        "cannot open the database postgresql:///u:***@127.0.0.1/db: connection is bad"
    )
    assert mask_credentials("sqlite:////tmp/a:b@c.db") == "sqlite:////tmp/a:b@c.db"  # a file's name, no user


def test_postgres_written_for_postgresql_is_told_so():
    from xover.store.session import StoreError, database_url

    with pytest.raises(StoreError, match=r"write postgresql://"):
        database_url(f"postgres://u:{START}pw{END}@127.0.0.1/x")


@pytest.mark.parametrize("argv", [
    ["--passphrase", f"{START}1{END}"], ["--authorization", f"{START}2{END}"], ["--api-keys", f"{START}3{END}"],
    ["--bearer", f"{START}4{END}"], ["--cookie", f"{START}5{END}"], ["--pat", f"{START}6{END}"],
    ["--creds", f"{START}7{END}"], ["--header", f"Authorization: Bearer {START}8{END}"],
    ["-H", f"X-Api-Key: {START}9{END}"], [f"--auth=Basic {START}10{END}"],
    [f"https://bucket.s3.amazonaws.com/k?X-Amz-Date=1&X-Amz-Signature={START}11{END}"],
    [f"https://{START}12{END}@github.com/org/repo.git"], [f"git+https://{START}13{END}@github.com/org/repo"],
    ["curl", "-H", f"Authorization: Token {START}14{END}", "https://example.com"],
    # a probe, 2026-12-06: an option named for none, a token by its shape; a webhook's URL; --pw
    ["--hf", f"hf_{START}15{END}abcdefghijklmnopqrstuvwxyzABCDEF"], [f"--gh=ghp_{START}16{END}abcdefghijklmnopqrstuvwxyz0123"],
    ["--webhook", f"https://hooks.example.com/services/{START}17{END}"], ["--pw", f"{START}18{END}"],
])
def test_credentials_under_more_names_and_a_web_urls_token_are_masked(argv):
    """A review (2026-12-03) passed these through into the store's command, the lease file, spec.json and
    MLflow: names the list did not hold, a header's value, a URL whose userinfo is a token without a ':'."""
    from xover.redact import holds_credentials, mask_argv, mask_credentials

    assert not _leaks(json.dumps(mask_argv(argv))) and holds_credentials(argv), mask_argv(argv)
    line = mask_credentials(shlex.join(["xover", "run", "--script", "t.py", "--", *argv]))
    assert not _leaks(line) and shlex.split(line)[:2] == ["xover", "run"], line


@pytest.mark.parametrize("argv", [
    ["--author", "me"], ["--patience", "3"], ["--keys", "3"], ["--tokenizer", "gpt2"], ["--key-file", "/k"],
    ["ssh://user@host/x"], ["postgresql://user@host/db"], ["--signal", "TERM"], ["--monkey", "1"],
    ["--dataset", "hf_digits"], ["--model", "sk-learn"], ["--power", "3"],
    # a pass over the data, not a password (the flags' next word is an option); -p is a port as often
    ["--passes", "3"], ["--num-passes", "2"], ["--bypass", "1"], ["--compass", "N"], ["--pass-through", "1"],
    ["--two-pass", "--lr", "0.1"], ["--first_pass", "1"], ["--no-pass", "--seed", "1"], ["--passenger", "x"],
    ["-p", "5432"], ["--session", "s1"], ["--sigma", "1"], ["--keep-best", "1"], ["--key-frames", "8"],
    # a certificate is public; a word that starts as a JWT's header, and a connection string without a password
    ["--cert", "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"], ["--file", "eyJfoo.txt"],
    ["--dsn", "host=db user=u port=5432 sslmode=require"], ["--message", "a = b c=d"],
])
def test_words_that_only_look_like_credentials_are_kept(argv):
    from xover.redact import mask_argv

    assert mask_argv(argv) == argv


def test_a_tracking_uri_whose_token_is_its_userinfo_is_not_repeated_in_the_error():
    from xover.redact import without_secrets_of

    uri = f"http://{START}tok{END}@127.0.0.1:1/"
    shown = without_secrets_of(uri, f"cannot reach {uri}: {START}tok{END} refused")
    assert not _leaks(shown) and "http://***@127.0.0.1:1/" in shown, shown


def test_a_released_lease_no_longer_names_its_holder(tmp_path, monkeypatch):
    """The lease file (every user reads it) kept the holder's command after the run: a masked command still
    names the user's scripts, data and arguments."""
    monkeypatch.setenv("XOVER_LEASE_DIR", str(tmp_path))
    held = DeviceLeases("experiment e1 (xover run --script /home/me/secret_project/train.py)")
    assert held.try_acquire([("localhost", 0)]) == {}
    lease = tmp_path / DeviceLeases._name(("localhost", 0))
    assert "secret_project" in lease.read_text()
    held.release()
    assert lease.read_text() == ""
    again = DeviceLeases("experiment e2")  # an empty lease is a lease xover writes again
    assert again.try_acquire([("localhost", 0)]) == {} and "e2" in lease.read_text()
    again.release()


def test_mlflow_is_given_no_hash_of_a_recipe_that_holds_values(tmp_path):
    """`recipe.hash` counts env values and a script's credential arguments: a short value could be guessed
    offline from it. MLflow (read by others) gets it only for a recipe that holds none."""
    from conftest import recorded_runs
    from sqlalchemy import select

    from xover.report.mlflow import recipe_params
    from xover.store.models import RecipeSnapshot

    store, _recorder, [run_id] = recorded_runs(tmp_path, [{"name": "a", "mode": "solo", "hosts": "localhost",
                                                           "np": 1}])
    shown = []
    for body in ({"name": "a", "env": {"PIN": "1234"}}, {"name": "a", "args": ["--api-key", "1234"]},
                 {"name": "a", "args": ["--lr", "0.1"], "env": {}}):
        with store.session() as session, session.begin():
            session.scalars(select(RecipeSnapshot)).one().body = body
        with store.session() as session:
            shown.append("recipe.hash" in recipe_params(session, "e1")[run_id])
    store.close()
    assert shown == [False, False, True]


def test_a_tracking_uri_that_is_not_a_url_is_one_line():
    from typer.testing import CliRunner

    from xover.cli import app

    result = CliRunner().invoke(app, ["report", "--format", "mlflow", "--tracking-uri", f"http://u:{START}pw{END}@[::1"])
    assert result.exit_code == 2 and "not a URL" in result.output, result.output
    assert not _leaks(result.output) and "Traceback" not in result.output, result.output


def test_a_long_argument_is_masked_in_one_pass_not_one_per_character():
    # a search for scheme:// from every letter of a 200 KB argument held the launch for two minutes; it would
    # still be searching when this subprocess's minute runs out
    program = (
        "from xover.redact import credential_name, mask_argv, url_secrets\n"
        "long = 'a' * 200_000\n"
        "assert mask_argv([long, 'x' * 100_000 + '://u:pw@h', '1a' * 50_000 + 'https://tok@h']) == "
        "[long, 'x' * 100_000 + '://u:***@h', '1a' * 50_000 + 'https://***@h']\n"
        "assert url_secrets('@' + 'a://:' * 40_000) == []\n"
        # a JWT looked for from each `eyJ`, NAME=value from each space, a private key's name from each BEGIN
        "for long in ('eyJ' * 70_000, 'eyJaaaa.' * 25_000, 'a= ' * 70_000, 'a = ' * 50_000,\n"
        "             '-----BEGIN ' * 9_000 + 'A ' * 50_000):\n"
        "    assert mask_argv(['--x', long]) == ['--x', long]\n"
        # and a name's `-pass` looked for after each separator
        "assert credential_name('x_' * 100_000 + 'pass') and not credential_name('x_' * 100_000 + 'two_pass')\n"
        # and an option's value inside a word, from each space
        "for long in ('-a x' * 50_000, '-a ' * 70_000, '--password ' + 'x ' * 70_000, ' -' * 70_000):\n"
        "    mask_argv(['--x', long])\n"
        # and a JSON argument's quoted strings, from each quote (escaped quotes never closed: 64 s, 2026-12-07)
        "for long in ('\"' + '\\\\\"' * 100_000 + ':', '\"' * 200_000 + ':', \"'a':\" * 50_000):\n"
        "    assert mask_argv(['--x', long]) == ['--x', long]\n"
    )
    subprocess.run([sys.executable, "-c", program], check=True, timeout=60)


def test_an_option_and_its_password_inside_one_argument_are_masked_and_the_next_argument_kept():
    """A script's arguments passed on as one (`--extra-args "--password pw --epochs 3"`) kept the password (the
    NAME=value form inside a word was masked, the two-word form was not), and the argument after such a word was
    masked instead, as if the whole word were an option named for a password (2026-12-06)."""
    from xover.redact import holds_credentials, mask_argv, mask_command

    argv = ["--extra-args", "--password pw --epochs 3", "--x", "--name a --token t1 --lr 0.1", "--y",
            "--password 'a b' --k v", "--z", "--lr -0.1 --pw s"]
    assert mask_argv(argv) == ["--extra-args", "--password *** --epochs 3", "--x", "--name a --token *** --lr 0.1",
                               "--y", "--password *** --k v", "--z", "--lr -0.1 --pw ***"]
    assert holds_credentials(["--extra-args", "--password pw"]) and "pw" not in mask_command(argv).split("***")[0]
    assert mask_argv(["--extra-args", "--epochs 3 --lr 0.1"]) == ["--extra-args", "--epochs 3 --lr 0.1"]


def test_a_password_that_starts_with_a_dash_inside_one_argument_is_masked():
    """`--extra-args "--password -x7 --epochs 3"` kept `-x7`: a value inside a word was read to start with anything
    but '-', where the next argument after a credential's option is masked whatever it is (2026-12-06)."""
    from xover.redact import mask_argv

    argv = ["--a", "--password -x7 --epochs 3", "--b", "--verbose --api-key -k1", "--c", "--lr -0.1 --epochs 3",
            "--d", "--password --epochs 3"]
    assert mask_argv(argv) == ["--a", "--password *** --epochs 3", "--b", "--verbose --api-key ***", "--c",
                               "--lr -0.1 --epochs 3", "--d", "--password *** 3"]


def test_an_option_ending_in_auth_is_a_credential_and_an_author_is_not():
    from xover.redact import mask_argv

    assert mask_argv(["--hf-auth", "hf_abc", "--basic_auth=u:p", "--author", "me", "--auth-file", "a.json"]) == [
        "--hf-auth", "***", "--basic_auth=***", "--author", "me", "--auth-file", "a.json"]


def test_plan_json_shows_no_env_value_and_no_credential_argument_the_plan_file_keeps():
    """`xover plan --json` printed the plan file's content whole (a probe, 2026-12-06: a job file's `--token=`,
    `--password`, a database URL's password and an `env` value, in a CI log); the store's rows never had them."""
    from dataclasses import replace

    from xover.plan import JobProfile, local_hosts, make_plan
    from xover.plan.make import PlannedScript
    from xover.plan.step import PlanWritten

    script = PlannedScript(path="t.py", args=["--token", f"{START}1{END}", f"--db=postgresql://u:{START}2{END}@h/d"],
                           engine="torch", sha256="0" * 64, env={"MY_SETTING": f"{START}3{END}"})
    plan = replace(make_plan([JobProfile("job", 1, 100.0, 50.0, 1.0)], local_hosts(1)), scripts={"job": script})
    shown = json.dumps(PlanWritten(plan, 1, "plan.json", None, None).to_dict())
    assert not _leaks(shown) and '"MY_SETTING": "***"' in shown and '"--token", "***"' in shown, shown
    assert plan.scripts["job"].env["MY_SETTING"] == f"{START}3{END}"  # the plan itself (its file) keeps them


# ------------------------------------------------------------------ a probe, 2026-12-06: shapes the names missed

LIBPQ_STRINGS = [
    # (as typed, as shown): a libpq connection string passed as one argument, its other settings kept as typed
    (f"host=db user=u password={START}pw{END}", "host=db user=u password=***"),
    (f"host=db sslpassword={START}keypw{END}x port=5432", "host=db sslpassword=*** port=5432"),
    # libpq's spaced '=' and single-quoted value, spaces and a backslash-escaped quote in it
    (f"host=db password = '{START}a b\\'c d{END}' dbname=x", "host=db password = *** dbname=x"),
    (f"dbname=x\n  password={START}a\\ b{END}", "dbname=x\n  password=***"),  # an escaped space, across lines
]


@pytest.mark.parametrize("typed, shown", LIBPQ_STRINGS)
def test_a_connection_string_given_as_one_argument_has_its_password_masked(typed, shown):
    """`--dsn "host=db user=u password=pw"`: one word, spaces and all, kept whole in the stored command, the
    lease file, spec.json and `xover plan --json`, since the word as a whole is no NAME=value of a credential."""
    from xover.redact import holds_credentials, mask_argv, mask_credentials

    assert mask_argv(["--dsn", typed]) == ["--dsn", shown] and holds_credentials(["--dsn", typed])
    assert mask_argv([f"--dsn={typed}"]) == [f"--dsn={shown}"]
    line = mask_credentials(shlex.join(["xover", "run", "--", "t.py", "--dsn", typed, "--lr", "0.1"]))
    assert not _leaks(line) and shlex.split(line) == ["xover", "run", "--", "t.py", "--dsn", shown, "--lr", "0.1"]


@pytest.mark.parametrize("option", ["--smtp-pass", "--db-pass", "--mysql-pwd", "--db_pwd", "--pass-phrase",
                                    "--passcode", "--oauth", "--oauth-token", "--jwt", "--jwt-secret", "-storepass", "-keypass",
                                    "--admin.pass"])
def test_options_named_for_a_pass_pwd_passcode_oauth_or_jwt_are_credentials(option):
    """A password's `-pass` and `-pwd` at a name's end, a passcode, a pass phrase spelled apart, OAuth's and a
    JWT's options: their values went into the store, the lease file, spec.json and MLflow as typed."""
    from xover.redact import holds_credentials, mask_argv

    value = f"{START}v{END}"
    assert mask_argv([option, value, "--lr", "0.1"]) == [option, "***", "--lr", "0.1"]
    assert mask_argv([f"{option}={value}"]) == [f"{option}=***"] and holds_credentials([f"{option}={value}"])


JWT = f"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.{START}JwtSig{END}"
PRIVATE_KEY = f"-----BEGIN RSA PRIVATE KEY-----\nMIIEo{START}key{END}\n-----END RSA PRIVATE KEY-----\n"


@pytest.mark.parametrize("argv, shown", [
    (["--x", JWT], ["--x", "***"]),
    ([f"--header=X-Id: {JWT}", "--lr", "0.1"], ["--header=X-Id: ***", "--lr", "0.1"]),  # where it stands
    ([f"https://app.example/cb#id_token={JWT}&state=1"], ["https://app.example/cb#id_token=***&state=1"]),
    (["--unsigned", f"eyJhbGciOiJub25lIn0.eyJ{START}{END}."], ["--unsigned", "***"]),
    (["--ssh", PRIVATE_KEY], ["--ssh", "***"]),
    ([f"--key-material={PRIVATE_KEY}"], ["--key-material=***"]),
    (["--ssh", PRIVATE_KEY.replace("RSA", "OPENSSH")], ["--ssh", "***"]),
    (["--gpg", f"-----BEGIN PGP PRIVATE KEY BLOCK-----\n{START}{END}"], ["--gpg", "***"]),
])
def test_a_jwt_or_a_private_key_is_masked_by_its_shape_whatever_option_it_follows(argv, shown):
    from xover.redact import holds_credentials, mask_argv, mask_credentials

    assert mask_argv(argv) == shown and holds_credentials(argv)
    assert not _leaks(mask_credentials(shlex.join(["xover", "run", "--", "t.py", *argv])))


def test_plan_json_shows_no_password_of_a_connection_string_argument():
    from dataclasses import replace

    from xover.plan import JobProfile, local_hosts, make_plan
    from xover.plan.make import PlannedScript
    from xover.plan.step import PlanWritten

    args = ["--dsn", f"host=db user=u password={START}1{END}", "--smtp-pass", f"{START}2{END}", "--bearer-jwt", JWT]
    script = PlannedScript(path="t.py", args=args, engine="torch", sha256="0" * 64)
    plan = replace(make_plan([JobProfile("job", 1, 100.0, 50.0, 1.0)], local_hosts(1)), scripts={"job": script})
    shown = json.dumps(PlanWritten(plan, 1, "plan.json", None, None).to_dict())
    assert not _leaks(shown) and '"host=db user=u password=***"' in shown, shown


@pytest.mark.parametrize("argv", [
    # a probe, 2026-12-07: Hydra overrides that add or force a key, a JSON or dict argument, names ending in _pw,
    # libpq's PGPASS, curl's --user user:password
    [f"+db.password={START}1{END}"], [f"++wandb.api_key={START}2{END}"], [f"~token={START}3{END}"],
    ["--cfg", f'{{"token": "{START}4{END}", "lr": 0.1}}'], [f'--cfg={{"password":"{START}5{END}"}}'],
    ["--overrides", f"{{'api_key': '{START}6{END}'}}"], ["--db-pw", f"{START}7{END}"], [f"DB_PW={START}8{END}"],
    [f"PGPASS={START}9{END}"], ["--user", f"bob:{START}10{END}"], [f"--user=bob:{START}11{END}"],
    [f'--auth-header={{"token": "{START}12\\"{END}"}}'],
])
def test_hydra_overrides_json_arguments_and_user_passwords_are_masked(argv):
    from xover.redact import argv_secrets, holds_credentials, mask_argv, mask_credentials

    assert not _leaks(json.dumps(mask_argv(argv))) and holds_credentials(argv), mask_argv(argv)
    assert not _leaks(mask_credentials(shlex.join(["xover", "run", "--", *argv])))
    assert all(START in secret for secret in argv_secrets(argv)), argv_secrets(argv)


@pytest.mark.parametrize("argv", [
    ["+trainer.max_epochs=3"], ["--cfg", '{"lr": 0.1, "model": "resnet"}'], ["--user", "bob"], ["-u", "3"],
    ["--time", "12:30"], ["--hparams", '{"warmup": "linear"}'],
])
def test_overrides_and_json_arguments_without_credentials_are_kept(argv):
    from xover.redact import mask_argv

    assert mask_argv(argv) == argv


@pytest.mark.parametrize("secret", [f"it's \"{START}q{END}\"", f"{START}ünï{END}", f"{START}tab\\t{END}",
                                    f"{START}p%40ss{END}"])
def test_a_secret_printed_escaped_or_decoded_is_masked_in_a_jobs_output(secret):
    """A probe, 2026-12-07: a job file's secret value a script printed with json.dumps, repr or ascii (a config dump,
    a JSON error), or a URL's password its driver percent-decoded, went whole into launcher.log, the stored error
    and every report: only the value as typed was masked."""
    from urllib.parse import unquote

    from xover.redact import without_values

    encoded = secret.encode()
    for printed in (json.dumps(secret), json.dumps(secret, ensure_ascii=False), repr(secret), ascii(secret),
                    repr(encoded), unquote(secret)):
        shown = without_values(f"RuntimeError: config was {printed}", [secret])
        assert not _leaks(shown), (printed, shown)


@pytest.mark.parametrize("uri", [f"http:/alice:{START}1{END}@127.0.0.1:9", f"alice:{START}2{END}@127.0.0.1:9",
                                 f"htp:/alice:{START}3{END}@x"])
def test_a_tracking_uri_that_lost_its_slashes_is_refused_without_its_password(uri):
    from typer.testing import CliRunner

    from xover.cli import app

    result = CliRunner().invoke(app, ["report", "--format", "mlflow", "--tracking-uri", uri])
    assert result.exit_code == 2 and "without its scheme://" in result.output, result.output
    assert not _leaks(result.output) and "Traceback" not in result.output, result.output


@pytest.mark.parametrize("body, field, shown", [
    (f'args = "--db postgresql://u:{START}a{END}@h/db"', "args", "got a string"),
    (f'args = {{ token = "{START}b{END}" }}', "args", "got a table"),
    (f'env = "API_TOKEN={START}c{END}"', "env", "got a string"),
    (f'pass_env = "API_TOKEN={START}d{END}"', "pass_env", "got a string"),
    (f'pass_env = ["API_TOKEN={START}e{END}"]', "pass_env[0]", "got 'API_TOKEN=***'"),
    (f'env = {{ "API_TOKEN={START}f{END}" = "x" }}', "env.API_TOKEN=***", "can have"),
])
def test_a_whole_field_of_the_wrong_type_that_may_hold_a_token_is_named_by_its_kind(tmp_path, body, field, shown):
    """A probe, 2026-12-07: 'args' given as one string, 'env' as NAME=value, a pass_env entry NAME=value: the
    refusal repeated the value, password and all."""
    from xover.recipes import RecipeError, load_recipe

    with pytest.raises(RecipeError) as refused:
        load_recipe(_job_file(tmp_path, body))
    message = str(refused.value)
    assert f"field '{field}'" in message and message.endswith(shown), message
    assert not _leaks(message), message
