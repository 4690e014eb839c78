"""Faults on the way from the launch to the job, through real processes: the broker
restarted with submissions in flight, the worker killed inside sbatch, slurmctld
restarted under a running job, and a job killed by Slurm at its time limit.

Each test checks that no run is lost and none is submitted twice: every run gets
exactly one Slurm job per attempt (counted by its name in ``squeue``, which lists
finished jobs for MinJobAge = 10 minutes, and by the lines its job script writes when it
starts), its history shows one submission, and it completes with its metric series
complete (every step for every policy and the pool; the primary key makes a duplicate
point impossible, so the checks look for gaps).

The workers here get short recovery thresholds (settings read from the environment),
so that what beat's ``runs_sync`` does after a minute in production happens within
seconds; the test drives ``runs_sync`` itself, twice a second.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client
from kombu import pools as kombu_pools
from kombu.exceptions import KombuError

from scheduler import slurm
from scheduler.celery import app
from scheduler.launch import experiment_launch
from scheduler.run_job import job_spec
from scheduler.sync import TIME_LIMIT_RESUMED
from scheduler.tasks import runs_sync
from tests.integration.conftest import (
    REPO,
    CeleryWorker,
    job_environment,
    run_settings,
    start_celery_worker,
    stop_celery_worker,
)
from tests.integration.private_redis import private_redis
from tests.integration.test_run_lifecycle import (
    TRAIN_KEY,
    every_policy,
    history,
    series_steps,
    tiny_config,
)
from trainer.checkpoint import latest_checkpoint
from webapp.runs import services
from webapp.runs.models import Experiment, Run

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slurm,
    pytest.mark.django_db(transaction=True),
]

RECOVERY_ENV = {
    "MRL_STALE_QUEUED_SECONDS": "3",
    "MRL_STALE_SUBMIT_SECONDS": "3",
    "MRL_FORGOTTEN_GRACE_SECONDS": "5",
}
"""Seconds instead of minutes (see webapp/settings.py, "recovery")."""
SLURM_STATE_DIR = Path(os.environ.get("MRL_SLURM_STATE", "/var/lib/mrl-slurm-dev"))
FINISHED = ("completed", "failed", "cancelled")


# --------------------------------------------------------------------------- the world
@dataclass
class FaultWorld:
    """What the workers of these tests share: the live server their jobs report to, the
    run directories, and the environment with the short recovery thresholds."""

    tmp: pytest.TempPathFactory
    run_root: Path
    env: dict[str, str]

    @contextmanager
    def worker(self, *, supervised: bool = False, **extra_env: str) -> Iterator[CeleryWorker]:
        """A Celery worker on a queue of its own; this process sends its tasks there."""
        worker = start_celery_worker(
            self.tmp, extra_env={**self.env, **extra_env}, supervised=supervised
        )
        previous = app.conf.task_default_queue
        app.conf.task_default_queue = worker.queue
        try:
            yield worker
        finally:
            app.conf.task_default_queue = previous
            stop_celery_worker(worker)


@pytest.fixture(scope="module")
def fault_world(
    live_server: Any,
    django_db_setup: None,
    zoo_dir: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[FaultWorld]:
    run_root = tmp_path_factory.mktemp("fault-runs")
    env = {**job_environment(live_server.url, run_root, zoo_dir), **RECOVERY_ENV}
    with run_settings(run_root, zoo_dir):
        yield FaultWorld(tmp=tmp_path_factory, run_root=run_root, env=env)


class Driver:
    """Plays beat: sends ``runs_sync`` to the worker twice a second (a tick lost to a
    broker outage is lost, as beat's would be) until a condition holds."""

    def __init__(self, worker: CeleryWorker) -> None:
        self.worker = worker

    def tick(self) -> None:
        with suppress(KombuError, OSError):  # the broker is down
            runs_sync.apply_async(queue=self.worker.queue)

    def until(self, done: Callable[[], bool], what: str, timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.tick()
            time.sleep(0.5)
            if done():
                return
        raise AssertionError(f"{what}: not within {timeout:.0f} s\n{self.worker.log()[-4000:]}")

    def until_finished(self, runs: list[Run], timeout: float = 240) -> None:
        def finished() -> bool:
            for run in runs:
                run.refresh_from_db()
            return all(run.state in FINISHED for run in runs)

        def report() -> str:
            return "; ".join(f"run {run.pk}: {history(run)} {run.status_message!r}" for run in runs)

        try:
            self.until(finished, "the runs to finish", timeout)
        except AssertionError as exc:
            raise AssertionError(f"{report()}\n{exc}") from None


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.1)


# --------------------------------------------------------------------------- runs
def launch(owner: User, name: str, *, seeds: tuple[int, ...] = (0,), **config: Any) -> list[Run]:
    """Queue one Slurm run per seed of a tiny two-policy experiment named ``name``."""
    return experiment_launch(experiment(owner, name, seeds=seeds, **config))


def experiment(
    owner: User,
    name: str,
    *,
    seeds: tuple[int, ...] = (0,),
    steps: int = 4,
    time_limit: str = "00:20:00",
    **config: Any,
) -> Experiment:
    """A tiny two-policy experiment on the Slurm cluster (``config`` overrides the trainer's)."""
    resources = {"backend": "slurm", "partition": "debug", "mem_gb": 2, "time_limit": time_limit}
    return services.experiment_create(
        owner=owner,
        config={**tiny_config(name, steps=steps), **config},
        seeds=list(seeds),
        resources=resources,
    )


def unique(prefix: str) -> str:
    """A run name no other session's job carries (Slurm keeps finished jobs 10 minutes,
    and run ids restart with every test database)."""
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    NAMES_OF_THIS_TEST.append(name)
    return name


NAMES_OF_THIS_TEST: list[str] = []


@pytest.fixture(autouse=True)
def no_job_left_behind() -> Iterator[None]:
    """Cancel whatever jobs of this test's runs still live after it (a failed test): the
    cluster is shared, and a stray job holds its CPUs until its trainer gives up."""
    NAMES_OF_THIS_TEST.clear()
    yield
    prefixes = tuple(f"mrl-{name}-" for name in NAMES_OF_THIS_TEST)
    with suppress(slurm.SlurmError):
        for job in slurm.squeue().values():
            if job.name.startswith(prefixes) and not job.finished:
                slurm.scancel(job.job_id)


def slurm_jobs(run: Run) -> list[tuple[str, str]]:
    """(job id, state) of every job Slurm lists under the run's job name, oldest first.

    Sorted by the job id's number: as strings, job 100 would come before job 98.
    """
    name = f"mrl-{job_spec(run).name}"
    jobs = [(job.job_id, job.state) for job in squeue_patiently().values() if job.name == name]
    return sorted(jobs, key=lambda job: int(job[0]))


def squeue_patiently(attempts: int = 10) -> dict[str, slurm.SlurmJob]:
    """``squeue``, asked again while slurmctld answers with a transient error (a busy
    controller says "slurm_load_jobs: ... Unspecified error"), as the status sync does
    on its next tick."""
    for attempt in range(attempts):
        try:
            return slurm.squeue()
        except slurm.SlurmError as exc:
            if not exc.transient or attempt == attempts - 1:
                raise
            time.sleep(1.0)
    raise AssertionError("unreachable")


def job_log(run: Run) -> str:
    return job_spec(run).log_path.read_text(errors="replace")


def job_starts(run: Run) -> list[str]:
    """The lines the job script writes when it starts (one per start of a job)."""
    return [line for line in job_log(run).splitlines() if line.startswith("[job] run ")]


def assert_submitted_once_and_complete(run: Run, steps: int) -> None:
    """One job, started once, recorded on the run; the run completed, no step missing."""
    run.refresh_from_db()
    assert run.state == "completed", (history(run), run.failure_reason)
    assert history(run).count("submitted") == 1, history(run)
    assert slurm_jobs(run) == [(run.slurm_job_id, "COMPLETED")]
    assert len(job_starts(run)) == 1, job_starts(run)
    assert series_steps(run, TRAIN_KEY) == every_policy(list(range(1, steps + 1)))


@contextmanager
def frozen(run: Run) -> Iterator[list[int]]:
    """SIGSTOP the run's trainer processes (a hung step, as far as Slurm can tell) and
    SIGCONT whichever are left afterwards. Slurm continues and kills them itself when
    it ends the job."""
    pids = trainer_processes(run)
    assert pids, "the trainer is not running"
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield pids
    finally:
        for pid in pids:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def trainer_processes(run: Run) -> list[int]:
    """The trainer processes of the run's job (one per policy): ``python -m trainer run``
    with its config file (srun's command line names it too; srun is left alone)."""
    config = str(job_spec(run).config_path).encode()
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0") if entry.name.isdigit() else []
        except OSError:  # gone meanwhile
            continue
        if config in argv and b"trainer" in argv and Path(argv[0].decode()).name != "srun":
            pids.append(int(entry.name))
    return pids


# --------------------------------------------------------------------------- sbatch
class SbatchWrapper:
    """``sbatch`` first on a worker's PATH: it logs every call, runs the real sbatch, and
    holds the reply while the hold file exists (as a slurmctld slow to answer would), so
    a test can act while a submission is in flight: after Slurm has the job, before the
    worker has its id."""

    def __init__(self, root: Path) -> None:
        self.bin = root / "bin"
        self.bin.mkdir(parents=True)
        self.calls_path = root / "sbatch-calls.tsv"
        self.hold_path = root / "hold"
        real = shutil.which("sbatch")
        assert real, "sbatch is not installed"
        calls, hold = shlex.quote(str(self.calls_path)), shlex.quote(str(self.hold_path))
        script = self.bin / "sbatch"
        script.write_text(
            "#!/bin/bash\n"
            f'out=$({shlex.quote(real)} "$@"); status=$?\n'
            f'printf \'%s\\t%s\\t%s\\n\' "$status" "$out" "$*" >> {calls}\n'
            f"for _ in $(seq 600); do [[ -e {hold} ]] || break; sleep 0.2; done\n"
            'printf "%s\\n" "$out"\n'
            'exit "$status"\n'
        )
        script.chmod(0o755)

    @property
    def path(self) -> str:
        """PATH for a worker that submits through this wrapper."""
        return f"{self.bin}:{os.environ['PATH']}"

    def hold(self) -> None:
        self.hold_path.touch()

    def release(self) -> None:
        self.hold_path.unlink(missing_ok=True)

    def job_ids(self, run: Run) -> list[str]:
        """The job ids sbatch printed for ``run``'s job script, one per call."""
        if not self.calls_path.exists():
            return []
        marker = f"/run-{run.pk}/job/"
        lines = self.calls_path.read_text().splitlines()
        return [line.split("\t")[1] for line in lines if marker in line]


# --------------------------------------------------------------------------- broker
@contextmanager
def celery_broker(url: str) -> Iterator[None]:
    """Send this process's Celery messages (the launch's ``run_submit``, the test's
    ``runs_sync``) to ``url``. Celery reads ``CELERY_BROKER_URL`` from the environment
    before its configuration, and keeps a connection pool per app."""
    previous = os.environ.get("CELERY_BROKER_URL"), settings.CELERY_BROKER_URL
    _point_celery_at(url)
    try:
        yield
    finally:
        _point_celery_at(previous[0] or previous[1])
        if previous[0] is None:
            del os.environ["CELERY_BROKER_URL"]


def _point_celery_at(url: str) -> None:
    """Also drop the pooled connections: kombu keeps one pool per broker in a global
    registry, and a pool closed but left there answers "Acquire on closed pool" when the
    app later asks for that broker's pool again."""
    os.environ["CELERY_BROKER_URL"] = settings.CELERY_BROKER_URL = url
    app.conf.broker_url = url
    kombu_pools.reset()
    app._pool = None
    app.amqp._producer_pool = None


# --------------------------------------------------------------------------- slurmctld
def stop_slurmctld() -> None:
    """Stop the cluster's controller (SIGTERM: it saves its state and exits)."""
    pid = int((SLURM_STATE_DIR / "slurmctld.pid").read_text())
    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: not Path(f"/proc/{pid}").exists(), "slurmctld to exit", timeout=30)


