"""The scorers: log-likelihood multiple choice against hand-computed sums, the batched
path against a direct unbatched computation on real zoo models, and boxed-answer and
exact-match scoring of hand-made generations."""

from __future__ import annotations

import functools
import math
from types import SimpleNamespace

import pytest
import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from trainer.chat import format_prompt
from trainer.evals.scoring import (
    choose,
    encode_pair,
    exact_match_scores,
    greedy_generate,
    loglikelihoods,
    math_scores,
    normalize_exact,
    score_exact_match,
    score_math,
    score_multiple_choice,
    sequence_logprobs,
)
from trainer.evals.suite import ChoiceItem
from trainer.models import load_causal_lm, load_tokenizer
from trainer.tasks.base import Problem
from trainer.zoo import ZOO_IDS, build_zoo

CHARS = " abc0123456789\\{}boxed"


def char_tokenizer() -> PreTrainedTokenizerFast:
    """One token per character of :data:`CHARS`; id 0 is EOS (and pad)."""
    vocab = {"<eos>": 0}
    for char in CHARS:
        vocab.setdefault(char, len(vocab))
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<eos>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tokenizer.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<eos>", pad_token="<eos>")


class BigramModel(torch.nn.Module):
    """Logits that depend only on the current token: P(next | current) from a table."""

    def __init__(self, tokenizer: PreTrainedTokenizerFast, rows: dict[str, dict[str, float]]):
        super().__init__()
        size = len(tokenizer)
        table = torch.full((size, size), 1.0 / size)
        for current, probs in rows.items():
            rest = (1.0 - sum(probs.values())) / (size - len(probs))
            row = torch.full((size,), rest)
            for token, p in probs.items():
                row[tokenizer.convert_tokens_to_ids(token)] = p
            table[tokenizer.convert_tokens_to_ids(current)] = row
        self.register_buffer("log_table", table.log())

    def forward(self, input_ids, attention_mask=None):
        return SimpleNamespace(logits=self.log_table[input_ids])


@pytest.fixture
def bigram() -> tuple[BigramModel, PreTrainedTokenizerFast]:
    tokenizer = char_tokenizer()
    rows = {
        "a": {"b": 0.4, "c": 0.3, " ": 0.1},
        " ": {"b": 0.4, "c": 0.3},
        "c": {"c": 0.98},
    }
    return BigramModel(tokenizer, rows), tokenizer


# --- log-likelihood ---------------------------------------------------------------------------
def test_loglikelihoods_sum_the_continuation_log_probs(bigram):
    model, tokenizer = bigram

    results = loglikelihoods(model, tokenizer, [("a", "b"), ("a", "cc"), ("a", " cc")])

    assert [r.logprob for r in results] == pytest.approx(
        [math.log(0.4), math.log(0.3) + math.log(0.98), math.log(0.1 * 0.3 * 0.98)]
    )
    assert [r.n_tokens for r in results] == [1, 2, 3]
    assert [r.greedy for r in results] == [True, False, False]  # after a, b is the argmax


def test_multiple_choice_picks_by_sum_and_by_length(bigram):
    model, tokenizer = bigram
    # " b": log .1 + log .4 = -3.22 (per char -3.22); " cc": log .1 + log .3 + log .98
    # = -3.53 (per char of "cc": -1.76): acc picks "b", acc_norm picks "cc".
    items = [ChoiceItem("x", "a", ("b", "cc"), answer=1), ChoiceItem("y", "a", ("cc", "b"), 1)]

    result = score_multiple_choice(model, tokenizer, items, batch_size=3)

    first = result.choices[0]
    assert first.logprobs == pytest.approx(
        (math.log(0.1 * 0.4), math.log(0.1 * 0.3 * 0.98)), abs=1e-6
    )
    assert (first.prediction, first.prediction_norm, first.prediction_bytes) == (0, 1, 1)
    assert result.scores == [0.0, 1.0]
    assert result.metrics == {
        "accuracy": 0.5,
        "n": 2.0,
        "acc_norm": 0.5,
        "acc_bytes": 0.5,
        "boundary_merged": 0.0,
        "truncated": 0.0,
    }


def test_choose_normalises_by_characters_and_by_bytes():
    # "é" is one character but two UTF-8 bytes.
    assert choose([-2.0, -3.0], ["é", "ab"]) == (0, 1, 0)
    assert choose([-1.0, -1.0], ["x", "y"]) == (0, 0, 0)  # ties go to the first


def test_masked_positions_change_nothing():
    torch.manual_seed(0)
    logits = torch.randn(2, 4, 6)
    targets = torch.randint(0, 6, (2, 4))
    mask = torch.tensor([[False, True, True, False], [True, False, False, False]])
    sums, _ = sequence_logprobs(logits, targets, mask)

    noisy = logits.clone()
    noisy[~mask] = torch.randn_like(noisy[~mask]) * 100
    other_targets = torch.where(mask, targets, torch.zeros_like(targets))

    assert torch.allclose(sequence_logprobs(noisy, other_targets, mask)[0], sums)
    logp = torch.log_softmax(logits, -1)
    expected = logp[0, 1, targets[0, 1]] + logp[0, 2, targets[0, 2]]
    assert sums[0] == pytest.approx(float(expected))


