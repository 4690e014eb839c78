"""Parsing squeue --json (Slurm 22.05's shape and the newer wrapped shape)."""

from __future__ import annotations

import json

import pytest

from scheduler.slurm import SlurmError, parse_squeue_json


def _payload(*jobs: dict[str, object]) -> str:
    return json.dumps({"meta": {}, "errors": [], "jobs": list(jobs)})


def test_it_decodes_the_wait_status_of_a_failed_job() -> None:
    jobs = parse_squeue_json(
        _payload(
            {
                "job_id": 2,
                "name": "f.sh",
                "job_state": "FAILED",
                "exit_code": 3 << 8,
                "state_reason": "NonZeroExitCode",
                "batch_host": "vm",
            }
        )
    )
    job = jobs["2"]
    assert (job.state, job.exit_code, job.signal, job.node) == ("FAILED", 3, None, "vm")
    assert job.finished


def test_it_reports_the_signal_that_killed_a_job() -> None:
    jobs = parse_squeue_json(_payload({"job_id": 7, "job_state": "CANCELLED", "exit_code": 15}))
    assert (jobs["7"].exit_code, jobs["7"].signal) == (0, 15)


def test_a_running_job_has_no_exit_code_yet() -> None:
    jobs = parse_squeue_json(_payload({"job_id": 5, "job_state": "RUNNING", "exit_code": 0}))
    assert jobs["5"].exit_code is None
    assert not jobs["5"].finished


def test_it_reads_the_wrapped_values_of_newer_slurm() -> None:
    jobs = parse_squeue_json(
        _payload(
            {
                "job_id": 9,
                "job_state": ["TIMEOUT"],
                "exit_code": {
                    "status": ["SIGNALED"],
                    "return_code": {"set": True, "number": 0},
                    "signal": {"id": {"set": True, "number": 9}, "name": "KILL"},
                },
            }
        )
    )
    assert (jobs["9"].state, jobs["9"].exit_code, jobs["9"].signal) == ("TIMEOUT", 0, 9)


def test_garbage_is_a_slurm_error() -> None:
    with pytest.raises(SlurmError, match="invalid JSON"):
        parse_squeue_json("squeue: error: something")
