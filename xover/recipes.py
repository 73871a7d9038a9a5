"""Recipe files (TOML): one training job - a built-in model (model, dataset, batch size, optimizer,
length, devices, seed), or a user's own training script ("a job file": script, args, np, ...).

Validation reports the file, the field and the problem, so a typo costs one read of one line.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import sys
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, ClassVar, TypeVar

import tomllib
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

from .engines import ENGINES, engine_named
from .errors import XoverError, is_utf8, named_path, printable, refuse_unless_regular
from .hints import xover_command
from .redact import MASK, argv_secrets, credential_name, mask_argv, mask_word
from .scripts import (
    FRAMEWORKS,
    JOB_NAME,
    ScriptRefused,
    check_script,
    content_hash,
    script_engines,
    script_problem,
)
from .settings import VARIABLE_PREFIX
from .workloads import BERT_DEFAULTS, DATASETS, IMAGE, LEAST_CORPUS_BYTES, MODELS, TRANSFORMER_DEFAULTS, train_rows

OPTIMIZERS = ("sgd", "adam", "adamw")
# fp32: torch's defaults; bf16: forward and loss under bfloat16 autocast; tf32: TF32 matmuls and convolutions
PRECISIONS = ("fp32", "bf16", "tf32")
MAX_ITERATIONS = 10**9  # a job's length (the store's columns hold 32-bit integers)
MAX_RANKS = 10**5
# a recipe's seed: the data order's generator is seeded with seed * 100003 + epoch, which torch takes up to 2**64
MAX_SEED = 10**14


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
    # the script's content when the job was made, with the local modules it imports (scripts.content_hash)
    script_sha256: str | None = None
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

    @property
    def secrets(self) -> list[str]:
        """What of this job a message of its own must not repeat where others read it (its stored error, its
        launcher's log: redact.without_values): the credentials of its arguments, its `pass_env`'s values (set in
        xover's environment: secrets, by the job file's word) and the values of `env`'s variables named or shaped
        as a credential (`WANDB_API_KEY`, a token). Other `env` values are settings (`NCCL_DEBUG=INFO`, a path):
        masked wherever they appear, they would make a traceback unreadable."""
        passed = [os.environ[name] for name in self.pass_env if name in os.environ]
        named = [value for name, value in self.env.items() if credential_name(name) or mask_word(value) != value]
        return [*argv_secrets(self.args), *named, *passed]

    def engine_under(self, built_in: str) -> str:
        """The engine this job runs under: a script's own (a job file or --script always names it),
        a built-in model's the one asked for (`built_in`)."""
        return self.engine if self.script and self.engine else built_in

    def to_dict(self) -> dict[str, Any]:
        """The recipe as stored (the store, spec files, MLflow): no path, fields left at their defaults
        absent, `env`'s values written as *** and a script's arguments with their credentials as ***
        (`--api-key KEY`, `--token=T`): these are read by others; only the hash counts the values. The
        ranks take a script's arguments from its command line, never from here."""
        data = self._fields()
        if "env" in data:
            data["env"] = dict.fromkeys(data["env"], MASK)
        if "args" in data:
            data["args"] = mask_argv(data["args"])
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
        """Content hash of the recipe as written, its `name` included (not where the file lives: a script counts by
        its content): its snapshot's key in the store (store/queries.py), and its profiles' key before 2026-12-02."""
        return self._digest()

    @property
    def job_hash(self) -> str:
        """What the job computes, whatever it is called: `hash` without its `name` and `description`, so a renamed
        job file, or a recipe copied under another name, is the same job (its `profile_key` and `workload` leave
        out more)."""
        return self._digest("name", "description")

    @property
    def planned_as(self) -> str:
        """What a plan's predictions of it hold for: its `workload` without `max_slowdown` (a protection the plan
        carries itself). `xover run PLAN` refuses a recipe whose `planned_as` is not the plan's: an edited model,
        batch, dataset or evaluation interval, or another recipe file under the job's name."""
        return replace(self, max_slowdown=None).workload

    @property
    def profile_key(self) -> str:
        """What its profiles are kept under (store/profiles.py): its job hash without its length (iterations,
        epochs), `max_slowdown` and `memory_gb`. A profile measures its own steps, whatever the job's length, and
        the plan reads the length, the protection and the memory it assumes from the recipe: a job made longer,
        or given another `max_slowdown` or `memory_gb`, keeps its profile."""
        return replace(self, iterations=None, epochs=None, max_slowdown=None, memory_gb=None).job_hash

    @property
    def profile_keys(self) -> tuple[str, str, str]:
        """The keys its stored profiles may have: its profile key; its job hash, as they were keyed from 2026-12-02
        to 2026-12-07 (its length included); and its hash, as before 2026-12-02 (its name included: those hold for
        it under the name it had)."""
        return self.profile_key, self.job_hash, self.hash

    @property
    def workload(self) -> str:
        """The job hash without the job's length (iterations, epochs): what a measurement of how it shares
        devices holds for (plan/measured.py); a changed script, model, batch or dataset is another, a new name
        is not."""
        return replace(self, iterations=None, epochs=None).job_hash

    @property
    def legacy_workload(self) -> str:
        """Its workload as measurements were keyed before 2026-12-02, its name included: still read, so that those
        hold for the job under the name it had (plan/measured.py)."""
        return replace(self, iterations=None, epochs=None).hash

    def _digest(self, *left_out: str) -> str:
        """The hash of what determines the job's behaviour (`_fields`; a script counts by its content, not its path
        nor its description, which names the path), without `left_out`."""
        data = self._fields()
        if self.script is not None:
            data.pop("script")
            data.pop("description")  # names the script's path
        for key in left_out:
            data.pop(key, None)
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]

    @property
    def label(self) -> str:
        """How messages name it: its file (a recipe or job file), or its script."""
        return self.path or self.script or self.name

    def named_twice(self, twin: Recipe) -> str:
        """Words for this job given again after `twin` of the same name (plan and profile refuse them)."""
        files = f"{twin.label} and {self.label}" if twin.label != self.label else f"{self.label} both times"
        return f"job name '{self.name}' is given twice ({files})"


