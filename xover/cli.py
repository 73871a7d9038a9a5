"""The `xover` command line: thin commands that parse, call a library function, and render.

Each command imports its library (SQLAlchemy, numpy, psutil behind it) inside its function, so that
`xover --help` and every `--help` start in a fraction of a second; everything else is imported here."""

from __future__ import annotations

import contextlib
import inspect
import math
import shlex
import sys
from typing import Annotated

import typer
from rich.markup import escape

from . import __version__
from .console import console, errors, print_error, print_json, print_table
from .engines import DEFAULT_ENGINE, engines_help
from .errors import Interrupted, TimedOut, XoverError
from .replay.policies import DEFAULT_POLICIES as DEFAULT_REPLAY_POLICIES
from .run.external import slurm
from .run.launchers import (
    DEFAULT_LAUNCHER,
    check_launcher_options,
    launcher_options,
    launchers_help,
)
from .scripts import detect_scripts_engine, detection_note
from .settings import DB_VARIABLE

app = typer.Typer(
    help="Run several data-parallel training jobs on the same devices, taking turns "
    "(crossover synchronisation): profile -> plan -> run -> report.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


class State:
    """Options every command shares, set by the callback before the command runs."""

    db: str | None = None


def _version(value: bool) -> None:
    if value:
        typer.echo(f"xover {__version__}")
        raise typer.Exit()


@app.callback()
def main(
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


def fail(error: XoverError) -> None:
    """Print a one-line error and leave with its exit code (2 for bad input), never a traceback."""
    print_error(str(error))
    raise typer.Exit(error.exit_code)


@contextlib.contextmanager
def user_errors():
    """Expected failures become one line and exit 2; Ctrl-C (after clean-up) exits 130; --timeout 124."""
    try:
        yield
    except XoverError as error:
        fail(error)
    except (Interrupted, KeyboardInterrupt):
        errors.print("interrupted: every process was stopped; unfinished runs are marked interrupted")
        raise typer.Exit(130) from None
    except TimedOut:
        errors.print(
            "timeout: the run went past --timeout; every process was stopped and unfinished runs are marked timeout"
        )
        raise typer.Exit(124) from None


HOSTS_HELP = "Hosts and device slots, e.g. h1:2,h2:2 (horovodrun -H; with --engine torch, torchrun on every node)."
TIMEOUT_HELP = "Stop everything after this many seconds (runs end as 'timeout', exit code 124)."
WAIT_HELP = "If another xover holds a device this needs, wait for it instead of failing."


def _command_line() -> str:
    """This command, as the store and the lease files keep it: a URL's password masked (--db)."""
    from .redact import mask_credentials

    return mask_credentials(shlex.join(["xover", *sys.argv[1:]]))


@app.command()
def doctor(json_out: Annotated[bool, typer.Option("--json", help="Print the checks as JSON.")] = False) -> None:
    """Check what this machine can run: Python, torch, Horovod, horovodrun, cores, GPUs, bandwidth emulation,
    the emulated cluster, Slurm, database."""
    from .doctor import diagnose

    diagnosis = diagnose(State.db)
    if json_out:
        print_json(diagnosis.to_dict())
    else:
        rows = [
            {
                "check": c.name,
                "ok": "ok" if c.ok else ("FAIL" if c.required else "no"),
                "detail": c.detail + (f"  -> {c.fix}" if c.fix and not c.ok else ""),
            }
            for c in diagnosis.checks
        ]
        print_table("xover doctor", [("check", "check"), ("", "ok"), ("detail", "detail")], rows)
        console.print(
            "jobs can run here" if diagnosis.can_run_jobs else "[red]jobs cannot run here: fix the FAIL lines[/]"
        )
    raise typer.Exit(0 if diagnosis.can_run_jobs else 1)


@app.command()
def train(
    recipe: Annotated[
        str, typer.Argument(help="Recipe TOML file, or a recipe name (./recipes/NAME.toml, else a built-in recipe).")
    ],
    np: Annotated[int | None, typer.Option("--np", help="Ranks (devices); default: the recipe's np.")] = None,
    hosts: Annotated[str | None, typer.Option("-H", "--hosts", help=HOSTS_HELP)] = None,
    iterations: Annotated[int | None, typer.Option("--iterations", help="Override the recipe's length.")] = None,
    bandwidth: Annotated[
        str | None,
        typer.Option("--bandwidth", help="Emulate a link of this rate (e.g. 1gbit); 'host': the unshaped network."),
    ] = None,
    engine: Annotated[str, typer.Option("--engine", help=f"{engines_help()}.")] = DEFAULT_ENGINE,
    timeout: Annotated[float | None, typer.Option("--timeout", help=TIMEOUT_HELP)] = None,
    wait: Annotated[bool, typer.Option("--wait", help=WAIT_HELP)] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Train one recipe alone through horovodrun (or torchrun), record it, and print a summary."""
    from .run.commands import train_recipe

    with user_errors():
        check_seconds("--timeout", timeout)
        result = train_recipe(
            State.db,
            recipe,
            np=np,
            hosts=hosts_or_allocation(hosts),
            iterations=iterations,
            bandwidth=bandwidth,
            command=_command_line(),
            show_progress=not json_out,
            engine=engine,
            timeout_s=timeout,
            wait=wait,
        )
    if json_out:
        print_json(result)
    else:
        from .report.tables import DIGITS, job_columns, print_failures

        print_table(f"xover train  experiment {result['experiment']}", job_columns(False), result["jobs"], DIGITS)
        print_failures(result["jobs"])
        console.print(f"logs: {result['results_dir']}", markup=False)
    raise typer.Exit(0 if all(j["status"] == "finished" for j in result["jobs"]) else 1)


def hosts_or_allocation(hosts: str | None) -> str | None:
    """-H as given; without it, inside a Slurm allocation, the allocation's nodes and devices (said)."""
    if hosts:
        return hosts
    if not slurm.in_allocation():
        return None
    allocation = slurm.allocation()
    errors.print(f"hosts from the {allocation.describe()}", highlight=False, soft_wrap=True, markup=False)
    return allocation.hosts_option()


def split_recipes_from_script_args(targets: list[str]) -> tuple[list[str], list[str]]:
    """`--group A B --script s.py -- --steps 5`: the recipes come before --, the scripts' arguments after."""
    if "--" in sys.argv:
        after = sys.argv[sys.argv.index("--") + 1 :]
        return targets[: len(targets) - len(after)] if after else targets, after
    return targets, []


def recipes_and_scripts(
    targets: list[str], scripts: list[str] | None, np: int | None, engine: str | None, hosts: str | None
):
    """Recipes (before --) and the jobs of --script (their arguments after --), for profile and plan."""
    if not scripts:
        return targets, []
    from .run.jobs import scripts_as_recipes

    recipe_targets, script_args = split_recipes_from_script_args(targets)
    if engine is None:
        engine, found = detect_scripts_engine(scripts)
        errors.print(detection_note(found), highlight=False, markup=False, soft_wrap=True)
    return recipe_targets, scripts_as_recipes(scripts, script_args, np, engine, hosts_or_allocation(hosts))


def check_seconds(flag: str, value: float | None) -> None:
    """A duration flag: a finite number of seconds > 0 (nan would never expire, inf never end)."""
    if value is not None and not (math.isfinite(value) and value > 0):
        raise XoverError(f"{flag} must be a positive number of seconds, got {value:g}")


GROUP_COLUMNS = [
    ("group", "group"),
    ("jobs", "jobs"),
    ("policy", "crossover_policy"),
    ("crossover/sequential", "crossover_vs_sequential"),
    ("concurrent/sequential", "concurrent_vs_sequential"),
    ("crossover/concurrent", "crossover_vs_concurrent"),
    ("predicted gain", "predicted_gain"),
]


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


@app.command(
    short_help="Run groups of co-located jobs: crossover, concurrent, sequential, or all three as one comparison."
)
@with_launcher_options
def run(
    targets: Annotated[
        list[str] | None,
        typer.Argument(
            help="A plan file (from `xover plan`); with --group the recipes of one ad-hoc group; with --script "
            "the arguments given to every script (after --).",
            show_default=False,
        ),
    ] = None,
    group: Annotated[
        bool,
        typer.Option(
            "--group",
            help="The arguments are recipes forming one group (with --script too: recipes and scripts in one group).",
        ),
    ] = False,
    scripts: Annotated[
        list[str] | None,
        typer.Option(
            "--script",
            help="An unmodified training script, Horovod "
            "or DistributedDataParallel (its engine found from what it imports, unless --engine); "
            "repeat for each job of the group. Its arguments follow --.",
        ),
    ] = None,
    np: Annotated[
        int | None,
        typer.Option(
            "--np",
            help="Ranks per job: every script's (default: every slot of -H, or every local device) or every "
            "recipe's with --group (default: each recipe's np). A plan decides its own.",
        ),
    ] = None,
    hosts: Annotated[str | None, typer.Option("-H", "--hosts", help="With --group or --script: " + HOSTS_HELP)] = None,
    mode: Annotated[
        str | None,
        typer.Option(
            "--mode",
            help="planned | crossover | concurrent | sequential | all, or a "
            "comma list such as sequential,crossover. planned (a plan's default): each group in the way of "
            "sharing its plan picked, as scheduled; all (an ad-hoc group's default): the three as one "
            "comparison.",
            show_default=False,
        ),
    ] = None,
    iterations: Annotated[int | None, typer.Option("--iterations", help="Override every recipe's length.")] = None,
    seconds: Annotated[
        float | None,
        typer.Option(
            "--seconds",
            help="Give each job the iterations it does in "
            "about this many seconds alone (from its profile), so the jobs of a group overlap all along.",
        ),
    ] = None,
    bandwidth: Annotated[
        str | None,
        typer.Option(
            "--bandwidth",
            help="Emulate a shared link of this rate "
            "(e.g. 1gbit, 200mbit) with tc in a private network namespace; 'host': the unshaped network.",
        ),
    ] = None,
    engine: Annotated[
        str | None,
        typer.Option(
            "--engine",
            help=f"{engines_help()}. Default: a plan's own (its "
            "profiles'); with --script, the one the scripts' imports show; else horovod.",
        ),
    ] = None,
    policy: Annotated[
        str | None,
        typer.Option(
            "--policy",
            help="Turn policy of crossover: work-conserving (a device "
            "never idles while a job waits; critical-path jobs first; the job that needs "
            "the link least goes first on it), round-robin (strict alternation, the "
            "paper's), or all (crossover once per policy). Default: a plan's own (the "
            "policy its predictions assume), else work-conserving.",
        ),
    ] = None,
    timeout: Annotated[float | None, typer.Option("--timeout", help=TIMEOUT_HELP)] = None,
    wait: Annotated[bool, typer.Option("--wait", help=WAIT_HELP)] = False,
    mps: Annotated[
        bool,
        typer.Option(
            "--mps",
            help="Run every job under a CUDA MPS daemon that xover starts for "
            "this run and stops after it (kernels of the jobs' processes side by side instead of time slices: "
            "the GPU baseline crossover is compared with; docs/gpu.md). Needs NVIDIA GPUs.",
        ),
    ] = False,
    allow_changed: Annotated[
        bool,
        typer.Option(
            "--allow-changed",
            help="Run a plan's scripts even if changed since "
            "they were profiled (recorded with each run); without it such a plan is refused.",
        ),
    ] = False,
    launcher: Annotated[
        str, typer.Option("--launcher", help=f"Who starts the jobs: {launchers_help()}.")
    ] = DEFAULT_LAUNCHER,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            "--metrics-port",
            help="Serve the run's figures to Prometheus "
            "on this port while it runs (each Slurm group on its first node), and have each host's turn "
            "server serve its devices, listed at /targets for Prometheus' http_sd_configs; default "
            "$XOVER_METRICS_PORT, else off. Metrics: docs/reference.md.",
            show_default=False,
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the result as one JSON object.")] = False,
    **launcher_options: str | None,  # each launcher's own (Launcher.options): with_launcher_options
) -> None:
    """Run groups of co-located jobs: crossover (taking turns), concurrent (no coordination),
    sequential (each alone), or all three as one comparison. A plan runs each group in the way of
    sharing the plan picked for it (--mode planned, its default); a plan in one mode runs as scheduled:
    each group as soon as its devices are free, groups on other devices side by side."""
    from .run.commands import RunOptions, modes_of, run_groups
    from .run.jobs import run_targets

    with user_errors():
        is_plan = not (group or scripts)
        modes = modes_of(mode or ("planned" if is_plan else "all"), plan=is_plan)
        check_seconds("--timeout", timeout)
        targets = targets or []
        if scripts and group:  # recipes and scripts in one group; arguments after -- go to the scripts
            targets, script_args = split_recipes_from_script_args(targets)
        elif scripts:
            targets, script_args = [], targets
        else:
            script_args = []
        chosen = run_targets(
            targets,
            group=group,
            scripts=scripts or [],
            script_args=script_args,
            np=np,
            hosts=hosts_or_allocation(hosts) if group or scripts else hosts,
            iterations=iterations,
            engine=engine,
            allow_changed=allow_changed,
            bandwidth=bandwidth,
            launcher=launcher,
            policy=policy,
        )
        if chosen.link_from_plan:
            errors.print(
                f"link {chosen.bandwidth}, as the plan's profiles were taken (--bandwidth host: the unshaped network)",
                highlight=False,
            )
        check_seconds("--seconds", seconds)
        if seconds is not None and iterations is not None:
            raise XoverError("--seconds and --iterations: give one (--seconds sets each job's iterations)")
        check_launcher_options(launcher, launcher_options)
        if scripts and engine is None:  # say which engine the scripts' imports showed
            errors.print(
                detection_note(detect_scripts_engine(scripts)[1]), highlight=False, markup=False, soft_wrap=True
            )
        result = run_groups(
            State.db,
            chosen.groups,
            RunOptions(
                modes=tuple(modes),
                policies=tuple(chosen.policies),
                engine=chosen.engine,
                bandwidth=chosen.bandwidth,
                iterations=iterations,
                seconds=seconds,
                timeout_s=timeout,
                wait=wait,
                mps=mps,
                allow_changed=allow_changed,
                launcher=launcher,
                launcher_options=launcher_options,
                plan=chosen.plan,
                plan_path=chosen.plan_path,
                command=_command_line(),
                show_progress=not json_out,
                metrics_port=metrics_port,
            ),
        )
    shown = result.to_json()
    if json_out:
        print_json(shown)
    else:
        from .report.tables import (
            DIGITS,
            POLICY_COLUMNS,
            display_rows,
            job_columns,
            policy_rows,
            print_failures,
        )

        print_table(
            f"xover run  experiment {result.experiment}  link {result.link or 'host network'}",
            job_columns(True),
            shown["jobs"],
            DIGITS,
        )
        print_failures(shown["jobs"])
        if shown["groups"]:
            rows = [{**g, "jobs": " + ".join(g["jobs"])} for g in shown["groups"]]
            print_table(
                "aggregate throughput while the jobs shared the devices (each job normalised by its speed alone)",
                GROUP_COLUMNS,
                rows,
            )
            if len(chosen.policies) > 1:
                # the model's simulated gains come with `xover report`, which reads the jobs' runs alone
                print_table(
                    "crossover by turn policy",
                    [c for c in POLICY_COLUMNS if c[1] != "simulated"],
                    display_rows(policy_rows(shown["groups"])),
                )
        if result.schedule is not None:
            schedule = result.schedule
            console.print(
                f"makespan {schedule['measured_makespan_s']:.1f} s measured "
                f"vs {schedule['predicted_makespan_s']:.1f} s "
                f"predicted by the plan vs {schedule['sequential_makespan_s']:.1f} s one after another; "
                f"up to {schedule['groups_overlapping']} groups ran at once"
            )
        console.print(f"logs: {result.results_dir}")
    raise typer.Exit(0 if result.finished else 1)


PROFILE_COLUMNS = [
    ("job", "name"),
    ("np", "np"),
    ("link", "bandwidth"),
    ("data ms", "data_ms"),
    ("compute ms", "compute_ms"),
    ("comm ms", "comm_ms"),
    ("iter ms", "iteration_ms"),
    ("compute fraction", "compute_fraction"),
    ("samples/s", "samples_per_s"),
    ("memory GB", "memory_gb"),
    ("grad MB", "gradient_mb"),
    ("interference", "interference"),
    ("stretch", "corun_stretch"),
    ("GPU busy", "gpu_busy"),
    ("reused", "reused"),
]


@app.command(
    short_help="Measure each job alone (compute, communication, memory) and its interference next to a partner."
)
def profile(
    recipes: Annotated[
        list[str] | None,
        typer.Argument(
            help="Recipe or job files, or recipe names (./recipes/NAME.toml, "
            "else built-in recipes); with --script, the scripts' arguments follow --.",
            show_default=False,
        ),
    ] = None,
    scripts: Annotated[
        list[str] | None,
        typer.Option(
            "--script",
            help="A training script of your own, Horovod or "
            "DistributedDataParallel, unmodified (the shortcut for a job file; its engine found from what it "
            "imports, unless --engine); repeat for each. Its arguments follow --.",
        ),
    ] = None,
    np: Annotated[
        int | None, typer.Option("--np", help="Ranks; default: each recipe's np (a --script: every local device).")
    ] = None,
    iterations: Annotated[int, typer.Option("--iterations", help="Iterations to measure, warm-up included.")] = 30,
    warmup: Annotated[int, typer.Option("--warmup", help="Iterations left out of the figures.")] = 5,
    bandwidth: Annotated[
        str | None,
        typer.Option("--bandwidth", help="Emulate a link of this rate (e.g. 1gbit); 'host': the unshaped network."),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Measure again even if a stored profile matches.")] = False,
    engine: Annotated[
        str | None,
        typer.Option(
            "--engine",
            help=f"{engines_help()}: the built-in models' "
            "(default horovod) and --script's (default: found from its imports). A job file's script runs "
            "under its own.",
        ),
    ] = None,
    hosts: Annotated[str | None, typer.Option("-H", "--hosts", help=HOSTS_HELP)] = None,
    wait: Annotated[bool, typer.Option("--wait", help=WAIT_HELP)] = False,
    corun_with: Annotated[
        str,
        typer.Option(
            "--corun-with",
            help="The reference partner each job runs next to "
            "once, under crossover, to measure its interference (recipe file or name).",
        ),
    ] = "mlp-balanced",
    corun: Annotated[
        bool,
        typer.Option(
            "--corun/--no-corun",
            help="Measure interference next to the reference "
            "partner: a second run of each job, and the partner's own profile if it has none (2-3x the time); "
            "without it predictions assume none.",
        ),
    ] = True,
    stretch: Annotated[
        bool | None,
        typer.Option(
            "--stretch/--no-stretch",
            help="Measure each job's co-run "
            "stretch: its compute next to a one-rank copy of itself that computes the whole time, without "
            "turns (time-sliced, and under CUDA MPS where it exists): what the plan predicts concurrent and "
            "MPS from. Default: on GPUs (a CPU's cores are shared evenly).",
            show_default=False,
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the profiles as JSON.")] = False,
) -> None:
    """Measure each job alone: data, compute and exposed communication per iteration, memory,
    throughput, gradient bytes; then its interference: how much slower its compute is next to a partner,
    under crossover, than alone (negative: faster, as the thread policy under crossover can make it). A
    script (a job file, or --script) is measured through the shims that run it unmodified; its iteration
    is an optimizer step. Profiles are stored and reused (same recipe or script content and arguments, np,
    hosts spanned, bandwidth, engine, hardware) unless --force."""
    from .profile.step import ProfileOptions, profile_recipes

    with user_errors():
        recipe_paths, script_jobs = recipes_and_scripts(recipes or [], scripts, np, engine, hosts)
        results = profile_recipes(
            State.db,
            recipe_paths,
            ProfileOptions(
                np=np,
                iterations=iterations,
                warmup=warmup,
                bandwidth=bandwidth,
                engine=engine or DEFAULT_ENGINE,
                hosts=hosts_or_allocation(hosts),
                force=force,
                wait=wait,
                corun_with=corun_with if corun else None,
                stretch=stretch,
                command=_command_line(),
                show_progress=not json_out,
            ),
            scripts=script_jobs,
        )
    results.sort(key=lambda r: r["compute_fraction"], reverse=True)
    if json_out:
        print_json(results)
        return
    print_table(
        "xover profile  (sorted: compute-heavy first, communication-heavy last)",
        PROFILE_COLUMNS,
        results,
        digits={"compute_fraction": 2, "memory_gb": 3, "interference": 2, "corun_stretch": 2, "gpu_busy": 2},
    )


PLAN_COLUMNS = [
    ("group", "index"),
    ("wave", "wave"),
    ("jobs", "jobs"),
    ("devices", "devices"),
    ("start s", "start_s"),
    ("sharing", "sharing"),
    ("gain", "predicted_gain"),
    ("predicted by sharing", "by_sharing"),
    ("fluid bound", "fluid_bound"),
    ("slowdowns", "slowdowns"),
]


@app.command(
    short_help="Group complementary jobs, pick each group's way of sharing, place them, and write the plan "
    "`xover run` reads."
)
def plan(
    recipes: Annotated[
        list[str] | None,
        typer.Argument(
            help="Recipes or job files, planned from their stored "
            "profiles; with --script, the scripts' arguments follow --.",
            show_default=False,
        ),
    ] = None,
    scripts: Annotated[
        list[str] | None,
        typer.Option(
            "--script",
            help="A training script of your own (the shortcut "
            "for a job file), planned from its profile: same script content, arguments, --np and engine as "
            "profiled. Repeat for each; arguments follow --.",
        ),
    ] = None,
    np: Annotated[
        int | None,
        typer.Option(
            "--np",
            help="Ranks of every job, as `xover profile --np` measured "
            "them (default: each recipe's np; a --script's, every local device).",
        ),
    ] = None,
    profiles_csv: Annotated[
        str | None,
        typer.Option(
            "--profiles",
            help="CSV of jobs measured elsewhere: "
            "name,devices,compute_ms,comm_ms,memory_gb[,data_ms][,iterations][,link_ms][,comm_cpu]"
            "[,checkpoint_ms][,max_slowdown][,interference][,startup_ms][,interference_link_share][,corun_stretch]"
            "[,mps_stretch].",
        ),
    ] = None,
    devices: Annotated[int | None, typer.Option("--devices", help="Devices on this machine to plan for.")] = None,
    hosts: Annotated[str | None, typer.Option("-H", "--hosts", help="Hosts and device slots, e.g. h1:8,h2:8.")] = None,
    device_memory: Annotated[
        float | None, typer.Option("--device-memory", help="GB per device; groups must fit.")
    ] = None,
    max_group: Annotated[int, typer.Option("--max-group", help="Most jobs that share devices.")] = 2,
    algo: Annotated[str, typer.Option("--algo", help="matching | ffd | none")] = "matching",
    bandwidth: Annotated[
        str | None,
        typer.Option(
            "--bandwidth",
            help="Use profiles taken at this link rate "
            "(default: the one rate every recipe was profiled at; 'host' for the unshaped network).",
        ),
    ] = None,
    policy: Annotated[
        str, typer.Option("--policy", help="Turn policy the plan predicts for: work-conserving or round-robin.")
    ] = "work-conserving",
    engine: Annotated[
        str | None,
        typer.Option(
            "--engine",
            help="Plan the built-in models from the profiles taken "
            "under this engine: horovod (default) or torch (the plan records it, and `xover run` of it uses "
            "it); with --script, the scripts' engine (default: found from their imports). A job file's "
            "script runs under its own.",
        ),
    ] = None,
    out: Annotated[
        str | None,
        typer.Option(
            "--out", help="Plan file to write (default plan.json in the results folder: results/, or $XOVER_RESULTS)."
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
) -> None:
    """Group complementary jobs (compute-heavy with communication-heavy) with a throughput model,
    predict each group under every way of sharing its devices (crossover under the turn policy,
    concurrent, and MPS where its jobs measured it) and pick the best for it (turns only when at least
    2% ahead), place the groups on devices, and write the plan file that `xover run` reads."""
    from .plan.step import plan_jobs

    with user_errors():
        recipe_paths, script_jobs = recipes_and_scripts(recipes or [], scripts, np, engine, None)
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
            bandwidth=bandwidth,
            policy=policy,
            engine=engine or DEFAULT_ENGINE,
            scripts=script_jobs,
            np=np,
        )
    if json_out:
        print_json(result.to_dict())
        return
    plan = result.plan
    rows = [
        {
            "index": i,
            "jobs": " + ".join(job.name for job in g.jobs),
            "devices": ",".join(g.devices),
            "wave": g.wave,
            "sharing": g.sharing,
            "predicted_gain": g.predicted_gain,
            "predicted_period_ms": g.predicted_period_ms,
            "fluid_bound": g.fluid_bound,
            "start_s": g.predicted_start_ms / 1000,
            "slowdowns": ", ".join(f"{k} {v:.2f}x" for k, v in g.predicted_slowdown.items()),
            "by_sharing": ", ".join(f"{k} {v:.2f}" for k, v in g.predicted_by_sharing.items()),
        }
        for i, g in enumerate(plan.groups)
    ]
    from_engine = f", {result.engine} profiles" if result.engine else ""
    print_table(
        f"xover plan  ({plan.algo}; each group shares its devices the way predicted best, crossover "
        f"under the {plan.policy} turn policy, "
        f"link {result.bandwidth or 'host'}{from_engine})",
        PLAN_COLUMNS,
        rows,
    )
    for name, reason in plan.unplaced:
        console.print(f"[yellow]unplaced[/] {escape(name)}: {escape(reason)}")
    console.print(
        f"predicted aggregate gain {plan.predicted_aggregate_gain:.2f}x; makespan "
        f"{plan.predicted_makespan_ms / 1000:.1f} s vs {plan.sequential_makespan_ms / 1000:.1f} s "
        f"one after another"
    )
    if plan.groups:
        console.print(
            f"plan written to {result.path}  (run it: xover run {result.path})", markup=False, highlight=False
        )
    else:
        console.print(
            f"plan written to {result.path}, with nothing to run: no job could be placed (see above)",
            markup=False,
            highlight=False,
        )


SIMULATE_COLUMNS = [
    ("policy", "policy"),
    ("jobs", "finished"),
    ("avg JCT s", "avg_jct_s"),
    ("median JCT s", "median_jct_s"),
    ("p99 JCT s", "p99_jct_s"),
    ("makespan s", "makespan_s"),
    ("utilisation", "utilisation"),
    ("avg queueing s", "avg_queue_s"),
    ("grouped", "grouped_share"),
    ("replay s", "wall_s"),
]
SECONDS_DIGITS = {
    "avg_jct_s": 0,
    "median_jct_s": 0,
    "p99_jct_s": 0,
    "makespan_s": 0,
    "avg_queue_s": 0,
    "utilisation": 3,
    "grouped_share": 3,
    "wall_s": 1,
}


def _names(value: str | None, flag: str) -> list[str]:
    """A comma-separated list of names (none given: empty)."""
    names = [name.strip() for name in (value or "").split(",") if name.strip()]
    if value is not None and not names:
        raise XoverError(f"{flag}: give one or more names, separated by commas")
    return names


def _factors(value: str) -> list[float]:
    try:
        return [float(part) for part in value.split(",") if part.strip()]
    except ValueError:
        raise XoverError(f"--factors {value}: give numbers separated by commas, e.g. 1.33,1.5,1.37") from None


@app.command(
    short_help="Replay a cluster's trace of job arrivals under several policies (no sharing, and xover's "
    "grouping) and store the outcome for `xover report`."
)
def simulate(
    trace: Annotated[
        str,
        typer.Argument(
            help="The trace: Muri's CSV (job_id,num_gpu,submit_time,iterations,model_name,...,resource_time_0..2), "
            "a plain CSV (arrival_s,gpus,duration_s,model[,name][,restart_s][,max_slowdown]) or Philly's job log "
            "(JSON).",
            show_default=False,
        ),
    ],
    cluster: Annotated[
        str | None, typer.Option("--cluster", help="The cluster as HOSTSxDEVICES, e.g. 8x8: 8 hosts of 8 devices.")
    ] = None,
    hosts: Annotated[
        str | None, typer.Option("-H", "--hosts", help="The cluster's hosts and devices, e.g. h1:8,h2:8.")
    ] = None,
    policy: Annotated[
        str,
        typer.Option(
            "--policy",
            help="Policies to replay, side by side: fifo, srtf, srsf, tiresias (no sharing), xover (xover's grouping "
            "over srsf's order), xover-las (over tiresias'), or all.",
        ),
    ] = ",".join(DEFAULT_REPLAY_POLICIES),
    model: Annotated[
        str,
        typer.Option(
            "--model",
            help="How fast jobs go in a group: xover (its simulation of the turn policy, concurrent and MPS) or "
            "interleave (Muri's: the ideal interleaving of data, GPU and network times charged --factors).",
        ),
    ] = "xover",
    factors: Annotated[
        str,
        typer.Option(
            "--factors", help="--model interleave: the interleaving-efficiency factor for groups of 2, 3, 4, ... jobs."
        ),
    ] = "1.33,1.5,1.37",
    semantics: Annotated[
        str,
        typer.Option(
            "--semantics",
            help="xover: running jobs keep their devices, a (re)start costs a job its restart time once; muri: as "
            "Muri's simulator, every event re-decides everything and costs every running job its restart time, a job "
            "alone runs 1.015x its trace's iteration, first-fit placement (Tiresias by device count).",
        ),
    ] = "xover",
    placement: Annotated[
        str | None,
        typer.Option(
            "--placement",
            help="best-fit (as xover plan), first-fit (Muri's 'yarn') or anywhere (only the device count matters); "
            "default: the semantics'.",
        ),
    ] = None,
    max_group: Annotated[int, typer.Option("--max-group", help="Most jobs that share devices (1: nobody).")] = 2,
    min_gain: Annotated[
        float, typer.Option("--min-gain", help="A group forms or stays only if predicted this much better than apart.")
    ] = 0.05,
    turn_policy: Annotated[
        str, typer.Option("--turn-policy", help="--model xover: the turn policy crossover is predicted under.")
    ] = "work-conserving",
    fmt: Annotated[
        str | None, typer.Option("--format", help="The trace's format: muri, plain or philly (default: from its head).")
    ] = None,
    profiles_csv: Annotated[
        str | None,
        typer.Option(
            "--profiles",
            help="CSV of the models' profiles (xover plan --profiles' columns) for a plain or Philly trace; "
            "default: the recipes of those names, from their stored profiles.",
        ),
    ] = None,
    bandwidth: Annotated[
        str | None, typer.Option("--bandwidth", help="Stored profiles: those taken at this link rate.")
    ] = None,
    assign: Annotated[
        str | None,
        typer.Option("--assign", help="Philly's trace names no model: draw each job's from these, e.g. resnet,bert."),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of --assign's draw.")] = 0,
    restart_s: Annotated[
        float,
        typer.Option(
            "--restart-s", help="Seconds a (re)start costs a job where the trace says nothing (Muri's give theirs)."
        ),
    ] = 0.0,
    jobs: Annotated[int | None, typer.Option("--jobs", help="Replay only the trace's first N jobs.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the outcome as JSON.")] = False,
) -> None:
    """Replay a trace of job arrivals on a cluster under each policy, on the planning core of `xover
    plan`: jobs arrive, wait, start, are preempted and finish; under xover's grouping, jobs next in line
    share devices where the model predicts a gain, and a group is dissolved when it stops gaining. Each
    policy's average, median and p99 JCT, makespan, utilisation, queueing and sharing are stored as one
    experiment; `xover report ID` shows them side by side (--format html draws the JCT distribution and
    the utilisation over time)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

    from .replay.policies import POLICIES as REPLAY_POLICIES
    from .replay.step import SimulateRequest
    from .replay.step import simulate as run_simulation

    with user_errors():
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
            bandwidth=bandwidth,
            assign=_names(assign, "--assign"),
            seed=seed,
            restart_s=restart_s,
            jobs=jobs,
        )
        bars = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("jobs done"),
            TimeElapsedColumn(),
            console=errors,
            transient=False,
            disable=json_out,
        )
        tasks: dict[str, TaskID] = {}

        def progress(name: str, done: int, total: int) -> None:
            if name not in tasks:
                tasks[name] = bars.add_task(name, total=total)
            bars.update(tasks[name], completed=done)

        with bars:
            result = run_simulation(State.db, request, _command_line(), progress)
    if json_out:
        print_json(result.to_dict())
        return
    rows = [{**item.summary.to_json(), "wall_s": item.wall_s} for item in result.replays]
    devices = sum(slots for _, slots in result.hosts)
    print_table(
        f"xover simulate  ({len(result.trace.instances)} jobs of {result.trace.path}, {result.trace.format}; "
        f"{len(result.hosts)} hosts, {devices} devices; {result.settings['semantics']} semantics)",
        SIMULATE_COLUMNS,
        rows,
        SECONDS_DIGITS,
    )
    console.print(f"model: {result.model}", highlight=False, soft_wrap=True, markup=False)
    for note in result.trace.notes:
        console.print(f"note: {note}", highlight=False, soft_wrap=True, markup=False)
    for why, count in result.trace.skipped.items():
        console.print(f"[yellow]skipped[/] {count} {escape(why)}")
    for item in result.replays:
        if item.unfinished:
            console.print(f"[yellow]{escape(item.summary.policy)}[/]: {len(item.unfinished)} jobs never finished")
    console.print(
        f"stored as experiment {result.experiment_id}: xover report {result.experiment_id} (--format html draws "
        "the JCT distribution and the utilisation)",
        highlight=False,
        soft_wrap=True,
        markup=False,
    )


@app.command(short_help="Show what a run did: throughput, slowdowns, predicted vs measured gain, parity, pictures.")
def report(
    target: Annotated[
        str,
        typer.Argument(
            help="An experiment id (as printed by train/run/profile), 'latest', "
            "or 'all' for a summary of every experiment."
        ),
    ] = "latest",
    fmt: Annotated[str, typer.Option("--format", help="table | json | csv | html | mlflow")] = "table",
    out: Annotated[
        str | None,
        typer.Option(
            "--out",
            help="Write to this file (html: default "
            "results/runs/<id>/report.html, for 'all' results/report.html, "
            "under $XOVER_RESULTS if set; csv: a folder or file).",
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

    with user_errors():
        make_report(State.db, target, fmt, out, tracking_uri)


from .cli_cluster import cluster_app  # noqa: E402 - registered after the commands above

app.add_typer(cluster_app, name="cluster")
