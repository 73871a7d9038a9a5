"""Two real `xover train` processes recording into one PostgreSQL store (scripts/postgres.sh: a server in a
temporary folder; the store's own tests: tests/integration/test_postgres.py)."""

from fixtures_services import postgres_server, postgres_url  # noqa: F401  (fixtures)

from xover.analysis import experiment_jobs
from xover.store.session import open_store


def test_two_xover_processes_record_into_one_postgresql_store(postgres_url, isolated_results):  # noqa: F811
    """Two real `xover train` processes started together on one PostgreSQL database: both open and
    migrate it and record their experiments at once, the second waits for the device lease and then
    writes its runs and metrics; `xover report` reads both back. (Many processes writing runs at
    the same instant: test_processes_open_a_new_database_and_write_runs_at_once.)"""
    import json
    import subprocess
    import sys

    def train():
        return subprocess.Popen([sys.executable, "-m", "xover", "--db", postgres_url, "train", "mlp-digits", "--np", "1",
                                 "--iterations", "30", "--wait", "--json"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    first, second = train(), train()
    outputs = [process.communicate(timeout=300) for process in (first, second)]
    assert [first.returncode, second.returncode] == [0, 0], [err[-2000:] for _, err in outputs]
    experiments = {json.loads(out)["experiment"] for out, _ in outputs}
    store = open_store(postgres_url)
    with store.session() as session:
        for experiment in experiments:
            [job] = experiment_jobs(session, experiment)
            assert job["status"] == "finished" and job["iterations"] == 30
    store.close()
    report = subprocess.run([sys.executable, "-m", "xover", "--db", postgres_url, "report", "all", "--format", "json"],
                            capture_output=True, text=True, timeout=120)
    assert report.returncode == 0, report.stderr
    assert experiments <= {e["id"] for e in json.loads(report.stdout)["experiments"]}
