"""ReMix (SPEC 5): its pure pieces against hand-computed values, then its driver on a
real tiny policy under every sharing regime."""

from __future__ import annotations

import copy
import dataclasses
import math
import random
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor

from trainer import metrics as m
from trainer.batch import Update
from trainer.config import REFLECTION_MARKERS, ConfigError, PolicyConfig, RunConfig
from trainer.core import (
    OBJECTIVES,
    ObjectiveInputs,
    ObjectiveSettings,
    clipped_surrogate,
    grpo_loss,
    kl_convex,
    kl_k3,
    mix_policy_surrogate,
    remix_loss,
    vtrace_truncation,
)
from trainer.exchange import StepRecord
from trainer.policy import LearnerBatch, Policy
from trainer.regimes import make_regime, regime_names
from trainer.remix import (
    Consumption,
    ReplayBuffer,
    ReplaySample,
    has_reflection,
    kl_lambda,
    reincarnates_after,
    self_reflection_rate,
)
from trainer.remix.reuse import ReMix, ReplayedSamples, with_replay
from trainer.tasks import Problem, get_reward

# --- the mix-policy surrogate -----------------------------------------------------------


def _random_batch(seed: int = 0) -> dict[str, Tensor]:
    gen = torch.Generator().manual_seed(seed)
    n, t = 5, 7
    old = -torch.rand(n, t, generator=gen) * 3
    return {
        "logp": (old + 0.4 * torch.randn(n, t, generator=gen)).requires_grad_(),
        "old_logp": old,
        "advantages": torch.randn(n, generator=gen),
        "mask": (torch.rand(n, t, generator=gen) > 0.25).float(),
        "weights": torch.rand(n, t, generator=gen),
    }


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
@pytest.mark.parametrize("with_weights", [False, True])
def test_on_fresh_samples_the_surrogate_is_plain_ppo_to_the_last_bit(
    agg: str, with_weights: bool
) -> None:
    b = _random_batch()
    weights = b["weights"] if with_weights else None
    ppo = clipped_surrogate(
        b["logp"], b["old_logp"], b["advantages"], b["mask"], 0.2, agg, token_weights=weights
    )
    (ppo_grad,) = torch.autograd.grad(ppo.loss, b["logp"])
    # Fresh: behaviour = pi_k = old, so q_t = 1 (even with a c_bar below 1).
    mix = mix_policy_surrogate(
        b["logp"], b["old_logp"], b["old_logp"], b["advantages"], b["mask"],
        clip_eps=0.2, c_bar=0.5, replayed=torch.zeros(5, dtype=torch.bool), agg=agg,
        token_weights=weights,
    )  # fmt: skip
    (mix_grad,) = torch.autograd.grad(mix.loss, b["logp"])
    assert torch.equal(mix.loss, ppo.loss)
    assert torch.equal(mix.clip_frac, ppo.clip_frac)
    assert torch.equal(mix.ratio, ppo.ratio)
    assert torch.equal(mix_grad, ppo_grad)


def _objective_inputs(b: dict[str, Tensor], ref: Tensor, **extra: Tensor) -> ObjectiveInputs:
    return ObjectiveInputs(
        mask=b["mask"], advantages=b["advantages"], old_logp=b["old_logp"], ref_logp=ref,
        **extra,
    )  # fmt: skip


@pytest.mark.parametrize("replayed", [None, torch.zeros(5, dtype=torch.bool)])
def test_with_lambda_one_on_fresh_samples_the_remix_loss_is_the_grpo_loss(
    replayed: Tensor | None,
) -> None:
    b = _random_batch(1)
    ref = b["old_logp"] - 0.3
    entropy = torch.rand(5, 7)
    settings = ObjectiveSettings(
        clip_eps=0.2, kl_coef=0.05, kl_clamp=10.0, entropy_coef=0.01, c_bar=0.5, kl_lambda=1.0
    )
    grpo = grpo_loss(
        logp=b["logp"], entropy=entropy, inputs=_objective_inputs(b, ref), settings=settings
    )
    inputs = _objective_inputs(b, ref, behaviour_logp=b["old_logp"], replayed=replayed)  # type: ignore[arg-type]
    remix = OBJECTIVES.get("remix")(
        logp=b["logp"], entropy=entropy, inputs=inputs, settings=settings
    )
    assert remix_loss is OBJECTIVES.get("remix")
    assert torch.equal(remix.loss, grpo.loss)
    for key, value in grpo.metrics.items():
        assert torch.equal(remix.metrics[key], value), key
    assert torch.equal(remix.metrics[m.REMIX_KL_BASE], grpo.metrics[m.KL_LOSS])
    (ratio,) = remix.token_stats
    assert (ratio.mean_key, ratio.max_key) == (m.REMIX_IS_RATIO_MEAN, m.REMIX_IS_RATIO_MAX)
    assert ratio.values.shape == (int(b["mask"].sum()),)


