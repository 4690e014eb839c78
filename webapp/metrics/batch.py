"""Parse and validate one ingestion batch (SPEC 8.1); Django-free, so it is easy to test.

:func:`parse_batch` turns the raw request body into an :class:`IngestBatch` or raises
:class:`BatchError` with a message that names the offending field, e.g.
``points[3].value: must be a number or one of "NaN", "Infinity", "-Infinity"``.
Everything is checked before anything is written: a rejected batch writes nothing.

The rules are the wire contract's (:mod:`trainer.wire`: its records :data:`~trainer.wire.POINT`,
:data:`~trainer.wire.EVENT`, :data:`~trainer.wire.SAMPLE`, :data:`~trainer.wire.STATUS` and
:data:`~trainer.wire.BATCH`), read strictly as JSON: no unknown fields, no missing
required ones; names are non-empty strings within their lengths, and no string holds a NUL
or a lone surrogate; ``step`` and ``count`` are integer literals in [0, 2**31 - 1]
(``true`` is not a number); ``value`` is a number or one of the strings "NaN",
"Infinity", "-Infinity"; ``wall_time``, ``weight`` and a sample's ``reward`` are finite
numbers or null; ``kind`` is an event kind of a registered regime (read once per batch);
``count`` defaults to 1. A batch holds at most 10,000 points and 10,000 events (413 above).

An event may carry ``samples``, what crossed (null or missing for old trainers): at most
:data:`MAX_EVENT_SAMPLES` objects ``{"text", "tokens"?, "reward"?, "finished"?,
"reason"?, "truncated"?}``: the peer's response text (at most :data:`MAX_SAMPLE_TEXT`
characters, may be empty), its retokenization in the target's tokenizer as token strings
(at most :data:`MAX_SAMPLE_TOKENS`, each at most :data:`MAX_TOKEN_CHARS` characters), the
rollout's reward (finite or null), whether the response ended with EOS (true, false, or
null when not recorded), why it counted (a string of at most ``MAX_SAMPLE_REASON``
characters, or null; trainers before 2026-12 send neither) and whether the trainer cut
the text or tokens to these bounds. Anything longer is refused (400), not cut: the
trainer does the cutting.

A body is read twice at most, with one answer. The fast reading (:func:`_parse_fast`)
decodes with orjson and checks the points column by column (the types of a whole
column at once, each distinct name once, the numbers as numpy arrays): a 10,000-point
batch from the trainer in ~8 ms instead of ~29 (json.loads alone took 6-14, orjson takes
3; issue 23). It only vouches for batches it accepts; when orjson refuses the body (it reads
less than the standard library: lone surrogates, numbers beyond a double, nesting deeper
than 1,024) or any check fails, the reference reading (:func:`_parse_reference`: json
plus the per-record checks) reads the body again, and its answer, or its message naming
the first bad field, is the reply. The two readings agree on every batch the fast one
accepts (tests/webapp/metrics/test_batch_fast.py checks them against each other); the fast one
gives the points as :class:`PointColumns`, a sequence of :class:`PointIn` kept as
columns, which the PostgreSQL writer (:mod:`webapp.metrics.points_pg`) takes as they are.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Sequence, Set
from dataclasses import dataclass
from typing import Any, NamedTuple, cast, overload

import numpy as np
import orjson

from trainer.wire import (
    BATCH,
    EVENT,
    EVENT_KINDS,
    MAX_EVENT_SAMPLES,
    MAX_EVENTS,
    MAX_INT32,
    MAX_POINTS,
    MAX_SAMPLE_TEXT,
    MAX_SAMPLE_TOKENS,
    MAX_STATUS_MESSAGE,
    MAX_TOKEN_CHARS,
    NON_FINITE,
    POINT,
    SAMPLE,
    STATUS,
    STATUS_STATES,
    Field,
    event_kind_names,
)

__all__ = [
    "EVENT_ALLOWED_FIELDS",
    "EVENT_KINDS",
    "EVENT_REQUIRED",
    "MAX_EVENTS",
    "MAX_EVENT_SAMPLES",
    "MAX_INT32",
    "MAX_POINTS",
    "MAX_SAMPLE_TEXT",
    "MAX_SAMPLE_TOKENS",
    "MAX_STATUS_MESSAGE",
    "MAX_TOKEN_CHARS",
    "NON_FINITE",
    "POINT_FIELDS",
    "POINT_REQUIRED",
    "SAMPLE_FIELDS",
    "SAMPLE_REQUIRED",
    "STATUS_FIELDS",
    "STATUS_STATES",
    "BatchError",
    "EventIn",
    "IngestBatch",
    "PointColumns",
    "PointIn",
    "StatusIn",
    "decode_json",
    "first_events",
    "first_of_each",
    "parse_batch",
    "parse_event",
    "parse_point",
    "parse_sample",
    "parse_samples",
    "parse_status",
]

# Per record: the fields it may have (allowed) and those it must have (required). Not the
# fields a trainer writes a record with (trainer.spool.EVENT_WRITTEN_FIELDS).
POINT_FIELDS, POINT_REQUIRED = POINT.allowed, POINT.required
EVENT_ALLOWED_FIELDS, EVENT_REQUIRED = EVENT.allowed, EVENT.required
SAMPLE_FIELDS, SAMPLE_REQUIRED = SAMPLE.allowed, SAMPLE.required
STATUS_FIELDS, STATUS_REQUIRED = STATUS.allowed, STATUS.required
BATCH_FIELDS = BATCH.allowed
_BATCH_ALLOWED = ", ".join(sorted(BATCH_FIELDS))


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


class PointColumns(Sequence[PointIn]):
    """Points as columns: a sequence of :class:`PointIn` that keeps them as arrays.

    ``pairs`` are the distinct (policy, key) in order of first appearance and
    ``series[i]`` the index into it of point i; ``steps`` (int64), ``values`` and
    ``wall_times`` (float64, NaN for a missing wall time: a wall time is finite or null)
    are numpy arrays of equal length. Indexing or iterating gives :class:`PointIn`.
    """

    __slots__ = ("pairs", "series", "steps", "values", "wall_times")

    def __init__(
        self,
        pairs: Sequence[tuple[str, str]],
        series: np.ndarray,
        steps: np.ndarray,
        values: np.ndarray,
        wall_times: np.ndarray,
    ) -> None:
        self.pairs = list(pairs)
        self.series = series.astype(np.intp, copy=False)
        self.steps = steps.astype(np.int64, copy=False)
        self.values = values.astype(np.float64, copy=False)
        self.wall_times = wall_times.astype(np.float64, copy=False)
        if not len(self.series) == len(self.steps) == len(self.values) == len(self.wall_times):
            raise ValueError("the columns differ in length")

    @classmethod
    def of(cls, points: Sequence[PointIn]) -> PointColumns:
        """``points`` as columns (themselves when they are columns already)."""
        if isinstance(points, PointColumns):
            return points
        index: dict[tuple[str, str], int] = {}
        series = [index.setdefault((p.policy, p.key), len(index)) for p in points]
        n = len(series)
        return cls(
            list(index),
            np.array(series, dtype=np.intp),
            np.fromiter((p.step for p in points), np.int64, n),
            np.fromiter((p.value for p in points), np.float64, n),
            np.array([p.wall_time for p in points], dtype=np.float64).reshape(n),
        )

    def __len__(self) -> int:
        return len(self.steps)

    @overload
    def __getitem__(self, index: int) -> PointIn: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[PointIn]: ...
    def __getitem__(self, index: int | slice) -> PointIn | Sequence[PointIn]:
        if isinstance(index, slice):
            return self._take(np.arange(len(self))[index])
        policy, key = self.pairs[self.series[index]]
        wall_time = float(self.wall_times[index])
        return PointIn(
            policy,
            key,
            int(self.steps[index]),
            float(self.values[index]),
            None if math.isnan(wall_time) else wall_time,
        )

    def __iter__(self) -> Iterator[PointIn]:
        pairs = self.pairs
        columns = (self.series.tolist(), self.steps.tolist(), self.values.tolist())
        for (i, step, value), wall_time in zip(
            zip(*columns, strict=True), self.wall_times.tolist(), strict=True
        ):
            yield PointIn(*pairs[i], step, value, None if math.isnan(wall_time) else wall_time)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str | bytes):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PointColumns({list(self)!r})"

    def _take(self, rows: np.ndarray) -> PointColumns:
        series, steps, values = self.series[rows], self.steps[rows], self.values[rows]
        return PointColumns(self.pairs, series, steps, values, self.wall_times[rows])

    def first_of_each(self) -> PointColumns:
        """Without repeats of a (policy, key, step): the first one wins (as
        :func:`first_of_each`)."""
        # one int64 per (pair, step): a step is an int4, so 32 bits hold it shifted
        identity = (self.series.astype(np.int64) << 32) + (self.steps + 2**31)
        _, first = np.unique(identity, return_index=True)
        if len(first) == len(self):
            return self
        first.sort()
        return self._take(first)

    def max_step(self) -> int | None:
        return int(self.steps.max()) if len(self) else None


@dataclass(frozen=True)
class IngestBatch:
    points: Sequence[PointIn] = ()
    """A tuple of :class:`PointIn`, or :class:`PointColumns` from the fast reading."""
    events: tuple[EventIn, ...] = ()
    status: StatusIn | None = None

    @property
    def max_step(self) -> int | None:
        """The largest step of any point or event (None for an empty batch)."""
        points = self.points
        if isinstance(points, PointColumns):
            steps = [e.step for e in self.events]
            point_max = points.max_step()
            if point_max is not None:
                steps.append(point_max)
        else:
            steps = [p.step for p in points] + [e.step for e in self.events]
        return max(steps) if steps else None


# --------------------------------------------------------------------------- scalars
# Each field's check is made once from its definition in the contract (its name and
# bounds bound in a closure), so the hot path reads no attributes and builds no strings.


def _is_number(value: Any) -> bool:
    return type(value) in (int, float)  # bool is an int subclass: excluded on purpose


def _string(spec: Field) -> Callable[..., str]:
    """The check of string field ``spec``: ``check(where, value, label=spec.name)``."""
    if spec.type != "string" or spec.max_length is None:
        raise ValueError(f"{spec.name!r} is not a string field with a maximum length")
    least, most = spec.min_length, spec.max_length

    def check(where: str, value: Any, label: str = spec.name) -> str:
        if (
            type(value) is str
            and least <= len(value) <= most
            and value.isascii()
            and "\x00" not in value
        ):
            return value  # the common case, checked cheaply
        where = f"{where}.{label}"
        if not isinstance(value, str):
            raise BatchError(f"{where}: must be a string, not {_kind(value)}")
        problem = spec.text_problem(value)
        if problem is not None:
            raise BatchError(f"{where}: {problem}")
        return value

    return check


def _integer(spec: Field) -> Callable[[str, Any], int]:
    """The check of integer field ``spec``: an integer literal within its bounds."""
    low, high, name = spec.minimum, spec.maximum, spec.name

    def check(where: str, value: Any) -> int:
        if type(value) is int and low <= value <= high:
            return value
        raise BatchError(
            f"{where}.{name}: must be an integer in [{low}, {high}], not {_show(value)}"
        )

    return check


def _metric_value(spec: Field) -> Callable[[str, Any], float]:
    """The check of a metric value: a number or a :data:`NON_FINITE` string, as a float."""
    name, strings = spec.name, ", ".join(json.dumps(text) for text in NON_FINITE)

    def check(where: str, value: Any) -> float:
        if type(value) is float:
            return value
        if isinstance(value, str) and value in NON_FINITE:
            return NON_FINITE[value]
        if not _is_number(value):
            raise BatchError(
                f"{where}.{name}: must be a number or one of {strings}, not {_show(value)}"
            )
        try:
            return float(value)
        except OverflowError:
            raise BatchError(f"{where}.{name}: number out of range") from None

    return check


def _finite_or_null(spec: Field) -> Callable[[str, Any], float | None]:
    """The check of a nullable number field: a finite number or None."""
    name = spec.name

    def check(where: str, value: Any) -> float | None:
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

    return check


_policy, _key = _string(POINT["policy"]), _string(POINT["key"])
_point_step, _value = _integer(POINT["step"]), _metric_value(POINT["value"])
_wall_time = _finite_or_null(POINT["wall_time"])
_event_step, _count = _integer(EVENT["step"]), _integer(EVENT["count"])
_source, _target = _string(EVENT["source"]), _string(EVENT["target"])
_prompt_id, _weight = _string(EVENT["prompt_id"]), _finite_or_null(EVENT["weight"])
_text, _token = _string(SAMPLE["text"]), _string(cast(Field, SAMPLE["tokens"].items))
_reward = _finite_or_null(SAMPLE["reward"])
_reason = _string(SAMPLE["reason"])
_message = _string(STATUS["message"])
_KIND, _STATE = EVENT["kind"], STATUS["state"]
_COUNT_DEFAULT, _MESSAGE_DEFAULT = EVENT["count"].default, STATUS["message"].default


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


def _fields(where: str, record: Any, allowed: Set[str], required: Set[str]) -> None:
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


def _choice(where: str, spec: Field, value: Any, allowed: Set[str]) -> str:
    """``value`` if it is one of ``allowed`` (the strings ``spec`` may take now)."""
    if type(value) is str and value in allowed:
        return value
    raise BatchError(
        f"{where}.{spec.name}: must be one of {list(spec.enum() or ())}, not {_show(value)}"
    )


def _kinds() -> frozenset[str]:
    """The event kinds a batch may use: the registered regimes' (read once per batch)."""
    return frozenset(event_kind_names())


