"""Fixtures of the trainer tests (the tiny zoo fixture, ``zoo_dir``, is suite-wide)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.trainer.ingest_server import Ingest, serve_ingest


@pytest.fixture
def ingest() -> Iterator[Ingest]:
    """A running stand-in for the web app's ingestion API (tests/trainer/ingest_server.py)."""
    yield from serve_ingest()
