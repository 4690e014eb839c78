"""Fixtures of the trainer tests: the tiny zoo, built once and reused across sessions."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.trainer.ingest_server import Ingest, serve_ingest
from trainer.zoo import build_zoo

REPO = Path(__file__).resolve().parents[2]


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
def ingest() -> Iterator[Ingest]:
    """A running stand-in for the web app's ingestion API (tests/trainer/ingest_server.py)."""
    yield from serve_ingest()
