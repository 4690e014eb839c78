"""One split of a generated task's problem space into a validation and a training part.

A task drawn per seed can hold out only its own seed's validation prompts, so a warm-start
built from one seed may train on another seed's (the complementary zoo did, issue 30). A
split by a hash of the expression is the same for every seed: a run of any seed draws its
validation set from the validation part, its train stream and every warm-start from the
training part.
"""

from __future__ import annotations

import hashlib

VALIDATION_SHARE = 8
"""One expression in this many is in the validation part."""
SALT = "addition-slices/"
"""Hashed with the expression (the name of the first task that used the split)."""


def is_validation_expression(expression: str) -> bool:
    """Whether ``expression`` (``"47+38"``) is in the validation part, for every seed."""
    digest = hashlib.sha256(f"{SALT}{expression}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % VALIDATION_SHARE == 0
