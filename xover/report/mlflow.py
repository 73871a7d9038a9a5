"""`xover report --format mlflow`: one experiment's runs into an MLflow tracking store, through MLflow's own client.

An xover experiment becomes a parent MLflow run; each job in each mode (and, under crossover, each turn
policy) becomes a child run nested under it (MLflow's `mlflow.parentRunId` tag). A job run carries the
recipe or job file's fields and the run's own settings as params, its per-iteration loss and step time
as metric histories (step = the iteration), and its throughput, speed relative to alone, slowdown and
loss parity as metrics; the parent carries each group's gains as metrics and the HTML report, the
pictures and the JSON report as artifacts.

Writing is idempotent: runs are found again by their tags (`xover.experiment`, `xover.run_id`,
`xover.job`, `xover.mode`), and the parent keeps a signature of what was written. An adaptive group's
decisions go on the parent: each measured window and settled stretch as a step of
`group<N>.adaptive.<way>` (its aggregate) and of `group<N>.adaptive.turns` (1 with turns, 0 without), and the
whole timeline, each decision with its figures, as the artifact `adaptive-group<N>.json`. The same experiment
written again is left as it is; one whose figures changed since (it was still running, or a write was
cut short) has its runs replaced, so a store never holds two copies of one experiment.

MLflow is an optional dependency (`pip install 'xover[mlflow]'`); it is imported only here, when asked for.
"""

from __future__ import annotations

import contextlib
import getpass
import hashlib
import json
import logging
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard
from urllib.parse import unquote, urlsplit

from sqlalchemy import make_url, select
from sqlalchemy.exc import ArgumentError
from sqlalchemy.orm import Session

from ..console import json_text, print_notice
from ..errors import same_file
from ..links import HOST_KEY
from ..redact import MASK, MISTYPED_URL, mask_argv, mask_word, without_secrets_of
from ..results import RunResult
from ..sharing import CONCURRENT, CROSSOVER, RunStatus, turn_taking
from ..store.models import RecipeSnapshot, Run
from ..store.session import database_url, sqlite_file, store_files
from .data import ExperimentReport, ReportError
from .tables import report_dict

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

EXPERIMENT_NAME = "xover"  # the MLflow experiment runs go to, unless MLFLOW_EXPERIMENT_NAME names another
TAG_EXPERIMENT = "xover.experiment"
TAG_KIND = "xover.kind"  # "experiment" (the parent) or "job"
TAG_RUN_ID = "xover.run_id"  # the run's id in xover's store
TAG_SIGNATURE = "xover.signature"  # on the parent: a hash of everything written
TAG_COMPLETE = "xover.complete"  # on the parent, set last: every run and artifact was written
TAG_OWNER = "xover.owner"  # on an experiment xover made: the user it was made for
# per iteration: MLflow metric key -> the iteration row's column (step = the iteration's step)
HISTORIES = {
    "loss": "loss",
    "step_time_s": "iteration_s",
    "compute_s": "compute_s",
    "communication_s": "communication_s",
    "turn_wait_s": "wait_s",
}
# per job run: MLflow metric key -> RunResult's field
JOB_METRICS = {
    "samples_per_s": "samples_per_s",
    "samples_per_s_shared": "samples_per_s_shared",
    "speed_vs_alone": "speed",
    "slowdown": "slowdown",
    "iteration_ms": "iteration_ms",
    "compute_ms": "compute_ms",
    "communication_ms": "communication_ms",
    "turn_wait_ms": "wait_ms",
    "final_loss": "final_loss",
    "accuracy": "accuracy",
    "iterations": "iterations",
    "peak_memory_gb": "peak_memory_gb",
}
# per group, on the parent as group<N>.<key>: key -> GroupReport's attribute
GROUP_METRICS = {
    "gain": "measured_gain",
    "concurrent_vs_sequential": "concurrent_vs_sequential",
    "crossover_vs_concurrent": "crossover_vs_concurrent",
    "predicted_gain": "predicted_gain",
    "fluid_bound": "fluid_bound",
    "of_fluid_bound": "of_fluid_bound",
    "gain_error_pct": "gain_error_pct",
    "concurrent_predicted": "concurrent_predicted",
    "crossover_overlap": "crossover_overlap",
    "concurrent_overlap": "concurrent_overlap",
    "adaptive_vs_best": "adaptive_vs_best",
}
# xover's run status -> MLflow's (RUNNING, FINISHED, FAILED, KILLED)
STATUS: dict[str, str] = {
    RunStatus.FINISHED: "FINISHED",
    RunStatus.FAILED: "FAILED",
    RunStatus.LOST: "FAILED",
    RunStatus.TIMEOUT: "FAILED",
    RunStatus.INTERRUPTED: "KILLED",
    RunStatus.CANCELLED: "KILLED",
    RunStatus.STOPPED: "KILLED",
}
PARAM_LENGTH = 6000  # MLflow's longest param value
BATCH = 1000  # MLflow's most metrics in one log_batch
PARAM_BATCH = 100  # and params


