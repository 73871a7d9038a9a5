"""The model's constants fitted on a machine, with where each value came from.

The shipped values were fitted on the machine kind the project is built on (2 CPU cores, np=2, an
emulated 1 Gbit/s link); on another machine `bench/interference_fit.py` fits them again from the
comparisons in its store and writes a `Calibration` (JSON) that the model takes in place of these.
The model and the simulation take one as an argument (`model.interference_next_to`,
`simulate.simulate`, `predict.predict_group`); nothing reads or patches a module global.

Runtime settings that were tuned by measurement but are not the model's (the turn server's nice,
Horovod's cycle time, how long a rank sleeps before polling) stay with the code that applies them,
each with its measurement beside it.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import XoverError, json_without_duplicate_keys
from ..writes import write_whole

MEASUREMENTS = "docs/measurements.md"


def _fitted(value: float, source: str) -> Any:
    return field(default=value, metadata={"source": source})


@dataclass(frozen=True)
class Calibration:
    """The model's fitted parameters; `fitted_on` says where this set came from."""

    # Of the link, what the band behind gets while the first band in flight sends: a queue sends whole
    # packets and an all-reduce sends in steps that wait on the partner rank, so the band behind slips
    # packets in between (`simulate._Simulation._link_rates`).
    link_band_leak: float = _fitted(
        0.3,
        f"{MEASUREMENTS}, Figures behind the design: *The link's leak in the "
        "simulation* (fitted in *The link's leak* on the first `make bench` of "
        "2026-11-24)",
    )
    # The part of a job's measured interference that scales with its partners' summed link share over
    # the reference partner's; the rest is charged next to any partner (`model.interference_next_to`).
    interference_traffic_part: float = _fitted(
        0.5,
        f"{MEASUREMENTS}, Figures behind the design: *The model's "
        "interference: the measured fraction, half of it scaled by "
        "traffic* (three `make bench` runs of 2026-11-22)",
    )
    # The least reference partner's link share the traffic part is scaled from (the range the split above was
    # fitted over): below it, the traffic is scaled as if the reference had sent this much.
    interference_reference_share: float = _fitted(
        0.25,
        f"{MEASUREMENTS}, Figures behind the design: *The reference partner's least link share* (its share on "
        "the 1 Gbit/s bench the traffic part was fitted on: 0.28-0.35)",
    )
    # How far the simulation's predicted gain of a way misses the measured one: the median |error| of the
    # crossover (work-conserving) prediction over the 14 rows of the newest `make bench` (2026-11-27 18:11:
    # 26.6, 11.3, 9.8, 1.8, 9.0, 5.1, 5.1, 1.4, 5.4, 6.5, 0.5, 20.1, 11.6, 10.6%). Two ways predicted closer
    # than this are a coin toss for the model: the plan picks adaptive for them (`predict.pick_sharing`).
    model_error: float = _fitted(
        0.0775,
        f"{MEASUREMENTS}, Figures behind the design: *The model's error, for the plan's pick* (the median "
        "|predicted / measured - 1| of crossover's gain over the 14 rows of the newest `make bench`)",
    )
    # How far one measured aggregate of a way misses the next measurement of the same group (the bench's
    # repeats): half the range of crossover / concurrent over repeated runs of one pair (0.94-1.03 on
    # resnet-synthetic + mlp-synthetic, horovod, 2026-11-27; 0.93-0.94 to 1.00-1.09 in the repeats of 2026-11-28).
    measured_error: float = _fitted(
        0.04,
        f"{MEASUREMENTS}, Figures behind the design: *A measurement's error, for the plan's pick* (half the "
        "range of one pair's crossover / concurrent over repeated runs)",
    )
    fitted_on: str = "shipped: xover's own 2-core CPU machine, emulated 1 Gbit/s link (docs/measurements.md)"

    def __post_init__(self) -> None:
        for name in (
            "link_band_leak",
            "interference_traffic_part",
            "interference_reference_share",
            "model_error",
            "measured_error",
        ):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or not 0.0 <= value <= 1.0
            ):
                raise XoverError(f"calibration: {name} must be a number from 0 to 1, got {value!r}")

    @staticmethod
    def sources() -> dict[str, str]:
        """Each fitted parameter and where its shipped value came from."""
        return {f.name: f.metadata["source"] for f in dataclasses.fields(Calibration) if "source" in f.metadata}

    def to_dict(self) -> dict[str, float | str]:
        """Every parameter and what it was fitted on, as the calibration file holds them."""
        return dataclasses.asdict(self)

    def write(self, path: str | Path) -> None:
        """Write it as the JSON file `read` takes."""
        write_whole(path, json.dumps(self.to_dict(), indent=1) + "\n")

    @classmethod
    def read(cls, path: str | Path) -> Calibration:
        """A calibration written by `write` (bench/interference_fit.py --write)."""
        try:
            data = json_without_duplicate_keys(Path(path).read_text(), f"calibration {path}")
        except (OSError, ValueError, RecursionError) as error:
            raise XoverError(f"calibration {path}: cannot read it ({error})") from None
        known = {f.name for f in dataclasses.fields(cls)}
        if not isinstance(data, dict) or set(data) - known:
            raise XoverError(f"calibration {path}: expected an object with keys among {', '.join(sorted(known))}")
        return cls(**data)


SHIPPED = Calibration()
