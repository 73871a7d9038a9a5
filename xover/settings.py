"""The `XOVER_*` environment, read in one place.

Two kinds of variable:

* **Settings** a user sets (the store, the results folder, leases, the GPU path) and the experiment
  switches (each kept because docs/measurements.md measured what it changes; docs/reference.md cites
  where). `Settings.from_environ` reads and checks every one of them, once, and refuses a bad value
  with one line naming the variable; `settings()` is that object for this process's environment.
* **The launcher's variables**: what xover sets for the processes it starts (workers, turn servers,
  the reaper), named here once (`*_VARIABLE` below). The runtime inside a worker knows the
  orchestrator only through them and the metrics lines it prints.

This module imports nothing of xover but its errors, so that the runtime may import it.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from .errors import XoverError, quoted
from .redact import mask_credentials

# -- the variables xover sets for the processes it starts (not settings) ---------------------------
EXPERIMENT_VARIABLE = "XOVER_EXPERIMENT"  # the experiment's id: tags every process of a run, on every host
RUN_VARIABLE = "XOVER_RUN"  # experiment:run id, the tag of one run's processes
JOB_VARIABLE = "XOVER_JOB"  # the job's name
JOB_DIR_VARIABLE = "XOVER_JOB_DIR"  # a folder of this run of the job's own, for its outputs
JOB_DIR_PLACEHOLDER = "{job_dir}"  # in a script's arguments: replaced by that folder on every rank
DEVICES_VARIABLE = "XOVER_DEVICES"  # the job's devices: '0,1' on every host, or 'h1=0,1;h2=0,1'
HOST_VARIABLE = "XOVER_HOST"  # the host a worker was launched for (-H), so emulated hosts on one machine differ
TURN_SOCKET_VARIABLE = "XOVER_TURN_SOCKET"  # the turn server's socket, a template: `{host}` is the worker's host
TURN_SLOT_VARIABLE = "XOVER_TURN_SLOT"  # the job's slot on its turn server
TURN_SERVER_VARIABLE = "XOVER_TURN_SERVER"  # tags one group's turn servers (the socket names' prefix)
LINK_PRIORITY_VARIABLE = "XOVER_LINK_PRIORITY"  # the job's socket priority (turns/policies.py: link_bands)
METRIC_TOKEN_VARIABLE = "XOVER_METRIC_TOKEN"  # the run's token: a metrics line without it is ignored
SCRIPT_STEPS_VARIABLE = "XOVER_SCRIPT_STEPS"  # a job file's iterations: the shim stops the script after them
CUDA_BY_LOCAL_RANK_VARIABLE = "XOVER_CUDA_BY_LOCAL_RANK"  # set with a script job's CUDA_VISIBLE_DEVICES
REAPER_DB_VARIABLE = "XOVER_REAPER_DB"  # the store, for the reaper only (kept off its command line)
# how the name of a file of a node's (or a host's ranks') settings starts: torchrun.keep_here, kept_name
KEPT_PREFIX = "xover-env-"
RDZV_HANDOFF_VARIABLE = "XOVER_RDZV_HANDOFF"  # torchrun's node 0: where it takes the rendezvous store's socket

LAUNCHER_VARIABLES = (
    EXPERIMENT_VARIABLE,
    RUN_VARIABLE,
    JOB_VARIABLE,
    JOB_DIR_VARIABLE,
    DEVICES_VARIABLE,
    HOST_VARIABLE,
    TURN_SOCKET_VARIABLE,
    TURN_SLOT_VARIABLE,
    TURN_SERVER_VARIABLE,
    LINK_PRIORITY_VARIABLE,
    METRIC_TOKEN_VARIABLE,
    SCRIPT_STEPS_VARIABLE,
    CUDA_BY_LOCAL_RANK_VARIABLE,
    REAPER_DB_VARIABLE,
    RDZV_HANDOFF_VARIABLE,
)

# -- the settings' variables ------------------------------------------------------------------------
DB_VARIABLE = "XOVER_DB"
RESULTS_VARIABLE = "XOVER_RESULTS"
LEASE_DIR_VARIABLE = "XOVER_LEASE_DIR"
CPU_ONLY_VARIABLE = "XOVER_CPU_ONLY"
DEVICES_PER_GPU_VARIABLE = "XOVER_DEVICES_PER_GPU"
TORCH_BACKEND_VARIABLE = "XOVER_TORCH_BACKEND"
DETERMINISTIC_VARIABLE = "XOVER_DETERMINISTIC"
THREADS_PER_RANK_VARIABLE = "XOVER_THREADS_PER_RANK"
OMP_THREADS_VARIABLE = "OMP_NUM_THREADS"  # the user's (or a job file's), not xover's: its default when set
PIN_CORES_VARIABLE = "XOVER_PIN_CORES"
LINK_BANDS_VARIABLE = "XOVER_LINK_BANDS"
COMM_THREADS_VARIABLE = "XOVER_COMM_THREADS"
WAIT_VARIABLE = "XOVER_WAIT"
TURN_LEASE_VARIABLE = "XOVER_TURN_LEASE"
TURN_SERVER_NICE_VARIABLE = "XOVER_TURN_SERVER_NICE"
TURN_HEARTBEAT_VARIABLE = "XOVER_TURN_HEARTBEAT"
METRIC_SINKS_VARIABLE = "XOVER_METRIC_SINKS"
TURN_SEND_BUFFER_VARIABLE = "XOVER_TURN_SEND_BUFFER"
CHECKPOINT_SYNC_VARIABLE = "XOVER_CHECKPOINT_SYNC"
METRICS_PORT_VARIABLE = "XOVER_METRICS_PORT"
TURN_METRICS_PORTS_VARIABLE = "XOVER_TURN_METRICS_PORTS"
METRICS_ADDRESS_VARIABLE = "XOVER_METRICS_ADDRESS"
METRICS_CREDENTIALS_VARIABLE = "XOVER_METRICS_CREDENTIALS"
ADAPTIVE_VARIABLE = "XOVER_ADAPTIVE"

VARIABLE_PREFIX = "XOVER_"  # every variable of xover's own (a job file's env may not set one)
SECRET_VARIABLES = (DB_VARIABLE, REAPER_DB_VARIABLE)  # the store's URL (a password, perhaps): never to workers

COMM_THREADS = ("batch", "normal", "always")  # the first is the default
WAITS = ("expect", "poll")
TORCH_BACKENDS = ("nccl", "gloo")
TURN_LEASE_LIMITS = {"floor": 86400.0, "initial": 86400.0, "factor": 1000.0}  # a turn's wait must fit select()
# XOVER_ADAPTIVE's keys (run/adaptive.py's AdaptiveSettings): each number's range, low and high, and whether
# the low end is allowed; `start`, `measured` and `until` take a word instead (ADAPTIVE_WORDS)
ADAPTIVE_RANGES = {
    "window": (0.0, 3600.0, False),
    "max_window": (0.0, 3600.0, False),
    "iterations": (1.0, 100000.0, True),
    "share": (0.0, 1.0, False),
    "probe_share": (0.0, 1.0, False),
    "pairs": (1.0, 1000.0, True),
    "z": (0.0, 100.0, False),
    "floor": (0.0, 0.99, True),
    "margin": (0.0, 0.99, True),
    "drift": (0.0, 100.0, False),
    "recheck": (0.0, 30 * 86400.0, False),
    "warmup": (0.0, 100000.0, True),
    "switch_cost": (0.0, 1000.0, True),
}
# The settings that change how fast jobs sharing devices run: a way of sharing measured under others is
# another measurement (plan/measured.py), so that a bench's run with a switch turned off (bench/ablation.py)
# is never the figure a plan under the defaults uses
TUNING_FIELDS = (
    "threads_per_rank",
    "pin_cores",
    "torch_backend",
    "deterministic",
    "link_bands",
    "comm_threads",
    "wait",
    "turn_lease",
    "turn_server_nice",
    "turn_heartbeat",  # with turn_send_buffer, a fault setting (bench/chaos.py): when a stopped waiter loses turns
    "turn_send_buffer",
    "checkpoint_sync",
    "adaptive",
)
# The settings that change how fast a job runs alone (its threads, where they run, its collectives' backend, its
# kernels): a profile taken under others is another job's (store/profiles.py). Those that change only how jobs
# share devices are not among them, so a run with one turned off (bench/ablation.py) still orders its jobs by
# their profiles.
ALONE_FIELDS = ("threads_per_rank", "pin_cores", "torch_backend", "deterministic")
ADAPTIVE_STARTS = ("turns", "free")
ADAPTIVE_MEASURED = ("settle", "probe")  # what a group measured clearly apart before does: settle at once, or probe
# how long a round probes: while another pair of windows could win more than it costs, or until the rule is sure
ADAPTIVE_UNTIL = ("worth", "sure")
ADAPTIVE_WORDS = {"start": ADAPTIVE_STARTS, "measured": ADAPTIVE_MEASURED, "until": ADAPTIVE_UNTIL}


def _utf8(variable: str, value: str | None) -> None:
    """Refuse a setting whose value holds bytes that are not UTF-8 (as Python decodes them from the environment):
    the store keeps paths and settings as text, and XOVER_RESULTS=$'/data/\\xff' ended a run in a traceback. The
    value is not shown (XOVER_DB's may hold a password): where in it the first such byte is, is."""
    if value is None:
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise XoverError(
            f"{variable}: its value is not valid UTF-8 (character {error.start + 1} of it), and the store keeps "
            "settings and paths as text: give it in UTF-8 (a folder: one whose name is)"
        ) from None


def _folder_text(variable: str, value: str | None) -> None:
    """Refuse a folder's path holding a control character (a newline): every message and log line that names the
    folder would break there, and a log reader take the rest for a line of its own; or only blanks."""
    if (
        value is not None
        and (where := next((i for i, char in enumerate(value) if ord(char) < 32 or ord(char) == 127), None)) is not None
    ):
        raise XoverError(
            f"{variable}: its value holds a control character (character {where + 1}, {value[where]!r}): "
            "give a folder whose path has none"
        )
    if value and not value.strip():  # a folder named ' ' in the current one, not the default
        raise XoverError(f"{variable}={value!r}: blank; give a folder, or unset it (set to nothing: the default)")


def _variable(name: str, **options: Any) -> Any:
    return field(metadata={"variable": name}, **options)


@dataclass(frozen=True)
class Settings:
    """Every `XOVER_*` setting, checked. Unset, or set but empty, is the default (XOVER_RESULTS too:
    results/, not the working directory)."""

    # -- for users ----------------------------------------------------------------------------------
    db: str | None = _variable(DB_VARIABLE, default=None)  # the store, as --db (the flag wins)
    results: Path = _variable(RESULTS_VARIABLE, default=Path("results"))  # run logs, plans, reports
    lease_dir: str | None = _variable(LEASE_DIR_VARIABLE, default=None)  # None: /tmp itself (run/leases.py)
    cpu_only: bool = _variable(CPU_ONLY_VARIABLE, default=False)  # ranks compute on CPU cores even beside GPUs
    devices_per_gpu: int = _variable(DEVICES_PER_GPU_VARIABLE, default=1)  # devices, each with its turns, per GPU
    # nccl or gloo, lower case; None: NCCL on GPUs, Gloo on CPUs. Checked where a torch job uses it
    # (devices.torch_backend): only torch jobs read it, and whether nccl can work depends on the machine.
    torch_backend: str | None = _variable(TORCH_BACKEND_VARIABLE, default=None)
    deterministic: bool = _variable(DETERMINISTIC_VARIABLE, default=False)  # deterministic kernels only
    # torch's threads in a CPU rank: XOVER_THREADS_PER_RANK when given, else OMP_NUM_THREADS's count when set (what
    # torchrun and horovodrun leave a rank; torchrun sets 1 only where it is unset), else 1 (threads_per_rank_given)
    threads_per_rank: int = _variable(THREADS_PER_RANK_VARIABLE, default=1)
    pin_cores: bool = _variable(PIN_CORES_VARIABLE, default=True)  # a CPU rank pinned to its core
    # the metric sinks a run adds to the store and the progress display, by name (run/sinks.py's SINKS)
    metric_sinks: tuple[str, ...] = _variable(METRIC_SINKS_VARIABLE, default=())
    # `xover run` serves its figures to Prometheus on this port (run/exporter.py), as --metrics-port; None: off
    metrics_port: int | None = _variable(METRICS_PORT_VARIABLE, default=None)
    # the ports the turn servers may serve their devices' figures on, each the first free one of them
    # (LOW-HIGH, for a firewall opened to Prometheus on those only); None: any port the kernel hands out
    turn_metrics_ports: tuple[int, int] | None = _variable(TURN_METRICS_PORTS_VARIABLE, default=None)
    # where the exporter and the turn servers listen: `localhost` (loopback, IPv4 and IPv6), `0.0.0.0` or `::`
    # (every interface, both families: a Prometheus elsewhere), or one address of the host
    metrics_address: str = _variable(METRICS_ADDRESS_VARIABLE, default="localhost")
    # the folder of the metrics' bearer token and TLS certificate and key (turns/credentials.py); None: the
    # user's configuration folder, ~/.config/xover/metrics
    metrics_credentials: Path | None = _variable(METRICS_CREDENTIALS_VARIABLE, default=None)
    # -- experiment switches (docs/reference.md: the measurement behind each) -----------------------
    link_bands: bool = _variable(LINK_BANDS_VARIABLE, default=True)  # crossover orders the link by the policy's bands
    comm_threads: str = _variable(COMM_THREADS_VARIABLE, default="batch")  # batch | normal | always
    wait: str = _variable(WAIT_VARIABLE, default="expect")  # expect | poll
    turn_lease: dict[str, float] | None = _variable(TURN_LEASE_VARIABLE, default=None)  # floor, factor, initial
    turn_server_nice: int | None = _variable(TURN_SERVER_NICE_VARIABLE, default=None)  # None: turns/server.py's
    # seconds between keep-alives to a worker waiting for its turn (None: turns/protocol.py's HEARTBEAT_S)
    turn_heartbeat: float | None = _variable(TURN_HEARTBEAT_VARIABLE, default=None)
    # bytes of the kernel's send buffer of each worker's connection at the turn server (SO_SNDBUF; None:
    # the kernel's default): how many unread keep-alives a stopped worker's socket takes before it is full
    turn_send_buffer: int | None = _variable(TURN_SEND_BUFFER_VARIABLE, default=None)
    # a GPU job waits for its queued kernels at every layer boundary of its turn, so that a request to
    # yield is seen there and not only when its compute is done (docs/gpu.md: an experiment, off)
    checkpoint_sync: bool = _variable(CHECKPOINT_SYNC_VARIABLE, default=False)
    # how an adaptive group probes: key -> value as given (run/adaptive.py's AdaptiveSettings), each checked
    adaptive: dict[str, str] = _variable(ADAPTIVE_VARIABLE, default_factory=dict)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """The settings of `environ` (default: this process's environment), each checked once."""
        env = os.environ if environ is None else environ
        for setting in fields(cls):
            _utf8(setting.metadata["variable"], env.get(setting.metadata["variable"]))
        for variable in (RESULTS_VARIABLE, LEASE_DIR_VARIABLE):
            _folder_text(variable, env.get(variable))
        return cls(
            db=env.get(DB_VARIABLE) or None,
            results=Path(env.get(RESULTS_VARIABLE) or "results"),  # set but empty: the default, not the current folder
            lease_dir=env.get(LEASE_DIR_VARIABLE) or None,
            cpu_only=_flag(CPU_ONLY_VARIABLE, env.get(CPU_ONLY_VARIABLE), default=False),
            devices_per_gpu=_devices_per_gpu(env.get(DEVICES_PER_GPU_VARIABLE, "").strip()),
            torch_backend=env.get(TORCH_BACKEND_VARIABLE, "").strip().lower() or None,
            deterministic=_flag(DETERMINISTIC_VARIABLE, env.get(DETERMINISTIC_VARIABLE), default=False),
            threads_per_rank=_threads_per_rank(
                env.get(THREADS_PER_RANK_VARIABLE, "").strip(), env.get(OMP_THREADS_VARIABLE, "")
            ),
            pin_cores=_flag(PIN_CORES_VARIABLE, env.get(PIN_CORES_VARIABLE), default=True),
            metric_sinks=_names(METRIC_SINKS_VARIABLE, env.get(METRIC_SINKS_VARIABLE)),
            metrics_port=_metrics_port(env.get(METRICS_PORT_VARIABLE)),
            turn_metrics_ports=_port_range(TURN_METRICS_PORTS_VARIABLE, env.get(TURN_METRICS_PORTS_VARIABLE)),
            metrics_address=_metrics_address(env.get(METRICS_ADDRESS_VARIABLE)),
            metrics_credentials=_absolute_folder(METRICS_CREDENTIALS_VARIABLE, env.get(METRICS_CREDENTIALS_VARIABLE)),
            link_bands=_link_bands(env.get(LINK_BANDS_VARIABLE) or "on"),
            comm_threads=_choice(COMM_THREADS_VARIABLE, env.get(COMM_THREADS_VARIABLE), COMM_THREADS),
            wait=_choice(WAIT_VARIABLE, env.get(WAIT_VARIABLE), WAITS),
            turn_lease=_turn_lease(env.get(TURN_LEASE_VARIABLE)),
            turn_server_nice=_turn_server_nice(env.get(TURN_SERVER_NICE_VARIABLE)),
            turn_heartbeat=_turn_heartbeat(env.get(TURN_HEARTBEAT_VARIABLE)),
            turn_send_buffer=_turn_send_buffer(env.get(TURN_SEND_BUFFER_VARIABLE)),
            checkpoint_sync=_flag(CHECKPOINT_SYNC_VARIABLE, env.get(CHECKPOINT_SYNC_VARIABLE), default=False),
            adaptive=_adaptive(env.get(ADAPTIVE_VARIABLE)),
        )

    def tuning(self, names: tuple[str, ...] = TUNING_FIELDS) -> str:
        """The settings of `names` that differ from their defaults, as `VARIABLE=value` in field order,
        space-separated; '' under the defaults. What a stored measurement of a way of sharing was taken under
        (TUNING_FIELDS), and a profile (ALONE_FIELDS)."""
        default = Settings()
        return " ".join(
            f"{f.metadata['variable']}={_shown(getattr(self, f.name))}"
            for f in fields(self)
            if f.name in names and getattr(self, f.name) != getattr(default, f.name)
        )

    @staticmethod
    def variables() -> tuple[str, ...]:
        """The variables the settings are read from, in field order."""
        return tuple(f.metadata["variable"] for f in fields(Settings))


def as_given(variable: str, environ: Mapping[str, str] | None = None) -> str | None:
    """A setting's value as its variable holds it (in `environ`, default this process's environment), for a
    refusal made where it is used to show it so: the setting keeps it stripped, XOVER_TORCH_BACKEND lowercased."""
    return (os.environ if environ is None else environ).get(variable)


_cached: tuple[tuple[str | None, ...], Settings] | None = None


def settings(environ: Mapping[str, str] | None = None) -> Settings:
    """The settings of this process's environment (or of `environ`). Read again whenever one of their
    variables changed since the last call (tests set them; a worker's environment never changes)."""
    global _cached
    if environ is not None:
        return Settings.from_environ(environ)
    key = tuple(os.environ.get(name) for name in (*Settings.variables(), OMP_THREADS_VARIABLE))
    cached = _cached
    if cached is None or cached[0] != key:
        cached = _cached = (key, Settings.from_environ())
    return cached[1]


def _shown(value: Any) -> str:
    """A setting's value as one word: on/off, key=value pairs sorted and joined by commas, or as written."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, dict):
        return ",".join(f"{key}={value[key]}" for key in sorted(value))
    return str(value)


# -- the checks, one per variable -----------------------------------------------------------------------
def _choice(variable: str, value: str | None, choices: tuple[str, ...]) -> str:
    value = value or choices[0]
    if value not in choices:
        raise XoverError(f"{variable}={quoted(value)}: expected one of {', '.join(choices)}")
    return value


# A number is written in ASCII digits: str.isdigit() holds for '²' as well (int() then raises, a traceback),
# and int() and float() take other scripts' digits ('٣'), which no one means in a setting.
_WHOLE = re.compile(r"[0-9]+")
_DECIMAL = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


def whole_number(text: str) -> int | None:
    """`text` (stripped) as a whole number of ASCII digits, else None (never an exception: digits beyond what
    int() converts, 4,300, are None too, as no setting holds such a number)."""
    value = text.strip()
    too_long = len(value) > sys.get_int_max_str_digits() > 0
    return int(value) if not too_long and _WHOLE.fullmatch(value) else None


def decimal_number(text: str) -> float | None:
    """`text` (stripped) as a decimal number of ASCII digits ('0.5', '2', '1e-3'), else None."""
    value = text.strip()
    return float(value) if _DECIMAL.fullmatch(value) else None


def _devices_per_gpu(value: str) -> int:
    if not value:
        return 1
    count = whole_number(value)
    if count is None or not 1 <= count <= 64:
        raise XoverError(
            f"{DEVICES_PER_GPU_VARIABLE}={quoted(value)}: give a whole number from 1 to 64 "
            "(the devices one GPU counts as)"
        )
    return count


def threads_per_rank_given(environ: Mapping[str, str] | None = None) -> bool:
    """Whether XOVER_THREADS_PER_RANK is given (not empty): then it, not OMP_NUM_THREADS, sets a CPU rank's threads."""
    env = os.environ if environ is None else environ
    return bool(env.get(THREADS_PER_RANK_VARIABLE, "").strip())


def omp_threads(value: str) -> int | None:
    """The threads OMP_NUM_THREADS asks of torch (its first level's count: `4,2` is 4), None for one OpenMP would
    not take (empty, 0, not a number): as if unset (one thread, XOVER_THREADS_PER_RANK's default)."""
    threads = whole_number(value.split(",", 1)[0].strip())
    return threads if threads is not None and 1 <= threads <= 4096 else None


def _threads_per_rank(value: str, omp: str = "") -> int:
    if not value:
        return omp_threads(omp) or 1
    threads = whole_number(value)
    if threads is None or not 1 <= threads <= 4096:
        raise XoverError(
            f"{THREADS_PER_RANK_VARIABLE}={quoted(value)}: give a whole number from 1 to 4096 (torch's "
            "threads in each CPU rank)"
        )
    return threads


def _metrics_port(text: str | None) -> int | None:
    """A TCP port, 1 to 65535; unset or empty: no exporter."""
    value = (text or "").strip()
    if not value:
        return None
    port = whole_number(value)
    if port is None or not 1 <= port <= 65535:
        raise XoverError(
            f"{METRICS_PORT_VARIABLE}={quoted(text)}: expected a TCP port from 1 to 65535 (or unset: no exporter)"
        )
    return port


def _metrics_address(text: str | None) -> str:
    """`localhost` (the default), `0.0.0.0`, `::` or an IP address, as `ipaddress` writes it; not a host name:
    the same setting reaches every host's turn server, and a name could mean another address on each."""
    value = (text or "").strip()
    if not value or value.lower() == "localhost":
        return "localhost"
    try:
        return str(ipaddress.ip_address(value.strip("[]")))
    except ValueError:
        raise XoverError(
            f"{METRICS_ADDRESS_VARIABLE}={quoted(text)}: expected localhost (the default: loopback only), "
            "0.0.0.0 or :: (every interface, IPv4 and IPv6), or an IP address of this host"
        ) from None


def _absolute_folder(variable: str, text: str | None) -> Path | None:
    """An absolute path; unset or empty: None (the default folder)."""
    value = (text or "").strip()
    if not value:
        return None
    if not os.path.isabs(value):
        raise XoverError(f"{variable}={quoted(text)}: expected an absolute path to a folder of your own")
    return Path(value)


def parse_port_range(text: str) -> tuple[int, int] | None:
    """'9470-9479' -> (9470, 9479), '9470' -> (9470, 9470); None unless both ends are TCP ports, low first."""
    low, separator, high = text.strip().partition("-")
    if not separator:
        high = low
    first, last = whole_number(low), whole_number(high)
    if first is None or last is None or len(low.strip()) > 5 or len(high.strip()) > 5:
        return None
    return (first, last) if 1 <= first <= last <= 65535 else None


def _port_range(variable: str, text: str | None) -> tuple[int, int] | None:
    """LOW-HIGH or one PORT; unset or empty: None."""
    if not (text or "").strip():
        return None
    ports = parse_port_range(text or "")
    if ports is None:
        raise XoverError(
            f"{variable}={quoted(text)}: expected LOW-HIGH, TCP ports from 1 to 65535 with LOW <= HIGH "
            "(e.g. 9470-9479), or one PORT"
        )
    return ports


def _flag(variable: str, text: str | None, default: bool) -> bool:
    """1 or 0; unset or empty: the default."""
    value = (text or "").strip()
    if not value:
        return default
    if value not in ("0", "1"):
        raise XoverError(f"{variable}={quoted(text or '')}: expected 1 (on) or 0 (off)")
    return value == "1"


def _part(whole: str, part: str) -> str:
    """A part of a setting's value, quoted, where the value holds no password; else not shown (a URL cut at a ','
    is no URL to mask: `https://bot:pa` of `https://bot:pa,ss@host` would be the password's first half)."""
    return quoted(part) if mask_credentials(whole) == whole else "a part of it"


def _names(variable: str, text: str | None) -> tuple[str, ...]:
    """'a,b': names, each of letters, digits, '-' and '_' (whether each exists is the registry's to say)."""
    names = tuple(name.strip() for name in (text or "").split(",") if name.strip())
    for name in names:
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name):
            raise XoverError(
                f"{variable}={quoted(text or '')}: {_part(text or '', name)} is not a name (letters, digits, '-', '_')"
            )
    return names


