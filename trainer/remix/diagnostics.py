"""Behaviour and efficiency diagnostics of SPEC 5 (pure Python, every run logs them)."""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass


@functools.lru_cache(maxsize=16)
def reflection_pattern(markers: tuple[str, ...]) -> re.Pattern[str]:
    """One case-insensitive regex matching any marker as a whole word or phrase.

    A marker matches only between word boundaries (``"but"`` not in ``"butter"``,
    ``"check"`` in ``"double-check"`` and ``"Check:"``); inside a multi-word marker any
    run of whitespace matches its spaces. Longer markers are tried first.
    """
    words = [m.strip() for m in markers if m.strip()]
    if not words:
        raise ValueError("no reflection marker given")
    alternatives = [
        r"\s+".join(re.escape(part) for part in m.split())
        for m in sorted(set(words), key=lambda w: (-len(w), w))
    ]
    return re.compile(r"(?<!\w)(?:" + "|".join(alternatives) + r")(?!\w)", re.IGNORECASE)


def has_reflection(text: str, markers: Sequence[str]) -> bool:
    return reflection_pattern(tuple(markers)).search(text) is not None


def self_reflection_rate(texts: Sequence[str], markers: Sequence[str]) -> float:
    """Share of ``texts`` containing at least one marker (0 for no text)."""
    if not texts:
        return 0.0
    pattern = reflection_pattern(tuple(markers))
    return sum(pattern.search(t) is not None for t in texts) / len(texts)


@dataclass
class Consumption:
    """Rollouts and response tokens a policy has generated for training so far.

    Validation samples are not counted. Part of the checkpoint, so a resumed run keeps
    counting where it stopped.
    """

    rollouts: int = 0
    response_tokens: int = 0

    def add(self, response_lengths: Sequence[int]) -> None:
        self.rollouts += len(response_lengths)
        self.response_tokens += sum(response_lengths)

    def to_dict(self) -> dict[str, int]:
        return {"rollouts": self.rollouts, "response_tokens": self.response_tokens}

    @classmethod
    def from_dict(cls, data: dict[str, int]) -> Consumption:
        return cls(int(data["rollouts"]), int(data["response_tokens"]))
