"""Opening the store: SQLite (WAL) by default, any SQLAlchemy URL otherwise (PostgreSQL is tested).

SQLite's WAL mode needs every process that opens the file to be on one machine, sharing its memory
(the -shm file): SQLite documents it as unsupported on a network filesystem. Where the file lies on
one (NFS, CIFS/SMB, Lustre, GPFS, BeeGFS, CephFS, GlusterFS, ... read from /proc/mounts), xover warns
once and uses SQLite's rollback journal instead, which works there as far as the filesystem's locks
do; a store that several nodes write (Slurm, several hosts) belongs in PostgreSQL (docs/security.md).

Opening upgrades the schema to this xover's with Alembic (store/migrations/), under a lock so that
several xover processes opening one database at once upgrade it once. A database written before
migrations existed is recognised and upgraded too; one written by a newer xover is refused.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import sqlite3
import stat
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from sqlalchemy import create_engine, event, insert, inspect, make_url, select, text, update
from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, OperationalError, SAWarning, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from .. import __version__
from ..errors import XoverError, printable
from ..redact import MASK, MISTYPED_URL, mask_word, without_secrets_of
from ..settings import settings
from .models import SCHEMA_VERSION, SchemaInfo

DEFAULT_DB = "results/xover.db"
MIGRATIONS = Path(__file__).resolve().parent / "migrations"
PRE_MIGRATION_REVISION = "0001"  # what a database from before migrations is stamped with
_MIGRATION_LOCK_KEY = 0x78_6F_76_65_72  # "xover": PostgreSQL advisory lock held while upgrading


class StoreError(XoverError):
    """The store cannot be opened, upgraded or written: one line with the driver's own words."""

    pass


class StoreGone(StoreError):
    """The SQLite file the store opened was removed or replaced while it was open: SQLite went on writing into
    the unlinked file, so what was written since is lost. A run's failure (1), not refused input (2)."""

    exit_code = 1


def file_identity(status: os.stat_result) -> tuple[int, int]:
    """What tells one file from another at the same path: (device, inode)."""
    return status.st_dev, status.st_ino


def moved_away(opened: tuple[int, int], now: os.stat_result | None) -> str | None:
    """How the file opened as `opened` (file_identity) left its path, given what is at the path `now` (None:
    nothing): 'removed', 'replaced', or None while it is still there. An open file's inode is not reused while
    SQLite holds it, so another inode is another file."""
    if now is None:
        return "removed"
    return None if file_identity(now) == opened else "replaced"


def database_url(db: str | None = None, create_folder: bool = True) -> str:
    """The store's SQLAlchemy URL; a file path is SQLite (its folder created unless `create_folder` is
    False: a command that only reads must not leave folders behind)."""
    target = db or settings().db or DEFAULT_DB
    if not target.strip():  # XOVER_DB='  ': "no database at   : nothing has been run yet"
        raise StoreError(f"the database {target!r}: blank; give a file or a URL (--db, XOVER_DB), or unset XOVER_DB")
    if "://" in target:
        if target.startswith("postgres://"):  # SQLAlchemy names the dialect postgresql only
            raise StoreError(f"{shown_url(target)}: write postgresql:// (SQLAlchemy knows no postgres://)")
        if _in_memory_sqlite(target):
            raise StoreError(
                f"{shown_url(target)}: a database in memory keeps nothing past this command, and xover's commands "
                "read what earlier ones stored: give a file (--db results/xover.db) or a database server"
            )
        named = sqlite_file(target)
        if named is not None:  # as a plain path is: SQLite's "unable to open database file" said "read-only to you"
            folder, irregular = _not_a_file(named, target)
            if folder:
                raise StoreError(
                    f"the database {shown_url(target)} names a folder, {printable(named)}: name a file in it "
                    f"(sqlite:///{printable(named / 'xover.db')})"
                )
            if irregular:
                raise StoreError(
                    f"the database {shown_url(target)} names {printable(named)}, not a regular file (a device or a "
                    "pipe): name a file"
                )
            _refuse_sqlite_options_it_would_lose(target)
            if create_folder:  # as for a plain path: SQLite's "unable to open database file" said "read-only to you"
                _make_folder_of(named, shown_url(target))
        return target
    mistyped = MISTYPED_URL.match(target)
    if mistyped:
        # a URL whose scheme or slashes went missing would be a SQLite file named after its password
        shown = target[: mistyped.start("password")] + MASK + target[mistyped.end("password") :]
        raise StoreError(
            f"{shown}: a database URL without its scheme:// (postgresql://user:password@host/database), "
            "not a file: write the whole URL, or a file path (a file whose name holds ':' and '@': start it with ./)"
        )
    file = Path(target).expanduser()
    folder, irregular = _not_a_file(file, target)
    if folder:  # SQLite's own words: "unable to open database file"
        raise StoreError(f"the database {target} is a folder: name a file (in it: {file / 'xover.db'})")
    if irregular:  # /dev/null, a pipe: "disk I/O error", or a wait for ever
        raise StoreError(f"the database {target} is not a regular file (a device or a pipe): name a file")
    if create_folder:
        _make_folder_of(file, target)
    return f"sqlite:///{file}"


