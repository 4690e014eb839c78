"""One trained tokenizer of each kind THL must handle, shared by the THL test modules."""

from __future__ import annotations

import functools

from transformers import PreTrainedTokenizerFast

from trainer.zoo.tokenizers import (
    build_corpus,
    train_byte_bpe,
    train_char_level,
    train_unigram_byte_fallback,
    train_wordpiece,
)

KINDS = ("byte_bpe", "unigram", "char", "wordpiece")


@functools.cache
def zoo(kind: str) -> PreTrainedTokenizerFast:
    """The tokenizer of ``kind`` trained on the zoo corpus (cached for the session)."""
    trainers = {
        "byte_bpe": train_byte_bpe,
        "unigram": train_unigram_byte_fallback,
        "char": train_char_level,
        "wordpiece": train_wordpiece,
    }
    return trainers[kind](build_corpus(0))
