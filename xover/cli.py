"""The `xover` command line: thin commands that parse, call one library function, and render its result
(views.py).

`xover run` and `xover train` are built from the run's library, loaded here: `--launcher` offers what the
launchers' registry holds, and the built-in launchers register as it loads (plugins too, `load_plugins`).
The libraries of profile, plan, report and doctor (matplotlib and MLflow behind the report) are loaded by
the command that uses them (tests/unit/test_imports.py, LAZY_IMPORTS)."""

from __future__ import annotations

import contextlib
import inspect
import shlex
import sys
from collections.abc import Iterator
from typing import Annotated

import typer

from . import __version__
from .cli_common import App, State, user_errors
from .console import print_error, print_notice, working
from .devices import local_device_count
from .engines import DEFAULT_ENGINE, engines_help
from .errors import Interrupted, XoverError, check_seconds, decimal, escaped_bytes, printable, quoted
from .flags import decimal_flag, whole_flag
from .hints import GivenStore, xover_command
from .links import Link
from .plugins import load_plugins
from .redact import mask_credentials
from .replay.policies import DEFAULT_POLICIES as DEFAULT_REPLAY_POLICIES
from .replay.policies import POLICIES as REPLAY_POLICIES
from .run.commands import RunAsked, run_as_asked, train_recipe
from .run.launchers import DEFAULT_LAUNCHER, hosts_or_allocation, launcher_options, launchers_help
from .run.supervise import interruptible, uninterrupted
from .run.targets import scripts_as_recipes, shared_arguments_hint
from .scripts import detect_scripts_engine, detection_note, module_hint
from .settings import DB_VARIABLE
from .sharing import MAX_GROUP, PLANNED, RunStatus, run_modes
from .streams import summary_of_kept
from .views import replay_progress, show_doctor, show_plan, show_profiles, show_run, show_simulation, show_train

try:  # before the commands are built: a plugin may bring a launcher with options of its own
    load_plugins()
except XoverError as broken:
    print_error(str(broken))
    sys.exit(broken.exit_code)

app = App(
    help="Run several data-parallel training jobs on the same devices, taking turns "
    "(crossover synchronisation): profile -> plan -> run -> report.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"xover {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    ctx: typer.Context,
    db: Annotated[
        str | None,
        typer.Option("--db", envvar=DB_VARIABLE, help="Database file (or SQLAlchemy URL). Default: results/xover.db"),
    ] = None,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version and exit.")
    ] = False,
) -> None:
    """xover: profile, plan, run and report training jobs that share devices."""
    State.db = db
    # the commands printed for the user to paste repeat --db, not a store XOVER_DB names (hints.py)
    typed = getattr(ctx.get_parameter_source("db"), "name", None) == "COMMANDLINE"  # typer's own click's enum
    GivenStore.db = db if typed else None


def shown_as_stored(experiment: str, json_out: bool) -> contextlib.AbstractContextManager[None]:
    """Around the printing of what a command stored: Ctrl-C or SIGTERM there says that the experiment is kept
    whole (exit 130), where it ended the command silently (143) with its table cut; a table stdout cannot take
    says so and leaves the command's exit as it was (_printing)."""
    return _printing(
        f"the experiment was stored whole, as {experiment} ({xover_command('report', experiment)} shows it)", json_out
    )


@contextlib.contextmanager
def _printing(kept: str, json_out: bool) -> Iterator[None]:
    """Around the printing of the summary of what a command kept (`kept`, in words): Ctrl-C says what is kept
    and that the table was cut short (exit 130); a stdout that cannot take the table (closed, a full device)
    says what is kept once on stderr and the command ends as it would have (summary_of_kept); --json's output
    is the result, and its failure is exit 2 (output_written)."""
    with user_errors(interrupted=f"{kept}; its table was cut short"), interruptible():
        with summary_of_kept(kept, is_result=json_out):
            yield


HOSTS_HELP = "Hosts and device slots, e.g. h1:2,h2:2 (horovodrun -H; with --engine torch, torchrun on every node)."

# Options several commands share, declared once.
HostsOption = Annotated[str | None, typer.Option("-H", "--hosts", help=HOSTS_HELP)]
TimeoutOption = Annotated[
    float | None,
    typer.Option(
        "--timeout",
        parser=decimal_flag,
        help="Stop everything after this many seconds (runs end as 'timeout', exit code 124).",
    ),
]
WaitOption = Annotated[
    bool, typer.Option("--wait", help="If another xover holds a device this needs, wait for it instead of failing.")
]
LinkOption = Annotated[
    str | None,
    typer.Option("--bandwidth", help="Emulate a link of this rate (e.g. 1gbit); 'host': the unshaped network."),
]
ScriptsOption = Annotated[
    list[str] | None,
    typer.Option(
        "--script",
        help="A training script of your own, Horovod or DistributedDataParallel, unmodified (the shortcut for "
        "a job file; its engine found from what it imports, unless --engine); repeat for each. Its arguments "
        "follow --.",
    ),
]


