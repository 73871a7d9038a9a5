"""Turn policies as pure logic, driven by scripted event sequences: work conservation, no starvation
(the stated bound), the same decisions on every device, preemption only for jobs ranked first,
protection of a job behind its max_slowdown."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xover.turns.policies import (
    LINK_BAND_PRIORITIES,
    DeviceTurns,
    RoundRobin,
    SlotTraits,
    WorkConserving,
    critical_rank,
    link_bands,
    make_policy,
)


class Device:
    """One device's turns driven the way the server drives them: request -> choose/grant -> release."""

    def __init__(self, policy, slots):
        self.policy, self.turns, self.now = policy, DeviceTurns(order=list(slots)), 0.0
        self.grants: list[int] = []

    def tick(self, dt: float = 0.001) -> None:
        self.now += dt

    def request(self, slot: int, new_iteration: bool = True) -> None:
        self.turns.request(slot, self.now, new_iteration)
        self.decide()

    def release(self, slot: int) -> None:
        if self.turns.release(slot, self.now, end_of_phase=True) is not None:
            self.policy.on_pass(self.turns)
        self.decide()

    def yield_(self, slot: int) -> None:
        self.turns.release(slot, self.now)
        self.turns.request(slot, self.now, new_iteration=False)
        self.decide()

    def decide(self) -> None:
        choice = self.policy.choose(self.turns, self.now)
        if choice is not None:
            self.turns.grant(choice[0], self.now, choice[1])
            self.grants.append(choice[0])


def test_critical_rank_puts_short_compute_next_to_communication_first():
    resnet, mlp_comm_heavy, vgg = critical_rank(0.080, 0.088), critical_rank(0.007, 0.131), critical_rank(0.036, 0.586)
    assert mlp_comm_heavy < resnet and vgg < resnet


def test_round_robin_waits_for_the_slot_whose_turn_it_is():
    device = Device(RoundRobin(), [0, 1, 2])
    for slot in (1, 2, 0):  # the barrier opens when all asked; slot 0 goes first
        device.request(slot)
    assert device.grants == [0]
    device.release(0)
    assert device.grants == [0, 1]
    device.release(1)
    device.request(1)
    assert device.grants == [0, 1, 2]
    device.release(2)
    assert device.grants == [0, 1, 2]  # slot 0 has not asked again: the device waits for it (not work-conserving)
    device.request(0)
    assert device.grants == [0, 1, 2, 0]


def test_round_robin_passes_a_gone_slot_over_only_for_a_slot_that_waits():
    """A slot passed over (its rank sits in an all-reduce with a hung one) keeps its place while nobody waits:
    asking again it takes the next turn, whether it asks before or after its partner's turn ends."""
    for partner_asks_first in (False, True):
        device = Device(RoundRobin(), [0, 1])
        device.request(0)
        device.request(1)
        device.release(0)
        device.turns.gone.add(0)  # what a revoked lease on the job's other device does
        device.release(1)
        assert device.grants == [0, 1]  # nobody waits: no grant, and no move past slot 0 either
        if partner_asks_first:
            device.request(1)  # slot 0 is gone: its partner takes the turn
            assert device.grants == [0, 1, 1]
        device.request(0)  # back
        if partner_asks_first:
            device.release(1)
        assert device.grants[-1] == 0
        device.release(0)
        device.request(1)
        assert device.grants[-1] == 1  # and strict alternation again


def test_round_robin_passes_over_a_gone_slot_but_never_grants_a_later_slot_first():
    device = Device(RoundRobin(), [0, 1, 2])
    for slot in (0, 1, 2):
        device.request(slot)
    device.release(0)
    device.release(1)
    device.release(2)
    assert device.grants == [0, 1, 2]
    device.turns.gone.add(0)
    device.request(2)  # slot 0 gone: the turn is slot 1's, and slot 2 does not go before it
    assert device.grants == [0, 1, 2]
    device.request(1)
    assert device.grants == [0, 1, 2, 1]
    device.request(0)  # back while slot 1 holds: next after it is slot 2, whose turn it is
    device.release(1)
    assert device.grants == [0, 1, 2, 1, 2]
    device.release(2)
    assert device.grants == [0, 1, 2, 1, 2, 0]


def test_work_conserving_grants_whoever_waits_and_ranks_first():
    policy = WorkConserving({0: SlotTraits(rank=5.0), 1: SlotTraits(rank=1.0)})
    device = Device(policy, [0, 1])
    device.request(0)
    device.request(1)
    assert device.grants == [1]  # both asked at the barrier: the lower rank first
    device.release(1)
    assert device.grants == [1, 0]
    device.release(0)
    device.request(0)  # slot 1 is communicating: slot 0 does not wait for it
    assert device.grants == [1, 0, 0]
    device.request(1)
    assert policy.wants_yield(device.turns, device.now)  # the holder ranks after a waiter: yield at a layer
    device.yield_(0)
    assert device.grants[-1] == 1 and 0 in device.turns.waiting


def test_equal_ranks_alternate_without_preempting():
    policy = WorkConserving({0: SlotTraits(rank=1.0), 1: SlotTraits(rank=1.05)})
    device = Device(policy, [0, 1])
    device.request(0)
    device.request(1)
    assert not policy.wants_yield(device.turns, device.now)  # within PREEMPT_RATIO: no interruption