def _refuse_sqlite_options_it_would_lose(url: str) -> None:
    """A SQLite URL whose options SQLite would not read as given, refused with the form that it reads: SQLite's
    own options (`?mode=ro`) without uri=true, which the driver drops and opens the file to write; and uri=true on
    a name without `file:`, which SQLite opens as a file named `store.db?mode=ro`, made and migrated, empty."""
    opening = sqlite_opening(url)
    if opening is None or not (opening.ignored or opening.query_in_name):
        return
    prefix = _SQLITE_FILE_URL.match(url)
    assert prefix is not None  # sqlite_opening matched it
    database, _, query = url[prefix.end() :].partition("?")
    options = [option for option in query.split("&") if option and option.partition("=")[0].lower() != "uri"]
    uri_form = shown_url(
        f"{prefix.group()}{'' if database.startswith('file:') else 'file:'}{database}?"
        f"{'&'.join([*options, 'uri=true'])}"
    )
    if opening.ignored:
        raise StoreError(
            f"the database {shown_url(url)}: SQLite reads {', '.join(opening.ignored)} only in a URI (uri=true), "
            f"and without one would open {printable(opening.file or database)} to read and write: write {uri_form}"
        )
    raise StoreError(
        f"the database {shown_url(url)}: with uri=true SQLite reads a name as a URI only where it starts with file:, "
        f"and would open a file named {printable(shown_url(opening.name))}: write {uri_form}"
    )


def _make_folder_of(file: Path, shown: str) -> None:
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise StoreError(f"cannot create the folder of the database {shown}: {error.strerror}") from None


def _not_a_file(path: Path, given: str) -> tuple[bool, bool]:
    """Whether `path` (the store as `given`) is a folder, and whether it is something else but a regular file."""
    try:
        return path.is_dir(), path.exists() and not path.is_file()
    except OSError as error:  # a name too long for the system: exists() raises it
        raise StoreError(f"the database {printable(shown_url(given))}: cannot be looked at: {error.strerror}") from None


def _in_memory_sqlite(url: str) -> bool:
    try:
        parsed = make_url(url)
    except Exception:  # noqa: BLE001 - a URL SQLAlchemy cannot read is refused where the store opens, in its words
        return False
    if parsed.drivername.split("+")[0] != "sqlite":
        return False
    if parsed.database in (None, "", ":memory:"):
        return True
    opening = sqlite_opening(url)  # a URI's: file::memory:, ?mode=memory, or file: alone (a temporary database)
    return opening is not None and opening.file is None


def missing_sqlite_file(db: str | None = None) -> Path | None:
    """The SQLite file the store would be, when it does not exist yet (None: it exists, or the store
    is another database or in memory). Creates nothing: for commands that only read or check."""
    path = sqlite_file(database_url(db, create_folder=False))
    return None if path is None or path.exists() else path


# sqlite:/// and the same with its driver named (sqlite+pysqlite:///, SQLAlchemy's default for it): one kind of store
_SQLITE_FILE_URL = re.compile(r"sqlite(?:\+pysqlite)?:///")


