"""The crossover turn service (launcher side): one server per host and group decides, device by
device, which job computes; the policies it can use are pure logic (`policies.py`) that the planner's
simulator shares. Workers reach it through `xover.runtime.turn_client`."""

from .policies import DEFAULT_POLICY, POLICIES, SlotTraits, make_policy

__all__ = ["DEFAULT_POLICY", "POLICIES", "SlotTraits", "make_policy"]
