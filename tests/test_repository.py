"""The repository's contracts: the two-command README, CI, and the compose file."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def _quick_start_commands() -> list[str]:
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```(?:bash|sh)?\n(.*?)```", section, flags=re.S)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def test_readme_opens_with_exactly_two_commands() -> None:
    readme = (REPO / "README.md").read_text()
    assert readme.index("## Quick start") < readme.index("\n## ", readme.index("## Quick start"))
    assert _quick_start_commands() == ["make demo", "make test"]


def test_ci_runs_the_readme_test_command() -> None:
    last_line = (REPO / ".ci/run").read_text().strip().splitlines()[-1]
    assert last_line == _quick_start_commands()[1]


def test_the_compose_file_validates() -> None:
    if (
        shutil.which("docker")
        and subprocess.run(
            ["docker", "compose", "version"], capture_output=True, check=False
        ).returncode
        == 0
    ):
        argv = ["docker", "compose"]
    else:
        assert shutil.which("docker-compose"), "install docker compose (make test does)"
        argv = ["docker-compose"]
    env = {**os.environ, "SECRET_KEY": "k" * 40, "POSTGRES_PASSWORD": "pw"}
    command = [*argv, "-f", str(REPO / "docker/compose.yml"), "config"]
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    assert result.returncode == 0, result.stderr
    services = yaml.safe_load(result.stdout)["services"]
    assert set(services) == {"web", "worker", "beat", "postgres", "redis"}
    assert services["worker"]["environment"]["MRL_EXECUTOR"] == "slurm"
    # the PostgreSQL settings docs/CAPACITY.md gives, which a restart keeps warm
    postgres = services["postgres"]["command"]
    assert "shared_preload_libraries=pg_prewarm" in postgres and "shared_buffers=4GB" in postgres


def test_the_compose_worker_is_restarted_and_health_checked_by_its_heartbeat() -> None:
    """A worker that exits (its watchdog ends a deaf one) is started again, and its
    health is the heartbeat the dashboard reads (webapp/core/.../worker_alive.py)."""
    services = yaml.safe_load((REPO / "docker/compose.yml").read_text())["services"]
    worker = services["worker"]
    assert worker["restart"] == "unless-stopped"
    assert worker["healthcheck"]["test"][:4] == ["CMD", "python", "manage.py", "worker_alive"]


def test_the_compose_worker_that_lives_but_is_silent_is_killed_and_restarted() -> None:
    """Issue 31: docker never restarts an "unhealthy" container, so the healthcheck kills
    a worker whose own liveness file is stale (SIGSTOPped, frozen) and the restart policy
    brings it back; the worker is not PID 1 (`init: true`), which its container could
    not kill, and it is told where to beat."""
    services = yaml.safe_load((REPO / "docker/compose.yml").read_text())["services"]
    worker = services["worker"]
    test = worker["healthcheck"]["test"]
    assert "--kill-stalled" in test
    assert float(test[test.index("--stall-seconds") + 1]) <= 90  # before the offline notice
    assert worker["init"] is True
    assert worker["restart"] == "unless-stopped"
    env = worker["environment"]
    assert env["MRL_WORKER_LIVENESS_FILE"].startswith("/")
    # The worker keeps the app's environment (the merge, not a replacement).
    assert env["DATABASE_URL"] == services["web"]["environment"]["DATABASE_URL"]
    assert env["MRL_EXECUTOR"] == "slurm"
