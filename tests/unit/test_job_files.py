"""Job files (a recipe naming the user's own script): what they accept, what they refuse (file, field,
what to do; exit 2), what identifies the job (its script's content, not its place), and the plan's
script entries."""

import re
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from xover.cli import app
from xover.plan.planfile import PlanFormatError, plan_from_dict
from xover.recipes import MAX_ITERATIONS, RecipeError, load_recipe, script_recipe
from xover.run.record import failure_summary, shim_refusal

ROOT = Path(__file__).resolve().parents[2]
DDP = ROOT / "recipes" / "examples" / "ddp_digits.py"
HOROVOD = ROOT / "recipes" / "examples" / "horovod_digits.py"


def _job(tmp_path: Path, text: str, name: str = "job.toml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_a_job_file_names_a_script_next_to_it_and_finds_its_engine(tmp_path):
    (tmp_path / "train.py").write_bytes(DDP.read_bytes())
    recipe = load_recipe(_job(tmp_path, """
        script = "train.py"
        args = ["--steps", "5"]
        np = 2
        iterations = 4
        env = { OMP_NUM_THREADS = "1" }
    """))
    assert recipe.name == "job" and recipe.engine == "torch" and recipe.np == 2 and recipe.iterations == 4
    assert recipe.script == str((tmp_path / "train.py").resolve()) and recipe.args == ("--steps", "5")
    assert recipe.env == {"OMP_NUM_THREADS": "1"} and len(recipe.script_sha256) == 16


def test_the_examples_job_files_load():
    assert load_recipe("recipes/examples/ddp-digits.toml").engine == "torch"
    assert load_recipe("recipes/examples/horovod-digits.toml").engine == "horovod"


def test_a_script_job_is_its_content_not_its_place(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    for folder in (first, second):
        folder.mkdir()
        (folder / "train.py").write_bytes(HOROVOD.read_bytes())
    job = 'name = "j"\nscript = "train.py"\nnp = 2\n'
    a, b = load_recipe(_job(first, job)), load_recipe(_job(second, job))
    assert a.script != b.script and a.hash == b.hash  # the same job wherever it lives
    (second / "train.py").write_text(HOROVOD.read_text() + "\n# changed\n")
    assert load_recipe(second / "job.toml").hash != a.hash  # a changed script is a new job: profiled again
    assert load_recipe(_job(first, job.replace("np = 2", 'np = 2\nargs = ["--lr", "0.1"]'))).hash != a.hash


def test_recipes_of_built_in_models_keep_their_hashes():
    # profiles are keyed by the hash: the new fields must not change it for recipes without them
    assert load_recipe("mlp-balanced").hash == "67b33056e377e648"


@pytest.mark.parametrize("text, field, problem", [
    ('script = "train.py"\nmodel = "mlp"\nnp = 1', "model", "never both"),
    ('script = "train.py"\nnp = 1\nargs = ["--steps", 5]', "args[1]", "must be a string"),
    ('script = "train.py"\nnp = 1\nargs = "--steps 5"', "args", "list of strings"),
    ('script = "missing.py"\nnp = 1', "script", "file not found"),
    ('script = "train.py"', "np", "missing (required)"),
    ('script = "train.py"\nnp = 1\nengine = "mpi"', "engine", "choose horovod or torch"),
    ('script = "train.py"\nnp = 1\nbatch_size = 32', "batch_size", "belongs to built-in models"),
    ('script = "train.py"\nnp = 1\nepochs = 2', "epochs", "belongs to built-in models"),
    ('script = "train.py"\nnp = 1\nitterations = 2', "itterations", "did you mean 'iterations'"),
    ('script = "train.py"\nnp = 1\niterations = 0', "iterations", "from 1 to 1000000000, got 0"),
    # was "a whole number >= 1, got 99999999999999999": the bound it broke was not said
    ('script = "train.py"\nnp = 1\niterations = 99999999999999999', "iterations", "from 1 to 1000000000, got 9999"),
    # was "a folder: <the job file's folder>": Path('') is '.'
    ('script = ""\nnp = 1', "script", "empty; give the training script's .py file"),
    ('script = "train.py"\nnp = 1\nenv = { XOVER_JOB = "x" }', "env.XOVER_JOB", "XOVER_"),
    ('script = "train.py"\nnp = 1\nenv = { OMP_NUM_THREADS = 4 }', "env.OMP_NUM_THREADS", "string"),
    ('script = "train.py"\nnp = 1\nmemory_gb = 0', "memory_gb", "> 0"),
    ('script = "train.py"\nnp = 1\nmax_slowdown = 0.5', "max_slowdown", "at least 1.0"),
    # a plan and a trace take 'a#2': why a job file's name does not was not said
    ('name = "train#2"\nscript = "train.py"\nnp = 1', "name", "'#' marks a second copy of a job in a plan"),
])
def test_bad_job_files_name_the_file_and_field(tmp_path, text, field, problem):
    (tmp_path / "train.py").write_bytes(HOROVOD.read_bytes())
    path = _job(tmp_path, text)
    with pytest.raises(RecipeError) as error:
        load_recipe(path)
    message = str(error.value)
    assert message.startswith(f"{path}: field '{field}': ") and problem in message, message


def test_a_script_whose_engine_cannot_be_told_asks_for_it(tmp_path):
    (tmp_path / "train.py").write_text("import horovod.torch\nimport torch.distributed\n")
    with pytest.raises(RecipeError, match=r"field 'engine': missing, and the script imports horovod .* and torch "
                                          r".*set engine = \"horovod\""):
        load_recipe(_job(tmp_path, 'script = "train.py"\nnp = 1'))
    (tmp_path / "plain.py").write_text("print('hello')\n")
    with pytest.raises(RecipeError, match=r"imports neither horovod nor torch.distributed"):
        load_recipe(_job(tmp_path, 'script = "plain.py"\nnp = 1'))
    (tmp_path / "broken.py").write_text("def f(:\n")
    with pytest.raises(RecipeError, match=r"field 'script': line 1: not valid Python"):
        load_recipe(_job(tmp_path, 'script = "broken.py"\nnp = 1'))


def test_a_ddp_script_that_cannot_be_crossed_over_is_refused_in_its_job_file(tmp_path):
    (tmp_path / "train.py").write_text("import torch.distributed as dist\nimport torch\n"
                                       "torch.nn.SyncBatchNorm.convert_sync_batchnorm(None)\n"
                                       "from torch.nn.parallel import DistributedDataParallel\n")
    with pytest.raises(RecipeError, match=r"job.toml: field 'script': uses SyncBatchNorm"):
        load_recipe(_job(tmp_path, 'script = "train.py"\nnp = 1'))


def test_bad_job_files_exit_2_with_one_line_on_every_command(tmp_path):
    (tmp_path / "train.py").write_bytes(HOROVOD.read_bytes())
    path = _job(tmp_path, 'script = "train.py"\nnp = 1\nargs = [1]')
    runner = CliRunner()
    for command in (["profile", str(path)], ["plan", str(path), "--devices", "1"], ["train", str(path)],
                    ["run", "--group", str(path)]):
        result = runner.invoke(app, command)
        assert result.exit_code == 2, (command, result.output)
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert len(lines) == 1 and "field 'args[0]'" in lines[0], (command, result.output)


def test_script_recipes_of_the_command_line_shortcut_match_job_files(tmp_path):
    (tmp_path / "train.py").write_bytes(HOROVOD.read_bytes())
    job = load_recipe(_job(tmp_path, 'name = "train"\nscript = "train.py"\nnp = 2\nargs = ["--steps", "3"]'))
    shortcut = script_recipe(tmp_path / "train.py", args=["--steps", "3"], np=2, engine="horovod")
    assert shortcut.hash == job.hash  # `--script train.py -- --steps 3` finds the job file's profile


def _plan_with_script(script: dict) -> dict:
    return {"format": "xover-plan/1", "algo": "none", "hosts": [["localhost", 1]],
            "groups": [{"jobs": ["j"], "devices": ["localhost:0"], "wave": 0, "predicted_period_ms": 1.0,
                        "predicted_gain": 1.0, "predicted_duration_ms": 1.0, "predicted_slowdown": {"j": 1.0}}],
            "jobs": {"j": {"devices": 1, "compute_ms": 1.0, "comm_ms": 1.0, "memory_gb": 0.1, "script": script}},
            "unplaced": [], "predicted_aggregate_gain": 1.0, "predicted_makespan_ms": 1.0,
            "sequential_makespan_ms": 1.0}


def test_a_plans_script_entries_are_checked():
    good = {"path": "/x/train.py", "args": ["--a"], "engine": "torch", "sha256": "abc", "iterations": None,
            "env": {}, "pass_env": ["HF_TOKEN"]}
    assert plan_from_dict(_plan_with_script(good)).unknown_keys == ()  # every key a script entry is written with
    assert plan_from_dict(_plan_with_script({**good, "argz": []})).unknown_keys == (
        "jobs.j.script.argz (did you mean 'args'?)",)
    for change, where in (({"engine": "mpi"}, "jobs.j.script.engine"), ({"args": [3]}, "jobs.j.script.args[0]"),
                          ({"sha256": None}, "jobs.j.script.sha256"), ({"iterations": 0}, "jobs.j.script.iterations"),
                          ({"env": {"A": 1}}, "jobs.j.script.env.A")):
        with pytest.raises(PlanFormatError, match=re.escape(f"'{where}'")):
            plan_from_dict(_plan_with_script({**good, **change}))
    with pytest.raises(PlanFormatError, match=re.escape("'jobs.j.script.path'")):
        plan_from_dict(_plan_with_script({"args": []}))


def test_the_shims_line_is_the_reason_of_a_failed_job(tmp_path):
    rank = tmp_path / "ranks" / "rank.1"
    rank.mkdir(parents=True)
    (rank / "stderr").write_text("some warning\nxover: /w/train.py: second process group (new_group)\n")
    summary = failure_summary(tmp_path, ["launcher noise"])
    assert summary.endswith("xover: /w/train.py: second process group (new_group)")
    assert shim_refusal(summary) == "second process group (new_group)"
    # one rank under horovodrun: no per-rank logs, the line comes relayed in the launcher's log
    (tmp_path / "ranks" / "rank.1" / "stderr").unlink()
    (tmp_path / "launcher.log").write_text("[0]<stderr>:xover: /w/train.py: no optimizer.step()\nTraceback (...)\n")
    assert failure_summary(tmp_path, []) == "xover: /w/train.py: no optimizer.step()"
    assert shim_refusal("Traceback\nRuntimeError: boom") is None


def test_a_script_job_on_gpus_sees_its_own_devices_in_local_rank_order():
    from xover.devices import script_gpu_env

    # a script picks cuda:LOCAL_RANK itself: placed on devices 2 and 3, its ranks must see GPUs 2 and 3 there
    assert script_gpu_env([2, 3], ["0", "1", "2", "3"], {}) == {"CUDA_VISIBLE_DEVICES": "2,3",
                                                               "XOVER_CUDA_BY_LOCAL_RANK": "1"}
    assert script_gpu_env([1], ["GPU-a", "GPU-b"], {})["CUDA_VISIBLE_DEVICES"] == "GPU-b"  # as the outer list names them
    assert script_gpu_env([0, 1], [], {}) == {}  # a CPU machine
    assert script_gpu_env([0, 1], ["0"], {"XOVER_DEVICES_PER_GPU": "2"}) == {}  # one GPU cannot be shown twice


@pytest.mark.parametrize(("body", "field"), [('args = ["a\\u0000b"]', "args[0]"), ('env = {A = "x\\u0000y"}', "env.A")])
def test_a_nul_character_in_what_reaches_the_scripts_argv_or_environment_is_refused(tmp_path, body, field):
    """No argv nor environment can carry a NUL: refused with the file and field, not a traceback at the start."""
    (tmp_path / "train.py").write_bytes(DDP.read_bytes())
    with pytest.raises(RecipeError, match=rf"field '{re.escape(field)}': holds a NUL character"):
        load_recipe(_job(tmp_path, f'script = "train.py"\nnp = 1\n{body}\n'))


def test_a_plans_wrong_values_are_shown_as_its_json_writes_them_and_iterations_end_where_run_ends():
    """A hand-edited plan's wrong value is named as the file writes it (true, null, an object), not as Python does
    (True, None, dict); a job's iterations stop at what `run --iterations` takes (they stopped at 2**31 - 1)."""
    good = {"path": "/x/train.py", "args": [], "engine": "torch", "sha256": "abc", "iterations": None, "env": {}}
    for change, shown in (({"iterations": True}, "got true"), ({"sha256": None}, "got null"),
                          ({"env": {"A": {"b": 1}}}, "got an object"), ({"engine": False}, "unknown engine false"),
                          ({"args": [None]}, "got null"),
                          ({"iterations": MAX_ITERATIONS + 1}, f"from 1 to {MAX_ITERATIONS}, got {MAX_ITERATIONS + 1}")):
        with pytest.raises(PlanFormatError) as refused:
            plan_from_dict(_plan_with_script({**good, **change}))
        assert shown in str(refused.value) and "True" not in str(refused.value), (change, str(refused.value))
    assert plan_from_dict(_plan_with_script({**good, "iterations": MAX_ITERATIONS})).scripts


def test_a_job_file_given_twice_to_profile_is_profiled_once_and_two_files_of_one_name_are_refused(tmp_path):
    """`xover profile sj.toml sj.toml` measured the job twice, alone and next to the partner, for one stored
    profile (a probe session, 2026-12-06); `plan` refused the same. Two files of one job name are refused too."""
    from xover.errors import XoverError
    from xover.profile.step import _once_each

    (tmp_path / "train.py").write_bytes(DDP.read_bytes())
    job = _job(tmp_path, 'script = "train.py"\nname = "sj"\nnp = 2\n')
    assert [r.name for r in _once_each([load_recipe(job), load_recipe(job), load_recipe("mlp-synthetic")])] == [
        "sj", "mlp-synthetic"]
    other = _job(tmp_path, 'script = "train.py"\nname = "sj"\nnp = 2\nargs = ["--steps", "3"]\n', name="other.toml")
    with pytest.raises(XoverError, match=r"job name 'sj' is given twice \(.*job.toml and .*other.toml\)"):
        _once_each([load_recipe(job), load_recipe(other)])
