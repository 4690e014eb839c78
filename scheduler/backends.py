"""Where runs execute: one interface (submit, status, cancel, log tail), two backends.

- :class:`SlurmBackend`: ``sbatch --parsable`` a rendered batch script, ``squeue --json``
  for state (``sacct`` when the cluster keeps accounting), ``scancel``.
- :class:`LocalBackend`: the same script as a detached process group on this machine
  (the embedded demo, laptops). Same states, same log file, same cancel.

Backends report :class:`JobStatus` in the run's own vocabulary (pending, running,
completing, completed, failed, cancelled). A job the backend no longer knows is simply
missing from :meth:`Backend.status`'s answer; the caller then falls back to the run's
own status reports and the exit-code file the script leaves in the run directory.

A pyslurm backend would implement the same protocol; the CLI is used because pyslurm
must match the cluster's Slurm major.minor exactly.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from scheduler import slurm
from scheduler.jobs import JobSpec, render_script
from webapp.core.digits import INT64_DIGITS, ascii_digits, ascii_int

LOG_TAIL_BYTES = 64 * 1024


class BackendError(RuntimeError):
    """A backend operation failed; ``transient`` when retrying later may help."""

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


@dataclass(frozen=True)
class JobStatus:
    state: str
    """pending | running | completing | completed | failed | cancelled"""
    exit_code: int | None = None
    node: str = ""
    reason: str = ""
    timed_out: bool = False
    """Killed at its time limit (the sync resubmits it to resume from its checkpoint)."""


class Backend(Protocol):
    name: str

    def submit(self, spec: JobSpec) -> str:
        """Start the job; return its id. The run files must already be written."""
        ...

    def find(self, spec: JobSpec) -> str | None:
        """The id of a live job already running ``spec`` (a retried submit adopts it)."""
        ...

    def status(self, jobs: Mapping[str, JobSpec]) -> dict[str, JobStatus]:
        """States of the jobs (id -> spec) the backend still knows (others are left out)."""
        ...

    def cancel(self, job_id: str, spec: JobSpec) -> None: ...


def write_run_files(spec: JobSpec, config: dict[str, Any], token: str, *, slurm: bool) -> None:
    """The job directory: config JSON, the token (0600), the script."""
    job_dir = spec.config_path.parent
    job_dir.mkdir(parents=True, exist_ok=True)
    spec.config_path.write_text(json.dumps(config, indent=2))
    fd = os.open(spec.token_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as token_file:
        token_file.write(token)
    spec.script_path.write_text(render_script(spec, slurm=slurm))
    # A resubmission starts clean: no exit code, cancel mark or pid of the last attempt.
    for stale in (spec.exit_code_path, job_dir / "cancelled", job_dir / "pid"):
        stale.unlink(missing_ok=True)


def log_tail(path: Path, max_bytes: int = LOG_TAIL_BYTES) -> str:
    """The last ``max_bytes`` of the job's log ('' before it exists)."""
    try:
        with path.open("rb") as log_file:
            log_file.seek(0, os.SEEK_END)
            size = log_file.tell()
            log_file.seek(max(0, size - max_bytes))
            data = log_file.read()
    except OSError:  # not there yet, or not a readable file: nothing to show
        return ""
    text = data.decode("utf-8", errors="replace")
    if size > max_bytes:  # drop the partial first line
        text = text.split("\n", 1)[-1]
    return text


def read_exit_code(spec: JobSpec) -> int | None:
    try:
        text = spec.exit_code_path.read_text().strip()
    except (FileNotFoundError, ValueError):  # ValueError: not UTF-8
        return None
    return ascii_int(text, max_digits=9)


