"""The policy optimises the objective the run config names (issue: Policy is model state
plus the forward/backward loop): looked up by name in ``OBJECTIVES`` and called with that
objective's settings; what a regime or an off-policy method adds to the objective's
inputs comes through the batch's hooks, which the update calls in a fixed order.

A real tiny zoo policy; the objectives are wrapped to record how they are called."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.trainer.zoo_policy import zoo_policy
from trainer import metrics as m
from trainer.batch import BatchHook, LearnerBatch, Update, UpdateTensors
from trainer.config import GRPOConfig, PolicyConfig, RunConfig
from trainer.core import OBJECTIVES, ObjectiveInputs, ObjectiveOutput, UnknownNameError
from trainer.policy import Policy
from trainer.remix.reuse import ReplayedSamples
from trainer.tasks import get_reward

MODEL = "tiny-llama-char"
PROMPTS = [[1, 5, 6], [1, 7], [1, 8, 9, 10], [1, 11]]
RESPONSES = [[12, 13], [14], [15, 16, 17], [18, 19]]


def _config(**data: Any) -> RunConfig:
    return RunConfig.from_dict(
        {"pool": [{"name": "a", "model": f"zoo:{MODEL}"}], "prompts_per_step": 2, **data}
    )


def _batch(hooks: list[BatchHook] | None = None) -> LearnerBatch:
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.5])
    return LearnerBatch(PROMPTS, RESPONSES, advantages, [None] * 4, hooks=hooks or [])


@pytest.fixture
def calls() -> Iterator[list[tuple[str, Any]]]:
    """``(objective name, settings)`` of every call of a registered objective."""
    recorded: list[tuple[str, Any]] = []
    originals = {name: OBJECTIVES.get(name) for name in OBJECTIVES.names()}

    def recording(name: str) -> Any:
        def objective(**kwargs: Any) -> ObjectiveOutput:
            recorded.append((name, kwargs["settings"]))
            return originals[name](**kwargs)

        return objective

    for name in originals:
        OBJECTIVES.unregister(name)
        OBJECTIVES.register(name)(recording(name))
    try:
        yield recorded
    finally:
        for name, objective in originals.items():
            OBJECTIVES.unregister(name)
            OBJECTIVES.register(name)(objective)


@pytest.mark.parametrize(
    ("data", "objective"),
    [
        ({}, "grpo"),
        ({"off_policy": "remix"}, "remix"),
        ({"off_policy": "remix", "grpo": {"objective": "remix"}}, "remix"),
        ({"grpo": {"objective": "grpo", "clip_eps": 0.3}}, "grpo"),
    ],
    ids=["default", "remix-by-off-policy", "remix-named", "grpo-named"],
)
def test_the_policy_optimises_the_objective_its_config_names(
    zoo_dir: Path, calls: list[tuple[str, Any]], data: dict[str, Any], objective: str
) -> None:
    config = _config(**data)
    policy = zoo_policy("a", MODEL, zoo_dir, config)
    assert policy.objective == config.objective == objective
    metrics = policy.train_step(_batch())
    assert [name for name, _ in calls] == [objective]
    (settings,) = [settings for _, settings in calls]
    grpo = config.grpo
    assert (settings.clip_eps, settings.kl_coef, settings.kl_clamp, settings.agg) == (
        grpo.clip_eps,
        grpo.kl_coef,
        grpo.kl_clamp,
        grpo.loss_agg,
    )
    # What the objective reports is what the step reports: remix's own metrics only there.
    assert (m.REMIX_KL_BASE in metrics) == (objective == "remix")
    assert metrics[m.KL_COEF] == grpo.kl_coef


def test_an_update_names_its_objective_settings_and_passes(
    zoo_dir: Path, calls: list[tuple[str, Any]]
) -> None:
    policy = zoo_policy("a", MODEL, zoo_dir, _config())
    update = Update(objective="remix", settings={"kl_lambda": 0.25, "c_bar": 2.0}, passes=3)
    policy.train_step(_batch(), update)
    # One mini-batch, one micro-batch (64 rows by default): one call per pass.
    assert [name for name, _ in calls] == ["remix"] * 3
    for _, settings in calls:
        assert (settings.kl_lambda, settings.c_bar) == (0.25, 2.0)
        assert settings.clip_eps == policy.grpo.clip_eps  # the rest: the GRPO config's
    assert policy.objective == "grpo"  # the update named another one for this step only


def test_an_unknown_objective_is_refused_with_the_known_names(zoo_dir: Path) -> None:
    model_dir = zoo_dir / MODEL
    with pytest.raises(UnknownNameError, match=r"^unknown objective 'ppo'; known: grpo, remix$"):
        Policy(
            PolicyConfig(name="a", model=str(model_dir)),
            GRPOConfig(),
            model_dir=zoo_dir / "no-such-model",  # refused before any model is loaded
            tokenizer_dir=model_dir,
            reward_fn=get_reward("math"),
            objective="ppo",
        )
    policy = zoo_policy("a", MODEL, zoo_dir, _config())
    with pytest.raises(UnknownNameError, match="unknown objective 'ppo'"):
        policy.train_step(_batch(), Update(objective="ppo"))


class _Recorder(BatchHook):
    """Records what the update shows a hook, and reports a metric."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.old_logp: list[torch.Tensor | None] = []
        self.rows: list[tuple[slice, slice]] = []

    def prepare(self, update: UpdateTensors) -> None:
        self.events.append("prepare")
        self.old_logp.append(update.old_logp)
        assert update.response_mask.shape == (4, 6)  # the longest: 4 + 3 tokens, minus 1

    def micro_batch(
        self, rows: slice, columns: slice, logp: torch.Tensor, inputs: ObjectiveInputs
    ) -> None:
        self.events.append("micro_batch")
        self.rows.append((rows, columns))
        assert not logp.requires_grad
        assert (
            logp.shape
            == inputs.mask.shape
            == (rows.stop - rows.start, columns.stop - columns.start)
        )

    def finish(self, update: UpdateTensors) -> dict[str, float]:
        self.events.append("finish")
        return {"test/hook": float(len(self.events))}


