"""What the bench scripts share: calling the real `xover` command and reading its JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def xover(*args: str, env: dict[str, str] | None = None, timeout: int = 3600) -> dict:
    """Run `xover COMMAND --json ARGS` from the repository's venv (--json before ARGS: a script's own
    arguments come last, after `--`); stop the bench with its stderr if it fails. `env` adds variables
    for this one call (shown in the echoed command)."""
    shown = " ".join(f"{k}={v}" for k, v in (env or {}).items())
    print(f"$ {shown + ' ' if shown else ''}xover", " ".join(args), flush=True)
    result = subprocess.run(
        [str(ROOT / ".venv/bin/xover"), args[0], "--json", *args[1:]],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
    if result.returncode != 0:
        sys.exit(result.stderr[-4000:])
    return json.loads(result.stdout)


def add_pair_arguments(parser, pairs: list[str], rounds: int) -> None:
    """The options of a bench that runs pairs of recipes in rounds (ablation.py, thread_policy.py)."""
    parser.add_argument("--pairs", nargs="+", default=pairs, help="pairs of recipes, A:B")
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--engine", default="horovod", choices=["horovod", "torch"])
    parser.add_argument("--seconds", type=float, default=15.0, help="each job's length (xover run --seconds)")
    parser.add_argument("--bandwidth", default="1gbit")


def profiled_pairs(parser, args) -> list[list[str]]:
    """--pairs as [A, B] lists (a usage error otherwise), once their recipes have profiles: the turn
    policy's orders come from them (stored ones are reused)."""
    pairs = [p.split(":") for p in args.pairs]
    if any(len(p) != 2 or not all(p) for p in pairs):
        parser.error(f"--pairs: expected A:B, got {' '.join(args.pairs)}")
    xover(
        "profile",
        *sorted({name for pair in pairs for name in pair}),
        "--engine",
        args.engine,
        "--bandwidth",
        args.bandwidth,
    )
    return pairs
