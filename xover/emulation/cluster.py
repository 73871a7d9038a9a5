"""An emulated cluster on this machine: N hosts, each a network namespace with its own shaped NIC and sshd.

`xover cluster up --hosts N --devices-per-host D --bandwidth RATE` builds, as root:

    namespace xo-switch   a bridge xo-br and one port per host (and one for the head); no address
    namespace xo-h1..N    eth0 = 10.231.0.K/24, a veth whose peer is a port of xo-br; sshd on port 22
    namespace xo-head     eth0 = 10.231.0.254/24: the login node where launchers (horovodrun, torchrun,
                          ssh) run, through `launch_prefix()` = `ip netns exec xo-head`

Every link is created directly inside its namespaces (`ip link add ... netns A type veth peer ... netns
B`), so no interface and no address ever exists in the machine's own namespace, and nothing routes
out: traffic between emulated hosts stays on this machine.

A cluster node's NIC is the bottleneck crossover fills, so each host's NIC is shaped to RATE in both
directions: tbf on eth0 inside the host (what it sends) and on its port inside the switch (what it
receives), with the small queues of network.py (LINK_MTU packets, SOCKET_QUEUE_BYTES per TCP socket
in each namespace, TBF_BURST/TBF_LATENCY) and its priority queue under the rate (bands by SO_PRIORITY),
so a small all-reduce does not wait behind a partner's full queue, and the job the policy puts first
on the link goes first where a host sends. (The switch's ports see packets that crossed a veth into
another namespace, which clears their priority: there every job shares first come, first served.)
Like a real NIC it is full duplex: each direction has its own bucket. (network.py's --bandwidth
shapes one loopback, whose single bucket carries both directions: an all-reduce between two ranks there
takes about twice as long as between two emulated hosts at the same rate; measured with mlp-synthetic,
7 MB of gradients at 1gbit: 130 ms of communication per iteration on the loopback, 72 ms between hosts.)
The head's port is not shaped: only ssh and rendezvous traffic crosses it. IPv6 is off in the
namespaces (no router solicitations on the shaped links).

Each host is reached over ssh exactly like a real host: a real sshd (Debian's openssh-server, installed
by scripts/setup_cluster.sh) runs inside its namespace with its own config, host key and pid file under
STATE_DIR, listening on the host's address only; root logs in by key only. It runs in its own UTS
namespace whose hostname is the host's name (`hostname` says xo-h1; torch's Gloo and NCCL find their
host's address and identity from it), pinned (CPU affinity, inherited by every session) to the cores
of its devices on a CPU machine, and with CUDA_VISIBLE_DEVICES set (sshd's SetEnv) on a GPU machine.

Name resolution and ssh keys without touching the machine's /etc or ~/.ssh: `ip netns exec NS`
bind-mounts every entry of /etc/netns/NS/ over /etc/, so each namespace gets /etc/netns/NS/hosts (every
host and the head) and /etc/netns/NS/ssh/ssh_config naming the cluster's key, its known host keys
(StrictHostKeyChecking yes against them, nothing written to a known_hosts file); that ssh/ directory
stands for the whole of /etc/ssh inside the cluster's namespaces (each sshd reads only its own config).
A user's ~/.ssh/config is read first by ssh and wins where it sets the same options for these names.
There is no DNS: torch's c10d store warns that it cannot name a client socket (no reverse lookup of
the IPv4-mapped address it sees), as on clusters without reverse DNS; harmless.

Everything needs root: `up` and `down`, and the launchers, which enter the head namespace.

Remote commands find the same Python and files because the hosts share this machine's filesystem.
horovodrun and torchrun pass environment variables inline (`env K=V ... cmd` on the ssh command line), so
sshd needs neither AcceptEnv nor PermitUserEnvironment. Sharing one filesystem also means that per-host
paths must carry the host's name (a turn server's socket, logs): the hostname tells a process which
emulated host it is on. Path-based Unix sockets are reachable from every namespace; abstract ones are
per network namespace.

`cluster down` removes every namespace (their links and the bridge go with them), kills every process
inside them (sshd and any session or worker left), and removes /etc/netns entries and STATE_DIR. It works
from the names alone after a crash, and twice in a row. `up` writes the state file before creating
anything and undoes a partial set-up when a step fails.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..devices import gpu_count as visible_gpu_count
from ..errors import XoverError
from ..hosts import MAX_SLOTS
from ..processes import start_time, stop_processes
from ..rates import canonical_rate
from .network import LINK_MTU, SOCKET_QUEUE_BYTES, shaping_commands

STATE_DIR = Path("/run/xover-cluster")
STATE_FILE = STATE_DIR / "cluster.json"
NETNS_ETC = Path("/etc/netns")
NETNS_RUN = Path("/run/netns")
SSHD = "/usr/sbin/sshd"
SSHD_PRIVSEP_DIR = Path("/run/sshd")  # compiled into Debian's sshd; it refuses to start without it

SWITCH_NS, HEAD_NS, PROBE_NS = "xo-switch", "xo-head", "xo-probe"
BRIDGE = "xo-br"
HOST_NAME = re.compile(r"^xo-h(\d+)$")
SUBNET_PREFIX, PREFIX_LENGTH = "10.231.0", 24
HEAD_ADDRESS = f"{SUBNET_PREFIX}.254"
MAX_HOSTS = 200
NIC = "eth0"
STATE_FORMAT = "xover-cluster/1"
REQUIRED_TOOLS = ("ip", "tc", "ssh", "ssh-keygen", "unshare", "taskset", "sysctl")
SETUP_HINT = "run scripts/setup_cluster.sh as root (installs openssh-server, iproute2)"


class ClusterError(XoverError):
    """The emulated cluster cannot be built, reached or torn down: one line naming what is missing."""

    pass


@dataclass
class EmulatedHost:
    """One emulated host: its namespace's name and address, and the cores and GPUs its ranks get."""

    name: str
    address: str
    slots: int
    cores: list[int]
    gpus: list[int]


