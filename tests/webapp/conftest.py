"""Fixtures of the web-app tests: fast password hashing, and a run with its token."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User

from tests.webapp.metrics.test_api_support import make_run
from webapp.runs import services
from webapp.runs.models import Run


@pytest.fixture(autouse=True)
def fast_password_hashing(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def built_zoo(settings: Any, zoo_dir: Path) -> Path:
    """The zoo the compose form checks (``settings.ZOO_DIR``, where the runs read their
    zoo models): the built test zoo, so a pool of default-zoo models composes; a test of
    an unbuilt model points it elsewhere. (Some modules point ``MRL_ZOO_DIR``, which MWRA's
    parameter counts read, at an empty directory: every zoo model then weighs the same.)"""
    settings.ZOO_DIR = str(zoo_dir)
    return zoo_dir


@pytest.fixture
def run(alice: User) -> Run:
    """A submitted run of a fresh 2-policy SGT experiment of alice's."""
    return make_run(alice)


@pytest.fixture
def token(run: Run) -> str:
    return services.run_token_issue(run)
