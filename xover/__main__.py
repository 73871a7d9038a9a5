"""`python -m xover`: the command line, as the `xover` script runs it."""

from .cli import app

app(prog_name="xover")