JsonOption = Annotated[bool, typer.Option("--json", help="Print the result as JSON instead of tables.")]


def _command_line() -> str:
    """This command, as the store and the lease files keep it: a URL's password masked (--db)."""
    return mask_credentials(escaped_bytes(shlex.join(["xover", *sys.argv[1:]])))


@app.command()
def doctor(json_out: JsonOption = False) -> None:
    """Check what this machine can run: Python, torch, Horovod, horovodrun, cores, GPUs, bandwidth emulation,
    the emulated cluster, Slurm, database."""
    from .doctor import diagnose

    with user_errors(interrupted="nothing was checked to the end; doctor changes nothing"), interruptible():
        with working("checking torch, Horovod, launchers, devices, Slurm, the store"):
            diagnosis = diagnose(State.db)
    show_doctor(diagnosis, json_out)
    raise typer.Exit(0 if diagnosis.can_run_jobs else 1)


@app.command()
def train(
    recipe: Annotated[
        str, typer.Argument(help="Recipe TOML file, or a recipe name (./recipes/NAME.toml, else a built-in recipe).")
    ],
    np: Annotated[
        int | None, typer.Option("--np", parser=whole_flag, help="Ranks (devices); default: the recipe's np.")
    ] = None,
    hosts: HostsOption = None,
    iterations: Annotated[
        int | None, typer.Option("--iterations", parser=whole_flag, help="Override the recipe's length.")
    ] = None,
    bandwidth: LinkOption = None,
    engine: Annotated[str, typer.Option("--engine", help=f"{engines_help()}.")] = DEFAULT_ENGINE,
    timeout: TimeoutOption = None,
    wait: WaitOption = False,
    json_out: JsonOption = False,
) -> None:
    """Train one recipe alone through horovodrun (or torchrun), record it, and print a summary."""
    with user_errors():
        check_seconds("--timeout", timeout)
        result = train_recipe(
            State.db,
            recipe,
            np=np,
            hosts=hosts_or_allocation(hosts),
            iterations=iterations,
            link=Link.parse(bandwidth),
            command=_command_line(),
            show_progress=not json_out,
            engine=engine,
            timeout_s=timeout,
            wait=wait,
        )
    with shown_as_stored(result["experiment"], json_out):
        show_train(result, json_out)
    raise typer.Exit(0 if all(j["status"] == RunStatus.FINISHED for j in result["jobs"]) else 1)


def split_recipes_from_script_args(targets: list[str]) -> tuple[list[str], list[str]]:
    """`--group A B --script s.py -- --steps 5`: the recipes come before --, the scripts' arguments after (the
    command's own `--`, State.after_double_dash: sys.argv is not the command line under CliRunner or `app([...])`)."""
    after = State.after_double_dash
    if after is not None:
        return targets[: len(targets) - len(after)] if after else targets, after
    return targets, []


def recipes_and_scripts(
    targets: list[str], scripts: list[str] | None, np: int | None, engine: str | None, hosts: str | None
):
    """Recipes (before --) and the jobs of --script (their arguments after --), for profile and plan."""
    if not scripts:
        return targets, []
    recipe_targets, script_args = split_recipes_from_script_args(targets)
    if engine is None:
        engine, found = detect_scripts_engine(scripts)
        print_notice(detection_note(found))
    return recipe_targets, scripts_as_recipes(scripts, script_args, np, engine, hosts_or_allocation(hosts))


@contextlib.contextmanager
def shared_arguments_told(targets: list[str], scripts: list[str] | None) -> Iterator[None]:
    """A script's usage error when profiling several scripts with one `-- ARGS` says why (the run says it too)."""
    try:
        yield
    except XoverError as error:
        _, script_args = split_recipes_from_script_args(targets)
        hint = shared_arguments_hint(scripts or [], script_args, [str(error)])
        if hint:
            error.args = (f"{error}\n{hint}",)
        raise


def with_launcher_options(command):
    """Give `command` every registered launcher's own options (run/launchers.py, `Launcher.options`),
    after its --launcher; their values reach it in its **launcher_options, None where not given."""
    signature = inspect.signature(command, eval_str=True)
    added = [
        inspect.Parameter(
            name,
            inspect.Parameter.KEYWORD_ONLY,
            default=None,
            annotation=Annotated[
                str | None, typer.Option(option.flag, help=f"{option.help} (--launcher {' or '.join(takers)}).")
            ],
        )
        for name, (option, takers) in launcher_options().items()
    ]
    parameters = []
    for parameter in signature.parameters.values():
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            continue
        parameters.append(parameter.replace(kind=inspect.Parameter.KEYWORD_ONLY))
        if parameter.name == "launcher":
            parameters += added
    command.__signature__ = signature.replace(parameters=parameters)
    return command


