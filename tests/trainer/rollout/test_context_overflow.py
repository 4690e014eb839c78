"""A prompt that does not fit the model's positions is refused before generation, with
what to change (issue 33): few-shot examples and a system prompt made the tiny zoo's
prompts longer than its 128 positions, where GPT-2's learned positions failed with an
``IndexError`` deep inside ``generate`` and the rotary models ran on untrained positions."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer.chat import PromptTooLongError, context_overflow
from trainer.models import load_causal_lm, load_tokenizer, max_positions
from trainer.rollout.engine import HFRolloutEngine

FIX = "use fewer task.few_shot examples, a shorter task.system_prompt, or a smaller max_new_tokens"


def test_a_prompt_and_response_that_fit_pass_and_one_past_the_window_is_explained() -> None:
    assert context_overflow(112, 16, 128) is None  # exactly the window
    assert context_overflow(10_000, 16, None) is None  # the model declares no window
    assert context_overflow(113, 16, 128) == (
        "the longest prompt is 113 tokens and max_new_tokens 16 more make 129, past the "
        f"model's 128 positions: {FIX}"
    )


@pytest.mark.parametrize("zoo_id", ["tiny-gpt2-unigram", "tiny-qwen-bpe", "tiny-llama-char"])
def test_the_engine_refuses_a_prompt_past_the_window_and_samples_one_that_fits(
    zoo_dir: Path, zoo_id: str
) -> None:
    model = load_causal_lm(zoo_dir / zoo_id)
    tokenizer = load_tokenizer(zoo_dir / zoo_id)
    engine = HFRolloutEngine(model, tokenizer)
    window = max_positions(model)
    assert window == 128
    short = "Compute 2+3."
    long_prompt = "Compute 2+3. " * 60  # well past 128 tokens in every zoo tokenizer
    longest = max(len(ids) for ids in engine.encode_prompts([short, long_prompt]))

    with pytest.raises(PromptTooLongError) as refused:
        engine.generate([short, long_prompt], n=2, max_new_tokens=8, temperature=1.0)
    assert str(refused.value) == (
        f"the longest prompt is {longest} tokens and max_new_tokens 8 more make "
        f"{longest + 8}, past the model's 128 positions: {FIX}"
    )

    batch = engine.generate([short], n=2, max_new_tokens=8, temperature=1.0)
    assert len(batch.response_texts) == 2
