"""Real services for the tests: a single-node Slurm cluster (scripts/slurm.sh), a PostgreSQL
server in a folder of its own (scripts/postgres.sh), and Prometheus servers (Debian's `prometheus`,
scripts/setup_prometheus.sh) scraping targets a test names.

Slurm and PostgreSQL are module-scoped: started once for the test module that asks for them and torn
down after it, also when a test fails; a Prometheus server lives for one test. A cluster that was
already up before (someone ran `scripts/slurm.sh up`) is used and left up. Where a service cannot be
set up here (not root, no apt, no `prometheus`), its tests skip, except under CI=true, where they fail:
CI must never pass by not testing.
Load with `pytest_plugins = ["tests.fixtures_services"]` or by importing the fixtures.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
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
        done = subprocess.run(["bash", *map(str, args)], capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as expired:
        return subprocess.CompletedProcess(expired.cmd, 124, "", f"timed out after {timeout_s:.0f} s")
    if "command not found" in done.stderr:
        # a set-up script calling a function it lost still "works" under `if` (slurm.sh did for six days):
        # counted as a failure, so that the service is reported unavailable (a failure under CI=true)
        return subprocess.CompletedProcess(done.args, done.returncode or 127, done.stdout, done.stderr)
    return done


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


# ---------------------------------------------------------------------------------------------
# Prometheus
# ---------------------------------------------------------------------------------------------

PROMETHEUS_READY_S = 60  # a first start on a busy 2-core machine included
SCRAPE_CONFIG = """global:
  scrape_interval: {interval}
  scrape_timeout: {interval}
  evaluation_interval: {interval}
scrape_configs:
  - job_name: {job}
    honor_labels: {honor_labels}
    static_configs:
      - targets: {targets}
"""
# the turn servers a run's exporter lists while they serve (xover/run/exporter.py, /targets)
HTTP_SD_CONFIG = """    http_sd_configs:
      - url: {url}
        refresh_interval: {interval}
