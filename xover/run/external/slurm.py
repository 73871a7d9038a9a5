"""Slurm: the allocation xover runs inside, and the jobs it submits, follows and cancels.

Inside an allocation (`salloc`, `sbatch`, `srun`) Slurm describes it in SLURM_* variables:
`allocation()` turns them into hosts with devices per host (GPUs when Slurm allocated some, else
CPU cores: one rank per device, as with `-H`). Outside, `submit()` hands a batch script to `sbatch`,
`job_state()` / `wait_for()` follow it through `scontrol` (or `sacct` once slurmctld has forgotten
it and accounting exists), `cancel()` ends it with `scancel`. `diagnose_slurm()` is what `xover
doctor` says about Slurm. Every failure is a SlurmError naming the command and Slurm's own words.

A busy or restarting slurmctld makes a query time out now and then ("Socket timed out on send/recv
operation", "Unable to contact slurm controller"). Such a failure is `transient`: following a job
and cancelling one retry it (`retrying`, growing pauses, at most TRANSIENT_RETRY_S) before it counts,
so that one slow answer does not cancel every job of a run. `sbatch` is not retried: a submission
whose answer was lost may have been made, and a second one would run the group twice.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from ...errors import XoverError
from ...hosts import SHELL_NAME

T = TypeVar("T")
COMMANDS = ("sbatch", "scontrol", "scancel", "squeue", "sinfo", "salloc", "srun", "sacct")
# a job in one of these states has ended for good; anything else (PENDING, RUNNING, COMPLETING,
# SUSPENDED, REQUEUED, ...) may still change
FINAL_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
        "SPECIAL_EXIT",
        "REVOKED",
    }
)
COMMAND_TIMEOUT_S = 30  # a client waits up to MessageTimeout per retry when slurmctld is down
TRANSIENT_RETRY_S = 300.0  # how long a query that failed transiently is retried before the failure counts
# Slurm's words for a controller that is slow, restarting or failing over, not for a refusal
TRANSIENT_WORDS = re.compile(
    r"timed out|unable to contact slurm controller|connect(ion)? failure|connection refused|"
    r"zero bytes were transmitted|communication (send|receive|shutdown) failure|"
    r"backup controller in standby|resource temporarily unavailable|try again|"
    r"transport endpoint is not connected|slurmctld is busy|not responding",
    re.IGNORECASE,
)


class SlurmError(XoverError):
    """Slurm refused or failed something xover asked of it (or is not there). `transient`: the
    controller did not answer (a time-out, a lost connection); asking again later may work."""

    def __init__(self, message: str, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


def retrying(
    action: Callable[[], T], limit_s: float | None = None, on_retry: Callable[[SlurmError], None] | None = None
) -> T:
    """`action()`, asked again after a transient SlurmError (pauses of 1, 2, 4 ... 30 s) for at most
    `limit_s` (TRANSIENT_RETRY_S); any other error, or one that lasts longer, is raised."""
    limit_s = TRANSIENT_RETRY_S if limit_s is None else limit_s
    started, pause = time.monotonic(), 1.0
    while True:
        try:
            return action()
        except SlurmError as error:
            waited = time.monotonic() - started
            if not error.transient or waited + pause > limit_s:
                if error.transient and waited >= 1:
                    raise SlurmError(f"{error} (Slurm did not answer for {waited:.0f} s)", transient=True) from None
                raise
            if on_retry is not None:
                on_retry(error)
            time.sleep(pause)
            pause = min(pause * 2, 30.0)


# ---------------------------------------------------------------------------------------------
# Host lists: Slurm's bracket syntax
# ---------------------------------------------------------------------------------------------


def expand_hostlist(expression: str) -> list[str]:
    """Slurm's compressed host list expanded in Slurm's order, without asking Slurm:
    'gpu[01-03,7],login' -> gpu01 gpu02 gpu03 gpu7 login; 'r[1-2]-n[1-2]' -> r1-n1 r1-n2 r2-n1 r2-n2.
    A range keeps the zero padding of its lower bound (n[08-10] -> n08 n09 n10); duplicates stay."""
    hosts: list[str] = []
    for item in _split_top_level(expression):
        hosts.extend(_expand_item(item, expression))
    return hosts


def _split_top_level(expression: str) -> list[str]:
    items, depth, current = [], 0, ""
    for char in expression.strip():
        if char == "[":
            depth += 1
            if depth > 1:
                raise SlurmError(f"host list '{expression}': nested '['")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise SlurmError(f"host list '{expression}': ']' without '['")
        if char == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += char
    if depth:
        raise SlurmError(f"host list '{expression}': '[' without ']'")
    items.append(current)
    if any(not item.strip() for item in items):
        raise SlurmError(f"host list '{expression}': empty host name")
    return [item.strip() for item in items]


def _expand_item(item: str, expression: str) -> list[str]:
    # 'pre[a-b,c]mid[d-e]' -> fixed parts and bracket groups; every bracket multiplies the names
    parts = re.split(r"(\[[^\]]*\])", item)
    if parts[-1] and len(parts) > 1:
        raise SlurmError(
            f"host list '{expression}': '{item}' has text after its last ']' ('{parts[-1]}'), "
            "which Slurm does not accept"
        )
    names = [""]
    for part in parts:
        if part.startswith("["):
            names = [name + suffix for name in names for suffix in _expand_ranges(part[1:-1], expression)]
        else:
            names = [name + part for name in names]
    return names


def _expand_ranges(ranges: str, expression: str) -> list[str]:
    out: list[str] = []
    for piece in ranges.split(","):
        low, dash, high = piece.strip().partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise SlurmError(
                f"host list '{expression}': '[{ranges}]' must hold numbers and ranges like 1-4, not '{piece}'"
            )
        width = len(low)  # Slurm pads to the width of the lower bound as written
        first, last = int(low), int(high) if dash else int(low)
        if last < first:
            raise SlurmError(f"host list '{expression}': range '{piece}' runs backwards")
        out.extend(str(number).zfill(width) for number in range(first, last + 1))
    return out


def hostnames(expression: str) -> list[str]:
    """A host list expanded by `scontrol show hostnames` when Slurm's client is configured here
    (the authority on the syntax), else by expand_hostlist."""
    scontrol = shutil.which("scontrol")
    configured = os.environ.get("SLURM_CONF")
    if scontrol and (not configured or Path(configured).is_file()):  # a missing SLURM_CONF: scontrol retries for 60 s
        try:
            out = subprocess.run(
                [scontrol, "show", "hostnames", expression], capture_output=True, text=True, timeout=10
            )
            names = out.stdout.split()
            # scontrol exits 0 on a bad list too; it then says "Invalid hostlist" on stderr
            if out.returncode == 0 and names and "invalid" not in out.stderr.lower():
                return names
        except (OSError, subprocess.TimeoutExpired):
            pass  # no configuration, no controller: the syntax does not need either
    return expand_hostlist(expression)


def expand_counts(value: str) -> list[int]:
    """Slurm's per-node counts, e.g. SLURM_JOB_CPUS_PER_NODE '4(x2),2' -> [4, 4, 2]."""
    counts = []
    for item in value.split(","):
        match = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", item)
        if not match:
            raise SlurmError(f"cannot read the per-node count '{value}' (expected e.g. '4(x2),2')")
        counts.extend([int(match.group(1))] * int(match.group(2) or 1))
    return counts