_STATES = frozenset(STATUS_STATES)


# --------------------------------------------------------------------------- records


def parse_point(where: str, record: Any) -> PointIn:
    """One point; ``where`` (e.g. ``points[3]``) prefixes the field in error messages."""
    _fields(where, record, POINT_FIELDS, POINT_REQUIRED)
    return PointIn(
        _policy(where, record["policy"]),
        _key(where, record["key"]),
        _point_step(where, record["step"]),
        _value(where, record["value"]),
        _wall_time(where, record.get("wall_time")),
    )


def parse_sample(where: str, record: Any) -> dict[str, Any]:
    """One sample of an event's ``samples``, as it is stored (missing fields left out)."""
    _fields(where, record, SAMPLE_FIELDS, SAMPLE_REQUIRED)
    sample: dict[str, Any] = {"text": _text(where, record["text"])}
    tokens = record.get("tokens")
    if tokens is not None:
        tokens = _list(f"{where}.tokens", tokens)
        if len(tokens) > MAX_SAMPLE_TOKENS:
            raise BatchError(
                f"{where}.tokens: {len(tokens)} tokens; at most {MAX_SAMPLE_TOKENS} "
                '(cut them and set "truncated": true)'
            )
        sample["tokens"] = [_token(where, token, f"tokens[{i}]") for i, token in enumerate(tokens)]
    if "reward" in record:
        sample["reward"] = _reward(where, record["reward"])
    finished = record.get("finished")
    if finished is not None:
        if type(finished) is not bool:
            raise BatchError(
                f"{where}.finished: must be true, false or null, not {_show(finished)}"
            )
        sample["finished"] = finished
    reason = record.get("reason")
    if reason is not None:
        sample["reason"] = _reason(where, reason)
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


