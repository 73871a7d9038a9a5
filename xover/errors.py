"""Errors a user can fix (the CLI prints them as one message and exits 2, without a traceback), and
how a run was cut short (Ctrl-C: exit 130; --timeout: exit 124)."""

from __future__ import annotations

import errno
import itertools
import json
import math
import os
import re
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

from .redact import mask_credentials

MAX_SECONDS = 10**8  # of a duration flag: about three years (1e308 overflowed the timers and the counts from it)


class XoverError(Exception):
    """An expected failure caused by input (a file, a field, a flag) that the user can correct."""

    exit_code = 2


class StartFailed(XoverError):
    """A unit's start that failed once its runs were recorded (a host's turn server that did not start, a
    launcher): its runs are kept as failed, so the command ends as a run whose job did not finish does (1), not
    as refused input, which keeps nothing (2)."""

    exit_code = 1


def printable(text: str | os.PathLike) -> str:
    """`text` (a path, a name, a flag's value) as one line shows it: a byte that is not UTF-8 as \\xNN, a newline
    or another control character escaped (an error naming a value is one line, whatever the value holds)."""
    decoded = os.fsencode(text).decode("utf-8", "backslashreplace")
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in decoded)


def named_path(text: str | os.PathLike[str], what: str, error: type[XoverError] = XoverError) -> Path:
    """`text` as a path, refused where it is empty: Path('') is '.', this folder, which each reader then called a
    folder or 'not a regular file' without saying that nothing was named. `what`: what to name instead."""
    if not os.fspath(text).strip():
        raise error(f"{os.fspath(text)!r}: an empty path; name {what}")
    return Path(text)


def refuse_unless_regular(path: Path, what: str, error: type[XoverError] = XoverError) -> Path:
    """`path`, refused where it names a device, a pipe or a folder: a read of /dev/zero never ends. A path that
    does not exist is left to its reader, which says so in its own words."""
    try:
        irregular = path.exists() and not path.is_file()
    except OSError:  # a name too long for the system (exists() raises it): the reader's open says so, in its words
        return path
    if irregular:
        raise error(f"{printable(path)}: not a regular file ({what})")
    return path


def write_problem(path: str | os.PathLike[str], error: OSError) -> str:
    """Why `path` could not be written, in words: a file where a folder on its way should be (`--out a/x.html`
    where a is a file) is named, not left as the system's "File exists" or "Not a directory"."""
    for parent in Path(path).parents:
        try:
            if parent.exists() and not parent.is_dir():
                return f"{printable(parent)} is a file, not a folder"
        except OSError:  # a folder's name too long for the system: exists() raises it; `error` says so
            continue
    # `--out DIR/`: the system's "Is a directory" says what, not what to do
    said = "it is a folder: name a file (in it, or beside it)" if error.errno == errno.EISDIR else None
    if not isinstance(error, NotWritten):
        return said or str(error.strerror or error)
    kept = " (the file that was there is kept as it was)" if error.kept else ""
    others = [printable(other) for other in error.together if os.fspath(other) != os.fspath(path)]
    if error.replaced:  # a rename refused after others went through
        kept += f"; {', '.join(map(printable, error.replaced))} replaced already, the others left as they were"
    elif others:
        kept += f"; none of its set was replaced ({', '.join(others)} left as they were)"
    return (said or str(error.strerror or error)) + kept


class NotWritten(OSError):
    """A file xover was writing whole (writes.write_whole) was not written; `filename` is the file named, never
    the temporary one. `kept`: a file was there, and is left as it was. Of a set written together
    (writes.write_all_whole): `together`, the files of the set; `replaced`, those replaced before the failure
    (none, unless a rename failed after others went through)."""

    def __init__(self, code: int | None, reason: str | None, filename: str, kept: bool = False) -> None:
        super().__init__(code, reason, filename)
        self.kept = kept
        self.together: tuple[str, ...] = ()
        self.replaced: tuple[str, ...] = ()


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether two paths name one file: links followed (a symbolic link, or a hard link: another name for the
    same inode); paths that do not exist yet are compared as they resolve."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet): not the same file
        return False


def refuse_overwriting(
    out: str | os.PathLike[str],
    kept: Iterable[tuple[str | os.PathLike[str], str]],
    flag: str,
    *,
    writes: Iterable[str | os.PathLike[str]] = (),
) -> None:
    """An output path that names a file the command must keep (the store, one of its own inputs), refused:
    writing there would destroy it. Links are followed: another name for the same file is the same file.

    `writes`: the other files `out` makes the command write (FILE.csv's FILE-jobs.csv beside it, the files in
    a folder), each checked the same way, before the first is written. An output that is neither a regular file
    nor a folder (a pipe, whose open blocks until a reader comes, for ever; a device; a socket) is refused too,
    and a folder where one of `writes` should be a file."""
    kept = list(kept)
    shown = f"{flag} {out}"
    if os.path.exists(out) and not (os.path.isfile(out) or os.path.isdir(out)):
        raise XoverError(f"{shown}: not a regular file or a folder (a pipe or a device): choose a file's path")
    for path, what in kept:
        if same_file(path, out):
            raise XoverError(f"{shown}: that is {what}; writing there would destroy it: choose another path")
    for written in writes:
        if os.fspath(written) == os.fspath(out):
            continue
        clash = _clash(written, kept)
        if clash is not None:
            raise XoverError(f"{shown}: it writes {written} too, which is {clash}: choose another path")


