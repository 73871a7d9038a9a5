"""Prints bytes that are not UTF-8 (as a buggy progress bar or a binary dump might), then exits."""
import sys

import horovod.torch  # noqa: F401 - a Horovod script: `xover run --script` finds its engine from this

for step in range(3):
    sys.stdout.buffer.write(b"step %d \xff\xfe\x80 garbage\n" % step)
    sys.stdout.flush()
sys.stdout.buffer.write(b"no newline at the end \xc3")
sys.stdout.flush()
