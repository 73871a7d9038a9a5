"""The commands xover prints to run next (hints.xover_command): quoted, --db as the user gave it, no password."""

import shlex

import pytest

from xover.hints import GivenStore, xover_command


@pytest.fixture
def given(monkeypatch):
    def give(db):
        monkeypatch.setattr(GivenStore, "db", db)

    return give


def test_every_word_is_quoted_as_the_shell_reads_it(given):
    given(None)
    hint = xover_command("run", "my plan;rm -rf x.json")
    assert hint == "xover run 'my plan;rm -rf x.json'"
    assert shlex.split(hint) == ["xover", "run", "my plan;rm -rf x.json"]


def test_the_db_the_command_line_gave_is_given_again(given):
    given("runs/a b.db")
    assert shlex.split(xover_command("report", "20260101-000000-x")) == [
        "xover",
        "--db",
        "runs/a b.db",
        "report",
        "20260101-000000-x",
    ]


@pytest.mark.parametrize(
    "url",
    ["postgresql://me:s3cr3t@db.example/xover", "postgresql+psycopg://me@db/xover?password=s3cr3t&sslmode=require"],
)
def test_a_stores_password_is_never_printed(given, url):
    given(url)
    hint = xover_command("report", "all")
    assert "s3cr3t" not in hint and "***" in hint and "--db" in hint
