"""Synthetic integer arithmetic with graded difficulty and boxed answers.

Generated deterministically from a seed, so it runs offline and on CPU. Difficulty
levels (a policy that masters a level may still fail the next one, which is what makes
sharing matter):

1. one-digit addition            ``3+5``
2. two-digit plus one-digit      ``47+8``
3. two-digit addition            ``47+38``
4. two-digit subtraction         ``83-38`` (never negative)
5. three terms                   ``47+38-19``
6. two-digit times one-digit     ``47*3`` (one-digit factor 2 to 9)

Each level exercises one *skill* (:data:`SKILLS`): addition (levels 1-3), subtraction
(4), mixed (5) and multiplication (6). Validation reports ``val/reward@1`` per skill as
well when the validation set spans several (the complementary zoo warm-starts each
policy on one skill only, so a policy's foreign skills start near 0).

The prompt is ``"Compute 47+38."``; the expected completion is ``"\\boxed{85}"``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from trainer.tasks.base import Problem
from trainer.tasks.split import is_validation_expression

LEVELS = (1, 2, 3, 4, 5, 6)
SPLITS = ("seed", "hash")
"""How validation is held out (:attr:`ArithmeticTask.split`)."""
ADDITIVE_LEVELS = (1, 2, 3, 4, 5)
"""The levels before multiplication was added: the normal zoo's tokenizer corpus and SFT
held-out sets are drawn from these, so adding level 6 changed no built policy."""
SKILLS: dict[int, str] = {
    1: "addition",
    2: "addition",
    3: "addition",
    4: "subtraction",
    5: "mixed",
    6: "multiplication",
}
"""The skill each level exercises (a key suffix of ``val/reward@1/<skill>``)."""


def skill_of(level: int) -> str:
    """The skill of arithmetic level ``level`` (:data:`SKILLS`)."""
    return SKILLS[level]


def make_expression(rng: random.Random, level: int) -> tuple[str, int]:
    """One expression of difficulty ``level`` and its value."""
    if level == 1:
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        return f"{a}+{b}", a + b
    if level == 2:
        a, b = rng.randint(10, 99), rng.randint(0, 9)
        return f"{a}+{b}", a + b
    if level == 3:
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        return f"{a}+{b}", a + b
    if level == 4:
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        a, b = max(a, b), min(a, b)
        return f"{a}-{b}", a - b
    if level == 5:
        a, b, c = rng.randint(10, 99), rng.randint(10, 99), rng.randint(1, 9)
        return f"{a}+{b}-{c}", a + b - c
    if level == 6:
        a, b = rng.randint(10, 99), rng.randint(2, 9)
        return f"{a}*{b}", a * b
    raise ValueError(f"unknown arithmetic level {level}; use one of {LEVELS}")


def prompt_for(expression: str) -> str:
    return f"Compute {expression}."


def boxed(value: int | str) -> str:
    """The completion a correct policy writes: ``\\boxed{85}``."""
    return f"\\boxed{{{value}}}"


@dataclass
class ArithmeticTask:
    """Train stream and held-out validation set of arithmetic problems.

    The validation set is drawn first, from its own seed; the train stream skips every
    expression in it, so validation stays held out. With ``split="hash"`` it is drawn from
    the hash split's validation part only and the train stream skips that whole part, so
    no seed's validation prompt is trained on, by any seed's run or any warm-start.
    """

    seed: int = 0
    levels: tuple[int, ...] = (1, 2, 3)
    val_size: int = 64
    reward_name: str = "math"
    split: str = "seed"
    """``"seed"``: validation drawn from all problems, held out of this seed's train stream
    only; ``"hash"``: drawn from the validation part of :mod:`trainer.tasks.split`, which no
    train stream and no warm-start of any seed uses."""
    _val: list[Problem] = field(init=False, repr=False)
    _val_expressions: frozenset[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, not {self.split!r}")
        unknown = sorted(set(self.levels) - set(LEVELS))
        if not self.levels or unknown:
            raise ValueError(f"arithmetic levels must be a non-empty subset of {LEVELS}")
        rng = random.Random(f"arithmetic-val-{self.seed}")
        seen: dict[str, Problem] = {}
        attempts = 0
        while len(seen) < self.val_size:
            attempts += 1
            if attempts > 100 * self.val_size:
                raise ValueError(
                    f"cannot draw {self.val_size} distinct validation problems from levels "
                    f"{self.levels}; lower val_size or add harder levels"
                )
            level = self.levels[len(seen) % len(self.levels)]
            expression, value = make_expression(rng, level)
            if self.split == "hash" and not is_validation_expression(expression):
                continue
            if expression not in seen:
                seen[expression] = Problem(
                    id=f"arith-val-{len(seen):05d}",
                    prompt=prompt_for(expression),
                    answer=str(value),
                    difficulty=level,
                    skill=skill_of(level),
                )
        self._val = list(seen.values())
        self._val_expressions = frozenset(seen)

    def validation(self) -> list[Problem]:
        return list(self._val)

    def train_batch(self, step: int, size: int) -> list[Problem]:
        rng = random.Random(f"arithmetic-train-{self.seed}-{step}")
        problems: list[Problem] = []
        while len(problems) < size:
            level = rng.choice(self.levels)
            expression, value = make_expression(rng, level)
            if expression in self._val_expressions or (
                self.split == "hash" and is_validation_expression(expression)
            ):
                continue
            problems.append(
                Problem(
                    id=f"arith-{step:06d}-{len(problems):03d}",
                    prompt=prompt_for(expression),
                    answer=str(value),
                    difficulty=level,
                    skill=skill_of(level),
                )
            )
        return problems
