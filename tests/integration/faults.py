"""Helpers for fault tests: a private PostgreSQL cluster, the web app as a subprocess,
and what a run stored.

The shared services on 5432/6379 serve every other test and engineer on the machine, so
a test that stops its database or kills its web server gets its own: a PostgreSQL 15
cluster in a temporary directory on a free port (:func:`private_postgres`) and gunicorn
serving the web app against it (:class:`AppServer`), both real processes that can be
stopped, killed and started again like in production.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import requests

REPO = Path(__file__).resolve().parents[2]
PG_BIN = Path(os.environ.get("MRL_PG_BIN", "/usr/lib/postgresql/15/bin"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --------------------------------------------------------------------------- PostgreSQL


@dataclass
class PrivatePostgres:
    """A PostgreSQL cluster of this test alone: trust auth, TCP on 127.0.0.1:``port``,
    its socket in ``root`` (not /var/run/postgresql, which the shared server uses)."""

    root: Path
    port: int

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def log_path(self) -> Path:
        return self.root / "postgres.log"

    def url(self, database: str = "postgres") -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1"
        self._pg_ctl("start", "-w", "-t", "60", "-l", str(self.log_path), "-o", options)

    def stop(self, mode: str = "fast") -> None:
        """Stop the server: ``fast`` ends sessions (their connections break), ``immediate``
        is a crash (recovery from the WAL at the next start)."""
        self._pg_ctl("stop", "-w", "-t", "60", "-m", mode)

    def is_running(self) -> bool:
        return (self.data_dir / "postmaster.pid").exists()

    def create_database(self, name: str) -> str:
        """Create database ``name``; its URL."""
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def _pg_ctl(self, *args: str) -> None:
        _as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(self.data_dir), *args])


def _as_postgres(argv: list[str]) -> None:
    """Run a server-side tool as the ``postgres`` user (PostgreSQL refuses root)."""
    if os.geteuid() == 0:
        argv = ["runuser", "-u", "postgres", "--", *argv]
    subprocess.run(argv, check=True, capture_output=True, timeout=120)


@contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    """A fresh PostgreSQL 15 cluster, started; stopped and deleted on exit."""
    # Not pytest's tmp_path: its parents are private to root and postgres must reach it.
    root = Path(tempfile.mkdtemp(prefix="mrl-pg-"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    cluster = PrivatePostgres(root=root, port=free_port())
    try:
        initdb = [str(PG_BIN / "initdb"), "-D", str(cluster.data_dir), "-U", "postgres"]
        _as_postgres([*initdb, "-A", "trust", "--no-sync", "-E", "UTF8"])
        cluster.start()
        yield cluster
    finally:
        if cluster.is_running():
            cluster.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)


# --------------------------------------------------------------------------- web app


def app_environment(database_url: str, var_dir: Path, **extra: str) -> dict[str, str]:
    """The environment a web app subprocess (and ``manage.py``) runs with."""
    return {
        **os.environ,
        "DATABASE_URL": database_url,
        "MRL_VAR_DIR": str(var_dir),
        "DJANGO_SETTINGS_MODULE": "webapp.settings",
        "DEBUG": "false",
        "SECRET_KEY": "fault-tests-" + "x" * 60,
        "LOG_LEVEL": "WARNING",
        **extra,
    }


def manage(env: dict[str, str], *args: str) -> str:
    """``manage.py ARGS`` in ``env``; its stdout."""
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if result.returncode != 0:
        raise AssertionError(f"manage.py {' '.join(args)} failed:\n{result.stderr[-3000:]}")
    return result.stdout


CREATE_RUN = """
import json
from django.contrib.auth.models import User
from webapp.core.services import lab_join
from webapp.runs import services
owner, _ = User.objects.get_or_create(username="faults")
lab_join(owner)
experiment = services.experiment_create(owner=owner, config=json.loads(CONFIG), seeds=[0])
run = services.runs_create(experiment)[0]
print(json.dumps({"run": run.pk, "token": services.run_token_issue(run), "config": run.config}))
"""


@dataclass(frozen=True)
class AppRun:
    """A run in the app's database: its id, its ingestion token and its trainer config."""

    run_id: int
    token: str
    config: dict[str, Any]


