"""The append-only JSONL spool of metric points and transfer events (SPEC section 8).

The trainer writes every metric point to ``<run_dir>/metrics.jsonl`` and every
peer-transfer event to ``<run_dir>/events.jsonl`` before anything is shipped to the web
app, one JSON object per line with exactly the fields of the ingestion contract (SPEC
8.1, :mod:`trainer.wire`) and nothing else. :mod:`trainer.shipper` reads these files and
sends them on.

Guarantees:

* Each :meth:`Spool.append_points` / :meth:`Spool.append_events` call writes all its
  lines with one ``os.write`` on an ``O_APPEND`` descriptor, so lines never interleave
  and a reader never sees a torn line in the middle of a file; at worst the *last* line
  is incomplete (the process died mid-write, or a reader raced the writer). Readers
  therefore only trust lines that end in ``"\\n"``.
* Opening a :class:`Spool` drops a torn last line left by a crash.
* :meth:`Spool.offsets` / :meth:`Spool.truncate` let a resumed run cut both files back to
  what its checkpoint had recorded, so the resumed steps rewrite the same lines. Each
  truncation is also logged to ``<run_dir>/spool_truncations.jsonl`` so a shipper that
  already read past the cut knows to move its cursor back (see :mod:`trainer.shipper`).
* What is written, the web app accepts: :func:`make_point`, :func:`make_event` and
  :func:`make_sample` check every field against the contract's definitions (types,
  lengths, bounds, the registered event kinds) and raise :class:`~trainer.wire.WireError`
  (a ``TypeError`` and a ``ValueError``) naming the field; a sample's text and tokens,
  which may be long, are cut to the contract's bounds instead, and say so.

Non-finite values travel as the strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"``
(:func:`make_point` encodes them, :func:`decode_value` decodes them).
"""

from __future__ import annotations

import json
import logging
import math
import numbers
import os
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from trainer.wire import (
    EVENT,
    EVENT_KINDS,
    MAX_EVENT_SAMPLES,
    MAX_SAMPLE_REASON,
    MAX_SAMPLE_TEXT,
    MAX_SAMPLE_TOKENS,
    MAX_TOKEN_CHARS,
    NON_FINITE,
    POINT,
    Field,
    Record,
    WireError,
    clip_text,
    decode_value,
    encode_value,
    event_kind_names,
)

logger = logging.getLogger("trainer.spool")

METRICS_FILE = "metrics.jsonl"
EVENTS_FILE = "events.jsonl"
TRUNCATIONS_FILE = "spool_truncations.jsonl"

POINT_FIELDS = POINT.written
"""A point line's fields, in order (every field of the contract's point)."""
EVENT_WRITTEN_FIELDS = EVENT.written
"""The fields every event line is written with, in order (what ingestion accepts is
``webapp.metrics.batch.EVENT_ALLOWED_FIELDS``, these and the optional ones)."""
EVENT_OPTIONAL_FIELDS = EVENT.optional
"""The fields an event line has only when known (``samples``)."""

__all__ = [
    "EVENTS_FILE",
    "EVENT_KINDS",
    "EVENT_OPTIONAL_FIELDS",
    "EVENT_WRITTEN_FIELDS",
    "MAX_EVENT_SAMPLES",
    "MAX_SAMPLE_TEXT",
    "MAX_SAMPLE_TOKENS",
    "MAX_TOKEN_CHARS",
    "METRICS_FILE",
    "NON_FINITE",
    "POINT_FIELDS",
    "TRUNCATIONS_FILE",
    "Event",
    "Point",
    "Sample",
    "Spool",
    "SpoolOffsets",
    "WireError",
    "complete_length",
    "decode_value",
    "encode_line",
    "encode_value",
    "make_event",
    "make_point",
    "make_sample",
    "normalize_event",
    "normalize_point",
    "read_complete_lines",
    "read_events",
    "read_points",
    "read_truncations",
]

