"""Suite-wide fixtures and the rule that the suite runs on PostgreSQL.

Actors follow healthchecks' habit: alice owns things, bob is her labmate, charlie has
no access.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import override_settings
from playwright.sync_api import Browser, Page, sync_playwright

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
    tests' own fixture narrows it to MD5 alone)."""
    with override_settings(PASSWORD_HASHERS=FAST_PASSWORD_HASHERS):
        yield


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


# --- browsers ----------------------------------------------------------------------------
# Playwright drives Debian's Chromium (`make test` installs it; MRL_CHROMIUM overrides the
# binary) against pytest-django's live server, which runs in a thread of this process on
# the test database (transactional tests: the data is committed so the server sees it).
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-extensions",
    "--no-first-run",
]


def chromium_path() -> str:
    path = os.environ.get("MRL_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not os.path.exists(path):
        raise pytest.UsageError(
            f"browser tests need Chromium at {path}: `apt-get install chromium` "
            "(make test does it) or set MRL_CHROMIUM"
        )
    return path


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    """One Chromium for the session (a second sync Playwright could not start beside it)."""
    # Playwright's sync API keeps an event loop on this thread, and Django's ORM refuses to
    # run on a thread with a loop; the tests call the ORM only between browser actions.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=chromium_path(), args=CHROMIUM_ARGS, headless=True
            )
            yield browser
            browser.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def page(browser: Browser, transactional_db: None) -> Iterator[Page]:
    """A fresh browser context per test; any JavaScript error on the page fails the test."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    context.set_default_timeout(15_000)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield page
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def log_in(page: Page, base_url: str, user: User, password: str) -> None:
    page.goto(f"{base_url}/accounts/login/")
    page.fill("input[name=username]", user.get_username())
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base_url}/")
