"""`torchrun` command lines: torch.distributed's own launcher (c10d rendezvous).

One machine: `torchrun --standalone`. Several hosts (`-H h1:2,h2:2`): one torchrun per node, each a
process xover supervises itself (a node that fails fails the job; Ctrl-C stops every node), with
--nnodes / --node-rank and one c10d rendezvous store on the first host. Other hosts are reached with
`ssh -tt`: when xover stops the ssh client, the remote torchrun gets SIGHUP and stops its workers.

The rendezvous (docs/security.md, *torchrun across hosts*): torch's c10d store has no authentication
and its agents unpickle what the rendezvous key holds, so
* the rendezvous id is random and the endpoint and id reach torchrun as `PET_RDZV_ID` /
  `PET_RDZV_ENDPOINT` (torchrun reads any option from `PET_<NAME>`), never on a command line;
* node 0 is the store's host (`PET_RDZV_CONF=is_host=1`, the others `is_host=0`: a node that cannot
  host it fails instead of becoming a client of whatever holds the port);
* the store listens on the address the job uses, on a socket that is never free: a holder on the
  first host binds and listens on it at once and hands the listening socket (SCM_RIGHTS, over a Unix
  socket in a folder of mode 0700) to node 0, which serves the store on it (`master_listen_fd`) and
  runs torchrun in the same process, whose rendezvous reuses that server (`multi_tenant`).

The variables a remote node needs (XOVER_*, PYTHONPATH, ...) are not written on its command line,
which every user of either host can read: they go over ssh's stdin into a file of the node's own
(mode 0600, made there under a name chosen here: O_EXCL, O_NOFOLLOW), which the node's command reads,
removes, and then runs torchrun.
A node on this machine gets its file in the run's own folder of rank logs (mode 0700), not in /tmp: a node
that never started (a run stopped, timed out or failed first) leaves it there, and the run's end removes it
(`remove_kept`); in /tmp they were left behind for good. Another host's file is in its temporary folder, under
a name chosen here before it is sent (`take_sent`): the unit's end removes there those no node read, in the
ssh call that already stops the unit's processes on that host (processes.sweep), so no host keeps one however
the run ends, and the happy path costs no ssh call more.
The store's URL is never sent: workers do not open the store.
"""

from __future__ import annotations

import json
import os
import secrets
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ...errors import TimedOut, XoverError
from ...hosts import command_on, is_local, parse_hosts
from ...settings import HOST_VARIABLE, KEPT_PREFIX, RDZV_HANDOFF_VARIABLE, SECRET_VARIABLES
from . import find_launcher

FORWARDED_PREFIXES = ("XOVER_", "HOROVOD_", "PYTHONPATH", "PYTHONUNBUFFERED", "OMP_", "GLOO_")  # what ssh carries over

