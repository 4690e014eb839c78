"""Checkpoints: every policy's weights, optimizer and RNG states, plus the spool cursor.

Layout under the run directory::

    checkpoints/step_000050/<policy>/model.safetensors, optimizer.pt, rng.pt
    checkpoints/step_000050/<policy>/worker.pt  # counters, ReMix replay and reincarnation
    checkpoints/step_000050/<policy>/reference.safetensors  # only once ReMix reincarnated
    checkpoints/step_000050/state.json      # written last, by rank 0: "complete"

A checkpoint counts only once ``state.json`` exists, so a job killed while saving
resumes from the previous one.

Once a checkpoint is complete, the older ones are pruned (:func:`write_state`): all but
the newest ``keep_last`` are deleted (``RunConfig.checkpoint_keep_last``; None keeps
them all), and with ``optimizer_state="last"`` (``RunConfig.checkpoint_optimizer_state``)
the older ones lose their ``optimizer.pt``: AdamW's state is twice the model's size, and
only the newest checkpoint, the one a run resumes from, needs it for an exact resume. A
checkpoint without it still loads (:func:`load_policy`), with AdamW's moments restarted.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

log = logging.getLogger("trainer.checkpoint")

STATE_FILE = "state.json"
OPTIMIZER_FILE = "optimizer.pt"
WORKER_STATE_FILE = "worker.pt"
REFERENCE_FILE = "reference.safetensors"


@dataclass(frozen=True)
class CheckpointState:
    """What rank 0 records once every policy has saved."""

    step: int
    spool_offsets: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "spool_offsets": self.spool_offsets}


CHECKPOINTS_DIR = "checkpoints"
"""The folder of a run directory that holds its ``step_NNNNNN`` checkpoints."""


def checkpoint_dir(run_dir: Path, step: int) -> Path:
    return run_dir / CHECKPOINTS_DIR / f"step_{step:06d}"


def read_state(state_file: Path) -> CheckpointState:
    """The state a complete checkpoint recorded (``KeyError`` / ``ValueError`` /
    ``TypeError`` when the file is not one the trainer wrote)."""
    data = json.loads(state_file.read_text())
    return CheckpointState(step=int(data["step"]), spool_offsets=data["spool_offsets"])


def rng_state() -> dict[str, Any]:
    """Every random generator a worker draws from: torch's CPU one, CUDA's (when this
    process uses CUDA: sampling on a GPU draws there), Python's and numpy's."""
    state = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": np.random.get_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    cuda = state.get("cuda")
    if cuda is not None and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)


def save_weights(path: Path, model: torch.nn.Module) -> None:
    """Save ``model``'s weights to ``path`` (safetensors; tied tensors once)."""
    weights = {name: tensor.detach().contiguous() for name, tensor in model.state_dict().items()}
    # Tied weights share storage; safetensors refuses duplicates, so save each once.
    seen: dict[int, str] = {}
    unique = {}
    for name, tensor in weights.items():
        key = tensor.data_ptr()
        if key in seen:
            continue
        seen[key] = name
        unique[name] = tensor
    save_file(unique, str(path))


def load_weights(path: Path, model: torch.nn.Module) -> None:
    """Load what :func:`save_weights` wrote into ``model``."""
    weights = load_file(str(path))
    missing, unexpected = model.load_state_dict(weights, strict=False)
    if unexpected:
        raise RuntimeError(f"checkpoint {path} has unknown tensors: {unexpected[:5]}")
    tied = {name for name in missing if _is_tied(model, name)}
    if set(missing) - tied:
        raise RuntimeError(f"checkpoint {path} lacks tensors: {sorted(set(missing) - tied)}")


