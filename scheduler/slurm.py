"""A thin, typed layer over the Slurm command-line tools (sbatch, squeue, scancel).

The CLI is the portable path: pyslurm must match the cluster's Slurm major.minor, and
PyPI carries only the newest. Arguments always travel as an argv list (never a shell),
so no value is ever interpreted by a shell.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from webapp.core.digits import INT64_DIGITS, ascii_digits

# States in which Slurm will not touch the job again.
TERMINAL_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "TIMEOUT",
    }
)


class SlurmError(RuntimeError):
    """A Slurm command failed; ``transient`` is True when retrying may help."""

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


@dataclass(frozen=True)
class SlurmJob:
    """One job as squeue reports it."""

    job_id: str
    name: str
    state: str
    reason: str
    node: str
    exit_code: int | None
    """The batch script's exit status (None while the job has not ended)."""
    signal: int | None
    """The signal that ended the job, if one did."""

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL_STATES


def _decode_wait_status(raw: object) -> tuple[int | None, int | None]:
    """squeue's ``exit_code`` is a wait(2) status: exit code in bits 8-15, signal in 0-6.

    Newer Slurm releases report an object ``{"return_code": ..., "signal": ...}``.
    """
    if isinstance(raw, dict):
        code = raw.get("return_code")
        signal = raw.get("signal", {})
        sig_id = signal.get("id") if isinstance(signal, dict) else signal
        return (_as_int(code), _as_int(sig_id) or None)
    status = _as_int(raw)
    if status is None:
        return None, None
    return (status >> 8) & 0xFF, (status & 0x7F) or None


def _as_int(value: object) -> int | None:
    if isinstance(value, dict):  # Slurm >= 23 wraps numbers: {"set": true, "number": 3}
        return int(value["number"]) if value.get("set") else None
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    return None


def _as_state(value: object) -> str:
    if isinstance(value, list):  # Slurm >= 23: ["RUNNING"]
        return str(value[0]) if value else "UNKNOWN"
    return str(value or "UNKNOWN")


def parse_squeue_json(text: str) -> dict[str, SlurmJob]:
    """Parse ``squeue --json`` output into jobs keyed by job id."""
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SlurmError(f"squeue --json printed invalid JSON: {exc}") from exc
    errors = payload.get("errors") or []
    if errors:
        # With slurmctld down, squeue --json exits 0 with an empty job list and the failure
        # only here: read as "no jobs", every active run would look forgotten and fail.
        described = "; ".join(_describe(error) for error in errors)
        raise SlurmError(f"squeue could not list the jobs: {described}", transient=True)
    jobs: dict[str, SlurmJob] = {}
    for raw in payload.get("jobs", []):
        state = _as_state(raw.get("job_state"))
        ended = state in TERMINAL_STATES
        exit_code, signal = _decode_wait_status(raw.get("exit_code")) if ended else (None, None)
        job_id = str(raw["job_id"])
        jobs[job_id] = SlurmJob(
            job_id=job_id,
            name=str(raw.get("name") or ""),
            state=state,
            reason=str(raw.get("state_reason") or ""),
            node=str(raw.get("batch_host") or raw.get("nodes") or ""),
            exit_code=exit_code,
            signal=signal,
        )
    return jobs


def _describe(error: object) -> str:
    """One entry of squeue's ``errors`` list as text ("source: description")."""
    if not isinstance(error, dict):
        return str(error)
    parts = [str(error.get(key) or "") for key in ("source", "description", "error")]
    return ": ".join(part for part in parts if part) or "unknown error"


def _run(argv: Sequence[str], *, timeout: float) -> str:
    try:
        completed = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, check=False
        )
    except FileNotFoundError as exc:
        raise SlurmError(f"{argv[0]} not found: is Slurm installed on this host?") from exc
    except subprocess.TimeoutExpired as exc:
        raise SlurmError(f"{argv[0]} timed out after {timeout}s", transient=True) from exc
    if completed.returncode != 0:
        stderr = completed.stderr.strip()
        # "Unable to contact slurm controller" and socket errors clear up on their own.
        transient = any(
            marker in stderr
            for marker in ("Unable to contact", "Socket timed out", "Connection refused")
        )
        raise SlurmError(
            f"{argv[0]} failed ({completed.returncode}): {stderr}", transient=transient
        )
    return completed.stdout


def sbatch(script: Path, *, args: Sequence[str] = (), timeout: float = 30.0) -> str:
    """Submit ``script`` with ``sbatch --parsable`` and return the job id."""
    out = _run(["sbatch", "--parsable", *args, str(script)], timeout=timeout).strip()
    job_id = out.split(";", 1)[0]  # "<id>" or "<id>;<cluster>"
    if ascii_digits(job_id, max_digits=INT64_DIGITS) is None:
        raise SlurmError(f"sbatch printed {out!r}, not a job id")
    return job_id


def squeue(*, timeout: float = 30.0) -> dict[str, SlurmJob]:
    """All jobs slurmctld still remembers (finished ones for MinJobAge seconds)."""
    return parse_squeue_json(_run(["squeue", "--json"], timeout=timeout))


def scancel(job_id: str, *, timeout: float = 30.0) -> None:
    """Cancel job ``job_id``."""
    if ascii_digits(job_id, max_digits=INT64_DIGITS) is None:
        raise SlurmError(f"not a Slurm job id: {job_id!r}")
    _run(["scancel", job_id], timeout=timeout)
