"""What `xover report --format mlflow` makes of a recipe's fields and the store's times (xover/report/mlflow.py)."""

import pytest

from xover.report.data import ReportError
from xover.report.mlflow import PARAM_LENGTH, STATUS, _flat, _ms, refuse_the_store


def test_a_recipe_becomes_flat_string_params():
    body = {"name": "ddp-digits", "np": 2, "lr": 0.05, "args": ["--steps", "100"], "env": {"OMP_NUM_THREADS": "1"},
            "model_options": {"hidden": 512, "layers": 2}, "max_slowdown": None, "channels_last": True}
    assert _flat("recipe", body) == {
        "recipe.name": "ddp-digits", "recipe.np": "2", "recipe.lr": "0.05", "recipe.args": '["--steps", "100"]',
        "recipe.env.OMP_NUM_THREADS": "1", "recipe.model_options.hidden": "512", "recipe.model_options.layers": "2",
        "recipe.channels_last": "true"}


def test_a_value_longer_than_mlflow_takes_is_cut():
    [value] = _flat("recipe.description", "x" * (PARAM_LENGTH + 10)).values()
    assert len(value) == PARAM_LENGTH and value.endswith("...")


def test_the_stores_utc_times_become_epoch_milliseconds():
    assert _ms("1970-01-01 00:00:01.500000") == 1500
    assert _ms("2026-01-01 00:00:00 UTC") == 1767225600000
    assert _ms(None) > 1767225600000  # now


def test_every_ended_status_has_an_mlflow_status():
    assert set(STATUS.values()) <= {"FINISHED", "FAILED", "KILLED"}
    assert {"finished", "failed", "lost", "timeout", "interrupted", "cancelled", "stopped"} == set(STATUS)


def test_a_tracking_uri_sqlalchemy_cannot_read_is_not_a_database_servers_store():
    """`--tracking-uri databricks://scope:prefix` (a Databricks profile and its secrets' prefix) with a
    PostgreSQL store was a traceback, `ValueError: invalid literal for int() with base 10: 'prefix'` (SQLAlchemy
    read 'prefix' as a port), with a profile's secret in it: such a URI names no database, so not the store's."""
    store = "postgresql://xover:pw@db.example/xover"
    for uri in ("databricks://scope:prefix", "foo://a:b", "databricks://profile:SECRET", "foo://[::1", "databricks"):
        refuse_the_store(uri, store)  # no error: MLflow is asked, and says what it makes of the URI
    with pytest.raises(ReportError, match="that is the store's database"):
        refuse_the_store("postgresql+psycopg2://mlflow@DB.example:5432/xover", store)
