"""The math and multiple-choice rewards: extraction, normalisation, math-verify, threads."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from trainer.tasks.rewards import (
    REWARDS,
    extract_boxed,
    extract_choice,
    extract_final_answer,
    get_reward,
    math_reward,
    multiple_choice_reward,
)


def math_score(completion: str, answer: str) -> float:
    (score,) = math_reward(["prompt"], [completion], [answer])
    return score


def choice_score(completion: str, answer: str) -> float:
    (score,) = multiple_choice_reward(["prompt"], [completion], [answer])
    return score


# --- extraction ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("\\boxed{85}", "85"),
        ("first \\boxed{1} then \\boxed{2}", "2"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("\\boxed{\\sqrt{\\frac{a}{b}}}", "\\sqrt{\\frac{a}{b}}"),
        ("\\fbox{7}", "7"),
        ("\\boxed {3}", "3"),
        ("\\boxed{4} and a truncated \\boxed{\\frac{1", "4"),
        ("no box at all, 12", None),
    ],
)
def test_extract_boxed_takes_the_last_complete_box(text: str, expected: str | None) -> None:
    assert extract_boxed(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so 3 + 4 = 7", "7"),
        ("it is -12", "-12"),
        ("x = -3.5.", "-3.5"),
        ("the total is 1,234 dollars", "1234"),
        ("pi is about .5", ".5"),
        ("10-3 = 7", "7"),
        ("pages 1-5", "5"),
        ("\\boxed{x+1} but then 5", "x+1"),
        ("cut off in \\boxed{\\frac{1}{2", None),
        ("no digits here", None),
    ],
)
def test_extract_final_answer_prefers_the_box_else_the_last_number(
    text: str, expected: str | None
) -> None:
    assert extract_final_answer(text) == expected


# --- math reward --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("completion", "answer"),
    [
        ("\\boxed{85}", "85"),
        ("The answer is 85.", "85"),
        ("\\boxed{1,000}", "1000"),
        ("so we get 1,000", "1000"),
        ("\\boxed{3.0}", "3"),
        ("\\boxed{+7}", "7"),
        ("\\boxed{$42$}", "42"),
        ("\\boxed{42.}", "42"),
        ("\\boxed{ 42 }", "42"),
        ("\\boxed{85}", "\\boxed{85}"),
        ("\\boxed{10,\\!000}", "10000"),
        ("\\boxed{\\dfrac{1}{2}}", "\\frac{1}{2}"),
    ],
)
def test_math_reward_accepts_equal_answers_after_normalisation(
    completion: str, answer: str
) -> None:
    assert math_score(completion, answer) == 1.0


@pytest.mark.parametrize(
    ("completion", "answer"),
    [
        ("\\boxed{0.5}", "1/2"),
        ("\\boxed{\\frac{1}{2}}", "0.5"),
        ("\\boxed{\\frac{\\sqrt{2}}{2}}", "\\sqrt{2}/2"),
        ("\\boxed{2^{10}}", "1024"),
        ("\\boxed{x + 1}", "1 + x"),
    ],
)
def test_math_reward_accepts_mathematically_equivalent_answers(
    completion: str, answer: str
) -> None:
    assert math_score(completion, answer) == 1.0


@pytest.mark.parametrize(
    ("completion", "answer"),
    [
        ("\\boxed{84}", "85"),
        ("\\boxed{8 5}", "85"),
        ("\\boxed{0.25}", "1/2"),
        ("\\boxed{x + 2}", "x + 1"),
        ("I do not know", "85"),
        ("\\boxed{}", "85"),
        ("", "85"),
        ("\\boxed{\\frac{1}", "1"),
    ],
)
def test_math_reward_rejects_wrong_or_missing_answers(completion: str, answer: str) -> None:
    assert math_score(completion, answer) == 0.0


@pytest.mark.parametrize(
    "completion", ["\\boxed{9^{9^{9}}}", "\\boxed{100000000!}", "\\boxed{((6!)!)!}"]
)
def test_math_reward_scores_runaway_expressions_without_evaluating_them(completion: str) -> None:
    assert math_score(completion, "1") == 0.0


def test_math_reward_scores_a_batch_in_order() -> None:
    completions = ["\\boxed{2}", "\\boxed{3}", "no answer", "\\boxed{0.5}"]
    answers = ["2", "4", "1", "\\frac{1}{2}"]
    assert math_reward(["p"] * 4, completions, answers) == [1.0, 0.0, 0.0, 1.0]


def test_math_reward_works_from_a_worker_thread() -> None:
    def score() -> tuple[bool, list[float]]:
        in_main = threading.current_thread() is threading.main_thread()
        return in_main, math_reward(["p", "p"], ["\\boxed{0.75}", "\\boxed{y+2}"], ["3/4", "2+y"])

    with ThreadPoolExecutor(max_workers=1) as pool:
        in_main, rewards = pool.submit(score).result(timeout=60)
    assert not in_main
    assert rewards == [1.0, 1.0]


def test_rewards_refuse_mismatched_lengths() -> None:
    with pytest.raises(ValueError, match="one prompt and one answer per completion"):
        math_reward(["p"], ["\\boxed{1}", "\\boxed{2}"], ["1"])
    with pytest.raises(ValueError, match="one prompt and one answer per completion"):
        multiple_choice_reward(["p", "p"], ["A", "B"], ["A"])


# --- multiple choice ----------------------------------------------------------------------
@pytest.mark.parametrize(
    "completion",
    [
        "B",
        "(B)",
        "B.",
        "B) the second one",
        "Answer: B",
        "answer:(B)",
        "\\boxed{B}",
        "\\boxed{\\text{B}}",
        "the answer is B",
        "The Answer Is B.",
        "the answer is b",
        "The correct answer is option B because it fits.",
        "I considered (A), but the answer is B.",
        "(A) looks tempting.\n(B)",
    ],
)
def test_multiple_choice_reward_accepts_the_usual_ways_to_name_a_letter(completion: str) -> None:
    assert choice_score(completion, "B") == 1.0


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("a", None),
        ("the answer is a dog", None),
        ("I think so", None),
        ("Answer: Bob", None),
        ("Answer: A. Then again, answer: C", "C"),
        ("(A) then (D)", "D"),
        ("The answer is B. (A) was tempting.", "B"),
        ("", None),
    ],
)
def test_extract_choice_ignores_words_and_takes_the_last_statement(
    completion: str, expected: str | None
) -> None:
    assert extract_choice(completion) == expected


def test_multiple_choice_reward_rejects_other_letters_and_no_letter() -> None:
    completions = ["A", "the answer is a dog", "", "(C)"]
    assert multiple_choice_reward(["p"] * 4, completions, ["B", "A", "A", "C"]) == [
        0.0,
        0.0,
        0.0,
        1.0,
    ]


# --- registry -----------------------------------------------------------------------------
def test_rewards_are_registered_by_name() -> None:
    assert REWARDS["math"] is math_reward
    assert get_reward("multiple_choice") is multiple_choice_reward


def test_get_reward_lists_the_known_names_for_an_unknown_one() -> None:
    with pytest.raises(KeyError, match="math, multiple_choice"):
        get_reward("nope")
