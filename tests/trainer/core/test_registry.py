"""The name registries behind which the trainer's algorithms live."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from trainer.core import (
    ADVANTAGE_ESTIMATORS,
    AUX_LOSSES,
    KL_ESTIMATORS,
    LOSS_AGGREGATIONS,
    OBJECTIVE_NEEDS,
    OBJECTIVES,
    ObjectiveNeeds,
    Registry,
    UnknownNameError,
    grpo_advantages,
    grpo_loss,
    kl_k3,
    objective_needs,
    remix_loss,
    sft_nll_sum,
)


def test_it_registers_and_returns_the_object_unchanged() -> None:
    registry: Registry[Callable[[int], int]] = Registry("doubler")

    @registry.register("plain")
    def plain(x: int) -> int:
        return 2 * x

    assert registry.get("plain") is plain
    assert plain(3) == 6
    assert "plain" in registry
    assert len(registry) == 1


def test_names_are_sorted() -> None:
    registry: Registry[int] = Registry("number")
    registry.register("b")(2)
    registry.register("a")(1)
    assert registry.names() == ["a", "b"]


def test_unknown_name_error_lists_the_known_names() -> None:
    registry: Registry[int] = Registry("number")
    registry.register("one")(1)
    registry.register("two")(2)
    with pytest.raises(KeyError) as excinfo:
        registry.get("three")
    assert isinstance(excinfo.value, UnknownNameError)
    assert str(excinfo.value) == "unknown number 'three'; known: one, two"


def test_unknown_name_in_an_empty_registry_says_so() -> None:
    with pytest.raises(KeyError, match=r"known: \(none registered\)"):
        Registry[int]("number").get("x")


def test_registering_a_name_twice_is_refused() -> None:
    registry: Registry[int] = Registry("number")
    registry.register("one")(1)
    with pytest.raises(ValueError, match="'one' is already registered"):
        registry.register("one")(11)
    assert registry.get("one") == 1


def test_the_trainer_registries_hold_the_config_names() -> None:
    assert ADVANTAGE_ESTIMATORS.names() == ["grpo"]
    assert ADVANTAGE_ESTIMATORS.get("grpo") is grpo_advantages
    assert LOSS_AGGREGATIONS.names() == ["seq-mean-token-mean", "token-mean"]
    assert KL_ESTIMATORS.names() == ["k3"]
    assert KL_ESTIMATORS.get("k3") is kl_k3
    assert OBJECTIVES.names() == ["grpo", "remix"]
    assert OBJECTIVES.get("grpo") is grpo_loss and OBJECTIVES.get("remix") is remix_loss
    assert AUX_LOSSES.names() == ["nll"]
    assert AUX_LOSSES.get("nll") is sft_nll_sum


def test_every_name_the_config_accepts_is_registered() -> None:
    from trainer import config

    assert set(config.ADVANTAGE_ESTIMATORS) <= set(ADVANTAGE_ESTIMATORS.names())
    assert set(config.LOSS_AGGREGATIONS) <= set(LOSS_AGGREGATIONS.names())
    assert set(config.KL_ESTIMATORS) <= set(KL_ESTIMATORS.names())
    assert set(config.OBJECTIVES) <= set(OBJECTIVES.names())
    assert set(config.OFF_POLICY_OBJECTIVES) == set(config.OFF_POLICY)
    assert set(config.OFF_POLICY_OBJECTIVES.values()) <= set(config.OBJECTIVES)


def test_every_objective_declares_what_it_needs_of_the_trainer() -> None:
    assert OBJECTIVE_NEEDS.names() == OBJECTIVES.names()
    assert objective_needs("grpo") == ObjectiveNeeds()
    remix = objective_needs("remix")
    assert remix.old_logp and remix.ref_logp
    assert remix.extra_inputs == {"behaviour_logp", "replayed"}
    # What the objectives read beyond the common inputs are fields of ObjectiveInputs.
    from trainer.core import ObjectiveInputs

    assert remix.extra_inputs <= set(ObjectiveInputs.__dataclass_fields__)
    # An objective registered without needs gets the defaults (what grpo needs).
    assert objective_needs("not-registered") == ObjectiveNeeds()
