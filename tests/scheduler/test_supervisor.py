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
