"""`torchrun` command lines: torch.distributed's own launcher (c10d rendezvous).

One machine: `torchrun --standalone`. Several hosts (`-H h1:2,h2:2`): one torchrun per node, each a
process xover supervises itself (a node that fails fails the job; Ctrl-C stops every node), with
--nnodes / --node-rank and one c10d rendezvous endpoint on the first host, on a port found free
there. Other hosts are reached with `ssh -tt`: when xover stops the ssh client, the remote torchrun
gets SIGHUP and stops its workers.

The variables a remote node needs (XOVER_*, PYTHONPATH, ...) are not written on its command line,
which every user of either host can read: they go over ssh's stdin into a file of the node's own
(mode 0600, made by mkstemp there), which the node's command reads, removes, and then runs torchrun.
The store's URL is never sent: workers do not open the store.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

from ..errors import TimedOut, XoverError
from ..settings import HOST_VARIABLE, SECRET_VARIABLES
from . import find_launcher
from .hosts import is_local, parse_hosts, ssh_command

FORWARDED_PREFIXES = ("XOVER_", "HOROVOD_", "PYTHONPATH", "PYTHONUNBUFFERED", "OMP_", "GLOO_")  # what ssh carries over

# On the other host: keep the variables read from stdin in a new file only its user may read; print its path.
_RECEIVE = ("import os, sys, tempfile\n"
            "fd, path = tempfile.mkstemp(prefix='xover-env-')\n"
            "with os.fdopen(fd, 'wb') as kept:\n"
            "    kept.write(sys.stdin.buffer.read())\n"
            "print(path)\n")
# ... then, as the node's command: read them, remove the file, and become the command that follows.
_APPLY = ("import json, os, sys\n"
          "with open(sys.argv[1]) as kept:\n"
          "    os.environ.update(json.load(kept))\n"
          "os.unlink(sys.argv[1])\n"
          "os.execvp(sys.argv[2], sys.argv[2:])\n")


def torchrun_path() -> str:
    return find_launcher("torchrun", "torch is not installed in this environment (make setup)")


def _worker_module(spec_path: Path) -> list[str]:
    return ["-m", "xover.runtime.worker", str(spec_path)]


def _output_options(log_dir: Path) -> list[str]:
    # each rank's output kept under log_dir, and relayed prefixed with [defaultN] (the metrics parser skips it)
    return ["--log-dir", str(log_dir), "--redirects", "3", "--tee", "3"]


SSH_CALL_TIMEOUT_S = 60.0  # for one short ssh call (a port, the settings)


def _within(deadline: float | None) -> float:
    """Seconds a short ssh call may take: SSH_CALL_TIMEOUT_S, less if the run's --timeout comes first."""
    if deadline is None:
        return SSH_CALL_TIMEOUT_S
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimedOut()
    return min(SSH_CALL_TIMEOUT_S, left)


def free_port(host: str, remote_prefix: list[str], deadline: float | None = None) -> int:
    """A port free on `host` now (the rendezvous runs there, not necessarily here)."""
    if is_local(host):
        with socket.socket() as probe:
            probe.bind(("", 0))
            return probe.getsockname()[1]
    code = "import socket; s = socket.socket(); s.bind(('', 0)); print(s.getsockname()[1])"
    try:
        timeout_s = _within(deadline)
        out = subprocess.run([*remote_prefix, *ssh_command(host, sys.executable, "-c", shlex.quote(code))],
                             capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        _within(deadline)  # TimedOut if it was the run's --timeout
        raise XoverError(f"-H: {host} did not answer over ssh within {timeout_s:.0f} s; "
                         f"check that `ssh {host} true` answers without a prompt") from None
    if out.returncode != 0 or not out.stdout.strip().isdigit():
        raise XoverError(f"-H: cannot reach {host} over ssh to find a rendezvous port: "
                         f"{(out.stderr.strip().splitlines() or ['no output'])[-1]}")
    return int(out.stdout.strip())


def send_environment(host: str, variables: dict[str, str], remote_prefix: list[str],
                     deadline: float | None = None) -> str:
    """Put `variables` into a file of mode 0600 on `host` (over ssh's stdin, not a command line); its path."""
    try:
        timeout_s = _within(deadline)
        out = subprocess.run([*remote_prefix, *ssh_command(host, shlex.quote(sys.executable), "-c", shlex.quote(_RECEIVE))],
                             input=json.dumps(variables), capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _within(deadline)
        raise XoverError(f"-H: {host} did not answer over ssh within {timeout_s:.0f} s; "
                         f"check that `ssh {host} true` answers without a prompt") from None
    path = out.stdout.strip()
    if out.returncode != 0 or not path.startswith("/") or "\n" in path:
        raise XoverError(f"-H: cannot reach {host} over ssh to hand its node the run's settings: "
                         f"{(out.stderr.strip().splitlines() or ['no output'])[-1]}")
    return path


def torchrun_commands(np: int, hosts: str, log_dir: Path, spec_path: Path, env: dict[str, str] | None = None,
                      program: list[str] | None = None, remote_prefix: list[str] | None = None,
                      deadline: float | None = None, forward: tuple[str, ...] = ()) -> list[list[str]]:
    """torchrun for xover's worker on the spec, or for `program` (a module and its arguments, after -m):
    one command on one host, one per node otherwise. The ssh calls it makes for other hosts end by
    `deadline` (time.monotonic(), the run's --timeout) with TimedOut. `forward`: variables of `env`
    other nodes get too (a job file's own)."""
    program = program or _worker_module(spec_path)
    nodes = parse_hosts(hosts)
    if len(nodes) == 1 and is_local(nodes[0][0]):
        return [[torchrun_path(), "--standalone", f"--nproc-per-node={np}", *_output_options(log_dir), *program]]
    slots = {count for _, count in nodes}
    if len(slots) != 1 or np != sum(count for _, count in nodes):
        raise XoverError(f"-H {hosts} with --engine torch: torchrun starts the same number of ranks on every "
                         f"node, so every host needs the same slots and np ({np}) must be their sum")
    first = nodes[0][0]
    # Every node must reach the endpoint by this name: this machine's hosts are spelt `localhost`
    # (hosts.py), which on another node is that node, so it is named by its hostname instead.
    endpoint = f"{socket.gethostname() if is_local(first) else first}:{free_port(first, remote_prefix or [], *([deadline] if deadline is not None else []))}"
    forwarded = {k: v for k, v in (env or os.environ).items()
                 if (k.startswith(FORWARDED_PREFIXES) or k in forward) and k not in SECRET_VARIABLES}
    commands = []
    for node_rank, (host, count) in enumerate(nodes):
        command = [torchrun_path(), f"--nnodes={len(nodes)}", f"--node-rank={node_rank}", f"--nproc-per-node={count}",
                   "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}", f"--rdzv-id={spec_path.parent.name}",
                   *_output_options(log_dir / f"node{node_rank}"), *program]
        # a worker knows which host it is on (emulated hosts share one)
        if is_local(host):  # the launcher's own environment (`env`) and where it is
            commands.append(["env", f"{HOST_VARIABLE}={host}", *command])
        else:
            kept = send_environment(host, {**forwarded, HOST_VARIABLE: host}, remote_prefix or [],
                                    *([deadline] if deadline is not None else []))
            remote = (f"cd {shlex.quote(os.getcwd())} && "
                      f"{shlex.join([sys.executable, '-c', _APPLY, kept, *command])}")
            commands.append(ssh_command(host, remote, tty=True))
    return commands
