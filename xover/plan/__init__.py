"""Decide which training jobs share devices, where, and what that should buy.

Pure: plain dataclasses and functions, no torch, no database, no output, so it
can be tested exhaustively and run on traces measured on other clusters.

* ``model``     - job profiles, the fluid bound, strict round robin's closed form;
* ``simulate``  - the runtime's turn policies simulated on a device and a link;
* ``predict``   - each job's speed in a group under a policy, group durations;
* ``grouping``  - matching / first-fit-decreasing / none;
* ``placement`` - groups onto host devices, in waves;
* ``plan``      - ``make_plan`` and the ``Plan`` it returns;
* ``planfile``  - the JSON plan file (``xover-plan/1``);
* ``trace``     - job profiles from a CSV trace;
* ``instances`` - a job instance: one run of a job (arrival, length, limits) apart from its profile;
* ``state``     - the free devices of every host, as placement asks about them;
* ``throughput``- how fast grouped jobs go: xover's model, Muri's interleaving with its factors;
* ``decide``    - the decision step `xover plan`, `xover simulate` and `xover run`'s start order ask.
"""

from .grouping import (
    ALGORITHMS,
    GroupingRules,
    group_period_ms,
    plan_objective,
    time_saved_ms,
)
from .make import GroupPlan, Plan, PlanInputError, PlannedScript, local_hosts, make_plan
from .model import (
    InvalidJobProfile,
    JobProfile,
    fluid_gain,
    fluid_speeds,
    lockstep_period,
    round_robin_gain,
    round_robin_period,
)
from .planfile import PLAN_FORMAT, PlanFormatError, plan_from_dict, plan_to_dict
from .predict import (
    SHARINGS,
    GroupPrediction,
    best_sharing,
    group_duration_ms,
    predict_group,
    predict_sharings,
    sequential_duration_ms,
)
from .simulate import SimJob, simulate
from .trace import TraceError, load_trace_csv

__all__ = [
    "ALGORITHMS",
    "SHARINGS",
    "best_sharing",
    "predict_sharings",
    "GroupPlan",
    "GroupPrediction",
    "GroupingRules",
    "InvalidJobProfile",
    "JobProfile",
    "PLAN_FORMAT",
    "Plan",
    "PlanFormatError",
    "PlanInputError",
    "PlannedScript",
    "TraceError",
    "SimJob",
    "fluid_gain",
    "fluid_speeds",
    "group_duration_ms",
    "group_period_ms",
    "load_trace_csv",
    "local_hosts",
    "lockstep_period",
    "make_plan",
    "plan_from_dict",
    "plan_objective",
    "plan_to_dict",
    "predict_group",
    "round_robin_gain",
    "round_robin_period",
    "sequential_duration_ms",
    "simulate",
    "time_saved_ms",
]