_SCRIPT_ONLY = ("script", "args", "engine", "script_sha256", "memory_gb", "env", "pass_env")


# ------------------------------------------------------------------------------ the files' schemas
# Each field declared once: its TOML type (exactly: no `true` for 1, no "8" for 8), whether it is required,
# its default, its range. Pydantic checks them; `_validated` words its first complaint as xover does.

_NAME = JOB_NAME  # a job's name: letters, digits, '.', '_', '-'
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class _Refused(ValueError):
    """A check's refusal of a field it names (`where`, e.g. 'model_options.heads'), in xover's words."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(problem)
        self.where = where


@dataclass(frozen=True)
class _OutOfRange:
    """A field's words for a number out of its range, where 'must be positive' (gt=0), 'must not be negative'
    (ge=0) or 'must be at most N' (le=N) would not do."""

    problem: str


def did_you_mean(word: str, choices) -> str:
    """' (did you mean 'x'?)' for the choice closest to a misspelt `word`, or '' where none is close."""
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _named(name: str) -> str:
    if not _NAME.fullmatch(name):  # fullmatch: '$' alone let a name end in a newline
        shown = f"{name[:40]!r}... ({len(name)} characters)" if len(name) > 200 else repr(name)
        # a plan and a trace take '#': it marks a further copy of one job there (name#2), never a job file's name
        copies = "; '#' marks a second copy of a job in a plan or a trace (name#2)" if "#" in name else ""
        raise ValueError(
            f"must be ASCII letters, digits, '.', '_' or '-', starting with a letter or digit, at most 200 characters "
            f"(it names log folders and plan entries){copies}, got {shown}"
        )
    return name


def _one_of(noun: str, choices: Iterable[str], listing: str, suggest: bool = True) -> AfterValidator:
    """A field naming one of `choices`: anything else is an unknown NOUN, followed by `listing`."""

    def check(value: str) -> str:
        if value not in choices:
            raise ValueError(f"unknown {noun} '{value}'{did_you_mean(value, choices) if suggest else ''}; {listing}")
        return value

    return AfterValidator(check)


def variable_name(name: str) -> str:
    """`name`, where an environment variable can have it and xover does not set it (a ValueError why not)."""
    if not _ENV_NAME.fullmatch(name):
        raise ValueError("not a name an environment variable can have")
    if name.startswith(VARIABLE_PREFIX):
        raise ValueError("xover sets its XOVER_ variables itself; use XOVER_ variables in xover's own environment")
    return name


def without_nul(text: str) -> str:
    """`text`, where a command line or an environment can carry it (a ValueError why not)."""
    if "\0" in text:
        raise ValueError("holds a NUL character, which no command line or environment can carry")
    return text


_Name = Annotated[str, AfterValidator(_named)]
_Passed = Annotated[str, AfterValidator(without_nul)]  # a value that reaches the script's argv or environment
_Slowdown = Annotated[float | None, _OutOfRange("must be at least 1.0 (1.0: never slower than alone)")]


class _FileSchema(BaseModel):
    """What a recipe and a job file share: TOML's own types, finite numbers, no unknown field."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)
    # how an unknown field that belongs to the other kind of file is told ({key}: it, {fields}: this file's)
    belongs_elsewhere: ClassVar[str]
    fields_are: ClassVar[str]  # how the file's fields are listed after an unknown one


