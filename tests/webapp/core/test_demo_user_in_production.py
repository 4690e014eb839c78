"""Production refuses the demo's known password (issue 44, item 4).

Before: ``manage.py demo_setup`` against a production database created ``demo`` /
``demo-password``, ``check --deploy`` said nothing and the server started. Now
``demo_setup`` refuses to run with ``MRL_PRODUCTION=true``, the deploy check ``mrl.E001``
is an error while an active user's password is the demo's or a most common one, and the
compose file's web command runs that check before gunicorn. The demo keeps working.
"""

from __future__ import annotations

import io
import os
import secrets
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError, SystemCheckError

from tests.fixtures_db import database_url
from webapp.core import well_known_passwords
from webapp.core.well_known_passwords import DEMO_PASSWORD, most_common_passwords

REPO = Path(__file__).resolve().parents[3]
DEPLOY_CHECK = ("check", "--deploy", "--database", "default", "--fail-level", "ERROR")
TEST_ONLY_SWITCHES = {"DJANGO_ALLOW_ASYNC_UNSAFE"}
"""Set for the whole session by the browser tests' fixture (and needed in this process
once they ran); Django's deploy checks call it an error, so the other processes here run
without it, and this one runs the security checks only (``--tag security``)."""


def deploy_check() -> str:
    """``manage.py check --deploy --database default --fail-level ERROR``: its output, or
    SystemCheckError."""
    out = io.StringIO()
    call_command(*DEPLOY_CHECK, "--tag", "security", stdout=out, stderr=out)
    return out.getvalue()


@pytest.fixture
def production(settings: Any) -> None:
    settings.PRODUCTION = True


@pytest.mark.django_db
def test_demo_setup_refuses_to_run_in_production(production: None) -> None:
    with pytest.raises(CommandError, match="refuses to run with MRL_PRODUCTION=true"):
        call_command("demo_setup", stdout=io.StringIO())
    assert not User.objects.exists()


@pytest.mark.django_db
def test_a_user_with_the_demo_password_fails_the_deploy_check(alice: User) -> None:
    assert "mrl.E001" not in deploy_check()
    User.objects.create_user("demo", password=DEMO_PASSWORD)
    with pytest.raises(SystemCheckError) as raised:
        deploy_check()
    message = str(raised.value)
    assert "mrl.E001" in message and "'demo' (the demo password)" in message
    assert "alice" not in message


@pytest.mark.django_db
def test_any_name_with_the_demo_password_or_a_common_one_fails_it(alice: User) -> None:
    alice.set_password(DEMO_PASSWORD)
    alice.save()
    User.objects.create_user("carol", password=most_common_passwords()[0])  # 123456
    with pytest.raises(SystemCheckError) as raised:
        deploy_check()
    message = str(raised.value)
    assert "'alice' (the demo password)" in message and "'carol' (a common password)" in message