def host_name(index: int) -> str:
    """The namespace and ssh name of host `index` (from 1)."""
    return f"xo-h{index}"


def hosts_spec(hosts: list[EmulatedHost]) -> str:
    """The hosts as an -H value, 'xo-h1:2,xo-h2:2'."""
    return ",".join(f"{host.name}:{host.slots}" for host in hosts)


def _is_our_namespace(name: str) -> bool:
    return name in (SWITCH_NS, HEAD_NS, PROBE_NS) or HOST_NAME.match(name) is not None


# --------------------------------------------------------------------------------- commands


def _run(args: list[str], what: str) -> str:
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise ClusterError(f"{what}: {args[0]} not found; {SETUP_HINT}") from None
    except subprocess.TimeoutExpired:
        raise ClusterError(f"{what}: `{' '.join(args)}` did not finish in 60 s") from None
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        raise ClusterError(f"{what}: `{' '.join(args)}` failed: {detail[-1] if detail else f'exit {done.returncode}'}")
    return done.stdout


def _in_ns(namespace: str, *args: str) -> list[str]:
    return ["ip", "netns", "exec", namespace, *args]


def live_namespaces() -> list[str]:
    """Namespaces of ours that exist now (from their names: works after a crash)."""
    try:
        names = [entry.name for entry in NETNS_RUN.iterdir()]
    except OSError:
        return []
    return sorted(name for name in names if _is_our_namespace(name))


def _namespace_pids(namespace: str) -> list[int]:
    done = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True)
    return [int(pid) for pid in done.stdout.split() if pid.isdigit()]


# --------------------------------------------------------------------------------- checks


def missing_requirements() -> list[str]:
    """Why `cluster up` cannot run here (empty when it can)."""
    problems = []
    if os.geteuid() != 0:
        problems.append("it needs root (network namespaces, veth links, a sshd per host); run it as root")
    missing = [tool for tool in REQUIRED_TOOLS if shutil.which(tool) is None]
    if not os.access(SSHD, os.X_OK):
        missing.insert(0, "sshd")
    if missing:
        problems.append(f"{', '.join(missing)} not found; {SETUP_HINT}")
    return problems


def _root_login_locked() -> bool:
    """sshd without PAM refuses accounts whose password field starts with '!' (locked)."""
    try:
        for line in Path("/etc/shadow").read_text().splitlines():
            if line.startswith("root:"):
                return line.split(":")[1].startswith("!")
    except OSError:
        pass
    return False


