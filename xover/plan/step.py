"""The plan step: job profiles (stored, or a CSV trace) -> the pure planner -> a plan file + the store."""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from ..config import results_root
from ..devices import hardware_fingerprint
from ..engines import DEFAULT_ENGINE
from ..errors import Interrupted, XoverError, printable, refuse_overwriting, write_problem
from ..hints import xover_command
from ..hosts import parse_hosts
from ..links import Link
from ..recipes import Recipe, load_recipe, profile_command, profile_ranks, profile_target, with_overrides
from ..redact import MASK, holds_credentials, mask_argv
from ..scripts import check_engine, copy_name, local_modules
from ..sharing import MAX_GROUP
from ..store.measured import recent_measurements
from ..store.models import Plan as PlanRow
from ..store.models import PlanGroup, Run
from ..store.profiles import (
    find_profile,
    other_engines,
    other_tunings,
    profiled_links,
    profiled_script_hashes,
    tuning_here,
)
from ..store.session import missing_sqlite_file, open_store, remove_store_made_for_nothing, store_files
from ..turns.policies import DEFAULT_POLICY, POLICIES
from ..writes import write_whole
from . import (
    ALGORITHMS,
    InvalidJobProfile,
    JobProfile,
    Plan,
    PlannedScript,
    load_trace_csv,
    local_hosts,
    make_plan,
    plan_to_dict,
)
from .from_profiles import job_profile
from .measured import NONE, JobIdentity, Measurements
from .state import Host

DEFAULT_PLAN_NAME = "plan.json"  # in the results folder (results/, or XOVER_RESULTS)
MAX_DEVICES = 65536  # --devices: far beyond any one machine, and a plan over them still takes seconds


def check_max_group(max_group: int, alone: str) -> None:
    """--max-group: from 1 (`alone` says what 1 does) to MAX_GROUP, the most jobs one turn server serves."""
    if not 1 <= max_group <= MAX_GROUP:
        shown = str(max_group) if len(str(max_group)) <= 20 else f"{str(max_group)[:20]}..."
        raise XoverError(
            f"--max-group {shown}: give a whole number from 1 to {MAX_GROUP} (1 {alone}; a group takes turns "
            f"under one turn server, which serves at most {MAX_GROUP} jobs)"
        )


def hosts_spanned(np: int, hosts: list[tuple[str, int]]) -> int:
    """How many hosts a job of np ranks will span as the placement places it: one if any host is big
    enough, else hosts taken in order until their slots suffice."""
    if any(slots >= np for _, slots in hosts):
        return 1
    total = 0
    for count, (_, slots) in enumerate(hosts, start=1):
        total += slots
        if total >= np:
            return count
    return len(hosts)


