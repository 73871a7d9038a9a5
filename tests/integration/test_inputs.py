"""Every malformed input exits 2 with one line naming the file and the field, no traceback, and
nothing written (no database, no results folder): recipes, plan files, CSV traces, flags.
Property-based: hypothesis breaks valid inputs in many ways; the CLI runs in-process."""

from __future__ import annotations

import copy
import csv
import json
import re
import sqlite3
from pathlib import Path

import pytest
import tomllib
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from xover.cli import app
from xover.recipes import BUILTIN_RECIPES

runner = CliRunner()
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

VALID_RECIPE = tomllib.loads((BUILTIN_RECIPES / "mlp-digits.toml").read_text())
RECIPE_FIELDS = ["name", "model", "dataset", "batch_size", "optimizer", "lr", "np", "seed", "iterations",
                 "momentum", "eval_interval", "max_slowdown", "model_options", "dataset_options"]
BAD_VALUES = st.sampled_from([-1, 0, -0.5, "", "nope", True, [], {}, 1e309, "mlp ", 3.5, "a/b", " x"])


def _value(value) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return "inf" if value > 0 else "-inf"
    return json.dumps(value)


def _toml(data: dict) -> str:
    lines, tables = [], []
    for key, value in data.items():
        if isinstance(value, dict):
            tables.append((key, value))
        else:
            lines.append(f"{key} = {_value(value)}")
    for key, table in tables:
        lines.append(f"[{key}]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


def _one_clear_line(result, *must_contain: str) -> None:
    assert result.exit_code == 2, result.output
    text = result.output.strip()
    assert "Traceback" not in text
    assert len(text.splitlines()) == 1, text  # one line: the file, the field, the problem
    assert text.startswith("error:"), text
    for needle in must_contain:
        assert needle in text, (needle, text)


def _nothing_written(root: Path, lookups: bool = False) -> None:
    """No results; no database either, unless answering needed a look into it (stored profiles)."""
    assert not (root / "results").exists()
    if not lookups:
        assert not (root / "xover.db").exists()


@pytest.fixture
def clean(isolated_results):
    return isolated_results


@st.composite
def broken_recipes(draw):
    """A valid recipe with one field broken: a wrong value, removed, or an unknown field added."""
    data = copy.deepcopy(VALID_RECIPE)
    how = draw(st.sampled_from(["value", "remove", "unknown", "option"]))
    if how == "value":
        field = draw(st.sampled_from(RECIPE_FIELDS))
        value = draw(BAD_VALUES)
        if field in ("model_options", "dataset_options"):
            value = draw(st.sampled_from([3, "x", [1]]))
        if (field == "momentum" and value in (0, 3.5) or field == "seed" and value == 0
                or field in ("max_slowdown", "lr") and value == 3.5):
            value = -1  # those are valid values of those fields
        if field == "eval_interval" and value == 0:
            value = -2
        if field == "name" and value == "nope":
            value = "no pe"
        data[field] = value
    elif how == "remove":
        field = draw(st.sampled_from(["name", "model", "dataset", "batch_size", "optimizer", "lr", "np", "seed",
                                      "iterations"]))
        del data[field]
    elif how == "unknown":
        field = draw(st.sampled_from(["batchsize", "learning_rate", "iteration", "gpus"]))
        data[field] = 1
    else:
        field = "model_options." + draw(st.sampled_from(["widht", "depth", "heads"]))
        data.setdefault("model_options", {})[field.split(".")[1]] = 2
    return field, data


@SETTINGS
@given(broken_recipes())
def test_a_broken_recipe_names_its_file_and_field(clean, tmp_path, broken):
    field, data = broken
    path = tmp_path / "broken.toml"
    path.write_text(_toml(data))
    result = runner.invoke(app, ["profile", str(path)])
    _one_clear_line(result, str(path), f"field '{field.split('.')[0]}" if "." not in field else field)
    _nothing_written(clean)


@SETTINGS
@given(st.binary(min_size=1, max_size=64))
def test_a_recipe_that_is_not_toml_names_its_file(clean, tmp_path, junk):
    path = tmp_path / "junk.toml"
    path.write_bytes(b"[[[" + junk)
    result = runner.invoke(app, ["train", str(path)])
    _one_clear_line(result, str(path))
    _nothing_written(clean)


def _plan(tmp_path: Path) -> dict:
    trace = tmp_path / "t.csv"
    trace.write_text("name,devices,compute_ms,comm_ms,memory_gb\nmlp-digits,2,100,10,1\nresnet-digits,2,10,100,1\n")
    out = tmp_path / "p.json"
    result = runner.invoke(app, ["--db", str(tmp_path / "plan.db"), "plan", "--profiles", str(trace), "--devices", "2",
                                 "--out", str(out)])
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text())


PLAN_BREAKS = [
    ("format", lambda p: p.update(format="xover-plan/0"), "format"),
    ("groups", lambda p: p.update(groups={}), "groups"),
    ("jobs", lambda p: p["jobs"].pop(next(iter(p["jobs"]))), "jobs"),
    ("devices", lambda p: p["groups"][0].update(devices=["localhost:9"]), "devices"),
    ("compute", lambda p: next(iter(p["jobs"].values())).update(compute_ms="fast"), "compute_ms"),
    ("policy", lambda p: p.update(policy="lottery"), "policy"),
    ("gain", lambda p: p["groups"][0].update(predicted_gain=None), "predicted_gain"),
    ("hosts", lambda p: p.update(hosts=[["localhost"]]), "hosts"),
    ("host name", lambda p: p.update(hosts=[["local host", 2]]), "hosts[0]"),
    ("one machine twice", lambda p: p.update(hosts=[["localhost", 2], ["127.0.0.1", 2]]), "hosts"),
    ("device digit", lambda p: p["groups"][0].update(devices=["localhost:\u0660", "localhost:1"]), "devices"),
    ("number too large for a float", lambda p: next(iter(p["jobs"].values())).update(compute_ms=10**400), "compute_ms"),
    ("compute under a microsecond", lambda p: next(iter(p["jobs"].values())).update(compute_ms=1e-9),
     "compute_ms must be at least 0.001 (a microsecond), got 1e-09"),
    # int() of more than 4,300 digits was a ValueError's traceback
    ("device index too long", lambda p: p["groups"][0].update(devices=["localhost:0", "localhost:" + "9" * 5000]),
     "groups[0].devices"),
    ("engine", lambda p: p.update(engine="mpi"), "engine"),
    ("link", lambda p: p.update(link=5), "link"),
    # read only where the run shaped its link: no file, no field ("the plan's link 'fast': ...")
    ("link no rate", lambda p: p.update(link="fast"), "plan field 'link': 'fast': expected a rate with a unit"),
    # compared as text, 'localhost:01' and 'localhost:1' passed as two devices
    ("device index with a leading zero", lambda p: p["groups"][0].update(devices=["localhost:01", "localhost:1"]),
     "'localhost:01' is not a device"),
    ("device twice", lambda p: p["groups"][0].update(devices=["localhost:1", "localhost:1"]),
     "lists the device 'localhost:1' twice"),
    # a job both in a group and unplaced: the run ran it
    ("placed and unplaced", lambda p: p.update(unplaced=[{"name": "mlp-digits", "reason": "x"}]),
     "plan field 'unplaced[0].name': job 'mlp-digits' is unplaced here but placed"),
    # one unplaced job listed twice: the report counted it twice
    ("unplaced twice", lambda p: p.update(unplaced=[{"name": "huge", "reason": "x"}, {"name": "huge", "reason": "y"}]),
     "plan field 'unplaced[1].name': job 'huge' is already listed in 'unplaced'"),
    # an adaptive group's ways marked measured, one of them without a figure: a KeyError's traceback
    ("measured way without a figure", lambda p: (
        p["groups"][0].update(sharing="adaptive", predicted_from={"crossover": "measured", "concurrent": "measured"}),
        p["groups"][0]["predicted_by_sharing"].pop("crossover")),
     "plan field 'groups[0].predicted_from': marks 'crossover' measured, but predicted_by_sharing has no gain"),
]


@pytest.mark.parametrize("name, breaks, field", PLAN_BREAKS, ids=[b[0] for b in PLAN_BREAKS])
def test_a_broken_plan_names_its_file_and_field(clean, tmp_path, name, breaks, field):
    plan = _plan(tmp_path)
    breaks(plan)
    path = tmp_path / "broken-plan.json"
    path.write_text(json.dumps(plan))
    result = runner.invoke(app, ["run", str(path)])
    _one_clear_line(result, str(path), field)
    _nothing_written(clean)


def test_a_plan_file_giving_a_key_twice_is_one_clear_line(clean, tmp_path):
    """A group edited to another way of sharing above the old "sharing": json.load kept the old one, silently."""
    path = tmp_path / "twice.json"
    path.write_text(json.dumps(_plan(tmp_path)).replace('"sharing": ', '"sharing": "concurrent", "sharing": ', 1))
    result = runner.invoke(app, ["run", str(path)])
    _one_clear_line(result, str(path), "the key 'sharing' is given twice in groups[0]", "remove one of them")
    _nothing_written(clean)


def _plan_of_kind_on(tmp_path, monkeypatch, kind: str, gpus: int):
    """A plan made on `kind` devices, on a machine with `gpus` GPUs."""
    monkeypatch.setattr("xover.run.targets.gpu_count", lambda: gpus)
    monkeypatch.delenv("XOVER_CPU_ONLY", raising=False)
    plan = _plan(tmp_path)
    plan.update(link="host", engine="horovod", device_kind=kind)
    path = tmp_path / f"{kind}.json"
    path.write_text(json.dumps(plan))
    return path