_POLICY, _KEY, _STEP, _WALL_TIME = (POINT[name] for name in ("policy", "key", "step", "wall_time"))
_SOURCE, _TARGET, _PROMPT_ID = (EVENT[name] for name in ("source", "target", "prompt_id"))
_COUNT, _WEIGHT = EVENT["count"], EVENT["weight"]


class Point(TypedDict):
    """One metric value of one policy at one step (SPEC 8.1 ``points``)."""

    policy: str
    key: str
    step: int
    value: float | str
    wall_time: float


class Event(TypedDict):
    """One peer-transfer event (SPEC 8.1 ``events``)."""

    step: int
    source: str
    target: str
    kind: str
    prompt_id: str
    count: int
    weight: float | None
    samples: NotRequired[list[Sample]]


class Sample(TypedDict):
    """One response that crossed with an event: its text and, where THL retokenized it,
    its tokens in the target's tokenizer; whether it ended with EOS (``finished``) and why
    it counted (``reason``), where known (:func:`make_sample`)."""

    text: str
    tokens: NotRequired[list[str]]
    reward: NotRequired[float | None]
    finished: NotRequired[bool]
    reason: NotRequired[str]
    truncated: bool


# --------------------------------------------------------------------------- fields


def _is_real(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _is_integral(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _check_name(spec: Field, value: object) -> str:
    """A name field (``policy``, ``source``, ...): a non-empty string the contract takes."""
    if not isinstance(value, str) or not value:
        raise WireError(f"{spec.name} must be a non-empty string, not {value!r}")
    problem = spec.text_problem(value)
    if problem is not None:
        raise WireError(f"{spec.name}: {problem}")
    return value


def _check_count(spec: Field, value: Any) -> int:
    """An integer field (numpy integers too) within the contract's bounds."""
    if not _is_integral(value) or not spec.minimum <= int(value) <= spec.maximum:
        raise WireError(
            f"{spec.name} must be an integer in [{spec.minimum}, {spec.maximum}], not {value!r}"
        )
    return int(value)


def _check_finite(spec: Field, value: Any) -> float:
    if not _is_real(value) or not math.isfinite(float(value)):
        raise WireError(f"{spec.name} must be a finite number, not {value!r}")
    return float(value)


# --------------------------------------------------------------------------- records


def make_point(
    policy: str, key: str, step: int, value: float | str, wall_time: float | None = None
) -> Point:
    """A validated metric point; non-finite values become strings.

    ``wall_time`` (seconds since the epoch) defaults to now. Raises
    :class:`~trainer.wire.WireError` on a field the contract refuses.
    """
    return {
        "policy": _check_name(_POLICY, policy),
        "key": _check_name(_KEY, key),
        "step": _check_count(_STEP, step),
        "value": encode_value(value),
        "wall_time": _check_finite(_WALL_TIME, time.time() if wall_time is None else wall_time),
    }


def make_sample(
    text: str,
    tokens: list[str] | None = None,
    reward: float | None = None,
    *,
    finished: bool | None = None,
    reason: str | None = None,
) -> Sample:
    """What crossed with an event, cut to the contract's bounds (``truncated`` says so):
    the response ``text`` and, for THL paths, its ``tokens`` in the target's tokenizer;
    ``finished`` (it ended with EOS, not cut off at ``max_new_tokens``) and ``reason``
    (why it counted: :func:`trainer.tasks.rewards.score_reason`) when known."""
    if not isinstance(text, str):
        raise WireError(f"text must be a string, not {type(text).__name__}")
    sample_text, truncated = clip_text(text, MAX_SAMPLE_TEXT)
    sample: Sample = {"text": sample_text, "truncated": truncated}
    if tokens is not None:
        kept = [clip_text(str(t), MAX_TOKEN_CHARS) for t in tokens[:MAX_SAMPLE_TOKENS]]
        sample["tokens"] = [token for token, _ in kept]
        truncated = len(tokens) > MAX_SAMPLE_TOKENS or any(cut for _, cut in kept)
        sample["truncated"] = sample["truncated"] or truncated
    if reward is not None and math.isfinite(float(reward)):
        sample["reward"] = float(reward)  # a non-finite reward is left out, as unknown
    if finished is not None:
        sample["finished"] = bool(finished)
    if reason is not None:
        if not isinstance(reason, str):
            raise WireError(f"reason must be a string, not {type(reason).__name__}")
        # Clipped without marking ``truncated``: that flag is about the text and tokens.
        sample["reason"] = clip_text(reason, MAX_SAMPLE_REASON)[0]
    return sample


def _check_samples(samples: Any) -> list[Sample]:
    """``samples`` re-cut by :func:`make_sample`, at most :data:`MAX_EVENT_SAMPLES` (the
    event's ``count`` still says how many crossed)."""
    if not isinstance(samples, list):
        raise WireError(f"samples must be a list, not {type(samples).__name__}")
    checked = []
    for sample in samples[:MAX_EVENT_SAMPLES]:
        if not isinstance(sample, Mapping) or "text" not in sample:
            raise WireError(f"a sample is a dict with a text, not {sample!r}")
        again = make_sample(
            sample["text"],
            sample.get("tokens"),
            sample.get("reward"),
            finished=sample.get("finished"),
            reason=sample.get("reason"),
        )
        again["truncated"] = again["truncated"] or bool(sample.get("truncated"))
        checked.append(again)
    return checked


def make_event(
    step: int,
    source: str,
    target: str,
    kind: str,
    prompt_id: str,
    count: int = 1,
    weight: float | None = None,
    samples: list[Sample] | None = None,
) -> Event:
    """A validated peer-transfer event. ``kind`` is an event kind of a registered regime
    (:func:`trainer.wire.event_kind_names`); ``samples`` (from :func:`make_sample`; the
    first :data:`MAX_EVENT_SAMPLES` are kept) is what crossed, left out of the record when
    None."""
    kinds = event_kind_names()
    if kind not in kinds:
        raise WireError(f"kind must be one of {list(kinds)}, not {kind!r}")
    event: Event = {
        "step": _check_count(_STEP, step),
        "source": _check_name(_SOURCE, source),
        "target": _check_name(_TARGET, target),
        "kind": kind,
        "prompt_id": _check_name(_PROMPT_ID, prompt_id),
        "count": _check_count(_COUNT, count),
        "weight": None if weight is None else _check_finite(_WEIGHT, weight),
    }
    if samples is not None:
        event["samples"] = _check_samples(samples)
    return event


def _check_fields(record: Mapping[str, Any], contract: Record, what: str) -> None:
    """``record`` has every field the writer always writes, and maybe those it writes
    when known; nothing else."""
    if not isinstance(record, Mapping) or not set(contract.written) <= record.keys() <= (
        contract.allowed
    ):
        got = sorted(record) if isinstance(record, Mapping) else type(record).__name__
        optional = contract.optional
        extra = f" (and optionally {list(optional)})" if optional else ""
        raise WireError(
            f"a {what} has exactly the fields {list(contract.written)}{extra}, got {got}"
        )


def normalize_point(record: Mapping[str, Any]) -> Point:
    """Validate a point given as a plain dict (exact fields, wall_time required)."""
    _check_fields(record, POINT, "point")
    return make_point(**record)


def normalize_event(record: Mapping[str, Any]) -> Event:
    """Validate an event given as a plain dict (exact fields, samples optional)."""
    _check_fields(record, EVENT, "event")
    return make_event(**record)


def encode_line(record: Point | Event) -> bytes:
    """One spool line: compact JSON, strictly standard (no NaN literals), then ``\\n``."""
    text = json.dumps(record, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.encode("utf-8") + b"\n"


# --------------------------------------------------------------------------- offsets


@dataclass(frozen=True)
class SpoolOffsets:
    """Byte sizes of the two spool files; a checkpoint stores them to resume exactly."""

    metrics: int = 0
    events: int = 0

    def __post_init__(self) -> None:
        for name in ("metrics", "events"):
            value = getattr(self, name)
            if not _is_integral(value) or value < 0:
                raise ValueError(f"SpoolOffsets.{name} must be an integer >= 0, not {value!r}")

    def to_dict(self) -> dict[str, int]:
        """``{"metrics": bytes, "events": bytes}``."""
        return {"metrics": self.metrics, "events": self.events}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SpoolOffsets:
        """The inverse of :meth:`to_dict`; raises ``ValueError`` on anything else."""
        if not isinstance(data, dict) or set(data) != {"metrics", "events"}:
            raise ValueError(f"spool offsets are {{'metrics': int, 'events': int}}, not {data!r}")
        return cls(metrics=data["metrics"], events=data["events"])


# --------------------------------------------------------------------------- reading


def complete_length(path: Path, limit: int | None = None, chunk: int = 65536) -> int:
    """Bytes of ``path`` (up to ``limit``) that end with its last complete line.

    That is the offset just after the last ``"\\n"`` at or before ``limit`` (0 if none or
    if the file does not exist).
    """
    try:
        with open(path, "rb") as handle:
            end = os.fstat(handle.fileno()).st_size
            end = end if limit is None else min(end, limit)
            while end > 0:
                start = max(0, end - chunk)
                handle.seek(start)
                found = handle.read(end - start).rfind(b"\n")
                if found >= 0:
                    return start + found + 1
                end = start
    except FileNotFoundError:
        pass
    return 0


def read_complete_lines(
    path: Path, offset: int = 0, max_lines: int | None = None
) -> tuple[list[bytes], int]:
    """Complete lines of ``path`` from byte ``offset``: ``(lines, offset after them)``.

    Stops after ``max_lines`` lines or before an incomplete last line (one without
    ``"\\n"``, which a writer may still be finishing). Lines keep their ``"\\n"``.
    """
    lines: list[bytes] = []
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            while max_lines is None or len(lines) < max_lines:
                line = handle.readline()
                if not line.endswith(b"\n"):
                    break
                lines.append(line)
                offset += len(line)
    except FileNotFoundError:
        pass
    return lines, offset


def _iter_records(path: Path) -> Iterator[dict[str, Any]]:
    offset = 0
    while True:
        lines, offset = read_complete_lines(path, offset, max_lines=1024)
        if not lines:
            return
        for line in lines:
            yield json.loads(line)


def read_points(run_dir: Path) -> Iterator[dict[str, Any]]:
    """Every complete point line of a run's spool, as written (values still encoded)."""
    return _iter_records(Path(run_dir) / METRICS_FILE)


def read_events(run_dir: Path) -> Iterator[dict[str, Any]]:
    """Every complete event line of a run's spool."""
    return _iter_records(Path(run_dir) / EVENTS_FILE)


def read_truncations(run_dir: Path, offset: int = 0) -> tuple[list[SpoolOffsets], int]:
    """Truncations logged since byte ``offset`` of the log: ``(cuts, new offset)``."""
    lines, offset = read_complete_lines(Path(run_dir) / TRUNCATIONS_FILE, offset)
    cuts = []
    for line in lines:
        try:
            cuts.append(SpoolOffsets.from_dict(json.loads(line)["offsets"]))
        except (ValueError, KeyError, TypeError):
            logger.warning("skipping a malformed line of %s: %r", TRUNCATIONS_FILE, line[:200])
    return cuts, offset


# --------------------------------------------------------------------------- writing


def _write_all(fd: int, data: bytes) -> None:
    """Append ``data`` with one ``os.write``; loop only on a (rare) short write."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _open_append(path: Path) -> int:
    return os.open(
        path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644
    )


def _drop_torn_tail(fd: int, path: Path) -> None:
    size = os.fstat(fd).st_size
    keep = complete_length(path)
    if keep < size:
        logger.warning("dropping a torn last line (%d bytes) from %s", size - keep, path)
        os.ftruncate(fd, keep)


class Spool:
    """The writer of a run's spool. Thread-safe; one per run directory and process.

    ``fsync_every_write`` makes every append durable at once (slow on network file
    systems); otherwise the trainer calls :meth:`sync` at checkpoints, before it records
    :meth:`offsets`.
    """

    def __init__(self, run_dir: Path, *, fsync_every_write: bool = False) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.fsync_every_write = fsync_every_write
        self._lock = threading.Lock()
        self._fds: dict[str, int] = {}
        for name in (METRICS_FILE, EVENTS_FILE):
            fd = _open_append(self.run_dir / name)
            self._fds[name] = fd
            _drop_torn_tail(fd, self.run_dir / name)

    @property
    def metrics_path(self) -> Path:
        """``<run_dir>/metrics.jsonl``."""
        return self.run_dir / METRICS_FILE

    @property
    def events_path(self) -> Path:
        """``<run_dir>/events.jsonl``."""
        return self.run_dir / EVENTS_FILE

    def append_points(self, points: Iterable[Mapping[str, Any]]) -> None:
        """Validate and append points (all of them in one write)."""
        self._append(METRICS_FILE, [encode_line(normalize_point(p)) for p in points])

    def append_events(self, events: Iterable[Mapping[str, Any]]) -> None:
        """Validate and append events (all of them in one write)."""
        self._append(EVENTS_FILE, [encode_line(normalize_event(e)) for e in events])

    def _append(self, name: str, lines: list[bytes]) -> None:
        if not lines:
            return
        with self._lock:
            fd = self._fd(name)
            _write_all(fd, b"".join(lines))
            if self.fsync_every_write:
                os.fsync(fd)

    def _fd(self, name: str) -> int:
        if not self._fds:
            raise ValueError(f"the spool of {self.run_dir} is closed")
        return self._fds[name]

    def sync(self) -> None:
        """Make everything appended so far durable (``fsync`` both files)."""
        with self._lock:
            for name in (METRICS_FILE, EVENTS_FILE):
                os.fsync(self._fd(name))

    def offsets(self) -> SpoolOffsets:
        """The current byte sizes of both files (always at line boundaries)."""
        with self._lock:
            return SpoolOffsets(
                metrics=os.fstat(self._fd(METRICS_FILE)).st_size,
                events=os.fstat(self._fd(EVENTS_FILE)).st_size,
            )

    def truncate(self, offsets: SpoolOffsets) -> SpoolOffsets:
        """Cut both files back to ``offsets`` (recorded by a checkpoint); returns the cut.

        An offset beyond the end of its file (lines lost since the checkpoint) leaves that
        file as it is, and one that is not on a line boundary is moved back to the one
        before it; both are logged. The cut is recorded in the truncation log first, so a
        shipper that already read past it can move its cursor back.
        """
        with self._lock:
            cut = SpoolOffsets(
                metrics=self._cut_point(METRICS_FILE, offsets.metrics),
                events=self._cut_point(EVENTS_FILE, offsets.events),
            )
            self._log_truncation(cut)
            for name, size in ((METRICS_FILE, cut.metrics), (EVENTS_FILE, cut.events)):
                os.ftruncate(self._fd(name), size)
                os.fsync(self._fd(name))
            return cut

    def _cut_point(self, name: str, wanted: int) -> int:
        size = os.fstat(self._fd(name)).st_size
        if wanted > size:
            logger.warning("%s has %d bytes, fewer than the %d to resume at", name, size, wanted)
            return size
        cut = complete_length(self.run_dir / name, limit=wanted)
        if cut != wanted:
            logger.warning("offset %d of %s is not on a line boundary; using %d", wanted, name, cut)
        return cut

    def _log_truncation(self, cut: SpoolOffsets) -> None:
        record = {"offsets": cut.to_dict(), "time": time.time()}
        line = json.dumps(record, separators=(",", ":")).encode() + b"\n"
        fd = _open_append(self.run_dir / TRUNCATIONS_FILE)
        try:
            _drop_torn_tail(fd, self.run_dir / TRUNCATIONS_FILE)
            _write_all(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)

    def close(self) -> None:
        """Close both files (without fsync; call :meth:`sync` first if needed)."""
        with self._lock:
            fds, self._fds = self._fds, {}
        for fd in fds.values():
            os.close(fd)

    def __enter__(self) -> Spool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
