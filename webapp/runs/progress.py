"""How far a run has got: steps done of its total, time elapsed, and an ETA.

One pure function, :func:`run_progress`, serves the run page (through the status API,
which passes the wall times of the run's last few steps, so the ETA follows the recent
step rate) and the runs list and sweep page (which pass none: the rate is then the
average since the job's first trained step, the run's ``pace_step`` / ``pace_at`` that
ingestion records, so a list needs no query per row).

Steps: the trainer evaluates at step 0, then trains steps 1..``steps`` (the config's
``steps``); ``last_step`` of ``steps`` is done.

Start-up is not a step: a job's first step carries the model loading, the step-0
evaluation and the first step's compilation and warm-up (a minute or more on a GPU, where
the next steps take seconds). So the run page's rate counts from the timestamp of the
job's first trained step (:data:`FIRST_TRAINED_STEP`, or the first step after a resume:
spotted by its long gap, :func:`job_steps`) to the newest step, and there is no ETA until
two steps have timestamps there.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from trainer.config import stored_total_steps

NO_VALUE = "\u2013"  # an en dash, as the pages show a missing value
# The run page's ETA follows the rate of this many recent steps.
RECENT_STEPS = 10
# Step 0 is the evaluation of the untrained models, right after they are loaded.
FIRST_TRAINED_STEP = 1
# A step that took this many times the quickest recent step's time is a restart (resumed
# job: the queue, loading), not the run's pace.
RESTART_FACTOR = 10.0
# Waiting for a job (a pending run that ran before, e.g. requeued, counts as started).
_WAITING = frozenset({"draft", "queued", "submitted"})
_TERMINAL = frozenset({"completed", "failed", "cancelled"})


@dataclass(frozen=True)
class Progress:
    """What the progress bar and its text show; times in seconds."""

    state: str
    step: int | None
    total_steps: int | None
    elapsed_s: float | None
    eta_s: float | None
    steps_per_s: float | None

    @property
    def started(self) -> bool:
        return self.elapsed_s is not None

    @property
    def finished(self) -> bool:
        return self.state in _TERMINAL

    @property
    def fraction(self) -> float:
        """Steps done of the total, in [0, 1] (0 when either is unknown)."""
        if not self.total_steps or self.step is None:
            return 0.0
        return min(1.0, max(0.0, self.step / self.total_steps))

    @property
    def percent(self) -> int:
        return math.floor(100 * self.fraction)

    @property
    def duration_text(self) -> str:
        """The run's duration (so far, while it runs); :data:`NO_VALUE` before it starts."""
        return format_duration(self.elapsed_s)

    @property
    def text(self) -> str:
        """e.g. "step 30/60 · 2m10s elapsed · ETA 2m"; "step 60/60 · ran 4m10s"; "queued"
        ("queued · step 40/60" once resubmitted); "starting · 12s elapsed" before the
        first step is reported."""
        total = "?" if self.total_steps is None else str(self.total_steps)
        done = f"step {NO_VALUE if self.step is None else self.step}/{total}"
        if not self.started:  # a resubmitted run waits with the steps it has done
            return self.state if self.step is None else f"{self.state} · {done}"
        if self.step is None and not self.finished:  # started, no step reported yet
            return f"starting · {format_duration(self.elapsed_s)} elapsed"
        parts = [done]
        if self.finished:
            parts.append(f"ran {format_duration(self.elapsed_s)}")
            if self.state != "completed":
                parts.append(self.state)
        else:
            parts.append(f"{format_duration(self.elapsed_s)} elapsed")
            parts.append(f"ETA {NO_VALUE if self.eta_s is None else format_eta(self.eta_s)}")
        return " · ".join(parts)

    def as_json(self) -> dict[str, Any]:
        return {
            "total_steps": self.total_steps,
            "elapsed_s": _rounded(self.elapsed_s),
            "eta_s": _rounded(self.eta_s),
            "steps_per_s": None if self.steps_per_s is None else round(self.steps_per_s, 4),
            "progress": round(self.fraction, 4),
            "progress_text": self.text,
        }


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 1)


def total_steps_of(config: object) -> int | None:
    """The run's last step: the config's ``steps`` plus the steps its regime runs after
    them (sequential SFT's ``sft_steps``); None when ``steps`` is absent or not a positive
    integer (:func:`trainer.config.stored_total_steps`)."""
    return stored_total_steps(config)