def test_a_plan_made_for_gpus_is_one_clear_line_on_a_machine_without_one(clean, tmp_path, monkeypatch):
    """It ran on the CPU cores without a word."""
    path = _plan_of_kind_on(tmp_path, monkeypatch, "gpu", gpus=0)
    result = runner.invoke(app, ["run", str(path)])
    _one_clear_line(result, str(path), "the plan was made for GPUs", "no NVIDIA GPU", "xover plan", "XOVER_CPU_ONLY=1")
    _nothing_written(clean)


def test_a_plan_made_on_cpu_cores_is_warned_of_on_a_machine_with_a_gpu(clean, tmp_path, monkeypatch):
    """It ran on the GPUs without a word, its predictions those of CPU cores."""
    path = _plan_of_kind_on(tmp_path, monkeypatch, "cpu", gpus=1)
    result = runner.invoke(app, ["run", str(path), "--seconds", "0"])  # refused after the plan is read: runs nothing
    assert result.exit_code == 2
    assert f"warning: {path}: the plan was made on CPU cores" in result.output and "XOVER_CPU_ONLY=1" in result.output
    monkeypatch.setenv("XOVER_CPU_ONLY", "1")  # the jobs stay on CPU cores, as planned: nothing to say
    assert "made on CPU cores" not in runner.invoke(app, ["run", str(path), "--seconds", "0"]).output
    _nothing_written(clean)


@SETTINGS
@given(st.text(alphabet="{}[]\":,0123456789abc \n", min_size=1, max_size=40))
def test_a_plan_that_is_not_json_names_its_file(clean, tmp_path, text):
    path = tmp_path / "bad.json"
    path.write_text(text)
    try:
        json.loads(text)
        return  # valid JSON of some shape: the plan tests above cover wrong shapes
    except json.JSONDecodeError:
        pass
    result = runner.invoke(app, ["run", str(path)])
    _one_clear_line(result, str(path))
    _nothing_written(clean)


CSV_HEADER = "name,devices,compute_ms,comm_ms,memory_gb,link_ms,comm_cpu,max_slowdown"


@SETTINGS
@given(st.sampled_from(["devices", "compute_ms", "comm_ms", "memory_gb", "link_ms", "comm_cpu", "max_slowdown"]),
       st.sampled_from(["-1", "x", "", "nan", "inf", "1e999", "1e200", "0.5" + "0" * 400 + "x", "[/]"]))
def test_a_broken_trace_line_names_its_file_line_and_column(clean, tmp_path, column, value):
    row = {"name": "a", "devices": "2", "compute_ms": "100", "comm_ms": "10", "memory_gb": "1", "link_ms": "20",
           "comm_cpu": "0.1", "max_slowdown": "1.5"}
    if value == "" and column in ("link_ms", "max_slowdown", "comm_cpu"):
        value = "-1"  # empty is the default for optional columns
    if value == "-1" and column == "comm_ms":
        value = "x"
    row[column] = value
    path = tmp_path / "trace.csv"
    path.write_text(CSV_HEADER + "\n" + ",".join(row[c] for c in CSV_HEADER.split(",")) + "\n")
    result = runner.invoke(app, ["plan", "--profiles", str(path), "--devices", "2", "--out", str(tmp_path / "p.json")])
    _one_clear_line(result, str(path), "line 2")
    _nothing_written(clean)
    assert not (tmp_path / "p.json").exists()


