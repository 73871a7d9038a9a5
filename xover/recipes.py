"""Recipe files (TOML): one training job - a built-in model (model, dataset, batch size, optimizer,
length, devices, seed), or a user's own training script ("a job file": script, args, np, ...).

Validation reports the file, the field and the problem, so a typo costs one read of one line.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import os
import re
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import tomllib

from .engines import ENGINES, engine_named
from .errors import XoverError
from .redact import MASK
from .scripts import (
    FRAMEWORKS,
    ScriptRefused,
    check_script,
    content_hash,
    script_engines,
)
from .settings import VARIABLE_PREFIX
from .workloads import BERT_DEFAULTS, DATASETS, IMAGE, MODELS, TRANSFORMER_DEFAULTS

OPTIMIZERS = ("sgd", "adam", "adamw")
# fp32: torch's defaults; bf16: forward and loss under bfloat16 autocast; tf32: TF32 matmuls and convolutions
PRECISIONS = ("fp32", "bf16", "tf32")


class RecipeError(XoverError):
    """A recipe or job file that cannot be used: one line naming the file, the field and the problem."""

    pass


@dataclass(frozen=True)
class Recipe:
    """One training job as its file says: a built-in model and how to train it, or a user's own script."""

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
    # a job file: the user's own script (absolute path) runs instead of a built-in model
    script: str | None = None
    args: tuple[str, ...] = ()
    engine: str | None = None  # the script's engine: horovod (horovodrun) or torch (torchrun)
    script_sha256: str | None = None  # the script's content when the job was made
    memory_gb: float | None = None  # device memory the planner assumes instead of the measured peak
    env: dict[str, str] = field(default_factory=dict)  # extra environment variables of its processes
    # variables its processes get from xover's own environment, by name: values never written anywhere
    pass_env: tuple[str, ...] = ()
    precision: str = "fp32"  # PRECISIONS
    channels_last: bool = False  # image models: NHWC tensors (what tensor cores want)

    @property
    def variable_names(self) -> tuple[str, ...]:
        """The names of the variables a job file gives its processes: its `env`'s and its `pass_env`."""
        return (*self.env, *self.pass_env)

    def engine_under(self, built_in: str) -> str:
        """The engine this job runs under: a script's own (a job file or --script always names it),
        a built-in model's the one asked for (`built_in`)."""
        return self.engine if self.script and self.engine else built_in

    def to_dict(self) -> dict[str, Any]:
        """The recipe as stored (the store, spec files, MLflow): no path, fields left at their defaults
        absent, and `env`'s values written as *** - a value may be a secret, and these are read by others;
        only the hash counts the values."""
        data = self._fields()
        if "env" in data:
            data["env"] = dict.fromkeys(data["env"], MASK)
        return data

    def _fields(self) -> dict[str, Any]:
        """Every field that determines the job, as hashed: no path, and fields left at their defaults absent,
        so that the hashes of recipes stored before those fields existed still hold."""
        data = asdict(self)
        data.pop("path")
        # absent when unset, as before the fields existed: hashes of older recipes hold
        for key in ("max_slowdown", *_SCRIPT_ONLY):
            if data[key] in (None, (), {}):
                del data[key]
        for key, default in (("precision", "fp32"), ("channels_last", False)):
            if data[key] == default:
                del data[key]
        for key in ("args", "pass_env"):
            if key in data:
                data[key] = list(data[key])
        return data

    @property
    def hash(self) -> str:
        """Content hash of what determines the job's behaviour (not where the file lives: a script
        counts by its content)."""
        data = self._fields()
        if self.script is not None:
            data.pop("script")
            data.pop("description")  # names the script's path
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]

    @property
    def workload(self) -> str:
        """The content hash of the job without its length (iterations, epochs): what a measurement of how it
        shares devices holds for (plan/measured.py); a changed script, model, batch or dataset is another."""
        return replace(self, iterations=None, epochs=None).hash

    @property
    def label(self) -> str:
        """How messages name it: its file (a recipe or job file), or its script."""
        return self.path or self.script or self.name


_SCRIPT_ONLY = ("script", "args", "engine", "script_sha256", "memory_gb", "env", "pass_env")


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
    "precision": ((str,), False),
    "channels_last": ((bool,), False),
}

_TYPE_NAMES: dict[type, str] = {
    str: "a string",
    int: "an integer",
    float: "a number",
    dict: "a table",
    bool: "true or false",
}
_COLLECTION_NAMES: dict[type, str] = {list: "a list of strings", dict: "a table"}  # a job file's args and env