# --- Slurm -------------------------------------------------------------------------------
SLURM_STATE_MAP = {
    "PENDING": "pending",
    "CONFIGURING": "pending",
    "REQUEUED": "pending",
    "REQUEUE_FED": "pending",
    "REQUEUE_HOLD": "pending",
    "RESV_DEL_HOLD": "pending",
    "SUSPENDED": "pending",
    "PREEMPTED": "pending",  # --requeue: it comes back
    "RESIZING": "running",
    "RUNNING": "running",
    "SIGNALING": "running",
    "STAGE_OUT": "completing",
    "COMPLETING": "completing",
    "COMPLETED": "completed",
    "CANCELLED": "cancelled",
}
SLURM_FAILURES = {
    "FAILED": "the job failed",
    "TIMEOUT": "the job hit its time limit",
    "OUT_OF_MEMORY": "the job ran out of memory (raise mem)",
    "NODE_FAIL": "a node of the job failed",
    "BOOT_FAIL": "a node of the job failed to boot",
    "DEADLINE": "the job missed its deadline",
}


def slurm_job_status(job: slurm.SlurmJob) -> JobStatus:
    if job.state in SLURM_FAILURES:
        reason = SLURM_FAILURES[job.state]
        if job.exit_code:
            reason += f" (exit code {job.exit_code})"
        if job.signal:
            reason += f" (signal {job.signal})"
        timed_out = job.state == "TIMEOUT"
        return JobStatus("failed", job.exit_code, job.node, reason, timed_out=timed_out)
    state = SLURM_STATE_MAP.get(job.state, "pending")
    if state == "completed" and job.exit_code not in (0, None):
        return JobStatus("failed", job.exit_code, job.node, f"exit code {job.exit_code}")
    reason = job.reason if job.reason not in ("None", "") else ""
    return JobStatus(state, job.exit_code, job.node, reason)


class SlurmBackend:
    name = "slurm"

    def submit(self, spec: JobSpec) -> str:
        try:
            return slurm.sbatch(spec.script_path, args=["--chdir", str(spec.workdir)])
        except slurm.SlurmError as exc:
            raise BackendError(str(exc), transient=exc.transient) from exc

    def find(self, spec: JobSpec) -> str | None:
        name = f"mrl-{spec.name}"
        for job in self._squeue().values():
            if job.name == name and not job.finished:
                return job.job_id
        return None

    def status(self, jobs: Mapping[str, JobSpec]) -> dict[str, JobStatus]:
        job_ids = list(jobs)
        queue = self._squeue()
        known = {job_id: slurm_job_status(queue[job_id]) for job_id in job_ids if job_id in queue}
        missing = [job_id for job_id in job_ids if job_id not in known]
        if missing and shutil.which("sacct"):
            known.update(self._sacct(missing))
        return known

    def cancel(self, job_id: str, spec: JobSpec) -> None:
        try:
            slurm.scancel(job_id)
        except slurm.SlurmError as exc:
            raise BackendError(str(exc), transient=exc.transient) from exc

    def _squeue(self) -> dict[str, slurm.SlurmJob]:
        try:
            return slurm.squeue()
        except slurm.SlurmError as exc:
            raise BackendError(str(exc), transient=exc.transient) from exc

    def _sacct(self, job_ids: Sequence[str]) -> dict[str, JobStatus]:
        """Jobs slurmctld forgot, from accounting (empty when accounting is off)."""
        argv = ["sacct", "-n", "-X", "-P", "-o", "JobID,State,ExitCode,NodeList", "-j"]
        try:
            out = subprocess.run(
                [*argv, ",".join(job_ids)], capture_output=True, text=True, timeout=30
            )
        except (OSError, subprocess.TimeoutExpired):
            return {}
        found: dict[str, JobStatus] = {}
        for line in out.stdout.splitlines() if out.returncode == 0 else []:
            parts = line.split("|")
            if len(parts) != 4 or parts[0] not in job_ids:
                continue
            state = parts[1].split()[0] if parts[1] else "UNKNOWN"
            code = ascii_digits(parts[2].split(":")[0], max_digits=9)
            job = slurm.SlurmJob(parts[0], "", state, "", parts[3], code, None)
            found[parts[0]] = slurm_job_status(job)
        return found


