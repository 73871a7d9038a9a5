"""One invocation's experiment, as profile, train and run share it.

experiment(...)     its row, a reaper that stops its processes if xover is killed, signals,
                    progress, the context its units share, its final status whatever happens
lease_devices(...)  every device it will use, leased before anything starts
link_of(...)        the link its figures are keyed by
settings_from_env() the run's XOVER_* settings, checked before anything is recorded
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.exc import DBAPIError

from ..config import make_results_folder, results_root, xover_pythonpath
from ..console import counted, print_notice
from ..devices import local_device_count
from ..errors import XoverError
from ..hints import xover_command
from ..hosts import LOCAL, Device
from ..links import Link
from ..settings import LEASE_DIR_VARIABLE, REAPER_DB_VARIABLE, settings
from ..sharing import RunStatus, experiment_status
from ..store.queries import new_experiment_id
from ..store.session import (
    Store,
    StoreFailedDuringRun,
    StoreGone,
    stopped_by_the_store,
    store_failed_during_run_words,
    store_gone_words,
)
from .adaptive import AdaptiveSettings
from .external.horovodrun import check_forwarded_names
from .jobs import JobSpec
from .leases import DeviceLeases, describe_busy, device_shown, lease_dir
from .reach import run_link
from .record import Recorder, reconcile_lost, running_on
from .schedule import RunContext
from .sinks import MetricSink, StoreSink, deliver, sinks_named
from .supervise import Interrupted, TimedOut, interruptible, uninterrupted


class Reaper:
    """The reaper process of an experiment (reaper.py): told `done` when the experiment ends properly."""

    def __init__(self, experiment_id: str, db_url: str) -> None:
        # The store's URL goes in the environment, not the command line every local user can read; the
        # user's own PYTHONPATH stays after xover's (it may hold what xover imports: SQLAlchemy, ...).
        path = xover_pythonpath(os.environ.get("PYTHONPATH"))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "xover.run.reaper", "--experiment", experiment_id],
            stdin=subprocess.PIPE,
            start_new_session=True,
            env={**os.environ, "PYTHONPATH": path, REAPER_DB_VARIABLE: db_url},
        )
        self.hosts: set[str] = set()

    def add_host(self, host: str, prefix: list[str]) -> None:
        """A host the experiment reached, for the reaper to sweep should xover die."""
        if host not in self.hosts:
            self.hosts.add(host)
            self._send(f"host {host}")

    def add_job(self, cancel_command: list[str]) -> None:
        """A job the experiment submitted to a launcher's scheduler, by the command that ends it: the reaper
        runs it should xover die."""
        self._send(f"cancel {json.dumps(cancel_command)}")

    def _send(self, line: str) -> None:
        assert self.process.stdin is not None  # piped
        try:
            self.process.stdin.write(line.encode() + b"\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            pass

    def done(self) -> None:
        """Tell the reaper the experiment ended properly, and wait for it to exit."""
        self._send("done")
        assert self.process.stdin is not None  # piped
        try:
            self.process.stdin.close()
        except OSError:
            pass
        self.process.wait(timeout=30)


@dataclass
class Experiment:
    """One invocation: its id, store, recorder, results folder and the context its units share."""

    id: str
    store: Store
    recorder: Recorder
    context: RunContext
    leases: DeviceLeases

    @property
    def results_dir(self) -> Path:
        """The experiment's results folder."""
        return self.context.results_dir


def link_of(jobs: list[JobSpec], asked: Link | None) -> Link:
    """The link a run's figures are keyed by: --bandwidth (this machine's shaped loopback, or the host
    network), else the emulated cluster's NICs when jobs span its hosts, else the host network. Checked
    before anything is recorded: a spec that mixes emulated and other hosts, or a shaped loopback across
    hosts, is refused."""
    return run_link(sorted({host for job in jobs for host in job.devices}), asked)


