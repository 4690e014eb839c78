"""The model registry pages: list, create, edit, delete, with validation and permissions.

Actors: alice owns, bob is her labmate, charlie is in another lab.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from webapp.core.models import Lab
from webapp.registry.models import ModelEntry

pytestmark = pytest.mark.django_db


@pytest.fixture
def entry(lab: Lab, alice: User) -> ModelEntry:
    return ModelEntry.objects.create(
        lab=lab, owner=alice, name="qwen-tiny", source="zoo:tiny-qwen-bpe", family="qwen2"
    )


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "qwen2-0.5b"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    (directory / "tokenizer.json").write_text("{}")
    return directory


def logged_in(user: User, *, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(user)
    return client


def entry_data(**overrides: Any) -> dict[str, Any]:
    data = {
        "name": "llama-char",
        "source": "zoo:tiny-llama-char",
        "tokenizer": "",
        "family": "llama",
        "parameter_count": "141824",
        "chat_template": "",
        "notes": "tiny zoo policy",
    }
    data.update(overrides)
    return data


def field_errors(response: Any, name: str) -> list[str]:
    return list(response.context["form"].errors.get(name, []))


# --- list ------------------------------------------------------------------------------------
def test_the_list_shows_the_labs_models_only(
    client: Client, entry: ModelEntry, charlie: User
) -> None:
    ModelEntry.objects.create(
        lab=charlie.labs.get(), owner=charlie, name="secret", source="zoo:tiny-gpt2-unigram"
    )

    html = logged_in(entry.owner).get(reverse("registry:model_list")).content.decode()

    assert 'data-model="qwen-tiny"' in html
    assert "secret" not in html
    assert 'data-testid="model-edit"' in html


def test_labmates_see_but_cannot_edit_entries(entry: ModelEntry, bob: User) -> None:
    html = logged_in(bob).get(reverse("registry:model_list")).content.decode()

    assert 'data-model="qwen-tiny"' in html
    assert 'data-testid="model-edit"' not in html


def test_anonymous_users_are_sent_to_login(client: Client, entry: ModelEntry) -> None:
    for url in (
        reverse("registry:model_list"),
        reverse("registry:model_create"),
        reverse("registry:model_edit", args=[entry.pk]),
        reverse("registry:model_delete", args=[entry.pk]),
    ):
        response = client.get(url)
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("login"))


# --- create ----------------------------------------------------------------------------------
def test_it_creates_an_entry_with_csrf_enforced(lab: Lab, alice: User, model_dir: Path) -> None:
    client = logged_in(alice, csrf=True)
    url = reverse("registry:model_create")
    page = client.get(url).content
    token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert token

    data = entry_data(
        name="qwen2-0.5b",
        source=str(model_dir),
        tokenizer=str(model_dir),
        chat_template="{{ messages }}",
        csrfmiddlewaretoken=token.group(1).decode(),
    )
    response = client.post(url, data)

    assert response.status_code == 302
    assert response["Location"] == reverse("registry:model_list")
    entry = ModelEntry.objects.get()
    assert (entry.lab, entry.owner, entry.name) == (lab, alice, "qwen2-0.5b")
    assert (entry.source, entry.tokenizer) == (str(model_dir), str(model_dir))
    assert entry.parameter_count == 141824
    assert entry.chat_template == "{{ messages }}"


def test_a_post_without_csrf_is_refused(lab: Lab, alice: User) -> None:
    response = logged_in(alice, csrf=True).post(reverse("registry:model_create"), entry_data())

    assert response.status_code == 403
    assert not ModelEntry.objects.exists()


@pytest.mark.parametrize(
    ("changes", "field", "fragment"),
    [
        ({"name": "bad name; rm"}, "name", "is not a valid name"),
        ({"source": "zoo:tiny-mystery"}, "source", "unknown zoo model 'tiny-mystery'"),
        ({"source": "models/llama"}, "source", "is not an absolute path"),
        ({"source": "/no/such/dir"}, "source", "no such directory /no/such/dir"),
        ({"tokenizer": "/no/such/tokenizer"}, "tokenizer", "no such directory"),
        ({"family": "llama 3!"}, "family", "is not a family name"),
        ({"parameter_count": "0"}, "parameter_count", "must be at least 1"),
        ({"parameter_count": "-5"}, "parameter_count", "must be at least 1"),
    ],
)
def test_invalid_entries_get_field_messages(
    lab: Lab, alice: User, changes: dict[str, str], field: str, fragment: str
) -> None:
    response = logged_in(alice).post(reverse("registry:model_create"), entry_data(**changes))

    assert response.status_code == 200
    assert fragment in " ".join(field_errors(response, field))
    assert f'data-testid="error-{field}"' in response.content.decode()
    assert not ModelEntry.objects.exists()


def test_a_directory_without_config_json_is_refused(lab: Lab, alice: User, tmp_path: Path) -> None:
    response = logged_in(alice).post(
        reverse("registry:model_create"), entry_data(source=str(tmp_path))
    )

    assert "has no config.json" in field_errors(response, "source")[0]


def test_names_are_unique_per_lab(entry: ModelEntry, charlie: User) -> None:
    response = logged_in(entry.owner).post(
        reverse("registry:model_create"), entry_data(name="qwen-tiny")
    )
    assert "already has a model named 'qwen-tiny'" in field_errors(response, "name")[0]

    # Another lab may use the same name.
    response = logged_in(charlie).post(
        reverse("registry:model_create"), entry_data(name="qwen-tiny")
    )
    assert response.status_code == 302
    assert ModelEntry.objects.filter(name="qwen-tiny").count() == 2


def test_parameter_count_may_be_left_blank(lab: Lab, alice: User) -> None:
    response = logged_in(alice).post(
        reverse("registry:model_create"), entry_data(parameter_count="")
    )

    assert response.status_code == 302
    assert ModelEntry.objects.get().parameter_count is None


# --- edit and delete -------------------------------------------------------------------------
def test_the_owner_edits_an_entry(entry: ModelEntry) -> None:
    url = reverse("registry:model_edit", args=[entry.pk])
    client = logged_in(entry.owner)
    assert 'value="qwen-tiny"' in client.get(url).content.decode()

    response = client.post(url, entry_data(name="qwen-tiny", source="zoo:tiny-qwen-bpe", notes="n"))

    assert response.status_code == 302
    entry.refresh_from_db()
    assert (entry.notes, entry.family) == ("n", "llama")


def test_a_labmate_cannot_edit_or_delete(entry: ModelEntry, bob: User) -> None:
    client = logged_in(bob)

    assert client.get(reverse("registry:model_edit", args=[entry.pk])).status_code == 403
    assert client.post(reverse("registry:model_delete", args=[entry.pk])).status_code == 403
    assert ModelEntry.objects.filter(pk=entry.pk).exists()


def test_an_outsider_gets_not_found(entry: ModelEntry, charlie: User) -> None:
    client = logged_in(charlie)

    assert client.get(reverse("registry:model_edit", args=[entry.pk])).status_code == 404
    assert client.post(reverse("registry:model_delete", args=[entry.pk])).status_code == 404


def test_delete_asks_then_deletes_on_post_with_csrf(entry: ModelEntry) -> None:
    client = logged_in(entry.owner, csrf=True)
    url = reverse("registry:model_delete", args=[entry.pk])
    page = client.get(url)
    assert page.status_code == 200
    assert ModelEntry.objects.filter(pk=entry.pk).exists()
    token = re.search(rb'name="csrfmiddlewaretoken" value="([^"]+)"', page.content)
    assert token

    assert client.post(url).status_code == 403  # no token
    response = client.post(url, {"csrfmiddlewaretoken": token.group(1).decode()})

    assert response.status_code == 302
    assert not ModelEntry.objects.filter(pk=entry.pk).exists()
