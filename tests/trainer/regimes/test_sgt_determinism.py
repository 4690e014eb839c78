"""SGT's choice among equally short successes (issue 18, fix 3): by length, then the
source's rank in the pool, then the text; never set or hash order, so a seeded SGT run
picks the same rescues in every process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from trainer.policy import Rollouts
from trainer.regimes.sgt.regime import rescue_set, shortest_successes
from trainer.rollout import RolloutBatch
from trainer.tasks import Problem

REPO = Path(__file__).resolve().parents[3]
TEXTS = [f"\\boxed{{{n:02d}}}" for n in range(40, 10, -1)]  # 30 successes, all 10 chars

CHOOSE = """
import json, torch
from trainer.policy import Rollouts
from trainer.regimes.sgt.regime import shortest_successes
from trainer.rollout import RolloutBatch
from trainer.tasks import Problem
texts = json.loads({texts!r})
batch = RolloutBatch([[1]] * len(texts), [[2]] * len(texts), texts, [True] * len(texts))
rollouts = Rollouts([Problem("p0", "Compute.", "0")], batch, torch.ones(len(texts)),
                    len(texts), 1.0)
print(json.dumps(shortest_successes(rollouts, k=3), default=repr))
"""


def _rollouts(texts: list[str], rewards: list[float]) -> Rollouts:
    batch = RolloutBatch([[1]] * len(texts), [[2]] * len(texts), texts, [True] * len(texts))
    return Rollouts([Problem("p0", "Compute.", "0")], batch, torch.tensor(rewards), len(texts), 1)


def _chosen_under(hash_seed: str) -> str:
    """What a fresh interpreter with ``PYTHONHASHSEED=hash_seed`` publishes."""
    result = subprocess.run(
        [sys.executable, "-c", CHOOSE.format(texts=json.dumps(TEXTS))],
        cwd=REPO,
        env={**os.environ, "PYTHONHASHSEED": hash_seed},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return result.stdout


def test_the_published_successes_do_not_depend_on_the_hash_seed() -> None:
    assert _chosen_under("0") == _chosen_under("1")


def test_equally_short_successes_are_ordered_by_text() -> None:
    texts, rewards = [*TEXTS, "no", TEXTS[0]], [1.0] * 30 + [0.0, 1.0]  # a duplicate too
    published = shortest_successes(_rollouts(texts, rewards), k=3)
    assert [s.text for s in published["p0"]] == ["\\boxed{11}", "\\boxed{12}", "\\boxed{13}"]


def test_rescues_break_length_ties_by_source_rank_then_text() -> None:
    learner = _rollouts(["x", "y"], [0.0, 0.0])
    by_source = {  # rank order: "zed" is rank 0, "abe" rank 1 (not alphabetical)
        "zed": shortest_successes(_rollouts(["\\boxed{9}", "\\boxed{8}"], [1.0, 1.0]), k=2),
        "abe": shortest_successes(_rollouts(["\\boxed{1}", "bx{0}"], [1.0, 1.0]), k=2),
    }
    rescues, failed_all = rescue_set(learner, by_source, k=4, ranks={"zed": 0, "abe": 1})
    assert failed_all == 1
    assert [(r.source, r.text) for r in rescues] == [
        ("abe", "bx{0}"),
        ("zed", "\\boxed{8}"),
        ("zed", "\\boxed{9}"),
        ("abe", "\\boxed{1}"),
    ]
