"""One registry type for every extension point: estimators, rewards, environments, roles,
chat transports and ablation variants.

A name resolves, in this order, to

1. an object registered in this process (`@registry.register("name")`, or `registry.add`);
2. a built-in that mapo imports on first use (so `import mapo` stays light);
3. an entry point of the registry's group, e.g. in a plug-in package's pyproject.toml
   `[project.entry-points."mapo.environments"] support_desk = "my_pkg.env:SupportDesk"`;
4. a path `package.module:object`, imported on the spot.

The current working directory is searched for a path's package after `sys.path`, as
`python -m` would, so `mapo train` run at a repository root finds its `examples/` and
other local packages without an install.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from importlib.metadata import entry_points
from typing import Generic, TypeVar

T = TypeVar("T")


class RegistryError(ValueError):
    """A name that resolves to nothing (or to something that cannot be imported); the message says which."""


def import_object(path: str, what: str) -> object:
    """The object a `package.module:object` path names (`object` may be dotted: `Class.method`)."""
    module_name, sep, attribute = path.partition(":")
    if not sep or not module_name or not attribute:
        raise RegistryError(f"{what}: {path!r} is not a 'package.module:object' path")
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)  # after everything installed: a local package never shadows one
    try:
        target: object = importlib.import_module(module_name)
        for part in attribute.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise RegistryError(f"{what}: cannot import {path!r}: {exc}") from None
    return target


class Registry(Mapping[str, T], Generic[T]):
    """Names -> objects of one kind; a read-only mapping of what is registered so far.

    `kind` names the extension point in errors ("advantage estimator"); `group` is the
    entry-point group searched for plug-in packages' names; `builtins` maps the names
    mapo ships to `package.module:object` paths imported on first use.
    """

    def __init__(self, kind: str, group: str | None = None, builtins: Mapping[str, str] | None = None) -> None:
        self.kind = kind
        self.group = group
        self.builtins = dict(builtins or {})
        self._items: dict[str, T] = {}

    # -- registering

    def add(self, name: str, obj: T) -> T:
        """Register `obj` as `name`; registering another object under a taken name is an error."""
        if not isinstance(name, str) or not name or ":" in name:
            raise RegistryError(f"{self.kind} name must be a non-empty string without ':', got {name!r}")
        if name in self._items and self._items[name] is not obj:
            raise RegistryError(f"{self.kind} {name!r} is already registered")
        self._items[name] = obj
        return obj

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator form of `add`."""

        def wrap(obj: T) -> T:
            return self.add(name, obj)

        return wrap

    def remove(self, name: str) -> None:
        """Forget a registered name (tests; a plug-in reloaded in one process)."""
        self._items.pop(name, None)

    # -- resolving

    def resolve(self, name: str) -> T:
        """The object `name` means: registered, built-in, entry point, or `package.module:object`."""
        if not isinstance(name, str) or not name:
            raise RegistryError(f"{self.kind} must be a non-empty name, got {name!r}")
        if name in self._items:
            return self._items[name]
        if name in self.builtins:
            obj: T = import_object(self.builtins[name], self.kind)  # type: ignore[assignment]
            return self._items.setdefault(name, obj)  # the module may have registered it already
        if ":" in name:
            return import_object(name, self.kind)  # type: ignore[return-value]
        plugin = self._entry_points().get(name)
        if plugin is not None:
            try:
                return self.add(name, plugin.load())
            except (ImportError, AttributeError) as exc:
                raise RegistryError(f"{self.kind} {name!r} (entry point {plugin.value!r}): cannot import: {exc}") from None
        raise RegistryError(
            f"unknown {self.kind} {name!r}; registered: {', '.join(self.names()) or 'none'} "
            f"(or a 'package.module:object' path{self._group_hint()})"
        )

    def names(self) -> list[str]:
        """Every name that resolves without a path: registered, built-in and entry points, sorted."""
        return sorted(set(self._items) | set(self.builtins) | set(self._entry_points()))

    def _entry_points(self) -> dict[str, object]:
        if self.group is None:
            return {}
        return {ep.name: ep for ep in entry_points(group=self.group)}

    def _group_hint(self) -> str:
        return f", or an entry point in group {self.group!r}" if self.group else ""

    # -- the mapping of what is registered so far

    def __getitem__(self, name: str) -> T:
        return self._items[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, names={self.names()})"
