"""Adapt a module of the script's libraries when the script imports it, not before: importing it in every rank
to adapt it up front costs the ranks of scripts that never use it (torch.distributed.optim, with FSDP behind it,
is most of a CPU-second)."""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Callable
from types import ModuleType


def when_imported(name: str, adapt: Callable[[ModuleType], None]) -> None:
    """Call `adapt(module)` once module `name` has run its body: now where it already has, else when it is
    first imported (before the import statement that asked for it returns)."""
    module = sys.modules.get(name)
    if module is not None:
        adapt(module)
        return
    sys.meta_path.insert(0, _AfterImport(name, adapt))


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: asks the finders after it for `name`'s spec and wraps its loader, once."""

    def __init__(self, name: str, adapt: Callable[[ModuleType], None]) -> None:
        self.name = name
        self.adapt = adapt

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # once: a reload or a second interpreter state is the library's own business
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec  # a namespace package or an old-style loader: left unadapted rather than broken
        spec.loader = _AdaptingLoader(spec.loader, self.adapt)
        return spec


class _AdaptingLoader(importlib.abc.Loader):
    def __init__(self, loader, adapt: Callable[[ModuleType], None]) -> None:
        self.loader = loader
        self.adapt = adapt

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        self.adapt(module)

    def __getattr__(self, name: str):
        # get_source, get_code, is_package, get_resource_reader...: the loader's own (tracebacks, linecache)
        return getattr(self.loader, name)
