"""The database's fixtures and the rule that the tests using it run on PostgreSQL.

A plugin of the root conftest (``pytest_plugins``), so every folder may ask for them; it
only imports Django's models, so a session that asks for none of them (``pytest
tests/trainer``) connects to no database and may run on any ``DATABASE_URL``.

Actors follow healthchecks' habit: alice owns things, bob is her labmate, charlie has
no access.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection
from django.test import override_settings

from webapp.core.models import Lab
from webapp.core.services import lab_join
from webapp.runs.models import Experiment
from webapp.runs.services import experiment_create

DATABASE_FIXTURES = frozenset(
    {
        "db",
        "transactional_db",
        "django_db_setup",
        "django_db_reset_sequences",
        "django_db_serialized_rollback",
        "live_server",
    }
)
"""pytest-django's fixtures that set up the test database (every other database fixture,
the actors below included, asks for one of them)."""


def database_url() -> str:
    """The test database's URL, for the processes a test starts (``manage.py`` and the
    like), password included when it has one."""
    db = connection.settings_dict
    user = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
    return f"postgres://{user}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def needs_database(item: pytest.Item) -> bool:
    fixtures = getattr(item, "fixturenames", ())
    return item.get_closest_marker("django_db") is not None or not DATABASE_FIXTURES.isdisjoint(
        fixtures
    )


def not_on_postgresql() -> str | None:
    """Why the database's tests may not run here, or None on PostgreSQL."""
    engine = settings.DATABASES["default"]["ENGINE"]
    if "postgresql" in engine:
        return None
    return (
        f"the tests that use the database run on PostgreSQL, but DATABASE_URL selects "
        f"{engine}; run `make test` (it sets DATABASE_URL) or export "
        "DATABASE_URL=postgres://postgres@127.0.0.1:5432/mrl (tests/README.md says which "
        "folders need which services)"
    )


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tests that use the database run on PostgreSQL, never on the SQLite file
    ``DATABASE_URL`` defaults to; a selection without them (after ``-k`` and ``-m``) runs
    on any. In a pytest-xdist worker, which could not report a usage error, each of them
    fails instead (:func:`pytest_runtest_setup`)."""
    reason = not_on_postgresql()
    if reason is None or hasattr(config, "workerinput"):
        return
    using = [item.nodeid for item in items if needs_database(item)]
    if using:
        raise pytest.UsageError(f"{len(using)} selected tests (e.g. {using[0]}) refused: {reason}")


def pytest_runtest_setup(item: pytest.Item) -> None:
    if needs_database(item) and (reason := not_on_postgresql()) is not None:
        pytest.fail(reason, pytrace=False)


FAST_PASSWORD_HASHERS = [
    "django.contrib.auth.hashers.MD5PasswordHasher",
    *settings.PASSWORD_HASHERS,
]
"""MD5 first: the actors' passwords (and the browser tests' logins) hash in microseconds,
not the second or two PBKDF2's iterations take on a busy two-core machine; the others
stay listed, so a hash made with them still checks."""


@pytest.fixture(scope="session", autouse=True)
def fast_password_hashing() -> Iterator[None]:
    """For the whole session, module- and session-scoped fixtures included (the web-app
    tests' own fixture narrows it to MD5 alone). Settings only: no database."""
    with override_settings(PASSWORD_HASHERS=FAST_PASSWORD_HASHERS):
        yield


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
