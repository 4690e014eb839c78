"""A yes/no query parameter's value, read the one way every view reads it. Pure: the
API's :func:`webapp.core.http.flag_param` and the comparison spec's
:func:`webapp.compare.spec.bool_param` each raise their own error from it."""

from __future__ import annotations

YES = ("1", "true", "on", "yes")
NO = ("", "0", "false", "off", "no")
"""Case-insensitive, around whitespace; absent or empty is no."""


def flag_value(name: str, raw: str) -> bool:
    """``raw`` (the parameter ``name``'s text) as a bool; ValueError naming ``name`` when it
    is neither yes nor no."""
    text = raw.strip().lower()
    if text in NO:
        return False
    if text in YES:
        return True
    raise ValueError(f"{name}: must be 1 or 0, not {text[:40]!r}")
