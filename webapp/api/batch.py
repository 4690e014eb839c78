"""Parse and validate one ingestion batch (SPEC 8.1); Django-free, so it is easy to test.

:func:`parse_batch` turns the raw request body into an :class:`IngestBatch` or raises
:class:`BatchError` with a message that names the offending field, e.g.
``points[3].value: must be a number or one of "NaN", "Infinity", "-Infinity"``.
Everything is checked before anything is written: a rejected batch writes nothing.

The rules mirror the trainer's stand-in server (``tests/trainer/ingest_server.py``) and
the model field lengths: no unknown fields; ``policy``/``source``/``target`` are
non-empty strings of at most 64 characters, ``key`` and ``prompt_id`` at most 128;
``step`` and ``count`` are integers in [0, 2**31 - 1] (``true`` is not a number);
``value`` is a number or one of the strings "NaN", "Infinity", "-Infinity";
``wall_time`` is a finite number (or null/missing); ``weight`` a finite number or null;
``count`` defaults to 1; ``kind`` is rollout | advantage_stats | success. A batch holds
at most 10,000 points and 10,000 events (413 above).

An event may carry ``samples``, what crossed (null or missing for old trainers): at most
:data:`MAX_EVENT_SAMPLES` objects ``{"text", "tokens"?, "reward"?, "truncated"?}``:
the peer's response text (at most :data:`MAX_SAMPLE_TEXT` characters, may be empty),
its retokenization in the target's tokenizer as token strings (at most
:data:`MAX_SAMPLE_TOKENS`, each at most :data:`MAX_TOKEN_CHARS` characters), the
rollout's reward (finite or null) and whether the trainer cut the text or tokens to
these bounds. Anything longer is refused (400), not cut: the trainer does the cutting.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, NamedTuple

MAX_POINTS = 10_000
MAX_EVENTS = 10_000
MAX_STATUS_MESSAGE = 500
MAX_INT32 = 2**31 - 1
NON_FINITE: dict[str, float] = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
EVENT_KINDS = ("rollout", "advantage_stats", "success")
STATUS_STATES = ("running", "completing", "completed", "failed")
MAX_EVENT_SAMPLES = 4
MAX_SAMPLE_TEXT = 2000
MAX_SAMPLE_TOKENS = 512
MAX_TOKEN_CHARS = 32

# name -> (max length) for the text fields of points and events
POINT_NAMES = {"policy": 64, "key": 128}
EVENT_NAMES = {"source": 64, "target": 64, "prompt_id": 128}
POINT_FIELDS = frozenset({"policy", "key", "step", "value", "wall_time"})
POINT_REQUIRED = frozenset({"policy", "key", "step", "value"})
EVENT_FIELDS = frozenset(
    {"step", "source", "target", "kind", "prompt_id", "count", "weight", "samples"}
)
EVENT_REQUIRED = frozenset({"step", "source", "target", "kind", "prompt_id"})
SAMPLE_FIELDS = frozenset({"text", "tokens", "reward", "truncated"})
SAMPLE_REQUIRED = frozenset({"text"})
STATUS_FIELDS = frozenset({"state", "message"})


class BatchError(ValueError):
    """The batch breaks SPEC 8.1; ``status`` is the HTTP status to answer (400 or 413)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class PointIn(NamedTuple):
    policy: str
    key: str
    step: int
    value: float  # NaN and +-inf allowed
    wall_time: float | None


class EventIn(NamedTuple):
    step: int
    source: str
    target: str
    kind: str
    prompt_id: str
    count: int
    weight: float | None
    samples: list[dict[str, Any]] | None = None
    """What crossed (see the module docstring); None: not recorded."""


@dataclass(frozen=True)
class StatusIn:
    state: str
    message: str


@dataclass(frozen=True)
class IngestBatch:
    points: tuple[PointIn, ...] = ()
    events: tuple[EventIn, ...] = ()
    status: StatusIn | None = None

    @property
    def max_step(self) -> int | None:
        """The largest step of any point or event (None for an empty batch)."""
        steps = [p.step for p in self.points] + [e.step for e in self.events]
        return max(steps) if steps else None


# --------------------------------------------------------------------------- scalars


def _is_number(value: Any) -> bool:
    return type(value) in (int, float)  # bool is an int subclass: excluded on purpose


