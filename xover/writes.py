"""Files a user names (a plan, a report's page and CSV files) written whole or not at all: a write that fails
part-way (a full disk) leaves the file that was there as it was, not the first few kilobytes of the new one."""

from __future__ import annotations

import contextlib
import errno
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
    An existing file you may not write is refused, as writing it would be. Where no file can be made beside it
    (a folder you may not write, a file mounted alone) it is written in place, as before: whole only if the
    write goes through. A failure raises NotWritten naming `path`, its `kept` saying whether a file there is
    left as it was."""
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
    if before is not None and not os.access(target, os.W_OK):  # a rename would replace a file written as read-only
        raise NotWritten(errno.EACCES, os.strerror(errno.EACCES), os.fspath(path), kept=True)
    # open() applies the umask to 0666 for a new file; a file that replaces another starts at 0600 and is then
    # given the mode of the one it replaces, before a byte is written
    final_mode = 0o600 if private else None if before is None else stat.S_IMODE(before.st_mode)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    temporary = target.with_name(f".xover-{secrets.token_hex(6)}.tmp")  # short: a name near the system's limit
    try:
        descriptor = os.open(temporary, flags, 0o666 if final_mode is None else 0o600)
    except OSError as error:
        if before is not None and error.errno in _NO_FILE_BESIDE:  # a file you may write, in a folder you may not
            _write_into(path, text, private)
            return
        raise NotWritten(error.errno, error.strerror, os.fspath(path), kept=before is not None) from None
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as out:
            if before is not None and (before.st_uid, before.st_gid) != (os.geteuid(), os.getegid()):
                try:  # only root may give a file away; its group, any member of it (a shared file's)
                    os.fchown(descriptor, before.st_uid, before.st_gid)
                except OSError:
                    with contextlib.suppress(OSError):
                        os.fchown(descriptor, -1, before.st_gid)
            if final_mode is not None:
                os.fchmod(descriptor, final_mode)
            out.write(text)
            out.flush()
            os.fsync(descriptor)
        os.replace(temporary, target)
    except BaseException as error:  # Ctrl-C too: no temporary file is left behind
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(error, OSError) and error.errno == errno.EBUSY and before is not None:  # a file mounted alone
            _write_into(path, text, private)
            return
        if isinstance(error, OSError):
            raise NotWritten(error.errno, error.strerror, os.fspath(path), kept=before is not None) from None
        raise


# a file beside the one replaced cannot be made: the folder is not yours to write (the file is)
_NO_FILE_BESIDE = (errno.EACCES, errno.EPERM, errno.EROFS)


def _write_into(path: str | os.PathLike[str], text: str, private: bool = False) -> None:
    try:
        if private:
            with contextlib.suppress(OSError):  # a device's mode is not its to change
                if stat.S_ISREG(os.stat(path).st_mode):
                    os.chmod(path, 0o600)
        with open(path, "w", encoding="utf-8") as out:
            out.write(text)
    except OSError as error:
        raise NotWritten(error.errno, error.strerror, os.fspath(path)) from None
