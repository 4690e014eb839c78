"""Tokens per second of the Tokenizer Heterogeneity Layer, for every ordered tokenizer pair.

    PYTHONPATH=. .venv/bin/python bench/thl_throughput.py [--responses 3000] [--repeats 3]

A fixed corpus (seeded): two thirds arithmetic-style responses (worked steps, a boxed
answer), one third mixed text (English, accents, CJK, emoji, characters no zoo tokenizer
saw). Each response is encoded with the source tokenizer, given random behaviour
log-probs and an EOS, then, per ordered pair of the four zoo tokenizers:

- ``text_path``: :func:`retokenize` (decode, char spans, re-encode);
- ``trace_path``: :func:`redistribute_logprobs` on the retokenized spans;
- ``both``: :func:`align_response_logprobs` (what PRP calls).

Throughput is target (learner) tokens per second, median of ``--repeats`` runs. The
``char_spans`` section times :func:`token_char_spans` alone per tokenizer, replaying the
decoder versus the prefix-decoding fallback on responses of growing length.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import platform
import random
import statistics
import time
from collections.abc import Callable

from tokenizers import Tokenizer
from transformers import PreTrainedTokenizerFast

from trainer.tasks.arithmetic import ADDITIVE_LEVELS, boxed, make_expression
from trainer.thl import align_response_logprobs, redistribute_logprobs, retokenize
from trainer.thl.spans import decoder_spans, prefix_spans
from trainer.zoo.tokenizers import (
    ENGLISH_LINES,
    NON_ASCII_LINES,
    build_corpus,
    train_byte_bpe,
    train_char_level,
    train_unigram_byte_fallback,
    train_wordpiece,
)

TRAINERS = {
    "byte_bpe": train_byte_bpe,
    "unigram": train_unigram_byte_fallback,
    "char": train_char_level,
    "wordpiece": train_wordpiece,
}
UNSEEN = "🦀🧪ßŒ東京ŋ∑≈"
FALLBACK_LENGTHS = (64, 256, 1024)


def arithmetic_response(rng: random.Random) -> str:
    # The levels before multiplication (level 6): the same draws, so the same data, as
    # the results recorded before it was added.
    expression, value = make_expression(rng, rng.choice(ADDITIVE_LEVELS))
    steps = [f"We need {expression}.", f"{expression} = {value}."]
    if rng.random() < 0.5:
        steps.insert(1, "Add the ones, carry the ten, then add the tens.")
    return "\n".join([*steps, f"The answer is {boxed(value)}."])


def mixed_response(rng: random.Random) -> str:
    lines = [*rng.sample(ENGLISH_LINES, 2), rng.choice(NON_ASCII_LINES)]
    rng.shuffle(lines)
    return " ".join(lines) + " " + "".join(rng.sample(UNSEEN, 3))


def corpus(size: int) -> list[str]:
    rng = random.Random("thl-bench")
    return [arithmetic_response(rng) if index % 3 else mixed_response(rng) for index in range(size)]


def encode_all(
    tokenizer: PreTrainedTokenizerFast, texts: list[str], rng: random.Random
) -> list[tuple[list[int], list[float]]]:
    """Each text as response ids ending with EOS, with random behaviour log-probs."""
    responses = []
    for text in texts:
        ids = [*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id]
        responses.append((ids, [-rng.expovariate(1.0) for _ in ids]))
    return responses


def median_seconds(run: Callable[[], None], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def pair_throughput(
    source: PreTrainedTokenizerFast,
    target: PreTrainedTokenizerFast,
    responses: list[tuple[list[int], list[float]]],
    repeats: int,
) -> dict[str, float]:
    retokenized = [retokenize(source, ids, target) for ids, _ in responses]
    target_tokens = sum(len(item.target_ids) for item in retokenized)

    def text_path() -> None:
        for ids, _ in responses:
            retokenize(source, ids, target)

    def trace_path() -> None:
        for item, (_, values) in zip(retokenized, responses, strict=True):
            redistribute_logprobs(item.text, item.source_spans, values, item.target_spans)

    def both() -> None:
        for ids, values in responses:
            align_response_logprobs(source, ids, values, target)

    residual = [
        align_response_logprobs(source, ids, values, target)[1].residual_span_frac
        for ids, values in responses
    ]
    return {
        "source_tokens": sum(len(ids) for ids, _ in responses),
        "target_tokens": target_tokens,
        "text_path_tokens_per_s": round(target_tokens / median_seconds(text_path, repeats)),
        "trace_path_tokens_per_s": round(target_tokens / median_seconds(trace_path, repeats)),
        "both_tokens_per_s": round(target_tokens / median_seconds(both, repeats)),
        "mean_residual_span_frac": round(statistics.fmean(residual), 4),
    }


def replay_all(backend: Tokenizer, sequences: list[list[int]]) -> None:
    for ids in sequences:
        decoder_spans(backend, ids)


def fallback_all(backend: Tokenizer, sequences: list[list[int]], text: str) -> None:
    for ids in sequences:
        prefix_spans(backend, ids, text)


def char_span_throughput(
    tokenizer: PreTrainedTokenizerFast, texts: list[str], repeats: int
) -> dict[str, dict[str, int]]:
    """Replay vs prefix-decoding fallback, tokens/s, on responses of growing length."""
    backend = tokenizer.backend_tokenizer
    stream = tokenizer.encode(" ".join(texts[:400]), add_special_tokens=False)
    results = {}
    for length in FALLBACK_LENGTHS:
        sequences = [stream[:length]] * max(1, 4096 // length)
        text = backend.decode(sequences[0])
        tokens = len(sequences) * len(sequences[0])
        replay = median_seconds(functools.partial(replay_all, backend, sequences), repeats)
        fallback = median_seconds(
            functools.partial(fallback_all, backend, sequences, text), repeats
        )
        results[str(length)] = {
            "replay_tokens_per_s": round(tokens / replay),
            "prefix_fallback_tokens_per_s": round(tokens / fallback),
        }
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--responses", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    tokenizers = {kind: train(build_corpus(0)) for kind, train in TRAINERS.items()}
    texts = corpus(args.responses)
    rng = random.Random(0)
    encoded = {kind: encode_all(tokenizer, texts, rng) for kind, tokenizer in tokenizers.items()}
    pairs = {
        f"{source}->{target}": pair_throughput(
            tokenizers[source], tokenizers[target], encoded[source], args.repeats
        )
        for source, target in itertools.product(TRAINERS, TRAINERS)
    }
    char_spans = {
        kind: char_span_throughput(tokenizer, texts, args.repeats)
        for kind, tokenizer in tokenizers.items()
    }
    print(
        json.dumps(
            {
                "benchmark": "thl_throughput",
                "responses": args.responses,
                "repeats": args.repeats,
                "python": platform.python_version(),
                "machine": platform.machine(),
                "pairs": pairs,
                "char_spans": char_spans,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
