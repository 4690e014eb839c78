"""Security: run tokens, who may change what (every route of the URL conf), CSRF, open
redirects, escaping of hostile text on every page, and the production settings.

Actors: alice owns everything here, bob is her labmate, charlie is in another lab.
Routes are enumerated from the URL conf, so a new view is held to the same rules
(anonymous users go to the login page, outsiders get 404, labmates 403 on anything that
changes an object, every POST needs the CSRF token) without editing this file. The job
script's quoting of hostile-but-valid values is tested in tests/scheduler/test_jobs.py
(``test_every_text_field_refuses_injection_payloads``).
"""

from __future__ import annotations

import ast
import hashlib
import os
import re
import secrets
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, resolve, reverse
from django.utils.http import url_has_allowed_host_and_scheme

from scheduler.launch import sweep_launch
from scheduler.run_job import job_spec
from tests.fixtures_db import database_url
from tests.webapp.metrics.test_api_support import event, point, post_batch
from webapp.compare.models import SavedComparison
from webapp.evals.models import Evaluation
from webapp.metrics.models import TransferEvent
from webapp.registry.models import EvalSuite, ModelEntry
from webapp.runs import services
from webapp.runs.models import Experiment, Run, Sweep

pytestmark = pytest.mark.django_db

REPO = Path(__file__).resolve().parents[2]
SCRIPT = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"
SHELL = "$(rm -rf ~)"


