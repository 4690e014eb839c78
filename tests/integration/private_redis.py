"""A Redis server of one test alone, to stop and start as a fault.

The shared Redis on 6379 serves every other test and engineer on the machine, so a test
that restarts its broker gets its own ``redis-server`` on a free port. It keeps nothing on
disk (``--save "" --appendonly no``): a restart loses every message, queued or
unacknowledged, as a crash of a broker without persistence does.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import redis

from tests.integration.conftest import stop_process


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class PrivateRedis:
    """``redis-server`` on 127.0.0.1:``port``, started and stopped at will."""

    root: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def log_path(self) -> Path:
        return self.root / "redis.log"

    def start(self, timeout: float = 15) -> None:
        """Start the server (empty) and wait until it answers PING."""
        argv = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1"]
        argv += ["--save", "", "--appendonly", "no", "--dir", str(self.root)]
        with self.log_path.open("ab") as log_file:
            self.process = subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while not self.answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start:\n{self.log()}")
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop the server; with nothing saved, every message it held is gone."""
        if self.process is None:
            return
        stop_process(self.process, timeout=15)
        self.process = None

    def answers(self) -> bool:
        try:
            return bool(self.client().ping())
        except redis.RedisError:
            return False

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_connect_timeout=1, socket_timeout=2)

    def queue_length(self, queue: str) -> int:
        """Messages waiting in Celery queue ``queue`` (a Redis list of that name)."""
        return int(self.client().llen(queue))

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@contextmanager
def private_redis(root: Path) -> Iterator[PrivateRedis]:
    """A started :class:`PrivateRedis` whose files live in ``root``; stopped afterwards."""
    root.mkdir(parents=True, exist_ok=True)
    server = PrivateRedis(root=root)
    try:
        server.start()
        yield server
    finally:
        server.stop()