def profiles_of_recipes(
    db: str | None,
    recipes: list[Recipe],
    link: Link | None,
    hosts: list[tuple[str, int]] | None = None,
    engine: str = DEFAULT_ENGINE,
) -> tuple[list[JobProfile], dict[str, str], Link, str]:
    """JobProfiles from the newest stored profile of each recipe (this hardware first, then any), all
    taken on one link: `link` (--bandwidth), or the one at which every recipe was profiled; a built-in
    model's under `engine`, a script's under its own. Returns the profiles, job name -> recipe (or
    job file) path, the link used, and the kind of device the profiles were taken on ('gpu' if
    any was; a plan made on a login node runs on GPU nodes)."""
    for index, recipe in enumerate(recipes):
        twin = next((other for other in recipes[:index] if other.name == recipe.name), None)
        if twin is not None:
            raise XoverError(
                f"{recipe.named_twice(twin)}; a plan needs distinct job names: plan a job once, or give a copy its "
                "own `name` in a job file"
            )
    store = open_store(db)  # after the refusals: a refused plan leaves no store behind
    hardware = hardware_fingerprint()
    link = link or _common_link(store, recipes, engine)
    jobs, paths, kind = [], {}, "cpu"
    for recipe in recipes:
        job_engine = engine_of(recipe, engine)
        spanned = hosts_spanned(recipe.np, hosts or [("localhost", recipe.np)])
        key = link.key
        keys = recipe.profile_keys
        found = find_profile(
            store, keys, recipe.np, key, hardware, job_engine, hosts=spanned, whole=True
        ) or find_profile(store, keys, recipe.np, key, None, job_engine, hosts=spanned, whole=True)
        if found is None:
            # the command that profiles it here: its link, engine, ranks and hosts
            across_hosts = ["-H", "..."] if spanned > 1 else []
            options = [*(link.flag + _engine_flag(recipe, engine)).split(), *profile_ranks(recipe), *across_hosts]
            half = find_profile(store, keys, recipe.np, key, None, job_engine, hosts=spanned)
            if half is not None:  # read as no interference at all, it made every pair of it look better
                raise XoverError(
                    f"the profile of '{recipe.name}' (np {recipe.np}) at link {key} was cut short before its "
                    f"interference next to a partner was measured ({_how_it_ended(store, half)}): run "
                    f"`{profile_command(recipe, *options)}` to measure what is missing (or profile it with "
                    "--no-corun, whose predictions assume no interference)"
                )
            across = f" over {spanned} hosts" if spanned > 1 else ""
            raise XoverError(
                f"no {job_engine} profile of '{recipe.name}' (np {recipe.np}{across}) at link {key}: run "
                f"`{profile_command(recipe, *options)}` first"
                + _changed_hint(store, recipe)
                + _other_engine_hint(store, recipe, job_engine, spanned, key)
                + _other_tuning_hint(store, recipe, job_engine)
            )
        try:
            jobs.append(job_profile(recipe, found))
        except InvalidJobProfile as invalid:  # a stored profile no job can have (written by hand, an older xover)
            raise XoverError(
                f"the stored profile of '{recipe.name}' (np {recipe.np}) cannot be planned with: {invalid.problem}; "
                f"profile it again: `{profile_command(recipe, '--force')}`"
            ) from None
        # absolute: `xover run PLAN` from another folder finds the same file (a path relative to where the plan was
        # made named nothing there)
        paths[recipe.name] = os.path.abspath(recipe.path) if recipe.path else recipe.path
        if (found.hardware or "").startswith("gpu:"):
            kind = "gpu"
    return jobs, paths, link, kind


def engine_of(recipe: Recipe, engine: str) -> str:
    """The engine a recipe runs under: a script's own, a built-in model's the one asked for."""
    return recipe.engine_under(engine)


def script_entries(recipes: list[Recipe]) -> dict[str, PlannedScript]:
    """What a plan carries to run each script job as it was profiled: path, arguments, engine, content."""
    entries = {}
    for recipe in recipes:
        if recipe.script:
            assert recipe.engine is not None  # script_recipe gives every script its engine
            entries[recipe.name] = PlannedScript(
                path=recipe.script,
                args=list(recipe.args),
                engine=recipe.engine,
                sha256=recipe.script_sha256 or "",
                iterations=recipe.iterations,
                env=dict(recipe.env),
                pass_env=list(recipe.pass_env),
            )
    return entries


@dataclass(frozen=True)
class PlanWritten:
    """What `xover plan` made: the plan, its id in the store, its file, the link of its profiles (None for
    a --profiles trace), and the engine of its built-in models (None when it has none)."""

    plan: Plan
    plan_id: int
    path: str
    link: Link | None
    engine: str | None

    def to_dict(self) -> dict[str, Any]:
        """`xover plan --json`: the plan file's content as others read it (`shown_plan`), and the rest."""
        return {
            **plan_to_dict(shown_plan(self.plan)),
            "plan_id": self.plan_id,
            "path": self.path,
            "bandwidth": self.link.key if self.link is not None else None,
            "engine": self.engine,
        }


def _how_it_ended(store, profile: Any) -> str:
    """'experiment ID interrupted': the profile experiment a profile was cut short in, and how it ended."""
    with store.session() as session:
        run = session.get(Run, profile.run_id) if profile.run_id is not None else None
        if run is None:
            return "its experiment is gone"
        return f"experiment {run.experiment_id} {run.experiment.status}"


