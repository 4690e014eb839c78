"""Suite-wide hooks and fixtures; none of them needs a database, a broker or a browser.

The database's fixtures (the actors alice, bob and charlie, ``make_experiment``) and the
rule that the tests using the database run on PostgreSQL live in tests/fixtures_db.py,
the browser's (``browser``, ``page``) in tests/fixtures_browser.py: plugins of this
conftest, so every folder may ask for them, but a session that asks for none of them
(``pytest tests/trainer``) needs no PostgreSQL, Redis or Playwright (tests/README.md).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trainer.zoo import build_zoo

pytest_plugins = ["tests.fixtures_db", "tests.fixtures_browser"]
# Imported here, before pytest loads them as plugins: their asserts are rewritten all the same.
pytest.register_assert_rewrite(*pytest_plugins)

# Re-exported: the tests import them `from tests.conftest`, as before they moved.
from tests.fixtures_browser import log_in as log_in  # noqa: E402
from tests.fixtures_db import pool_config as pool_config  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SLURM_GROUP = "slurm-cluster"


def pytest_itemcollected(item: pytest.Item) -> None:
    """Under ``-n`` (pytest-xdist, ``--dist loadgroup``), the tests marked ``slurm`` go to
    one worker, which runs them one at a time: they share the one-node cluster (a test
    fills every CPU of it, another restarts slurmctld). Everything else spreads.

    The group is the largest unit of work, so xdist hands it out first (its
    ``--loadscope-reorder``, on by default): one worker starts on the cluster's tests
    while the other takes everything else, and helps with what is left when it is done."""
    if item.get_closest_marker("slurm"):
        item.add_marker(pytest.mark.xdist_group(SLURM_GROUP))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put the tests in their ``xdist_group`` where xdist's own hook could not.

    pytest-xdist 3.8 groups a test by appending ``@<group>`` to ``item._nodeid``, which
    pytest 9.2 no longer reads (node ids are structured, ``item._id``): the groups were
    silently ignored, and the ``slurm`` tests ran on both workers at once
    (pytest-dev/pytest-xdist#1386). Only in a worker under ``--dist loadgroup`` (xdist
    sets ``loadgroup`` there); the suffix, as xdist writes it, is what its scheduler
    reads, and a test that already carries it is left alone."""
    if not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        groups = {
            str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
            for mark in item.iter_markers("xdist_group")
        }
        suffix = "@" + "_".join(sorted(groups))
        if groups and not item.nodeid.endswith(suffix):
            from _pytest.nodeid import NodeId  # pytest >= 9.2, where the suffix is lost

            item._id = NodeId.parse(item.nodeid + suffix)  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def zoo_dir() -> Path:
    """The built tiny zoo (all policies, seed 0).

    Lives in ``$MRL_ZOO_DIR`` if set, else ``<repo>/var/test/zoo``; the build cache makes
    every session after the first reuse it. `make test` (scripts/test) builds it, with the
    complementary and gap recipes, before the suite starts; a pytest run of a few files
    builds what it needs on first use (about a minute).
    """
    configured = os.environ.get("MRL_ZOO_DIR")
    root = Path(configured).expanduser() if configured else REPO / "var" / "test" / "zoo"
    build_zoo(root, seed=0)
    return root
