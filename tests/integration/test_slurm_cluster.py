"""Batch jobs go through the real one-node Slurm cluster (scripts/slurm-dev-cluster)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from scheduler.slurm import SlurmJob, sbatch, scancel, squeue

pytestmark = [pytest.mark.integration, pytest.mark.slurm]


def _wait(job_id: str, *, until: str = "finished", timeout: float = 120) -> SlurmJob:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = squeue().get(job_id)
        assert job is not None, f"slurmctld forgot job {job_id}"
        if (until == "finished" and job.finished) or job.state == until:
            return job
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} still {job.state} after {timeout}s")


def _script(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/bash\n{body}\n")
    return script


def test_a_batch_job_runs_to_completion(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    script = _script(tmp_path, 'echo "job $SLURM_JOB_ID on $SLURMD_NODENAME"')
    job_id = sbatch(script, args=["--job-name=mrl-ok", f"--output={out}", "--mem=100M"])

    job = _wait(job_id)

    assert (job.state, job.exit_code, job.name) == ("COMPLETED", 0, "mrl-ok")
    assert out.read_text().startswith(f"job {job_id} on ")


def test_a_failing_job_reports_its_exit_code(tmp_path: Path) -> None:
    script = _script(tmp_path, "exit 3")
    job_id = sbatch(script, args=[f"--output={tmp_path / 'out.txt'}", "--mem=100M"])

    job = _wait(job_id)

    assert (job.state, job.exit_code) == ("FAILED", 3)


def test_a_running_job_can_be_cancelled(tmp_path: Path) -> None:
    script = _script(tmp_path, "sleep 300")
    job_id = sbatch(script, args=[f"--output={tmp_path / 'out.txt'}", "--mem=100M"])
    _wait(job_id, until="RUNNING")

    scancel(job_id)

    assert _wait(job_id).state == "CANCELLED"
