"""`make demo`'s process supervisor: the web app, the Celery worker and beat, each started
again when it exits.

A program that exits (a crash, a SIGKILL, the worker's watchdog giving up on a broker:
scheduler/watchdog.py) is started again after a backoff that doubles with each quick
failure (1 s, 2 s, 4 s ... at most 30 s) and starts over once a program has stayed up for a
minute. Each exit and restart is logged. SIGINT or SIGTERM stop every program (SIGTERM,
then SIGKILL after a grace) and then the supervisor. Each program runs in its own session,
so a Ctrl-C in the terminal reaches the supervisor alone and the shutdown goes in order;
jobs the worker started run in sessions of their own and are left to finish.

The supervisor writes the programs' pids to a JSON state file, for operators and tests.
Production leaves this to docker compose (``restart: unless-stopped`` and healthchecks).

    python -m scheduler.supervisor --host 127.0.0.1 --port 8000 [--var-dir $MRL_VAR_DIR]
    python -m scheduler.supervisor --var-dir DIR --program worker -- celery -A scheduler worker
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


@dataclass(frozen=True)
class Program:
    """One supervised command; its output goes to ``log_path``."""

    name: str
    argv: list[str]
    log_path: Path


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
        with child.program.log_path.open("ab") as log_file:
            child.process = subprocess.Popen(
                child.program.argv,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        child.started_at = self.clock()
        child.restart_at = None
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

    def stop(self) -> None:
        """Stop every program: SIGTERM to its session, SIGKILL after the grace."""
        self._stopping = True
        running = [c for c in self._children if c.process and c.process.poll() is None]
        for child in running:
            self._log(f"stopping {child.program.name} (pid {child.process.pid})")
            _signal_group(child.process, signal.SIGTERM)
        deadline = self.clock() + self.stop_grace_seconds
        for child in running:
            try:
                child.process.wait(timeout=max(0.0, deadline - self.clock()))
            except subprocess.TimeoutExpired:
                self._log(f"{child.program.name} did not stop in time: SIGKILL")
                _signal_group(child.process, signal.SIGKILL)
                child.process.wait()

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
    """The embedded demo: gunicorn (as in production), one worker, beat."""
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
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ARGS...")
    args = parser.parse_args(argv)
    var_dir = args.var_dir.resolve()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.program:
        if not command:
            parser.error("--program needs the command to supervise after --")
        programs = [Program(args.program, command, var_dir / "log" / f"{args.program}.log")]
    elif command:
        parser.error("a command needs --program NAME")
    else:
        programs = demo_programs(host=args.host, port=args.port, var_dir=var_dir)
    return Supervisor(programs, state_path=var_dir / "run" / "supervisor.json").run()


if __name__ == "__main__":
    raise SystemExit(main())
