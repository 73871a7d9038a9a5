"""Where xover's own files are: the checkout every process it starts imports, and the results folder."""

from __future__ import annotations

import errno
import os
import pwd
import stat
from pathlib import Path

from .errors import XoverError, printable, write_problem
from .settings import RESULTS_VARIABLE, settings

# The folder above xover/: a checkout's root (bench/, recipes/, tests/, docs/, scripts/ beside the package), or an
# environment's site-packages where xover is installed.
XOVER_ROOT = str(Path(__file__).resolve().parent.parent)
# A folder holding the xover package and nothing else (a checkout's pythonpath/, whose `xover` is a link to
# ../xover): put first on PYTHONPATH of every process xover starts (ranks, launchers, turn servers, the reaper,
# Slurm jobs, sweeps through ssh; on another host at the same path, as the checkout is) so that they import this
# xover, installed or not, and no folder of the checkout stands in for a user's own package named so (a `bench`
# of theirs on their PYTHONPATH imported by their script). Without it (xover installed, or the link lost in a
# copy), the root itself, after the user's own entries.
XOVER_ONLY = Path(XOVER_ROOT) / "pythonpath"


def _only_xover(folder: Path) -> bool:
    """Whether `folder` holds this xover package (its `xover` is this package's folder) and nothing else."""
    try:
        return [entry.name for entry in folder.iterdir()] == ["xover"] and (folder / "xover").resolve() == Path(
            __file__
        ).resolve().parent
    except OSError:
        return False


XOVER_PATH_FIRST = str(XOVER_ONLY) if _only_xover(XOVER_ONLY) else None


def xover_pythonpath(given: str | None = None) -> str:
    """PYTHONPATH for a process xover starts, from `given` (the user's own, kept in its order): the folder of the
    xover package alone before it, or (no such folder) the root after it."""
    if XOVER_PATH_FIRST is not None:
        return os.pathsep.join(filter(None, [XOVER_PATH_FIRST, given]))
    entries = given.split(os.pathsep) if given else []
    return os.pathsep.join([*entries, XOVER_ROOT] if XOVER_ROOT not in entries else entries)


def results_root() -> Path:
    """Where run logs go: results/ by default, XOVER_RESULTS to move them (tests use a temp dir). Checked
    on every use (check_results_folder): refused, in one line, where another user could plant names."""
    root = settings().results
    check_results_folder(root)
    return root


def check_results_folder(root: Path) -> None:
    """Refuse a results folder (or its runs/) where another user could put a link or a folder of theirs
    under a name xover writes (runs/<id>/, plan.json, report.html), and so have xover write through it: it
    must be a folder of this user's (the root may be this user's link to one), or root's and sticky (as
    /tmp: then runs/ must be this user's), and no one else may write in it without the sticky bit. A
    folder that does not exist yet is fine: this user makes it. Group members count as the owner."""
    for folder, is_root in ((root, True), (root / "runs", False)):
        try:
            link = os.lstat(folder)
        except FileNotFoundError:
            continue
        except OSError as error:
            raise _refused(folder, f"cannot be read ({error.strerror})") from None
        if stat.S_ISLNK(link.st_mode) and (not is_root or link.st_uid not in (os.geteuid(), 0)):
            raise _refused(folder, f"is a symbolic link made by {_user(link.st_uid)}")
        try:
            info = os.stat(folder)
        except OSError as error:
            raise _refused(folder, f"cannot be read ({error.strerror})") from None
        if not stat.S_ISDIR(info.st_mode):
            raise _refused(folder, "is not a folder")
        sticky = bool(info.st_mode & stat.S_ISVTX)
        if info.st_uid != os.geteuid() and not (is_root and info.st_uid == 0 and sticky):
            raise _refused(folder, f"belongs to {_user(info.st_uid)}")
        if info.st_mode & stat.S_IWOTH and not sticky:
            raise _refused(folder, "is writable by every user (chmod o-w it)")


def make_results_folder(folder: Path) -> None:
    """Create a folder under the results folder (a run's), or refuse in one line where it cannot be made
    (a read-only file system, a full disk, no permission)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise XoverError(
            f"cannot create {folder}: {error.strerror}; xover writes run logs there: point {RESULTS_VARIABLE} at a "
            "folder you can write"
        ) from None


def results_unwritable(path: str | os.PathLike[str], error: OSError) -> str:
    """`cannot write PATH: why; what to do`, of a file or folder under the results folder that a write refused (a
    full disk, a read-only mount, no permission)."""
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        advice = f"free space on its file system or point {RESULTS_VARIABLE} at a folder with room"
    else:
        advice = f"point {RESULTS_VARIABLE} at a folder you can write"
    return f"cannot write {printable(path)}: {write_problem(path, error)}; {advice}"


def _refused(folder: Path, problem: str) -> XoverError:
    return XoverError(
        f"the results folder {folder} {problem}: xover writes run logs, plans and reports there and follows no "
        f"one else's names; use a folder of your own ({RESULTS_VARIABLE})"
    )


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"