def _clash(written: str | os.PathLike[str], kept: list[tuple[str | os.PathLike[str], str]]) -> str | None:
    """What writing `written` would do wrong, as 'it writes X too, which is ...' ends; None: nothing."""
    if os.path.exists(written) and not os.path.isfile(written):
        return "not a regular file (a folder, a pipe or a device)"
    what = next((what for path, what in kept if same_file(path, written)), None)
    return f"{what}; writing there would destroy it" if what is not None else None


def refuse_writing(files: Iterable[str | os.PathLike[str]], kept: Iterable[tuple[str | os.PathLike[str], str]]) -> None:
    """Files a command writes where no flag names them (the pictures in the results folder), refused where one
    is a file the command must keep or is not a regular file, before the first is written."""
    kept = list(kept)
    for written in files:
        clash = _clash(written, kept)
        if clash is not None:
            raise XoverError(f"{written}: xover writes there, and it is {clash}: move it, or set XOVER_RESULTS")


_COMPRESSED = {
    b"\x1f\x8b": "gzip: gunzip it",
    b"BZh": "bzip2: bunzip2 it",
    b"\xfd7zXZ": "xz: unxz it",
    b"PK\x03\x04": "a zip archive: unzip it",
    b"(\xb5/\xfd": "zstd: unzstd it",
}


def not_utf8_text(path: str | os.PathLike[str]) -> str:
    """What to say of a file that is not UTF-8 text: `PATH: not a UTF-8 text file`, and how to decompress one
    that is compressed (traces are often kept so)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(6)
    except OSError:
        head = b""
    how = next((how for magic, how in _COMPRESSED.items() if head.startswith(magic)), None)
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):  # a spreadsheet's "Unicode text" export
        return f"{path}: not a UTF-8 text file (UTF-16: convert it first, e.g. iconv -f UTF-16 -t UTF-8)"
    return f"{path}: not a UTF-8 text file" + (f" (compressed with {how} first)" if how else "")


def quoted(text: str | None, keep: int = 60) -> str:
    """`text` as a message quotes it (repr), cut to its first `keep` characters where it is longer, with its length
    said: a setting or flag of 5,000 digits was repeated whole in its one-line error. A password in it (a URL's,
    `token=...`) is shown as ***: a metric sink's URL in XOVER_METRIC_SINKS was repeated whole, twice."""
    if text is None:
        return repr(text)
    length, text = len(text), mask_credentials(text)  # the length the user gave
    return repr(text) if len(text) <= keep else f"{text[:keep]!r}... ({length} characters)"


def is_utf8(text: str | os.PathLike[str]) -> bool:
    """Whether `text` (a path, as Python decodes a file's name) holds no byte that is not UTF-8: the store keeps
    paths as text, and such a byte (a lone surrogate here) failed its insert."""
    try:
        str(text).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def escaped_bytes(text: str) -> str:
    """`text` with a file name's bytes that are not UTF-8 (the lone surrogates Python decodes them to) written as
    `\\udcff`: as they were, a store's insert and a print raised UnicodeEncodeError."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


# characters of a CSV file's line (a trace's are under 200): csv reads a line whole before its field limit applies,
# so a file of a gigabyte without a newline (a sparse file of NULs is UTF-8) was read into memory whole
MAX_CSV_LINE = 1_000_000


def csv_lines(path: str | os.PathLike[str], handle: TextIO, error: type[XoverError] = XoverError) -> Iterator[str]:
    """The lines of a CSV file's `handle` for csv.reader, each at most MAX_CSV_LINE characters: a longer one is
    refused (`error`, naming the file and the line) before it is read whole."""
    for number in itertools.count(1):
        line = handle.readline(MAX_CSV_LINE + 1)
        if not line:
            return
        if len(line) > MAX_CSV_LINE:
            raise error(
                f"{path}: line {number}: longer than {MAX_CSV_LINE:,} characters: not a CSV file of a row a line"
            )
        yield line


class DuplicateKeyError(XoverError):
    """A JSON file whose object gives one key twice: a JSON reader keeps the last and drops the other silently."""


class _Duplicated(dict[str, Any]):
    """An object of a JSON document that gave some key twice (`duplicates`, in the order they came)."""

    duplicates: list[str]


def _pairs_keeping_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json's object_pairs_hook: the object as json.loads makes it (the last value of a key), marked where a key
    came twice, so that the caller can say where."""
    fields = dict(pairs)
    if len(fields) == len(pairs):
        return fields
    seen: set[str] = set()
    marked = _Duplicated(fields)
    marked.duplicates = []
    for key, _ in pairs:
        if key in seen:
            marked.duplicates.append(key)
        seen.add(key)
    return marked


