"""What a job's profiles and measurements are kept under (recipes.py): what it computes, not what it is called.
`Recipe.job_hash` (profiles) and `Recipe.workload` (measurements of sharing, plan/measured.py) leave out its
`name` and `description`, so that a renamed job file, a recipe copied under another name, or a `--script` whose
file was renamed is the same job; `Recipe.hash`, the key of the recipe's snapshot in the store, keeps the name
(and was the profiles' key before 2026-12-02: `profile_keys` still finds those). Whatever changes what runs -
a script's body or a module of its own, its arguments, its `env`, its engine, the ranks, a built-in model's batch
or optimizer - is another job."""

import dataclasses
from pathlib import Path

import pytest

from xover.recipes import load_recipe, parse_recipe, script_recipe, with_overrides

ROOT = Path(__file__).resolve().parents[2]
HOROVOD = ROOT / "recipes" / "examples" / "horovod_digits.py"
DDP = ROOT / "recipes" / "examples" / "ddp_digits.py"
VALID = {"name": "t", "model": "mlp", "dataset": "digits", "batch_size": 8, "optimizer": "sgd", "lr": 0.1,
         "np": 2, "seed": 1, "iterations": 10}


def _job_file(folder: Path, file: str, text: str) -> Path:
    path = folder / file
    path.write_text(text)
    return path


def test_a_recipe_under_another_name_or_description_is_the_same_job_but_another_snapshot():
    first = parse_recipe(VALID, "a.toml")
    renamed = parse_recipe({**VALID, "name": "other", "description": "the same MLP, described"}, "b.toml")
    assert renamed.job_hash == first.job_hash and renamed.workload == first.workload
    assert renamed.hash != first.hash  # the snapshot of the recipe as written keeps its name
    # profiles keyed with the length from 2026-12-02 to 2026-12-07, and by the name before
    assert first.profile_keys == (first.profile_key, first.job_hash, first.hash)
    assert renamed.legacy_workload != first.legacy_workload  # ... and measurements: those hold under their name


def test_a_shipped_recipe_keeps_its_hash_and_its_job_hash_leaves_its_name_out():
    recipe = load_recipe("mlp-balanced")
    assert recipe.hash == "67b33056e377e648"  # snapshots and the profiles stored before 2026-12-02 hold
    assert recipe.job_hash == dataclasses.replace(recipe, name="x", description="y").job_hash != recipe.hash


def test_a_renamed_job_file_is_the_same_job(tmp_path):
    (tmp_path / "train.py").write_bytes(HOROVOD.read_bytes())
    first = load_recipe(_job_file(tmp_path, "first.toml", 'script = "train.py"\nnp = 2\niterations = 20\n'))
    renamed = load_recipe(_job_file(tmp_path, "renamed.toml", 'script = "train.py"\nnp = 2\niterations = 20\n'))
    assert (first.name, renamed.name) == ("first", "renamed")  # a job file's name is its file's, unless given
    assert renamed.job_hash == first.job_hash and renamed.workload == first.workload
    named = load_recipe(_job_file(tmp_path, "named.toml", 'name = "mine"\ndescription = "my run"\n'
                                                         'script = "train.py"\nnp = 2\niterations = 20\n'))
    assert named.job_hash == first.job_hash and named.workload == first.workload
    assert len({first.hash, renamed.hash, named.hash}) == 3


def test_a_renamed_or_moved_script_with_the_same_content_is_the_same_job(tmp_path):
    (tmp_path / "train.py").write_bytes(HOROVOD.read_bytes())
    (tmp_path / "moved").mkdir()
    (tmp_path / "moved" / "fit.py").write_bytes(HOROVOD.read_bytes())
    first = script_recipe(tmp_path / "train.py", np=2, engine="horovod")  # `--script train.py`
    moved = script_recipe(tmp_path / "moved" / "fit.py", np=2, engine="horovod")
    assert (first.name, moved.name) == ("train", "fit")
    assert moved.job_hash == first.job_hash and moved.workload == first.workload


