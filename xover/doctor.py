"""`xover doctor`: can jobs run here, and with what?"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.exc import DBAPIError

from . import settings as known_settings
from .config import check_results_folder
from .devices import local_device_count, torch_backend
from .emulation.cluster import diagnose_cluster
from .emulation.network import ShapedNetwork
from .errors import XoverError
from .recipes import did_you_mean
from .run.adaptive import AdaptiveSettings
from .run.external.horovodrun import check_forwarded_names, horovodrun_path
from .run.launchers import LAUNCHERS
from .run.leases import LEASE_DIR, held_here
from .run.sinks import SINKS
from .settings import (
    ADAPTIVE_VARIABLE,
    LEASE_DIR_VARIABLE,
    METRIC_SINKS_VARIABLE,
    RESULTS_VARIABLE,
    TORCH_BACKEND_VARIABLE,
    Settings,
    as_given,
)
from .store import (
    session as store_session,  # as an attribute: tests replace store_session.open_store
)


@dataclass
class Check:
    """One thing `xover doctor` checked: whether it is fine, what it found, and how to fix it if not."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = True


@dataclass
class Diagnosis:
    """Everything `xover doctor` checked."""

    checks: list[Check] = field(default_factory=list)

    @property
    def can_run_jobs(self) -> bool:
        """Whether every required check passed."""
        return all(c.ok for c in self.checks if c.required)

    def to_dict(self) -> dict[str, Any]:
        """The diagnosis as `xover doctor --json` writes it."""
        return {
            "ok": self.can_run_jobs,
            "checks": [
                {"name": c.name, "ok": c.ok, "detail": c.detail, "fix": c.fix, "required": c.required}
                for c in self.checks
            ],
        }


def _torch() -> Check:
    try:
        import torch
    except ImportError as error:
        return Check("torch", False, f"not importable: {error}", "run `make setup`")
    cuda = f", CUDA {torch.version.cuda}" if torch.version.cuda else ", CPU build"
    return Check("torch", True, f"{torch.__version__}{cuda}")


def _horovod() -> Check:
    # A subprocess: a broken Horovod build can abort the interpreter that imports it.
    code = (
        "import horovod, horovod.torch as h;print(horovod.__version__, h.gloo_built(), h.nccl_built(), h.mpi_built())"
    )
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return Check("horovod", False, "importing horovod.torch timed out", "rebuild: scripts/install_horovod.sh")
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["import failed"])[-1]
        return Check(
            "horovod",
            False,
            f"horovod.torch does not import: {last}",
            "run `make setup` (builds Horovod 0.28.1 against this torch)",
        )
    version, gloo, nccl, mpi = out.stdout.split()
    detail = (
        f"{version}, built with torch: yes, Gloo: {gloo == 'True' and 'yes' or 'no'}, "
        f"NCCL: {nccl != '0' and nccl != 'False' and 'yes' or 'no'}, MPI: {mpi == 'True' and 'yes' or 'no'}"
    )
    ok = gloo == "True"
    return Check("horovod", ok, detail, "" if ok else "rebuild with HOROVOD_WITH_GLOO=1 (make setup)")


def _launcher() -> Check:
    try:
        return Check("horovodrun", True, horovodrun_path())
    except Exception as error:
        return Check("horovodrun", False, str(error), "run `make setup`")


def _gpus() -> Check:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return Check("gpus", True, "none (no NVIDIA driver): jobs run on CPU cores, one core per rank", required=False)
    try:
        names = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            name = name.decode() if isinstance(name, bytes) else name
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle).total / 2**30
            names.append(f"{index}: {name} ({memory:.0f} GiB)")
        return Check("gpus", True, f"{len(names)}: " + "; ".join(names) if names else "none", required=False)
    finally:
        pynvml.nvmlShutdown()


def _cpus() -> Check:
    cores = len(os.sched_getaffinity(0))
    load = os.getloadavg()[0]
    busy = "; busy: what is measured now (a profile, a run's figures) is a busy machine's" if load > cores / 2 else ""
    return Check("cpus", True, f"{cores} usable cores, load {load:.1f} over the last minute{busy}", required=False)