@dataclass(frozen=True)
class MlflowWritten:
    """What one experiment's write did: its parent run, its job runs, and whether anything changed."""

    experiment: str
    parent_run_id: str
    job_runs: int
    artifacts: int
    unchanged: bool  # already in the store as it is now: nothing was written
    replaced: bool  # an earlier, different copy was replaced


def recipe_params(session: Session, experiment_id: str) -> dict[int, dict[str, str]]:
    """Store run id -> the recipe or job file's fields, as MLflow params (flat, strings)."""
    rows = session.execute(
        select(Run.id, RecipeSnapshot.body, RecipeSnapshot.path, RecipeSnapshot.hash)
        .join(RecipeSnapshot, Run.recipe_id == RecipeSnapshot.id)
        .where(Run.experiment_id == experiment_id)
    )
    return {
        run_id: {
            **_flat("recipe", _without_env_values(body or {})),
            "recipe.path": path,
            **({} if _holds_values(body or {}) else {"recipe.hash": content_hash}),
        }
        for run_id, body, path, content_hash in rows
    }


def _holds_values(body: dict[str, Any]) -> bool:
    """Whether a stored recipe holds `env` values or credential arguments: its hash counts them (a value changes
    the job), so a short value could be guessed from it offline; MLflow, read by others, is not given it."""
    env, args = body.get("env"), body.get("args")
    return bool(env) or (isinstance(args, list) and _without_env_values({"args": args}) != {"args": args})


def _without_env_values(body: dict[str, Any]) -> dict[str, Any]:
    """A stored recipe with its job file's `env` values and its script's credential arguments as *** (an older
    xover stored them as given: a value may be a token, and a tracking store is read by others)."""
    env, args = body.get("env"), body.get("args")
    if isinstance(env, dict):
        body = {**body, "env": dict.fromkeys(env, MASK)}
    if isinstance(args, list) and all(isinstance(arg, str) for arg in args):
        body = {**body, "args": mask_argv(args)}
    return body


def _flat(prefix: str, value: Any) -> dict[str, str]:
    if isinstance(value, dict):
        out: dict[str, str] = {}
        for key, item in value.items():
            out.update(_flat(f"{prefix}.{key}", item))
        return out
    if value is None:
        return {}
    text = value if isinstance(value, str) else json.dumps(value)
    return {prefix: text if len(text) <= PARAM_LENGTH else text[: PARAM_LENGTH - 3] + "..."}


def shown_tracking_uri(uri: str) -> str:
    """The tracking URI for messages: its password and credential options (`?token=`) shown as ***."""
    return mask_word(uri)


