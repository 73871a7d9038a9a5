"""horovodrun's ranks' command lines hold no secret of the caller's environment (issue 52, finding 4)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

SECRET = "sekrit-52-horovod-pw"


def _command_lines() -> list[str]:
    lines = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                lines.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
            except OSError:
                pass
    return lines


def test_no_password_of_the_callers_environment_on_a_ranks_command_line(isolated_results):
    """Before: horovodrun got all of os.environ and wrote each variable into its ranks' `K=V ...`
    command lines, so PGPASSWORD (and AWS_*, tokens) showed in `ps` for every user of the host."""
    env = {**os.environ, "PGPASSWORD": SECRET, "AWS_SECRET_ACCESS_KEY": SECRET + "-aws"}
    run = subprocess.Popen([sys.executable, "-m", "xover", "train", "mlp-digits", "--iterations", "20", "--json"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    seen: set[str] = set()
    ranks_seen = 0
    while run.poll() is None:
        lines = _command_lines()
        ranks_seen += any("xover.runtime.worker" in line for line in lines)
        seen |= {line[:300] for line in lines if SECRET in line and "-m xover train" not in line}
        time.sleep(0.05)
    out, err = run.communicate()
    assert run.returncode == 0, err[-3000:]
    assert ranks_seen, "never saw a rank running: the test looked at nothing"
    assert not seen, seen