@dataclass(frozen=True)
class SqliteOpening:
    """What SQLite opens for a `sqlite:///` URL, as SQLAlchemy's pysqlite dialect hands it to sqlite3.connect."""

    name: str  # the name sqlite3.connect is given
    uri: bool  # whether SQLite reads `name` as a URI (uri=true, and it starts with file:)
    file: Path | None  # the file it opens; None: a database in memory, or a temporary one
    read_only: bool  # mode=ro or immutable=1: SQLite neither writes the file nor makes it
    ignored: tuple[str, ...]  # query options the dialect drops (it warns): SQLite takes them only in a URI
    # uri=true on a name without file:, and options beside it: SQLite opens a file named `store.db?mode=ro`
    query_in_name: bool = False


def sqlite_opening(url: str) -> SqliteOpening | None:
    """What SQLite will open for a SQLite URL (sqlite:///, sqlite+pysqlite:///); None for another database, or a
    URL SQLAlchemy cannot read (refused where the store opens, in its words). Asked of the dialect itself: with
    uri=true it passes its query on to SQLite, which reads it as a URI's only after `file:`, and takes it as part of
    the file's name otherwise; without uri=true it drops SQLite's options (`?mode=ro`) and opens the file to write."""
    if _SQLITE_FILE_URL.match(url) is None:
        return None
    try:
        parsed = make_url(url)
        with warnings.catch_warnings():  # its warning of dropped options: said as `ignored`, in xover's words
            warnings.simplefilter("ignore", SAWarning)
            (name,), options = SQLiteDialect_pysqlite().create_connect_args(parsed)
    except Exception:  # noqa: BLE001 - a URL SQLAlchemy cannot read (uri=maybe) is refused where the store opens
        return None
    if not options.get("uri"):
        database = parsed.database or ""  # as given: the dialect's name is made absolute
        file = None if database in ("", ":memory:") else Path(database)
        return SqliteOpening(name, False, file, False, tuple(sorted(set(parsed.query) - set(options))))
    if not name or not name.startswith("file:"):  # the whole name is a file's, any query the dialect put on it too
        file = None if name in (None, "", ":memory:") else Path(name)
        return SqliteOpening(name or "", False, file, False, (), query_in_name="?" in (name or ""))
    path, query = _sqlite_uri(name)
    read_only = query.get("mode") == "ro" or _true(query.get("immutable", ""))
    in_memory = path in ("", ":memory:") or query.get("mode") == "memory"
    return SqliteOpening(name, True, None if in_memory else Path(path), read_only, ())


def _sqlite_uri(name: str) -> tuple[str, dict[str, str]]:
    """The path and query options of a SQLite URI (file:PATH?K=V&..., or file://localhost/PATH), decoded as SQLite
    decodes them (%3F is a '?' in the path)."""
    rest = name.removeprefix("file:").partition("#")[0]
    path, _, query = rest.partition("?")
    if path.startswith("//"):  # an authority: empty or localhost, up to the path's first '/'
        slash = path.find("/", 2)
        path = path[slash:] if slash >= 0 else ""
    options = {}
    for pair in filter(None, query.split("&")):
        key, _, value = pair.partition("=")
        options[unquote(key)] = unquote(value)
    return unquote(path), options


def _true(value: str) -> bool:
    """A SQLite URI's boolean option as SQLite reads it (immutable=1, =yes, =true, =on)."""
    return value.lower() in ("1", "yes", "true", "on")


def sqlite_file(url: str) -> Path | None:
    """The file SQLite opens for a SQLite URL (sqlite_opening): its path, without the query (`?mode=ro`) or a
    URI's `file:`; None for another database, one in memory, or a URL SQLAlchemy cannot read."""
    opening = sqlite_opening(url)
    return opening.file if opening is not None else None


def store_files(db: str | None = None) -> list[tuple[Path, str]]:
    """The files a SQLite store is made of (the database, its journal, WAL, shared memory and migration lock),
    each with what it is, for refusing an output path over one; none for another database or one in memory.
    The database as named; the others beside the file a link names, where SQLite and the lock keep them."""
    file = sqlite_file(database_url(db, create_folder=False))
    if file is None:
        return []
    path, real = str(file), os.path.realpath(file)
    return [
        (file, f"the store {path}"),
        *(
            (Path(real + suffix), f"the store {path} (its {suffix[1:]} file)")
            for suffix in ("-wal", "-shm", "-journal")
        ),
        (Path(migration_lock_of(path)), f"the store {path} (its migrate.lock file)"),
    ]