def _changed_hint(store, recipe: Recipe) -> str:
    """For a script: ' (the script changed since it was profiled)' when an older content has profiles."""
    if not recipe.script:
        return ""
    profiled = profiled_script_hashes(store, recipe.name, recipe.script)
    older = any(sha256 not in (None, recipe.script_sha256) for sha256 in profiled)
    if not older:
        return ""
    return (
        f" (the script {recipe.script}, or a module of its own it imports, changed since it was profiled: "
        "its content is a new job)"
    )


def _engine_flag(recipe: Recipe, engine: str) -> str:
    """What to add to a suggested `xover profile` command: nothing for the default engine, nor for a
    job file (its engine is its own)."""
    if recipe.script:
        return f" --engine {recipe.engine}" if not recipe.path.endswith(".toml") else ""
    return "" if engine == DEFAULT_ENGINE else f" --engine {engine}"


def _other_engine_hint(store, recipe, engine: str, hosts: int | None = None, link: str | None = None) -> str:
    """', or give --engine torch (it has torch profiles)' when the recipe was profiled under another engine
    (over `hosts` hosts and at `link`, where given) (`xover plan` and `xover simulate` both take it)."""
    others = other_engines(store, recipe.profile_keys, recipe.np, engine, hosts, link)
    return f", or give --engine {others[0]} (it has {others[0]} profiles)" if others else ""


def _other_tuning_hint(store, recipe: Recipe, engine: str) -> str:
    """' (its profiles were taken under other settings: ...)' when the recipe has profiles under this engine,
    taken with settings that change a job alone other than this process's."""
    others = other_tunings(store, recipe.profile_keys, recipe.np, engine)
    if not others:
        return ""
    shown = "; ".join(tuning or "the defaults" for tuning in others)
    return (
        f" (its profiles were taken under other settings: {shown}; here: {tuning_here() or 'the defaults'}; "
        "a job runs at another speed under them)"
    )


def _common_link(store, recipes: list[Recipe], engine: str) -> Link:
    """The link at which every recipe has a profile under its engine, when --bandwidth is not given."""
    rates = profiled_links(store, [(recipe.profile_keys, recipe.np, engine_of(recipe, engine)) for recipe in recipes])
    missing = [recipe for recipe, found in zip(recipes, rates) if not found]
    if missing:
        names = ", ".join(f"'{recipe.name}' (np {recipe.np})" for recipe in missing)
        first = missing[0]
        built_in = [recipe for recipe in missing if not recipe.script]
        flag = _engine_flag(built_in[0], engine) if built_in else ""
        # one job: its whole command (a script's arguments after the options); several: their targets
        targets = [profile_target(recipe) for recipe in missing]
        # their ranks (a job file planned at another np is profiled at that one), where one --np covers them all
        one_np = len({recipe.np for recipe in missing}) == 1
        ranks = f" --np {first.np}" if one_np and any(profile_ranks(recipe) for recipe in missing) else ""
        command = (
            profile_command(first, *flag.split(), *profile_ranks(first))
            if len(missing) == 1
            else xover_command(
                "profile", *(word for target in targets for word in target), *flag.split(), *ranks.split()
            )
        )
        engines = " or ".join(sorted({engine_of(recipe, engine) for recipe in missing}))
        raise XoverError(
            f"no {engines} profile of {names}: run `{command}` first"
            + _changed_hint(store, first)
            + _other_engine_hint(store, first, engine_of(first, engine))
            + _other_tuning_hint(store, first, engine_of(first, engine))
        )
    common = set.intersection(*rates)
    if len(common) == 1:
        return Link.of_key(common.pop())
    seen = sorted(set.union(*rates))
    if not common:
        raise XoverError(
            "the recipes were profiled at different link rates ("
            + ", ".join(Link.of_key(key).label for key in seen)
            + "): profile them all at one rate "
            "(`xover profile ... --bandwidth RATE`) and give it with --bandwidth"
        )
    raise XoverError(
        "the recipes were profiled at several link rates ("
        + ", ".join(Link.of_key(key).label for key in sorted(common))
        + "): say which to plan for with --bandwidth (or 'host' for the unshaped network)"
    )