FLAG_CASES = [
    (["train", "mlp-digits", "--bandwidth", "fast"], "--bandwidth"),
    (["train", "mlp-digits", "--bandwidth", "100"], "--bandwidth"),
    (["train", "mlp-digits", "--bandwidth", "100mb/s"], "--bandwidth"),
    (["train", "mlp-digits", "--np", "0"], "--np"),
    (["train", "mlp-digits", "--iterations", "-3"], "--iterations"),
    (["train", "mlp-digits", "-H", "host"], "-H"),
    (["train", "mlp-digits", "-H", "localhost:2,127.0.0.1:2"], "listed twice"),
    (["train", "mlp-digits", "--engine", "mpi"], "--engine"),
    (["train", "mlp-digits", "--timeout", "-1"], "--timeout"),
    (["run", "--group", "mlp-digits", "--mode", "fast"], "--mode"),
    (["run", "--group", "mlp-digits", "--policy", "lottery"], "--policy"),
    (["run", "--group", "mlp-digits", "--seconds", "5", "--iterations", "3"], "--seconds"),
    (["run", "--group", "mlp-digits", "--seconds", "5"], "--seconds needs"),
    (["run", "--group", "mlp-digits", "--seconds", "inf"], "--seconds"),
    (["run", "--group", "mlp-digits", "--timeout", "nan"], "--timeout"),
    (["run", "--script", "recipes/examples/horovod_digits.py", "--np", "-1"], "--np"),
    (["run", "--script", "recipes/examples/horovod_digits.py", "--np", "0"], "--np"),
    (["train", "mlp-digits", "-H", "h1:x"], "h1:x"),  # text, not the emoji code :x:
    (["train", "mlp-digits", "-H", "a b:2"], "not a host name"),
    (["train", "mlp-digits", "-H", "h1:\u0661"], "SLOTS"),  # an Arabic-Indic one is not a slot count
    # an IPv6 address was told its SLOTS must be a whole number (horovodrun's own -H splits HOST:SLOTS at ':')
    (["train", "mlp-digits", "-H", "[::1]:2"], "'[::1]:2' has more than one ':': -H takes HOST:SLOTS, as horovodrun's"),
    (["train", "mlp-digits", "-H", "::1:2"], "an IPv6 address is no HOST there"),
    (["plan", "--profiles", "t.csv", "-H", "h1:2,[fe80::1%eth0]:2"], "name the host instead"),
    (["run", "--group", "mlp-digits", "-H", "h1:2:3"], "'h1:2:3' has more than one ':'"),
    (["train", "xover"], "a folder"),
    (["train", "r/x[/].toml"], "r/x[/].toml"),  # text, not markup
    (["run", "--script", "missing.py"], "missing.py"),
    # ran the script with 'plan.json' as its argument: words before `--` were the scripts' arguments too
    (["run", "plan.json", "--script", "a.py"], "--script: 'plan.json' comes before `--`, where a script's arguments"),
    # '--steps' read as a recipe ("no recipe file or built-in recipe of that name"); 'x' as a second plan
    (["run", "--group", "mlp-digits", "--", "--steps", "3"], "'--steps' comes after `--`, where a script's arguments "
     "begin, and no --script was given: recipes take no arguments"),
    (["run", "plan.json", "--", "x"], "'x' comes after `--`, where a script's arguments begin, and no --script"),
    (["run", "--group", "mlp-digits", "--mode", "sequential,solo"], "comma list"),
    (["run", "--group", "mlp-digits", "--mode", "crossover,"], "comma list"),
    (["run", "--script", "recipes/examples/horovod_digits.py", "--engine", "mpi"], "--engine"),
    (["run", "mlp-digits", "-H", "localhost:2"], "-H applies to --group"),
    # a module as `python -m` runs it: '-m' was taken for the script and 'pkg.train' said to come before `--`; a
    # dotted name was "file not found" with no word of modules (a probe session, 2026-12-06)
    (["run", "--script", "-m", "pkg.train"], "--script takes a script's file, not `python -m MODULE`"),
    (["run", "--script", "pkg.train", "--script", "pkg.train"],
     'if pkg.train is a module, as `python -m pkg.train` runs it: --script takes a file; give pkg/train.py, or a '
     'file of two lines, `import runpy` and `runpy.run_module("pkg.train", run_name="__main__")`'),
    (["plan", "mlp-digits", "--devices", "2", "--policy", "lottery"], "policy"),
    (["plan", "mlp-digits"], "--devices"),
    (["plan", "mlp-digits", "--devices", "100000000"], "--devices"),
    (["plan", "mlp-digits", "--devices", "2", "--max-group", "0"], "--max-group"),
    # was planned and written: a group takes turns under one turn server, which serves 254 jobs
    (["plan", "--profiles", "t.csv", "--devices", "2", "--max-group", "99999999999999999999"],
     "--max-group 99999999999999999999: give a whole number from 1 to 254"),
    (["plan", "--profiles", "t.csv", "--devices", "2", "--max-group", "255"], "which serves at most 254 jobs"),
    # was echoed as "-1.0", a number the user did not type
    (["plan", "mlp-digits", "--devices", "2", "--device-memory", "-1"], "--device-memory -1: give the GB per device"),
    (["plan", "mlp-digits", "--devices", "2", "--out", ""], "--out"),
    (["plan", "mlp-digits", "--devices", "2", "--engine", "mpi"], "--engine"),
    (["plan", "--profiles", "t.csv", "--devices", "2", "--bandwidth", "1gbit"], "--bandwidth"),
    # was accepted, and recorded in no plan: a trace carries its own times
    (["plan", "--profiles", "t.csv", "--devices", "2", "--engine", "torch"], "--engine picks stored profiles"),
    (["run", "--group", "mlp-digits", "--mode", "crossover,crossover"], "crossover named twice"),
    (["run", "--group", "mlp-digits", "--mode", "all,crossover"], "all is every mode already"),
    (["profile", "mlp-digits", "--iterations", "3", "--warmup", "5"], "--iterations"),
    # numbers too large for what takes them: each was a traceback (OverflowError, a timer's) or a billion slots
    (["train", "mlp-digits", "--iterations", "99999999999999999999999"], "--iterations"),
    (["train", "mlp-digits", "--np", "99999999999999999999999"], "--np"),
    (["train", "mlp-digits", "--timeout", "1e308"], "--timeout"),
    (["run", "--group", "mlp-digits", "--seconds", "1e308"], "--seconds"),
    (["run", "--group", "mlp-digits", "--iterations", "10000000000"], "--iterations"),
    (["train", "mlp-digits", "-H", "h1:99999999999999999999"], "SLOTS"),
    (["plan", "--profiles", "t.csv", "-H", "h1:1000000000"], "SLOTS"),
    (["plan", "--profiles", "t.csv", "-H", "h1:40000,h2:40000"], "more than 65536 devices"),
    (["profile", "mlp-digits", "--iterations", "10000000000"], "at most"),
    (["profile", "mlp-digits", "--warmup", "-1"], "--warmup"),
    (["simulate", "t.csv", "--cluster", "2x2", "--restart-s", "1e308"], "--restart-s"),
    # a gain no group reaches (K jobs are at most K times as fast as apart): reported as "at least inf% gain"
    (["simulate", "t.csv", "--cluster", "2x2", "--min-gain", "1e308"], "--min-gain 1e+308: give a number from 0 to 1"),
    (["simulate", "t.csv", "--cluster", "2x2", "--min-gain", "5"], "--min-gain 5: give a number from 0 to 1 (0.05: 5%"),
    (["simulate", "t.csv", "--cluster", "2x2", "--max-group", "3", "--min-gain", "2.5"], "from 0 to 2"),
    (["simulate", "t.csv", "--cluster", "2x2", "--policy", "fifo,xover,fifo"], "fifo named twice"),
    (["train", "mlp-digits", "--bandwidth", "\u0661gbit"], "--bandwidth"),  # an Arabic-Indic digit
    (["simulate", "t.csv", "--cluster", "2x2", "--factors", "\u0661.5,1.5"], "--factors"),
    (["simulate", "t.csv", "--cluster", "2x2", "--profiles", "p.csv", "--bandwidth", "1gbit"], "--bandwidth"),
    # a cluster of a billion hosts was built in memory (gigabytes, minutes) before its size was refused
    (["simulate", "t.csv", "--cluster", "1000000000x1"], "more than 1,000,000 devices"),
    (["report", "latest", "--format", "pdf"], "--format"),
    # an option's empty value was read as not given: -H "$HOSTS" with HOSTS unset ran on this machine, and
    # --corun-with "" measured no interference, silently
    (["run", "--group", "mlp-digits", "-H", ""], "--hosts '': an empty value; give one, or leave the option out"),
    (["run", "--group", "mlp-digits", "--policy", " "], "--policy ' ': an empty value"),
    (["run", "--group", "mlp-digits", "--engine", ""], "--engine '': an empty value"),
    (["run", "--group", "mlp-digits", "--bandwidth", ""], "--bandwidth '': an empty value"),
    (["run", "--script", "a.py", "--script", ""], "--script '': an empty value"),
    (["profile", "mlp-digits", "--corun-with", ""], "--corun-with '': an empty value"),
    # the partner was dropped without a word, the profile taken without interference
    (["profile", "mlp-digits", "--no-corun", "--corun-with", "mlp-balanced"],
     "--corun-with 'mlp-balanced' and --no-corun: --no-corun measures no interference, so no partner"),
    (["plan", "--profiles", "", "--devices", "2"], "--profiles '': an empty value"),
    (["--db", "", "report", "latest"], "--db '': an empty value"),
    # an empty path was '.', this folder: "': a folder, not a recipe file", "' .: not a regular file (a plan...)"
    (["run", ""], "'': an empty path; name the plan file `xover plan --out` wrote"),
    (["plan", "", "--devices", "2"], "'': an empty path; name a recipe or job file (NAME.toml) or a built-in recipe"),
    (["train", " "], "' ': an empty path; name a recipe"),
    (["run", "--group", "mlp-digits", ""], "'': an empty path; name a recipe"),
    (["simulate", "", "--cluster", "1x2"], "'': an empty path; name the trace's CSV or JSON file"),
    # a control character in a choice was printed as it is: "error: --algo m" then "atching: choose ..." below it
    (["plan", "mlp-digits", "--devices", "2", "--algo", "m\natching"], "--algo m\\natching: choose matching"),
    (["simulate", "t.csv", "--cluster", "1x2", "--placement", "x\ny"], "--placement x\\ny: choose best-fit"),
    (["simulate", "t.csv", "--cluster", "1x2", "--format", "csv\n"], "--format csv\\n: choose muri"),
    (["report", "latest", "--format", "ht\nml"], "--format ht\\nml: choose table"),
    (["plan", "mlp-digits", "--devices", "2", "--policy", "work\nconserving"], "--policy work\\nconserving: choose"),
    (["simulate", "t.csv", "--cluster", "2\nx2"], "--cluster 2\\nx2: give HOSTSxDEVICES"),
    (["simulate", "t.csv", "--cluster", "1x2", "--model", "x\ny"], "--model x\\ny: choose"),
    (["simulate", "t.csv", "--cluster", "1x2", "--semantics", "x\ny"], "--semantics x\\ny: choose"),
    (["simulate", "t.csv", "--cluster", "1x2", "--turn-policy", "x\ny"], "--turn-policy x\\ny: choose"),
    (["simulate", "t.csv", "--cluster", "1x2", "--factors", "1\n2"], "--factors 1\\n2: give numbers"),
    # a file of the wrong kind was read as the expected one: "TOML syntax error: Expected '=' after a key",
    # "not valid JSON: Expecting value", "imports neither horovod nor torch.distributed"
    (["train", "recipes/examples/ddp_digits.py"], "ddp_digits.py: a Python script, not a recipe or job file: name it"),
    (["run", "recipes/mlp-digits.toml"], "mlp-digits.toml: a recipe or job file, not a plan: run it with --group"),
    (["run", "--script", "recipes/examples/ddp-digits.toml"], "ddp-digits.toml: a TOML file (a recipe or job file), "
     "not a script: give it without --script"),
    # spoke of `-H localhost:100000`, an option never given
    (["train", "mlp-digits", "--np", "100000"], "asks for 100000 ranks (--np, or its recipe's np) on this machine"),
    (["run", "--group", "mlp-digits", "--np", "100000"], "more than one host holds (65536)"),
    # a name longer than the system takes (255 bytes) was a traceback (OSError: File name too long)
    (["plan", "a" * 300 + ".toml", "--devices", "2"], "cannot be looked at: File name too long"),
    (["--db", "a" * 300 + ".db", "report", "latest"], "cannot be looked at: File name too long"),
]


@pytest.mark.parametrize("args, needle", FLAG_CASES, ids=[" ".join(a) for a, _ in FLAG_CASES])
def test_a_bad_flag_is_one_clear_line(clean, args, needle):
    result = runner.invoke(app, args)
    _one_clear_line(result, needle)
    if args[0] != "report":
        _nothing_written(clean, lookups=needle == "--seconds needs")


# Typer read a flag's number as Python does: `--iterations 1_0` ran 10 iterations, `--seconds 1_0` 10 s. A flag's
# number is now read as files and settings read theirs, with the digits 0-9 only (xover/flags.py).
NUMBER_FLAG_CASES = [
    (["run", "--group", "mlp-digits", "--iterations", "1_0"], "--iterations"),
    (["run", "--group", "mlp-digits", "--seconds", "1_0"], "--seconds"),
    (["run", "--group", "mlp-digits", "--np", "1e1"], "--np"),
    (["train", "mlp-digits", "--timeout", "\uff11\uff10"], "--timeout"),
    (["profile", "mlp-digits", "--warmup", "\u0663"], "--warmup"),
    (["plan", "mlp-digits", "--device-memory", "8_0"], "--device-memory"),
    (["simulate", "t.csv", "--cluster", "2x2", "--min-gain", "0_1"], "--min-gain"),
]


@pytest.mark.parametrize("args, flag", NUMBER_FLAG_CASES, ids=[" ".join(a) for a, _ in NUMBER_FLAG_CASES])
def test_a_flags_number_not_written_with_ascii_digits_is_refused(clean, args, flag):
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    text = " ".join(result.output.replace("\u2502", " ").split())
    assert f"Invalid value for '{flag}'" in text and "written with the digits 0-9" in text, text
    _nothing_written(clean)


def test_a_flags_number_written_plainly_is_read(clean):
    from xover.flags import decimal_flag, whole_flag

    assert (whole_flag(" 12 "), whole_flag("-3"), whole_flag(7)) == (12, -3, 7)
    assert (decimal_flag("1.5"), decimal_flag("2e3"), decimal_flag(".5"), decimal_flag(0.05)) == (1.5, 2000.0, 0.5, 0.05)


@pytest.mark.parametrize("variable, value", [("XOVER_TURN_SERVER_NICE", "high"), ("XOVER_TURN_SERVER_NICE", "-40"),
                                             ("XOVER_TURN_LEASE", "floor=-1"), ("XOVER_TURN_LEASE", "floor=nan"),
                                             ("XOVER_TURN_LEASE", "floor=30,floor=1"), ("XOVER_TURN_SERVER_NICE", "-1_0"),
                                             ("XOVER_LINK_BANDS", "maybe"), ("XOVER_COMM_THREADS", "fifo"),
                                             ("XOVER_WAIT", "spin")])
