"""Ctrl-C landing inside a run's store writes: how many interrupts are raised, and how many are lost.

Each trial writes to a real store (SQLite, a Recorder's transactions, as a run's metric batches are written)
in a loop inside `interruptible()`, and a real SIGINT reaches the process at a random instant (0.5-20 ms
in). The interrupt should come out as `Interrupted`; a lost one (the loop runs on to its end) is a run that
goes on and ignores the next Ctrl-C too (docs/measurements.md, 2026-11-29: an interrupt inside a store write).

    .venv/bin/python bench/interrupt_write.py [--trials 1500] [--seed 1]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import tempfile
import threading
import time
from pathlib import Path

from xover.run.record import Recorder
from xover.run.supervise import interruptible
from xover.store.session import open_store

TRIAL_S = 2.0  # how long a trial writes if no interrupt comes out: far past the last signal (20 ms)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=1500)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    random.seed(args.seed)
    with tempfile.TemporaryDirectory() as folder:
        store = open_store(str(Path(folder) / "xover.db"))
        recorder = Recorder(store, "interrupts")
        recorder.open("run", "bench/interrupt_write.py", None, None)
        outcomes: dict[str, int] = {}
        for trial in range(args.trials):
            timer = threading.Timer(random.uniform(0.0005, 0.02), os.kill, (os.getpid(), signal.SIGINT))
            end = time.monotonic() + TRIAL_S
            try:
                with interruptible():
                    timer.start()
                    while time.monotonic() < end:
                        recorder.finish("running")
                outcome = "lost"
            except BaseException as error:  # noqa: BLE001 - what the interrupt came out as is the measurement
                outcome = type(error).__name__
            timer.join()
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            if (trial + 1) % 250 == 0:
                print(f"{trial + 1} trials: {outcomes}", flush=True)
        store.close()
    counted = ", ".join(f"{outcome} {count}" for outcome, count in outcomes.items())
    print(f"interrupts inside store writes, {args.trials} trials: {counted}")


if __name__ == "__main__":
    main()
