"""What runs inside each worker process: the crossover turn, engine adapters, the training loop.

The runtime knows nothing of the launcher side (xover.run, xover.turns): it reads a job spec file, the
variables the launcher sets and the user's settings (both named in xover/settings.py), and reports
through metric lines on stdout (`metrics.py`).
"""