def test_a_bad_turn_server_setting_is_one_clear_line(clean, monkeypatch, variable, value):
    monkeypatch.setenv(variable, value)
    _one_clear_line(runner.invoke(app, ["run", "--group", "mlp-digits", "mlp-digits", "--mode", "crossover"]), variable)
    _nothing_written(clean, lookups=True)


# Issue 58: a digit that is not ASCII passed str.isdigit() and then broke int() (a traceback), or was taken by
# int()/float() as the number it is in its own script ('٣' = 3). Every number a setting holds: one clear line.
NUMERIC_SETTINGS = ("XOVER_METRICS_PORT", "XOVER_DEVICES_PER_GPU", "XOVER_THREADS_PER_RANK", "XOVER_TURN_SEND_BUFFER",
                    "XOVER_TURN_METRICS_PORTS", "XOVER_TURN_HEARTBEAT", "XOVER_TURN_SERVER_NICE")
NOT_ASCII_DIGITS = ("\u00b2", "\u0663", "9\u00b9", "\uff19\uff10\uff19\uff10", "1\u00b2-2")


@pytest.mark.parametrize("variable", NUMERIC_SETTINGS)
@pytest.mark.parametrize("value", NOT_ASCII_DIGITS)
def test_a_setting_with_a_digit_that_is_not_ascii_is_one_clear_line(clean, monkeypatch, variable, value):
    monkeypatch.setenv(variable, value)
    _one_clear_line(runner.invoke(app, ["run", "--group", "mlp-digits", "mlp-digits", "--mode", "crossover"]), variable)
    _nothing_written(clean, lookups=True)


@pytest.mark.parametrize("value", ["floor=\u00b2", "floor=\u0663", "initial=\uff11"])
def test_a_turn_lease_with_a_digit_that_is_not_ascii_is_one_clear_line(clean, monkeypatch, value):
    monkeypatch.setenv("XOVER_TURN_LEASE", value)
    _one_clear_line(runner.invoke(app, ["run", "--group", "mlp-digits", "mlp-digits", "--mode", "crossover"]),
                    "XOVER_TURN_LEASE")


