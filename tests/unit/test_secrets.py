"""Secrets that reached what other people read (issue 58): passwords of any character in a command
line, credentials in a store URL's query, a job file's variables, the MLflow tracking URI."""

from __future__ import annotations

import json
import shlex
import sys

import pytest

from xover.run.leases import DeviceLeases

START, END = "KX7SEC", "QZ9END"  # every password below starts and ends with these: neither may show
# passwords as people type them: spaces, both quotes, '@', '/', '%' escapes, shell characters, newlines
PASSWORDS = [
    f"{START}p w\"x{END}",
    f"{START}it's{END}",
    f"{START}a\"b'c d{END}",
    f"{START}x/y:z{END}",
    f"{START}p%40ss%20w{END}",
    f"{START}$(id) `id` ${{HOME}}{END}",
    f"{START}back\\slash\\{END}",
    f"{START}tab\tand\nnewline{END}",
    f"{START}#frag?q=1&x=y{END}",
    f"{START}''\"\"{END}",
]


def _leaks(text: str) -> bool:
    return START in text or END in text


@pytest.mark.parametrize("password", PASSWORDS)
def test_a_password_of_any_character_is_masked_in_the_command_lease_file_and_report(tmp_path, monkeypatch, password):
    """Finding 2. Before: redact.py's pattern stopped at a quote or a space, so `--db
    'postgresql://u:p w"x@h/db'` kept the password in the stored command, the lease files (every user
    can read them) and `xover report`."""
    from xover import cli
    from xover.report.data import experiment_row
    from xover.store.models import Experiment

    url = f"postgresql://xover:{password}@db.example:5432/xover?sslmode=require"
    # in a query an '&' starts the next option: a password there holds it escaped
    query = url.replace("?sslmode=require", f"?sslmode=require&password={password.replace('&', '%26')}")
    for argv in (["--db", url], [f"--db={url}"], ["--db", query]):
        monkeypatch.setattr(sys, "argv", ["xover", "run", *argv, "--group", "A", "B"])
        command = cli._command_line()
        assert not _leaks(command), command
        assert shlex.split(command)[:2] == ["xover", "run"]  # still a command line a shell reads
        monkeypatch.setenv("XOVER_LEASE_DIR", str(tmp_path))
        held = DeviceLeases(f"experiment e1 ({command})")
        assert held.try_acquire([("localhost", 0)]) == {}
        text = (tmp_path / DeviceLeases._name(("localhost", 0))).read_text()
        held.release()
        assert not _leaks(text) and "xover:***@db.example" in json.loads(text)["holder"] + command.replace("=***", "")
        # a row an older xover stored as typed: the report shows it masked
        stored = shlex.join(["xover", "run", *argv])
        row = experiment_row(Experiment(id="e1", kind="run", command=stored, status="finished", hosts="localhost"))
        assert not _leaks(row.command), row.command


def test_passwords_are_masked_in_argv_and_in_joined_and_quoted_command_lines():
    """Finding 2: the same URL as one argument, in a `shlex.join`ed line, single- or double-quoted, with
    the password percent-encoded or a credential option whose name is percent-encoded."""
    from xover.redact import mask_argv, mask_command, mask_credentials

    url = 'postgresql://u:p w"x@h/db'
    assert mask_argv(["--store", url]) == ["--store", "postgresql://u:***@h/db"]
    assert mask_command(["xover", "run", "--store", url]) == "xover run --store 'postgresql://u:***@h/db'"
    assert mask_credentials(shlex.join(["--store", url])) == "--store 'postgresql://u:***@h/db'"
    assert mask_credentials("--store \"postgresql://u:p w\\\"x@h/db\" x") == "--store 'postgresql://u:***@h/db' x"
    assert mask_credentials("postgresql://u:p%40ss%2Fw@h/db") == "postgresql://u:***@h/db"
    assert mask_credentials("postgresql://me@corp.example:pw@h/db") == "postgresql://me@corp.example:***@h/db"
    assert mask_credentials("postgresql://u?x#y:pw@h/db") == "postgresql://u?x#y:***@h/db"  # SQLAlchemy's user: not ':' '/'
    assert mask_credentials("postgresql://h/db?pass%77ord=pw&sslpassword=pw2") == (
        "postgresql://h/db?pass%77ord=***&sslpassword=***"
    )
    assert mask_credentials("https://mlflow.example/x?token=t0k&run=1") == "https://mlflow.example/x?token=***&run=1"
    assert mask_credentials("PGPASSWORD=pw HF_TOKEN=tk xover run") == "PGPASSWORD=*** HF_TOKEN=*** xover run"
    for kept in (
        "postgresql://xover@db/xover",
        "postgresql://xover@db:5432/xover",
        "sqlite:///results/a:b@c.db",
        "xover run --group A B",
        "a:b@c",
        "it's a message: postgresql://u:***@h/db is down",
        "--tokenizer=bert TOKENIZERS_PARALLELISM=false",
    ):
        assert mask_credentials(kept) == kept


# a PostgreSQL that refuses at once (port 1), with its credentials in every form a URL may carry them
UNREACHABLE = "postgresql+psycopg://xover:{pw}@127.0.0.1:1/xover"
CREDENTIAL_QUERIES = [
    "?password={pw}",
    "?sslmode=prefer&sslpassword={pw}",
    "?PassWord={pw}",
    "?pass%77ord={pw}",
    "?sslpassword={pw}&bogus_option=1",  # the driver refuses an unknown option in its own words
]


@pytest.mark.parametrize("query", CREDENTIAL_QUERIES)
def test_credential_query_options_are_masked_wherever_the_store_url_is_shown(tmp_path, monkeypatch, query):
    """Finding 3. Before: shown_url masked the userinfo only, so `?password=` / `?sslpassword=` showed in
    every "cannot open the database" line: `xover report`, `xover doctor`, and a Slurm group's output."""
    from typer.testing import CliRunner

    from xover.cli import app
    from xover.doctor import _database
    from xover.store.session import StoreError, open_store, shown_url

    password = f"{START}p w'x{END}"
    url = UNREACHABLE.format(pw=f"{START}user-pw{END}") + query.format(pw=password.replace(" ", "%20"))
    assert not _leaks(shown_url(url)), shown_url(url)
    with pytest.raises(StoreError) as refused:
        open_store(url)
    assert "cannot open the database" in str(refused.value) and not _leaks(str(refused.value)), refused.value
    monkeypatch.setenv("XOVER_RESULTS", str(tmp_path))
    report = CliRunner().invoke(app, ["--db", url, "report", "all"])
    assert report.exit_code != 0 and "cannot open the database" in report.output, report.output
    assert not _leaks(report.output), report.output
    check = _database(url)
    assert not check.ok and not _leaks(check.detail), check.detail