_FileSchemaT = TypeVar("_FileSchemaT", bound=_FileSchema)


class _RecipeFile(_FileSchema):
    """A recipe of a built-in model, as its TOML file says it."""

    name: _Name
    model: Annotated[str, _one_of("model", MODELS, f"built-in models: {', '.join(MODELS)}")]
    dataset: Annotated[str, _one_of("dataset", DATASETS, f"built-in datasets: {', '.join(DATASETS)}")]
    batch_size: Annotated[int, Field(gt=0, le=10**7)]
    optimizer: Annotated[str, _one_of("optimizer", OPTIMIZERS, f"choose one of {', '.join(OPTIMIZERS)}", suggest=False)]
    lr: Annotated[float, Field(gt=0)]
    np: Annotated[int, Field(gt=0, le=MAX_RANKS)]
    seed: Annotated[int, Field(ge=0, le=MAX_SEED)]
    iterations: int | None = Field(None, gt=0, le=MAX_ITERATIONS)
    epochs: int | None = Field(None, gt=0, le=10**6)
    # 1 or more: the velocity never decays, and the job diverges (PyTorch's SGD takes any momentum >= 0)
    momentum: Annotated[float, _OutOfRange("must be from 0 to below 1 (0.9 is usual)")] = Field(0.0, ge=0, lt=1)
    weight_decay: float = Field(0.0, ge=0)
    eval_interval: int = Field(0, ge=0, le=10**9)
    max_slowdown: _Slowdown = Field(None, ge=1.0)
    description: str = ""
    model_options: dict[str, Any] = {}
    dataset_options: dict[str, Any] = {}
    precision: Annotated[str, _one_of("precision", PRECISIONS, f"choose one of {', '.join(PRECISIONS)}")] = "fp32"
    channels_last: bool = False

    belongs_elsewhere = (
        "belongs to a job file for a script of your own; give 'script' (a path) to run one, "
        "or leave '{key}' out for a built-in model"
    )
    fields_are = "known fields"

    @model_validator(mode="after")
    def _fits_together(self) -> _RecipeFile:
        """The model, the dataset and their options agree; exactly one length."""
        model, dataset = MODELS[self.model], DATASETS[self.dataset]
        if model.kind != dataset.kind:
            problem = (
                f"model '{self.model}' takes {model.kind} inputs but dataset '{self.dataset}' gives {dataset.kind}"
            )
            raise _Refused("dataset", problem)
        if self.channels_last and model.kind != IMAGE:
            raise _Refused("channels_last", f"applies to image models; '{self.model}' takes {model.kind} inputs")
        if (self.iterations is None) == (self.epochs is None):
            raise _Refused("iterations", "give exactly one of 'iterations' or 'epochs'")
        for table, allowed in (("model_options", model.options), ("dataset_options", dataset.options)):
            for key, value in getattr(self, table).items():
                if key not in allowed:
                    accepted = f"accepted: {', '.join(allowed) or 'none'}"
                    raise _Refused(f"{table}.{key}", f"unknown option{did_you_mean(key, allowed)}; {accepted}")
                # every built-in option is a size or a count
                if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10**9:
                    raise _Refused(f"{table}.{key}", f"must be a whole number >= 1, got {value!r}")
        if self.model in ("transformer", "bert"):
            shape = {**(TRANSFORMER_DEFAULTS if self.model == "transformer" else BERT_DEFAULTS), **self.model_options}
            if shape["d_model"] % shape["heads"]:  # attention splits d_model evenly between the heads
                raise _Refused("model_options.heads", f"must divide d_model ({shape['d_model']}), got {shape['heads']}")
            seq_len = self.dataset_options.get("seq_len")
            if self.model == "bert" and seq_len is not None and seq_len > shape["max_positions"]:
                problem = f"must be at most model_options.max_positions ({shape['max_positions']}), got {seq_len}"
                raise _Refused("dataset_options.seq_len", problem)
        image_size = self.dataset_options.get("image_size")
        if self.model == "vgg16" and image_size is not None and image_size < 32:  # five halvings
            raise _Refused("dataset_options.image_size", f"must be at least 32 for vgg16, got {image_size}")
        max_bytes = self.dataset_options.get("max_bytes")
        if self.dataset == "python-chars" and max_bytes is not None and max_bytes < LEAST_CORPUS_BYTES:
            raise _Refused("dataset_options.max_bytes", f"must be at least {LEAST_CORPUS_BYTES}, got {max_bytes}")
        unfilled = batch_problem(self.dataset, self.dataset_options, self.batch_size, self.np)
        if unfilled:
            raise _Refused(*unfilled)
        return self