def plan_jobs(
    db: str | None,
    *,
    recipe_paths: list[str],
    trace_csv: str | None,
    devices: int | None,
    hosts: str | None,
    device_memory_gb: float | None,
    max_group: int,
    algo: str,
    out: str | None,
    link: Link | None = None,
    policy: str = DEFAULT_POLICY,
    engine: str = DEFAULT_ENGINE,
    scripts: list[Recipe] | None = None,
    np: int | None = None,
    while_writing: Callable[[], AbstractContextManager[object]] = contextlib.nullcontext,
) -> PlanWritten:
    """`xover plan`: recipes and job files (their stored profiles; `scripts` from --script) or a CSV
    trace -> the planner -> the plan file and the store. A script job's entry carries what `xover run`
    needs to run it as it was profiled. `np`: every recipe's ranks, as `xover profile --np` took them.
    `while_writing`: held while the plan is stored and its file written (a signal deferred till both are
    whole); an Interrupted raised as it ends says the plan was written."""
    scripts = list(scripts or [])
    host_list = _checked_plan_options(
        bool(recipe_paths or scripts),
        trace_csv,
        devices,
        hosts,
        device_memory_gb,
        max_group,
        algo,
        out,
        link,
        policy,
        engine,
        np,
    )
    device_kind = None
    recipes: dict[str, str]  # job name -> recipe path
    path = Path(out) if out else results_root() / DEFAULT_PLAN_NAME
    flag = "--out" if out else "the plan file (no --out: in XOVER_RESULTS)"
    if trace_csv:
        jobs, recipes, scripted = load_trace_csv(trace_csv), {}, {}
        refuse_overwriting(path, [*store_files(db), (trace_csv, "the --profiles file")], flag)
    else:
        loaded = copies_named([with_overrides(load_recipe(given), np=np) for given in recipe_paths] + scripts)
        # the job files given and the scripts behind them, a job file's `script =` included: a plan never replaces
        # a user's code. Checked before the profiles are looked up: a bad --out is said first
        inputs = [(recipe.path, "a job file given") for recipe in loaded if recipe.path]
        refuse_overwriting(path, [*store_files(db), *inputs, *_scripts_kept(loaded)], flag)
        missing = missing_sqlite_file(db)
        new_folders = [folder for folder in missing.parents if not folder.exists()] if missing else []
        try:
            jobs, recipes, link, device_kind = profiles_of_recipes(db, loaded, link, host_list, engine)
        except XoverError:  # no profile: no store either, where there was none (bad input writes nothing)
            if missing is not None:
                remove_store_made_for_nothing(db, new_folders)
            raise
        scripted = script_entries(loaded)
    measured = NONE if trace_csv or link is None else measurements_of(db, loaded, engine, host_list, link)
    plan = make_plan(
        jobs,
        host_list,
        device_memory_gb=device_memory_gb,
        max_group=max_group,
        algo=algo,
        policy=policy,
        measured=measured,
    )
    if not plan.groups:  # a plan with nothing to run would overwrite a good one and fail only at `xover run`
        raise XoverError(_nothing_placed(plan.unplaced, out))
    planned_as = {} if trace_csv else {recipe.name: recipe.planned_as for recipe in loaded if recipe.script is None}
    plan = replace(plan, recipes=recipes, scripts=scripted, planned_as=planned_as)
    if not trace_csv:  # what its profiles were taken under: `xover run PLAN` runs under the same
        plan = replace(plan, link=link.key if link is not None else None, engine=engine, device_kind=device_kind)
    body = plan_to_dict(plan)
    store = open_store(db)  # a store that cannot be opened fails the plan before its file is written
    # stored first, the file written inside the same transaction: a store that refuses the write (a read-only
    # file) leaves no plan file behind, and a file that cannot be written leaves no stored plan
    # Ctrl-C or SIGTERM while the plan is stored and written takes effect once both are whole (`xover plan`
    # passes run.supervise.uninterrupted: the plan's layer is below the run's)
    committed = False
    try:
        with while_writing():
            with store.session() as session, session.begin():
                plan_id = store_plan(session, plan, str(path))
                try:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    text = json.dumps(body, indent=2, allow_nan=False) + "\n"
                    write_plan_file(path, text, any(s.env or holds_credentials(s.args) for s in scripted.values()))
                except OSError as error:
                    problem = write_problem(path, error)
                    raise XoverError(f"{flag} {path}: cannot write the plan file: {problem}") from None
            committed = True
    except Interrupted:
        if not committed:  # the signal deferred while a write failed: the failure is what happened, not a plan
            raise
        raise Interrupted(f"the plan was written whole to {path} and stored") from None
    built_in = not trace_csv and bool(recipe_paths) and any(not load_recipe(p).script for p in recipe_paths)
    return PlanWritten(plan, plan_id, str(path), link, engine if built_in else None)