@contextlib.contextmanager
def experiment(
    store: Store,
    kind: str,
    command: str,
    link: Link,
    sinks: Sequence[str | MetricSink],
    plan_id: int | None = None,
    timeout_s: float | None = None,
    kept_empty: bool = True,
):
    """One invocation's experiment: its records to the store and the `sinks` named (run/sinks.py: the
    progress display, ...) while it runs, its final status whatever happens, and a reaper that stops
    its processes if xover itself is killed. A store that fails part-way (a full disk) ends it as
    StoreFailedDuringRun, whatever else ended it: its records are what a user must hear about. `kept_empty`: kept
    where it ends with no run (a launcher's runs recorded elsewhere); a profile that found nothing left to measure
    keeps none."""
    # the sinks asked for, and those of the settings (XOVER_METRIC_SINKS); refused before anything is recorded
    live_sinks = sinks_named([*sinks, *(name for name in settings().metric_sinks if name not in sinks)])
    lease, server_nice, link_bands = settings_from_env()  # refused before anything is recorded
    reconcile_lost(store)
    experiment_id = new_experiment_id()
    results_dir = results_root() / "runs" / experiment_id  # a results folder others could write is refused here
    make_results_folder(results_dir)  # before anything is recorded: a folder it cannot write leaves no record
    recorder = Recorder(store, experiment_id)
    recorder.open(kind, command, link.rate, plan_id)
    reaper = Reaper(experiment_id, store.url)
    context = RunContext(
        recorder=recorder,
        experiment_id=experiment_id,
        results_dir=results_dir,
        link=link,
        sinks=[StoreSink(recorder), *live_sinks],
        timeout_s=timeout_s,
        reaper=reaper,
        lease=lease,
        server_nice=server_nice,
        link_bands=link_bands,
    )
    leases = DeviceLeases(f"experiment {experiment_id} ({command})")
    status = RunStatus.FINISHED
    refused = discarded = False
    stopped: type[Interrupted] | type[TimedOut] | None = None
    store_failure: DBAPIError | None = None  # the store's read or write that failed during the run, or at its end
    try:
        context.sinks[:] = deliver(context.sinks, lambda sink: sink.opened(experiment_id))
        with interruptible():
            yield Experiment(experiment_id, store, recorder, context, leases)
    except StoreGone:  # a write found the store's file gone (Recorder.apply): a run that failed, not refused input
        status = RunStatus.FAILED
        raise
    except DBAPIError as error:  # the store refused a write part-way (a full disk): the run was stopped, it failed
        status, store_failure = RunStatus.FAILED, error
        raise
    except XoverError:
        # refused before any job was recorded (a device in use, a lease folder or a host it cannot use): like a
        # bad flag, nothing kept; once a job has a run, the experiment stays, failed
        status, refused = RunStatus.FAILED, True
        raise
    except (Interrupted, KeyboardInterrupt):
        status, stopped = RunStatus.INTERRUPTED, Interrupted
    except TimedOut:
        status, stopped = RunStatus.TIMEOUT, TimedOut
    except BaseException:
        status = RunStatus.FAILED
        raise
    finally:
        with uninterrupted():
            leases.release()
            # the store's SQLite file deleted or replaced during the run: SQLite wrote into the unlinked file, and
            # the run must not end as if stored (its summary, `xover report ID`); nothing more is written
            gone = store.gone()
            end_recorded = gone is None
            if gone is None:
                why = stopped_by_the_store(store_failure.orig) if store_failure is not None else None
                try:
                    # a refused one, one stopped before any run (waiting for its devices), or a profile that found
                    # nothing left to measure once it had its devices (another xover's, meanwhile) would be
                    # `report latest`
                    ended = refused or stopped is not None or (status == RunStatus.FINISHED and not kept_empty)
                    discarded = ended and recorder.discard()
                    if not discarded:
                        recorder.finish(status, why)
                except DBAPIError as error:  # still full: nothing more is written, and the line below says so
                    end_recorded = False
                    if not refused:  # a refusal's own line is what its user needs
                        store_failure = store_failure or error
            if (refused or discarded) and gone is None:
                with contextlib.suppress(OSError):
                    results_dir.rmdir()  # left where empty
            # its records lost, or its end not recorded: the store's rows say nothing the sinks could be told
            shown = shown_status(recorder, status) if end_recorded else RunStatus.FAILED
            deliver(context.sinks, lambda sink: sink.closed(shown))
            reaper.done()
            if gone is not None:
                raise StoreGone(store_gone_words(store.file, gone, experiment_id, results_dir)) from None
            if store_failure is not None and not refused:
                raise StoreFailedDuringRun(
                    store_failed_during_run_words(
                        store.url,
                        store_failure.orig,
                        experiment_id,
                        results_dir,
                        end_recorded,
                        xover_command("report", experiment_id),
                    )
                ) from None
    if stopped is not None:  # the one line it ends with says which job was still running, and where to look
        with uninterrupted():
            if discarded:
                raise stopped("stopped before any run started (waiting for its devices?): nothing was kept") from None
            raise stopped(stopped_words(recorder, status, results_dir)) from None