def batch_problem(dataset: str, options: dict[str, Any], batch_size: int, np: int) -> tuple[str, str] | None:
    """(field, problem) where a step's batch on every rank is more than the dataset's train split holds: its ranks
    would train on fewer rows than a step counts (a rank on none, its loss NaN), so samples/s would read high."""
    rows = train_rows(dataset, options)
    if rows is None:
        return None
    if rows == 0:
        return (
            "dataset_options.seq_len",
            f"leaves no training sequence in the corpus of {dataset}: make seq_len smaller or max_bytes larger",
        )
    if batch_size * np > rows:
        return (
            "batch_size",
            f"{batch_size} on each of {np} ranks is {batch_size * np} rows a step, and the train "
            f"split of {dataset} has {rows}: make it at most {max(1, rows // np)}",
        )
    return None


class _JobFile(_FileSchema):
    """A job file, as its TOML file says it: the user's script and how to run it (script_recipe's arguments)."""

    name: _Name  # the job file's own name unless given (filled in before the check, so checked alike)
    script: str  # a path; relative: to the job file's folder
    args: list[_Passed] = []
    np: Annotated[int, Field(ge=1, le=MAX_RANKS), _OutOfRange(f"must be a whole number from 1 to {MAX_RANKS}")]
    engine: str | None = None  # None: told from the script's imports
    iterations: Annotated[
        int | None,
        _OutOfRange(f"optimizer steps before the script is stopped: a whole number from 1 to {MAX_ITERATIONS}"),
    ] = Field(None, ge=1, le=MAX_ITERATIONS)
    max_slowdown: _Slowdown = Field(None, ge=1.0)
    memory_gb: Annotated[float | None, _OutOfRange("must be a number of GB > 0")] = Field(None, gt=0)
    env: dict[Annotated[str, AfterValidator(variable_name)], _Passed] = {}
    pass_env: list[Any] = []
    description: str = ""

    belongs_elsewhere = (
        "belongs to built-in models; a script takes its own options in 'args'. A job file's fields: {fields}"
    )
    fields_are = "a job file's fields"

    @field_validator("pass_env")
    @classmethod
    def _passed_by_name(cls, names: list[Any], info: ValidationInfo) -> list[str]:
        """Variables set in xover's own environment, none of xover's own, none that `env` gives a value; once each."""
        for index, name in enumerate(names):
            where = f"pass_env[{index}]"
            if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
                shown = repr(mask_word(name)) if isinstance(name, str) else _kind(name)  # NAME=value: its value hidden
                raise _Refused(where, f"must be the name of an environment variable (a string), got {shown}")
            if name.startswith(VARIABLE_PREFIX):
                raise _Refused(where, f"{name}: xover sets its XOVER_ variables itself")
            if name in info.data.get("env", {}):
                raise _Refused(
                    where, f"{name} is in 'env' too: give it a value there or pass yours by name here, not both"
                )
            if problem := unset_variable_problem(name):
                raise _Refused(where, problem)
        return list(dict.fromkeys(names))

    @model_validator(mode="after")
    def _script_and_engine(self, info: ValidationInfo) -> _JobFile:
        """The script found (its absolute path kept) and its engine known: given, or told by its imports."""
        if not self.script.strip():  # Path('') is the job file's folder, which it was then called
            raise _Refused("script", "empty; give the training script's .py file (relative to the job file's folder)")
        script = Path(self.script).expanduser()
        if not script.is_absolute():
            script = Path((info.context or {})["source"]).resolve().parent / script
        if not (script := script.resolve()).is_file():
            hint = "" if Path(self.script).is_absolute() else " (a path relative to the job file's folder)"
            found = "a folder" if script.is_dir() else "not a regular file" if script.exists() else "file not found"
            raise _Refused("script", f"{found}: {script}{hint}; give the training script's .py file")
        self.script = str(script)
        if self.engine is not None and self.engine not in ENGINES:
            raise _Refused("engine", f"unknown engine '{self.engine}'; choose {' or '.join(ENGINES)}")
        self.engine = self.engine or _engine_told(script)
        return self