# --- the boundary -----------------------------------------------------------------------------
def test_trailing_context_space_moves_to_the_continuation():
    tokenizer = char_tokenizer()
    pair = encode_pair(tokenizer, "a ", "b")
    ids = tokenizer.convert_tokens_to_ids
    assert (pair.context, pair.continuation, pair.merged) == ([ids("a")], ids([" ", "b"]), False)


def test_a_merged_boundary_scores_the_merged_token_and_is_flagged():
    bpe = Tokenizer(models.BPE({"a": 0, "b": 1, "ab": 2, "<eos>": 3}, [("a", "b")]))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<eos>")
    assert tokenizer.encode("ab", add_special_tokens=False) == [2]

    pair = encode_pair(tokenizer, "a", "b")

    # lm-eval would cut tokenize("ab") after len(tokenize("a")) = 1 token: nothing left.
    assert (pair.context, pair.continuation, pair.merged) == ([3], [2], True)


# --- real zoo models ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def zoo_models(zoo_dir):
    built = build_zoo(zoo_dir, ids=list(ZOO_IDS), log=lambda _: None)
    return {zoo_id: (load_causal_lm(path), load_tokenizer(path)) for zoo_id, path in built.items()}


def direct_logprob(model, tokenizer, context: str, continuation: str) -> float:
    """One request, unbatched and unpadded: the continuation's summed log-probs."""
    pair = encode_pair(tokenizer, context, continuation)
    ids = torch.tensor([pair.context + pair.continuation])
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[0].float(), -1)
    start = len(pair.context)
    return sum(float(logp[t - 1, ids[0, t]]) for t in range(start, ids.shape[1]))


@pytest.mark.parametrize("zoo_id", ZOO_IDS)
def test_batched_loglikelihoods_match_a_direct_computation(zoo_models, zoo_id):
    model, tokenizer = zoo_models[zoo_id]
    formatted = functools.partial(format_prompt, tokenizer)
    requests = [
        (formatted("Which is larger? A) 17 B) 23\nAnswer:"), " 23"),
        (formatted("Compute 47+38."), "\\boxed{85}"),
        ("Compute 4+5.", " 9"),
        ("12", "345"),
        ("", "\\boxed{7}"),
        (formatted("Compute 3+5."), "\\boxed{8}"),
        ("Which is larger? A) 88 B) 27\nAnswer: ", "88"),
    ]

    batched = loglikelihoods(model, tokenizer, requests, batch_size=3)

    expected = [direct_logprob(model, tokenizer, c, x) for c, x in requests]
    assert [r.logprob for r in batched] == pytest.approx(expected, abs=1e-4)


def test_greedy_generation_is_the_same_batched_or_alone(zoo_models):
    model, tokenizer = zoo_models["tiny-qwen-bpe"]
    prompts = [format_prompt(tokenizer, f"Compute {e}.") for e in ("3+5", "47+38", "2+2", "61+7")]

    batched = greedy_generate(model, tokenizer, prompts, max_new_tokens=12, batch_size=4)
    alone = [greedy_generate(model, tokenizer, [p], max_new_tokens=12)[0] for p in prompts]

    assert batched == alone


# --- generated answers ------------------------------------------------------------------------
def test_math_scores_read_the_boxed_answer():
    completions = ["so \\boxed{22}", "\\boxed{21}", "it is 22", "\\boxed{\\frac{1}{2}}", "\\boxed{"]
    assert math_scores(completions, ["22", "22", "22", "0.5", "3"]) == [1.0, 0.0, 1.0, 1.0, 0.0]


def test_exact_match_compares_after_stripping_and_collapsing_whitespace():
    assert normalize_exact("  New \n\t York ") == "New York"
    completions = ["  22 ", "22 apples", "New\n  York", "new york"]
    answers = ["22", "22", "New York", "New York"]
    assert exact_match_scores(completions, answers) == [1.0, 0.0, 1.0, 0.0]


class ScriptedModel(torch.nn.Module):
    """``generate`` appends a fixed completion per prompt (then EOS padding)."""

    def __init__(self, tokenizer, script: dict[str, str]):
        super().__init__()
        self.tokenizer, self.script = tokenizer, script

    def generate(self, input_ids, attention_mask, max_new_tokens, **_):
        rows = []
        for ids, mask in zip(input_ids.tolist(), attention_mask.tolist(), strict=True):
            prompt = self.tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if m])
            rows.append(self.tokenizer.encode(self.script[prompt], add_special_tokens=False))
        width = max(len(row) for row in rows) + 1
        tail = torch.tensor([row + [0] * (width - len(row)) for row in rows])
        return torch.cat([input_ids, tail], dim=1)


def test_generative_scorers_score_hand_made_generations():
    tokenizer = char_tokenizer()
    script = {"a": "\\boxed{12}", "ab": "\\boxed{13}", "abc": "  12 "}
    model = ScriptedModel(tokenizer, script)
    problems = [Problem(id=p, prompt=p, answer="12") for p in script]

    math = score_math(model, tokenizer, problems, batch_size=2)
    exact = score_exact_match(model, tokenizer, problems, batch_size=2)

    assert math.completions == list(script.values())
    assert math.scores == [1.0, 0.0, 1.0]  # the last number counts without a box
    assert exact.scores == [0.0, 0.0, 1.0]
    assert exact.metrics == {"accuracy": pytest.approx(1 / 3), "n": 3.0, "truncated": 0.0}
