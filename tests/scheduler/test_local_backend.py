"""The local backend runs the real job script as a detached process group."""

from __future__ import annotations

import time
from pathlib import Path

from scheduler.backends import LocalBackend, group_members, log_tail, write_run_files
from scheduler.jobs import JobSpec


def fake_trainer(tmp_path: Path, body: str) -> str:
    """An executable standing in for `python`: runs ``body`` as bash, sees the argv."""
    path = tmp_path / "bin" / "python"
    path.parent.mkdir(exist_ok=True)
    path.write_text(f'#!/bin/bash\necho "trainer argv: $*"\n{body}\n')
    path.chmod(0o755)
    return str(path)


def make_spec(tmp_path: Path, body: str) -> JobSpec:
    spec = JobSpec(
        run_id=1,
        name="local-test",
        run_dir=tmp_path / "run",
        python=fake_trainer(tmp_path, body),
        workdir=tmp_path,
        ingest_url="http://127.0.0.1:1/api/v1/runs/1/ingest",
        n_policies=2,
    )
    write_run_files(spec, {"name": "x"}, "mrl_secret", slurm=False)
    return spec


def wait_state(backend: LocalBackend, job_id: str, spec: JobSpec, state: str) -> str:
    deadline = time.monotonic() + 20
    current = ""
    while time.monotonic() < deadline:
        current = backend.status({job_id: spec})[job_id].state
        if current == state:
            return current
        time.sleep(0.1)
    raise AssertionError(f"job stayed {current}, expected {state}; log:\n{log_tail(spec.log_path)}")


def test_a_job_runs_to_completion_with_its_log(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, 'echo "token=$MRL_INGEST_TOKEN"; sleep 4; exit 0')
    assert oct(spec.token_path.stat().st_mode & 0o777) == "0o600"
    backend = LocalBackend()
    job_id = backend.submit(spec)
    wait_state(backend, job_id, spec, "running")
    # "running" may come from the start-up grace, before the script has written its pid
    # file (a loaded machine, seen in CI): a retried submit adopts the job once it has.
    deadline = time.monotonic() + 10
    while backend.find(spec) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert backend.find(spec) == job_id  # a retried submit adopts the running job
    wait_state(backend, job_id, spec, "completed")
    log = log_tail(spec.log_path)
    assert "token=mrl_secret" in log
    assert f"--config {spec.config_path} --run-dir {spec.run_dir} --ingest-url" in log
    assert "trainer exited with 0" in log
    assert backend.find(spec) is None


def test_a_failing_job_reports_its_exit_code(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, "echo 'model not found' >&2; exit 3")
    backend = LocalBackend()
    job_id = backend.submit(spec)
    wait_state(backend, job_id, spec, "failed")
    status = backend.status({job_id: spec})[job_id]
    assert status.exit_code == 3 and "exit code 3" in status.reason
    assert "model not found" in log_tail(spec.log_path)


def test_cancel_stops_the_whole_process_group(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, "sleep 300 & wait")
    backend = LocalBackend()
    job_id = backend.submit(spec)
    wait_state(backend, job_id, spec, "running")
    backend.cancel(job_id, spec)
    assert wait_state(backend, job_id, spec, "cancelled") == "cancelled"
    # No process of the group survives (the backgrounded sleep included).
    assert not group_members(int(job_id))


def test_cancel_right_after_submit_leaves_no_orphans(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, "sleep 300 & wait")
    backend = LocalBackend()
    job_id = backend.submit(spec)
    backend.cancel(job_id, spec)  # maybe before the script has started its child
    assert wait_state(backend, job_id, spec, "cancelled") == "cancelled"
    assert not group_members(int(job_id))


def test_a_second_attempt_resumes_the_run(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, "exit 0")
    (spec.run_dir / "config.json").write_text("{}")  # what a first attempt leaves behind
    backend = LocalBackend()
    job_id = backend.submit(spec)
    wait_state(backend, job_id, spec, "completed")
    assert "--resume" in log_tail(spec.log_path)


def test_a_job_killed_without_an_exit_status_fails_after_the_start_grace(
    tmp_path: Path,
) -> None:
    spec = make_spec(tmp_path, "kill -KILL $PPID; sleep 5")  # the script dies, no exit code
    backend = LocalBackend()
    backend.start_grace_s = 1.0
    job_id = backend.submit(spec)
    wait_state(backend, job_id, spec, "failed")
    status = backend.status({job_id: spec})[job_id]
    assert status.exit_code is None and "without an exit status" in status.reason


def test_log_tail_keeps_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_text("".join(f"line {i}\n" for i in range(10_000)))
    tail = log_tail(path, 100)
    assert tail.endswith("line 9999\n") and tail.startswith("line ")
    assert log_tail(tmp_path / "missing") == ""
