"""One split of a generated task's problem space into a validation and a training part.

A task drawn per seed can hold out only its own seed's validation prompts, so a warm-start
built from one seed may train on another seed's (the complementary zoo did, issue 30). A
split by a hash of the expression is the same for every seed: a run of any seed draws its
validation set from the validation part, its train stream and every warm-start from the
training part.

The hash is of the expression's *unordered* operands (:func:`split_key`): ``47+38`` and
``38+47`` are one problem to a policy that knows addition commutes, so they fall in the
same part. Keyed on the ordered text (split version 1), 86% of the validation part's
two-digit sums had their mirror in the training part (issue 45).
"""

from __future__ import annotations

import hashlib
import re

VALIDATION_SHARE = 8
"""One expression in this many is in the validation part."""
SALT = "addition-slices/"
"""Hashed with the key (the name of the first task that used the split)."""
SPLIT_VERSION = 2
"""Which expressions are in which part: 1 hashed the ordered expression, 2 its unordered
operands. A zoo recipe that holds the split out records it in its fingerprint
(:meth:`trainer.zoo.build.Recipe.fingerprint`), so a warm-start built with another split
is rebuilt, never mixed with this one's validation sets."""

_OPERAND = re.compile(r"\d+")
_OPERATOR = re.compile(r"[^\d\s]")


def split_key(expression: str) -> str:
    """What the split hashes: the operators, then the operands sorted as numbers, so an
    expression and its mirror share a key (``"47+38"`` and ``"38+47"`` give
    ``"+:38,47"``; ``"47+38-9"`` gives ``"+-:9,38,47"``). The operators are sorted too:
    expressions with the same operands and operators land in the same part whatever
    their order, which can only hold out more, never leak a reordering."""
    operands = sorted(int(number) for number in _OPERAND.findall(expression))
    operators = sorted(_OPERATOR.findall(expression))
    return "".join(operators) + ":" + ",".join(str(number) for number in operands)


def is_validation_expression(expression: str) -> bool:
    """Whether ``expression`` (``"47+38"``) is in the validation part, for every seed; its
    mirror (``"38+47"``) is in the same part (:func:`split_key`)."""
    digest = hashlib.sha256(f"{SALT}{split_key(expression)}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % VALIDATION_SHARE == 0