RUN_TARGETS_HELP = (
    "A plan file (from `xover plan`); with --group the recipes of one ad-hoc group; with --script the arguments "
    "given to every script (after --)."
)
RUN_GROUP_HELP = "The arguments are recipes forming one group (with --script too: recipes and scripts in one group)."
RUN_SCRIPT_HELP = (
    "An unmodified training script, Horovod or DistributedDataParallel (its engine found from what it imports, "
    "unless --engine); repeat for each job of the group. Its arguments follow --."
)
RUN_NP_HELP = (
    "Ranks per job: every script's (default: every slot of -H, or every local device) or every recipe's with "
    "--group (default: each recipe's np). A plan decides its own."
)
RUN_SECONDS_HELP = (
    "Give each job the iterations it does in about this many seconds alone (from its profile), so the jobs of "
    "a group overlap all along."
)
RUN_BANDWIDTH_HELP = (
    "Emulate nodes whose NICs carry this rate each way (e.g. 1gbit, 200mbit; on one machine each device is a "
    "node and the loopback is shaped to the rate per device, with tc); 'host': the unshaped network. Default: a "
    "plan's, the link its profiles were taken at (said on one line); else 'host'."
)
RUN_POLICY_HELP = (
    "Turn policy of crossover: work-conserving (a device never idles while a job waits; critical-path jobs "
    "first; the job that needs the link least goes first on it), round-robin (strict alternation, the "
    "paper's), or all (crossover once per policy; adaptive takes turns under the first). Default: a plan's own "
    "(the policy its predictions assume), else work-conserving."
)
RUN_MPS_HELP = (
    "Run every job under a CUDA MPS daemon that xover starts for this run and stops after it (kernels of the "
    "jobs' processes side by side instead of time slices: the GPU baseline crossover is compared with; "
    "docs/gpu.md). Needs NVIDIA GPUs. A plan's groups picked for MPS get one with --mode planned anyway (under "
    "--launcher slurm, each on its node)."
)
RUN_ALLOW_CHANGED_HELP = (
    "Run a plan's scripts even if changed since they were profiled (recorded with each run), and its recipes "
    "even if edited since it was planned (their model, batch, data); without it such a plan is refused."
)
RUN_METRICS_PORT_HELP = (
    "Serve the run's figures to Prometheus on this port while it runs (each Slurm group on its first node), "
    "and have each host's turn server serve its devices, listed at /targets for Prometheus' http_sd_configs; "
    "default $XOVER_METRICS_PORT, else off. Metrics: docs/reference.md."
)


def _modes_help() -> str:
    return (
        f"{PLANNED} | {' | '.join(reversed([str(m) for m in run_modes()]))} | all, or a comma list such as "
        f"sequential,crossover (sequential runs first, the others in the order listed). {PLANNED} (a plan's "
        "default): each group in the way of sharing its plan picked, as scheduled; all (an ad-hoc group's "
        f"default): every mode as one comparison, run as {', '.join(str(m) for m in run_modes())}."
    )