def start_slurmctld() -> None:
    """Start it again from its saved state (idempotent: checks a running cluster)."""
    subprocess.run([str(REPO / "scripts" / "slurm-dev-cluster"), "start"], check=True, timeout=120)


# =========================================================================== the tests
def test_a_broker_restart_loses_no_submission(
    fault_world: FaultWorld, alice: User, tmp_path: Path
) -> None:
    """Redis (keeping nothing on disk) stops while one ``run_submit`` is inside sbatch
    and another waits in the queue; a run launched meanwhile still commits. Once Redis is
    back, the sync re-sends the queued runs nobody claimed; each run gets one job.

    The worker runs under the project's supervisor (scheduler/supervisor.py), as in `make
    demo`. Its ``acks_late`` task finishes while the broker is down and cannot be acked;
    whether the worker then reconnects by itself or fails ("Unrecoverable error") and
    exits (its watchdog ends a shutdown that wedges, scheduler/watchdog.py), consumption
    must come back with no hand from the test: the run launched during the outage gets
    its job within 60 s of Redis returning."""
    steps = 4
    sbatch = SbatchWrapper(tmp_path)
    sbatch.hold()
    worker_env = {"PATH": sbatch.path, "MRL_WORKER_STALL_SECONDS": "20"}
    with (
        private_redis(tmp_path / "redis") as broker,
        celery_broker(broker.url),
        ExitStack() as workers,
    ):
        worker_env["CELERY_BROKER_URL"] = broker.url
        worker = workers.enter_context(fault_world.worker(supervised=True, **worker_env))
        in_flight, waiting = launch(alice, unique("broker"), seeds=(0, 1), steps=steps)
        wait_for(lambda: sbatch.job_ids(in_flight), "the first submission to reach sbatch")
        assert broker.queue_length(worker.queue) == 1  # the second one's message
        assert Run.objects.get(pk=waiting.pk).state == "queued"

        broker.stop()  # both messages are gone: nothing is redelivered
        late_experiment = experiment(alice, unique("broker-late"), steps=steps)
        client = Client()
        client.force_login(alice)
        response = client.post(f"/experiments/{late_experiment.pk}/launch/")
        assert response.status_code == 302, response.content[:500]
        (late,) = late_experiment.runs.all()
        assert late.state == "queued"  # committed, though its message could not be sent
        sbatch.release()
        wait_for(lambda: bool(Run.objects.get(pk=in_flight.pk).slurm_job_id), "the job id")
        time.sleep(5)  # the outage outlasts the task that finished during it
        broker.start()
        back_at = time.monotonic()
        assert broker.queue_length(worker.queue) == 0  # back empty: the message is lost

        driver = Driver(worker)
        driver.until(lambda: bool(_refreshed(late).slurm_job_id), "the late run's job", 60)
        assert time.monotonic() - back_at < 60
        assert worker.process.poll() is None  # the supervisor itself never gave up
        driver.until_finished([in_flight, waiting, late], timeout=240)

    for run in (in_flight, waiting, late):
        assert_submitted_once_and_complete(run, steps)
        assert sbatch.job_ids(run) == [run.slurm_job_id]