@pytest.mark.django_db
def test_a_clean_password_is_tried_once_until_it_changes(
    alice: User, bob: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check runs at every start of the server: a password it found clean is not
    verified again (the 6 slow hash verifications a user cost every start), a changed
    one is, and a well-known one is reported every time."""
    tried: list[str] = []
    real = well_known_passwords.check_password

    def counting(password: str, encoded: str) -> bool:
        tried.append(encoded)
        return real(password, encoded)

    monkeypatch.setattr(well_known_passwords, "check_password", counting)
    deploy_check()
    per_user = 1 + well_known_passwords.COMMON_PASSWORDS_TRIED
    assert len(tried) == 2 * per_user  # alice and bob, every candidate
    tried.clear()
    deploy_check()
    assert tried == []  # remembered
    bob.set_password(DEMO_PASSWORD)
    bob.save()
    with pytest.raises(SystemCheckError, match="'bob' \\(the demo password\\)"):
        deploy_check()
    assert set(tried) == {bob.password}  # only the changed password
    with pytest.raises(SystemCheckError, match="'bob'"):
        deploy_check()  # reported again until it is changed


@pytest.mark.django_db
def test_an_inactive_or_passwordless_demo_user_passes(alice: User) -> None:
    User.objects.create_user("demo", password=DEMO_PASSWORD, is_active=False)
    User.objects.create_user("sso-only")  # an unusable password
    assert "mrl.E001" not in deploy_check()


@pytest.mark.django_db
def test_the_demo_keeps_working(alice: User) -> None:
    """Outside production demo_setup makes its user, and the plain check (what runserver
    and migrate run) says nothing about it."""
    out = io.StringIO()
    call_command("demo_setup", stdout=out)
    assert "log in with password 'demo-password'" in out.getvalue()
    assert User.objects.get(username="demo").check_password(DEMO_PASSWORD)
    plain = io.StringIO()
    call_command("check", "--database", "default", stdout=plain, stderr=plain)
    assert "no issues" in plain.getvalue() and "mrl.E001" not in plain.getvalue()


def test_a_database_without_tables_yet_is_skipped(tmp_path: Path) -> None:
    """Before the first migrate (an empty SQLite file) the check opens it, finds no user
    table, and says nothing; a plain ``check --deploy`` opens no database at all."""
    env = {k: v for k, v in os.environ.items() if k not in {"DEBUG", *TEST_ONLY_SWITCHES}}
    env |= {
        "DATABASE_URL": f"sqlite:///{tmp_path / 'empty.sqlite3'}",
        "MRL_VAR_DIR": str(tmp_path),
    }
    result = subprocess.run(
        [sys.executable, "manage.py", *DEPLOY_CHECK],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "mrl.E001" not in result.stderr


def web_command_steps() -> list[str]:
    """The compose web service's command, ``sh -c "A && B && C"``, as its steps."""
    services = yaml.safe_load((REPO / "docker/compose.yml").read_text())["services"]
    argv = shlex.split(services["web"]["command"])
    assert argv[:2] == ["sh", "-c"], argv
    return [step.strip() for step in argv[2].split("&&")]


def run_steps_before_gunicorn(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    steps = web_command_steps()
    gunicorn = next(i for i, step in enumerate(steps) if step.startswith("gunicorn "))
    script = " && ".join(steps[:gunicorn])
    # `python` in the image is the app's Python; here, this venv's.
    script = script.replace("python manage.py", f"{shlex.quote(sys.executable)} manage.py")
    return subprocess.run(
        ["sh", "-c", script],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def production_env() -> dict[str, str]:
    """The compose file's production environment, on this test's PostgreSQL database."""
    dropped = {"SECRET_KEY", "DEBUG", *TEST_ONLY_SWITCHES}
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env |= {
        "MRL_PRODUCTION": "true",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "lab.example.org",
        "DATABASE_URL": database_url(),
        "MRL_TASK_DATA_DIRS": "/srv/mrl-data",
    }
    return env


def test_the_compose_web_command_checks_before_gunicorn() -> None:
    steps = web_command_steps()
    check = next(i for i, step in enumerate(steps) if "manage.py check" in step)
    gunicorn = next(i for i, step in enumerate(steps) if step.startswith("gunicorn "))
    assert check < gunicorn
    assert shlex.split(steps[check])[1:] == ["manage.py", *DEPLOY_CHECK]


@pytest.mark.django_db(transaction=True)  # committed: the command is another process
def test_the_production_entry_point_refuses_to_start_with_the_demo_user(alice: User) -> None:
    env = production_env()
    # Hashed as production hashes (these tests hash with MD5, which it does not read).
    demo = User.objects.create_user("demo")
    demo.password = PBKDF2PasswordHasher().encode(DEMO_PASSWORD, "0123456789abcdef")
    demo.save()
    refused = run_steps_before_gunicorn(env)
    assert refused.returncode != 0
    assert "mrl.E001" in refused.stderr and "'demo' (the demo password)" in refused.stderr
    demo.set_password(secrets.token_urlsafe(16))
    demo.save()
    started = run_steps_before_gunicorn(env)
    assert started.returncode == 0, started.stderr
