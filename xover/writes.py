"""Files a user names (a plan, a report's page and CSV files) written whole or not at all: a write that fails
part-way (a full disk) leaves the file that was there as it was, not the first few kilobytes of the new one; the
files of one set (a report's CSV files) are replaced together or none of them."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import secrets
import stat
from collections.abc import Mapping, Sequence
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
    _write_set([(path, text)], private)


def write_all_whole(files: Mapping[Path, str] | Mapping[str, str], private: bool = False) -> None:
    """Files that make one set (a report's CSV files), each written as write_whole writes one, and replaced
    together as far as a filesystem lets: every new file is written and synced beside its target first, and only
    when all are written are they renamed over the old ones, one after another (a rename needs no space). A
    write that fails (a full disk, a folder where a file goes) removes the new files and leaves every file of
    the set as it was: NotWritten names the file that failed, `kept` as for one file, `together` the set. A file
    that must be written in place (write_whole's exceptions) is written first, before any rename. Only a rename
    refused after others went through (rare: a file mounted alone) leaves some replaced: NotWritten's `replaced`
    names them. Ctrl-C before the renames leaves every file as it was."""
    _write_set(list(files.items()), private)


def _write_set(files: Sequence[tuple[str | os.PathLike[str], str]], private: bool) -> None:
    """write_all_whole's work, of (path, text) pairs."""
    named = tuple(os.fspath(path) for path, _ in files)
    staged: list[_Staged] = []
    try:
        for path, text in files:
            staged.append(_stage(path, text, private))
    except BaseException as error:  # Ctrl-C too: no new file is left behind
        for each in staged:
            each.discard()
        if isinstance(error, NotWritten) and len(files) > 1:
            error.together = named
        raise
    in_place_first = sorted(staged, key=lambda each: each.temporary is not None)  # the writes that may fail
    for done, each in enumerate(in_place_first):
        try:
            each.put_in_place()
        except BaseException as error:
            for rest in in_place_first[done:]:  # its own too, if Ctrl-C came before its rename
                rest.discard()
            if isinstance(error, NotWritten) and len(files) > 1:
                error.together = named
                error.replaced = tuple(os.fspath(before.path) for before in in_place_first[:done])
            raise


@dataclasses.dataclass
class _Staged:
    """A file of write_all_whole's set, written beside its target (`temporary`), or to be written in place
    (`temporary` None: a device, or a file no new file can be made beside)."""

    path: str | os.PathLike[str]  # as named
    target: Path  # the file it names, links followed
    temporary: Path | None
    text: str
    private: bool
    existed: bool

    def put_in_place(self) -> None:
        """The new file renamed over the target (or the text written into it in place)."""
        if self.temporary is None:
            _write_into(self.path, self.text, self.private)
            return
        try:
            os.replace(self.temporary, self.target)
        except OSError as error:
            self.discard()
            if error.errno == errno.EBUSY and self.existed:  # a file mounted alone
                _write_into(self.path, self.text, self.private)
                return
            raise NotWritten(error.errno, error.strerror, os.fspath(self.path), kept=self.existed) from None

    def discard(self) -> None:
        """The new file removed, if one was made (the target left as it is)."""
        if self.temporary is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.temporary)


def _stage(path: str | os.PathLike[str], text: str, private: bool) -> _Staged:
    """`text` written and synced into a new file beside `path` (write_whole's rules), not yet renamed over it."""
    target = Path(os.path.realpath(path))
    try:
        before: os.stat_result | None = os.stat(target)
    except FileNotFoundError:
        before = None
    except OSError as error:
        raise NotWritten(error.errno, error.strerror, os.fspath(path)) from None
    if before is not None and not stat.S_ISREG(before.st_mode):  # a device (/dev/null): there is no file to keep
        return _Staged(path, target, None, text, private, existed=True)
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
            return _Staged(path, target, None, text, private, existed=True)
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
    except BaseException as error:  # Ctrl-C too: no temporary file is left behind
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(error, OSError):
            raise NotWritten(error.errno, error.strerror, os.fspath(path), kept=before is not None) from None
        raise
    return _Staged(path, target, temporary, text, private, existed=before is not None)


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