def test_the_remix_objective_by_hand() -> None:
    # One replayed sample of two tokens (the example of the next test), A = 1:
    #   token 0: q = 1.5, r = 1.8, -min(1.8, 1.7) = -1.7 (clipped)
    #   token 1: q = 0.5, r = 0.2, A_t = 0.5, -0.1 (unclipped)
    #   pg_loss = (-1.7 - 0.1) / 2 = -0.9, clip_frac 0.5
    # KL, d = ref - logp: to the base (ref = logp + ln 2 on both tokens): k3 = 2 - ln 2 - 1
    # = 0.3068528194; to pi_k (d = ln q - ln r = ln(1.5/1.8), ln(0.5/0.2)):
    #   k3 = 0.8333333333 - ln(0.8333333333) - 1 = 0.0156548901
    #        2.5 - ln 2.5 - 1 = 0.5837092681
    #   kl_prev = 0.2996820791; lambda 0.7: convex = 0.7 * 0.3068528194 + 0.3 * 0.2996820791
    #   = 0.3047015973; loss = -0.9 + 0.1 * 0.3047015973 = -0.8695298403 (no entropy)
    behaviour = torch.tensor([[math.log(0.2), math.log(0.4)]], dtype=torch.float64)
    current = behaviour + torch.tensor([[math.log(1.5), math.log(0.5)]], dtype=torch.float64)
    logp = behaviour + torch.tensor([[math.log(1.8), math.log(0.2)]], dtype=torch.float64)
    inputs = ObjectiveInputs(
        mask=torch.ones(1, 2), advantages=torch.tensor([1.0], dtype=torch.float64),
        old_logp=current, ref_logp=logp + math.log(2), behaviour_logp=behaviour,
        replayed=torch.tensor([True]),
    )  # fmt: skip
    settings = ObjectiveSettings(kl_coef=0.1, c_bar=1.0, kl_lambda=0.7)
    out = remix_loss(logp=logp, entropy=None, inputs=inputs, settings=settings)
    assert out.loss.item() == pytest.approx(-0.8695298403)
    values = {key: value.item() for key, value in out.metrics.items()}
    assert values == pytest.approx(
        {
            m.PG_LOSS: -0.9, m.KL_LOSS: 0.3047015973, m.ENTROPY: 0.0, m.CLIP_FRAC: 0.5,
            m.REMIX_KL_BASE: 0.3068528194, m.REMIX_KL_PREV: 0.2996820791,
        }
    )  # fmt: skip
    assert out.token_stats[0].values.tolist() == pytest.approx([1.8, 0.2])
    with pytest.raises(ValueError, match="needs old_logp"):
        remix_loss(
            logp=logp, entropy=None, inputs=dataclasses.replace(inputs, ref_logp=None),
            settings=settings,
        )  # fmt: skip