def _text(where: str, name: str, value: Any, max_length: int, *, allow_empty: bool = False) -> str:
    ascii_ok = type(value) is str and 0 < len(value) <= max_length and value.isascii()
    if ascii_ok and "\x00" not in value:
        return value  # the common case, checked cheaply
    where = f"{where}.{name}"
    if not isinstance(value, str):
        raise BatchError(f"{where}: must be a string, not {_kind(value)}")
    if not value and not allow_empty:
        raise BatchError(f"{where}: must not be empty")
    if len(value) > max_length:
        raise BatchError(f"{where}: longer than {max_length} characters ({len(value)})")
    if "\x00" in value:
        raise BatchError(f"{where}: must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise BatchError(f"{where}: is not valid UTF-8 (lone surrogate)") from None
    return value


def _int(where: str, name: str, value: Any) -> int:
    if type(value) is not int or not 0 <= value <= MAX_INT32:
        raise BatchError(
            f"{where}.{name}: must be an integer in [0, {MAX_INT32}], not {_show(value)}"
        )
    return value


def _value(where: str, name: str, value: Any) -> float:
    if type(value) is float:
        return value
    if isinstance(value, str) and value in NON_FINITE:
        return NON_FINITE[value]
    if not _is_number(value):
        raise BatchError(
            f'{where}.{name}: must be a number or one of "NaN", "Infinity", "-Infinity", '
            f"not {_show(value)}"
        )
    try:
        return float(value)
    except OverflowError:
        raise BatchError(f"{where}.{name}: number out of range") from None


def _finite_or_null(where: str, name: str, value: Any) -> float | None:
    if value is None:
        return None
    if not _is_number(value):
        raise BatchError(f"{where}.{name}: must be a number or null, not {_show(value)}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise BatchError(f"{where}.{name}: must be finite")
    return number


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _show(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, str | int | float | bool) else _kind(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _field_name(name: str) -> str:
    """A field name from the request, safe to echo in an error: printable ASCII as sent,
    anything else (a lone surrogate, control characters, a megabyte of text) JSON-escaped
    and cut short."""
    if name.isascii() and name.isprintable() and len(name) <= 40:
        return name
    return _show(name)


def _fields(where: str, record: Any, allowed: frozenset[str], required: frozenset[str]) -> None:
    if type(record) is dict and record.keys() <= allowed and required <= record.keys():
        return
    if not isinstance(record, dict):
        raise BatchError(f"{where}: must be an object, not {_kind(record)}")
    unknown = sorted(set(record) - allowed)
    if unknown:
        raise BatchError(
            f"{where}.{_field_name(unknown[0])}: unknown field (allowed: {sorted(allowed)})"
        )
    missing = sorted(required - set(record))
    if missing:
        raise BatchError(f"{where}.{missing[0]}: missing")


# --------------------------------------------------------------------------- records


def parse_point(where: str, record: Any) -> PointIn:
    """One point; ``where`` (e.g. ``points[3]``) prefixes the field in error messages."""
    _fields(where, record, POINT_FIELDS, POINT_REQUIRED)
    return PointIn(
        _text(where, "policy", record["policy"], POINT_NAMES["policy"]),
        _text(where, "key", record["key"], POINT_NAMES["key"]),
        _int(where, "step", record["step"]),
        _value(where, "value", record["value"]),
        _finite_or_null(where, "wall_time", record.get("wall_time")),
    )


def parse_sample(where: str, record: Any) -> dict[str, Any]:
    """One sample of an event's ``samples``, as it is stored (missing fields left out)."""
    _fields(where, record, SAMPLE_FIELDS, SAMPLE_REQUIRED)
    sample: dict[str, Any] = {
        "text": _text(where, "text", record["text"], MAX_SAMPLE_TEXT, allow_empty=True)
    }
    tokens = record.get("tokens")
    if tokens is not None:
        tokens = _list(f"{where}.tokens", tokens)
        if len(tokens) > MAX_SAMPLE_TOKENS:
            raise BatchError(
                f"{where}.tokens: {len(tokens)} tokens; at most {MAX_SAMPLE_TOKENS} "
                '(cut them and set "truncated": true)'
            )
        sample["tokens"] = [
            _text(where, f"tokens[{i}]", token, MAX_TOKEN_CHARS, allow_empty=True)
            for i, token in enumerate(tokens)
        ]
    if "reward" in record:
        sample["reward"] = _finite_or_null(where, "reward", record["reward"])
    truncated = record.get("truncated", False)
    if type(truncated) is not bool:
        raise BatchError(f"{where}.truncated: must be true or false, not {_show(truncated)}")
    sample["truncated"] = truncated
    return sample


def parse_samples(where: str, value: Any) -> list[dict[str, Any]] | None:
    """An event's ``samples``: None when null or missing."""
    if value is None:
        return None
    samples = _list(where, value)
    if len(samples) > MAX_EVENT_SAMPLES:
        raise BatchError(f"{where}: {len(samples)} samples; at most {MAX_EVENT_SAMPLES}")
    return [parse_sample(f"{where}[{i}]", sample) for i, sample in enumerate(samples)]


def parse_event(where: str, record: Any) -> EventIn:
    _fields(where, record, EVENT_FIELDS, EVENT_REQUIRED)
    kind = record["kind"]
    if kind not in EVENT_KINDS:
        raise BatchError(f"{where}.kind: must be one of {list(EVENT_KINDS)}, not {_show(kind)}")
    return EventIn(
        _int(where, "step", record["step"]),
        _text(where, "source", record["source"], EVENT_NAMES["source"]),
        _text(where, "target", record["target"], EVENT_NAMES["target"]),
        kind,
        _text(where, "prompt_id", record["prompt_id"], EVENT_NAMES["prompt_id"]),
        _int(where, "count", record.get("count", 1)),
        _finite_or_null(where, "weight", record.get("weight")),
        parse_samples(f"{where}.samples", record.get("samples")),
    )


def parse_status(record: Any) -> StatusIn:
    _fields("status", record, STATUS_FIELDS, frozenset({"state"}))
    state = record["state"]
    if state not in STATUS_STATES:
        raise BatchError(f"status.state: must be one of {list(STATUS_STATES)}, not {_show(state)}")
    message = _text(
        "status", "message", record.get("message", ""), MAX_STATUS_MESSAGE, allow_empty=True
    )
    return StatusIn(state=state, message=message)


def _list(name: str, value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise BatchError(f"{name}: must be a list, not {_kind(value)}")
    return value


def _no_constants(name: str) -> None:
    raise ValueError(f'bare {name} is not JSON; send the string "{name}"')


def decode_json(raw: bytes) -> Any:
    """The JSON document in ``raw`` (UTF-8, strict: no bare NaN/Infinity literals)."""
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=_no_constants)
    except UnicodeDecodeError:
        raise BatchError("body: not UTF-8") from None
    except (ValueError, RecursionError) as exc:
        raise BatchError(f"body: malformed JSON ({exc})") from None


def parse_batch(raw: bytes) -> IngestBatch:
    """Validate a whole request body; :class:`BatchError` names the first bad field."""
    body = decode_json(raw)
    if not isinstance(body, dict):
        raise BatchError(f"body: must be a JSON object, not {_kind(body)}")
    unknown = sorted(set(body) - {"points", "events", "status"})
    if unknown:
        raise BatchError(
            f"{_field_name(unknown[0])}: unknown field (allowed: events, points, status)"
        )
    points = _list("points", body.get("points", []))
    if len(points) > MAX_POINTS:
        raise BatchError(f"points: {len(points)} points; a batch holds at most {MAX_POINTS}", 413)
    events = _list("events", body.get("events", []))
    if len(events) > MAX_EVENTS:
        raise BatchError(f"events: {len(events)} events; a batch holds at most {MAX_EVENTS}", 413)
    status = body.get("status")
    return IngestBatch(
        points=tuple(parse_point(f"points[{i}]", p) for i, p in enumerate(points)),
        events=tuple(parse_event(f"events[{i}]", e) for i, e in enumerate(events)),
        status=None if status is None else parse_status(status),
    )


def first_of_each(points: tuple[PointIn, ...]) -> list[PointIn]:
    """``points`` without repeats of a (policy, key, step): the first one wins."""
    seen: set[tuple[str, str, int]] = set()
    unique = []
    for point in points:
        identity = (point.policy, point.key, point.step)
        if identity not in seen:
            seen.add(identity)
            unique.append(point)
    return unique


def first_events(events: tuple[EventIn, ...]) -> list[EventIn]:
    """``events`` without repeats of a (step, source, target, kind, prompt_id)."""
    seen: set[tuple[int, str, str, str, str]] = set()
    unique = []
    for event in events:
        identity = (event.step, event.source, event.target, event.kind, event.prompt_id)
        if identity not in seen:
            seen.add(identity)
            unique.append(event)
    return unique