def tracking_uri_of(given: str | None) -> str:
    """The tracking store to write to: --tracking-uri, else MLFLOW_TRACKING_URI; refused when neither."""
    uri = given or os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        raise ReportError(
            "--format mlflow needs --tracking-uri URI (or MLFLOW_TRACKING_URI), "
            "e.g. sqlite:///results/mlflow.db or http://host:5000"
        )
    mistyped = None if "://" in uri else MISTYPED_URL.match(uri)
    if mistyped:  # MLflow's own error repeated it, password and all, two or three times
        shown = uri[: mistyped.start("password")] + MASK + uri[mistyped.end("password") :]
        raise ReportError(
            f"--tracking-uri {shown}: a URL without its scheme:// (http://user:password@host:5000): write the whole URL"
        )
    try:
        parts = urlsplit(uri)  # its ValueError MLflow would raise as a traceback
        if parts.scheme in ("http", "https"):
            parts.port  # noqa: B018 - read for its ValueError (databricks://scope:prefix is no port)
    except ValueError as error:  # 'http://[::1' (Invalid IPv6 URL), a port out of range or not a number
        shown = without_secrets_of(uri, shown_tracking_uri(uri))
        raise ReportError(f"--tracking-uri {shown}: not a URL ({error})") from None
    return uri


DEFAULT_PORTS = {"postgresql": 5432, "mysql": 3306, "mariadb": 3306, "mssql": 1433, "oracle": 1521}


def refuse_the_store(tracking_uri: str, db: str | None) -> None:
    """A tracking URI that names xover's own store (its SQLite file, or a link to it, or its WAL; the same
    database URL), refused before MLflow is touched: MLflow's migrations would run on xover's tables (and fail
    on xover's schema version, after adding its own tables to the store)."""
    shown = f"--tracking-uri {shown_tracking_uri(tracking_uri)}"
    advice = "MLflow needs a database of its own: choose another, e.g. sqlite:///results/mlflow.db"
    file = _tracking_file(tracking_uri)
    if file is not None:
        for path, what in store_files(db):
            if same_file(path, file):
                raise ReportError(f"{shown}: that is {what}; {advice}")
        return
    store = database_url(db, create_folder=False)
    if sqlite_file(store) is None and _same_database(tracking_uri, store):
        raise ReportError(f"{shown}: that is the store's database; {advice}")


def _tracking_file(tracking_uri: str) -> Path | None:
    """The local file a tracking URI names: a SQLite database's, or a file store's folder (a path, file:PATH)."""
    if tracking_uri.startswith("sqlite:"):
        return sqlite_file(tracking_uri)
    if tracking_uri.startswith("file:"):
        return Path(unquote(urlsplit(tracking_uri).path))
    return None if "://" in tracking_uri else Path(tracking_uri).expanduser()


def _same_database(one: str, other: str) -> bool:
    """Whether two database URLs name the same database: the same backend (whatever its driver), host, port
    (a missing one is the backend's default) and database."""
    try:
        first, second = make_url(one), make_url(other)
    except (ArgumentError, ValueError):  # not a database URL (http://; databricks://scope:prefix, no port)
        return False

    def key(url: Any) -> tuple[str, str, int | None, str]:
        backend = url.get_backend_name().lower()
        backend = "postgresql" if backend == "postgres" else backend
        return backend, (url.host or "").lower(), url.port or DEFAULT_PORTS.get(backend), url.database or ""

    return key(first) == key(second)


def write_experiment(
    report: ExperimentReport,
    params: dict[int, dict[str, str]],
    pictures: dict[str, str],
    html: Path | None,
    tracking_uri: str,
) -> MlflowWritten:
    """Write one experiment into the MLflow tracking store at `tracking_uri` (idempotent; see the module)."""
    _import_mlflow()  # first: importing MLflow sets its loggers' levels, which the write then quietens
    with _mlflow_errors(tracking_uri):
        client = _client(tracking_uri)
        experiment_id = _mlflow_experiment(client, tracking_uri)
        signature = _signature(report, params)
        existing = _runs_of(client, experiment_id, report.id)
        parents = [run for run in existing if run.data.tags.get(TAG_KIND) == "experiment"]
        if (
            len(parents) == 1
            and parents[0].data.tags.get(TAG_SIGNATURE) == signature
            and parents[0].data.tags.get(TAG_COMPLETE) == "true"
        ):
            jobs = sum(1 for run in existing if run.data.tags.get(TAG_KIND) == "job")
            return MlflowWritten(report.id, parents[0].info.run_id, jobs, 0, unchanged=True, replaced=False)
        for run in existing:  # an earlier copy, different or cut short: replaced as a whole
            client.delete_run(run.info.run_id)
        parent = _write_parent(client, experiment_id, report, signature)
        for job in report.jobs:
            _write_job(client, experiment_id, parent, report, job, params.get(job.run_id or -1, {}))
        artifacts = _log_artifacts(client, parent, report, pictures, html)
        client.set_tag(parent, TAG_COMPLETE, "true")
        _end(client, parent, report.experiment.status, report.experiment.ended_at)
        return MlflowWritten(report.id, parent, len(report.jobs), artifacts, unchanged=False, replaced=bool(existing))


