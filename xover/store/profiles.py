"""Every query of the `profiles` table: what profile, plan, run, report and bench read of stored profiles.

A profile is found by recipe content where a job is about to run as profiled (`find_profile`): its
`Recipe.profile_key`, whatever the job is called and however long it runs, or the keys profiles had before
(`Recipe.profile_keys`; a function given one key finds that one); and by recipe name where
a job already ran (a run's recipe carries the iterations --seconds chose, so its hash is not the profiled one's;
a second copy of a job runs as name#2), else by its run's recipe as stored, but for its name, description and
length (a renamed job file ran from the profile taken under its first name). A profile is reused and planned
with only under the settings that change a job alone it was taken under (`tuning_here`); a run orders its
jobs and sizes `--seconds` by one taken under others where it has none under its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import and_, exists, func, not_, select
from sqlalchemy.orm import Session

from ..devices import default_torch_backend, hardware_fingerprint
from ..settings import ALONE_FIELDS, settings
from ..sharing import RunStatus
from .models import Experiment, Profile, RecipeSnapshot, Run
from .session import Store


def tuning_here() -> str:
    """The settings that change how fast a job runs alone, as this process has them ('' for the defaults): what
    a profile is taken under, and what a stored one must have been taken under to be used here. A torch backend
    named that is this machine's default anyway (gloo on a CPU, nccl on a GPU) is the default: the same runs."""
    current = settings()
    named = current.torch_backend  # the machine is looked at only where a backend is named
    if named is not None and named == default_torch_backend(on_gpu=hardware_fingerprint().startswith("gpu:")):
        current = dataclasses.replace(current, torch_backend=None)
    return current.tuning(ALONE_FIELDS)


def _taken_here():
    """A profile's condition to hold here: taken under `tuning_here` (NULL, before migration 0019: the defaults)."""
    return func.coalesce(Profile.tuning, "") == tuning_here()


def cut_short():
    """A profile's condition to be cut short: its interference next to the reference partner not measured, in a
    profile experiment that did not finish (interrupted, stopped, timed out, failed, lost) or is still going - its
    job's run alone is stored before that partner's run. One taken with `--no-corun` measures none by choice."""
    return and_(
        Profile.interference.is_(None),
        exists().where(
            Run.id == Profile.run_id,
            Experiment.id == Run.experiment_id,
            Experiment.status != RunStatus.FINISHED.value,
            not_(Experiment.command.contains("--no-corun")),
        ),
    )


def _keyed(keys: str | Sequence[str]):
    """A profile's condition to be one of a recipe's (`Recipe.profile_keys`, or one key)."""
    return Profile.recipe_hash.in_([keys] if isinstance(keys, str) else list(keys))


def find_profile(
    store: Store,
    recipe_hash: str | Sequence[str],
    np: int,
    bandwidth: str | None,
    hardware: str | None,
    engine: str | None = None,
    hosts: int = 1,
    any_settings: bool = False,
    whole: bool = False,
) -> Profile | None:
    """The newest profile of a recipe at this np over this many hosts, taken under this process's settings
    (`tuning_here`; under any where `any_settings`), and at the bandwidth, on the hardware and under the engine
    given; `whole`: not one cut short before its interference was measured (`cut_short`)."""
    query = select(Profile).where(_keyed(recipe_hash), Profile.np == np, Profile.hosts == hosts)
    if not any_settings:
        query = query.where(_taken_here())
    if whole:
        query = query.where(~cut_short())
    if engine is not None:
        query = query.where(Profile.engine == engine)
    if bandwidth is not None:
        query = query.where(Profile.bandwidth == bandwidth)
    if hardware is not None:
        query = query.where(Profile.hardware == hardware)
    with store.session() as session:
        profile = session.scalars(query.order_by(Profile.id.desc())).first()
        if profile is not None:
            _ = profile.recipe  # load it before the session closes
        return profile


SHARED_LOOPBACK = " (shared lo)"  # migration 0012's mark on a profile of the loopback shaped for every node


def profiled_links(store: Store, keys: list[tuple[str | Sequence[str], int, str]]) -> list[set[str]]:
    """For each (recipe's profile keys, np, engine): the link rates it has profiles at, taken under this process's
    settings (not a loopback shaped for all the nodes together, as one machine's was before migration 0012:
    no rate of today's names it)."""
    taken_here = _taken_here()
    with store.session() as session:
        return [
            set(
                session.scalars(
                    select(Profile.bandwidth).where(
                        _keyed(recipe_hash),
                        Profile.np == np,
                        Profile.engine == engine,
                        Profile.bandwidth.not_like(f"%{SHARED_LOOPBACK}"),
                        taken_here,
                    )
                )
            )
            for recipe_hash, np, engine in keys
        ]


def other_engines(
    store: Store,
    recipe_hash: str | Sequence[str],
    np: int,
    engine: str,
    hosts: int | None = None,
    bandwidth: str | None = None,
) -> list[str]:
    """The engines other than `engine` that a recipe at this np has profiles under (under this process's
    settings; over `hosts` hosts and at `bandwidth`, where given: a profile of another shape would not be
    found under that engine either), sorted."""
    shape = [
        *([Profile.hosts == hosts] if hosts is not None else []),
        *([Profile.bandwidth == bandwidth] if bandwidth is not None else []),
    ]
    with store.session() as session:
        return sorted(
            set(
                session.scalars(
                    select(Profile.engine).where(
                        _keyed(recipe_hash), Profile.np == np, Profile.engine != engine, _taken_here(), *shape
                    )
                )
            )
        )


