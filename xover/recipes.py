"""Recipe files (TOML): one training job - model, dataset, batch size, optimizer, length, devices, seed.

Validation reports the file, the field and the problem, so a typo costs one read of one line.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import re
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .errors import XoverError
from .workloads import BERT_DEFAULTS, DATASETS, MODELS, TRANSFORMER_DEFAULTS

OPTIMIZERS = ("sgd", "adam", "adamw")


class RecipeError(XoverError):
    pass


@dataclass(frozen=True)
class Recipe:
    name: str
    model: str
    dataset: str
    batch_size: int  # per rank, as Horovod counts it
    optimizer: str
    lr: float
    np: int
    seed: int
    iterations: int | None = None
    epochs: int | None = None
    momentum: float = 0.0
    weight_decay: float = 0.0
    eval_interval: int = 0  # iterations between evaluations; 0 = only at the end
    max_slowdown: float | None = None  # protection: never planned, nor run, slower than this x alone
    description: str = ""
    model_options: dict[str, Any] = field(default_factory=dict)
    dataset_options: dict[str, Any] = field(default_factory=dict)
    path: str = ""

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("path")
        if data["max_slowdown"] is None:
            del data["max_slowdown"]  # absent as before the field existed: hashes of older recipes hold
        return data

    @property
    def hash(self) -> str:
        """Content hash of what determines the job's behaviour (not where the file lives)."""
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:16]


# field name -> (accepted python types, required)
_FIELDS: dict[str, tuple[tuple[type, ...], bool]] = {
    "name": ((str,), True),
    "model": ((str,), True),
    "dataset": ((str,), True),
    "batch_size": ((int,), True),
    "optimizer": ((str,), True),
    "lr": ((int, float), True),
    "np": ((int,), True),
    "seed": ((int,), True),
    "iterations": ((int,), False),
    "epochs": ((int,), False),
    "momentum": ((int, float), False),
    "weight_decay": ((int, float), False),
    "eval_interval": ((int,), False),
    "max_slowdown": ((int, float), False),
    "description": ((str,), False),
    "model_options": ((dict,), False),
    "dataset_options": ((dict,), False),
}

_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", dict: "a table"}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")


def _suggest(word: str, choices) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def parse_recipe(data: dict[str, Any], source: str) -> Recipe:
    """Validate a recipe's fields; `source` names the file in every message."""

    def fail(field_name: str, problem: str) -> RecipeError:
        return RecipeError(f"{source}: field '{field_name}': {problem}")

    for key in data:
        if key not in _FIELDS:
            raise fail(key, f"unknown field{_suggest(key, _FIELDS)}; known fields: {', '.join(_FIELDS)}")
    for key, (types, required) in _FIELDS.items():
        if key not in data:
            if required:
                raise fail(key, "missing (required)")
            continue
        value = data[key]
        # TOML booleans are ints to Python; a batch size of `true` is a mistake, not 1.
        if isinstance(value, bool) or not isinstance(value, types):
            raise fail(key, f"must be {_TYPE_NAMES[types[-1]]}, got {value!r}")
        if float in types and not _finite(value):
            raise fail(key, f"must be a finite number, got {value!r}")

    if not _NAME.match(data["name"]):
        raise fail("name", f"must be letters, digits, '.', '_' or '-', starting with a letter or digit "
                           f"(it names log folders and plan entries), got {data['name']!r}")
    if data["model"] not in MODELS:
        raise fail("model", f"unknown model '{data['model']}'{_suggest(data['model'], MODELS)}; "
                            f"built-in models: {', '.join(MODELS)}")
    if data["dataset"] not in DATASETS:
        raise fail("dataset", f"unknown dataset '{data['dataset']}'{_suggest(data['dataset'], DATASETS)}; "
                              f"built-in datasets: {', '.join(DATASETS)}")
    model, dataset = MODELS[data["model"]], DATASETS[data["dataset"]]
    if model.kind != dataset.kind:
        raise fail("dataset", f"model '{data['model']}' takes {model.kind} inputs but dataset "
                              f"'{data['dataset']}' gives {dataset.kind}")
    if data["optimizer"] not in OPTIMIZERS:
        raise fail("optimizer", f"unknown optimizer '{data['optimizer']}'; choose one of {', '.join(OPTIMIZERS)}")
    for key in ("batch_size", "np"):
        if data[key] <= 0:
            raise fail(key, f"must be positive, got {data[key]}")
    if data["lr"] <= 0:
        raise fail("lr", f"must be positive, got {data['lr']}")
    for key in ("momentum", "weight_decay", "eval_interval", "seed"):
        if key in data and data[key] < 0:
            raise fail(key, f"must not be negative, got {data[key]}")
    if "max_slowdown" in data and not (1.0 <= data["max_slowdown"] < float("inf")):
        raise fail("max_slowdown", f"must be at least 1.0 (1.0: never slower than alone), got {data['max_slowdown']}")
    if ("iterations" in data) == ("epochs" in data):
        raise fail("iterations", "give exactly one of 'iterations' or 'epochs'")
    for key in ("iterations", "epochs"):
        if key in data and data[key] <= 0:
            raise fail(key, f"must be positive, got {data[key]}")
    # whole numbers the workers hand to torch (a 64-bit seed) or count up to
    for key, largest in (("seed", 2**63 - 1), ("iterations", 10**9), ("epochs", 10**6), ("batch_size", 10**7),
                         ("np", 10**5), ("eval_interval", 10**9)):
        if key in data and data[key] > largest:
            raise fail(key, f"must be at most {largest}, got {data[key]}")
    for table, allowed in (("model_options", model.options), ("dataset_options", dataset.options)):
        for key in data.get(table, {}):
            if key not in allowed:
                raise fail(f"{table}.{key}", f"unknown option{_suggest(key, allowed)}; "
                                             f"accepted: {', '.join(allowed) or 'none'}")
            value = data[table][key]  # every built-in option is a size or a count
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10**9:
                raise fail(f"{table}.{key}", f"must be a whole number >= 1, got {value!r}")
    if data["model"] in ("transformer", "bert"):
        defaults = TRANSFORMER_DEFAULTS if data["model"] == "transformer" else BERT_DEFAULTS
        shape = {**defaults, **data.get("model_options", {})}
        if shape["d_model"] % shape["heads"]:  # attention splits d_model evenly between the heads
            raise fail("model_options.heads", f"must divide d_model ({shape['d_model']}), got {shape['heads']}")
        seq_len = data.get("dataset_options", {}).get("seq_len")
        if data["model"] == "bert" and seq_len is not None and seq_len > shape["max_positions"]:
            raise fail("dataset_options.seq_len", f"must be at most model_options.max_positions "
                                                  f"({shape['max_positions']}), got {seq_len}")
    image_size = data.get("dataset_options", {}).get("image_size")
    if data["model"] == "vgg16" and image_size is not None and image_size < 32:  # five halvings
        raise fail("dataset_options.image_size", f"must be at least 32 for vgg16, got {image_size}")
    if "max_slowdown" in data:
        data = {**data, "max_slowdown": float(data["max_slowdown"])}
    return Recipe(**{**data, "lr": float(data["lr"]), "momentum": float(data.get("momentum", 0.0)),
                     "weight_decay": float(data.get("weight_decay", 0.0)), "path": source})


