"""Issue 45: the error class of an answer to a two-digit addition, the per-slice shares of
the classes and the carries' discrimination (Youden's J), by hand."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from trainer import metrics as m
from trainer.tasks.addition_errors import (
    ERROR_CLASSES,
    dropped_carries,
    error_class,
    spurious_carries,
    validation_metrics,
)
from trainer.tasks.addition_slices import SLICES, TASK_KIND, AdditionSlicesTask, slice_of
from trainer.tasks.base import Problem
from trainer.tasks.rewards import math_reward
from trainer.tasks.task_metrics import task_validation_metrics

# (a, b, completion, class); the slice and the correct total in the comment.
LISTED = [
    # 47+38 = 85, carry
    (47, 38, "\\boxed{85}", "correct"),
    (47, 38, "7 + 8 = 15, write 5 carry 1; the answer is 85.", "correct"),
    (47, 38, "85.0", "correct"),
    (47, 38, "75", "dropped_carry"),  # the ones carry dropped
    (47, 38, "\\boxed{75}", "dropped_carry"),
    (47, 38, "\\boxed{85} or maybe 75", "correct"),  # the box wins over the last number
    (47, 38, "85, no: \\boxed{75}", "dropped_carry"),
    (47, 38, "185", "spurious_carry"),  # a hundreds carry that was not due
    (47, 38, "95", "other"),  # +10 where the ones carry was due: neither
    (47, 38, "8", "wrong_digit_count"),
    (47, 38, "\\boxed{850}", "wrong_digit_count"),
    (47, 38, "", "other"),  # no answer at all
    (47, 38, "I cannot add these.", "other"),
    (47, 38, "\\boxed{85", "other"),  # a box cut off: no final answer
    # 23+41 = 64, no_carry
    (23, 41, "74", "spurious_carry"),  # +10: the ones did not carry
    (23, 41, "\\boxed{164}", "spurious_carry"),  # +100: the total stays below 100
    (23, 41, "174", "spurious_carry"),  # both
    (23, 41, "54", "other"),  # -10 with no carry due to drop
    (23, 41, "1640", "wrong_digit_count"),
    (23, 41, "64.5", "other"),  # not a whole number
    (23, 41, "The sum is 64", "correct"),
    # 53+41 = 94, no_carry: a spurious ones carry that makes three digits
    (53, 41, "104", "spurious_carry"),
    # 63+52 = 115, overflow
    (63, 52, "15", "dropped_carry"),  # the hundreds dropped: a wrong digit count too
    (63, 52, "1150", "wrong_digit_count"),
    (63, 52, "1,150", "wrong_digit_count"),
    (63, 52, "125", "spurious_carry"),  # +10: the ones did not carry
    (63, 52, "105", "other"),
    (63, 52, "\\boxed{115}", "correct"),
    # 67+58 = 125, carry_overflow
    (67, 58, "115", "dropped_carry"),  # the ones carry
    (67, 58, "25", "dropped_carry"),  # the hundreds
    (67, 58, "\\boxed{15}", "dropped_carry"),  # both
    (67, 58, "135", "other"),  # no carry here was not due
    (67, 58, "5", "wrong_digit_count"),
    # 45+55 = 100, carry_overflow where the hundreds come only from the ones carry
    (45, 55, "90", "dropped_carry"),
    (45, 55, "0", "dropped_carry"),
    (45, 55, "-10", "wrong_digit_count"),
]


@pytest.mark.parametrize(("a", "b", "completion", "expected"), LISTED)
def test_each_listed_answer_has_its_class(a: int, b: int, completion: str, expected: str) -> None:
    assert error_class(a, b, completion) == expected


def test_the_list_covers_every_class_and_slice() -> None:
    assert {expected for *_, expected in LISTED} == set(ERROR_CLASSES)
    assert {slice_of(a, b) for a, b, *_ in LISTED} == set(SLICES)


def test_the_carries_dropped_and_added_by_hand() -> None:
    assert dropped_carries(47, 38) == {75}
    assert dropped_carries(63, 52) == {15}
    assert dropped_carries(67, 58) == {115, 25, 15}
    assert dropped_carries(23, 41) == set()
    assert spurious_carries(23, 41) == {74, 164, 174}
    assert spurious_carries(47, 38) == {185}
    assert spurious_carries(63, 52) == {125}
    assert spurious_carries(67, 58) == set()


def test_correct_is_exactly_what_the_math_reward_scores_1() -> None:
    completions = [c for *_, c, _ in LISTED]
    rewards = math_reward(completions, completions, [str(a + b) for a, b, *_ in LISTED])
    for (a, b, completion, expected), reward in zip(LISTED, rewards, strict=True):
        assert (expected == "correct") == (reward == 1.0), (a, b, completion)


# --- the metrics of a validation pass --------------------------------------------------
PAIRS = {  # two problems a slice
    "no_carry": [(23, 41), (12, 35)],
    "carry": [(47, 38), (19, 26)],
    "overflow": [(63, 52), (81, 40)],
    "carry_overflow": [(67, 58), (99, 99)],
}


def _problems() -> list[Problem]:
    return [
        Problem(f"p{a}+{b}", f"Compute {a}+{b}.", str(a + b), 3, name, TASK_KIND, (a, b))
        for name, pairs in PAIRS.items()
        for a, b in pairs
    ]


def _metrics(write: Callable[[int, int], int]) -> dict[str, float]:
    """The metrics of a policy that answers ``a+b`` with ``write(a, b)``, boxed."""
    problems = _problems()
    completions = [f"\\boxed{{{write(*p.operands)}}}" for p in problems]
    rewards = math_reward(completions, completions, [p.answer for p in problems])
    return validation_metrics(problems, completions, rewards)


def _ones_carry(a: int, b: int) -> bool:
    return a % 10 + b % 10 >= 10


def _never_carries(a: int, b: int) -> int:
    """The warm start of qwen-nocarry: always drops the ones carry."""
    return a + b - 10 if _ones_carry(a, b) else a + b


def _adds_ten(a: int, b: int) -> int:
    """The shortcut: the warm start plus 10, whatever the digits."""
    return _never_carries(a, b) + 10


EVERY_KEY = {m.val_error_key(c, s) for c in ERROR_CLASSES for s in SLICES} | {
    m.VAL_DISCRIMINATION_CARRY,
    m.VAL_DISCRIMINATION_OVERFLOW,
}


def test_the_warm_start_that_never_carries() -> None:
    metrics = _metrics(_never_carries)
    assert set(metrics) == EVERY_KEY  # zeros included
    for name, wrong in (("no_carry", None), ("carry", "dropped_carry"), ("overflow", None)):
        shares = {c: metrics[m.val_error_key(c, name)] for c in ERROR_CLASSES}
        expected = wrong or "correct"
        assert shares == {c: float(c == expected) for c in ERROR_CLASSES}, name
    assert metrics[m.val_error_key("dropped_carry", "carry_overflow")] == 1.0
    assert metrics[m.VAL_DISCRIMINATION_CARRY] == 0.0  # 0 hits, no false alarm
    assert metrics[m.VAL_DISCRIMINATION_OVERFLOW] == 1.0  # it does carry into the hundreds


def test_the_shortcut_gains_on_carry_but_discriminates_no_better() -> None:
    metrics = _metrics(_adds_ten)
    assert metrics[m.val_error_key("correct", "carry")] == 1.0  # val/reward@1/carry is 1
    assert metrics[m.val_error_key("spurious_carry", "no_carry")] == 1.0  # a+b+10
    assert metrics[m.val_error_key("spurious_carry", "overflow")] == 1.0
    assert metrics[m.val_error_key("correct", "no_carry")] == 0.0
    assert metrics[m.VAL_DISCRIMINATION_CARRY] == 0.0  # every hit paid by a false alarm
    assert metrics[m.VAL_DISCRIMINATION_OVERFLOW] == -1.0


def test_the_skill_discriminates_fully() -> None:
    metrics = _metrics(lambda a, b: a + b)
    assert metrics[m.VAL_DISCRIMINATION_CARRY] == metrics[m.VAL_DISCRIMINATION_OVERFLOW] == 1.0
    assert all(metrics[m.val_error_key("correct", s)] == 1.0 for s in SLICES)
    assert sum(metrics[k] for k in EVERY_KEY if k.startswith(m.VAL_ERROR_PREFIX)) == 4.0


def test_half_the_answers_give_halves() -> None:
    """Carries only for the first problem of each slice; drops the hundreds always."""
    first = {pairs[0] for pairs in PAIRS.values()}

    def write(a: int, b: int) -> int:
        total = a + b if (a, b) in first else _never_carries(a, b)
        return total % 100

    metrics = _metrics(write)
    assert metrics[m.val_error_key("correct", "carry")] == 0.5
    assert metrics[m.val_error_key("dropped_carry", "carry")] == 0.5
    assert metrics[m.val_error_key("dropped_carry", "overflow")] == 1.0
    assert metrics[m.val_error_key("correct", "no_carry")] == 1.0
    assert metrics[m.VAL_DISCRIMINATION_CARRY] == 0.5
    assert metrics[m.VAL_DISCRIMINATION_OVERFLOW] == 0.0


def test_the_discrimination_reads_the_rewards_given() -> None:
    """J comes from the rewards the policy scored, as val/reward@1/<slice> does."""
    problems = _problems()
    completions = [f"\\boxed{{{p.answer}}}" for p in problems]
    rewards = [0.0 if p.skill == "no_carry" else 1.0 for p in problems]
    metrics = validation_metrics(problems, completions, rewards)
    assert metrics[m.VAL_DISCRIMINATION_CARRY] == 0.0
    assert metrics[m.val_error_key("correct", "no_carry")] == 1.0  # the answers are right


def test_a_slice_absent_from_validation_gets_no_keys() -> None:
    problems = [p for p in _problems() if p.skill in ("carry", "overflow")]
    completions = [f"\\boxed{{{p.answer}}}" for p in problems]
    metrics = validation_metrics(problems, completions, [1.0] * len(problems))
    assert {key.rsplit("/", 1)[1] for key in metrics} == {"carry", "overflow"}
    assert m.VAL_DISCRIMINATION_CARRY not in metrics  # no no_carry: no false-alarm rate


def test_the_task_tags_its_problems_and_the_lookup_finds_them() -> None:
    task = AdditionSlicesTask(seed=1, val_size=8)
    problems = task.validation() + task.train_batch(0, 4)
    for problem in problems:
        a, b = problem.operands
        assert problem.task == TASK_KIND and problem.answer == str(a + b)
        assert problem.prompt == f"Compute {a}+{b}."
    validation = task.validation()
    completions = [f"\\boxed{{{p.answer}}}" for p in validation]
    untagged = Problem("x", "Compute 1+1.", "2")
    metrics = task_validation_metrics(
        [untagged, *validation], ["\\boxed{3}", *completions], [0.0] + [1.0] * len(validation)
    )
    assert set(metrics) == EVERY_KEY
    assert metrics[m.VAL_DISCRIMINATION_CARRY] == 1.0  # the untagged wrong answer is not in it
    assert task_validation_metrics([untagged], ["2"], [1.0]) == {}


def test_the_keys_are_catalogued_with_names_people_read() -> None:
    info = m.describe("val/error/spurious_carry/no_carry")
    assert (info.label, info.unit, info.group) == (
        "Validation errors · spurious carry · no_carry",
        "",
        m.REWARDS,
    )
    assert m.describe("val/error/wrong_digit_count/carry").label == (
        "Validation errors · wrong digit count · carry"
    )
    assert m.describe(m.VAL_DISCRIMINATION_CARRY).label == "Discrimination (J) · carry"
    assert m.describe(m.VAL_DISCRIMINATION_OVERFLOW).label == "Discrimination (J) · overflow"
    assert all(m.describe(key).label != key for key in EVERY_KEY)