def migration_lock_of(database: str) -> str:
    """The lock file that makes one opening at a time upgrade the SQLite file `database`: beside the file itself,
    the link resolved, so that every path to one store takes one lock."""
    return f"{os.path.realpath(database)}.migrate.lock"


def remove_store_made_for_nothing(db: str | None, folders: list[Path]) -> None:
    """The files of a SQLite store that this command made and then had no use for (a plan refused for want of
    profiles, which reads them from the store), and the `folders` made for it, deepest first: removed, so that
    a refusal leaves nothing behind."""
    for path, _ in store_files(db):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    for folder in folders:
        with contextlib.suppress(OSError):  # not empty: something else was put there meanwhile
            folder.rmdir()


def shown_url(url: str) -> str:
    """The URL for messages: its password, and every query option that carries one (`?password=`,
    `&sslpassword=`, ...), shown as ***, whatever characters they hold (redact.py)."""
    return mask_word(url)


def store_gone_words(file: Path | None, how: str, experiment: str | None = None, logs: Path | None = None) -> str:
    """The line a run ends with when its SQLite store's file was removed or replaced under it (Store.gone)."""
    lost = f"this run's records are lost (experiment {experiment})" if experiment else "what xover wrote since is lost"
    where = f"; its logs are still in {printable(logs)}" if logs is not None else ""
    return (
        f"the store {printable(file or '?')} was {how} during the run, so {lost}: SQLite kept writing into the file "
        f"that left that path, and xover made no new store there{where}"
    )


class StoreFailedDuringRun(StoreError):
    """The store refused a read or a write while a run wrote to it (a full disk, an I/O error): the run was stopped.
    A run's failure (1), not refused input (2)."""

    exit_code = 1


def stopped_by_the_store(problem: object) -> str:
    """Why a run that the store's failure stopped ended, as its row keeps it: `report` said "no error recorded"."""
    return f"xover stopped it: the store failed during the run: {_driver_words(problem)}"


def store_failed_during_run_words(
    url: str, problem: object, experiment: str, logs: Path, end_recorded: bool, report: str
) -> str:
    """The line a run ends with when its store failed part-way (StoreFailedDuringRun). `end_recorded`: whether its
    experiment's end, and why its runs stopped, could still be written; `report`: the command that shows it."""
    file = sqlite_file(url)
    store = printable(file) if file is not None else shown_url(url)
    kept = (
        f"experiment {experiment} is kept failed, with what was recorded until then and why ({report})"
        if end_recorded
        # nothing more could be written: the rows say running until a later command finds their xover gone
        else f"not even its end could be recorded: experiment {experiment} keeps what was recorded until then, its "
        "unfinished runs marked lost by the next report or run of this store once it takes writes again"
    )
    return (
        f"the store {store} failed during the run: {without_secrets_of(url, _driver_words(problem))}; the run was "
        f"stopped, and {kept}; its logs are in {printable(logs)}"
    )


def store_failed(url: str, problem: object) -> StoreError:
    """One line about a store that opened and then refused a read or a write (a read-only file, a full disk),
    without its password."""
    return StoreError(f"the database {without_secrets_of(url, f'{shown_url(url)}: {_driver_words(problem)}')}")


def store_error(url: str, problem: object) -> StoreError:
    """One line about the store at `url`, without its password, even where the driver's own words
    (`problem`) repeat it."""
    return StoreError(
        f"cannot open the database {without_secrets_of(url, f'{shown_url(url)}: {_driver_words(problem)}')}"
    )


