"""Suite-wide fixtures and the rule that the suite runs on PostgreSQL.

Actors follow healthchecks' habit: alice owns things, bob is her labmate, charlie has
no access.
"""

from __future__ import annotations

import pytest
from django.conf import settings
from django.contrib.auth.models import User


def pytest_configure(config: pytest.Config) -> None:
    engine = settings.DATABASES["default"]["ENGINE"]
    if "postgresql" not in engine:
        raise pytest.UsageError(
            f"the test suite runs on PostgreSQL, but DATABASE_URL selects {engine}; "
            "run `make test` (it sets DATABASE_URL) or export "
            "DATABASE_URL=postgres://postgres@127.0.0.1:5432/mrl"
        )


@pytest.fixture
def alice(db: None) -> User:
    return User.objects.create_user("alice", password="alice-password")