def _devices_in_use() -> Check:
    """Which of this machine's devices another xover holds now: a run there waits (--wait) or is refused."""
    try:
        held = held_here(local_device_count()[1])
    except XoverError as error:  # a setting a run would refuse (the settings check names it)
        return Check("devices in use", True, f"cannot tell: {error}", required=False)
    detail = "; ".join(f"{device} by {who}" for device, who in held.items()) if held else "none"
    return Check("devices in use", True, detail, required=False)


def _bandwidth_emulation() -> Check:
    try:
        with ShapedNetwork("1gbit"):
            pass
        return Check(
            "bandwidth emulation",
            True,
            "network namespace + tc tbf with a priority queue works (--bandwidth available)",
            required=False,
        )
    except Exception as error:
        return Check(
            "bandwidth emulation",
            False,
            str(error).split(": ", 1)[-1],
            "needs `unshare -rn` (user namespaces) and `tc` (iproute2); without it, drop --bandwidth",
            required=False,
        )


def _emulated_cluster() -> Check:
    ok, detail = diagnose_cluster()
    return Check(
        "emulated cluster",
        ok,
        detail,
        "" if ok else "run scripts/setup_cluster.sh as root; `xover cluster down` clears a broken one",
        required=False,
    )


def _launchers() -> list[Check]:
    """What each launcher says of itself here (Slurm: its commands and controller); never required."""
    found = (launcher.doctor_check() for launcher in LAUNCHERS.values())
    return [Check(name, ok, detail, fix, required=False) for name, ok, detail, fix in filter(None, found)]


def _database(db: str | None) -> Check:
    try:
        missing = store_session.missing_sqlite_file(db)
    except XoverError as error:  # a URL no command takes (sqlite:// in memory, postgres://): a failed check
        return Check("database", False, str(error), "choose a file or a database server with --db or XOVER_DB")
    if missing is not None:  # a check must not create what it checks: the first run creates the file
        path = missing.absolute()
        folder = next(p for p in path.parents if p.exists())
        if folder.is_dir() and os.access(folder, os.W_OK | os.X_OK):
            return Check("database", True, f"{path} (sqlite) does not exist yet; the first run creates it")
        return Check(
            "database",
            False,
            f"{path} cannot be created: {folder} is not a writable folder",
            "choose a writable path with --db or XOVER_DB",
        )
    try:
        store = store_session.open_store(db)
        with store.engine.begin() as connection:
            connection.exec_driver_sql("CREATE TABLE IF NOT EXISTS _doctor_probe (x INTEGER)")
            connection.exec_driver_sql("DROP TABLE _doctor_probe")
        url = store_session.shown_url(store.url)  # no password
        kind = store.kind
        store.close()
        return Check("database", True, f"{url} ({kind}) is writable")
    except DBAPIError as error:  # the driver's words (a read-only file), without SQLAlchemy's statement and link
        failed = store_session.store_failed(store_session.database_url(db, create_folder=False), error.orig)
        return Check("database", False, str(failed), "choose a writable path with --db or XOVER_DB")
    except Exception as error:
        return Check("database", False, str(error), "choose a writable path with --db or XOVER_DB")


