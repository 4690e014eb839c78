"""What the trainer ships with a transfer event: the peer's response text and, for THL
paths, its tokens in the target's tokenizer; cut to the web app's bounds.

PRP on real tiny models with two different tokenizers (char-level -> byte-level BPE)."""

from __future__ import annotations

from pathlib import Path

import torch

from tests.trainer.zoo_policy import zoo_policy
from trainer.config import RunConfig
from trainer.exchange import StepRecord
from trainer.policy import Policy
from trainer.regimes.prp.regime import PRP
from trainer.spool import (
    MAX_SAMPLE_TEXT,
    MAX_SAMPLE_TOKENS,
    MAX_TOKEN_CHARS,
    make_event,
    make_sample,
    normalize_event,
)
from trainer.tasks import Problem

POOL = {"llama": "tiny-llama-char", "qwen": "tiny-qwen-bpe"}


def _policy(name: str, zoo_dir: Path, config: RunConfig) -> Policy:
    return zoo_policy(name, POOL[name], zoo_dir, config)


def test_prp_events_carry_the_peer_text_and_its_retokenization(zoo_dir: Path) -> None:
    config = RunConfig.from_dict(
        {
            "pool": [{"name": n, "model": f"zoo:{m}"} for n, m in POOL.items()],
            "regime": "prp",
            "prp": {"k_peer": 2},
        }
    )
    source, learner = _policy("llama", zoo_dir, config), _policy("qwen", zoo_dir, config)
    problems = [Problem(id=f"p{i}", prompt=f"Compute {i}+1.", answer=str(i + 1)) for i in (1, 2)]
    torch.manual_seed(1)
    peer_rollouts, own_rollouts = source.rollout(problems), learner.rollout(problems)
    prp = PRP(config, "qwen", {n: zoo_dir / m for n, m in POOL.items()})
    published = prp.publish(source, peer_rollouts, step=3)
    record = StepRecord("llama", 3, tuple(p.id for p in problems), topics=published)

    events = prp.learn(learner, own_rollouts, [record], step=3).events

    assert events and {(e["source"], e["target"], e["kind"]) for e in events} == {
        ("llama", "qwen", "rollout")
    }
    texts = peer_rollouts.batch.response_texts
    sent = {p.id: {texts[i] for i in peer_rollouts.rows_of(n)} for n, p in enumerate(problems)}
    for event in events:
        assert len(event["samples"]) == event["count"] >= 1
        for sample in event["samples"]:
            assert sample["text"] in sent[event["prompt_id"]]
            ids = learner.encode_response(sample["text"])
            assert sample["tokens"] == learner.tokenizer.convert_ids_to_tokens(ids)
            assert sample["tokens"][-1] == learner.tokenizer.eos_token
            assert sample["truncated"] is False
        assert normalize_event(event) == event  # what the spool writes, unchanged


def test_long_texts_and_token_lists_are_cut_and_marked() -> None:
    sample = make_sample("ü" * (MAX_SAMPLE_TEXT + 1), ["Ġtok"] * (MAX_SAMPLE_TOKENS + 1))
    assert len(sample["text"]) == MAX_SAMPLE_TEXT and len(sample["tokens"]) == MAX_SAMPLE_TOKENS
    assert sample["truncated"] is True
    assert make_sample("x", ["y" * (MAX_TOKEN_CHARS + 5)])["tokens"] == ["y" * MAX_TOKEN_CHARS]
    assert make_sample("a\x00b\udc80")["text"] == "a\ufffdb?"  # what the server accepts
    assert make_sample("ok", ["o", "k"], reward=1)["truncated"] is False
    event = make_event(1, "a", "b", "success", "p", samples=[make_sample("t")] * 9)
    assert len(event["samples"]) == 4 and event["count"] == 1
    assert "samples" not in make_event(1, "a", "b", "success", "p")  # old shape, unchanged