def logged_in(user: User | None, *, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    if user is not None:
        client.force_login(user)
    return client


# --------------------------------------------------------------------------- run tokens


def test_tokens_are_stored_only_as_their_hash(run: Run) -> None:
    token = services.run_token_issue(run)
    assert token.startswith("mrl_") and len(token) >= 40
    with connection.cursor() as cursor:
        cursor.execute("SELECT r::text FROM experiments_run r")
        rows = [row[0] for row in cursor.fetchall()]
    assert rows and not any(token in row or token[4:] in row for row in rows)
    run.refresh_from_db()
    assert run.token_hash == hashlib.sha256(token.encode()).hexdigest()


def test_a_token_writes_its_own_run_only_until_revoked(
    client: Client, run: Run, alice: User, make_experiment: Callable[..., Experiment]
) -> None:
    other = services.runs_create(make_experiment(seeds=(0,)))[0]
    token, other_token = services.run_token_issue(run), services.run_token_issue(other)
    assert token != other_token
    batch = {"points": [point(1)], "events": [event(1)], "status": {"state": "running"}}
    assert post_batch(client, other, token, batch).status_code == 403
    assert post_batch(client, run, other_token, batch).status_code == 403
    assert not other.series.exists() and not other.transfer_events.exists()
    assert Run.objects.get(pk=other.pk).state == other.state
    assert post_batch(client, run, token, batch).status_code == 200
    services.run_token_revoke(run)
    assert post_batch(client, run, token, batch).status_code == 401
    new = services.run_token_issue(run)
    assert post_batch(client, run, token, batch).status_code == 401  # the old one is dead
    assert post_batch(client, run, new, batch).status_code == 200
    # A token of a deleted run is no token at all; probing run ids tells nothing.
    assert post_batch(client, Run(pk=run.pk + 1000), new, batch).status_code == 403
    run.experiment.delete()
    assert post_batch(client, Run(pk=run.pk), new, batch).status_code == 401


def test_a_token_reads_nothing(client: Client, run: Run, token: str) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    for name in ("series", "keys", "events", "events_summary", "status"):
        response = client.get(reverse(f"api:{name}", args=[run.pk]), headers=headers)
        assert response.status_code == 401, name
    for url in (reverse("compare:data"), reverse("compare:summary")):
        assert client.get(f"{url}?runs={run.pk}", headers=headers).status_code == 401
    page = client.get(run.get_absolute_url(), headers=headers)
    assert page.status_code == 302 and page["Location"].startswith("/accounts/login/")


def test_the_token_page_is_for_the_owner(run: Run, bob: User, charlie: User) -> None:
    url = reverse("dashboard:run_token", args=[run.pk])
    assert logged_in(bob).post(url).status_code == 403
    assert logged_in(charlie).post(url).status_code == 404
    assert logged_in(bob).post(url, {"revoke": "1"}).status_code == 403
    run.refresh_from_db()
    assert run.token_hash == ""


# --------------------------------------------------------------------------- the URL conf

PUBLIC = {"login", "healthz", "api:schema"}  # answer anonymous users (they hold no data)
LAB_MEMBER_ACTIONS = {"dashboard:experiment_clone", "compare:sweep_create"}
"""POSTs a labmate may make on alice's objects: they create the labmate's own copy."""
TOKEN_AUTH = {"api:ingest"}  # bearer token, no cookies: CSRF does not apply


def routes() -> list[tuple[str, str]]:
    """(name, route) of every view in the URL conf but Django's admin."""
    found: list[tuple[str, str]] = []

    def walk(patterns: list[Any], prefix: str, namespace: str) -> None:
        for entry in patterns:
            route = prefix + str(entry.pattern)
            if isinstance(entry, URLResolver):
                if route.startswith("admin/"):
                    continue
                inner = f"{namespace}{entry.namespace}:" if entry.namespace else namespace
                walk(entry.url_patterns, route, inner)
            elif isinstance(entry, URLPattern):
                found.append((f"{namespace}{entry.name}", route))

    walk(get_resolver().url_patterns, "", "")
    return found


@pytest.fixture
def objects(alice: User, make_experiment: Callable[..., Experiment]) -> dict[str, Any]:
    """One of each kind of alice's objects, in alice's lab."""
    experiment = make_experiment(seeds=(0,))
    run = services.runs_create(experiment)[0]
    services.run_token_issue(run)
    entry = ModelEntry.objects.create(
        lab=experiment.lab, owner=alice, name="m", source="zoo:tiny-llama-char"
    )
    sweep = sweep_launch(owner=alice, source=experiment, name="grid", regimes=["sgt"], seeds=[0])
    saved = SavedComparison.objects.create(
        lab=experiment.lab, owner=alice, name="c", slug="s1", query=f"runs={run.pk}"
    )
    event = TransferEvent.objects.create(run=run, step=1, source="a", target="b", kind="success")
    tasks = [{"name": "t", "type": "math", "path": "/nonexistent/t.jsonl", "limit": None}]
    suite = EvalSuite.objects.create(lab=experiment.lab, owner=alice, name="s", tasks=tasks)
    evaluation = Evaluation.objects.create(
        run=run, suite=suite, suite_config=suite.config, owner=alice
    )
    return {
        "suites": suite,
        "evaluations": evaluation,
        "experiments": experiment,
        "runs": run,
        "models": entry,
        "sweeps": sweep,
        "saved": saved,
        "events": event,
    }


OBJECT_OF_SEGMENT = {"experiments": "experiments", "runs": "runs", "models": "models"}
OBJECT_OF_SEGMENT |= {"sweeps": "sweeps", "saved": "saved", "events": "events"}
OBJECT_OF_SEGMENT |= {"suites": "suites", "evaluations": "evaluations"}


def concrete(route: str, objects: dict[str, Any]) -> tuple[str, str | None]:
    """The route with alice's object in it, and which kind of object that is (or None)."""
    kind, path, done = None, "/", 0
    for match in re.finditer(r"<(?:(\w+):)?\w+>", route):
        path += route[done : match.start()]
        done = match.end()
        if match[1] == "str":
            path += "csv"  # an export format
            continue
        segment = route[: match.start()].rstrip("/").rsplit("/", 1)[-1]
        kind = OBJECT_OF_SEGMENT.get(segment)
        if kind is None:
            pytest.fail(f"{route}: say in test_security.py which object {match[0]} names")
        obj = objects[kind]
        path += obj.slug if match[1] == "slug" else str(obj.pk)
    return path + route[done:], kind


def snapshot(objects: dict[str, Any]) -> tuple[Any, ...]:
    run = Run.objects.get(pk=objects["runs"].pk)
    return (
        Experiment.objects.count(),
        list(Run.objects.order_by("pk").values_list("pk", "state", "token_hash")),
        run.series.count(),
        list(ModelEntry.objects.values_list("pk", "name", "source")),
        Sweep.objects.count(),
        SavedComparison.objects.count(),
        list(EvalSuite.objects.values_list("pk", "name", "tasks")),
        list(Evaluation.objects.values_list("pk", "state")),
        Experiment.objects.exclude(auto_eval_suite=None).count(),
    )


def test_ingest_is_the_only_view_without_csrf_protection(objects: dict[str, Any]) -> None:
    exempt = {
        name
        for name, route in routes()
        if getattr(resolve(concrete(route, objects)[0]).func, "csrf_exempt", False)
    }
    assert exempt == TOKEN_AUTH


def test_anonymous_users_are_sent_to_the_login_page(objects: dict[str, Any]) -> None:
    client = logged_in(None)
    before = snapshot(objects)
    for name, route in routes():
        url, _ = concrete(route, objects)
        for method in ("get", "post"):
            response = getattr(client, method)(url)
            status = response.status_code
            if name in PUBLIC or (name == "logout" and method == "post"):
                assert status < 500, (name, method)
            elif status == 302:
                assert response["Location"].startswith("/accounts/login/?next="), (name, method)
            else:
                assert status in (401, 405), (name, method, status)  # the JSON API
    assert snapshot(objects) == before


def test_every_post_needs_the_csrf_token(alice: User, objects: dict[str, Any]) -> None:
    client = logged_in(alice, csrf=True)
    before = snapshot(objects)
    for name, route in routes():
        if name in TOKEN_AUTH:
            continue
        url, _ = concrete(route, objects)
        assert client.post(url, {"revoke": "1", "name": "x"}).status_code == 403, name
    assert snapshot(objects) == before
    assert logged_in(None, csrf=True).post(reverse("login")).status_code == 403


def post_views(user: User, objects: dict[str, Any]) -> set[str]:
    """The views that accept a POST (charlie's POST is not answered with 405)."""
    accepting = set()
    for name, route in routes():
        client = logged_in(user)
        if client.post(concrete(route, objects)[0]).status_code != 405:
            accepting.add(name)
    return accepting


def test_the_state_changing_views_are_all_found(charlie: User, objects: dict[str, Any]) -> None:
    found = post_views(charlie, objects)
    assert {
        *("dashboard:experiment_create", "dashboard:experiment_edit"),
        *("dashboard:experiment_clone", "dashboard:experiment_launch"),
        *("dashboard:experiment_delete", "dashboard:run_token"),
        *("dashboard:run_cancel", "dashboard:run_resubmit"),
        *("compare:sweep_create", "compare:comparison_save"),
        *("registry:model_create", "registry:model_edit"),
        *("registry:model_delete", "login", "logout", "api:ingest"),
        *("registry:suite_create", "registry:suite_edit", "registry:suite_delete"),
        *("evals:run_evaluate", "evals:evaluation_cancel"),
        *("evals:experiment_auto_eval", "registry:zoo_build"),
    } <= found


def test_outsiders_find_nothing_and_change_nothing(charlie: User, objects: dict[str, Any]) -> None:
    before = snapshot(objects)
    for name, route in routes():
        url, kind = concrete(route, objects)
        if kind is None or name in TOKEN_AUTH:
            continue
        for method in ("get", "post"):
            status = getattr(logged_in(charlie), method)(url).status_code
            assert status in (404, 405), (name, method, status)
    run = objects["runs"]
    for url in (reverse("compare:data"), reverse("compare:summary")):
        assert logged_in(charlie).get(f"{url}?runs={run.pk}").status_code == 404
    page = logged_in(charlie).get(reverse("compare:page"), {"runs": run.pk})
    assert run.name not in page.content.decode()
    assert snapshot(objects) == before


def test_labmates_see_but_cannot_change(bob: User, objects: dict[str, Any]) -> None:
    before = snapshot(objects)
    for name, route in routes():
        url, kind = concrete(route, objects)
        if kind is None or name in TOKEN_AUTH | LAB_MEMBER_ACTIONS:
            continue
        status = logged_in(bob).post(url, {"revoke": "1"}).status_code
        assert status in (403, 405), (name, status)
    for name in ("dashboard:experiment_edit", "registry:model_edit"):
        kind = "experiments" if name.endswith("experiment_edit") else "models"
        assert logged_in(bob).get(reverse(name, args=[objects[kind].pk])).status_code == 403
    assert snapshot(objects) == before
    assert logged_in(bob).get(objects["runs"].get_absolute_url()).status_code == 200


def test_the_owner_may_change(alice: User, objects: dict[str, Any]) -> None:
    """The positive control: the same POSTs by the owner go through."""
    client = logged_in(alice)
    experiment, run, entry = objects["experiments"], objects["runs"], objects["models"]
    for name, args in [
        ("dashboard:run_token", [run.pk]),
        ("dashboard:run_cancel", [run.pk]),
        ("dashboard:run_resubmit", [run.pk]),
        ("dashboard:experiment_launch", [experiment.pk]),
        ("dashboard:experiment_clone", [experiment.pk]),
        ("registry:model_delete", [entry.pk]),
    ]:
        data = {"confirm": "yes"} if name == "dashboard:run_cancel" else {}  # confirmed
        assert client.post(reverse(name, args=args), data).status_code == 302, name
    assert not ModelEntry.objects.exists()
    assert Run.objects.get(pk=run.pk).state == Run.State.QUEUED  # cancelled, resubmitted
    assert Experiment.objects.filter(cloned_from=experiment).exists()


# --------------------------------------------------------------------------- redirects

EVIL_NEXT = [
    "https://evil.example/",
    "//evil.example/",
    "/\\evil.example",
    "https:evil.example",
    "javascript:alert(1)",
    "http://testserver@evil.example/",
    " //evil.example",
    "\x00//evil.example",
]


def is_on_site(location: str) -> bool:
    return url_has_allowed_host_and_scheme(location, allowed_hosts={"testserver"})


@pytest.mark.parametrize("target", EVIL_NEXT)
def test_login_and_logout_never_redirect_off_site(alice: User, target: str) -> None:
    client = logged_in(None)
    page = client.get(reverse("login"), {"next": target})
    assert page.status_code == 200
    response = client.post(
        reverse("login") + "?next=x",
        {"username": "alice", "password": "alice-password", "next": target},
    )
    assert response.status_code == 302
    assert response["Location"] == reverse("dashboard:index")
    out = client.post(reverse("logout"), {"next": target})
    assert out.status_code == 302 and is_on_site(out["Location"])
    assert "evil" not in out["Location"]


def test_a_safe_next_is_followed(alice: User) -> None:
    response = logged_in(None).post(
        reverse("login"), {"username": "alice", "password": "alice-password", "next": "/runs/"}
    )
    assert response["Location"] == "/runs/"


@pytest.mark.parametrize(
    "query", ["//evil.example", "x#@evil.example", "a\r\nLocation: https://evil.example", "\\\\x"]
)
def test_saving_a_comparison_stays_on_the_compare_page(alice: User, query: str) -> None:
    response = logged_in(alice).post(
        reverse("compare:comparison_save"), {"name": "", "query": query}
    )
    location = response["Location"]
    assert response.status_code == 302 and location.startswith("/compare/")
    assert is_on_site(location) and "\n" not in location


def test_no_view_redirects_to_request_data() -> None:
    """A static guard: redirects in the app never take a URL straight from the request."""
    offenders = []
    for path in (REPO / "webapp").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            callee = ast.unparse(node.func)
            if callee.split(".")[-1] not in {"redirect", "HttpResponseRedirect"}:
                continue
            argument = ast.unparse(node.args[0]) if node.args else ""
            if re.search(r"request\.(GET|POST|META|headers|body)", argument):
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno}: {argument}")
    assert not offenders


