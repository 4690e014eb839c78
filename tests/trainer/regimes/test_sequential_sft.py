"""Sequential peer SFT (the Mutual RL paper's Figure 11 baseline) as the paper ran it:
stage 1 is the full standalone GRPO schedule (``steps`` steps) while each learner buffers
its peers' verified successes as SGT sees them (through THL); stage 2 is ``sft_steps``
extra steps that fine-tune on the buffer with an NLL only, from the RL-trained policy or
(``sft_from: "base"``) from the base model's weights.

Pure tests of the stage-2 schedule and the buffer; the config (fix-it messages, the run's
total steps); one stage-1 and one stage-2 step on real tiny zoo policies (the peers'
successes built by hand, as the SGT tests do), and the base variant's restart; and short
runs of ``python -m trainer run``: standalone, both variants, one resumed across the
stage boundary."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.trainer.zoo_policy import zoo_policy
from trainer import metrics as m
from trainer.batch import build_sequences
from trainer.checkpoint import complete_checkpoints
from trainer.cli import main as cli_main
from trainer.config import ConfigError, RunConfig, stored_total_steps
from trainer.core import token_log_probs
from trainer.exchange import StepRecord
from trainer.models import load_causal_lm
from trainer.policy import Policy, Rollouts
from trainer.regimes import regime_spec, sequential_sft
from trainer.regimes.sequential_sft import SequentialSFTConfig
from trainer.regimes.sequential_sft.regime import (
    BufferedSuccess,
    SequentialSFT,
    SuccessBuffer,
    sft_chunk,
    sft_schedule,
)
from trainer.regimes.standalone.regime import Standalone
from trainer.remix.reuse import ReMix
from trainer.rollout import RolloutBatch
from trainer.spool import decode_value, read_events, read_points
from trainer.tasks import Problem
from trainer.thl import encode_text

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples/sequential_sft.json"
ZOO = {"a": "tiny-llama-char", "b": "tiny-qwen-bpe", "c": "tiny-gpt2-unigram"}
PROBLEMS = [
    Problem(id="p0", prompt="Compute 1+2.", answer="3"),
    Problem(id="p1", prompt="Compute 2+2.", answer="4"),
    Problem(id="p2", prompt="Compute 3+4.", answer="7"),
]


# --- the stage-2 schedule and the buffer (pure) -------------------------------------------


def test_the_schedule_cuts_the_repeated_buffer_into_even_consecutive_chunks() -> None:
    # 5 items x 2 epochs = 10 positions over 3 steps: chunks of ceil(10 / 3) = 4.
    assert sft_schedule(5, 2, 3) == [[0, 1, 2, 3], [4, 0, 1, 2], [3, 4]]
    assert sft_schedule(4, 1, 2) == [[0, 1], [2, 3]]
    assert sft_schedule(2, 3, 1) == [[0, 1, 0, 1, 0, 1]]
    assert sft_schedule(1, 1, 3) == [[0], [], []]  # more steps than items: the rest idle
    assert sft_chunk(5, 2, 3, 3) == [] and sft_chunk(5, 2, 3, -1) == []  # off the schedule


def test_the_schedule_covers_every_item_exactly_epochs_times_in_order() -> None:
    for size in range(8):
        for epochs in (1, 2, 3):
            for steps in (1, 2, 3, 5, 9):
                schedule = sft_schedule(size, epochs, steps)
                assert len(schedule) == steps
                assert [p for chunk in schedule for p in chunk] == list(range(size)) * epochs
                sizes = [len(chunk) for chunk in schedule]
                assert all(n <= -(-epochs * size // steps) for n in sizes)
                assert sizes == sorted(sizes, reverse=True)  # full chunks, then the rest
                assert schedule == sft_schedule(size, epochs, steps)  # deterministic


def _item(source: str, prompt: str, text: str) -> BufferedSuccess:
    return BufferedSuccess(source, prompt, text, True, (1, 2), (3, 4), 0.0, 0.0)


def test_the_buffer_dedupes_by_source_prompt_and_text_and_drops_the_oldest() -> None:
    buffer = SuccessBuffer(capacity=3)
    entered = buffer.add(
        [
            _item("b", "p0", "x"),
            _item("b", "p0", "x"),  # the same success again
            _item("c", "p0", "x"),  # another source
            _item("b", "p1", "x"),  # another prompt
        ]
    )
    assert entered == 3
    assert [i.key for i in buffer.items()] == [("b", "p0", "x"), ("c", "p0", "x"), ("b", "p1", "x")]
    assert buffer.add([_item("c", "p0", "x")]) == 0  # held already: no reordering
    assert buffer.add([_item("b", "p2", "y"), _item("b", "p3", "z")]) == 2
    assert [i.key for i in buffer.items()] == [("b", "p1", "x"), ("b", "p2", "y"), ("b", "p3", "z")]
    assert ("b", "p0", "x") not in buffer and len(buffer) == 3

    again = SuccessBuffer(capacity=3)
    again.load_state_dict(buffer.state_dict())
    assert again.items() == buffer.items()
    with pytest.raises(ValueError, match="capacity"):
        SuccessBuffer(capacity=0)


# --- the config -----------------------------------------------------------------------------


def _config_dict(**overrides: Any) -> dict[str, Any]:
    pool = [{"name": name, "model": f"zoo:{zoo_id}"} for name, zoo_id in ZOO.items()]
    data: dict[str, Any] = {"pool": pool, "regime": "sequential_sft", "steps": 4}
    data["sequential_sft"] = {"sft_steps": 2, "sft_epochs": 1, "lambda_sft": 1.0}
    data.update(overrides)
    return data


def _errors(data: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ConfigError) as caught:
        RunConfig.from_dict(data)
    return caught.value.errors


def test_the_declaration_and_the_example() -> None:
    spec = regime_spec("sequential_sft")
    assert (spec.label, spec.order, spec.colour, spec.shares) == (
        "Sequential peer SFT",
        4,
        "#D55E00",
        True,
    )
    assert spec.no_transfers_note(SequentialSFTConfig()) is None  # stage 2 logs transfers
    assert [kind.name for kind in spec.event_kinds] == [sequential_sft.SAMPLE_EVENT]
    catalogue = m.catalogue().by_key
    for key in (sequential_sft.STAGE, sequential_sft.BUFFER_SIZE, sequential_sft.NLL,
                sequential_sft.SAMPLES, sequential_sft.BUFFERED):  # fmt: skip
        assert catalogue[key].group == m.SHARING
    config = RunConfig.from_file(EXAMPLE)
    assert config.regime == "sequential_sft" and config.section("sequential_sft").sft_steps == 20
    assert config.section("sequential_sft").sft_from == "rl"  # the paper's, by default
    assert config.total_steps == config.steps + 20
    assert cli_main(["validate", "--config", str(EXAMPLE)]) == 0


def test_the_sft_steps_come_after_the_steps_of_rl() -> None:
    # Any sft_steps >= 1 goes with any steps: the SFT stage adds steps, it takes none.
    for steps, sft_steps in ((4, 2), (4, 4), (1, 1), (2, 9)):
        data = _config_dict(steps=steps, sequential_sft={"sft_steps": sft_steps})
        config = RunConfig.from_dict(data)
        assert (config.steps, config.total_steps) == (steps, steps + sft_steps)
        assert stored_total_steps(config.to_dict()) == steps + sft_steps
    assert _errors(_config_dict(sequential_sft={"sft_steps": 0})) == {
        "sequential_sft.sft_steps": "sft_steps must be >= 1; got 0"
    }
    # Another regime's run stores the section too, and runs its steps alone.
    standalone = RunConfig.from_dict(_config_dict(regime="standalone", steps=2))
    assert standalone.total_steps == 2 == stored_total_steps(standalone.to_dict())


def test_a_stored_config_gives_its_total_steps_without_being_validated() -> None:
    base = {"regime": "sequential_sft", "steps": 60}
    assert stored_total_steps({**base, "sequential_sft": {"sft_steps": 15}}) == 75
    assert stored_total_steps(base) == 80  # the section's default sft_steps
    assert stored_total_steps({**base, "sequential_sft": {"sft_steps": "x"}}) == 60
    assert stored_total_steps({**base, "regime": "nope"}) == 60
    assert stored_total_steps({"steps": 60}) == 60  # standalone
    for broken in ({"steps": 0}, {"steps": True}, {"steps": "60"}, {}, [], None):
        assert stored_total_steps(broken) is None


def test_sft_from_is_rl_or_base() -> None:
    for start in ("rl", "base"):
        data = _config_dict(sequential_sft={"sft_steps": 2, "sft_from": start})
        assert RunConfig.from_dict(data).section("sequential_sft").sft_from == start
    assert _errors(_config_dict(sequential_sft={"sft_from": "zoo"})) == {
        "sequential_sft.sft_from": "sft_from must be one of rl, base; got 'zoo'"
    }
    help_text = SequentialSFTConfig.__dataclass_fields__["sft_from"].metadata["help"]
    assert "base" in help_text and "initial weights" in help_text and "fresh" in help_text


def test_the_other_settings_have_fix_it_messages() -> None:
    errors = _errors(
        _config_dict(
            sequential_sft={"sft_steps": 2, "lambda_sft": 0, "sft_epochs": 0, "max_buffer": 0}
        )
    )
    assert errors == {
        "sequential_sft.lambda_sft": "lambda_sft must be > 0; got 0.0",
        "sequential_sft.sft_epochs": "sft_epochs must be >= 1; got 0",
        "sequential_sft.max_buffer": "max_buffer must be >= 1; got 0",
    }
    errors = _errors(_config_dict(sequential_sft={"sft_steps": 2, "sft_lr": 1e-4}))
    assert errors["sequential_sft.sft_lr"].startswith("unknown field 'sft_lr' in sequential_sft")
    assert "sft_epochs" in errors["sequential_sft.sft_lr"]  # it lists the known fields


# --- one step of each stage on real tiny policies ---------------------------------------------


def _peer_rollouts(texts: list[list[str]], finished: list[list[bool]] | None = None) -> Rollouts:
    """A peer's rollouts of PROBLEMS built by hand, scored by the math reward's rule."""
    flat = [t for row in texts for t in row]
    ends = [f for row in finished for f in row] if finished else [True] * len(flat)
    rewards = [
        1.0 if t.startswith(f"\\boxed{{{p.answer}}}") else 0.0
        for p, row in zip(PROBLEMS, texts, strict=True)
        for t in row
    ]
    batch = RolloutBatch([[1, 2]] * len(flat), [[3]] * len(flat), flat, ends)
    return Rollouts(PROBLEMS, batch, torch.tensor(rewards), len(texts[0]), 1.0)


PEER_B = _peer_rollouts(
    [["\\boxed{3}", "no", "\\boxed{3}"], ["5", "6", "7"], ["\\boxed{7} ok", "\\boxed{7}", "x"]],
    [[True, True, True], [True, True, True], [False, True, True]],
)
PEER_C = _peer_rollouts([["\\boxed{3}", "a", "b"], ["c", "d", "e"], ["f", "g", "h"]])
# SGT's order: prompt by prompt; shortest first, then the source's rank, then the text.
EXPECTED = [
    ("b", "p0", "\\boxed{3}", True),
    ("c", "p0", "\\boxed{3}", True),
    ("b", "p2", "\\boxed{7}", True),
    ("b", "p2", "\\boxed{7} ok", False),
]


def _records(config: RunConfig, step: int) -> list[StepRecord]:
    ids = tuple(p.id for p in PROBLEMS)
    records = []
    for name, peer in (("b", PEER_B), ("c", PEER_C)):
        published = SequentialSFT(config, name).publish(None, peer, step)  # type: ignore[arg-type]
        records.append(StepRecord(name, step, ids, topics=published))
    return records


@pytest.fixture
def setup(zoo_dir: Path) -> tuple[RunConfig, Policy, Rollouts]:
    config = RunConfig.from_dict(_config_dict())
    learner = zoo_policy("a", ZOO["a"], zoo_dir, config)
    torch.manual_seed(0)
    return config, learner, learner.rollout(PROBLEMS)


def _same_weights(one: Policy, other: Policy) -> bool:
    return all(
        torch.equal(a, b)
        for a, b in zip(
            one.model.state_dict().values(), other.model.state_dict().values(), strict=True
        )
    )


def test_a_stage_1_step_is_standalone_grpo_and_buffers_the_translated_peer_successes(
    setup: tuple[RunConfig, Policy, Rollouts],
) -> None:
    config, learner, own = setup
    regime = SequentialSFT(config, "a")
    step = regime.learn(learner, own, _records(config, 1), step=1)
    plain = Standalone(config, "a").learn(learner, own, [], step=1)

    batch, expected = step.batch, plain.batch
    assert (batch.prompt_ids, batch.response_ids) == (expected.prompt_ids, expected.response_ids)
    assert torch.equal(batch.advantages, expected.advantages)
    assert batch.token_weights == expected.token_weights and batch.aux_terms == []
    ours, theirs = copy.deepcopy(learner), copy.deepcopy(learner)
    assert ours.train_step(batch) == theirs.train_step(expected)  # the same loss and metrics
    assert _same_weights(ours, theirs)
    assert step.events == []  # stage 1 collects; nothing is trained on yet
    assert step.metrics == {
        sequential_sft.STAGE: 1.0, sequential_sft.BUFFER_SIZE: 4.0,
        sequential_sft.BUFFERED: 4.0, sequential_sft.SAMPLES: 0.0,
    }  # fmt: skip

    held = regime.buffer.items()
    assert [(i.source, i.prompt_id, i.text, i.finished) for i in held] == EXPECTED
    index = {p.id: i for i, p in enumerate(PROBLEMS)}
    for item in held:  # in the learner's tokens, after the learner's own prompt
        encoded = encode_text(item.text, learner.tokenizer, ended_with_eos=item.finished)
        assert list(item.response_ids) == encoded.target_ids
        assert list(item.prompt_ids) == own.batch.prompt_ids[index[item.prompt_id] * 2]
    assert held[0].response_ids[-1] == learner.tokenizer.eos_token_id
    assert held[3].response_ids[-1] != learner.tokenizer.eos_token_id  # cut off: no EOS

    again = regime.learn(learner, own, _records(config, 4), step=4)  # the same successes
    assert again.metrics[sequential_sft.STAGE] == 1.0  # steps = 4: RL's last step
    assert again.metrics[sequential_sft.BUFFERED] == 0.0
    assert again.metrics[sequential_sft.BUFFER_SIZE] == 4.0
    assert (regime.first_sft_step, regime.stage(4), regime.stage(5)) == (5, 1, 2)


def _nll_update(policy: Policy, prompts: list[list[int]], answers: list[list[int]], coef: float):
    """One AdamW step on ``coef`` x the token-mean NLL, by hand; the NLL before it."""
    input_ids, attention_mask, mask = build_sequences(prompts, answers, policy.pad_id)
    policy.optimizer.zero_grad(set_to_none=True)
    logits = policy.model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1]
    nll = -(token_log_probs(logits.float(), input_ids[:, 1:]) * mask).sum() / mask.sum()
    (coef * nll).backward()
    torch.nn.utils.clip_grad_norm_(policy.model.parameters(), policy.grpo.max_grad_norm)
    policy.optimizer.step()
    return float(nll)


def test_a_stage_2_step_trains_only_the_nll_of_its_share_of_the_buffer(
    setup: tuple[RunConfig, Policy, Rollouts],
) -> None:
    config, learner, own = setup
    # A small step: Adam's first step moves each parameter by about lr whatever the
    # gradient's size, and on this tiny model the fixture's 1e-3 overshoots, as does 3e-4
    # on some builds of the zoo (its SFT rounds differently on different CPUs: both
    # answers got less likely). At 1e-4 the step stays where the NLL falls.
    for group in learner.optimizer.param_groups:
        group["lr"] = 1e-4
    regime = SequentialSFT(config, "a")
    regime.learn(learner, own, _records(config, 1), step=1)
    assert regime.publish(learner, own, step=4) != {}  # step 4 (= steps) is RL's last
    assert regime.publish(learner, own, step=5) == {}  # nothing crosses in stage 2
    step = regime.learn(learner, own, [], step=5)  # steps 4, sft_steps 2: stage 2 is 5..6

    held = regime.buffer.items()
    batch = step.batch
    assert len(batch) == 0  # no sample of its own: no policy-gradient term
    (term,) = batch.aux_terms
    assert (term.loss, term.coef, term.metric) == ("nll", 1.0, sequential_sft.NLL)
    assert term.response_ids == [list(i.response_ids) for i in held[:2]]  # ceil(4 / 2) = 2
    assert term.prompt_ids == [list(i.prompt_ids) for i in held[:2]]
    assert step.metrics == {
        sequential_sft.STAGE: 2.0, sequential_sft.BUFFER_SIZE: 4.0,
        sequential_sft.BUFFERED: 0.0, sequential_sft.SAMPLES: 2.0,
        m.THL_UNK_FRAC: (held[0].unk_frac + held[1].unk_frac) / 2,
        m.THL_TEXT_MISMATCH_FRAC: (held[0].text_mismatch_frac + held[1].text_mismatch_frac) / 2,
    }  # fmt: skip
    assert [
        (e["kind"], e["source"], e["target"], e["prompt_id"], e["count"]) for e in step.events
    ] == [
        ("sft_sample", "b", "a", "p0", 1),
        ("sft_sample", "c", "a", "p0", 1),
    ]
    assert step.events[0]["samples"][0]["text"] == "\\boxed{3}"
    assert step.events[0]["samples"][0]["tokens"]  # in the learner's tokens

    before = [sum(r) for r in learner.response_logprobs(term.prompt_ids, term.response_ids)]
    tokens = sum(len(r) for r in term.response_ids)
    twin = copy.deepcopy(learner)
    trained = learner.train_step(batch)
    by_hand = _nll_update(twin, term.prompt_ids, term.response_ids, term.coef)
    assert trained[sequential_sft.NLL] == pytest.approx(-sum(before) / tokens, abs=1e-5)
    assert trained[sequential_sft.NLL] == pytest.approx(by_hand, abs=1e-5)
    assert m.PG_LOSS not in trained and m.KL_LOSS not in trained  # the NLL alone
    for a, b in zip(learner.model.parameters(), twin.model.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-6)
    after = [sum(r) for r in learner.response_logprobs(term.prompt_ids, term.response_ids)]
    for b, a in zip(before, after, strict=True):
        assert a > b + 1e-3, (b, a)  # the peers' answers became more likely

    last = regime.learn(learner, own, [], step=6)
    assert last.batch.aux_terms[0].response_ids == [list(i.response_ids) for i in held[2:]]


def test_stage_2_with_an_empty_buffer_trains_nothing(
    setup: tuple[RunConfig, Policy, Rollouts],
) -> None:
    config, learner, own = setup
    step = SequentialSFT(config, "a").learn(learner, own, [], step=5)
    assert len(step.batch) == 0 and step.batch.aux_terms == [] and step.events == []
    assert step.metrics[sequential_sft.SAMPLES] == 0.0 and step.metrics[sequential_sft.NLL] == 0.0
    untouched = copy.deepcopy(learner)
    assert learner.train_step(step.batch) == {m.LR: learner.config.lr}
    assert _same_weights(learner, untouched)
    # Under ReMix as well: nothing to replay or store.
    remix_config = RunConfig.from_dict(_config_dict(off_policy="remix"))
    remix = ReMix(remix_config, "a")
    metrics = remix.train(learner, step.batch, own, 5)
    assert metrics[m.REMIX_OFFPOLICY_FRAC] == 0.0 and len(remix.replay) == 0
    assert _same_weights(learner, untouched)


def _same_as(policy: Policy, model: torch.nn.Module) -> bool:
    ours, theirs = policy.model.state_dict(), model.state_dict()
    return ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)


@pytest.mark.parametrize("start", ["rl", "base"])
def test_the_base_variant_starts_the_sft_stage_from_the_base_models_weights(
    setup: tuple[RunConfig, Policy, Rollouts], zoo_dir: Path, start: str
) -> None:
    _, learner, own = setup
    config = RunConfig.from_dict(_config_dict(sequential_sft={"sft_steps": 2, "sft_from": start}))
    regime = SequentialSFT(config, "a")
    regime.learn(learner, own, _records(config, 1), step=1)
    # What RL did to the policy by the end of step 4 (= steps): an update that moves its
    # weights and fills its optimizer state.
    held = regime.buffer.items()
    prompts, answers = [list(i.prompt_ids) for i in held], [list(i.response_ids) for i in held]
    _nll_update(learner, prompts, answers, 1.0)
    zoo_model = load_causal_lm(zoo_dir / ZOO["a"])
    assert not _same_as(learner, zoo_model) and learner.optimizer.state
    rl_trained = copy.deepcopy(learner)

    first = regime.learn(learner, own, [], step=5)  # the first SFT step
    if start == "base":  # the zoo model's weights, a fresh optimizer state
        assert _same_as(learner, zoo_model) and not learner.optimizer.state
    else:  # the policy RL left, its optimizer state kept
        assert _same_weights(learner, rl_trained)
        kept, saved = (p.optimizer.state_dict()["state"] for p in (learner, rl_trained))
        assert kept.keys() == saved.keys() and kept
        assert all(torch.equal(kept[i]["exp_avg"], saved[i]["exp_avg"]) for i in kept)
    assert first.batch.aux_terms  # and it fine-tunes on the buffer from there
    learner.train_step(first.batch)
    assert learner.optimizer.state
    after_one = copy.deepcopy(learner)
    regime.learn(learner, own, [], step=6)  # the later SFT steps restart nothing
    assert _same_weights(learner, after_one)


def test_the_buffer_survives_a_checkpoint(
    setup: tuple[RunConfig, Policy, Rollouts], tmp_path: Path
) -> None:
    config, learner, own = setup
    regime = SequentialSFT(config, "a")
    regime.learn(learner, own, _records(config, 1), step=1)
    torch.save(regime.state_dict(), tmp_path / "state.pt")  # as the worker state is saved
    resumed = SequentialSFT(config, "a")
    resumed.load_state_dict(torch.load(tmp_path / "state.pt", weights_only=False))
    assert resumed.buffer.items() == regime.buffer.items()
    one, other = regime.learn(learner, own, [], 5), resumed.learn(learner, own, [], 5)
    assert one.batch.aux_terms == other.batch.aux_terms and one.events == other.events


# --- end to end -----------------------------------------------------------------------------

STEPS, SFT_STEPS, EPOCHS = 3, 2, 2
LAST = STEPS + SFT_STEPS


def _run(zoo_dir: Path, config_path: Path, run_dir: Path, *extra: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "trainer", "run", "--config", str(config_path),
         "--run-dir", str(run_dir), *extra],
        cwd=REPO, env={**os.environ, "MRL_ZOO_DIR": str(zoo_dir)},
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]


def _points(run_dir: Path) -> dict[tuple[str, str, int], float]:
    """Every reproducible point, by (policy, key, step): the timings left out."""
    return {
        (p["policy"], p["key"], p["step"]): decode_value(p["value"])
        for p in read_points(run_dir)
        if p["key"] not in m.TIMING_KEYS
    }


def _event_keys(run_dir: Path) -> list[tuple[Any, ...]]:
    return [
        (e["step"], e["source"], e["target"], e["kind"], e["prompt_id"], e["count"],
         tuple(s["text"] for s in e["samples"]))
        for e in read_events(run_dir)
    ]  # fmt: skip


def _until(points: dict[tuple[str, str, int], float], last: int) -> dict[Any, float]:
    return {key: value for key, value in points.items() if key[2] <= last}


def _write_config(tmp_path: Path, name: str, **overrides: Any) -> Path:
    pool = [
        {"name": name, "model": f"zoo:{ZOO[name]}", "group_size": 4, "max_new_tokens": 12}
        for name in ("a", "b")
    ]
    config = {
        "name": "sequential-sft-e2e", "pool": pool, "regime": "sequential_sft",
        "sequential_sft": {"sft_steps": SFT_STEPS, "sft_epochs": EPOCHS, "lambda_sft": 1.0},
        "task": {"kind": "arithmetic", "levels": [1], "val_size": 4},
        # val_every 2: step 3 (= steps) is validated because RL ends there, as a
        # standalone run validates its last step; checkpoints only where the rules say.
        "steps": STEPS, "prompts_per_step": 6, "val_every": 2, "checkpoint_every": 100,
        "seed": 0, **overrides,
    }  # fmt: skip
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(config))
    return path


@pytest.mark.slow
def test_rl_runs_as_standalone_then_the_sft_steps_follow_and_resume_across_the_boundary(
    zoo_dir: Path, tmp_path: Path
) -> None:
    standalone_dir, rl_dir, base_dir, resumed_dir = (
        tmp_path / name for name in ("standalone", "rl", "base", "resumed")
    )
    _run(zoo_dir, _write_config(tmp_path, "standalone", regime="standalone"), standalone_dir)
    _run(zoo_dir, _write_config(tmp_path, "rl"), rl_dir)
    base_config = _write_config(
        tmp_path, "base", sequential_sft={"sft_steps": SFT_STEPS, "sft_epochs": EPOCHS,
                                          "lambda_sft": 1.0, "sft_from": "base"},
    )  # fmt: skip
    _run(zoo_dir, base_config, base_dir)
    _run(zoo_dir, base_config, resumed_dir, "--steps", str(STEPS))  # stopped at the boundary
    _run(zoo_dir, base_config, resumed_dir, "--resume")

    standalone, rl, base = _points(standalone_dir), _points(rl_dir), _points(base_dir)
    # RL is standalone's, step for step: the same values of the same keys, plus the
    # regime's own (stage 1, buffer); no transfer before the SFT stage.
    assert max(step for *_, step in standalone) == STEPS
    assert {step for *_, step in rl} == set(range(LAST + 1))  # steps 0 .. steps + sft_steps
    rl_stage_1 = _until(rl, STEPS)
    assert {k: v for k, v in rl_stage_1.items() if k in standalone} == standalone
    assert {key for _, key, _ in set(rl_stage_1) - set(standalone)} == {
        sequential_sft.STAGE, sequential_sft.BUFFER_SIZE,
        sequential_sft.BUFFERED, sequential_sft.SAMPLES,
    }  # fmt: skip
    assert not {key for _, key, _ in rl} - set(m.catalogue().by_key)  # all catalogued
    events = list(read_events(rl_dir))
    assert {e["step"] for e in events} == set(range(STEPS + 1, LAST + 1))
    assert {e["kind"] for e in events} == {"sft_sample"}
    assert all(e["source"] != e["target"] and e["samples"] for e in events)
    # Checkpoints at the end of RL and at the run's last step (checkpoint_every is 100).
    assert [c.step for c in complete_checkpoints(rl_dir)] == [STEPS, LAST]
    assert [c.step for c in complete_checkpoints(standalone_dir)] == [STEPS]

    for policy in ("a", "b"):
        stages = [rl[(policy, sequential_sft.STAGE, s)] for s in range(1, LAST + 1)]
        assert stages == [1.0] * STEPS + [2.0] * SFT_STEPS
        for s in range(1, LAST + 1):  # the curves go on through both stages
            assert (policy, m.TRAIN_REWARD_MEAN, s) in rl
            assert ((policy, m.PG_LOSS, s) in rl) == (s <= STEPS)
            # every val_every steps, at the end of RL and at the last step
            assert ((policy, m.VAL_REWARD_AT_1, s) in rl) == (s in (2, 3, 4, 5))
        sizes = [rl[(policy, sequential_sft.BUFFER_SIZE, s)] for s in range(1, LAST + 1)]
        assert sizes == sorted(sizes) and sizes[STEPS - 1 :] == [sizes[-1]] * (SFT_STEPS + 1)
        assert sizes[-1] > 0, f"{policy}'s peer solved no prompt: nothing to fine-tune on"
        trained = [rl[(policy, sequential_sft.SAMPLES, s)] for s in range(1, LAST + 1)]
        assert trained[:STEPS] == [0.0] * STEPS and sum(trained) == EPOCHS * sizes[-1]
        assert rl[(policy, sequential_sft.NLL, STEPS + 1)] > 0
        received = [e for e in events if e["target"] == policy]
        assert sum(e["count"] for e in received) == EPOCHS * sizes[-1]

    # The base variant: the same RL and the same buffer; its SFT stage trains the same
    # samples, from other weights (the update's NLL is the base model's).
    assert _until(base, STEPS) == rl_stage_1
    assert _event_keys(base_dir) == _event_keys(rl_dir)
    for policy in ("a", "b"):
        first = (policy, sequential_sft.NLL, STEPS + 1)
        assert base[first] != rl[first]
        # That step's rollouts came before the restart: RL's last policy drew them.
        reward = (policy, m.TRAIN_REWARD_MEAN, STEPS + 1)
        assert base[reward] == rl[reward]

    # Stopped at the boundary and resumed: the SFT stage restarts from the base weights
    # after the resume and trains as the run that was not interrupted.
    assert _points(resumed_dir) == base
    assert _event_keys(resumed_dir) == _event_keys(base_dir)
