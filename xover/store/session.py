"""Opening the store: SQLite (WAL) by default, any SQLAlchemy URL otherwise (PostgreSQL is tested).

Opening upgrades the schema to this xover's with Alembic (store/migrations/), under a lock so that
several xover processes opening one database at once upgrade it once. A database written before
migrations existed is recognised and upgraded too; one written by a newer xover is refused.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from sqlalchemy import create_engine, event, inspect, make_url, select, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import ArgumentError, OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from .. import __version__
from ..errors import XoverError
from .models import SCHEMA_VERSION, SchemaInfo

DEFAULT_DB = "results/xover.db"
MIGRATIONS = Path(__file__).resolve().parent / "migrations"
PRE_MIGRATION_REVISION = "0001"  # what a database from before migrations is stamped with
_MIGRATION_LOCK_KEY = 0x78_6F_76_65_72  # "xover": PostgreSQL advisory lock held while upgrading


class StoreError(XoverError):
    pass


def database_url(db: str | None = None, create_folder: bool = True) -> str:
    """The store's SQLAlchemy URL; a file path is SQLite (its folder created unless `create_folder` is
    False: a command that only reads must not leave folders behind)."""
    target = db or os.environ.get("XOVER_DB") or DEFAULT_DB
    if "://" in target:
        return target
    if create_folder:
        try:
            Path(target).expanduser().parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise StoreError(f"cannot create the folder of the database {target}: {error.strerror}") from None
    return f"sqlite:///{Path(target).expanduser()}"


def missing_sqlite_file(db: str | None = None) -> Path | None:
    """The SQLite file the store would be, when it does not exist yet (None: it exists, or the store
    is another database or in memory). Creates nothing: for commands that only read or check."""
    url = database_url(db, create_folder=False)
    prefix = "sqlite:///"
    if not url.startswith(prefix) or url == prefix + ":memory:":
        return None
    path = Path(url[len(prefix):])
    return None if path.exists() else path


def shown_url(url: str) -> str:
    """The URL for messages: a password in it is shown as ***."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA busy_timeout=30000")  # first: switching a new file to WAL waits for its lock too
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def upgrade_engine(url: str) -> Engine:
    """The engine an upgrade runs on. On SQLite, pysqlite opens a transaction only before DML and runs
    DDL at once, so a migration failing half-way would keep its new column but not its revision, and
    every later open would fail on the column ("duplicate column name"). Here SQLAlchemy emits BEGIN
    itself, so the whole upgrade is one transaction that a failure rolls back."""
    engine = create_engine(url)
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)

        @event.listens_for(engine, "connect")
        def _driver_begins_nothing(dbapi_connection, _record) -> None:
            dbapi_connection.isolation_level = None

        @event.listens_for(engine, "begin")
        def _begin(connection: Connection) -> None:
            connection.exec_driver_sql("BEGIN IMMEDIATE")  # the write lock up front: busy_timeout waits for it
    return engine


def _alembic_config(connection: Connection):
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    config = _alembic_config(None)  # type: ignore[arg-type]
    return ScriptDirectory.from_config(config).get_current_head()


class Store:
    """An open database with the current schema; `session()` gives a unit of work."""

    def __init__(self, db: str | None = None) -> None:
        self.url = database_url(db)
        self.engine: Engine = create_engine(self.url)
        self.kind = self.engine.dialect.name
        if self.kind == "sqlite":
            event.listen(self.engine, "connect", _sqlite_pragmas)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        try:
            self._upgrade()
        except OperationalError as error:
            raise StoreError(f"cannot open the database {shown_url(self.url)}: {error.orig}") from None

    @property
    def _in_memory(self) -> bool:
        return self.engine.url.database in (None, "", ":memory:")

    def _current_revision(self, connection: Connection) -> str | None:
        from alembic.runtime.migration import MigrationContext

        return MigrationContext.configure(connection).get_current_revision()

    def _upgrade(self) -> None:
        head = head_revision()
        # The look at the revision is under the lock too: on SQLite the first connection to a new file
        # switches it to WAL, and several processes creating one database at once could fail there
        # ("database is locked": 1 in 75 races of 6 processes, measured here).
        with self._migration_lock():
            with self.engine.connect() as connection:
                if self._current_revision(connection) == head:
                    return
            # in memory, another engine would be another database
            upgrading = upgrade_engine(self.url) if self.kind == "sqlite" and not self._in_memory else self.engine
            try:
                self._upgrade_on(upgrading, head)
            finally:
                if upgrading is not self.engine:
                    upgrading.dispose()

    def _upgrade_on(self, engine: Engine, head: str) -> None:
        with engine.begin() as connection:
            from alembic import command
            from alembic.script import ScriptDirectory

            config = _alembic_config(connection)
            current = self._current_revision(connection)
            if current is not None and current not in {r.revision for r in ScriptDirectory.from_config(config).walk_revisions()}:
                raise StoreError(f"the database {shown_url(self.url)} was written by a newer xover (schema revision {current}); "
                                 f"this xover {__version__} knows up to {head}. Upgrade xover or use another --db.")
            tables = set(inspect(connection).get_table_names())
            if current is None and "runs" in tables:
                self._refuse_newer_unversioned(connection)
                command.stamp(config, PRE_MIGRATION_REVISION)  # written before migrations existed
            command.upgrade(config, "head")
            info = connection.execute(select(SchemaInfo.id)).first()
            if info is None:
                connection.execute(SchemaInfo.__table__.insert().values(version=SCHEMA_VERSION, written_by=__version__))
            else:
                connection.execute(SchemaInfo.__table__.update().values(version=SCHEMA_VERSION, written_by=__version__))

    def _refuse_newer_unversioned(self, connection: Connection) -> None:
        row = connection.execute(text("SELECT version, written_by FROM schema_info")).first()
        if row is not None and row[0] > SCHEMA_VERSION:
            raise StoreError(f"the database {shown_url(self.url)} was written by a newer xover ({row[1]}, schema {row[0]}); "
                             f"this xover {__version__} reads schema {SCHEMA_VERSION}. "
                             "Upgrade xover or use another database with --db.")

    @contextlib.contextmanager
    def _migration_lock(self):
        """One opening at a time: a lock file beside a SQLite database (none where it cannot be written: a
        database there is only read), an advisory lock on PostgreSQL."""
        if self.kind == "sqlite" and not self._in_memory:
            try:
                handle = open(f"{self.engine.url.database}.migrate.lock", "w")
            except OSError:
                yield
                return
            with handle:
                fcntl.flock(handle, fcntl.LOCK_EX)
                yield
        elif self.kind == "postgresql":
            with self.engine.connect() as connection:
                connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": _MIGRATION_LOCK_KEY})
                try:
                    yield
                finally:
                    connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": _MIGRATION_LOCK_KEY})
                    connection.commit()
        else:
            yield

    def session(self) -> Session:
        return self._sessions()

    def close(self) -> None:
        self.engine.dispose()


def open_store(db: str | None = None) -> Store:
    try:
        return Store(db)
    except SQLAlchemyError as error:  # the driver's own words, without SQLAlchemy's link to its FAQ
        raise StoreError(f"cannot open the database {shown_url(database_url(db, create_folder=False))}: "
                         f"{getattr(error, 'orig', None) or error}") from None
