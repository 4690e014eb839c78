"""PRP's importance weight on the answer's digit tokens (issue 30): the tokens inside the
last ``\\boxed{...}`` that hold a digit or a minus sign, found on a response's own ids for
each kind of zoo tokenizer (char level, byte-level BPE, unigram with byte fallback), and
``prp/is_weight_mean/answer`` (overall and per skill), the mean weight over those tokens
alone. Real tokenizers from the zoo's builders; real tiny policies for the PRP step."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.trainer.tokenizer_kinds import zoo
from tests.trainer.zoo_policy import zoo_policy
from trainer import metrics as m
from trainer.config import RunConfig
from trainer.exchange import StepRecord
from trainer.policy import Policy, Rollouts
from trainer.regimes import prp
from trainer.regimes.prp.answer import answer_digit_positions, answer_span
from trainer.regimes.prp.regime import PRP
from trainer.rollout import RolloutBatch
from trainer.tasks import Problem
from trainer.tasks.rewards import extract_boxed
from trainer.thl import token_char_spans

KINDS = ("char", "byte_bpe", "unigram")


def _ids(kind: str, text: str, *, eos: bool = True) -> list[int]:
    tokenizer = zoo(kind)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return [*ids, tokenizer.eos_token_id] if eos else ids


def _held(kind: str, ids: list[int], positions: list[int]) -> list[str]:
    """What each token at ``positions`` decodes to (its own characters)."""
    text, spans = token_char_spans(zoo(kind), ids)
    return [text[spans[p][0] : spans[p][1]] for p in positions]


# --- the box (pure text) ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "\\boxed{85}",
        "1+2=3, so \\boxed{-127}.",
        "\\boxed{3} or rather \\boxed{40}",  # the last box
        "\\boxed{40} then \\boxed{7",  # an unclosed box is skipped
        "\\boxed{\\frac{1}{2}}",  # nested braces
        "\\fbox{12}",
        "no box: 12",
        "\\boxed{12",
    ],
)
def test_the_answer_span_is_the_box_the_math_reward_reads(text: str) -> None:
    span = answer_span(text)
    assert (None if span is None else text[span[0] : span[1]]) == extract_boxed(text)


# --- the answer's digit tokens, per tokenizer kind ---------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_the_positions_are_the_tokens_of_the_boxed_digits_and_minus_only(kind: str) -> None:
    ids = _ids(kind, "1+2=3, so \\boxed{-127}.")
    positions = answer_digit_positions(ids, zoo(kind))
    assert "".join(_held(kind, ids, positions)) == "-127"  # not 1, 2, 3 before the box
    assert positions == sorted(positions) and len(positions) == len(set(positions))
    tokens = zoo(kind).convert_ids_to_tokens(ids)
    assert all("{" not in tokens[p] and "}" not in tokens[p] for p in positions)
    assert len(ids) - 1 not in positions  # the EOS holds no digit


@pytest.mark.parametrize("kind", KINDS)
def test_only_the_last_complete_box_counts(kind: str) -> None:
    ids = _ids(kind, "\\boxed{3} or rather \\boxed{40}")
    assert "".join(_held(kind, ids, answer_digit_positions(ids, zoo(kind)))) == "40"
    ids = _ids(kind, "\\boxed{40} then \\boxed{7", eos=False)  # cut off: the earlier box
    assert "".join(_held(kind, ids, answer_digit_positions(ids, zoo(kind)))) == "40"
    for unboxed in ("the answer is 12", "\\boxed{12", "\\boxed{}", ""):
        ids = _ids(kind, unboxed)
        assert answer_digit_positions(ids, zoo(kind)) == [], unboxed


@pytest.mark.parametrize("kind", KINDS)
def test_other_characters_in_the_box_are_not_the_answers_digits(kind: str) -> None:
    ids = _ids(kind, "\\boxed{x = 5 é}")
    assert "".join(_held(kind, ids, answer_digit_positions(ids, zoo(kind)))) == "5"


def test_a_byte_fallback_piece_that_decodes_to_a_digit_holds_it() -> None:
    # Generated ids need not be the canonical encoding: the unigram tokenizer can write
    # "8" as its byte piece <0x38>; an emoji outside the vocabulary is four byte pieces,
    # the last of which produces it (the others produce nothing).
    tokenizer = zoo("unigram")
    canonical = _ids("unigram", "\\boxed{85}")
    eight = tokenizer.convert_tokens_to_ids("8")
    assert eight in canonical
    ids = [tokenizer.convert_tokens_to_ids("<0x38>") if i == eight else i for i in canonical]
    assert tokenizer.decode(ids, skip_special_tokens=True).endswith("\\boxed{85}")
    positions = answer_digit_positions(ids, tokenizer)
    assert [tokenizer.convert_ids_to_tokens(ids[p]) for p in positions] == ["<0x38>", "5"]

    ids = _ids("unigram", "\\boxed{\U0001f600 7}")
    assert sum(token.startswith("<0x") for token in tokenizer.convert_ids_to_tokens(ids)) == 4
    positions = answer_digit_positions(ids, tokenizer)
    assert [tokenizer.convert_ids_to_tokens(ids[p]) for p in positions] == ["7"]


# --- prp/is_weight_mean/answer in a PRP step -------------------------------------------------

POOL = {"src": "tiny-llama-char", "lrn": "tiny-qwen-bpe"}
PROBLEMS = [
    Problem(id="p0", prompt="Compute 1+2.", answer="3", skill="addition"),
    Problem(id="p1", prompt="Compute 9-3.", answer="6", skill="subtraction"),
    Problem(id="p2", prompt="Compute 2+5.", answer="7", skill="addition"),
]
PEER_TEXTS = [
    ["\\boxed{3}", "1+2 is \\boxed{3}"],
    ["\\boxed{-6}", "no idea"],  # one response without a box: no answer token
    ["\\boxed{7}", "\\boxed{12}"],
]


def _config(**prp_settings: object) -> RunConfig:
    return RunConfig.from_dict(
        {
            "pool": [{"name": n, "model": f"zoo:{z}"} for n, z in POOL.items()],
            "regime": "prp",
            "prp": {"k_peer": 2, "c_bar": 1.0, **prp_settings},
        }
    )


def _peer_rollouts(source: Policy, problems: list[Problem], texts: list[list[str]]) -> Rollouts:
    """The source's rollouts of ``problems`` written by hand, in its own tokens."""
    encode = source.tokenizer
    prompts = [
        encode(t, add_special_tokens=False)["input_ids"] for t in source.prompt_texts(problems)
    ]
    flat = [text for row in texts for text in row]
    g = len(texts[0])
    batch = RolloutBatch(
        [prompts[i // g] for i in range(len(flat))],
        [source.encode_response(text) for text in flat],
        flat,
        [True] * len(flat),
    )
    rewards = [
        float(extract_boxed(text) == problem.answer)
        for problem, row in zip(problems, texts, strict=True)
        for text in row
    ]
    return Rollouts(problems, batch, torch.tensor(rewards), g, 1.0)


def _prp_step(
    zoo_dir: Path, problems: list[Problem], texts: list[list[str]], **prp_settings: object
) -> tuple[dict[str, float], list[list[int]], list[list[float]], list[str]]:
    """One PRP step of the learner on the source's hand-written rollouts, its metrics read
    before the update; each peer row's response ids, weights and prompt skill."""
    config = _config(**prp_settings)
    source = zoo_policy("src", POOL["src"], zoo_dir, config)
    learner = zoo_policy("lrn", POOL["lrn"], zoo_dir, config)
    regime = PRP(config, "lrn", {n: zoo_dir / z for n, z in POOL.items()})
    ids = tuple(p.id for p in problems)
    published = regime.publish(source, _peer_rollouts(source, problems, texts), step=1)
    torch.manual_seed(1)
    own = learner.rollout(problems)
    step = regime.learn(learner, own, [StepRecord("src", 1, ids, topics=published)], step=1)
    metrics = step.metrics
    first = len(own.batch)
    g = own.group_size
    skill_of = {tuple(own.batch.prompt_ids[i * g]): p.skill for i, p in enumerate(problems)}
    rows = step.batch.response_ids[first:]
    weights = [list(w) for w in step.batch.token_weights[first:]]
    skills = [skill_of[tuple(prompt)] for prompt in step.batch.prompt_ids[first:]]
    return metrics, rows, weights, skills


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def test_prp_logs_the_mean_weight_over_the_answers_digit_tokens(zoo_dir: Path) -> None:
    metrics, rows, weights, skills = _prp_step(zoo_dir, PROBLEMS, PEER_TEXTS)
    tokenizer = zoo_policy("lrn", POOL["lrn"], zoo_dir, _config()).tokenizer
    positions = [answer_digit_positions(row, tokenizer) for row in rows]
    assert len(rows) == 6 and sum(not p for p in positions) == 1  # "no idea" has no answer
    answer = [[w[i] for i in p] for w, p in zip(weights, positions, strict=True)]
    flat = [w for row in answer for w in row]
    assert metrics[prp.IS_WEIGHT_MEAN_ANSWER] == pytest.approx(_mean(flat), abs=1e-12)
    everything = [w for row in weights for w in row]
    assert metrics[prp.IS_WEIGHT_MEAN] == pytest.approx(_mean(everything), abs=1e-12)
    assert len(flat) < len(everything)  # the box, the EOS and the prose are left out

    # Per skill of the prompt, like the weight over every token.
    for skill in ("addition", "subtraction"):
        values = [w for row, s in zip(answer, skills, strict=True) if s == skill for w in row]
        key = f"{prp.IS_WEIGHT_MEAN_ANSWER}/{skill}"
        assert metrics[key] == pytest.approx(_mean(values), abs=1e-12)
        info = m.describe(key)
        assert (info.label, info.group) == (
            f"PRP importance weight (mean) · answer digits · {skill}",
            m.SHARING,
        )
    info = m.describe(prp.IS_WEIGHT_MEAN_ANSWER)
    assert (info.label, info.group) == ("PRP importance weight (mean) · answer digits", m.SHARING)
    assert m.describe(f"{prp.IS_WEIGHT_MEAN}/addition").label == (
        "PRP importance weight (mean) · addition"
    )


def test_without_the_correction_the_answers_weight_is_one(zoo_dir: Path) -> None:
    metrics, *_ = _prp_step(zoo_dir, PROBLEMS, PEER_TEXTS, is_correction=False)
    assert metrics[prp.IS_WEIGHT_MEAN_ANSWER] == 1.0 == metrics[prp.IS_WEIGHT_MEAN]


def test_no_boxed_answer_no_answer_weight(zoo_dir: Path) -> None:
    texts = [["no idea", "maybe 3"], ["six", "6"], ["7", "x"]]
    metrics, *_ = _prp_step(zoo_dir, PROBLEMS, texts)
    assert prp.IS_WEIGHT_MEAN in metrics
    assert not any(key.startswith(prp.IS_WEIGHT_MEAN_ANSWER) for key in metrics)