def _engine_told(script: Path) -> str:
    """The engine a job file's script imports; refused where it imports both, or neither."""
    try:
        found = script_engines(script, RecipeError)
    except RecipeError as error:
        raise _Refused("script", str(error).removeprefix(f"--script {script}: ")) from None
    if len(found) != 1:
        seen = (
            " and ".join(f"{e} ({n})" for e, n in found.items())
            or f"neither {' nor '.join(e.imports for e in ENGINES.values())} (nor "
            f"{', '.join(sorted(set(FRAMEWORKS.values())))})"
        )
        choices = " or ".join(f'"{e.name}" ({e.script_kind})' for e in ENGINES.values())
        problem = f"missing, and the script imports {seen}, so its engine cannot be told: set engine = {choices}"
        raise _Refused("engine", problem)
    return next(iter(found))


# ------------------------------------------------------------------------------ pydantic's complaints in xover's words

_TYPE_NAMES = {"int_type": "an integer", "float_type": "a number", "string_type": "a string"}
_TYPE_NAMES |= {"bool_type": "true or false", "dict_type": "a table", "list_type": "a list of strings"}
_RANGE_WORDS = {"greater_than": "must be positive", "greater_than_equal": "must not be negative"}


def _bare_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _kind(value: object) -> str:
    """A value shown by its kind alone: 'a list', 'a number'."""
    kinds = (
        (bool, "true or false"),
        (int, "a number"),
        (float, "a number"),
        (str, "a string"),
        (list, "a list"),
        (dict, "a table"),
    )
    return next((words for kind, words in kinds if isinstance(value, kind)), "a value")


