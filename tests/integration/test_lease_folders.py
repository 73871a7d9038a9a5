"""Runs that lease their devices in different folders (XOVER_LEASE_DIR) do not see each other's leases: the store
they share tells them apart (run/record.py: `running_on`, `beside_on_devices`), on a real SQLite store."""

from datetime import datetime, timedelta

from xover.run.record import beside_on_devices, owner_identity, run_devices, running_on
from xover.store.models import Experiment, RecipeSnapshot, Run
from xover.store.session import open_store

T0 = datetime(2026, 1, 1, 12, 0)


def _experiment(session, experiment_id, status, runs, owner=None):
    """An experiment of this machine's xover (`owner`: host, pid, start; default this process) with `runs`: each
    (devices, hosts, start minute, end minute or None)."""
    host, pid, started = owner or owner_identity()
    session.add(Experiment(id=experiment_id, kind="run", command="xover run", status=status, owner_host=host,
                           owner_pid=pid, owner_started=started, created_at=T0))
    recipe = session.query(RecipeSnapshot).first()
    for devices, hosts, start, end in runs:
        session.add(Run(experiment_id=experiment_id, recipe_id=recipe.id, name="a", mode="crossover", hosts=hosts,
                        np=2, devices=devices, status="running" if end is None else "finished",
                        started_at=T0 + timedelta(minutes=start),
                        ended_at=None if end is None else T0 + timedelta(minutes=end)))


def test_a_run_beside_another_on_its_devices_is_told_apart_from_one_on_other_devices_or_at_another_time(tmp_path):
    store = open_store(str(tmp_path / "x.db"))
    with store.session() as session, session.begin():
        session.add(RecipeSnapshot(name="a", hash="h", path="a.toml", body={}))
        session.flush()
        _experiment(session, "ours", "finished", [("0,1", "localhost:2", 0, 10)])
        _experiment(session, "beside", "finished", [("1", "localhost:1", 5, 20)])  # device 1, minutes 5-20
        _experiment(session, "before", "finished", [("0,1", "localhost:2", -20, -1)])
        _experiment(session, "elsewhere", "finished", [("2,3", "localhost:2", 0, 10)])
        _experiment(session, "other-host", "finished", [("h1=0,1;h2=0,1", "h1:2,h2:2", 0, 10)])
        _experiment(session, "other-machine", "finished", [("0,1", "localhost:2", 0, 10)],
                    owner=("another-machine", 1, 0.0))
        _experiment(session, "now", "running", [("0", "localhost:2", 30, None)])
        _experiment(session, "dead", "running", [("0", "localhost:2", 30, None)], owner=(owner_identity()[0], 1, 0.0))
    with store.session() as session:
        assert beside_on_devices(session, "ours") == ["beside"]
        assert running_on(session, "ours", {("localhost", 0)}) == ["now"]  # "dead"'s xover is gone
        assert running_on(session, "ours", {("localhost", 5)}) == []
        assert run_devices(session.query(Run).filter_by(experiment_id="other-host").one()) == {
            ("h1", 0), ("h1", 1), ("h2", 0), ("h2", 1)}
    store.close()