@st.composite
def scripts(draw):
    """A group of 2-4 slots with random ranks and a random schedule of who wants the turn when."""
    slots = draw(st.integers(2, 4))
    ranks = [draw(st.floats(0.001, 10.0)) for _ in range(slots)]
    steps = draw(st.lists(st.tuples(st.integers(0, slots - 1), st.sampled_from(["request", "release", "yield"])),
                          min_size=10, max_size=200))
    return slots, ranks, steps


@settings(max_examples=200, deadline=None)
@given(scripts())
def test_work_conservation_and_starvation_bound(script):
    slots, ranks, steps = script
    policy = WorkConserving({s: SlotTraits(rank=r) for s, r in enumerate(ranks)}, max_bypass=3)
    device = Device(policy, range(slots))
    for slot in range(slots):
        device.request(slot)
    passed_over: dict[int, int] = {}
    for slot, action in steps:
        device.tick()
        turns = device.turns
        before = len(device.grants)
        if action == "request" and slot not in turns.waiting and turns.holder != slot:
            device.request(slot)
        elif action == "release" and turns.holder == slot:
            device.release(slot)
        elif action == "yield" and turns.holder == slot and policy.wants_yield(turns, device.now):
            device.yield_(slot)
        # work conservation: never a free device while someone waits
        assert not (turns.holder is None and turns.live_waiters())
        for granted in device.grants[before:]:
            passed_over.pop(granted, None)
            for waiting in turns.waiting:
                passed_over[waiting] = passed_over.get(waiting, 0) + 1
                # the bound stated in policies.py: max_bypass + slots - 1 grants to others
                assert passed_over[waiting] <= policy.max_bypass + slots - 1


def test_protection_puts_a_job_behind_its_bound_first():
    traits = {0: SlotTraits(rank=1.0), 1: SlotTraits(rank=9.0, max_slowdown=1.5, solo_iteration_s=0.010)}
    policy = WorkConserving(traits)
    device = Device(policy, [0, 1])
    # slot 1's recent iterations take 50 ms against 10 ms alone: far behind its 1.5x bound
    for step in range(6):
        device.now = step * 0.05
        device.turns.request(1, device.now, new_iteration=True)
        device.turns.waiting.pop(1)
    assert policy.behind(device.turns, 1)
    device.request(0)
    device.request(1)
    assert device.grants == [0]
    assert policy.wants_yield(device.turns, device.now)  # protected beats rank
    device.yield_(0)
    assert device.grants[-1] == 1


def test_make_policy_names():
    assert make_policy("round-robin").name == "round-robin"
    assert make_policy("work-conserving").name == "work-conserving"
    with pytest.raises(ValueError):
        make_policy("lottery")


# ---------------------------------------------------------------------------- the link


def test_the_job_that_needs_the_link_least_goes_first_on_it():
    # mlp-balanced (115 ms of link per 192 ms) before mlp-synthetic (124 per 131), a third job last
    traits = {0: SlotTraits(link_fraction=0.95), 1: SlotTraits(link_fraction=0.6), 2: SlotTraits(link_fraction=0.97)}
    assert link_bands(traits) == {1: 0, 0: 1, 2: 2}
    assert WorkConserving(traits).link_bands() == {1: 0, 0: 1, 2: 2}
    assert LINK_BAND_PRIORITIES[0] > LINK_BAND_PRIORITIES[1] == 0  # band 1 is every socket's default


def test_the_link_stays_shared_when_an_order_could_starve_or_is_not_clear():
    assert link_bands({0: SlotTraits(link_fraction=0.5), 1: SlotTraits(link_fraction=0.5)}) == {}  # two copies
    assert link_bands({0: SlotTraits(link_fraction=0.5), 1: SlotTraits(link_fraction=0.53)}) == {}  # about equal
    assert link_bands({0: SlotTraits(link_fraction=0.85), 1: SlotTraits(link_fraction=1.0)}) == {}  # would starve
    assert link_bands({0: SlotTraits(link_fraction=0.2), 1: SlotTraits()}) == {}  # one fraction unknown
    # strict round robin (the paper's method) leaves the link alone
    traits = {0: SlotTraits(link_fraction=0.2), 1: SlotTraits(link_fraction=0.9)}
    assert RoundRobin(traits).link_bands() == {} and make_policy("work-conserving", traits).link_bands() == {0: 0, 1: 1}


def test_a_job_without_a_profile_gets_its_link_fraction_from_its_run_alone():
    from xover.links import HOST, Link
    from xover.run.traits import traits_from_summary

    # the DDP script of bench/ddp_pair.py alone at 1 Gbit/s: 19 ms compute, 70 ms exposed all-reduce of 3.2 MB
    script = {"name": "ddp_digits", "status": "finished", "np": 2, "hosts": "localhost:2", "data_ms": 0.0,
              "compute_ms": 19.0, "communication_ms": 70.0, "gradient_bytes": 3_200_000, "link_ms": 80.0,
              "comm_cpu_ms": 5.0}
    learnt = traits_from_summary(script, None, Link.parse("1gbit"))
    assert learnt.rank is not None and 0.6 < learnt.link_fraction <= 1.0
    # resnet-synthetic's stored profile: 73 ms compute, 5 ms of link per 77 ms
    recipe = SlotTraits(link_fraction=5 / 77)
    assert link_bands({0: recipe, 1: learnt}) == {0: 0, 1: 1}  # the recipe first on the link, the script after
    assert traits_from_summary(script, None, HOST).link_fraction is None  # no rate, no link time
    assert traits_from_summary({**script, "status": "failed"}, None, Link.parse("1gbit")) is None
