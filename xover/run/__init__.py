"""Running jobs (`xover train`, `xover run`, the measuring part of `xover profile`), one room per part:

* ``jobs``      - what to run: jobs placed on devices, groups, from recipes, plans or scripts;
* ``schedule``  - what starts when and where (units, the plan's real schedule) and the loop that
                  supervises them;
* ``supervise`` - launcher processes: start, relay output, notice ends, stop; signals;
* ``record``    - every store write a run makes; lost runs reconciled;
* ``leases``    - device leases across xover invocations;
* ``reaper``    - stops a run's processes when xover itself is killed;
* ``commands``  - the library functions the CLI calls.
The turn service is launcher-side too, in ``xover.turns``; what runs inside the workers is ``xover.runtime``.
"""

from .commands import experiment, modes_of, results_root, run_groups, train_recipe
from .jobs import (ENGINES, MODES, GroupToRun, JobSpec, check_devices, groups_from_plan, groups_from_recipes,
                   groups_from_scripts, job_for)
from .supervise import Interrupted, TimedOut

__all__ = ["ENGINES", "MODES", "GroupToRun", "Interrupted", "JobSpec", "TimedOut", "check_devices", "experiment",
           "groups_from_plan", "groups_from_recipes", "groups_from_scripts", "job_for", "modes_of", "results_root",
           "run_groups", "train_recipe"]
