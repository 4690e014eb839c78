"""The engine's own decoding loop (issue 35): rows that emitted EOS leave the batch and
their KV rows with it, and the loop samples the same tokens as HF ``generate`` (the
earlier path, ``decoder="generate"``) from the same seed, leaving the RNG where
``generate`` leaves it (exact resume replays the stream), on every tiny zoo model."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import PreTrainedModel

from trainer.chat import format_prompt
from trainer.config import GRPOConfig, PolicyConfig, TaskConfig
from trainer.models import load_causal_lm, load_tokenizer
from trainer.policy import Policy
from trainer.rollout import HFRolloutEngine, RolloutBatch, engine
from trainer.rollout.engine import multinomial_like_torch
from trainer.tasks import get_reward, make_task
from trainer.zoo import ZOO_IDS


def _prompts(tokenizer: object, count: int = 6) -> list[str]:
    """Arithmetic prompts of levels 1-3 (the vs_trl schedule's), of mixed token lengths:
    left padding in the batch."""
    task = make_task(TaskConfig(levels=[1, 2, 3]), seed=0)
    return [format_prompt(tokenizer, p.prompt) for p in task.train_batch(1, count)]


def _sample(
    engine: HFRolloutEngine, prompts: list[str], seed: int, **kwargs: object
) -> tuple[RolloutBatch, torch.Tensor]:
    """One call from ``seed``, and the RNG state it leaves."""
    torch.manual_seed(seed)
    options: dict = {"n": 8, "max_new_tokens": 12, "temperature": 1.0} | kwargs
    batch = engine.generate(prompts, **options)
    return batch, torch.get_rng_state()


def _widths(model: PreTrainedModel) -> tuple[list[int], torch.utils.hooks.RemovableHandle]:
    """The rows of every forward of ``model`` from now on (a pre-hook on it)."""
    widths: list[int] = []

    def hook(_module: torch.nn.Module, _args: tuple, kwargs: dict) -> None:
        widths.append(int(kwargs["input_ids"].shape[0]))

    return widths, model.register_forward_pre_hook(hook, with_kwargs=True)


@pytest.mark.parametrize("zoo_id", ZOO_IDS)
@pytest.mark.parametrize("reuse", [False, True], ids=["prefill-each", "prefix-reuse"])
def test_the_loop_samples_what_generate_samples(zoo_dir: Path, zoo_id: str, reuse: bool) -> None:
    model = load_causal_lm(zoo_dir / zoo_id, "float32", device="cpu")
    tokenizer = load_tokenizer(zoo_dir / zoo_id)
    prompts = _prompts(tokenizer)
    loop = HFRolloutEngine(model, tokenizer, prefix_reuse=reuse)
    reference = HFRolloutEngine(model, tokenizer, prefix_reuse=reuse, decoder="generate")
    assert loop.decoder == "loop"  # the default
    early = 0
    # At T = 2 rows end from 4 to 12 tokens, with flat distributions after others ended: a
    # loop that drew noise for its running rows only differs there in 29-43 of 48 rows.
    for seed, temperature in ((0, 1.0), (1, 1.0), (2, 0.7), (3, 1.3), (5, 2.0)):
        ours, ours_rng = _sample(loop, prompts, seed, temperature=temperature)
        theirs, theirs_rng = _sample(reference, prompts, seed, temperature=temperature)
        assert ours.response_ids == theirs.response_ids
        assert ours.finished == theirs.finished
        assert ours.response_texts == theirs.response_texts
        assert ours.prompt_ids == theirs.prompt_ids
        assert torch.equal(ours_rng, theirs_rng)  # the same draws: the run's stream goes on
        lengths = [len(ids) for ids in ours.response_ids]
        early += sum(1 for n, done in zip(lengths, ours.finished, strict=True) if done and n < 12)
        assert len({tuple(ids) for ids in ours.response_ids}) > 1  # sampled, not all alike
    assert early > 0  # some rows ended before the longest: the dropping was exercised
    ours, _ = _sample(loop, prompts, 4, greedy=True)
    theirs, _ = _sample(reference, prompts, 4, greedy=True)
    assert len(ours) == len(prompts)
    assert ours.response_ids == theirs.response_ids
    assert ours.finished == theirs.finished


@pytest.mark.parametrize("reuse", [False, True], ids=["prefill-each", "prefix-reuse"])
def test_finished_rows_stop_costing_forwards(zoo_dir: Path, reuse: bool) -> None:
    model = load_causal_lm(zoo_dir / "tiny-gpt2-unigram", "float32", device="cpu")
    tokenizer = load_tokenizer(zoo_dir / "tiny-gpt2-unigram")
    prompts = _prompts(tokenizer)
    rows = len(prompts) * 8
    loop = HFRolloutEngine(model, tokenizer, prefix_reuse=reuse)
    reference = HFRolloutEngine(model, tokenizer, prefix_reuse=reuse, decoder="generate")
    widths, handle = _widths(model)
    try:
        batch, _ = _sample(loop, prompts, 0)
        loop_widths = list(widths)
        widths.clear()
        _sample(reference, prompts, 0)
        generate_widths = list(widths)
    finally:
        handle.remove()
    lengths = [len(ids) for ids in batch.response_ids]
    assert loop_widths == loop.forward_batch_sizes
    # The prefill: each prompt once with reuse, else each of its G copies.
    assert loop_widths[0] == (len(prompts) if reuse else rows)
    # Decoding forward k feeds token k - 1 of the rows that have not emitted EOS in their
    # first k tokens: those whose response is longer than k.
    expected = [sum(1 for n in lengths if n > k) for k in range(1, max(lengths))]
    assert loop_widths[1:] == expected
    assert min(expected) < rows  # rows did finish early, and left the batch
    # generate feeds every row (finished ones pad tokens) until the longest response ends.
    assert all(width == rows for width in generate_widths[1 if reuse else 0 :])
    assert len(generate_widths) - (1 if reuse else 0) == len(loop_widths)
    assert sum(loop_widths[1:]) < sum(generate_widths[-len(expected) :])


def test_every_row_finishing_ends_the_loop(zoo_dir: Path) -> None:
    """When the last running row emits EOS no further forward runs; at max_new_tokens the
    final token is sampled without a forward after it (as ``generate``)."""
    model = load_causal_lm(zoo_dir / "tiny-qwen-bpe", "float32", device="cpu")
    tokenizer = load_tokenizer(zoo_dir / "tiny-qwen-bpe")
    engine = HFRolloutEngine(model, tokenizer)
    prompts = _prompts(tokenizer, 2)
    batch, _ = _sample(engine, prompts, 5, max_new_tokens=40)
    assert all(batch.finished)  # 40 tokens are plenty for these models to stop
    assert len(engine.forward_batch_sizes) == max(len(ids) for ids in batch.response_ids)
    batch, _ = _sample(engine, prompts, 5, max_new_tokens=3)
    assert len(engine.forward_batch_sizes) == 3  # prefill + 2 decoding forwards
    assert all(len(ids) <= 3 for ids in batch.response_ids)
    ended = [ids for ids, done in zip(batch.response_ids, batch.finished, strict=True) if done]
    assert all(ids[-1] == tokenizer.eos_token_id for ids in ended)


def test_an_unknown_decoder_is_refused(zoo_dir: Path) -> None:
    model = load_causal_lm(zoo_dir / "tiny-qwen-bpe", "float32", device="cpu")
    tokenizer = load_tokenizer(zoo_dir / "tiny-qwen-bpe")
    with pytest.raises(ValueError, match="unknown decoder 'vllm'"):
        HFRolloutEngine(model, tokenizer, decoder="vllm")  # type: ignore[arg-type]


def test_the_static_cache_still_decodes_through_generate(zoo_dir: Path) -> None:
    model = load_causal_lm(zoo_dir / "tiny-qwen-bpe", "float32", device="cpu")
    tokenizer = load_tokenizer(zoo_dir / "tiny-qwen-bpe")
    static = HFRolloutEngine(model, tokenizer, cache="static")
    static.forward_batch_sizes = [-1]
    batch, _ = _sample(static, _prompts(tokenizer, 2), 0, n=2)
    assert len(batch) == 4
    assert static.forward_batch_sizes == [-1]  # the loop did not run


@pytest.mark.parametrize(
    ("rows", "vocab", "scale"),
    [(128, 512, 1.0), (40, 163, 10.0), (7, 402, 0.01), (3, 49_152, 3.0), (16, 97, 40.0)],
)
def test_the_sampler_draws_what_multinomial_draws(rows: int, vocab: int, scale: float) -> None:
    """Flat, peaked and near-one-hot rows, all rows or a subset: the same tokens as
    ``torch.multinomial`` over the full tensor, and the generator left in the same state."""
    gen = torch.Generator().manual_seed(rows)
    full = torch.softmax(torch.randn(rows, vocab, generator=gen) * scale, -1)
    for seed in range(6):
        keep = None
        if seed % 2:
            keep = torch.randperm(rows, generator=gen)[: max(1, rows // 2)].sort().values
        theirs, ours = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        expected = torch.multinomial(full, 1, generator=theirs).squeeze(1)
        probs = full if keep is None else full[keep]
        got = multinomial_like_torch(probs, rows, keep, generator=ours)
        assert torch.equal(got, expected if keep is None else expected[keep])
        assert torch.equal(ours.get_state(), theirs.get_state())


def test_without_the_fast_sampler_the_loop_samples_the_same(
    zoo_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fallback (``torch.multinomial`` over a full-width tensor, for a torch whose
    kernel the fast sampler does not match, or another device) draws the same tokens."""
    model = load_causal_lm(zoo_dir / "tiny-llama-char", "float32", device="cpu")
    tokenizer = load_tokenizer(zoo_dir / "tiny-llama-char")
    prompts = _prompts(tokenizer)
    fast, fast_rng = _sample(HFRolloutEngine(model, tokenizer), prompts, 3)
    monkeypatch.setattr(engine, "_matches_torch", lambda: False)
    slow, slow_rng = _sample(HFRolloutEngine(model, tokenizer), prompts, 3)
    reference, reference_rng = _sample(
        HFRolloutEngine(model, tokenizer, decoder="generate"), prompts, 3
    )
    assert fast.response_ids == slow.response_ids == reference.response_ids
    assert torch.equal(fast_rng, slow_rng) and torch.equal(slow_rng, reference_rng)
    assert min(len(ids) for ids in slow.response_ids) < 12  # rows left the batch


@pytest.mark.parametrize("temperature", [0.5, 1.5])
def test_the_policy_scores_the_distribution_the_loop_samples(
    zoo_dir: Path, temperature: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SPEC 9 for the loop: the log-prob the policy gives each response token is that of
    the distribution the loop drew it from (``softmax(logits / T)``, captured as the
    sampler receives it, running rows only)."""
    policy = Policy(
        PolicyConfig(
            name="a", model="zoo:tiny-llama-char", group_size=4, max_new_tokens=32,
            temperature=temperature, lr=0.0,
        ),
        GRPOConfig(), model_dir=zoo_dir / "tiny-llama-char",
        tokenizer_dir=zoo_dir / "tiny-llama-char", reward_fn=get_reward("math"),
    )  # fmt: skip
    assert policy.engine.decoder == "loop"
    drawn: list[tuple[list[int], torch.Tensor, torch.Tensor]] = []
    sample = engine.RowSampler.sample

    def recording(self: engine.RowSampler, probs: torch.Tensor, running: list[int]):
        tokens = sample(self, probs, running)
        drawn.append((list(running), probs.log(), tokens))
        return tokens

    monkeypatch.setattr(engine.RowSampler, "sample", recording)
    problems = make_task(TaskConfig(levels=[1, 2, 3]), seed=0).train_batch(1, 4)
    torch.manual_seed(0)
    batch = policy.rollout(problems).batch
    sampler: list[list[float]] = [[] for _ in batch.response_ids]
    for running, logp, tokens in drawn:
        for i, row in enumerate(running):
            sampler[row].append(float(logp[i, int(tokens[i])]))
    scored = policy.response_logprobs(batch.prompt_ids, batch.response_ids)
    assert [len(x) for x in scored] == [len(x) for x in sampler]
    pairs = zip(scored, sampler, strict=True)
    assert max(abs(a - b) for xs, ys in pairs for a, b in zip(xs, ys, strict=True)) < 1e-5
    assert any(len(running) < len(batch) for running, _, _ in drawn)  # rows did finish early