def _validated(schema: type[_FileSchemaT], data: dict[str, Any], source: str) -> _FileSchemaT:
    """`data` checked against `schema`; a refusal is one line naming the file (`source`), the field and the
    problem: of pydantic's complaints, the first a reader would fix (an unknown field, then a missing one or one
    of the wrong type, then a value; within each, in the order of the file's fields)."""
    try:
        return schema.model_validate(data, context={"source": source})
    except ValidationError as invalid:

        def reading_order(complaint: ErrorDetails) -> int:
            kind = complaint["type"]
            whole = kind == "missing" or len(complaint["loc"]) == 1 and kind in (*_TYPE_NAMES, "finite_number")
            return 0 if kind == "extra_forbidden" else 1 if whole else 2

        where, problem = _worded(min(invalid.errors(), key=reading_order), schema)
        raise RecipeError(f"{source}: field '{where}': {problem}") from None


def _worded(complaint: ErrorDetails, schema: type[_FileSchema]) -> tuple[str, str]:
    """The field (as 'args[1]', 'env.NAME') and the problem of one of pydantic's complaints, in xover's words."""
    cause = complaint.get("ctx", {}).get("error")
    if isinstance(cause, _Refused):  # a check of several fields together: the complaint names no field itself
        return cause.where, str(cause)
    kind, loc, value = complaint["type"], complaint["loc"], complaint["input"]
    where = str(loc[0]) + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc[1:] if p != "[key]")
    where = mask_word(where)  # a variable named with its value (env.API_TOKEN=...)
    # a variable's value or an argument of the wrong type may be a token (in a list, a table, or a number), and so
    # may the whole field of the wrong type ('args' as one string, 'env' as NAME=value): its kind is enough to fix
    # it (an argument's bare number is shown: where its quotes go)
    secret = loc[0] in ("env", "pass_env") or loc[0] == "args" and not _bare_number(value)
    shown = _kind(value) if secret else repr(value)
    if kind == "value_error":
        return where, str(cause)
    if kind == "missing":
        return where, "missing (required)"
    if kind == "extra_forbidden":
        fields = ", ".join(schema.model_fields)
        if where in (_JobFile if schema is _RecipeFile else _RecipeFile).model_fields:
            return where, schema.belongs_elsewhere.format(key=where, fields=fields)
        return where, f"unknown field{did_you_mean(where, schema.model_fields)}; {schema.fields_are}: {fields}"
    # TOML allows 1e400 as 10**400: a whole number, but none a float can hold
    if kind == "finite_number" or (kind == "float_type" and isinstance(value, int) and not isinstance(value, bool)):
        return where, f"must be a finite number, got {shown}"
    if kind == "string_type" and len(loc) > 1:  # an argument or a variable's value: TOML's 5 is no "5"
        quoted = f': "{value}"' if isinstance(loc[-1], int) and _bare_number(value) else ""
        return where, f"must be a string (write numbers in quotes{quoted}), got {shown}"
    if kind in _TYPE_NAMES:
        return where, f"must be {_TYPE_NAMES[kind]}, got {shown}"
    worded = [m.problem for m in schema.model_fields[where].metadata if isinstance(m, _OutOfRange)]
    if not worded:
        worded = [f"must be at most {complaint['ctx']['le']}" if kind == "less_than_equal" else _RANGE_WORDS[kind]]
    return where, f"{worded[0]}, got {shown}"


# ------------------------------------------------------------------------------ reading a recipe or a job file


def parse_recipe(data: dict[str, Any], source: str) -> Recipe:
    """Validate a recipe's fields; `source` names the file in every message."""
    if "script" in data:
        return parse_job_file(data, source)
    if "model" not in data:  # neither: the file may be meant as either, and a job file's reader looks for 'script'
        raise RecipeError(
            f"{source}: field 'model' or 'script': missing; a recipe names one of xover's built-in models "
            '(model = "resnet"), a job file your training script (script = "train.py")'
        )
    return Recipe(**dict(_validated(_RecipeFile, data, source)), path=source)


