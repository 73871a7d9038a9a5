"""Starts a process in a session of its own (which no launcher stops), then exits at once."""
import subprocess

subprocess.Popen(["sleep", "300"], start_new_session=True, stdin=subprocess.DEVNULL,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
