from pathlib import Path

import pytest

from xover.recipes import RecipeError, load_recipe, parse_recipe, with_overrides

ROOT = Path(__file__).resolve().parents[2]

VALID = {"name": "t", "model": "mlp", "dataset": "digits", "batch_size": 8, "optimizer": "sgd", "lr": 0.1,
         "np": 2, "seed": 1, "iterations": 10}


def test_every_shipped_recipe_is_valid():
    recipes = sorted((ROOT / "recipes").glob("*.toml"))
    assert len(recipes) >= 6
    for path in recipes:
        recipe = load_recipe(path)
        assert recipe.name == path.stem


def test_hash_ignores_location_but_not_content():
    a = parse_recipe(VALID, "a.toml")
    b = parse_recipe(VALID, "elsewhere/b.toml")
    c = parse_recipe({**VALID, "lr": 0.2}, "a.toml")
    assert a.hash == b.hash != c.hash


@pytest.mark.parametrize("change, field, words", [
    ({"batchsize": 8}, "batchsize", "did you mean 'batch_size'"),
    ({"model": "resnett"}, "model", "unknown model 'resnett'"),
    ({"dataset": "imagenet"}, "dataset", "unknown dataset"),
    ({"batch_size": -4}, "batch_size", "must be positive"),
    ({"batch_size": 0}, "batch_size", "must be positive"),
    ({"batch_size": "8"}, "batch_size", "must be an integer"),
    ({"batch_size": True}, "batch_size", "must be an integer"),
    ({"lr": 0}, "lr", "must be positive"),
    ({"np": 0}, "np", "must be positive"),
    ({"optimizer": "lamb"}, "optimizer", "unknown optimizer"),
    ({"momentum": -1.0}, "momentum", "must be from 0 to below 1"),
    ({"momentum": 1.0}, "momentum", "must be from 0 to below 1 (0.9 is usual), got 1.0"),  # was taken: it diverges
    ({"epochs": 2}, "iterations", "exactly one of"),
    ({"iterations": 0}, "iterations", "must be positive"),
    ({"dataset": "python-chars"}, "dataset", "takes image inputs"),
    ({"model_options": {"depth": 3}}, "model_options.depth", "unknown option"),
    ({"dataset_options": {"size": 3}}, "dataset_options.size", "unknown option"),
    ({"model": "transformer", "dataset": "python-chars", "model_options": {"heads": 3}},
     "model_options.heads", "must divide d_model (128)"),
    ({"model": "transformer", "dataset": "python-chars", "model_options": {"d_model": 100, "heads": 8}},
     "model_options.heads", "must divide d_model (100)"),
])
def test_invalid_field_is_named(change, field, words):
    with pytest.raises(RecipeError) as error:
        parse_recipe({**VALID, **change}, "recipes/x.toml")
    message = str(error.value)
    assert message.startswith("recipes/x.toml: field ")
    assert f"'{field}'" in message and words in message


@pytest.mark.parametrize("missing", ["name", "model", "dataset", "batch_size", "optimizer", "lr", "np", "seed"])
def test_missing_required_field(missing):
    data = {k: v for k, v in VALID.items() if k != missing}
    # without 'model' the file may be a job file missing its 'script': the message names both (before: 'model' alone)
    expected = "field 'model' or 'script': missing; .* a job file your training script" if missing == "model" else (
        f"field '{missing}': missing")
    with pytest.raises(RecipeError, match=expected):
        parse_recipe(data, "x.toml")


def test_neither_iterations_nor_epochs():
    data = {k: v for k, v in VALID.items() if k != "iterations"}
    with pytest.raises(RecipeError, match="exactly one"):
        parse_recipe(data, "x.toml")


def test_toml_syntax_error_names_file_and_line(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('name = "x"\nmodel = \n')
    with pytest.raises(RecipeError) as error:
        load_recipe(path)
    assert str(path) in str(error.value) and "line 2" in str(error.value)


def test_missing_file_lists_known_recipes():
    with pytest.raises(RecipeError, match="no recipe file or built-in recipe of that name.*mlp-digits"):
        load_recipe("no-such-recipe")
    with pytest.raises(RecipeError, match="did you mean 'mlp-digit"):
        load_recipe("mlp-digitz")


def test_built_in_recipes_are_found_by_name_from_anywhere(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no recipes/ folder here
    assert load_recipe("resnet-synthetic").model == "resnet"
    (tmp_path / "recipes").mkdir()  # a user's own recipe of the same name comes first
    (tmp_path / "recipes" / "resnet-synthetic.toml").write_text(
        'name = "mine"\nmodel = "mlp"\ndataset = "digits"\nbatch_size = 8\noptimizer = "sgd"\nlr = 0.1\n'
        'np = 1\nseed = 0\niterations = 3\n')
    assert load_recipe("resnet-synthetic").name == "mine"


def test_recipe_by_name_and_overrides():
    recipe = with_overrides(load_recipe("mlp-digits"), iterations=3, np=1)
    assert (recipe.iterations, recipe.np, recipe.epochs) == (3, 1, None)
    with pytest.raises(RecipeError, match="--iterations"):
        with_overrides(recipe, iterations=0)


def test_a_plan_counts_a_recipe_in_epochs_as_it_trains():
    # the plan's iteration count is what `xover run PLAN` runs: 100 (the default for a trace row
    # without one) would have changed an epoch recipe's length
    from types import SimpleNamespace

    from xover.plan.from_profiles import job_profile
    from xover.workloads import build_dataset

    epochs = {key: value for key, value in VALID.items() if key != "iterations"}
    recipe = parse_recipe({**epochs, "epochs": 3}, "e.toml")
    dataset = build_dataset("digits", batch_size=8, rank=0, world_size=2, seed=1, options={})
    found = SimpleNamespace(link_ms=5.0, comm_ms=5.0, comm_cpu_ms=0.0, data_ms=0.1, compute_ms=10.0, memory_gb=0.1,
                            checkpoints=4, interference=0.0, corun_partner_link_share=None, startup_ms=0.0)
    assert job_profile(recipe, found).iterations == 3 * dataset.steps_per_epoch > 100
    assert job_profile(parse_recipe(VALID, "i.toml"), found).iterations == 10


def test_a_recipe_saved_with_a_byte_order_mark_reads_as_without_it(tmp_path):
    """A recipe an editor saved with a UTF-8 BOM was 'TOML syntax error: Invalid statement (at line 1, column 1)'."""
    from xover.recipes import BUILTIN_RECIPES, load_recipe

    text = (BUILTIN_RECIPES / "mlp-digits.toml").read_text(encoding="utf-8")
    (tmp_path / "with-bom.toml").write_text("\ufeff" + text, encoding="utf-8")
    (tmp_path / "without.toml").write_text(text, encoding="utf-8")
    with_bom, without = load_recipe(tmp_path / "with-bom.toml"), load_recipe(tmp_path / "without.toml")
    assert with_bom.name == without.name == "mlp-digits"
    assert with_bom.hash == without.hash
