"""Settings come from the environment and fail loudly on bad values."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def _django_check(env_overrides: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    # A clean environment: no test-only switches (the browser tests' async-unsafe flag).
    dropped = {"SECRET_KEY", "MRL_PRODUCTION", "DJANGO_ALLOW_ASYNC_UNSAFE"}
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env.update(env_overrides)
    return subprocess.run(
        [sys.executable, "manage.py", "check", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("secret_key", ["", "short", "a" * 60])
def test_production_refuses_to_start_without_a_strong_secret_key(secret_key: str) -> None:
    result = _django_check({"MRL_PRODUCTION": "true", "SECRET_KEY": secret_key})
    assert result.returncode != 0
    assert "MRL_PRODUCTION=true needs SECRET_KEY" in result.stderr


def test_a_misspelt_boolean_is_an_error_not_false() -> None:
    result = _django_check({"MRL_PRODUCTION": "ture"})
    assert result.returncode != 0
    assert "MRL_PRODUCTION='ture' is not a boolean" in result.stderr


def test_an_unknown_executor_is_an_error() -> None:
    result = _django_check({"MRL_EXECUTOR": "kubernetes"})
    assert result.returncode != 0
    assert "MRL_EXECUTOR='kubernetes'" in result.stderr


def test_production_settings_pass_the_deploy_checklist() -> None:
    result = _django_check(
        {
            "MRL_PRODUCTION": "true",
            "SECRET_KEY": secrets.token_urlsafe(50),
            "ALLOWED_HOSTS": "mrl.example.org",
            "MRL_TASK_DATA_DIRS": "/srv/mrl-data",
        },
        "--deploy",
        "--fail-level",
        "WARNING",
    )
    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout


@pytest.mark.parametrize("value", ["true", "True", "1", "yes"])
def test_debug_can_be_turned_on_by_environment(value: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", "from django.conf import settings; print(settings.DEBUG)"],
        cwd=REPO,
        env={**os.environ, "DEBUG": value, "DJANGO_SETTINGS_MODULE": "webapp.settings"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert result.stdout.strip() == "True"