def test_a_metrics_port_of_a_superscript_digit_exits_2_without_a_traceback(tmp_path):
    """The confirmed case, as a user meets it: a real `xover run` process."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "XOVER_METRICS_PORT": "\u00b2", "XOVER_DB": str(tmp_path / "x.db"),
           "XOVER_RESULTS": str(tmp_path / "results")}
    done = subprocess.run([sys.executable, "-m", "xover", "run", "--group", "mlp-digits", "mlp-digits"],
                          capture_output=True, text=True, env=env, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "XOVER_METRICS_PORT" in done.stderr


@pytest.mark.parametrize("args, needle", [(["--engine", "mpi"], "--engine"), (["--iterations", "0"], "--iterations")])
def test_a_bad_flag_with_a_plan_is_one_clear_line(clean, tmp_path, args, needle):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(_plan(tmp_path)))
    _one_clear_line(runner.invoke(app, ["run", str(path), *args]), needle)
    _nothing_written(clean)


def test_a_bad_setting_records_no_plan(clean, tmp_path, monkeypatch):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(_plan(tmp_path)))
    monkeypatch.setenv("XOVER_LINK_BANDS", "maybe")
    _one_clear_line(runner.invoke(app, ["run", str(path)]), "XOVER_LINK_BANDS")
    assert not (clean / "results").exists()
    if (clean / "xover.db").exists():
        with sqlite3.connect(clean / "xover.db") as db:
            assert db.execute("SELECT count(*) FROM plans").fetchone() == (0,)


def test_a_plan_that_cannot_be_written_is_one_clear_line(clean, tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("name,devices,compute_ms,comm_ms,memory_gb\na,2,100,10,1\nb,2,10,100,1\n")
    for out in (tmp_path, tmp_path / "t.csv" / "p.json"):  # a folder; a path through a file
        _one_clear_line(runner.invoke(app, ["plan", "--profiles", str(trace), "--devices", "2", "--out", str(out)]),
                        "--out")


def test_plan_with_neither_recipes_nor_a_trace_says_so(clean):
    result = runner.invoke(app, ["plan", "--devices", "2"])
    _one_clear_line(result, "--profiles")
    assert "not both" not in result.output


def test_a_plan_is_not_written_when_the_store_cannot_be_opened(clean, tmp_path, monkeypatch):
    trace = tmp_path / "t.csv"
    trace.write_text("name,devices,compute_ms,comm_ms,memory_gb\na,2,100,10,1\nb,2,10,100,1\n")
    (tmp_path / "not-a-db").write_text("plain text")
    monkeypatch.setenv("XOVER_DB", str(tmp_path / "not-a-db"))
    out = tmp_path / "p.json"
    result = runner.invoke(app, ["plan", "--profiles", str(trace), "--devices", "2", "--out", str(out)])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert not out.exists()


def test_reading_commands_create_no_database_or_folder(clean, tmp_path, monkeypatch):
    from xover.doctor import _database

    missing = tmp_path / "fresh" / "dir" / "x.db"
    monkeypatch.setenv("XOVER_DB", str(missing))
    _one_clear_line(runner.invoke(app, ["report", "latest"]), "no database")
    check = _database(None)
    assert check.ok and "does not exist yet" in check.detail, check
    assert not (tmp_path / "fresh").exists()


@pytest.mark.parametrize("table, key, value", [("model_options", "hidden", -3), ("model_options", "hidden", '"big"'),
                                               ("dataset_options", "image_size", 0), ("model_options", "layers", 2.5)])
def test_a_bad_option_value_names_its_field(clean, tmp_path, table, key, value):
    data = copy.deepcopy(VALID_RECIPE)
    data.pop("model_options", None)
    data.pop("dataset_options", None)
    path = tmp_path / "options.toml"
    path.write_text(_toml(data) + f"[{table}]\n{key} = {value}\n")
    _one_clear_line(runner.invoke(app, ["profile", str(path)]), str(path), f"field '{table}.{key}'")
    _nothing_written(clean)


@pytest.mark.parametrize("row, words", [
    ("a/b,2,100,10,1,", "name must be ASCII letters"),
    ("my job,2,100,10,1,", "name must be ASCII letters"),
    ("a,2,100,30,1,20", "link_ms 20 is below comm_ms 30"),
])
def test_a_trace_name_or_link_time_that_cannot_be_is_refused(clean, tmp_path, row, words):
    path = tmp_path / "trace.csv"
    path.write_text("name,devices,compute_ms,comm_ms,memory_gb,link_ms\n" + row + "\n")
    result = runner.invoke(app, ["plan", "--profiles", str(path), "--devices", "2", "--out", str(tmp_path / "p.json")])
    _one_clear_line(result, str(path), "line 2", words)
    _nothing_written(clean)


def test_a_plan_file_job_name_that_cannot_name_a_folder_is_refused(clean, tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("name,devices,compute_ms,comm_ms,memory_gb\na,2,100,10,1\nb,2,10,100,1\n")
    out = tmp_path / "p.json"
    assert runner.invoke(app, ["plan", "--profiles", str(trace), "--devices", "2", "--out", str(out)]).exit_code == 0
    out.write_text(out.read_text().replace('"a"', '"../a"'))
    _one_clear_line(runner.invoke(app, ["run", str(out)]), str(out), "jobs.../a", "name must be ASCII letters")


def test_a_plan_with_nothing_placed_is_not_run(clean, tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("name,devices,compute_ms,comm_ms,memory_gb\na,2,100,10,40\n")
    out = tmp_path / "p.json"
    planned = runner.invoke(app, ["plan", "--profiles", str(trace), "--devices", "2", "--device-memory", "16",
                                  "--out", str(out)])
    # it was written, with nothing to run (exit 0): now refused, and nothing written
    _one_clear_line(planned, "no job can be placed", "'a' needs 40 GB per device, devices have 16 GB")
    assert not out.exists()
    trace.write_text("name,devices,compute_ms,comm_ms,memory_gb\na,2,100,10,1\n")
    assert runner.invoke(app, ["plan", "--profiles", str(trace), "--devices", "2", "--out", str(out)]).exit_code == 0
    document = json.loads(out.read_text())  # a plan file of no groups, by hand: `xover run` refuses it
    document.update(groups=[], jobs={}, unplaced=[{"name": "a", "reason": "needs 40 GB per device, devices have 16 GB"}])
    out.write_text(json.dumps(document))
    _one_clear_line(runner.invoke(app, ["run", str(out)]), str(out), "no groups")


def test_a_store_that_is_not_a_database_is_named(clean, tmp_path, monkeypatch):
    junk = tmp_path / "junk.db"
    junk.write_text("plain text, not SQLite")
    monkeypatch.setenv("XOVER_DB", str(junk))
    result = runner.invoke(app, ["report", "all"])
    _one_clear_line(result, str(junk), "not a database")
    assert "sqlalche.me" not in result.output


def test_a_password_in_the_store_url_is_not_shown():
    from xover.store.session import shown_url

    shown = shown_url("postgresql+psycopg://user:secret@db.example/xover")
    assert "secret" not in shown and "user" in shown and "db.example" in shown


# a seed above about 1.8e14 passed and failed in the rank: seed * 100003 seeds the data order's generator
@pytest.mark.parametrize("field, value", [("seed", 2**63), ("seed", 2 * 10**14), ("iterations", 10**10), ("np", 10**6)])
def test_a_number_too_large_for_the_workers_names_its_field(clean, tmp_path, field, value):
    path = tmp_path / "big.toml"
    path.write_text(_toml({**VALID_RECIPE, field: value}))
    _one_clear_line(runner.invoke(app, ["profile", str(path)]), str(path), f"field '{field}'", "at most")
    _nothing_written(clean)


@pytest.mark.parametrize("field", ["lr", "momentum", "max_slowdown"])
def test_a_number_too_large_for_a_float_names_its_field(clean, tmp_path, field):
    path = tmp_path / "huge.toml"
    path.write_text(_toml({**VALID_RECIPE, field: 10**400}))
    _one_clear_line(runner.invoke(app, ["profile", str(path)]), str(path), f"field '{field}'", "finite")
    _nothing_written(clean)


def test_a_trace_of_sub_millisecond_times_is_planned(clean, tmp_path):
    # as from a trace written in seconds: the simulation's memo rounded such times (to 0.1 ms) to nothing
    trace = tmp_path / "tiny.csv"
    trace.write_text("name,devices,compute_ms,comm_ms,memory_gb\na,2,0.01,0,1\nb,2,0.004,0.02,1\n")
    result = runner.invoke(app, ["--db", str(tmp_path / "p.db"), "plan", "--profiles", str(trace), "--devices", "2",
                                 "--out", str(tmp_path / "p.json")])
    assert result.exit_code == 0, result.output


PROFILES = "name,devices,compute_ms,comm_ms,memory_gb\n"
MURI = "job_id,num_gpu,submit_time,iterations,model_name,iteration_time,resource_time_0,resource_time_1,resource_time_2\n"
TINY_TIMES = [
    ({"p.csv": PROFILES + "a,2,1e-9,1e-9,1\nb,2,1e-9,1e-9,1\n"},
     ["plan", "--profiles", "{dir}/p.csv", "--devices", "2", "--out", "{dir}/p.json"],
     "p.csv: line 2: compute_ms must be at least 0.001 (a microsecond), got 1e-09"),
    ({"p.csv": PROFILES + "a,1,1e-9,1e-9,1\n", "t.csv": "arrival_s,gpus,duration_s,model\n0,1,100,a\n10,1,100,a\n"},
     ["simulate", "{dir}/t.csv", "--profiles", "{dir}/p.csv", "--cluster", "1x1"],
     "p.csv: line 2: compute_ms must be at least 0.001 (a microsecond), got 1e-09"),
    ({"m.csv": MURI + "0,1,0,100,toy,1000,1,1e-9,1\n"}, ["simulate", "{dir}/m.csv", "--cluster", "1x1"],
     "m.csv: line 2: resource_time_1 must be at least 0.001 ms (a microsecond), got 1e-9"),
    ({"m.csv": MURI + "0,1,0,100,toy,1e-9,1,1,1\n"}, ["simulate", "{dir}/m.csv", "--cluster", "1x1"],
     "m.csv: line 2: iteration_time must be at least 0.001 ms (a microsecond), got 1e-9"),
]


@pytest.mark.parametrize("files, args, words", TINY_TIMES, ids=["plan", "simulate", "muri gpu", "muri iteration"])
def test_a_time_per_iteration_under_a_microsecond_is_refused(clean, tmp_path, files, args, words):
    # within the simulation's EPSILON an iteration ended in the instant it began: plan and simulate never ended
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    result = runner.invoke(app, [arg.format(dir=tmp_path) for arg in args])
    _one_clear_line(result, str(tmp_path), words)
    _nothing_written(clean)
    assert not (tmp_path / "p.json").exists()


def test_doctor_does_not_show_the_store_password(monkeypatch, tmp_path):
    from types import SimpleNamespace

    from sqlalchemy import create_engine

    import xover.store.session as session
    from xover.doctor import _database

    store = SimpleNamespace(engine=create_engine(f"sqlite:///{tmp_path / 'x.db'}"), kind="postgresql",
                            url="postgresql+psycopg://user:secret@db.example/xover", close=lambda: None)
    monkeypatch.setattr(session, "open_store", lambda db: store)
    check = _database("postgresql+psycopg://user:secret@db.example/xover")
    assert check.ok and "secret" not in check.detail and "db.example" in check.detail, check


def test_plan_refuses_devices_and_hosts_together(clean, tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("name,devices,compute_ms,comm_ms,memory_gb\na,1,10,10,1\n")
    result = runner.invoke(app, ["plan", "--profiles", str(trace), "--devices", "4", "-H", "h1:2"])
    _one_clear_line(result, "--devices", "-H")
    _nothing_written(clean)


def test_a_plan_without_out_goes_to_the_results_folder(clean, tmp_path, monkeypatch):
    trace = tmp_path / "t.csv"
    trace.write_text("name,devices,compute_ms,comm_ms,memory_gb\na,1,10,10,1\n")
    monkeypatch.setenv("XOVER_RESULTS", str(tmp_path / "elsewhere"))
    result = runner.invoke(app, ["--db", str(tmp_path / "p.db"), "plan", "--profiles", str(trace), "--devices", "1"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "elsewhere" / "plan.json").exists()


def test_a_recipe_that_is_a_device_is_named_as_such(clean, tmp_path):
    """A link to /dev/zero was "recipe file not found"."""
    (tmp_path / "zero.toml").symlink_to("/dev/zero")
    _one_clear_line(runner.invoke(app, ["profile", str(tmp_path / "zero.toml")]), "zero.toml", "not a regular file")
    _nothing_written(clean)


def test_a_file_nested_too_deeply_is_one_clear_line(clean, tmp_path):
    """Thousands of '[' were a RecursionError (a 3,000-line traceback for a recipe)."""
    recipe, plan, philly = tmp_path / "deep.toml", tmp_path / "deep.json", tmp_path / "philly.json"
    recipe.write_text('name = "x"\na = ' + "[" * 100_000 + "\n")
    _one_clear_line(runner.invoke(app, ["profile", str(recipe)]), str(recipe), "nested too deeply")
    plan.write_text("[" * 100_000)
    _one_clear_line(runner.invoke(app, ["run", str(plan)]), str(plan), "nested too deeply")
    philly.write_text("[" * 100_000)
    result = runner.invoke(app, ["simulate", str(philly), "--format", "philly", "--cluster", "2x2", "--assign", "mlp"])
    _one_clear_line(result, str(philly), "nested too deeply")
    _nothing_written(clean)


def test_an_integer_too_long_to_read_is_one_clear_line(clean, tmp_path):
    recipe = tmp_path / "long.toml"
    recipe.write_text(_toml(VALID_RECIPE).replace("seed = ", "seed = " + "1" * 5000 + " #", 1))
    _one_clear_line(runner.invoke(app, ["profile", str(recipe)]), str(recipe), "cannot be read")
    # in a plan, the field it is given for is named (it was "cannot be read: Exceeds the limit ...")
    plan = tmp_path / "long.json"
    body = {"format": "xover-plan/1", "algo": "none", "hosts": [["localhost", 1]],
            "groups": [{"jobs": ["j"], "devices": ["localhost:0"], "wave": 0, "predicted_period_ms": 1.0,
                        "predicted_gain": 1.0, "predicted_duration_ms": 1.0, "predicted_slowdown": {"j": 1.0}}],
            "jobs": {"j": {"devices": 1, "compute_ms": 1.0, "comm_ms": 1.0, "memory_gb": 0.1}},
            "unplaced": [], "predicted_aggregate_gain": 1.0, "predicted_makespan_ms": 1.0,
            "sequential_makespan_ms": 1.0}
    for field, (place, value, said) in {"groups[0].wave": (body["groups"][0], "wave", "from 0 to 2147483647, got an integer of 5000 digits"),
                                        "jobs.j.compute_ms": (body["jobs"]["j"], "compute_ms", "5000 digits"),
                                        "algo": (body, "algo", "must be a string")}.items():
        edited = json.dumps(body).replace(json.dumps({value: place[value]})[1:-1], f'"{value}": {"1" * 5000}', 1)
        plan.write_text(edited)
        result = runner.invoke(app, ["run", str(plan)])
        _one_clear_line(result, str(plan), f"plan field '{field}'")
        assert said in result.output, result.output
    _nothing_written(clean)


def test_an_output_over_the_store_or_an_input_is_refused_and_nothing_is_lost(clean, tmp_path, monkeypatch):
    """`report --out` and `plan --out` naming the store (or a link to it, or its WAL) replaced it with a report
    or a plan: every experiment lost; `plan --out` naming its own --profiles file replaced that."""
    store = tmp_path / "x.db"
    monkeypatch.setenv("XOVER_DB", str(store))
    trace = tmp_path / "t.csv"
    trace.write_text("name,devices,compute_ms,comm_ms,memory_gb\na,2,100,10,1\nb,2,10,100,1\n")
    assert runner.invoke(app, ["plan", "--profiles", str(trace), "--devices", "2",
                               "--out", str(tmp_path / "p.json")]).exit_code == 0
    (tmp_path / "link.db").symlink_to(store)
    for out in (store, tmp_path / "link.db", Path(f"{store}-wal")):
        _one_clear_line(runner.invoke(app, ["report", "latest", "--format", "json", "--out", str(out)]),
                        f"--out {out}: that is the store {store}")
        _one_clear_line(runner.invoke(app, ["plan", "--profiles", str(trace), "--devices", "2", "--out", str(out)]),
                        f"--out {out}: that is the store {store}")
    _one_clear_line(runner.invoke(app, ["plan", "--profiles", str(trace), "--devices", "2", "--out", str(trace)]),
                    f"--out {trace}: that is the --profiles file")
    assert trace.read_text().startswith("name,devices")
    with sqlite3.connect(store) as connection:
        assert connection.execute("select count(*) from plans").fetchone()[0] == 1


def test_an_output_over_the_wal_of_a_store_named_through_a_link_is_refused(clean, tmp_path, monkeypatch):
    """A store named by a link keeps its WAL beside the file the link names, as SQLite does: an --out there was
    taken for another file and written over the store's WAL."""
    (tmp_path / "real").mkdir()
    store = tmp_path / "real" / "x.db"
    link = tmp_path / "link.db"
    link.symlink_to(store)
    monkeypatch.setenv("XOVER_DB", str(link))
    trace = tmp_path / "t.csv"
    trace.write_text("name,devices,compute_ms,comm_ms,memory_gb\na,2,100,10,1\nb,2,10,100,1\n")
    assert runner.invoke(app, ["plan", "--profiles", str(trace), "--devices", "2",
                               "--out", str(tmp_path / "p.json")]).exit_code == 0
    for out in (Path(f"{store}-wal"), Path(f"{store}.migrate.lock")):
        _one_clear_line(runner.invoke(app, ["plan", "--profiles", str(trace), "--devices", "2", "--out", str(out)]),
                        f"--out {out}: that is the store {link} (its ")
    with sqlite3.connect(store) as connection:
        assert connection.execute("select count(*) from plans").fetchone()[0] == 1


