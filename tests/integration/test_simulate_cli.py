"""`xover simulate` then `xover report` of it, through the CLI: a golden trace's figures stored and reported in
every format, and bad input refused with one line (exit 2)."""

import contextlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from xover.cli import app

ASSETS = Path(__file__).resolve().parents[1] / "assets" / "replay"
RUNNER = CliRunner()


def xover(*args: str):
    return RUNNER.invoke(app, list(args))


def test_simulate_a_golden_trace_then_report_it(isolated_results):
    result = xover(
        "simulate", str(ASSETS / "fifo_srtf.csv"), "--profiles", str(ASSETS / "profiles.csv"),
        "--cluster", "1x2", "--policy", "fifo,srtf,tiresias,xover", "--json",
    )
    assert result.exit_code == 0, result.output
    stored = json.loads(result.stdout)
    figures = {replay["policy"]: replay for replay in stored["replays"]}
    # the timelines of tests/unit/test_replay.py: FIFO 100, 140, 110; SRTF 150, 50, 30
    assert figures["fifo"]["avg_jct_s"] == pytest.approx(350 / 3)
    assert figures["srtf"]["avg_jct_s"] == pytest.approx(230 / 3)
    assert figures["fifo"]["makespan_s"] == 150 and stored["devices"] == 2

    table = xover("report", stored["experiment"])
    assert table.exit_code == 0, table.output
    assert "simulation" in table.output and "srtf" in table.output and "tiresias" in table.output

    reported = xover("report", "latest", "--format", "json")
    assert reported.exit_code == 0, reported.output
    body = json.loads(reported.stdout)
    assert [replay["policy"] for replay in body["replays"]] == ["fifo", "srtf", "tiresias", "xover"]
    srtf = body["replays"][1]
    assert srtf["avg_jct_s"] == pytest.approx(230 / 3)
    assert srtf["jct_cdf"][-1] == {"jct_s": 150.0, "share": 1.0}
    assert set(body["pictures"]) == {"jct_cdf", "utilisation"}
    # `utilisation` is one figure, as in the table and `simulate --json`; the time series is beside it
    for policy, replay in zip(["fifo", "srtf", "tiresias", "xover"], body["replays"], strict=True):
        assert replay["utilisation"] == pytest.approx(figures[policy]["utilisation"]), policy
    assert srtf["utilisation_series"][0]["policy"] == "srtf" and set(srtf["utilisation_series"][0]) == {
        "policy", "start_s", "end_s", "busy", "grouped", "waiting", "running"}

    html = isolated_results / "report.html"
    assert xover("report", "latest", "--format", "html", "--out", str(html)).exit_code == 0
    page = html.read_text()
    assert "Policies side by side" in page and page.count("data:image/png;base64") == 2

    folder = isolated_results / "csv"
    assert xover("report", "latest", "--format", "csv", "--out", str(folder)).exit_code == 0
    jobs = (folder / "jobs.csv").read_text().splitlines()
    assert jobs[0].startswith("policy,name,kind,gpus") and len(jobs) == 1 + 4 * 3
    assert (folder / "simulation.csv").read_text().count("\n") == 5

    listed = xover("report", "all")
    assert listed.exit_code == 0 and "simulate" in listed.output
    # the jobs it replayed (the trace's three), not 0: a simulation has no runs
    [row] = json.loads(xover("report", "all", "--format", "json").stdout)["experiments"]
    assert (row["kind"], row["jobs"], row["runs"]) == ("simulate", 3, 0)
    [line] = [line for line in listed.output.splitlines() if stored["experiment"] in line]
    assert line.split("│")[5].strip() == "3", line
    refused = xover("report", "latest", "--format", "mlflow", "--tracking-uri", "sqlite:///nowhere.db")
    assert refused.exit_code == 2 and "is a simulation" in refused.output


