"""What runs inside each worker process: the crossover turn, engine adapters, the training loop.

The runtime knows nothing of the launcher side (xover.run, xover.turns): it reads a job spec file and XOVER_* environment
variables, and reports through metric lines on stdout (`metrics.py`).
"""

import os

from ..errors import XoverError


def choice_from_env(variable: str, choices: tuple[str, ...]) -> str:
    """The value of a runtime setting that takes one of `choices` (the first is the default; set but
    empty counts as unset); anything else is refused, naming the variable and the choices."""
    value = os.environ.get(variable) or choices[0]
    if value not in choices:
        raise XoverError(f"{variable}={value!r}: expected one of {', '.join(choices)}")
    return value
