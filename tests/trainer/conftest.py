"""Fixtures of the trainer tests (the tiny zoo fixture, ``zoo_dir``, is suite-wide)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.trainer.ingest_server import Ingest, serve_ingest
from trainer.zoo import COMPLEMENTARY_IDS, build_zoo


@pytest.fixture
def ingest() -> Iterator[Ingest]:
    """A running stand-in for the web app's ingestion API (tests/trainer/ingest_server.py)."""
    yield from serve_ingest()


@pytest.fixture(scope="session")
def complementary_zoo(zoo_dir: Path) -> Path:
    """The complementary-skills policies (issue 18), built beside the normal zoo and
    cached like it (the first build takes about a minute)."""
    build_zoo(zoo_dir, seed=0, ids=COMPLEMENTARY_IDS)
    return zoo_dir
