"""`xover run --mode`: one mode, all, or a comma list: sequential first, the others in the order given."""

import pytest

from xover.errors import XoverError
from xover.run.commands import modes_of


@pytest.mark.parametrize("given, modes", [
    ("all", ["sequential", "concurrent", "crossover", "adaptive"]),
    ("crossover", ["crossover"]),
    ("crossover,sequential", ["sequential", "crossover"]),  # the baseline first, as `all` runs it
    ("sequential, crossover", ["sequential", "crossover"]),
    ("adaptive,sequential", ["sequential", "adaptive"]),
    ("adaptive,crossover,concurrent,sequential", ["sequential", "adaptive", "crossover", "concurrent"]),
    ("concurrent,crossover", ["concurrent", "crossover"]),
])
def test_a_mode_a_list_or_all(given, modes):
    assert modes_of(given) == modes


@pytest.mark.parametrize("given", ["fast", "sequential,solo", "crossover,", ""])
def test_anything_else_is_one_line_naming_the_choices(given):
    with pytest.raises(XoverError, match=r"^--mode .*: choose adaptive, crossover, concurrent, sequential, a comma list"):
        modes_of(given)


@pytest.mark.parametrize("given, problem", [
    ("crossover,crossover", "crossover named twice; name each mode once"),
    ("sequential, crossover,concurrent,crossover", "crossover named twice"),
    ("concurrent,all", "all is every mode already; give it alone"),
    ("all,all", "all is every mode already"),
])
def test_a_mode_named_twice_or_beside_all_is_refused(given, problem):
    # each would seem to run twice, or in the order given, and ran once in `all`'s order (as `simulate --policy`)
    with pytest.raises(XoverError, match=rf"^--mode {given}: {problem}"):
        modes_of(given)


def test_planned_is_a_plans_mode_of_its_own():
    assert modes_of("planned") == ["planned"]
    with pytest.raises(XoverError, match=r"^--mode planned,crossover: planned is a mode of its own"):
        modes_of("planned,crossover")
    with pytest.raises(XoverError, match=r"^--mode planned: planned runs a plan file's groups"):
        modes_of("planned", plan=False)