def _settings() -> Check:
    """The XOVER_* settings as a run reads them (each refused there with what to do), and the folders they
    name: a run refused what doctor passed (a metric sink misspelt, a lease or results folder that is a file).
    Every problem is named, not the first a run meets: each variable is read alone."""
    given = sorted(name for name in os.environ if name in Settings.variables())
    problems = []
    alone: dict[str, Settings] = {}
    for name in given:
        try:
            alone[name] = Settings.from_environ({name: os.environ[name]})
        except XoverError as error:
            problems.append(str(error))
    defaults = Settings.from_environ({})
    try:  # its keys against each other (window <= max_window), as a run's start checks them
        AdaptiveSettings.of(alone.get(ADAPTIVE_VARIABLE, defaults).adaptive)
    except XoverError as error:
        problems.append(str(error))
    try:  # a variable the launchers pass through a shell under a name no shell can set (XOVER_A-B): a run refuses it
        check_forwarded_names(os.environ)
    except XoverError as error:
        problems.append(str(error))
    backend = alone.get(TORCH_BACKEND_VARIABLE, defaults).torch_backend
    if backend:  # checked where a torch job starts (is there a GPU for nccl?): here too
        try:
            # its value as given, for the refusal to show it so
            torch_backend(
                local_device_count()[0] == "gpu", {TORCH_BACKEND_VARIABLE: as_given(TORCH_BACKEND_VARIABLE) or backend}
            )
        except XoverError as error:
            problems.append(str(error))
    sinks = alone.get(METRIC_SINKS_VARIABLE, defaults).metric_sinks
    unknown = [name for name in sinks if name not in SINKS]  # as a run's sinks_named refuses them
    if unknown:
        known = ", ".join(sorted(SINKS))
        problems.append(f"{METRIC_SINKS_VARIABLE}: no metric sink named {', '.join(unknown)} (there are: {known})")
    results = alone.get(RESULTS_VARIABLE, defaults).results
    try:
        check_results_folder(results)
    except XoverError as error:
        problems.append(str(error))
    lease_dir = alone.get(LEASE_DIR_VARIABLE, defaults).lease_dir or LEASE_DIR
    if os.path.exists(lease_dir) and not os.path.isdir(lease_dir):
        problems.append(f"{LEASE_DIR_VARIABLE}: {lease_dir} is a file, not a folder")
    if not problems:
        try:  # all of them together, as a run reads them
            Settings.from_environ()
        except XoverError as error:
            problems.append(str(error))
    if problems:
        each = len(problems) > 1
        fix = f"set {'each' if each else 'it'} as its message says, or unset it (docs/reference.md: Settings)"
        return Check("settings", False, "; ".join(dict.fromkeys(problems)), fix)
    return Check("settings", True, f"{', '.join(given)} read" if given else "none set: the defaults")


def _empty_settings() -> Check | None:
    """XOVER_* settings set to nothing: each is read as unset, its default (XOVER_RESULTS=$TYPO writes to
    ./results, XOVER_DB= opens results/xover.db), which a typo in a script would otherwise hide."""
    empty = sorted(name for name in os.environ if name in Settings.variables() and os.environ[name] == "")
    if not empty:
        return None
    return Check(
        "empty settings",
        False,
        f"set but empty, so read as unset (their defaults): {', '.join(empty)}",
        "give them a value or unset them (docs/reference.md: Settings)",
        required=False,
    )


def _unknown_settings() -> Check | None:
    """XOVER_* variables xover never reads: a misspelt setting is otherwise ignored without a word."""
    known = {value for name, value in vars(known_settings).items() if name.endswith("_VARIABLE")}
    unknown = sorted(name for name in os.environ if name.startswith("XOVER_") and name not in known)
    if not unknown:
        return None
    suffixes = [variable.removeprefix("XOVER_") for variable in known_settings.Settings.variables()]
    # compared without the prefix all share: XOVER_FOO is not close to XOVER_DB
    said = "; ".join(
        name + did_you_mean(name.removeprefix("XOVER_"), suffixes).replace(" '", " 'XOVER_", 1) for name in unknown
    )
    return Check(
        "unknown settings",
        False,
        f"not read by xover: {said}",
        "correct or unset them (docs/reference.md: Settings)",
        required=False,
    )


def diagnose(db: str | None = None) -> Diagnosis:
    """Check what this machine can run: Python, torch, Horovod, the launchers, devices, link shaping, the
    emulated cluster, Slurm and the store."""
    checks = [
        Check(
            "python",
            sys.version_info >= (3, 10),
            f"{platform.python_version()} ({sys.executable})",
            "use Python >= 3.10",
        )
    ]
    checks += [
        _torch(),
        _horovod(),
        _launcher(),
        _gpus(),
        _cpus(),
        _devices_in_use(),
        _bandwidth_emulation(),
        _emulated_cluster(),
        *_launchers(),
        _settings(),
        *filter(None, [_unknown_settings(), _empty_settings()]),
        _database(db),
    ]
    return Diagnosis(checks)