def diagnose_cluster() -> tuple[bool, str]:
    """For `xover doctor`: can `xover cluster up` work here? Builds and removes a probe namespace with a
    shaped veth pair; says whether a cluster is up now."""
    state = read_state()
    if state is not None:
        status = cluster_status()
        if not status["up"]:
            return False, "a cluster is recorded but broken or half-built: run `xover cluster down`"
        return True, f"up: -H {state['hosts_spec']}, NICs at {state['rate']} (xover cluster status)"
    problems = missing_requirements()
    if problems:
        return False, "; ".join(problems)
    subprocess.run(["ip", "netns", "del", PROBE_NS], capture_output=True)  # one left by a killed probe
    try:
        _run(["ip", "netns", "add", PROBE_NS], "network namespaces")
        _run(["ip", "-n", PROBE_NS, "link", "add", "probe0", "type", "veth", "peer", "name", "probe1"], "veth links")
        _run(["ip", "-n", PROBE_NS, "link", "set", "probe0", "up"], "veth links")
        _run(_in_ns(PROBE_NS, "sh", "-c", shaping_commands("probe0", "1gbit")), "tc tbf and pfifo_fast")
    except ClusterError as error:
        return False, str(error)
    finally:
        subprocess.run(["ip", "netns", "del", PROBE_NS], capture_output=True)
    return True, "network namespaces, veth, tbf with pfifo_fast and sshd available (xover cluster up)"


# --------------------------------------------------------------------------------- state


def read_state() -> dict[str, Any] | None:
    """The cluster's state file, or None when there is none, it cannot be read, or another format wrote it."""
    try:
        state = json.loads(STATE_FILE.read_text())
    except (OSError, ValueError):
        return None
    return state if state.get("format") == STATE_FORMAT else None


def _write_state(state: dict[str, Any]) -> None:
    STATE_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
    temporary = STATE_FILE.with_suffix(".tmp")
    temporary.write_text(json.dumps(state, indent=1))
    temporary.replace(STATE_FILE)


def cluster_hosts() -> list[tuple[str, int]] | None:
    """(name, slots) of every host of the live emulated cluster; None when none is up."""
    state = read_state()
    if state is None or not state.get("ready") or not (NETNS_RUN / HEAD_NS).exists():
        return None
    return [(host["name"], host["slots"]) for host in state["hosts"]]


def cluster_rate() -> str | None:
    """The NIC rate of the live emulated cluster (canonical, e.g. '1gbit'): the link a run on it is keyed by."""
    state = read_state()
    return state["rate"] if state is not None and state.get("ready") else None


def host_interfaces() -> dict[str, str]:
    """Each host of the live emulated cluster, by name and by address -> its NIC (none without one)."""
    state = read_state()
    if state is None or not state.get("ready"):
        return {}
    return {key: NIC for host in state["hosts"] for key in (host["name"], host["address"])}


def is_emulated_host(name: str) -> bool:
    """Is `name` (a host name or address) a host of the live emulated cluster?"""
    return name in host_interfaces()


def launch_prefix(hosts: list[str]) -> list[str]:
    """The prefix that runs a launcher on the cluster's head node when every host of a -H spec is an
    emulated host; [] when none is; an error when the spec mixes them, or names an emulated host that
    is not up."""
    emulated = [host for host in hosts if is_emulated_host(host)]
    stale = [host for host in hosts if HOST_NAME.match(host) and host not in emulated]
    if stale:
        live = cluster_hosts()
        detail = f"the emulated cluster has {hosts_spec_of(live)}" if live else "no emulated cluster is up"
        raise ClusterError(
            f"-H names {', '.join(stale)} but {detail}: run `xover cluster up --hosts N`, "
            "or check `xover cluster status`"
        )
    if not emulated:
        return []
    others = [host for host in hosts if host not in emulated]
    if others:
        raise ClusterError(
            f"-H mixes emulated hosts ({', '.join(emulated)}) with other hosts ({', '.join(others)}): "
            "the emulated hosts are reachable only from the cluster's head namespace; "
            "use only the hosts `xover cluster status` lists"
        )
    if inside_cluster():
        return []  # on the head or on a host already (a job Slurm started there): ssh reaches them from here
    if os.geteuid() != 0:
        raise ClusterError(
            f"-H {','.join(hosts)}: launching on the emulated cluster enters its head namespace "
            "(`ip netns exec`), which needs root; run xover as root"
        )
    return ["ip", "netns", "exec", HEAD_NS]


def inside_cluster() -> bool:
    """Does this process run inside one of the cluster's network namespaces (its head, or one of its
    hosts, where a Slurm job of the cluster's runs)?"""
    try:
        own = os.stat("/proc/self/ns/net")
    except OSError:
        return False
    for name in live_namespaces():
        try:
            other = os.stat(NETNS_RUN / name)
        except OSError:
            continue
        if (other.st_dev, other.st_ino) == (own.st_dev, own.st_ino):
            return True
    return False