def test_a_replayed_sample_clips_around_the_current_to_behaviour_ratio() -> None:
    # Token 0: q = 1.5, r = 1.8, A = 1. Truncated advantage min(1.5, 1) * 1 = 1; clip range
    # [1.3, 1.7]: -min(1.8, 1.7) = -1.7, the clipped branch (no gradient).
    # Token 1: q = 0.5, r = 0.2, A = 1. Advantage min(0.5, 1) = 0.5; clip range [0.3, 0.7]:
    # -min(0.2 * 0.5, 0.3 * 0.5) = -0.1, unclipped, gradient -A_t * r = -0.1 on logp.
    behaviour = torch.tensor([[math.log(0.2), math.log(0.4)]])
    current = behaviour + torch.tensor([[math.log(1.5), math.log(0.5)]])
    logp = (behaviour + torch.tensor([[math.log(1.8), math.log(0.2)]])).requires_grad_()
    mix = mix_policy_surrogate(
        logp, behaviour, current, torch.tensor([1.0]), torch.ones(1, 2),
        clip_eps=0.2, c_bar=1.0, replayed=torch.tensor([True]), agg="token-mean",
    )  # fmt: skip
    assert mix.loss.item() == pytest.approx((-1.7 - 0.1) / 2)
    assert mix.clip_frac.item() == pytest.approx(0.5)
    assert mix.ratio[0].tolist() == pytest.approx([1.8, 0.2])
    (grad,) = torch.autograd.grad(mix.loss, logp)
    assert grad[0].tolist() == pytest.approx([0.0, -0.1 / 2])


def test_a_negative_advantage_clips_from_below_around_q() -> None:
    # q = 2, r = 1.5, A = -1 (replayed, c_bar 4: truncated advantage -2). Clip range
    # [1.8, 2.2]: -min(1.5 * -2, 1.8 * -2) = -min(-3, -3.6) = 3.6 (clipped branch).
    behaviour = torch.tensor([[math.log(0.25)]])
    mix = mix_policy_surrogate(
        behaviour + math.log(1.5), behaviour, behaviour + math.log(2.0), torch.tensor([-1.0]),
        torch.ones(1, 1), clip_eps=0.2, c_bar=4.0, replayed=torch.tensor([True]),
    )  # fmt: skip
    assert mix.loss.item() == pytest.approx(3.6)
    assert mix.clip_frac.item() == 1.0


def test_vtrace_truncation_is_min_of_q_and_c_bar() -> None:
    q = torch.tensor([0.25, 1.0, 2.5])
    assert vtrace_truncation(q, 1.0).tolist() == [0.25, 1.0, 1.0]
    assert vtrace_truncation(q, 2.0).tolist() == [0.25, 1.0, 2.0]
    with pytest.raises(ValueError):
        vtrace_truncation(q, 0.0)


def test_truncation_scales_only_replayed_advantages() -> None:
    # Two identical samples with q = 0.5 and r = q (inside the clip range): the replayed
    # one's advantage becomes min(0.5, c_bar) * 1 = 0.5, the other keeps A = 1 (a sample
    # whose behaviour is pi_k always has q = 1; q = 0.5 here only isolates the flag).
    behaviour = torch.full((2, 1), math.log(0.4))
    current = behaviour + math.log(0.5)
    mix = mix_policy_surrogate(
        current.clone(), behaviour, current, torch.tensor([1.0, 1.0]), torch.ones(2, 1),
        c_bar=1.0, replayed=torch.tensor([True, False]), agg="seq-mean-token-mean",
    )  # fmt: skip
    assert mix.loss.item() == pytest.approx((-0.5 * 0.5 + -0.5 * 1.0) / 2)


def test_masked_junk_in_the_behaviour_log_probs_changes_nothing() -> None:
    b = _random_batch(2)
    mask = b["mask"].bool()
    dirty = torch.where(mask, b["old_logp"], torch.tensor(math.nan))
    clean = mix_policy_surrogate(
        b["logp"], b["old_logp"], b["old_logp"], b["advantages"], mask,
        replayed=torch.ones(5, dtype=torch.bool),
    )  # fmt: skip
    junk = mix_policy_surrogate(
        b["logp"], dirty, dirty, b["advantages"], mask, replayed=torch.ones(5, dtype=torch.bool)
    )
    assert torch.equal(clean.loss, junk.loss)