@app.command(
    short_help="Run groups of co-located jobs: crossover, concurrent, adaptive, sequential, or all as one comparison."
)
@with_launcher_options
def run(
    targets: Annotated[list[str] | None, typer.Argument(help=RUN_TARGETS_HELP, show_default=False)] = None,
    group: Annotated[bool, typer.Option("--group", help=RUN_GROUP_HELP)] = False,
    scripts: Annotated[list[str] | None, typer.Option("--script", help=RUN_SCRIPT_HELP)] = None,
    np: Annotated[int | None, typer.Option("--np", parser=whole_flag, help=RUN_NP_HELP)] = None,
    hosts: Annotated[str | None, typer.Option("-H", "--hosts", help="With --group or --script: " + HOSTS_HELP)] = None,
    mode: Annotated[str | None, typer.Option("--mode", help=_modes_help(), show_default=False)] = None,
    iterations: Annotated[
        int | None, typer.Option("--iterations", parser=whole_flag, help="Override every recipe's length.")
    ] = None,
    seconds: Annotated[float | None, typer.Option("--seconds", parser=decimal_flag, help=RUN_SECONDS_HELP)] = None,
    bandwidth: Annotated[str | None, typer.Option("--bandwidth", help=RUN_BANDWIDTH_HELP)] = None,
    engine: Annotated[
        str | None,
        typer.Option(
            "--engine",
            help=f"{engines_help()}. Default: a plan's own (its profiles'); with --script, the one the scripts' "
            "imports show; else horovod.",
        ),
    ] = None,
    policy: Annotated[str | None, typer.Option("--policy", help=RUN_POLICY_HELP)] = None,
    timeout: TimeoutOption = None,
    wait: WaitOption = False,
    mps: Annotated[bool, typer.Option("--mps", help=RUN_MPS_HELP)] = False,
    allow_changed: Annotated[bool, typer.Option("--allow-changed", help=RUN_ALLOW_CHANGED_HELP)] = False,
    launcher: Annotated[
        str, typer.Option("--launcher", help=f"Who starts the jobs: {launchers_help()}.")
    ] = DEFAULT_LAUNCHER,
    metrics_port: Annotated[
        int | None, typer.Option("--metrics-port", parser=whole_flag, help=RUN_METRICS_PORT_HELP, show_default=False)
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the result as one JSON object.")] = False,
    **launcher_options: str | None,  # each launcher's own (Launcher.options): with_launcher_options
) -> None:
    """Run groups of co-located jobs: crossover (taking turns), concurrent (no coordination), adaptive
    (turns and none measured while it runs, settling on the better; XOVER_ADAPTIVE), sequential (each
    alone), or all of them as one comparison. A plan runs each group in the way of
    sharing the plan picked for it (--mode planned, its default); a plan in one mode runs as scheduled:
    each group as soon as its devices are free, groups on other devices side by side."""
    targets = targets or []
    script_args: list[str] = []
    if scripts:  # arguments after -- go to the scripts; before it, with --group, recipes of their group
        targets, script_args = split_recipes_from_script_args(targets)
    if not scripts and State.after_double_dash:  # `--group mlp-digits -- --steps 3`: '--steps' read as a recipe
        print_error(
            f"{quoted(State.after_double_dash[0])} comes after `--`, where a script's arguments begin, and no "
            "--script was given: recipes take no arguments (their options are their file's fields, and "
            "--iterations); give a script with --script FILE"
        )
        raise typer.Exit(2)
    if scripts and "-m" in scripts:  # `--script -m pkg.train`: 'pkg.train' read as a target
        print_error(f"--script -m: no such file{module_hint('-m')}")
        raise typer.Exit(2)
    if scripts and not group and targets:  # `xover run plan.json --script s.py` ran s.py with 'plan.json'
        print_error(
            f"--script: {quoted(targets[0])} comes before `--`, where a script's arguments begin (xover run "
            "--script FILE -- ARGS); a plan file runs by itself, and recipes join scripts with --group"
        )
        raise typer.Exit(2)
    with user_errors():
        result = run_as_asked(
            State.db,
            RunAsked(
                targets=tuple(targets),
                group=group,
                scripts=tuple(scripts or ()),
                script_args=tuple(script_args),
                np=np,
                hosts=hosts,
                mode=mode,
                iterations=iterations,
                seconds=seconds,
                link=Link.parse(bandwidth),
                engine=engine,
                policy=policy,
                timeout_s=timeout,
                wait=wait,
                mps=mps,
                allow_changed=allow_changed,
                launcher=launcher,
                launcher_options=launcher_options,
                metrics_port=metrics_port,
                command=_command_line(),
                show_progress=not json_out,
            ),
        )
    with shown_as_stored(result.experiment, json_out):
        show_run(result, json_out)
    raise typer.Exit(0 if result.finished else 1)


PROFILE_STRETCH_HELP = (
    "Measure each job's co-run stretch: its compute next to a one-rank copy of itself that computes the whole "
    "time, without turns (time-sliced, and under CUDA MPS where it exists): what the plan predicts concurrent "
    "and MPS from. Default: on GPUs (a CPU's cores are shared evenly)."
)
PROFILE_CORUN_HELP = (
    "Measure interference next to the reference partner: a second run of each job, and the partner's own "
    "profile if it has none (2-3x the time); without it predictions assume none."
)


@app.command(
    short_help="Measure each job alone (compute, communication, memory) and its interference next to a partner."
)
def profile(
    recipes: Annotated[
        list[str] | None,
        typer.Argument(
            help="Recipe or job files, or recipe names (./recipes/NAME.toml, else built-in recipes); with --script, "
            "the scripts' arguments follow --.",
            show_default=False,
        ),
    ] = None,
    scripts: ScriptsOption = None,
    np: Annotated[
        int | None,
        typer.Option(
            "--np", parser=whole_flag, help="Ranks; default: each recipe's np (a --script: every local device)."
        ),
    ] = None,
    iterations: Annotated[
        int, typer.Option("--iterations", parser=whole_flag, help="Iterations to measure, warm-up included.")
    ] = 30,
    warmup: Annotated[int, typer.Option("--warmup", parser=whole_flag, help="Iterations left out of the figures.")] = 5,
    bandwidth: LinkOption = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="Measure the jobs named again even if a stored profile matches (not the reference partner)."
        ),
    ] = False,
    engine: Annotated[
        str | None,
        typer.Option(
            "--engine",
            help=f"{engines_help()}: the built-in models' (default horovod) and --script's (default: found from "
            "its imports). A job file's script runs under its own.",
        ),
    ] = None,
    hosts: HostsOption = None,
    wait: WaitOption = False,
    corun_with: Annotated[
        str | None,
        typer.Option(
            "--corun-with",
            help="The reference partner each job runs next to once, under crossover, to measure its "
            "interference (recipe file or name). Default: mlp-balanced.",
            show_default=False,
        ),
    ] = None,
    corun: Annotated[bool, typer.Option("--corun/--no-corun", help=PROFILE_CORUN_HELP)] = True,
    stretch: Annotated[
        bool | None, typer.Option("--stretch/--no-stretch", help=PROFILE_STRETCH_HELP, show_default=False)
    ] = None,
    json_out: JsonOption = False,
) -> None:
    """Measure each job alone: data, compute and exposed communication per iteration, memory,
    throughput, gradient bytes; then its interference: how much slower its compute is next to a partner,
    under crossover, than alone (negative: faster, as the thread policy under crossover can make it). A
    script (a job file, or --script) is measured through the shims that run it unmodified; its iteration
    is an optimizer step. Profiles are stored and reused (same recipe or script content and arguments, np,
    hosts spanned, bandwidth, engine, hardware, and the settings that change a job alone:
    XOVER_THREADS_PER_RANK, XOVER_PIN_CORES, XOVER_TORCH_BACKEND, XOVER_DETERMINISTIC) unless --force."""
    from .profile.step import DEFAULT_CORUN_PARTNER, ProfileOptions, profile_recipes

    with user_errors(), shared_arguments_told(recipes or [], scripts):
        if corun_with is not None and not corun:  # --corun-with was dropped without a word
            raise XoverError(
                f"--corun-with {quoted(corun_with)} and --no-corun: --no-corun measures no interference, so no "
                "partner; give one of them"
            )
        recipe_paths, script_jobs = recipes_and_scripts(recipes or [], scripts, np, engine, hosts)
        results = profile_recipes(
            State.db,
            recipe_paths,
            ProfileOptions(
                np=np,
                iterations=iterations,
                warmup=warmup,
                link=Link.parse(bandwidth),
                engine=engine or DEFAULT_ENGINE,
                hosts=hosts_or_allocation(hosts),
                force=force,
                wait=wait,
                corun_with=(corun_with or DEFAULT_CORUN_PARTNER) if corun else None,
                stretch=stretch,
                command=_command_line(),
                show_progress=not json_out,
            ),
            scripts=script_jobs,
        )
    with _printing("the profiles were stored whole (the same command shows them again, reusing them)", json_out):
        show_profiles(results, json_out)