def test_a_worker_killed_inside_sbatch_is_recovered_without_a_second_job(
    fault_world: FaultWorld, alice: User, tmp_path: Path
) -> None:
    """SIGKILL while the worker waits for sbatch's reply: Slurm has the job, the run has
    no job id, the message is unacknowledged (redelivered only after the broker's
    visibility timeout, an hour). A new worker's sync re-sends the submission, which finds
    the job by its name and adopts it."""
    steps = 4
    sbatch = SbatchWrapper(tmp_path)
    sbatch.hold()
    with fault_world.worker(PATH=sbatch.path) as doomed:
        (run,) = launch(alice, unique("killed-worker"), steps=steps)
        wait_for(lambda: sbatch.job_ids(run), "the submission to reach sbatch")
        doomed.process.kill()
        doomed.process.wait()
    sbatch.release()
    run.refresh_from_db()
    assert run.state != "queued" and run.slurm_job_id == ""  # claimed; the id is lost
    (job_id,) = sbatch.job_ids(run)

    with fault_world.worker() as worker:
        Driver(worker).until_finished([run], timeout=180)

    assert_submitted_once_and_complete(run, steps)
    assert run.slurm_job_id == job_id  # adopted: the one job the first worker started


def test_a_slurmctld_restart_neither_fails_nor_resubmits_a_running_job(
    fault_world: FaultWorld, alice: User
) -> None:
    """While slurmctld is down, ``squeue --json`` exits 0 with an empty job list and the
    failure in its "errors": read as such, the job would look forgotten and the run fail.
    The sync must skip instead; the job survives the restart (StateSaveLocation). The
    trainer is held (SIGSTOP) through the outage, so that however fast this machine
    trains, the job is still running when slurmctld comes back."""
    steps = 10
    with fault_world.worker() as worker:
        (run,) = launch(alice, unique("slurmctld"), steps=steps)
        driver = Driver(worker)
        driver.until(
            lambda: _refreshed(run).state == "running" and len(trainer_processes(run)) == 2,
            "the trainer to run",
        )
        job_id, log_offset = run.slurm_job_id, len(worker.log())
        with frozen(run):
            try:
                stop_slurmctld()
                # Until a sync has met the dead controller (squeue gives up after ~9 s), or
                # has wrongly ended the run: either way the cluster is back soon.
                driver.until(
                    lambda: (
                        "status sync skipped" in worker.log()[log_offset:]
                        or _refreshed(run).state != "running"
                    ),
                    "a sync",
                    timeout=40,
                )
                run.refresh_from_db()
                assert run.state == "running" and run.slurm_job_id == job_id
            finally:
                start_slurmctld()
            assert slurm_jobs(run) == [(job_id, "RUNNING")]  # recovered from its saved state
        driver.until_finished([run], timeout=180)

    assert_submitted_once_and_complete(run, steps)
    assert run.slurm_job_id == job_id
    assert "failed" not in history(run)