"""
# what docs/reference.md tells Prometheus for xover's endpoints: HTTPS with the certificate of the user's
# metrics credentials (checked for its name) and their bearer token; for the scrapes and for /targets alike
XOVER_ACCESS = """{indent}scheme: https
{indent}tls_config:
{indent}  ca_file: {folder}/tls.crt
{indent}  server_name: xover-metrics
{indent}authorization:
{indent}  type: Bearer
{indent}  credentials_file: {folder}/token
"""


@dataclass(frozen=True)
class PrometheusServer:
    """A running `prometheus` of one test: its HTTP API at `url`, its config and storage in `directory`."""

    url: str  # http://127.0.0.1:PORT
    directory: Path
    process: subprocess.Popen
    namespace: str | None = None  # the network namespace it runs in (an emulated cluster's head)

    def api(self, path: str, **params: str) -> dict | list:
        """GET /api/v1/PATH?params; the answer's `data`, or an AssertionError with Prometheus' own error."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        body = json.loads(_get(f"{self.url}/api/v1/{path}{query}", self.namespace))
        assert body.get("status") == "success", f"Prometheus /api/v1/{path}: {body}"
        return body["data"]

    def query(self, expr: str) -> list[dict]:
        """An instant query: [{"metric": {label: value}, "value": [time, "text"]}, ...]."""
        data = self.api("query", query=expr)
        assert isinstance(data, dict)
        return data["result"]

    def wait_for(self, expr: str, until: Callable[[list[dict]], bool] = bool, timeout_s: float = 30) -> list[dict]:
        """Query `expr` until `until(result)` holds (default: any series); an AssertionError after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        result: list[dict] = []
        while time.monotonic() < deadline:
            result = self.query(expr)
            if until(result):
                return result
            time.sleep(0.25)
        targets = self.api("targets")
        # every target ever scraped, with its best health and its slowest scrape: one gone since (a turn
        # server of a run that ended) is no more among the active targets
        scraped = {s["metric"]["instance"]: s["value"][1] for s in self.query("max_over_time(up[1h])")}
        slowest = {s["metric"]["instance"]: s["value"][1]
                   for s in self.query("max_over_time(scrape_duration_seconds[1h])")}
        raise AssertionError(f"{expr} did not come within {timeout_s:.0f} s; last result {result}; targets "
                             f"{[(t['scrapeUrl'], t['health'], t['lastError']) for t in targets['activeTargets']]}; "
                             f"ever scraped (best up) {scraped}; slowest scrape (s) {slowest}")


def _free_loopback_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _get(url: str, namespace: str | None = None, timeout_s: float = 10) -> str:
    """The body of a GET (an HTTP error's too); from inside `namespace` where one is given. OSError if none came."""
    if namespace is not None:
        fetched = subprocess.run(["ip", "netns", "exec", namespace, "curl", "-sS", "--max-time", str(timeout_s), url],
                                 capture_output=True, text=True, timeout=timeout_s + 30)
        if fetched.returncode != 0:
            raise OSError(fetched.stderr.strip())
        return fetched.stdout
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as answer:
            return answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.read().decode()


def _ready(url: str, namespace: str | None = None) -> bool:
    try:
        return "Ready" in _get(f"{url}/-/ready", namespace, timeout_s=2)
    except (OSError, subprocess.TimeoutExpired):
        return False


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def start_prometheus(directory: Path, targets: list[str], job: str = "xover", interval: str = "1s",
                     honor_labels: bool = False, http_sd: str | None = None,
                     namespace: str | None = None, xover: Path | None = None) -> PrometheusServer:
    """Debian's `prometheus` on a free loopback port, scraping `targets` ("host:port") every `interval`,
    with its storage in `directory`; returns once it answers /-/ready. `honor_labels`: a target's own
    `job` and `instance` labels win over the scrape's (xover's exporter labels its series by job).
    `http_sd`: also the targets this URL lists (Prometheus' HTTP service discovery), asked every `interval`.
    `namespace`: run inside that network namespace (its loopback, its names), as root. `xover`: the folder
    of xover's metrics credentials, which the scrapes and the discovery then use as docs/reference.md says
    (HTTPS, the certificate pinned, the bearer token); None: plain HTTP, to a target of another kind."""
    binary = shutil.which("prometheus")
    if binary is None:
        service_unavailable("Prometheus", "no `prometheus` on PATH (scripts/setup_prometheus.sh installs Debian's)")
    config = directory / "prometheus.yml"
    text = SCRAPE_CONFIG.format(interval=interval, job=job, targets=json.dumps(targets),
                                honor_labels=str(honor_labels).lower())
    if xover is not None:
        from xover.turns.credentials import credentials_folder, metrics_credentials

        if xover == credentials_folder():
            metrics_credentials()  # made now if missing, as a first run would: Prometheus reads them at its start
        text += XOVER_ACCESS.format(indent="    ", folder=xover)
    if http_sd is not None:
        text += HTTP_SD_CONFIG.format(url=json.dumps(http_sd), interval=interval)
        if xover is not None:
            text += XOVER_ACCESS.format(indent="        ", folder=xover).replace("        scheme: https\n", "")
    config.write_text(text)
    log = directory / "prometheus.log"
    prefix = ["ip", "netns", "exec", namespace] if namespace is not None else []
    for _ in range(3):  # another process may take the free port between choosing it and prometheus binding it
        port = _free_loopback_port()
        url = f"http://127.0.0.1:{port}"
        with log.open("w") as output:
            process = subprocess.Popen([*prefix, binary, f"--config.file={config}",
                                        f"--storage.tsdb.path={directory / 'data'}",
                                        f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                                       stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + PROMETHEUS_READY_S
        while process.poll() is None and time.monotonic() < deadline and not _ready(url, namespace):
            time.sleep(0.2)
        if process.poll() is None and _ready(url, namespace):
            return PrometheusServer(url=url, directory=directory, process=process, namespace=namespace)
        _stop(process)
        if "address already in use" not in log.read_text():
            break
    service_unavailable("Prometheus", f"prometheus did not become ready: {log.read_text()}")
    raise AssertionError("unreachable")


@pytest.fixture
def prometheus(tmp_path) -> Iterator[Callable[..., PrometheusServer]]:
    """Start a Prometheus server with `prometheus(["127.0.0.1:PORT", ...])` (optionally `job=`, `interval=`,
    `honor_labels=`, `http_sd=URL`, `namespace=`, `xover=` the folder of xover's metrics credentials):
    a real one, on a free loopback port, with the given scrape targets and its storage under the test's
    tmp_path; every one started is stopped when the test ends. No `prometheus` here: skip, or fail under CI=true."""
    started: list[PrometheusServer] = []

    def start(targets: list[str], job: str = "xover", interval: str = "1s", honor_labels: bool = False,
              http_sd: str | None = None, namespace: str | None = None,
              xover: Path | None = None) -> PrometheusServer:
        directory = tmp_path / f"prometheus-{len(started)}"
        directory.mkdir()
        server = start_prometheus(directory, targets, job, interval, honor_labels, http_sd, namespace, xover)
        started.append(server)
        return server

    try:
        yield start
    finally:
        for server in started:
            _stop(server.process)