def shown_status(recorder: Recorder, status: str) -> str:
    """The experiment's status as its sinks are told it at its close: how its runs ended where it ran to its end
    (`failed` where a job failed), as the report shows it (sharing.experiment_status)."""
    try:
        return experiment_status(status, recorder.run_statuses())
    except Exception:  # noqa: BLE001 - a store that fails now (full disk, gone) must not keep the sinks unclosed
        return status


def stopped_words(recorder: Recorder, status: str, results_dir: Path) -> str:
    """What a run cut short by --timeout or Ctrl-C left: every process stopped, each run as it ended, the
    experiment and its logs."""
    try:  # every run, those that finished before the stop too: not under "unfinished"
        ended = recorder.runs_as_they_ended()
        runs = f"; the runs: {ended}" if ended else "; no run had started"
    except Exception:  # noqa: BLE001 - a store that fails now (full disk, gone) must not hide how the run ended
        runs = ""
    return (
        f"every process was stopped; unfinished runs are marked {status}{runs}; "
        f"experiment {recorder.experiment_id} ({xover_command('report', recorder.experiment_id)}), "
        f"logs in {results_dir}"
    )


def _offsets_on_this_machine(devices: set[Device]) -> list[int]:
    """How far a run on this machine's `devices` may move, nearest first, its devices staying on this machine
    (none where a device is on another host)."""
    if not devices or any(host != LOCAL for host, _ in devices):
        return []
    _, count = local_device_count()
    return list(range(1, count - max(index for _, index in devices)))


def _devices_named(devices: set[Device]) -> str:
    return ", ".join(map(device_shown, sorted(devices)))


def settings_from_env() -> tuple[dict[str, float] | None, int | None, bool]:
    """The run's turn lease, turn servers' nice and link bands, from the settings (settings.py: every
    XOVER_* setting checked at once, those the workers read too, so a bad one is refused here), and no variable
    the launchers forward under a name a shell cannot set."""
    check_forwarded_names(os.environ)
    current = settings()
    AdaptiveSettings.of(current.adaptive)  # its windows in their order too
    return current.turn_lease, current.turn_server_nice, current.link_bands


def lease_devices(run: Experiment, jobs: list[JobSpec], wait: bool, movable: bool = False) -> None:
    """Every device the run will use, leased before anything starts (--wait: until they are free). `movable`:
    the jobs are on this machine's first devices because nothing placed them (no plan): where those are
    busy, the run takes the first free ones further on instead, every job moved by as many, and says so."""

    def waiting(busy, waited_s):
        still = f"still waiting after {waited_s / 60:.0f} min" if waited_s else "waiting"
        print_notice(f"{still}: {describe_busy(busy)}")

    timeout_s = run.context.timeout_s
    devices = set().union(*(job.device_set for job in jobs))
    offsets = _offsets_on_this_machine(devices) if movable else []
    taken = run.leases.acquire(
        devices,
        wait,
        waiting,
        deadline=time.monotonic() + timeout_s if timeout_s else None,
        instead=[{(host, index + offset) for host, index in devices} for offset in offsets],
    )  # --wait ends at --timeout
    if taken:
        offset = offsets[taken - 1]
        for job in jobs:
            job.devices = {host: [index + offset for index in indices] for host, indices in job.devices.items()}
        moved = set().union(*(job.device_set for job in jobs))
        print_notice(f"{_devices_named(devices)} in use: this run takes {_devices_named(moved)} instead")
        devices = moved
    with run.store.session() as session:
        others = running_on(session, run.id, devices)
    if others:
        print_notice(
            f"warning: {counted(len(others), 'experiment')} of this store ({', '.join(others)}) running on this "
            f"machine on devices this run leased: it leases them in another folder ({LEASE_DIR_VARIABLE}; here "
            f"{lease_dir()}), so both runs share the devices, neither's figures are of its jobs alone, and a "
            "comparison that ran beside another is not kept for the next plan"
        )