def _link_bands(given: str) -> bool:
    text = given.strip().lower()
    if text not in ("on", "off"):
        raise XoverError(f"{LINK_BANDS_VARIABLE}={quoted(given)}: expected on or off")
    return text == "on"


def _turn_lease(text: str | None) -> dict[str, float] | None:
    """'floor=30,factor=20,initial=600': how long a job may hold a turn (seconds; at least `floor`,
    `factor` x its usual hold, `initial` before it has a history). Defaults in turns/server.py."""
    if not text:
        return None
    try:
        items = [(key.strip(), _decimal(value)) for key, value in (item.split("=") for item in text.split(","))]
    except ValueError:
        raise XoverError(f"{TURN_LEASE_VARIABLE}={quoted(text)}: expected floor=S,factor=N,initial=S") from None
    lease = dict(items)
    unknown = set(lease) - set(TURN_LEASE_LIMITS)
    if unknown or len(lease) < len(items) or not all(math.isfinite(v) and v > 0 for v in lease.values()):
        raise XoverError(
            f"{TURN_LEASE_VARIABLE}={quoted(text)}: keys floor, factor, initial, each at most once, with "
            "positive finite values"
        )
    too_long = [key for key, value in lease.items() if value > TURN_LEASE_LIMITS[key]]
    if too_long:  # a turn's wait must fit select() (and a day is no lease at all)
        raise XoverError(
            f"{TURN_LEASE_VARIABLE}={quoted(text)}: "
            + ", ".join(
                f"{key} at most {TURN_LEASE_LIMITS[key]:g}" + (" (seconds: a day)" if key != "factor" else "")
                for key in too_long
            )
        )
    return lease