def parse_job_file(data: dict[str, Any], source: str) -> Recipe:
    """A job file: the user's script with its arguments, instead of a built-in model. `source` is the
    TOML file (a relative `script` is found next to it) and names it in every message."""
    if "model" in data:
        problem = "a recipe names a built-in model or a script, never both: remove 'model' (or 'script')"
        raise RecipeError(f"{source}: field 'model': {problem}")
    job = _validated(_JobFile, {"name": Path(source).stem, **data}, source)
    try:
        return script_recipe(**dict(job), path=source)
    except ScriptRefused as error:
        raise RecipeError(f"{source}: field 'script': {str(error).removeprefix(f'--script {job.script}: ')}") from None


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
    over. `sha256`: the content it was planned with (a plan's), else the file's now. Without `name`, the
    job is named after the file (`--script`), which must then be a name a job file could give."""
    script = Path(script).resolve()
    if not is_utf8(script):  # a job file's script, a plan's (`--script` is refused first, scripts.script_problem)
        raise ScriptRefused(
            f"--script {script}: its path ({printable(script)}) is not valid UTF-8, and the store keeps it as text: "
            "rename the file or its folder"
        )
    if name is None and not _NAME.fullmatch(script.stem):
        raise ScriptRefused(f"--script {script}: {script_problem(script)}")
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


# The recipes that ship with xover: the checkout's top-level recipes/ (what a user reads and copies), or,
# where xover is installed from a wheel, the copy pyproject.toml installs under the environment's share/.
_CHECKOUT_RECIPES = Path(__file__).resolve().parent.parent / "recipes"
BUILTIN_RECIPES = _CHECKOUT_RECIPES if _CHECKOUT_RECIPES.is_dir() else Path(sys.prefix) / "share" / "xover" / "recipes"


def _is_a_plan_file(file: Path) -> bool:
    """Whether a file that is no TOML is a plan `xover plan` wrote (JSON whose format is xover-plan/N)."""
    try:
        document = json.loads(file.read_text(encoding="utf-8-sig"))
    except (ValueError, OSError, RecursionError):
        return False
    return isinstance(document, dict) and str(document.get("format", "")).startswith("xover-plan/")


def load_recipe(path: str | Path) -> Recipe:
    """Load a recipe from a TOML file, or by name: ./recipes/NAME.toml first (your own), then the
    recipes that ship with xover (`recipes/` of the checkout, installed with the package), from any
    working directory."""
    file = resolve_recipe_path(path)
    shown = printable(file)  # one line, whatever the path holds (a newline, a byte that is not UTF-8)
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8-sig"))  # a BOM an editor put there read past
    except tomllib.TOMLDecodeError as error:
        if file.suffix == ".py":  # `xover train train.py`: "TOML syntax error: Expected '=' after a key"
            raise RecipeError(
                f"{shown}: a Python script, not a recipe or job file: name it in a job file (docs/reference.md: "
                "Job files), or give it to profile, plan or run with --script (its arguments after --)"
            ) from None
        if _is_a_plan_file(file):  # `xover run --group plan.json`: "TOML syntax error: Invalid statement"
            raise RecipeError(
                f"{shown}: a plan file (written by `xover plan`), not a recipe or job file: run it with "
                f"`{xover_command('run', shown)}`"
            ) from None
        raise RecipeError(f"{shown}: TOML syntax error: {error}") from None
    except UnicodeDecodeError:
        raise RecipeError(f"{shown}: not a text file") from None
    except RecursionError:  # "a = " then thousands of "[": too deep for the parser
        raise RecipeError(f"{shown}: nested too deeply to be a recipe or a job file") from None
    except ValueError as error:  # e.g. an integer of more digits than Python converts (4300)
        raise RecipeError(f"{shown}: cannot be read: {str(error).split(';')[0]}") from None
    except OSError as error:
        raise RecipeError(f"{shown}: cannot read the recipe: {error.strerror}") from None
    try:
        return parse_recipe(data, str(file))  # the file as it is named: a job file's script is found beside it
    except RecipeError as error:
        if shown == str(file):
            raise
        raise RecipeError(str(error).replace(str(file), shown, 1)) from None


def builtin_recipe_names() -> list[str]:
    """The names of the recipes installed with xover."""
    return sorted(p.stem for p in BUILTIN_RECIPES.glob("*.toml"))


def resolve_recipe_path(path: str | Path) -> Path:
    """A recipe's file: the path as given, else NAME.toml in ./recipes or among the built-in ones;
    anything else is one line saying why (with a near name, where there is one)."""
    file = named_path(path, "a recipe or job file (NAME.toml) or a built-in recipe", RecipeError)
    try:
        if file.is_file():
            return file
    except OSError as error:  # a name too long for the system: is_file() raises it
        raise RecipeError(f"{printable(path)}: cannot be looked at: {error.strerror}") from None
    name = str(path).removesuffix(".toml")
    for folder in (Path("recipes"), BUILTIN_RECIPES):
        candidate = folder / f"{name}.toml"
        if "/" not in name and candidate.is_file():
            return candidate
    if file.is_dir():
        raise RecipeError(f"{path}: a folder, not a recipe file (give NAME.toml inside it)")
    refuse_unless_regular(file, "a recipe or job file is TOML", RecipeError)  # a device or a pipe: not "not found"
    if file.suffix == ".toml" or "/" in str(path):
        raise RecipeError(f"{printable(path)}: recipe file not found")
    known = builtin_recipe_names()
    raise RecipeError(
        f"{printable(path)}: no recipe file or built-in recipe of that name{did_you_mean(name, known)}; "
        f"built-in recipes: {', '.join(known)}"
    )


def profile_target(recipe: Recipe) -> list[str]:
    """How a suggested `xover profile` names the job: its file or name, or its --script with its ranks (a
    script's arguments follow the command's options: `profile_command`)."""
    if recipe.script and not recipe.path.endswith(".toml"):  # not a job file: --script's (a plan's: its path)
        return ["--script", recipe.path or recipe.script, "--np", str(recipe.np)]
    return [recipe.path or recipe.name]


def profile_ranks(recipe: Recipe) -> list[str]:
    """`--np N` for a suggested `xover profile` of `recipe`, unless its target names its ranks (a --script's): a
    recipe run at another np than its file's (`--np`, a plan's) is profiled at that one, not at the file's."""
    target = profile_target(recipe)
    if "--np" in target:
        return []
    try:
        own = load_recipe(target[0]).np
    except RecipeError:  # moved or changed since: name the ranks
        own = None
    return [] if own == recipe.np else ["--np", str(recipe.np)]


def profile_command(recipe: Recipe, *options: str) -> str:
    """The `xover profile` that measures `recipe`, with `options` (a link, an engine, hosts, --force) before a
    --script's arguments (a secret's value in them shown as ***): every one of them part of the profile's key."""
    target = profile_target(recipe)
    arguments = ["--", *mask_argv(recipe.args)] if target[0] == "--script" and recipe.args else []
    return xover_command("profile", *target, *options, *arguments)


def with_overrides(recipe: Recipe, *, iterations: int | None = None, np: int | None = None) -> Recipe:
    """The recipe as it will actually run (`--iterations` / `--np` from the command line)."""
    changes: dict[str, Any] = {}
    if iterations is not None:
        if not 1 <= iterations <= MAX_ITERATIONS:
            raise RecipeError(f"--iterations must be a whole number from 1 to {MAX_ITERATIONS}, got {iterations}")
        changes.update(iterations=iterations, epochs=None)
    if np is not None:
        if not 1 <= np <= MAX_RANKS:
            raise RecipeError(f"--np must be a whole number from 1 to {MAX_RANKS}, got {np}")
        changes["np"] = np
    if not changes:
        return recipe
    return Recipe(**{**asdict(recipe), **changes})