# ------------------------------------------------------------------------------------ MLflow


def _import_mlflow() -> None:
    try:
        import mlflow.tracking  # noqa: F401
    except ImportError:
        raise ReportError(
            "--format mlflow needs MLflow's client: pip install 'xover[mlflow]' (make setup installs it)"
        ) from None


def _client(tracking_uri: str) -> MlflowClient:
    from mlflow.tracking import MlflowClient

    if tracking_uri.startswith("sqlite:///"):
        # MLflow would create the database, but not its folder; say so rather than fail inside SQLAlchemy
        folder = Path(tracking_uri.removeprefix("sqlite:///")).parent
        if not folder.is_dir():
            raise ReportError(f"--tracking-uri {shown_tracking_uri(tracking_uri)}: no folder {folder} for the database")
    _reach_database(tracking_uri)
    return MlflowClient(tracking_uri=tracking_uri)


def _reach_database(tracking_uri: str) -> None:
    """A database store (sqlite:, postgresql://, mysql://) connected to once, here: MLflow retries its first
    connection 15 times, about 110 s of warnings, before it says it cannot (a SQLite file it cannot create, too);
    a failure is one line, at once."""
    scheme = tracking_uri.split("://", 1)[0].split("+", 1)[0].lower() if "://" in tracking_uri else ""
    if scheme not in ("sqlite", "postgresql", "postgres", "mysql", "mssql", "oracle"):
        return
    from sqlalchemy import create_engine

    # a host that never answers would hold the connection for the system's TCP timeout (minutes): 10 s
    timeout = {"connect_timeout": 10} if scheme in ("postgresql", "postgres", "mysql") else {}
    try:
        # its errors are the store's: _mlflow_errors makes them one line
        engine = create_engine(tracking_uri, connect_args=timeout)
    except ImportError as error:
        raise ReportError(
            f"--tracking-uri {shown_tracking_uri(tracking_uri)}: its database driver is not installed ({error})"
        ) from None
    try:
        with engine.connect():
            pass
    finally:
        engine.dispose()


def _mlflow_experiment(client: MlflowClient, tracking_uri: str) -> str:
    """The MLflow experiment's id (created when missing, tagged with its owner; a SQLite store's artifacts go
    beside its file). One that another user's xover made is refused unless MLFLOW_EXPERIMENT_NAME names it;
    one that no xover made for you (another tool's, an older xover's) is written into, and said so."""
    asked = os.environ.get("MLFLOW_EXPERIMENT_NAME")
    name = asked or EXPERIMENT_NAME
    with _no_retries():  # the first request says whether the store can be reached at all
        found = client.get_experiment_by_name(name)
    if found is not None:
        if found.lifecycle_stage != "active":
            raise ReportError(
                f"--tracking-uri {shown_tracking_uri(tracking_uri)}: the MLflow experiment '{name}' is deleted; "
                "restore it or set MLFLOW_EXPERIMENT_NAME to another"
            )
        _check_owner(found.tags.get(TAG_OWNER), name, asked is not None, tracking_uri)
        return found.experiment_id
    location = None
    if tracking_uri.startswith("sqlite:///"):
        location = (Path(tracking_uri.removeprefix("sqlite:///")).resolve().parent / "mlruns").as_uri()
    return client.create_experiment(
        name,
        artifact_location=location,
        tags={
            TAG_OWNER: _user(),
            "mlflow.note.content": "xover experiments: one parent run each, its jobs' runs nested under it",
            # MLflow's UI then shows model training's pages, not GenAI's
            "mlflow.experimentKind": "custom_model_development",
        },
    )