def test_a_report_out_path_too_long_for_the_system_is_one_clear_line(clean, tmp_path):
    """`report ID --format json|html --out NAME` (and `report all`, csv too) with a name longer than the system
    takes was a traceback (OSError: File name too long) from the check whether --out is a folder; a folder's name
    too long was one from the words that say why the write failed. Now every format says it in one line."""
    replay = Path(__file__).resolve().parents[1] / "assets" / "replay"
    simulated = runner.invoke(app, ["simulate", str(replay / "fifo_srtf.csv"), "--profiles",
                                    str(replay / "profiles.csv"), "--cluster", "1x2", "--policy", "fifo", "--json"])
    assert simulated.exit_code == 0, simulated.output
    experiment = json.loads(simulated.stdout)["experiment"]
    long = tmp_path / ("a" * 300)  # in a folder that exists: the system looks at the name's length only then
    before = set(tmp_path.iterdir())
    for target in (experiment, "all"):
        for fmt in ("json", "html", "csv"):
            for out in (f"{long}.{fmt}", f"{long}/report.{fmt}"):
                result = runner.invoke(app, ["report", target, "--format", fmt, "--out", out])
                _one_clear_line(result, "cannot write", "File name too long")
    assert set(tmp_path.iterdir()) <= before | {tmp_path / "results"}
    # under a folder not made yet, the name was looked at only once the pictures were drawn: they were left behind
    results = tmp_path / "results"
    pictures = set(results.rglob("*.png"))
    for target in (experiment, "all"):
        for fmt in ("json", "html", "csv"):
            result = runner.invoke(app, ["report", target, "--format", fmt, "--out", f"{tmp_path}/new/{long.name}.{fmt}"])
            _one_clear_line(result, "cannot write", "File name too long")
    assert set(results.rglob("*.png")) == pictures


@pytest.mark.parametrize("url, words", [
    ("mysql://user:secretpw@127.0.0.1:1/db", "its driver is not installed (No module named"),
    # libpq's words were two lines ("...Connection refused\n\tIs the server running on that host...")
    ("postgresql://user:secretpw@127.0.0.1:1/db", "Connection refused Is the server running on that host"),
    ("postgresql://user:secretpw@[::1:1/db", "not a database URL SQLAlchemy reads"),
    # a store in memory was said to be stored ("xover report ID"), and nothing was left to report
    ("sqlite://", "a database in memory keeps nothing past this command"),
    ("sqlite:///:memory:", "a database in memory keeps nothing past this command"),
    # SQLite's words were "unable to open database file" and "disk I/O error"
    (".", "the database . is a folder: name a file"),
    ("/dev/null", "the database /dev/null is not a regular file"),
    ("sqlite:////dev/null", "the database sqlite:////dev/null names /dev/null, not a regular file"),
    # a newline at its end (XOVER_DB=$'x.db\n') broke the line in two
    ("missing.db\n", "no database at missing.db\\n: nothing has been run yet"),
])
def test_a_store_url_without_a_driver_or_unreadable_is_one_line(clean, url, words):
    result = runner.invoke(app, ["--db", url, "report", "all"])
    _one_clear_line(result, words)
    assert "secretpw" not in result.output


@pytest.mark.parametrize("url", ["sqlite:///{folder}", "sqlite:///{folder}?mode=ro",
                                 "sqlite:///file:{folder}?mode=ro&uri=true",
                                 # the driver named: the same store (it said "read-only to you" after the URL's fix)
                                 "sqlite+pysqlite:///{folder}"])
@pytest.mark.parametrize("given", ["--db", "XOVER_DB"])
def test_a_sqlite_url_naming_a_folder_says_so_as_its_plain_path_does(clean, tmp_path, monkeypatch, url, given):
    """`--db sqlite:////tmp/somefolder` (or XOVER_DB) said the store was "read-only to you" (SQLite's "unable to
    open database file"), or "disk I/O error" in the URI form (a probe session, 2026-12-07)."""
    folder = tmp_path / "somefolder"
    folder.mkdir()
    store = url.format(folder=folder)
    profiles = tmp_path / "t.csv"
    profiles.write_text("name,devices,compute_ms,comm_ms,memory_gb\na,2,100,10,1\nb,2,10,100,1\n")
    options = ["--db", store] if given == "--db" else []
    if given == "XOVER_DB":
        monkeypatch.setenv("XOVER_DB", store)
    for command in (["report", "all"], ["plan", "--profiles", str(profiles), "--devices", "2"]):
        _one_clear_line(runner.invoke(app, [*options, *command]),
                        f"the database {store} names a folder, {folder}: name a file in it (sqlite:///{folder}/xover.db)")
    _one_clear_line(runner.invoke(app, ["--db", str(folder), "report", "all"]), f"the database {folder} is a folder")
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize("url", ["sqlite:///{file}", "sqlite+pysqlite:///{file}"])
def test_a_sqlite_url_in_a_folder_not_made_yet_is_made_as_its_plain_path_is(clean, tmp_path, url):
    """`--db sqlite:///new/x.db` said the store was "read-only to you" where `--db new/x.db` made the folder (a probe
    session, 2026-12-07); a command that only reads still makes nothing."""
    profiles = tmp_path / "t.csv"
    profiles.write_text("name,devices,compute_ms,comm_ms,memory_gb\na,2,100,10,1\nb,2,10,100,1\n")
    read = url.format(file=tmp_path / "read" / "x.db")
    _one_clear_line(runner.invoke(app, ["--db", read, "report", "all"]), "no database at")
    assert not (tmp_path / "read").exists()
    store = tmp_path / "new" / "sub" / "x.db"
    result = runner.invoke(app, ["--db", url.format(file=store), "plan", "--profiles", str(profiles), "--devices", "2"])
    assert result.exit_code == 0, result.output
    assert store.is_file()


def test_an_empty_store_file_is_reported_as_empty_and_left_empty(clean, tmp_path):
    # `report` gave a 0-byte file xover's schema (a write, from a command that reads) and said it held nothing
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    _one_clear_line(runner.invoke(app, ["--db", str(empty), "report", "all"]), f"{empty} is an empty file")
    assert empty.stat().st_size == 0