def parse_event(where: str, record: Any, kinds: Set[str] | None = None) -> EventIn:
    """One event; ``kinds`` are the event kinds allowed (default: the registry's now;
    :func:`parse_batch` reads them once for the whole batch)."""
    _fields(where, record, EVENT_ALLOWED_FIELDS, EVENT_REQUIRED)
    kind = _choice(where, _KIND, record["kind"], _kinds() if kinds is None else kinds)
    return EventIn(
        _event_step(where, record["step"]),
        _source(where, record["source"]),
        _target(where, record["target"]),
        kind,
        _prompt_id(where, record["prompt_id"]),
        _count(where, record.get("count", _COUNT_DEFAULT)),
        _weight(where, record.get("weight")),
        parse_samples(f"{where}.samples", record.get("samples")),
    )


def parse_status(record: Any) -> StatusIn:
    _fields("status", record, STATUS_FIELDS, STATUS_REQUIRED)
    state = _choice("status", _STATE, record["state"], _STATES)
    message = _message("status", record.get("message", _MESSAGE_DEFAULT))
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
    """Validate a whole request body; :class:`BatchError` names the first bad field.

    The fast reading first; the reference reading when the fast one cannot vouch for the
    body (see the module docstring): same batch, same errors, from either."""
    batch = _parse_fast(raw)
    return batch if batch is not None else _parse_reference(raw)


