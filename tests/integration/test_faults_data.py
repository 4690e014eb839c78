"""Faults on the data path, each judged on the stored metric series: nothing lost, nothing
duplicated (every step of every policy and of ``_pool`` present; the primary key
(series, step) and the events' unique key make a duplicate impossible, so the checks look
for gaps and compare the stored rows with the trainer's spool line for line).

1. PostgreSQL down for a few seconds, then restarted, while the real shipper streams a
   spool into the web app: 5xx only while the database is down, the same app processes
   serve again afterwards (they reconnect), the shipper retries, every point stored once.
2. The web app SIGKILLed for 60 s while a real trainer run streams: the trainer keeps
   training and spooling, its shipper waits the outage out (the final flush included),
   the series is complete.
3. The web app gone for longer than the final flush waits: the trainer exits with status
   3 (not 0), the spool keeps the rest, and the resume ships it.
4. A job's trainer worker SIGKILLed (through the real scheduler, local backend): the run
   fails with the reason, nothing hangs, Resubmit resumes it from its checkpoint and the
   series ends complete.

Tests 1-3 run the app as gunicorn on a private PostgreSQL cluster (both may be stopped
or killed without touching the shared services); test 4 uses the scheduler world of
``conftest.py`` (Celery worker on Redis, live server on the test database).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from scheduler.backends import group_members
from tests.integration.conftest import SchedulerWorld
from tests.integration.faults import (
    REPO,
    AppRun,
    AppServer,
    EventKey,
    PointKey,
    PrivatePostgres,
    app_environment,
    create_run,
    free_port,
    manage,
    private_postgres,
    run_state,
    stored_events,
    stored_points,
)
from tests.integration.test_run_lifecycle import (
    Watcher,
    every_policy,
    history,
    launch,
    series_steps,
    tiny_config,
)
from trainer import metrics as m
from trainer.checkpoint import latest_checkpoint
from trainer.cli import EXIT_UNSHIPPED
from trainer.shipper import Shipper
from trainer.spool import Spool, make_event, make_point, read_events, read_points
from webapp.metrics.models import MetricPoint, TransferEvent
from webapp.runs.models import Run

# One worker starts the module's app (gunicorn on a Postgres of its own); spread over
# two, both would (tests/conftest.py).
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("integration-faults-data")]

POLICIES = ("llama", "gpt2", m.POOL)


# --------------------------------------------------------------------------- the app


@dataclass
class FaultApp:
    """gunicorn serving the web app from a private PostgreSQL cluster."""

    postgres: PrivatePostgres
    database_url: str
    env: dict[str, str]
    server: AppServer


@pytest.fixture(scope="module")
def fault_app(tmp_path_factory: pytest.TempPathFactory, zoo_dir: Path) -> Iterator[FaultApp]:
    with private_postgres() as postgres:
        database_url = postgres.create_database("mrl")
        var_dir = tmp_path_factory.mktemp("fault-app")
        env = app_environment(database_url, var_dir, MRL_ZOO_DIR=str(zoo_dir))
        manage(env, "migrate", "-v0")
        server = AppServer(env, free_port(), var_dir / "gunicorn.log")
        server.start()
        try:
            yield FaultApp(postgres, database_url, env, server)
        finally:
            server.stop()


# --------------------------------------------------------------------------- spool vs database


def spooled_points(run_dir: Path) -> list[PointKey]:
    return [(p["policy"], p["key"], p["step"]) for p in read_points(run_dir)]


def spooled_events(run_dir: Path) -> list[EventKey]:
    return [
        (e["step"], e["source"], e["target"], e["kind"], e["prompt_id"])
        for e in read_events(run_dir)
    ]


def assert_stored_exactly_once(database_url: str, run_id: int, run_dir: Path) -> None:
    """The database holds every spooled point and event, each once, and nothing else."""
    spool_points, rows = spooled_points(run_dir), stored_points(database_url, run_id)
    assert not [k for k, n in Counter(spool_points).items() if n > 1], "the spool repeats"
    assert not [k for k, n in Counter(rows).items() if n > 1], "a point is stored twice"
    missing = set(spool_points) - set(rows)
    assert not missing, f"{len(missing)} spooled points not stored, e.g. {sorted(missing)[:5]}"
    assert set(rows) == set(spool_points) and len(rows) == len(spool_points)
    spool_events, events = spooled_events(run_dir), stored_events(database_url, run_id)
    assert Counter(events) == Counter(spool_events), "transfer events lost or repeated"


def steps_of(points: list[PointKey], key: str) -> dict[str, list[int]]:
    steps: dict[str, list[int]] = {}
    for policy, point_key, step in sorted(points):
        if point_key == key:
            steps.setdefault(policy, []).append(step)
    return steps


class SpoolWriter:
    """Writes one step after another into a real spool, like rank 0 of a run does: two
    policies and ``_pool``, two keys each, one transfer event a step."""

    KEYS = (m.TRAIN_REWARD_MEAN, m.PG_LOSS)

    def __init__(self, run_dir: Path, interval_s: float = 0.02) -> None:
        self.spool = Spool(run_dir)
        self.interval_s = interval_s
        self.step = 0
        self._stop = threading.Event()
        self._writing = threading.Event()
        self._writing.set()
        self._thread = threading.Thread(target=self._run, name="spool-writer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> int:
        """Stop writing; the last step written."""
        self._stop.set()
        self._thread.join(timeout=10)
        self.spool.close()
        return self.step

    def wait_for(self, step: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while self.step < step:
            assert time.monotonic() < deadline, f"the writer is stuck at step {self.step}"
            time.sleep(0.02)

    def pause(self) -> None:
        self._writing.clear()

    def resume(self) -> None:
        self._writing.set()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            if not self._writing.is_set():
                continue
            step = self.step + 1
            now = time.time()
            self.spool.append_points(
                make_point(policy, key, step, step / 1000, wall_time=now)
                for policy in POLICIES
                for key in self.KEYS
            )
            self.spool.append_events([make_event(step, "llama", "gpt2", "success", f"p-{step}")])
            self.step = step


# --------------------------------------------------------------------------- Postgres restarted


@dataclass(frozen=True)
class Reply:
    sent_at: float
    received_at: float
    status: int


@dataclass
class ReplyLog:
    """Every HTTP answer the shipper got, with when its request left (a response hook of
    the shipper's own ``requests`` session: an observer, nothing is changed)."""

    replies: list[Reply] = field(default_factory=list)

    def record(self, response: requests.Response, *args: object, **kwargs: object) -> None:
        received = time.monotonic()
        sent = received - response.elapsed.total_seconds()
        self.replies.append(Reply(sent, received, response.status_code))

    def session(self) -> requests.Session:
        session = requests.Session()
        session.hooks["response"].append(self.record)
        return session

    def since(self, moment: float) -> list[Reply]:
        return [reply for reply in self.replies if reply.sent_at >= moment]


@dataclass(frozen=True)
class Outage:
    started: float
    ended: float

    def overlaps(self, reply: Reply) -> bool:
        return reply.received_at >= self.started and reply.sent_at <= self.ended


def postgres_outage(postgres: PrivatePostgres, down_s: float) -> Outage:
    """Stop the cluster (fast: sessions end, their connections break), wait, start it."""
    started = time.monotonic()
    postgres.stop("fast")
    time.sleep(down_s)
    postgres.start()
    return Outage(started, time.monotonic())


def postgres_restart(postgres: PrivatePostgres) -> Outage:
    """``pg_ctl restart -m fast``: a short outage, after which every app process still
    holds a connection to the old server unless it served a request in between."""
    started = time.monotonic()
    postgres.stop("fast")
    postgres.start()
    return Outage(started, time.monotonic())


def wait_until_shipped(shipper: Shipper, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while shipper.pending():
        assert time.monotonic() < deadline, "the shipper did not catch up"
        time.sleep(0.05)


def test_postgres_restarted_mid_ingest_loses_and_repeats_nothing(
    fault_app: FaultApp, tmp_path: Path
) -> None:
    """The real spool and shipper (a writer thread stands in for rank 0, so the stream
    is steady and the outage lands on batches in flight) into gunicorn (2 workers)."""
    run = create_run(fault_app.env, tiny_config("pg-restart"))
    run_dir = tmp_path / "run"
    replies = ReplyLog()
    shipper = Shipper(
        run_dir,
        fault_app.server.ingest_url(run.run_id),
        run.token,
        max_points_per_batch=300,
        backoff_base=0.2,
        backoff_max=1.0,
        session=replies.session(),
    )
    writer = SpoolWriter(run_dir)
    writer.start()
    shipper.start(poll_interval=0.05)
    workers = fault_app.server.worker_pids()
    writer.wait_for(20)

    # Down for 4 s while batches are in flight.
    outages = [postgres_outage(fault_app.postgres, down_s=4)]
    writer.wait_for(writer.step + 40)
    # Restarted at a quiet moment: no request in between breaks the app processes' kept
    # connections, so each of them meets its dead connection at its next request.
    writer.pause()
    wait_until_shipped(shipper)
    outages.append(postgres_restart(fault_app.postgres))
    writer.resume()
    writer.wait_for(writer.step + 60)
    last_step = writer.stop()
    assert shipper.stop(timeout=60), shipper.fatal_error

    failed = [reply for reply in replies.replies if reply.status != 200]
    assert failed, "no request met the outage: the fault was not exercised"
    assert all(500 <= reply.status < 600 for reply in failed), failed
    stray = [r for r in failed if not any(o.overlaps(r) for o in outages)]
    assert not stray, f"errors while the database was up: {stray} (outages {outages})"
    after = replies.since(outages[-1].ended)
    assert len(after) >= 5 and all(reply.status == 200 for reply in after)
    assert shipper.stats.retries >= len(failed)
    # The same gunicorn workers served before, during and after: Django reconnected.
    assert fault_app.server.worker_pids() == workers

    assert_stored_exactly_once(fault_app.database_url, run.run_id, run_dir)
    steps = steps_of(stored_points(fault_app.database_url, run.run_id), m.TRAIN_REWARD_MEAN)
    assert steps == {policy: list(range(1, last_step + 1)) for policy in POLICIES}


# --------------------------------------------------------------------------- the app down

APP_DOWN_S = 60
TRAINER_STEPS = 40


def trainer_command(
    run: AppRun, run_dir: Path, ingest_url: str, zoo_dir: Path, *options: str
) -> tuple[list[str], dict[str, str]]:
    """``python -m trainer run`` of ``run`` shipping to ``ingest_url``, as a job starts it
    (argv, environment)."""
    config_path = run_dir.parent / "config.json"
    config_path.write_text(json.dumps(run.config))
    argv = [sys.executable, "-m", "trainer", "run", "--config", str(config_path)]
    argv += ["--run-dir", str(run_dir), "--ingest-url", ingest_url, *options]
    env = {**os.environ, "MRL_ZOO_DIR": str(zoo_dir), "MRL_INGEST_TOKEN": run.token}
    return argv, env


def start_trainer(
    app: FaultApp, run: AppRun, run_dir: Path, zoo_dir: Path
) -> subprocess.Popen[bytes]:
    argv, env = trainer_command(run, run_dir, app.server.ingest_url(run.run_id), zoo_dir)
    with (run_dir.parent / "trainer.log").open("wb") as log_file:
        return subprocess.Popen(
            argv,
            cwd=REPO,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def wait_for_stored_step(app: FaultApp, run_id: int, step: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while (run_state(app.database_url, run_id)[1] or 0) < step:
        assert time.monotonic() < deadline, f"step {step} never arrived"
        time.sleep(0.2)


@pytest.mark.timeout(400)
def test_the_web_app_down_for_a_minute_while_a_run_streams(
    fault_app: FaultApp, zoo_dir: Path, tmp_path: Path
) -> None:
    """Killed (master and workers, SIGKILL) once step 2 is stored; back on the same port
    60 s later. The run usually ends inside the outage, so its final flush waits it out."""
    run = create_run(fault_app.env, tiny_config("app-down", steps=TRAINER_STEPS))
    run_dir = tmp_path / "run"
    trainer = start_trainer(fault_app, run, run_dir, zoo_dir)
    try:
        wait_for_stored_step(fault_app, run.run_id, 2)
        fault_app.server.kill()
        killed_at = time.monotonic()
        spooled_at_kill = len(spooled_points(run_dir))
        time.sleep(max(0.0, killed_at + APP_DOWN_S - time.monotonic()))
        spooled_while_down = len(spooled_points(run_dir)) - spooled_at_kill
        fault_app.server.start()
        returncode = trainer.wait(timeout=240)
    finally:
        if trainer.poll() is None:
            os.killpg(trainer.pid, signal.SIGKILL)
        if fault_app.server.process is None:
            fault_app.server.start()  # for the tests after this one
    log = (tmp_path / "trainer.log").read_text(errors="replace")
    assert returncode == 0, log[-3000:]
    assert spooled_while_down > 0, "the trainer stopped spooling while the app was down"

    assert_stored_exactly_once(fault_app.database_url, run.run_id, run_dir)
    steps = steps_of(stored_points(fault_app.database_url, run.run_id), m.TRAIN_REWARD_MEAN)
    assert steps == {policy: list(range(1, TRAINER_STEPS + 1)) for policy in POLICIES}
    assert stored_events(fault_app.database_url, run.run_id), "SGT moved no successes"
    assert run_state(fault_app.database_url, run.run_id) == ("completed", TRAINER_STEPS)


@pytest.mark.timeout(300)
def test_a_run_ending_while_the_app_is_down_keeps_its_metrics_for_the_resume(
    fault_app: FaultApp, zoo_dir: Path, tmp_path: Path
) -> None:
    """Past the final flush's patience the trainer says so (exit status 3, not a clean
    0 that would mark a cut-off run completed); the resume ships what is left."""
    steps = 3
    run = create_run(fault_app.env, tiny_config("app-gone", steps=steps))
    run_dir = tmp_path / "run"
    nobody = f"http://127.0.0.1:{free_port()}/api/v1/runs/{run.run_id}/ingest"
    argv, env = trainer_command(run, run_dir, nobody, zoo_dir, "--ship-timeout", "2")
    ended = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert ended.returncode == EXIT_UNSHIPPED, ended.stderr[-3000:]
    assert "did not take every metric" in ended.stderr and run.token not in ended.stderr
    assert stored_points(fault_app.database_url, run.run_id) == []

    argv, env = trainer_command(run, run_dir, fault_app.server.ingest_url(run.run_id), zoo_dir)
    resumed = subprocess.run(
        [*argv, "--resume"], cwd=REPO, env=env, capture_output=True, text=True, timeout=240
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resumed from the checkpoint of step {steps}" in resumed.stderr  # nothing retrained
    assert_stored_exactly_once(fault_app.database_url, run.run_id, run_dir)
    steps_stored = steps_of(stored_points(fault_app.database_url, run.run_id), m.TRAIN_REWARD_MEAN)
    assert steps_stored == {policy: list(range(1, steps + 1)) for policy in POLICIES}
    assert run_state(fault_app.database_url, run.run_id)[1] == steps


# --------------------------------------------------------------------------- a worker killed


def trainer_workers(job_pgid: int) -> list[int]:
    """The job's policy workers: the trainer processes whose parent is the trainer too
    (the launcher forks them on the CPU, so they share its command line)."""
    trainers: dict[int, int] = {}  # pid -> parent pid
    for pid in group_members(job_pgid):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            # /proc/PID/stat: "pid (comm) state ppid ...", comm may hold spaces.
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if b"trainer" in cmdline and b"run" in cmdline:
            trainers[pid] = int(stat.rsplit(")", 1)[1].split()[1])
    return [pid for pid, parent in trainers.items() if parent in trainers]


def holds_the_spool(pid: int, run_dir: Path) -> bool:
    """Whether ``pid`` has the run's metric spool open: rank 0 writes it."""
    spool = str(run_dir / "metrics.jsonl")
    fd_dir = Path(f"/proc/{pid}/fd")
    try:
        return any(os.readlink(fd_dir / fd) == spool for fd in os.listdir(fd_dir))
    except OSError:
        return False


@contextmanager
def jobs_cleaned_up(run: Run) -> Iterator[None]:
    """On the way out (a failed assertion included), kill what is left of the run's local
    job, so that no trainer outlives the test and ships into a closed live server."""
    try:
        yield
    finally:
        run.refresh_from_db()
        if run.slurm_job_id.isdigit() and group_members(int(run.slurm_job_id)):
            with suppress(ProcessLookupError):
                os.killpg(int(run.slurm_job_id), signal.SIGKILL)


def kill_one_worker(run: Run) -> int:
    """SIGKILL the job's worker that does not write the spool (rank 1): rank 0 is left
    waiting for it in a collective, the case that could hang. The job's process group."""
    job_pgid = int(run.slurm_job_id)
    workers = trainer_workers(job_pgid)
    assert len(workers) == 2, f"expected one worker per policy, found {workers}"
    victim = next(pid for pid in workers if not holds_the_spool(pid, Path(run.run_dir)))
    os.kill(victim, signal.SIGKILL)
    return job_pgid


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(400)
def test_a_sigkilled_worker_fails_the_run_and_resubmit_resumes_it(
    scheduler_world: SchedulerWorld, alice: User
) -> None:
    """Killed after its first checkpoint; resubmitted the way the run page's button does
    it (a POST to the view, which calls ``scheduler.launch.resubmit``)."""
    steps = 14
    run = launch(alice, "local", name="sigkill", steps=steps)
    watcher = Watcher(scheduler_world, run)
    with jobs_cleaned_up(run):
        run = watcher.until(
            lambda r: bool(r.run_dir) and latest_checkpoint(Path(r.run_dir)) is not None
        )
        run_dir = Path(run.run_dir)
        job_pgid = kill_one_worker(run)

        run = watcher.until_state("failed", "completed", "cancelled", timeout=120)
        assert run.state == "failed", watcher.states
        assert "exit code 1" in run.failure_reason, run.failure_reason
        assert "SIGKILL" in run.failure_reason, run.failure_reason  # the trainer's last words
        assert not group_members(job_pgid), "processes of the killed job are left behind"
        checkpoint = latest_checkpoint(run_dir)
        assert checkpoint is not None and checkpoint.step < steps

        client = Client()
        client.force_login(alice)
        response = client.post(reverse("dashboard:run_resubmit", args=[run.pk]))
        assert response.status_code == 302
        run = watcher.until_state("completed", "failed", "cancelled", timeout=300)
    assert run.state == "completed", (run.failure_reason, watcher.states)
    states = history(run)
    assert states.count("failed") == 1 and "queued" in states[states.index("failed") :], states

    log = (run_dir / "job" / "output.log").read_text(errors="replace")
    assert f"resumed from the checkpoint of step {checkpoint.step}" in log, log[-3000:]
    assert series_steps(run, m.TRAIN_REWARD_MEAN) == every_policy(list(range(1, steps + 1)))
    stored = MetricPoint.objects.filter(series__run=run)
    points = stored.values_list("series__policy", "series__key", "step")
    assert Counter(points) == Counter(spooled_points(run_dir))
    events = TransferEvent.objects.filter(run=run)
    event_keys = events.values_list("step", "source", "target", "kind", "prompt_id")
    assert Counter(event_keys) == Counter(spooled_events(run_dir))