# ---------------------------------------------------------------------------------------------
# Inside an allocation
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AllocatedHost:
    """One node of the allocation and what Slurm gave this job on it."""

    name: str
    cpus: int
    gpus: int = 0
    tasks: int | None = None  # SLURM_TASKS_PER_NODE, when the allocation asked for tasks

    @property
    def device_kind(self) -> str:
        """ "gpu" where Slurm gave the job GPUs on the node, else "cpu" (its cores are the devices)."""
        return "gpu" if self.gpus else "cpu"

    @property
    def devices(self) -> int:
        """Ranks xover places here: one per GPU, else one per CPU core (as with -H)."""
        return self.gpus or self.cpus


@dataclass(frozen=True)
class Allocation:
    """The Slurm allocation this process runs in: its job id and nodes, and what this node sees of it."""

    job_id: str
    hosts: tuple[AllocatedHost, ...]
    partition: str | None = None
    this_node: str | None = None  # the node this process runs on, when it is one of the allocation's
    visible_gpus: tuple[str, ...] = ()  # GPUs Slurm made visible to this process (CUDA_VISIBLE_DEVICES)
    sources: tuple[str, ...] = field(default=(), compare=False)  # the variables the devices came from

    @property
    def total_devices(self) -> int:
        """The devices of every node together."""
        return sum(host.devices for host in self.hosts)

    def hosts_option(self, this_node_as: str | None = None, devices_per_host: int | None = None) -> str:
        """The allocation as xover's -H value ('n1:4,n2:4'). this_node_as renames the node this
        process runs on (e.g. 'localhost', so that launchers start its ranks without ssh);
        devices_per_host uses that many devices of every node (Slurm may grant more CPUs than asked
        for, e.g. both hyperthreads of a core), and fails when a node has fewer."""
        if devices_per_host is not None:
            short = [host for host in self.hosts if host.devices < devices_per_host]
            if devices_per_host < 1 or short:
                raise SlurmError(
                    f"Slurm allocation {self.job_id}: {devices_per_host} devices per host asked for, "
                    + (f"but {short[0].name} has {short[0].devices}" if short else "which is not positive")
                )
        return ",".join(
            f"{this_node_as if this_node_as and host.name == self.this_node else host.name}"
            f":{devices_per_host or host.devices}"
            for host in self.hosts
        )

    def describe(self) -> str:
        """One line for people: the allocation's hosts, devices and the variables they were read from."""
        kinds = {host.device_kind for host in self.hosts}
        unit = "GPUs" if kinds == {"gpu"} else "CPU cores" if kinds == {"cpu"} else "devices"
        where = f" in partition {self.partition}" if self.partition else ""
        return (
            f"Slurm allocation {self.job_id}{where}: {self.hosts_option()} "
            f"({self.total_devices} {unit} on {len(self.hosts)} node{'s' if len(self.hosts) != 1 else ''}; "
            f"from {', '.join(self.sources)})"
        )