def _user() -> str:
    """Who writes: the user name MLflow puts on runs too (`mlflow.user`); the uid where there is none."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def _check_owner(owner: str | None, name: str, asked: bool, tracking_uri: str) -> None:
    """Refuse another user's experiment unless asked for by name; say so when writing into one xover did
    not make for this user."""
    if owner == _user():
        return
    whose = f"belongs to {owner} (their xover made it)" if owner else "was not made by xover for you"
    if owner and not asked:
        raise ReportError(
            f"--tracking-uri {shown_tracking_uri(tracking_uri)}: the MLflow experiment '{name}' {whose}; "
            f"set MLFLOW_EXPERIMENT_NAME to an experiment of your own, or to '{name}' to write into theirs"
        )
    print_notice(
        f"note: the MLflow experiment '{name}' {whose}; writing into it"
        + ("" if asked else " (set MLFLOW_EXPERIMENT_NAME to write into another)")
    )


def _runs_of(client: MlflowClient, experiment_id: str, xover_experiment: str) -> list[Any]:
    runs: list[Any] = []
    token = None
    while True:
        page = client.search_runs(
            [experiment_id], f"tags.`{TAG_EXPERIMENT}` = '{xover_experiment}'", max_results=1000, page_token=token
        )
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def _write_parent(client: MlflowClient, experiment_id: str, report: ExperimentReport, signature: str) -> str:
    info = report.experiment
    run = client.create_run(
        experiment_id,
        start_time=_ms(info.created_at),
        run_name=info.id,
        tags={
            TAG_EXPERIMENT: info.id,
            TAG_KIND: "experiment",
            TAG_SIGNATURE: signature,
            "xover.status": info.status,
            "mlflow.note.content": f"xover {info.kind} {info.id}: `{info.command}`",
        },
    )
    parent: str = run.info.run_id
    params = {
        "kind": info.kind,
        "command": info.command,
        "link": info.bandwidth or HOST_KEY,
        "hosts": info.hosts,
        "plan_id": info.plan_id,
        "hardware": info.hardware,
        "jobs": json.dumps(sorted({job.name for job in report.jobs if job.name})),
    }
    metrics: dict[str, float] = {}
    for group in report.groups:
        for key, attribute in GROUP_METRICS.items():
            value = getattr(group, attribute)
            if _number(value):
                metrics[f"group{group.group}.{key}"] = float(value)
        for policy, result in group.policies.items():
            aggregate = result.aggregate
            if _number(aggregate):
                metrics[f"group{group.group}.crossover.{policy}"] = float(aggregate)
        for way, gain in group.measured.items():
            if way not in (CROSSOVER.name, CONCURRENT.name) and _number(gain):
                metrics[f"group{group.group}.{way}_vs_sequential"] = float(gain)
    _log(client, parent, params=_flat_params(params), metrics=metrics, histories=_decisions(report))
    return parent


def _decisions(report: ExperimentReport) -> list[Any]:
    """Each adaptive group's timeline as metric histories (step: its place in the timeline; time: its start)."""
    from mlflow.entities import Metric

    histories = []
    for group in report.groups:
        for segment in group.timeline:
            stamp, step = int(segment["started"] * 1000), int(segment["seq"])
            prefix = f"group{group.group}.adaptive"
            histories.append(Metric(f"{prefix}.turns", 1.0 if segment["way"] == CROSSOVER.name else 0.0, stamp, step))
            if _number(segment.get("aggregate")):
                histories.append(Metric(f"{prefix}.{segment['way']}", float(segment["aggregate"]), stamp, step))
    return histories


