"""horovodrun, started as `python -m xover.run.external.horovodrun_main ARGS`: Horovod's own entry point (what the
`horovodrun` script runs), with its check that Horovod was built with Gloo answered once per installation.

horovodrun checks the build before every launch by forking a child that imports `horovod.torch`, so
torch, on the critical path of each job's start (its cost: docs/measurements.md, *make test's time*).
The answer changes only when Horovod or a framework is reinstalled, so a True answer is kept in the
user's cache, keyed by the files the check loads; any other answer is never kept, and horovodrun then
says what is wrong as it always does. Everything else is horovodrun's, unchanged.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

CACHE_NAME = "horovod-gloo-built.json"
KEPT_INSTALLATIONS = 16  # the newest first: a user's few virtual environments each keep theirs


def cache_path() -> Path:
    """The cached answers' file, in the user's cache folder (XDG_CACHE_HOME, else ~/.cache)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "xover" / CACHE_NAME


def _file_identity(path: str | None) -> list[Any] | None:
    if not path:
        return None
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return [path, stat.st_size, stat.st_mtime_ns]


def _spec(name: str):
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):  # a parent package that fails to import, a module without a spec
        return None


def installation_key(extensions: list[str], package: str = "horovod") -> list[Any]:
    """What the check's answer depends on: this Python, Horovod's extension library for each framework,
    and each framework's package, identified by path, size and modification time (nothing imported)."""
    key: list[Any] = [sys.executable]
    for extension in extensions:
        framework, horovod_part = _spec(extension), _spec(f"{package}.{extension}")
        libraries = (
            sorted(Path(horovod_part.origin).parent.glob("mpi_lib*")) if horovod_part and horovod_part.origin else []
        )
        key.append(
            [
                extension,
                _file_identity(framework.origin if framework else None),
                [_file_identity(str(library)) for library in libraries],
            ]
        )
    return key


def _kept(path: Path) -> list[Any]:
    """The installations the cache vouches for; none if it is missing, unreadable or not what it wrote."""
    try:
        content = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    kept = content.get("installations") if isinstance(content, dict) else None
    return kept if isinstance(kept, list) else []


def _write(path: Path, content: dict[str, Any]) -> None:
    """Atomically, owner-only; a cache that cannot be written only costs the check next time."""
    temporary = None
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".horovod-gloo-")
        with os.fdopen(handle, "w") as out:
            json.dump(content, out)
        os.replace(temporary, path)
    except OSError:
        if temporary:
            with contextlib.suppress(OSError):
                os.unlink(temporary)


def cached_check(check, extensions: list[str], path: Path):
    """`check` (horovod's gloo_built) wrapped: its True answer for this installation comes from `path`."""

    def gloo_built(verbose: bool = False):
        key, kept = installation_key(extensions), _kept(path)
        if key in kept:
            return True
        answer = check(verbose=verbose)
        if answer is True:
            _write(path, {"installations": [key, *kept][:KEPT_INSTALLATIONS]})
        return answer

    return gloo_built


def main() -> int:
    """horovodrun, with its Gloo build check answered from the cache; returns its exit status."""
    from horovod.common import util
    from horovod.runner import launch

    launch.gloo_built = cached_check(launch.gloo_built, list(util.EXTENSIONS), cache_path())
    sys.argv[0] = "horovodrun"
    return launch.run_commandline()


if __name__ == "__main__":
    sys.exit(main())