PLAN_PROFILES_HELP = (
    # a space after each comma: the help wraps there (one word of 200 characters was cut with '...')
    "CSV of jobs measured elsewhere, columns name, devices, compute_ms, comm_ms, memory_gb and optionally "
    "data_ms, iterations, link_ms, comm_cpu, checkpoint_ms, max_slowdown, interference, startup_ms, "
    "interference_link_share, corun_stretch, mps_stretch (docs/reference.md)."
)
PLAN_ENGINE_HELP = (
    "Plan the built-in models from the profiles taken under this engine: horovod (default) or torch (the plan "
    "records it, and `xover run` of it uses it); with --script, the scripts' engine (default: found from their "
    "imports). A job file's script runs under its own."
)


@app.command(
    short_help="Group complementary jobs, pick each group's way of sharing, place them, and write the plan "
    "`xover run` reads."
)
def plan(
    recipes: Annotated[
        list[str] | None,
        typer.Argument(
            help="Recipes or job files, planned from their stored profiles; with --script, the scripts' "
            "arguments follow --.",
            show_default=False,
        ),
    ] = None,
    scripts: Annotated[
        list[str] | None,
        typer.Option(
            "--script",
            help="A training script of your own (the shortcut for a job file), planned from its profile: same "
            "script content, arguments, --np and engine as profiled. Repeat for each; arguments follow --.",
        ),
    ] = None,
    np: Annotated[
        int | None,
        typer.Option(
            "--np",
            parser=whole_flag,
            help="Ranks of every job, as `xover profile --np` measured them (default: each recipe's np; a "
            "--script's, every local device).",
        ),
    ] = None,
    profiles_csv: Annotated[str | None, typer.Option("--profiles", help=PLAN_PROFILES_HELP)] = None,
    devices: Annotated[
        int | None, typer.Option("--devices", parser=whole_flag, help="Devices on this machine to plan for.")
    ] = None,
    hosts: Annotated[str | None, typer.Option("-H", "--hosts", help="Hosts and device slots, e.g. h1:8,h2:8.")] = None,
    device_memory: Annotated[
        float | None, typer.Option("--device-memory", parser=decimal_flag, help="GB per device; groups must fit.")
    ] = None,
    max_group: Annotated[
        int, typer.Option("--max-group", parser=whole_flag, help=f"Most jobs that share devices, 1 to {MAX_GROUP}.")
    ] = 2,
    algo: Annotated[str, typer.Option("--algo", help="matching | ffd | none")] = "matching",
    bandwidth: Annotated[
        str | None,
        typer.Option(
            "--bandwidth",
            help="Use profiles taken at this link rate (default: the one rate every recipe was profiled at; "
            "'host' for the unshaped network).",
        ),
    ] = None,
    policy: Annotated[
        str, typer.Option("--policy", help="Turn policy the plan predicts for: work-conserving or round-robin.")
    ] = "work-conserving",
    engine: Annotated[str | None, typer.Option("--engine", help=PLAN_ENGINE_HELP)] = None,
    out: Annotated[
        str | None,
        typer.Option(
            "--out", help="Plan file to write (default plan.json in the results folder: results/, or $XOVER_RESULTS)."
        ),
    ] = None,
    json_out: JsonOption = False,
) -> None:
    """Group complementary jobs (compute-heavy with communication-heavy) with a throughput model,
    predict each group under every way of sharing its devices (crossover under the turn policy,
    concurrent, and MPS where its jobs measured it; a way measured on the same jobs, link and hardware
    before by its measurement) and pick one for it - adaptive (measured while it runs) where turns and
    none are closer than the model's measured error, else the better, unless adaptive itself measured
    clearly ahead of it on these jobs - and say why, place the groups on devices, and write the plan file
    that `xover run` reads."""
    from .plan.step import plan_jobs

    with user_errors(interrupted="no plan was written"), interruptible():  # SIGTERM as Ctrl-C: one line, exit 130
        if profiles_csv and engine is not None:  # it was accepted and changed nothing
            raise XoverError("--engine picks stored profiles of recipes; a --profiles file carries its own times")
        recipe_paths, script_jobs = recipes_and_scripts(recipes or [], scripts, np, engine, None)
        with working("planning: grouping the jobs, predicting, placing"):
            result = plan_jobs(
                State.db,
                recipe_paths=recipe_paths,
                trace_csv=profiles_csv,
                devices=devices,
                hosts=hosts if hosts or devices else hosts_or_allocation(None),
                device_memory_gb=device_memory,
                max_group=max_group,
                algo=algo,
                out=out,
                link=Link.parse(bandwidth),
                policy=policy,
                engine=engine or DEFAULT_ENGINE,
                scripts=script_jobs,
                np=np,
                while_writing=uninterrupted,
            )
        if devices is not None and not profiles_csv:  # --devices is this machine's: a run here refuses more
            kind, available = local_device_count()
            used = {device for group in result.plan.groups for device in group.devices}
            beyond = sorted(device for device in used if int(device.rpartition(":")[2]) >= available)
            if beyond:
                print_notice(
                    f"warning: --devices {devices}: this machine has {available} "
                    f"{'GPU devices' if kind == 'gpu' else 'CPU cores'}, and the plan places groups on "
                    f"{', '.join(beyond[:3])}{' ...' if len(beyond) > 3 else ''}: `xover run` of it here refuses "
                    f"them; plan with --devices {available}, or for other hosts with -H"
                )
        try:
            with summary_of_kept(f"the plan was written whole to {result.path} and stored", is_result=json_out):
                show_plan(result, json_out)
        except Interrupted:
            raise Interrupted(
                f"the plan was written whole to {result.path} and stored; its table was cut short"
            ) from None


