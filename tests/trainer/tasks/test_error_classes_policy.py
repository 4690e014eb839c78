"""Issue 45 on a real tiny model: a policy's validation on the addition slices logs the
error classes and the discrimination, consistent with its per-slice reward."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.trainer.zoo_policy import zoo_policy
from trainer import metrics as m
from trainer.config import RunConfig
from trainer.tasks.addition_errors import ERROR_CLASSES
from trainer.tasks.addition_slices import SLICES, AdditionSlicesTask
from trainer.zoo import GAP_IDS

REPO = Path(__file__).resolve().parents[3]
_STRONG, NO_CARRY, _NO_HUNDREDS = GAP_IDS


@pytest.fixture(scope="module")
def gap_zoo(zoo_dir: Path) -> Path:
    """The gap pool built beside the normal zoo (cached like it)."""
    from trainer.zoo import build_zoo

    build_zoo(zoo_dir, seed=0, ids=GAP_IDS)
    return zoo_dir


def test_the_warm_start_that_drops_the_carry_is_seen_dropping_it(gap_zoo: Path) -> None:
    config = RunConfig.from_file(REPO / "examples/gap.json")
    policy = zoo_policy("qwen-nocarry", NO_CARRY, gap_zoo, config)
    validation = AdditionSlicesTask(seed=0, val_size=16).validation()
    metrics = policy.validation_metrics(validation)
    for name in SLICES:
        shares = [metrics[m.val_error_key(c, name)] for c in ERROR_CLASSES]
        assert sum(shares) == pytest.approx(1.0), name
        assert metrics[m.val_error_key("correct", name)] == metrics[f"val/reward@1/{name}"]
    assert metrics[m.VAL_DISCRIMINATION_CARRY] == pytest.approx(
        metrics["val/reward@1/carry"] + metrics["val/reward@1/no_carry"] - 1
    )
    assert metrics[m.VAL_DISCRIMINATION_OVERFLOW] == pytest.approx(
        metrics["val/reward@1/overflow"] + metrics["val/reward@1/no_carry"] - 1
    )
    # Its warm start writes a+b-10 wherever the ones carry: the class says so.
    assert metrics[m.val_error_key("dropped_carry", "carry")] >= 0.75
    assert metrics[m.val_error_key("spurious_carry", "no_carry")] <= 0.25