def _adaptive(text: str | None) -> dict[str, str]:
    """'window=2,pairs=2,start=turns,measured=probe': how an adaptive group probes (docs/reference.md); each
    key once, each number ASCII digits within its range (ADAPTIVE_RANGES; whole numbers for iterations, pairs,
    warmup), each word one of its key's (ADAPTIVE_WORDS)."""
    if not text or not text.strip():
        return {}
    found: dict[str, str] = {}
    for item in text.split(","):
        key, separator, value = (part.strip() for part in item.partition("="))
        if not separator or (key not in ADAPTIVE_RANGES and key not in ADAPTIVE_WORDS) or key in found:
            raise XoverError(
                f"{ADAPTIVE_VARIABLE}={quoted(text)}: expected KEY=VALUE,... with each KEY once, one of "
                f"{', '.join([*ADAPTIVE_RANGES, *ADAPTIVE_WORDS])}"
            )
        if key in ADAPTIVE_WORDS:
            if value not in ADAPTIVE_WORDS[key]:
                raise XoverError(
                    f"{ADAPTIVE_VARIABLE}={quoted(text)}: {key}={_part(text, value)}: "
                    f"expected {' or '.join(ADAPTIVE_WORDS[key])}"
                )
        else:
            low, high, low_allowed = ADAPTIVE_RANGES[key]
            number = whole_number(value) if key in ("iterations", "pairs", "warmup") else decimal_number(value)
            if number is None or not (low <= number <= high) or (number == low and not low_allowed):
                kind = "a whole number" if key in ("iterations", "pairs", "warmup") else "a number"
                raise XoverError(
                    f"{ADAPTIVE_VARIABLE}={quoted(text)}: {key}={_part(text, value)}: expected {kind} "
                    f"{'from' if low_allowed else 'above'} {low:g} {'to' if low_allowed else 'and at most'} {high:g}"
                )
        found[key] = value
    return found