def save_policy(directory: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Save one policy's weights, optimizer state and RNG states into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    save_weights(directory / "model.safetensors", model)
    torch.save(optimizer.state_dict(), directory / OPTIMIZER_FILE)
    torch.save(rng_state(), directory / "rng.pt")


def load_policy(directory: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> bool:
    """Restore what :func:`save_policy` wrote (weights, optimizer, RNG states); False
    when the checkpoint holds no optimizer state (an older checkpoint of a run that keeps
    it in the last one only): the optimizer then starts afresh (AdamW's moments at zero,
    its step count at 0), so the run continues but does not reproduce the uninterrupted
    one."""
    load_weights(directory / "model.safetensors", model)
    has_optimizer = (directory / OPTIMIZER_FILE).exists()
    if has_optimizer:
        # Read onto the CPU whatever device wrote them: load_state_dict moves the
        # optimizer's state to each parameter's device (a GPU checkpoint resumes on a CPU
        # node too).
        optimizer.load_state_dict(
            torch.load(directory / OPTIMIZER_FILE, weights_only=False, map_location="cpu")
        )
    else:
        log.warning(
            "%s holds no optimizer state (checkpoint_optimizer_state 'last' keeps it in the "
            "newest checkpoint only): AdamW's moments restart from zero, so this resume is "
            "not exact; resume from the newest checkpoint for an exact one",
            directory,
        )
    set_rng_state(torch.load(directory / "rng.pt", weights_only=False, map_location="cpu"))
    return has_optimizer


def save_worker_state(directory: Path, state: dict[str, Any]) -> None:
    """Save a worker's own state besides the model (counters, ReMix's replay, ...)."""
    directory.mkdir(parents=True, exist_ok=True)
    torch.save(state, directory / WORKER_STATE_FILE)


def load_worker_state(directory: Path) -> dict[str, Any] | None:
    """What :func:`save_worker_state` wrote, or None for a checkpoint without it."""
    path = directory / WORKER_STATE_FILE
    return torch.load(path, weights_only=False, map_location="cpu") if path.exists() else None


def _is_tied(model: torch.nn.Module, name: str) -> bool:
    """True if parameter ``name`` shares storage with another (e.g. tied embeddings)."""
    state = model.state_dict()
    pointer = state[name].data_ptr()
    return any(other != name and t.data_ptr() == pointer for other, t in state.items())


def write_state(
    run_dir: Path,
    state: CheckpointState,
    *,
    keep_last: int | None = 2,
    optimizer_state: str = "every",
) -> None:
    """Mark the checkpoint of ``state.step`` complete, then prune older ones
    (:func:`prune`). Call it once every policy has saved."""
    directory = checkpoint_dir(run_dir, state.step)
    tmp = directory / f"{STATE_FILE}.tmp"
    tmp.write_text(json.dumps(state.to_dict()))
    os.replace(tmp, directory / STATE_FILE)
    prune(run_dir, state.step, keep_last=keep_last, optimizer_state=optimizer_state)


def prune(
    run_dir: Path, newest: int, *, keep_last: int | None = 2, optimizer_state: str = "every"
) -> None:
    """Prune the checkpoints older than the complete one of step ``newest``, which is
    never touched: with ``keep_last`` set, delete all complete checkpoints but the newest
    ``keep_last`` (and the incomplete ones older than ``newest``: leftovers of a job
    killed while saving or pruning); with ``optimizer_state="last"``, delete the
    optimizer state of every older one kept.

    Safe to stop at any point: a deleted checkpoint loses its ``state.json`` first (so it
    no longer counts), and the next prune finishes what a killed one began."""
    if keep_last is not None and keep_last < 1:
        raise ValueError(f"keep_last must be >= 1 or None; got {keep_last}")
    complete = [c.step for c in complete_checkpoints(run_dir) if c.step <= newest]
    kept = complete if keep_last is None else complete[-keep_last:]
    if newest not in kept:
        kept.append(newest)
    if keep_last is not None:
        for step_dir in sorted((run_dir / CHECKPOINTS_DIR).glob("step_*")):
            step = _step_of(step_dir)
            if step is None or step >= newest or step in kept:
                continue
            (step_dir / STATE_FILE).unlink(missing_ok=True)
            shutil.rmtree(step_dir, ignore_errors=True)
    if optimizer_state == "last":
        for step in kept:
            if step != newest:
                for path in checkpoint_dir(run_dir, step).glob(f"*/{OPTIMIZER_FILE}"):
                    path.unlink(missing_ok=True)


def _step_of(step_dir: Path) -> int | None:
    """The step of a ``step_NNNNNN`` folder; None for anything else."""
    digits = step_dir.name.removeprefix("step_")
    return int(digits) if digits.isdigit() and step_dir.is_dir() else None


def complete_checkpoints(run_dir: Path) -> list[CheckpointState]:
    """Every complete checkpoint, oldest first."""
    states = [
        read_state(state_file)
        for state_file in (run_dir / CHECKPOINTS_DIR).glob(f"step_*/{STATE_FILE}")
    ]
    return sorted(states, key=lambda s: s.step)


def latest_checkpoint(run_dir: Path) -> CheckpointState | None:
    states = complete_checkpoints(run_dir)
    return states[-1] if states else None
