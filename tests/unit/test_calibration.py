"""plan/calibration.py: the model's fitted constants are one object with their sources, passed in."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from xover.errors import XoverError
from xover.plan.calibration import SHIPPED, Calibration
from xover.plan.model import JobProfile, interference_next_to
from xover.plan.predict import predict_group
from xover.plan.simulate import SimJob, simulate

ROOT = Path(__file__).resolve().parents[2]


def test_the_shipped_values_and_where_each_came_from():
    assert (SHIPPED.link_band_leak, SHIPPED.interference_traffic_part) == (0.3, 0.5)
    assert (SHIPPED.model_error, SHIPPED.measured_error, SHIPPED.interference_reference_share) == (0.0775, 0.04, 0.25)
    sources = Calibration.sources()
    assert set(sources) == {"link_band_leak", "interference_traffic_part", "interference_reference_share",
                            "model_error", "measured_error"}
    measurements = (ROOT / "docs" / "measurements.md").read_text()
    for source in sources.values():
        assert source.startswith("docs/measurements.md")
        section = source.split("*")[1]  # the paragraph it cites, in italics
        assert f"**{section}" in measurements, section


def test_the_simulation_takes_the_link_leak_it_is_given():
    light, heavy = SimJob("light", 10, 10, 10), SimJob("heavy", 1, 200, 200)
    for leak in (0.0, 0.3, 0.5):
        outcome = simulate([light, heavy], "crossover", calibration=dataclasses.replace(SHIPPED, link_band_leak=leak))
        assert outcome.jobs[0].iteration_ms == pytest.approx(10 + 10 / (1 - leak), rel=0.05)


def test_the_interference_takes_the_traffic_part_it_is_given():
    reference = JobProfile("ref", 1, 100, 100, 1.0, link_ms=100)
    measured = dataclasses.replace(JobProfile("a", 1, 100, 10, 1.0), interference=0.2,
                                   interference_link_share=reference.link_share)
    twice = JobProfile("b", 1, 25, 75, 1.0, link_ms=100)  # twice the reference's link share
    for part in (0.0, 0.5, 1.0):
        calibration = dataclasses.replace(SHIPPED, interference_traffic_part=part)
        traffic = twice.link_share / reference.link_share
        assert interference_next_to(measured, [twice], calibration) == pytest.approx(0.2 * (1 - part + part * traffic))


def test_a_prediction_follows_its_calibration():
    jobs = [JobProfile("light", 1, 10, 10, 1.0, link_ms=10), JobProfile("heavy", 1, 1, 200, 1.0, link_ms=200)]
    shipped = predict_group(jobs)
    assert predict_group(jobs, calibration=SHIPPED) == shipped
    assert predict_group(jobs, calibration=dataclasses.replace(SHIPPED, link_band_leak=0.0)).gain != shipped.gain


def test_a_calibration_is_written_and_read_back(tmp_path):
    fitted = dataclasses.replace(SHIPPED, link_band_leak=0.4, fitted_on="a test")
    fitted.write(tmp_path / "c.json")
    assert Calibration.read(tmp_path / "c.json") == fitted
    (tmp_path / "bad.json").write_text('{"link_band_leak": 2}')
    with pytest.raises(XoverError, match="link_band_leak must be a number from 0 to 1"):
        Calibration.read(tmp_path / "bad.json")
    (tmp_path / "odd.json").write_text('{"half": 0.5}')
    with pytest.raises(XoverError, match="expected an object with keys"):
        Calibration.read(tmp_path / "odd.json")
    (tmp_path / "twice.json").write_text('{"link_band_leak": 0.9, "link_band_leak": 0.4}')  # json.loads kept 0.4
    with pytest.raises(XoverError, match=r"twice\.json: the key 'link_band_leak' is given twice at the top level"):
        Calibration.read(tmp_path / "twice.json")


def test_nothing_patches_a_module_global():
    """No bench or product code assigns to a constant of another module or class (as
    `simulate_module.LINK_BAND_LEAK = x` did): fitted values are passed in as a Calibration."""
    for path in [*(ROOT / "bench").rglob("*.py"), *(ROOT / "xover").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, (ast.AugAssign, ast.AnnAssign)) else []
            for target in targets:
                if (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                        and target.value.id not in ("self", "cls") and target.attr.isupper()):
                    pytest.fail(f"{path}:{node.lineno} assigns {target.value.id}.{target.attr}")
