"""`make demo`'s supervisor brings a SIGKILLed or SIGSTOPped worker back, and a queued
run starts.

The demo's own configuration, as a newcomer runs it: SQLite and the embedded broker in a
fresh var directory, the local backend, gunicorn, the worker and beat under
``python -m scheduler.supervisor`` (the command scripts/demo ends with).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from pathlib import Path

import pytest
import requests

from tests.integration.conftest import REPO, stop_process
from tests.integration.private_redis import free_port

pytestmark = pytest.mark.integration

LAUNCH = """
from django.contrib.auth import get_user_model
from tests.integration.test_run_lifecycle import tiny_config
from scheduler.launch import experiment_launch
from webapp.runs import services
experiment = services.experiment_create(
    owner=get_user_model().objects.get(username="demo"),
    config=tiny_config("after-the-kill", steps=2),
    seeds=[0],
    resources={"backend": "local", "mem_gb": 2, "time_limit": "00:10:00"},
)
print(experiment_launch(experiment)[0].pk)
"""


def wait_for(condition: Callable[[], object], what: str, timeout: float) -> float:
    """Seconds until ``condition()`` is truthy; fails after ``timeout``."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if condition():
            return time.monotonic() - start
        time.sleep(0.25)
    raise AssertionError(f"{what}: not within {timeout:.0f} s")


class Demo:
    """The demo's var directory, environment and supervisor."""

    def __init__(self, var_dir: Path, zoo_dir: Path) -> None:
        self.var_dir = var_dir
        self.port = free_port()
        self.env = {
            name: value
            for name, value in os.environ.items()
            if name not in {"DATABASE_URL", "CELERY_BROKER_URL"}  # the embedded defaults
        }
        self.env |= {
            "MRL_VAR_DIR": str(var_dir),
            "MRL_ZOO_DIR": str(zoo_dir),
            "MRL_INGEST_BASE_URL": f"http://127.0.0.1:{self.port}",
            "DEBUG": "false",
        }
        self.supervisor: subprocess.Popen[bytes] | None = None

    def manage(self, *args: str) -> str:
        argv = [sys.executable, "manage.py", *args]
        done = subprocess.run(argv, cwd=REPO, env=self.env, capture_output=True, timeout=120)
        assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
        return done.stdout.decode()

    def start(self, *supervisor_args: str) -> None:
        argv = [sys.executable, "-m", "scheduler.supervisor", "--port", str(self.port)]
        argv += supervisor_args
        with (self.var_dir / "supervisor.out").open("wb") as out:
            self.supervisor = subprocess.Popen(
                [*argv, "--var-dir", str(self.var_dir)], cwd=REPO, env=self.env, stderr=out
            )

    def pid(self, program: str) -> int | None:
        state_path = self.var_dir / "run" / "supervisor.json"
        if not state_path.exists():
            return None
        pid = json.loads(state_path.read_text())["programs"][program]["pid"]
        return int(pid) if pid else None

    def run_state(self, run_id: int) -> tuple[str, str]:
        with sqlite3.connect(self.var_dir / "demo.sqlite3", timeout=10) as db:
            row = db.execute(
                "SELECT state, slurm_job_id FROM experiments_run WHERE id = ?", (run_id,)
            ).fetchone()
        return row[0], row[1]

    def state_history(self, run_id: int) -> list[str]:
        """Every state the run entered, in order."""
        with sqlite3.connect(self.var_dir / "demo.sqlite3", timeout=10) as db:
            rows = db.execute(
                "SELECT state FROM experiments_runstatechange WHERE run_id = ? ORDER BY at, id",
                (run_id,),
            ).fetchall()
        return [row[0] for row in rows]

    def heartbeat_pids(self) -> set[int]:
        with sqlite3.connect(self.var_dir / "demo.sqlite3", timeout=10) as db:
            rows = db.execute("SELECT pid FROM core_serviceheartbeat").fetchall()
        return {row[0] for row in rows}

    def log(self) -> str:
        parts = [self.var_dir / "supervisor.out", self.var_dir / "log" / "worker.log"]
        return "\n".join(p.read_text(errors="replace")[-3000:] for p in parts if p.exists())


@pytest.fixture
def demo(request: pytest.FixtureRequest, tmp_path: Path, zoo_dir: Path) -> Iterator[Demo]:
    """The demo, running; ``@pytest.mark.parametrize("demo", [[ARGS]], indirect=True)``
    passes ARGS to the supervisor."""
    demo = Demo(tmp_path / "var", zoo_dir)
    demo.var_dir.mkdir()
    demo.manage("migrate", "--noinput", "-v", "0")
    demo.manage("demo_setup")
    demo.start(*getattr(request, "param", []))
    try:
        yield demo
    finally:
        if demo.supervisor is not None:
            stop_process(demo.supervisor, timeout=40)