def _names(value: str | None, flag: str) -> list[str]:
    """A comma-separated list of names (none given: empty); one left empty is refused, as --factors' are."""
    if value is None:
        return []
    names = [name.strip() for name in value.split(",")]
    if not any(names):
        raise XoverError(f"{flag}: give one or more names, separated by commas")
    if not all(names):  # `a,,b` or a trailing comma: a name lost in editing, not one to drop silently
        raise XoverError(f"{flag} {printable(value)}: a name left empty; give each between commas")
    return names


def _options_given(context: typer.Context) -> frozenset[str]:
    """The options of this command typed on its command line, by their long flag ("--factors")."""
    return frozenset(
        max(parameter.opts, key=len)
        for parameter in context.command.params
        # compared by name: Typer carries its own copy of click, whose enum is not click's
        if parameter.name and getattr(context.get_parameter_source(parameter.name), "name", "") == "COMMANDLINE"
    )


def _factors(value: str) -> list[float]:
    # decimal(), not float(): float reads other scripts' digits ('١.٥' was 1.5) and underscores ('1_5' was 15)
    parts = value.split(",")
    if len(parts) > 1 and any(not part.strip() for part in parts):
        # a factor is its group size's by its place: 1.3,,1.5 charged groups of 3 jobs 1.5
        raise XoverError(
            f"--factors {value}: a factor left empty; give one for each group size, 2, 3, ... jobs in turn, "
            "e.g. 1.33,1.5,1.37"
        )
    factors = [decimal(part) for part in parts if part.strip()]
    if any(factor is None for factor in factors):
        raise XoverError(f"--factors {printable(value)}: give numbers separated by commas, e.g. 1.33,1.5,1.37")
    return [factor for factor in factors if factor is not None]


