"""Watch the calls of a registered objective (:data:`trainer.core.OBJECTIVES`) in a test."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from trainer.core import OBJECTIVES, ObjectiveOutput


@contextlib.contextmanager
def objective_spy(name: str, record: Callable[[dict[str, Any]], None]) -> Iterator[None]:
    """While the block runs, objective ``name`` first hands ``record`` each call's keyword
    arguments (``logp``, ``entropy``, ``inputs``, ``settings``), then computes as usual."""
    objective = OBJECTIVES.get(name)

    def recorded(**kwargs: Any) -> ObjectiveOutput:
        record(kwargs)
        return objective(**kwargs)

    OBJECTIVES.unregister(name)
    OBJECTIVES.register(name)(recorded)
    try:
        yield
    finally:
        OBJECTIVES.unregister(name)
        OBJECTIVES.register(name)(objective)