def test_a_sigkilled_worker_is_replaced_and_a_queued_run_starts(demo: Demo) -> None:
    first = wait_for(lambda: demo.pid("worker"), "the supervisor to start the worker", 30)
    assert first
    first_pid = demo.pid("worker")
    wait_for(lambda: first_pid in demo.heartbeat_pids(), "the first worker to report in", 60)
    page = requests.get(f"http://127.0.0.1:{demo.port}/accounts/login/", timeout=10)
    assert page.status_code == 200 and "Log in" in page.text  # gunicorn serves the app

    os.kill(first_pid, signal.SIGKILL)
    killed_at = time.monotonic()
    run_id = int(demo.manage("shell", "-c", LAUNCH).strip().splitlines()[-1])
    # Launched while no worker runs, the run waits in the queue; the replacement may
    # already have taken it by now (a fast restart), but only the replacement can have.
    assert demo.state_history(run_id)[0] == "queued"

    job_id = ""
    try:
        wait_for(
            lambda: (demo.pid("worker") or first_pid) != first_pid,
            f"a new worker\n{demo.log()}",
            timeout=30 - (time.monotonic() - killed_at),
        )
        second_pid = demo.pid("worker")
        wait_for(
            lambda: second_pid in demo.heartbeat_pids(),
            f"the new worker to consume (its start-up heartbeat)\n{demo.log()}",
            timeout=30 - (time.monotonic() - killed_at),
        )
        consuming_after = time.monotonic() - killed_at
        assert consuming_after < 30
        # The run enters "submitted" before the job starts and its id is stored (the
        # submit task's two steps): wait for the id, the proof that a job started.
        wait_for(
            lambda: demo.run_state(run_id)[1] != "",
            f"the queued run to start a job\n{demo.log()}",
            timeout=60,
        )
        state, job_id = demo.run_state(run_id)
        assert state in {"submitted", "pending", "running", "completing", "completed"}, state
        assert job_id.isdigit()  # the local job's pid
        supervisor_log = (demo.var_dir / "supervisor.out").read_text()
        assert f"worker (pid {first_pid}) was killed by SIGKILL" in supervisor_log
        assert "restart 1" in supervisor_log
    finally:
        if job_id:  # the job runs in a session of its own: end it with the test
            with suppress(ProcessLookupError, ValueError):
                os.killpg(int(job_id), signal.SIGKILL)


STALL_SECONDS = 15
"""The test's ``--worker-stall-seconds``: three of the worker's beats (default 60)."""


@pytest.mark.parametrize("demo", [["--worker-stall-seconds", str(STALL_SECONDS)]], indirect=True)
def test_a_sigstopped_worker_is_replaced_and_a_run_launched_meanwhile_starts(
    demo: Demo,
) -> None:
    """Issue 31: a worker stopped with SIGSTOP lives but does nothing, and the supervisor
    restarted only programs that exit: runs stayed queued until a human acted. Now its
    liveness file goes stale, the supervisor SIGKILLs it and starts a new one, which
    takes the run launched during the stall."""
    wait_for(lambda: demo.pid("worker"), "the supervisor to start the worker", 30)
    first_pid = demo.pid("worker")
    assert first_pid
    wait_for(lambda: first_pid in demo.heartbeat_pids(), "the first worker to report in", 60)
    alive = demo.var_dir / "run" / "worker.alive"
    wait_for(lambda: alive.exists(), f"the worker's liveness file\n{demo.log()}", 30)

    os.kill(first_pid, signal.SIGSTOP)
    stopped_at = time.monotonic()
    job_id = ""
    try:
        run_id = int(demo.manage("shell", "-c", LAUNCH).strip().splitlines()[-1])
        assert demo.state_history(run_id)[0] == "queued"
        wait_for(
            lambda: (demo.pid("worker") or first_pid) != first_pid,
            f"a new worker in place of the stopped one\n{demo.log()}",
            timeout=STALL_SECONDS + 45,
        )
        replaced_after = time.monotonic() - stopped_at
        assert replaced_after >= STALL_SECONDS - 1  # not before the stall was long enough
        with pytest.raises(ProcessLookupError):
            os.kill(first_pid, 0)  # killed and reaped, not left stopped beside the new one
        second_pid = demo.pid("worker")
        wait_for(
            lambda: second_pid in demo.heartbeat_pids(),
            f"the new worker to report in\n{demo.log()}",
            timeout=60,
        )
        wait_for(
            lambda: demo.run_state(run_id)[0] != "queued",
            f"the run launched during the stall to start\n{demo.log()}",
            timeout=60,
        )
        state, job_id = demo.run_state(run_id)
        assert state in {"submitted", "pending", "running", "completing", "completed"}, state
        assert job_id
        supervisor_log = (demo.var_dir / "supervisor.out").read_text()
        assert f"worker (pid {first_pid}) has not beaten for " in supervisor_log
        assert "although its process lives" in supervisor_log
        assert f"worker (pid {first_pid}) was killed by SIGKILL" in supervisor_log
    finally:
        with suppress(ProcessLookupError):
            os.kill(first_pid, signal.SIGCONT)  # a failed test leaves nothing stopped
        if job_id:  # the job runs in a session of its own: end it with the test
            with suppress(ProcessLookupError, ValueError):
                os.killpg(int(job_id), signal.SIGKILL)