# --------------------------------------------------------------------------- escaping


@pytest.fixture
def hostile(
    client: Client,
    alice: User,
    bob: User,
    make_experiment: Callable[..., Experiment],
    settings: Any,
    tmp_path: Path,
) -> dict[str, Any]:
    """Alice's experiment and run carrying hostile text wherever free text can go."""
    settings.RUN_ROOT = tmp_path / "runs"
    experiment = make_experiment(seeds=(0,))
    experiment.description = f"{SCRIPT} {SHELL}"
    experiment.notes = f"{SCRIPT}\n'; DROP TABLE x; --"
    experiment.save()
    run = services.runs_create(experiment)[0]
    Run.objects.filter(pk=run.pk).update(
        state=Run.State.SUBMITTED, notes=SCRIPT, run_dir=str(tmp_path / "runs" / "hostile")
    )
    token = services.run_token_issue(run)
    body = {
        "points": [point(1, 0.5, policy="llama", key=SCRIPT), point(2, "NaN", policy="llama")],
        "events": [event(1, source="llama", target="qwen", prompt_id=SCRIPT)],
        "status": {"state": "running", "message": f"{SCRIPT} {SHELL}"},
    }
    assert post_batch(client, run, token, body).status_code == 200
    failed = {"status": {"state": "failed", "message": f"<img src=x onerror=alert(2)> {SCRIPT}"}}
    assert post_batch(client, run, token, failed).status_code == 200
    log_path = job_spec(Run.objects.get(pk=run.pk)).log_path
    log_path.parent.mkdir(parents=True)
    log_path.write_text(f"step 1\n{SCRIPT}\n{SHELL}\n</pre><b>bold</b>\n")
    sweep = sweep_launch(
        owner=alice, source=experiment, name="grid", regimes=["sgt"], seeds=[0], description=SCRIPT
    )
    saved = SavedComparison.objects.create(
        lab=experiment.lab, owner=alice, name=SCRIPT, slug="hostile", query=f"runs={run.pk}"
    )
    ModelEntry.objects.create(
        lab=experiment.lab,
        owner=alice,
        name="m",
        source="zoo:tiny-llama-char",
        notes=SCRIPT,
        chat_template=SCRIPT,
    )
    return {"experiment": experiment, "run": run, "sweep": sweep, "saved": saved, "log": log_path}


