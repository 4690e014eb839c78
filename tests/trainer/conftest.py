"""Fixtures of the trainer tests (the tiny zoo fixture, ``zoo_dir``, is suite-wide)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.trainer.ingest_server import Ingest, serve_ingest
from trainer.zoo import COMPLEMENTARY_IDS, SMOLLM2_IDS, build_command, build_zoo, smollm2

REPO = Path(__file__).resolve().parents[2]


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


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """The converted SmolLM2-135M-Instruct entry of the test zoo (issue 33), for the tests
    marked ``real_model``: in ``$MRL_ZOO_DIR`` if set, else ``<repo>/var/test/zoo`` (where
    ``zoo_dir`` builds the tiny zoo). It is never built here (it needs an optional extra):
    the tests that ask for it are skipped, saying how to build it, when it is not there."""
    configured = os.environ.get("MRL_ZOO_DIR")
    root = Path(configured).expanduser() if configured else REPO / "var" / "test" / "zoo"
    (zoo_id,) = SMOLLM2_IDS
    if not smollm2.is_current(root / zoo_id):
        pytest.skip(
            f"zoo model {zoo_id!r} is not built in {root}: "
            f"`{build_command(zoo_id, root)}` converts it (about a minute)"
        )
    return root / zoo_id