@pytest.mark.parametrize("junk", [math.nan, math.inf, -1e4])
def test_masked_junk_changes_neither_the_remix_objective_nor_its_gradient(junk: float) -> None:
    b = _random_batch(3)
    mask = b["mask"].bool()
    replayed = torch.tensor([True, False, True, True, False])

    def run(fill: float | None) -> tuple[list[float], Tensor]:
        def dirty(x: Tensor) -> Tensor:
            x = x.detach().clone()
            return x if fill is None else torch.where(mask, x, torch.tensor(fill))

        logp = dirty(b["logp"]).requires_grad_()
        inputs = ObjectiveInputs(
            mask=b["mask"], advantages=dirty(b["advantages"].unsqueeze(-1).expand(5, 7)),
            old_logp=dirty(b["old_logp"] + 0.1), ref_logp=dirty(b["old_logp"] - 0.2),
            token_weights=dirty(b["weights"]), behaviour_logp=dirty(b["old_logp"]),
            replayed=replayed,
        )  # fmt: skip
        settings = ObjectiveSettings(kl_coef=0.1, entropy_coef=0.01, kl_lambda=0.6, c_bar=1.0)
        out = remix_loss(logp=logp, entropy=dirty(b["weights"]), inputs=inputs, settings=settings)
        (grad,) = torch.autograd.grad(out.loss, logp)
        values = [out.loss.item(), *(v.item() for v in out.metrics.values())]
        return values + out.token_stats[0].values.tolist(), grad

    clean_values, clean_grad = run(None)
    values, grad = run(junk)
    assert values == clean_values
    assert torch.equal(grad, clean_grad)


# --- the KL-convex constraint and lambda(t) ---------------------------------------------


@pytest.mark.parametrize(
    ("step", "expected"),
    [(0, 1.0), (50, 1.0), (51, 0.9), (60, 0.9), (61, 0.8), (100, 0.5), (1000, 0.5)],
)
def test_the_lambda_schedule_at_the_spec_points(step: int, expected: float) -> None:
    assert kl_lambda(step) == pytest.approx(expected, abs=1e-12)


def test_the_lambda_schedule_constants_are_configurable() -> None:
    assert kl_lambda(7, start=5, decay=0.25, every=2, floor=0.0) == pytest.approx(0.75)
    assert kl_lambda(100, start=5, decay=0.25, every=2, floor=0.0) == 0.0
    assert kl_lambda(3, start=0, decay=0.0, every=1, floor=0.5) == 1.0


def test_the_kl_convex_term_mixes_the_two_k3_estimates() -> None:
    logp = torch.tensor([[-1.0, -2.0]])
    base = torch.tensor([[-1.5, -1.0]])
    prev = torch.tensor([[-1.0, -2.5]])
    convex, kl_base, kl_prev = kl_convex(logp, base, prev, 0.7)
    # k3(d) = e^d - d - 1 with d = ref - logp.
    k3 = [[math.exp(d) - d - 1 for d in row] for row in ([-0.5, 1.0], [0.0, -0.5])]
    assert kl_base[0].tolist() == pytest.approx(k3[0])
    assert kl_prev[0].tolist() == pytest.approx(k3[1])
    assert convex[0].tolist() == pytest.approx(
        [0.7 * a + 0.3 * b for a, b in zip(*k3, strict=True)]
    )
    assert torch.equal(kl_base, kl_k3(logp, base))


def test_reincarnation_happens_once_at_step_t() -> None:
    assert [s for s in range(1, 100) if reincarnates_after(s, 50)] == [50]
    assert not any(reincarnates_after(s, None) for s in range(1, 100))


# --- the replay ---------------------------------------------------------------------------


def _sample(version: int, tag: int = 0) -> ReplaySample:
    return ReplaySample(version, (1, 2), (tag, 3), (-0.5, -0.25), float(tag))


def test_the_replay_evicts_versions_older_than_n() -> None:
    replay = ReplayBuffer(versions=2)
    for version in (1, 2, 3):
        replay.add(version, [_sample(version, i) for i in range(3)])
    assert replay.held_versions() == [2, 3]
    assert len(replay) == 6


def test_the_replay_never_returns_samples_older_than_n_versions() -> None:
    rng = random.Random(0)
    for versions in (1, 2, 3):
        replay = ReplayBuffer(versions)
        for step in range(1, 30):
            drawn = replay.sample(rng.randrange(0, 12), step, rng)
            assert all(1 <= step - s.version <= versions for s in drawn), (versions, step)
            replay.add(step, [_sample(step, i) for i in range(rng.randrange(0, 5))])
    # A version still held but already N + 1 old is skipped too (the step skipped a turn).
    replay = ReplayBuffer(2)
    replay.add(2, [_sample(2)])
    replay.add(3, [_sample(3)])
    assert [s.version for s in replay.sample(10, 5, random.Random(0))] == [3]