# --- local -------------------------------------------------------------------------------
class LocalBackend:
    """The job script as a detached process group; its job id is the group's leader pid."""

    name = "local"
    grace_s = 20.0
    start_grace_s = 10.0

    def submit(self, spec: JobSpec) -> str:
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        # An intermediate shell starts the script in its own session and exits at once,
        # so the script is re-parented to init: nobody here has to reap it.
        launcher = 'setsid bash "$0" >>"$1" 2>&1 </dev/null & echo $!'
        try:
            out = subprocess.run(
                ["bash", "-c", launcher, str(spec.script_path), str(spec.log_path)],
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
                cwd=spec.workdir,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise BackendError(f"could not start the local job: {exc}") from exc
        pid = out.stdout.strip()
        if ascii_digits(pid, max_digits=INT64_DIGITS) is None:
            raise BackendError(f"the local launcher printed {pid!r}, not a pid")
        (spec.log_path.parent / "pid").write_text(pid)
        return pid

    def find(self, spec: JobSpec) -> str | None:
        try:
            pid = (spec.log_path.parent / "pid").read_text().strip()
        except FileNotFoundError:
            return None
        return pid if self._alive(pid, spec.script_path) else None

    def status(self, jobs: Mapping[str, JobSpec]) -> dict[str, JobStatus]:
        """Running while the process lives; then the exit-code file decides."""
        answer: dict[str, JobStatus] = {}
        for job_id, spec in jobs.items():
            if self._alive(job_id, spec.script_path):
                answer[job_id] = JobStatus("running", node=os.uname().nodename)
                continue
            code = read_exit_code(spec)
            if (spec.log_path.parent / "cancelled").exists():
                answer[job_id] = JobStatus("cancelled", code, reason="cancelled by the user")
            elif code == 0:
                answer[job_id] = JobStatus("completed", 0)
            elif code is None and self._just_started(spec):
                answer[job_id] = JobStatus("running", node=os.uname().nodename)
            elif code is None:
                answer[job_id] = JobStatus(
                    "failed", None, reason="the job died without an exit status (killed?)"
                )
            else:
                answer[job_id] = JobStatus("failed", code, reason=f"exit code {code}")
        return answer

    def cancel(self, job_id: str, spec: JobSpec) -> None:
        """SIGTERM the job's process group until it is gone; SIGKILL after the grace."""
        (spec.log_path.parent / "cancelled").touch()
        pgid = ascii_digits(job_id, max_digits=INT64_DIGITS)
        if pgid is None:
            raise BackendError(f"not a local job id: {job_id!r}")
        deadline = time.monotonic() + self.grace_s
        while group_members(pgid) and time.monotonic() < deadline:
            # Again each round: a child forked just after the first signal missed it.
            _signal_group(pgid, signal.SIGTERM)
            time.sleep(0.2)
        if group_members(pgid):
            _signal_group(pgid, signal.SIGKILL)

    def _just_started(self, spec: JobSpec) -> bool:
        """Within the start grace: a process seen between fork and exec, or an exit
        status being written, is not a dead job yet."""
        try:
            started = (spec.log_path.parent / "pid").stat().st_mtime
        except OSError:
            return False
        return time.time() - started < self.start_grace_s

    @staticmethod
    def _alive(job_id: str, script: Path | None) -> bool:
        """Whether process ``job_id`` runs (and runs ``script``: pids get reused)."""
        if ascii_digits(job_id, max_digits=INT64_DIGITS) is None:
            return False
        try:
            stat = Path(f"/proc/{job_id}/stat").read_text()
            cmdline = Path(f"/proc/{job_id}/cmdline").read_bytes().split(b"\0")
        except (FileNotFoundError, ProcessLookupError):
            return False
        if stat.rsplit(")", 1)[-1].split()[0] == "Z":
            return False
        return script is None or str(script).encode() in cmdline


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group ``pgid``."""
    members = []
    for entry in os.listdir("/proc"):
        pid = ascii_digits(entry, max_digits=INT64_DIGITS)
        if pid is None:
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[-1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if fields[0] != "Z" and ascii_int(fields[2], max_digits=INT64_DIGITS) == pgid:
            members.append(pid)
    return members


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signum)


def backend_named(name: str) -> SlurmBackend | LocalBackend:
    if name == "slurm":
        return SlurmBackend()
    if name == "local":
        return LocalBackend()
    raise BackendError(f"unknown backend {name!r}; use 'local' or 'slurm'")
