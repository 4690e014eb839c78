"""Whole numbers read from text that someone else wrote: a query parameter, a form field,
a cursor, ``squeue``'s output, a ``/proc`` entry. Pure (no Django), so the scheduler
imports it too.

Python's own readers are too generous for such text: ``"²".isdigit()`` is true but
``int("²")`` raises (a 500 where a check let it through), and ``int("\u0661")``
(Arabic-Indic one), ``int(" 7 ")`` and ``int("1_0")`` all succeed, so ``revoke=`` that
Arabic-Indic one named token 1. Here a number is ASCII ``0``-``9`` only, with a cap on its
digits, so it also fits the database's integer columns; anything else is None and the
caller says what it expected.
"""

from __future__ import annotations

import re

_DIGITS = re.compile(r"[0-9]+", re.ASCII)
INT64_DIGITS = 18
"""Digits that always fit a signed 64-bit column (``2**63 - 1`` has 19)."""
PARAM_DIGITS = 30
"""The most digits a bounded integer parameter is read with: beyond every bound a view
sets, so a longer one is refused as not a number rather than parsed."""


def ascii_digits(text: str, *, max_digits: int) -> int | None:
    """``text`` as a non-negative int when it is 1 to ``max_digits`` ASCII digits (no sign,
    no space, no ``_``), else None."""
    if not 0 < len(text) <= max_digits or not _DIGITS.fullmatch(text):
        return None
    return int(text)


def ascii_int(text: str, *, max_digits: int) -> int | None:
    """``text`` as an int when it is an optional ``-`` or ``+`` and then 1 to
    ``max_digits`` ASCII digits, else None."""
    sign, body = (text[0], text[1:]) if text[:1] in ("-", "+") else ("", text)
    number = ascii_digits(body, max_digits=max_digits)
    if number is None:
        return None
    return -number if sign == "-" else number
