"""xover/settings.py: every XOVER_* setting read and checked in one place, and the launcher's variables
named once."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

from xover import settings as settings_module
from xover.errors import XoverError
from xover.settings import LAUNCHER_VARIABLES, Settings, settings

PACKAGE = Path(__file__).resolve().parents[2] / "xover"
NAME = re.compile(r"XOVER_[A-Z][A-Z0-9_]*")
# Modules that still spell a variable themselves, each with its reason (none left).
SPELT_ELSEWHERE: dict[str, set[str]] = {}


def test_defaults_when_nothing_is_set():
    assert Settings.from_environ({}) == Settings()
    current = Settings()
    assert (current.db, current.results, current.lease_dir) == (None, Path("results"), None)
    assert (current.cpu_only, current.devices_per_gpu, current.torch_backend, current.deterministic) == (False, 1, None, False)
    assert (current.threads_per_rank, current.pin_cores) == (1, True)
    assert (current.link_bands, current.comm_threads, current.wait) == (True, "batch", "expect")
    assert (current.turn_lease, current.turn_server_nice) == (None, None)
    assert (current.metrics_address, current.metrics_credentials) == ("localhost", None)  # loopback only


def test_the_metrics_address_is_an_address_as_ipaddress_writes_it():
    for given, read in (("LOCALHOST", "localhost"), (" 0.0.0.0 ", "0.0.0.0"), ("::", "::"), ("[::1]", "::1"),
                        ("10.0.0.7", "10.0.0.7"), ("fe80:0::1", "fe80::1")):
        assert Settings.from_environ({"XOVER_METRICS_ADDRESS": given}).metrics_address == read


def test_values_are_read_typed():
    read = Settings.from_environ({
        "XOVER_DB": "postgresql+psycopg://u@h/db", "XOVER_RESULTS": "/tmp/r", "XOVER_LEASE_DIR": "/tmp/l",
        "XOVER_CPU_ONLY": "1", "XOVER_DEVICES_PER_GPU": " 2 ", "XOVER_TORCH_BACKEND": " GLOO ",
        "XOVER_DETERMINISTIC": "1", "XOVER_THREADS_PER_RANK": "4", "XOVER_PIN_CORES": "0",
        "XOVER_LINK_BANDS": " OFF ", "XOVER_COMM_THREADS": "always", "XOVER_WAIT": "poll",
        "XOVER_TURN_LEASE": "floor=2, factor=5,initial=4", "XOVER_TURN_SERVER_NICE": " -5 ",
        "XOVER_TURN_METRICS_PORTS": " 9470-9479 "})
    assert read == Settings(db="postgresql+psycopg://u@h/db", results=Path("/tmp/r"), lease_dir="/tmp/l", cpu_only=True,
                            devices_per_gpu=2, torch_backend="gloo", deterministic=True, threads_per_rank=4,
                            pin_cores=False, link_bands=False, comm_threads="always", wait="poll",
                            turn_lease={"floor": 2.0, "factor": 5.0, "initial": 4.0}, turn_server_nice=-5,
                            turn_metrics_ports=(9470, 9479))
    assert Settings.from_environ({"XOVER_TURN_METRICS_PORTS": "9470"}).turn_metrics_ports == (9470, 9470)


def test_set_but_empty_is_unset():
    # XOVER_RESULTS="" too: it was the current folder, where runs/ and plan.json then went
    empty = {name: "" for name in Settings.variables()}
    assert Settings.from_environ(empty) == Settings()


@pytest.mark.parametrize("variable, value", [
    ("XOVER_DEVICES_PER_GPU", "0"), ("XOVER_DEVICES_PER_GPU", "65"), ("XOVER_THREADS_PER_RANK", "0"),
    ("XOVER_THREADS_PER_RANK", "two"), ("XOVER_PIN_CORES", "yes"), ("XOVER_LINK_BANDS", "maybe"),
    ("XOVER_COMM_THREADS", "fifo"), ("XOVER_WAIT", "spin"), ("XOVER_TURN_LEASE", "floor=-1"),
    ("XOVER_TURN_LEASE", "ceiling=3"), ("XOVER_TURN_LEASE", "floor=86401"), ("XOVER_TURN_SERVER_NICE", "-21"),
    ("XOVER_TURN_SERVER_NICE", "high"), ("XOVER_TURN_METRICS_PORTS", "9479-9470"),
    ("XOVER_TURN_METRICS_PORTS", "0-10"), ("XOVER_TURN_METRICS_PORTS", "9470-70000"),
    ("XOVER_TURN_METRICS_PORTS", "9470,9471"), ("XOVER_METRICS_ADDRESS", "login1"),
    ("XOVER_METRICS_ADDRESS", "10.0.0.300"), ("XOVER_METRICS_CREDENTIALS", "relative/folder"),
    # more digits than int() converts: refused as any bad number, not Python's "Exceeds the limit" traceback
    ("XOVER_THREADS_PER_RANK", "9" * 5000), ("XOVER_METRICS_PORT", "9" * 5000),
    ("XOVER_ADAPTIVE", "iterations=" + "9" * 5000), ("XOVER_TURN_METRICS_PORTS", "9470-" + "9" * 5000)])
def test_a_bad_value_is_one_line_naming_its_variable(variable, value):
    with pytest.raises(XoverError) as refused:
        Settings.from_environ({variable: value})
    message = str(refused.value)
    assert message.startswith(f"{variable}=") and "\n" not in message, message
    # a value of thousands of characters is cut, its length said (it was repeated whole, twice for XOVER_ADAPTIVE)
    assert len(message) < 400, message[:400]
    if len(value) > 60:
        assert f"({len(value)} characters)" in message, message


def test_the_torch_backend_is_checked_where_a_torch_job_uses_it():
    # only torch jobs read it, and whether nccl can work depends on the machine (devices.torch_backend)
    assert Settings.from_environ({"XOVER_TORCH_BACKEND": "mpi"}).torch_backend == "mpi"


def test_settings_follow_the_environment(monkeypatch):
    monkeypatch.delenv("XOVER_WAIT", raising=False)
    assert settings().wait == "expect"
    assert settings() is settings()  # read once while nothing changes
    monkeypatch.setenv("XOVER_WAIT", "poll")
    assert settings().wait == "poll"
    monkeypatch.setenv("XOVER_WAIT", "spin")
    with pytest.raises(XoverError, match="XOVER_WAIT='spin'"):
        settings()
    monkeypatch.delenv("XOVER_WAIT")
    assert settings().wait == "expect"


def test_settings_are_frozen():
    with pytest.raises(AttributeError):
        Settings().wait = "poll"  # type: ignore[misc]


def _spelt_names(path: Path) -> set[str]:
    """XOVER_* names a module spells as a whole string or a keyword (messages and docstrings aside)."""
    tree = ast.parse(path.read_text(), str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and NAME.fullmatch(node.value):
            found.add(node.value)
        elif isinstance(node, ast.keyword) and node.arg and NAME.fullmatch(node.arg):
            found.add(node.arg)
    return found


def test_every_variable_is_named_once_in_settings():
    named = set(Settings.variables()) | set(LAUNCHER_VARIABLES)
    assert len(named) == len(Settings.variables()) + len(LAUNCHER_VARIABLES)
    assert _spelt_names(Path(settings_module.__file__)) == named
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative == "settings.py":
            continue
        assert _spelt_names(path) <= SPELT_ELSEWHERE.get(relative, set()), relative


def test_no_module_but_settings_reads_a_setting_from_the_environment():
    """Launcher variables are read where they are used; settings only through `settings()`."""
    setting_names = set(Settings.variables())
    for path in PACKAGE.rglob("*.py"):
        if path.relative_to(PACKAGE).as_posix() in {"settings.py", *SPELT_ELSEWHERE}:
            continue
        text = path.read_text()
        for name in re.findall(r"environ(?:\.get\(|\[)\s*([A-Z_]+_VARIABLE)", text):
            assert getattr(settings_module, name, None) not in setting_names, (path, name)


def test_turn_heartbeat_is_checked_and_reaches_the_turn_servers_command(monkeypatch):
    from xover.errors import XoverError
    from xover.turns.service import server_arguments

    assert Settings.from_environ({"XOVER_TURN_HEARTBEAT": "0.01"}).turn_heartbeat == 0.01
    assert Settings.from_environ({}).turn_heartbeat is None
    for bad in ("0", "-1", "61", "nan", "x"):
        with pytest.raises(XoverError):
            Settings.from_environ({"XOVER_TURN_HEARTBEAT": bad})
    monkeypatch.setenv("XOVER_TURN_HEARTBEAT", "0.25")
    assert server_arguments("/s", {0: [0, 1]}, "work-conserving", {})[-2:] == ["--heartbeat", "0.25"]


def test_turn_send_buffer_is_checked_and_reaches_the_turn_servers_command(monkeypatch):
    from xover.errors import XoverError
    from xover.turns.service import server_arguments

    assert Settings.from_environ({"XOVER_TURN_SEND_BUFFER": "4096"}).turn_send_buffer == 4096
    assert Settings.from_environ({}).turn_send_buffer is None
    for bad in ("0", "-1", "1.5", str((1 << 30) + 1), "x"):
        with pytest.raises(XoverError):
            Settings.from_environ({"XOVER_TURN_SEND_BUFFER": bad})
    monkeypatch.setenv("XOVER_TURN_SEND_BUFFER", "1")
    assert server_arguments("/s", {0: [0, 1]}, "work-conserving", {})[-2:] == ["--send-buffer", "1"]


def test_the_tuning_names_the_settings_that_change_sharing_set_unlike_their_defaults():
    """What a sharing measurement was taken under (plan/measured.py): '' under the defaults, and a setting
    written as its default, the store or the results folder change nothing."""
    assert Settings.from_environ({}).tuning() == ""
    assert Settings.from_environ({"XOVER_COMM_THREADS": "batch", "XOVER_LINK_BANDS": "on", "XOVER_DB": "x.db",
                                  "XOVER_RESULTS": "/tmp/r", "XOVER_METRICS_PORT": "9300"}).tuning() == ""
    tuned = Settings.from_environ({"XOVER_ADAPTIVE": "window=2,start=free", "XOVER_COMM_THREADS": "always",
                                   "XOVER_PIN_CORES": "0", "XOVER_WAIT": "poll"})
    assert tuned.tuning() == ("XOVER_PIN_CORES=off XOVER_COMM_THREADS=always XOVER_WAIT=poll "
                              "XOVER_ADAPTIVE=start=free,window=2")
    # the same settings in another order: one tuning
    again = Settings.from_environ({"XOVER_WAIT": "poll", "XOVER_PIN_CORES": "0", "XOVER_COMM_THREADS": "always",
                                   "XOVER_ADAPTIVE": "start=free,window=2"})
    assert again.tuning() == tuned.tuning()


@pytest.mark.parametrize("variable", ["XOVER_CPU_ONLY", "XOVER_DETERMINISTIC"])
@pytest.mark.parametrize("value", ["yes", "true", "on", "2"])
def test_a_switch_set_to_anything_but_1_or_0_is_refused_not_read_as_off(variable, value):
    """XOVER_CPU_ONLY=yes was read as off: a user asking for CPU-only or deterministic runs got neither."""
    with pytest.raises(XoverError, match=rf"{variable}='{value}': expected 1 \(on\) or 0 \(off\)"):
        Settings.from_environ({variable: value})
    assert getattr(Settings.from_environ({variable: "1"}), variable.removeprefix("XOVER_").lower()) is True
    assert getattr(Settings.from_environ({variable: "0"}), variable.removeprefix("XOVER_").lower()) is False


@pytest.mark.parametrize("variable", ["XOVER_METRIC_SINKS", "XOVER_METRICS_ADDRESS", "XOVER_TURN_HEARTBEAT",
                                      "XOVER_ADAPTIVE", "XOVER_TURN_LEASE", "XOVER_COMM_THREADS"])
def test_a_password_in_a_settings_value_is_masked_in_its_error(variable):
    # XOVER_METRIC_SINKS='http://u:s3cret@host/push' was repeated whole, twice, by doctor and by every run
    with pytest.raises(XoverError) as refused:
        Settings.from_environ({variable: "http://u:s3cret@127.0.0.1:1/push?token=t0ken"})
    said = str(refused.value)
    assert "s3cret" not in said and "t0ken" not in said and said.startswith(f"{variable}="), said
    assert "***" in said


@pytest.mark.parametrize("variable", ["XOVER_RESULTS", "XOVER_LEASE_DIR"])
def test_a_blank_folder_setting_is_refused_not_a_folder_named_blank(variable):
    # XOVER_RESULTS=' ' wrote to a folder named ' ' in the current one; set to nothing it is the default
    with pytest.raises(XoverError, match=f"{variable}=' ': blank"):
        Settings.from_environ({variable: " "})
    assert Settings.from_environ({variable: ""}) == Settings.from_environ({})


def test_a_part_of_a_value_cut_at_a_comma_shows_no_half_of_its_password():
    # XOVER_METRIC_SINKS=https://bot:pa,ss@h/x: the part before the ',' has no '@' and was shown whole
    with pytest.raises(XoverError) as refused:
        Settings.from_environ({"XOVER_METRIC_SINKS": "https://bot:pa,ss@h/x"})
    assert "pa" not in str(refused.value).replace("part", ""), str(refused.value)


def test_doctor_fails_the_settings_on_a_torch_backend_a_run_refuses(monkeypatch):
    """`XOVER_TORCH_BACKEND=mpi xover doctor` said "settings ok: XOVER_TORCH_BACKEND read", and every torch job
    then refused it (a probe session, 2026-12-06); so did nccl on a machine without GPUs."""
    from xover import doctor

    for name in [name for name in os.environ if name.startswith("XOVER_")]:
        monkeypatch.delenv(name)
    monkeypatch.setattr(doctor, "local_device_count", lambda: ("cpu", 2))
    monkeypatch.setenv("XOVER_TORCH_BACKEND", "mpi")
    check = doctor._settings()
    assert not check.ok and check.detail == "XOVER_TORCH_BACKEND='mpi': choose nccl (GPUs) or gloo", check
    monkeypatch.setenv("XOVER_TORCH_BACKEND", "nccl")
    assert "needs NVIDIA GPUs" in doctor._settings().detail
    monkeypatch.setenv("XOVER_TORCH_BACKEND", "gloo")
    assert doctor._settings().ok
    monkeypatch.setattr(doctor, "local_device_count", lambda: ("gpu", 1))
    monkeypatch.setenv("XOVER_TORCH_BACKEND", "NCCL")
    assert doctor._settings().ok


def test_a_torch_backend_refused_is_shown_as_given_with_its_password_masked(monkeypatch):
    """`XOVER_TORCH_BACKEND='gloo?token=s3cr3t-X55'` was refused as `XOVER_TORCH_BACKEND=gloo?token=s3cr3t-x55`:
    its token shown, and lowercased, where every other XOVER_* refusal masks it (a probe session, 2026-12-07)."""
    from xover import doctor
    from xover.devices import torch_backend

    with pytest.raises(XoverError) as refused:
        torch_backend(False, {"XOVER_TORCH_BACKEND": "gloo?token=s3cr3t-X55"})
    assert str(refused.value) == "XOVER_TORCH_BACKEND='gloo?token=***': choose nccl (GPUs) or gloo"
    with pytest.raises(XoverError, match=r"^XOVER_TORCH_BACKEND='MPI': choose"):  # as given, not lowercased
        torch_backend(False, {"XOVER_TORCH_BACKEND": "MPI"})
    for name in [name for name in os.environ if name.startswith("XOVER_")]:
        monkeypatch.delenv(name)
    monkeypatch.setattr(doctor, "local_device_count", lambda: ("cpu", 2))
    monkeypatch.setenv("XOVER_TORCH_BACKEND", "Gloo?token=s3cr3t-X55")
    check = doctor._settings()
    assert not check.ok and "XOVER_TORCH_BACKEND='Gloo?token=***'" in check.detail, check
    assert "s3cr3t" not in str(check), check


@pytest.mark.parametrize(("environ", "threads"), [
    ({}, 1),  # neither: one thread per CPU rank (torchrun's own default at several ranks)
    ({"OMP_NUM_THREADS": "2"}, 2),  # the user's (or a job file's): what a rank has under plain torchrun or horovodrun
    ({"OMP_NUM_THREADS": " 4,2 "}, 4),  # OpenMP's nested levels: the first is torch's
    ({"OMP_NUM_THREADS": "0"}, 1),  # one OpenMP refuses: torch's own default in a rank, 1 in the key
    ({"OMP_NUM_THREADS": "many"}, 1),
    ({"XOVER_THREADS_PER_RANK": "3"}, 3),
    ({"XOVER_THREADS_PER_RANK": "3", "OMP_NUM_THREADS": "2"}, 3),  # asked of xover itself: it wins
    ({"XOVER_THREADS_PER_RANK": " ", "OMP_NUM_THREADS": "2"}, 2),  # set but empty is unset
])
def test_a_ranks_threads_are_omp_num_threads_unless_xover_threads_per_rank_is_given(environ, threads):
    """Before: XOVER_THREADS_PER_RANK's default 1 overrode a user's OMP_NUM_THREADS=2 in every rank, and the losses
    of a CPU job differed from plain torchrun's in the last bits (a sum split over 2 threads, or not)."""
    read = Settings.from_environ(environ)
    assert read.threads_per_rank == threads
    # the profiles' key: a job at 2 threads is not the job profiled at 1
    assert read.tuning(settings_module.ALONE_FIELDS) == ("" if threads == 1 else f"XOVER_THREADS_PER_RANK={threads}")
    assert settings_module.threads_per_rank_given(environ) == bool(environ.get("XOVER_THREADS_PER_RANK", "").strip())


def test_omp_num_threads_changed_is_read_again(monkeypatch):
    monkeypatch.delenv("XOVER_THREADS_PER_RANK", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert settings().threads_per_rank == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert settings().threads_per_rank == 2
