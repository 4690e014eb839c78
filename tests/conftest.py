"""Suite-wide fixtures and the rule that the suite runs on PostgreSQL.

Actors follow healthchecks' habit: alice owns things, bob is her labmate, charlie has
no access.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User

from trainer.zoo import build_zoo
from webapp.experiments.models import Experiment, Lab
from webapp.experiments.services import experiment_create, lab_join

REPO = Path(__file__).resolve().parents[1]


def pytest_configure(config: pytest.Config) -> None:
    engine = settings.DATABASES["default"]["ENGINE"]
    if "postgresql" not in engine:
        raise pytest.UsageError(
            f"the test suite runs on PostgreSQL, but DATABASE_URL selects {engine}; "
            "run `make test` (it sets DATABASE_URL) or export "
            "DATABASE_URL=postgres://postgres@127.0.0.1:5432/mrl"
        )


@pytest.fixture(scope="session")
def zoo_dir() -> Path:
    """The built tiny zoo (all policies, seed 0).

    Lives in ``$MRL_ZOO_DIR`` if set, else ``<repo>/var/test/zoo``; the build cache makes
    every session after the first reuse it (the first build takes about a minute).
    """
    configured = os.environ.get("MRL_ZOO_DIR")
    root = Path(configured).expanduser() if configured else REPO / "var" / "test" / "zoo"
    build_zoo(root, seed=0)
    return root


@pytest.fixture
def lab(db: None) -> Lab:
    return Lab.objects.create(name="Test lab")


@pytest.fixture
def alice(lab: Lab) -> User:
    user = User.objects.create_user("alice", password="alice-password")
    lab_join(user, lab)
    return user


@pytest.fixture
def bob(lab: Lab) -> User:
    user = User.objects.create_user("bob", password="bob-password")
    lab_join(user, lab)
    return user


@pytest.fixture
def charlie(db: None) -> User:
    """Logged in, but in another lab: sees nothing of alice's lab."""
    user = User.objects.create_user("charlie", password="charlie-password")
    lab_join(user, Lab.objects.create(name="Other lab"))
    return user


def pool_config(name: str = "sgt-trio", regime: str = "sgt", **overrides: Any) -> dict[str, Any]:
    """A valid trainer config of three tiny zoo policies."""
    config: dict[str, Any] = {
        "name": name,
        "regime": regime,
        "pool": [
            {"name": "llama", "model": "zoo:tiny-llama-char"},
            {"name": "qwen", "model": "zoo:tiny-qwen-bpe"},
            {"name": "gpt2", "model": "zoo:tiny-gpt2-unigram"},
        ],
        "steps": 4,
        "prompts_per_step": 4,
    }
    config.update(overrides)
    return config


@pytest.fixture
def make_experiment(alice: User) -> Callable[..., Experiment]:
    def make(
        owner: User | None = None, seeds: tuple[int, ...] = (0, 1), **config: Any
    ) -> Experiment:
        return experiment_create(
            owner=owner or alice, config=pool_config(**config), seeds=list(seeds)
        )

    return make
