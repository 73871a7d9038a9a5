"""What runs inside each worker process: the crossover turn, engine adapters, the training loop.

The runtime knows nothing of the launcher side (xover.run, xover.turns): it reads a job spec file and XOVER_* environment
variables, and reports through metric lines on stdout (`metrics.py`).
"""