def _driver_words(problem: object) -> str:
    """A driver's words on one line (libpq ends its first with a newline and a tab: "Is the server running ..."),
    and what to do where SQLite says only that it may not write."""
    words = " ".join(str(problem).split())
    if "readonly database" in words or "unable to open database file" in words:
        words += (
            " (the store's file or its folder is read-only to you: `report` reads it as it is; to plan, profile, run "
            "or simulate, copy it into a folder you can write, or name another with --db)"
        )
    elif "database or disk is full" in words:
        # what was being written is lost; a run it cut short is closed as lost by the next command that opens it
        words += " (free space on the store's disk, or name a store on another with --db)"
    elif "disk I/O error" in words:
        words += " (the store's disk failed a read or a write: check it, or name a store on another with --db)"
    return words


PROC_MOUNTS = "/proc/mounts"
# filesystem types whose files other machines share: SQLite's WAL (shared memory, local locks) is unsafe there
NETWORK_FILESYSTEMS = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb3",
        "smbfs",
        "ncpfs",
        "afs",
        "coda",
        "9p",
        "lustre",
        "gpfs",
        "beegfs",
        "ceph",
        "glusterfs",
        "ocfs2",
        "gfs2",
        "panfs",
        "pvfs2",
        "orangefs",
        "wekafs",
        "davfs",
        "fuse.sshfs",
        "fuse.glusterfs",
        "fuse.cephfs",
        "fuse.ceph",
        "fuse.beegfs",
        "fuse.gcsfuse",
        "fuse.s3fs",
        "fuse.rclone",
        "fuse.juicefs",
        "fuse.davfs2",
        "fuse.lustre",
    }
)
_WARNED: set[str] = set()


def _unescape_mount(field: str) -> str:
    """/proc/mounts writes a space in a path as \\040 (any of space, tab, newline, backslash as octal)."""
    return re.sub(r"\\([0-7]{3})", lambda match: chr(int(match.group(1), 8)), field)


def filesystem_of(path: str | Path, mounts: str | None = None) -> tuple[str, str] | None:
    """(filesystem type, mount point) of the mount `path` (or, if it does not exist yet, its nearest
    existing folder) lies on, from /proc/mounts; None where that cannot be read."""
    target = Path(path).expanduser().absolute()
    while not target.exists() and target != target.parent:
        target = target.parent
    target = target.resolve()
    try:
        text = Path(mounts or PROC_MOUNTS).read_text()
    except OSError:
        return None
    best: tuple[str, str] | None = None
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        point, kind = _unescape_mount(fields[1]), fields[2]
        inside = str(target) == point or str(target).startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best[1])):  # the last of equal mounts is on top
            best = (kind, point)
    return best


def network_filesystem(path: str | Path) -> tuple[str, str] | None:
    """(type, mount point) if `path` lies on a network or cluster filesystem, else None."""
    found = filesystem_of(path)
    return found if found is not None and found[0].lower() in NETWORK_FILESYSTEMS else None


def _warn_network_store(path: str, kind: str, point: str) -> None:
    if path in _WARNED:
        return
    _WARNED.add(path)
    print(
        f"xover: warning: the store {path} is on a network filesystem ({kind} at {point}), where SQLite's WAL "
        "mode is unsafe; using its rollback journal instead. For a store on shared storage or written from "
        "several nodes, use PostgreSQL (--db postgresql://...; docs/security.md)",
        file=sys.stderr,
        flush=True,
    )


def _sqlite_pragmas(dbapi_connection, _record, journal: str | None = "WAL") -> None:
    """`journal`: the journal mode to switch the file to; None: the file's own, as an opening that may not write
    it (mode=ro) has to keep it ("attempt to write a readonly database" where it was not WAL already)."""
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA busy_timeout=30000")  # first: switching a new file to WAL waits for its lock too
    if journal is None:
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()
        return
    cursor.execute(f"PRAGMA journal_mode={journal}")
    row = cursor.fetchone()
    mode = str(row[0]).lower() if row else "?"
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()
    # SQLite answers with the mode it is in, and keeps the old one without an error where it cannot
    # switch (another connection, a transaction): a store left in WAL where xover chose the rollback
    # journal (a network filesystem) must not be used as if it had switched.
    if journal.upper() != "WAL" and mode != journal.lower():
        raise StoreError(
            f"the store is in SQLite's {mode} journal mode and could not be switched to {journal}, "
            "which its network filesystem needs (another process has it open?); close the other "
            "xover or sqlite3 using it and try again, or use PostgreSQL (docs/security.md)"
        )


