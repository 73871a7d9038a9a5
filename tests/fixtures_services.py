"""Real services for the tests: a single-node Slurm cluster (scripts/slurm.sh) and a PostgreSQL
server in a folder of its own (scripts/postgres.sh).

Both are module-scoped: started once for the test module that asks for them and torn down after it,
also when a test fails. A cluster that was already up before (someone ran `scripts/slurm.sh up`)
is used and left up. Where a service cannot be set up here (not root, no apt), its tests skip,
except under CI=true, where they fail: CI must never pass by not testing.
Load with `pytest_plugins = ["tests.fixtures_services"]` or by importing the fixtures.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SLURM_SH = ROOT / "scripts" / "slurm.sh"
POSTGRES_SH = ROOT / "scripts" / "postgres.sh"
SET_UP_TIMEOUT_S = 900  # a first apt-get install on a fresh machine included


def service_unavailable(what: str, detail: str) -> None:
    message = f"{what} could not be set up here: {detail.strip()[-2000:]}"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{message} (CI=true: this is a failure, not a skip)", pytrace=False)
    pytest.skip(message)


def _script(*args: str | Path, timeout_s: float = SET_UP_TIMEOUT_S) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["bash", *map(str, args)], capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as expired:
        return subprocess.CompletedProcess(expired.cmd, 124, "", f"timed out after {timeout_s:.0f} s")


# ---------------------------------------------------------------------------------------------
# Slurm
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SlurmCluster:
    conf: Path  # SLURM_CONF: what sbatch, scontrol, ... read to find this cluster
    node: str  # the one node (this machine's short hostname)
    cpus: int  # its CPUs as Slurm counts them
    directory: Path

    @property
    def confines_cores(self) -> bool:
        """Jobs see only their cores (cgroups work here, so slurm.sh configured them)."""
        return "ProctrackType=proctrack/cgroup" in self.conf.read_text()


@pytest.fixture(scope="module")
def slurm_cluster():
    """A running single-node Slurm cluster; SLURM_CONF points the clients at it while the module runs."""
    if os.geteuid() != 0:
        service_unavailable("Slurm", "scripts/slurm.sh needs root (it starts munged, slurmctld and slurmd)")
    already_up = _script(SLURM_SH, "status", timeout_s=60).returncode == 0
    started = _script(SLURM_SH, "up")
    if started.returncode != 0:
        if not already_up:
            _script(SLURM_SH, "down", timeout_s=120)  # whatever half of it did start
        service_unavailable("Slurm", started.stderr or started.stdout)
    conf = Path(_script(SLURM_SH, "env", timeout_s=10).stdout.strip().split("=", 1)[1])
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SLURM_CONF", str(conf))
        try:
            node = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True,
                                  timeout=30, check=True).stdout.split()[0]
            cpus = int(subprocess.run(["sinfo", "-h", "-N", "-n", node, "-o", "%c"], capture_output=True,
                                      text=True, timeout=30, check=True).stdout.split()[0])
            yield SlurmCluster(conf=conf, node=node, cpus=cpus, directory=conf.parent)
        finally:
            if not already_up:
                stopped = _script(SLURM_SH, "down", timeout_s=180)
                assert stopped.returncode == 0, f"scripts/slurm.sh down failed: {stopped.stderr}"


# ---------------------------------------------------------------------------------------------
# PostgreSQL
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PostgresServer:
    url: str  # SQLAlchemy URL of its database `xover`
    directory: Path

    def url_of(self, database: str) -> str:
        return self.url.replace("@/xover?", f"@/{database}?", 1)

    def new_database(self) -> str:
        """A fresh, empty database on this server; returns its SQLAlchemy URL."""
        from sqlalchemy import create_engine, text

        name = f"xover_{uuid.uuid4().hex[:12]}"
        engine = create_engine(self.url, isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as connection:
                connection.execute(text(f'CREATE DATABASE "{name}"'))
        finally:
            engine.dispose()
        return self.url_of(name)


@pytest.fixture(scope="module")
def postgres_server():
    """A PostgreSQL server started for this module in a temporary folder (unix socket only)."""
    # under /tmp rather than pytest's tmp_path: the `postgres` user must be able to enter the folder
    directory = Path(tempfile.mkdtemp(prefix="xover-pg-"))
    try:
        started = _script(POSTGRES_SH, "up", directory)
        if started.returncode != 0:
            service_unavailable("PostgreSQL", started.stderr or started.stdout)
        yield PostgresServer(url=started.stdout.strip().splitlines()[-1], directory=directory)
    finally:
        stopped = _script(POSTGRES_SH, "down", directory, timeout_s=120)
        assert stopped.returncode == 0 and not directory.exists(), f"scripts/postgres.sh down failed: {stopped.stderr}"


@pytest.fixture
def postgres_url(postgres_server) -> str:
    """A fresh database for one test."""
    return postgres_server.new_database()
