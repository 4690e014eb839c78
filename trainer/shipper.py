"""Ships a run's spool (:mod:`trainer.spool`) to the web app's ingestion API (SPEC 8.1).

The shipper keeps a cursor, the byte offsets into ``metrics.jsonl`` and ``events.jsonl``
up to which the server has acknowledged everything, in ``<run_dir>/ship_cursor.json``
(rewritten atomically after every acknowledged batch), and resumes from it after a
restart. Ingestion is idempotent, so sending a line twice is harmless and the shipper
errs on the side of resending: it only ever moves the cursor forward past lines the
server answered for, and moves it back when the trainer cut the spool on resume.

Answers:

* 200/201 ``{"accepted": n, "duplicates": k}``: the batch is in; move on.
* connection errors, timeouts, 408, 429, 5xx: :class:`TransientShipError`
  (:meth:`Shipper.drain` and the background thread back off and retry).
* 401/403 (token wrong or revoked), 404 (no such run), redirects, other 4xx:
  :class:`FatalShipError`; the spool is kept, shipping stops.
* 413: the batch caps are halved and the batch is retried.
* 400/422: the batch and the server's message go to ``<run_dir>/ship_rejected.jsonl``
  (nothing is lost silently) and the cursor moves past it.

The token never appears in logs, exceptions or ``repr``.
"""

from __future__ import annotations

import contextlib
import email.utils
import json
import logging
import os
import random
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import requests

try:  # a C JSON encoder, for encode_body; the shipper works without it too
    import orjson
except ImportError:  # pragma: no cover - orjson is a declared dependency (requirements-web.txt)
    orjson = None

from trainer.spool import (
    EVENTS_FILE,
    METRICS_FILE,
    SpoolOffsets,
    complete_length,
    read_complete_lines,
    read_truncations,
)

logger = logging.getLogger("trainer.shipper")

CURSOR_FILE = "ship_cursor.json"
REJECTED_FILE = "ship_rejected.jsonl"
MAX_MESSAGE_CHARS = 2000
FATAL_STATUSES = {401: "the run token is wrong or revoked", 403: "the token is another run's"}


class ShipError(Exception):
    """A batch could not be shipped."""


class TransientShipError(ShipError):
    """Worth retrying later: network trouble, overload, server errors.

    ``retry_after`` is the server's ``Retry-After`` in seconds, if it sent one.
    """

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class FatalShipError(ShipError):
    """Retrying will not help (e.g. the token was revoked); shipping stops, the spool stays."""

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


@dataclass
class ShipStats:
    """Counters since this shipper was created."""

    accepted: int = 0
    duplicates: int = 0
    batches: int = 0
    retries: int = 0
    rejected: int = 0


@dataclass
class _Cursor:
    """What the server has answered for: offsets into both files, and into the cut log."""

    metrics: int = 0
    events: int = 0
    truncations: int = 0

    @classmethod
    def load(cls, path: Path) -> _Cursor:
        try:
            data = json.loads(path.read_text())
            cursor = cls(**{k: int(data[k]) for k in ("metrics", "events", "truncations")})
        except FileNotFoundError:
            return cls()
        except (ValueError, KeyError, TypeError):
            logger.warning("unreadable ship cursor %s; resending the spool from the start", path)
            return cls()
        if min(cursor.metrics, cursor.events, cursor.truncations) < 0:
            return cls()
        return cursor

    def save(self, path: Path) -> None:
        fd, tmp = tempfile.mkstemp(prefix=".ship_cursor.", dir=path.parent)
        try:
            with os.fdopen(fd, "w") as handle:
                json.dump(asdict(self), handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise


@dataclass
class _Batch:
    """Lines read from the cursor, and the cursor just after them."""

    points: list[Any] = field(default_factory=list)
    events: list[Any] = field(default_factory=list)
    status: dict[str, str] | None = None
    status_version: int = 0
    end: SpoolOffsets = field(default_factory=SpoolOffsets)
    unparseable: list[dict[str, Any]] = field(default_factory=list)

    @property
    def lines(self) -> int:
        return len(self.points) + len(self.events) + len(self.unparseable)

    def body(self) -> dict[str, Any]:
        parts = {"points": self.points, "events": self.events, "status": self.status}
        return {name: part for name, part in parts.items() if part}


def encode_body(body: dict[str, Any]) -> bytes:
    """A batch as the JSON the shipper sends: with orjson where it is installed (a
    10,000-point batch in ~1 ms instead of ~30 with json, issue 23), else, or where orjson
    cannot (a string with a lone surrogate, an integer beyond 64 bits), as ``requests``'
    ``json=`` did (json, ASCII, no bare NaN). The spool holds no non-finite float (its
    writer sends them as the strings "NaN", "Infinity", "-Infinity"); were one there
    (a hand-edited spool), orjson writes null, which the server refuses (400)."""
    if orjson is not None:
        try:
            return orjson.dumps(body)
        except orjson.JSONEncodeError:
            pass
    return json.dumps(body, allow_nan=False).encode()


def _retry_after(response: requests.Response) -> float | None:
    value = response.headers.get("Retry-After")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - time.time())


