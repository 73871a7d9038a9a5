"""Checking that secrets reach the ranks and nothing another user reads (issue 58): job files whose
script fails unless its variables reached every rank with their values, an `env` first on PATH that
records the rank command lines horovodrun starts, and looks at every command line, file and private file."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SETTING = "kx7-literal-setting-value"  # a job file's `env` value
ARGUMENT = "kx7-argument-key-value"  # a credential among a script's own options
# a Horovod script that fails unless its variables reached it with their values (it is given their hashes)
HOROVOD_SCRIPT = '''
import hashlib, os, re, sys
import horovod.torch as hvd
import torch
from torch import nn

hvd.init()
for pair in [arg for arg in sys.argv[1:] if re.fullmatch("[A-Z_]+=[0-9a-f]{64}", arg)]:  # its own options aside
    name, digest = pair.split("=")
    value = os.environ.get(name)
    if value is None or hashlib.sha256(value.encode()).hexdigest() != digest:
        sys.exit(f"rank {hvd.rank()}: {name} did not reach me")
torch.manual_seed(1)
torch.set_num_threads(1)
model = nn.Linear(8, 2)
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                     named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
for step in range(6):
    optimizer.zero_grad()
    model(torch.randn(4, 8)).sum().backward()
    optimizer.step()
'''

DDP_SCRIPT = '''
import hashlib, os, re, sys
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("gloo")
for pair in [arg for arg in sys.argv[1:] if re.fullmatch("[A-Z_]+=[0-9a-f]{64}", arg)]:  # its own options aside
    name, digest = pair.split("=")
    value = os.environ.get(name)
    if value is None or hashlib.sha256(value.encode()).hexdigest() != digest:
        sys.exit(f"rank {dist.get_rank()}: {name} did not reach me")
torch.manual_seed(1)
torch.set_num_threads(1)
model = DistributedDataParallel(nn.Linear(8, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(6):
    optimizer.zero_grad()
    model(torch.randn(4, 8)).sum().backward()
    optimizer.step()
dist.destroy_process_group()
'''
SCRIPTS = {"horovod": HOROVOD_SCRIPT, "torch": DDP_SCRIPT}


def digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def logging_env(folder: Path) -> tuple[Path, Path]:
    """A folder holding an `env` that writes its arguments to a log, then is /usr/bin/env: first on PATH,
    it records every rank command line horovodrun starts on this host (`env K=V ... python ...`)."""
    folder.mkdir()
    log = folder / "argv.log"
    wrapper = folder / "env"
    wrapper.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> {log}\nexec /usr/bin/env "$@"\n')
    wrapper.chmod(0o755)
    return folder, log


def job_file(folder: Path, name: str, body: str, checks: dict[str, str], engine: str = "horovod",
             options: tuple[str, ...] = ()) -> Path:
    """A job file `name` of `engine` running its script of SCRIPTS, which checks that each variable of
    `checks` reached each rank with its value; `options`: more arguments of the script (it ignores them)."""
    (folder / f"check_env_{engine}.py").write_text(SCRIPTS[engine])
    args = json.dumps([f"{key}={digest(value)}" for key, value in checks.items()] + list(options))
    path = folder / f"{name}.toml"
    path.write_text(f'name = "{name}"\nscript = "check_env_{engine}.py"\nengine = "{engine}"\nnp = 2\n'
                    f'args = {args}\n{body}')
    return path


def command_lines() -> list[str]:
    lines = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                lines.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
            except OSError:
                pass
    return lines


def run_watching_command_lines(args: list[str], env: dict[str, str], values: list[str]) -> tuple[
        subprocess.CompletedProcess, list[str]]:
    """xover ARGS, its output, and every command line seen (polling /proc) that held one of `values`."""
    run = subprocess.Popen([sys.executable, "-m", "xover", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, env=env)
    seen: set[str] = set()
    while run.poll() is None:
        seen |= {line[:300] for line in command_lines() if any(value in line for value in values)}
        time.sleep(0.05)
    out, err = run.communicate()
    return subprocess.CompletedProcess(run.args, run.returncode, out, err), sorted(seen)


def files_holding(folder: Path, values: list[str]) -> list[str]:
    """Every file under `folder` whose bytes hold one of `values`."""
    return [str(path) for path in folder.rglob("*")
            if path.is_file() and any(value.encode() in path.read_bytes() for value in values)]


def private_files_holding(value: str) -> list[str]:
    """Files of private variables left in the temporary folder that still hold `value`."""
    folder = Path(tempfile.gettempdir())
    return [str(p) for p in folder.glob("xover-env-*") if p.is_file() and value in p.read_text(errors="replace")]


PASSED = "kx7-passed-token-value"  # a value of xover's environment a job file passes by name