def hosts_spec_of(hosts: list[tuple[str, int]]) -> str:
    """(name, slots) pairs as an -H value."""
    return ",".join(f"{name}:{slots}" for name, slots in hosts)


# --------------------------------------------------------------------------------- up


def _assign_devices(count: int, per_host: int) -> list[tuple[list[int], list[int]]]:
    """(cores, gpus) per host. CPU machine: a device is a core, host k gets the next `per_host` cores
    (wrapping when there are fewer cores than devices: hosts then share cores). GPU machine: host k
    gets the next `per_host` GPUs and an equal share of the cores."""
    gpu_count = visible_gpu_count()
    kind = "gpu" if gpu_count else "cpu"
    cores = sorted(os.sched_getaffinity(0))
    assigned = []
    for index in range(count):
        if kind == "gpu":
            share = max(1, len(cores) // count)
            start = (index * share) % len(cores)
            host_cores = sorted({cores[(start + i) % len(cores)] for i in range(share)})
            gpus = [(index * per_host + i) % gpu_count for i in range(per_host)]
            assigned.append((host_cores, gpus))
        else:
            assigned.append((sorted({cores[(index * per_host + i) % len(cores)] for i in range(per_host)}), []))
    return assigned


def _hosts_file(hosts: list[EmulatedHost]) -> str:
    lines = ["127.0.0.1\tlocalhost", f"{HEAD_ADDRESS}\t{HEAD_NS}"]
    lines += [f"{host.address}\t{host.name}" for host in hosts]
    return "# written by `xover cluster up`; removed by `xover cluster down`\n" + "\n".join(lines) + "\n"


def _ssh_client_config(hosts: list[EmulatedHost], key: Path, known_hosts: Path) -> str:
    names = " ".join([HEAD_NS] + [host.name for host in hosts] + [HEAD_ADDRESS] + [host.address for host in hosts])
    return (
        f"# the emulated cluster's ssh client settings (xover cluster up)\n"
        f"Host {names}\n"
        f"  User root\n"
        f"  IdentityFile {key}\n"
        f"  IdentitiesOnly yes\n"
        f"  GlobalKnownHostsFile {known_hosts}\n"
        f"  UserKnownHostsFile /dev/null\n"
        f"  StrictHostKeyChecking yes\n"
        f"  BatchMode yes\n"
        f"  LogLevel ERROR\n"
        f"  ConnectTimeout 10\n"
    )


def _sshd_config(host: EmulatedHost, host_dir: Path, authorized_keys: Path) -> str:
    lines = [
        f"# sshd of emulated host {host.name} (xover cluster up)",
        f"ListenAddress {host.address}:22",
        f"HostKey {host_dir / 'ssh_host_ed25519_key'}",
        f"PidFile {host_dir / 'sshd.pid'}",
        f"AuthorizedKeysFile {authorized_keys}",
        "PermitRootLogin prohibit-password",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        # without PAM: no login session machinery inside a namespace; PAM only to let a locked root in
        f"UsePAM {'yes' if _root_login_locked() else 'no'}",
        "X11Forwarding no",
        "PrintMotd no",
        "PrintLastLog no",
        # horovodrun opens one connection per host and per slot at once
        "MaxStartups 200",
        "MaxSessions 200",
        "Subsystem sftp internal-sftp",
    ]
    if host.gpus:
        lines.append(f"SetEnv CUDA_VISIBLE_DEVICES={','.join(map(str, host.gpus))}")
    return "\n".join(lines) + "\n"


def _keygen(path: Path, comment: str) -> str:
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)], "ssh-keygen")
    return path.with_suffix(".pub").read_text().strip()


