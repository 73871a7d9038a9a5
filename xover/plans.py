"""The plan step: job profiles (stored, or a CSV trace) -> the pure planner -> a plan file + the store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .errors import XoverError
from .planner import JobProfile, load_trace_csv, local_hosts, make_plan, plan_to_dict
from .devices import hardware_fingerprint
from .profiler import find_profile
from .recipes import load_recipe
from .store.session import open_store

DEFAULT_PLAN = "results/plan.json"


def profiles_of_recipes(db: str | None, recipe_paths: list[str], bandwidth: str | None) -> tuple[list[JobProfile], dict[str, str]]:
    """JobProfiles from the newest stored profile of each recipe (this hardware first, then any)."""
    store = open_store(db)
    hardware = hardware_fingerprint()
    jobs, recipes = [], {}
    for path in recipe_paths:
        recipe = load_recipe(path)
        found = (find_profile(store, recipe.hash, recipe.np, bandwidth or None, hardware)
                 or find_profile(store, recipe.hash, recipe.np, bandwidth or None, None))
        if found is None:
            where = f" at --bandwidth {bandwidth}" if bandwidth else ""
            raise XoverError(f"no profile of '{recipe.name}' (np {recipe.np}){where}: run "
                             f"`xover profile {path}{' --bandwidth ' + bandwidth if bandwidth else ''}` first")
        if recipe.name in recipes:
            raise XoverError(f"recipe '{recipe.name}' is named twice; a plan needs distinct job names")
        jobs.append(JobProfile(name=recipe.name, devices=recipe.np, compute_ms=found.compute_ms,
                               comm_ms=found.comm_ms, memory_gb=found.memory_gb, data_ms=found.data_ms,
                               iterations=recipe.iterations or 100))
        recipes[recipe.name] = recipe.path
    return jobs, recipes


def plan_jobs(db: str | None, *, recipe_paths: list[str], trace_csv: str | None, devices: int | None,
              hosts: str | None, device_memory_gb: float | None, max_group: int, algo: str,
              out: str | None, bandwidth: str | None = None) -> dict[str, Any]:
    from .launch.horovod import parse_hosts
    from .store.queries import store_plan

    if bool(recipe_paths) == bool(trace_csv):
        raise XoverError("give recipes (planned from their stored profiles) or --profiles FILE.csv, not both")
    if hosts:
        host_list = parse_hosts(hosts)
    elif devices:
        host_list = local_hosts(devices)
    else:
        raise XoverError("say where jobs may run: --devices N (this machine) or -H host1:N,host2:N")
    if trace_csv:
        jobs, recipes = load_trace_csv(trace_csv), {}
    else:
        jobs, recipes = profiles_of_recipes(db, recipe_paths, bandwidth)
    plan = make_plan(jobs, host_list, device_memory_gb=device_memory_gb, max_group=max_group, algo=algo)
    body = plan_to_dict(plan, recipes)
    path = Path(out or DEFAULT_PLAN)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(body, indent=2) + "\n")
    store = open_store(db)
    with store.session() as session, session.begin():
        plan_id = store_plan(session, body, str(path))
    return {**body, "plan_id": plan_id, "path": str(path)}
