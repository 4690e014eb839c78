"""`make demo`'s supervisor, with real child processes."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from scheduler import liveness
from scheduler.liveness import StallPolicy
from scheduler.supervisor import BackoffPolicy, Program, Supervisor, demo_programs, describe_exit

QUICK = BackoffPolicy(first_seconds=0.2, max_seconds=0.8, reset_after_seconds=5)


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def tick_until(supervisor: Supervisor, done: Callable[[], bool], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "not within the timeout"
        supervisor.tick()
        time.sleep(0.05)


def test_the_backoff_doubles_up_to_its_cap() -> None:
    policy = BackoffPolicy(first_seconds=1, max_seconds=30)
    assert [policy.delay(n) for n in range(1, 8)] == [1, 2, 4, 8, 16, 30, 30]
    with pytest.raises(ValueError, match="at most max_seconds"):
        BackoffPolicy(first_seconds=5, max_seconds=1)


def test_describe_exit_names_the_signal() -> None:
    assert describe_exit(3) == "exited with code 3"
    assert describe_exit(-signal.SIGKILL) == "was killed by SIGKILL"


def test_a_program_that_keeps_failing_is_restarted_with_growing_waits(tmp_path: Path) -> None:
    lines: list[str] = []
    starts = tmp_path / "starts"
    program = Program(
        "flaky",
        python(f"open({str(starts)!r}, 'a').write('x'); raise SystemExit(3)"),
        tmp_path / "log" / "flaky.log",
    )
    supervisor = Supervisor(
        [program], state_path=tmp_path / "state.json", backoff=QUICK, say=lines.append
    )
    tick_until(supervisor, lambda: starts.exists() and len(starts.read_text()) >= 4)
    supervisor.stop()
    exits = [line for line in lines if "exited with code 3" in line]
    assert len(exits) >= 3
    waits = [line.split("starting it again in ")[1].split(" s")[0] for line in exits[:4]]
    assert waits[:3] == ["0", "0", "1"]  # 0.2, 0.4, 0.8 s, rounded
    assert "(restart 1, log " in exits[0] and "(restart 2, log " in exits[1]
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["programs"]["flaky"]["restarts"] >= 3


def test_a_killed_program_is_started_again_and_the_state_file_follows(tmp_path: Path) -> None:
    lines: list[str] = []
    program = Program("sleeper", python("import time; time.sleep(60)"), tmp_path / "s.log")
    state_path = tmp_path / "state.json"
    supervisor = Supervisor([program], state_path=state_path, backoff=QUICK, say=lines.append)

    def pid() -> int | None:
        return json.loads(state_path.read_text())["programs"]["sleeper"]["pid"]

    supervisor.tick()
    first = pid()
    assert first
    os.kill(first, signal.SIGKILL)
    tick_until(supervisor, lambda: pid() not in (None, first))
    supervisor.stop()
    assert any(f"sleeper (pid {first}) was killed by SIGKILL" in line for line in lines)
    assert any("stopping sleeper" in line for line in lines)


def test_stop_kills_what_ignores_sigterm_after_the_grace(tmp_path: Path) -> None:
    lines: list[str] = []
    stubborn = python(
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ready', flush=True); time.sleep(60)"
    )
    log = tmp_path / "stubborn.log"
    supervisor = Supervisor(
        [Program("stubborn", stubborn, log)],
        state_path=tmp_path / "state.json",
        stop_grace_seconds=1,
        say=lines.append,
    )
    supervisor.tick()
    tick_until(supervisor, lambda: log.exists() and "ready" in log.read_text())
    start = time.monotonic()
    supervisor.stop()
    assert time.monotonic() - start < 10
    assert any("did not stop in time: SIGKILL" in line for line in lines)


def test_the_demo_runs_gunicorn_a_worker_and_beat(tmp_path: Path) -> None:
    programs = {p.name: p for p in demo_programs(host="127.0.0.1", port=8123, var_dir=tmp_path)}
    assert set(programs) == {"web", "worker", "beat"}
    assert programs["web"].argv[1:4] == ["-m", "gunicorn", "webapp.wsgi"]
    assert "127.0.0.1:8123" in programs["web"].argv
    assert programs["worker"].argv[3:6] == ["-A", "scheduler", "worker"]
    assert programs["beat"].argv[3:6] == ["-A", "scheduler", "beat"]
    assert all(p.log_path.parent == tmp_path / "log" for p in programs.values())
    # The worker alone is watched for silence; the others are restarted when they exit.
    assert programs["worker"].liveness_path == tmp_path / "run" / "worker.alive"
    assert programs["web"].liveness_path is None and programs["beat"].liveness_path is None


# --- a worker that lives but is silent ----------------------------------------------------
POLICY = StallPolicy(stall_seconds=60, start_grace_seconds=120)


def test_a_fresh_worker_has_the_start_grace_for_its_first_beat() -> None:
    assert POLICY.stall_reason(alive_for=0, silent_for=None) is None
    assert POLICY.stall_reason(alive_for=119.9, silent_for=None) is None
    reason = POLICY.stall_reason(alive_for=120, silent_for=None)
    assert reason == "has not beaten in the 120 s since its start"


def test_a_worker_is_stalled_after_stall_seconds_without_a_beat() -> None:
    assert POLICY.stall_reason(alive_for=5000, silent_for=0) is None
    assert POLICY.stall_reason(alive_for=5000, silent_for=59.9) is None
    assert POLICY.stall_reason(alive_for=5000, silent_for=61) == "has not beaten for 61 s"
    # Once it has beaten, the start grace no longer applies: a beat at 1 s, silence after.
    assert POLICY.stall_reason(alive_for=61, silent_for=60) == "has not beaten for 60 s"


def test_the_stall_policy_refuses_non_positive_times() -> None:
    with pytest.raises(ValueError, match="must be positive"):
        StallPolicy(stall_seconds=0)
    with pytest.raises(ValueError, match="must be positive"):
        StallPolicy(start_grace_seconds=-1)


def test_a_beat_names_its_writer_and_a_missing_or_torn_file_is_no_beat(tmp_path: Path) -> None:
    path = tmp_path / "run" / "worker.alive"
    assert liveness.read(path) is None
    liveness.beat(path, pid=4242)
    last = liveness.read(path)
    assert last is not None and last.pid == 4242
    assert abs(last.at - time.time()) < 60
    path.write_text("")
    assert liveness.read(path) is None


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _beat_at(path: Path, pid: int, mtime: float) -> None:
    """A beat of ``pid`` whose file time is ``mtime`` (a distinct value per beat)."""
    liveness.beat(path, pid=pid)
    os.utime(path, (mtime, mtime))


def test_the_supervisor_replaces_a_live_worker_whose_beats_stop(tmp_path: Path) -> None:
    """On the supervisor's own clock: beats keep the process; stall_seconds of silence
    after the last one seen, and it is SIGKILLed and started again."""
    lines: list[str] = []
    alive = tmp_path / "run" / "worker.alive"
    clock = FakeClock()
    program = Program(
        "worker", python("import time; time.sleep(120)"), tmp_path / "w.log", liveness_path=alive
    )
    state_path = tmp_path / "state.json"
    supervisor = Supervisor(
        [program],
        state_path=state_path,
        backoff=QUICK,
        stall=POLICY,
        say=lines.append,
        clock=clock,
    )

    def pid() -> int | None:
        return json.loads(state_path.read_text())["programs"]["worker"]["pid"]

    supervisor.tick()
    first = pid()
    assert first is not None
    try:
        clock.now = 100
        _beat_at(alive, first, mtime=1_000)
        supervisor.tick()  # seen at 100
        clock.now = 159
        supervisor.tick()
        assert pid() == first, lines
        _beat_at(alive, first, mtime=1_005)
        clock.now = 200
        supervisor.tick()  # a new beat, seen at 200
        _beat_at(alive, 99_999_999, mtime=1_010)  # not this process's: no beat of it
        clock.now = 259
        supervisor.tick()
        assert pid() == first and not any("killing" in line for line in lines), lines
        clock.now = 260
        supervisor.tick()  # 60 s of silence: killed, its restart due in 0.2 s
        assert any(
            f"worker (pid {first}) has not beaten for 60 s although its process lives" in line
            for line in lines
        ), lines
        assert any(f"worker (pid {first}) was killed by SIGKILL" in line for line in lines)
        clock.now = 261
        supervisor.tick()
        second = pid()
        assert second not in (None, first)
        assert not alive.exists()  # the new worker starts without the old one's beats
        # The new one has its start grace, then is replaced too if it never beats.
        clock.now = 261 + 119
        supervisor.tick()
        assert pid() == second
        clock.now = 261 + 120
        supervisor.tick()
        assert any(
            f"worker (pid {second}) has not beaten in the 120 s since its start" in line
            for line in lines
        ), lines
    finally:
        supervisor.stop()


def test_the_supervisor_kills_a_sigstopped_worker_that_stopped_beating(tmp_path: Path) -> None:
    """A real process that beats through $MRL_WORKER_LIVENESS_FILE, then SIGSTOPs itself:
    SIGTERM could not end it, SIGKILL does, and a new one beats."""
    lines: list[str] = []
    alive = tmp_path / "run" / "worker.alive"
    beater = python(
        "import os, pathlib, signal, time\n"
        f"path = pathlib.Path(os.environ[{liveness.ENV_VAR!r}])\n"
        "for _ in range(3):\n"
        "    tmp = path.with_name('.tmp'); tmp.write_text(str(os.getpid())); tmp.replace(path)\n"
        "    time.sleep(0.2)\n"
        "os.kill(os.getpid(), signal.SIGSTOP)\n"
    )
    supervisor = Supervisor(
        [Program("worker", beater, tmp_path / "w.log", liveness_path=alive)],
        state_path=tmp_path / "state.json",
        backoff=QUICK,
        stall=StallPolicy(stall_seconds=1.5, start_grace_seconds=30),
        say=lines.append,
    )
    try:
        tick_until(supervisor, lambda: any("was killed by SIGKILL" in line for line in lines))
        assert any(
            "worker (pid " in line and ") has not beaten for " in line and "process lives" in line
            for line in lines
        ), lines
        restarted = len([line for line in lines if "worker started" in line])
        tick_until(supervisor, lambda: len([ln for ln in lines if "worker started" in ln]) > 1)
        assert restarted >= 1
    finally:
        supervisor.stop()