def _decimal(text: str) -> float:
    """A decimal number of ASCII digits; ValueError for anything else (the caller names the variable)."""
    value = decimal_number(text)
    if value is None:
        raise ValueError(text)
    return value


def _turn_heartbeat(text: str | None) -> float | None:
    """Seconds between keep-alives, more than 0 and at most 60 (a worker takes 30 s of silence for a
    dead server); shorter ones fill a stopped worker's socket sooner (bench/chaos.py's stop-waiter)."""
    if not text or not text.strip():
        return None
    value = decimal_number(text)
    if value is None or not (math.isfinite(value) and 0 < value <= 60):
        raise XoverError(f"{TURN_HEARTBEAT_VARIABLE}={quoted(text)}: expected seconds, more than 0 and at most 60")
    return value


TURN_SEND_BUFFER_MAX = 1 << 30


def _turn_send_buffer(text: str | None) -> int | None:
    """Bytes of each worker connection's send buffer at the turn server, 1 to 1 GiB (the kernel doubles
    the value and keeps it within its own minimum and net.core.wmem_max)."""
    if not text or not text.strip():
        return None
    size = whole_number(text)
    if size is None or not 1 <= size <= TURN_SEND_BUFFER_MAX:
        raise XoverError(
            f"{TURN_SEND_BUFFER_VARIABLE}={quoted(text)}: expected bytes, a whole number from 1 "
            f"to {TURN_SEND_BUFFER_MAX}"
        )
    return size


def _turn_server_nice(text: str | None) -> int | None:
    """The turn servers' nice value; a server only ever raises its priority, so 0 leaves it alone."""
    if not text:
        return None
    if not re.fullmatch(r"\s*[-+]?[0-9]+\s*", text, re.ASCII) or not -20 <= int(text) <= 19:
        raise XoverError(f"{TURN_SERVER_NICE_VARIABLE}={quoted(text)}: expected an integer from -20 to 19")
    return int(text)