def _parse_reference(raw: bytes) -> IngestBatch:
    """The reference reading: json, then each record checked field by field, in order."""
    body = decode_json(raw)
    if not isinstance(body, dict):
        raise BatchError(f"body: must be a JSON object, not {_kind(body)}")
    unknown = sorted(set(body) - BATCH_FIELDS)
    if unknown:
        raise BatchError(f"{_field_name(unknown[0])}: unknown field (allowed: {_BATCH_ALLOWED})")
    points = _list("points", body.get("points", []))
    if len(points) > MAX_POINTS:
        raise BatchError(f"points: {len(points)} points; a batch holds at most {MAX_POINTS}", 413)
    events = _list("events", body.get("events", []))
    if len(events) > MAX_EVENTS:
        raise BatchError(f"events: {len(events)} events; a batch holds at most {MAX_EVENTS}", 413)
    status = body.get("status")
    kinds = _kinds() if events else frozenset()
    return IngestBatch(
        points=tuple(parse_point(f"points[{i}]", p) for i, p in enumerate(points)),
        events=tuple(parse_event(f"events[{i}]", e, kinds) for i, e in enumerate(events)),
        status=None if status is None else parse_status(status),
    )


def _parse_fast(raw: bytes) -> IngestBatch | None:
    """The fast reading: the batch, or None where it cannot vouch for the body (orjson
    refuses it, or anything in it breaks a rule: the reference reading names what)."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if type(body) is not dict or not body.keys() <= BATCH_FIELDS:
        return None
    points, events = body.get("points", []), body.get("events", [])
    if type(points) is not list or len(points) > MAX_POINTS:
        return None
    if type(events) is not list or len(events) > MAX_EVENTS:
        return None
    columns = _point_columns(points) if points else ()
    if columns is None:
        return None
    status = body.get("status")
    try:
        kinds = _kinds() if events else frozenset()
        return IngestBatch(
            points=columns,
            events=tuple(parse_event(f"events[{i}]", e, kinds) for i, e in enumerate(events)),
            status=None if status is None else parse_status(status),
        )
    except BatchError:
        return None


_STRING_CHECKS = (_policy, _key)


def _point_columns(records: list[Any]) -> PointColumns | None:
    """``records`` (a non-empty list from orjson) as columns when every one is a valid
    point, else None. Each rule of :func:`parse_point` is checked for a whole column at
    once: the set of the records' types and field names, each distinct policy and key
    once, and the numbers' types as a set before numpy reads them."""
    if set(map(type, records)) != {dict}:
        return None
    shapes = [set(shape) for shape in set(map(tuple, records))]
    if not all(POINT_REQUIRED <= shape <= POINT_FIELDS for shape in shapes):
        return None
    n = len(records)
    policies = [record["policy"] for record in records]
    keys = [record["key"] for record in records]
    steps = [record["step"] for record in records]
    values = [record["value"] for record in records]
    if all("wall_time" in shape for shape in shapes):
        wall_times = [record["wall_time"] for record in records]
    else:
        wall_times = [record.get("wall_time") for record in records]
    try:
        named = list(zip(policies, keys, strict=True))
        index = {pair: i for i, pair in enumerate(dict.fromkeys(named))}
        for pair in index:
            for check, name in zip(_STRING_CHECKS, pair, strict=True):
                check("points[?]", name)
        series = np.fromiter(map(index.__getitem__, named), np.intp, n)
    except (TypeError, BatchError):  # TypeError: a name that is a list or an object
        return None
    step_column = _step_column(steps)
    value_column = _value_column(values)
    wall_column = _wall_time_column(wall_times)
    if step_column is None or value_column is None or wall_column is None:
        return None
    return PointColumns(list(index), series, step_column, value_column, wall_column)


