"""Extensions: each module a package names under the entry-point group `xover.plugins` is imported before
the command line is built (and before a registry that holds such extensions is read), and registers what
it brings itself - a launcher, an engine, a way of sharing, a turn policy, a metric sink - as
docs/extending.md shows. xover's own launchers are loaded so too. A package declares its module in its own
metadata (pyproject.toml):

    [project.entry-points."xover.plugins"]
    kubernetes = "xover_kubernetes"
"""

from __future__ import annotations

from collections.abc import Iterator
from importlib.metadata import entry_points
from typing import Any, TypeVar

from .errors import XoverError

GROUP = "xover.plugins"
_loaded: list[str] = []


def load_plugins() -> list[str]:
    """Import every module of the group, once; returns their names. One that fails to load is one line
    naming it and its package, not a traceback. xover's own launchers are in the group too (pyproject.toml):
    a registry that holds them asks for this before it is read."""
    if _loaded:
        return list(_loaded)
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
    _loaded[:] = loaded
    return loaded


Value = TypeVar("Value")


class PluginRegistry(dict[str, Value]):
    """A registry (name -> object) whose entries may come from plugins: every read loads them first, so that
    it is whole whichever module was loaded first; writes (`register`) do not."""

    def __getitem__(self, name: str) -> Value:
        load_plugins()
        return super().__getitem__(name)

    def __contains__(self, name: object) -> bool:
        load_plugins()
        return super().__contains__(name)

    def __iter__(self) -> Iterator[str]:
        load_plugins()
        return super().__iter__()

    def __len__(self) -> int:
        load_plugins()
        return super().__len__()

    def get(self, name: str, default: Any = None) -> Any:
        """The entry of that name, or `default`."""
        load_plugins()
        return super().get(name, default)

    def keys(self) -> Any:
        """Every name."""
        load_plugins()
        return super().keys()

    def values(self) -> Any:
        """Every entry."""
        load_plugins()
        return super().values()

    def items(self) -> Any:
        """Every (name, entry)."""
        load_plugins()
        return super().items()
