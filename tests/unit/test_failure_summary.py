"""A failed job is summarised from the rank that failed first (issue 11)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

XOVER = [sys.executable, "-m", "xover"]
ASSETS = Path(__file__).resolve().parents[1] / "assets"


def test_a_failure_is_summarised_from_the_rank_that_failed_first(tmp_path):
    from xover.run.record import failure_summary

    first, second = tmp_path / "ranks" / "rank.2", tmp_path / "ranks" / "rank.10"
    for folder in (first, second):
        folder.mkdir(parents=True)
    (first / "stderr").write_text("Traceback (most recent call last):\nValueError: the cause\n")
    (second / "stderr").write_text("Traceback (most recent call last):\nRuntimeError: Gloo connection closed\n")
    os.utime(first / "stderr", (1_000_000, 1_000_000))  # written first; rank.10 sorts first by name
    summary = failure_summary(tmp_path, ["launcher line"])
    assert summary.startswith("rank 2:") and "the cause" in summary


def test_one_ranks_failure_is_summarised_from_its_relayed_stderr(tmp_path):
    """One rank under horovodrun keeps no rank logs: its error came relayed, and the summary was
    horovodrun's own last lines (its "exited with non-zero status"), not the rank's error."""
    from xover.run.record import failure_summary

    relayed = ["[1,0]<stdout>:XOVER-METRIC {}", "[1,0]<stderr>:Traceback (most recent call last):",
               "[1,0]<stderr>:RuntimeError: Overflow when unpacking long",
               "Primary job  terminated normally, but 1 process returned", "a non-zero exit code."]
    (tmp_path / "launcher.log").write_text("\n".join(relayed) + "\n")
    summary = failure_summary(tmp_path, relayed[-2:])
    assert summary == "rank 0:\nTraceback (most recent call last):\nRuntimeError: Overflow when unpacking long"


def test_a_scripts_usage_error_is_the_summary_not_the_launchers_lines(tmp_path):
    """argparse's error (no traceback, no 'Error') left torchrun's 'Root Cause (first observed failure)' said
    in its place: a script given an argument it does not take, as when one `-- ARGS` goes to every script."""
    from xover.report.tables import failure_reason
    from xover.run.record import failure_summary

    rank = tmp_path / "ranks" / "run_x" / "attempt_0" / "1"
    rank.mkdir(parents=True)
    (rank / "stderr.log").write_text("usage: train.py [-h] [--steps STEPS]\n"
                                     "train.py: error: unrecognized arguments: --out /tmp/o\n")
    launcher = ["Root Cause (first observed failure):", "[0]:", "  exitcode  : 2 (pid: 30951)", "====="]
    summary = failure_summary(tmp_path, launcher)
    assert summary.startswith("rank 1:") and "unrecognized arguments: --out" in summary
    assert failure_reason(summary) == "rank 1: train.py: error: unrecognized arguments: --out /tmp/o"
    # relayed by horovodrun (one rank: no rank logs)
    relayed = ["[0]<stderr>:usage: train.py [-h]", "[0]<stderr>:train.py: error: unrecognized arguments: --out",
               "Primary job  terminated normally, but 1 process returned", "a non-zero exit code."]
    (tmp_path / "launcher.log").write_text("\n".join(relayed) + "\n")
    (rank / "stderr.log").unlink()
    assert failure_summary(tmp_path, relayed[-2:]).endswith("train.py: error: unrecognized arguments: --out")


def test_scripts_given_one_set_of_arguments_are_told_to_use_job_files_when_one_refuses_them():
    from xover.run.targets import shared_arguments_hint

    usage = "rank 0:\nusage: b.py [-h]\nb.py: error: unrecognized arguments: --steps 5"
    hint = shared_arguments_hint(["a.py", "b.py"], ["--steps", "5"], [None, usage])
    assert hint is not None and "job file each" in hint and "`--`" in hint
    # not where the arguments were not shared, nor for another failure, nor with one script (or two copies)
    assert shared_arguments_hint(["a.py", "b.py"], [], [usage]) is None
    assert shared_arguments_hint(["a.py", "b.py"], ["--steps", "5"], ["rank 0:\nRuntimeError: boom"]) is None
    assert shared_arguments_hint(["b.py", "b.py"], ["--steps", "5"], [usage]) is None


def test_a_rank_that_exits_with_a_code_and_no_traceback_is_named_with_its_code(tmp_path):
    """sys.exit(3) after training: no rank log says why, and torchrun's summary ends in a rule of '=': that
    rule was the reason shown ('exit3 (sequential) failed: =====...')."""
    from xover.run.record import failure_reason, failure_summary

    launcher = ["Root Cause (first observed failure):", "[0]:", "  time      : 2026-12-01_04:41:43",
                "  host      : localhost", "  rank      : 1 (local_rank: 1)", "  exitcode  : 3 (pid: 30137)",
                "  error_file: <N/A>", "  traceback : To enable traceback see: https://pytorch.org/docs/stable/"
                "elastic/errors.html", "=" * 60]
    assert failure_reason(failure_summary(tmp_path, launcher)) == "rank 1: exited with code 3, no traceback"


# What the launchers really print when rank 1 of two dies (captured from xover runs, trimmed): torchrun's
# ChildFailedError, whose root cause is the rank it saw fail first and whose other failures are the ranks it
# stopped; horovodrun's log of each process's exit, then its RuntimeError naming the first.
GLOO_RESET = ("RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error "
              "[127.0.0.1]:10666: Connection reset by peer. This is typically caused by a remote worker hanging or bugs "
              "in the application. Check the logs of the remote worker before reporting an error.")
HOROVOD_SHUT_DOWN = ("horovod.common.exceptions.HorovodInternalError: Horovod has been shut down. This was caused by an "
                     "exception on one of the ranks or an attempt to allreduce, allgather or broadcast a tensor after one "
                     "of the ranks finished execution.")


def _torchrun_summary(rank: int, exitcode: str, traceback: str) -> list[str]:
    other = 1 - rank
    return [
        "E1201 16:56:41.683000 30422 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: "
        f"{exitcode.split()[0]}) local_rank: {rank} (pid: 30460) of binary: /work/main/.venv/bin/python",
        "Traceback (most recent call last):", '  File "/work/main/.venv/bin/torchrun", line 6, in <module>',
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", "=" * 60,
        "xover.runtime.script_shim FAILED", "-" * 60, "Failures:", "[1]:", "  time      : 2026-12-01_16:56:41",
        "  host      : localhost", f"  rank      : {other} (local_rank: {other})",
        "  exitcode  : -15 (pid: 30459)  (SIGTERM)", "  error_file: <N/A>",
        "  traceback : Signal 15 (SIGTERM) received by PID 30459", "-" * 60, "Root Cause (first observed failure):",
        "[0]:", "  time      : 2026-12-01_16:56:41", "  host      : localhost",
        f"  rank      : {rank} (local_rank: {rank})", f"  exitcode  : {exitcode}", "  error_file: <N/A>",
        f"  traceback : {traceback}", "=" * 60,
    ]


def _horovodrun_summary(first: int, code: int) -> list[str]:
    other = 1 - first
    return [
        f"Process {first} exit with status code {code}.", f"Terminating remaining workers after failure of Process {first}.",
        f"[{other}]<stderr>:Terminated", f"Process {other} exit with status code 143.",
        "Traceback (most recent call last):",
        '  File "/work/main/.venv/lib/python3.11/site-packages/horovod/runner/gloo_run.py", line 284, in launch_gloo',
        "    raise RuntimeError('Horovod detected that one or more processes exited with non-zero '",
        "RuntimeError: Horovod detected that one or more processes exited with non-zero status, thus causing the job "
        "to be terminated. The first process to do so was:", f"Process name: {first}", f"Exit code: {code}", "",
    ]


def _torchrun_ranks(tmp_path, **stderr: str) -> None:
    """torchrun's rank logs (ranks/RUN/attempt_0/LOCAL_RANK/stderr.log), rank0's written first."""
    for when, (name, text) in enumerate(sorted(stderr.items())):
        folder = tmp_path / "ranks" / "0d01dec3_125rqcw6" / "attempt_0" / name.removeprefix("rank")
        folder.mkdir(parents=True)
        (folder / "stderr.log").write_text(text)
        os.utime(folder / "stderr.log", (1_000_000 + when, 1_000_000 + when))


def _horovodrun_ranks(tmp_path, **stderr: str) -> None:
    """horovodrun's rank logs (ranks/rank.N/stderr, each line relayed as '[N]<stderr>:'), rank0's written last
    (horovodrun's 'Terminated' after its traceback)."""
    for when, (name, text) in enumerate(sorted(stderr.items(), reverse=True)):
        folder = tmp_path / "ranks" / f"rank.{name.removeprefix('rank')}"
        folder.mkdir(parents=True)
        prefix = f"[{name.removeprefix('rank')}]<stderr>:"
        (folder / "stderr").write_text("".join(f"{prefix}{line}\n" for line in text.splitlines()))
        os.utime(folder / "stderr", (1_000_000 + when, 1_000_000 + when))


def _traceback(rank_prefix: str, last: str) -> str:
    lines = ["Traceback (most recent call last):", '  File "/work/main/xover/runtime/ddp_shim.py", line 262, in wait',
             "    work.wait()  # raises if the all-reduce failed (a peer rank died)", last]
    return "".join(f"{rank_prefix}{line}\n" for line in lines)


def test_torchruns_root_cause_is_blamed_not_a_peers_connection_reset(tmp_path):
    """Rank 1 called os._exit(3) at step 3: its log is empty; rank 0's says 'Connection reset by peer', and was
    blamed ('ddp-exit (crossover, work-conserving) failed: rank 0: RuntimeError: [...] Read error')."""
    from xover.run.record import failure_reason, failure_summary

    _torchrun_ranks(tmp_path, rank0=_traceback("[rank0]: ", GLOO_RESET), rank1="")
    launcher = _torchrun_summary(1, "3 (pid: 30460) ",
                                 "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html")
    (tmp_path / "launcher.log").write_text("\n".join(launcher) + "\n")
    summary = failure_summary(tmp_path, launcher[-2:])
    assert summary == "rank 1:\nexited with code 3, no traceback"
    assert failure_reason(summary) == "rank 1: exited with code 3, no traceback"


def test_a_rank_torchrun_saw_killed_by_a_signal_is_named_with_it(tmp_path):
    from xover.run.record import failure_summary

    closed = GLOO_RESET.replace("Read error [127.0.0.1]:10666: Connection reset by peer", "Connection closed by peer")
    _torchrun_ranks(tmp_path, rank0=_traceback("[rank0]: ", closed), rank1="")
    launcher = _torchrun_summary(1, "-9 (pid: 1340)  (SIGKILL)", "Signal 9 (SIGKILL) received by PID 1340")
    assert failure_summary(tmp_path, launcher) == "rank 1:\nkilled by signal 9 (SIGKILL), no traceback"


def test_the_root_cause_ranks_own_traceback_is_its_summary_without_torchs_prefix(tmp_path):
    from xover.run.record import failure_reason, failure_summary

    _torchrun_ranks(tmp_path, rank0=_traceback("[rank0]: ", GLOO_RESET),
                    rank1=_traceback("[rank1]: ", "RuntimeError: deliberate failure at step 3 on rank 1"))
    launcher = _torchrun_summary(1, "1 (pid: 1672) ",
                                 "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html")
    summary = failure_summary(tmp_path, launcher)
    assert summary.startswith("rank 1:\nTraceback (most recent call last):\n  File ")
    assert "[rank1]" not in summary and summary.endswith("\nRuntimeError: deliberate failure at step 3 on rank 1")
    assert failure_reason(summary) == "rank 1: RuntimeError: deliberate failure at step 3 on rank 1"


def test_a_rank_that_left_early_with_exit_0_is_blamed_not_its_peers_knock_on_error(tmp_path):
    """Rank 1's script called sys.exit(0) after 8 steps while rank 0 went on: no launcher counts its exit as a
    failure, and rank 0's 'Connection closed by peer' was the job's ('rank 0: RuntimeError: [...] Connection
    closed by peer'). The runtime's line on rank 1's stderr names it, the peer's error after it."""
    from xover.records import rank_left_line
    from xover.run.record import failure_reason, failure_summary

    closed = GLOO_RESET.replace("Read error [127.0.0.1]:10666: Connection reset by peer", "Connection closed by peer")
    _torchrun_ranks(tmp_path, rank0=_traceback("[rank0]: ", closed), rank1=rank_left_line(1, 8) + "\n")
    launcher = _torchrun_summary(0, "1 (pid: 1800) ", "To enable traceback see: https://pytorch.org/docs/stable/")
    launcher = launcher[launcher.index("Root Cause (first observed failure):") :]  # no other failures
    summary = failure_summary(tmp_path, launcher)
    assert summary == ("rank 1:\nleft early: its script ended with exit 0 after 8 iterations while its peers still "
                       f"expected it; then rank 0: {closed}")
    assert failure_reason(summary).startswith("rank 1: left early: its script ended with exit 0 after 8 iterations")
    # horovodrun's: rank 0's 'Horovod has been shut down', its first failed process
    _horovodrun_ranks(tmp_path / "horovod", rank0=_traceback("", HOROVOD_SHUT_DOWN), rank1=rank_left_line(1, 8))
    (tmp_path / "horovod" / "launcher.log").write_text("\n".join(_horovodrun_summary(0, 1)))
    assert failure_reason(failure_summary(tmp_path / "horovod", [])).startswith(
        "rank 1: left early: its script ended with exit 0 after 8 iterations while its peers still expected it; "
        "then rank 0: horovod.common.exceptions.HorovodInternalError: Horovod has been shut down.")
    # a rank that ended so but raised too, or a peer with an error of its own, is not what this says
    _torchrun_ranks(tmp_path / "own", rank0=_traceback("[rank0]: ", "RuntimeError: boom"),
                    rank1=rank_left_line(1, 8) + "\n")
    assert failure_summary(tmp_path / "own", launcher).endswith("RuntimeError: boom")


def test_horovodruns_first_process_is_blamed_not_the_peer_it_terminated(tmp_path):
    """Rank 1 SIGKILLed (its log: the shell's 'Killed'), or os._exit(3) (nothing): rank 0's log, written last by
    horovodrun's 'Terminated', was blamed ('rank 0: [0]<stderr>:Terminated')."""
    from xover.run.record import failure_summary

    _horovodrun_ranks(tmp_path, rank0=_traceback("", HOROVOD_SHUT_DOWN) + "Terminated\n", rank1="Killed\n")
    (tmp_path / "launcher.log").write_text("\n".join(_horovodrun_summary(1, 137)))
    assert failure_summary(tmp_path, []) == "rank 1:\nkilled by signal 9 (SIGKILL), no traceback"
    (tmp_path / "ranks" / "rank.1" / "stderr").write_text("")
    (tmp_path / "launcher.log").write_text("\n".join(_horovodrun_summary(1, 3)))
    assert failure_summary(tmp_path, []) == "rank 1:\nexited with code 3, no traceback"


def test_a_rank_that_raised_is_blamed_when_its_peers_knock_on_error_ended_first(tmp_path):
    """Rank 1 raised; rank 0's 'Horovod has been shut down' made it exit first, so horovodrun names rank 0, and
    rank 1 was still ending when horovodrun terminated it: the blame went from run to run to either rank."""
    from xover.run.record import failure_reason, failure_summary

    own = _traceback("", "RuntimeError: deliberate failure at step 3 on rank 1") + "Terminated\n"
    _horovodrun_ranks(tmp_path, rank0=_traceback("", HOROVOD_SHUT_DOWN), rank1=own)
    (tmp_path / "launcher.log").write_text("\n".join(_horovodrun_summary(0, 1)))
    summary = failure_summary(tmp_path, [])
    assert summary.startswith("rank 1:\nTraceback") and "<stderr>" not in summary and "Terminated" not in summary
    assert failure_reason(summary) == "rank 1: RuntimeError: deliberate failure at step 3 on rank 1"
    # horovodrun naming rank 1: the same
    (tmp_path / "launcher.log").write_text("\n".join(_horovodrun_summary(1, 1)))
    assert failure_summary(tmp_path, []) == summary


def test_without_a_launchers_verdict_a_ranks_own_error_comes_before_a_peers_knock_on(tmp_path):
    from xover.run.record import failure_summary

    _torchrun_ranks(tmp_path, rank0=_traceback("[rank0]: ", GLOO_RESET),
                    rank1=_traceback("[rank1]: ", "ValueError: the cause"))
    assert failure_summary(tmp_path, ["no summary"]).startswith("rank 1:")


def test_the_launchers_verdict_is_read_from_its_own_lines_only():
    from xover.run.record import LauncherVerdict, launcher_verdict

    torchrun = _torchrun_summary(1, "-9 (pid: 1340)  (SIGKILL)", "Signal 9 (SIGKILL) received by PID 1340")
    assert launcher_verdict(torchrun) == LauncherVerdict("1", "1", -9)
    assert launcher_verdict(_horovodrun_summary(1, 137)) == LauncherVerdict("1", "1", 137, through_shell=True)
    # horovodrun's process exits, where its RuntimeError did not come (the log cut short)
    assert launcher_verdict(_horovodrun_summary(0, 1)[:4]) == LauncherVerdict("0", "0", 1, through_shell=True)
    # a rank's relayed line is not the launcher's
    assert launcher_verdict(["[0]<stderr>:Process name: 1", "[0]<stderr>:Exit code: 3", "a non-zero exit code."]) is None
    assert launcher_verdict(["Root Cause (first observed failure):", "[0]:", "  exitcode  : 2 (pid: 1)", "="]) is None
    assert LauncherVerdict("1", "1", 137, through_shell=True).how_it_ended() == "killed by signal 9 (SIGKILL)"
    assert LauncherVerdict("1", "1", 137).how_it_ended() == "exited with code 137"
    assert LauncherVerdict("0", "0", -15).how_it_ended() == "killed by signal 15 (SIGTERM)"


def test_horovodruns_zero_padded_rank_folders_are_the_ranks_its_summary_names(tmp_path):
    """From 11 ranks on, horovodrun names the folders rank.00, rank.01, ... and its summary 'Process name: 1': the
    named rank's traceback was not found ('rank 1: exited with code 1, no traceback')."""
    from xover.run.record import failure_summary

    for rank in range(12):
        folder = tmp_path / "ranks" / f"rank.{rank:02d}"
        folder.mkdir(parents=True)
        text = _traceback("", "RuntimeError: deliberate failure on rank 1") if rank == 1 else "Terminated\n"
        (folder / "stderr").write_text(text)
    (tmp_path / "launcher.log").write_text("\n".join(_horovodrun_summary(1, 1)))
    summary = failure_summary(tmp_path, [])
    assert summary.startswith("rank 1:\nTraceback") and summary.endswith("deliberate failure on rank 1"), summary


def test_torchrun_on_two_nodes_blames_the_rank_with_an_error_of_its_own_not_a_local_rank_of_either(tmp_path):
    """Each node's torchrun writes RUN/attempt_0/LOCAL_RANK: the two local ranks 1 were one key (one log lost), and
    the verdict's 'rank: 3 (local_rank: 1)' was looked up as either."""
    from xover.run.record import failure_summary

    for run, text in (("aaaa_1", _traceback("[rank3]: ", "RuntimeError: deliberate failure on rank 3")),
                      ("bbbb_2", _traceback("[rank1]: ", GLOO_RESET))):
        for local in ("0", "1"):
            folder = tmp_path / "ranks" / run / "attempt_0" / local
            folder.mkdir(parents=True)
            (folder / "stderr.log").write_text(text if local == "1" else "")
    launcher = _torchrun_summary(1, "1 (pid: 7) ", "To enable traceback see: https://pytorch.org/docs/stable/")
    summary = failure_summary(tmp_path, launcher)
    assert summary.endswith("RuntimeError: deliberate failure on rank 3"), summary


def test_a_rank_that_died_silently_beside_a_peers_knock_on_root_cause_is_blamed(tmp_path):
    """torchrun counts whole seconds: rank 1's os._exit(3) and rank 0's knock-on exit in one moment can make rank 0
    the root cause, rank 1 listed among the failures with its own code."""
    from xover.run.record import failure_summary

    _torchrun_ranks(tmp_path, rank0=_traceback("[rank0]: ", GLOO_RESET), rank1="")
    launcher = _torchrun_summary(0, "1 (pid: 30459) ", "To enable traceback see: https://pytorch.org/docs/stable/")
    launcher[launcher.index("  exitcode  : -15 (pid: 30459)  (SIGTERM)")] = "  exitcode  : 3 (pid: 30460)"
    assert failure_summary(tmp_path, launcher) == "rank 1:\nexited with code 3, no traceback"
    # a peer torchrun stopped itself (SIGTERM) is not the cause: the root cause stands
    launcher = _torchrun_summary(0, "1 (pid: 30459) ", "To enable traceback see: https://pytorch.org/docs/stable/")
    assert failure_summary(tmp_path, launcher).startswith("rank 0:\nTraceback")


def test_nccls_remote_error_is_a_knock_on_though_its_last_line_does_not_say_exited(tmp_path):
    from xover.run.record import failure_summary

    nccl = ("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, remote process exited or "
            "there was a network error, NCCL version 2.21.5\n"
            "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.")
    _torchrun_ranks(tmp_path, rank0=_traceback("[rank0]: ", nccl),
                    rank1=_traceback("[rank1]: ", "RuntimeError: CUDA out of memory"))
    launcher = _torchrun_summary(0, "1 (pid: 1) ", "To enable traceback see: https://pytorch.org/docs/stable/")
    assert failure_summary(tmp_path, launcher).endswith("RuntimeError: CUDA out of memory")


def test_a_reason_shows_no_terminal_escape_of_the_jobs_stderr():
    """A job's stderr may hold colours or a crafted sequence (a title, a cleared screen); its reason is printed
    on a terminal by `xover report` long after, to whoever reads the record."""
    from xover.report.tables import failure_reason

    error = ("\x1b[31mTraceback\x1b[0m (most recent call last):\n"
             "\x1b]0;pwned title\x07\x1b[2J\x9b1mRuntimeError: \x1b[1mboom\x1b[0m \x07bell\r")
    reason = failure_reason(error)
    assert reason == "RuntimeError: boom \\x07bell", reason
    assert all(char.isprintable() for char in reason)


def test_a_launcher_ended_by_a_signal_before_any_rank_failed_is_named_not_its_banner(tmp_path):
    """A probe, 2026-12-07: torchrun's agent killed by a signal (SIGUSR1) left no rank to blame, and the job's
    error was the last lines of the launcher's log: its start's OMP_NUM_THREADS banner."""
    from xover.run.record import failure_summary

    banner = ["W1207 09:58:31.291000 21529 torch/distributed/run.py:874] *****************************************"]
    assert failure_summary(tmp_path, banner, launcher_code=-10) == (
        "the launcher was killed by signal 10 (SIGUSR1) before any rank failed")
    assert failure_summary(tmp_path, banner, launcher_code=1) == banner[0]  # an exit of its own: its last lines


def test_a_rank_that_exits_with_its_reason_on_stderr_and_no_traceback_is_summarised_with_that_reason(tmp_path):
    """`raise SystemExit("bad config: ...")` prints its message on stderr and exits with code 1, no traceback: the
    job's error said only 'exited with code 1, no traceback' (a probe session, 2026-12-07)."""
    import subprocess

    from xover.run.record import failure_reason, failure_summary

    script = tmp_path / "bad_config.py"
    script.write_text('raise SystemExit("bad config: --lr must be positive, got -1")\n')
    ended = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=False)
    assert ended.returncode == 1 and "Traceback" not in ended.stderr  # what Python does with it
    _torchrun_ranks(tmp_path, rank0="", rank1=ended.stderr)
    launcher = _torchrun_summary(1, "1 (pid: 30460) ",
                                 "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html")
    summary = failure_summary(tmp_path, launcher)
    assert summary == ("rank 1:\nexited with code 1, no traceback; its stderr ended:\n"
                       "bad config: --lr must be positive, got -1"), summary
    assert failure_reason(summary) == "rank 1: bad config: --lr must be positive, got -1"
    # horovodrun's: the same, its shell's note ('Terminated') left out
    _horovodrun_ranks(tmp_path / "horovod", rank0="Terminated\n", rank1=ended.stderr + "Terminated\n")
    (tmp_path / "horovod" / "launcher.log").write_text("\n".join(_horovodrun_summary(1, 1)))
    assert failure_summary(tmp_path / "horovod", []) == summary