def _step_column(steps: Sequence[Any]) -> np.ndarray | None:
    """Integer literals (not booleans) in [0, 2**31 - 1], or None."""
    if set(map(type, steps)) != {int}:
        return None
    try:
        column = np.array(steps, dtype=np.int64)
    except OverflowError:
        return None
    if column.min() < POINT["step"].minimum or column.max() > POINT["step"].maximum:
        return None
    return column


_NUMBER_TYPES = frozenset({int, float})


def _value_column(values: Sequence[Any]) -> np.ndarray | None:
    """Numbers or the :data:`NON_FINITE` strings, as float64 (as ``float()`` reads them;
    an integer beyond a double is refused, as by :func:`_metric_value`), or None."""
    types = set(map(type, values))
    if not types <= _NUMBER_TYPES | {str}:
        return None
    if str in types:
        if not {v for v in values if type(v) is str} <= NON_FINITE.keys():
            return None
        values = [NON_FINITE[v] if type(v) is str else v for v in values]
    try:
        if int in types:
            values = [float(v) for v in values]
    except OverflowError:
        return None
    return np.array(values, dtype=np.float64)


def _wall_time_column(wall_times: Sequence[Any]) -> np.ndarray | None:
    """Finite numbers or null, as float64 with NaN for null, or None."""
    types = set(map(type, wall_times))
    if not types <= _NUMBER_TYPES | {type(None)}:
        return None
    try:
        if int in types:
            wall_times = [v if v is None else float(v) for v in wall_times]
    except OverflowError:
        return None
    column = np.array(wall_times, dtype=np.float64)  # None becomes NaN
    if np.isinf(column).any() or np.count_nonzero(np.isnan(column)) != wall_times.count(None):
        return None  # an infinity, or a NaN that was not a null (orjson gives none)
    return column


def first_of_each(points: Sequence[PointIn]) -> Sequence[PointIn]:
    """``points`` without repeats of a (policy, key, step): the first one wins."""
    if isinstance(points, PointColumns):
        return points.first_of_each()
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
