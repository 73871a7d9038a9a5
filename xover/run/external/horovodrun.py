"""`horovodrun` command lines: the real launcher, Gloo on CPU, NCCL on GPU (Horovod picks it).

The interface of a job on one host that is not this machine is named (`--network-interfaces`).
horovodrun 0.28.1 finds the interfaces its workers share by having each host probe the next one's
addresses; with a single remote host that host probes itself, so its loopback passes as "routed".
The rendezvous address workers are given is then the launching machine's address on whichever of the
found interfaces a Python set yields first, which depends on the process's string hashing: about
half of such runs gave the worker 127.0.0.1 of the launching machine, and the worker's Gloo
rendezvous failed with "HTTP GET request failed too many times" (one-rank jobs and one-host
profiles on the emulated cluster). With two hosts or more the probes cross hosts and loopback
fails them, so nothing is named there.
"""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Mapping
from pathlib import Path

from ...errors import XoverError
from ...hosts import SHELL_NAME, after_variables, is_local, parse_hosts
from ...settings import METRIC_TOKEN_VARIABLE
from . import find_launcher
from .torchrun import hand_over

# horovodrun writes every variable of its environment into each rank's command line (`K=V ... python
# ...`, through ssh for another host), which every user of either host can read (`ps`). So it gets
# these, not the caller's whole environment: no PGPASSWORD, no AWS_*, no tokens. (torchrun's nodes get
# theirs the same way: run/external/torchrun.py.) What a rank needs that is secret goes another way:
# see PRIVATE_VARIABLES.
FORWARDED_PREFIXES = (
    "XOVER_",
    "HOROVOD_",
    "PYTHON",
    "OMP_",
    "GLOO_",
    "NCCL_",
    "CUDA_",
    "TORCH_",
    "MKL_",
    "KMP_",
    "LC_",
)
FORWARDED_NAMES = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TERM",
        "SHELL",
        "TMPDIR",
        "LD_LIBRARY_PATH",
        "VIRTUAL_ENV",
        "SSH_AUTH_SOCK",
        "NVIDIA_VISIBLE_DEVICES",
        "XDG_CACHE_HOME",
        "XDG_RUNTIME_DIR",
        "XDG_CONFIG_HOME",
    }
)


