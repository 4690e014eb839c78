"""Every form under bad input: oversized, empty, unicode (RTL, emoji, NUL), negative,
NaN/inf, injection-looking values and paths, one field at a time.

Whatever is posted, the page answers 200 (re-rendered with the message next to the
field that caused it, nothing saved) or 302 to a page that works (the value was fine
there: free text is free); never a 5xx, and an echoed value is always HTML-escaped.
The forms: the experiment composer (main fields, the chosen regime's sections,
resources, the pool formset and its management form), the model registry, the sweep
form, the list filters, the compare page's query and its save form, the login form,
and the composer's "Import config JSON" box.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from tests.webapp.runs.test_forms import query, sgt_data
from trainer.config import RunConfig
from trainer.regimes import regime_names
from trainer.zoo import ZOO_IDS, ZOO_RECIPES
from webapp.compare.models import SavedComparison
from webapp.core.models import Lab
from webapp.registry.models import ModelEntry
from webapp.runs import services
from webapp.runs.compose import ExperimentComposer
from webapp.runs.forms import MAX_MICRO_BATCH
from webapp.runs.models import Experiment, Sweep

pytestmark = pytest.mark.django_db

SCRIPT = "<script>alert(1)</script>"
VALUES: dict[str, str] = {
    "oversized": "A" * 10_240,
    "oversized-number": "9" * 10_240,
    "huge-number": "99999999999999999999",
    "empty": "",
    "rtl": "\u202eevil\u202c مرحبا",
    "emoji": "🧪🔥",
    "nul": "a\x00b",
    "negative": "-1",
    "nan": "NaN",
    "inf": "inf",
    "script": SCRIPT,
    "shell": "$(rm -rf ~)",
    "sql": "'; DROP TABLE x; --",
    "traversal": "../../etc/passwd",
    "long-path": "/" + "a" * 300,
}


@pytest.fixture(autouse=True)
def _empty_zoo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MRL_ZOO_DIR", str(tmp_path / "zoo"))


def assert_escaped(response: Any) -> str:
    """The page never carries a raw payload; where it echoes one, it is escaped."""
    assert response.status_code < 500
    page = response.content.decode()
    assert SCRIPT not in page
    return page


def logged_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


# --------------------------------------------------------------------------- the composer

# Every other regime's section and ReMix's: not the chosen regime's (sgt), not validated.
HIDDEN_SECTIONS = (*(f"{name}-" for name in regime_names() if name != "sgt"), "remix-")
NUMBERS = {"seeds", "steps", "pool-0-lr", "pool-0-group_size", "resources-gpus", "sgt-k_sgt"}
MANAGEMENT = ("pool-TOTAL_FORMS", "pool-INITIAL_FORMS", "pool-MIN_NUM_FORMS", "pool-MAX_NUM_FORMS")


def composer_fields(data: dict[str, str], composer: ExperimentComposer) -> list[str]:
    """The fields one policy's worth of the page sends (the other policies are alike) that
    can carry a bad value: not the checkboxes, which the browser sends checked or not at
    all (any value means checked: ``CheckboxInput``)."""
    checkboxes = {
        field.html_name
        for form in [composer.form, composer.resources, *composer.pool.forms]
        for field in form
        if field.widget_type == "checkbox"
    }
    return [
        name
        for name in data
        if not name.startswith(("pool-1-", "pool-2-", *HIDDEN_SECTIONS))
        and name != "cloned_from"
        and name not in checkboxes
    ]


def field_errors(composer: ExperimentComposer, html_name: str) -> list[str]:
    if html_name in MANAGEMENT:
        return list(composer.pool.non_form_errors())
    forms_ = [
        composer.form,
        composer.resources,
        *(section.form for section in composer.sections if section.relevant),
        *composer.pool.forms,
    ]
    for form in forms_:
        for field in form:
            if field.html_name == html_name:
                return list(field.errors)
    raise AssertionError(f"no field {html_name}")


@pytest.mark.parametrize("kind", VALUES)
def test_every_composer_field_reports_a_bad_value_next_to_it(lab: Lab, kind: str) -> None:
    base = sgt_data(ExperimentComposer(lab=lab))
    assert ExperimentComposer(query(base), lab=lab).is_valid()
    accepted = []
    for name in composer_fields(base, ExperimentComposer(query(base), lab=lab)):
        composer = ExperimentComposer(query({**base, name: VALUES[kind]}), lab=lab)
        if composer.is_valid():
            accepted.append(name)
            continue
        assert field_errors(composer, name), (name, kind, composer.form.errors)
    # Free text takes anything printable; numbers, names and choices refuse what is not
    # one; the arithmetic task's data paths must stay empty (test_task_data_paths.py checks
    # them for the file tasks).
    free_text = {"description", "notes", "pool-0-chat_template", "task-system_prompt"}
    if kind != "empty":
        assert not {"task-train_path", "task-val_path"} & set(accepted), kind
    if kind == "nul":
        assert accepted == []
    if kind.startswith("oversized"):
        assert set(accepted) <= free_text
    if kind not in ("empty", "negative", "huge-number"):
        assert not NUMBERS & set(accepted), kind
    if kind == "script":
        assert set(accepted) == free_text


@pytest.mark.parametrize("kind", VALUES)
def test_the_compose_page_saves_or_rerenders_escaped(lab: Lab, alice: User, kind: str) -> None:
    client = logged_in(alice)
    base = sgt_data(ExperimentComposer(lab=lab))
    url = reverse("dashboard:experiment_create")
    for name in ("name", "description", "pool-0-model", "resources-time_limit"):
        before = Experiment.objects.count()
        response = client.post(url, {**base, name: VALUES[kind], "action": "save"})
        if response.status_code == 302:
            experiment = Experiment.objects.latest("id")
            assert response["Location"] == experiment.get_absolute_url()
            assert Experiment.objects.count() == before + 1
            assert_escaped(client.get(response["Location"]))
            experiment.delete()
            continue
        assert response.status_code == 200, (name, kind)
        assert Experiment.objects.count() == before, (name, kind)
        assert field_errors(response.context["composer"], name), (name, kind)
        page = assert_escaped(response)
        if kind == "script":
            assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_a_bad_clone_source_is_not_found(lab: Lab, alice: User, charlie: User) -> None:
    client = logged_in(alice)
    other = services.experiment_create(
        owner=charlie, config={**_config(), "name": "theirs"}, seeds=[0]
    )
    url = reverse("dashboard:experiment_create")
    for value in ("²", "-1", "NaN", "99999999999999999999", str(other.pk), "1e3"):
        assert client.get(url, {"from": value}).status_code == 404, value
        assert client.post(url, {"cloned_from": value, "action": "save"}).status_code == 404


def test_a_micro_batch_size_beyond_the_limit_is_refused_quickly(lab: Lab) -> None:
    base = sgt_data(ExperimentComposer(lab=lab))
    composer = ExperimentComposer(query({**base, "pool-0-micro_batch_size": str(10**12)}), lab=lab)
    assert not composer.is_valid()
    assert str(MAX_MICRO_BATCH) in " ".join(field_errors(composer, "pool-0-micro_batch_size"))


# --------------------------------------------------------------------------- model registry

MODEL_BASE = {"name": "m1", "source": "zoo:tiny-llama-char"}
MODEL_FIELDS = ("name", "source", "tokenizer", "family", "parameter_count", "chat_template")


@pytest.mark.parametrize("kind", VALUES)
def test_the_model_registry_form(lab: Lab, alice: User, kind: str) -> None:
    client = logged_in(alice)
    url = reverse("registry:model_create")
    for name in (*MODEL_FIELDS, "notes"):
        response = client.post(url, {**MODEL_BASE, name: VALUES[kind]})
        if response.status_code == 302:
            assert response["Location"] == reverse("registry:model_list")
            assert_escaped(client.get(response["Location"]))
            ModelEntry.objects.all().delete()
            continue
        assert response.status_code == 200, (name, kind)
        assert not ModelEntry.objects.exists()
        assert response.context["form"].errors.get(name), (name, kind)
        assert_escaped(response)


# --------------------------------------------------------------------------- sweeps


@pytest.mark.parametrize("kind", VALUES)
def test_the_sweep_form(alice: User, kind: str, make_experiment: Callable[..., Experiment]) -> None:
    source = make_experiment(seeds=(0,))
    client = logged_in(alice)
    url = reverse("compare:sweep_create", args=[source.pk])
    base = {
        "name": "grid",
        "regimes": ["sgt"],
        "seeds": "0",
        "param_path": "grpo.kl_coef",
        "param_values": "0.0, 0.1",
    }
    for name in ("name", "description", "regimes", "seeds", "param_path", "param_values"):
        response = client.post(url, {**base, name: VALUES[kind]})
        if response.status_code == 302:
            sweep = Sweep.objects.get()
            assert response["Location"] == sweep.get_absolute_url()
            assert_escaped(client.get(response["Location"]))
            Experiment.objects.filter(sweep=sweep).delete()
            sweep.delete()
            continue
        assert response.status_code == 200, (name, kind)
        assert not Sweep.objects.exists()
        assert Experiment.objects.count() == 1
        assert response.context["form"].errors.get(name), (name, kind)
        assert_escaped(response)


def test_sweep_values_that_break_the_config_are_reported_on_the_values(
    alice: User, make_experiment: Callable[..., Experiment]
) -> None:
    source = make_experiment(seeds=(0,))
    client = logged_in(alice)
    url = reverse("compare:sweep_create", args=[source.pk])
    base = {"name": "grid", "regimes": ["sgt"], "seeds": "0", "param_path": "grpo.kl_coef"}
    for values, fragment in [("-1", "kl_coef must be >= 0"), ("nan", "not a finite number")]:
        response = client.post(url, {**base, "param_values": values})
        assert fragment in " ".join(response.context["form"].errors["param_values"])
    response = client.post(url, {**base, "param_path": "", "seeds": str(2**31)})
    assert "seeds" in response.context["form"].errors
    assert not Sweep.objects.exists()


# --------------------------------------------------------------------------- list filters

FILTER_FIELDS = ("q", "owner", "regime", "state", "tag", "sort", "page")


@pytest.mark.parametrize("list_name", ["experiment_list", "run_list"])
def test_the_list_filters(
    alice: User, list_name: str, make_experiment: Callable[..., Experiment]
) -> None:
    services.runs_create(make_experiment(seeds=(0,)))
    client = logged_in(alice)
    url = reverse(f"dashboard:{list_name}")
    for kind, value in VALUES.items():
        for name in FILTER_FIELDS:
            response = client.get(url, {name: value})
            assert response.status_code == 200, (name, kind)
            assert_escaped(response)
            errors = response.context["form"].errors
            too_long = len(value) > {"q": 64, "owner": 150, "tag": 48}.get(name, 10**9)
            if name in ("regime", "state", "sort") and value:
                assert name in errors, (name, kind)  # never one of the choices
            elif name in ("q", "owner", "tag"):
                assert (name in errors) == (too_long or "\x00" in value), (name, kind)


# --------------------------------------------------------------------------- compare page

COMPARE_PARAMS = (
    *("sweep", "runs", "run", "q_regime", "q_off_policy", "q_pool", "q_tag", "q_owner"),
    *("q_experiment", "q_state", "group_by", "x", "band", "smooth", "metric", "policy"),
    *("preset", "log_y"),
)


def test_the_compare_query(alice: User, make_experiment: Callable[..., Experiment]) -> None:
    services.runs_create(make_experiment(seeds=(0,)))
    client = logged_in(alice)
    url = reverse("compare:page")
    for kind, value in VALUES.items():
        for name in COMPARE_PARAMS:
            params = {"q_regime": "sgt", name: value}
            response = client.get(url, params)
            assert response.status_code in (200, 400, 404), (name, kind)
            page = assert_escaped(response)
            if response.status_code == 404:  # a well-formed id of no run or sweep
                assert name in ("run", "runs", "sweep"), (name, kind)
                assert "does not exist or is not visible to you" in page, (name, kind)
            if response.status_code == 400:
                assert 'data-testid="selection-error"' in page
                error = response.context["error"]
                assert name in error or (value == "" and "choose runs" in error), (name, kind)


def test_saving_a_comparison(alice: User, make_experiment: Callable[..., Experiment]) -> None:
    services.runs_create(make_experiment(seeds=(0,)))
    client = logged_in(alice)
    url = reverse("compare:comparison_save")
    for kind, value in VALUES.items():
        for data in ({"name": value, "query": "q_regime=sgt"}, {"name": "n", "query": value}):
            response = client.post(url, data)
            assert response.status_code == 302, (data, kind)
            assert response["Location"].startswith("/") and not response["Location"].startswith(
                "//"
            )
            assert_escaped(client.get(response["Location"]))
    saved = list(SavedComparison.objects.values_list("name", flat=True))
    assert not any("\x00" in name for name in saved) and SCRIPT in saved
    assert_escaped(client.get(reverse("compare:comparison_list")))


# --------------------------------------------------------------------------- login


@pytest.mark.parametrize("name", ["username", "password"])
def test_the_login_form(client: Client, alice: User, name: str, settings: Any) -> None:
    # Every value here is a failed login of alice's from one address: above the throttle's
    # limit, which tests/webapp/core/test_login_throttling.py tests on its own.
    settings.AXES_FAILURE_LIMIT = len(VALUES) + 1
    url = reverse("login")
    for kind, value in VALUES.items():
        response = client.post(url, {"username": "alice", "password": "x", name: value})
        assert response.status_code == 200, kind  # never logged in
        assert "_auth_user_id" not in client.session
        form = response.context["form"]
        if value == "" or (len(value) > 150 and name == "username") or "\x00" in value:
            assert form.errors.get(name), (name, kind)
            assert 'data-testid="error-' + name + '"' in response.content.decode()
        else:
            assert form.non_field_errors(), (name, kind)
        assert_escaped(response)


# --------------------------------------------------------------------------- config import


def _config(**overrides: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "name": "imported",
        "regime": "sgt",
        "pool": [
            {"name": "llama", "model": "zoo:tiny-llama-char"},
            {"name": "qwen", "model": "zoo:tiny-qwen-bpe", "lr": 0.0002},
        ],
        "steps": 8,
        "prompts_per_step": 4,
        "sgt": {"lambda_sgt": 0.3},
    }
    config.update(overrides)
    return config


def import_config(client: Client, payload: Any, *, as_file: bool = False) -> Any:
    text = payload if isinstance(payload, str | bytes) else json.dumps(payload)
    data: dict[str, Any] = {"action": "import"}
    if as_file:
        raw = text if isinstance(text, bytes) else text.encode()
        data["config_file"] = SimpleUploadedFile("config.json", raw, "application/json")
    else:
        data["config_json"] = text
    response = client.post(reverse("dashboard:experiment_create"), data)
    assert response.status_code == 200
    assert not Experiment.objects.exists()  # importing never saves
    assert_escaped(response)
    return response


def test_a_valid_config_fills_the_form_and_previews(lab: Lab, alice: User) -> None:
    client = logged_in(alice)
    for as_file in (False, True):
        response = import_config(client, _config(), as_file=as_file)
        composer = response.context["composer"]
        assert not composer.has_errors() and response.context["previewing"]
        assert composer.config == RunConfig.from_dict({**_config(), "seed": 0}).to_dict()
        assert 'data-testid="preview-panel"' in response.content.decode()
    saved = client.post(
        reverse("dashboard:experiment_create"), {**composer.as_data().dict(), "action": "save"}
    )
    experiment = Experiment.objects.get()
    assert saved["Location"] == experiment.get_absolute_url()
    assert experiment.config["sgt"]["lambda_sgt"] == 0.3
    assert experiment.config["pool"][1]["lr"] == 0.0002


@pytest.mark.parametrize(
    "example", sorted(p.name for p in (Path(__file__).parents[2] / "examples").glob("*.json"))
)
def test_every_example_config_imports_and_saves(
    lab: Lab, alice: User, example: str, settings: Any, built_zoo: Path, tmp_path: Path
) -> None:
    """What the README offers (examples/*.json) imports into the form and saves as it is
    when its zoo models are built; the examples of another recipe (the complementary and
    gap pools) show, before anything is saved, each model's build command instead."""
    zoo = tmp_path / "zoo"  # the default zoo built; no other recipe, whatever ran before
    zoo.mkdir()
    for zoo_id in ZOO_IDS:
        (zoo / zoo_id).symlink_to(built_zoo / zoo_id)
    settings.ZOO_DIR = str(zoo)
    client = logged_in(alice)
    text = (Path(__file__).parents[2] / "examples" / example).read_text()
    composer = import_config(client, text, as_file=True).context["composer"]
    models = [policy["model"].removeprefix("zoo:") for policy in json.loads(text)["pool"]]
    unbuilt = [model for model in models if model not in ZOO_IDS]
    if unbuilt:
        recipe = next(name for name, ids in ZOO_RECIPES.items() if unbuilt[0] in ids)
        assert [link.message for link in composer.error_summary()] == [
            f"zoo model {model!r} is not built in {zoo}, so a run would fail when it starts: "
            f"build it with `python -m trainer zoo build --recipe {recipe} --zoo-dir {zoo}` "
            "(from the project directory), then Preview again; or choose a built model"
            for model in unbuilt
        ]
        saved = client.post(
            reverse("dashboard:experiment_create"),
            {**composer.as_data().dict(), "action": "save"},
        )
        assert saved.status_code == 200 and not Experiment.objects.exists()
        return
    assert not composer.has_errors(), composer.error_summary()
    saved = client.post(
        reverse("dashboard:experiment_create"), {**composer.as_data().dict(), "action": "save"}
    )
    assert saved.status_code == 302, saved.content.decode()[:2000]
    config = Experiment.objects.get().config
    assert [p["model"] for p in config["pool"]] == [p["model"] for p in json.loads(text)["pool"]]


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        ("{not json", "not valid JSON"),
        ("", "choose a config file"),
        ("[1, 2]", "JSON object"),
        ('"' + SCRIPT + '"', "JSON object"),
        ('{"name": "\\ud800"}', "lone surrogate"),
        ('{"a":' * 40 + "1" + "}" * 40, "nested more than"),
        ('{"steps": ' + "9" * 5000 + "}", "not valid JSON"),
        ("a\x00b", "Null characters"),
    ],
)
def test_what_is_not_a_json_object_is_refused_at_the_import_box(
    lab: Lab, alice: User, payload: str, fragment: str
) -> None:
    response = import_config(logged_in(alice), payload)
    importer = response.context["importer"]
    assert fragment in " ".join(importer.errors["config_json"])
    assert not response.context["composer"].is_bound


def test_a_file_that_is_not_utf8_or_too_big_is_refused(lab: Lab, alice: User) -> None:
    client = logged_in(alice)
    response = import_config(client, b"\xff\xfe{}", as_file=True)
    assert "not UTF-8" in " ".join(response.context["importer"].errors["config_file"])
    response = import_config(client, b" " * 1_000_001, as_file=True)
    assert "larger than" in " ".join(response.context["importer"].errors["config_file"])


def _errors(composer: ExperimentComposer, where: str) -> str:
    """The messages of ``where``: a field name, ``pool-N-field``, ``section:field`` or
    ``form`` (the page's non-field errors)."""
    if where == "form":
        return " ".join(composer.form.non_field_errors())
    if ":" in where:
        section, name = where.split(":")
        form = next(s.form for s in composer.sections if s.name == section)
        return " ".join(form.errors.get(name or "__all__", []))
    return " ".join(field_errors(composer, where))


@pytest.mark.parametrize(
    ("overrides", "where", "fragment"),
    [
        ({"stpes": 4}, "form", "unknown field 'stpes'"),
        ({"grpo": {"kl_coeff": 0.1}}, "grpo:", "unknown field 'kl_coeff'"),
        ({"steps": "4"}, "steps", "must be an integer, got a string"),
        ({"steps": 4.5}, "steps", "whole number"),
        ({"steps": True}, "steps", "must be an integer, got a boolean"),
        ({"steps": -3}, "steps", "steps must be >= 1"),
        ({"steps": 10**12}, "steps", "2147483647"),
        ({"success_threshold": "NaN"}, "success_threshold", "must be a number"),
        ({"sgt": {"lambda_sgt": float("nan")}}, "sgt:lambda_sgt", "finite"),
        ({"name": SCRIPT}, "name", "is not a valid name"),
        ({"name": "$(rm -rf ~)"}, "name", "is not a valid name"),
        ({"regime": "'; DROP TABLE x; --"}, "regime", "Select a valid choice"),
        ({"regime": "prp", "prp": {"k_peer": 0}}, "prp:k_peer", "k_peer must be >= 1; got 0"),
        ({"grpo": [1, 2]}, "form", "grpo must be a JSON object"),
    ],
)
def test_config_problems_land_next_to_their_fields(
    lab: Lab, alice: User, overrides: dict[str, Any], where: str, fragment: str
) -> None:
    response = import_config(logged_in(alice), _config(**overrides))
    composer = response.context["composer"]
    assert composer.has_errors() and not response.context["previewing"]
    assert fragment in _errors(composer, where), _errors(composer, where)


@pytest.mark.parametrize(
    ("policy", "where", "fragment"),
    [
        ({"lr": "0.1"}, "pool-1-lr", "must be a number, got a string"),
        ({"group_size": 1}, "pool-1-group_size", "G must be at least 2"),
        ({"model": "../../etc/passwd"}, "pool-1-model", "unknown model"),
        ({"tokenizer": "/" + "a" * 300}, "pool-1-tokenizer", "cannot read"),
        ({"micro_batch_size": 10**9}, "pool-1-micro_batch_size", str(MAX_MICRO_BATCH)),
        ({"temperatur": 0.5}, "pool", "unknown field 'temperatur'"),
    ],
)
def test_a_bad_policy_is_reported_on_its_form(
    lab: Lab, alice: User, policy: dict[str, Any], where: str, fragment: str
) -> None:
    config = _config()
    config["pool"][1].update(policy)
    response = import_config(logged_in(alice), config)
    composer = response.context["composer"]
    assert composer.has_errors()
    text = (
        " ".join(composer.pool.non_form_errors())
        + " ".join(composer.pool.forms[1].non_field_errors())
        if where == "pool"
        else _errors(composer, where)
    )
    assert fragment in text, text


def test_a_pool_too_big_or_of_non_objects_is_reported(lab: Lab, alice: User) -> None:
    client = logged_in(alice)
    many = [{"name": f"p{i}", "model": "zoo:tiny-llama-char"} for i in range(20)]
    composer = import_config(client, _config(pool=many)).context["composer"]
    assert "at most 8" in " ".join(composer.pool.non_form_errors())
    composer = import_config(client, _config(pool=["llama", {"name": "q"}])).context["composer"]
    assert "must be a JSON object" in " ".join(composer.pool.non_form_errors())


def test_importing_into_an_edit_keeps_the_experiments_own_fields(
    alice: User, bob: User, make_experiment: Callable[..., Experiment]
) -> None:
    experiment = make_experiment(seeds=(3, 4))
    experiment.description = "kept"
    experiment.save()
    url = reverse("dashboard:experiment_edit", args=[experiment.pk])
    data = {"action": "import", "config_json": json.dumps(_config(steps=12))}
    assert logged_in(bob).post(url, data).status_code == 403
    response = logged_in(alice).post(url, data)
    composer = response.context["composer"]
    assert response.status_code == 200 and not composer.has_errors()
    assert composer.config["steps"] == 12 and composer.config["name"] == "imported"
    assert composer.form["description"].value() == "kept"
    assert composer.form.cleaned_data["seeds"] == [3, 4]
    experiment.refresh_from_db()
    assert experiment.config["steps"] == 4  # nothing saved until Save