def test_the_replay_draws_without_replacement_and_seeded() -> None:
    replay = ReplayBuffer(2)
    replay.add(1, [_sample(1, i) for i in range(10)])
    first = replay.sample(4, 2, random.Random("x"))
    assert len({s.response_ids for s in first}) == 4
    assert first == replay.sample(4, 2, random.Random("x"))
    assert len(replay.sample(50, 2, random.Random(0))) == 10


def test_the_replay_round_trips_through_its_state_dict() -> None:
    replay = ReplayBuffer(2)
    replay.add(4, [_sample(4, 1), _sample(4, 2)])
    again = ReplayBuffer(2)
    again.load_state_dict(copy.deepcopy(replay.state_dict()))
    assert again.samples == replay.samples
    with pytest.raises(ValueError, match="keeps 2 versions"):
        ReplayBuffer(3).load_state_dict(replay.state_dict())


def test_the_replay_refuses_inconsistent_samples() -> None:
    replay = ReplayBuffer(2)
    replay.add(3, [_sample(3)])
    with pytest.raises(ValueError, match="older"):
        replay.add(2, [_sample(2)])
    with pytest.raises(ValueError, match="must carry it"):
        replay.add(4, [_sample(5)])
    with pytest.raises(ValueError, match="behaviour log-probs"):
        ReplaySample(1, (1,), (2, 3), (-0.1,), 0.0)


def test_with_replay_appends_replayed_rows_after_the_batch() -> None:
    batch = LearnerBatch([[1], [1]], [[5], [6]], torch.tensor([0.5, -0.5]), [None, [0.3]])
    mixed = with_replay(batch, [_sample(1, 7)])
    assert mixed.response_ids == [[5], [6], [7, 3]]
    assert mixed.advantages.tolist() == [0.5, -0.5, 7.0]
    assert mixed.token_weights == [None, [0.3], None]
    hook = mixed.hook(ReplayedSamples)
    assert hook is not None and mixed.hooks == [hook]
    assert hook.behaviour_logp == [None, None, [-0.5, -0.25]]
    assert hook.replayed == [False, False, True]


# --- diagnostics ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("But wait, 3+4 is 7", True),
        ("Let me DOUBLE-CHECK: 12", True),
        ("re-examine the sum", True),
        ("the root\n cause is a carry", True),
        ("Why? \\boxed{4}", True),
        ("check", True),
        ("butter and checking, rechecked, questions", False),
        ("\\boxed{12}", False),
        ("", False),
    ],
)
def test_reflection_markers_match_whole_words_case_insensitively(text: str, expected: bool) -> None:
    assert has_reflection(text, REFLECTION_MARKERS) is expected


def test_the_self_reflection_rate_is_the_share_of_responses_with_a_marker() -> None:
    texts = ["wait, 5", "\\boxed{5}", "verify: 5", "5"]
    assert self_reflection_rate(texts, REFLECTION_MARKERS) == 0.5
    assert self_reflection_rate(texts, ["boxed"]) == 0.25
    assert self_reflection_rate([], REFLECTION_MARKERS) == 0.0


def test_consumption_counts_rollouts_and_tokens() -> None:
    consumption = Consumption()
    consumption.add([3, 4])
    consumption.add([5])
    assert (consumption.rollouts, consumption.response_tokens) == (3, 12)
    assert Consumption.from_dict(consumption.to_dict()) == consumption


# --- configuration ----------------------------------------------------------------------


def _config_dict(**overrides: Any) -> dict[str, Any]:
    pool = [{"name": n, "model": "zoo:tiny-llama-char"} for n in ("a", "b")]
    return {"pool": pool, "off_policy": "remix", **overrides}


def _errors(data: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ConfigError) as caught:
        RunConfig.from_dict(data)
    return caught.value.errors


