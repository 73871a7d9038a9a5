"""`xover simulate`: a cluster's trace of job arrivals replayed on the planning core of `xover plan`.

* ``traces``   - job instances from a trace: Muri's CSV, a plain CSV (arrival, devices, duration, model),
                 Philly's job log, Helios' cluster_log.csv;
* ``policies`` - FIFO, SRTF, SRSF, Tiresias, and xover's grouping over two of their orders;
* ``engine``   - the event loop: arrivals, completions, the decision step at every event;
* ``metrics``  - what a replay shows: JCT (average, median, p99), makespan, utilisation, queueing, sharing;
* ``step``     - the command: load, replay each policy with a progress bar, store.
"""
