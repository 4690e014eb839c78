"""Checkpoints that fit a workstation (issue 33): keep the newest N, and keep the optimizer
state (twice the model's size) in the newest only; the newest still resumes exactly."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from trainer import metrics as m
from trainer.checkpoint import (
    OPTIMIZER_FILE,
    STATE_FILE,
    CheckpointState,
    checkpoint_dir,
    complete_checkpoints,
    load_policy,
    prune,
    save_policy,
    write_state,
)
from trainer.config import ConfigError, RunConfig
from trainer.spool import decode_value, read_points

REPO = Path(__file__).resolve().parents[3]
POLICIES = ("a", "b")
POOL = [{"name": "a", "model": "zoo:tiny-llama-char"}]


def _save(run_dir: Path, step: int, **prune_options: Any) -> None:
    """A checkpoint of ``step`` as the workers and rank 0 write it (tiny files)."""
    for policy in POLICIES:
        directory = checkpoint_dir(run_dir, step) / policy
        directory.mkdir(parents=True)
        for name in ("model.safetensors", OPTIMIZER_FILE, "rng.pt"):
            (directory / name).write_bytes(b"x")
    write_state(run_dir, CheckpointState(step, {}), **prune_options)


def _steps(run_dir: Path) -> list[int]:
    return [state.step for state in complete_checkpoints(run_dir)]


def _with_optimizer(run_dir: Path) -> list[int]:
    return [
        step
        for step in _steps(run_dir)
        if all((checkpoint_dir(run_dir, step) / p / OPTIMIZER_FILE).exists() for p in POLICIES)
    ]


# --- pruning -----------------------------------------------------------------------------
def test_keep_last_two_leaves_the_two_newest(tmp_path: Path) -> None:
    for step in (10, 20, 30, 40):
        _save(tmp_path, step, keep_last=2)
    assert _steps(tmp_path) == [30, 40]
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [
        "step_000030",
        "step_000040",
    ]
    assert _with_optimizer(tmp_path) == [30, 40]  # "every": all keep it


def test_keep_last_none_keeps_every_checkpoint(tmp_path: Path) -> None:
    for step in (10, 20, 30, 40):
        _save(tmp_path, step, keep_last=None)
    assert _steps(tmp_path) == [10, 20, 30, 40]


def test_the_default_keeps_two_as_before(tmp_path: Path) -> None:
    for step in (10, 20, 30):
        _save(tmp_path, step)
    assert _steps(tmp_path) == [20, 30]


def test_optimizer_state_last_leaves_it_in_the_newest_only(tmp_path: Path) -> None:
    for step in (10, 20, 30, 40):
        _save(tmp_path, step, keep_last=3, optimizer_state="last")
        assert _with_optimizer(tmp_path) == [step]
    assert _steps(tmp_path) == [20, 30, 40]
    for step in (20, 30):  # the rest of an older checkpoint stays
        assert (checkpoint_dir(tmp_path, step) / "a" / "model.safetensors").exists()


def test_the_checkpoint_just_written_is_never_pruned(tmp_path: Path) -> None:
    _save(tmp_path, 10)
    _save(tmp_path, 20)
    prune(tmp_path, 10, keep_last=1, optimizer_state="last")  # an older "newest"
    assert 10 in _steps(tmp_path) and _with_optimizer(tmp_path)[0] == 10
    with pytest.raises(ValueError, match="keep_last must be >= 1"):
        prune(tmp_path, 20, keep_last=0)


def test_a_prune_killed_midway_is_finished_by_the_next(tmp_path: Path) -> None:
    for step in (10, 20):
        _save(tmp_path, step, keep_last=None)
    # Killed while deleting step 10: its state.json went first, some files are left.
    (checkpoint_dir(tmp_path, 10) / STATE_FILE).unlink()
    # And a job killed while saving step 30 left an incomplete checkpoint behind ...
    (checkpoint_dir(tmp_path, 30) / "a").mkdir(parents=True)
    assert _steps(tmp_path) == [20]
    _save(tmp_path, 25, keep_last=2)  # ... which resumed from 20 (25: the next one)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [
        "step_000020",
        "step_000025",
        "step_000030",  # newer than the one just written: not ours to delete
    ]


def test_a_checkpoint_without_optimizer_state_loads_with_a_fresh_optimizer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    save_policy(tmp_path, model, optimizer)

    again = torch.nn.Linear(3, 2)
    fresh = torch.optim.AdamW(again.parameters(), lr=0.1)
    assert load_policy(tmp_path, again, fresh)
    assert fresh.state_dict()["state"][0]["step"] == 1

    (tmp_path / OPTIMIZER_FILE).unlink()
    other = torch.nn.Linear(3, 2)
    restarted = torch.optim.AdamW(other.parameters(), lr=0.1)
    assert not load_policy(tmp_path, other, restarted)
    assert restarted.state_dict()["state"] == {}  # AdamW starts over
    assert torch.equal(other.weight, model.weight)  # the weights are the checkpoint's
    assert "not exact" in caplog.text


# --- the config ----------------------------------------------------------------------------
def test_a_stored_config_without_the_fields_reads_as_before() -> None:
    config = RunConfig.from_dict({"pool": POOL})
    assert (config.checkpoint_keep_last, config.checkpoint_optimizer_state) == (2, "every")
    assert RunConfig.from_dict(config.to_dict()).to_dict() == config.to_dict()


def test_the_fields_round_trip() -> None:
    data = {"pool": POOL, "checkpoint_keep_last": None, "checkpoint_optimizer_state": "last"}
    config = RunConfig.from_dict(data)
    assert (config.checkpoint_keep_last, config.checkpoint_optimizer_state) == (None, "last")
    assert RunConfig.from_json(config.to_json()).to_dict() == config.to_dict()


def test_bad_values_say_how_to_fix_them() -> None:
    with pytest.raises(ConfigError) as error:
        RunConfig.from_dict(
            {"pool": POOL, "checkpoint_keep_last": 0, "checkpoint_optimizer_state": "some"}
        )
    assert error.value.errors == {
        "checkpoint_keep_last": "checkpoint_keep_last must be >= 1 (or null to keep every "
        "checkpoint); got 0",
        "checkpoint_optimizer_state": "use one of ('every', 'last'): 'every' keeps the "
        "optimizer state in every checkpoint, 'last' only in the newest; got 'some'",
    }


def test_a_run_stored_before_the_fields_resumes(tmp_path: Path) -> None:
    from trainer.run import prepare_run_dir

    config = RunConfig.from_dict({"pool": POOL})
    stored = config.to_dict()
    del stored["checkpoint_keep_last"], stored["checkpoint_optimizer_state"]
    (tmp_path / "config.json").write_text(json.dumps(stored))
    prepare_run_dir(tmp_path, config, resume=True)  # no "the config differs"


# --- a real run ----------------------------------------------------------------------------
def _trainer(zoo_dir: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trainer", *map(str, args)],
        cwd=REPO,
        env={**os.environ, "MRL_ZOO_DIR": str(zoo_dir)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def _series(run_dir: Path) -> dict[tuple[str, str, int], float]:
    return {
        (p["policy"], p["key"], p["step"]): decode_value(p["value"])
        for p in read_points(run_dir)
        if p["key"] not in m.TIMING_KEYS
    }


@pytest.mark.slow
def test_the_newest_checkpoint_resumes_exactly_without_older_optimizer_states(
    zoo_dir: Path, tmp_path: Path
) -> None:
    config_path = tmp_path / "config.json"
    config_path.write_text(
        json.dumps(
            {
                "pool": [
                    {"name": "a", "model": "zoo:tiny-llama-char", "group_size": 4,
                     "max_new_tokens": 8, "micro_batch_size": 16},
                ],
                "task": {"kind": "arithmetic", "levels": [1], "val_size": 8},
                "steps": 6,
                "prompts_per_step": 4,
                "val_every": 2,
                "checkpoint_every": 2,
                "checkpoint_keep_last": 2,
                "checkpoint_optimizer_state": "last",
            }
        )
    )  # fmt: skip
    straight = tmp_path / "straight"
    result = _trainer(zoo_dir, "run", "--config", config_path, "--run-dir", straight)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "OMP_WAIT_POLICY=PASSIVE" in result.stderr  # a CPU worker
    assert _steps(straight) == [4, 6]
    policy_dirs = {s: checkpoint_dir(straight, s) / "a" for s in (4, 6)}
    assert not (policy_dirs[4] / OPTIMIZER_FILE).exists()
    assert (policy_dirs[6] / OPTIMIZER_FILE).exists()

    stopped = tmp_path / "stopped"  # stopped at step 4, then resumed from its checkpoint
    result = _trainer(zoo_dir, "run", "--config", config_path, "--run-dir", stopped, "--steps", "4")
    assert result.returncode == 0, result.stderr[-3000:]
    assert _steps(stopped) == [2, 4] and _with_optimizer_of(stopped) == [4]
    older = tmp_path / "older"
    shutil.copytree(stopped, older)
    result = _trainer(zoo_dir, "run", "--config", config_path, "--run-dir", stopped, "--resume")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "holds no optimizer state" not in result.stderr
    assert _series(stopped) == _series(straight)  # bit for bit

    # Resuming from an older checkpoint (the newest gone) works, and says it is not exact.
    shutil.rmtree(checkpoint_dir(older, 4))
    result = _trainer(zoo_dir, "run", "--config", config_path, "--run-dir", older, "--resume")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "holds no optimizer state" in result.stderr and "not exact" in result.stderr


def _with_optimizer_of(run_dir: Path) -> list[int]:
    return [
        step
        for step in _steps(run_dir)
        if (checkpoint_dir(run_dir, step) / "a" / OPTIMIZER_FILE).exists()
    ]
