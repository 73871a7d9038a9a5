"""What a user controls (script arguments, paths, settings' names and values) reaches horovodrun's shell lines, ssh's
remote command and Slurm's batch script either exactly as given, or is refused before anything starts: the command
lines are built here and read back by a real shell, never matched by eye."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import pytest

from xover.errors import XoverError

# what a shell would run, or read as something else, if it were not quoted
HOSTILE = [
    "$(touch pwned)",
    "`touch pwned`",
    "; touch pwned",
    "a b",
    "'\"",
    "x\ny",
    "-np",
    "--help",
    "%j",
    "\\",
    "\udcff",  # a byte that is not UTF-8, as Python decodes it from argv
    "L" * 5000,
]


def _shell_words(line: str, cwd) -> list[str]:
    """What bash makes of `line` followed by the arguments a Python program gets: its argv, as bytes in hex."""
    show = "import json, os, sys; print(json.dumps([os.fsencode(a).hex() for a in sys.argv[1:]]))"
    done = subprocess.run(["bash", "-c", f"{line} {shlex.quote(sys.executable)} -c {shlex.quote(show)}"],
                          capture_output=True, cwd=cwd, timeout=30)
    assert done.returncode == 0, done.stderr
    return [bytes.fromhex(word).decode("utf-8", "surrogateescape") for word in json.loads(done.stdout)]


# ------------------------------------------------------------------------------ horovodrun's shell lines


def _horovod_rank_line(env: dict[str, str], command: list[str]) -> str:
    """The shell line horovodrun 0.28.1 runs for a rank (on this machine, through a shell, as over ssh)."""
    from horovod.runner.common.util.hosts import SlotInfo
    from horovod.runner.gloo_run import _slot_info_to_command_fn, get_run_command

    run_command = get_run_command(command, "127.0.0.1", ["lo"], 1234)
    slot = SlotInfo(hostname="localhost", rank=0, local_rank=0, cross_rank=0, size=1, local_size=1, cross_size=1)
    return _slot_info_to_command_fn(run_command, env)(slot)


def test_a_script_argument_reaches_a_horovod_rank_as_given(tmp_path):
    show = "import json, os, sys; print(json.dumps([os.fsencode(a).hex() for a in sys.argv[1:]]))"
    line = _horovod_rank_line({}, [sys.executable, "-c", show, *HOSTILE])
    done = subprocess.run(["bash", "-c", line], capture_output=True, cwd=tmp_path, timeout=30)
    assert done.returncode == 0, done.stderr
    got = [bytes.fromhex(word).decode("utf-8", "surrogateescape") for word in json.loads(done.stdout)]
    assert got == HOSTILE
    assert not (tmp_path / "pwned").exists()


def test_a_setting_horovodrun_forwards_reaches_its_ranks_as_given(tmp_path):
    from xover.run.external.horovodrun import horovodrun_env

    value = "$(touch pwned) `touch pwned` ; '\" a\nb %j \\"
    env = horovodrun_env({"XOVER_RESULTS": value, "PATH": "/usr/bin:/bin"})
    show = "import os; print(os.environ['XOVER_RESULTS'], end='')"
    done = subprocess.run(["bash", "-c", _horovod_rank_line(env, [sys.executable, "-c", show])],
                          capture_output=True, text=True, cwd=tmp_path, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout == value
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("name", ["XOVER_X$(touch pwned)", "XOVER_X`touch pwned`", "OMP_A;touch pwned;B",
                                  "LC_X Y", "XOVER_\n", "PYTHON-X"])
def test_a_variable_horovodrun_would_forward_under_a_name_no_shell_can_set_is_refused(tmp_path, name):
    """Before: horovodrun wrote the name unquoted into each rank's shell line (`env ... XOVER_X$(touch pwned)='1'
    python ...`), and the shell ran what it held; a real `xover run` of a Horovod job made the file."""
    from xover.run.external.horovodrun import check_forwarded_names, horovodrun_env

    env = {name: "1", "PATH": "/usr/bin:/bin"}
    with pytest.raises(XoverError, match="not a name a shell can set") as refused:
        horovodrun_env(env)
    assert repr(name) in str(refused.value) and "\n" not in str(refused.value)
    with pytest.raises(XoverError):
        check_forwarded_names(env)
    check_forwarded_names({"MY$(X)": "1", "XOVER_OK_1": "x", "_UNDERSCORE": "y"})  # never forwarded, or a name


# ------------------------------------------------------------------------------ horovodrun's ranks on other hosts


def _job(hosts: str, engine: str = "horovod"):
    from xover.recipes import load_recipe, with_overrides
    from xover.run.jobs import job_for

    return job_for(with_overrides(load_recipe("mlp-digits"), np=2), hosts, engine=engine)


@pytest.mark.parametrize("folder", ["a b", "x$(touch pwned)", "q'uote", "semi;colon", "new\nline"])
def test_horovod_ranks_on_another_host_are_refused_from_a_folder_a_shell_would_misread(tmp_path, monkeypatch,
                                                                                         folder):
    """horovodrun 0.28.1 starts a remote rank with `ssh HOST 'cd FOLDER > /dev/null 2>&1 ; env ... python ...'`,
    FOLDER unquoted: before, the remote shell ran `$(touch pwned)` of this folder's name, and a space made the `cd`
    fail unseen (the ranks ran in the home folder, where a script's relative paths are not)."""
    from xover.run.ranks import ranks_of

    (tmp_path / folder).mkdir()
    monkeypatch.chdir(tmp_path / folder)
    with pytest.raises(XoverError, match="runs Horovod ranks on h1, which horovodrun starts in this folder") as refused:
        ranks_of("horovod").check_job(_job("localhost:1,h1:1"))
    assert repr(str(tmp_path / folder)) in str(refused.value) and "\n" not in str(refused.value)


def test_horovod_here_and_torchrun_anywhere_take_any_folder(tmp_path, monkeypatch):
    """Only horovodrun's remote line leaves the folder unquoted: its ranks here start without it, and torchrun's
    nodes elsewhere get `cd 'FOLDER' && ...` (hosts.command_on, below)."""
    from xover.run.ranks import ranks_of

    (tmp_path / "a b$(x)").mkdir()
    monkeypatch.chdir(tmp_path / "a b$(x)")
    ranks_of("horovod").check_job(_job("localhost:2"))
    ranks_of("torch").check_job(_job("h1:1,h2:1", engine="torch"))
    monkeypatch.chdir(tmp_path)
    ranks_of("horovod").check_job(_job("h1:1,h2:1"))


# ------------------------------------------------------------------------------ ssh: the one way xover reaches a host


def test_a_command_on_another_host_reaches_its_shell_as_given(tmp_path, monkeypatch):
    """What ssh runs on the far side is one shell line: `cd FOLDER && env ... ARGV`, each word quoted."""
    from xover.hosts import command_on

    (tmp_path / "f o$(touch pwned)'").mkdir()
    monkeypatch.chdir(tmp_path / "f o$(touch pwned)'")
    show = ("import json, os, sys; print(json.dumps([os.getcwd(), os.environ['XOVER_HOST'],"
            " *(os.fsencode(a).hex() for a in sys.argv[1:])]))")
    command = command_on("h1", [sys.executable, "-c", show, *HOSTILE], env={"XOVER_HOST": "h1 $(x)"}, here=True)
    assert command[:2] == ["ssh", "-o"] and command[-2] == "h1" and not command[-2].startswith("-")
    remote_line = command[-1]  # ssh joins its remote words with spaces: one word, the whole line
    monkeypatch.chdir(tmp_path)
    done = subprocess.run(["bash", "-c", remote_line], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    folder, host, *words = json.loads(done.stdout)
    assert folder == str(tmp_path / "f o$(touch pwned)'") and host == "h1 $(x)"
    assert [bytes.fromhex(word).decode("utf-8", "surrogateescape") for word in words] == HOSTILE
    assert not list(tmp_path.rglob("pwned"))


@pytest.mark.parametrize("hosts", ["-oProxyCommand=touch pwned:1", "h1:1,-p2222:1", "h 1:1", "h1;x:1", "$(x):1",
                                   "h1\n:1", "h\udcff:1", "a..b:1"])
def test_a_host_that_ssh_would_read_as_an_option_or_a_shell_as_code_is_refused(hosts):
    from xover.hosts import parse_hosts

    with pytest.raises(XoverError, match="is not a host name|must be HOST:SLOTS"):
        parse_hosts(hosts)


# ------------------------------------------------------------------------------ Slurm: the batch script and sbatch


def test_a_batch_script_runs_its_command_in_its_folder_with_its_variables_as_given(tmp_path):
    from xover.run.external import slurm

    folder = tmp_path / "w o$(touch pwned)'\"`x`;\n%j"
    folder.mkdir()
    show = ("import json, os, sys; print(json.dumps([os.getcwd(), os.environ['XOVER_A'], os.environ['MY_PASSED'],"
            " *(os.fsencode(a).hex() for a in sys.argv[1:])]))")
    value = "$(touch pwned) `touch pwned` ; '\" a\nb %j \\"
    script = slurm.batch_script([sys.executable, "-c", show, *HOSTILE], workdir=folder,
                                environment={"XOVER_A": value, "MY_PASSED": "\udcff"})
    assert subprocess.run(["bash", "-n"], input=script.encode("utf-8", "surrogateescape")).returncode == 0
    done = subprocess.run(["bash"], input=script.encode("utf-8", "surrogateescape"), capture_output=True,
                          cwd=tmp_path, timeout=30)
    assert done.returncode == 0, done.stderr
    cwd, got, passed, *words = json.loads(done.stdout)
    assert cwd == str(folder) and got == value and passed == "\udcff"
    assert [bytes.fromhex(word).decode("utf-8", "surrogateescape") for word in words] == HOSTILE
    assert not list(tmp_path.rglob("pwned"))


@pytest.mark.parametrize("name", ["XOVER_X$(touch pwned)", "A B", "X;touch pwned", "1X", ""])
def test_a_batch_script_refuses_a_variable_no_shell_can_export(name):
    """`export NAME=...` with such a name ran what it held in the job's shell (the value alone was quoted)."""
    from xover.run.external import slurm

    with pytest.raises(slurm.SlurmError, match="not a name a shell can export"):
        slurm.batch_script(["true"], environment={name: "1"})


def _fake_sbatch(tmp_path, monkeypatch):
    """An sbatch first on PATH that keeps its arguments and the script it reads, and answers a job id."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {tmp_path}/args\ncat > {tmp_path}/script\n'
                                    "echo 4242\n")
    (bin_dir / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


def test_sbatch_gets_a_batch_script_with_bytes_that_are_not_utf8_as_they_were(tmp_path, monkeypatch):
    """Before: a value of the script that is not UTF-8 (a variable a job file passes) raised UnicodeEncodeError, a
    traceback, when the script was written to sbatch's standard input."""
    from xover.run.external import slurm

    _fake_sbatch(tmp_path, monkeypatch)
    script = slurm.batch_script(["true"], environment={"MY_TOKEN": "t\udcffk"})
    assert slurm.submit(script, job_name="xover-x-g0") == "4242"
    assert b"export MY_TOKEN='t\xffk'\n" in (tmp_path / "script").read_bytes()


@pytest.mark.parametrize("folder, written", [("/r/100%x/runs", "/r/100%%x/runs/slurm-group0-%j.out"),
                                             ("/r/a b;$(c)/%%", "/r/a b;$(c)/%%%%/slurm-group0-%j.out"),
                                             ("results/runs/1", "results/runs/1/slurm-group0-%j.out")])
def test_a_groups_output_file_keeps_its_folders_percent_signs(tmp_path, monkeypatch, folder, written):
    """sbatch reads --output as a filename pattern: before, a results folder '/r/100%x' was written to '/r/100'
    followed by the job's name (%x), a folder that does not exist."""
    from xover.run.external import slurm

    assert slurm.output_path(folder, "slurm-group0-%j.out") == written
    _fake_sbatch(tmp_path, monkeypatch)
    slurm.submit("#!/bin/sh\n", output=slurm.output_path(folder, "slurm-group0-%j.out"))
    assert f"--output={written}" in (tmp_path / "args").read_text().splitlines()


def _slurm_request(tmp_path, **options):
    import types

    from xover.links import HOST
    from xover.run.commands import RunOptions
    from xover.run.launchers import LaunchRequest

    return LaunchRequest(store=types.SimpleNamespace(url="sqlite://"), groups=[], units=[], link=HOST,
                         options=RunOptions(modes=("crossover",), plan_path=str(tmp_path / "plan.json"),
                                            launcher="slurm", launcher_options=options))


def test_a_results_folder_with_a_backslash_is_refused_before_a_slurm_run_is_recorded(tmp_path, monkeypatch):
    """sbatch drops every backslash of an --output path that has one and then reads none of its patterns."""
    from xover.run.on_slurm import SlurmLauncher

    request = _slurm_request(tmp_path)
    monkeypatch.setenv("XOVER_RESULTS", str(tmp_path / "res"))
    SlurmLauncher().check(request)
    monkeypatch.setenv("XOVER_RESULTS", str(tmp_path / "a\\b"))
    with pytest.raises(XoverError, match="a backslash in the folder of a Slurm job's output.*XOVER_RESULTS"):
        SlurmLauncher().check(request)


def test_a_spec_of_thousands_of_hosts_is_read_at_once_and_a_host_listed_twice_found(monkeypatch):
    """Before: each host was compared with every one before it, each comparison reading every name of this machine
    anew: 2,000 hosts took 7 s, 20,000 about ten minutes (a Slurm allocation's node list is such a spec)."""
    import time

    from xover.hosts import parse_hosts

    spec = ",".join(f"node{i}:8" for i in range(20000))
    started = time.monotonic()
    assert len(parse_hosts(spec)) == 20000
    assert time.monotonic() - started < 3
    with pytest.raises(XoverError, match="host 'node7' is listed twice") as refused:
        parse_hosts(spec + ",node7:8")
    assert len(str(refused.value)) < 300  # the spec is shown by its start and its length, not its 200,000 characters


@pytest.mark.parametrize("hosts", ["h1:2,h\nx:2", "h1:2\n,h2:x", "h1:2,\u202eh2:2", "h1:2," + "x" * 5000 + " :1"])
def test_a_bad_host_spec_is_named_on_one_line(hosts):
    from xover.hosts import parse_hosts

    with pytest.raises(XoverError) as refused:
        parse_hosts(hosts)
    text = str(refused.value)
    assert len(text.splitlines()) == 1 and text.isprintable() and len(text) < 500, text


@pytest.mark.parametrize("hosts", ["user:s3cret@node1:2", "node0:2,https://u:s3cret@node1:2", "token=s3cret:2",
                                   "u:s3cret@node1:x", "node0:1,u:s3cret@node1"])
def test_a_bad_host_spec_never_shows_a_password_it_holds(hosts):
    from xover.hosts import parse_hosts

    with pytest.raises(XoverError) as refused:
        parse_hosts(hosts)
    assert "s3cret" not in str(refused.value) and "***" in str(refused.value), str(refused.value)


@pytest.mark.parametrize("option, value, words", [
    ("partition", "", "--partition : empty: give a name"),
    ("partition", "gpu debug", "--partition gpu debug: not one Slurm name"),
    ("account", "-A", "--account -A: not one Slurm name"),
    ("account", "lab\nx", "--account lab\\nx: not one Slurm name"),
    ("partition", "gpu\udcff", "--partition gpu\\xff: not one Slurm name"),
    ("time_limit", "1:00:00 ; x", "--time-limit: time limit '1:00:00 ; x': use Slurm's forms"),
])
def test_slurm_options_sbatch_would_misread_are_refused_before_a_run_is_recorded(tmp_path, option, value, words):
    """Before: an empty --partition was dropped without a word (the default partition ran the jobs), and the others
    reached sbatch after the run was recorded, which refused them in its own words (or, for a newline, over lines)."""
    from xover.run.on_slurm import SlurmLauncher

    with pytest.raises(XoverError) as refused:
        SlurmLauncher().check(_slurm_request(tmp_path, **{option: value}))
    assert str(refused.value).startswith(words), str(refused.value)
    assert len(str(refused.value).splitlines()) == 1
    SlurmLauncher().check(_slurm_request(tmp_path, partition="gpu,debug", account="lab-1.x", time_limit="2-00:00:00"))


def _script_job(tmp_path, args):
    from xover.recipes import script_recipe
    from xover.run.jobs import job_for

    script = tmp_path / "train.py"
    script.write_text("import horovod.torch as hvd\nhvd.init()\n")
    return job_for(script_recipe(script, args=args, np=1, engine="horovod"))


def test_a_horovod_rank_line_longer_than_linux_takes_is_refused_before_it_starts(tmp_path):
    """Before: two 70,000-character arguments made horovodrun's `sh -c LINE` fail ("Argument list too long",
    E2BIG: Linux takes one argument of at most 128 KiB), and the job's summary said only "rank 0: exited with
    code 1, no traceback"."""
    from xover.run.ranks import ranks_of

    with pytest.raises(XoverError, match=r"job 'train': horovodrun starts each rank with one shell line, which Linux "
                                         r"takes up to 128 KiB long, .* make 13[0-9] KiB of it: pass long values in a file"):
        ranks_of("horovod").check_job(_script_job(tmp_path, ["L" * 70000, "L" * 70000]))
    ranks_of("horovod").check_job(_script_job(tmp_path, ["L" * 50000, "'" * 8000]))  # 50 kB, and 40 kB quoted
    ranks_of("torch").check_job(_script_job(tmp_path, ["L" * 70000, "L" * 70000]))  # torchrun here: argv alone


def test_torchrun_here_refuses_an_argument_or_variable_longer_than_linux_takes(tmp_path):
    """Before: a job file's 200,000-character argument (or variable) failed the launch with a traceback ("OSError:
    Argument list too long: 'torchrun'") and a failed experiment recorded."""
    from dataclasses import replace

    from xover.run.ranks import ranks_of

    torch = ranks_of("torch")
    with pytest.raises(XoverError, match=r"job 'train': Linux takes a program's argument or variable up to 128 KiB "
                                         r"long, and the script's argument 2 is 195 KiB: pass long values in a file"):
        torch.check_job(_script_job(tmp_path, ["--x", "L" * 200000]))
    job = _script_job(tmp_path, [])
    with pytest.raises(XoverError, match=r"the job file's variable BIG is 195 KiB"):
        torch.check_job(replace(job, recipe=replace(job.recipe, env={"SMALL": "1", "BIG": "L" * 200000})))
    with pytest.raises(XoverError, match=r"up to \d+ KiB together, and the script's arguments, the job file's "
                                         r"variables and this environment make \d+ KiB"):
        torch.check_job(_script_job(tmp_path, ["L" * 100000] * (os.sysconf("SC_ARG_MAX") // 100000 + 1)))
    torch.check_job(_script_job(tmp_path, ["L" * 100000] * 3))


def test_a_torchrun_node_line_over_ssh_longer_than_linux_takes_is_refused(tmp_path):
    """Another host's node starts through ssh's one shell line there: the same limit as a Horovod rank's."""
    from dataclasses import replace

    from xover.run.ranks import ranks_of

    job = _script_job(tmp_path, ["L" * 70000, "L" * 70000])
    with pytest.raises(XoverError, match=r"job 'train': torchrun's nodes on other hosts start through ssh with one "
                                         r"shell line, .* make 13[0-9] KiB of it"):
        ranks_of("torch").check_job(replace(job, devices={"h1": [0], "h2": [0]}, engine="torch"))


def test_a_program_whose_path_holds_an_equals_sign_runs_with_its_variables(tmp_path, monkeypatch):
    """`env NAME=VALUE /opt/a=b/python ...` read the program as one more variable (`env: '-c': No such file or
    directory`): a torchrun node here, or the reaper's sweep of another host, under a Python installed in such a
    folder never started."""
    from xover.hosts import command_on

    folder = tmp_path / "a=b"
    folder.mkdir()
    (folder / "python").symlink_to(sys.executable)
    show = "import os, sys; print(os.environ['XOVER_HOST'], *sys.argv[1:])"
    here = command_on("localhost", [str(folder / "python"), "-c", show, "$(x)", "a b"], env={"XOVER_HOST": "h 1"})
    done = subprocess.run(here, capture_output=True, text=True, timeout=30)
    assert (done.returncode, done.stdout) == (0, "h 1 $(x) a b\n"), done.stderr
    remote_line = command_on("h1", [str(folder / "python"), "-c", show, "$(x)"], env={"XOVER_HOST": "h1"})[-1]
    done = subprocess.run(["bash", "-c", remote_line], capture_output=True, text=True, timeout=30)
    assert (done.returncode, done.stdout) == (0, "h1 $(x)\n"), done.stderr


def test_a_horovod_rank_under_a_python_whose_path_holds_an_equals_sign_starts(tmp_path, monkeypatch):
    """horovodrun's rank line is `env HOROVOD_...=... K=V PROGRAM ...`: env took /opt/a=b/python for a variable."""
    from xover.run.external import horovodrun

    folder = tmp_path / "a=b"
    folder.mkdir()
    (folder / "python").symlink_to(sys.executable)
    monkeypatch.setattr(horovodrun, "horovodrun_launcher", lambda: ["horovodrun"])
    show = "import sys; print(*sys.argv[1:])"
    command = horovodrun.horovodrun_command(1, "localhost:1", tmp_path, tmp_path / "spec.json",
                                            program=[str(folder / "python"), "-c", show, "$(x)", "a b"])
    program = command[command.index("120") + 1:]  # after --start-timeout's value: what each rank runs
    done = subprocess.run(["bash", "-c", _horovod_rank_line({"PATH": "/usr/bin:/bin"}, program)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=30)
    assert (done.returncode, done.stdout) == (0, "$(x) a b\n"), done.stderr
