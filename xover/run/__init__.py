"""Running jobs (`xover train`, `xover run`, the measuring part of `xover profile`), one room per part:

* ``jobs``       - what to run: jobs placed on devices, groups, from recipes, plans or scripts;
* ``experiment`` - one invocation's experiment (its row, reaper, leases, link, settings), shared by
                   profile, train and run;
* ``units``      - the units a group runs as in each mode;
* ``schedule``   - what starts when and where (units, the plan's real schedule) and the loop that
                   supervises them;
* ``supervise``  - launcher processes: start, relay output, notice ends, stop; signals;
* ``record``     - every store write a run makes; lost runs reconciled;
* ``leases``     - device leases across xover invocations;
* ``reaper``     - stops a run's processes when xover itself is killed;
* ``launchers``  - who starts a run's units: local (horovodrun/torchrun, here or over ssh) or Slurm;
                   a new launcher is a class there and a line in its registry;
* ``on_slurm``   - a plan's groups as Slurm jobs, and one group inside its job;
* ``sinks``      - where a run's metric records go (the store, the progress display, ...);
* ``external``   - the outside launchers' command lines: horovodrun, torchrun, Slurm's tools;
* ``mps``        - a CUDA MPS daemon of the run's own;
* ``commands``   - the library functions `xover train` and `xover run` call.
The turn service is launcher-side too, in ``xover.turns``; what runs inside the workers is ``xover.runtime``.
Nothing is imported here, so that importing one room (the reaper, a launcher's use of ``supervise``)
does not import them all.
"""