def test_remix_defaults_are_the_spec_defaults() -> None:
    remix = RunConfig.from_dict(_config_dict()).remix
    assert (remix.replay_versions, remix.replay_fraction, remix.updates_per_batch) == (2, 0.4, 2)
    assert (remix.c_bar, remix.reincarnation_step) == (1.0, 50)
    assert (remix.kl_lambda_start, remix.kl_lambda_decay) == (50, 0.1)
    assert (remix.kl_lambda_every, remix.kl_lambda_floor) == (10, 0.5)
    assert remix.reflection_markers == list(REFLECTION_MARKERS)


@pytest.mark.parametrize("regime", regime_names())
def test_remix_combines_with_every_regime(regime: str) -> None:
    assert RunConfig.from_dict(_config_dict(regime=regime)).off_policy == "remix"


def test_remix_settings_are_checked_with_fix_it_messages() -> None:
    errors = _errors(
        _config_dict(
            remix={
                "replay_versions": 0, "replay_fraction": 1.0, "updates_per_batch": 0,
                "c_bar": 0, "kl_lambda_every": 0, "kl_lambda_floor": 1.5,
                "reincarnation_step": 0, "reflection_markers": [" "],
            }
        )
    )  # fmt: skip
    assert set(errors) == {
        "remix.replay_versions", "remix.replay_fraction", "remix.updates_per_batch",
        "remix.c_bar", "remix.kl_lambda_every", "remix.kl_lambda_floor",
        "remix.reincarnation_step", "remix.reflection_markers",
    }  # fmt: skip
    assert "in [0, 1)" in errors["remix.replay_fraction"]


def test_a_replay_fraction_that_leaves_no_fresh_prompt_is_refused() -> None:
    errors = _errors(_config_dict(prompts_per_step=1, remix={"replay_fraction": 0.6}))
    assert errors == {
        "remix.replay_fraction": "with prompts_per_step = 1, replay_fraction 0.6 leaves no "
        "fresh prompt per step; lower it or raise prompts_per_step"
    }
    # Without remix the section is checked for range only.
    assert RunConfig.from_dict(_config_dict(off_policy="none", prompts_per_step=1))


def test_remix_refuses_grpo_epochs_it_would_multiply() -> None:
    errors = _errors(_config_dict(grpo={"epochs": 2}))
    assert set(errors) == {"grpo.epochs"}
    assert "remix.updates_per_batch" in errors["grpo.epochs"]
    assert RunConfig.from_dict(_config_dict(off_policy="none", grpo={"epochs": 2}))


def test_reincarnation_can_be_switched_off_and_the_json_round_trips() -> None:
    config = RunConfig.from_dict(_config_dict(remix={"reincarnation_step": None}))
    assert config.remix.reincarnation_step is None
    assert RunConfig.from_json(config.to_json()) == config


# --- the driver on a real tiny policy -----------------------------------------------------

POOL = {"a": "tiny-llama-char", "b": "tiny-gpt2-unigram"}
PROMPTS = 5  # p = 0.4: 3 fresh prompts, 2 prompts' worth of replay (G = 4: 8 samples)


def _run_config(regime: str, **remix: Any) -> RunConfig:
    pool = [
        {"name": name, "model": f"zoo:{zoo_id}", "group_size": 4, "lr": 1e-3}
        for name, zoo_id in POOL.items()
    ]
    return RunConfig.from_dict(
        {
            "pool": pool, "regime": regime, "off_policy": "remix",
            "prompts_per_step": PROMPTS, "grpo": {"kl_coef": 0.01},
            "remix": {"reincarnation_step": 3, **remix},
        }
    )  # fmt: skip


def _policy(config: RunConfig, name: str, zoo_dir: Path) -> Policy:
    model_dir = zoo_dir / POOL[name]
    return Policy(
        PolicyConfig(**{**config.policy(name).__dict__, "model": str(model_dir)}),
        config.grpo, model_dir=model_dir, tokenizer_dir=model_dir, reward_fn=get_reward("math"),
        objective=config.objective,
    )  # fmt: skip


def _problems(step: int, n: int) -> list[Problem]:
    return [
        Problem(id=f"s{step}-{i}", prompt=f"Compute {i}+{step}.", answer=str(i + step))
        for i in range(n)
    ]