def _check_types(data: dict[str, Any], fields: dict[str, tuple[tuple[type, ...], bool]], fail) -> None:
    """Every required field present, every field of its type (a list of strings, a table of strings
    for a job file's args and env) and finite where it is a number."""
    for key, (types, required) in fields.items():
        if key not in data:
            if required:
                raise fail(key, "missing (required)")
            continue
        value = data[key]
        # TOML booleans are ints to Python; a batch size of `true` is a mistake, not 1.
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            kind = _COLLECTION_NAMES.get(types[-1], _TYPE_NAMES.get(types[-1]))
            raise fail(key, f"must be {kind}, got {value!r}")
        if float in types and isinstance(value, (int, float)) and not _finite(value):
            raise fail(key, f"must be a finite number, got {value!r}")


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")


def _suggest(word: str, choices) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def parse_recipe(data: dict[str, Any], source: str) -> Recipe:
    """Validate a recipe's fields; `source` names the file in every message."""

    def fail(field_name: str, problem: str) -> RecipeError:
        return RecipeError(f"{source}: field '{field_name}': {problem}")

    if "script" in data:
        return parse_job_file(data, source)
    for key in data:
        if key in _JOB_FILE_FIELDS and key not in _FIELDS:
            raise fail(
                key,
                f"belongs to a job file for a script of your own; give 'script' (a path) to run one, "
                f"or leave '{key}' out for a built-in model",
            )
        if key not in _FIELDS:
            raise fail(key, f"unknown field{_suggest(key, _FIELDS)}; known fields: {', '.join(_FIELDS)}")
    _check_types(data, _FIELDS, fail)

    if not _NAME.match(data["name"]):
        raise fail(
            "name",
            f"must be letters, digits, '.', '_' or '-', starting with a letter or digit "
            f"(it names log folders and plan entries), got {data['name']!r}",
        )
    if data["model"] not in MODELS:
        raise fail(
            "model",
            f"unknown model '{data['model']}'{_suggest(data['model'], MODELS)}; built-in models: {', '.join(MODELS)}",
        )
    if data["dataset"] not in DATASETS:
        raise fail(
            "dataset",
            f"unknown dataset '{data['dataset']}'{_suggest(data['dataset'], DATASETS)}; "
            f"built-in datasets: {', '.join(DATASETS)}",
        )
    model, dataset = MODELS[data["model"]], DATASETS[data["dataset"]]
    if model.kind != dataset.kind:
        raise fail(
            "dataset",
            f"model '{data['model']}' takes {model.kind} inputs but dataset '{data['dataset']}' gives {dataset.kind}",
        )
    if data.get("precision", "fp32") not in PRECISIONS:
        raise fail(
            "precision",
            f"unknown precision '{data['precision']}'{_suggest(data['precision'], PRECISIONS)}; "
            f"choose one of {', '.join(PRECISIONS)}",
        )
    if data.get("channels_last") and model.kind != IMAGE:
        raise fail("channels_last", f"applies to image models; '{data['model']}' takes {model.kind} inputs")
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
    for key, largest in (
        ("seed", 2**63 - 1),
        ("iterations", 10**9),
        ("epochs", 10**6),
        ("batch_size", 10**7),
        ("np", 10**5),
        ("eval_interval", 10**9),
    ):
        if key in data and data[key] > largest:
            raise fail(key, f"must be at most {largest}, got {data[key]}")
    for table, allowed in (("model_options", model.options), ("dataset_options", dataset.options)):
        for key in data.get(table, {}):
            if key not in allowed:
                raise fail(
                    f"{table}.{key}",
                    f"unknown option{_suggest(key, allowed)}; accepted: {', '.join(allowed) or 'none'}",
                )
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
            raise fail(
                "dataset_options.seq_len",
                f"must be at most model_options.max_positions ({shape['max_positions']}), got {seq_len}",
            )
    image_size = data.get("dataset_options", {}).get("image_size")
    if data["model"] == "vgg16" and image_size is not None and image_size < 32:  # five halvings
        raise fail("dataset_options.image_size", f"must be at least 32 for vgg16, got {image_size}")
    if "max_slowdown" in data:
        data = {**data, "max_slowdown": float(data["max_slowdown"])}
    return Recipe(
        **{
            **data,
            "lr": float(data["lr"]),
            "momentum": float(data.get("momentum", 0.0)),
            "weight_decay": float(data.get("weight_decay", 0.0)),
            "path": source,
        }
    )