def step_rate(recent: Sequence[tuple[int, float]]) -> float | None:
    """Steps per second over ``recent`` (step, wall time) samples, from the first to the
    last (so the first one's own time does not count); None with fewer than two distinct
    steps or no time between them."""
    samples = sorted((step, at) for step, at in recent if math.isfinite(at))
    if len(samples) < 2:
        return None
    (first_step, first_at), (last_step, last_at) = samples[0], samples[-1]
    if last_step <= first_step or last_at <= first_at:
        return None
    return (last_step - first_step) / (last_at - first_at)


def job_steps(recent: Sequence[tuple[int, float]]) -> list[tuple[int, float]]:
    """The samples of ``recent`` that time this job's steps, by step: trained steps (not
    the step-0 evaluation), finite times, and from the job's first step on: after a
    resume, the step that took over :data:`RESTART_FACTOR` times the quickest step's time
    (the queue and the new job's start-up) starts the samples."""
    samples = sorted(
        (step, at) for step, at in recent if step >= FIRST_TRAINED_STEP and math.isfinite(at)
    )
    per_step = [
        (b_at - a_at) / (b_step - a_step)
        for (a_step, a_at), (b_step, b_at) in itertools.pairwise(samples)
        if b_step > a_step
    ]
    quickest = min((time for time in per_step if time > 0), default=None)
    if quickest is None:
        return samples
    for i in range(len(samples) - 1, 0, -1):
        (a_step, a_at), (b_step, b_at) = samples[i - 1], samples[i]
        if b_step > a_step and (b_at - a_at) / (b_step - a_step) > RESTART_FACTOR * quickest:
            return samples[i:]
    return samples


def run_progress(
    *,
    state: str,
    last_step: int | None,
    total_steps: int | None,
    started_at: datetime | None,
    finished_at: datetime | None,
    now: datetime,
    recent: Sequence[tuple[int, float]] | None = None,
    pace: tuple[int | None, datetime | None] = (None, None),
) -> Progress:
    """The progress of a run in ``state`` at ``now``.

    ``recent``: (step, wall time in epoch seconds) of the run's last steps (the run page).
    Their rate gives the ETA, counted from the newest of them (so it runs down between
    points). The rate leaves start-up out: it runs from the job's first trained step to
    its newest (:func:`job_steps`), so there is no ETA before two of them have times.
    ``recent`` None (a list page, which reads no times): the rate is the average since
    ``pace``, the (step, time) at which this job reported its first trained step (the
    run's ``pace_step``, ``pace_at``); no ETA before a later step arrives. A run not
    started (draft, queued, submitted, or pending before it ever ran) has no elapsed time;
    a finished one has its duration as elapsed time and no ETA.
    """
    if started_at is None or state in _WAITING:
        return Progress(state, last_step, total_steps, None, None, None)
    end = finished_at if state in _TERMINAL and finished_at is not None else now
    elapsed = max(0.0, (end - started_at).total_seconds())
    if state in _TERMINAL:
        return Progress(state, last_step, total_steps, elapsed, None, None)
    rate = None
    since_last = 0.0
    if recent is not None:
        timed = job_steps(recent)
        rate = step_rate(timed)
        if rate is not None:
            newest = max(at for _, at in timed)
            since_last = min(max(0.0, now.timestamp() - newest), elapsed)
    else:
        rate = _pace_rate(pace, started_at, last_step, now)
    eta = None
    if rate and total_steps is not None and last_step is not None:
        eta = max(0.0, (total_steps - last_step) / rate - since_last)
    return Progress(state, last_step, total_steps, elapsed, eta, rate)


def _pace_rate(
    pace: tuple[int | None, datetime | None],
    started_at: datetime,
    last_step: int | None,
    now: datetime,
) -> float | None:
    """Steps per second since this job's first trained step; None before a later step, or
    when the mark is a previous job's (set before ``started_at``)."""
    pace_step, pace_at = pace
    if pace_step is None or pace_at is None or last_step is None or pace_at < started_at:
        return None
    seconds = (now - pace_at).total_seconds()
    if last_step <= pace_step or seconds <= 0:
        return None
    return (last_step - pace_step) / seconds


def format_duration(seconds: float | None) -> str:
    """ "45s", "2m10s", "1h05m", "3d4h"; :data:`NO_VALUE` for None."""
    if seconds is None:
        return NO_VALUE
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours}h"


def format_eta(seconds: float) -> str:
    """Coarser than a duration: "40s", "2m", "1h05m"."""
    if math.ceil(seconds) < 60:
        return f"{math.ceil(seconds)}s"
    if seconds < 3600:
        return f"{round(seconds / 60)}m"
    return format_duration(seconds)