def _build_network(hosts: list[EmulatedHost], rate: str) -> None:
    def setup_namespace(namespace: str) -> None:
        _run(["ip", "netns", "add", namespace], f"creating namespace {namespace} (see `xover doctor`)")
        # before any link arrives, so that no link of ours ever gets an IPv6 address
        _run(
            _in_ns(
                namespace, "sysctl", "-eqw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"
            ),
            f"namespace {namespace}",
        )
        _run(["ip", "-n", namespace, "link", "set", "lo", "up"], f"namespace {namespace}")

    def shape(namespace: str, device: str) -> None:
        _run(
            _in_ns(namespace, "sh", "-c", shaping_commands(device, rate)), f"shaping {device} in {namespace} to {rate}"
        )

    setup_namespace(SWITCH_NS)
    _run(["ip", "-n", SWITCH_NS, "link", "add", BRIDGE, "mtu", str(LINK_MTU), "type", "bridge"], "the switch's bridge")
    _run(["ip", "-n", SWITCH_NS, "link", "set", BRIDGE, "up"], "the switch's bridge")
    for namespace, address in [(HEAD_NS, HEAD_ADDRESS)] + [(host.name, host.address) for host in hosts]:
        setup_namespace(namespace)
        _run(
            _in_ns(namespace, "sysctl", "-qw", f"net.ipv4.tcp_limit_output_bytes={SOCKET_QUEUE_BYTES}"),
            f"small socket queues in {namespace}",
        )
        # the host's NIC and its switch port, made in place: never an interface in this machine's namespace
        _run(
            [
                "ip",
                "link",
                "add",
                NIC,
                "netns",
                namespace,
                "mtu",
                str(LINK_MTU),
                "type",
                "veth",
                "peer",
                "name",
                namespace,
                "netns",
                SWITCH_NS,
                "mtu",
                str(LINK_MTU),
            ],
            f"the NIC of {namespace}",
        )
        _run(
            ["ip", "-n", SWITCH_NS, "link", "set", namespace, "master", BRIDGE, "up"], f"the switch port of {namespace}"
        )
        _run(
            ["ip", "-n", namespace, "addr", "add", f"{address}/{PREFIX_LENGTH}", "dev", NIC],
            f"the address of {namespace}",
        )
        _run(["ip", "-n", namespace, "link", "set", NIC, "up"], f"the NIC of {namespace}")
        if namespace != HEAD_NS:
            shape(namespace, NIC)  # what the host sends
            shape(SWITCH_NS, namespace)  # what it receives


def _start_sshd(host: EmulatedHost) -> int:
    host_dir = STATE_DIR / "hosts" / host.name
    config = host_dir / "sshd_config"
    # own UTS namespace: the host's name is its hostname; CPU affinity: its cores, inherited by every session
    start = f"echo {host.name} > /proc/sys/kernel/hostname && exec {SSHD} -f {config} -E {host_dir / 'sshd.log'}"
    _run(
        _in_ns(host.name, "unshare", "--uts", "--", "taskset", "-c", ",".join(map(str, host.cores)), "sh", "-c", start),
        f"starting sshd on {host.name} (log {host_dir / 'sshd.log'})",
    )
    pid_file = host_dir / "sshd.pid"
    deadline = time.monotonic() + 10
    while True:
        try:
            words = pid_file.read_text().split()
        except FileNotFoundError:
            words = []
        if words:  # sshd creates the file, then writes its pid: an empty file is not ready yet
            return int(words[0])
        if time.monotonic() > deadline:
            raise ClusterError(f"sshd on {host.name} wrote no pid file; see {host_dir / 'sshd.log'}")
        time.sleep(0.05)


