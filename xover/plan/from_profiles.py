"""From a recipe and its stored profile to the planner's view of the job (`planner.JobProfile`).

Both the profile step (the reference partner's link share) and the plan step read stored profiles
this way; the planner itself stays pure (no store, no torch).
"""

from __future__ import annotations

from ..settings import settings
from . import JobProfile
from .model import checkpoint_interval_ms


def recipe_iterations(recipe) -> int:
    """How many iterations the recipe trains: its own count, or its epochs over its dataset as its
    ranks split it (the plan carries this count, and `xover run PLAN` runs exactly it)."""
    if recipe.iterations or not getattr(recipe, "epochs", None):
        return recipe.iterations or 100
    from ..workloads import build_dataset  # torch: only for a recipe counted in epochs

    dataset = build_dataset(
        recipe.dataset,
        batch_size=recipe.batch_size,
        rank=0,
        world_size=recipe.np,
        seed=recipe.seed,
        options=recipe.dataset_options,
    )
    return recipe.epochs * dataset.steps_per_epoch


def job_profile(recipe, found) -> JobProfile:
    """The planner's view of a stored profile (`store.models.Profile`, or anything with its fields)."""
    link_ms = found.link_ms if found.link_ms is not None else found.comm_ms
    comm_cpu = min(1.0, found.comm_cpu_ms / link_ms) if found.comm_cpu_ms and link_ms > 0 else 0.0
    device_ms = found.data_ms + found.compute_ms
    return JobProfile(
        name=recipe.name,
        devices=recipe.np,
        compute_ms=found.compute_ms,
        comm_ms=found.comm_ms,
        memory_gb=recipe.memory_gb if recipe.memory_gb is not None else found.memory_gb,
        data_ms=found.data_ms,
        iterations=recipe_iterations(recipe),
        link_ms=link_ms,
        comm_cpu=comm_cpu,
        checkpoint_ms=checkpoint_interval_ms(
            device_ms,
            found.checkpoints,
            on_gpu=(getattr(found, "hardware", None) or "").startswith("gpu:"),
            synced=settings().checkpoint_sync,
        ),
        max_slowdown=recipe.max_slowdown,
        interference=found.interference or 0.0,
        interference_link_share=found.corun_partner_link_share or None,
        startup_ms=found.startup_ms or 0.0,
        corun_stretch=getattr(found, "corun_stretch", None),
        mps_stretch=getattr(found, "mps_stretch", None),
    )