def other_tunings(store: Store, recipe_hash: str | Sequence[str], np: int, engine: str) -> list[str]:
    """The settings other than this process's that a recipe at this np has profiles under with this engine
    ('' for the defaults), sorted."""
    with store.session() as session:
        taken = set(
            session.scalars(
                select(func.coalesce(Profile.tuning, "")).where(
                    _keyed(recipe_hash), Profile.np == np, Profile.engine == engine
                )
            )
        )
    return sorted(taken - {tuning_here()})


def profiled_script_hashes(store: Store, name: str, script: str | None = None) -> list[str | None]:
    """The script contents (sha256, None where not recorded) of every profile of the job named `name`, and of every
    profile of `script` (its absolute path) under any name (a job file renamed since)."""
    with store.session() as session:
        rows = session.execute(
            select(RecipeSnapshot.name, RecipeSnapshot.body).join(Profile, Profile.recipe_id == RecipeSnapshot.id)
        ).all()
    return [
        (row.body or {}).get("script_sha256")
        for row in rows
        if row.name == name or (script is not None and (row.body or {}).get("script") == script)
    ]


def _of_job(job: dict[str, Any], link: str):
    """Conditions for the profiles of a job that ran (`analysis.job_summary`) but its name: np, engine and link (its
    key: links.Link.key)."""
    return (Profile.np == job["np"], Profile.engine == job["engine"], Profile.bandwidth == link)


def _computes(body: Mapping[str, Any]) -> dict[str, Any]:
    """A stored recipe's body (`Recipe.to_dict`) without what does not change what its job computes: its name,
    description and length, and a script's path (the script counts by its `script_sha256`)."""
    left_out = {"name", "description", "iterations", "epochs", *(("script",) if "script" in body else ())}
    return {key: value for key, value in body.items() if key not in left_out}


def _newest_of_job(session: Session, job: dict[str, Any], link: str, columns: Sequence[Any], *conditions: Any):
    """The newest profile (its `columns`) of a job that ran, meeting `conditions`: one under its name (name#2: its
    first copy's), else, where `job` names its run (`run_id`), one of its recipe under another name (a renamed job
    file reuses the profile taken under the first name: `find_profile` finds profiles by what a job computes)."""
    where = (*_of_job(job, link), *conditions)
    named = Profile.name == job["name"].split("#", 1)[0]
    found = session.execute(select(*columns).where(named, *where).order_by(Profile.id.desc())).first()
    ran = session.get(Run, job["run_id"]) if found is None and job.get("run_id") is not None else None
    if ran is None:
        return found
    wanted = _computes(ran.recipe.body or {})
    others = session.execute(
        select(RecipeSnapshot.body, *columns)
        .join(RecipeSnapshot, Profile.recipe_id == RecipeSnapshot.id)
        .where(*where)
        .order_by(Profile.id.desc())
    )
    return next((row for row in others if _computes(row.body or {}) == wanted), None)


def stored_interference(
    session: Session, job: dict[str, Any], link: str, before: datetime
) -> tuple[float, float | None]:
    """A job's interference from its newest profile that measured one (same recipe name, or content where the job
    names its run, np, engine and link: `_newest_of_job`) taken on or before `before`, with the link share of the
    partner it was measured next to: the runs of a comparison are measured alone, never next to the reference
    partner. `before` is the experiment's start, so that a later profile does not change an old report's model."""
    columns = (Profile.interference, Profile.corun_partner_link_share)
    found = _newest_of_job(session, job, link, columns, Profile.interference.is_not(None), Profile.created_at <= before)
    return (found.interference, found.corun_partner_link_share or None) if found else (0.0, None)


def profile_device_ms(session: Session, job: dict[str, Any], link: str, hosts: int, before: datetime) -> float | None:
    """Device time per iteration (data + compute) in the job's newest profile (`_newest_of_job`) taken on or before
    `before` over `hosts` hosts; None without one."""
    columns = (Profile.data_ms, Profile.compute_ms)
    found = _newest_of_job(session, job, link, columns, Profile.hosts == hosts, Profile.created_at <= before)
    return found.data_ms + found.compute_ms if found else None


def interference_profile_before(
    session: Session,
    name: str,
    np: int,
    hosts: int,
    engine: str,
    link: str,
    hardware: str | None,
    before: datetime,
) -> Profile | None:
    """The newest profile of the job named `name` (name#2: its first copy's) that measured interference,
    taken strictly before `before` on this hardware, np, hosts, engine and link (its key)."""
    return session.scalars(
        select(Profile)
        .where(
            Profile.name == name.split("#", 1)[0],
            Profile.np == np,
            Profile.hosts == hosts,
            Profile.engine == engine,
            Profile.bandwidth == link,
            Profile.hardware == hardware,
            Profile.interference.is_not(None),
            Profile.created_at < before,
        )
        .order_by(Profile.id.desc())
    ).first()
