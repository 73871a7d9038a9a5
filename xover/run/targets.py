"""What `xover run` was asked to run, as groups: from recipes (--group), scripts (--script), or a plan file
(its groups, their placement, the way of sharing it picked, the link and policy it assumed)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

from ..devices import gpu_count, local_device_count
from ..engines import DEFAULT_ENGINE
from ..errors import XoverError, json_without_duplicate_keys, named_path, printable, refuse_unless_regular
from ..hints import xover_command
from ..hosts import canonical_host, is_local, parse_hosts
from ..links import Link
from ..plan import JobProfile, Plan, PlannedScript, plan_from_dict
from ..recipes import MAX_ITERATIONS, Recipe, load_recipe, script_recipe, unset_variable_problem, with_overrides
from ..redact import mask_word
from ..scripts import ScriptRefused, check_engine, content_hash, detect_scripts_engine, script_problem
from ..settings import CPU_ONLY_VARIABLE, settings
from ..sharing import CROSSOVER
from ..turns.policies import DEFAULT_POLICY, POLICIES
from .jobs import GroupToRun, JobSpec, job_for, unique_names
from .launchers import launcher_named
from .record import says_usage_error
from .traits import traits_of


def plan_link(plan: Plan, groups: list[GroupToRun], launcher: str) -> Link | None:
    """The link of a plan's run where --bandwidth was not given: the one the plan's profiles were taken at,
    when every job runs on this machine (its shaped loopback), so that the run measures what the plan
    predicted; else None (the jobs' own). Jobs on other hosts use their network as it is; Slurm jobs too."""
    link = Link.of_key(plan.link, "the plan's link")
    if link.is_host or not launcher_named(launcher).runs_here:
        return None
    if any(not is_local(host) for group in groups for job in group.jobs for host in job.devices):
        return None
    return link


def _runs_here(groups: list[GroupToRun], launcher: str) -> bool:
    """Whether some of the groups' jobs run on this machine (their devices are the ones it sees)."""
    return launcher_named(launcher).runs_here and any(
        is_local(host) for group in groups for job in group.jobs for host in job.devices
    )


def plan_for_cpus_on_gpus(plan: Plan, groups: list[GroupToRun], launcher: str) -> bool:
    """A plan made on CPU cores (`device_kind` cpu) whose jobs run on this machine, which shows a GPU: they will
    compute on its GPUs, far from the plan's predictions (made from CPU profiles); run as asked, and said (True).
    XOVER_CPU_ONLY=1 keeps the jobs on CPU cores, as the plan was made."""
    return plan.device_kind == "cpu" and not settings().cpu_only and _runs_here(groups, launcher) and gpu_count() > 0


def plan_for_gpus_on_cpus(plan: Plan, groups: list[GroupToRun], launcher: str, plan_path: str) -> bool:
    """A plan made for GPUs (`device_kind` gpu: its jobs' profiles were taken on GPUs) whose jobs run on this
    machine, refused where this machine shows no GPU: its jobs would compute on CPU cores without a word, far from
    what the plan predicted. With XOVER_CPU_ONLY=1 it runs on CPU cores as asked: True (the run says so). A plan
    without a device kind (from a trace, or an older xover), or whose jobs run elsewhere (other hosts, Slurm's
    nodes), runs on what is there."""
    if plan.device_kind != "gpu" or not _runs_here(groups, launcher):
        return False
    if settings().cpu_only:
        return True
    if gpu_count() > 0:
        return False
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
    shown = f" (CUDA_VISIBLE_DEVICES={hidden!r})" if hidden is not None else ""
    raise XoverError(
        f"{plan_path}: the plan was made for GPUs (plan field 'device_kind' is 'gpu': its jobs were profiled on "
        f"GPUs), and this machine has no NVIDIA GPU visible{shown}: profile the jobs and plan them again on this "
        f"machine (`xover profile`, then `xover plan`), or run this plan on CPU cores anyway with "
        f"{CPU_ONLY_VARIABLE}=1 (its predictions are for GPUs)"
    )


def groups_from_recipes(
    recipe_paths: list[str],
    iterations: int | None,
    engine: str = DEFAULT_ENGINE,
    np: int | None = None,
    hosts: str | None = None,
) -> list[GroupToRun]:
    """`xover run --group A B`: one ad-hoc group on the first devices of the hosts (this machine)."""
    recipes = [with_overrides(load_recipe(path), iterations=iterations, np=np) for path in recipe_paths]
    return [GroupToRun(0, unique_names([job_for(r, hosts, engine=engine) for r in recipes]))]


def groups_from_plan(
    plan_path: str, iterations: int | None, engine: str | None = None, allow_changed: bool = False
) -> tuple[list[GroupToRun], Plan]:
    """The groups of a plan file written by `xover plan`; every recipe is checked before anything starts.
    `engine` (a built-in model's) None: the plan's own (the engine of its profiles), else horovod; a
    script runs under its own. A script changed since it was profiled is refused, unless `allow_changed`."""
    if engine is not None:
        check_engine(engine)
    if iterations is not None and not 1 <= iterations <= MAX_ITERATIONS:
        raise XoverError(f"--iterations {iterations}: give a whole number from 1 to {MAX_ITERATIONS}")
    plan_file = named_path(plan_path, "the plan file `xover plan --out` wrote")
    plan_file = refuse_unless_regular(plan_file, "a plan file is the JSON `xover plan --out` writes")
    try:
        # a BOM an editor put there read past; a key given twice (an edit above the old value) refused
        body = json_without_duplicate_keys(plan_file.read_text(encoding="utf-8-sig"), plan_path)
    except FileNotFoundError:
        write_it = xover_command("plan", "...", "--out", printable(plan_path))
        raise XoverError(f"{plan_path}: plan file not found (write one with `{write_it}`)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        if plan_file.suffix == ".toml":  # `xover run recipe.toml`: "not valid JSON: Expecting value"
            raise XoverError(
                f"{printable(plan_path)}: a recipe or job file, not a plan: run it with --group "
                f"({xover_command('run', '--group', printable(plan_path))}), or plan it first "
                f"({xover_command('plan', printable(plan_path))} ...)"
            ) from None
        raise XoverError(f"{printable(plan_path)}: not valid JSON: {error}") from None
    except RecursionError:  # thousands of "[": too deep for the parser
        raise XoverError(f"{printable(plan_path)}: not a plan: nested too deeply") from None
    except ValueError as error:  # e.g. an integer of more digits than Python converts (4300)
        raise XoverError(f"{plan_path}: cannot be read: {str(error).split(';')[0]}") from None
    except OSError as error:
        raise XoverError(f"{plan_path}: cannot read the plan: {error.strerror}") from None
    try:
        plan = plan_from_dict(body)  # validates the format, naming the field that is wrong
    except XoverError as error:
        raise XoverError(f"{plan_path}: {error}") from None
    engine = engine or plan.engine or DEFAULT_ENGINE
    spellings = [name for name, _ in plan.hosts]
    if len({canonical_host(name) for name in spellings}) < len(spellings):
        raise XoverError(
            f"{plan_path}: plan field 'hosts': {', '.join(spellings)} name this machine more than "
            "once (localhost, its hostname and addresses are one host)"
        )
    if not plan.groups:
        unplaced = ", ".join(f"{name} ({reason})" for name, reason in plan.unplaced) or "no jobs"
        raise XoverError(f"{plan_path}: the plan has no groups to run; unplaced: {unplaced}")
    groups = []
    for index, group in enumerate(plan.groups):
        placement: dict[str, list[int]] = {}
        for device in group.devices:
            host, _, slot = device.rpartition(":")
            placement.setdefault(canonical_host(host), []).append(int(slot))
        jobs = []
        for planned in group.jobs:
            name = planned.name
            try:  # the plan decides how many devices the job gets, and how long it runs (as predicted)
                if name in plan.scripts:
                    recipe = _planned_script(
                        plan.scripts[name], planned, plan.recipes.get(name, ""), iterations, allow_changed
                    )
                else:
                    recipe = with_overrides(
                        load_recipe(plan.recipes.get(name) or name),
                        iterations=iterations if iterations is not None else planned.iterations,
                        np=planned.devices,
                    )
                    _check_as_planned(name, recipe, plan.planned_as.get(name), allow_changed)
            except XoverError as error:
                raise XoverError(f"{plan_path}: group {index}, job '{name}': {error}") from None
            max_slowdown = planned.max_slowdown if planned.max_slowdown is not None else recipe.max_slowdown
            traits = traits_of(planned.device_ms, planned.comm_ms, max_slowdown, planned.link_ms)
            jobs.append(
                JobSpec(
                    name=name,
                    recipe=recipe,
                    devices={h: list(d) for h, d in placement.items()},
                    engine=recipe.engine_under(engine),
                    traits=traits,
                )
            )
        # the gain a comparison's crossover is set against: the plan's crossover prediction
        crossover_gain = group.predicted_by_sharing.get(CROSSOVER.name, group.predicted_gain)
        groups.append(
            GroupToRun(
                index,
                jobs,
                crossover_gain,
                group.sharing,
                dict(group.predicted_by_sharing),
                dict(group.predicted_from),
                dict(group.measured_runs),
            )
        )
    return groups, plan


def _check_as_planned(name: str, recipe: Recipe, planned_as: str | None, allow_changed: bool) -> None:
    """A recipe edited since it was planned (its model, batch, data, evaluation interval) or another recipe
    file under the job's name: the plan's predictions and placement are of another job. Refused as a changed
    script is, unless `allow_changed`; a plan from before plans recorded it (no `planned_as`) is not checked."""
    if planned_as is None or allow_changed or recipe.planned_as == planned_as:
        return
    raise XoverError(
        f"{recipe.label} is not the recipe this job was planned with (it changed since, or the plan names another "
        f"file: plan field 'jobs.{name}.planned_as' is {planned_as}, the recipe now {recipe.planned_as}): "
        "plan it again, or run it as it is now with --allow-changed"
    )


def _planned_script(
    script: PlannedScript, planned: JobProfile, job_file: str, iterations: int | None, allow_changed: bool
) -> Recipe:
    """A script job of a plan, as it was profiled: its path, arguments, engine and content; a script
    changed since is refused unless `allow_changed` (then its run records the content it was profiled with)."""
    path, profiled = Path(script.path), script.sha256
    if path.is_dir():
        raise XoverError(
            f"the plan's job {planned.name}: its script {path} is a folder, not a script (plan field "
            f"'jobs.{planned.name}.script.path'): name the script file it was profiled as"
        )
    if not path.is_file():
        raise XoverError(f"the script {path} is gone (the plan runs scripts from where they were profiled)")
    now = content_hash(path)
    if now != profiled and not allow_changed:
        raise XoverError(
            f"the script {path} changed since it was profiled, or a module of its own it imports did (content "
            f"{profiled}, now {now}): profile and plan it again, or run it as it is now with --allow-changed"
        )
    for name in script.pass_env:
        if problem := unset_variable_problem(name):
            raise XoverError(f"the plan's job {planned.name} ({job_file or path}): pass_env: {problem}")
    cap = iterations if iterations is not None else script.iterations
    recipe = script_recipe(
        path,
        args=script.args,
        np=planned.devices,
        engine=script.engine,
        name=planned.name,
        iterations=cap,
        max_slowdown=planned.max_slowdown,
        env=script.env,
        pass_env=script.pass_env,
        path=job_file,
        sha256=now,
    )
    if now != profiled:
        recipe = replace(recipe, model_options={"profiled_sha256": profiled})  # recorded: it ran changed
    return recipe


def groups_from_scripts(
    scripts: list[str],
    args: list[str],
    np: int | None,
    iterations: int | None,
    engine: str | None = None,
    hosts: str | None = None,
) -> list[GroupToRun]:
    """`xover run --script a.py --script b.py -- ARGS`: unmodified training scripts as one group, under
    horovodrun (Horovod scripts, engine horovod) or torchrun (DistributedDataParallel scripts, engine torch),
    on this machine or on the hosts of `hosts` (every slot, unless --np says fewer; the script must be at the
    same path on every host, as with horovodrun and torchrun themselves). `engine` None: found from what
    the scripts import (`scripts.detect_scripts_engine`). `iterations`: stop each after that many
    optimizer steps."""
    recipes = scripts_as_recipes(scripts, args, np, engine, hosts)
    if iterations is not None:
        recipes = [with_overrides(recipe, iterations=iterations) for recipe in recipes]
    return [GroupToRun(0, unique_names([job_for(recipe, hosts) for recipe in recipes]))]


def scripts_as_recipes(
    scripts: list[str], args: list[str], np: int | None, engine: str | None = None, hosts: str | None = None
) -> list[Recipe]:
    """The jobs of `--script FILE ... -- ARGS` (the command-line shortcut for job files): every slot of
    -H, or every local device, unless --np says fewer."""
    if engine is None:
        engine, _ = detect_scripts_engine(scripts)
    check_engine(engine)
    if np is not None and np < 1:
        raise XoverError(f"--np {np}: give the ranks per script, a whole number >= 1")
    if np is None:
        np = sum(slots for _, slots in parse_hosts(hosts)) if hosts else local_device_count()[1]
    recipes = []
    for script in scripts:
        if (problem := script_problem(script)) is not None:
            raise XoverError(f"--script {mask_word(printable(script))}: {problem}")  # a URL pasted as one
        try:
            recipes.append(script_recipe(script, args=args, np=np, engine=engine, path=script))
        except ScriptRefused as error:  # named as given, not resolved
            raise ScriptRefused(str(error).replace(str(Path(script).resolve()), script)) from None
    return recipes


def shared_arguments_hint(scripts: list[str], args: list[str], failures: list[str | None]) -> str | None:
    """What to do where scripts that take different arguments were given one `-- ARGS` and one of them
    refused its arguments (a usage error); None otherwise."""
    if len(set(scripts)) < 2 or not args or not any(says_usage_error(failure) for failure in failures):
        return None
    return (
        "hint: every --script is given the same arguments, those after `--`; scripts that take different ones "
        "need a job file each, with its own `args` (docs/reference.md: Job files)"
    )


@dataclass
class RunTargets:
    """What `xover run` was asked to run: its groups, the engine of the built-in models among them, and
    the plan they came from (its link and policy fill in what the command line left out)."""

    groups: list[GroupToRun]
    engine: str
    policies: list[str]
    plan: Plan | None = None
    plan_path: str | None = None
    link: Link | None = None  # --bandwidth as given, or the link the plan's profiles were taken on
    link_from_plan: bool = False
    gpu_plan_on_cpus: bool = False  # a plan made for GPUs, run on CPU cores as XOVER_CPU_ONLY=1 asks
    cpu_plan_on_gpus: bool = False  # a plan made on CPU cores, run on this machine's GPUs


def run_targets(
    targets: list[str],
    *,
    group: bool,
    scripts: list[str],
    script_args: list[str],
    np: int | None,
    hosts: str | None,
    iterations: int | None,
    engine: str | None,
    allow_changed: bool,
    link: Link | None,
    launcher: str,
    policy: str | None,
) -> RunTargets:
    """The groups of `xover run`: recipes (--group), scripts (--script; both in one group), or a plan
    file; and the turn policies (all, one, or the plan's own). `targets` are the recipes or the plan,
    `hosts` the -H hosts (or a Slurm allocation's) of an ad-hoc group."""
    if hosts and not (group or scripts):
        raise XoverError("-H applies to --group and --script (a plan places its groups on its own hosts)")
    if scripts and engine is None:
        engine = detect_scripts_engine(scripts)[0]
    plan: Plan | None = None
    plan_path = None
    link_from_plan = gpu_plan_on_cpus = cpu_plan_on_gpus = False
    if group or scripts:
        engine = engine or DEFAULT_ENGINE
        if group and not targets:
            raise XoverError("--group needs at least one recipe")
        jobs = groups_from_recipes(targets, iterations, engine, np, hosts)[0].jobs if group else []
        if scripts:
            jobs += groups_from_scripts(scripts, script_args, np, iterations, engine, hosts)[0].jobs
        groups = [GroupToRun(0, unique_names(jobs) if group and scripts else jobs)]
    else:
        if len(targets) != 1:
            raise XoverError("give one plan file, or use --group RECIPE RECIPE ... for an ad-hoc group")
        if np is not None:
            raise XoverError(
                "--np: a plan decides how many devices each job gets; plan again with other "
                "devices, or run the recipes with --group"
            )
        plan_path = targets[0]
        groups, plan = groups_from_plan(plan_path, iterations, engine, allow_changed)
        gpu_plan_on_cpus = plan_for_gpus_on_cpus(plan, groups, launcher, plan_path)
        cpu_plan_on_gpus = plan_for_cpus_on_gpus(plan, groups, launcher)
        engine = engine or plan.engine or DEFAULT_ENGINE  # the built-in models' (a script runs under its own)
        if link is None and (link := plan_link(plan, groups, launcher)) is not None:
            link_from_plan = True
        if policy is None:
            policy = plan.policy  # what its predictions assume, so that the report compares like with like
    policy = policy or DEFAULT_POLICY
    if policy != "all" and policy not in POLICIES:
        raise XoverError(f"--policy {printable(policy)}: choose {', '.join(POLICIES)} or all")
    policies = [DEFAULT_POLICY] + [p for p in POLICIES if p != DEFAULT_POLICY] if policy == "all" else [policy]
    return RunTargets(
        groups, engine, policies, plan, plan_path, link, link_from_plan, gpu_plan_on_cpus, cpu_plan_on_gpus
    )