def test_a_read_only_store_is_one_line_and_leaves_no_plan_file(clean, tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("name,devices,compute_ms,comm_ms,memory_gb\na,2,100,10,1\nb,2,10,100,1\n")
    store = tmp_path / "ro.db"
    assert runner.invoke(app, ["--db", str(store), "report", "all"]).exit_code == 2  # made, with no experiments
    with sqlite3.connect(store) as connection:  # what SQLite says of a file it may not write
        connection.execute("pragma query_only = 1")
    store.chmod(0o444)
    (tmp_path / "ro.db-wal").unlink(missing_ok=True)
    readonly = f"sqlite:///file:{store}?mode=ro&uri=true"
    result = runner.invoke(app, ["--db", readonly, "plan", "--profiles", str(trace), "--devices", "2",
                                 "--out", str(tmp_path / "p.json")])
    _one_clear_line(result, "readonly database")
    assert not (tmp_path / "p.json").exists()


def test_plan_file_fields_reach_the_script_checked_as_a_job_files_are(clean, tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("name,devices,compute_ms,comm_ms,memory_gb\na,2,100,10,1\nb,2,10,100,1\n")
    out = tmp_path / "p.json"
    assert runner.invoke(app, ["plan", "--profiles", str(trace), "--devices", "2", "--out", str(out)]).exit_code == 0
    plan = json.loads(out.read_text())
    for edit, words in (
        (lambda p: p["groups"][0].update(wave=10**30), "groups[0].wave': must be a whole number from 0 to"),
        (lambda p: p.update(hosts=[["localhost", 10**9]]), "hosts[0]': must be a whole number from 1 to 65536"),
        (lambda p: p["jobs"]["a"].update(script={"path": "t.py", "engine": "torch", "sha256": "x",
                                                 "env": {"A": "x\0y"}}), "holds a NUL character"),
        (lambda p: p["jobs"]["a"].update(script={"path": "t.py", "engine": "torch", "sha256": "x",
                                                 "env": {"XOVER_DB": "x"}}), "xover sets its XOVER_ variables"),
    ):
        edited = copy.deepcopy(plan)
        edit(edited)
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps(edited))
        _one_clear_line(runner.invoke(app, ["run", str(bad)]), str(bad), words)
    # an editor's byte-order mark is read past
    (tmp_path / "bom.json").write_text("\ufeff" + out.read_text(), encoding="utf-8")
    result = runner.invoke(app, ["run", str(tmp_path / "bom.json"), "--mode", "nonsense"])
    assert "BOM" not in result.output


@pytest.mark.parametrize("trace, words", [
    ("arrival_s,gpus,duration_s,model,model\n0,1,100,mA,mB\n", "column 'model' appears twice"),
    ("arrival_s,gpus,duration_s,model\n\u0663,1,100,mA\n", "arrival_s must be a number"),
    ("arrival_s,gpus,duration_s,model\n0,1,1_000,mA\n", "duration_s must be a number"),
])
def test_a_simulated_trace_with_a_repeated_column_or_other_digits_is_refused(clean, tmp_path, trace, words):
    path = tmp_path / "trace.csv"
    path.write_text(trace, encoding="utf-8")
    profiles = tmp_path / "prof.csv"
    profiles.write_text("name,devices,compute_ms,comm_ms,memory_gb\nmA,1,100,10,1\nmB,1,10,100,1\n")
    result = runner.invoke(app, ["simulate", str(path), "--profiles", str(profiles), "--cluster", "2x2"])
    _one_clear_line(result, str(path), "line", words)


def test_a_job_name_ending_in_a_newline_or_too_long_says_so(clean, tmp_path):
    for name, words in (("abc\n", "got 'abc\\n'"), ("a" * 300, "at most 200 characters")):
        job = tmp_path / "job.toml"
        job.write_text(f'name = {json.dumps(name)}\nscript = "train.py"\nnp = 2\n')
        (tmp_path / "train.py").write_text("import torch.distributed\nfrom torch.nn.parallel import DistributedDataParallel\n")
        _one_clear_line(runner.invoke(app, ["plan", str(job), "--devices", "2"]), words)


@pytest.mark.parametrize("command, said", [("plan", "interrupted: no plan was written\n"),
                                           ("report", "interrupted: the report stopped part-way; each file it said"),
                                           ("simulate", "interrupted: nothing of the simulation was stored\n"),
                                           ("run", "interrupted: every process was stopped; unfinished runs")])
def test_ctrl_c_says_what_it_left_in_the_commands_words(clean, monkeypatch, command, said):
    """Ctrl-C in plan, report or simulate said every process was stopped and unfinished runs were marked,
    where none had started."""
    from xover import cli

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr({"plan": "xover.plan.step.plan_jobs", "report": "xover.report.make_report",
                         "simulate": "xover.replay.step.simulate", "run": "xover.cli.run_as_asked"}[command],
                        interrupted)
    args = {"plan": ["plan", "mlp-digits", "--devices", "2"], "report": ["report", "all"],
            "simulate": ["simulate", "t.csv", "--cluster", "1x2"], "run": ["run", "--group", "mlp-digits"]}[command]
    result = runner.invoke(cli.app, args)
    assert result.exit_code == 130 and said in result.output, result.output


def test_a_scripts_arguments_after_the_double_dash_are_its_own(clean):
    """`xover run --script FILE -- ARGS`: what follows `--` is the script's, never taken for a plan file coming
    before it; in a process of its own and in this one alike (the split read sys.argv, which under CliRunner is
    pytest's: `xover plan --script s.py -- --steps 3` in-process took '--steps' and '3' for recipes)."""
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "xover", "run", "--script", "missing.py", "--", "plan.json"],
                            capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2], timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("error: --script missing.py: file not found"), result.stderr
    _one_clear_line(runner.invoke(app, ["run", "--script", "missing.py", "--", "plan.json"]),
                    "--script missing.py: file not found")
    result = runner.invoke(app, ["plan", "--script", "recipes/examples/ddp_digits.py", "--devices", "2", "--",
                                 "--steps", "3"])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines()[-1] == (
        "error: no torch profile of 'ddp_digits' (np 2): run `xover profile --script recipes/examples/ddp_digits.py "
        "--np 2 -- --steps 3` first"), result.output


def test_a_recipe_files_name_with_a_newline_is_one_line_of_error(clean, tmp_path):
    """`error: new` then `line.toml: field 'name': ...` on a second line: the file's name was printed as it is."""
    job = tmp_path / "new\nline.toml"
    job.write_text('np = 1\nscript = "missing.py"\n')
    result = runner.invoke(app, ["plan", str(job), "--devices", "2"])
    _one_clear_line(result, f"{tmp_path}/new\\nline.toml: field 'name'")
    _nothing_written(clean)


def test_a_folder_with_a_newline_given_as_a_plan_is_one_line_of_error(clean, tmp_path):
    """`xover run $'a\nb'` (a folder) printed its name as it is, over two lines."""
    folder = tmp_path / "a\nb"
    folder.mkdir()
    _one_clear_line(runner.invoke(app, ["run", str(folder)]), f"{tmp_path}/a\\nb: not a regular file (a plan file")
    _nothing_written(clean)


def test_a_blank_database_variable_is_named_not_taken_for_a_file(clean, monkeypatch):
    """XOVER_DB='  ' was "no database at   : nothing has been run yet": a SQLite file named two spaces."""
    monkeypatch.setenv("XOVER_DB", "  ")
    _one_clear_line(runner.invoke(app, ["report", "latest"]), "the database '  ': blank; give a file or a URL")
    _one_clear_line(runner.invoke(app, ["plan", "mlp-digits", "--devices", "2"]), "the database '  ': blank")
    assert not (clean / "results").exists()


@pytest.mark.parametrize("refusal", ["lease folder", "host"])
def test_a_run_refused_before_any_job_starts_keeps_no_experiment(isolated_results, monkeypatch, refusal):
    # it stored an empty failed experiment (`report latest` showed it) and an empty results/runs/<id>/
    if refusal == "lease folder":
        (isolated_results / "afile").write_text("")
        monkeypatch.setenv("XOVER_LEASE_DIR", str(isolated_results / "afile"))
        args, said = [], "cannot open the device lease folder"
    else:
        args, said = ["-H", "nosuchhost.invalid:2"], "cannot lease the devices of nosuchhost.invalid"
    refused = runner.invoke(app, ["run", "--group", "mlp-digits", "--iterations", "2", *args])
    assert refused.exit_code == 2 and said in refused.output, refused.output
    reported = runner.invoke(app, ["report"])
    assert reported.exit_code == 2 and "holds no experiments yet" in reported.output, reported.output
    assert list((isolated_results / "results" / "runs").iterdir()) == []


def test_a_report_is_never_written_over_the_trace_or_profiles_its_simulation_was_made_from(clean, tmp_path,
                                                                                           monkeypatch):
    # `report latest --format csv --out trace.csv` replaced the trace with the report (exit 0), and --format html
    # the --profiles CSV: the experiment's own inputs, lost
    monkeypatch.setenv("XOVER_DB", str(tmp_path / "x.db"))
    monkeypatch.chdir(tmp_path)
    profiles, trace = tmp_path / "prof.csv", tmp_path / "trace.csv"
    profiles.write_text("name,devices,compute_ms,comm_ms,memory_gb\nresnet-synthetic,2,121,8,1\n")
    trace.write_text("arrival_s,gpus,duration_s,model\n0,2,100,resnet-synthetic\n")
    assert runner.invoke(app, ["simulate", "trace.csv", "--profiles", "prof.csv", "--cluster", "1x4"]).exit_code == 0
    kept = {path: path.read_text() for path in (profiles, trace)}
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")  # the inputs are known by their whole paths, not from where they were
    for target, fmt, out, said in (("latest", "csv", trace, "that is the trace of experiment"),
                                   ("latest", "html", profiles, "that is the profiles of experiment"),
                                   ("latest", "json", profiles, "that is the profiles of experiment"),
                                   ("all", "csv", trace, "that is the trace of experiment"),
                                   # FILE.csv's FILE-jobs.csv beside it
                                   ("latest", "csv", tmp_path / "prof-jobs.csv", "")):
        if not said:
            out.write_text("not a report\n")
            (tmp_path / "prof-jobs-jobs.csv").symlink_to(profiles)
            said = f"it writes {tmp_path / 'prof-jobs-jobs.csv'} too, which is the profiles of experiment"
        _one_clear_line(runner.invoke(app, ["report", target, "--format", fmt, "--out", str(out)]),
                        f"--out {out}: {said}")
    assert {path: path.read_text() for path in kept} == kept
    # what it was made from is kept in the store only: a report or --json shared elsewhere carries no home folder
    shown = runner.invoke(app, ["report", "latest", "--format", "json"])
    assert shown.exit_code == 0 and str(trace) not in shown.output and str(profiles) not in shown.output
    assert '"inputs"' not in shown.output
    # and a folder of the report's own, here, is no input (a relative path stored was refused as '.')
    assert runner.invoke(app, ["report", "latest", "--format", "csv", "--out", "."]).exit_code == 0


