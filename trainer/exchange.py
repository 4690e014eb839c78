"""SEE, the Shared Experience Exchange: a typed publish/subscribe step over
torch.distributed.

Every worker (one per policy) calls :meth:`SharedExperienceExchange.exchange` once per
step with a :class:`StepRecord`; the call is an all-gather, so it is also the pool's step
barrier. After the update each worker sends its metrics and events to rank 0 alone
(:meth:`~SharedExperienceExchange.report`, a gather), which spools them. The exchange
enforces the shared prompt schedule (every policy must be on the same step with the same
prompts) and only lets declared topics cross processes: a regime declares what it
publishes (e.g. rewards only for XGRPO) and nothing else is sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch.distributed as dist


class ScheduleMismatchError(RuntimeError):
    """Policies disagree on the step or the prompts: the shared schedule is broken."""


@dataclass
class StepRecord:
    """What one policy publishes at one step."""

    policy: str
    step: int
    prompt_ids: tuple[str, ...]
    metrics: dict[str, float] = field(default_factory=dict)
    """This policy's metrics for the step (rank 0 writes the pool's spool)."""
    topics: dict[str, Any] = field(default_factory=dict)
    """Regime payloads by topic name; only topics declared to the exchange may appear."""
    events: list[dict[str, Any]] = field(default_factory=list)
    """Transfer events this policy recorded as a learner (rank 0 spools them)."""


class SharedExperienceExchange:
    """All-gather of :class:`StepRecord` across the pool's workers."""

    def __init__(self, *, topics: Mapping[str, type] | None = None) -> None:
        self.topics = dict(topics or {})
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()

    def exchange(self, record: StepRecord) -> list[StepRecord]:
        """Publish ``record`` and receive every policy's record, in rank order."""
        for name, value in record.topics.items():
            expected = self.topics.get(name)
            if expected is None:
                raise ValueError(
                    f"topic {name!r} is not declared to the exchange; declared: "
                    f"{sorted(self.topics) or 'none'}"
                )
            if not isinstance(value, expected):
                raise TypeError(f"topic {name!r} carries {type(value).__name__}, not {expected}")
        gathered: list[StepRecord | None] = [None] * self.world_size
        dist.all_gather_object(gathered, record)
        records = [r for r in gathered if r is not None]
        check_shared_schedule(records)
        return records

    def report(self, record: StepRecord) -> list[StepRecord] | None:
        """Send ``record`` (a step's metrics and events) to rank 0, which writes the
        pool's spool: every policy's record in rank order there, None elsewhere.

        A gather, not an all-gather: nobody but rank 0 reads them, and the events carry
        their samples, so an all-gather sent every rank's events to every rank, N(N-1)
        copies where N-1 do (bench/scaling.py)."""
        if record.topics:
            raise ValueError("a report carries metrics and events, not topics")
        gathered: list[StepRecord | None] | None = (
            [None] * self.world_size if self.rank == 0 else None
        )
        dist.gather_object(record, gathered, dst=0)
        if gathered is None:
            return None
        records = [r for r in gathered if r is not None]
        check_shared_schedule(records)
        return records

    def barrier(self) -> None:
        dist.barrier()


def check_shared_schedule(records: list[StepRecord]) -> None:
    """Raise :class:`ScheduleMismatchError` unless all records share step and prompts."""
    first = records[0]
    for other in records[1:]:
        if other.step != first.step or other.prompt_ids != first.prompt_ids:
            raise ScheduleMismatchError(
                f"policy {other.policy!r} is at step {other.step} with "
                f"{len(other.prompt_ids)} prompts, policy {first.policy!r} at step "
                f"{first.step}: every policy must see the same prompts each step"
            )