# the help of `xover simulate`'s argument and options
SIMULATE_HELP = {
    "trace": (
        "The trace: Muri's CSV (job_id, num_gpu, submit_time, iterations, model_name, ..., resource_time_0..2), "
        "a plain CSV (arrival_s, gpus, duration_s, model, and optionally name, restart_s, max_slowdown), "
        "Philly's job log (JSON) or Helios' cluster_log.csv."
    ),
    "cluster": "The cluster as HOSTSxDEVICES, e.g. 8x8: 8 hosts of 8 devices.",
    "hosts": "The cluster's hosts and devices, e.g. h1:8,h2:8.",
    "policy": (
        "Policies to replay, side by side: fifo, srtf, srsf, tiresias (no sharing), xover (xover's grouping "
        "over srsf's order), xover-las (over tiresias'), or all."
    ),
    "model": (
        "How fast jobs go in a group: xover (its simulation of the turn policy, concurrent and MPS) or "
        "interleave (Muri's: the ideal interleaving of data, GPU and network times charged --factors)."
    ),
    "factors": (
        "--model interleave: the interleaving-efficiency factor for groups of 2, 3, 4, ... jobs, charged over their "
        "ideal interleaved iteration (so >= 1)."
    ),
    "semantics": (
        "xover: running jobs keep their devices, a (re)start costs a job its restart time once; muri: as "
        "Muri's simulator, every event re-decides everything and costs every running job its restart time, a "
        "job alone runs 1.015x its trace's iteration, first-fit placement (Tiresias by device count)."
    ),
    "placement": (
        "best-fit (as xover plan), first-fit (Muri's 'yarn') or anywhere (only the device count matters); "
        "default: the semantics'."
    ),
    "max_group": f"Most jobs that share devices, 1 to {MAX_GROUP} (1: nobody).",
    "min_gain": (
        "A group forms or stays only if predicted this much better than apart (0.05: 5%): 0 to K-1 for --max-group "
        "K (1 for K=1), as K jobs are at most K times as fast as apart."
    ),
    "turn_policy": "--model xover: the turn policy crossover is predicted under.",
    "fmt": "The trace's format: muri, plain, philly or helios (default: from its head).",
    "profiles_csv": (
        "CSV of the models' profiles (xover plan --profiles' columns) for a plain, Philly or Helios trace; default: "
        "the recipes of those names, from their stored profiles."
    ),
    "bandwidth": "Stored profiles: those taken at this link rate.",
    "engine": "Stored profiles: those taken under this engine, horovod (default) or torch.",
    "assign": (
        "Philly's and Helios' traces name no model: draw each job's from these, e.g. resnet-synthetic,bert-base-tokens "
        "(recipes with stored profiles, or --profiles' names; a name given twice is drawn twice as often)."
    ),
    "seed": "Seed of --assign's draw: a whole number from 0 to 2**63-1.",
    "restart_s": "Seconds a (re)start costs a job where the trace says nothing (Muri's give theirs).",
    "jobs": "Replay only the trace's first N jobs (a trace of fewer: whole, with a note of how many it has).",
    "json_out": "Print the outcome as JSON.",
}