def _pragmas_for(url: str):
    """The connect hook for a SQLite URL: WAL, or the rollback journal (DELETE) on a network filesystem; the
    file's own journal where it is opened read-only (`?mode=ro&uri=true`)."""
    opening = sqlite_opening(url)
    database = opening.file if opening is not None else None  # the file SQLite opens: not file:a.db of a URI
    if database is None:
        return _sqlite_pragmas
    if opening is not None and opening.read_only:
        return lambda connection, record: _sqlite_pragmas(connection, record, journal=None)
    network = network_filesystem(database)
    if network is None:
        return _sqlite_pragmas
    _warn_network_store(str(database), *network)
    return lambda connection, record: _sqlite_pragmas(connection, record, journal="DELETE")


def upgrade_engine(url: str) -> Engine:
    """The engine an upgrade runs on. On SQLite, pysqlite opens a transaction only before DML and runs
    DDL at once, so a migration failing half-way would keep its new column but not its revision, and
    every later open would fail on the column ("duplicate column name"). Here SQLAlchemy emits BEGIN
    itself, so the whole upgrade is one transaction that a failure rolls back."""
    engine = create_engine(url)
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _pragmas_for(url))

        @event.listens_for(engine, "connect")
        def _driver_begins_nothing(dbapi_connection, _record) -> None:
            dbapi_connection.isolation_level = None

        @event.listens_for(engine, "begin")
        def _begin(connection: Connection) -> None:
            connection.exec_driver_sql("BEGIN IMMEDIATE")  # the write lock up front: busy_timeout waits for it

    return engine


def _alembic_config(connection: Connection | None):
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """The newest migration xover ships: the revision every store is upgraded to."""
    from alembic.script import ScriptDirectory

    config = _alembic_config(None)
    head = ScriptDirectory.from_config(config).get_current_head()
    assert head is not None  # xover ships its migrations: there is always a head
    return head