def in_allocation(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process runs inside a Slurm job (salloc, sbatch, srun)."""
    environ = os.environ if environ is None else environ
    return bool(environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID"))


def _gpu_count(text: str) -> int:
    """'2', 'a100:2' or 'a100:1,v100:1' (Slurm's --gpus-per-node forms) -> GPUs per node."""
    total = 0
    for item in text.split(","):
        count = item.rsplit(":", 1)[-1].strip()
        if not count.isdigit():
            raise SlurmError(f"cannot read the GPU count '{text}'")
        total += int(count)
    return total


def _visible_gpus(environ: Mapping[str, str]) -> tuple[str, ...]:
    value = environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    if not value or value in ("NoDevFiles", "-1"):
        return ()
    return tuple(item.strip() for item in value.split(",") if item.strip())


def allocation(environ: Mapping[str, str] | None = None) -> Allocation:
    """The hosts and devices of the allocation this process runs in, from Slurm's variables.

    Nodes: SLURM_JOB_NODELIST expanded. GPUs per node: SLURM_GPUS_ON_NODE (set on the node running
    the batch script or a step), else SLURM_GPUS_PER_NODE (--gpus-per-node), else SLURM_JOB_GPUS or
    CUDA_VISIBLE_DEVICES (the devices Slurm made visible here, taken as every node's). CPU cores
    per node: SLURM_JOB_CPUS_PER_NODE (one count per node), else SLURM_CPUS_ON_NODE."""
    environ = os.environ if environ is None else environ
    if not in_allocation(environ):
        raise SlurmError(
            "not inside a Slurm allocation (no SLURM_JOB_ID): run under salloc or sbatch, or give the hosts with -H"
        )
    job_id = environ.get("SLURM_JOB_ID") or environ["SLURM_JOBID"]
    nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST")
    if not nodelist:
        raise SlurmError(f"Slurm job {job_id}: SLURM_JOB_NODELIST is not set, so its nodes are unknown")
    names = hostnames(nodelist)
    sources = ["SLURM_JOB_NODELIST"]

    if environ.get("SLURM_JOB_CPUS_PER_NODE"):
        cpus = expand_counts(environ["SLURM_JOB_CPUS_PER_NODE"])
        sources.append("SLURM_JOB_CPUS_PER_NODE")
    elif environ.get("SLURM_CPUS_ON_NODE", "").isdigit():
        cpus = [int(environ["SLURM_CPUS_ON_NODE"])]
        sources.append("SLURM_CPUS_ON_NODE")
    else:
        raise SlurmError(f"Slurm job {job_id}: neither SLURM_JOB_CPUS_PER_NODE nor SLURM_CPUS_ON_NODE is set")
    if len(cpus) == 1:
        cpus = cpus * len(names)
    if len(cpus) != len(names):
        raise SlurmError(
            f"Slurm job {job_id}: {len(names)} nodes ({nodelist}) but CPU counts for {len(cpus)} "
            f"(SLURM_JOB_CPUS_PER_NODE={environ.get('SLURM_JOB_CPUS_PER_NODE')})"
        )

    tasks: list[int | None] = [None] * len(names)
    if environ.get("SLURM_TASKS_PER_NODE"):
        counted = expand_counts(environ["SLURM_TASKS_PER_NODE"])
        if len(counted) == len(names):
            tasks = list(counted)

    visible = _visible_gpus(environ)
    if environ.get("SLURM_GPUS_ON_NODE", "").isdigit():
        gpus, source = int(environ["SLURM_GPUS_ON_NODE"]), "SLURM_GPUS_ON_NODE"
    elif environ.get("SLURM_GPUS_PER_NODE"):
        gpus, source = _gpu_count(environ["SLURM_GPUS_PER_NODE"]), "SLURM_GPUS_PER_NODE"
    elif environ.get("SLURM_JOB_GPUS"):
        gpus, source = len([g for g in environ["SLURM_JOB_GPUS"].split(",") if g.strip()]), "SLURM_JOB_GPUS"
    elif visible:
        gpus, source = len(visible), "CUDA_VISIBLE_DEVICES"
    else:
        gpus, source = 0, ""
    if source:
        sources.append(source)

    this_node = environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    hosts = tuple(AllocatedHost(name, cpus=c, gpus=gpus, tasks=t) for name, c, t in zip(names, cpus, tasks))
    return Allocation(
        job_id=job_id,
        hosts=hosts,
        partition=environ.get("SLURM_JOB_PARTITION"),
        this_node=this_node if this_node in names else None,
        visible_gpus=visible,
        sources=tuple(sources),
    )


# ---------------------------------------------------------------------------------------------
# Submitting and following jobs
# ---------------------------------------------------------------------------------------------


def _command(name: str) -> str:
    found = shutil.which(name)
    if not found:
        raise SlurmError(
            f"{name} was not found: install Slurm's client commands (Debian: slurm-client) "
            "or run xover where they are (a login node)"
        )
    return found


def _run(
    args: list[str], input: str | None = None, timeout_s: float = COMMAND_TIMEOUT_S
) -> subprocess.CompletedProcess:
    try:
        # surrogateescape: a value of the batch script that is not UTF-8 (a variable a job file passes) reaches
        # sbatch as the bytes it was (text=True raised UnicodeEncodeError, a traceback), as Slurm's answers do
        return subprocess.run(
            args, input=input, capture_output=True, encoding="utf-8", errors="surrogateescape", timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        raise SlurmError(
            f"`{shlex.join(args)}` did not answer in {timeout_s:.0f} s: is slurmctld running? (`scontrol ping`)",
            transient=True,
        ) from None


def _slurm_words(process: subprocess.CompletedProcess) -> str:
    """Slurm's own message, without the 'sbatch: error: ' prefixes."""
    lines = [
        re.sub(r"^\w+: (error|fatal): ", "", line).strip()
        for line in (process.stderr or process.stdout).strip().splitlines()
    ]
    return "; ".join(line for line in lines if line) or f"exit code {process.returncode}"


TIME_LIMIT = re.compile(
    r"(\d+)|(\d+):(\d{1,2})|(\d+):(\d{1,2}):(\d{1,2})|(\d+)-(\d+)(:\d{1,2}){0,2}|UNLIMITED|INFINITE"
)


def check_time_limit(value: str) -> str:
    """Slurm's time formats: MIN, MIN:SEC, H:MIN:SEC, DAYS-H, DAYS-H:MIN, DAYS-H:MIN:SEC."""
    if not TIME_LIMIT.fullmatch(value.strip()):
        raise SlurmError(
            f"time limit '{value}': use Slurm's forms MINUTES, H:MM:SS or DAYS-H:MM:SS (e.g. 90, 1:30:00, 2-00:00:00)"
        )
    return value.strip()


def batch_script(
    command: list[str], workdir: str | Path | None = None, environment: Mapping[str, str] | None = None
) -> str:
    """A batch script that runs `command` in `workdir` with `environment` added; its exit code is the job's.
    Every value is quoted; a variable whose name a shell cannot set is refused (its shell would run it)."""
    for key in environment or {}:
        if not SHELL_NAME.fullmatch(key):
            raise SlurmError(
                f"environment variable {key!r}: not a name a shell can export, and a Slurm job's batch script "
                "exports its variables: unset it (`env -u NAME xover ...`) and run again"
            )
    lines = ["#!/bin/bash", "set -e"]
    if workdir is not None:
        lines.append(f"cd {shlex.quote(str(workdir))}")
    lines += [f"export {key}={shlex.quote(value)}" for key, value in (environment or {}).items()]
    lines.append(f"exec {shlex.join(command)}")
    return "\n".join(lines) + "\n"


def name_problem(value: str) -> str | None:
    """Why sbatch would not take `value` (a --partition, an --account) as the one name it is, or None: empty
    (sbatch left it out: the default, without a word), or with a space, a control character, a byte that is not
    UTF-8 or a leading '-' (none of which a name Slurm lists has)."""
    if not value:
        return "empty: give a name, or leave the option out"
    if value.startswith("-") or any(char.isspace() or not char.isprintable() for char in value):
        return (
            "not one Slurm name (a space, a control character, a byte that is not UTF-8, a leading '-'): give it as "
            "`sinfo` or `sacctmgr` lists it"
        )
    return None


def output_path(folder: str | Path, pattern: str) -> str:
    """`pattern` (a file name with Slurm's filename patterns: %j, the job id) in `folder`, as sbatch's --output
    reads it: the folder's own '%' doubled ('%%' is a '%'; '%x' in a folder's name was the job's name). A folder
    with a backslash is refused: sbatch drops every backslash of such a path and reads none of its patterns."""
    text = str(folder)
    if "\\" in text:
        raise SlurmError(
            f"{text!r}: a backslash in the folder of a Slurm job's output, which sbatch drops (and then reads no "
            "%j): give XOVER_RESULTS a folder without one"
        )
    return f"{text.replace('%', '%%')}/{pattern}"


def submit(
    script: str | Path,
    nodes: int = 1,
    *,
    tasks_per_node: int | None = None,
    gpus_per_node: int | None = None,
    cpus_per_task: int | None = None,
    exclusive: bool = False,
    partition: str | None = None,
    account: str | None = None,
    time_limit: str | None = None,
    job_name: str | None = None,
    output: str | Path | None = None,
    workdir: str | Path | None = None,
    extra_args: list[str] | tuple[str, ...] = (),
) -> str:
    """Submit a batch script (its text, starting with #!, or a file) with `sbatch --parsable`;
    returns the job id. `output` may hold Slurm's patterns (%j: the job id)."""
    if nodes < 1:
        raise SlurmError(f"a Slurm job needs at least one node, not {nodes}")
    for name, value in (
        ("tasks per node", tasks_per_node),
        ("GPUs per node", gpus_per_node),
        ("CPUs per task", cpus_per_task),
    ):
        if value is not None and value < 1:
            raise SlurmError(f"{name} must be a positive integer, not {value}")
    options = {
        "--ntasks-per-node": tasks_per_node,
        "--gpus-per-node": gpus_per_node,
        "--cpus-per-task": cpus_per_task,
        "--partition": partition,
        "--account": account,
        "--time": time_limit and check_time_limit(time_limit),
        "--job-name": job_name,
        "--output": output,
        "--chdir": workdir,
    }
    text: str | None = None
    script_args: list[str] = []
    if isinstance(script, Path) or (isinstance(script, str) and not script.startswith("#!")):
        path = Path(script)
        if not path.is_file():  # checked before sbatch is looked for: bad input is the first thing to say
            raise SlurmError(f"batch script {path} does not exist (a script given as text must start with #!)")
        script_args.append(str(path))
    else:
        text = script  # sbatch reads the script from stdin
    args = [
        _command("sbatch"),
        "--parsable",
        f"--nodes={nodes}",
        *(["--exclusive"] if exclusive else []),
        *(f"{flag}={value}" for flag, value in options.items() if value),
        *extra_args,
        *script_args,
    ]
    try:
        process = _run(args, input=text)
    except SlurmError as lost:
        # Its answer was lost (sbatch killed at COMMAND_TIMEOUT_S), not necessarily the submission: a
        # job made anyway would run later into an experiment that has ended. It is looked up by name,
        # for the caller to cancel and record; never submitted again.
        found = jobs_named(job_name) if job_name else []
        if job_name and not found:  # a controller that was slow to answer may be slow to list it too
            time.sleep(LOOKUP_AGAIN_S)
            found = jobs_named(job_name)
        if found:
            raise LostSubmission(
                f"{lost}; it was submitted all the same as Slurm job {', '.join(found)}", found
            ) from None
        raise
    if process.returncode != 0:
        raise SlurmError(f"sbatch refused the job: {_slurm_words(process)}")
    job_id = process.stdout.strip().split(";")[0]  # 'ID' or 'ID;cluster'
    if not job_id.isdigit():
        raise SlurmError(f"sbatch answered '{process.stdout.strip()}' instead of a job id")
    return job_id


@dataclass(frozen=True)
class JobState:
    """A submitted job's state as Slurm last reported it."""

    job_id: str
    state: str  # Slurm's state name: PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, ...
    exit_code: int | None = None  # the batch script's exit status (None while it runs)
    signal: int = 0  # the signal that ended it, if one did
    reason: str | None = None
    nodes: str | None = None

    @property
    def finished(self) -> bool:
        """Whether Slurm is done with the job, however it ended."""
        return self.state in FINAL_STATES

    @property
    def succeeded(self) -> bool:
        """Whether the job completed with exit status 0."""
        return self.state == "COMPLETED" and self.exit_code == 0

    @property
    def returncode(self) -> int | None:
        """As subprocess reports it: the exit status, or minus the signal that ended the job; None
        while it runs, or when it ended without either (e.g. cancelled before it started)."""
        if self.exit_code is None:
            return None
        if self.exit_code:
            return self.exit_code
        if self.signal:
            return -self.signal
        return 0 if self.state == "COMPLETED" else None


def _field(record: str, name: str) -> str | None:
    match = re.search(rf"(?:^|\s){re.escape(name)}=(\S*)", record)
    return match.group(1) if match else None


def _exit_code(text: str | None) -> tuple[int | None, int]:
    if not text or ":" not in text:
        return None, 0
    code, _, sig = text.partition(":")
    return (int(code), int(sig)) if code.isdigit() and sig.isdigit() else (None, 0)


def job_state(job_id: str) -> JobState:
    """The job's state and exit code, from slurmctld (`scontrol show job -o`), or from accounting
    (`sacct`) once slurmctld has forgotten the job (after MinJobAge)."""
    process = _run([_command("scontrol"), "show", "job", "-o", str(job_id)])
    if process.returncode == 0 and process.stdout.strip():
        record = process.stdout.strip().splitlines()[0]
        state = (_field(record, "JobState") or "UNKNOWN").upper()
        code, sig = _exit_code(_field(record, "ExitCode"))
        if state not in FINAL_STATES:
            code, sig = None, 0
        reason = _field(record, "Reason")
        return JobState(
            str(job_id),
            state,
            code,
            sig,
            None if reason in (None, "None") else reason,
            _field(record, "NodeList") or None,
        )
    words = _slurm_words(process)
    if "invalid job id" not in words.lower():
        raise SlurmError(f"scontrol show job {job_id}: {words}", transient=bool(TRANSIENT_WORDS.search(words)))
    from_accounting = _accounted_state(str(job_id))
    if from_accounting is None:
        raise SlurmError(
            f"Slurm job {job_id} is not known to slurmctld (ended long ago, or never existed) "
            "and there is no accounting (sacct) to ask"
        )
    return from_accounting


def _accounted_state(job_id: str) -> JobState | None:
    sacct = shutil.which("sacct")
    if not sacct:
        return None
    process = _run([sacct, "-j", job_id, "-X", "-n", "-P", "-o", "State,ExitCode,NodeList"])
    line = process.stdout.strip().splitlines()[0] if process.returncode == 0 and process.stdout.strip() else ""
    if not line:
        return None
    state, exit_text, nodes = (line.split("|") + ["", "", ""])[:3]
    state = state.split()[0].upper() if state.strip() else "UNKNOWN"  # 'CANCELLED by 0' -> CANCELLED
    code, sig = _exit_code(exit_text)
    return JobState(job_id, state, code if state in FINAL_STATES else None, sig, None, nodes or None)


class LostSubmission(SlurmError):
    """sbatch's answer was lost, but the job was made: `job_ids` (by its name), to cancel and record."""

    def __init__(self, message: str, job_ids: list[str]) -> None:
        super().__init__(message)
        self.job_ids = job_ids


LOOKUP_AGAIN_S = 5.0  # a lost submission not listed yet is looked for once more after this
LOOKUP_RETRY_S = 60.0  # how long a lost submission is looked for while the controller does not answer


def jobs_named(name: str, retry_s: float = LOOKUP_RETRY_S) -> list[str]:
    """This user's jobs that Slurm knows by `name` (squeue), pending or running; a controller that
    does not answer is asked again for up to `retry_s`; one that still does not: none found."""
    import getpass

    def once() -> list[str]:
        process = _run(
            [_command("squeue"), "--noheader", "--format=%i", f"--name={name}", f"--user={getpass.getuser()}"]
        )
        if process.returncode != 0:
            words = _slurm_words(process)
            raise SlurmError(f"squeue: {words}", transient=bool(TRANSIENT_WORDS.search(words)))
        return [line.strip().split(";")[0] for line in process.stdout.splitlines() if line.strip().isdigit()]

    try:
        return retrying(once, limit_s=retry_s)
    except SlurmError:
        return []


def cancel_command(job_id: str) -> list[str]:
    """The command that ends the job (what a reaper runs should its xover die)."""
    return [_command("scancel"), str(job_id)]


def cancel(job_id: str, signal_name: str | None = None, retry_s: float | None = None) -> None:
    """End the job (scancel), or only send it a signal (e.g. 'INT'). A job that already ended is fine.
    A controller that does not answer is asked again for up to `retry_s` (TRANSIENT_RETRY_S)."""
    args = [_command("scancel")]
    if signal_name:
        args += ["--signal", signal_name, "--full"]

    def once() -> None:
        process = _run(args + [str(job_id)])
        words = _slurm_words(process) if process.returncode != 0 or process.stderr.strip() else ""
        if process.returncode != 0 and "already completing or completed" not in words.lower():
            raise SlurmError(f"scancel {job_id}: {words}", transient=bool(TRANSIENT_WORDS.search(words)))

    retrying(once, limit_s=retry_s)  # cancelling twice is harmless


def wait_for(
    job_id: str,
    poll_s: float = 1.0,
    timeout_s: float | None = None,
    on_change: Callable[[JobState], None] | None = None,
    cancel_on_interrupt: bool = True,
) -> JobState:
    """Follow the job until it ends; returns its final state. `on_change` sees every new state.
    Ctrl-C (or SIGTERM turned into KeyboardInterrupt) while waiting cancels the job, waits until
    Slurm says it ended, and re-raises, so that no job outlives the xover that submitted it."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    last: JobState | None = None
    try:
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            current = retrying(
                lambda: job_state(job_id), limit_s=None if left is None else min(left, TRANSIENT_RETRY_S)
            )
            if on_change is not None and (last is None or current.state != last.state):
                on_change(current)
            last = current
            if current.finished:
                return current
            if deadline is not None and time.monotonic() > deadline:
                raise SlurmError(f"Slurm job {job_id} is still {current.state} after {timeout_s:.0f} s")
            time.sleep(poll_s)
    except KeyboardInterrupt:
        if cancel_on_interrupt:
            # a second Ctrl-C must not leave the job running either
            previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
            try:
                cancel(job_id, retry_s=30)
                end = time.monotonic() + 30
                while time.monotonic() < end and not retrying(lambda: job_state(job_id), limit_s=10).finished:
                    time.sleep(0.2)
            finally:
                signal.signal(signal.SIGINT, previous)
        raise


# ---------------------------------------------------------------------------------------------
# For `xover doctor`
# ---------------------------------------------------------------------------------------------


@dataclass
class SlurmDiagnosis:
    """What `xover doctor` found of Slurm: its commands, its controller, and the allocation, if any."""

    commands: dict[str, str | None]  # name -> path, or None when missing
    controller: str | None  # `scontrol ping`'s answer, when scontrol exists
    allocation: Allocation | None
    allocation_error: str | None = None

    @property
    def usable(self) -> bool:
        """Jobs can be submitted from here: the commands exist and slurmctld answers."""
        return all(self.commands.get(name) for name in ("sbatch", "scontrol", "scancel")) and bool(
            self.controller and " is UP" in self.controller
        )

    def summary(self) -> str:
        """One line for `xover doctor`: the commands found, the controller's answer and the allocation."""
        found = [name for name, path in self.commands.items() if path]
        if not found:
            return "not installed (no sbatch, scontrol, ... on PATH)"
        missing = [name for name, path in self.commands.items() if not path]
        parts = [f"commands: {', '.join(found)}" + (f" (missing: {', '.join(missing)})" if missing else "")]
        if self.controller:
            parts.append(f"controller: {self.controller}")
        if self.allocation is not None:
            parts.append(f"inside {self.allocation.describe()}")
        elif self.allocation_error:
            parts.append(f"inside a Slurm job, but: {self.allocation_error}")
        else:
            parts.append("not inside an allocation")
        return "; ".join(parts)

    def to_dict(self) -> dict:
        """The diagnosis as `xover doctor --json` writes it."""
        alloc = self.allocation
        return {
            "commands": self.commands,
            "controller": self.controller,
            "usable": self.usable,
            "in_allocation": alloc is not None or self.allocation_error is not None,
            "allocation": None
            if alloc is None
            else {
                "job_id": alloc.job_id,
                "hosts": alloc.hosts_option(),
                "partition": alloc.partition,
                "devices": alloc.total_devices,
                "visible_gpus": list(alloc.visible_gpus),
            },
            "allocation_error": self.allocation_error,
        }


def diagnose_slurm(environ: Mapping[str, str] | None = None) -> SlurmDiagnosis:
    """Which Slurm commands are here, whether slurmctld answers, whether this runs inside an allocation."""
    environ = os.environ if environ is None else environ
    commands = {name: shutil.which(name) for name in COMMANDS}
    controller = None
    if commands["scontrol"]:
        try:
            process = subprocess.run([commands["scontrol"], "ping"], capture_output=True, text=True, timeout=15)
            answer = process.stdout.strip()
            if not answer:  # no configuration or no slurmctld: Slurm says so at length, the last line suffices
                lines = _slurm_words(process).splitlines() or ["no answer"]
                answer = f"not reachable ({lines[-1].strip()})"
            controller = " ".join(answer.split())
        except (OSError, subprocess.TimeoutExpired):
            controller = "no answer from `scontrol ping` in 15 s"
    alloc, error = None, None
    if in_allocation(environ):
        try:
            alloc = allocation(environ)
        except SlurmError as problem:
            error = str(problem)
    return SlurmDiagnosis(commands, controller, alloc, error)