def test_hostile_text_is_escaped_on_every_page(alice: User, hostile: dict[str, Any]) -> None:
    client = logged_in(alice)
    run, experiment = hostile["run"], hostile["experiment"]
    must_show = {
        experiment.get_absolute_url(): [ESCAPED, "$(rm -rf ~)", "&#x27;; DROP TABLE x; --"],
        run.get_absolute_url(): [ESCAPED, "&lt;img src=x onerror=alert(2)&gt;"],
        f"{reverse('compare:page')}?runs={run.pk}": [ESCAPED],
        reverse("compare:comparison_list"): [ESCAPED],
        hostile["saved"].get_absolute_url(): [ESCAPED],
        hostile["sweep"].get_absolute_url(): [ESCAPED],
        reverse("dashboard:experiment_edit", args=[experiment.pk]): [ESCAPED],
    }
    pages = [
        reverse("dashboard:index"),
        reverse("dashboard:experiment_list"),
        reverse("dashboard:run_list"),
        reverse("compare:sweep_list"),
        reverse("registry:model_list"),
        *must_show,
    ]
    for url in pages:
        response = client.get(url)
        assert response.status_code == 200, url
        page = response.content.decode()
        assert SCRIPT not in page and "<img src=x" not in page, url
        for text in must_show.get(url, []):
            assert text in page, (url, text)


