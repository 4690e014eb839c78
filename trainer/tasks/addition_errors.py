"""What kind of wrong an answer to a two-digit addition is: skill against shortcut.

On the systematic-gap pool (:mod:`trainer.tasks.addition_slices`) ``val/reward@1/carry``
cannot tell a policy that learned to carry from one that adds 10 whatever the digits (it
gains on ``carry`` and loses on ``no_carry``). Two endpoints separate them:

* ``val/error/<class>/<slice>``: the share of the slice's validation answers in each
  error class of :func:`error_class` (every class of :data:`ERROR_CLASSES` for every
  slice present, zeros included, so the curves are continuous);
* ``val/discrimination/carry`` and ``val/discrimination/overflow``: Youden's J of the
  carry, the hit rate on the slice that needs it plus the reward on its no-carry
  counterpart minus 1 (every wrong ``no_carry`` answer counts as a false alarm):
  ``reward@1/carry + reward@1/no_carry - 1``. 0 for a policy that never carries and for
  one that always carries; 1 for the skill.

:func:`validation_metrics` computes both from a validation pass (problems, greedy
completions, rewards); :mod:`trainer.tasks.task_metrics` calls it for the problems of
this task.

The classes read the answer (the math reward's extraction), the discrimination reads the
rewards the policy scored: where the run's scoring is stricter than the plain math
reward (``task.strict_format``, ``task.finished_only``), a bare or cut-off right answer
is ``correct`` here and still scores 0, so ``val/error/correct/<slice>`` may exceed
``val/reward@1/<slice>``; with the plain reward the two are equal. Per policy only: like
``val/reward@1/<slice>``, these keys get no ``_pool`` aggregate (``trainer/run.py``
pools ``val/reward@1``, ``train/reward_mean`` and ``perf/step_s``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from trainer import metrics as m
from trainer.metrics import ERROR_CLASSES
from trainer.tasks.addition_slices import SLICES, slice_of
from trainer.tasks.base import Problem
from trainer.tasks.rewards import extract_final_answer, math_score, normalize_answer

__all__ = [
    "ERROR_CLASSES",
    "discrimination",
    "dropped_carries",
    "error_class",
    "error_shares",
    "spurious_carries",
    "validation_metrics",
]

DISCRIMINATED: dict[str, str] = {
    m.VAL_DISCRIMINATION_CARRY: "carry",
    m.VAL_DISCRIMINATION_OVERFLOW: "overflow",
}
"""Each discrimination key and the slice whose carry it scores against ``no_carry``."""
NO_CARRY = SLICES[0]
"""The slice where no carry is due: the false alarms of every discrimination."""

_INTEGER = re.compile(r"-?\d+")


def _carries_due(a: int, b: int) -> tuple[bool, bool]:
    """Whether ``a+b`` carries out of the ones, and whether its total passes 99."""
    return a % 10 + b % 10 >= 10, a + b >= 100


def dropped_carries(a: int, b: int) -> frozenset[int]:
    """The totals of ``a+b`` with one or more of its due carries dropped: ``-10`` for the
    ones carry (``47+38 -> 75``), ``-100`` for the hundreds (``63+52 -> 15``), and both
    (``67+58 -> 15``): the ones carry dropped, then the hundreds of what is left,
    ``(a+b-10) % 100``, which is ``a+b-110`` except where the hundreds were due only by
    the ones carry (``45+55 -> 90``, the same as the ones carry alone)."""
    ones, hundreds = _carries_due(a, b)
    total = a + b
    dropped = {total - 10} if ones else set()
    if hundreds:
        dropped.add(total - 100)
        if ones:
            dropped.add((total - 10) % 100)
    return frozenset(dropped)


def spurious_carries(a: int, b: int) -> frozenset[int]:
    """The totals of ``a+b`` with one or more carries that were not due added: ``+10``
    where the ones do not carry, ``+100`` where the total stays below 100, ``+110`` where
    neither is due (``23+41``: ``{74, 164, 174}``)."""
    ones, hundreds = _carries_due(a, b)
    total = a + b
    spurious = set() if ones else {total + 10}
    if not hundreds:
        spurious.add(total + 100)
        if not ones:
            spurious.add(total + 110)
    return frozenset(spurious)


def _integer_answer(completion: str) -> int | None:
    """The completion's final answer (the math reward's extraction and normalisation) as
    an integer; None when it has none or it is not a whole number."""
    extracted = extract_final_answer(completion)
    if extracted is None:
        return None
    normalized = normalize_answer(extracted)
    return int(normalized) if _INTEGER.fullmatch(normalized) else None


def _digit_count(value: int) -> int:
    return len(str(abs(value)))


def error_class(a: int, b: int, completion: str) -> str:
    """The one class of :data:`ERROR_CLASSES` of ``completion`` as an answer to ``a+b``.

    The checks, in order; the first that holds wins:

    1. ``correct``: the math reward scores the completion 1 against ``a+b`` (its final
       answer: the last ``\\boxed{}``, else the last number);
    2. ``dropped_carry``: the answer is the total with one or more due carries dropped
       (:func:`dropped_carries`);
    3. ``spurious_carry``: the answer is the total with one or more carries that were not
       due added (:func:`spurious_carries`);
    4. ``wrong_digit_count``: a whole number with another count of digits than the total;
    5. ``other``: anything else, no answer and answers that are not whole numbers included.

    The systematic classes come before the digit count because they overlap it: a dropped
    hundreds (``63+52 -> 15``) or a spurious one (``23+41 -> 164``) also has the wrong
    count of digits, and the class must name the systematic error. Dropped and spurious
    carries never overlap (one is below the total, the other above).
    """
    if math_score(completion, str(a + b)) == 1.0:
        return "correct"
    answer = _integer_answer(completion)
    if answer is None:
        return "other"
    if answer in dropped_carries(a, b):
        return "dropped_carry"
    if answer in spurious_carries(a, b):
        return "spurious_carry"
    if _digit_count(answer) != _digit_count(a + b):
        return "wrong_digit_count"
    return "other"


def _operands(problem: Problem) -> tuple[int, int]:
    """``(a, b)`` of an addition problem (:attr:`Problem.operands`)."""
    if len(problem.operands) != 2:
        raise ValueError(f"problem {problem.id!r} has no two operands: {problem.operands!r}")
    a, b = problem.operands
    return a, b


def error_shares(problems: Sequence[Problem], completions: Sequence[str]) -> dict[str, float]:
    """``val/error/<class>/<slice>``: per slice present, the share of its problems whose
    completion falls in each class (all of :data:`ERROR_CLASSES`, zeros included)."""
    counts: dict[str, dict[str, int]] = {}
    for problem, completion in zip(problems, completions, strict=True):
        a, b = _operands(problem)
        by_class = counts.setdefault(slice_of(a, b), dict.fromkeys(ERROR_CLASSES, 0))
        by_class[error_class(a, b, completion)] += 1
    shares: dict[str, float] = {}
    for slice_name, by_class in counts.items():
        total = sum(by_class.values())
        for name, count in by_class.items():
            shares[m.val_error_key(name, slice_name)] = count / total
    return shares


def discrimination(reward_by_slice: dict[str, float]) -> dict[str, float]:
    """``val/discrimination/<carry kind>`` = reward on the slice that needs the carry +
    reward on ``no_carry`` - 1, for each whose two slices are both present."""
    if NO_CARRY not in reward_by_slice:
        return {}
    return {
        key: reward_by_slice[slice_name] + reward_by_slice[NO_CARRY] - 1
        for key, slice_name in DISCRIMINATED.items()
        if slice_name in reward_by_slice
    }


def validation_metrics(
    problems: Sequence[Problem], completions: Sequence[str], rewards: Sequence[float]
) -> dict[str, float]:
    """The error shares and the discrimination of one validation pass: one greedy
    completion and its reward per problem, in the problems' order."""
    if not len(problems) == len(completions) == len(rewards):
        raise ValueError(
            f"{len(problems)} problems, {len(completions)} completions, {len(rewards)} rewards"
        )
    by_slice: dict[str, list[float]] = {}
    for problem, reward in zip(problems, rewards, strict=True):
        by_slice.setdefault(slice_of(*_operands(problem)), []).append(reward)
    reward_by_slice = {name: sum(values) / len(values) for name, values in by_slice.items()}
    return error_shares(problems, completions) | discrimination(reward_by_slice)