def test_its_length_and_its_max_slowdown_keep_its_profile():
    """A job made longer, or given a `max_slowdown`, asked for a new profile (helper-90's probe, 2026-12-07): a
    profile measures its own steps, and the plan reads both from the recipe."""
    recipe = parse_recipe(VALID, "a.toml")
    longer = with_overrides(recipe, iterations=999)
    assert longer.workload == recipe.workload and longer.job_hash != recipe.job_hash
    protected = parse_recipe({**VALID, "max_slowdown": 1.5}, "a.toml")
    by_epochs = parse_recipe({**{k: v for k, v in VALID.items() if k != "iterations"}, "epochs": 3}, "a.toml")
    assert longer.profile_key == protected.profile_key == by_epochs.profile_key == recipe.profile_key
    assert parse_recipe({**VALID, "batch_size": 16}, "a.toml").profile_key != recipe.profile_key


def test_the_memory_a_job_file_tells_the_planner_keeps_its_profile(tmp_path):
    """`memory_gb = 0.5` added to a profiled job file asked for a new profile, and plan refused the job until then
    (helper-92's probe, 2026-12-07): the planner reads it from the job file, in place of the measured peak."""
    (tmp_path / "train.py").write_bytes(HOROVOD.read_bytes())
    job = 'script = "train.py"\nnp = 2\n'
    first = load_recipe(_job_file(tmp_path, "job.toml", job))
    told = load_recipe(_job_file(tmp_path, "job.toml", job + "memory_gb = 0.5\n"))
    assert told.memory_gb == 0.5 and told.profile_key == first.profile_key and told.job_hash != first.job_hash


@pytest.mark.parametrize("change", [
    {"batch_size": 16}, {"optimizer": "adam"}, {"lr": 0.2}, {"np": 4}, {"seed": 2},
    {"max_slowdown": 1.5}, {"precision": "bf16"}, {"model_options": {"hidden": 64}},
])
def test_what_changes_a_built_in_models_run_is_another_job(change):
    recipe = parse_recipe(VALID, "a.toml")
    changed = parse_recipe({**VALID, **change}, "a.toml")
    assert changed.workload != recipe.workload and changed.job_hash != recipe.job_hash, change
    assert (changed.profile_key == recipe.profile_key) == ("max_slowdown" in change), change


def test_what_changes_a_scripts_run_is_another_job(tmp_path):
    (tmp_path / "train.py").write_bytes(HOROVOD.read_bytes())
    job = 'script = "train.py"\nnp = 2\niterations = 20\n'
    # a script either engine can run (it imports both): its engine named, then the other
    (tmp_path / "both.py").write_text("import horovod.torch as hvd\n"
                                      "from torch.nn.parallel import DistributedDataParallel\n")
    both = 'script = "both.py"\nnp = 2\nengine = "{}"\n'
    assert (load_recipe(_job_file(tmp_path, "both.toml", both.format("horovod"))).workload
            != load_recipe(_job_file(tmp_path, "both.toml", both.format("torch"))).workload)
    recipe = load_recipe(_job_file(tmp_path, "job.toml", job))
    changed = {
        "args": job + 'args = ["--lr", "0.1"]\n',
        "env": job + 'env = { OMP_NUM_THREADS = "2" }\n',
        "np": job.replace("np = 2", "np = 1"),
    }
    for what, text in changed.items():
        other = load_recipe(_job_file(tmp_path, "job.toml", text))
        assert other.workload != recipe.workload and other.job_hash != recipe.job_hash, what
    _job_file(tmp_path, "job.toml", job)
    (tmp_path / "train.py").write_text(HOROVOD.read_text() + "\n# edited\n")  # the script's body
    assert load_recipe(tmp_path / "job.toml").workload != recipe.workload
    (tmp_path / "train.py").write_bytes(HOROVOD.read_bytes())
    assert load_recipe(tmp_path / "job.toml").workload == recipe.workload  # back as it was: the same job again
