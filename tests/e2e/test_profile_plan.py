"""profile -> plan -> run through the real CLI and horovodrun (errors on the way that launch nothing:
tests/integration/test_plan_cli.py)."""

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from xover.plan.model import MIN_INTERFERENCE
from xover.run.traits import traits_of
from xover.turns.policies import LINK_BAND_PRIORITIES, link_bands

XOVER = [sys.executable, "-m", "xover"]
ROOT = Path(__file__).resolve().parents[2]


def _xover(*args, timeout=600):
    return subprocess.run([*XOVER, *args], capture_output=True, text=True, timeout=timeout)


def test_profile_plan_run(isolated_results, tmp_path):
    first = _xover("profile", "mlp-digits", "resnet-digits", "--iterations", "12", "--warmup", "3", "--json")
    assert first.returncode == 0, first.stderr[-3000:]
    profiles = {p["name"]: p for p in json.loads(first.stdout)}
    for profile in profiles.values():
        assert not profile["reused"]
        assert profile["compute_ms"] > 0 and profile["iteration_ms"] > 0 and profile["samples_per_s"] > 0
        assert profile["memory_gb"] > 0 and profile["gradient_mb"] > 0
        assert 0 < profile["startup_ms"] < 120_000  # processes, rendezvous, imports: seconds
        assert 0 < profile["compute_fraction"] < 1
        # then measured once more next to the reference partner, under crossover
        assert profile["corun_partner"] == "mlp-balanced"
        assert profile["corun_device_ms"] > 0 and profile["interference"] >= MIN_INTERFERENCE
        assert 0 < profile["corun_partner_link_share"] < 1  # the partner's l / T, which scales part of it
    # resnet-digits computes about four times as long per iteration as mlp-digits; their compute fractions
    # (12 iterations each) swap places when the other pytest worker loads the cores
    assert profiles["resnet-digits"]["compute_ms"] > profiles["mlp-digits"]["compute_ms"]

    # the reference partner was stopped when the job next to it ended (it was given iterations to spare)
    with sqlite3.connect(isolated_results / "xover.db") as db:
        corun = db.execute("SELECT p.status, p.iterations_planned, COUNT(m.id), "
                           "(julianday(p.ended_at) - julianday(j.ended_at)) * 86400 FROM runs p "
                           "JOIN runs j ON j.experiment_id = p.experiment_id AND j.id = p.id - 1 "
                           "LEFT JOIN iteration_metrics m ON m.run_id = p.id "
                           "WHERE p.name = 'mlp-balanced#partner' GROUP BY p.id").fetchall()
    assert len(corun) == 2, corun
    for status, planned, done, after_job_s in corun:
        assert (status == "stopped" and done < planned) or (status == "finished" and done == planned), corun
        assert after_job_s < 20, corun

    again = _xover("profile", "mlp-digits", "--iterations", "12", "--warmup", "3", "--json")
    assert json.loads(again.stdout)[0]["reused"] is True

    plan_path = tmp_path / "plan.json"
    planned = _xover("plan", "mlp-digits", "resnet-digits", "--devices", "2", "--out", str(plan_path), "--json")
    assert planned.returncode == 0, planned.stderr
    plan = json.loads(planned.stdout)
    assert {"groups", "unplaced", "predicted_aggregate_gain"} <= set(plan)
    for group in plan["groups"]:
        assert {"jobs", "devices", "predicted_gain"} <= set(group)
    assert json.loads(plan_path.read_text())["format"] == "xover-plan/1"
    # what its profiles were taken under, which a run of it follows unless told otherwise
    assert {k: json.loads(plan_path.read_text())[k] for k in ("link", "engine", "device_kind")} == {
        "link": "host", "engine": "horovod", "device_kind": "cpu"}  # the devices Slurm is asked for
    # the profiles were taken under horovod: a plan for torch needs torch's own
    other = _xover("plan", "mlp-digits", "resnet-digits", "--devices", "2", "--engine", "torch")
    assert other.returncode == 2 and "no torch profile" in other.stderr and "--engine torch" in other.stderr, other.stderr

    ran = _xover("run", str(plan_path), "--mode", "crossover", "--iterations", "8", "--json")
    assert ran.returncode == 0, ran.stderr[-3000:]
    jobs = json.loads(ran.stdout)["jobs"]
    assert sorted(j["name"] for j in jobs) == ["mlp-digits", "resnet-digits"]
    assert all(j["status"] == "finished" for j in jobs)
    # 12 profiled iterations are noisy: now and then the plan predicts no gain and runs each job alone
    # (1 plan in 9 measured), so what a run does follows the plan it was given
    grouped = {name for group in plan["groups"] if len(group["jobs"]) > 1 for name in group["jobs"]}
    # the link's order follows the profiles (the job that needs it least first), and every rank of a
    # job given a band marked its sockets with it
    traits = {j["slot"]: traits_of(profiles[j["name"]]["data_ms"] + profiles[j["name"]]["compute_ms"],
                                   profiles[j["name"]]["comm_ms"], None, profiles[j["name"]]["link_ms"])
              for j in jobs if j["name"] in grouped}
    bands = link_bands(traits)
    for job in jobs:
        assert job["link_priority"] == (LINK_BAND_PRIORITIES[bands[job["slot"]]] if job["slot"] in bands else None)
        # crossover on a CPU: no preempting the partner's compute; a job alone has no partner
        assert job["comm_threads"] == ("batch" if job["name"] in grouped else "normal"), plan["groups"]
    # XOVER_LINK_BANDS=off: the link stays shared, no socket marked; XOVER_COMM_THREADS=normal: the
    # default scheduling policy for every thread
    # the plan's pick for each group, run without --mode: a group the plan shares without turns runs
    # concurrent (a plan of one group of both jobs, its sharing set to concurrent whatever was predicted)
    both = json.loads(plan_path.read_text())
    [first_group] = [dict(both["groups"][0], jobs=["mlp-digits", "resnet-digits"], wave=0, sharing="concurrent",
                          predicted_slowdown={"mlp-digits": 1.5, "resnet-digits": 1.5})]
    both.update(groups=[first_group], unplaced=[])
    concurrent_path = tmp_path / "plan-concurrent.json"
    concurrent_path.write_text(json.dumps(both))
    as_planned = _xover("run", str(concurrent_path), "--iterations", "4", "--json")
    assert as_planned.returncode == 0, as_planned.stderr[-3000:]
    shown = json.loads(as_planned.stdout)
    assert shown["modes"] == ["planned"] and [g.get("sharing") for g in shown["groups"]] in ([], ["concurrent"])
    # under report --json's name too
    assert [g.get("planned_sharing") for g in shown["groups"]] in ([], ["concurrent"])
    assert {(j["mode"], j["policy"], j["comm_threads"]) for j in shown["jobs"]} == {("concurrent", None, "normal")}
    # (a plan made for round robin, run without --policy: it runs under the policy it predicted for)
    strict_path = tmp_path / "plan-round-robin.json"
    strict = _xover("plan", "mlp-digits", "resnet-digits", "--devices", "2", "--policy", "round-robin",
                    "--out", str(strict_path), "--json")
    assert strict.returncode == 0, strict.stderr
    strict_grouped = {name for group in json.loads(strict.stdout)["groups"] if len(group["jobs"]) > 1
                      for name in group["jobs"]}
    # ... and a plan that says where its profiles were taken (another link, another engine) is run there
    # unless told otherwise: one run of that plan checks both
    elsewhere = json.loads(strict_path.read_text()) | {"link": "200mbit", "engine": "torch"}
    elsewhere_path = tmp_path / "plan-elsewhere.json"
    elsewhere_path.write_text(json.dumps(elsewhere))
    shared = subprocess.run([*XOVER, "run", str(elsewhere_path), "--mode", "crossover", "--iterations", "4", "--json"],
                            capture_output=True, text=True, timeout=600,
                            env={**os.environ, "XOVER_LINK_BANDS": "off", "XOVER_COMM_THREADS": "normal"})
    followed = shared
    assert shared.returncode == 0, shared.stderr[-3000:]
    assert json.loads(followed.stdout)["link"] == "200mbit" and "link 200mbit, as the plan's" in followed.stderr
    assert {j["engine"] for j in json.loads(followed.stdout)["jobs"]} == {"torch"}
    assert [(j["link_priority"], j["comm_threads"]) for j in json.loads(shared.stdout)["jobs"]] == [(None, "normal")] * 2
    assert all(j["policy"] == "round-robin" for j in json.loads(shared.stdout)["jobs"] if j["name"] in strict_grouped)
    assert all(j["policy"] == "work-conserving" for j in jobs if j["name"] in grouped)

    # a comparison (alone, then crossover); bench/interference_fit.py then predicts it again from the
    # profiles taken before it, with each traffic part of the interference (and the link's leak given)
    # (--seconds: each job as long as the other; of 8 iterations each, mlp-digits' steady ones ran out around
    # resnet-digits' first on a loaded machine, the jobs never met past warm-up and there was nothing to fit)
    compared = _xover("run", "--group", "mlp-digits", "resnet-digits", "--mode", "sequential,crossover",
                      "--policy", "work-conserving", "--seconds", "2", "--json")
    assert compared.returncode == 0, compared.stderr[-3000:]
    # a group given on the command line is formed whatever the profiles predict
    threads = {(j["mode"], j["comm_threads"]) for j in json.loads(compared.stdout)["jobs"]}
    assert threads == {("sequential", "normal"), ("crossover", "batch")}, threads
    fit = subprocess.run([sys.executable, "bench/interference_fit.py", "--rows", "--link-leak", "0.2"],
                         capture_output=True, text=True, timeout=120)
    assert fit.returncode == 0, fit.stderr
    assert "mlp-digits + resnet-digits" in fit.stdout and "1 group comparisons, link leak 0.2" in fit.stdout
    assert fit.stdout.count("within 5% on") == 5


