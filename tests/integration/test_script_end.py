"""What a rank does at a script's end and xover's own output at a hang-up, with real processes: a review and a probe
of 2026-12-06 (runtime/script_shim.py, stop_signals.py, streams.py)."""

import gzip
import os
import pty
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

LEFT_OPEN = """
import gc, gzip, os, sys
zipped = gzip.open(sys.argv[1], "wt")  # a wrapper of a file it opened itself: its trailer must come first
zipped.write("hello\\n" * 1000)
log = open(sys.argv[2], "w")
log.write("kept\\n")
class Cycle:
    pass
held = Cycle()
held.me, held.file = held, open(sys.argv[3], "w")  # garbage in a cycle, as a script's module is at its end
held.file.write("in a cycle\\n")
del held
mine = open(1, "w", closefd=False)  # the rank's own stdout under another name: never closed
gc.disable()
from xover.runtime.worker import exit_without_teardown
from xover.runtime.script_shim import finalize_what_the_script_left
print("buffered before the end", end="")
exit_without_teardown(finalize=finalize_what_the_script_left)
"""


def test_files_a_script_left_open_are_written_out_at_its_end_wrappers_first(tmp_path):
    files = [tmp_path / "z.gz", tmp_path / "log.txt", tmp_path / "cycle.txt"]
    done = subprocess.run([sys.executable, "-c", LEFT_OPEN, *map(str, files)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "buffered before the end"
    assert gzip.decompress(files[0].read_bytes()).decode() == "hello\n" * 1000
    assert files[1].read_text() == "kept\n" and files[2].read_text() == "in a cycle\n"


HUNG_UP = """
import signal, sys
from xover.stop_signals import leave_a_closed_terminal  # as xover starts: its output is a terminal
print("ready", flush=True)
sys.stdin.readline()  # the terminal has hung up by now
leave_a_closed_terminal(signal.SIGHUP)
print("said after the hang-up", flush=True)
sys.stderr.write("a note\\n")
sys.stderr.flush()
open(sys.argv[1], "w").write("done")
"""


def test_a_hang_up_points_output_at_a_terminal_that_is_gone_at_nothing(tmp_path):
    """A review (2026-12-06): once a terminal hangs up its descriptors are terminals no more, so the hang-up's
    handler, which asked then, left them: every line said after it failed (EIO), the clean-up's too."""
    master, slave = pty.openpty()
    errors = open(tmp_path / "errors", "w")  # noqa: SIM115 - the child's; read below
    child = subprocess.Popen([sys.executable, "-c", HUNG_UP, str(tmp_path / "done")], cwd=ROOT,
                             stdin=subprocess.PIPE, stdout=slave, stderr=errors)
    os.close(slave)
    said = b""
    while b"ready\r\n" not in said:  # its line's end too: the line may come in two writes
        said += os.read(master, 100)
    os.close(master)  # the terminal goes
    child.communicate(b"go\n", timeout=120)
    errors.close()
    assert child.returncode == 0, (tmp_path / "errors").read_text()
    assert (tmp_path / "done").read_text() == "done"


def test_a_stderr_that_cannot_be_written_drops_the_notes_and_the_command_goes_on():
    """A review (2026-12-06): a failed write to stderr ended the command (exit 2) where a note, a library's
    warning or a progress bar was all it lost."""
    program = ("from xover.streams import guard_streams\nguard_streams()\nimport sys, warnings\n"
               "sys.stderr.write('x' * 100000)\nsys.stderr.flush()\nwarnings.warn('a library says')\n"
               "print('the output', flush=True)\n")
    with open(os.devnull, "w") as _, open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-c", program], cwd=ROOT, stdout=subprocess.PIPE, stderr=full,
                              text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, "the output\n")