def test_simulate_muri_trace_with_muris_semantics(isolated_results):
    result = xover(
        "simulate", str(ASSETS / "muri_two.csv"), "--cluster", "1x1", "--semantics", "muri", "--model",
        "interleave", "--policy", "srtf", "--json",
    )
    assert result.exit_code == 0, result.output
    replay = json.loads(result.stdout)["replays"][0]
    assert replay["avg_jct_s"] == pytest.approx((111.5 + 163) / 2)  # test_replay.py's timeline


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["no-such-trace.csv", "--cluster", "1x1"], "no-such-trace.csv: cannot read the trace"),
        ([str(ASSETS / "pair.csv"), "--cluster", "eight"], "--cluster eight: give HOSTSxDEVICES"),
        ([str(ASSETS / "pair.csv")], "say which cluster to replay on"),
        ([str(ASSETS / "pair.csv"), "--cluster", "1x1", "--policy", "lifo"], "--policy lifo: choose among"),
        ([str(ASSETS / "pair.csv"), "--cluster", "1x1", "--model", "magic"], "--model magic: choose"),
        ([str(ASSETS / "pair.csv"), "--cluster", "1x1", "--model", "interleave", "--max-group", "5"],
         "--max-group 5: --factors gives factors up to groups of 4"),
        # was replayed, stored and reported ("grouping: up to 99999999999999999999 jobs")
        ([str(ASSETS / "pair.csv"), "--cluster", "1x4", "--profiles", str(ASSETS / "profiles.csv"), "--max-group",
          "99999999999999999999"], "--max-group 99999999999999999999: give a whole number from 1 to 254 (1 replays"),
        ([str(ASSETS / "pair.csv"), "--cluster", "1x1", "--factors", "1.3,x"], "--factors 1.3,x: give numbers"),
        # a factor below 1 ran groups faster than their ideal interleaving (1e-300: in no time)
        ([str(ASSETS / "pair.csv"), "--cluster", "1x1", "--profiles", str(ASSETS / "profiles.csv"), "--model",
          "interleave", "--factors", "1.2,0.9"], "--factors 1.2,0.9: 0.9 is below 1: a factor is charged over"),
        ([str(ASSETS / "pair.csv"), "--cluster", "1x1", "--profiles", str(ASSETS / "profiles.csv"), "--model",
          "interleave", "--factors", "1e-300"], "give numbers >= 1"),
        # a factor is its group size's by its place: an empty one moved 1.5 to groups of 3; '1_5' was 15
        ([str(ASSETS / "muri_two.csv"), "--cluster", "1x2", "--model", "interleave", "--factors", "1.3,,1.5"],
         "--factors 1.3,,1.5: a factor left empty; give one for each group size"),
        # an empty name was dropped: `--assign a,,b` drew from a and b as if nothing were lost
        ([str(ASSETS / "philly_log.json"), "--cluster", "1x2", "--profiles", str(ASSETS / "profiles.csv"),
          "--assign", "narrow,,wide"], "--assign narrow,,wide: a name left empty; give each between commas"),
        ([str(ASSETS / "pair.csv"), "--cluster", "1x2", "--policy", "fifo,"], "--policy fifo,: a name left empty"),
        ([str(ASSETS / "muri_two.csv"), "--cluster", "1x2", "--model", "interleave", "--factors", "1_5"],
         "--factors 1_5: give numbers separated by commas"),
        ([str(ASSETS / "pair.csv"), "--cluster", "1x1", "--profiles", str(ASSETS / "pair.csv")],
         "line 1: unknown column 'arrival_s'"),
        ([str(ASSETS / "fifo_srtf.csv"), "--cluster", "1x1", "--profiles", str(ASSETS / "profiles.csv")],
         "needs 2 devices and the cluster has 1 (1 such job): replay on a bigger cluster"),  # was "1 such jobs"
        ([str(ASSETS / "philly_log.json"), "--cluster", "1x2", "--profiles", str(ASSETS / "profiles.csv")],
         "names no model: give --assign"),
        # random.seed(-1) drew as seed 1, and a seed of 4,300 digits was stored and printed whole
        ([str(ASSETS / "philly_log.json"), "--cluster", "1x2", "--assign", "narrow", "--seed", "-1"],
         "--seed -1: give a whole number from 0 to 9223372036854775807"),
        ([str(ASSETS / "philly_log.json"), "--cluster", "1x2", "--assign", "narrow", "--seed", "9" * 4300],
         "--seed 9999999999999999999999999999999999999999...: give a whole number from 0"),
        # a stored profile's recipe that is not there was said without the flag that named it
        ([str(ASSETS / "philly_log.json"), "--cluster", "1x2", "--assign", "nosuch"],
         "--assign nosuch: nosuch: no recipe file or built-in recipe of that name"),
        # an option that would do nothing for this trace or model (before: ignored without a word)
        ([str(ASSETS / "muri_two.csv"), "--cluster", "1x2", "--factors", "1.2,1.4,1.5"],
         "--factors does nothing here: only --model interleave"),
        ([str(ASSETS / "muri_two.csv"), "--cluster", "1x2", "--model", "interleave", "--turn-policy", "round-robin"],
         "--turn-policy does nothing here: only --model xover"),
        ([str(ASSETS / "fifo_srtf.csv"), "--cluster", "1x2", "--profiles", str(ASSETS / "profiles.csv"),
          "--assign", "a"], "--assign does nothing here: a plain trace names each job's model"),
        ([str(ASSETS / "muri_two.csv"), "--cluster", "1x2", "--seed", "3"], "--seed does nothing here"),
        ([str(ASSETS / "muri_two.csv"), "--cluster", "1x2", "--restart-s", "5"], "--restart-s does nothing here"),
        ([str(ASSETS / "muri_two.csv"), "--cluster", "1x2", "--profiles", str(ASSETS / "profiles.csv")],
         "--profiles does nothing here: a Muri trace carries each job's times"),
        # --engine picks stored profiles: nothing to pick in a Muri trace or a --profiles file; a name it has not
        ([str(ASSETS / "muri_two.csv"), "--cluster", "1x2", "--engine", "torch"],
         "--engine does nothing here: a Muri trace carries each job's times"),
        ([str(ASSETS / "fifo_srtf.csv"), "--cluster", "1x2", "--profiles", str(ASSETS / "profiles.csv"),
          "--engine", "torch"], "--engine picks stored profiles of recipes; a --profiles file carries its own"),
        ([str(ASSETS / "fifo_srtf.csv"), "--cluster", "1x2", "--engine", "tensorflow"],
         "--engine tensorflow: choose horovod or torch"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(isolated_results, args, message):
    result = xover("simulate", *args)
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


def test_one_of_anything_is_said_in_the_singular(isolated_results, tmp_path):
    """`xover simulate` of Philly's log said "skipped 1 jobs never started" and "1 hosts", its report "1 jobs";
    and `report all --format html` "1 experiments"."""
    result = xover("simulate", str(ASSETS / "philly_log.json"), "--profiles", str(ASSETS / "profiles.csv"),
                   "--assign", "narrow", "--cluster", "1x4", "--policy", "fifo")
    assert result.exit_code == 0, result.output
    assert "(2 jobs of " in result.output and "; 1 host, 4 devices;" in result.output, result.output
    assert "skipped 1 job never started" in result.output, result.output
    reported = xover("report", "latest")
    assert "skipped: 1 job never started" in reported.output, reported.output
    one = tmp_path / "one.csv"
    one.write_text("arrival_s,gpus,duration_s,model,name\n0,1,10,narrow,j0\n")
    result = xover("--db", str(tmp_path / "one.db"), "simulate", str(one), "--profiles", str(ASSETS / "profiles.csv"),
                   "--cluster", "1x1", "--policy", "fifo")
    assert result.exit_code == 0, result.output
    title = " ".join(result.output.split())  # the table's title, wrapped where the path is long
    assert "(1 job of " in title and "; 1 host, 1 device;" in title, result.output
    reported = xover("--db", str(tmp_path / "one.db"), "report", "latest")
    assert "(plain, 1 job)" in reported.output and "(1 device)" in reported.output, reported.output
    page = tmp_path / "all.html"
    assert xover("--db", str(tmp_path / "one.db"), "report", "all", "--format", "html", "--out", str(page)).exit_code == 0
    assert "<p>1 experiment, newest first.</p>" in page.read_text()


# ------------------------------------------------------------------------------ SIGTERM


def _sqlite_count(db: Path, table: str) -> int:
    import sqlite3
    from contextlib import closing

    with closing(sqlite3.connect(db)) as connection:
        return connection.execute(f"select count(*) from {table}").fetchone()[0]


def _has_table(db: Path, table: str) -> bool:
    import sqlite3
    from contextlib import closing

    if not db.exists():
        return False
    try:
        with closing(sqlite3.connect(db, timeout=0.1)) as connection:
            return connection.execute("select 1 from sqlite_master where name = ?", (table,)).fetchone() is not None
    except sqlite3.OperationalError:  # locked by the migrations under way
        return False


def test_sigterm_while_it_replays_is_said_and_stores_nothing(isolated_results, tmp_path):
    """SIGTERM (a scheduler's stop, `kill`) ended `xover simulate` with exit 143 and not a word; now it is Ctrl-C's:
    one line saying what was kept, exit 130."""
    import random
    import signal
    import time

    draw = random.Random(7)
    trace = tmp_path / "long.csv"
    lines = ["arrival_s,gpus,duration_s,model,name"]
    lines += [f"{i * 20},{draw.choice([1, 2])},{draw.randint(50, 3000)},{draw.choice(['narrow', 'loader', 'wide'])},"
              f"j{i}" for i in range(20000)]  # seconds of replay: the signal lands in it
    trace.write_text("\n".join(lines) + "\n")
    db = isolated_results / "xover.db"
    process = subprocess.Popen([sys.executable, "-m", "xover", "simulate", str(trace), "--profiles",
                                str(ASSETS / "profiles.csv"), "--cluster", "2x4", "--policy", "xover"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not _has_table(db, "experiments") and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)  # the store is made once the trace is read, before the replay
        time.sleep(1.0)  # in the replay (about 10 s of it); a second after the file appeared was before its tables
        # on a busy machine (the migrations still running: "no such table: experiments")
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, (process.returncode, out, err)
    assert err.splitlines()[-1] == "interrupted: nothing of the simulation was stored", err
    assert "Traceback" not in err and _sqlite_count(db, "experiments") == 0
    listed = xover("report", "all")  # the store reads as before
    assert listed.exit_code == 2 and "holds no experiments yet" in listed.output, listed.output


PATCHED_STORE = """
import signal, sys
import xover.replay.step as step

stored = step.store_simulation

def signalled_while_stored(*args, **kwargs):
    signal.raise_signal(signal.SIGTERM)  # lands as the simulation is written
    stored(*args, **kwargs)

step.store_simulation = signalled_while_stored
from xover.cli import app
app(args=sys.argv[1:], prog_name="xover")
"""


def test_sigterm_while_it_is_stored_keeps_it_whole_and_says_so(isolated_results):
    result = subprocess.run([sys.executable, "-c", PATCHED_STORE, "simulate", str(ASSETS / "fifo_srtf.csv"),
                             "--profiles", str(ASSETS / "profiles.csv"), "--cluster", "1x2", "--policy", "fifo,srtf"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 130, (result.returncode, result.stdout, result.stderr)
    db = isolated_results / "xover.db"
    assert _sqlite_count(db, "experiments") == 1 and _sqlite_count(db, "replays") == 2
    import sqlite3
    from contextlib import closing

    with closing(sqlite3.connect(db)) as connection:
        [(experiment,)] = connection.execute("select id from experiments").fetchall()
    assert result.stderr.splitlines()[-1] == (
        f"interrupted: the simulation was stored whole, as experiment {experiment} (xover report {experiment})"
    ), result.stderr
    assert xover("report", experiment).exit_code == 0


def test_simulate_runs_as_a_module():
    result = subprocess.run([sys.executable, "-m", "xover", "simulate", "--help"], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0 and "--semantics" in result.stdout


def test_a_trace_written_with_quoted_names_and_unix_timestamps_is_replayed_from_its_first_arrival(
    isolated_results, tmp_path
):
    """A header of quoted names (csv.QUOTE_ALL) was 'not a trace this reads'; arrivals at Unix timestamps merged
    events 1.5 s apart (jobs started before they arrived)."""
    trace = tmp_path / "quoted.csv"
    trace.write_text(
        '"arrival_s","gpus","duration_s","model","name"\n'
        '"1507338000","1","10","narrow","e0"\n"1507338001","1","10","narrow","e1"\n"1507338001.2","1","5","narrow","e2"\n'
    )
    result = xover(
        "simulate", str(trace), "--profiles", str(ASSETS / "profiles.csv"), "--cluster", "1x1", "--policy", "fifo",
        "--json",
    )
    assert result.exit_code == 0, result.output
    stored = json.loads(result.stdout)
    assert stored["format"] == "plain"
    assert stored["notes"] == ["times are from the first arrival, at 1507338000 s of the trace"]
    # e0 0-10, e1 10-20, e2 20-25: queued 0, 9 and 18.8 s
    assert stored["replays"][0]["avg_queue_s"] == pytest.approx((0 + 9 + 18.8) / 3)


def test_a_philly_log_with_a_key_twice_or_an_integer_too_long_is_one_line_naming_where(isolated_results, tmp_path):
    """Philly's log was read with json.loads: a key given twice was taken as the last without a word, and an
    integer of more than 4,300 digits was Python's 'Exceeds the limit' in a traceback."""
    text = (ASSETS / "philly_log.json").read_text()
    twice, long = tmp_path / "twice.json", tmp_path / "long.json"
    twice.write_text(text.replace('"user": "u",', '"user": "u", "user": "v",', 1))
    long.write_text(text.replace('"application_1_0003"', "1" * 5000, 1))
    for path, message in (
        (twice, f"{twice}: the key 'user' is given twice in [0]"),
        (long, f"{long}: [2].jobid: an integer of 5000 digits, which no field of Philly's log holds"),
    ):
        result = xover("simulate", str(path), "--profiles", str(ASSETS / "profiles.csv"), "--assign", "narrow",
                       "--cluster", "1x4")
        assert result.exit_code == 2, result.output
        assert message in " ".join(result.output.split()) and "Traceback" not in result.output, result.output
        assert not (isolated_results / "xover.db").exists()


@pytest.mark.parametrize("flag", ["--seed", "--jobs", "--max-group"])
def test_a_whole_number_flag_of_more_digits_than_python_converts_is_refused_by_the_flag(isolated_results, flag):
    """It was 'Exceeds the limit (4300 digits) for integer string conversion ...: use sys.set_int_max_str_digits()'."""
    result = xover("simulate", str(ASSETS / "philly_log.json"), "--cluster", "1x2", "--assign", "narrow", flag, "9" * 5000)
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    text = " ".join(result.output.replace("\u2502", " ").split())
    assert f"Invalid value for '{flag}': 99999999999999999999... (5000 characters) is no whole number any flag takes" in (
        text), text


@pytest.mark.parametrize("asked", ["3", "99999999999999999999", "9" * 4000])
def test_jobs_beyond_the_traces_are_said_with_how_many_it_has(isolated_results, asked):
    """`--jobs 99999999999999999999` replayed the trace's 2 jobs without a word, as if it had that many."""
    result = xover("simulate", str(ASSETS / "muri_two.csv"), "--cluster", "1x1", "--policy", "fifo", "--jobs", asked)
    assert result.exit_code == 0, result.output
    shown = asked if len(asked) <= 40 else asked[:40] + "..."  # as --seed shows a number of thousands of digits
    said = f"note: --jobs {shown}: the trace has 2 jobs, all replayed"
    assert said in " ".join(result.output.split()) and len(result.output) < 5000, result.output
    reported = xover("report", "latest", "--format", "json")
    [replay] = json.loads(reported.stdout)["replays"]
    assert f"--jobs {shown}: the trace has 2 jobs, all replayed" in replay["settings"]["notes"]
    exactly = xover("simulate", str(ASSETS / "muri_two.csv"), "--cluster", "1x1", "--policy", "fifo", "--jobs", "2")
    assert exactly.exit_code == 0 and "--jobs" not in exactly.output, exactly.output


@pytest.mark.parametrize("text, message", [
    ("arrival_s,gpus,duration_s,model\n0,1,5,a\x1b[2J\n", r"line 2: model 'a\x1b[2J': no model's name holds a control"),
    ("arrival_s,gpus,\x1b[2Jmodel\n0,1,5\n", r"(columns: arrival_s, gpus, '\x1b[2Jmodel')"),
    ("arrival_s,gpus,duration_s,model,name\n0,1,5,wide,a\x1b[2J\n", r"got 'a\x1b[2J'"),
])
def test_a_terminal_escape_in_a_trace_is_shown_escaped(isolated_results, tmp_path, text, message):
    """A model name or a header column of the trace was printed as written (a recipe's error repeated the name):
    the terminal ran the escape sequence (here: clear the screen)."""
    trace = tmp_path / "t.csv"
    trace.write_text(text)
    # the model's name is checked before its stored profile is looked for (a recipe's error repeats it)
    stored = [] if "model '" in message else ["--profiles", str(ASSETS / "profiles.csv")]
    result = xover("simulate", str(trace), "--format", "plain", "--cluster", "1x1", *stored)
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert message in result.output and "\x1b" not in result.output, result.output


def test_a_file_name_too_long_for_the_system_is_one_line(isolated_results, tmp_path):
    """Path.exists() raises ENAMETOOLONG rather than answer False: the check that a trace is a regular file was an
    OSError's traceback."""
    long = str(tmp_path / ("a" * 300 + ".csv"))
    for args, said in (
        ([long, "--profiles", str(ASSETS / "profiles.csv")], f"{long}: cannot read the trace: File name too long"),
        ([str(ASSETS / "pair.csv"), "--profiles", long], f"{long}: cannot read the profiles file: File name too long"),
    ):
        result = xover("simulate", *args, "--cluster", "1x1")
        assert result.exit_code == 2 and "Traceback" not in result.output, result.output
        assert said in "".join(result.output.split("\n")), result.output


def test_a_trace_whose_name_is_not_utf8_is_replayed_stored_and_shown_escaped(isolated_results, tmp_path):
    """A file name's byte that is not UTF-8 (Python reads it as \\udcff) reached the store as it was: after the whole
    replay, the insert of the command line and of the trace's path was a UnicodeEncodeError's traceback."""
    trace = tmp_path / "\udcff.csv"
    trace.write_bytes((ASSETS / "pair.csv").read_bytes())
    result = subprocess.run(
        [sys.executable, "-m", "xover", "simulate", str(trace), "--profiles", str(ASSETS / "profiles.csv"), "--cluster",
         "1x1", "--policy", "fifo", "--json"], capture_output=True, text=True, timeout=120, cwd=ASSETS.parents[2],
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["trace"] == str(tmp_path / "\\udcff.csv")
    reported = xover("report", "latest", "--format", "json")
    assert reported.exit_code == 0, reported.output
    assert "\\\\udcff.csv" in reported.stdout


def test_an_escape_sequence_in_a_path_or_a_flag_is_shown_escaped_in_errors(isolated_results, tmp_path):
    """A file's name or a flag's value holding an escape sequence reached the terminal as it was in the error naming
    it (rich passes ESC through): every line xover prints shows a control character escaped (console.shown)."""
    missing = str(tmp_path / "t\x1b[2J.csv")
    for args, said in (
        ([missing, "--profiles", str(ASSETS / "profiles.csv")], "t\\x1b[2J.csv"),
        ([str(ASSETS / "philly_log.json"), "--assign", "a\x1b]0;owned\x07"], "a\\x1b]0;owned\\x07"),
    ):
        result = xover("simulate", *args, "--cluster", "1x1")
        assert result.exit_code == 2 and "Traceback" not in result.output, result.output
        assert "\x1b" not in result.output and said in "".join(result.output.split("\n")), result.output


# ------------------------------------------------------------------------------ traces as operators have them


def test_helios_cluster_log_is_replayed_and_refused_input_stores_nothing(isolated_results, tmp_path):
    """Helios' cluster_log.csv (HeliosData's README's rows, and a CPU job) is told from its header and replayed with
    models drawn from --assign; a bad line of it, or a spreadsheet's ';'-separated one with a decimal comma, is
    one line naming the line and field, exit 2, and nothing is stored."""
    header = "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue\n"
    rows = (
        "1425511,uXBbc,vcJkd,1,1,1,COMPLETED,2020-06-09 18:41:01,2020-06-09 18:41:01,2020-06-10 04:55:09,36848,0\n"
        "1425512,uVMrF,vchbv,4,16,1,FAILED,2020-06-09 18:41:27,2020-06-09 18:41:27,2020-06-09 18:45:36,249,0\n"
        "1425514,uzqls,vcpDC,0,8,1,COMPLETED,2020-06-09 18:42:00,2020-06-09 18:42:00,2020-06-09 18:52:00,600,0\n"
    )
    common = ["--profiles", str(ASSETS / "profiles.csv"), "--cluster", "1x4", "--policy", "fifo"]
    bad = {
        "cluster_log_bad.csv": (header + rows + "9,u,v,1,1,1,COMPLETED,06/09/2020,,,5,0\n", ["--assign", "narrow"],
                                "line 5: submit_time: not a time: '06/09/2020': write it as 2017-10-07 01:12:09"),
        "no_assign.csv": (header + rows, [], "Helios' cluster_log.csv names no model: give --assign MODEL,..."),
        "semicolons.csv": ("arrival_s;gpus;duration_s;model\n0;1;1,5;narrow\n", [],
                           "line 2: duration_s must be a number, got '1,5': write it without thousands separators"),
        # which cluster would do was not said
        "too_big.csv": ("arrival_s,gpus,duration_s,model\n0,8,10,narrow\n1,16,10,narrow\n", [],
                        "job job0 needs 8 devices and the cluster has 4 (2 such jobs): replay on a bigger cluster "
                        "(the largest job needs 16)"),
    }
    for name, (text, extra, message) in bad.items():
        path = tmp_path / name
        path.write_text(text)
        result = xover("simulate", str(path), *common, *extra)
        assert result.exit_code == 2 and "Traceback" not in result.output, result.output
        assert message in " ".join(result.output.split()) and len(result.output.strip().splitlines()) == 1, (
            result.output)
        assert not (isolated_results / "xover.db").exists()
    path = tmp_path / "cluster_log.csv"
    path.write_text(header + rows)
    result = xover("simulate", str(path), *common, "--assign", "narrow", "--json")
    assert result.exit_code == 0, result.output
    stored = json.loads(result.stdout)
    assert (stored["format"], stored["jobs"], stored["skipped"]) == ("helios", 2, {"CPU jobs (on no GPU)": 1})
    assert stored["notes"][0] == "models drawn from narrow with seed 0 (Helios names none)"
    reported = xover("report", "latest")
    assert "skipped: 1 CPU job (on no GPU)" in reported.output and "helios" in reported.output, reported.output
    # a spreadsheet's export of the plain CSV: BOM, CRLF, ';', capitals, empty columns at the end, blank lines
    export = tmp_path / "export.csv"
    export.write_bytes("\ufeffArrival_s;GPUs;Duration_s;Model;;\r\n0;1;100;narrow;;\r\n5;2;50;wide;;\r\n;;;;;\r\n\r\n".encode())
    result = xover("simulate", str(export), *common, "--json")
    assert result.exit_code == 0, result.output
    assert (json.loads(result.stdout)["format"], json.loads(result.stdout)["jobs"]) == ("plain", 2)


def test_the_replays_progress_includes_storing_them(isolated_results):
    """Storing a replay of a long trace takes tens of seconds (117,000 jobs under six policies) after every
    policy's bar is full: it has a bar of its own, the jobs of every policy stored."""
    from xover.replay.step import STORING, SimulateRequest, simulate

    calls: list[tuple[str, int, int]] = []
    request = SimulateRequest(trace=str(ASSETS / "fifo_srtf.csv"), profiles_csv=str(ASSETS / "profiles.csv"),
                              cluster="1x2", policies=("fifo", "srtf"))
    simulate(str(isolated_results / "xover.db"), request, "xover simulate", lambda *call: calls.append(call))
    assert [call for call in calls if call[0] == STORING] == [(STORING, 0, 6), (STORING, 3, 6), (STORING, 6, 6)]
    assert {name for name, _, _ in calls} == {"fifo", "srtf", STORING}


def test_reading_a_long_trace_has_a_bar_before_the_replays(isolated_results, tmp_path, monkeypatch):
    """Reading a 117,000-job Philly log took 6 s with nothing on screen: a long trace's reading has a bar of its
    own, first; a short one's none (above)."""
    from xover.replay import traces
    from xover.replay.step import READING, SimulateRequest, simulate

    trace = tmp_path / "long.csv"
    trace.write_text("arrival_s,gpus,duration_s,model\n" + "".join(f"{i},1,10,narrow\n" for i in range(3000)))
    monkeypatch.setattr(traces, "LONG_TRACE_BYTES", 1)
    calls: list[tuple[str, int, int | None]] = []
    request = SimulateRequest(trace=str(trace), profiles_csv=str(ASSETS / "profiles.csv"), cluster="1x2",
                              policies=("fifo",))
    simulate(str(isolated_results / "xover.db"), request, "xover simulate", lambda *call: calls.append(call))
    reading = [call for call in calls if call[0] == READING]
    assert reading == [(READING, 0, None), (READING, 2048, 3000), (READING, 3000, 3000)]
    assert calls[: len(reading)] == reading  # before any replay's

    result = xover("simulate", str(trace), "--profiles", str(ASSETS / "profiles.csv"), "--cluster", "1x2",
                   "--policy", "fifo")
    assert result.exit_code == 0, result.output
    # stderr is not a terminal here: the bars are drawn as they ended
    assert any(line.startswith("reading") and "3000/3000" in line for line in result.output.splitlines())
    quiet = xover("simulate", str(trace), "--profiles", str(ASSETS / "profiles.csv"), "--cluster", "1x2",
                  "--policy", "fifo", "--json")
    assert quiet.exit_code == 0 and "jobs done" not in quiet.output  # no bar under --json


def store_torch_profiles(db: Path) -> None:
    """Torch profiles of mlp-digits and resnet-digits in the store `db`: real rows, as `xover profile` keeps them
    (the figures made up: mlp-digits all communication, resnet-digits all compute)."""
    from xover.devices import hardware_fingerprint
    from xover.recipes import load_recipe
    from xover.store.models import Profile
    from xover.store.queries import snapshot_recipe
    from xover.store.session import open_store

    store = open_store(str(db))
    with store.session() as session, session.begin():
        for name, compute_ms, comm_ms in (("mlp-digits", 5.0, 60.0), ("resnet-digits", 60.0, 8.0)):
            recipe = load_recipe(name)
            snapshot = snapshot_recipe(session, recipe)
            session.add(Profile(recipe_id=snapshot.id, recipe_hash=recipe.job_hash, name=name, np=recipe.np,
                                engine="torch", bandwidth="1gbit", hardware=hardware_fingerprint(), iterations=20,
                                data_ms=0.0, compute_ms=compute_ms, comm_ms=comm_ms,
                                iteration_ms=compute_ms + comm_ms, samples_per_s=100.0, memory_gb=0.1,
                                gradient_bytes=1000, link_ms=comm_ms, comm_cpu_ms=None, checkpoints=10, spread={},
                                tuning=None))
    store.close()


def test_the_other_engine_is_suggested_only_where_its_profiles_have_the_shape_asked(isolated_results):
    """Torch profiles over one host: a plan over two hosts under Horovod was told to "give --engine torch", which
    had no profile over two hosts either (and that error then suggested Horovod)."""
    store_torch_profiles(isolated_results / "xover.db")
    one_host = xover("plan", "mlp-digits", "resnet-digits", "--bandwidth", "1gbit", "--devices", "2")
    assert one_host.exit_code == 2 and "or give --engine torch (it has torch profiles)" in one_host.output
    two_hosts = xover("plan", "mlp-digits", "resnet-digits", "--bandwidth", "1gbit", "-H", "a:1,b:1")
    assert two_hosts.exit_code == 2, two_hosts.output
    assert "no horovod profile of 'mlp-digits' (np 2 over 2 hosts)" in " ".join(two_hosts.output.split())
    assert "--engine torch" not in two_hosts.output


def test_a_trace_of_models_profiled_under_torch_is_replayed_with_engine_torch(isolated_results, tmp_path):
    """`xover simulate` read stored profiles under Horovod only: a user who profiled with `--engine torch` was
    told to "plan with --engine torch", an option simulate did not have. Both engines' profiles are real rows
    of the store, as `xover profile` keeps them (the figures made up)."""
    store_torch_profiles(isolated_results / "xover.db")
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,gpus,duration_s,model\n0,2,100,mlp-digits\n0,2,100,resnet-digits\n")
    under_horovod = xover("simulate", str(trace), "--cluster", "1x2")
    assert under_horovod.exit_code == 2, under_horovod.output
    assert "no horovod profile of 'mlp-digits'" in under_horovod.output
    assert "or give --engine torch (it has torch profiles)" in under_horovod.output
    under_torch = xover("simulate", str(trace), "--cluster", "1x2", "--engine", "torch", "--json")
    assert under_torch.exit_code == 0, under_torch.output
    replays = {replay["policy"]: replay for replay in json.loads(under_torch.stdout)["replays"]}
    assert set(replays) == {"fifo", "srtf", "tiresias", "xover"}
    # one after the other without sharing: 100 s each (whole iterations of the profiles), the second waits
    assert replays["fifo"]["avg_jct_s"] == pytest.approx(150, rel=1e-3)
    assert replays["fifo"]["makespan_s"] == pytest.approx(200, rel=1e-3)


def test_a_store_that_will_not_take_the_replays_is_refused_before_replaying(isolated_results, tmp_path, monkeypatch):
    # a read-only store was found out only when the replays (minutes on a large trace) were stored
    store = tmp_path / "ro.db"
    trace = [str(ASSETS / "fifo_srtf.csv"), "--profiles", str(ASSETS / "profiles.csv"), "--cluster", "1x2"]
    assert xover("--db", str(store), "simulate", *trace).exit_code == 0
    from xover.replay import step
    replayed = []
    monkeypatch.setattr(step, "replay", lambda *args: replayed.append(args))  # a spy: was a replay begun?
    import sqlite3
    # a reader holding the store open (its WAL's shared memory there): xover's read-only connection opens it
    with contextlib.closing(sqlite3.connect(store)) as reader:
        reader.execute("select count(*) from experiments").fetchall()
        result = xover("--db", f"sqlite:///file:{store}?mode=ro&uri=true", "simulate", *trace)
    assert result.exit_code == 2, result.output
    line = result.output.strip()
    assert line.startswith("error: the database ") and "readonly database" in line and "\n" not in line, line
    assert replayed == []


def test_the_report_command_it_prints_works_as_pasted(isolated_results, monkeypatch):
    """`xover --db sim.db simulate ...` printed `xover report ID`, which looked in results/xover.db: 'no database'.
    The printed command repeats --db (quoted: a path with a space is one word) and runs as it is."""
    import re
    import shlex

    db = str(isolated_results / "my sims;x.db")
    args = ["simulate", str(ASSETS / "fifo_srtf.csv"), "--profiles", str(ASSETS / "profiles.csv"), "--cluster", "1x4",
            "--policy", "fifo"]
    result = xover("--db", db, *args)
    assert result.exit_code == 0, result.output
    printed = re.search(r"stored as experiment (\S+): (.*) \(--format html", result.output)
    words = shlex.split(printed[2])
    assert words == ["xover", "--db", db, "report", printed[1]]
    monkeypatch.delenv("XOVER_DB")  # the store named by --db alone
    pasted = xover(*words[1:])
    assert pasted.exit_code == 0 and f"simulation {printed[1]}" in pasted.output, pasted.output
    # a store from XOVER_DB needs no --db: the same shell finds it
    monkeypatch.setenv("XOVER_DB", db)
    again = re.search(r"stored as experiment (\S+): (.*) \(--format html", xover(*args).output)
    assert shlex.split(again[2]) == ["xover", "report", again[1]]