def copies_named(recipes: list[Recipe]) -> list[Recipe]:
    """A recipe, job file or script given more than once is planned as copies of one job, named as `xover run
    --group` names them (name, name#2, ...); two other files of one name are refused (profiles_of_recipes)."""
    copies: dict[str, int] = {}
    named: list[Recipe] = []
    for recipe in recipes:
        first = next((other for other in named if other.name == recipe.name), None)
        if first is not None and first.label == recipe.label:
            copies[recipe.name] = copies.get(recipe.name, 1) + 1
            recipe = replace(recipe, name=copy_name(recipe.name, copies[recipe.name]))
        named.append(recipe)
    return named


def _scripts_kept(recipes: list[Recipe]) -> list[tuple[str | Path, str]]:
    """Each job's script and the modules of its own it imports: files the plan file must never replace."""
    kept: list[tuple[str | Path, str]] = []
    for recipe in recipes:
        if recipe.script is None:
            continue
        kept.append((recipe.script, f"the script of job {recipe.name!r}"))
        try:
            kept += [
                (module, f"a module the script of job {recipe.name!r} imports")
                for module in local_modules(recipe.script)
            ]
        except OSError:  # an unreadable module: the script itself is still kept
            pass
    return kept


def _nothing_placed(unplaced: list[tuple[str, str]], out: str | None) -> str:
    """The refusal of a plan that places no job: each job's reason, what to change, and that no file was
    written (a plan file already there is kept)."""
    shown = "; ".join(f"'{printable(name)}' {reason}" for name, reason in unplaced[:5])
    more = f"; and {len(unplaced) - 5} more" if len(unplaced) > 5 else ""
    memory = any("GB per device" in reason for _, reason in unplaced)
    fix = "more devices (--devices N or -H host:N,...)" + (" or a larger --device-memory" if memory else "")
    target = f"--out {out}" if out else "the plan file"
    if not unplaced:
        return f"no job to plan; nothing was written to {target}"
    return f"no job can be placed on these devices ({shown}{more}): give {fix}; nothing was written to {target}"


