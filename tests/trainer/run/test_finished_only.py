"""What counts as a correct answer (issue 45, item 3): ``task.finished_only`` and
``task.strict_format``, the scoring rule as pure functions, the policy's scoring, and how
the run config resolves and validates the options.

The example is the one transfer of a {SmolLM2-135M, tiny-llama-char-sum} SGT run: a
response cut off at ``max_new_tokens`` with no box whose last number happened to be the
answer, scored correct and taught to the peer."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from trainer.config import (
    ConfigError,
    RunConfig,
    finished_only_applies,
    is_pretrained_source,
    resolve_finished_only,
    scoring_summary,
)
from trainer.policy import Policy
from trainer.tasks import get_reward, run_scoring
from trainer.tasks.rewards import (
    Scoring,
    counts_as_finished,
    keep_finished,
    math_score,
    score_reason,
)

PROMPT = "Compute 0+1."
TRUNCATED = "Computing 1 (1 + 1) is a classic reminder that some"
"""SmolLM2's response, cut off by max_new_tokens: no EOS, no box."""
TINY_POOL = [
    {"name": "llama", "model": "zoo:tiny-llama-char-sum"},
    {"name": "qwen", "model": "zoo:tiny-qwen-bpe"},
]
SMOLLM2_POOL = [
    {"name": "smollm2", "model": "zoo:smollm2-135m-instruct"},
    {"name": "llama", "model": "zoo:tiny-llama-char-sum"},
]


def _policy_scores(
    scoring: Scoring, completions: list[str], answers: list[str], finished: list[bool]
) -> list[float]:
    """:meth:`Policy.score_responses` of a policy built as trainer/run.py builds it for
    ``scoring`` (its reward and its ``finished_only``); no model is needed to score."""
    policy = SimpleNamespace(
        reward_fn=get_reward(scoring.reward, strict_format=scoring.strict_format),
        finished_only=scoring.finished_only,
    )
    prompts = [PROMPT] * len(completions)
    return Policy.score_responses(policy, prompts, completions, answers, finished)  # type: ignore[arg-type]


# --- the rule -------------------------------------------------------------------------------
def test_the_truncated_example_scores_today_and_not_with_finished_only() -> None:
    assert math_score(TRUNCATED, "1") == 1.0  # the last number, 1, is the answer
    assert not counts_as_finished(TRUNCATED, ended_with_eos=False)
    assert _policy_scores(Scoring(finished_only=False), [TRUNCATED], ["1"], [False]) == [1.0]
    assert _policy_scores(Scoring(finished_only=True), [TRUNCATED], ["1"], [False]) == [0.0]
    # The same words ending with EOS are a finished answer, and still score.
    assert _policy_scores(Scoring(finished_only=True), [TRUNCATED], ["1"], [True]) == [1.0]


def test_a_closed_box_counts_without_eos_and_an_unclosed_one_does_not() -> None:
    boxed = "0 + 1 = \\boxed{1}, and to check it we add"  # ran on past its answer
    unclosed = "0 + 1 = 1, so \\boxed{1"
    assert counts_as_finished(boxed, ended_with_eos=False)
    assert not counts_as_finished(unclosed, ended_with_eos=False)
    scores = _policy_scores(Scoring(finished_only=True), [boxed, unclosed], ["1", "1"], [False] * 2)
    assert scores == [1.0, 0.0]


def test_keep_finished_zeroes_only_the_unfinished_and_checks_lengths() -> None:
    texts = ["\\boxed{1}", "1", "1"]
    assert keep_finished([1.0, 1.0, 1.0], texts, [False, True, False]) == [1.0, 1.0, 0.0]
    with pytest.raises(ValueError, match="one reward and one finished flag per completion"):
        keep_finished([1.0], texts, [True])


def test_strict_format_refuses_a_bare_last_number() -> None:
    assert math_score("so the sum is 1", "1") == 1.0
    assert math_score("so the sum is 1", "1", strict_format=True) == 0.0
    assert math_score("so the sum is \\boxed{1}", "1", strict_format=True) == 1.0
    strict = Scoring(strict_format=True)
    assert _policy_scores(strict, ["so the sum is 1", "\\boxed{1}"], ["1", "1"], [True] * 2) == [
        0.0,
        1.0,
    ]
    # Multiple choice alike: a letter stated without a box is no answer.
    choice = get_reward("multiple_choice", strict_format=True)
    assert choice(["q"] * 2, ["Answer: B", "\\boxed{B}"], ["B", "B"]) == [0.0, 1.0]
    assert get_reward("multiple_choice")(["q"], ["Answer: B"], ["B"]) == [1.0]


