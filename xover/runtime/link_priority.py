"""A job's place on the link: the launcher gives the job that needs the link least a higher socket
priority (`XOVER_LINK_PRIORITY`, see turns/policies.py: link_bands), and every rank marks its TCP
sockets with it (SO_PRIORITY). The shaped link serves packets by that priority (emulation/network.py,
and the emulated cluster's NICs), so a small all-reduce no longer queues behind a partner's bulk one.

The engines open their sockets themselves (Gloo, Horovod's Gloo controller), so they are found among
the process's open files: once the process group is up, and again after the first iterations for
backends that connect lazily. Sockets the process opens later keep the default priority.
"""

from __future__ import annotations

import os
import socket

from ..errors import XoverError
from ..settings import LINK_PRIORITY_VARIABLE

APPLY_AFTER_ITERATIONS = 2  # look again after the first iterations: some backends connect on first use


def link_priority_from_env() -> int | None:
    """The socket priority the launcher gave this job (XOVER_LINK_PRIORITY), or None; a value that is not
    0 to 6 is an error."""
    value = os.environ.get(LINK_PRIORITY_VARIABLE)
    if value is None or value == "":
        return None
    try:
        priority = int(value)
    except ValueError:
        raise XoverError(f"{LINK_PRIORITY_VARIABLE}={value!r}: not an integer socket priority") from None
    if not 0 <= priority <= 6:  # above 6 needs CAP_NET_ADMIN
        raise XoverError(f"{LINK_PRIORITY_VARIABLE}={priority}: a socket priority is 0 to 6")
    return priority


def prioritise_sockets(priority: int) -> int:
    """Set SO_PRIORITY on every TCP socket this process has open; returns how many carry it now."""
    count = 0
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if not os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                continue
            sock = socket.socket(fileno=fd)  # wraps the engine's descriptor; detached below, never closed
        except OSError:
            continue
        try:
            if sock.family in (socket.AF_INET, socket.AF_INET6) and sock.type == socket.SOCK_STREAM:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_PRIORITY, priority)
                count += 1
        except OSError:
            pass
        finally:
            sock.detach()
    return count


class LinkPriority:
    """The job's socket priority, applied when the process group is up and after the first iterations."""

    def __init__(self) -> None:
        self.priority = link_priority_from_env()
        self.sockets = 0

    def apply(self, iteration: int | None = None) -> None:
        """Set the priority on the sockets open now: at the start, then in the first iterations (some backends
        connect on first use); later calls do nothing."""
        if self.priority is None or (iteration is not None and iteration >= APPLY_AFTER_ITERATIONS):
            return
        self.sockets = max(self.sockets, prioritise_sockets(self.priority))

    def start_fields(self) -> dict:
        """For the `start` record: the priority the job's sockets carry, and on how many."""
        return {"link_priority": self.priority if self.sockets else None, "link_sockets": self.sockets}