def _finite(value: int | float) -> bool:
    """A number a float can hold: not inf or nan, nor an integer too large to convert (TOML allows 1e400 as 10**400)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


BUILTIN_RECIPES = Path(__file__).resolve().parent / "builtin_recipes"


def load_recipe(path: str | Path) -> Recipe:
    """Load a recipe from a TOML file, or by name: ./recipes/NAME.toml first (your own), then the
    recipes that ship with xover (`xover/builtin_recipes/`), from any working directory."""
    file = resolve_recipe_path(path)
    try:
        data = tomllib.loads(file.read_text())
    except tomllib.TOMLDecodeError as error:
        raise RecipeError(f"{file}: TOML syntax error: {error}") from None
    except UnicodeDecodeError:
        raise RecipeError(f"{file}: not a text file") from None
    except ValueError as error:  # e.g. an integer of more digits than Python converts (4300)
        raise RecipeError(f"{file}: cannot be read: {str(error).split(';')[0]}") from None
    except OSError as error:
        raise RecipeError(f"{file}: cannot read the recipe: {error.strerror}") from None
    return parse_recipe(data, str(file))


def builtin_recipe_names() -> list[str]:
    return sorted(p.stem for p in BUILTIN_RECIPES.glob("*.toml"))


def resolve_recipe_path(path: str | Path) -> Path:
    file = Path(path)
    if file.is_file():
        return file
    name = str(path).removesuffix(".toml")
    for folder in (Path("recipes"), BUILTIN_RECIPES):
        candidate = folder / f"{name}.toml"
        if "/" not in name and candidate.is_file():
            return candidate
    if file.is_dir():
        raise RecipeError(f"{path}: a folder, not a recipe file (give NAME.toml inside it)")
    if file.suffix == ".toml" or "/" in str(path):
        raise RecipeError(f"{path}: recipe file not found")
    known = builtin_recipe_names()
    raise RecipeError(f"{path}: no recipe file or built-in recipe of that name{_suggest(name, known)}; "
                      f"built-in recipes: {', '.join(known)}")


def with_overrides(recipe: Recipe, *, iterations: int | None = None, np: int | None = None) -> Recipe:
    """The recipe as it will actually run (`--iterations` / `--np` from the command line)."""
    changes: dict[str, Any] = {}
    if iterations is not None:
        if iterations <= 0:
            raise RecipeError(f"--iterations must be positive, got {iterations}")
        changes.update(iterations=iterations, epochs=None)
    if np is not None:
        if np <= 0:
            raise RecipeError(f"--np must be positive, got {np}")
        changes["np"] = np
    if not changes:
        return recipe
    return Recipe(**{**asdict(recipe), **changes})
