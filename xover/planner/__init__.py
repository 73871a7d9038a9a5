"""Decide which training jobs share devices, where, and what that should buy.

Pure: plain dataclasses and functions, no torch, no database, no output, so it
can be tested exhaustively and run on traces measured on other clusters.

* ``model``     - the throughput model (period of a group of jobs taking turns);
* ``grouping``  - matching / first-fit-decreasing / none;
* ``placement`` - groups onto host devices, in waves;
* ``plan``      - ``make_plan`` and the ``Plan`` it returns;
* ``planfile``  - the JSON plan file (``xover-plan/1``);
* ``trace``     - job profiles from a CSV trace.
"""

from .grouping import ALGORITHMS, GroupingRules, plan_objective
from .model import (
    InvalidJobProfile,
    JobProfile,
    group_duration_ms,
    group_gain,
    lockstep_period,
    predicted_period,
    predicted_slowdown,
    sequential_duration_ms,
    time_saved_ms,
)
from .plan import GroupPlan, Plan, PlanInputError, local_hosts, make_plan
from .planfile import PLAN_FORMAT, PlanFormatError, plan_from_dict, plan_to_dict
from .trace import TraceError, load_trace_csv

__all__ = [
    "ALGORITHMS",
    "GroupPlan",
    "GroupingRules",
    "InvalidJobProfile",
    "JobProfile",
    "PLAN_FORMAT",
    "Plan",
    "PlanFormatError",
    "PlanInputError",
    "TraceError",
    "group_duration_ms",
    "group_gain",
    "load_trace_csv",
    "local_hosts",
    "lockstep_period",
    "make_plan",
    "plan_from_dict",
    "plan_objective",
    "plan_to_dict",
    "predicted_period",
    "predicted_slowdown",
    "sequential_duration_ms",
    "time_saved_ms",
]
