"""CSV cells that are safe to open in a spreadsheet (OWASP "CSV Injection"), pure Python.

A spreadsheet runs a cell that begins with ``=``, ``+``, ``-`` or ``@`` as a formula
(``=HYPERLINK(...)`` leaks data, ``+cmd|' /C calc'!A0`` asks to run a program), and a
leading tab or carriage return can hide such a cell. The product writes text it did not
choose (metric keys and policy names from a run's token, group labels from free-text
config fields), so every CSV it serves is written by :class:`SafeWriter`, which applies
OWASP's rule to each text cell: prefix it with a single quote ``'``, which the
spreadsheet shows as text and does not evaluate.

Numbers stay numbers: the product writes them as text (``repr``: ``-0.5``, ``1e-05``,
``-3``; the API's ``NaN``, ``Infinity``, ``-Infinity``), and a cell that is exactly such
a literal (:data:`NUMBER`) is written as it is, so a negative value still reads back as a
number. Anything else that merely starts like one (``-1+2``) is defused.

A carriage return anywhere in a cell is a line break to a spreadsheet, so a row with one
is written with every cell quoted: ``csv.writer`` quotes only the characters of its own
line terminator (``\\n`` here), and an unquoted ``a\\r=1`` would open a new row whose first
cell is the formula ``=1``.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable
from typing import TextIO

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
"""First characters that make a spreadsheet read a cell as a formula (OWASP)."""
NUMBER = re.compile(r"-?(?:\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|Infinity)|NaN", re.ASCII)
"""A number literal as the product writes one: an int, a float's ``repr``, or the API's
``NaN``/``Infinity``/``-Infinity``."""


def defuse(cell: object) -> object:
    """``cell`` safe for a spreadsheet: a text that starts with one of
    :data:`FORMULA_STARTS` and is not a number literal gets a leading ``'``; anything
    else (non-text cells, numbers written as text) is returned as it is."""
    if isinstance(cell, str) and cell.startswith(FORMULA_STARTS) and not NUMBER.fullmatch(cell):
        return "'" + cell
    return cell


class SafeWriter:
    """A ``csv.writer`` (``\\n`` line ends) whose rows pass through :func:`defuse`, every
    cell quoted in a row with a carriage return: the writer of every CSV the product
    serves."""

    def __init__(self, out: TextIO) -> None:
        self._minimal = csv.writer(out, lineterminator="\n")
        self._quote_all = csv.writer(out, lineterminator="\n", quoting=csv.QUOTE_ALL)

    def writerow(self, row: Iterable[object]) -> None:
        cells = [defuse(cell) for cell in row]
        has_return = any(isinstance(cell, str) and "\r" in cell for cell in cells)
        (self._quote_all if has_return else self._minimal).writerow(cells)