def create_run(env: dict[str, str], config: dict[str, Any]) -> AppRun:
    """A draft run of a new experiment of ``config`` (through the web layer's services,
    in the app's own database) with a fresh ingestion token."""
    code = f"CONFIG = {json.dumps(json.dumps(config))}\n{CREATE_RUN}"
    reply = json.loads(manage(env, "shell", "-c", code).strip().splitlines()[-1])
    return AppRun(run_id=reply["run"], token=reply["token"], config=reply["config"])


@dataclass
class AppServer:
    """gunicorn serving the web app on ``port``, in its own process group so that a kill
    takes the master and its workers down together (a crashed host, an OOM kill)."""

    env: dict[str, str]
    port: int
    log_path: Path
    workers: int = 2
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def ingest_url(self, run_id: int) -> str:
        return f"{self.url}/api/v1/runs/{run_id}/ingest"

    def start(self, timeout: float = 120) -> None:
        """Start gunicorn and wait until ``/healthz`` answers 200."""
        argv = [sys.executable, "-m", "gunicorn", "webapp.wsgi"]
        argv += ["--bind", f"127.0.0.1:{self.port}", "--workers", str(self.workers)]
        argv += ["--timeout", "120", "--log-level", "warning"]
        with self.log_path.open("ab") as log_file:
            self.process = subprocess.Popen(
                argv,
                cwd=REPO,
                env=self.env,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"gunicorn exited at start:\n{self.log()[-3000:]}")
            if self.healthy():
                return
            time.sleep(0.2)
        raise AssertionError(f"gunicorn did not answer /healthz in {timeout} s:\n{self.log()}")

    def healthy(self) -> bool:
        try:
            return requests.get(f"{self.url}/healthz", timeout=5).status_code == 200
        except requests.RequestException:
            return False

    def worker_pids(self) -> set[int]:
        """The master's children: the processes that serve requests."""
        assert self.process is not None
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        return {int(pid) for pid in children.read_text().split()}

    def kill(self) -> None:
        """SIGKILL the master and every worker at once: no graceful shutdown."""
        if self.process is None:
            return
        with suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)
        self.process = None

    def stop(self) -> None:
        """Shut down gracefully (SIGTERM); kill what is left after 30 s."""
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=30)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            self.kill()
        self.process = None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


# --------------------------------------------------------------------------- what is stored

PointKey = tuple[str, str, int]
"""(policy, key, step): the identity of a stored point."""
EventKey = tuple[int, str, str, str, str]
"""(step, source, target, kind, prompt_id): the identity of a stored transfer event."""


def stored_points(database_url: str, run_id: int) -> list[PointKey]:
    """Every point of ``run_id`` in the database, one entry per row."""
    sql = (
        "SELECT s.policy, s.key, p.step FROM experiments_metricpoint p "
        "JOIN experiments_metricseries s ON s.id = p.series_id WHERE s.run_id = %s"
    )
    with psycopg.connect(database_url) as conn:
        return [tuple(row) for row in conn.execute(sql, [run_id]).fetchall()]


def stored_events(database_url: str, run_id: int) -> list[EventKey]:
    """Every transfer event of ``run_id`` in the database, one entry per row."""
    sql = (
        "SELECT step, source, target, kind, prompt_id FROM experiments_transferevent "
        "WHERE run_id = %s"
    )
    with psycopg.connect(database_url) as conn:
        return [tuple(row) for row in conn.execute(sql, [run_id]).fetchall()]


def run_state(database_url: str, run_id: int) -> tuple[str, int | None]:
    """(state, last_step) of ``run_id`` as the database has them."""
    sql = "SELECT state, last_step FROM experiments_run WHERE id = %s"
    with psycopg.connect(database_url) as conn:
        row = conn.execute(sql, [run_id]).fetchone()
    assert row is not None, f"no run {run_id}"
    return row[0], row[1]
