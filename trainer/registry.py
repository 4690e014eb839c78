"""A tiny name -> object registry, so algorithms are chosen by name from the config.

Following verl's habit (``verl/trainer/ppo/core_algos.py``), each family of algorithms
(advantage estimators, loss aggregations, KL estimators, ...) lives in one module-level
``Registry`` instance; adding a variant is one decorated function, and the trainer only
looks it up by the name the run config carries.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class UnknownNameError(KeyError):
    """A name that is not registered; the message lists the names that are."""

    def __str__(self) -> str:  # KeyError would print the message inside quotes
        return str(self.args[0]) if self.args else ""


class Registry(Generic[T]):
    """Maps names to objects (usually functions) of one kind.

    >>> SQUARES: Registry[Callable[[int], int]] = Registry("square function")
    >>> @SQUARES.register("plain")
    ... def plain(x: int) -> int:
    ...     return x * x
    >>> SQUARES.get("plain")(3)
    9
    """

    def __init__(self, kind: str) -> None:
        """``kind`` names what is registered (``"loss aggregation"``); used in errors."""
        self.kind = kind
        self._entries: dict[str, T] = {}
        self.version = 0
        """Counts registrations and removals, so derived tables know when to rebuild."""

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator that registers its target under ``name`` and returns it unchanged.

        Raises ``ValueError`` if ``name`` is already taken, so two modules cannot
        silently shadow each other.
        """

        def decorator(obj: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._entries[name] = obj
            self.version += 1
            return obj

        return decorator

    def unregister(self, name: str) -> None:
        """Remove ``name`` (tests and plug-ins that register for a while)."""
        del self._entries[name]
        self.version += 1

    def get(self, name: str) -> T:
        """The object registered as ``name``.

        Raises :class:`UnknownNameError` (a ``KeyError``) whose message lists the known
        names, e.g. ``unknown loss aggregation 'mean'; known: seq-mean-token-mean,
        token-mean``.
        """
        try:
            return self._entries[name]
        except KeyError:
            known = ", ".join(self.names()) or "(none registered)"
            raise UnknownNameError(f"unknown {self.kind} {name!r}; known: {known}") from None

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, names={self.names()})"
