"""Starts a process in a session of its own (which no launcher stops), then exits at once."""
import subprocess

import horovod.torch  # noqa: F401 - a Horovod script: `xover run --script` finds its engine from this

subprocess.Popen(["sleep", "300"], start_new_session=True, stdin=subprocess.DEVNULL,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