PROBE_WRITER = """
import sqlite3, sys, time
database = sqlite3.connect(sys.argv[1], timeout=30)
database.execute("CREATE TABLE IF NOT EXISTS hostile_probe (id INTEGER PRIMARY KEY, at REAL)")
database.commit()
written = 0
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    database.execute("INSERT INTO hostile_probe (at) VALUES (?)", (time.time(),))
    database.commit()
    written += 1
    time.sleep(0.01)
print(written)
"""


def test_the_apps_own_sqlite_files_named_as_suite_files_leave_the_database_whole(
    demo: Demo, tmp_path: Path
) -> None:
    """Issue 36: naming the demo's own SQLite database (or the broker's) as a suite file
    opened a second descriptor on it inside the web process, whose closing dropped that
    process's SQLite locks; a write from another process then corrupted the database.
    Now it is refused before anything is opened, while a writer in another process and
    the demo's own web process, worker and beat keep writing."""
    base = f"http://127.0.0.1:{demo.port}"
    wait_for(lambda: _answers(f"{base}/healthz"), "the demo's web server", 60)
    database = demo.var_dir / "demo.sqlite3"
    writer = subprocess.Popen(
        [sys.executable, "-c", PROBE_WRITER, str(database), "20"],
        stdout=subprocess.PIPE,
    )
    session = requests.Session()
    session.get(f"{base}/accounts/login/", timeout=10)
    login = session.post(
        f"{base}/accounts/login/",
        data={
            "username": "demo",
            "password": "demo-password",
            "csrfmiddlewaretoken": session.cookies["csrftoken"],
        },
        headers={"Referer": f"{base}/accounts/login/"},
        timeout=10,
    )
    assert login.status_code == 200 and "Log out" in login.text
    (tmp_path / "link.json").hardlink_to(database)
    hostile = [
        str(database),
        f"{database}-wal",
        f"{database}-shm",
        str(demo.var_dir / "broker.sqlite3"),
        str(demo.var_dir / "secret_key"),
        str(tmp_path / "link.json"),
    ]
    for round_ in range(3):  # again and again, while the writers write
        for path in hostile:
            page = session.post(
                f"{base}/suites/new/",
                data={
                    "name": f"probe{round_}",
                    "suite_file": path,
                    "tasks": "",
                    "csrfmiddlewaretoken": session.cookies["csrftoken"],
                },
                headers={"Referer": f"{base}/suites/new/"},
                timeout=30,
            )
            assert page.status_code == 200, (path, page.status_code)
            assert "not a suite JSON this deployment can read" in page.text, path
            assert "SQLite" not in page.text and "codec" not in page.text, path
    written = int(writer.communicate(timeout=60)[0])
    # The web process writes after it all (a suite saved from the textarea).
    good = demo.var_dir / "suites" / "synthetic" / "arith-addition.jsonl"
    saved = session.post(
        f"{base}/suites/new/",
        data={
            "name": "after",
            "suite_file": "",
            "tasks": f"a math {good}",
            "csrfmiddlewaretoken": session.cookies["csrftoken"],
        },
        headers={"Referer": f"{base}/suites/new/"},
        timeout=30,
    )
    assert saved.status_code == 200 and "Added suite after" in saved.text
    with sqlite3.connect(database, timeout=30) as db:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert db.execute("SELECT count(*) FROM hostile_probe").fetchone() == (written,)
        assert db.execute(
            "SELECT count(*) FROM experiments_evalsuite WHERE name = 'after'"
        ).fetchone() == (1,)
    assert written > 100


def _answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=5).status_code == 200
    except requests.RequestException:
        return False
