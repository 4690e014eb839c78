"""Rollout engines behind one interface: HF ``generate`` (CPU, tests) today; a vLLM
engine for GPU runs implements the same :class:`RolloutEngine` protocol later."""

from trainer.rollout.engine import HFRolloutEngine, RolloutBatch, RolloutEngine

__all__ = ["HFRolloutEngine", "RolloutBatch", "RolloutEngine"]
