"""`make demo`'s process supervisor: the web app, the Celery worker and beat, each started
again when it exits.

A program that exits (a crash, a SIGKILL, the worker's watchdog giving up on a broker:
scheduler/watchdog.py) is started again after a backoff that doubles with each quick
failure (1 s, 2 s, 4 s ... at most 30 s) and starts over once a program has stayed up for a
minute. Each exit and restart is logged.

A worker that lives but is silent (SIGSTOPped, frozen) is replaced like one that exited:
the worker's watchdog thread rewrites a liveness file every few seconds
(scheduler/liveness.py, ``$MRL_WORKER_LIVENESS_FILE``, which the supervisor sets), and
when that file has not changed for ``--worker-stall-seconds`` (default 60; a fresh worker
has ``--worker-start-grace-seconds``, default 120, for its first beat) the supervisor
logs why, kills the worker's process group with SIGKILL (a stopped process ignores
SIGTERM) and starts a new one. The beat is the worker's own, not beat's heartbeat task:
with beat, the broker or the database down, workers are not killed over and over.

SIGINT or SIGTERM stop every program (SIGTERM and SIGCONT, then SIGKILL after a grace)
and then the supervisor. Each program runs in its own session,
so a Ctrl-C in the terminal reaches the supervisor alone and the shutdown goes in order;
jobs the worker started run in sessions of their own and are left to finish.

The supervisor writes the programs' pids to a JSON state file, for operators and tests.
Production leaves this to docker compose (``restart: unless-stopped``, and the worker's
healthcheck kills a stalled worker: ``manage.py worker_alive --kill-stalled``).

    python -m scheduler.supervisor --host 127.0.0.1 --port 8000 [--var-dir $MRL_VAR_DIR]
    python -m scheduler.supervisor --var-dir DIR --program worker [--worker-stall-seconds 60] \
        -- celery -A scheduler worker
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from scheduler import liveness


@dataclass(frozen=True)
class Program:
    """One supervised command; its output goes to ``log_path``."""

    name: str
    argv: list[str]
    log_path: Path
    liveness_path: Path | None = None
    """A Celery worker's liveness file (scheduler/liveness.py): the supervisor names it in
    the worker's environment and replaces the worker when it goes stale. None: the
    program is restarted only when it exits."""


@dataclass(frozen=True)
class BackoffPolicy:
    """How long to wait before starting an exited program again."""

    first_seconds: float = 1.0
    max_seconds: float = 30.0
    reset_after_seconds: float = 60.0
    """A run at least this long counts as healthy: the next restart waits first_seconds."""

    def __post_init__(self) -> None:
        if not 0 < self.first_seconds <= self.max_seconds:
            raise ValueError(
                f"first_seconds={self.first_seconds} must be positive and at most "
                f"max_seconds={self.max_seconds}"
            )

    def delay(self, quick_failures: int) -> float:
        """The wait after the ``quick_failures``-th exit in a row of short runs (1, 2, ...)."""
        return min(self.max_seconds, self.first_seconds * 2 ** max(0, quick_failures - 1))


@dataclass
class _Child:
    program: Program
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    restart_at: float | None = None
    quick_failures: int = 0
    restarts: int = 0
    beat_at: float | None = None
    """The mtime of the last beat of this process seen in its liveness file."""
    beat_seen_at: float | None = None
    """When (the supervisor's clock) that beat was first seen: the supervisor's own
    clock, so that a jump of the wall clock or a suspended laptop is no silence."""


def describe_exit(returncode: int) -> str:
    """``exited with code 1`` or ``was killed by SIGKILL``."""
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with code {returncode}"


@dataclass
class Supervisor:
    """Keeps ``programs`` running until :meth:`stop` (or SIGINT/SIGTERM in :meth:`run`)."""

    programs: list[Program]
    state_path: Path
    backoff: BackoffPolicy = field(default_factory=BackoffPolicy)
    stop_grace_seconds: float = 20.0
    stall: liveness.StallPolicy = field(default_factory=liveness.StallPolicy)
    say: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)
    clock: Callable[[], float] = time.monotonic
    _children: list[_Child] = field(init=False)
    _stopping: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self._children = [_Child(program) for program in self.programs]

    def _log(self, message: str) -> None:
        self.say(f"[supervisor {time.strftime('%H:%M:%S')}] {message}")

    def _start(self, child: _Child) -> None:
        child.program.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = None
        if child.program.liveness_path is not None:
            child.program.liveness_path.parent.mkdir(parents=True, exist_ok=True)
            child.program.liveness_path.unlink(missing_ok=True)  # the last one's beats
            env = {**os.environ, liveness.ENV_VAR: str(child.program.liveness_path)}
        with child.program.log_path.open("ab") as log_file:
            child.process = subprocess.Popen(
                child.program.argv,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=env,
            )
        child.started_at = self.clock()
        child.restart_at = None
        child.beat_at = child.beat_seen_at = None
        self._log(f"{child.program.name} started (pid {child.process.pid})")
        self._write_state()

    def _write_state(self) -> None:
        state = {
            child.program.name: {
                "pid": child.process.pid if child.process and child.restart_at is None else None,
                "restarts": child.restarts,
            }
            for child in self._children
        }
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"supervisor": os.getpid(), "programs": state}))
        tmp.replace(self.state_path)

    def tick(self) -> None:
        """Notice exited programs, schedule their restart, start those that are due."""
        now = self.clock()
        for child in self._children:
            if child.process is None:
                self._start(child)
                continue
            if child.restart_at is None:
                returncode = child.process.poll()
                if returncode is None and self._check_liveness(child, now):
                    returncode = child.process.poll()  # killed: its exit is handled now
                if returncode is None:
                    continue
                lived = now - child.started_at
                quick = lived < self.backoff.reset_after_seconds
                child.quick_failures = child.quick_failures + 1 if quick else 1
                wait = self.backoff.delay(child.quick_failures)
                child.restart_at = now + wait
                child.restarts += 1
                self._log(
                    f"{child.program.name} (pid {child.process.pid}) "
                    f"{describe_exit(returncode)} after {lived:.0f} s; starting it again "
                    f"in {wait:.0f} s (restart {child.restarts}, log "
                    f"{child.program.log_path})"
                )
                self._write_state()
            if child.restart_at is not None and now >= child.restart_at:
                self._start(child)

    def _check_liveness(self, child: _Child, now: float) -> bool:
        """Kill a running program whose liveness file has gone stale (its exit is handled
        like any other: logged, and the program started again); whether it was killed."""
        path, process = child.program.liveness_path, child.process
        if path is None or process is None:
            return False
        last = liveness.read(path)
        if last is not None and last.pid == process.pid and last.at != child.beat_at:
            child.beat_at, child.beat_seen_at = last.at, now
        silent_for = None if child.beat_seen_at is None else now - child.beat_seen_at
        reason = self.stall.stall_reason(alive_for=now - child.started_at, silent_for=silent_for)
        if reason is None:
            return False
        self._log(
            f"{child.program.name} (pid {process.pid}) {reason} although its process "
            f"lives (stopped? frozen?; liveness file {path}): killing it (SIGKILL) to "
            "start a new one"
        )
        _signal_group(process, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)  # a moment: SIGKILL ends even a stopped process
        return True

    def stop(self) -> None:
        """Stop every program: SIGTERM to its session (and SIGCONT, so that a stopped
        one can act on it), SIGKILL after the grace."""
        self._stopping = True
        running = [
            (child, process)
            for child in self._children
            if (process := child.process) is not None and process.poll() is None
        ]
        for child, process in running:
            self._log(f"stopping {child.program.name} (pid {process.pid})")
            _signal_group(process, signal.SIGTERM)
            _signal_group(process, signal.SIGCONT)
        deadline = self.clock() + self.stop_grace_seconds
        for child, process in running:
            try:
                process.wait(timeout=max(0.0, deadline - self.clock()))
            except subprocess.TimeoutExpired:
                self._log(f"{child.program.name} did not stop in time: SIGKILL")
                _signal_group(process, signal.SIGKILL)
                process.wait()

    def run(self, poll_seconds: float = 0.5) -> int:
        """Supervise until SIGINT or SIGTERM; then stop the programs and return 0."""

        def on_signal(signum: int, _frame: FrameType | None) -> None:
            self._stopping = True

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            while not self._stopping:
                self.tick()
                time.sleep(poll_seconds)
        finally:
            self.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self._log("stopped")
        return 0


def _signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, sig)


def demo_programs(*, host: str, port: int, var_dir: Path) -> list[Program]:
    """The embedded demo: gunicorn (as in production), one worker (watched through its
    liveness file, ``VAR_DIR/run/worker.alive``), beat."""
    python, logs = sys.executable, var_dir / "log"
    gunicorn = [python, "-m", "gunicorn", "webapp.wsgi", "--bind", f"{host}:{port}"]
    celery = [python, "-m", "celery", "-A", "scheduler"]
    return [
        Program(
            "web",
            [*gunicorn, "--workers", "2", "--threads", "4", "--access-logfile", "-"],
            logs / "web.log",
        ),
        Program(
            "worker",
            [
                *celery,
                "worker",
                "--pool=solo",
                "--loglevel=INFO",
                "--without-mingle",
                "--without-gossip",
            ],
            logs / "worker.log",
            liveness_path=var_dir / "run" / "worker.alive",
        ),
        Program(
            "beat",
            [
                *celery,
                "beat",
                "--loglevel=INFO",
                "--schedule",
                str(var_dir / "celerybeat-schedule"),
            ],
            logs / "beat.log",
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Run the embedded demo's processes, or one command, starting them "
        "again when they exit."
    )
    parser.add_argument("--host", default="127.0.0.1", help="the demo's web address")
    parser.add_argument("--port", type=int, default=8000, help="the demo's web port")
    parser.add_argument("--var-dir", type=Path, default=Path(os.environ.get("MRL_VAR_DIR", "var")))
    parser.add_argument(
        "--program",
        metavar="NAME",
        help="supervise the command after -- alone, under this name (its log: "
        "VAR_DIR/log/NAME.log) instead of the demo",
    )
    parser.add_argument(
        "--worker-stall-seconds",
        type=float,
        metavar="SECONDS",
        help="replace the worker (SIGKILL, then a new one) when its liveness file has not "
        "changed for this long although its process lives (default 60; the worker beats "
        f"every {liveness.BEAT_SECONDS:.0f} s). With --program, the command is watched "
        "so (a Celery worker of this project) only when this is given",
    )
    parser.add_argument(
        "--worker-start-grace-seconds",
        type=float,
        metavar="SECONDS",
        default=liveness.StallPolicy.start_grace_seconds,
        help="how long a fresh worker has for its first beat (default %(default).0f)",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ARGS...")
    args = parser.parse_args(argv)
    var_dir = args.var_dir.resolve()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    try:
        stall = liveness.StallPolicy(
            stall_seconds=args.worker_stall_seconds or liveness.StallPolicy.stall_seconds,
            start_grace_seconds=args.worker_start_grace_seconds,
        )
    except ValueError as exc:
        parser.error(str(exc))
    if args.program:
        if not command:
            parser.error("--program needs the command to supervise after --")
        alive = var_dir / "run" / f"{args.program}.alive" if args.worker_stall_seconds else None
        log_path = var_dir / "log" / f"{args.program}.log"
        programs = [Program(args.program, command, log_path, liveness_path=alive)]
    elif command:
        parser.error("a command needs --program NAME")
    else:
        programs = demo_programs(host=args.host, port=args.port, var_dir=var_dir)
    state_path = var_dir / "run" / "supervisor.json"
    return Supervisor(programs, state_path=state_path, stall=stall).run()


if __name__ == "__main__":
    raise SystemExit(main())