# A rank's variables whose values no command line may show: the run's metric token (a record without it
# is ignored, so whoever reads it can forge the run's figures), and those the caller names (a job file's
# own variables). They stay out of horovodrun's environment. Each host that gets ranks gets them in a
# file of its own instead (mode 0600, made there under a name chosen here: over ssh's stdin for another host, as
# torchrun's nodes get theirs), and each rank's command reads its host's file (by HOROVOD_HOSTNAME) into
# its environment before it becomes the program; the last rank of the host to read it
# (HOROVOD_LOCAL_SIZE) removes it. Only the files' paths are on the command line.
PRIVATE_VARIABLES = (METRIC_TOKEN_VARIABLE,)
_APPLY_PRIVATE = (
    "import fcntl, json, os, stat, sys\n"
    "host = os.environ.get('HOROVOD_HOSTNAME', '')\n"
    "path = json.loads(sys.argv[1]).get(host)\n"
    "if path is None:\n"
    "    sys.exit(f'xover: no file of private variables for host {host!r}')\n"
    "fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)\n"
    "info = os.fstat(fd)\n"
    "if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:\n"
    "    sys.exit(f'xover: {path} is not a private file of this user: refused')\n"
    "with open(fd, 'r+') as kept:\n"
    "    fcntl.flock(kept, fcntl.LOCK_EX)\n"
    "    content = json.load(kept)\n"
    "    content['read'] += 1\n"
    "    if content['read'] >= int(os.environ.get('HOROVOD_LOCAL_SIZE', '1')):\n"
    "        os.unlink(path)\n"
    "    else:\n"
    "        kept.seek(0)\n"
    "        kept.truncate()\n"
    "        json.dump(content, kept)\n"
    "os.environ.update(content['variables'])\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


def private_variables(env: Mapping[str, str], names: tuple[str, ...] = ()) -> dict[str, str]:
    """What of a rank's environment `env` goes to it through a private file, not horovodrun's command
    lines: PRIVATE_VARIABLES and `names` (a job file's own variables)."""
    return {name: env[name] for name in (*PRIVATE_VARIABLES, *names) if name in env}


def forwarded(name: str) -> bool:
    """Whether horovodrun gets the variable `name` of xover's environment (the allow-list above)."""
    return name.startswith(FORWARDED_PREFIXES) or name in FORWARDED_NAMES


def check_forwarded_names(env: Mapping[str, str]) -> None:
    """Refuse, with one line, a variable of `env` that horovodrun would forward (XOVER_*, OMP_*, ...) whose
    name a shell cannot set: its ranks' shell would run what the name holds."""
    for name in env:
        if forwarded(name) and not SHELL_NAME.fullmatch(name):
            raise XoverError(
                f"environment variable {name!r}: not a name a shell can set (letters, digits and '_', not starting "
                "with a digit), and horovodrun and a Slurm job's script pass such variables through a shell: "
                "unset it (`env -u NAME xover ...`) and run again"
            )


def horovodrun_env(env: Mapping[str, str], secret: tuple[str, ...] = ()) -> dict[str, str]:
    """What horovodrun's own environment may hold (it forwards all of it): the allow-list above, never
    PRIVATE_VARIABLES nor those in `secret` (the store's URL, a job file's own variables). A name a shell
    cannot set is refused (check_forwarded_names)."""
    check_forwarded_names(env)
    return {
        name: value
        for name, value in env.items()
        if forwarded(name) and name not in secret and name not in PRIVATE_VARIABLES
    }


def private_files(
    np: int,
    hosts: str,
    variables: Mapping[str, str],
    remote_prefix: list[str],
    deadline: float | None = None,
    folder: Path | None = None,
) -> dict[str, str]:
    """A file of `variables` (mode 0600, mkstemp's) on each host of `hosts` that gets some of the `np` ranks,
    for them to read: host name as in -H -> the file's path on that host (this machine's in `folder`, the run's
    own, where ranks that never started leave it to the run's end: torchrun.remove_kept). horovodrun fills the
    hosts' slots in their order, so a host past the last rank gets none, and no file that nobody would remove."""
    content = {"variables": dict(variables), "read": 0}
    getting: list[str] = []
    left = np
    for host, slots in parse_hosts(hosts):
        if left <= 0:
            break
        left -= slots
        if host not in getting:
            getting.append(host)
    return dict(zip(getting, hand_over([(host, content) for host in getting], remote_prefix, deadline, folder)))


def with_private_variables(program: list[str], files: Mapping[str, str]) -> list[str]:
    """`program`, run by each rank after its host's file of private variables is read into its environment."""
    return [sys.executable, "-I", "-S", "-c", _APPLY_PRIVATE, json.dumps(files, separators=(",", ":")), *program]


def horovodrun_path() -> str:
    """The horovodrun program, or one line saying how to get it."""
    return find_launcher("horovodrun", "run `make setup` (it builds Horovod), then `xover doctor`")


def horovodrun_launcher() -> list[str]:
    """horovodrun itself, or where it is this Python's own, its entry point through
    xover.run.external.horovodrun_main (the same launcher, its Gloo build check answered once per installation)."""
    path = horovodrun_path()
    if Path(path).parent == Path(sys.executable).parent:
        return [sys.executable, "-m", "xover.run.external.horovodrun_main"]
    return [path]


def worker_command(spec_path: Path) -> list[str]:
    """What each rank runs for a built-in model: the worker, on the job's spec file."""
    return [sys.executable, "-u", "-m", "xover.runtime.worker", str(spec_path)]


def route_interface(host: str) -> str | None:
    """The interface (not loopback) this machine reaches `host` through, from the kernel's route."""
    try:
        import psutil

        address = socket.getaddrinfo(host, None, socket.AF_INET)[0][4][0]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((address, 9))  # UDP: picks the route and source address, sends nothing
            source = probe.getsockname()[0]
        for name, addresses in psutil.net_if_addrs().items():
            if any(a.family == socket.AF_INET and a.address == source for a in addresses):
                return None if source.startswith("127.") else name
    except (OSError, IndexError, ImportError):
        pass
    return None


def network_interface_options(hosts: str, interfaces: dict[str, str] | None = None) -> list[str]:
    """`--network-interfaces NIC` for a job on one host that is not this machine, else nothing: the
    host's interface as `interfaces` names it (an emulated host's, xover.emulation.cluster), else the
    one this machine routes to it through."""
    names = [name for name, _ in parse_hosts(hosts)]
    if len(names) != 1 or is_local(names[0]):
        return []
    nic = (interfaces or {}).get(names[0]) or route_interface(names[0])
    return ["--network-interfaces", nic] if nic else []


def horovodrun_command(
    np: int,
    hosts: str,
    log_dir: Path,
    spec_path: Path,
    start_timeout_s: int = 120,
    program: list[str] | None = None,
    interfaces: dict[str, str] | None = None,
    private: Mapping[str, str] | None = None,
    remote_prefix: list[str] | None = None,
    deadline: float | None = None,
) -> list[str]:
    """The horovodrun command line of a job: its ranks on `hosts` over Gloo, each rank's output in `log_dir`,
    running `program` (else the worker). `private`: variables the ranks get through a file on each host,
    never on a command line (private_files: over ssh, behind `remote_prefix`, by `deadline` for other hosts)."""
    # horovodrun 0.28.1 crashes on --output-filename with one rank (log10(0) padding its rank number);
    # a single rank's output is in the launcher's log anyway.
    per_rank_logs = ["--output-filename", str(log_dir)] if np > 1 else []
    program = program or worker_command(spec_path)
    if private:
        kept = private_files(np, hosts, private, remote_prefix or [], deadline, folder=log_dir)
        program = with_private_variables(program, kept)
    program = after_variables(program)  # horovodrun's rank line is `env K=V ... PROGRAM`
    return [
        *horovodrun_launcher(),
        "-np",
        str(np),
        "-H",
        hosts,
        "--gloo",
        "--start-timeout",
        str(start_timeout_s),
        *network_interface_options(hosts, interfaces),
        *per_rank_logs,
        *program,
    ]
