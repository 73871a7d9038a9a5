"""The signals that stop a command as Ctrl-C does: SIGINT, SIGTERM, and SIGHUP (a closed terminal, a dropped ssh
session) unless xover was started ignoring it, as `nohup xover run ...` starts it: then a hang-up is nobody's
wish to stop. Loaded before the command line (`__main__`): nothing here imports more than the standard library."""

import os
import signal

from .streams import to_null

_HANGUP = signal.SIGHUP


def _terminal(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False


# taken as xover starts: once the terminal hangs up, its descriptors are terminals no more (isatty is false, a
# write fails with EIO) before the signal comes
_TERMINALS = tuple(fd for fd in (1, 2) if _terminal(fd))


def stop_signals() -> tuple[int, ...]:
    """The signals that interrupt a command now: SIGHUP among them unless it is ignored (nohup)."""
    hangup = () if signal.getsignal(_HANGUP) == signal.SIG_IGN else (_HANGUP,)
    return (signal.SIGINT, signal.SIGTERM, *hangup)


def leave_a_closed_terminal(signum: int) -> None:
    """After a hang-up, what xover still says (its clean-up, 'interrupted: ...') goes nowhere rather than failing
    on a terminal that is gone (EIO): its standard output and error, where they were that terminal, are
    /dev/null from then on. Output redirected to a file is left as it is."""
    if signum != _HANGUP:
        return
    for fd in _TERMINALS:
        try:
            to_null(fd)
        except OSError:
            pass