def test_the_reason_says_what_was_read_and_how_the_response_ended() -> None:
    assert score_reason("math", "so \\boxed{85}", "85", True, 1.0) == (
        "\\boxed{85} = 85; ended with EOS"
    )
    assert score_reason("math", TRUNCATED, "1", False, 1.0) == (
        "last number 1 = 1 (no box); cut off at max_new_tokens"
    )
    assert (
        score_reason("math", "\\boxed{84}", "85", True, 0.0) == "\\boxed{84} ≠ 85; ended with EOS"
    )
    assert score_reason("math", TRUNCATED, "1", False, 0.0, finished_only=True) == (
        "unfinished: cut off at max_new_tokens with no closed \\boxed{} (finished_only scores it 0)"
    )
    assert score_reason("math", "it is 1", "1", True, 0.0, strict_format=True) == (
        "no closed \\boxed{} (strict_format); ended with EOS"
    )
    assert score_reason("multiple_choice", "Answer: B", "(B)", True, 1.0) == (
        "choice B = B (no box); ended with EOS"
    )


# --- the config ------------------------------------------------------------------------------
def test_auto_resolves_on_for_a_pool_with_smollm2_and_off_for_the_tiny_pool() -> None:
    with_smollm2 = RunConfig.from_dict({"pool": SMOLLM2_POOL})
    tiny = RunConfig.from_dict({"pool": TINY_POOL})
    assert with_smollm2.task.finished_only == tiny.task.finished_only == "auto"  # the default
    assert finished_only_applies(with_smollm2) is True
    assert finished_only_applies(tiny) is False
    # The same for every policy of the pool: the run's scoring, not a policy's.
    assert run_scoring(with_smollm2) == Scoring("math", finished_only=True, strict_format=False)
    assert run_scoring(tiny) == Scoring("math", finished_only=False, strict_format=False)


def test_a_model_directory_is_pretrained_and_on_or_off_override_auto() -> None:
    assert is_pretrained_source("/models/Qwen2.5-0.5B-Instruct")
    assert is_pretrained_source("zoo:smollm2-135m-instruct")
    assert not is_pretrained_source("zoo:tiny-llama-char")
    assert not is_pretrained_source("zoo:shape-qwen2.5-0.5b")  # random init, real shape
    assert resolve_finished_only("auto", ["zoo:tiny-qwen-bpe", "/models/x"]) is True
    assert resolve_finished_only("off", ["zoo:smollm2-135m-instruct"]) is False
    assert resolve_finished_only("on", ["zoo:tiny-qwen-bpe"]) is True


def test_the_resolved_rule_is_said_in_words() -> None:
    config = RunConfig.from_dict({"pool": SMOLLM2_POOL, "task": {"strict_format": True}})
    assert scoring_summary(config) == (
        "finished_only auto, so on: the pool has a pretrained model (smollm2) (only "
        "responses that ended with EOS or hold a closed \\boxed{} score); strict_format on "
        "(boxed answers only)"
    )
    tiny = RunConfig.from_dict({"pool": TINY_POOL})
    assert scoring_summary(tiny).startswith(
        "finished_only auto, so off: the pool holds tiny zoo models only"
    )


def test_a_bad_value_says_how_to_fix_it() -> None:
    with pytest.raises(ConfigError) as error:
        RunConfig.from_dict({"pool": TINY_POOL, "task": {"finished_only": "yes"}})
    message = error.value.errors["task.finished_only"]
    assert message.startswith("use 'auto' (on when the pool has a pretrained model")
    assert message.endswith("got 'yes'")
    with pytest.raises(ConfigError) as error:
        RunConfig.from_dict({"pool": TINY_POOL, "task": {"strict_format": "yes"}})
    assert "task.strict_format" in error.value.errors


def test_the_stored_config_carries_both_options() -> None:
    config = RunConfig.from_dict(
        {"pool": TINY_POOL, "task": {"finished_only": "on", "strict_format": True}}
    )
    task = config.to_dict()["task"]
    assert (task["finished_only"], task["strict_format"]) == ("on", True)
    assert RunConfig.from_dict(config.to_dict()) == config