# a job file's fields: field name -> (accepted python types, required)
_JOB_FILE_FIELDS: dict[str, tuple[tuple[type, ...], bool]] = {
    "name": ((str,), False),  # default: the job file's name
    "script": ((str,), True),
    "args": ((list,), False),
    "np": ((int,), True),
    "engine": ((str,), False),
    "iterations": ((int,), False),
    "max_slowdown": ((int, float), False),
    "memory_gb": ((int, float), False),
    "env": ((dict,), False),
    "pass_env": ((list,), False),
    "description": ((str,), False),
}
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse_job_file(data: dict[str, Any], source: str) -> Recipe:
    """A job file: the user's script with its arguments, instead of a built-in model. `source` is the
    TOML file (a relative `script` is found next to it) and names it in every message."""

    def fail(field_name: str, problem: str) -> RecipeError:
        return RecipeError(f"{source}: field '{field_name}': {problem}")

    if "model" in data:
        raise fail("model", "a recipe names a built-in model or a script, never both: remove 'model' (or 'script')")
    for key in data:
        if key not in _JOB_FILE_FIELDS:
            if key in _FIELDS:
                raise fail(
                    key,
                    f"belongs to built-in models; a script takes its own options in 'args'. A job "
                    f"file's fields: {', '.join(_JOB_FILE_FIELDS)}",
                )
            raise fail(
                key,
                f"unknown field{_suggest(key, _JOB_FILE_FIELDS)}; a job file's fields: {', '.join(_JOB_FILE_FIELDS)}",
            )
    _check_types(data, _JOB_FILE_FIELDS, fail)
    name = data.get("name", Path(source).stem)
    if not _NAME.match(name):
        raise fail(
            "name",
            f"must be letters, digits, '.', '_' or '-', starting with a letter or digit "
            f"(it names log folders and plan entries), got {name!r}",
        )
    for index, arg in enumerate(data.get("args", [])):
        if not isinstance(arg, str):
            raise fail(f"args[{index}]", f'must be a string (write numbers in quotes: "{arg}"), got {arg!r}')
    if not 1 <= data["np"] <= 10**5:
        raise fail("np", f"must be a whole number from 1 to 100000, got {data['np']}")
    if "iterations" in data and not 1 <= data["iterations"] <= 10**9:
        raise fail(
            "iterations", f"optimizer steps before the script is stopped: a whole number >= 1, got {data['iterations']}"
        )
    if "max_slowdown" in data and not 1.0 <= data["max_slowdown"]:
        raise fail("max_slowdown", f"must be at least 1.0 (1.0: never slower than alone), got {data['max_slowdown']}")
    if "memory_gb" in data and not data["memory_gb"] > 0:
        raise fail("memory_gb", f"must be a number of GB > 0, got {data['memory_gb']}")
    for key, value in data.get("env", {}).items():
        if not _ENV_NAME.match(key):
            raise fail(f"env.{key}", "not a name an environment variable can have")
        if key.startswith(VARIABLE_PREFIX):
            raise fail(
                f"env.{key}", "xover sets its XOVER_ variables itself; use XOVER_ variables in xover's own environment"
            )
        if not isinstance(value, str):
            raise fail(f"env.{key}", f"must be a string (write numbers in quotes), got {value!r}")
    pass_env = _pass_env(data, fail)
    script = Path(data["script"]).expanduser()
    if not script.is_absolute():
        script = Path(source).resolve().parent / script
    script = script.resolve()
    if not script.is_file():
        raise fail(
            "script",
            f"file not found: {script}"
            + (" (a path relative to the job file's folder)" if not Path(data["script"]).is_absolute() else ""),
        )
    engine = data.get("engine")
    if engine is not None and engine not in ENGINES:
        raise fail("engine", f"unknown engine '{engine}'; choose {' or '.join(ENGINES)}")
    if engine is None:
        try:
            found = script_engines(script, RecipeError)
        except RecipeError as error:
            raise fail("script", str(error).removeprefix(f"--script {script}: ")) from None
        if len(found) != 1:
            seen = (
                " and ".join(f"{e} ({n})" for e, n in found.items())
                or f"neither {' nor '.join(e.imports for e in ENGINES.values())} (nor "
                f"{', '.join(sorted(set(FRAMEWORKS.values())))})"
            )
            choices = " or ".join(f'"{e.name}" ({e.script_kind})' for e in ENGINES.values())
            raise fail(
                "engine",
                f"missing, and the script imports {seen}, so its engine cannot be told: set engine = {choices}",
            )
        [engine] = found
    try:
        return script_recipe(
            script,
            args=data.get("args", []),
            np=data["np"],
            engine=engine,
            name=name,
            iterations=data.get("iterations"),
            max_slowdown=data.get("max_slowdown"),
            memory_gb=data.get("memory_gb"),
            env=data.get("env", {}),
            pass_env=pass_env,
            description=data.get("description", ""),
            path=source,
        )
    except ScriptRefused as error:
        raise fail("script", str(error).removeprefix(f"--script {script}: ")) from None


