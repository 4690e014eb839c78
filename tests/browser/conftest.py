"""Fixtures of the browser tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(autouse=True)
def built_zoo(settings: Any, zoo_dir: Path) -> Path:
    """The zoo the compose form checks (``settings.ZOO_DIR``): the built test zoo, so a
    pool of default-zoo models composes in the browser as in production."""
    settings.ZOO_DIR = str(zoo_dir)
    return zoo_dir