@app.command(
    short_help="Replay a cluster's trace of job arrivals under several policies (no sharing, and xover's "
    "grouping) and store the outcome for `xover report`."
)
def simulate(
    context: typer.Context,
    trace: Annotated[str, typer.Argument(help=SIMULATE_HELP["trace"], show_default=False)],
    cluster: Annotated[str | None, typer.Option("--cluster", help=SIMULATE_HELP["cluster"])] = None,
    hosts: Annotated[str | None, typer.Option("-H", "--hosts", help=SIMULATE_HELP["hosts"])] = None,
    policy: Annotated[str, typer.Option("--policy", help=SIMULATE_HELP["policy"])] = ",".join(DEFAULT_REPLAY_POLICIES),
    model: Annotated[str, typer.Option("--model", help=SIMULATE_HELP["model"])] = "xover",
    factors: Annotated[str, typer.Option("--factors", help=SIMULATE_HELP["factors"])] = "1.33,1.5,1.37",
    semantics: Annotated[str, typer.Option("--semantics", help=SIMULATE_HELP["semantics"])] = "xover",
    placement: Annotated[str | None, typer.Option("--placement", help=SIMULATE_HELP["placement"])] = None,
    max_group: Annotated[int, typer.Option("--max-group", parser=whole_flag, help=SIMULATE_HELP["max_group"])] = 2,
    min_gain: Annotated[float, typer.Option("--min-gain", parser=decimal_flag, help=SIMULATE_HELP["min_gain"])] = 0.05,
    turn_policy: Annotated[str, typer.Option("--turn-policy", help=SIMULATE_HELP["turn_policy"])] = "work-conserving",
    fmt: Annotated[str | None, typer.Option("--format", help=SIMULATE_HELP["fmt"])] = None,
    profiles_csv: Annotated[str | None, typer.Option("--profiles", help=SIMULATE_HELP["profiles_csv"])] = None,
    bandwidth: Annotated[str | None, typer.Option("--bandwidth", help=SIMULATE_HELP["bandwidth"])] = None,
    engine: Annotated[str, typer.Option("--engine", help=SIMULATE_HELP["engine"])] = DEFAULT_ENGINE,
    assign: Annotated[str | None, typer.Option("--assign", help=SIMULATE_HELP["assign"])] = None,
    seed: Annotated[int, typer.Option("--seed", parser=whole_flag, help=SIMULATE_HELP["seed"])] = 0,
    restart_s: Annotated[
        float, typer.Option("--restart-s", parser=decimal_flag, help=SIMULATE_HELP["restart_s"])
    ] = 0.0,
    jobs: Annotated[int | None, typer.Option("--jobs", parser=whole_flag, help=SIMULATE_HELP["jobs"])] = None,
    json_out: Annotated[bool, typer.Option("--json", help=SIMULATE_HELP["json_out"])] = False,
) -> None:
    """Replay a trace of job arrivals on a cluster under each policy, on the planning core of `xover
    plan`: jobs arrive, wait, start, are preempted and finish; under xover's grouping, jobs next in line
    share devices where the model predicts a gain, and a group is dissolved when it stops gaining. Each
    policy's average, median and p99 JCT, makespan, utilisation, queueing and sharing are stored as one
    experiment; `xover report ID` shows them side by side (--format html draws the JCT distribution and
    the utilisation over time)."""
    from .replay.step import SimulateRequest, stored_words
    from .replay.step import simulate as run_simulation

    # SIGTERM as Ctrl-C: said in one line, exit 130 (it ended the process without a word)
    with user_errors(interrupted="nothing of the simulation was stored"), interruptible():
        policies = list(REPLAY_POLICIES) if policy.strip() == "all" else _names(policy, "--policy")
        request = SimulateRequest(
            trace=trace,
            fmt=fmt,
            hosts=hosts,
            cluster=cluster,
            policies=policies,
            model=model,
            factors=_factors(factors),
            semantics=semantics,
            placement=placement,
            max_group=max_group,
            min_gain=min_gain,
            turn_policy=turn_policy,
            profiles_csv=profiles_csv,
            link=Link.parse(bandwidth),
            engine=engine,
            assign=_names(assign, "--assign"),
            seed=seed,
            restart_s=restart_s,
            jobs=jobs,
            given=_options_given(context),
        )
        with replay_progress(json_out) as progress:
            result = run_simulation(State.db, request, _command_line(), progress)
        try:
            with summary_of_kept(stored_words(result.experiment_id), is_result=json_out):
                show_simulation(result, json_out)
        except Interrupted:
            raise Interrupted(stored_words(result.experiment_id)) from None


@app.command(short_help="Show what a run did: throughput, slowdowns, predicted vs measured gain, parity, pictures.")
def report(
    target: Annotated[
        str,
        typer.Argument(
            help="An experiment id (as printed by train, run, profile or simulate; a unique start of one will do, or "
            "its last 4 characters or more), 'latest', or 'all' for a summary of every experiment."
        ),
    ] = "latest",
    fmt: Annotated[str, typer.Option("--format", help="table | json | csv | html | mlflow")] = "table",
    out: Annotated[
        str | None,
        typer.Option(
            "--out",
            help="Write to this file or folder (html: default "
            "results/runs/<id>/report.html, for 'all' results/report.html, "
            "under $XOVER_RESULTS if set). csv: a folder gets jobs.csv and iterations.csv "
            "(a simulation: simulation.csv, jobs.csv, utilisation.csv; 'all': experiments.csv); "
            "FILE.csv writes FILE.csv and, beside it, FILE-iterations.csv "
            "(a simulation: FILE-jobs.csv, FILE-utilisation.csv); each file written is named.",
        ),
    ] = None,
    tracking_uri: Annotated[
        str | None,
        typer.Option(
            "--tracking-uri",
            help="--format mlflow: the MLflow tracking store, e.g. sqlite:///results/mlflow.db or "
            "http://host:5000 (default $MLFLOW_TRACKING_URI); one parent run per experiment, "
            "one run per job and mode, written again without duplicates.",
        ),
    ] = None,
) -> None:
    """Show what a run did: throughput, slowdowns, predicted vs measured gain, accuracy parity,
    and pictures (timeline, throughput by mode, loss curves, predicted vs measured). Warns where a
    group's figures are less sure: its jobs overlapped briefly, or a job's run alone was over 20% off
    its profile (the machine's speed changed)."""
    from .report import make_report

    cut_short = (
        "the MLflow write stopped part-way; an experiment cut short there is replaced when written again"
        if fmt == "mlflow"
        else "the report stopped part-way; each file it said it wrote is whole, one it was writing may not be"
    )
    # with --out, stdout only names the files written, once they are: the files are the result (summary_of_kept)
    written = summary_of_kept("the report's files were written whole", is_result=not out or fmt == "mlflow")
    with user_errors(interrupted=cut_short), interruptible(), written:  # SIGTERM as Ctrl-C: one line, exit 130
        make_report(State.db, target, fmt, out, tracking_uri)


from .cli_cluster import cluster_app  # noqa: E402 - registered after the commands above

app.add_typer(cluster_app, name="cluster")
