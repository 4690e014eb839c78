"""Two-digit addition in slices by where it carries: the task of the systematic-gap pool.

Every problem is ``a+b`` with ``a, b`` in 10..99 (arithmetic level 3), in one slice:

* ``no_carry``: the ones digits sum below 10 and the total below 100 (``23+41``);
* ``carry``: the ones digits carry, the total stays below 100 (``47+38``);
* ``overflow``: no carry out of the ones, the tens pass 9 (``63+52``);
* ``carry_overflow``: both (``67+58``).

A policy whose warm-start always drops the ones carry fails every sample on ``carry`` and
``carry_overflow``, one that drops the hundreds fails on ``overflow`` and
``carry_overflow``: each is right where the other is wrong (``trainer zoo build --recipe
gap``), and validation reports ``val/reward@1/<slice>`` per slice, and what kind of
wrong each answer is (``val/error/<class>/<slice>``) with the carries' discrimination
(``val/discrimination/carry``, ``val/discrimination/overflow``):
:mod:`trainer.tasks.addition_errors`.

**Held out for every seed.** The problem space is split once, by a hash of the
expression (:mod:`trainer.tasks.split`), into a validation part (one problem in
:data:`VALIDATION_SHARE`) and a training part. A run's validation set is drawn (by its
seed) from the validation part only, its train stream and every warm-start from the
training part only: no seed's validation prompt is ever trained on
(:func:`is_validation_expression`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from functools import cache

from trainer.tasks.arithmetic import prompt_for
from trainer.tasks.base import Problem
from trainer.tasks.split import VALIDATION_SHARE, is_validation_expression

SLICES = ("no_carry", "carry", "overflow", "carry_overflow")
"""The slices, in the order validation cycles through them."""
LEVEL = 3
"""The arithmetic level of every problem (two-digit addition)."""
OPERANDS = range(10, 100)
TASK_KIND = "addition_slices"
"""The task config's ``kind`` of this task, which its problems carry
(:attr:`Problem.task`): validation adds its error classes and discrimination
(:mod:`trainer.tasks.addition_errors`)."""

__all__ = [
    "SLICES",
    "VALIDATION_SHARE",
    "AdditionSlicesTask",
    "dropped_hundreds",
    "is_validation_expression",
    "slice_of",
]


def slice_of(a: int, b: int) -> str:
    """The slice of ``a+b``: whether the ones digits carry, whether the total passes 99."""
    carries = a % 10 + b % 10 >= 10
    overflows = a + b >= 100
    return SLICES[int(carries) + 2 * int(overflows)]


def dropped_hundreds(a: int, b: int) -> int:
    """``a+b`` as written by someone who drops the carry into the hundreds (``63+52 ->
    15``)."""
    return (a + b) % 100


@cache
def _parts() -> dict[tuple[bool, str], tuple[tuple[int, int], ...]]:
    """Every ``(a, b)`` by (in the validation part, slice)."""
    parts: dict[tuple[bool, str], list[tuple[int, int]]] = {}
    for a in OPERANDS:
        for b in OPERANDS:
            key = (is_validation_expression(f"{a}+{b}"), slice_of(a, b))
            parts.setdefault(key, []).append((a, b))
    return {key: tuple(pairs) for key, pairs in parts.items()}


def validation_pairs(slice_name: str) -> tuple[tuple[int, int], ...]:
    """The validation part of ``slice_name``."""
    return _parts()[(True, slice_name)]


def training_pairs(slice_name: str) -> tuple[tuple[int, int], ...]:
    """The training part of ``slice_name``."""
    return _parts()[(False, slice_name)]


def _problem(problem_id: str, a: int, b: int) -> Problem:
    return Problem(
        id=problem_id,
        prompt=prompt_for(f"{a}+{b}"),
        answer=str(a + b),
        difficulty=LEVEL,
        skill=slice_of(a, b),
        task=TASK_KIND,
        operands=(a, b),
    )


@dataclass
class AdditionSlicesTask:
    """Train stream and held-out validation set of sliced two-digit addition.

    ``val_size`` problems are drawn from the validation part, the slices in turn (so
    ``val_size // 4`` a slice, the remainder to the first slices); the train stream draws
    uniformly from the training part, so the slices come in their natural shares.
    """

    seed: int = 0
    val_size: int = 400
    reward_name: str = "math"
    _val: list[Problem] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        per_slice = [self.val_size // len(SLICES)] * len(SLICES)
        for index in range(self.val_size % len(SLICES)):
            per_slice[index] += 1
        rng = random.Random(f"addition-slices-val-{self.seed}")
        self._val = []
        for name, count in zip(SLICES, per_slice, strict=True):
            pool = validation_pairs(name)
            if count > len(pool):
                raise ValueError(
                    f"val_size {self.val_size} asks for {count} {name} problems; the "
                    f"validation part holds {len(pool)}: use val_size <= "
                    f"{len(SLICES) * min(len(validation_pairs(s)) for s in SLICES)}"
                )
            for a, b in rng.sample(pool, count):
                self._val.append(_problem(f"slices-val-{len(self._val):05d}", a, b))

    def validation(self) -> list[Problem]:
        return list(self._val)

    def train_batch(self, step: int, size: int) -> list[Problem]:
        rng = random.Random(f"addition-slices-train-{self.seed}-{step}")
        problems: list[Problem] = []
        while len(problems) < size:
            a, b = rng.choice(OPERANDS), rng.choice(OPERANDS)
            if is_validation_expression(f"{a}+{b}"):
                continue
            problems.append(_problem(f"slices-{step:06d}-{len(problems):03d}", a, b))
        return problems
