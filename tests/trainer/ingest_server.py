"""A small, scriptable HTTP server implementing the ingestion contract of SPEC 8.1.

The web app's stand-in for trainer tests: it checks the bearer token, stores points and
events idempotently, and can be told to fail (scripted status codes, dropped
connections, an outage, a batch-size limit).
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from trainer.spool import (
    EVENT_KINDS,
    EVENT_WRITTEN_FIELDS,
    MAX_EVENT_SAMPLES,
    NON_FINITE,
    POINT_FIELDS,
)

TOKEN = "run-7-secret-token-0123456789"
RUN_PATH = "/api/v1/runs/7/ingest"
MAX_NAME = 100


# --------------------------------------------------------------------------- the server


class ContractError(ValueError):
    """A body that breaks SPEC 8.1; the message names the field."""


def _check_record(record: Any, fields: tuple[str, ...], where: str) -> None:
    if not isinstance(record, dict) or set(record) != set(fields):
        raise ContractError(f"{where}: fields must be exactly {list(fields)}")
    for name in ("policy", "key", "source", "target", "prompt_id", "kind"):
        if name in record and not (isinstance(record[name], str) and len(record[name]) > 0):
            raise ContractError(f"{where}.{name}: must be a non-empty string")
        if name in record and len(record[name]) > MAX_NAME:
            raise ContractError(f"{where}.{name}: longer than {MAX_NAME} characters")
    for name in ("step", "count"):
        if name in record and (type(record[name]) is not int or record[name] < 0):
            raise ContractError(f"{where}.{name}: must be an integer >= 0")


def _is_number(value: Any) -> bool:
    return type(value) in (int, float)


def validate(body: Any) -> tuple[list[dict], list[dict], dict | None]:
    """The points, events and status of a well-formed body; ContractError otherwise."""
    if not isinstance(body, dict) or not set(body) <= {"points", "events", "status"}:
        raise ContractError("body: unknown field")
    points, events, status = body.get("points", []), body.get("events", []), body.get("status")
    for i, point in enumerate(points):
        _check_record(point, POINT_FIELDS, f"points[{i}]")
        if not (_is_number(point["value"]) or point["value"] in NON_FINITE):
            raise ContractError(f"points[{i}].value: must be a number or NaN/Infinity/-Infinity")
        if not _is_number(point["wall_time"]):
            raise ContractError(f"points[{i}].wall_time: must be a number")
    for i, event in enumerate(events):
        samples = event.pop("samples", None) if isinstance(event, dict) else None
        _check_record(event, EVENT_WRITTEN_FIELDS, f"events[{i}]")
        if samples is not None:
            if not isinstance(samples, list) or len(samples) > MAX_EVENT_SAMPLES:
                raise ContractError(f"events[{i}].samples: at most {MAX_EVENT_SAMPLES}")
            if not all(isinstance(s, dict) and isinstance(s.get("text"), str) for s in samples):
                raise ContractError(f"events[{i}].samples: each one needs a text")
            event["samples"] = samples
        if event["kind"] not in EVENT_KINDS:
            raise ContractError(f"events[{i}].kind: unknown kind")
        if not (event["weight"] is None or _is_number(event["weight"])):
            raise ContractError(f"events[{i}].weight: must be a number or null")
    if status is not None and (not isinstance(status, dict) or set(status) != {"state", "message"}):
        raise ContractError("status: fields must be exactly ['state', 'message']")
    return points, events, status


def point_key(point: dict) -> tuple:
    return (point["policy"], point["key"], point["step"])


def event_key(event: dict) -> tuple:
    return tuple(event[name] for name in ("step", "source", "target", "kind", "prompt_id"))


def _no_constants(name: str) -> None:
    raise ValueError(f"bare {name} is not JSON")


@dataclass
class IngestState:
    """What the fake web app stores and how it is told to misbehave."""

    points: dict[tuple, dict] = field(default_factory=dict)
    events: dict[tuple, dict] = field(default_factory=dict)
    statuses: list[dict] = field(default_factory=list)
    log: list[dict] = field(default_factory=list)
    script: deque = field(default_factory=deque)
    max_points: int | None = None
    down: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def handle(self, path: str, auth: str | None, raw: bytes) -> tuple[int, dict, str]:
        """``(status code, headers, body text)`` for one request."""
        with self.lock:
            code, headers, text = self._answer(path, auth, raw)
            self.log.append({"code": code, "raw": raw})
            return code, headers, text

    def _answer(self, path: str, auth: str | None, raw: bytes) -> tuple[int, dict, str]:
        if path != RUN_PATH:
            return 404, {}, "no such run"
        if self.script:
            return self._scripted(self.script.popleft(), auth)
        if auth != f"Bearer {TOKEN}":
            return 401, {}, "wrong or missing token"
        if self.down:
            return 503, {}, "down for maintenance"
        try:
            points, events, status = validate(json.loads(raw, parse_constant=_no_constants))
        except (ValueError, ContractError) as exc:
            return 400, {}, json.dumps({"error": str(exc)})
        if self.max_points is not None and len(points) > self.max_points:
            return 413, {}, "too many points"
        return 200, {}, json.dumps(self._store(points, events, status))

    @staticmethod
    def _scripted(action: Any, auth: str | None) -> tuple[int, dict, str]:
        if action == "echo":
            return 500, {}, f"internal error while handling {auth}"
        if isinstance(action, tuple):
            return action[0], {"Retry-After": action[1]}, "slow down"
        return action, {}, f"scripted {action}"

    def _store(self, points: list[dict], events: list[dict], status: dict | None) -> dict:
        accepted = duplicates = 0
        for store, records, key in (
            (self.points, points, point_key),
            (self.events, events, event_key),
        ):
            for record in records:
                if key(record) in store:
                    duplicates += 1
                else:
                    store[key(record)] = record
                    accepted += 1
        if status is not None:
            self.statuses.append(status)
        return {"accepted": accepted, "duplicates": duplicates}

    def ok_batches(self) -> list[dict]:
        """The bodies of the requests answered 200."""
        with self.lock:
            return [json.loads(entry["raw"]) for entry in self.log if entry["code"] == 200]


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.server.state.script and self.server.state.script[0] == "drop":
            with self.server.state.lock:
                self.server.state.script.popleft()
                self.server.state.log.append({"code": None, "raw": raw})
            return  # no answer at all: the connection just closes
        code, headers, text = self.server.state.handle(
            self.path, self.headers.get("Authorization"), raw
        )
        payload = text.encode()
        self.send_response(code)
        for name, value in {"Content-Type": "application/json", **headers}.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    state: IngestState


@dataclass
class Ingest:
    """A running fake web app: its URL and its state."""

    url: str
    state: IngestState


def serve_ingest() -> Iterator[Ingest]:
    server = _Server(("127.0.0.1", 0), _Handler)
    server.state = IngestState()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02})
    thread.start()
    try:
        yield Ingest(f"http://127.0.0.1:{server.server_address[1]}{RUN_PATH}", server.state)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
