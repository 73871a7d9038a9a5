"""Running jobs (`xover train`, `xover run`, the measuring part of `xover profile`), one room per part:

* ``request``    - what a run is asked to do, typed once: RunOptions, LaunchRequest, LaunchResult, GroupRequest;
* ``targets``    - the groups of what `xover run` was asked: recipes, scripts, a plan file;
* ``jobs``       - jobs placed on devices, and groups of them;
* ``traits``     - what the turn policy knows of each job (its profile, the plan, its run alone);
* ``ranks``      - each engine's launcher side: its checks, the command lines that start its ranks;
* ``reach``      - the one seam that reaches other hosts and shapes links (the emulated cluster behind it);
* ``experiment`` - one invocation's experiment (its row, reaper, leases, link, settings), shared by
                   profile, train and run;
* ``units``      - the units a group runs as in each mode;
* ``schedule``   - what starts when and where (units, the plan's real schedule) and the loop that
                   supervises them;
* ``supervise``  - launcher processes: start, relay output, notice ends, stop; signals;
* ``record``     - every store write a run makes; lost runs reconciled;
* ``leases``     - device leases across xover invocations;
* ``reaper``     - stops a run's processes and cancels its jobs when xover itself is killed;
* ``launchers``  - the registry of who starts a run's units, and their base class;
* ``local``      - the `local` launcher: this process runs the units, here or on -H hosts over ssh;
* ``batch``      - launchers whose groups run as jobs of another machine's scheduler: submit, follow,
                   cancel, record; ``group_job`` runs one such group inside its job;
* ``on_slurm``   - the `slurm` launcher (with ``external.slurm``, the only rooms that know Slurm);
* ``sinks``      - where a run's metric records go (the store, the progress display, ...);
* ``exporter``   - the run's figures served to Prometheus;
* ``external``   - the outside launchers' command lines: horovodrun, torchrun, Slurm's tools;
* ``mps``        - a CUDA MPS daemon of the run's own;
* ``commands``   - the library functions `xover train` and `xover run` call.
The turn service is launcher-side too, in ``xover.turns``; what runs inside the workers is ``xover.runtime``.
Nothing is imported here, so that importing one room does not import them all.
"""
