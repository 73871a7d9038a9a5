"""A job file's variables and the run's metric token reach the ranks, and nothing another user can read
holds their values: no command line (`ps`), no file of the run, the store or MLflow (issue 58)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

SETTING = "kx7-literal-setting-value"  # a job file's `env` value
# a Horovod script that fails unless its variables reached it with their values (it is given their hashes)
HOROVOD_SCRIPT = '''
import hashlib, os, sys
import horovod.torch as hvd
import torch
from torch import nn

hvd.init()
for pair in sys.argv[1:]:
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


def job_file(folder: Path, name: str, body: str, checks: dict[str, str]) -> Path:
    """A Horovod job file `name` running HOROVOD_SCRIPT, which checks each variable of `checks` has its value."""
    (folder / "check_env.py").write_text(HOROVOD_SCRIPT)
    args = json.dumps([f"{key}={digest(value)}" for key, value in checks.items()])
    path = folder / f"{name}.toml"
    path.write_text(f'name = "{name}"\nscript = "check_env.py"\nengine = "horovod"\nnp = 2\nargs = {args}\n{body}')
    return path


def private_files_holding(value: str) -> list[str]:
    """Files of private variables left in the temporary folder that still hold `value`."""
    folder = Path(tempfile.gettempdir())
    return [str(p) for p in folder.glob("xover-env-*") if p.is_file() and value in p.read_text(errors="replace")]


def test_a_job_files_variables_reach_horovod_ranks_through_no_command_line(isolated_results):
    """Finding 4 (for Horovod, onto `ps`). Before: horovodrun wrote each of a job file's `env` variables
    into its ranks' command lines (`env MY_SETTING=... python ...`), which every user of the host reads."""
    work = isolated_results / "work"
    work.mkdir()
    path_folder, log = logging_env(isolated_results / "bin")
    job = job_file(work, "env-check", f'env = {{ MY_SETTING = "{SETTING}" }}\n', {"MY_SETTING": SETTING})
    env = {**os.environ, "PATH": f"{path_folder}{os.pathsep}{os.environ['PATH']}"}
    run = subprocess.run([sys.executable, "-m", "xover", "train", str(job), "--json"], capture_output=True,
                         text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    started = log.read_text().splitlines()
    assert len([line for line in started if "HOROVOD_RANK=" in line]) == 2, started  # both ranks seen
    assert not [line for line in started if SETTING in line], started
    assert not private_files_holding(SETTING)  # each host's file is removed by its last rank


def test_the_metric_token_reaches_horovod_ranks_through_no_command_line(isolated_results):
    """Low finding: the metric token. Before: XOVER_METRIC_TOKEN was on horovodrun's rank command lines, so
    any user of the host could read it and forge the run's records."""
    path_folder, log = logging_env(isolated_results / "bin")
    env = {**os.environ, "PATH": f"{path_folder}{os.pathsep}{os.environ['PATH']}"}
    run = subprocess.run([sys.executable, "-m", "xover", "train", "mlp-digits", "--iterations", "8", "--json"],
                         capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    [job] = json.loads(run.stdout)["jobs"]
    assert job["iterations"] == 8  # records carry the token: it reached the ranks
    started = log.read_text().splitlines()
    assert len([line for line in started if "HOROVOD_RANK=" in line]) == 2, started
    assert not [line for line in started if "XOVER_METRIC_TOKEN" in line], started