@pytest.mark.timeout(420)
def test_a_job_killed_at_its_time_limit_resumes_from_its_checkpoint(
    fault_world: FaultWorld, alice: User
) -> None:
    """A one-minute limit (Slurm's smallest; enforced every 30 s or so), too short for the
    pre-limit signal. After its first checkpoint the trainer hangs (SIGSTOP: a step
    outlasting the limit, however fast this machine trains); Slurm kills the job at its
    limit (TIMEOUT); the sync records why and resubmits the run, whose new job resumes
    from the checkpoint and completes it."""
    steps = 30
    with fault_world.worker() as worker:
        (run,) = launch(
            alice,
            unique("time-limit"),
            steps=steps,
            time_limit="00:01:00",
            val_every=steps,
            checkpoint_every=5,
        )
        driver = Driver(worker)
        spec = job_spec(run)
        driver.until(lambda: latest_checkpoint(spec.run_dir) is not None, "a checkpoint")
        with frozen(run):
            driver.until_finished([run], timeout=330)

    run.refresh_from_db()
    assert run.state == "completed", (history(run), run.failure_reason)
    assert "--signal" not in spec.script_path.read_text()
    changes = list(run.state_changes.order_by("at", "id").values_list("state", "note"))
    states = [state for state, _ in changes]
    stop = states.index("failed")
    assert states[:2] == ["queued", "submitted"] and "running" in states[:stop], states
    assert changes[stop][1].startswith("the job hit its time limit")
    resumed_state, resumed_note = changes[stop + 1]
    assert resumed_state == "queued" and resumed_note.startswith(TIME_LIMIT_RESUMED)
    assert states[stop + 2 :].count("submitted") == 1 and states[-1] == "completed", states
    assert states.count("failed") == 1
    jobs = slurm_jobs(run)
    assert [state for _, state in jobs] == ["TIMEOUT", "COMPLETED"], jobs
    assert run.slurm_job_id == jobs[1][0] and f"job {jobs[0][0]} " in resumed_note
    starts = job_starts(run)
    assert len(starts) == 2 and "--resume" in starts[1], starts
    resumed_from = re.findall(r"resumed from the checkpoint of step (\d+)", job_log(run))
    assert resumed_from and 5 <= int(resumed_from[0]) < steps, resumed_from
    assert series_steps(run, TRAIN_KEY) == every_policy(list(range(1, steps + 1)))


def _refreshed(run: Run) -> Run:
    run.refresh_from_db()
    return run
