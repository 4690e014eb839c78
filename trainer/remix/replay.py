"""The per-policy replay of ReMix (SPEC 5): the last N policy versions' own rollouts.

Pure Python (no torch). A *policy version* is the policy's weights at the start of a
training step: version ``k`` sampled the fresh rollouts of step ``k`` and trains on
them (and on replayed ones) during step ``k``. After step ``k`` its rollouts enter the
replay, and everything older than version ``k - N + 1`` is evicted, so while step ``k``
runs the replay holds versions ``k - N .. k - 1``: a replayed sample is 1 to ``N``
versions old, never older.

Each sample keeps what the mix-policy surrogate needs: its tokens, the per-token
behaviour log-probs of the version that sampled it (``log pi_{k-i}``) and the advantage
it was given when fresh (by the sharing regime: own group, pooled group, ...).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class ReplaySample:
    """One own rollout kept for reuse."""

    version: int
    """The policy version (training step) that sampled it."""
    prompt_ids: tuple[int, ...]
    response_ids: tuple[int, ...]
    behaviour_logp: tuple[float, ...]
    """``log pi_version`` of each response token."""
    advantage: float

    def __post_init__(self) -> None:
        if len(self.behaviour_logp) != len(self.response_ids):
            raise ValueError(
                f"{len(self.behaviour_logp)} behaviour log-probs for "
                f"{len(self.response_ids)} response tokens"
            )


class ReplayBuffer:
    """Samples of the last ``versions`` policy versions, evicted by version."""

    def __init__(self, versions: int) -> None:
        if versions < 1:
            raise ValueError(f"a replay keeps at least 1 version, got {versions}")
        self.versions = versions
        self._samples: list[ReplaySample] = []

    def __len__(self) -> int:
        return len(self._samples)

    @property
    def samples(self) -> tuple[ReplaySample, ...]:
        return tuple(self._samples)

    def held_versions(self) -> list[int]:
        return sorted({s.version for s in self._samples})

    def add(self, version: int, samples: Sequence[ReplaySample]) -> None:
        """Add version ``version``'s samples; evict every version older than N back."""
        if any(s.version != version for s in samples):
            raise ValueError(f"every sample added as version {version} must carry it")
        newest = max([version, *(s.version for s in self._samples)])
        if version < newest:
            raise ValueError(f"version {version} is older than the replay's newest ({newest})")
        oldest_kept = version - self.versions + 1
        self._samples = [s for s in self._samples if s.version >= oldest_kept]
        self._samples.extend(samples)

    def sample(self, n: int, current_version: int, rng: random.Random) -> list[ReplaySample]:
        """Up to ``n`` samples without replacement, each 1..N versions older than
        ``current_version``, in the buffer's order of a seeded draw."""
        eligible = [s for s in self._samples if 1 <= current_version - s.version <= self.versions]
        if n <= 0 or not eligible:
            return []
        chosen = sorted(rng.sample(range(len(eligible)), min(n, len(eligible))))
        return [eligible[i] for i in chosen]

    def clear(self) -> None:
        self._samples = []

    # --- checkpoint -----------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"versions": self.versions, "samples": [asdict(s) for s in self._samples]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned, every value as a plain int or float
        (nothing device-bound survives a resume)."""
        if state["versions"] != self.versions:
            raise ValueError(
                f"the checkpoint's replay keeps {state['versions']} versions, "
                f"this run {self.versions}"
            )
        self._samples = [
            ReplaySample(
                version=int(s["version"]),
                prompt_ids=tuple(int(i) for i in s["prompt_ids"]),
                response_ids=tuple(int(i) for i in s["response_ids"]),
                behaviour_logp=tuple(float(x) for x in s["behaviour_logp"]),
                advantage=float(s["advantage"]),
            )
            for s in state["samples"]
        ]
