"""Opening the store: SQLite (WAL) by default, any SQLAlchemy URL otherwise."""

from __future__ import annotations

import os
from pathlib import Path

from sqlalchemy import create_engine, event, inspect, select, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from .. import __version__
from ..errors import XoverError
from .models import SCHEMA_VERSION, Base, SchemaInfo

DEFAULT_DB = "results/xover.db"


class StoreError(XoverError):
    pass


# Plain SQL answers "throughput of job X in run Y" with this view:
#   SELECT samples_per_s FROM run_throughput WHERE experiment_id = 'Y' AND name = 'X';
RUN_THROUGHPUT_VIEW = """
CREATE VIEW IF NOT EXISTS run_throughput AS
SELECT r.id AS run_id, r.experiment_id, r.name, r.mode, r.status, r.np,
       COUNT(m.id) AS iterations,
       SUM(m.samples) / NULLIF(SUM(m.iteration_s), 0) AS samples_per_s,
       AVG(m.iteration_s) AS mean_iteration_s
FROM runs r LEFT JOIN iteration_metrics m ON m.run_id = r.id AND m.step > 0
GROUP BY r.id
"""


def database_url(db: str | None = None) -> str:
    target = db or os.environ.get("XOVER_DB") or DEFAULT_DB
    if "://" in target:
        return target
    try:
        Path(target).expanduser().parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise StoreError(f"cannot create the folder of the database {target}: {error.strerror}") from None
    return f"sqlite:///{Path(target).expanduser()}"


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.close()


class Store:
    """An open database with the current schema; `session()` gives a unit of work."""

    def __init__(self, db: str | None = None) -> None:
        self.url = database_url(db)
        self.engine: Engine = create_engine(self.url)
        if self.engine.dialect.name == "sqlite":
            event.listen(self.engine, "connect", _sqlite_pragmas)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        try:
            self._migrate()
        except OperationalError as error:
            raise StoreError(f"cannot open the database {self.url}: {error.orig}") from None

    def _migrate(self) -> None:
        if inspect(self.engine).has_table("schema_info"):
            with self.session() as session:
                info = session.scalars(select(SchemaInfo)).first()
            if info and info.version > SCHEMA_VERSION:
                raise StoreError(
                    f"the database {self.url} was written by a newer xover ({info.written_by}, schema "
                    f"{info.version}); this xover {__version__} reads schema {SCHEMA_VERSION}. "
                    "Upgrade xover or use another database with --db.")
        Base.metadata.create_all(self.engine)
        with self.session() as session, session.begin():
            if session.scalars(select(SchemaInfo)).first() is None:
                session.add(SchemaInfo(version=SCHEMA_VERSION, written_by=__version__))
            if self.engine.dialect.name == "sqlite":
                session.execute(text(RUN_THROUGHPUT_VIEW))

    def session(self) -> Session:
        return self._sessions()

    def close(self) -> None:
        self.engine.dispose()


def open_store(db: str | None = None) -> Store:
    try:
        return Store(db)
    except SQLAlchemyError as error:
        raise StoreError(f"cannot open the database: {error}") from None