def _write_job(
    client: MlflowClient,
    experiment_id: str,
    parent: str,
    report: ExperimentReport,
    job: RunResult,
    recipe: dict[str, str],
) -> None:
    label = f"{job.name} {job.mode}" + (f" ({job.policy})" if job.policy and turn_taking(job.mode) else "")
    tags = {
        "mlflow.parentRunId": parent,
        TAG_EXPERIMENT: report.id,
        TAG_KIND: "job",
        TAG_RUN_ID: str(job.run_id),
        "xover.job": job.name,
        "xover.mode": job.mode,
        "xover.status": job.status or "",
    }
    if job.policy:
        tags["xover.policy"] = job.policy
    if job.group is not None:
        tags["xover.group"] = str(job.group)
    run = client.create_run(experiment_id, start_time=_ms(job.started_at), run_name=label, tags=tags)
    run_id = run.info.run_id
    params = {
        "mode": job.mode,
        "policy": job.policy,
        "group": job.group,
        "engine": job.engine,
        "np": job.np,
        "hosts": job.hosts,
        "devices": job.devices,
        "device": job.device,
        "backend": job.backend,
        "iterations_planned": job.iterations_planned,
        "link": report.experiment.bandwidth or HOST_KEY,
        **recipe,
    }
    metrics = {key: float(getattr(job, field)) for key, field in JOB_METRICS.items() if _kept(getattr(job, field), key)}
    for parity in report.parity:
        if (parity.name, parity.mode, parity.policy, parity.group) == (job.name, job.mode, job.policy, job.group):
            difference = parity.max_abs_loss_diff
            if _kept(difference, "loss_parity.max_abs_diff"):
                metrics["loss_parity.max_abs_diff"] = float(difference)
            if parity.identical is not None:
                metrics["loss_parity.identical"] = 1.0 if parity.identical else 0.0
            metrics["loss_parity.steps"] = float(parity.steps)
    histories = []
    from mlflow.entities import Metric

    for row in report.iterations.get(job.run_id or -1, []):
        stamp = int(row["wall_time"] * 1000) if _number(row.get("wall_time")) else _ms(job.started_at)
        for key, column in HISTORIES.items():
            if _kept(row.get(column), key):
                histories.append(Metric(key, float(row[column]), stamp, int(row["step"])))
    _log(client, run_id, params=_flat_params(params), metrics=metrics, histories=histories)
    _end(client, run_id, job.status, job.ended_at)


def _end(client: MlflowClient, run_id: str, status: str | None, ended_at: str | None) -> None:
    """The run's end as xover recorded it; a run still going (pending, running) stays RUNNING, without an end."""
    if status in STATUS:
        client.set_terminated(run_id, STATUS[status], _ms(ended_at))


def _log_artifacts(
    client: MlflowClient, parent: str, report: ExperimentReport, pictures: dict[str, str], html: Path | None
) -> int:
    paths = [Path(path) for path in pictures.values()] + ([html] if html is not None else [])
    written = 0
    for path in paths:
        if path.is_file():
            client.log_artifact(parent, str(path))
            written += 1
    client.log_dict(
        parent,
        json.loads(json_text(report_dict(report, {name: Path(path).name for name, path in pictures.items()}))),
        "report.json",
    )
    for group in report.groups:
        if group.timeline:  # each decision with the figures it was made on
            client.log_dict(
                parent,
                {
                    "group": group.group,
                    "jobs": group.jobs,
                    "time_in_ways": group.time_in_ways,
                    "timeline": group.timeline,
                },
                f"adaptive-group{group.group}.json",
            )
            written += 1
    return written + 1


