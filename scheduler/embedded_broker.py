"""The embedded broker: a Celery broker in one SQLite file, for `make demo`.

The demo needs a broker that no one has to install or run as root. kombu's filesystem
transport (one file a message) was that broker until a worker read a message file its
writer had not filled yet and died of the ``JSONDecodeError`` (a known kombu problem:
the file is visible between ``open`` and ``write``). Here a message is a row of a SQLite
table instead, so a message exists whole or not at all:

- a producer's ``INSERT`` commits atomically; a reader never sees half a message;
- a consumer takes the oldest message with one ``DELETE ... RETURNING`` statement, which
  SQLite runs under its write lock, so two consumers never get the same message and
  delivered messages do not pile up (kombu's own SQLAlchemy channel keeps every delivered
  row, marked invisible, forever);
- the database runs in WAL mode with a 30 s busy timeout: producers (the web app, beat)
  and the worker wait for each other's short write transactions instead of failing, and a
  lock held longer surfaces as a connection error, which the worker survives by
  reconnecting (kombu's connection errors), never as an "Unrecoverable error";
- processes that open a new broker file at the same moment do not race: the tables are
  created under an exclusive file lock, and a queue's row with ``INSERT OR IGNORE``
  (kombu's check-then-create lets two first publishers both insert the queue, and the
  loser's ``UNIQUE`` or "table already exists" error reached the caller: a producer
  died in the broker stress test, 1 run in 4 on CI).

What a worker had taken but not yet acknowledged when it is SIGKILLed is lost, as with
every kombu virtual transport; beat's ``runs_sync`` re-sends lost submissions
(``MRL_STALE_QUEUED_SECONDS``). Production and the test suite use Redis.

The URL is ``mrl-sqlite+sqlite:////absolute/path/broker.sqlite3``; importing
:mod:`scheduler` registers the ``mrl-sqlite`` transport name with kombu.
"""

from __future__ import annotations

import fcntl
from json import loads
from pathlib import Path
from queue import Empty
from typing import Any

from kombu.transport import TRANSPORT_ALIASES
from kombu.transport import sqlalchemy as kombu_sqlalchemy
from kombu.transport.sqlalchemy.models import metadata as kombu_metadata
from kombu.utils.encoding import bytes_to_str
from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import Engine

TRANSPORT_NAME = "mrl-sqlite"
BUSY_TIMEOUT_MS = 30_000
# kombu reads these from the transport options; the rest go to SQLAlchemy's create_engine.
_KOMBU_OPTIONS = (
    "queue_tablename",
    "message_tablename",
    "callback",
    "errback",
    "max_retries",
    "interval_start",
    "interval_step",
    "interval_max",
    "retry_errors",
    "polling_interval",
)


def broker_url(path: str) -> str:
    """The Celery broker URL of the embedded broker whose database is the file ``path``."""
    return f"{TRANSPORT_NAME}+sqlite:///{path}"


def _on_connect(dbapi_connection: Any, _record: Any) -> None:
    """Every connection: WAL (readers never block the writer), wait for locks, and fsync
    at checkpoints only (a process crash loses nothing; a power loss at worst the last
    transactions, never the file)."""
    cursor = dbapi_connection.cursor()
    cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA journal_mode = WAL")
    cursor.execute("PRAGMA synchronous = NORMAL")
    cursor.close()


def _create_tables_once(engine: Engine) -> None:
    """Create kombu's tables (if missing) while holding an exclusive lock on a file
    next to the database, so that processes opening a new broker file at the same moment
    do not race between SQLAlchemy's "does the table exist?" and its ``CREATE TABLE``."""
    database = engine.url.database
    if not database or database == ":memory:":
        kombu_metadata.create_all(engine)
        return
    with Path(f"{database}.lock").open("a") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            kombu_metadata.create_all(engine)
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)


class Channel(kombu_sqlalchemy.Channel):
    """kombu's SQLAlchemy channel with an atomic take-and-delete and a tuned SQLite."""

    def _engine_from_config(self) -> Engine:
        conninfo = self.connection.client
        options = {
            name: value
            for name, value in conninfo.transport_options.items()
            if name not in _KOMBU_OPTIONS
        }
        engine = create_engine(conninfo.hostname, **options)
        if engine.dialect.name == "sqlite":
            event.listen(engine, "connect", _on_connect)
            _create_tables_once(engine)
        return engine

    def _get_or_create(self, queue: str) -> Any:
        """The queue's row, created if missing; safe when several processes publish
        to a new queue at once (kombu's own version lets both insert it)."""
        queue_cls = self.queue_cls
        row = self.session.query(queue_cls).filter(queue_cls.name == queue).first()
        if row is not None:
            return row
        statement = text(
            f"INSERT OR IGNORE INTO {self.queue_tablename} (name) VALUES (:name)"  # ours
        )
        try:
            self.session.execute(statement, {"name": queue})
            self.session.commit()
        except Exception:
            self.session.rollback()
            raise
        return self.session.query(queue_cls).filter(queue_cls.name == queue).one()

    def _get(self, queue: str, timeout: float | None = None) -> dict[str, Any]:
        """The next message of ``queue``, taken and deleted by one statement (kombu's
        base signature: ``timeout`` is unused, the consumer's poll waits between tries)."""
        queue_id = self._get_or_create(queue).id
        table = self.message_tablename
        statement = text(
            f"DELETE FROM {table} WHERE id = (SELECT id FROM {table} "  # the names are ours
            "WHERE queue_id = :queue_id AND visible ORDER BY id LIMIT 1) RETURNING payload"
        )
        try:
            row = self.session.execute(statement, {"queue_id": queue_id}).first()
            self.session.commit()
        except Exception:
            self.session.rollback()
            raise
        if row is None:
            raise Empty()
        return loads(bytes_to_str(row[0]))


class Transport(kombu_sqlalchemy.Transport):
    """The embedded broker's transport (see the module's docstring)."""

    Channel = Channel


def register() -> None:
    """Let kombu resolve ``mrl-sqlite+...`` URLs to :class:`Transport` (idempotent)."""
    TRANSPORT_ALIASES[TRANSPORT_NAME] = f"{__name__}:Transport"