def test_a_renamed_recipe_reuses_its_profile_and_is_planned_from_it(isolated_results, tmp_path):
    """A job is what it computes: a recipe copied under another name (a job file renamed) finds the profile taken
    under the first name; before, `xover plan` of the copy said "no horovod profile of 'digits-copy'"."""
    first = _xover("profile", "mlp-digits", "--iterations", "8", "--warmup", "2", "--no-corun", "--no-stretch",
                   "--json")
    assert first.returncode == 0, first.stderr[-3000:]
    copy = tmp_path / "digits-copy.toml"
    copy.write_text((ROOT / "recipes" / "mlp-digits.toml").read_text()
                    .replace('name = "mlp-digits"', 'name = "digits-copy"')
                    .replace("MLP 64-512-512-10 on scikit-learn digits", "a copy of mlp-digits"))
    copied = _xover("profile", str(copy), "--iterations", "8", "--warmup", "2", "--no-corun", "--no-stretch", "--json")
    assert copied.returncode == 0, copied.stderr[-3000:]
    [profile] = json.loads(copied.stdout)
    assert profile["reused"] is True and profile["name"] == "digits-copy"
    assert profile["profile_id"] == json.loads(first.stdout)[0]["profile_id"]
    planned = _xover("plan", str(copy), "--devices", "2", "--out", str(tmp_path / "plan.json"), "--json")
    assert planned.returncode == 0, planned.stderr
    assert json.loads(planned.stdout)["groups"][0]["jobs"] == ["digits-copy"]


