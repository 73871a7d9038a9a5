"""What the turn policy knows of each job (its `SlotTraits`): from its profile, from the plan, or from its
run alone; and the iterations a job gets for `--seconds`, from the same solo time."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ..analysis import profile_of_run
from ..devices import hardware_fingerprint
from ..errors import XoverError
from ..hosts import is_local
from ..links import HOST, Link
from ..plan.from_profiles import job_profile
from ..plan.measured import Measurements
from ..plan.predict import measured_runs, predict_considered
from ..recipes import MAX_ITERATIONS, profile_ranks, with_overrides
from ..recipes import profile_command as recipe_profile_command
from ..sharing import RunStatus, adapts
from ..store.measured import recent_measurements
from ..store.profiles import find_profile
from ..turns.policies import SlotTraits, critical_rank
from .jobs import GroupToRun, JobSpec
from .learn import identity_of, legacy_identity_of


def traits_of(device_ms: float, comm_ms: float, max_slowdown: float | None, link_ms: float | None = None) -> SlotTraits:
    """What the turn policy learns of a job from its time alone: its critical rank, its solo iteration
    (device time plus communication) and its share of the link."""
    solo_s = (device_ms + comm_ms) / 1000
    link_fraction = max(link_ms, comm_ms) / 1000 / solo_s if link_ms is not None and solo_s > 0 else None
    return SlotTraits(
        rank=critical_rank(device_ms / 1000, solo_s),
        max_slowdown=max_slowdown,
        solo_iteration_s=solo_s,
        link_fraction=link_fraction,
    )


def stored_profile(store, job: JobSpec, link: Link, hardware: str):
    """The job's newest profile as it runs here (recipe, np, link, engine, hosts), under this process's settings
    that change a job alone, else under others (its order among the jobs and its length in seconds seldom
    change with them: better than none, as in a run with the torch backend switched), or None."""
    key = (store, job.recipe.profile_keys, job.recipe.np, link.key, hardware, job.engine, len(job.devices))
    return find_profile(*key) or find_profile(*key, any_settings=True)


def attach_traits(store, jobs: list[JobSpec], link: Link) -> None:
    """What the turn policy should know of each job, from its stored profile (same recipe, np, link,
    engine): its compute fraction ranks it (critical path first), its link fraction orders the link,
    its solo time and max_slowdown protect it. Without a profile the server learns the compute
    fraction from what it sees, and the job keeps the link's default band."""
    hardware = hardware_fingerprint()
    for job in jobs:
        if job.traits is not None:
            continue
        found = stored_profile(store, job, link, hardware)
        job.traits = SlotTraits(rank=None, max_slowdown=job.recipe.max_slowdown, solo_iteration_s=None)
        if found is not None:
            job.traits = traits_of(
                found.data_ms + found.compute_ms, found.comm_ms, job.recipe.max_slowdown, found.link_ms
            )


def predict_unplanned(store, group: GroupToRun, link: Link, policy: str, modes: Sequence[str]) -> None:
    """A group run without a plan (`--group`, scripts) in a way that adapts gets the gains a plan would have
    predicted for it, from the same stored profiles as its traits, and from what earlier comparisons measured
    on the same jobs (each way's newest measurements at this link on this hardware under these settings,
    plan/measured.py), marked
    as measured: it starts in the better of them (run/units.py), as it would from a plan, and where both were
    measured far enough apart it settles there without probing. Nothing where a job has no profile at this
    link; an adaptive group then starts without turns."""
    if group.predicted_by_sharing or not any(adapts(mode) for mode in modes):
        return
    hardware = hardware_fingerprint()
    profiles = []
    for job in group.jobs:
        found = stored_profile(store, job, link, hardware)
        if found is None:
            return
        profiles.append(replace(job_profile(job.recipe, found), name=job.name))
    identities = {job.name: identity_of(job) for job in group.jobs}
    legacy = {job.name: legacy_identity_of(job) for job in group.jobs}
    measured = Measurements.of_rows(recent_measurements(store, link.key), identities, legacy)
    predictions, sources = predict_considered(profiles, policy, measured=measured)
    group.predicted_by_sharing = {way: p.gain for way, p in predictions.items()}
    group.predicted_from = sources
    group.measured_runs = measured_runs(predictions, sources)


def traits_from_summary(summary: dict[str, Any], max_slowdown: float | None, link: Link = HOST) -> SlotTraits | None:
    """Traits from a job's run alone (the sequential mode), when no profile was stored: its compute
    fraction, and on a known link rate its link time as a profile would have it (gradient bytes at
    the rate, within [exposed, measured span]), so that the link order covers it too."""
    if summary["status"] != RunStatus.FINISHED or summary["compute_ms"] is None:
        return None
    alone = None if link.is_host else profile_of_run(summary, link)
    return traits_of(
        (summary["data_ms"] or 0.0) + summary["compute_ms"],
        summary["communication_ms"] or 0.0,
        max_slowdown,
        alone.link_ms if alone is not None else None,
    )


def profile_command(job: JobSpec, link: Link) -> str:
    """The `xover profile` that measures `job` as it runs here: on its link, under its engine, on its hosts."""
    recipe = with_overrides(job.recipe, np=job.np)
    hosts = [] if all(map(is_local, job.devices)) else ["-H", job.hosts]
    return recipe_profile_command(recipe, *link.flag.split(), "--engine", job.engine, *profile_ranks(recipe), *hosts)


def give_seconds(jobs: list[JobSpec], seconds: float, link: Link) -> None:
    """Each job gets the iterations it does in about `seconds` alone (from its profile's time per
    iteration), so that jobs of a group overlap from start to end."""
    for job in jobs:
        solo_s = job.traits.solo_iteration_s if job.traits else None
        if not solo_s:
            command = profile_command(job, link)
            raise XoverError(
                f"--seconds needs each job's time per iteration: no profile of '{job.name}' "
                f"(np {job.np}, engine {job.engine}) at this link; run `{command}` first"
                f"{' (with your secrets where it shows ***)' if '***' in command else ''}, "
                "or use --iterations"
            )
        iterations = max(5, math.ceil(seconds / solo_s))
        if iterations > MAX_ITERATIONS:
            raise XoverError(
                f"--seconds {seconds:g}: '{job.name}' would run {iterations} iterations of {solo_s * 1000:.3g} ms, "
                f"more than {MAX_ITERATIONS}; give fewer seconds"
            )
        job.recipe = with_overrides(job.recipe, iterations=iterations)
