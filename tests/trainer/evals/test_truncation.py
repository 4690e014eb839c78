"""Inputs longer than the model's window are cut from the left, as lm-eval does: a long
multiple-choice context scores like its left-cut text, a long prompt still generates,
and each task counts its cut items (``truncated``). The tiny zoo models take 128
positions; ``tiny-llama-char`` has one token per character, so a cut is a slice."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from trainer.evals.evaluate import eval_points, results_json
from trainer.evals.scoring import (
    EncodedPair,
    fit_window,
    generate_completions,
    greedy_generate,
    loglikelihoods,
    max_positions,
    prompt_budget,
    score_exact_match,
    score_math,
    score_multiple_choice,
)
from trainer.evals.suite import ChoiceItem, EvalTask, SuiteConfig
from trainer.models import load_causal_lm, load_tokenizer
from trainer.tasks.base import Problem

WINDOW = 128
LONG = ("Which is larger? A) 17 B) 23. " * 11)[:300] + "\nAnswer:"  # 308 characters


@pytest.fixture(scope="module")
def zoo(zoo_dir) -> dict[str, tuple[Any, Any]]:
    names = ("tiny-llama-char", "tiny-gpt2-unigram")
    return {
        name: (load_causal_lm(zoo_dir / name).eval(), load_tokenizer(zoo_dir / name))
        for name in names
    }


@pytest.fixture(scope="module")
def char_model(zoo) -> tuple[Any, Any]:
    model, tokenizer = zoo["tiny-llama-char"]
    assert max_positions(model) == WINDOW
    assert len(tokenizer.encode(LONG, add_special_tokens=False)) == len(LONG)
    return model, tokenizer


def test_fit_window_keeps_the_last_tokens_and_the_continuation_whole():
    pair = EncodedPair(context=[1, 2, 3, 4, 5, 6], continuation=[7, 8], merged=False)
    assert fit_window(pair, 10) is pair  # 8 tokens fit 10 positions (+1)
    assert fit_window(pair, 7) is pair
    cut = fit_window(pair, 4)
    assert (cut.context, cut.continuation, cut.truncated) == ([4, 5, 6], [7, 8], True)
    # A continuation longer than the window: its last `window` tokens, after the one
    # token before them.
    long = EncodedPair(context=[0], continuation=[1, 2, 3, 4, 5, 6, 7, 8], merged=True)
    cut = fit_window(long, 5)
    assert (cut.context, cut.continuation, cut.truncated, cut.merged) == (
        [3], [4, 5, 6, 7, 8], True, True,
    )  # fmt: skip
    assert fit_window(long, None) is long  # a model without a window


def test_a_long_context_scores_as_its_left_cut_text(char_model):
    model, tokenizer = char_model
    kept = WINDOW + 1 - len(" 23")  # context tokens that fit beside the continuation
    requests = [(LONG, " 23"), (LONG, " 17"), ("Which is larger? A) 17 B) 23\nAnswer:", " 23")]

    cut = loglikelihoods(model, tokenizer, requests, batch_size=2)
    manual = loglikelihoods(model, tokenizer, [(LONG[-kept:], " 23"), (LONG[-kept:], " 17")])

    assert [r.logprob for r in cut[:2]] == pytest.approx([r.logprob for r in manual], abs=1e-5)
    assert [r.truncated for r in cut] == [True, True, False]
    assert [r.truncated for r in manual] == [False, False]
    assert [r.n_tokens for r in cut] == [3, 3, 3]


def test_a_long_multiple_choice_item_is_scored_and_counted(char_model):
    model, tokenizer = char_model
    kept = WINDOW + 1 - len(" 23")
    items = [
        ChoiceItem("long", LONG.removesuffix("\nAnswer:"), ("17", "23"), answer=1),
        ChoiceItem("short", "Which is larger? A) 17 B) 23", ("17", "23"), answer=1),
    ]
    items = [ChoiceItem(i.id, i.context + "\nAnswer:", i.choices, i.answer) for i in items]
    cut_item = ChoiceItem("cut", LONG[-kept:], ("17", "23"), answer=1)

    result = score_multiple_choice(model, tokenizer, items, batch_size=3)
    manual = score_multiple_choice(model, tokenizer, [cut_item])

    assert result.choices[0].logprobs == pytest.approx(manual.choices[0].logprobs, abs=1e-5)
    assert [c.truncated for c in result.choices] == [True, False]
    assert result.metrics["truncated"] == 1.0
    assert manual.metrics["truncated"] == 0.0


def test_a_continuation_longer_than_the_window_scores_its_last_tokens(char_model):
    model, tokenizer = char_model
    continuation = " " + "1234567890" * 20  # 201 tokens
    (result,) = loglikelihoods(model, tokenizer, [("Compute:", continuation)])

    ids = tokenizer.encode("Compute:" + continuation, add_special_tokens=False)[-(WINDOW + 1) :]
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=torch.tensor([ids[:-1]])).logits[0], -1)
    expected = sum(float(logp[t, ids[t + 1]]) for t in range(WINDOW))
    assert (result.n_tokens, result.truncated) == (WINDOW, True)
    assert result.logprob == pytest.approx(expected, abs=1e-4)


def test_a_long_prompt_generates_from_its_last_tokens(char_model):
    model, tokenizer = char_model
    new = 12
    prompts = [LONG, "Compute 3+5."]

    generated = generate_completions(model, tokenizer, prompts, max_new_tokens=new, batch_size=2)
    manual = greedy_generate(model, tokenizer, [LONG[-(WINDOW - new) :]], max_new_tokens=new)

    assert generated.truncated == [True, False]
    assert generated.completions[0] == manual[0]
    alone = greedy_generate(model, tokenizer, prompts[1:], max_new_tokens=new)
    assert generated.completions[1] == alone[0]


def test_a_long_prompt_generates_with_learned_positions(zoo):
    # GPT-2's position embeddings end at 128: before the cut this raised an IndexError.
    model, tokenizer = zoo["tiny-gpt2-unigram"]
    new = 12
    prompt = LONG * 2
    ids = tokenizer.encode(prompt, add_special_tokens=False)
    assert len(ids) > WINDOW

    generated = generate_completions(model, tokenizer, [prompt], max_new_tokens=new)

    with torch.no_grad():
        output = model.generate(
            input_ids=torch.tensor([ids[-(WINDOW - new) :]]),
            attention_mask=torch.ones((1, WINDOW - new), dtype=torch.long),
            max_new_tokens=new,
            do_sample=False,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
    tail = output[0, WINDOW - new :].tolist()
    if tokenizer.eos_token_id in tail:
        tail = tail[: tail.index(tokenizer.eos_token_id)]
    assert generated.truncated == [True]
    assert generated.completions == [tokenizer.decode(tail, skip_special_tokens=True)]


def test_generative_tasks_count_their_cut_prompts(zoo):
    model, tokenizer = zoo["tiny-gpt2-unigram"]
    problems = [
        Problem(id="long", prompt=LONG * 2 + " Compute 3+5.", answer="8"),
        Problem(id="short", prompt="Compute 3+5.", answer="8"),
    ]
    math = score_math(model, tokenizer, problems, max_new_tokens=8)
    exact = score_exact_match(model, tokenizer, problems, max_new_tokens=8)
    assert math.metrics["truncated"] == exact.metrics["truncated"] == 1.0
    assert math.metrics["n"] == 2.0


def test_no_room_for_a_prompt_is_refused(char_model):
    model, _ = char_model
    assert prompt_budget(model, 16) == WINDOW - 16
    assert prompt_budget(model.config, WINDOW - 1) == 1
    with pytest.raises(ValueError, match="max_new_tokens=128 leaves no room for a prompt"):
        prompt_budget(model, WINDOW)


def test_truncated_is_in_the_results_file_but_not_shipped(char_model):
    model, tokenizer = char_model
    suite = SuiteConfig(
        name="s", tasks=[EvalTask(name="mc", type="multiple_choice", path="mc.jsonl")]
    )
    items = [ChoiceItem("long", LONG, ("17", "23"), answer=1)]
    results = {"mc": score_multiple_choice(model, tokenizer, items)}

    document = results_json(suite, "p", 3, results)

    assert document["tasks"]["mc"]["truncated"] == 1
    keys = {point["key"] for point in eval_points(suite, "p", 3, results)}
    assert keys == {"eval/s/mc/accuracy", "eval/s/mc/n", "eval/s/mc/acc_norm"}