def _checked_plan_options(
    has_jobs: bool,
    trace_csv: str | None,
    devices: int | None,
    hosts: str | None,
    device_memory_gb: float | None,
    max_group: int,
    algo: str,
    out: str | None,
    link: Link | None,
    policy: str,
    engine: str,
    np: int | None,
) -> list[Host]:
    """`xover plan`'s options, each checked (a bad one is an XoverError naming it); the hosts it plans on."""
    check_engine(engine)
    if algo not in ALGORITHMS:
        raise XoverError(f"--algo {printable(algo)}: choose {', '.join(ALGORITHMS)}")
    if policy not in POLICIES:
        raise XoverError(f"--policy {printable(policy)}: choose {' or '.join(POLICIES)}")
    if has_jobs == bool(trace_csv):
        raise XoverError(
            "give recipes or job files (planned from their stored profiles), or --profiles FILE.csv"
            + (", not both" if has_jobs else "")
        )
    if np is not None and not 1 <= np <= 10**5:
        raise XoverError(f"--np {np}: give the ranks per job, a whole number >= 1")
    if trace_csv and np is not None:
        raise XoverError("--np picks stored profiles of recipes; a --profiles file carries each job's devices")
    if trace_csv and link is not None:
        raise XoverError("--bandwidth picks stored profiles of recipes; a --profiles file carries its own times")
    if out is not None and not out.strip():
        raise XoverError("--out: give a file name for the plan (default plan.json in the results folder)")
    if devices is not None and not 1 <= devices <= MAX_DEVICES:
        raise XoverError(f"--devices {devices}: give a whole number from 1 to {MAX_DEVICES}")
    check_max_group(max_group, alone="plans every job alone")
    if device_memory_gb is not None and not (math.isfinite(device_memory_gb) and device_memory_gb > 0):
        raise XoverError(f"--device-memory {device_memory_gb:g}: give the GB per device, a number > 0")
    if hosts and devices:
        raise XoverError("--devices and -H: give one (--devices N plans on this machine, -H on the hosts named)")
    if hosts:
        parsed = parse_hosts(hosts)
        if sum(slots for _, slots in parsed) > MAX_DEVICES:
            raise XoverError(f"-H {hosts}: more than {MAX_DEVICES} devices in all; plan on fewer")
        return parsed
    if devices:
        return local_hosts(devices)
    raise XoverError("say where jobs may run: --devices N (this machine) or -H host1:N,host2:N")


def measurements_of(
    db: str | None, recipes: list[Recipe], engine: str, hosts: list[tuple[str, int]], link: Link
) -> Measurements:
    """What was measured before on groups of these recipes, as they run here (each one's workload, ranks,
    engine and hosts; the link; this hardware; the settings that change sharing): the mean of the newest few
    of each way (plan/measured.py)."""
    identities, legacy = {}, {}  # legacy: as rows were keyed before 2026-12-02 (plan/measured.py)
    for recipe in recipes:
        ranks, job_engine, spanned = recipe.np, engine_of(recipe, engine), hosts_spanned(recipe.np, hosts)
        identities[recipe.name] = JobIdentity(recipe.workload, ranks, job_engine, spanned)
        legacy[recipe.name] = JobIdentity(recipe.legacy_workload, ranks, job_engine, spanned)
    return Measurements.of_rows(recent_measurements(open_store(db), link.key), identities, legacy)


def write_plan_file(path: Path, text: str, holds_secrets: bool) -> None:
    """The plan file, written whole or not at all (a plan that fails to write leaves the one there as it was).
    One that holds a job file's `env` values or a script's credential arguments (a value may be a secret;
    `xover run PLAN` needs them) is readable by its owner only (mode 0600), whatever mode a file there had."""
    write_whole(path, text, private=holds_secrets)


def shown_plan(plan: Plan) -> Plan:
    """The plan as others read it (the store's rows, `xover plan --json`, which a CI log keeps): a job file's `env`
    values and a script's credential arguments as ***; only the plan file (mode 0600 then) has them."""
    return replace(
        plan,
        scripts={
            name: replace(script, env=dict.fromkeys(script.env, MASK), args=mask_argv(script.args))
            for name, script in plan.scripts.items()
        },
    )


def store_plan(session: Session, plan: Plan, path: str | None = None) -> int:
    """A plan as rows (plans, plan_groups; the plan file's content kept whole, but as `shown_plan` shows it: a
    value may be a secret, and the plan file has them); returns the plan's id. The file's path is kept whole: a
    relative one, relative to a folder the store does not know, could not be told from another file later (and
    `report --out` refuses to write over the plan of a run by it)."""
    row = PlanRow(
        algo=plan.algo,
        body=plan_to_dict(shown_plan(plan)),
        path=os.path.abspath(path) if path else None,
        predicted_aggregate_gain=plan.predicted_aggregate_gain,
    )
    session.add(row)
    session.flush()
    for index, group in enumerate(plan.groups):
        session.add(
            PlanGroup(
                plan_id=row.id,
                index=index,
                jobs=[job.name for job in group.jobs],
                devices=list(group.devices),
                wave=group.wave,
                predicted_period_ms=group.predicted_period_ms,
                predicted_gain=group.predicted_gain,
            )
        )
    return row.id