def test_a_profile_that_waited_for_its_devices_measures_only_what_is_still_missing(isolated_results, tmp_path,
                                                                                   monkeypatch):
    """A second `profile --wait` of a job measured it again once the devices were free, though the first had just
    stored its profile: two profiles, the device time paid twice. It looks again once it has the devices."""
    from xover.run.leases import DeviceLeases

    monkeypatch.setenv("XOVER_LEASE_DIR", str(tmp_path / "leases"))
    held = DeviceLeases("a test holding the devices")
    assert held.try_acquire([("localhost", 0), ("localhost", 1)]) == {}
    waiting = subprocess.Popen([*XOVER, "profile", "mlp-digits", "--iterations", "12", "--warmup", "3", "--no-corun",
                                "--wait", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "results" / "runs").exists() or not any((tmp_path / "results" / "runs").iterdir()):
            assert waiting.poll() is None and time.monotonic() < deadline, waiting.communicate()
            time.sleep(0.2)
        # meanwhile another xover, leasing elsewhere, profiles the same job
        other = subprocess.run([*XOVER, "profile", "mlp-digits", "--iterations", "12", "--warmup", "3", "--no-corun",
                                "--json"], capture_output=True, text=True, timeout=300,
                               env={**os.environ, "XOVER_LEASE_DIR": str(tmp_path / "other-leases")})
        assert other.returncode == 0, other.stderr[-2000:]
        assert json.loads(other.stdout)[0]["measured"] == ["alone"]
    finally:
        held.release()
    out, err = waiting.communicate(timeout=300)
    assert waiting.returncode == 0, err[-2000:]
    [profile] = json.loads(out)
    assert profile["reused"] is True and profile["measured"] == [], profile
    with sqlite3.connect(isolated_results / "xover.db") as db:
        assert db.execute("SELECT COUNT(*) FROM profiles").fetchone() == (1,)
        assert db.execute("SELECT kind FROM experiments").fetchall() == [("profile",)]  # the waiting one kept none
    # a profile that lacks only its interference measures that, and says so (`reused` was false, as if remeasured);
    # --force measures the job named, not the reference partner stored already
    corun = _xover("profile", "mlp-digits", "--iterations", "12", "--warmup", "3", "--json")
    assert corun.returncode == 0, corun.stderr[-2000:]
    assert json.loads(corun.stdout)[0]["measured"] == ["interference"]
    forced = _xover("profile", "mlp-digits", "--iterations", "12", "--warmup", "3", "--force", "--json")
    assert forced.returncode == 0, forced.stderr[-2000:]
    assert json.loads(forced.stdout)[0]["measured"] == ["alone", "interference"]
    with sqlite3.connect(isolated_results / "xover.db") as db:
        partners = db.execute("SELECT COUNT(*) FROM profiles WHERE name = 'mlp-balanced'").fetchone()
    assert partners == (1,)  # measured once, for the first co-run; --force left it