def test_a_report_is_never_written_over_a_module_the_script_of_a_run_imports(clean, tmp_path, monkeypatch):
    # `plan --out` kept a script's own modules (helpers.py beside train.py, a package's) from being replaced;
    # `report --out` kept the script only
    from xover.store.models import Experiment, RecipeSnapshot, Run
    from xover.store.session import open_store

    monkeypatch.setenv("XOVER_DB", str(tmp_path / "x.db"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("from . import data\n")
    (tmp_path / "pkg" / "data.py").write_text("X = 1\n")
    (tmp_path / "helpers.py").write_text("Y = 2\n")
    script = tmp_path / "train.py"
    script.write_text("import helpers\nimport pkg\nimport torch\n")
    store = open_store(str(tmp_path / "x.db"))
    with store.session() as session, session.begin():
        recipe = RecipeSnapshot(name="train", hash="h", path=str(tmp_path / "train.toml"), body={"script": str(script)})
        session.add_all([recipe, Experiment(id="20260101-000000-mods", kind="run", command="xover run",
                                            status="finished")])
        session.flush()
        session.add(Run(experiment_id="20260101-000000-mods", recipe_id=recipe.id, name="train", mode="solo",
                        hosts="localhost:1", np=1, status="finished", exit_code=0))
    store.close()
    modules = [tmp_path / "helpers.py", tmp_path / "pkg" / "__init__.py", tmp_path / "pkg" / "data.py"]
    for module in modules:
        _one_clear_line(runner.invoke(app, ["report", "latest", "--format", "json", "--out", str(module)]),
                        f"--out {module}: that is a module a script of experiment 20260101-000000-mods imports")
    assert [module.read_text() for module in modules] == ["Y = 2\n", "from . import data\n", "X = 1\n"]
    _one_clear_line(runner.invoke(app, ["report", "all", "--format", "csv", "--out", str(script)]),
                    f"--out {script}: that is a script of experiment 20260101-000000-mods")


def test_a_report_is_never_written_over_a_copy_of_a_job_file_or_script_an_earlier_run_read_first(clean, tmp_path,
                                                                                               monkeypatch):
    # a recipe's snapshot is kept once per content, under the path of the first file read: a project folder
    # copied for the next experiment (the same job file and script, byte for byte) was no file of any run, and
    # `report --out` wrote over its job file
    from xover.store.models import Experiment, RecipeSnapshot, Run
    from xover.store.session import open_store

    monkeypatch.setenv("XOVER_DB", str(tmp_path / "x.db"))
    monkeypatch.chdir(tmp_path)
    first, copy = tmp_path / "exp1", tmp_path / "exp2"
    for folder in (first, copy):
        folder.mkdir()
        (folder / "job.toml").write_text('name = "train"\nscript = "train.py"\nnp = 1\n')
        (folder / "train.py").write_text("import helpers\nimport torch\n")
        (folder / "helpers.py").write_text("Y = 2\n")
    store = open_store(str(tmp_path / "x.db"))
    with store.session() as session, session.begin():
        recipe = RecipeSnapshot(name="train", hash="h", path=str(first / "job.toml"),
                                body={"script": str(first / "train.py")})
        session.add_all([recipe, *(Experiment(id=f"20260101-00000{i}-copy", kind="run", command="xover run",
                                              status="finished") for i in (1, 2))])
        session.flush()
        for i, folder in ((1, first), (2, copy)):
            session.add(Run(experiment_id=f"20260101-00000{i}-copy", recipe_id=recipe.id, name="train",
                            mode="solo", hosts="localhost:1", np=1, status="finished", exit_code=0,
                            inputs={"job_file": str(folder / "job.toml"), "script": str(folder / "train.py")}))
    store.close()
    for out, said in ((copy / "job.toml", "a job file of experiment 20260101-000002-copy"),
                      (copy / "train.py", "a script of experiment 20260101-000002-copy"),
                      (copy / "helpers.py", "a module a script of experiment 20260101-000002-copy imports")):
        _one_clear_line(runner.invoke(app, ["report", "latest", "--format", "json", "--out", str(out)]),
                        f"--out {out}: that is {said}")
    kept = 'name = "train"\nscript = "train.py"\nnp = 1\n'
    assert (copy / "job.toml").read_text() == kept and (copy / "helpers.py").read_text() == "Y = 2\n"


def test_no_cell_of_a_report_csv_is_a_formula(clean, tmp_path, monkeypatch):
    # a trace named `=cmd|calc!A1.csv` put a live formula in the simulation's CSV (its `trace` cell)
    monkeypatch.setenv("XOVER_DB", str(tmp_path / "x.db"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.csv").write_text("name,devices,compute_ms,comm_ms,memory_gb\nresnet-synthetic,2,121,8,1\n")
    for name in ("=cmd|calc!A1.csv", "@SUM(1).csv", "+1+1.csv"):
        (tmp_path / name).write_text("arrival_s,gpus,duration_s,model\n0,2,100,resnet-synthetic\n")
        assert runner.invoke(app, ["simulate", name, "--profiles", "p.csv", "--cluster", "1x4"]).exit_code == 0
        assert runner.invoke(app, ["report", "latest", "--format", "csv", "--out", "r.csv"]).exit_code == 0
        rows = list(csv.DictReader((tmp_path / "r.csv").open()))
        assert rows and {row["trace"] for row in rows} == {"'" + name}, rows
        for path in tmp_path.glob("r*.csv"):
            for row in csv.reader(path.open()):
                assert not [cell for cell in row if cell[:1] in ("=", "+", "@")], (path, row)
                # a negative number stays a number
                assert not [cell for cell in row if cell[:1] == "-" and not re.fullmatch(r"-[\d.eE+-]+", cell)]


def test_a_plan_field_named_after_a_job_with_a_newline_is_one_line(clean, tmp_path):
    # `error: plan.json: plan field 'jobs.a b` and, on a line of its own, `c': name must be ...`
    plan = tmp_path / "plan.json"
    name = "a b\nc"
    plan.write_text(json.dumps({
        "format": "xover-plan/1", "algo": "none", "hosts": [["localhost", 1]],
        "groups": [{"jobs": [name], "devices": ["localhost:0"], "wave": 0, "predicted_period_ms": 1.0,
                    "predicted_gain": 1.0, "predicted_duration_ms": 1.0, "predicted_slowdown": {name: 1.0}}],
        "jobs": {name: {"devices": 1, "compute_ms": 1.0, "comm_ms": 1.0, "memory_gb": 0.1}},
        "unplaced": [], "predicted_aggregate_gain": 1.0, "predicted_makespan_ms": 1.0,
        "sequential_makespan_ms": 1.0}))
    result = runner.invoke(app, ["run", str(plan)])
    _one_clear_line(result, str(plan), "plan field 'jobs.a b\\nc'")


def test_a_job_wider_than_the_machine_is_said_by_its_width(clean):
    """--np 999 said 'placed on device 998 of this machine' (a probe, 2026-12-06): how many it needs, now."""
    from xover.devices import local_device_count

    kind, available = local_device_count()
    _one_clear_line(runner.invoke(app, ["run", "--group", "mlp-digits", "--np", "999", "--iterations", "2"]),
                    f"job 'mlp-digits' needs 999 devices of this machine, which has {available} {kind.upper()} devices",
                    "lower np (--np)")


def test_a_store_xover_may_not_write_says_what_to_do(clean, tmp_path):
    """A read-only store under `plan` was "attempt to write a readonly database" and nothing more (a probe
    session, 2026-12-06); `report` reads such a store as it is."""
    trace = tmp_path / "t.csv"
    trace.write_text("name,devices,compute_ms,comm_ms,memory_gb\na,2,100,10,1\nb,2,10,100,1\n")
    store = tmp_path / "s.db"
    assert runner.invoke(app, ["--db", str(store), "plan", "--profiles", str(trace), "--devices", "2", "--out",
                               str(tmp_path / "p.json")]).exit_code == 0
    read_only = f"sqlite:///file:{store}?mode=ro&uri=true"
    _one_clear_line(runner.invoke(app, ["--db", read_only, "plan", "--profiles", str(trace), "--devices", "2",
                                        "--out", str(tmp_path / "q.json")]),
                    "attempt to write a readonly database", "copy it into a folder you can write")
    _one_clear_line(runner.invoke(app, ["--db", read_only, "report", "all"]), "holds no experiments yet")  # read


def test_a_store_that_lost_its_revision_table_is_said_to_and_left_as_it_was(clean, tmp_path):
    """xover's tables without alembic_version were taken for a store from before migrations, and the first
    migration's column failed: "cannot open the database ...: duplicate column name: owner_host", no advice (a
    probe session, 2026-12-06)."""
    trace = tmp_path / "t.csv"
    trace.write_text("name,devices,compute_ms,comm_ms,memory_gb\na,2,100,10,1\nb,2,10,100,1\n")
    store = tmp_path / "s.db"
    assert runner.invoke(app, ["--db", str(store), "plan", "--profiles", str(trace), "--devices", "2", "--out",
                               str(tmp_path / "p.json")]).exit_code == 0
    with sqlite3.connect(store) as connection:
        connection.execute("drop table alembic_version")
    _one_clear_line(runner.invoke(app, ["--db", str(store), "report", "all"]),
                    "holds xover's tables but no record of their schema revision", "It is left as it was")
    with sqlite3.connect(store) as connection:
        names = {row[0] for row in connection.execute("select name from sqlite_master where type = 'table'")}
        assert "alembic_version" not in names and connection.execute("select count(*) from plans").fetchone()[0] == 1