def _log(
    client: MlflowClient,
    run_id: str,
    params: dict[str, str],
    metrics: dict[str, float],
    histories: list[Any] | None = None,
) -> None:
    from mlflow.entities import Metric, Param

    now = _ms(None)
    entries = [Metric(key, value, now, 0) for key, value in metrics.items()] + list(histories or [])
    param_entries = [Param(key, value) for key, value in params.items()]
    for start in range(0, len(param_entries), PARAM_BATCH):
        client.log_batch(run_id, params=param_entries[start : start + PARAM_BATCH])
    for start in range(0, len(entries), BATCH):
        client.log_batch(run_id, metrics=entries[start : start + BATCH])


def _flat_params(params: dict[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in params.items():
        out.update(_flat(key, value))
    return out


# ------------------------------------------------------------------------------------ helpers


def _signature(report: ExperimentReport, params: dict[int, dict[str, str]]) -> str:
    """A hash of everything written: the same experiment, unchanged, hashes alike."""
    shown = report_dict(report, {})
    if not shown["not_started"]:  # an experiment written before the key existed reads unchanged
        del shown["not_started"]
    body = {
        "report": shown,
        "params": {str(k): v for k, v in sorted(params.items())},
        "iterations": {
            str(run): [[row.get("step"), *(row.get(c) for c in HISTORIES.values())] for row in rows]
            for run, rows in sorted(report.iterations.items())
        },
    }
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()[:32]


def _number(value: Any) -> TypeGuard[float]:
    """A finite number (not a flag): what MLflow takes as a metric."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# a diverged job's losses, NaN or infinite, are metrics too: MLflow keeps a NaN (its SQL store an infinity as the
# largest float), and a loss history that stopped at its last finite value would read as a healthy run
NOT_FINITE_KEPT = frozenset({"loss", "final_loss", "loss_parity.max_abs_diff"})


def _kept(value: Any, key: str) -> TypeGuard[float]:
    """Whether `value` is written as metric `key`: a finite number, or any number for a loss (NOT_FINITE_KEPT)."""
    if key in NOT_FINITE_KEPT:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return _number(value)


def _ms(moment: str | None) -> int:
    """Milliseconds since the epoch of a report's UTC time ("2026-11-27 14:00:00[.ffffff][ UTC]"); now when None."""
    if not moment:
        return int(datetime.now(timezone.utc).timestamp() * 1000)
    parsed = datetime.fromisoformat(moment.removesuffix(" UTC"))
    return int(parsed.replace(tzinfo=timezone.utc).timestamp() * 1000)


@contextlib.contextmanager
def _no_retries() -> Iterator[None]:
    """MLflow retries a failed request for minutes; the first one fails at once, so that an unreachable
    server is one line, not a wait (a user's own MLFLOW_HTTP_REQUEST_MAX_RETRIES is kept)."""
    if "MLFLOW_HTTP_REQUEST_MAX_RETRIES" in os.environ:
        yield
        return
    os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = "0"
    try:
        yield
    finally:
        os.environ.pop("MLFLOW_HTTP_REQUEST_MAX_RETRIES", None)


@contextlib.contextmanager
def _mlflow_errors(tracking_uri: str) -> Iterator[None]:
    """MLflow's and its store's failures as one line naming the URI; MLflow's INFO lines kept off the terminal."""
    loggers = [logging.getLogger(name) for name in ("mlflow", "alembic")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.WARNING)
    try:
        yield
    except ReportError:
        raise
    except Exception as error:  # MlflowException, SQLAlchemy's and requests' errors, OSError
        if not _is_store_error(error):
            raise
        shown = without_secrets_of(tracking_uri, f"{shown_tracking_uri(tracking_uri)}: {_first_line(error)}")
        raise ReportError(f"--tracking-uri {shown}") from None
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def _is_store_error(error: Exception) -> bool:
    from mlflow.exceptions import MlflowException
    from sqlalchemy.exc import SQLAlchemyError

    return isinstance(error, (MlflowException, SQLAlchemyError, OSError, ConnectionError))


def _first_line(error: Exception) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    if "NewConnectionError" in text or "Connection refused" in text:
        return "cannot reach the MLflow tracking server (connection refused)"
    text = text.split(" See http")[0]
    return text if len(text) <= 300 else text[:297] + "..."