# On the other host: keep the variables read from stdin in a new file only its user may read, named argv[1]
# (chosen by xover, which removes it at the unit's end if no node read it) in the temporary folder; print its
# path. All of stdin is read, and must be whole, before the file is made: a send cut short leaves nothing.
_RECEIVE = (
    "import json, os, sys, tempfile\n"
    "content = sys.stdin.buffer.read()\n"
    "json.loads(content)\n"
    "path = os.path.join(tempfile.gettempdir(), sys.argv[1])\n"
    "fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)\n"
    "with os.fdopen(fd, 'wb') as kept:\n"
    "    kept.write(content)\n"
    "print(path)\n"
)
# ... then, as the node's command: read them, remove the file, and become the command that follows.
_APPLY = (
    "import json, os, sys\n"
    "with open(sys.argv[1]) as kept:\n"
    "    os.environ.update(json.load(kept))\n"
    "os.unlink(sys.argv[1])\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


# On the first host: listen on the address the job uses (the endpoint's name resolved there; a name that
# resolves to a loopback address there, as Debian's 127.0.1.1 does, takes the address this host reaches
# the second host from), on a port the kernel picks, and never close it before node 0 has it: print
# "PORT ADDRESS HANDOFF", then give the listening socket to the first process of this user's that
# connects to HANDOFF (a Unix socket in a new folder of mode 0700), and end.
_HOLD = (
    "import os, socket, sys, tempfile\n"
    "name, peer, wait_s = sys.argv[1], sys.argv[2], float(sys.argv[3])\n"
    "def loopback(address):\n"
    "    return address.startswith('127.') or address == '::1'\n"
    "infos = socket.getaddrinfo(name, None, 0, socket.SOCK_STREAM)\n"
    "family, address = next(((f, a[0]) for f, _, _, _, a in infos if not loopback(a[0])),\n"
    "                       (infos[0][0], infos[0][4][0]))\n"
    "if loopback(address) and peer:\n"
    "    try:\n"
    "        route = socket.socket(family, socket.SOCK_DGRAM)\n"
    "        route.connect((socket.getaddrinfo(peer, 9, family)[0][4][0], 9))\n"
    "        address = route.getsockname()[0]\n"
    "    except OSError:\n"
    "        pass\n"
    "listener = socket.socket(family, socket.SOCK_STREAM)\n"
    "listener.bind((address, 0))\n"
    "listener.listen(128)\n"
    "folder = tempfile.mkdtemp(prefix='xover-rdzv-')\n"
    "handoff = os.path.join(folder, 'socket')\n"
    "door = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
    "door.bind(handoff)\n"
    "door.listen(4)\n"
    "door.settimeout(wait_s)\n"
    "print(listener.getsockname()[1], address, handoff, flush=True)  # getsockname: the port\n"
    "try:\n"
    "    while True:\n"
    "        conn, _ = door.accept()\n"
    "        uid = int.from_bytes(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)[4:8], sys.byteorder)\n"
    "        if uid == os.geteuid():\n"
    "            socket.send_fds(conn, [b'L'], [listener.fileno()])\n"
    "            break\n"
    "        conn.close()\n"
    "except OSError:\n"
    "    pass  # nobody came for it within wait_s: node 0 never started\n"
    "finally:\n"
    "    os.unlink(handoff)\n"
    "    os.rmdir(folder)\n"
)
# Node 0's command: its settings as _APPLY reads them, then the listening socket from the holder, the
# store served on it, and torchrun in this process (its rendezvous reuses the store: multi_tenant).
_SERVE = (
    "import json, os, socket, sys\n"
    "with open(sys.argv[1]) as kept:\n"
    "    os.environ.update(json.load(kept))\n"
    "os.unlink(sys.argv[1])\n"
    "door = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
    "door.connect(os.environ.pop('XOVER_RDZV_HANDOFF'))\n"
    "_, fds, _, _ = socket.recv_fds(door, 1, 1)\n"
    "door.close()\n"
    "listener = socket.socket(fileno=fds[0])\n"
    "from datetime import timedelta\n"
    "from torch.distributed import TCPStore\n"
    "store = TCPStore(listener.getsockname()[0], listener.getsockname()[1], is_master=True, multi_tenant=True,\n"
    "                 master_listen_fd=listener.fileno(), wait_for_workers=False, timeout=timedelta(seconds=60))\n"
    "from torch.distributed.run import main\n"
    "sys.argv = ['torchrun', *sys.argv[2:]]\n"
    "main()\n"
)
HANDOFF_VARIABLE = RDZV_HANDOFF_VARIABLE
HOLD_S = 600.0  # how long the holder keeps the store's socket for node 0 (which starts seconds later)


def torchrun_path() -> str:
    """The torchrun program, or one line saying how to get it."""
    return find_launcher("torchrun", "torch is not installed in this environment (make setup)")


def _worker_module(spec_path: Path) -> list[str]:
    return ["-m", "xover.runtime.worker", str(spec_path)]


def _output_options(log_dir: Path) -> list[str]:
    # each rank's output kept under log_dir, and relayed prefixed with [defaultN] (the metrics parser skips it)
    return ["--log-dir", str(log_dir), "--redirects", "3", "--tee", "3"]


SSH_CALL_TIMEOUT_S = 60.0  # for one short ssh call (the rendezvous holder's answer, the settings)


def _within(deadline: float | None) -> float:
    """Seconds a short ssh call may take: SSH_CALL_TIMEOUT_S, less if the run's --timeout comes first."""
    if deadline is None:
        return SSH_CALL_TIMEOUT_S
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimedOut()
    return min(SSH_CALL_TIMEOUT_S, left)


@dataclass(frozen=True)
class Rendezvous:
    """The store's socket on the first host, held there until node 0 takes it from `handoff`."""

    port: int
    address: str  # where it listens: the address the job uses on the first host
    handoff: str  # a Unix socket on the first host (in a folder of mode 0700) that hands it over

    @property
    def endpoint(self) -> str:
        """HOST:PORT for torchrun's --rdzv-endpoint (an IPv6 address in brackets)."""
        return f"[{self.address}]:{self.port}" if ":" in self.address else f"{self.address}:{self.port}"


def reserve_rendezvous(
    host: str, name: str, peer: str, remote_prefix: list[str], deadline: float | None = None
) -> Rendezvous:
    """A socket listening on `host` (at `name`'s address there) for node 0's store, held by a process
    on that host until node 0 takes it: the port is never free for another user to take."""
    hold = [sys.executable, "-c", _HOLD, name, peer, str(HOLD_S)]
    command = command_on(host, hold, remote_prefix=remote_prefix)
    timeout_s = _within(deadline)
    holder = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert holder.stdout is not None  # piped
    ready, _, _ = select.select([holder.stdout], [], [], timeout_s)
    line = holder.stdout.readline() if ready else ""
    fields = line.split()
    if len(fields) != 3 or not fields[0].isdigit() or not fields[2].startswith("/"):
        holder.kill()
        _, error = holder.communicate()
        if not ready:
            _within(deadline)  # TimedOut if it was the run's --timeout
            raise XoverError(
                f"-H: {host} did not answer over ssh within {timeout_s:.0f} s; "
                f"check that `ssh {host} true` answers without a prompt"
            )
        raise XoverError(
            f"-H: cannot reach {host} over ssh to open the rendezvous: "
            f"{(error.strip().splitlines() or ['no output'])[-1]}"
        )
    # it ends once node 0 took the socket (or after HOLD_S); reaped here, its output read to the end
    threading.Thread(target=holder.communicate, daemon=True).start()
    return Rendezvous(int(fields[0]), fields[1], fields[2])


def keep_here(variables: Mapping[str, object], folder: Path | None = None) -> str:
    """`variables` (as JSON) in a new file of mode 0600 on this machine (for a node here, as
    send_environment there), in `folder` (the run's, which `remove_kept` empties at its end), else the
    temporary folder."""
    import tempfile

    if folder is not None:
        folder = folder.resolve()
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, path = tempfile.mkstemp(prefix=KEPT_PREFIX, dir=folder)
    with os.fdopen(fd, "w") as kept:
        json.dump(variables, kept)
    return path


def remove_kept(folder: Path) -> None:
    """Remove the files of settings `keep_here` made in `folder` that no node read (and so removed): its node
    never started, or never got that far."""
    for path in folder.glob(f"{KEPT_PREFIX}*"):
        path.unlink(missing_ok=True)


def kept_name() -> str:
    """A new name for a file of settings on another host: random (128 bits), so that it is known here before
    the file is made there (O_EXCL: never another's)."""
    return f"{KEPT_PREFIX}{secrets.token_hex(16)}"


_sent: dict[Path, dict[str, list[str]]] = {}  # a run's folder -> host -> names of files sent there (take_sent)
_sent_lock = threading.Lock()


def _record_sent(folder: Path, host: str, name: str) -> None:
    with _sent_lock:
        _sent.setdefault(folder.resolve(), {}).setdefault(host, []).append(name)


def take_sent(folder: Path) -> dict[str, list[str]]:
    """host -> the names of the files of settings `hand_over` sent to that host for the run whose folder is
    `folder` (each named before it was sent: one whose send was cut short is among them), forgotten here:
    the unit's end removes there those still there (processes.remove_sent, through processes.sweep)."""
    with _sent_lock:
        return _sent.pop(folder.resolve(), {})


def send_environment(
    host: str,
    variables: Mapping[str, object],
    remote_prefix: list[str],
    deadline: float | None = None,
    name: str | None = None,
) -> str:
    """Put `variables` (as JSON) into a file of mode 0600 on `host` (over ssh's stdin, not a command line),
    named `name` (kept_name's) in that host's temporary folder; its path."""
    try:
        timeout_s = _within(deadline)
        out = subprocess.run(
            command_on(host, [sys.executable, "-c", _RECEIVE, name or kept_name()], remote_prefix=remote_prefix),
            input=json.dumps(variables),
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        _within(deadline)
        raise XoverError(
            f"-H: {host} did not answer over ssh within {timeout_s:.0f} s; "
            f"check that `ssh {host} true` answers without a prompt"
        ) from None
    path = out.stdout.strip()
    if out.returncode != 0 or not path.startswith("/") or "\n" in path:
        raise XoverError(
            f"-H: cannot reach {host} over ssh to hand its node the run's settings: "
            f"{(out.stderr.strip().splitlines() or ['no output'])[-1]}"
        )
    return path


def hand_over(
    handed: Sequence[tuple[str, Mapping[str, object]]],
    remote_prefix: list[str],
    deadline: float | None = None,
    folder: Path | None = None,
) -> list[str]:
    """Each (host, variables) of `handed` in a private file on that host (`keep_here` for this machine, in
    `folder`; `send_environment` for another), every host at once: each is an ssh of its own, and a job's start
    waits for them all. The files' paths, in order; the first error is raised once every host has answered,
    the files made here removed first (no command will read them). Another host's file is named first and
    recorded under `folder` (take_sent), for the unit's end to remove there if no node read it."""
    from concurrent.futures import ThreadPoolExecutor

    def one(host: str, variables: Mapping[str, object]) -> str:
        if is_local(host):
            return keep_here(variables, folder)
        name = kept_name()
        if folder is not None:
            _record_sent(folder, host, name)  # before the send: one cut short may still have made it
        return send_environment(host, variables, remote_prefix, deadline, name)

    with ThreadPoolExecutor(max_workers=max(1, len(handed))) as pool:
        futures = [pool.submit(one, host, variables) for host, variables in handed]
    if any(future.exception() is not None for future in futures):
        for (host, _), future in zip(handed, futures):
            if is_local(host) and future.exception() is None:
                Path(future.result()).unlink(missing_ok=True)
    return [future.result() for future in futures]


def torchrun_commands(
    np: int,
    hosts: str,
    log_dir: Path,
    spec_path: Path,
    env: dict[str, str] | None = None,
    program: list[str] | None = None,
    remote_prefix: list[str] | None = None,
    deadline: float | None = None,
    forward: tuple[str, ...] = (),
) -> list[list[str]]:
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
        raise XoverError(
            f"-H {hosts} with --engine torch: torchrun starts the same number of ranks on every "
            f"node, so every host needs the same slots and np ({np}) must be their sum"
        )
    first = nodes[0][0]
    # Every node must reach the store by this name: this machine's hosts are spelt `localhost`
    # (hosts.py), which on another node is that node, so it is named by its hostname instead. The
    # holder listens at its address there; the others get the address itself.
    name = socket.gethostname() if is_local(first) else first
    rendezvous = reserve_rendezvous(first, name, nodes[1][0], remote_prefix or [], deadline)
    forwarded = {
        k: v
        for k, v in (env or os.environ).items()
        if (k.startswith(FORWARDED_PREFIXES) or k in forward) and k not in SECRET_VARIABLES
    }
    # never on a command line: torchrun reads PET_<OPTION> as --<option>
    secret = {"PET_RDZV_ID": secrets.token_hex(16), "PET_RDZV_ENDPOINT": rendezvous.endpoint}
    handed: list[tuple[str, Mapping[str, object]]] = []
    for node_rank, (host, _) in enumerate(nodes):
        variables: dict[str, object] = {
            **secret,
            "PET_RDZV_CONF": f"is_host={int(node_rank == 0)}",
            HOST_VARIABLE: host,
        }
        if node_rank == 0:
            variables[HANDOFF_VARIABLE] = rendezvous.handoff
        # a worker knows which host it is on (emulated hosts share one); another host gets the launcher's
        # own environment (`env`) too
        handed.append((host, variables if is_local(host) else {**forwarded, **variables}))
    files = hand_over(handed, remote_prefix or [], deadline, folder=log_dir)
    commands = []
    for node_rank, (host, count) in enumerate(nodes):
        options = [
            f"--nnodes={len(nodes)}",
            f"--node-rank={node_rank}",
            f"--nproc-per-node={count}",
            "--rdzv-backend=c10d",
            *_output_options(log_dir / f"node{node_rank}"),
            *program,
        ]
        start = (
            [sys.executable, "-c", _SERVE, files[node_rank], *options]
            if node_rank == 0
            else [sys.executable, "-c", _APPLY, files[node_rank], torchrun_path(), *options]
        )
        # on another host: in this folder there, its terminal's hang-up stopping it with its ssh
        local = is_local(host)
        commands.append(command_on(host, start, env={HOST_VARIABLE: host} if local else None, here=True, tty=True))
    return commands