@pytest.mark.parametrize("epochs", [1, 2])
def test_the_hooks_see_prepare_each_micro_batch_and_finish(zoo_dir: Path, epochs: int) -> None:
    config = _config(grpo={"epochs": epochs})
    policy = zoo_policy("a", MODEL, zoo_dir, config)
    policy.config.micro_batch_size = 3
    hook = _Recorder()
    metrics = policy.train_step(_batch([hook]))
    assert hook.events == ["prepare", *["micro_batch"] * (2 * epochs), "finish"]
    assert metrics["test/hook"] == 2 + 2 * epochs
    # A single pass takes its own forward's log-probs as log pi_old: no old_logp up front.
    (old_logp,) = hook.old_logp
    assert (old_logp is None) == (epochs == 1)
    # Micro-batches of 3 rows, then 1, each up to its own width - 1 (7 and 4 tokens).
    assert [(r.start, r.stop) for r, _ in hook.rows] == [(0, 3), (3, 4)] * epochs
    assert [c.stop for _, c in hook.rows] == [6, 3] * epochs


def test_a_hook_that_gives_an_input_the_objective_does_not_read_is_refused(
    zoo_dir: Path,
) -> None:
    class Extra(BatchHook):
        def prepare(self, update: UpdateTensors) -> None:
            update.inputs["replayed"] = torch.zeros(4, dtype=torch.bool)

    policy = zoo_policy("a", MODEL, zoo_dir, _config(grpo={"epochs": 2}))
    with pytest.raises(ValueError, match="replayed, which objective 'grpo' does not read"):
        policy.train_step(_batch([Extra()]))
    # ReMix's replayed samples need log pi_k, which grpo's single pass does not score.
    single = zoo_policy("a", MODEL, zoo_dir, _config())
    replayed = ReplayedSamples([None, None, None, [-0.5, -0.25]])
    with pytest.raises(ValueError, match="train a mixed batch with the objective 'remix'"):
        single.train_step(_batch([replayed]))
