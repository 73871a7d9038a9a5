"""The Grafana dashboard (docs/grafana/xover.json) asks only for series xover serves: every metric name in
its PromQL is one the exporter's registry or a turn server's holds (xover/run/exporter.py, `served_names`;
xover/turns/metrics.py)."""

import json
import re
from pathlib import Path

import pytest

from xover.errors import XoverError
from xover.run.exporter import check_port, served_names
from xover.settings import Settings

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "xover.json"
# PromQL's words that are not metric names: functions are followed by "(", these are not always
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset"}
IDENTIFIER = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: what is left once strings, label matchers, ranges,
    grouping clauses, variables, numbers and function names are taken out."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    text = re.sub(r"\$\w+", "", text)
    names = set()
    for found in IDENTIFIER.finditer(text):
        rest = text[found.end():].lstrip()
        word = found.group()
        if rest.startswith("(") or word in KEYWORDS or re.fullmatch(r"[0-9.e]+", word):
            continue
        names.add(word)
    return names


def queries(dashboard: dict) -> list[str]:
    found = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":  # label_values(METRIC, label)
            found.append(re.sub(r"label_values\(([^,]+),.*", r"\1", variable["definition"]))
    return found


def test_every_query_of_the_dashboard_names_only_served_metrics():
    dashboard = json.loads(DASHBOARD.read_text())
    served = served_names()
    exprs = queries(dashboard)
    assert len(exprs) >= 12
    for expr in exprs:
        names = metric_names(expr)
        assert names, f"no metric in {expr!r}"
        assert names <= served, f"{expr!r} names {sorted(names - served)}, which the exporter does not serve"


def test_a_panel_for_each_question():
    titles = " / ".join(panel["title"].lower() for panel in json.loads(DASHBOARD.read_text())["panels"])
    for question in ("holds each device", "turn waits", "slowdown", "throughput", "handoffs", "share of time",
                     "planned sharing", "predicted gain", "compute and exposed communication"):
        assert question in titles


def test_the_parser_finds_names_and_leaves_out_the_rest():
    assert metric_names('histogram_quantile(0.95, sum by (le, job) (rate(a_b_bucket{x=~"$e", y="z(w)"}[5m])))') \
        == {"a_b_bucket"}
    assert metric_names("rate(a_total[1m]) / on (job) rate(b_total[1m]) > bool 0") == {"a_total", "b_total"}
    assert metric_names("xover_job_slowdown == 1") == {"xover_job_slowdown"}


def test_served_names_follow_prometheus_conventions():
    served = served_names()
    assert {"xover_job_iterations_total", "xover_job_turn_wait_seconds_bucket", "xover_device_turn_holder",
            "xover_device_turn_handoffs_total", "xover_group_predicted_gain", "xover_device_turn_wait_seconds_bucket",
            "xover_device_turns_lost_total", "xover_turn_server_up"} <= served
    assert all(name.startswith("xover_") for name in served)
    counters = {name[:-len("_total")] for name in served if name.endswith("_total")}
    assert all(name + "_created" in served for name in counters)


def test_metrics_port_setting_and_option_are_checked():
    assert Settings.from_environ({}).metrics_port is None
    assert Settings.from_environ({"XOVER_METRICS_PORT": " 9464 "}).metrics_port == 9464
    for bad in ("0", "65536", "-1", "x", "9.5"):
        with pytest.raises(XoverError, match="XOVER_METRICS_PORT"):
            Settings.from_environ({"XOVER_METRICS_PORT": bad})
    for bad in (0, 70000):
        with pytest.raises(XoverError, match="--metrics-port"):
            check_port(bad)
