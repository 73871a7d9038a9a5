"""The wire between a worker and its host's turn server: one-byte messages on a Unix socket, and a
shared page of yield requests that a worker reads at every layer boundary without a round trip.

worker -> server   H<device> <slot>\\n   hello: this connection is `slot` on `device`
                   A                    acquire: a new compute phase (one iteration) wants the turn
                   Y                    yield: give the turn up mid-phase and queue for it again
                   O                    step out: give the turn up mid-phase (a blocking collective), and
                   I                    step back in: queue for it again, the same phase
                   R                    release: the compute phase is over
                   B                    bye: the job is done with this device
server -> worker   G                    granted
                   K                    keep-alive: still waiting, the server is alive (every
                                        HEARTBEAT_S to a worker that asked and was not granted yet)

The yield page (`<socket>.yield`, 4 KiB, mapped read-only by workers): byte d holds slot+1 when the
server wants the holder of device d to yield, 0 otherwise. Reading it costs a memory load, so the
check at every module and gradient is next to free while nobody waits.

The launcher drives the server through its stdin (works the same over ssh for another host):
  W<slot>\\n  withdraw a job that has ended (or never started)      Q\\n  print statistics and exit
  P<n>\\n     an adaptive group's switch n is coming: print each slot's iterations asked for here (a
              `counts {"switch": n, "slots": {"<slot>": <iterations>, ...}}` line); until S comes, an
              acquire past those counts waits, so no device passes the iteration S will name
  S<n> <state> <slot>=<iteration>,...\\n   switch n: from that iteration of each slot on (its acquire of
              it), every device here runs the slot in <state>: `turns` (under the policy) or `free`
              (granted at once, never asked to yield); each device says when it did (a `switched` event).
              With no <slot>=<iteration> it only lets the acquires held since P go on (a switch given up)
and reads its stdout: `ready`, then `event {json}` lines (lease revocations, switches), `spans {json}` lines
(the first grants of iterations that are over, streamed as the run goes so that neither side keeps them
all), `counts {json}` lines (answers to P), and `stats {json}` at the end.
"""

from __future__ import annotations

HELLO, ACQUIRE, YIELD, RELEASE, BYE, GRANT = b"H", b"A", b"Y", b"R", b"B", b"G"
STEP_OUT, STEP_IN = b"O", b"I"
HEARTBEAT = b"K"
TURNS, FREE = "turns", "free"  # an adaptive group's two states (the server's S command)

# A worker waits for its turn as long as a partner computes (minutes are fine), but not for a server
# that is gone or hung: one that says nothing for SILENCE_S while the worker waits is taken for dead.
HEARTBEAT_S = 2.0
SILENCE_S = 30.0

YIELD_PAGE_BYTES = 4096  # devices per host a server can ask to yield
MAX_SLOTS = 254  # a page byte holds slot + 1


def yield_page_path(socket_path: str) -> str:
    """The yield page that goes with a server's socket."""
    return socket_path + ".yield"


def stats_line(payload: str) -> str:
    """A server's closing statistics line on its stdout."""
    return f"stats {payload}"


def event_line(payload: str) -> str:
    """A server's event line (a lease revoked, a registration refused) on its stdout."""
    return f"event {payload}"


def counts_line(payload: str) -> str:
    """A server's answer to P: each slot's iterations asked for on this host."""
    return f"counts {payload}"


def spans_line(payload: str) -> str:
    """A server's line of first grants on its stdout."""
    return f"spans {payload}"


def host_tag(host: str) -> str:
    """A host's name as it appears in socket names. Launchers are given canonical names (this
    machine's names are `localhost`), and workers use the name they were given as it is: inside an
    emulated host the hostname is the host's own, so a worker must not canonicalise by it."""
    return "".join(c if c.isalnum() or c in "-." else "_" for c in host)