class Shipper:
    """Sends ``<run_dir>``'s spool to ``ingest_url`` in batches; see the module docstring.

    ``ingest_url`` is the full endpoint, ``http://host/api/v1/runs/<id>/ingest``.
    ``sleep`` (used by :meth:`drain` between retries) and ``rng`` (the jitter) are
    injectable for tests. Safe to use from several threads; it only reads the spool.
    """

    def __init__(
        self,
        run_dir: Path,
        ingest_url: str,
        token: str,
        *,
        max_points_per_batch: int = 5000,
        max_events_per_batch: int = 5000,
        timeout: float = 10.0,
        backoff_base: float = 0.5,
        backoff_max: float = 30.0,
        session: requests.Session | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        if max_points_per_batch < 1 or max_events_per_batch < 1:
            raise ValueError("batch caps must be >= 1")
        self.run_dir = Path(run_dir)
        self.ingest_url = ingest_url
        self._token = token
        self.max_points_per_batch = max_points_per_batch
        self.max_events_per_batch = max_events_per_batch
        self.timeout = timeout
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.stats = ShipStats()
        self.fatal_error: FatalShipError | None = None
        self._session = session or requests.Session()
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._lock = threading.RLock()
        self._status_lock = threading.Lock()
        self._status: dict[str, str] | None = None
        self._status_version = 0
        self._cursor = _Cursor.load(self.cursor_path)
        self._thread: threading.Thread | None = None
        self._stop_event = threading.Event()

    def __repr__(self) -> str:
        return f"Shipper(run_dir={str(self.run_dir)!r}, ingest_url={self.ingest_url!r})"

    # ----------------------------------------------------------------- paths, state

    @property
    def cursor_path(self) -> Path:
        """``<run_dir>/ship_cursor.json``."""
        return self.run_dir / CURSOR_FILE

    @property
    def rejected_path(self) -> Path:
        """``<run_dir>/ship_rejected.jsonl``."""
        return self.run_dir / REJECTED_FILE

    @property
    def cursor(self) -> SpoolOffsets:
        """Byte offsets up to which the server has answered for both spool files."""
        with self._lock:
            return SpoolOffsets(metrics=self._cursor.metrics, events=self._cursor.events)

    def set_status(self, state: str, message: str = "") -> None:
        """Send ``{"state", "message"}`` with the next batch (once, until acknowledged)."""
        with self._status_lock:
            self._status = {"state": state, "message": message}
            self._status_version += 1

    def pending(self) -> bool:
        """Whether complete lines or a status are waiting to be acknowledged."""
        with self._lock:
            self._sync_cursor()
            target = self._spool_end()
        return self._behind(target) or self._status_waiting()

    def _status_waiting(self) -> bool:
        with self._status_lock:
            return self._status is not None

    def _spool_end(self) -> SpoolOffsets:
        return SpoolOffsets(
            metrics=complete_length(self.run_dir / METRICS_FILE),
            events=complete_length(self.run_dir / EVENTS_FILE),
        )

    def _behind(self, target: SpoolOffsets) -> bool:
        with self._lock:
            return self._cursor.metrics < target.metrics or self._cursor.events < target.events

    # ----------------------------------------------------------------- cursor upkeep

    def _sync_cursor(self) -> None:
        """Move the cursor back where the trainer cut the spool (logged cuts, then sizes)."""
        cursor = self._cursor
        cuts, cursor.truncations = read_truncations(self.run_dir, cursor.truncations)
        for cut in cuts:
            cursor.metrics = min(cursor.metrics, cut.metrics)
            cursor.events = min(cursor.events, cut.events)
        for name in ("metrics", "events"):
            path = self.run_dir / (METRICS_FILE if name == "metrics" else EVENTS_FILE)
            size = path.stat().st_size if path.exists() else 0
            if getattr(cursor, name) > size:
                clamped = complete_length(path)
                logger.info("%s shrank below the ship cursor; resending from %d", path, clamped)
                setattr(cursor, name, clamped)

    # ----------------------------------------------------------------- one batch

    def ship_once(self, timeout: float | None = None) -> int:
        """Send one batch from the cursor; the number of lines the server answered for.

        That is the lines acknowledged, plus any rejected (400/422) lines now in
        ``ship_rejected.jsonl``; 0 when there was nothing to send (a status alone counts
        0). Raises :class:`TransientShipError` or :class:`FatalShipError`.
        """
        with self._lock:
            while True:
                self._sync_cursor()
                batch = self._read_batch()
                if not batch.lines and batch.status is None:
                    return 0
                response = self._post(batch.body(), timeout or self.timeout)
                if response.status_code != 413:
                    return self._handle(batch, response)
                if len(batch.points) <= 1 and len(batch.events) <= 1:
                    return self._reject(batch, response)
                self._shrink(batch)

    def _read_batch(self) -> _Batch:
        batch = _Batch()
        metric_lines, metrics_end = read_complete_lines(
            self.run_dir / METRICS_FILE, self._cursor.metrics, self.max_points_per_batch
        )
        event_lines, events_end = read_complete_lines(
            self.run_dir / EVENTS_FILE, self._cursor.events, self.max_events_per_batch
        )
        batch.points = self._parse(metric_lines, METRICS_FILE, batch)
        batch.events = self._parse(event_lines, EVENTS_FILE, batch)
        batch.end = SpoolOffsets(metrics=metrics_end, events=events_end)
        with self._status_lock:
            batch.status, batch.status_version = self._status, self._status_version
        return batch

    @staticmethod
    def _parse(lines: list[bytes], name: str, batch: _Batch) -> list[Any]:
        records = []
        for line in lines:
            try:
                records.append(json.loads(line))
            except ValueError:
                text = line.decode("utf-8", "replace")
                batch.unparseable.append({"file": name, "line": text[:MAX_MESSAGE_CHARS]})
        return records

    def _post(self, body: dict[str, Any], timeout: float) -> requests.Response:
        headers = {"Authorization": f"Bearer {self._token}", "Content-Type": "application/json"}
        try:
            return self._session.post(
                self.ingest_url,
                data=encode_body(body),
                headers=headers,
                timeout=timeout,
                allow_redirects=False,
            )
        except requests.Timeout:
            raise TransientShipError(
                f"timed out after {timeout:g}s posting to the web app"
            ) from None
        except requests.RequestException as exc:
            reason = self._redact(f"{type(exc).__name__}: {exc}")[:MAX_MESSAGE_CHARS]
            raise TransientShipError(f"could not reach {self.ingest_url}: {reason}") from None

    def _handle(self, batch: _Batch, response: requests.Response) -> int:
        code = response.status_code
        if code in (200, 201):
            return self._acknowledge(batch, response)
        if code in (400, 422):
            return self._reject(batch, response)
        message = self._redact(response.text.strip())[:MAX_MESSAGE_CHARS]
        if code in (408, 429) or 500 <= code < 600:
            raise TransientShipError(
                f"the web app answered {code}: {message}", retry_after=_retry_after(response)
            )
        if code in FATAL_STATUSES:
            raise FatalShipError(
                f"the web app refused the run token ({code}: {FATAL_STATUSES[code]}); "
                f"shipping stopped, the spool in {self.run_dir} is kept: {message}",
                status_code=code,
            )
        raise FatalShipError(
            f"the web app answered {code} for {self.ingest_url} (check the URL); shipping "
            f"stopped, the spool in {self.run_dir} is kept: {message}",
            status_code=code,
        )

    def _acknowledge(self, batch: _Batch, response: requests.Response) -> int:
        try:
            reply = response.json()
            accepted, duplicates = int(reply["accepted"]), int(reply["duplicates"])
        except (ValueError, KeyError, TypeError):
            raise TransientShipError(
                f"the web app answered {response.status_code} without "
                "{'accepted': n, 'duplicates': k}; is the ingest URL right?"
            ) from None
        if batch.unparseable:
            self._write_rejected(batch.unparseable, "unparseable spool lines", None)
            self.stats.rejected += len(batch.unparseable)
        self._advance(batch)
        self.stats.accepted += accepted
        self.stats.duplicates += duplicates
        self.stats.batches += 1
        logger.debug(
            "shipped %d lines: %d accepted, %d duplicates", batch.lines, accepted, duplicates
        )
        return batch.lines

    def _reject(self, batch: _Batch, response: requests.Response) -> int:
        message = self._redact(response.text.strip())[:MAX_MESSAGE_CHARS]
        body = batch.body()
        record = {**body, "unparseable": batch.unparseable} if batch.unparseable else body
        self._write_rejected([record], message, response.status_code)
        self._advance(batch)
        self.stats.rejected += batch.lines
        logger.error(
            "the web app rejected a batch of %d points and %d events (%d): %s; saved to %s",
            len(batch.points),
            len(batch.events),
            response.status_code,
            message,
            self.rejected_path,
        )
        return batch.lines

    def _write_rejected(
        self, records: list[dict[str, Any]], message: str, code: int | None
    ) -> None:
        with open(self.rejected_path, "a", encoding="utf-8") as handle:
            for record in records:
                entry = {"time": time.time(), "status_code": code, "message": message, **record}
                handle.write(json.dumps(entry, separators=(",", ":"), ensure_ascii=False) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def _advance(self, batch: _Batch) -> None:
        self._cursor.metrics, self._cursor.events = batch.end.metrics, batch.end.events
        self._cursor.save(self.cursor_path)
        if batch.status is not None:
            with self._status_lock:
                if self._status_version == batch.status_version:
                    self._status = None

    def _shrink(self, batch: _Batch) -> None:
        """413: halve the caps below this batch's size (a single line too big is rejected)."""
        if len(batch.points) > 1:
            self.max_points_per_batch = max(1, len(batch.points) // 2)
        if len(batch.events) > 1:
            self.max_events_per_batch = max(1, len(batch.events) // 2)
        logger.warning(
            "batch too large (413); caps now %d points, %d events",
            self.max_points_per_batch,
            self.max_events_per_batch,
        )

    def _redact(self, text: str) -> str:
        return text.replace(self._token, "<token>") if self._token else text

    # ----------------------------------------------------------------- loops

    def backoff_delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Full jitter: uniform in [0, min(backoff_max, base * 2**attempt)]; at least
        ``retry_after`` when the server asked for it."""
        ceiling = min(self.backoff_max, self.backoff_base * 2 ** min(attempt, 62))
        delay = self._rng.uniform(0.0, ceiling)
        return delay if retry_after is None else max(delay, retry_after)

    def drain(self, deadline: float | None = None) -> bool:
        """Ship until everything in the spool now is acknowledged (True) or ``deadline``.

        ``deadline`` is a :func:`time.monotonic` time; False when it passed first. Retries
        transient errors with backoff; a :class:`FatalShipError` propagates.
        """
        with self._lock:
            self._sync_cursor()
            target = self._spool_end()
        attempt = 0
        while self._behind(self._clamped(target)) or self._status_waiting():
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            try:
                self.ship_once(timeout=self._request_timeout(remaining))
                attempt = 0
            except TransientShipError as exc:
                attempt = self._note_retry(exc, attempt)
                delay = self.backoff_delay(attempt - 1, exc.retry_after)
                self._sleep(delay if remaining is None else min(delay, remaining))
        return True

    def _request_timeout(self, remaining: float | None) -> float:
        """The HTTP timeout, shortened so a request does not run far past a deadline."""
        return self.timeout if remaining is None else max(0.05, min(self.timeout, remaining))

    def _clamped(self, target: SpoolOffsets) -> SpoolOffsets:
        """``target`` lowered to the spool's current end (it may have been cut since)."""
        end = self._spool_end()
        return SpoolOffsets(min(target.metrics, end.metrics), min(target.events, end.events))

    def _note_retry(self, exc: TransientShipError, attempt: int) -> int:
        with self._lock:
            self.stats.retries += 1
        logger.warning("shipping failed, will retry (attempt %d): %s", attempt + 1, exc)
        return attempt + 1

    def start(self, poll_interval: float = 1.0) -> None:
        """Ship new lines in a daemon thread until :meth:`stop` (or a fatal error)."""
        if self._thread is not None and self._thread.is_alive():
            raise RuntimeError("the shipper is already running")
        self._stop_event.clear()
        self._thread = threading.Thread(
            target=self._run, args=(poll_interval,), name="trainer-shipper", daemon=True
        )
        self._thread.start()

    def _run(self, poll_interval: float) -> None:
        attempt = 0
        while not self._stop_event.is_set():
            try:
                self.ship_once()
                attempt = 0
                if not self.pending():
                    self._stop_event.wait(poll_interval)
            except TransientShipError as exc:
                attempt = self._note_retry(exc, attempt)
                self._stop_event.wait(self.backoff_delay(attempt - 1, exc.retry_after))
            except FatalShipError as exc:
                self.fatal_error = exc
                logger.error("%s", exc)
                return
            except Exception:
                logger.exception("unexpected error in the shipper thread; retrying")
                attempt += 1
                self._stop_event.wait(self.backoff_delay(attempt - 1))

    def stop(self, timeout: float) -> bool:
        """Stop the thread, then drain what is left within ``timeout`` seconds.

        True when everything in the spool was acknowledged; False on timeout or after a
        fatal error (see :attr:`fatal_error`).
        """
        deadline = time.monotonic() + timeout
        self._stop_event.set()
        if self._thread is not None:
            self._thread.join(max(0.0, deadline - time.monotonic()))
            if self._thread.is_alive():
                return False
        if self.fatal_error is not None:
            return False
        try:
            return self.drain(deadline=deadline)
        except FatalShipError as exc:
            self.fatal_error = exc
            logger.error("%s", exc)
            return False
