"""The JSON plan file that ``xover plan`` writes and ``xover run`` reads.

Format ``xover-plan/1`` (keys are fixed; scripts rely on them)::

    {"format": "xover-plan/1",
     "algo": "matching",                      # grouping algorithm that made the plan
     "policy": "work-conserving",             # turn policy the predictions assume (and the run uses)
     "hosts": [["localhost", 2]],             # [host name, device slots]
     "groups": [{"jobs": ["resnet", "vgg"],   # names, keys of "jobs"
                 "devices": ["localhost:0", "localhost:1"],  # "host:index", one per device a job needs
                 "wave": 0,                   # waves run one after another, groups of a wave at once
                 "predicted_period_ms": 250.0,
                 "predicted_gain": 1.41,
                 "predicted_duration_ms": 25000.0,
                 "predicted_slowdown": {"resnet": 1.2, "vgg": 1.5},
                 "predicted_speed": {"resnet": 0.83, "vgg": 0.67},      # relative to alone
                 "predicted_iteration_ms": {"resnet": 205.0, "vgg": 300.0},
                 "predicted_start_ms": 0.0,           # after the groups it waits for
                 "fluid_bound": 1.6,                  # the most any policy could get
                 "sharing": "concurrent",             # how it runs (a way of sharing, xover/sharing.py):
                                                      # crossover under "policy", concurrent, mps,
                                                      # adaptive; alone for one job
                 "predicted_by_sharing": {"concurrent": 1.41},  # the gain of each way it considered
                 "predicted_from": {"concurrent": "measured"},  # measured: on these jobs, link and
                                                      # hardware before (plan/measured.py); else simulated
                 "measured_runs": {"concurrent": 3},  # how many comparisons a measured figure is the mean of
                 "sharing_reason": "..."}],           # why the plan picked it, in words
     "jobs": {"resnet": {"devices": 2, "compute_ms": 130.0, "comm_ms": 40.0,
                         "memory_gb": 0.2, "data_ms": 1.0, "iterations": 100,
                         "comm_cpu": 0.0, "checkpoint_ms": 1.0, "interference": 0.0,
                         "startup_ms": 0.0, "link_ms": 60.0, "max_slowdown": 2.0,
                         "interference_link_share": 0.62,  # the partner's l/T it was measured next to
                         "corun_stretch": 1.8, "mps_stretch": 1.5,  # GPU: compute next to a computing partner
                         "recipe": "recipes/resnet.toml",      # "recipe" only when made from recipes,
                         "planned_as": "9c1e..."},  # and what it computed then (Recipe.planned_as)
              "train": {...,                   # a job of the user's own script (a job file, or --script):
                        "recipe": "jobs/train.toml",
                        "script": {"path": "/home/me/train.py", "args": ["--lr", "0.1"],
                                   "engine": "torch", "sha256": "3f2a...",   # its content when profiled
                                   "iterations": 500,  # stop after 500 optimizer steps (null: its own end)
                                   "env": {"OMP_NUM_THREADS": "4"},
                                   "pass_env": ["HF_TOKEN"]}}},  # names only (absent when none)
     "unplaced": [{"name": "huge", "reason": "needs 8 devices, 2 exist"}],
     "predicted_aggregate_gain": 1.3,
     "predicted_makespan_ms": 50000.0,
     "sequential_makespan_ms": 70000.0,
     "link": "1gbit",                         # made from recipes: the link and engine of their
     "engine": "horovod",                     # profiles, which `xover run PLAN` runs under by default,
     "device_kind": "gpu"}                    # and the devices they were taken on (Slurm asks for these)

``jobs`` holds exactly the placed jobs; every one is in exactly one group. In a
job, ``data_ms`` (default 0), ``iterations`` (default 100), ``comm_cpu`` (0), ``checkpoint_ms`` (1),
``interference`` (0), ``startup_ms`` (0), ``link_ms`` (comm_ms), ``max_slowdown`` (none) and
``interference_link_share`` (none: the interference is the same next to any partner),
``corun_stretch`` and ``mps_stretch`` (none: processor sharing) and ``planned_as`` (not checked) may be
left out; a job's name is letters, digits, '.', '_', '-' or '#'. In a group, ``predicted_speed``,
``predicted_iteration_ms``, ``predicted_start_ms``, ``fluid_bound``, ``sharing`` (crossover; "alone" for one job),
``predicted_by_sharing``, ``predicted_from`` (every figure simulated), ``measured_runs`` (each measured
figure one comparison's) and ``sharing_reason`` may be left out (plans from before they existed); ``policy`` defaults to
work-conserving; ``link``, ``engine`` and ``device_kind``
(gpu or cpu) are absent from plans made from a trace.
Unknown keys are ignored, so later versions can add fields, and listed in ``Plan.unknown_keys`` (with the known key
each is closest to) for ``xover run`` to warn of: a misspelt ``sharing`` would otherwise run the group's default way
unseen. A key given twice in one object is refused
(``errors.json_without_duplicate_keys``: JSON readers keep the last silently). ``plan_from_dict``
checks everything ``xover run`` relies on (a group's device count matches its
jobs, devices exist on the listed hosts, no device is used twice in one wave) and what it would resolve
its own way where the file says two things (a job in two groups, or in a group and ``unplaced``; a group
listed before another on one of its devices with a later wave: ``xover run`` starts groups that share a
device in the order they are listed; a way ``predicted_from`` marks measured that ``predicted_by_sharing``
has no gain for; ``sharing`` "alone" for a group of several jobs), and raises
``PlanFormatError`` naming the offending field. What a user may edit is taken: a group's ``sharing`` (any way,
predicted or not; a group of one job runs alone whatever it says), waves with gaps, a figure marked simulated.
``xover run`` refuses a plan of ``device_kind`` gpu whose jobs run on this machine where it has no GPU
(``run/targets.py``; ``XOVER_CPU_ONLY=1`` runs it on CPU cores anyway), and warns of one of ``device_kind`` cpu
whose jobs will run on this machine's GPUs.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any, NoReturn

from ..engines import ENGINES  # the one registry of engines (it loads no torch)
from ..errors import LongInteger, XoverError, printable, quoted
from ..hosts import MAX_SLOTS
from ..links import HOST_KEY
from ..rates import RateError, canonical_rate
from ..recipes import MAX_ITERATIONS, did_you_mean, variable_name, without_nul
from ..sharing import ALONE, DEFAULT_WAY, MAX_GROUP, sharing_ways
from ..turns.policies import DEFAULT_POLICY, POLICIES
from .make import GroupPlan, Plan, PlannedScript
from .model import InvalidJobProfile, JobProfile, job_name_problem
from .predict import MEASURED, SIMULATED

SHARINGS = tuple(way.name for way in sharing_ways())  # crossover, concurrent, mps, adaptive
_HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*", re.ASCII)  # as -H takes them (hosts.py)

PLAN_FORMAT = "xover-plan/1"
MAX_WHOLE = 2**31 - 1  # of a count in a plan file (waves, runs); a job's iterations: MAX_ITERATIONS, as `run` takes


class PlanFormatError(XoverError):
    """A plan file that is not a valid xover-plan/1 document."""


# the keys each object of the format has (plan_to_dict writes these; the reader takes them)
TOP_KEYS = frozenset(
    ("format", "algo", "policy", "hosts", "groups", "jobs", "unplaced", "predicted_aggregate_gain")
    + ("predicted_makespan_ms", "sequential_makespan_ms", "link", "engine", "device_kind")
)
GROUP_KEYS = frozenset(
    ("jobs", "devices", "wave", "predicted_period_ms", "predicted_gain", "predicted_duration_ms")
    + ("predicted_slowdown", "predicted_speed", "predicted_iteration_ms", "predicted_start_ms", "fluid_bound")
    + ("sharing", "predicted_by_sharing", "predicted_from", "measured_runs", "sharing_reason")
)
JOB_KEYS = frozenset(
    ("devices", "compute_ms", "comm_ms", "memory_gb", "data_ms", "iterations", "comm_cpu", "checkpoint_ms")
    + ("interference", "startup_ms", "link_ms", "max_slowdown", "interference_link_share", "corun_stretch")
    + ("mps_stretch", "recipe", "script", "planned_as")
)
SCRIPT_KEYS = frozenset(("path", "args", "engine", "sha256", "iterations", "env", "pass_env"))
UNPLACED_KEYS = frozenset(("name", "reason"))


def plan_to_dict(plan: Plan, recipes: dict[str, str] | None = None) -> dict[str, Any]:
    """The JSON-ready form of ``plan``; ``recipes`` (job name -> path) defaults to ``plan.recipes``."""
    recipes = plan.recipes if recipes is None else recipes
    facts = {
        key: value
        for key, value in (("link", plan.link), ("engine", plan.engine), ("device_kind", plan.device_kind))
        if value is not None
    }
    return {
        "format": PLAN_FORMAT,
        "algo": plan.algo,
        "policy": plan.policy,
        "hosts": [[name, slots] for name, slots in plan.hosts],
        "groups": [_group_to_dict(group) for group in plan.groups],
        "jobs": {
            job.name: _job_to_dict(
                job, recipes.get(job.name), plan.scripts.get(job.name), plan.planned_as.get(job.name)
            )
            for job in plan.jobs
        },
        "unplaced": [{"name": name, "reason": reason} for name, reason in plan.unplaced],
        "predicted_aggregate_gain": plan.predicted_aggregate_gain,
        "predicted_makespan_ms": plan.predicted_makespan_ms,
        "sequential_makespan_ms": plan.sequential_makespan_ms,
        **facts,
    }


def _group_to_dict(group: GroupPlan) -> dict[str, Any]:
    return {
        "jobs": [job.name for job in group.jobs],
        "devices": list(group.devices),
        "wave": group.wave,
        "predicted_period_ms": group.predicted_period_ms,
        "predicted_gain": group.predicted_gain,
        "predicted_duration_ms": group.predicted_duration_ms,
        "predicted_slowdown": dict(group.predicted_slowdown),
        "predicted_speed": dict(group.predicted_speed),
        "predicted_iteration_ms": dict(group.predicted_iteration_ms),
        "predicted_start_ms": group.predicted_start_ms,
        "fluid_bound": group.fluid_bound,
        "sharing": group.sharing,
        "predicted_by_sharing": dict(group.predicted_by_sharing),
        "predicted_from": dict(group.predicted_from),
        "measured_runs": dict(group.measured_runs),
        "sharing_reason": group.sharing_reason,
    }


def _job_to_dict(
    job: JobProfile, recipe: str | None, script: PlannedScript | None, planned_as: str | None
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "devices": job.devices,
        "compute_ms": job.compute_ms,
        "comm_ms": job.comm_ms,
        "memory_gb": job.memory_gb,
        "data_ms": job.data_ms,
        "iterations": job.iterations,
        "comm_cpu": job.comm_cpu,
        "checkpoint_ms": job.checkpoint_ms,
        "interference": job.interference,
        "startup_ms": job.startup_ms,
    }
    for optional in ("link_ms", "max_slowdown", "interference_link_share", "corun_stretch", "mps_stretch"):
        if getattr(job, optional) is not None:
            entry[optional] = getattr(job, optional)
    if recipe is not None:
        entry["recipe"] = recipe
    if planned_as is not None:
        entry["planned_as"] = planned_as
    if script is not None:
        entry["script"] = {
            "path": script.path,
            "args": list(script.args),
            "engine": script.engine,
            "sha256": script.sha256,
            "iterations": script.iterations,
            "env": dict(script.env),
        }
        if script.pass_env:  # names only: their values come from xover's environment where the plan runs
            entry["script"]["pass_env"] = list(script.pass_env)
    return entry


def plan_from_dict(document: Any) -> Plan:
    """Read and check a plan document (as loaded from JSON)."""
    top = _mapping(document, "plan")
    if _field(top, "format", "") != PLAN_FORMAT:
        raise PlanFormatError(f"plan field 'format': expected {PLAN_FORMAT!r}, got {_shown(top['format'])}")
    hosts = _hosts(_field(top, "hosts", ""))
    jobs, recipes, scripts, planned_as = _jobs(_field(top, "jobs", ""))
    groups = _groups(_field(top, "groups", ""), jobs, dict(hosts))
    if "engine" in top and top["engine"] not in ENGINES:
        _fail("engine", f"unknown engine {_shown(top['engine'])}; choose {', '.join(ENGINES)}")
    if "device_kind" in top and top["device_kind"] not in ("gpu", "cpu"):
        _fail("device_kind", f"{_shown(top['device_kind'])}: choose gpu or cpu")
    link = _text(top["link"], "link") if top.get("link") is not None else None
    if link is not None and link != HOST_KEY:
        try:
            canonical_rate(link, "")
        except RateError as error:  # "'fast': expected a rate with a unit, such as 1gbit, ..."
            _fail("link", f"{str(error).strip()}; or {HOST_KEY!r}, the network as it is")
    return Plan(
        algo=_text(_field(top, "algo", ""), "algo"),
        hosts=hosts,
        groups=groups,
        unplaced=_unplaced(_field(top, "unplaced", ""), jobs),
        predicted_aggregate_gain=_amount(_field(top, "predicted_aggregate_gain", ""), "predicted_aggregate_gain"),
        predicted_makespan_ms=_amount(_field(top, "predicted_makespan_ms", ""), "predicted_makespan_ms"),
        sequential_makespan_ms=_amount(_field(top, "sequential_makespan_ms", ""), "sequential_makespan_ms"),
        recipes=recipes,
        planned_as=planned_as,
        policy=_policy(top.get("policy", DEFAULT_POLICY)),
        scripts=scripts,
        link=link,
        engine=top.get("engine"),
        device_kind=top.get("device_kind"),
        unknown_keys=unknown_keys(top),
    )


def unknown_keys(top: dict[str, Any]) -> tuple[str, ...]:
    """The keys of a checked plan document that this version does not read, each with its place and the known
    key it is closest to (a typo's likely meaning)."""
    objects: list[tuple[str, dict[str, Any], frozenset[str]]] = [("", top, TOP_KEYS)]
    objects += [(f"groups[{index}].", group, GROUP_KEYS) for index, group in enumerate(top["groups"])]
    for name, job in top["jobs"].items():
        objects.append((f"jobs.{name}.", job, JOB_KEYS))
        if "script" in job:
            objects.append((f"jobs.{name}.script.", job["script"], SCRIPT_KEYS))
    objects += [(f"unplaced[{index}].", entry, UNPLACED_KEYS) for index, entry in enumerate(top["unplaced"])]
    found = []
    for where, fields, known in objects:
        for key in fields:
            if key not in known:
                shown = key if key.isprintable() else ascii(key)  # no terminal control reaches the warning
                shown = shown if len(shown) <= 40 else shown[:40] + "..."
                found.append(f"{where}{shown}{did_you_mean(key, sorted(known))}")
    return tuple(found)


def _policy(value: Any) -> str:
    name = _text(value, "policy")
    if name not in POLICIES:
        _fail("policy", f"unknown turn policy {name!r}; choose {', '.join(POLICIES)}")
    return name


def _hosts(value: Any) -> list[tuple[str, int]]:
    hosts: list[tuple[str, int]] = []
    for index, entry in enumerate(_list(value, "hosts")):
        where = f"hosts[{index}]"
        if not isinstance(entry, list) or len(entry) != 2:
            _fail(where, f"must be [host name, device slots], got {_shown(entry)}")
        name = _text(entry[0], where)
        if not _HOST_NAME.fullmatch(name) or name in dict(hosts):
            _fail(where, f"host name must be unique, of letters, digits, '.', '-', '_', got {name!r}")
        hosts.append((name, _whole(entry[1], where, minimum=1, maximum=MAX_SLOTS)))
    if not hosts:
        _fail("hosts", "must list at least one host")
    return hosts


def _jobs(value: Any) -> tuple[dict[str, JobProfile], dict[str, str], dict[str, PlannedScript], dict[str, str]]:
    jobs: dict[str, JobProfile] = {}
    recipes: dict[str, str] = {}
    planned_as: dict[str, str] = {}
    scripts: dict[str, PlannedScript] = {}
    for name, entry in _mapping(value, "jobs").items():
        where = f"jobs.{name}"
        fields = _mapping(entry, where)
        job = _job(name, fields, where)
        jobs[name] = job
        if "recipe" in fields:
            recipes[name] = _text(fields["recipe"], f"{where}.recipe")
        if "script" in fields:
            scripts[name] = _script(fields["script"], f"{where}.script")
            stops_after = scripts[name].iterations
            if stops_after is not None and "iterations" in fields and job.iterations != stops_after:
                # one edited without the other: the run stops the script after script.iterations, whatever
                # the prediction was made for
                _fail(
                    f"{where}.iterations",
                    f"{job.iterations}, but {where}.script.iterations (where the script is stopped) is "
                    f"{stops_after}: give both the same number",
                )
        if "planned_as" in fields:
            planned_as[name] = _text(fields["planned_as"], f"{where}.planned_as")
    return jobs, recipes, scripts, planned_as


def _script(value: Any, where: str) -> PlannedScript:
    """A script job's entry: what `xover run` needs to run the user's script as it was profiled."""
    fields = _mapping(value, where)
    path = _text(_field(fields, "path", where), f"{where}.path")
    args = [
        _passed(arg, f"{where}.args[{index}]")
        for index, arg in enumerate(_list(fields.get("args", []), f"{where}.args"))
    ]
    engine = _field(fields, "engine", where)
    if engine not in ENGINES:
        _fail(f"{where}.engine", f"unknown engine {_shown(fields['engine'])}; choose {', '.join(ENGINES)}")
    return PlannedScript(
        path=path,
        args=args,
        engine=engine,
        sha256=_text(_field(fields, "sha256", where), f"{where}.sha256"),
        iterations=(
            _whole(fields["iterations"], f"{where}.iterations", minimum=1, maximum=MAX_ITERATIONS)
            if fields.get("iterations") is not None
            else None
        ),
        # as a job file's are checked (recipes.py): the values reach the script's environment
        env={
            _checked(variable_name, key, f"{where}.env.{key}"): _passed(item, f"{where}.env.{key}")
            for key, item in _mapping(fields.get("env", {}), f"{where}.env").items()
        },
        pass_env=[
            _checked(variable_name, _text(name, f"{where}.pass_env[{index}]"), f"{where}.pass_env[{index}]")
            for index, name in enumerate(_list(fields.get("pass_env", []), f"{where}.pass_env"))
        ],
    )


def _job(name: str, fields: dict[str, Any], where: str) -> JobProfile:
    if (problem := job_name_problem(name)) is not None:
        _fail(where, problem)
    try:
        return JobProfile(
            name=name,
            devices=_whole(_field(fields, "devices", where), f"{where}.devices", minimum=1),
            compute_ms=_amount(_field(fields, "compute_ms", where), f"{where}.compute_ms"),
            comm_ms=_amount(_field(fields, "comm_ms", where), f"{where}.comm_ms"),
            memory_gb=_amount(_field(fields, "memory_gb", where), f"{where}.memory_gb"),
            data_ms=_amount(fields.get("data_ms", 0.0), f"{where}.data_ms"),
            iterations=_whole(fields.get("iterations", 100), f"{where}.iterations", minimum=1, maximum=MAX_ITERATIONS),
            link_ms=_amount(fields["link_ms"], f"{where}.link_ms") if "link_ms" in fields else None,
            comm_cpu=_number(fields.get("comm_cpu", 0.0), f"{where}.comm_cpu"),
            checkpoint_ms=_amount(fields.get("checkpoint_ms", 1.0), f"{where}.checkpoint_ms"),
            max_slowdown=_number(fields["max_slowdown"], f"{where}.max_slowdown") if "max_slowdown" in fields else None,
            interference=_number(fields.get("interference", 0.0), f"{where}.interference"),
            interference_link_share=(
                _number(fields["interference_link_share"], f"{where}.interference_link_share")
                if "interference_link_share" in fields
                else None
            ),
            startup_ms=_amount(fields.get("startup_ms", 0.0), f"{where}.startup_ms"),
            corun_stretch=_optional_number(fields, "corun_stretch", where),
            mps_stretch=_optional_number(fields, "mps_stretch", where),
        )
    except InvalidJobProfile as error:
        _fail(where, error.problem)


def _groups(value: Any, jobs: dict[str, JobProfile], host_slots: dict[str, int]) -> list[GroupPlan]:
    groups: list[GroupPlan] = []
    grouped: set[str] = set()
    used: dict[tuple[int, str], int] = {}  # (wave, device) -> group index using it
    latest: dict[str, tuple[int, int]] = {}  # device -> (wave, index) of the last group listed on it
    for index, entry in enumerate(_list(value, "groups")):
        where = f"groups[{index}]"
        group = _group(_mapping(entry, where), where, jobs, host_slots)
        for job in group.jobs:
            if job.name in grouped:
                _fail(f"{where}.jobs", f"job {job.name!r} is already in an earlier group")
            grouped.add(job.name)
        for device in group.devices:
            other = used.setdefault((group.wave, device), index)
            if other != index:
                _fail(f"{where}.devices", f"{device} is already used by groups[{other}] in wave {group.wave}")
        for device in group.devices:
            # `xover run` starts groups that share a device in the order they are listed (run/schedule.py): a
            # later wave listed first would run first there, not after as its wave says
            wave, other = latest.get(device, (group.wave, index))
            if wave > group.wave:
                _fail(
                    f"{where}.wave",
                    f"wave {group.wave} comes before wave {wave} of groups[{other}], which is listed earlier and "
                    f"uses {device} too: `xover run` starts groups that share a device in the order they are "
                    f"listed, so groups[{other}] would run first; list the groups in the order of their waves",
                )
            latest[device] = (group.wave, index)
        groups.append(group)
    for name in jobs:
        if name not in grouped:
            _fail(f"jobs.{name}", "is in no group")
    return groups


def _group(fields: dict[str, Any], where: str, jobs: dict[str, JobProfile], host_slots: dict[str, int]) -> GroupPlan:
    names = [_text(name, f"{where}.jobs") for name in _list(_field(fields, "jobs", where), f"{where}.jobs")]
    if not names:
        _fail(f"{where}.jobs", "must name at least one job")
    if len(set(names)) != len(names):
        _fail(f"{where}.jobs", f"names a job twice: {names!r}")
    if len(names) > MAX_GROUP:  # its turn server would refuse the job past them, once the run had started
        _fail(
            f"{where}.jobs",
            f"names {len(names)} jobs; a group holds at most {MAX_GROUP}, as many as its turn server serves",
        )
    for name in names:
        if name not in jobs:
            _fail(f"{where}.jobs", f"job {name!r} is not in 'jobs'")
    members = [jobs[name] for name in names]
    needed = {job.devices for job in members}
    if len(needed) != 1:
        _fail(f"{where}.jobs", f"jobs of one group must need the same number of devices, got {sorted(needed)}")
    devices = _devices(_field(fields, "devices", where), f"{where}.devices", host_slots)
    if len(devices) != members[0].devices:
        _fail(f"{where}.devices", f"lists {len(devices)} devices but its jobs need {members[0].devices}")
    slowdown = _mapping(_field(fields, "predicted_slowdown", where), f"{where}.predicted_slowdown")
    if set(slowdown) != set(names):
        _fail(f"{where}.predicted_slowdown", f"must have one entry per job of the group, got {sorted(slowdown)}")
    gains = _by_sharing(fields.get("predicted_by_sharing", {}), f"{where}.predicted_by_sharing")
    sources = _sources(fields.get("predicted_from", {}), f"{where}.predicted_from")
    return GroupPlan(
        jobs=members,
        devices=devices,
        wave=_whole(_field(fields, "wave", where), f"{where}.wave", minimum=0),
        predicted_period_ms=_amount(_field(fields, "predicted_period_ms", where), f"{where}.predicted_period_ms"),
        predicted_gain=_amount(_field(fields, "predicted_gain", where), f"{where}.predicted_gain"),
        predicted_slowdown={name: _amount(slowdown[name], f"{where}.predicted_slowdown.{name}") for name in names},
        predicted_duration_ms=_amount(_field(fields, "predicted_duration_ms", where), f"{where}.predicted_duration_ms"),
        predicted_speed=_numbers(fields.get("predicted_speed", {}), f"{where}.predicted_speed"),
        predicted_iteration_ms=_numbers(fields.get("predicted_iteration_ms", {}), f"{where}.predicted_iteration_ms"),
        fluid_bound=_amount(fields["fluid_bound"], f"{where}.fluid_bound")
        if fields.get("fluid_bound") is not None
        else None,
        predicted_start_ms=_amount(fields.get("predicted_start_ms", 0.0), f"{where}.predicted_start_ms"),
        sharing=_sharing(fields.get("sharing"), f"{where}.sharing", len(members)),
        predicted_by_sharing=gains,
        predicted_from=_measured_figures(sources, gains, f"{where}.predicted_from"),
        measured_runs=_runs(fields.get("measured_runs", {}), f"{where}.measured_runs"),
        sharing_reason=_text(fields.get("sharing_reason", ""), f"{where}.sharing_reason"),
    )


def _sharing(value: Any, where: str, jobs: int) -> str:
    """A group's way of sharing; plans from before it existed ran every group in crossover."""
    if value is None:
        return ALONE.name if jobs == 1 else DEFAULT_WAY.name
    sharing = _text(value, where)
    if jobs == 1 and sharing in (*SHARINGS, ALONE.name):
        return ALONE.name  # a group of one job shares nothing, whatever an edited plan says
    if sharing == ALONE.name:
        _fail(where, f"{sharing!r} is for a group of one job, and this one has {jobs}: choose {', '.join(SHARINGS)}")
    if sharing not in SHARINGS:
        _fail(where, f"unknown way of sharing {sharing!r}; choose {', '.join(SHARINGS)}")
    return sharing


def _by_sharing(value: Any, where: str) -> dict[str, float]:
    gains = _numbers(value, where)
    for sharing in gains:
        if sharing not in SHARINGS:
            _fail(where, f"unknown way of sharing {sharing!r}; choose {', '.join(SHARINGS)}")
    return gains


def _measured_figures(sources: dict[str, str], gains: dict[str, float], where: str) -> dict[str, str]:
    """A group's predicted_from, refused where it marks measured a way that predicted_by_sharing has no gain for:
    `xover plan` writes both of the same ways, and an adaptive group starts from the gains of the ways marked
    measured, looked up there (run/units.py; a KeyError's traceback). A way marked simulated is only a label."""
    for way, source in sources.items():
        if source == MEASURED and way not in gains:
            _fail(
                where,
                f"marks {way!r} {MEASURED}, but predicted_by_sharing has no gain for {way!r}: add the measured gain "
                f"there, or remove {way!r} here",
            )
    return sources


def _sources(value: Any, where: str) -> dict[str, str]:
    """Each way's source: measured or simulated."""
    sources = {way: _text(source, f"{where}.{way}") for way, source in _mapping(value, where).items()}
    for way, source in sources.items():
        if way not in SHARINGS:
            _fail(where, f"unknown way of sharing {way!r}; choose {', '.join(SHARINGS)}")
        if source not in (MEASURED, SIMULATED):
            _fail(f"{where}.{way}", f"expected {MEASURED} or {SIMULATED}, got {source!r}")
    return sources


def _runs(value: Any, where: str) -> dict[str, int]:
    """For each measured way, how many comparisons its figure is the mean of (a whole number from 1)."""
    runs = {way: _whole(count, f"{where}.{way}", 1) for way, count in _mapping(value, where).items()}
    for way in runs:
        if way not in SHARINGS:
            _fail(where, f"unknown way of sharing {way!r}; choose {', '.join(SHARINGS)}")
    return runs


def _optional_number(fields: dict[str, Any], key: str, where: str) -> float | None:
    return _number(fields[key], f"{where}.{key}") if fields.get(key) is not None else None


def _numbers(value: Any, where: str) -> dict[str, float]:
    return {name: _number(number, f"{where}.{name}") for name, number in _mapping(value, where).items()}


def _devices(value: Any, where: str, host_slots: dict[str, int]) -> list[str]:
    devices = [_text(device, where) for device in _list(value, where)]
    for device in devices:
        host, _, index = device.rpartition(":")
        # an index is below its host's slots, at most MAX_SLOTS, written as xover writes it: more digits are no
        # device (and past 4,300 int() refused them with a traceback); 'h:01' would be another device than 'h:1'
        if (
            host not in host_slots
            or not re.fullmatch(f"0|[1-9][0-9]{{0,{len(str(MAX_SLOTS)) - 1}}}", index)
            or int(index) >= host_slots[host]
        ):
            shown = device if len(device) <= 40 else device[:40] + "..."
            _fail(where, f"{shown!r} is not a device of the listed hosts (expected 'host:index')")
    twice = next((device for position, device in enumerate(devices) if device in devices[:position]), None)
    if twice is not None:
        _fail(where, f"lists the device {twice!r} twice")
    return devices


def _unplaced(value: Any, placed: dict[str, JobProfile]) -> list[tuple[str, str]]:
    unplaced: list[tuple[str, str]] = []
    for index, entry in enumerate(_list(value, "unplaced")):
        where = f"unplaced[{index}]"
        fields = _mapping(entry, where)
        name = _text(_field(fields, "name", where), f"{where}.name")
        reason = _text(_field(fields, "reason", where), f"{where}.reason")
        if name in placed:  # `xover run` would run it, as its group says, while the plan says it is not run
            _fail(
                f"{where}.name",
                f"job {name!r} is unplaced here but placed in 'jobs' and a group: remove it from one of them",
            )
        if any(name == other for other, _ in unplaced):  # one job, two reasons: the report would count it twice
            _fail(f"{where}.name", f"job {name!r} is already listed in 'unplaced': list it once")
        unplaced.append((name, reason))
    return unplaced


def _shown(value: Any) -> str:
    """A value of the plan as its JSON reads (true, null, {"a": 1}), not as Python writes it (True, None): text
    quoted as every message quotes it, anything else cut to its first 40 characters."""
    if isinstance(value, str):
        return quoted(value)
    if isinstance(value, LongInteger):  # what the reader keeps of an integer Python would not make
        return repr(value)
    text = json.dumps(value, ensure_ascii=False, default=repr)
    return text if len(text) <= 40 else f"{text[:40]}... ({len(text)} characters)"


def _kind(value: Any) -> str:
    """What JSON calls the kind of `value`: a field of the wrong kind names it so (Python's 'NoneType' was shown)."""
    kinds: tuple[tuple[type | tuple[type, ...], str], ...] = (
        (bool, "true or false"),
        (str, "a string"),
        ((int, float), "a number"),
        (dict, "an object"),
        (list, "a list"),
    )
    return "null" if value is None else next((name for kind, name in kinds if isinstance(value, kind)), "a value")


def _fail(where: str, problem: str) -> NoReturn:
    raise PlanFormatError(f"plan field '{printable(where)}': {problem}")  # a job's name in it may hold a newline


def _field(fields: dict[str, Any], key: str, where: str) -> Any:
    if key not in fields:
        _fail(f"{where}.{key}" if where else key, "is missing")
    return fields[key]


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        _fail(where, f"must be an object, got {_kind(value)}")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        _fail(where, f"must be a list, got {_kind(value)}")
    return value


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        _fail(where, f"must be a string, got {_kind(value)}")  # its kind: a variable's value may be a token
    return value


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        _fail(where, f"must be a finite number, got {_shown(value)}")
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an integer too large for a float
        finite = False
    if not finite:
        _fail(where, f"must be a finite number, got {str(value)[:40]}")
    return value


def _amount(value: Any, where: str) -> float:
    """A time, a size, a gain or a slowdown: finite and not below 0 (a hand-edited -0.005 s makespan was shown as
    the plan's prediction)."""
    number = _number(value, where)
    if number < 0:
        _fail(where, f"must not be negative, got {number:g}")
    return number


def _whole(value: Any, where: str, minimum: int, maximum: int = MAX_WHOLE) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        _fail(where, f"must be a whole number from {minimum} to {maximum}, got {_shown(value)}")
    return value


def _passed(value: Any, where: str) -> str:
    """A text that reaches the script's command line or environment."""
    return _checked(without_nul, _text(value, where), where)


def _checked(check: Callable[[str], str], text: str, where: str) -> str:
    try:
        return check(text)
    except ValueError as problem:
        _fail(where, str(problem))
