"""Which group a run belongs to, and the order groups are shown in (pure Python).

A run's group label is the value at a dotted path of its trainer config (``regime``,
``off_policy``, ``grpo.kl_coef``, ``remix.replay_fraction``, ``pool.0.name``...),
stringified: strings as they are, anything else as compact JSON (``0.001``, ``true``,
``null``); a path the config does not have gives :data:`MISSING`. The pseudo-path
``experiment`` groups by experiment name.

Order: the registered regimes in their declared order (standalone, prp, xgrpo, sgt,
then any plug-in: :func:`trainer.regimes.regime_names`), then numbers by value, then
every other label alphabetically, :data:`MISSING` last.

What people read of a group (legends, the summary's headers, figure legends) is its
:func:`group_name`: the label with the grouping key in front ("sgt.lambda_sgt = 0.05"),
except when grouping by regime or experiment, whose labels name themselves. The JSON and
the CSV files keep the bare label as the group's key.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from typing import Any

from trainer.regimes import regime_names
from webapp.core.digits import ascii_digits

MISSING = "(missing)"
EXPERIMENT = "experiment"
SELF_NAMING = ("regime", EXPERIMENT)
"""Groupings whose labels read on their own ("sgt", an experiment's name)."""

_SEGMENT = r"[A-Za-z_][A-Za-z0-9_]{0,63}"
GROUP_BY_PATTERN = re.compile(rf"^{_SEGMENT}(\.({_SEGMENT}|[0-9]{{1,3}})){{0,5}}$")
"""A dotted config path: identifiers (list indices allowed after the first), <= 6 parts."""

_absent = object()


def config_value(config: Any, path: str) -> Any:
    """The value at dotted ``path`` in ``config`` (dicts by key, lists by index), or a
    private sentinel when the path does not exist."""
    node = config
    for part in path.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and (index := ascii_digits(part, max_digits=9)) is not None:
            if index >= len(node):
                return _absent
            node = node[index]
        else:
            return _absent
    return node


def label_of(value: Any) -> str:
    """A config value as a group label."""
    if value is _absent:
        return MISSING
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def group_label(config: dict[str, Any], experiment_name: str, group_by: str) -> str:
    if group_by == EXPERIMENT:
        return experiment_name
    return label_of(config_value(config, group_by))


def group_name(group_by: str, label: str) -> str:
    """A group as people read it: "sgt.lambda_sgt = 0.05", "seed = 1"; the bare label
    when grouping by regime or experiment ("sgt")."""
    if group_by in SELF_NAMING:
        return label
    return f"{group_by} = {label}"


def _number(label: str) -> float | None:
    try:
        value = float(label)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def order_key(label: str, regimes: tuple[str, ...] | None = None) -> tuple[int, float, str]:
    """Where ``label`` sorts; ``regimes``: the regimes' names in order (default: the
    registered ones)."""
    regimes = regime_names() if regimes is None else regimes
    if label in regimes:
        return (0, float(regimes.index(label)), "")
    if label == MISSING:
        return (3, 0.0, "")
    number = _number(label)
    if number is not None:
        return (1, number, label)
    return (2, 0.0, label)


def ordered(labels: Iterable[str]) -> list[str]:
    """Distinct ``labels`` in display order."""
    regimes = regime_names()
    return sorted(set(labels), key=lambda label: order_key(label, regimes))
