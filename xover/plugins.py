"""Extensions: each module a package names under the entry-point group `xover.plugins` is imported before
the command line is built (and before a registry that holds such extensions is read), and registers what
it brings itself - a launcher, an engine, a way of sharing, a turn policy, a metric sink - as
docs/extending.md shows. xover's own launchers are imported first, by name: a checkout run through
PYTHONPATH (the GPU check does so) has no installed metadata to find them in. A package declares its module
in its own metadata (pyproject.toml):

    [project.entry-points."xover.plugins"]
    kubernetes = "xover_kubernetes"
"""

from __future__ import annotations

from collections.abc import Iterator
from importlib import import_module
from importlib.metadata import entry_points
from typing import Any, TypeVar

from .errors import XoverError

GROUP = "xover.plugins"
BUILT_IN = ("xover.run.local", "xover.run.on_slurm")  # xover's own launchers, installed or not
_loaded: list[str] | None = None  # the group's modules, once loaded


def load_plugins() -> list[str]:
    """Import xover's own launchers, then every module of the group, once; returns the group's names. One
    that fails to load is one line naming it and its package, not a traceback. A registry that holds such
    extensions asks for this before it is read."""
    global _loaded
    if _loaded is not None:
        return list(_loaded)
    for module in BUILT_IN:
        import_module(module)
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
    _loaded = loaded
    return list(loaded)


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