def _pass_env(data: dict[str, Any], fail) -> tuple[str, ...]:
    """A job file's `pass_env`: names of variables set in xover's own environment, none of xover's own
    and none that `env` gives a value too."""
    names: list[str] = []
    for index, name in enumerate(data.get("pass_env", [])):
        where = f"pass_env[{index}]"
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            raise fail(where, f"must be the name of an environment variable (a string), got {name!r}")
        if name.startswith(VARIABLE_PREFIX):
            raise fail(where, f"{name}: xover sets its XOVER_ variables itself")
        if name in data.get("env", {}):
            raise fail(where, f"{name} is in 'env' too: give it a value there or pass yours by name here, not both")
        if problem := unset_variable_problem(name):
            raise fail(where, problem)
        if name not in names:
            names.append(name)
    return tuple(names)


def unset_variable_problem(name: str) -> str | None:
    """What is wrong with passing `name` through from xover's own environment (None: it is set)."""
    if name in os.environ:
        return None
    return (
        f"{name} is not set in xover's environment; export it before running xover "
        "(its value goes to the job's processes and is never written down)"
    )


def script_recipe(
    script: str | Path,
    *,
    args: list[str] | tuple[str, ...] = (),
    np: int,
    engine: str,
    name: str | None = None,
    iterations: int | None = None,
    max_slowdown: float | None = None,
    memory_gb: float | None = None,
    env: dict[str, str] | None = None,
    pass_env: list[str] | tuple[str, ...] = (),
    description: str = "",
    path: str = "",
    sha256: str | None = None,
) -> Recipe:
    """The job of a user's script (a job file, or `--script`), checked for what its engine cannot cross
    over. `sha256`: the content it was planned with (a plan's), else the file's now."""
    script = Path(script).resolve()
    check_script(script, engine)
    kind = engine_named(engine).kind
    return Recipe(
        name=name or script.stem,
        model="script",
        dataset="script",
        batch_size=0,
        optimizer="script",
        lr=0.0,
        np=np,
        seed=0,
        iterations=iterations,
        max_slowdown=float(max_slowdown) if max_slowdown is not None else None,
        description=description or f"unmodified {kind} script {script}",
        path=path,
        script=str(script),
        args=tuple(args),
        engine=engine,
        script_sha256=sha256 or content_hash(script),
        memory_gb=float(memory_gb) if memory_gb is not None else None,
        env=dict(env or {}),
        pass_env=tuple(pass_env),
    )


def _finite(value: int | float) -> bool:
    """A number a float can hold: not inf or nan, nor an integer too large to convert (TOML allows 1e400 as 10**400)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


# The recipes that ship with xover: the checkout's top-level recipes/ (what a user reads and copies), or,
# where xover is installed from a wheel, the copy pyproject.toml installs under the environment's share/.
_CHECKOUT_RECIPES = Path(__file__).resolve().parent.parent / "recipes"
BUILTIN_RECIPES = _CHECKOUT_RECIPES if _CHECKOUT_RECIPES.is_dir() else Path(sys.prefix) / "share" / "xover" / "recipes"


def load_recipe(path: str | Path) -> Recipe:
    """Load a recipe from a TOML file, or by name: ./recipes/NAME.toml first (your own), then the
    recipes that ship with xover (`recipes/` of the checkout, installed with the package), from any
    working directory."""
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
    """The names of the recipes installed with xover."""
    return sorted(p.stem for p in BUILTIN_RECIPES.glob("*.toml"))


def resolve_recipe_path(path: str | Path) -> Path:
    """A recipe's file: the path as given, else NAME.toml in ./recipes or among the built-in ones;
    anything else is one line saying why (with a near name, where there is one)."""
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
    raise RecipeError(
        f"{path}: no recipe file or built-in recipe of that name{_suggest(name, known)}; "
        f"built-in recipes: {', '.join(known)}"
    )


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
