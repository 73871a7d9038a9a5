"""`python -m xover` and the `xover` script: the command line, with Ctrl-C, SIGTERM and a hang-up said in one line
from the first moment, while its modules still load (about a second) and before a command installs its own handling."""

import signal
import sys

from .stop_signals import leave_a_closed_terminal, stop_signals
from .streams import guard_streams, output_written

INTERRUPTED = 130  # as every command exits when Ctrl-C, SIGTERM or SIGHUP stops it (docs/reference.md)


def _as_ctrl_c(signum, frame):
    leave_a_closed_terminal(signum)
    raise KeyboardInterrupt


def main() -> None:
    """Load the command line and run it. SIGINT, SIGTERM and SIGHUP (unless ignored: nohup) are Ctrl-C until a
    command takes them over (interruptible); a signal before the command line is loaded and built has started
    nothing. SIGINT too: a shell's background job (`xover run ... &` in a script) starts with it ignored, which
    Python keeps, and a SIGINT in its first second was lost where a later one stopped the run (a probe,
    2026-12-07); one in the interpreter's own start, before this runs (some tens of milliseconds), still is."""
    for signum in stop_signals():
        signal.signal(signum, _as_ctrl_c)
    guard_streams()  # before rich's consoles are made: they ask whether stdout is a terminal
    try:
        from .cli import app  # the command line's modules: a second or so, and a signal may come meanwhile
    except KeyboardInterrupt:
        print("interrupted: nothing was started", file=sys.stderr)
        sys.exit(INTERRUPTED)
    with output_written():
        try:
            app(prog_name="xover")
        except KeyboardInterrupt:  # while typer builds the command line: a command says its own line once it runs
            print("interrupted: nothing was started", file=sys.stderr)
            sys.exit(INTERRUPTED)


if __name__ == "__main__":
    main()