class Store:
    """An open database with the current schema; `session()` gives a unit of work. `read_only`: a SQLite file
    in a folder this user cannot write, opened to be read as it stands (`open_store_to_read`)."""

    def __init__(self, db: str | None = None, read_only: Path | None = None) -> None:
        self.url = database_url(db)
        self.read_only = read_only is not None
        if read_only is not None:
            # immutable: SQLite makes no WAL index (-shm) beside it, which is what a folder it cannot write refuses
            uri = f"{read_only.resolve().as_uri()}?mode=ro&immutable=1"  # a file URI is of an absolute path
            self.engine: Engine = create_engine("sqlite://", creator=lambda: sqlite3.connect(uri, uri=True))
        else:
            self.engine = create_engine(self.url)
        self.kind = self.engine.dialect.name
        if self.kind == "sqlite" and read_only is None:
            event.listen(self.engine, "connect", _pragmas_for(self.url))
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        # the SQLite file as opened, to tell when another took its path (gone()); None: not a file written here
        self.file: Path | None = None
        self._opened: tuple[int, int] | None = None
        try:
            if read_only is None:
                self._upgrade()
            else:
                self._refuse_unless_current()
        except OperationalError as error:
            raise store_error(self.url, error.orig) from None
        if self.kind == "sqlite" and read_only is None:
            self._remember_file()

    def _remember_file(self) -> None:
        file = sqlite_file(self.url)
        if file is None:
            return
        try:
            self._opened = file_identity(file.stat())
        except OSError:  # made by the upgrade a moment ago: nothing to compare with later, so no check
            return
        self.file = file
        # a connection opened once the file is gone would make a new, empty store at its path behind the user's
        # back (the pool opens one when it needs another): refused, before SQLite creates anything
        event.listen(self.engine, "do_connect", self._refuse_connecting_if_gone)

    def _refuse_connecting_if_gone(self, *_args) -> None:
        self.check_in_place()

    def gone(self) -> str | None:
        """'removed' or 'replaced' where the SQLite file this store opened is no longer the one at its path
        (deleted, or another file moved there), else None; always None for another database. One stat."""
        if self.file is None or self._opened is None:
            return None
        try:
            now: os.stat_result | None = os.stat(self.file)
        except FileNotFoundError:
            now = None
        except OSError:  # a folder gone unreadable is not a file replaced: the next write says what is wrong
            return None
        return moved_away(self._opened, now)

    def check_in_place(self) -> None:
        """Refuse to write on (StoreGone) once the SQLite file this store opened has left its path: its writes
        would go into an unlinked file, lost."""
        how = self.gone()
        if how is not None:
            raise StoreGone(store_gone_words(self.file, how))

    def _refuse_unless_current(self) -> None:
        """A store opened read-only cannot be upgraded: one of an older schema is refused, naming what to do."""
        with self.engine.connect() as connection:
            if self._current_revision(connection) != head_revision():
                raise StoreError(
                    f"the database {shown_url(self.url)} is in a folder you cannot write, and needs upgrading to "
                    "this xover's schema first: copy it into a folder you can write and point --db at the copy"
                )

    def _current_revision(self, connection: Connection) -> str | None:
        from alembic.runtime.migration import MigrationContext

        return MigrationContext.configure(connection).get_current_revision()

    def _upgrade(self) -> None:
        head = head_revision()
        # The look at the revision is under the lock too: on SQLite the first connection to a new file
        # switches it to WAL, and several processes creating one database at once could fail there
        # ("database is locked"; docs/measurements.md, *Figures behind the design*).
        with self._migration_lock():
            with self.engine.connect() as connection:
                if self._current_revision(connection) == head:
                    return
            upgrading = upgrade_engine(self.url) if self.kind == "sqlite" else self.engine
            try:
                self._upgrade_on(upgrading, head)
            finally:
                if upgrading is not self.engine:
                    upgrading.dispose()

    def _upgrade_on(self, engine: Engine, head: str) -> None:
        with engine.begin() as connection:
            from alembic import command
            from alembic.script import ScriptDirectory

            tables = set(inspect(connection).get_table_names())
            config = _alembic_config(connection)
            current = self._current_revision(connection)
            known = {r.revision for r in ScriptDirectory.from_config(config).walk_revisions()}
            # every xover store has had schema_info since the first; one that lost it still names our revision
            if tables and SchemaInfo.__tablename__ not in tables and current not in known:
                raise StoreError(
                    f"the database {shown_url(self.url)} is not an xover store: it holds another application's "
                    f"tables ({', '.join(sorted(tables)[:5])}{', ...' if len(tables) > 5 else ''}), which xover "
                    "leaves as they are: use another --db (a new file, or an xover store)"
                )
            if current is not None and current not in known:
                raise StoreError(
                    f"the database {shown_url(self.url)} was written by a newer xover (schema revision {current}); "
                    f"this xover {__version__} knows up to {head}. Upgrade xover or use another --db."
                )
            unversioned = current is None and "runs" in tables
            if unversioned:
                self._refuse_newer_unversioned(connection)
                command.stamp(config, PRE_MIGRATION_REVISION)  # written before migrations existed
            try:
                command.upgrade(config, "head")
            except DBAPIError as error:
                if not unversioned:
                    raise
                # taken for a store from before migrations, it had had some: its alembic_version table was lost
                raise StoreError(
                    f"the database {shown_url(self.url)} holds xover's tables but no record of their schema "
                    f"revision (its alembic_version table is missing), and they are newer than the first: "
                    f"{' '.join(str(error.orig).split())}. It is left as it was; restore that table from a copy of "
                    "the store, or use another --db"
                ) from None
            info = connection.execute(select(SchemaInfo.id)).first()
            if info is None:
                connection.execute(insert(SchemaInfo).values(version=SCHEMA_VERSION, written_by=__version__))
            else:
                connection.execute(update(SchemaInfo).values(version=SCHEMA_VERSION, written_by=__version__))

    def _refuse_newer_unversioned(self, connection: Connection) -> None:
        row = connection.execute(text("SELECT version, written_by FROM schema_info")).first()
        if row is not None and row[0] > SCHEMA_VERSION:
            raise StoreError(
                f"the database {shown_url(self.url)} was written by a newer xover ({row[1]}, schema {row[0]}); "
                f"this xover {__version__} reads schema {SCHEMA_VERSION}. "
                "Upgrade xover or use another database with --db."
            )

    @contextlib.contextmanager
    def _migration_lock(self):
        """One opening at a time: a lock file beside a SQLite database (none where it cannot be written: a
        database there is only read), an advisory lock on PostgreSQL."""
        if self.kind == "sqlite":
            opening = sqlite_opening(self.url)
            if opening is None or opening.file is None or opening.read_only:  # a read-only opening upgrades nothing
                yield
                return
            # beside the file itself, where SQLite keeps its WAL: a store reached through a link and by its own path
            # is one store, under one lock; the file SQLite opens, not the URL's name (file:a.db made file:a.db.lock)
            # Never through a link, never truncated (a link planted beside the store would have had its target
            # emptied by "w"), only a regular file: anything else and it goes unlocked
            lock = migration_lock_of(str(opening.file))
            flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
            try:
                try:
                    fd, created = os.open(lock, flags | os.O_EXCL, 0o644), True
                except FileExistsError:
                    fd, created = os.open(lock, flags, 0o644), False
            except OSError:
                yield
                return
            with os.fdopen(fd, "rb", buffering=0) as handle:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    yield
                    return
                fcntl.flock(handle, fcntl.LOCK_EX)
                try:
                    yield
                except BaseException:
                    if created:  # a file refused as a store (not a database, a newer one): leave nothing beside it
                        with contextlib.suppress(OSError):
                            os.unlink(lock)
                    raise
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
        """A new session; callers close it (a `with` block)."""
        return self._sessions()

    def check_writable(self) -> None:
        """Refuse a store that opens but will not take a write (a read-only file or mount, `?mode=ro`, a user
        granted SELECT only), before long work whose result it would refuse: one row rewritten as it was, in a
        transaction rolled back."""
        try:
            with self.engine.connect() as connection, connection.begin() as transaction:
                connection.execute(update(SchemaInfo).values(version=SchemaInfo.version))
                transaction.rollback()
        except SQLAlchemyError as error:
            raise store_failed(self.url, getattr(error, "orig", None) or error) from None

    def close(self) -> None:
        """Close the engine's pooled connections."""
        self.engine.dispose()


