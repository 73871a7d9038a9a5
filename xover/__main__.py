"""`python -m xover` and the `xover` script: the command line, with Ctrl-C and SIGTERM said in one line from the
first moment, while its modules still load (about a second) and before a command installs its own handling."""

import signal
import sys

from .streams import guard_streams, output_written

INTERRUPTED = 130  # as every command exits when Ctrl-C or SIGTERM stops it (docs/reference.md)


def _as_ctrl_c(signum, frame):
    raise KeyboardInterrupt


def main() -> None:
    """Load the command line and run it. SIGTERM is Ctrl-C until a command takes it over (interruptible); a
    signal before the command line is loaded has started nothing."""
    signal.signal(signal.SIGTERM, _as_ctrl_c)
    guard_streams()  # before rich's consoles are made: they ask whether stdout is a terminal
    try:
        from .cli import app  # the command line's modules: a second or so, and a signal may come meanwhile
    except KeyboardInterrupt:
        print("interrupted: nothing was started", file=sys.stderr)
        sys.exit(INTERRUPTED)
    with output_written():
        app(prog_name="xover")


if __name__ == "__main__":
    main()
