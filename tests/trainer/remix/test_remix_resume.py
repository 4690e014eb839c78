"""ReMix's worker state across a resume (issue 21): the checkpoint is read with
``map_location="cpu"`` whatever device wrote it, so nothing ReMix restores may be bound to
a device. Its state is plain Python (the replay's ids, behaviour log-probs and advantages),
and the replayed advantages join a batch on the device of that batch's advantages, i.e.
the policy's device. The ``meta`` device stands in for an accelerator: a CPU tensor mixed
with a ``meta`` one fails exactly as a CPU tensor mixed with a CUDA one does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from trainer.checkpoint import load_worker_state, save_worker_state
from trainer.config import RunConfig
from trainer.policy import LearnerBatch
from trainer.remix import ReplaySample
from trainer.remix.reuse import ReMix, with_replay


def _config() -> RunConfig:
    pool = [{"name": name, "model": "zoo:tiny-llama-char"} for name in ("a", "b")]
    return RunConfig.from_dict({"pool": pool, "off_policy": "remix", "prompts_per_step": 4})


def _tensors(value: Any) -> list[torch.Tensor]:
    """Every tensor anywhere inside ``value`` (dicts, lists, tuples)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for item in value.values() for t in _tensors(item)]
    if isinstance(value, list | tuple):
        return [t for item in value for t in _tensors(item)]
    return []


def _trained_remix() -> ReMix:
    """A ReMix whose replay holds step 3's samples, with log-probs and advantages as a
    step produces them (``.tolist()`` of device tensors)."""
    remix = ReMix(_config(), "a")
    logp = torch.tensor([[-0.5, -0.25], [-1.0, -2.0]])
    advantages = torch.tensor([0.75, -0.75])
    remix.replay.add(
        3,
        [
            ReplaySample(3, (1, 2), (5, 6), tuple(logp[row].tolist()), advantages.tolist()[row])
            for row in range(2)
        ],
    )
    remix.reincarnated_at = None
    return remix


def _resumed(remix: ReMix, directory: Path) -> ReMix:
    """``remix`` through a checkpoint and back, as ``trainer.run`` saves and loads it."""
    save_worker_state(directory, {"remix": remix.state_dict()})
    state = load_worker_state(directory)
    assert state is not None
    again = ReMix(_config(), "a")
    again.load_state_dict(state["remix"])
    return again


def test_a_resumed_remix_restores_its_replay_as_plain_python(tmp_path: Path) -> None:
    remix = _trained_remix()
    assert _tensors(remix.state_dict()) == []  # nothing device-bound is saved
    again = _resumed(remix, tmp_path)
    assert again.replay.samples == remix.replay.samples
    assert again.reincarnated_at is None
    assert _tensors(again.state_dict()) == []
    for sample in again.replay.samples:
        assert all(type(i) is int for i in (*sample.prompt_ids, *sample.response_ids))
        assert all(type(x) is float for x in (*sample.behaviour_logp, sample.advantage))


def test_a_replay_state_holding_tensors_is_restored_as_plain_numbers(tmp_path: Path) -> None:
    # A state written with 0-d tensors in it (a sample built from tensor items rather
    # than .tolist()) still restores device-free.
    remix = _trained_remix()
    state = remix.state_dict()
    for row in state["replay"]["samples"]:
        row["prompt_ids"] = [torch.tensor(i) for i in row["prompt_ids"]]
        row["behaviour_logp"] = [torch.tensor(x) for x in row["behaviour_logp"]]
        row["advantage"] = torch.tensor(row["advantage"])
    save_worker_state(tmp_path, {"remix": state})
    loaded = load_worker_state(tmp_path)
    assert loaded is not None and _tensors(loaded)  # tensors, on the CPU (map_location)
    again = ReMix(_config(), "a")
    again.load_state_dict(loaded["remix"])
    assert _tensors(again.state_dict()) == []
    assert again.replay.samples == remix.replay.samples


def test_replayed_advantages_join_the_batch_on_the_policys_device(tmp_path: Path) -> None:
    again = _resumed(_trained_remix(), tmp_path)
    for device in (torch.device("cpu"), torch.device("meta")):
        batch = LearnerBatch([[1]], [[7]], torch.tensor([0.5], device=device), [None])
        mixed = with_replay(batch, list(again.replay.samples))
        assert mixed.advantages.device == device
        assert mixed.advantages.shape == (3,)
        assert mixed.advantages.dtype == torch.float32
    cpu = LearnerBatch([[1]], [[7]], torch.tensor([0.5]), [None])
    assert with_replay(cpu, list(again.replay.samples)).advantages.tolist() == [0.5, 0.75, -0.75]