def test_json_carries_hostile_text_as_plain_text(alice: User, hostile: dict[str, Any]) -> None:
    client = logged_in(alice)
    run = hostile["run"]
    log = client.get(reverse("dashboard:run_log", args=[run.pk]))
    assert log["Content-Type"] == "application/json"
    assert log.json()["log"] == hostile["log"].read_text()
    status = client.get(reverse("api:status", args=[run.pk]))
    failure = f"<img src=x onerror=alert(2)> {SCRIPT}"
    assert status.json()["status_message"] == failure == status.json()["failure_reason"]
    events = client.get(reverse("api:events", args=[run.pk])).json()["events"]
    assert events[0]["prompt_id"] == SCRIPT
    keys = {row["key"] for row in client.get(reverse("api:keys", args=[run.pk])).json()["keys"]}
    assert SCRIPT in keys
    for response in (log, status):
        assert response["X-Content-Type-Options"] == "nosniff"
    # The run page hands its data to the script as JSON that cannot close the tag.
    page = client.get(run.get_absolute_url()).content.decode()
    config = page.split('id="run-page-config"', 1)[1].split("</script>", 1)[0]
    assert "<" not in config.split(">", 1)[1]


# --------------------------------------------------------------------------- settings


def _production(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "DEBUG"}}
    base.update(
        MRL_PRODUCTION="true",
        SECRET_KEY=secrets.token_urlsafe(50)[:50],
        ALLOWED_HOSTS="lab.example.org",
        DATABASE_URL=database_url(),
        DJANGO_SETTINGS_MODULE="webapp.settings",
        **env,
    )
    return subprocess.run(
        [sys.executable, *args],
        cwd=REPO,
        env=base,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_production_settings_pass_the_deploy_checks() -> None:
    result = _production(
        "manage.py",
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        MRL_TASK_DATA_DIRS="/srv/mrl-data",
    )
    assert result.returncode == 0, result.stderr
    assert "System check identified no issues" in result.stdout


def test_the_deploy_checks_ask_for_the_data_directories() -> None:
    result = _production("manage.py", "check", "--deploy", MRL_TASK_DATA_DIRS="")
    assert result.returncode == 0, result.stderr  # a warning, not an error
    assert "mrl.W001" in result.stderr and "MRL_TASK_DATA_DIRS is not set" in result.stderr


def test_production_settings_are_locked_down() -> None:
    names = [
        *("DEBUG", "SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE", "SECURE_SSL_REDIRECT"),
        *("SESSION_COOKIE_HTTPONLY", "CSRF_COOKIE_HTTPONLY", "X_FRAME_OPTIONS"),
        *("SECURE_CONTENT_TYPE_NOSNIFF", "SECURE_HSTS_SECONDS", "SECURE_REFERRER_POLICY"),
    ]
    code = "from django.conf import settings; print(repr([getattr(settings, n) for n in %r]))"
    result = _production("-c", code % names)
    assert result.returncode == 0, result.stderr
    values = dict(zip(names, ast.literal_eval(result.stdout.strip()), strict=True))
    assert values == {
        "DEBUG": False,
        "SESSION_COOKIE_SECURE": True,
        "CSRF_COOKIE_SECURE": True,
        "SECURE_SSL_REDIRECT": True,
        "SESSION_COOKIE_HTTPONLY": True,
        "CSRF_COOKIE_HTTPONLY": True,
        "X_FRAME_OPTIONS": "DENY",
        "SECURE_CONTENT_TYPE_NOSNIFF": True,
        "SECURE_HSTS_SECONDS": 31536000,
        "SECURE_REFERRER_POLICY": "same-origin",
    }
    refused = _production("manage.py", "check", DEBUG="true")
    assert refused.returncode != 0 and "DEBUG=true is refused" in refused.stderr