@pytest.mark.parametrize("regime", regime_names())
def test_remix_trains_on_every_regimes_batch_and_reincarnates(regime: str, zoo_dir: Path) -> None:
    torch.manual_seed(0)
    config = _run_config(regime)
    learner, peer = _policy(config, "a", zoo_dir), _policy(config, "b", zoo_dir)
    dirs = {name: zoo_dir / zoo_id for name, zoo_id in POOL.items()}
    regimes = {name: make_regime(config, name, dirs) for name in POOL}
    remix = ReMix(config, "a")
    for step in (1, 2, 3, 4):
        problems = _problems(step, remix.fresh_prompts())
        ids = tuple(p.id for p in problems)
        own, theirs = learner.rollout(problems), peer.rollout(problems)
        published = StepRecord("b", step, ids, topics=regimes["b"].publish(peer, theirs, step))
        learned = regimes["a"].learn(learner, own, [published], step)
        metrics = remix.train(learner, learned.batch, own, step)
        if step <= 3:
            assert len(problems) == 3
            for key in (m.REMIX_IS_RATIO_MEAN, m.REMIX_IS_RATIO_MAX, m.REMIX_KL_BASE,
                        m.REMIX_KL_PREV, m.REMIX_LAMBDA, m.PG_LOSS):  # fmt: skip
                assert math.isfinite(metrics[key]), (step, key)
            expected_frac = 0.0 if step == 1 else 8 / (8 + 12)
            assert metrics[m.REMIX_OFFPOLICY_FRAC] == pytest.approx(expected_frac)
        else:
            assert len(problems) == PROMPTS
            assert metrics[m.REMIX_OFFPOLICY_FRAC] == 0.0
            assert m.REMIX_IS_RATIO_MEAN not in metrics
    assert remix.reincarnated_at == 3 and len(remix.replay) == 0


def test_after_reincarnation_a_step_is_exactly_plain_grpo(zoo_dir: Path) -> None:
    torch.manual_seed(0)
    config = _run_config("standalone", reincarnation_step=1)
    policy = _policy(config, "a", zoo_dir)
    remix = ReMix(config, "a")
    rollouts = policy.rollout(_problems(1, remix.fresh_prompts()))
    remix.train(policy, LearnerBatch.on_policy(rollouts, policy.advantages(rollouts)), rollouts, 1)
    assert remix.reincarnated and len(remix.replay) == 0
    for name, tensor in policy.reference.state_dict().items():  # reference := current
        assert torch.equal(tensor, policy.model.state_dict()[name]), name

    plain = copy.deepcopy(policy)
    rollouts = policy.rollout(_problems(2, remix.fresh_prompts()))
    assert len(rollouts.problems) == PROMPTS
    batch = LearnerBatch.on_policy(rollouts, policy.advantages(rollouts))
    assert policy.objective == "remix"  # the run config's, until reincarnation
    remix_metrics = remix.train(policy, batch, rollouts, 2)
    plain_metrics = plain.train_step(batch, Update(objective="grpo"))
    assert remix_metrics[m.PG_LOSS] == plain_metrics[m.PG_LOSS]
    assert remix_metrics[m.KL_LOSS] == plain_metrics[m.KL_LOSS] == 0.0
    for (name, a), (_, b) in zip(
        policy.model.state_dict().items(), plain.model.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name


def test_the_replay_keeps_the_behaviour_log_probs_of_the_sampling_version(
    zoo_dir: Path,
) -> None:
    torch.manual_seed(0)
    config = _run_config("standalone")
    policy = _policy(config, "a", zoo_dir)
    remix = ReMix(config, "a")
    rollouts = policy.rollout(_problems(1, remix.fresh_prompts()))
    before = policy.response_logprobs(rollouts.batch.prompt_ids, rollouts.batch.response_ids)
    advantages = policy.advantages(rollouts)
    remix.train(policy, LearnerBatch.on_policy(rollouts, advantages), rollouts, 1)
    stored = remix.replay.samples
    assert [s.version for s in stored] == [1] * len(rollouts.batch)
    assert [list(s.behaviour_logp) for s in stored] == before
    assert [s.advantage for s in stored] == advantages.tolist()
