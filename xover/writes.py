"""Files a user names (a plan, a report's page and CSV files) written whole or not at all: a write that fails
part-way (a full disk) leaves the file that was there as it was, not the first few kilobytes of the new one."""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

from .errors import NotWritten


def write_whole(path: str | os.PathLike[str], text: str, private: bool = False) -> None:
    """`text` (UTF-8) written to `path` whole: into a new file beside it, synced, then renamed over it. The file
    keeps the mode (and, where xover may set it, the owner) of the file it replaces; a new one gets what open()
    gives (0666 less the umask). `private`: mode 0600 whatever was there (it holds a secret). The new file is
    never readable by more users than its final mode lets. A link is followed: the file it names is replaced.
    A failure raises NotWritten naming `path`, its `kept` saying whether a file there is left as it was."""
    target = Path(os.path.realpath(path))
    try:
        before: os.stat_result | None = os.stat(target)
    except FileNotFoundError:
        before = None
    except OSError as error:
        raise NotWritten(error.errno, error.strerror, os.fspath(path)) from None
    if before is not None and not stat.S_ISREG(before.st_mode):  # a device (/dev/null): there is no file to keep
        _write_into(path, text)
        return
    # open() applies the umask to 0666 for a new file; a file that replaces another starts at 0600 and is then
    # given the mode of the one it replaces, before a byte is written
    final_mode = 0o600 if private else None if before is None else stat.S_IMODE(before.st_mode)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    temporary = target.with_name(f".xover-{secrets.token_hex(6)}.tmp")  # short: a name near the system's limit
    try:
        descriptor = os.open(temporary, flags, 0o666 if final_mode is None else 0o600)
    except OSError as error:
        raise NotWritten(error.errno, error.strerror, os.fspath(path), kept=before is not None) from None
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as out:
            if before is not None and (before.st_uid, before.st_gid) != (os.geteuid(), os.getegid()):
                with contextlib.suppress(OSError):  # only root may give a file away: others get theirs
                    os.fchown(descriptor, before.st_uid, before.st_gid)
            if final_mode is not None:
                os.fchmod(descriptor, final_mode)
            out.write(text)
            out.flush()
            os.fsync(descriptor)
        os.replace(temporary, target)
    except BaseException as error:  # Ctrl-C too: no temporary file is left behind
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(error, OSError):
            raise NotWritten(error.errno, error.strerror, os.fspath(path), kept=before is not None) from None
        raise


def _write_into(path: str | os.PathLike[str], text: str) -> None:
    try:
        with open(path, "w", encoding="utf-8") as out:
            out.write(text)
    except OSError as error:
        raise NotWritten(error.errno, error.strerror, os.fspath(path)) from None
