"""What the commands of the command line share, `xover` (cli.py) and `xover cluster` (cli_cluster.py) alike:
the options the callback sets for every command, and how an expected failure ends one. Its own module: cli.py
registers cli_cluster's commands as it loads, so cli_cluster cannot import cli.py."""

from __future__ import annotations

import contextlib

import typer
from sqlalchemy.exc import DBAPIError

from .console import errors, print_error
from .errors import Interrupted, TimedOut, XoverError
from .store.session import database_url, store_failed


class State:
    """Options every command shares, set by the callback before the command runs."""

    db: str | None = None


def fail(error: XoverError) -> None:
    """Print a one-line error and leave with its exit code (2 for bad input), never a traceback."""
    print_error(str(error))
    raise typer.Exit(error.exit_code)


RUNS_INTERRUPTED = "every process was stopped; unfinished runs are marked interrupted"


@contextlib.contextmanager
def user_errors(interrupted: str = RUNS_INTERRUPTED):
    """Expected failures become one line and exit 2; Ctrl-C (after clean-up) exits 130, saying what it left
    (`interrupted`, or the words of the Interrupted raised: a command that starts no process has none to
    stop); --timeout 124."""
    try:
        yield
    except XoverError as error:
        fail(error)
    except DBAPIError as error:  # the store refused a read or a write part-way: a read-only file, a full disk
        fail(store_failed(database_url(State.db, create_folder=False), error.orig))
    except (Interrupted, KeyboardInterrupt) as stop:
        left = (str(stop) if isinstance(stop, Interrupted) else "") or interrupted
        errors.print(f"interrupted{': ' if left else ''}{left}", highlight=False, soft_wrap=True, markup=False)
        raise typer.Exit(130) from None
    except TimedOut:
        errors.print(
            "timeout: the run went past --timeout; every process was stopped and unfinished runs are marked timeout"
        )
        raise typer.Exit(124) from None