def json_path(where: str, key: str) -> str:
    """`where.key`, the path to a field of a JSON document (`key` at the top level); a key that is not plain text
    (a terminal's escape sequence, a newline) or longer than 40 characters quoted, escaped and cut, as
    `where['a\\x1b[2J']`: it is printed."""
    if key.isprintable() and len(key) <= 40:
        return f"{where}.{key}" if where else key
    return f"{where}[{key[:40]!r}{'...' if len(key) > 40 else ''}]"


def _first_duplicate(value: Any, where: str) -> tuple[str, str] | None:
    """The first object of `value` (depth first, in the document's order, an object before what it holds) that
    gives a key twice: (where it is, as `groups[1]` or `jobs.resnet`; the key), or None."""
    if isinstance(value, _Duplicated):
        return where, value.duplicates[0]
    children: Iterable[tuple[str, Any]] = ()
    if isinstance(value, dict):
        children = ((json_path(where, key), item) for key, item in value.items())
    elif isinstance(value, list):
        children = ((f"{where}[{index}]", item) for index, item in enumerate(value))
    for path, item in children:
        if isinstance(item, (dict, list)) and (found := _first_duplicate(item, path)) is not None:
            return found
    return None


class LongInteger:
    """An integer in a JSON file of more digits than Python converts (4,300 by default): kept as its text, so that
    the reader of its field refuses it there by name ('groups[0].wave': must be a whole number ..., got an integer
    of 5000 digits) instead of the whole file failing with no field named. Neither an int nor a str: every check
    of a field's type refuses it."""

    def __init__(self, text: str) -> None:
        self.digits = len(text.lstrip("-"))

    def __repr__(self) -> str:
        return f"an integer of {self.digits} digits"


def _integer(text: str) -> int | LongInteger:
    limit = sys.get_int_max_str_digits()
    return LongInteger(text) if limit and len(text.lstrip("-")) > limit else int(text)


def json_without_duplicate_keys(text: str, source: str) -> Any:
    """`text` as json.loads reads it, refused (DuplicateKeyError, naming `source`, the key and where it is) where an
    object gives a key twice: json.loads would keep the last value and drop the other without a word (a plan's
    group edited to another way of sharing, with the old "sharing" left above the new). An integer too long to
    convert is a LongInteger, for its field's check to refuse. json.loads' own errors (ValueError, RecursionError)
    pass through."""
    marked = False

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal marked
        fields = _pairs_keeping_duplicates(pairs)
        marked = marked or isinstance(fields, _Duplicated)
        return fields

    document = json.loads(text, object_pairs_hook=hook, parse_int=_integer)
    found = _first_duplicate(document, "") if marked else None
    if found is not None:
        where, key = found
        shown = key if len(key) <= 40 else key[:40] + "..."
        raise DuplicateKeyError(
            f"{source}: the key {shown!r} is given twice {f'in {where}' if where else 'at the top level'} (a JSON "
            "reader keeps only the last, so the other would be ignored without a word): remove one of them"
        )
    return document


# a number as files and flags write it: ASCII digits, a sign, a point, an exponent (and nan or inf, which
# their readers refuse in their own words); float() also reads '١', '１' and '1_000'
_DECIMAL = re.compile(
    r"\s*[-+]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|(?i:nan|inf|infinity))\s*", re.ASCII
)


def decimal(text: str) -> float | None:
    """`text` as a number, or None where it is not one written with ASCII digits."""
    return float(text) if _DECIMAL.fullmatch(text) else None


def check_seconds(flag: str, value: float | None, *, zero: bool = False) -> None:
    """A duration flag: a finite number of seconds > 0 (>= 0 with `zero`), at most MAX_SECONDS (nan would never
    expire, inf never end)."""
    if value is None:
        return
    words = "a number of seconds >= 0" if zero else "a positive number of seconds"
    if not (math.isfinite(value) and (value >= 0 if zero else value > 0) and value <= MAX_SECONDS):
        raise XoverError(f"{flag} must be {words}, at most {MAX_SECONDS:.0e}, got {value:g}")


class Interrupted(BaseException):
    """Ctrl-C or SIGTERM reached the run: every process was stopped and the runs marked.

    A BaseException, as KeyboardInterrupt is: raised from a signal handler, it lands inside whatever the
    main thread runs, and code that handles its own failures with `except Exception` (SQLAlchemy wraps
    them into StatementError, a metric sink's failure is said and the sink left out) must let it pass."""


class TimedOut(Exception):
    """--timeout passed: every process was stopped and the runs marked `timeout`."""