def _wait_reachable(host: EmulatedHost, timeout_s: float = 20.0) -> None:
    """Ready when the head can log in by ssh and the host answers with its own name."""
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        try:
            done = subprocess.run(
                _in_ns(HEAD_NS, "ssh", host.name, "hostname"),
                capture_output=True,
                text=True,
                timeout=max(1.0, deadline - time.monotonic()),
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            break
        if done.returncode == 0 and done.stdout.strip() == host.name:
            return
        last = ((done.stderr.strip() or done.stdout.strip()).splitlines() or [f"exit {done.returncode}"])[-1]
        time.sleep(0.2)
    raise ClusterError(
        f"ssh from {HEAD_NS} to {host.name} failed: {last or 'timed out'}; see "
        f"{STATE_DIR / 'hosts' / host.name / 'sshd.log'}"
    )


def cluster_up(host_count: int, devices_per_host: int, bandwidth: str = "1gbit") -> dict[str, Any]:
    """Build the emulated cluster (see the module docstring); returns what `status` shows."""
    if not 1 <= host_count <= MAX_HOSTS:
        raise ClusterError(f"--hosts {host_count}: give between 1 and {MAX_HOSTS} hosts")
    if not 1 <= devices_per_host <= MAX_SLOTS:  # 99999999999 counted its devices for hours, for an -H refused
        shown = str(devices_per_host) if len(str(devices_per_host)) <= 20 else f"{str(devices_per_host)[:20]}..."
        raise ClusterError(
            f"--devices-per-host {shown}: give a whole number from 1 to {MAX_SLOTS} (the most slots -H takes per host)"
        )
    rate = canonical_rate(bandwidth)
    problems = missing_requirements()
    if problems:
        raise ClusterError("xover cluster up: " + "; ".join(problems))
    already_up = ClusterError(
        "an emulated cluster is already up (or was left by a crash): see `xover cluster "
        "status`, and `xover cluster down` to remove it first"
    )
    if live_namespaces():
        raise already_up
    hosts = [
        EmulatedHost(host_name(k), f"{SUBNET_PREFIX}.{k}", devices_per_host, cores, gpus)
        for k, (cores, gpus) in enumerate(_assign_devices(host_count, devices_per_host), start=1)
    ]
    try:
        STATE_DIR.mkdir(mode=0o755)  # atomic: of two `up` at once, one wins
    except FileExistsError:
        raise already_up from None
    state: dict[str, Any] = {
        "format": STATE_FORMAT,
        "ready": False,
        "hosts_spec": hosts_spec(hosts),
        "rate": rate,
        "devices_per_host": devices_per_host,
        "head": {"name": HEAD_NS, "address": HEAD_ADDRESS},
        "switch": SWITCH_NS,
        "subnet": f"{SUBNET_PREFIX}.0/{PREFIX_LENGTH}",
        "state_dir": str(STATE_DIR),
        "hosts": [asdict(host) for host in hosts],
        "started_at": time.time(),
    }
    _write_state(state)  # first: whatever happens next, `down` knows what to remove
    try:
        _build_network(hosts, rate)
        _write_configs(hosts)
        SSHD_PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
        for host, entry in zip(hosts, state["hosts"]):
            entry["sshd_pid"] = _start_sshd(host)
        with ThreadPoolExecutor(max_workers=min(8, len(hosts))) as pool:
            list(pool.map(_wait_reachable, hosts))
    except BaseException:
        try:
            cluster_down()
        except ClusterError:
            pass  # the first error is the one to tell; `cluster down` can be run again
        raise
    state["ready"] = True
    _write_state(state)
    return cluster_status()


def _write_configs(hosts: list[EmulatedHost]) -> None:
    ssh_dir = STATE_DIR / "ssh"
    ssh_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    client_key = ssh_dir / "id_ed25519"
    authorized_keys = ssh_dir / "authorized_keys"
    authorized_keys.write_text(_keygen(client_key, "xover-cluster") + "\n")
    known = []
    for host in hosts:
        host_dir = STATE_DIR / "hosts" / host.name
        host_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        public = _keygen(host_dir / "ssh_host_ed25519_key", host.name)
        known.append(f"{host.name},{host.address} {' '.join(public.split()[:2])}")
        (host_dir / "sshd_config").write_text(_sshd_config(host, host_dir, authorized_keys))
    known_hosts = ssh_dir / "known_hosts"
    known_hosts.write_text("\n".join(known) + "\n")
    known_hosts.chmod(0o644)
    for namespace in [HEAD_NS] + [host.name for host in hosts]:
        etc = NETNS_ETC / namespace
        (etc / "ssh").mkdir(parents=True, exist_ok=True)
        (etc / "hosts").write_text(_hosts_file(hosts))
        (etc / "ssh" / "ssh_config").write_text(_ssh_client_config(hosts, client_key, known_hosts))


# --------------------------------------------------------------------------------- status, down


def cluster_status() -> dict[str, Any]:
    """The recorded cluster and whether each part of it is alive; {'up': False} when none is."""
    state = read_state()
    leftovers = live_namespaces()
    if state is None:
        return {"up": False, "hosts": None, "leftover_namespaces": leftovers}
    live = set(leftovers)
    nodes = []
    for host in state["hosts"]:
        pid = host.get("sshd_pid")
        sshd_alive = bool(pid) and _alive(pid) and _is_our_sshd(pid)
        nodes.append({**host, "namespace": host["name"] in live, "sshd": sshd_alive, "rate": state["rate"]})
    healthy = (
        state.get("ready", False)
        and HEAD_NS in live
        and SWITCH_NS in live
        and all(node["namespace"] and node["sshd"] for node in nodes)
    )
    return {
        "up": healthy,
        "hosts": state["hosts_spec"],
        "rate": state["rate"],
        "head": state["head"]["name"],
        "head_address": state["head"]["address"],
        "subnet": state["subnet"],
        "devices_per_host": state["devices_per_host"],
        "launch_prefix": ["ip", "netns", "exec", HEAD_NS],
        "state_dir": state["state_dir"],
        "nodes": nodes,
        "shared_devices": _shared_devices(state["hosts"]),
        "problem": None if healthy else "incomplete or broken: run `xover cluster down`, then up again",
    }


def stop_emulated_processes(variable: str, value: str, grace_s: float = 3.0) -> list[int]:
    """Stop what one launch left on the emulated hosts: every process there whose environment has
    variable=value (horovodrun and torchrun pass the launcher's variables to every remote command).
    ssh gives remote commands no terminal, so stopping a launcher and its ssh clients does not stop the
    workers they started on other hosts, on these hosts as on real ones. Returns the pids stopped."""
    marker = f"{variable}={value}".encode()
    state = read_state() or {}
    matched = set()
    for host in state.get("hosts", []):
        if not (NETNS_RUN / host["name"]).exists():
            continue
        for pid in _namespace_pids(host["name"]):
            try:
                environment = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if marker in environment:
                matched.add(pid)
    return _kill_processes(matched, grace_s) if matched else []


def _shared_devices(hosts: list[dict[str, Any]]) -> bool:
    """Do two hosts share a device (more devices asked for than this machine has)?"""
    for kind in ("gpus", "cores"):
        used = [device for host in hosts for device in host[kind]]
        if used:
            return len(used) != len(set(used))
    return False


def _kill_processes(pids: set[int], grace_s: float = 3.0) -> list[int]:
    """TERM, then KILL what is left after grace_s: the same processes, never one given a pid of theirs
    after they ended (supervise.stop_processes)."""
    found = {pid: started for pid in pids if (started := start_time(pid)) is not None}
    stop_processes(found, grace_s)
    return sorted(pids)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def cluster_down() -> dict[str, Any]:
    """Remove everything `up` made, from the state file and from the names alone; safe to repeat."""
    state = read_state() or {}
    namespaces = live_namespaces()
    if os.geteuid() != 0 and (namespaces or STATE_DIR.exists()):
        raise ClusterError("xover cluster down needs root (it removes network namespaces and stops sshd)")
    # every process inside our namespaces, and each recorded sshd even if its namespace lost its name
    recorded_sshd = {host["sshd_pid"] for host in state.get("hosts", []) if host.get("sshd_pid")}
    killed = _kill_processes(
        {pid for namespace in namespaces for pid in _namespace_pids(namespace)}
        | {pid for pid in recorded_sshd if _alive(pid) and _is_our_sshd(pid)}
    )
    for namespace in namespaces:
        subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
    removed_etc = []
    if NETNS_ETC.is_dir():
        for entry in NETNS_ETC.iterdir():
            if _is_our_namespace(entry.name):
                shutil.rmtree(entry, ignore_errors=True)
                removed_etc.append(str(entry))
        if not any(NETNS_ETC.iterdir()):
            NETNS_ETC.rmdir()  # ip netns needs no empty one
    if SSHD_PRIVSEP_DIR.is_dir() and not any(SSHD_PRIVSEP_DIR.iterdir()) and not _sshd_running():
        SSHD_PRIVSEP_DIR.rmdir()  # made for ours; any other sshd recreates it when it starts
    had_state = STATE_DIR.exists()
    shutil.rmtree(STATE_DIR, ignore_errors=True)
    left = live_namespaces()
    if left:
        raise ClusterError(f"could not remove namespaces {', '.join(left)}: `ip netns del` them as root")
    return {
        "removed_namespaces": namespaces,
        "stopped_processes": len(killed),
        "removed_etc": sorted(removed_etc),
        "removed_state_dir": had_state,
    }


def _sshd_running() -> bool:
    """Is any sshd running on this machine (ours are stopped by then)?"""
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and _alive(int(proc.name)):
            try:
                if (proc / "comm").read_text().strip() == "sshd":
                    return True
            except OSError:
                pass
    return False


def _is_our_sshd(pid: int) -> bool:
    try:
        return str(STATE_DIR) in Path(f"/proc/{pid}/cmdline").read_text()
    except OSError:
        return False
