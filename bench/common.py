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
    result = subprocess.run([str(ROOT / ".venv/bin/xover"), args[0], "--json", *args[1:]], capture_output=True, text=True,
                            cwd=ROOT, timeout=timeout, env={**os.environ, **(env or {})})
    if result.returncode != 0:
        sys.exit(result.stderr[-4000:])
    return json.loads(result.stdout)