def open_store_to_read(db: str | None = None) -> Store:
    """The store for a command that only reads it (`xover report`): as `open_store`, but a SQLite file in a
    folder this user cannot write (another user's results, a read-only mount) is opened read-only, where
    SQLite's WAL would refuse it ("unable to open database file": its -shm file cannot be made there)."""
    file = sqlite_file(database_url(db, create_folder=False))
    if file is None or not file.is_file() or os.access(file.parent, os.W_OK):
        return open_store(db)
    wal = Path(f"{file}-wal")
    if wal.exists() and wal.stat().st_size > 0:  # writes not yet in the file, which a read-only opening would miss
        raise store_error(
            database_url(db, create_folder=False),
            f"its folder cannot be written here and {wal.name} holds writes not yet in the file: copy both into "
            "a folder you can write and point --db at the copy",
        )
    try:
        return Store(db, read_only=file)
    except SQLAlchemyError as error:
        raise store_error(database_url(db, create_folder=False), getattr(error, "orig", None) or error) from None


def open_store(db: str | None = None) -> Store:
    """The store at `db` (else XOVER_DB, else the default file), migrated; a failure is one line."""
    try:
        return Store(db)
    except SQLAlchemyError as error:  # the driver's own words, without SQLAlchemy's link to its FAQ
        raise store_error(database_url(db, create_folder=False), getattr(error, "orig", None) or error) from None
    except ImportError as error:  # mysql://, oracle://: a database whose driver is not installed here
        raise store_error(database_url(db, create_folder=False), f"its driver is not installed ({error})") from None
    except ValueError as error:  # a URL SQLAlchemy cannot read, e.g. a port that is not a number
        raise store_error(
            database_url(db, create_folder=False), f"not a database URL SQLAlchemy reads ({error})"
        ) from None
