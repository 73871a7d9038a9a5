"""Extensions from other packages: each module a package names under the entry-point group `xover.plugins`
is imported before the command line is built, and registers what it brings itself - an engine, a
launcher, a way of sharing, a turn policy, a metric sink - as docs/extending.md shows. xover names none of
them: a package declares its module in its own metadata (pyproject.toml):

    [project.entry-points."xover.plugins"]
    kubernetes = "xover_kubernetes"
"""

from __future__ import annotations

from importlib.metadata import entry_points

from .errors import XoverError

GROUP = "xover.plugins"


def load_plugins() -> list[str]:
    """Import every module of the group; returns their names. One that fails to load is one line naming
    it and its package, not a traceback."""
    loaded = []
    for entry in entry_points(group=GROUP):
        try:
            entry.load()
        except Exception as error:  # a broken plugin: say which, and what it raised
            package = entry.dist.name if entry.dist is not None else "?"
            raise XoverError(
                f"the xover plugin {entry.name} ({entry.value}, from {package}) failed to load: {error}"
            ) from None
        loaded.append(entry.name)
    return loaded
